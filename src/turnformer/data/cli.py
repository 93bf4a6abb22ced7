"""``turnformer data ...``: list, count, convert and download the benchmarks.

`data_app` is a `typer.Typer` that the main command line mounts as ``turnformer data``. Every data
error ends the command with a one-line message on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from turnformer.data._io import OutputClosed, check_output_file, output_name
from turnformer.data.download import describe, download, verify
from turnformer.data.jsonl import FileConversations, write_jsonl
from turnformer.data.registry import DATASETS, dataset_dir, load_split, names_benchmark
from turnformer.data.stats import dataset_stats, file_split_name, files_stats, print_stats
from turnformer.data.table import CONVERSATION_FILES, write_table, writes_as_table
from turnformer.dialogue import DialogueError, said_together, spelling_clashes


class Output(Console):
    """Standard output's console: a reader that stops early (``| head``) ends the command as every writer to a closed
    pipe does here (`OutputClosed`: exit 141, quietly), where rich's own answer is exit code 1."""

    def on_broken_pipe(self) -> None:
        raise OutputClosed()


def write_line(text: str) -> None:
    """One line on standard output (a JSON record); a reader gone is `OutputClosed`."""
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        raise OutputClosed() from None


data_app = typer.Typer(
    name="data",
    help="Benchmark data: list, stats, convert to JSONL, download.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

DATA_DIR_HELP = "Folder holding the dataset folders (default: $TURNFORMER_DATA, else ~/.cache/turnformer/data)."
EXIT_DATA_ERROR = 2


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(EXIT_DATA_ERROR)


def _run(fn, *args, **kwargs):
    """Call `fn`; turn data errors (and file system errors) into a one-line message and exit code 2."""
    try:
        return fn(*args, **kwargs)
    except DialogueError as err:  # includes DataNotFoundError and DownloadError
        _fail(str(err))
    except OSError as err:
        _fail(f"{err.filename or ''}: {err.strerror or err}".lstrip(": "))


@data_app.command("list")
def list_cmd() -> None:
    """The benchmarks that can be loaded, with their splits and label kinds."""
    table = Table(title="datasets")
    for col in ("name", "title", "task", "primary label", "label kinds", "folder"):  # names and folders are typed: whole
        table.add_column(col, no_wrap=col in ("name", "folder"), overflow="fold")
    for info in DATASETS.values():
        table.add_row(info.name, info.title, info.task, info.primary_label, ", ".join(info.label_kinds), info.folder + "/")
    Output(markup=False, width=None if sys.stdout.isatty() else 200).print(table)  # piped: whole rows, not 80 columns


@data_app.command("stats")
def stats_cmd(
    names: list[str] = typer.Argument(..., help="Dataset name (turnformer data list; NAME:SPLIT for one split), or conversation files (.jsonl, or tables: .csv, .tsv), "
                                      "each counted as a split named after the file.", metavar="NAME|FILE..."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help=DATA_DIR_HELP),
) -> None:
    """Dialogues, utterances and label counts per split (a benchmark's should match the published counts)."""
    paths = []
    for name in names:  # a folder stands for its conversation files (CONVERSATION_FILES, in any letter case)
        folder = Path(name)
        if folder.is_dir() and not names_benchmark(name):
            found = sorted(str(p) for p in folder.iterdir() if p.is_file() and p.name.lower().endswith(CONVERSATION_FILES))
            if not found:
                _fail(f"{folder}: a folder with no conversation files ({', '.join(CONVERSATION_FILES)})")
            paths.extend(found)
        else:
            paths.append(name)
    one_name = len(names) == 1 and paths == names  # a benchmark or a file
    benchmarks = [n for n in paths if names_benchmark(n)]
    if not one_name and benchmarks:
        _fail(f"{benchmarks[0]}: a benchmark; stats takes one benchmark (NAME or NAME:SPLIT) or conversation files, not both "
              "or several benchmarks: one call each")
    stats = _run(dataset_stats, paths[0], data_dir) if one_name else _run(files_stats, paths)
    files = {} if benchmarks else {file_split_name(p): p for p in paths}
    for split, counts in stats["splits"].items():  # a header alone, or blank lines: counted, and said
        if not counts["dialogues"]:
            typer.echo(f"warning: {files.get(split, split)} holds no conversations", err=True)
        for spellings in spelling_clashes(counts.get("labels") or {}):  # what training refuses, said before it
            typer.echo(f"warning: {files.get(split, split)}: the {counts.get('label_kind')!r} labels "
                       f"{said_together([repr(label) for label in spellings])} differ only in capitals: counted apart "
                       "here, and refused by training (labels are compared as written); write them alike", err=True)
    if as_json:
        write_line(json.dumps(stats, ensure_ascii=False))
        return
    print_stats(stats, Output(markup=False))


@data_app.command("convert")
def convert_cmd(
    name: str = typer.Argument(..., help="Dataset name (turnformer data list), or a conversation file (.jsonl, .csv, .tsv).",
                                metavar="NAME|FILE"),
    split: Optional[str] = typer.Option(None, "--split", "-s", help="train, validation (dev/val) or test: the benchmark's "
                                        "split to write (a file is written whole)."),
    out: Path = typer.Option(..., "--out", "-o", help="Output file: .jsonl, or a table, .csv or .tsv (then .gz, compressed); "
                             "written atomically; - for standard output (JSONL)."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help=DATA_DIR_HELP),
) -> None:
    """Write one benchmark split, or a conversation file, as JSON Lines or as a table (docs/data-format.md)."""
    _run(check_output_file, out, "--out")  # before the split is read
    if Path(name).exists() and not names_benchmark(name):
        if split is not None:
            _fail(f"--split {split}: {name} is a file, written whole; --split names a benchmark's split")
        if str(out) != "-" and out.exists() and out.resolve() == Path(name).resolve():
            _fail(f"--out {out}: it is the file read; writing there would replace it: give another file")
        dialogues = FileConversations(name)  # read a conversation at a time as it is written: a file of any length
        n = _run(write_table if writes_as_table(out) else write_jsonl, dialogues, out)
        typer.echo(f"wrote {n} conversations of {name} to {output_name(out)}", err=True)  # its load report: logged as it was read
        if not n:  # a header alone, or blank lines: what was asked for is empty, not an error, but said
            typer.echo(f"warning: {name} holds no conversations: {output_name(out)} holds none either", err=True)
        return
    if split is None:
        _fail(f"{name}: a benchmark: give its split, --split train, validation or test")
    if str(out) != "-" and out.is_file() and (folder := _run(dataset_dir, name, data_dir)) \
            and out.resolve().is_relative_to(folder.resolve()):
        _fail(f"--out {out}: a file of the {name} dataset ({folder}), which the command reads; writing there would "
              "replace it: give a file outside the dataset's folder")
    ds = _run(load_split, name, split, data_dir)
    n = _run(write_table if writes_as_table(out) else write_jsonl, ds.items, out)
    typer.echo(f"wrote {n} {ds.name}/{ds.split} conversations to {output_name(out)}", err=True)  # stderr: --out - is stdout
    if ds.report:
        typer.echo(f"load report: {ds.report.summary()}", err=True)


@data_app.command("download")
def download_cmd(
    name: str = typer.Argument(..., help="Dataset name (turnformer data list)."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help=DATA_DIR_HELP),
    force: bool = typer.Option(False, "--force", help="Replace an existing copy that does not verify."),
) -> None:
    """Fetch a benchmark from its source repository at a pinned commit and verify its checksums."""
    if data_dir is not None and data_dir.exists() and not data_dir.is_dir():
        _fail(f"--data-dir {data_dir}: a file, not a folder")
    what, fetched = _run(describe, name), []

    def announce() -> None:  # a download begins (a copy already here that verifies is kept, not fetched)
        typer.echo(f"downloading {what}")
        fetched.append(name)

    folder = _run(download, name, data_dir, force=force, announce=announce)
    typer.echo(f"{name}: verified, in {folder}" if fetched else f"{name}: already here and verified, in {folder}")


@data_app.command("verify")
def verify_cmd(
    name: str = typer.Argument(..., help="Dataset name (turnformer data list)."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help=DATA_DIR_HELP),
) -> None:
    """Check an existing copy of a benchmark against the pinned checksums."""
    folder = _run(verify, name, data_dir)
    typer.echo(f"{name}: {folder} matches the pinned checksums")
