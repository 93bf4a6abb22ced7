"""The `turnformer` command: data, plots, backbones, the demo, train / evaluate / predict / generate for every task
of `turnformer.tasks.registry` (emotion recognition, dialogue acts, response selection, generation), and serve
(`turnformer.serve`: trained models over HTTP).

Errors in the user's input end the command with a one-line message naming the file, line or field,
and exit code 2; no traceback.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import signal
import sys
import time
import unicodedata
import warnings
from pathlib import Path
from typing import Iterator, Optional

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from turnformer.allocator import start_with_allocator_settings
from turnformer.backbones.cli import backbone_app
from turnformer.data._io import OutputClosed, PartialOutput, check_output_file as check_file, output_name, write_chunks
from turnformer.data import get_info, normalize_split
from turnformer.data.cli import Output, data_app, write_line
from turnformer.data.stats import dataset_stats, print_stats
from turnformer.data.table import writes_as_table
from turnformer.dialogue import Dialogue, DialogueError, is_blank, output_names, speaker_name
from turnformer.errors import CheckpointError
from turnformer.recipes import (DEFAULT_FILE_MODEL, RECIPES_DIR, SPLIT_FILE_KEYS, changed_files, file_digests, find_recipe, load_recipe,
                                recipe_for_dataset, recipe_path)
from turnformer.results import paper_score

# Commands import torch, transformers, the tasks and the models inside their bodies, only when they run (each such
# import says "torch: loaded only when the command runs"): `turnformer --help` and argument errors answer at once.

app = typer.Typer(help="Multi-turn, multi-party dialogue modelling with structure-aware Transformers.", no_args_is_help=True)
plot_app = typer.Typer(help="Figures: the attention masks of a conversation, and what a trained model attends to (DialogXL, dialogue acts).", no_args_is_help=True)
app.add_typer(data_app, name="data", help="Benchmark datasets: statistics, download, conversion.")
app.add_typer(backbone_app, name="backbone", help="Offline backbones: load and check against transformers.")
app.add_typer(plot_app, name="plot")
# markup=False: texts, labels, ids and paths from users are printed as written ("[laughs]" is no style tag)
console = Output(markup=False)
err = Console(stderr=True, soft_wrap=True, markup=False)  # paths in messages stay whole, to copy

# What a user's input can raise: each ends the command with its one-line message (KeyError: a field of a run or item).
USER_ERRORS = (DialogueError, ValueError, OSError, KeyError, CheckpointError)

DataDir = typer.Option(None, "--data-dir", help="Benchmark folder (default: $TURNFORMER_DATA, else ~/.cache/turnformer/data).")


class LogLines(logging.Handler):
    """The library's log records (epoch summaries, loss lines, warnings) as lines on stderr, written above a progress
    bar rather than through it; stderr is looked up at each line, so that a captured stderr gets them too."""

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm import tqdm  # tens of milliseconds: loaded at the first log line, not at start-up

        try:
            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # noqa: BLE001 - a log line must never end the command
            self.handleError(record)


class LogFormat(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        kind = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
        return f"{self.formatTime(record, '%H:%M:%S')} {kind}{record.getMessage()}"


def show_log(level: int) -> None:
    """Send the `turnformer` loggers' records at `level` and above to stderr (once, however often it is called)."""
    library = logging.getLogger("turnformer")
    library.setLevel(level)
    if not any(isinstance(h, LogLines) for h in library.handlers):
        handler = LogLines()
        handler.setFormatter(LogFormat())
        library.addHandler(handler)


def warning_line(message, category, filename, lineno, file=None, line=None) -> None:
    """A Python warning (the library's, or one it passes on) as one line on stderr, like the log's warnings: the
    message, without the file and source line that Python's default adds."""
    from tqdm import tqdm  # written between progress bars, as the log lines are

    tqdm.write(f"warning: {message}", file=sys.stderr)


@app.callback()
def options(
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Warnings and errors only: no epoch summaries or loss lines on stderr."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, envvar="TURNFORMER_THREADS", help="CPU threads for the "
                                          "model's arithmetic (default: the cores that other processes leave idle, "
                                          "from the load average, at least 1; OMP_NUM_THREADS, where set, is kept)."),
) -> None:
    show_log(logging.WARNING if quiet else logging.INFO)
    warnings.showwarning = warning_line
    if not asks_for_help(sys.argv[1:]):  # `turnformer train --help` answers without loading torch
        set_threads(threads)


def asks_for_help(argv: list[str]) -> bool:
    """Whether a command line asks for a command's help: click answers it after this callback, before the command."""
    return "--help" in (argv[: argv.index("--")] if "--" in argv else argv)


INTERRUPT_SAID = []  # a command that says what its interruption kept appends to it; `main` says it for the others


def say_interrupted(what: str) -> None:
    """``interrupted`` and `what` (what the command kept, how to go on) on stderr."""
    err.print(Text.assemble(("interrupted", "yellow"), what), highlight=False, soft_wrap=True)
    INTERRUPT_SAID.append(what)


def said(message: str) -> None:
    """A line about what a command did (``wrote N predictions to FILE``), on stderr; --quiet leaves it out."""
    if logging.getLogger("turnformer").isEnabledFor(logging.INFO):
        err.print(message, highlight=False, soft_wrap=True)


def default_threads() -> int:
    """The cores the machine's other work leaves idle (the last minute's load average), at least one: threads beyond
    the idle cores make every matrix product wait for the slowest of them."""
    cores = os.cpu_count() or 1
    try:
        busy = os.getloadavg()[0]
    except OSError:
        return cores
    return max(1, min(cores, round(cores - busy)))


def set_threads(threads: Optional[int]) -> None:
    """``--threads`` (or TURNFORMER_THREADS; at most the machine's cores), else OMP_NUM_THREADS when set, else
    `default_threads`. Torch is not loaded for it (this runs before click reads the command's arguments, so a usage
    error answers at once): the count goes to OMP_NUM_THREADS and MKL_NUM_THREADS, which torch reads when a command
    loads it; where torch is loaded already, to torch itself."""
    if threads is None and os.environ.get("OMP_NUM_THREADS"):
        return
    cores = os.cpu_count() or 1
    if threads is not None and threads > cores:  # more threads than cores only makes them wait for each other
        warnings.warn(f"--threads {threads}: this machine has {cores} cores; using {cores}")
        threads = cores
    threads = threads or default_threads()
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    else:
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)


def describe(error: Exception) -> str:
    """A user error as one line. A KeyError is a recipe's or run description's missing entry (str() would give only
    the quoted key)."""
    if isinstance(error, KeyError):
        return f"missing entry {error.args[0]!r} in the recipe or run description" if error.args else "missing entry"
    if isinstance(error, OSError) and error.strerror:  # said as a sentence, not "[Errno 28] ..."
        if error.filename is not None:
            return f"{error.filename}: {error.strerror}"
        return f"{'the output cannot be written: ' if error.errno in UNWRITABLE else ''}{error.strerror}"
    return str(error)


def fail(message: str, code: int = 2) -> None:
    err.print(Text.assemble(("error:", "red"), f" {message}"), highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def load_input(spec: str, data_dir: Optional[Path]) -> list[Dialogue]:
    """A conversation file (generic JSONL) or a benchmark split written ``NAME:SPLIT``."""
    from turnformer.tasks.common import load_conversations  # torch: loaded only when the command runs

    return load_conversations(spec, data_dir)


# beam search costs about `beam` times greedy decoding; dialogue replies rarely gain past a few
MAX_BEAM = 32


# what `train` writes in a run folder beside its checkpoints' folders
RUN_FILES = ("run.json", "result.json", "config.toml", "train.log")


def check_output_file(path: Optional[Path], option: str = "--out", source: Optional[str] = None,
                      checkpoint: Optional[Path] = None, json_lines: Optional[str] = None) -> None:
    """Fail before any work when an output file cannot be written, or is the file `source` (--input) that the command
    reads (writing it would replace the conversations with the command's output), or a file of the run `checkpoint`
    (its description, scores and log, or anything in one of its checkpoints: writing it would destroy the model), or,
    where the command writes `json_lines` (what it writes, named), a table's name (.csv, .tsv), which would hold JSON.
    Creates its folder."""
    if path is None:
        return
    if json_lines is not None and writes_as_table(path):
        raise DialogueError(f"{option} {path}: the {json_lines} are written as JSON Lines, one record a line; name the "
                            "file .jsonl (a .csv or .tsv name would hold JSON, not a table)")
    if source is not None and str(path) != "-" and Path(path).exists() and Path(source).exists() \
            and os.path.samefile(path, source):
        raise DialogueError(f"{option} {path}: it is the --input file; writing there would replace the conversations "
                            "it holds: give another file")
    if checkpoint is not None and str(path) != "-" and (held := run_file(Path(path), Path(checkpoint))):
        raise DialogueError(f"{option} {path}: {held} of the run {checkpoint}, which the command reads; writing there "
                            "would destroy the model: give a file outside it")
    check_file(path, option)


def run_file(path: Path, checkpoint: Path) -> Optional[str]:
    """What `path` is of the run that `checkpoint` (a run folder, or one of its checkpoints) belongs to: one of its
    `RUN_FILES`, or a file in one of its checkpoints' folders; None where it is neither (a new file beside them)."""
    folder = checkpoint.resolve()
    run = folder.parent if not (folder / "run.json").exists() and (folder.parent / "run.json").exists() else folder
    target = path.resolve()
    if not target.is_relative_to(run):
        return None
    if target == run:
        return "the folder"
    if target.parent != run:
        return f"a file in {target.parent.name}/"
    return f"the {target.name}" if target.name in RUN_FILES else None


def check_counts(options: dict[str, Optional[int]]) -> None:
    """Limits such as --limit-train are counts of dialogues: 1 or more when given."""
    for option, value in options.items():
        if value is not None and value < 1:
            raise DialogueError(f"{option} {value}: give a number of dialogues, 1 or more")


def pick_dialogue(dialogues: list[Dialogue], wanted: Optional[str], source: str) -> Dialogue:
    if not dialogues:
        raise DialogueError(f"{source}: no conversations")
    if wanted is None:
        return dialogues[0]
    names = output_names([d.id for d in dialogues])  # the names predict and generate give them: ids, else places
    if wanted in names:
        return dialogues[names.index(wanted)]
    if wanted.isascii() and wanted.isdigit() and int(wanted) < len(dialogues):
        return dialogues[int(wanted)]
    some = ", ".join(repr(name) for name in names[:5])
    raise DialogueError(f"{source}: no dialogue with id {wanted!r} (names look like {some}: an id, or where none, the "
                        f"place that predict names it by; an index 0..{len(dialogues) - 1} works too)")


def utterance_in(chosen, utterance: Optional[int], option: str) -> None:
    """Refuse an utterance index the chosen dialogue has not, naming the option it came from."""
    if utterance is not None and not 0 <= utterance < len(chosen):
        raise DialogueError(f"{option} {utterance} out of range: dialogue {chosen.id!r} has {len(chosen)} utterances (0..{len(chosen) - 1})")


@plot_app.command("masks")
def plot_masks_command(
    input: str = typer.Option(..., "--input", help="Conversation file (JSONL, or a CSV / tab-separated table) or benchmark split NAME:SPLIT (NAME alone: its test split)."),
    dialogue: Optional[str] = typer.Option(None, "--dialogue", help="Dialogue id (or index); default the first."),
    kinds: str = typer.Option("local,global,speaker,listener", "--kinds", help="Comma-separated masks, e.g. local,speaker|same_utterance."),
    window: int = typer.Option(2, "--window", min=0, help="Window of `local` when written without one."),
    level: str = typer.Option("tokens", "--level", help="Axes: tokens or utterances."),
    tokenizer: str = typer.Option("words", "--tokenizer", help="'words', or a backbone name for its WordPiece tokens."),
    query_utterance: Optional[int] = typer.Option(
        None, "--query-utterance", help="DialogXL's view: rows are this utterance's tokens, keys the utterances up to it, "
        "each kind a DialogXL head type as the model applies it (memory keys only; the own utterance visible to every head)."
    ),
    mem_len: Optional[int] = typer.Option(None, "--mem-len", min=0, help="DialogXL's view: memory length (default: all earlier tokens)."),
    start: int = typer.Option(0, "--start", min=0, help="First utterance shown (a part of a long conversation)."),
    length: Optional[int] = typer.Option(None, "--length", min=1, help="Utterances shown from --start (default: to the end)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Figure to write: PNG, or the format its extension names (.svg, .pdf, ...)."),
    as_json: bool = typer.Option(False, "--json", help="Print the masks as JSON."),
    data_dir: Optional[Path] = DataDir,
) -> None:
    """Draw (or print) the attention masks of one conversation (or of its utterances --start to --start + --length)."""
    from turnformer.plots import figure_path, mask_view, plot_masks  # torch: loaded only when the command runs

    if out is None and not as_json:
        fail("give --out FILE.png, --json, or both")
    if mem_len is not None and query_utterance is None:  # it was read past without a word
        fail("--mem-len is DialogXL's view of one utterance: give --query-utterance N with it")
    if query_utterance is not None and (start or length is not None):  # its keys are every utterance before it
        fail("--start and --length show a part of the conversation; --query-utterance shows the utterances up to it")
    try:
        out = figure_path(out) if out is not None else None
        check_output_file(out, source=input)
        chosen = pick_dialogue(load_input(input, data_dir), dialogue, input)
        utterance_in(chosen, query_utterance, "--query-utterance")
        utterance_in(chosen, start, "--start")
        chosen = dataclasses.replace(chosen, turns=chosen.turns[start : None if length is None else start + length])
        tok = None
        if tokenizer != "words" and level == "tokens":
            from turnformer.backbones import load_tokenizer  # transformers: loaded only when asked for

            tok = load_tokenizer(tokenizer)
        named = [k for k in kinds.split(",") if k.strip()]
        if not named:
            raise DialogueError(f"--kinds {kinds!r}: name at least one mask, e.g. local,speaker")
        view = mask_view(chosen, named, window=window, level=level, tokenizer=tok, query_utterance=query_utterance,
                         mem_len=mem_len, first=start)
    except USER_ERRORS as e:
        fail(describe(e))
    if out is not None:
        part = f", utterances {start}..{start + len(chosen) - 1}" if start or length is not None else ""
        said(f"wrote {plot_masks(view, out, title=f'dialogue {chosen.id or dialogue or 0}{part}')}")
    if as_json:
        write_line(json.dumps(view.to_json()))


@plot_app.command("attention")
def plot_attention_command(
    input: str = typer.Option(..., "--input", help="Conversation file (JSONL, or a CSV / tab-separated table) or benchmark split NAME:SPLIT (NAME alone: its test split)."),
    dialogue: Optional[str] = typer.Option(None, "--dialogue", help="Dialogue id (or index); default the first."),
    utterance: Optional[int] = typer.Option(None, "--utterance", help="Index of the utterance whose [CLS] query is shown; default the last."),
    checkpoint: Optional[Path] = typer.Option(None, "--checkpoint", help="Run folder of a trained DialogXL (uses best/)."),
    backbone: Optional[str] = typer.Option(None, "--backbone", help="Or an untrained DialogXL on this backbone (random classifier)."),
    heads: Optional[str] = typer.Option(None, "--heads", help="With --backbone: local,global,speaker,listener head counts "
                                        "(default 5,5,1,1)."),
    window: Optional[int] = typer.Option(None, "--window", min=0, help="With --backbone: the local heads' window (default 5)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Figure to write: PNG, or the format its extension names (.svg, .pdf, ...)."),
    as_json: bool = typer.Option(False, "--json", help="Print the attention weights as JSON."),
    data_dir: Optional[Path] = DataDir,
) -> None:
    """Which earlier tokens each DialogXL head type attends to from one utterance's [CLS] (last
    layer, mean over the heads of each type): the DialogXL paper's Figure 5."""
    from turnformer.models.dialogxl import DialogXL  # torch: loaded only when the command runs
    from turnformer.plots import figure_path, plot_attention
    from turnformer.tasks.common import run_task
    from turnformer.tasks.registry import get_model_builder, get_task

    if out is None and not as_json:
        fail("give --out FILE.png, --json, or both")
    if (checkpoint is None) == (backbone is None):
        fail("give either --checkpoint RUN_DIR or --backbone NAME")
    if checkpoint is not None and (heads is not None or window is not None):
        fail(f"{'--heads' if heads is not None else '--window'} is for --backbone: a trained run's heads and window are its own")
    heads, window = heads if heads is not None else "5,5,1,1", window if window is not None else 5
    try:
        out = figure_path(out) if out is not None else None
        check_output_file(out, source=input, checkpoint=checkpoint)
        chosen = pick_dialogue(load_input(input, data_dir), dialogue, input)
        utterance_in(chosen, utterance, "--utterance")
        if checkpoint is not None:
            _, model, tokenizer, run = load_trained(checkpoint)
            if not isinstance(model, DialogXL):
                raise DialogueError(f"--checkpoint {checkpoint}: a run of {run_task(run)} model {run['recipe'].get('model')!r}; "
                                    "attention plots need a DialogXL run (plot act-attention shows a dialogue-act model's)")
        else:
            counts = heads.split(",")
            if len(counts) != 4 or not all(c.strip().isdigit() for c in counts):
                raise DialogueError(f"--heads {heads!r}: give four counts, local,global,speaker,listener")
            config = {"heads": [int(c) for c in counts], "window": window}
            model, tokenizer = get_model_builder("erc", "dialogxl")(config, ["untrained"], backbone)
        view = get_task("erc").attention_view(model, tokenizer, chosen, len(chosen) - 1 if utterance is None else utterance)
    except USER_ERRORS as e:
        fail(describe(e))
    if out is not None:
        said(f"wrote {plot_attention(view, out)}")
    if as_json:
        write_line(json.dumps(view.to_json()))


@plot_app.command("act-attention")
def plot_act_attention_command(
    checkpoint: list[Path] = typer.Option(..., "--checkpoint", help="Run folder of a dialogue-act attention model (lc-attention, lstm-attention); repeat to compare side by side."),
    input: str = typer.Option(..., "--input", help="Conversation file (JSONL, or a CSV / tab-separated table) or benchmark split NAME:SPLIT (NAME alone: its test split)."),
    dialogue: Optional[str] = typer.Option(None, "--dialogue", help="Dialogue id (or index); default the first."),
    start: int = typer.Option(0, "--start", min=0, help="First utterance shown."),
    length: int = typer.Option(10, "--length", min=1, help="Utterances shown (one sub-dialogue)."),
    out: Path = typer.Option(..., "--out", help="Figure to write: PNG, or the format its extension names (.svg, .pdf, ...)."),
    data_dir: Optional[Path] = DataDir,
) -> None:
    """Attention between the utterances of one sub-dialogue, per model (the LC Attention paper's Figure 2)."""
    from turnformer.plots import figure_path, plot_utterance_attention  # torch: loaded only when the command runs
    from turnformer.tasks.common import shorten
    from turnformer.tasks.registry import get_task

    acts = get_task("dialogue-act")
    try:
        out = figure_path(out)
        check_output_file(out, source=input)
        chosen = pick_dialogue(load_input(input, data_dir), dialogue, input)
        loaded = []
        for path in checkpoint:
            task, model, tokenizer, run = load_trained(path)
            if task is not acts:
                raise DialogueError(f"--checkpoint {path}: a run for {task.name}; this plot needs a dialogue-act attention model")
            loaded.append((run["recipe"]["model"], path, model, tokenizer))
        # one sub-dialogue for every panel: the longest that each model reads (its positions) and the dialogue holds
        shown_length = min(acts.attention_length(model, chosen, start, length) for _, _, model, _ in loaded)
        ids = [model_id for model_id, *_ in loaded]
        panels = [(model_id if ids.count(model_id) == 1 else f"{model_id} ({path.name})",
                   acts.utterance_attention(model, tokenizer, chosen, start, shown_length))
                  for model_id, path, model, tokenizer in loaded]
    except USER_ERRORS as e:
        fail(describe(e))
    if shown_length < length:
        said(f"note: --length {length}: {shown_length} utterances shown, as many as the dialogue holds from {start} on "
             "and every model reads")
    shown = chosen.turns[start : start + shown_length]
    labels = [f"{start + i} {shorten(t.speaker, 12)}: {shorten(t.text, 28)}" for i, t in enumerate(shown)]
    plot_utterance_attention(panels, labels, out, title=f"dialogue {chosen.id}, utterances {start}..{start + len(shown) - 1}",
                             first=start)
    said(f"wrote {out}")


@app.command()
def demo(
    dataset: str = typer.Option("meld", help="Benchmark for the emotion-recognition demo."),
    out: Path = typer.Option(Path("out/demo"), help="Folder for the figures and the run."),
    model: str = typer.Option("dialogxl-memory-bias", help="The DialogXL recipe to fine-tune (default: the one that measured best)."),
    train_dialogues: Optional[int] = typer.Option(None, help="Fine-tune on the first N training dialogues (default all)."),
    eval_dialogues: Optional[int] = typer.Option(None, help="Score on the first N validation/test dialogues (default all)."),
    epochs: int = typer.Option(1, min=1, help="Fine-tuning epochs."),
    seed: int = typer.Option(1, min=0, max=2**32 - 1, help="Random seed (a whole number, 0 to 2**32 - 1)."),
    data_dir: Optional[Path] = DataDir,
) -> None:
    """Emotion recognition end to end: statistics, masks, a short fine-tune, its score, a conversation annotated.

    The dataset's statistics, DialogXL's masks on one conversation, a fine-tune bounded to a few minutes, its test
    score, and a conversation annotated one utterance at a time."""
    steps: list[str] = []  # the steps begun
    try:
        run_demo(dataset, out, model, train_dialogues, eval_dialogues, epochs, seed, data_dir, steps)
    except KeyboardInterrupt as interruption:  # Ctrl-C, or SIGTERM in the fine-tune: the demo has no --resume
        from turnformer.training import Terminated  # torch: loaded only when the command runs

        what = {"": "the demo stopped before its fine-tune; the demo run again starts over",
                "fine-tune": f"the demo's fine-tune in {out / 'run'} did not finish; the demo run again starts it over",
                "annotate": f"the demo stopped after its fine-tune, kept in {out / 'run'}"}[steps[-1] if steps else ""]
        say_interrupted(f": {what}")
        raise typer.Exit(143 if isinstance(interruption, Terminated) else 130) from None


def run_demo(dataset: str, out: Path, model: str, train_dialogues: int | None, eval_dialogues: int | None, epochs: int,
             seed: int, data_dir: Path | None, steps: list[str]) -> None:
    """`demo`'s steps, in order (see its help); `steps` gets "fine-tune" and "annotate" as they begin."""
    from turnformer.tasks.registry import get_task  # torch: loaded only when the command runs

    erc = get_task("erc")
    try:
        check_counts({"--train-dialogues": train_dialogues, "--eval-dialogues": eval_dialogues})
        check_run_folder(out)  # before the data is read: the figures and the run go there
        recipe = load_recipe(demo_recipe(erc.name, model, dataset), [f"train.epochs={epochs}"])
        print_stats(dataset_stats(dataset, data_dir), console)
        splits = erc.load_data(recipe, data_dir)
    except USER_ERRORS as e:
        fail(describe(e))
    sample = next((d for d in splits["test"] if 5 <= len(d) <= 8 and len(set(d.speakers)) >= 2), splits["test"][0])
    draw_head_masks(sample, recipe["model_config"], dataset, out)

    limits = {"train": train_dialogues} if train_dialogues is not None else {}
    if eval_dialogues is not None:
        limits.update(validation=eval_dialogues, test=eval_dialogues)
    dialogues = len(splits["train"]) if train_dialogues is None else min(train_dialogues, len(splits["train"]))
    settings = recipe["model_config"]
    console.print(
        f"\nFine-tuning {recipe['model']} ({recipe['backbone']}; heads {settings.get('heads')}, memory {settings.get('mem_len')} tokens"
        f"{', memory bias' if settings.get('memory_bias') is not None else ''}) on {dialogues} of {len(splits['train'])} {dataset} "
        f"training dialogues, {epochs} epoch(s), batches of {recipe['train'].get('batch_size')} conversations, each encoded "
        f"in one pass...")
    started = time.monotonic()
    steps.append("fine-tune")
    try:
        result = erc.train(recipe, out / "run", seed, data_dir, resume=False, limits=limits or None)
    except USER_ERRORS as e:
        fail(describe(e))
    record_result(out / "run", result)  # as a run trained by `train`: its scores beside its checkpoints
    steps.append("annotate")
    test = result.test_at_best or {}
    scope = "the full test set" if eval_dialogues is None else f"the first {eval_dialogues} test dialogues"
    console.print(
        f"test {test.get('primary', float('nan')):.2f} ({'weighted F1' if dataset != 'dailydialog' else 'micro F1 without neutral'}) "
        f"on {scope}, at best validation epoch {result.best_epoch}; accuracy {test.get('accuracy', float('nan')):.2f}; "
        f"{time.monotonic() - started:.0f} s for training, validation and test. "
        f"The paper's DialogXL (XLNet-base, full training): {paper_score(erc.name, dataset, model) or paper_score(erc.name, dataset, 'dialogxl')}; "
        f"this recipe's full runs: docs/results.md."
    )
    annotate(erc.session(*erc.load_trained(out / "run")), sample, recipe.get("label_kind", "emotion"))


def demo_recipe(task: str, model: str, dataset: str) -> Path:
    """The recipe the demo fine-tunes: a DialogXL one (the demo draws its head masks and annotates with its streaming
    session), named by `model` for `dataset`; any other is refused with the ones there are."""
    dialogxl = sorted(p.stem.removeprefix(f"{task}-{dataset}-") for p in RECIPES_DIR.glob(f"{task}-{dataset}-dialogxl*.toml"))
    if model not in dialogxl:
        get_info(dataset)  # an unknown dataset is said as such
        raise DialogueError(f"--model {model}: the demo fine-tunes a DialogXL recipe of {dataset}: "
                            f"{', '.join(dialogxl) or 'none'} (any recipe: turnformer train)")
    return find_recipe(task, model, dataset)


def draw_head_masks(sample: Dialogue, model_config: dict, dataset: str, out: Path) -> None:
    """DialogXL's four head types on one conversation, as the structure layer lays them out: each type's structure on
    the memory keys, the current utterance visible to every head."""
    from turnformer.plots import mask_view, plot_masks  # torch: loaded only when the command runs
    from turnformer.structure import dialogxl_layout

    layout = dialogxl_layout(*model_config["heads"], window=model_config["window"])
    kinds = [f"{mask.name}|{layout.always_visible.name}" for mask, _ in layout.groups]
    views = {
        "masks-utterances.png": mask_view(sample, kinds, level="utterances"),
        "masks-last-utterance.png": mask_view(sample, kinds, level="tokens", query_utterance=len(sample) - 1),
    }
    for name, view in views.items():
        path = plot_masks(view, out / name, title=f"{dataset} {sample.id}: DialogXL head masks")
        console.print(f"wrote {path}")


def annotate(session, sample: Dialogue, label_kind: str) -> None:
    """Label a conversation one utterance at a time with a streaming `session`; print each label beside the gold one."""
    console.print(f"\nConversation {sample.id}, annotated one utterance at a time (predicted / gold):")
    for turn in sample.turns:
        p = session.add(turn.speaker, turn.text)
        console.print(Text.assemble("  ", (turn.speaker, "bold"), f": {turn.text}  -> ", (p["label"], "cyan"),
                                    f" ({p['probabilities'][p['label']]:.2f}) / {turn.labels.get(label_kind)}"),
                      highlight=False)


def task_trainer(task: str, model: str):
    """The training function of a task, after checking that it knows the model."""
    from turnformer.tasks.registry import get_model_builder, get_task  # torch: loaded only when the command runs

    get_model_builder(task, model)
    return get_task(task).train


def load_trained(checkpoint: Path):
    """(task, model, tokenizer, run) of a run folder or checkpoint of any task."""
    from turnformer.tasks import registry  # torch: loaded only when the command runs

    return registry.load_trained(checkpoint)


@app.command()
def train(
    task: Optional[str] = typer.Option(None, help="Task: erc (emotions), dialogue-act, response-selection or generation "
                                       "(default: erc, or the --recipe's)."),
    model: Optional[str] = typer.Option(
        None, help="Default: the --recipe's; dialogxl for erc on a benchmark (the paper's model), dialogxl-memory-bias for erc on your own "
        "files (the DialogXL setting that measured best on the benchmarks); on your files, mdfn for response-selection and "
        "transformer for generation (their file recipes'); otherwise name the model. "
        "erc: dialogxl (and its variants dialogxl-memory-bias, dialogxl-memory-grad, dialogxl-no-speaker, dialogxl-speaker-emb, ...), concat-context, "
        "segment-recurrence. dialogue-act: lc-attention, lstm, lstm-blstm, lstm-attention, minilm-utterance, and over frozen "
        "all-mpnet-base-v2 sentence vectors lc-attention-frozen-mpnet, lstm-attention-frozen-mpnet, lstm-blstm-frozen-mpnet, "
        "frozen-mpnet-utterance. response-selection: mdfn, "
        "plain-encoder, mdfn-ua-only, mdfn-sa-only, mdfn-maxpool, mdfn-meanpool, mdfn-linear-fusion. generation: transformer, "
        "transformer-dra, dialogbert, dialogbert-dra, phaed (and phaed-no-speaker-tokens, phaed-no-turn-emb, phaed-no-turn-attn, "
        "phaed-no-recurrence), gpt2-scratch, smollm2, smollm2-phaed (SmolLM2-135M-Instruct fine-tuned)."
    ),
    dataset: Optional[str] = typer.Option(None, help="Benchmark name (default meld, or the --recipe's), or 'file' with --train-file/--validation-file/"
                                          "--test-file (which imply it). Generation on a benchmark without a recipe of its own "
                                          "uses the model's DailyDialog recipe."),
    recipe: Optional[str] = typer.Option(None, help="Recipe: a TOML file, or the name of one of turnformer's own (e.g. "
                                         "erc-meld-dialogxl; default: TASK-DATASET-MODEL)."),
    out: Path = typer.Option(..., help="Run folder: checkpoints (last/, best/), run.json, result.json."),
    seed: Optional[int] = typer.Option(None, min=0, max=2**32 - 1, help="Random seed (a whole number, 0 to 2**32 - 1; "
                                       "default 1, or the resumed run's)."),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run in --out from its last checkpoint "
                                "(alone: with the task, model, data, settings and seed its run.json records)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace the run --out holds (kept aside until the new run's "
                                   "first checkpoint, then deleted)."),
    time_budget: Optional[float] = typer.Option(None, help="Stop (checkpointed, resumable) after this many seconds."),
    limit_dialogues: Optional[int] = typer.Option(None, help="Use only the first N dialogues of each split (quick runs)."),
    limit_train: Optional[int] = typer.Option(None, help="Use only the first N training dialogues (a documented subset; validation and test stay whole)."),
    limit_eval: Optional[int] = typer.Option(None, help="Use only the first N validation and test dialogues (a documented subset)."),
    train_file: Optional[Path] = typer.Option(None, help="Training conversations (JSONL, or a CSV / tab-separated table of "
                                              "utterances; response selection: JSONL items or tab-separated lines); implies "
                                              "--dataset file."),
    validation_file: Optional[Path] = typer.Option(None, help="Validation file, as --train-file (its scores choose the best epoch)."),
    test_file: Optional[Path] = typer.Option(None, help="Test file, as --train-file (scored at the best validation epoch)."),
    set_: list[str] = typer.Option([], "--set", help="Override a recipe value: --set train.epochs=2."),
    data_dir: Optional[Path] = DataDir,
) -> None:
    """Fine-tune a model; the test score is taken at the best validation epoch."""
    from turnformer.training import RUN_ENTRIES  # torch: loaded only when the command runs

    files = {"train_file": train_file, "validation_file": validation_file, "test_file": test_file}
    given_files = [k for k, v in files.items() if v is not None]
    if given_files and dataset not in (None, "file"):
        fail(f"--{given_files[0].replace('_', '-')} is for your own data: drop --dataset {dataset}, or write --dataset file")
    if resume and overwrite:
        fail("--resume continues the run in --out, --overwrite replaces it: give one of them")
    warn_training_file_reused(files)
    if str(out) == "-" or out.name in ("", ".."):  # -, '', . or ..: no name (the run's set-aside folder is named after it)
        fail(f"--out {out}: a run is a folder of its own (its checkpoints, run.json, result.json); give a folder name")
    if time_budget is not None and not time_budget > 0:
        fail(f"--time-budget {time_budget}: give a number of seconds above 0")
    try:
        check_run_folder(out)
        check_set_keys(set_)
        if recipe is not None:
            task, model = recipe_identity(recipe, task, model)
    except DialogueError as e:
        fail(str(e))
    held, found = [name for name in RUN_ENTRIES if (out / name).exists()], checkpoint_written(out)
    if held and not (resume or overwrite):
        fail(f"{out} holds a run ({', '.join(held)}): --resume continues it, --overwrite replaces it (the old run is kept "
             f"until the new one's first checkpoint), or give another --out")
    if resume and not given_files and all(option is None for option in (task, model, dataset, recipe)) and held:
        if not (out / "run.json").exists():  # the defaults (MELD's DialogXL) would meet another model's checkpoint
            fail(f"{out / 'run.json'}: missing, so the run's options are not known: resume with them (--task, --model, "
                 "--dataset or the files, --set)")
        try:  # `train --out RUN --resume [--set ...]`: the run as it was started, not the defaults (MELD's DialogXL)
            task, model, loaded, recorded_limits, seed = recorded_training(out, seed, set_)
            # a --limit-* given changes its splits' limits; the others stay as recorded
            limits = {**recorded_limits, **training_limits(limit_dialogues, limit_train, limit_eval)}
            trainer = task_trainer(task, model)
        except USER_ERRORS as e:
            fail(describe(e))
        err.print(f"--resume: {out} as its run.json records it{' with --set' if set_ else ''}: --task {task} --model "
                  f"{model} on {loaded['dataset']}, seed {seed}{f', limits {limits}' if limits else ''}",
                  highlight=False, soft_wrap=True)
        run_training(trainer, loaded, out, seed, data_dir, resume, time_budget, limits, found)
        return
    try:
        seed = resumed_seed(out, seed) if resume else 1 if seed is None else seed
    except DialogueError as e:
        fail(str(e))
    task = task or "erc"
    dataset = dataset or ("file" if given_files else None if recipe is not None else "meld")
    model = model or (DEFAULT_FILE_MODEL.get(task) if dataset == "file" else None) or ("dialogxl" if task == "erc" else None)
    try:
        from turnformer.tasks.registry import MODELS  # torch: loaded only when the command runs

        if model is None and task in MODELS:  # (an unknown task is said by task_trainer)
            fail(f"--task {task} on {'your files' if dataset == 'file' else dataset}: name the model with --model "
                 f"({', '.join(MODELS[task])})")
        model = model or ""
        trainer = task_trainer(task, model)  # an unknown task or model fails here, before any data is read
        limits = training_limits(limit_dialogues, limit_train, limit_eval)
        loaded = training_recipe(task, model, dataset, recipe, files, set_)
    except USER_ERRORS as e:
        fail(describe(e))
    run_training(trainer, loaded, out, seed, data_dir, resume, time_budget, limits, found)


def warn_training_file_reused(files: dict[str, Optional[Path]]) -> None:
    """A --validation-file or --test-file that is the --train-file scores the model on what it trained on: allowed
    (a smoke test), but said, since its scores say nothing of conversations the model has not seen."""
    train = files.get("train_file")
    for key, why in (("validation_file", "the best epoch is chosen on conversations the model trains on"),
                     ("test_file", "its scores are of conversations the model trained on, not of new ones")):
        other = files.get(key)
        if train is not None and other is not None and same_file(train, other):
            err.print(f"warning: --{key.replace('_', '-')} {other} is the --train-file: {why}",
                      highlight=False, soft_wrap=True)


def same_file(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b)
    except OSError:  # one does not exist: said where it is read
        return False


def run_training(trainer, recipe: dict, out: Path, seed: int, data_dir: Optional[Path], resume: bool,
                 time_budget: Optional[float], limits: dict, found: int | None) -> None:
    """Train (or resume) the run in `out` and print its summary; a resumed run reading other data or settings than
    the one that wrote its checkpoint is warned about."""
    try:
        if resume and (out / "last").exists() and not (out / "last").is_dir():
            fail(f"{out / 'last'}: a file where the run's checkpoint folder should be; move it, then --resume again")
        checkpointed = any((out / name).is_dir() for name in ("last", ".last.old", "best"))  # .last.old: a save cut short
        if resume and checkpointed and (changed := changed_since_checkpoint(out, recipe, limits or None)):
            err.print(f"warning: --resume: this run reads other data or settings than the run that wrote {out / 'last'} "
                      f"({'; '.join(changed)}); its result mixes the two trainings", highlight=False)
        result = trainer(recipe, out, seed, data_dir, resume, time_budget, limits or None)
    except USER_ERRORS as e:
        fail(describe(e))
    except KeyboardInterrupt as interruption:  # Ctrl-C, or SIGTERM (the loop's Terminated): the loop saved last/
        interrupted(out, interruption, found)
    console.print_json(data=record_result(out, result))


def resumed_seed(out: Path, seed: Optional[int], run: dict | None = None) -> int:
    """The seed of a resumed run: the one its run.json (`run`, where already read) records (1 without one). Another
    given is refused: a resumed run goes on from its checkpoint's random state, and its run.json would name a seed it
    was not trained with."""
    try:
        recorded = (run if run is not None else json.loads((out / "run.json").read_text(encoding="utf-8"))).get("seed")
    except (OSError, ValueError, AttributeError):  # no run yet, or none this version reads: said where it matters
        recorded = None
    if seed is not None and recorded is not None and seed != recorded:
        raise DialogueError(f"--seed {seed}: the run in {out} was started with seed {recorded}, and a resumed run goes on "
                            "from its checkpoint's random state; leave --seed out, or start a new run (another --out)")
    return seed if seed is not None else recorded if isinstance(recorded, int) else 1


def recorded_training(out: Path, seed: Optional[int], overrides: list[str]) -> tuple[str, str, dict, dict, int]:
    """(task, model, recipe, limits, seed) of the run in `out` as its run.json records them, for `--resume` without the
    run's own options (the data files' digests computed anew, so that a file changed since is warned about), with the
    --set `overrides` applied and checked as a recipe file's are."""
    from turnformer.recipes import apply_overrides, check_recipe_keys, check_train_settings  # torch: loaded lazily
    from turnformer.tasks.common import run_task, upgrade_run
    from turnformer.tasks.registry import MODELS

    path = out / "run.json"
    try:
        run = json.loads(path.read_text(encoding="utf-8"))
        task = run_task(run)
        run = upgrade_run(run, MODELS.get(task, ()))
        recipe, limits = dict(run["recipe"]), run.get("limits") or {}
        model = recipe["model"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise DialogueError(f"{path}: not a run description this version reads ({type(e).__name__}: {e}); resume with "
                            "the run's own options (--task, --model, --dataset or the files, --set)") from None
    if overrides:  # (the papers' scores an older run.json's recipe holds are no recipe keys)
        recipe = apply_overrides({key: value for key, value in recipe.items() if not key.startswith("paper")}, overrides)
        check_recipe_keys(recipe, f"{path} with --set")
        check_train_settings(recipe["train"], f"{path} with --set")
    if recipe.get("dataset") == "file":
        recipe["file_sha256"] = file_digests(recipe)
    return task, model, recipe, limits, resumed_seed(out, seed, run)


def record_result(out: Path, result) -> dict:
    """Write a finished training's result.json into its run folder (the summary and every epoch's scores); return the
    summary, its scores as the epoch lines show them: perplexity as itself, rates in percent. A finished run resumed
    (nothing trained) keeps the result.json it finished with."""
    from turnformer.training import reported_score  # torch: loaded only by the commands that train

    if not result.trained:
        try:
            kept = json.loads((out / "result.json").read_text())
            return {key: value for key, value in kept.items() if key != "history"}
        except (OSError, ValueError, AttributeError):  # none yet (cut before it was written), or unreadable: written anew
            pass

    shown = {split: reported_score(metrics) if metrics else (None, None)
             for split, metrics in (("validation", result.best_validation), ("test", result.test_at_best))}
    summary = {
        "best_epoch": result.best_epoch, "metric": shown["validation"][0] or shown["test"][0],
        "validation_at_best": shown["validation"][1], "test_at_best": shown["test"][1], "train_seconds": result.train_seconds,
        "stopped_early": result.stopped_early, "stop_reason": result.stop_reason,
    }
    (out / "result.json").write_text(json.dumps({**summary, "history": result.history}, indent=2, default=str) + "\n")
    return summary


def check_run_folder(out: Path) -> None:
    """Fail, naming --out, before any work where the run folder cannot be made: a file in its place or in place of a
    folder above it, or a nearest existing folder that cannot be written. Creates nothing (a refused run leaves no
    folder behind)."""
    if out.exists() and not out.is_dir():
        raise DialogueError(f"--out {out}: a file; give a folder for the run (checkpoints, run.json, result.json)")
    existing = next(folder for folder in (out, *out.parents) if folder.exists())
    if not existing.is_dir():
        raise DialogueError(f"--out {out}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise DialogueError(f"--out {out}: cannot be written: {existing} is not writable")


def training_limits(limit_dialogues: Optional[int], limit_train: Optional[int], limit_eval: Optional[int]) -> dict[str, int]:
    """How many dialogues each split keeps: --limit-dialogues for all three, --limit-train and --limit-eval for theirs
    (the smaller where two apply)."""
    check_counts({"--limit-dialogues": limit_dialogues, "--limit-train": limit_train, "--limit-eval": limit_eval})
    limits = {split: limit_dialogues for split in ("train", "validation", "test")} if limit_dialogues else {}
    if limit_train:
        limits["train"] = min(limit_train, limits.get("train", limit_train))
    for split in ("validation", "test") if limit_eval else ():
        limits[split] = min(limit_eval, limits.get(split, limit_eval))
    return limits


# a recipe's keys that the command's own options set, not --set
RECIPE_OPTIONS = {"task": "--task", "model": "--model", "dataset": "--dataset", "train_file": "--train-file",
                  "validation_file": "--validation-file", "test_file": "--test-file"}
QUOTES = "\"'"  # around a --set text value (TOML)


def check_set_keys(overrides: list[str]) -> None:
    """Refuse a --set of what an option of `train` sets (the task, the model, the dataset, the files): the trainer, the
    recipe and the run's description would disagree (a --set train_file on a benchmark was recorded, never read)."""
    for override in overrides:
        key, _, value = override.partition("=")
        if (option := RECIPE_OPTIONS.get(key.strip())) is not None:
            raise DialogueError(f"--set {override}: the {key.strip()} is {option}'s to set; give {option} "
                                f"{value.strip().strip(QUOTES) or '...'}")


def recipe_identity(recipe: str, task: Optional[str], model: Optional[str]) -> tuple[str, str]:
    """The task and model of the --recipe file; a --task or --model that names others is refused."""
    from turnformer.recipes import load_recipe  # torch: loaded only when the command runs

    loaded = load_recipe(recipe)
    for key, option, given in (("task", "--task", task), ("model", "--model", model)):
        if given is not None and given != loaded[key]:
            raise DialogueError(f"{option} {given}: the recipe {recipe} trains {key} {loaded[key]!r}; leave {option} out, "
                                "or give a recipe of that " + key)
    return loaded["task"], loaded["model"]


def training_recipe(task: str, model: str, dataset: Optional[str], recipe: Optional[str], files: dict[str, Optional[Path]],
                    overrides: list[str]) -> dict:
    """The recipe a training reads: --recipe (on --dataset where given), else the task's recipe for the model and
    dataset (retargeted: a generation benchmark without a recipe of its own runs the model's DailyDialog recipe on
    itself), with the user's files and the --set overrides."""
    path, retarget = ((recipe_path(recipe), dataset if dataset not in (None, "file") else None) if recipe is not None
                      else recipe_for_dataset(task, model, dataset))
    if dataset == "file" and recipe is None and not path.name.startswith(f"{task}-file-"):
        err.print(f"no recipe {task}-file-{model}.toml: training on your files with the settings of {path.name}",
                  highlight=False, soft_wrap=True)
    # absolute, so that `evaluate` finds the files from any folder (a JSON string is a TOML basic string)
    overrides = list(overrides) + [f"{k}={json.dumps(str(v.resolve()))}" for k, v in files.items() if v is not None]
    if dataset == "file":
        overrides.insert(0, 'dataset="file"')
    elif retarget is not None:
        overrides.insert(0, f'dataset="{retarget}"')
        if recipe is None:
            err.print(f"no recipe {task}-{retarget}-{model}.toml: using {path.name} with dataset = {retarget!r} "
                      "(its settings)", highlight=False, soft_wrap=True)
    from turnformer.backbones.loading import local_backbone_folder  # torch: loaded only when the command runs
    from turnformer.tasks.common import model_id_settings

    loaded = model_id_settings(load_recipe(path, overrides), f"{path.name}{' with --set' if overrides else ''}")
    if isinstance(loaded.get("backbone"), str) and (folder := local_backbone_folder(loaded["backbone"])):
        loaded["backbone"] = str(folder)  # absolute, as the files: the run is evaluated and served from any folder
    if loaded["dataset"] == "file":  # what the files held when the run read them (checked on resume and by evaluate)
        for key in SPLIT_FILE_KEYS:  # a recipe's own paths, read from this folder, recorded absolute as --train-file's
            if loaded.get(key):
                loaded[key] = str(Path(loaded[key]).resolve())
        loaded["file_sha256"] = file_digests(loaded)
    return loaded


def checkpoint_written(out: Path) -> int | None:
    """When `out`'s last/ was written (its trainer state's modification time, ns); None without one."""
    try:
        return (out / "last" / "trainer_state.json").stat().st_mtime_ns
    except OSError:
        return None


def interrupted(out: Path, interruption: KeyboardInterrupt, found: int | None) -> None:
    """Say what an interrupted training saved and how to continue it (`found`: `checkpoint_written` when the command
    began); exit 130 (Ctrl-C) or 143 (SIGTERM), the shells' codes for those signals."""
    from turnformer.training import Terminated  # torch: loaded only when the command runs

    terminated = isinstance(interruption, Terminated)
    state = out / "last" / "trainer_state.json"
    try:
        step = json.loads(state.read_text())["global_step"]
        if checkpoint_written(out) != found:
            saved = f"saved {out / 'last'} at step {step}; the same command with --resume continues it from there"
        else:  # the checkpoint the command found (--resume), or the run --overwrite was to replace
            saved = f"no checkpoint was written: {out / 'last'} is as it was, at step {step}"
    except (OSError, ValueError, KeyError):
        saved = ("no checkpoint was written (no update had finished, or a second interruption stopped the save): the "
                 "same command starts it again")
    say_interrupted(f" ({'SIGTERM' if terminated else 'Ctrl-C'}): {saved}")
    raise typer.Exit(143 if terminated else 130)


def changed_since_checkpoint(out: Path, recipe: dict, limits: dict | None) -> list[str]:
    """What a resumed run reads differently from the run that wrote its checkpoint (its run.json): the dataset, the
    data files, the limits, the windowing... The model config is checked on loading, the training settings by the
    training loop; the recipe file's own path may move."""
    try:
        before = json.loads((out / "run.json").read_text())
    except (OSError, ValueError):
        return []
    saved, now = before.get("recipe") or {}, json.loads(json.dumps(recipe, default=str))
    # the papers' scores (paper, paper_online...) that an older run.json holds in its recipe change nothing a run reads
    keys = ({key for key in set(saved) | set(now) if not key.startswith("paper")}
            - {"train", "model_config", "recipe_path", "file_sha256"})  # the files' contents: changed_files
    digests, current = saved.get("file_sha256") or {}, now.get("file_sha256") or {}
    keys -= {key for key in SPLIT_FILE_KEYS if digests.get(key) and digests.get(key) == current.get(key)}  # moved, the same
    changes = [f"{key}: {saved.get(key)!r} -> {now.get(key)!r}" for key in sorted(keys) if saved.get(key) != now.get(key)]
    changes += changed_files(saved, now)
    if (before.get("limits") or None) != limits:
        changes.append(f"limits: {before.get('limits')!r} -> {limits!r}")
    return changes


@app.command()
def evaluate(
    checkpoint: Path = typer.Option(..., help="Run folder (uses best/) or a checkpoint folder."),
    split: Optional[str] = typer.Option(None, help="train, validation (or dev) or test (default: test)."),
    input_file: Optional[Path] = typer.Option(None, "--input", help="Score this file instead of a split of the recipe's "
                                              "dataset: generic JSONL, its turns labelled (generation: any conversations, "
                                              "every turn after the first scored as a reply; response selection: items "
                                              "with their answer, also tab-separated)."),
    confusion: Optional[Path] = typer.Option(None, help="Write a confusion-matrix figure here (PNG, or .svg, .pdf, ...)."),
    limit_dialogues: Optional[int] = typer.Option(None, help="Score only the first N conversations of the split "
                                                  "(items, for response selection)."),
    beam: int = typer.Option(1, "--beam", min=1, max=MAX_BEAM, help="Generation: beam size of the scored responses (1 = greedy)."),
    data_dir: Optional[Path] = DataDir,
) -> None:
    """Score a trained model on a split of its recipe's dataset, or on a file of your own (--input)."""
    from turnformer.plots import figure_path  # torch: loaded only when the command runs

    try:
        check_counts({"--limit-dialogues": limit_dialogues})
        confusion = figure_path(confusion) if confusion is not None else None
        if input_file is not None and split is not None:
            raise DialogueError("--input and --split: give one or the other (--input is scored as a whole)")
        if split is not None:  # before the model loads; dev, val and valid mean validation, as for NAME:SPLIT
            split = normalize_split(split)
        task, model, tokenizer, run = load_trained(checkpoint)
        if input_file is None and (changed := [c for c in changed_files(run["recipe"], run["recipe"])
                                               if c.startswith(f"{split or 'test'}_file ")]):
            err.print(f"warning: {changed[0]}: the scores are of the file as it is now, not as the run read it",
                      highlight=False, soft_wrap=True)
        options = task_options(task, checkpoint, {"beam": (beam, beam > 1), "confusion": (confusion, confusion is not None)})
        metrics = task.evaluate(model, tokenizer, run, split or "test", data_dir, limit_dialogues, input_file, **options)
    except USER_ERRORS as e:
        fail(describe(e))
    console.print_json(data=metrics)
    if confusion is not None:
        said(f"wrote the confusion matrix to {confusion}")


def task_options(task, checkpoint: Path, given: dict[str, tuple]) -> dict:
    """The task-specific options of a command, ``{name: (value, whether the user gave it)}``, that `task` takes; one
    given for a task that does not take it is refused, naming the tasks that do."""
    from turnformer.tasks.registry import tasks_taking  # torch: loaded only when the command runs

    for option, (_, used) in given.items():
        if used and option not in task.options:
            takers = " or ".join(t.title for t in tasks_taking(option))
            streaming = f" (streaming: {task.session_class.__name__})" if option == "online" and task.labelled else ""
            raise DialogueError(f"--{option} is for {takers} models; {checkpoint} is a model for {task.name}{streaming}")
    return {option: value for option, (value, _) in given.items() if option in task.options}


@app.command()
def predict(
    checkpoint: Path = typer.Option(..., help="Run folder (uses best/) or a checkpoint folder."),
    input: str = typer.Option(..., "--input", help="Conversation file (JSONL, or a CSV / tab-separated table) or benchmark split NAME:SPLIT (NAME alone: its test split)."),
    out: Optional[Path] = typer.Option(None, help="Write JSONL here (one line per utterance; - for standard output); default a table."),
    online: Optional[bool] = typer.Option(None, "--online/--offline", help="Dialogue acts: predict each utterance from the preceding ones only, or from its sub-dialogue (default: as the model was trained)."),
    task_: Optional[str] = typer.Option(None, "--task", help="Check that the checkpoint is of this task (erc, dialogue-act, response-selection)."),
    submission: Optional[Path] = typer.Option(None, help="Response selection: also write MuTual's submission file (id, then candidates best first)."),
    data_dir: Optional[Path] = DataDir,
) -> None:
    """Label every utterance of every conversation in a file, or rank every item's candidate replies.

    A conversation model labels every utterance, with probabilities; a response-selection model scores and ranks the
    candidates of every item (a TSV file, a JSONL file with meta.candidates, or NAME:SPLIT)."""
    from turnformer.tasks.registry import TASKS  # torch: loaded only when the command runs

    try:
        check_output_file(out, source=input, checkpoint=checkpoint, json_lines="predictions")
        check_output_file(submission, "--submission", source=input, checkpoint=checkpoint)
        if submission is not None and out is not None and (
                str(out) == str(submission) == "-" or str(out) != "-" and submission.resolve() == out.resolve()):
            raise DialogueError(f"--submission {submission} and --out {out} are the same file: the rankings would "
                                "replace the submission (or mix with it); give two files")
        task, model, tokenizer, run = load_trained(checkpoint)
        if task_ is not None and task_ not in TASKS:
            raise DialogueError(f"--task {task_}: unknown task; known: {', '.join(TASKS)}")
        if task_ is not None and task_ != task.name:
            raise DialogueError(f"--task {task_}: {checkpoint} is a model for {task.name}")
        if task.command != "predict":
            raise DialogueError(f"{checkpoint} is a {task.name} model: use `turnformer {task.command}`")
        given = {"submission": (submission, submission is not None), "online": (online, online is not None)}
        options = task_options(task, checkpoint, given)
        predictions = task.predict(model, tokenizer, run, input, data_dir, **options)
        key = work_key("predict", checkpoint, input, data_dir, **options)
    except USER_ERRORS as e:
        fail(describe(e))
    show(predictions, out, key)


def show(predictions, out: Optional[Path], key: dict) -> None:
    """A model's `Predictions`, made a block of the input at a time: JSONL rows written to `out` as they are made (the
    file appears whole after the last block; an error leaves it as it was; an interrupt keeps the blocks made, to go
    on from: `write_going_on`), or a table per block; then the notes on stderr. An error while the predictions are
    made fails as the command's own errors do."""
    count = 0

    def blocks() -> Iterator[tuple[bytes, int]]:
        nonlocal count
        for rows, _ in predictions.blocks:
            count += len(rows)
            yield "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8"), len(rows)

    try:
        if out is not None and predictions.source is not None and PartialOutput.usable(out):
            kept = write_going_on(predictions, out, key, blocks())  # (then added: the call counts the rows it makes)
            count += kept
        elif out is not None:
            write_chunks(out, (data for data, _ in blocks()))
        else:
            for _, cells in predictions.blocks:
                if predictions.table:
                    table = Table(*predictions.columns)
                    for line in cells:
                        table.add_row(*(visible(c) for c in line))
                    console.print(table)
    except USER_ERRORS as e:  # a write that fails after the work (a full disk) too
        fail(describe(e))
    for note in predictions.notes:
        err.print(note)
    for line in predictions.written:
        said(line)
    if out is not None:
        said(f"wrote {count} {predictions.noun} to {output_name(out)}")


def write_going_on(predictions, out: Path, key: dict, blocks: Iterator[tuple[bytes, int]]) -> int:
    """Write `blocks` ((JSONL bytes, rows) of `predictions`, one a block) to `out` through ``OUT.partial``
    (`PartialOutput`): where an interrupted run of the same command (`key`: what the blocks depend on) left blocks
    there, go on after them. Ctrl-C, SIGTERM or a killed process keeps the blocks finished, and says so. Returns the
    rows the interrupted run had made."""
    from turnformer.training.signals import Terminated, raise_terminated, signal_handlers  # torch: loaded when it runs

    partial = PartialOutput(out, {**key, "block_utterances": predictions.source.block_utterances})

    def done() -> str:  # "2568 replies (blocks 1-2 of 7)"
        span = f"blocks 1-{partial.blocks}" if partial.blocks > 1 else "block 1"
        return f"{partial.rows} {predictions.noun} ({span} of {predictions.source.count})"

    kept = 0
    if (saved := partial.kept()) is not None:
        predictions.resume(partial.blocks, saved, partial.kept_rows)
        kept = partial.rows
        said(f"going on from {partial.partial}: its {done()} were made by an interrupted run of this command")
    elif partial.partial.exists():
        said(f"{partial.partial}: damaged, or left by an interrupted run with another model, input or options (or before "
             "its first block was done); starting anew")
    try:
        with signal_handlers({signal.SIGTERM: raise_terminated}):
            partial.write(blocks, predictions.saved)
    except KeyboardInterrupt as interruption:
        terminated = isinstance(interruption, Terminated)
        left = (f"{done()} are kept in {partial.partial}: the same command goes on from there" if partial.blocks
                else "no block was finished: the same command starts again")
        say_interrupted(f" ({'SIGTERM' if terminated else 'Ctrl-C'}): {left}")
        raise typer.Exit(143 if terminated else 130)
    return kept


def work_key(command: str, checkpoint: Path, source: str, data_dir=None, **options) -> dict:
    """What the output of `command` (predict, generate) depends on, for an interrupted output to go on from: the model's
    files and the input's (each by path, size and modification time; a benchmark split by its name and the data folder
    it is read from), the options."""
    from turnformer.data.locate import resolve_data_dir  # with the tasks, below
    from turnformer.tasks.common import checkpoint_paths  # torch: loaded only when the command runs

    def files(path: Path) -> list:
        found = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        return [[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns] for p in found]

    return {"command": command, "checkpoint": files(checkpoint_paths(checkpoint)[0]),
            "input": files(Path(source)) if Path(source).exists() else [source, str(resolve_data_dir(data_dir).resolve())],
            "options": {name: None if value is None else str(value) for name, value in options.items()}}


def visible(cell: str) -> str:
    """A table cell with its control characters (an escape sequence in an utterance would recolour or move the
    terminal's cursor) shown as escapes, e.g. ``\\x1b``; the JSONL output keeps the text as it is."""
    return "".join(f"\\x{ord(c):02x}" if unicodedata.category(c) == "Cc" else c for c in cell)


@app.command()
def generate(
    checkpoint: Path = typer.Option(..., help="Run folder of a generation model (uses best/) or a checkpoint folder."),
    input: Optional[str] = typer.Option(None, "--input", help="Conversations to continue (JSONL, a table, or NAME:SPLIT); "
                                        "without it, an interactive chat on the terminal."),
    out: Optional[Path] = typer.Option(None, help="Write JSONL here (id, speaker, response; - for standard output); default a table."),
    speaker: Optional[str] = typer.Option(None, help="Who replies (default: the speaker before the last one)."),
    beam: int = typer.Option(1, "--beam", min=1, max=MAX_BEAM, help="Beam size (1 = greedy decoding)."),
    data_dir: Optional[Path] = DataDir,
) -> None:
    """Continue every conversation of a file with one generated reply (greedy, or --beam N), or chat."""
    from turnformer.tasks.registry import read_run  # torch: loaded only when the command runs

    try:
        check_output_file(out, source=input, checkpoint=checkpoint, json_lines="replies")
        if speaker is not None and is_blank(speaker):  # spaces alone, or invisible characters (a zero-width space)
            raise DialogueError(f"--speaker {speaker!r}: empty; give a name, or leave it out for the speaker before the last one")
        speaker = speaker_name(speaker) if speaker is not None else None  # as the turns' speakers are compared
        if input is None and out is not None:
            raise DialogueError(f"--out {out}: the replies to --input's conversations are written there; without --input, "
                                "generate chats on the terminal")
        if input is None and speaker == CHAT_USER:
            raise DialogueError(f"--speaker {speaker}: the chat's user is {CHAT_USER!r}; give the model another name")
        task, _ = read_run(checkpoint)
        if task.command != "generate":
            raise DialogueError(f"{checkpoint} is a model for {task.name}, not a generation model")
        model, vocab, run = task.load_trained(checkpoint)
        if input is None:  # built here, where what the model cannot do (beam search) is one line
            bot = task.session(model, vocab, run, beam=beam)
        else:
            replies = task.predict(model, vocab, run, input, data_dir, speaker=speaker, beam=beam)
            key = work_key("generate", checkpoint, input, data_dir, speaker=speaker, beam=beam)
    except USER_ERRORS as e:
        fail(describe(e))
    if input is None:
        return chat(bot, speaker or "bot")
    show(replies, out, key)


CHAT_USER = "user"  # the speaker of the lines typed in `chat`


def chat(bot, name: str = "bot") -> None:
    """Interactive: each line typed is the user's turn, the model answers as `name`; an empty line or end of input
    stops. A line the model cannot take (not valid text, no word in it) gets an error and is left out of the
    conversation; a line longer than the model reads is said (the older turns it leaves out are not: a chat grows)."""
    turns: list[tuple[str, str]] = []
    if hasattr(sys.stdin, "reconfigure"):  # bytes that are not text reach the check below, which names them
        sys.stdin.reconfigure(errors="surrogateescape")
    err.print("Type a line and press Enter; Enter alone ends the chat.")
    while True:
        try:
            line = input("you> ")
        except EOFError:
            break
        except UnicodeDecodeError as e:  # input in another encoding than the terminal's, where stdin cannot pass it on
            fail(f"standard input is not valid text ({e.reason})")
        if not line:  # Enter alone
            break
        line = line.strip()
        if is_blank(line):  # spaces, or invisible characters alone: a slip, not the end (it ended the chat, unsaid)
            err.print(Text.assemble(("error:", "red"), " that line has no visible text; type another line (Enter alone "
                                    "ends the chat)"), highlight=False, soft_wrap=True)
            continue
        if undecoded := [c for c in line if "\udc80" <= c <= "\udcff"]:  # bytes stdin could not decode (surrogateescape)
            err.print(Text.assemble(("error:", "red"), f" that line is not valid Unicode: byte 0x{ord(undecoded[0]) - 0xdc00:02x} is "
                                    "not UTF-8 (set the terminal to UTF-8); type another line"), highlight=False, soft_wrap=True)
            continue
        try:
            reply = bot.respond([*turns, (CHAT_USER, line)], speaker=name)
        except (DialogueError, ValueError) as e:  # a line the model cannot take: said, and the chat goes on without it
            err.print(Text.assemble(("error:", "red"), f" {describe(e)}; type another line"), highlight=False, soft_wrap=True)
            continue
        if unread := bot.unread([(CHAT_USER, line)], name):  # the line alone: older turns left out are the chat's way
            err.print(f"note: that line is longer than the model reads ({unread})", highlight=False, soft_wrap=True)
        turns += [(CHAT_USER, line), (name, reply or "...")]
        console.print(f"{name}> {reply}" if reply else f"{name}> (nothing: the model ended its reply at once)", highlight=False)


@app.command()
def serve(
    checkpoint: list[str] = typer.Option(..., "--checkpoint", help="Run folder (uses best/) or checkpoint folder of a "
                                         "trained model of any task; NAME=DIR names it in requests (default: the "
                                         "folder's name). Repeat for several: an emotion and a dialogue-act model "
                                         "annotate one conversation together."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on: 127.0.0.1 answers this machine only; any other "
                             "wants TURNFORMER_TOKEN set."),
    port: int = typer.Option(8000, min=1, max=65535, help="Port to listen on (taken before the models load: one in "
                             "use fails at once)."),
    max_sessions: Optional[int] = typer.Option(None, min=1, help="Live conversations at most; the least recently used "
                                               "is evicted to make room for a new one (default: 1000, or as many as "
                                               "fit in half of this machine's memory where fewer do)."),
    max_session_turns: int = typer.Option(1000, min=1, help="Utterances one live conversation takes; the next is a 409 "
                                          "saying to start a new one."),
    idle_timeout: float = typer.Option(1800.0, min=1.0, help="Seconds after which a conversation no request used expires."),
    max_turns: int = typer.Option(200, min=1, help="Turns of a conversation sent in one request."),
    max_text: int = typer.Option(2000, min=1, help="Characters of one utterance."),
    max_body: int = typer.Option(1 << 20, min=1, help="Bytes of one request's body."),
    max_beam: int = typer.Option(8, min=1, max=MAX_BEAM, help="Beam size of one reply (/v1/generate): a beam of N costs "
                                 "about N greedy replies."),
    body_timeout: float = typer.Option(30.0, min=0.1, help="Seconds in which a request's body must arrive whole (a "
                                       "client that stops sending half-way gets a 408 and its connection closed)."),
    max_waiting: int = typer.Option(16, min=1, help="Calls that may wait for one model; another gets a 503 with "
                                    "Retry-After (an utterance streamed to a session always waits its turn)."),
    worker: Optional[str] = typer.Option(None, help="This process's name, put at the start of its session ids, for a "
                                         "router in front of several processes (README: several workers)."),
    allowed_host: list[str] = typer.Option([], "--allowed-host", help="A name requests may be sent to (their Host "
                                           "header), beside localhost, 127.0.0.1 and ::1, where the server listens on "
                                           "one of those; '*' takes any. Repeat for several."),
) -> None:
    """Serve trained models over HTTP, with a web page (TURNFORMER_TOKEN: the bearer token it asks for).

    Conversations annotated one utterance at a time, whole conversations labelled, replies ranked or generated."""
    # FastAPI, uvicorn and torch: loaded only when the command runs (start-up cost: `turnformer --help` stays fast)
    from turnformer.serve.app import LOOPBACK_NAMES, checked_token, create_app
    from turnformer.serve.models import NAME, load_models, session_memory, sessions_that_fit
    from turnformer.serve.schemas import Limits
    from turnformer.serve.server import listen, run

    token = os.environ.get("TURNFORMER_TOKEN")  # set but empty (TURNFORMER_TOKEN=$UNSET) is refused, not no token
    try:
        if worker is not None and not NAME.fullmatch(worker):
            raise DialogueError(f"--worker {worker!r}: use letters, digits, '_', '.' and '-' (at most 64)")
        if token is not None:
            checked_token(token)
        limits = Limits(max_body_bytes=max_body, max_text_chars=max_text, max_turns=max_turns,
                        max_sessions=max_sessions or Limits.max_sessions, max_session_turns=max_session_turns,
                        idle_seconds=idle_timeout, body_seconds=body_timeout, max_beam=max_beam, max_waiting=max_waiting)
        sock = listen(host, port)  # before the models load: a port in use fails at once
        models = load_models(checkpoint)
    except USER_ERRORS as e:
        fail(describe(e))
    if host not in LOOPBACK_NAMES and token is None:
        err.print(f"warning: listening on {host} without TURNFORMER_TOKEN: whoever reaches this address can use the models",
                  highlight=False, soft_wrap=True)
    for m in models.values():
        said(f"{m.name}: {m.task.name} model {m.run['recipe']['model']} from {m.checkpoint} ({', '.join(sorted(m.serves))})")
    if max_sessions is None and (fit := sessions_that_fit(models, limits)) is not None and fit < limits.max_sessions:
        limits = dataclasses.replace(limits, max_sessions=fit)  # the default is one this machine holds
        said(f"--max-sessions {fit}: as many live conversations as fit in half of this machine's memory")
    held, warning = session_memory(models, limits)
    if held:
        said(held)
    if warning:
        err.print(f"warning: {warning}", highlight=False, soft_wrap=True)
    address = f"[{host}]" if ":" in host else host  # an IPv6 address is bracketed in a URL
    said(f"the page: http://{address}:{port}/   the API: http://{address}:{port}/docs")
    # on this machine's own address, only requests sent to its own names (or --allowed-host): a page whose name an
    # attacker points at 127.0.0.1 cannot call the server from a browser (DNS rebinding)
    allowed = None if host not in LOOPBACK_NAMES or "*" in allowed_host else [*LOOPBACK_NAMES, *allowed_host]
    run(create_app(models, limits, token, f"{worker}-" if worker else "", allowed), sock)


def main() -> None:
    start_with_allocator_settings(__file__)  # glibc's malloc set for long conversations (turnformer.allocator)
    try:
        app()
    except SystemExit as end:  # Ctrl-C in a command that keeps nothing to go on from: said here, in one line
        if end.code == 130 and not INTERRUPT_SAID:
            say_interrupted(" (Ctrl-C)")
        raise
    except (OutputClosed, BrokenPipeError):  # `... | head`: the reader has what it wanted; end quietly, as a killed pipe writer does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
        sys.exit(141)  # 128 + SIGPIPE, what a shell shows for a writer its pipe ended
    except OSError as e:
        if e.errno not in UNWRITABLE:
            raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # what is left unwritten is not tried again
        err.print(f"error: the output cannot be written: {e.strerror}", highlight=False, soft_wrap=True)
        sys.exit(2)


# a write that failed for want of room or a working device (standard output into a full disk, say): said in one line
UNWRITABLE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)


if __name__ == "__main__":
    main()
