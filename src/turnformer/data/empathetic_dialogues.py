"""EmpatheticDialogues (Rashkin et al., ACL 2019): two-party conversations grounded in an emotional situation.

Files (the official ``empatheticdialogues.tar.gz``, unpacked)::

    empatheticdialogues/{train,valid,test}.csv      (``valid`` is the validation split)

Each file starts with the header ``conv_id,utterance_idx,context,prompt,speaker_idx,utterance,selfeval,tags``
and has one utterance a line. The files are not quoted CSV: a comma inside a text field is written
``_comma_``, and a line is split on every comma, as ParlAI's teacher does. ``_comma_`` is turned back
into ``,`` in ``prompt`` and ``utterance``.

Reading: rows sharing ``conv_id`` (``hit:0_conv:1``) are one conversation, in order of first appearance,
its turns ordered by ``utterance_idx`` (1, 2, 3... without holes). A turn's speaker is ``speaker_idx``
(an anonymous worker id) as a string; its text is ``utterance``. The dialogue id is the ``conv_id`` and
a turn id ``<conv_id>_utt:<utterance_idx>``. ``context`` (the conversation's emotion, one of the 32
classes of `EMOTIONS`) and ``prompt`` (the situation the first speaker wrote about) describe the whole
conversation, not a turn, so they go into the dialogue's ``meta`` as ``emotion`` and ``situation``;
turns carry no labels. ``selfeval`` and ``tags`` are not read.

The known defect, and what is done about it: some lines have more than 8 comma-separated fields (stray
commas in the trailing ``selfeval``/``tags`` columns). Only the first 8 fields are used (the fields
read, ``conv_id`` to ``utterance``, come before those columns; ParlAI's loader reads the same leading
fields), and each such line is counted in the load report as ``extra_fields`` with file and line; where the
seventh field is no ``selfeval`` (numbers parted by ``|`` and ``_``, as ``5|5|5_2|2|5``; bare digits, as the
``000`` of an utterance's ``$1,000``, are none), the stray comma is in the
utterance, which would be read cut short, and the line is an error. Also reported, not changed:
``conversation_rows_not_contiguous``, ``utterances_reordered`` and ``conversation_field_differs`` (a row whose
``context`` or ``prompt`` differs from its conversation's first row; the first row's value is kept).

A line with fewer than 8 fields, a non-integer ``utterance_idx`` or ``speaker_idx``, an unknown
emotion, an empty utterance, a repeated ``utterance_idx`` or a gap in a conversation's ``utterance_idx``
sequence raises `DialogueError` naming the file and line.
"""

from __future__ import annotations

import re
from pathlib import Path

from turnformer.data._io import display, iter_lines
from turnformer.data.report import DatasetSplit, LoadReport
from turnformer.dialogue import Dialogue, DialogueError, Turn, is_blank

NAME = "empathetic-dialogues"
FOLDER = "empatheticdialogues"
FILE_SPLITS = {"train": "train", "validation": "valid", "test": "test"}
HEADER = ("conv_id", "utterance_idx", "context", "prompt", "speaker_idx", "utterance", "selfeval", "tags")
N_FIELDS = len(HEADER)
COMMA = "_comma_"
SELFEVAL = re.compile(r" *(?:\d+(?: *[|_] *\d+)+)? *")  # "5|5|5_2|2|5", or empty: never bare digits ("$1,000")
EMOTIONS = [
    "afraid", "angry", "annoyed", "anticipating", "anxious", "apprehensive", "ashamed", "caring", "confident",
    "content", "devastated", "disappointed", "disgusted", "embarrassed", "excited", "faithful", "furious",
    "grateful", "guilty", "hopeful", "impressed", "jealous", "joyful", "lonely", "nostalgic", "prepared",
    "proud", "sentimental", "surprised", "terrified", "trusting", "sad",
]
LABEL_SETS: dict[str, list[str]] = {}  # no per-turn labels: the emotion is the conversation's (meta["emotion"])


def unescape(text: str) -> str:
    """``_comma_`` back to ``,``."""
    return text.replace(COMMA, ",")


def _int(value: str, path: Path, lineno: int, column: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise DialogueError(f"{path}:{lineno}: {column}: expected an integer, got {value!r}") from None


def read_csv(path: Path, report: LoadReport, base: Path | None = None) -> list[Dialogue]:
    """Read one EmpatheticDialogues CSV file into dialogues (see the module docstring)."""
    shown = display(path, base)
    lines = iter_lines(path, report)
    first = next(lines, None)
    if first is None:
        raise DialogueError(f"{path}:1: empty file, expected the header {','.join(HEADER)}")
    header = tuple(f.strip() for f in first[1].split(","))
    if header[:N_FIELDS] != HEADER:
        raise DialogueError(f"{path}:1: expected the header {','.join(HEADER)}, got {first[1][:200]!r}")

    # conv_id -> [(utterance_idx, line, Turn)], in order of first appearance
    groups: dict[str, list[tuple[int, int, Turn]]] = {}
    meta: dict[str, dict] = {}
    last_conv: str | None = None
    for lineno, line in lines:
        if not line.strip():
            report.add("blank_line", f"{shown}:{lineno}: blank line skipped")
            continue
        fields = line.strip().split(",")
        if len(fields) < N_FIELDS:
            raise DialogueError(
                f"{path}:{lineno}: expected {N_FIELDS} comma-separated fields ({','.join(HEADER)}), got {len(fields)}"
            )
        if len(fields) > N_FIELDS and not SELFEVAL.fullmatch(fields[6]):
            raise DialogueError(
                f"{path}:{lineno}: utterance: a comma not written {COMMA} (after {fields[5][-40:]!r}): "
                f"{len(fields)} comma-separated fields, the seventh {fields[6][:40]!r} no selfeval"
            )
        if len(fields) > N_FIELDS:
            report.add(
                "extra_fields",
                f"{shown}:{lineno}: {len(fields)} comma-separated fields instead of {N_FIELDS}; the first {N_FIELDS} are used",
            )
        conv_id, idx_raw, emotion, prompt, speaker_raw, utterance = (f.strip() for f in fields[:6])
        if not conv_id:
            raise DialogueError(f"{path}:{lineno}: conv_id: empty")
        idx = _int(idx_raw, path, lineno, "utterance_idx")
        speaker = str(_int(speaker_raw, path, lineno, "speaker_idx"))
        if emotion not in EMOTIONS:
            raise DialogueError(f"{path}:{lineno}: context: unknown emotion {emotion!r}; allowed: {', '.join(EMOTIONS)}")
        text = unescape(utterance).strip()
        if is_blank(text):
            raise DialogueError(f"{path}:{lineno}: utterance: empty text")
        situation = unescape(prompt).strip()
        turn = Turn(speaker=speaker, text=text, id=f"{conv_id}_utt:{idx}")
        if conv_id not in groups:
            groups[conv_id] = []
            meta[conv_id] = {"emotion": emotion, "situation": situation, "line": lineno}
        else:
            if conv_id != last_conv:
                report.add(
                    "conversation_rows_not_contiguous",
                    f"{shown}:{lineno}: rows of {conv_id} resume after other conversations; grouped together",
                )
            for key, value in (("emotion", emotion), ("situation", situation)):
                if value != meta[conv_id][key]:
                    report.add(
                        "conversation_field_differs",
                        f"{shown}:{lineno}: {conv_id}: {'context' if key == 'emotion' else 'prompt'} {value[:60]!r} differs from "
                        f"line {meta[conv_id]['line']}'s {meta[conv_id][key][:60]!r}; the first is kept",
                    )
        last_conv = conv_id
        groups[conv_id].append((idx, lineno, turn))

    dialogues = []
    for conv_id, rows in groups.items():
        ordered = sorted(rows, key=lambda r: r[0])
        if ordered != rows:
            report.add("utterances_reordered", f"{shown}:{rows[0][1]}: {conv_id}: rows not in utterance_idx order; sorted")
        for expected, (idx, lineno, _) in enumerate(ordered, start=1):
            if idx == expected:
                continue
            if idx == expected - 1 and expected > 1:  # the one before it had this index
                raise DialogueError(f"{path}:{lineno}: {conv_id}: utterance_idx {idx} repeated")
            raise DialogueError(
                f"{path}:{lineno}: {conv_id}: utterance_idx {idx}, expected {expected} "
                f"(utterance_idx must run 1, 2, 3... within a conversation)"
            )
        dialogues.append(Dialogue(turns=tuple(r[2] for r in ordered), id=conv_id, meta=meta[conv_id]))
    return dialogues


def load(root: Path, split: str) -> DatasetSplit:
    """Load one split from the ``empatheticdialogues`` folder `root`."""
    report = LoadReport(source=f"{NAME}/{split}")
    path = root / f"{FILE_SPLITS[split]}.csv"
    dialogues = read_csv(path, report, base=root.parent)
    return DatasetSplit(name=NAME, split=split, items=dialogues, report=report, label_kinds=(), label_sets={})
