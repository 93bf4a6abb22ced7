"""MELD (Poria et al., ACL 2019), text only: multi-party Friends dialogues with emotion and sentiment labels.

Files: ``meld/{train,dev,test}_sent_emo.csv`` (``dev`` is the validation split), UTF-8 CSV with the
columns ``Sr No., Utterance, Speaker, Emotion, Sentiment, Dialogue_ID, Utterance_ID, Season, Episode,
StartTime, EndTime``. Curly quotes and other non-ASCII characters are kept as they are.

Reading: rows are grouped by ``Dialogue_ID`` in order of first appearance in the file, and each
dialogue's turns are ordered by ``Utterance_ID`` (a stable sort: rows already in order stay as they
are). Dialogue ids are ``dia<Dialogue_ID>`` and turn ids ``dia<Dialogue_ID>_utt<Utterance_ID>``, the
names of MELD's video clips; ``Season`` and ``Episode`` go into the dialogue's ``meta``.

Reported, not changed:

* ``utterance_id_gap``: a dialogue whose ``Utterance_ID`` values are not 0, 1, 2... without holes
  (MELD's authors removed some utterances; the official files have such gaps in 72 train, 2 dev
  and 2 test dialogues). Counted per dialogue.
* ``duplicate_utterance_id``, ``utterances_reordered``, ``dialogue_rows_not_contiguous``.

Repaired and reported: ``mojibake_repaired``: text that was UTF-8 decoded as cp1252 (``â€™`` for ``’``)
is decoded back, only where that round trip succeeds. The official CSVs here have none.

Malformed rows (wrong number of fields, non-integer ids), unknown labels and empty text raise
`DialogueError` naming the file and line.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from turnformer.data._io import decode_utf8, display, read_bytes
from turnformer.data.report import DatasetSplit, LoadReport
from turnformer.dialogue import Dialogue, DialogueError, Turn, is_blank

NAME = "meld"
FILE_SPLITS = {"train": "train", "validation": "dev", "test": "test"}
EMOTIONS = ["neutral", "surprise", "fear", "sadness", "joy", "disgust", "anger"]
SENTIMENTS = ["neutral", "positive", "negative"]
LABEL_SETS = {"emotion": EMOTIONS, "sentiment": SENTIMENTS}
REQUIRED = ("Utterance", "Speaker", "Emotion", "Sentiment", "Dialogue_ID", "Utterance_ID")
_MOJIBAKE = re.compile("[\u00c2\u00c3\u00e2][\u0080-\u00bf\u0152-\u2122]")


def repair_mojibake(text: str) -> str | None:
    """Text that was UTF-8 read as cp1252, decoded back; None if `text` does not look like that."""
    if not _MOJIBAKE.search(text):
        return None
    try:
        fixed = text.encode("cp1252").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return None
    return fixed if fixed != text else None


def _int(value: str, path: Path, line: int, column: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise DialogueError(f"{path}:{line}: {column}: expected an integer, got {value!r}") from None


def _label(value: str, allowed: list[str], path: Path, line: int, column: str) -> str:
    label = value.strip()
    if label not in allowed:
        raise DialogueError(f"{path}:{line}: {column}: unknown label {value!r}; allowed: {', '.join(allowed)}")
    return label


def read_csv(path: Path, report: LoadReport, base: Path | None = None) -> list[Dialogue]:
    """Read one MELD-format CSV file into dialogues."""
    text = decode_utf8(read_bytes(path), path, report)
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader)
    except StopIteration:
        raise DialogueError(f"{path}:1: empty file, expected a header line") from None
    except csv.Error as err:
        raise DialogueError(f"{path}:{reader.line_num}: malformed CSV: {err}") from None
    header = [h.strip() for h in header]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise DialogueError(f"{path}:1: header lacks column(s) {', '.join(missing)}; found: {', '.join(header)}")
    col = {name: i for i, name in enumerate(header)}
    shown = display(path, base)

    groups: dict[int, list[tuple[int, int, Turn]]] = {}
    meta: dict[int, dict] = {}
    last_did: int | None = None
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as err:
            raise DialogueError(f"{path}:{reader.line_num}: malformed CSV: {err}") from None
        line = reader.line_num
        if not row or all(not f.strip() for f in row):
            report.add("blank_line", f"{shown}:{line}: blank row skipped")
            continue
        if len(row) != len(header):
            raise DialogueError(f"{path}:{line}: expected {len(header)} fields ({', '.join(header)}), got {len(row)}")
        did = _int(row[col["Dialogue_ID"]], path, line, "Dialogue_ID")
        uid = _int(row[col["Utterance_ID"]], path, line, "Utterance_ID")
        utterance = row[col["Utterance"]]
        fixed = repair_mojibake(utterance)
        if fixed is not None:
            report.add("mojibake_repaired", f"{shown}:{line}: Utterance: {utterance!r} decoded back to {fixed!r}")
            utterance = fixed
        if is_blank(utterance):
            raise DialogueError(f"{path}:{line}: Utterance: empty text")
        speaker = row[col["Speaker"]].strip()
        if is_blank(speaker):
            raise DialogueError(f"{path}:{line}: Speaker: missing speaker")
        labels = {
            "emotion": _label(row[col["Emotion"]], EMOTIONS, path, line, "Emotion"),
            "sentiment": _label(row[col["Sentiment"]], SENTIMENTS, path, line, "Sentiment"),
        }
        turn = Turn(speaker=speaker, text=utterance, labels=labels, id=f"dia{did}_utt{uid}")
        if did not in groups:
            groups[did] = []
            meta[did] = {k.lower(): row[col[k]].strip() for k in ("Season", "Episode") if k in col}
            for k, v in list(meta[did].items()):
                meta[did][k] = int(v) if v.isdigit() else v
        elif did != last_did:
            report.add("dialogue_rows_not_contiguous", f"{shown}:{line}: rows of Dialogue_ID {did} resume after other dialogues; grouped together")
        last_did = did
        groups[did].append((uid, line, turn))

    dialogues = []
    for did, rows in groups.items():
        ordered = sorted(rows, key=lambda r: r[0])
        if ordered != rows:
            report.add("utterances_reordered", f"{shown}: Dialogue_ID {did}: rows not in Utterance_ID order; sorted")
        uids = [r[0] for r in ordered]
        dups = sorted({u for u in uids if uids.count(u) > 1})
        if dups:
            lines = [r[1] for r in ordered if r[0] in dups]
            report.add("duplicate_utterance_id", f"{shown}: Dialogue_ID {did}: Utterance_ID {dups} repeated (lines {lines}); all kept")
        missing = sorted(set(range(max(uids) + 1)) - set(uids))
        if missing:
            report.add(
                "utterance_id_gap",
                f"{shown}:{ordered[0][1]}: Dialogue_ID {did}: Utterance_ID {missing} absent from the file (kept as is)",
            )
        dialogues.append(Dialogue(turns=tuple(r[2] for r in ordered), id=f"dia{did}", meta=meta[did]))
    return dialogues


def load(root: Path, split: str) -> DatasetSplit:
    report = LoadReport(source=f"{NAME}/{split}")
    path = root / f"{FILE_SPLITS[split]}_sent_emo.csv"
    dialogues = read_csv(path, report, base=root.parent)
    return DatasetSplit(
        name=NAME, split=split, items=dialogues, report=report, label_kinds=("emotion", "sentiment"),
        label_sets={k: list(v) for k, v in LABEL_SETS.items()},
    )
