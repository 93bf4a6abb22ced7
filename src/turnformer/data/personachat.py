"""PERSONA-CHAT (Zhang et al., ACL 2018), in ParlAI's text format: two crowdworkers chat, each playing a persona.

Files (ParlAI's ``personachat.tgz``, unpacked; its ``personachat/`` folder)::

    personachat/{train,valid,test}_{self,other,both}_{original,revised}.txt   (``valid`` is the validation split)
    personachat/{train,valid,test}_none_original.txt

``self``/``other``/``both``/``none`` say whose persona the file gives (the responding speaker's, the
partner's, both or neither); ``original``/``revised`` are the personas as written or rephrased. The
default variant is ``self_original`` (ParlAI's default teacher); `load` takes ``variant=`` for the others.

Each line starts with an integer line number and a space; the number restarting at 1 begins a new
dialogue, and within a dialogue it goes up by one. Lines ``N your persona: TEXT`` (and, in the
``other``/``both`` files, ``N partner's persona: TEXT``) are persona sentences; the other lines are
``N UTTERANCE<TAB>RESPONSE<TAB><TAB>CAND_1|CAND_2|...|CAND_k`` (the empty field is ParlAI's reward, and
the last candidate is the gold response). Each utterance line gives two turns: the partner's utterance
(speaker ``"partner"``), then the response (speaker ``"self"``). The candidates are not read.

The persona sentences go into the dialogue's ``meta``: ``persona`` (the ``self`` speaker's, from ``your
persona:`` lines) and ``partner_persona`` (from ``partner's persona:`` lines), each a list in file order
(empty when the file does not give them); ``meta["line"]`` is the dialogue's first line. Dialogue ids
are ``<split>_<n>`` (n from 0). Turns carry no labels.

Handled and counted in the load report: ``silence_dropped``: ``__SILENCE__`` as a dialogue's first
utterance means the ``self`` speaker starts; that placeholder turn is dropped. ``blank_line`` and
``dialogue_without_turns`` (persona lines with no utterance line after them: no dialogue) are counted
and skipped.

A line without a leading integer, an utterance line without a tab or with an empty utterance or
response, a line number that neither restarts at 1 nor follows the previous one, a persona line after
the dialogue's first utterance line, or ``__SILENCE__`` anywhere but a dialogue's first utterance
raises `DialogueError` naming the file and line.
"""

from __future__ import annotations

import re
from pathlib import Path

from turnformer.data._io import display, iter_lines
from turnformer.data.report import DatasetSplit, LoadReport
from turnformer.dialogue import Dialogue, DialogueError, Turn, is_blank

NAME = "personachat"
FILE_SPLITS = {"train": "train", "validation": "valid", "test": "test"}
VARIANTS = (*(f"{p}_{v}" for p in ("self", "other", "both") for v in ("original", "revised")), "none_original")
DEFAULT_VARIANT = "self_original"
SELF, PARTNER = "self", "partner"
SILENCE = "__SILENCE__"
YOUR_PERSONA = "your persona:"
PARTNER_PERSONA = "partner's persona:"
LABEL_SETS: dict[str, list[str]] = {}  # no per-turn labels
_NUMBERED = re.compile(r"(\d+) (.*)\Z", re.DOTALL)


def file_name(split: str, variant: str = DEFAULT_VARIANT) -> str:
    """``train_self_original.txt`` for split ``train`` and the default variant."""
    if variant not in VARIANTS:
        raise DialogueError(f"unknown PERSONA-CHAT variant {variant!r}; known: {', '.join(VARIANTS)}")
    return f"{FILE_SPLITS[split]}_{variant}.txt"


class _Open:
    """The dialogue being read: its persona sentences and turns."""

    def __init__(self, lineno: int):
        self.line = lineno
        self.persona: list[str] = []
        self.partner_persona: list[str] = []
        self.turns: list[Turn] = []
        self.utterance_lines = 0


def read_file(path: Path, split: str, report: LoadReport, base: Path | None = None) -> list[Dialogue]:
    """Read one PERSONA-CHAT text file into dialogues (see the module docstring)."""
    shown = display(path, base)
    dialogues: list[Dialogue] = []
    current: _Open | None = None
    previous = 0

    def close(dialogue: _Open | None) -> None:
        if dialogue is None:
            return
        if not dialogue.turns:
            report.add("dialogue_without_turns", f"{shown}:{dialogue.line}: persona lines but no utterance line; skipped")
            return
        meta = {"persona": dialogue.persona, "partner_persona": dialogue.partner_persona, "line": dialogue.line}
        dialogues.append(Dialogue(turns=tuple(dialogue.turns), id=f"{split}_{len(dialogues)}", meta=meta))

    for lineno, line in iter_lines(path, report):
        if not line.strip():
            report.add("blank_line", f"{shown}:{lineno}: blank line skipped")
            continue
        match = _NUMBERED.match(line)
        if match is None:
            raise DialogueError(f"{path}:{lineno}: expected a line number, a space and text, got {line[:80]!r}")
        number, body = int(match.group(1)), match.group(2)
        if number == 1:
            close(current)
            current = _Open(lineno)
        elif current is None or number != previous + 1:
            raise DialogueError(
                f"{path}:{lineno}: line number {number}, expected {previous + 1} or 1 (a new dialogue)"
                if current is not None else f"{path}:{lineno}: line number {number}: the file must start with line number 1"
            )
        previous = number

        for prefix, sentences in ((YOUR_PERSONA, current.persona), (PARTNER_PERSONA, current.partner_persona)):
            if body.startswith(prefix):
                if current.utterance_lines:
                    raise DialogueError(f"{path}:{lineno}: persona line after the dialogue's first utterance line")
                sentence = body[len(prefix):].strip()
                if not sentence:
                    raise DialogueError(f"{path}:{lineno}: empty persona sentence")
                sentences.append(sentence)
                break
        else:
            fields = body.split("\t")
            if len(fields) < 2:
                raise DialogueError(f"{path}:{lineno}: expected UTTERANCE<TAB>RESPONSE<TAB><TAB>CANDIDATES, found no tab")
            utterance, response = fields[0].strip(), fields[1].strip()
            if is_blank(response):
                raise DialogueError(f"{path}:{lineno}: empty response (the text after the first tab)")
            if utterance == SILENCE or response == SILENCE:
                if response == SILENCE or current.utterance_lines:
                    raise DialogueError(f"{path}:{lineno}: {SILENCE} is only expected as a dialogue's first utterance")
                report.add("silence_dropped", f"{shown}:{lineno}: {SILENCE}: the self speaker starts; placeholder turn dropped")
            elif is_blank(utterance):
                raise DialogueError(f"{path}:{lineno}: empty utterance (the text before the first tab)")
            else:
                current.turns.append(Turn(speaker=PARTNER, text=utterance))
            current.turns.append(Turn(speaker=SELF, text=response))
            current.utterance_lines += 1
    close(current)
    return dialogues


def load(root: Path, split: str, variant: str = DEFAULT_VARIANT) -> DatasetSplit:
    """Load one split from the ``personachat`` folder `root` (`variant`: ``self_original``, ``both_revised``...)."""
    report = LoadReport(source=f"{NAME}/{split}" + ("" if variant == DEFAULT_VARIANT else f" ({variant})"))
    path = root / file_name(split, variant)
    dialogues = read_file(path, split, report, base=root.parent)
    return DatasetSplit(name=NAME, split=split, items=dialogues, report=report, label_kinds=(), label_sets={})
