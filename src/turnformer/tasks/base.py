"""The one shape every task has. The command line, the demo and the server reach a task through
`turnformer.tasks.registry` and call it through this interface, so none of them branches on a task's name: what
differs between tasks (the options they take, whether their models label utterances, the command that runs them
on new conversations, what a server can ask of a trained model) is written on the task.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

# A task's model builder: the model (and what reads its input: a tokenizer, or a word vocabulary) from the recipe's
# model config and what the task derives from its data (labels, a vocabulary). All builders of one task share one
# signature, which that task documents.
ModelBuilder = Callable[..., Any]

# What a server can ask of a trained model (`Task.serves`), each answered by the Task method its comment names.
# `session(...).add(speaker, text)`: one utterance at a time, the conversation's memory in the session, which can be
# taken back (`restore(snapshot())`) where another model of a server's session fails on the utterance
STREAM = "stream"
ANNOTATE = "annotate"  # `annotate`: every utterance of whole conversations labelled, each conversation in one pass
RANK = "rank"  # `rank`: candidate replies to a conversation scored
GENERATE = "generate"  # `respond`: a reply to a conversation generated
ATTENTION = "attention"  # `attention`: which earlier tokens each head type attends to from one utterance


@dataclass
class Predictions:
    """What a model made of new input, ready to show: rows for a JSONL file, a table for the terminal. The rows come a
    block of the input at a time, each block made as `blocks` is read, so that a file of any length is never held
    whole (`turnformer.tasks.common.InputBlocks`); `notes` and `written` are complete once it is read to its end."""

    blocks: Iterable[tuple[list[dict], list[tuple[str, ...]]]]  # per block: its rows, one JSON object each (what --out
    #   writes), and their lines in the table (long texts shortened)
    noun: str  # what a row is, in "wrote 12 predictions to FILE"
    columns: tuple[str, ...]  # the table's header
    table: bool = True  # False: no table (a file the task wrote stands for it)
    notes: list[str] = field(default_factory=list)  # what the model did not read whole, for stderr
    written: list[str] = field(default_factory=list)  # other files the task wrote, as "wrote ..." lines
    source: Any = None  # the `InputBlocks` the blocks are made from, a block of them each
    state: dict[str, Any] = field(default_factory=dict)  # what the maker carries from block to block (tallies of what
    #   the model did not read), by name: lists, dicts, or objects with `saved` and `restore`;
    #   updated for a block before the block is given out (it is saved with the block)
    rebuild: Callable[[Iterable[dict]], None] | None = None  # what the maker carries that grows with the input (the
    #   submission's lines), made again on going on from the rows an interrupted run wrote, rather than saved in `state`

    def rows(self) -> list[dict]:
        """Every row, the blocks read to their end (once: they are made as they are read)."""
        return [row for rows, _ in self.blocks for row in rows]

    def saved(self) -> dict[str, Any]:
        """`state` as JSON, as it is after the blocks made so far."""
        return {name: value.saved() if hasattr(value, "saved") else value for name, value in self.state.items()}

    def resume(self, blocks: int, saved: dict[str, Any], kept_rows: Callable[[], Iterable[dict]] = tuple) -> None:
        """Go on after the first `blocks` blocks, made by an interrupted run whose `state` was `saved` and whose rows
        `kept_rows` reads back (for `rebuild`): they are not made again, and the notes and the files written at the end
        cover them too."""
        if self.rebuild is not None:
            self.rebuild(kept_rows())
        for name, value in self.state.items():
            if name not in saved:  # a tally an earlier version did not keep: it counts the blocks made from here
                continue
            if hasattr(value, "restore"):
                value.restore(saved[name])
            elif isinstance(value, list):
                value[:] = saved[name]
            else:
                value.clear()
                value.update(saved[name])
        self.source.skip(blocks)


class Task(Protocol):
    """A task: its data, its models, and training, scoring and running them."""

    name: str  # the id recipes and run descriptions use: "erc"
    title: str  # in messages: "emotion-recognition (erc)"
    labelled: bool  # its models label utterances, so its run descriptions name the labels
    models: Mapping[str, ModelBuilder]  # model id -> builder; every recipe of the task names one of these ids
    options: frozenset[str]  # the task-specific command-line options its evaluate / predict take ("beam", ...)
    command: str  # the command that runs its models on new conversations: "predict" or "generate"
    session_class: type  # what `session` returns

    def load_data(self, recipe: dict, data_dir: Path | None = None,
                  only: Sequence[str] = ("train", "validation", "test")) -> dict[str, list]:
        """The items of a recipe's splits (all three, or those in ``only``)."""

    def train(self, recipe: dict, out_dir: Path, seed: int, data_dir: Path | None = None, resume: bool = False,
              time_budget_s: float | None = None, limits: dict[str, int] | None = None) -> Any:
        """Train a recipe's model into ``out_dir``; the `TrainResult` (test score at the best validation epoch)."""

    def load_trained(self, checkpoint: Path) -> tuple[Any, Any, dict]:
        """(model in eval mode, its tokenizer or vocabulary, run description) of a run folder or checkpoint."""

    def evaluate(self, model: Any, tokenizer: Any, run: dict, split: str, data_dir: Path | None = None,
                 limit: int | None = None, input_file: Path | None = None, **options: Any) -> dict:
        """The metrics of a trained model on a split of its recipe's data (its first `limit` conversations or items),
        or on a user's labelled `input_file`."""

    def predict(self, model: Any, tokenizer: Any, run: dict, source: str, data_dir: Path | None = None,
                **options: Any) -> Predictions:
        """Run a trained model on `source`: a file, or a benchmark split written NAME:SPLIT."""

    def session(self, model: Any, tokenizer: Any, run: dict, **options: Any) -> Any:
        """An object that answers one conversation (or one utterance of it) at a time, as a chat or a server does."""

    def serves(self, model: Any) -> frozenset[str]:
        """What a server can ask of this trained model (STREAM, ANNOTATE, ...): the methods below that it answers. A
        method not named here is not called, and a task may leave it out."""

    def annotate(self, model: Any, tokenizer: Any, run: dict, dialogues: Sequence[Any], desc: str = "predict") -> list[list[dict]]:
        """ANNOTATE: per conversation, per turn, ``{"label", "probabilities", "truncated"}`` (gold labels are not needed;
        ``truncated``: the utterance was longer than the model reads, which read its start); `desc` names the work in
        its progress bar."""

    def rank(self, model: Any, tokenizer: Any, run: dict, dialogue: Any, candidates: Sequence[Any],
             truncation: dict | None = None) -> list[float]:
        """RANK: one score per candidate reply to `dialogue` (higher = better); ``truncation``, if given, is filled
        with what the model did not read, ``note`` saying it in a line (None where it read everything)."""

    def respond(self, model: Any, tokenizer: Any, run: dict, dialogue: Any, speaker: str | None = None,
                beam: int = 1, truncation: dict | None = None) -> str:
        """GENERATE: a reply to `dialogue`, spoken by `speaker` (None: the speaker before the last one); ``truncation``,
        as `rank`'s, and ``unfinished`` a line where the reply reached the decoder's last step without ending."""

    def attention(self, model: Any, tokenizer: Any, run: dict, dialogue: Any, utterance: int) -> dict:
        """ATTENTION: what each head type attends to from `utterance`'s query, as JSON
        (`turnformer.plots.AttentionView.to_json`)."""


__all__ = ["ANNOTATE", "ATTENTION", "GENERATE", "RANK", "STREAM", "ModelBuilder", "Predictions", "Task"]
