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
* ``utterances_reordered``, ``dialogue_rows_not_contiguous``.

Repaired and reported:

* ``mojibake_repaired``: an utterance's or a speaker's text that was UTF-8 decoded a byte a character, as
  cp1252 or as Latin-1 (``â€™`` or ``â\x80\x99`` for ``’``), is decoded back, each such run alone (a real
  ``é`` beside it stays) and only to what such runs stand for in text of Latin letters (accented letters,
  punctuation, currency and letter-like signs, symbols, emoji: a real ``ß“`` or ``é…”`` stays); a C1 control character left (``\x92``: cp1252's byte read as Latin-1, as MELD's
  first release has eight of) becomes cp1252's character (``’``). The official CSVs here have none.
* ``padded_label``: an Emotion or Sentiment with spaces at its ends.

Malformed rows (wrong number of fields, non-integer or negative ids), a header naming a column twice, a
row whose Dialogue_ID and Utterance_ID an earlier row has (two conversations under one Dialogue_ID, as
when one split's file is appended to another's), unknown labels and empty text raise `DialogueError`
naming the file and line.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from turnformer.data._io import decode_utf8, display, read_bytes
from turnformer.data.report import DatasetSplit, LoadReport
from turnformer.dialogue import Dialogue, DialogueError, Turn, is_blank, trim_invisible

NAME = "meld"
FILE_SPLITS = {"train": "train", "validation": "dev", "test": "test"}
EMOTIONS = ["neutral", "surprise", "fear", "sadness", "joy", "disgust", "anger"]
SENTIMENTS = ["neutral", "positive", "negative"]
LABEL_SETS = {"emotion": EMOTIONS, "sentiment": SENTIMENTS}
REQUIRED = ("Utterance", "Speaker", "Emotion", "Sentiment", "Dialogue_ID", "Utterance_ID")
# A byte 0x80-0xFF as the character it was read as: Latin-1's, and cp1252's where cp1252 has one.
_BYTE_OF = {chr(b): b for b in range(0x80, 0x100)} | {
    bytes([b]).decode("cp1252"): b for b in range(0x80, 0xA0) if b not in (0x81, 0x8D, 0x8F, 0x90, 0x9D)
}
_CONTINUATION = "[" + re.escape("".join(c for c, b in _BYTE_OF.items() if b < 0xC0)) + "]"
# One UTF-8 sequence read a byte a character: a lead byte's character, then as many continuation bytes' as it takes.
_MOJIBAKE = re.compile(
    f"[\u00c2-\u00df]{_CONTINUATION}|[\u00e0-\u00ef]{_CONTINUATION}{{2}}|[\u00f0-\u00f4]{_CONTINUATION}{{3}}"
)
_C1 = re.compile("[\u0080-\u009f]")
# What such a run decodes back to in text of Latin letters: accented letters, punctuation (’ “ … —), currency and
# letter-like signs (€ ™), symbols and emoji. Real text has runs of the same shape that decode elsewhere (a German
# "Spaß“" to N'Ko, "Olé…”" to a CJK character): they stay as they are.
_PLAUSIBLE = re.compile("[\u00a0-\u024f\u2000-\u206f\u20a0-\u20cf\u2100-\u21ff\u2600-\u27bf\U0001f000-\U0001faff]")


def _decoded_back(match: re.Match) -> str:
    try:
        decoded = bytes(_BYTE_OF[c] for c in match.group()).decode("utf-8")
    except UnicodeDecodeError:
        return match.group()
    return decoded if _PLAUSIBLE.fullmatch(decoded) else match.group()


def _c1_as_cp1252(match: re.Match) -> str:
    try:
        return bytes([ord(match.group())]).decode("cp1252")
    except UnicodeDecodeError:  # one of the five bytes cp1252 leaves undefined
        return match.group()


def repair_mojibake(text: str) -> str | None:
    """`text` with each run of UTF-8 read a byte a character (as cp1252 or Latin-1) decoded back, and each C1
    control character (cp1252's byte read as Latin-1) as cp1252's character; None if nothing changed."""
    fixed = _C1.sub(_c1_as_cp1252, _MOJIBAKE.sub(_decoded_back, text))
    return fixed if fixed != text else None


def _repaired(value: str, column: str, where: str, report: LoadReport) -> str:
    fixed = repair_mojibake(value)
    if fixed is None:
        return value
    report.add("mojibake_repaired", f"{where}: {column}: {value!r} decoded back to {fixed!r}")
    return fixed


def _int(value: str, path: Path, line: int, column: str) -> int:
    if not re.fullmatch(r"[+-]?[0-9]+", value.strip()):  # int() reads "1_0" as 10 and "٣" as 3
        raise DialogueError(f"{path}:{line}: {column}: expected an integer, got {value!r}")
    number = int(value)
    if number < 0:
        raise DialogueError(f"{path}:{line}: {column}: expected 0 or more, got {value!r}")
    return number


def _label(value: str, allowed: list[str], path: Path, line: int, column: str, report: LoadReport, shown: str) -> str:
    label = trim_invisible(value)
    if label not in allowed:
        raise DialogueError(f"{path}:{line}: {column}: unknown label {value!r}; allowed: {', '.join(allowed)}")
    if label != value:
        report.add("padded_label", f"{shown}:{line}: {column}: {value!r} read as {label!r}")
    return label


def read_csv(path: Path, report: LoadReport, base: Path | None = None) -> list[Dialogue]:
    """Read one MELD-format CSV file into dialogues."""
    text = decode_utf8(read_bytes(path), path, report)
    csv.field_size_limit(max(csv.field_size_limit(), len(text)))  # a field may be as long as the file (Python's limit: 128K)
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
    twice = sorted({h for h in header if h and header.count(h) > 1})
    if twice:  # which of the two holds the data cannot be told
        raise DialogueError(f"{path}:1: header names column(s) {', '.join(twice)} twice")
    col = {name: i for i, name in enumerate(header)}
    shown = display(path, base)

    groups: dict[int, list[tuple[int, int, Turn]]] = {}
    first_line: dict[tuple[int, int], int] = {}  # (Dialogue_ID, Utterance_ID): the line that has it
    meta: dict[int, dict] = {}
    last_did: int | None = None
    while True:
        line = reader.line_num + 1  # where the row starts (a quoted field may hold line breaks)
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as err:  # named by the row's first line, as docs/data-format.md says (and the table reader)
            opened = " (a quote opened there is not closed)" if "end of data" in str(err) else ""
            raise DialogueError(f"{path}:{reader.line_num}: malformed CSV in the row from line {line}: {err}{opened}") from None
        if not row or all(not f.strip() for f in row):
            report.add("blank_line", f"{shown}:{line}: blank row skipped")
            continue
        if len(row) != len(header):
            raise DialogueError(f"{path}:{line}: expected {len(header)} fields ({', '.join(header)}), got {len(row)}")
        did = _int(row[col["Dialogue_ID"]], path, line, "Dialogue_ID")
        uid = _int(row[col["Utterance_ID"]], path, line, "Utterance_ID")
        utterance = _repaired(row[col["Utterance"]], "Utterance", f"{shown}:{line}", report)
        if is_blank(utterance):
            raise DialogueError(f"{path}:{line}: Utterance: empty text")
        speaker = _repaired(row[col["Speaker"]], "Speaker", f"{shown}:{line}", report).strip()
        if is_blank(speaker):
            raise DialogueError(f"{path}:{line}: Speaker: missing speaker")
        labels = {
            "emotion": _label(row[col["Emotion"]], EMOTIONS, path, line, "Emotion", report, shown),
            "sentiment": _label(row[col["Sentiment"]], SENTIMENTS, path, line, "Sentiment", report, shown),
        }
        if (earlier := first_line.setdefault((did, uid), line)) != line:
            raise DialogueError(
                f"{path}:{line}: Dialogue_ID {did}, Utterance_ID {uid} again (first on line {earlier}): two conversations "
                "under one Dialogue_ID (one split's file appended to another's?) or a row written twice"
            )
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
