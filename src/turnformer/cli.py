"""The `turnformer` command: data, plots, backbones and the demo.

Errors in the user's input end the command with a one-line message naming the file, line or field,
and exit code 2; no traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from turnformer.backbones.cli import backbone_app
from turnformer.data.cli import data_app
from turnformer.dialogue import Dialogue, DialogueError

app = typer.Typer(help="Multi-turn, multi-party dialogue modelling with structure-aware Transformers.", no_args_is_help=True)
plot_app = typer.Typer(help="Figures: attention masks of a conversation.", no_args_is_help=True)
app.add_typer(data_app, name="data", help="Benchmark datasets: statistics, download, conversion.")
app.add_typer(backbone_app, name="backbone", help="Offline backbones: load and check against transformers.")
app.add_typer(plot_app, name="plot")
console = Console()
err = Console(stderr=True)

DataDir = typer.Option(None, "--data-dir", help="Benchmark folder (default: $TURNFORMER_DATA, else ~/.cache/turnformer/data).")


def fail(message: str, code: int = 2) -> None:
    err.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def load_input(spec: str, data_dir: Optional[Path]) -> list[Dialogue]:
    """A conversation file (generic JSONL) or a benchmark split written ``NAME:SPLIT``."""
    from turnformer.data import DATASETS, load_split, read_jsonl

    path = Path(spec)
    if path.exists():
        return read_jsonl(path)
    name, _, split = spec.partition(":")
    if name in DATASETS:
        items = load_split(name, split or "test", data_dir).items
        dialogues = [getattr(item, "context", item) for item in items]  # response selection: the context
        return dialogues
    raise DialogueError(f"{spec}: no such file, and not a dataset split (NAME:SPLIT with NAME in {', '.join(DATASETS)})")


def pick_dialogue(dialogues: list[Dialogue], wanted: Optional[str], source: str) -> Dialogue:
    if not dialogues:
        raise DialogueError(f"{source}: no conversations")
    if wanted is None:
        return dialogues[0]
    for d in dialogues:
        if d.id == wanted:
            return d
    if wanted.isdigit() and int(wanted) < len(dialogues):
        return dialogues[int(wanted)]
    some = ", ".join(repr(d.id) for d in dialogues[:5] if d.id is not None)
    raise DialogueError(f"{source}: no dialogue with id {wanted!r} (ids look like {some or 'none'}; an index 0..{len(dialogues) - 1} works too)")


@plot_app.command("masks")
def plot_masks_command(
    input: str = typer.Option(..., "--input", help="Conversation file (JSONL) or benchmark split NAME:SPLIT."),
    dialogue: Optional[str] = typer.Option(None, "--dialogue", help="Dialogue id (or index); default the first."),
    kinds: str = typer.Option("local,global,speaker,listener", "--kinds", help="Comma-separated masks, e.g. local,speaker|same_utterance."),
    window: int = typer.Option(2, "--window", help="Window of `local` when written without one."),
    level: str = typer.Option("tokens", "--level", help="Axes: tokens or utterances."),
    tokenizer: str = typer.Option("words", "--tokenizer", help="'words', or a backbone name for its WordPiece tokens."),
    query_utterance: Optional[int] = typer.Option(
        None, "--query-utterance", help="DialogXL's view: rows are this utterance's tokens, keys the utterances up to it."
    ),
    out: Optional[Path] = typer.Option(None, "--out", help="PNG to write."),
    as_json: bool = typer.Option(False, "--json", help="Print the masks as JSON."),
    data_dir: Optional[Path] = DataDir,
) -> None:
    """Draw (or print) the attention masks of one conversation."""
    from turnformer.plots import mask_view, plot_masks

    if out is None and not as_json:
        fail("give --out FILE.png, --json, or both")
    try:
        chosen = pick_dialogue(load_input(input, data_dir), dialogue, input)
        tok = None
        if tokenizer != "words" and level == "tokens":
            from turnformer.backbones import load_tokenizer

            tok = load_tokenizer(tokenizer)
        view = mask_view(chosen, [k for k in kinds.split(",") if k.strip()], window=window, level=level, tokenizer=tok, query_utterance=query_utterance)
    except (DialogueError, ValueError, FileNotFoundError, OSError) as e:
        fail(str(e))
    if out is not None:
        plot_masks(view, out, title=f"dialogue {chosen.id or dialogue or 0}")
        err.print(f"wrote {out}")
    if as_json:
        sys.stdout.write(json.dumps(view.to_json()) + "\n")


@app.command()
def demo(
    dataset: str = typer.Option("dailydialog", help="Benchmark to summarise."),
    out: Path = typer.Option(Path("out/demo"), help="Folder for the figures."),
    data_dir: Optional[Path] = DataDir,
) -> None:
    """Statistics of a real dataset, and the DialogXL masks of one of its conversations."""
    from turnformer.data import load_split
    from turnformer.data.stats import dataset_stats, print_stats
    from turnformer.plots import mask_view, plot_masks

    try:
        stats = dataset_stats(dataset, data_dir)
        print_stats(stats, console)
        dialogue = next(d for d in load_split(dataset, "test", data_dir).items if 5 <= len(d) <= 8)
    except (DialogueError, FileNotFoundError, OSError) as e:
        fail(str(e))
    console.print(f"\nConversation {dialogue.id} ({len(dialogue)} turns):")
    for i, turn in enumerate(dialogue.turns):
        labels = " ".join(f"{k}={v}" for k, v in turn.labels.items())
        console.print(f"  u{i} [bold]{turn.speaker}[/bold]: {turn.text}  [dim]{labels}[/dim]", highlight=False)
    # DialogXL's four head types, structure on memory keys only (the current utterance always visible).
    kinds = ["local(2)|same_utterance", "global", "speaker|same_utterance", "listener|same_utterance"]
    views = {
        "masks-utterances.png": mask_view(dialogue, kinds, level="utterances"),
        "masks-last-utterance.png": mask_view(dialogue, kinds, level="tokens", query_utterance=len(dialogue) - 1),
    }
    for name, view in views.items():
        path = plot_masks(view, out / name, title=f"{dataset} {dialogue.id}: DialogXL head masks (window 2)")
        console.print(f"wrote {path}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
