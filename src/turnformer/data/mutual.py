"""MuTual and MuTual-plus (Cui et al., ACL 2020): pick the right next turn among 4 candidates.

Files: ``mutual/mutual/{train,dev,test}/*.txt`` and ``mutual/mutual_plus/{train,dev,test}/*.txt``
(``dev`` is the validation split), one JSON object a file::

    {"answers": "B", "options": ["f : ...", "f : ...", "f : ...", "f : ..."],
     "article": "m : excuse me . how much is this suit ? f : it 's on sale today ...", "id": "train_1"}

Files are read in natural order (``train_1``, ``train_2``, ..., ``train_10``); a gzip-compressed one may be named
``*.txt.gz``, and any other file in the folder is not read and is counted (``other_file``). Each file is one
`ResponseSelectionItem`: the ``article`` split into turns at its speaker markers is the context, the
four ``options`` are the candidates, ``answers`` A-D is the answer index 0-3. The test answers are
hidden (``" "``) and become ``answer=None``; score on the validation (dev) split.

Speaker markers: MuTual writes ``m :`` / ``f :`` (lower-cased, tokenised text), MuTual-plus ``M:`` /
``F:``. Speakers become ``"m"`` and ``"f"``; the text after a marker is stripped. A marker counts at
the start of the text or after whitespace. Each option carries its own marker, parsed the same way.

Irregularities of the official files, handled and counted in the load report:

* ``ambiguous_speaker_marker``: train items 234-237 (in both MuTual and MuTual-plus) mark every turn
  ``m ; f :`` / ``M;F:``; those turns (20 in all) get the speaker ``"m;f"`` (unknown), the text is
  kept. Counted per turn.
* ``glued_speaker_marker``: train item 1328 (both) has ``... or something.f : what on earth ...``, a
  marker glued to the end of the previous sentence; a marker right after ``.``, ``?`` or ``!`` is
  accepted and counted.
* ``spaced_speaker_marker``: MuTual-plus train items 5005 and 5015 write ``M :`` once instead of ``M:``.

An answer with spaces at its ends is read without them (counted, ``padded_label``). A hidden answer outside the
test split is read as no answer and counted (``hidden_answer``); an official id of
another split (``train_5`` in ``dev/``: a file copied there) is counted (``id_of_another_split``), and so is each
number missing from a split's run of official ids (``missing_item``: a file deleted). Anything else (no
marker, text before the first marker, a letter other than m or f where a marker stands (``w :``), empty turn,
not 4 options, an answer other than A-D or blank, an id that
another file of the split has) raises `DialogueError` naming the file and field.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from turnformer.data._io import display, folder_names, load_json
from turnformer.data.report import DataNotFoundError, DatasetSplit, LoadReport
from turnformer.dialogue import Dialogue, DialogueError, ResponseSelectionItem, Turn, is_blank

NAMES = {"mutual": "mutual", "mutual-plus": "mutual_plus"}  # dataset name -> subfolder of mutual/
FILE_SPLITS = {"train": "train", "validation": "dev", "test": "test"}
ITEM_ID = re.compile(r"(train|dev|test)_([0-9]+)")  # the official ids: the split's folder, then 1, 2, 3...
ANSWERS = ["A", "B", "C", "D"]
ITEM_FILES = (".txt", ".txt.gz")
LABEL_SETS = {"answer": ANSWERS}
N_OPTIONS = 4
AMBIGUOUS = "m;f"

# A speaker marker: m / f / the ambiguous "m ; f", either case, then an optional space and ":".
MARKER = re.compile(r"(?:^|(?<=\s)|(?<=[.?!]))([mM]\s?;\s?[fF]|[mMfF])( ?):(?=\s|$)")
_NATURAL = re.compile(r"(\d+)")
# Where a marker stands, another letter: a speaker MuTual has not, whose turn would be read into the one before.
OTHER_MARKER = re.compile(r"(?:^|(?<=\s)|(?<=[.?!]))(?![mMfF])[a-zA-Z] ?:(?=\s|$)")


def natural_key(name: str) -> list:
    """Sort key putting ``train_2`` before ``train_10``."""
    return [int(p) if p.isdigit() else p for p in _NATURAL.split(name)]


def _speaker(marker: str) -> str:
    m = marker.lower().replace(" ", "")
    return AMBIGUOUS if ";" in m else m


def split_turns(text: str, path: Path, field: str, report: LoadReport | None = None, shown: str | None = None) -> list[Turn]:
    """Split a MuTual string at its speaker markers into turns (speaker ``m``/``f``, text stripped)."""
    matches = list(MARKER.finditer(text))
    if not matches:
        raise DialogueError(f"{path}: {field}: no speaker marker ('m :' / 'f :' or 'M:' / 'F:') in {text[:60]!r}")
    if text[: matches[0].start()].strip():
        raise DialogueError(f"{path}: {field}: text before the first speaker marker: {text[: matches[0].start()]!r}")
    if other := OTHER_MARKER.search(text):
        raise DialogueError(f"{path}: {field}: {other.group(0)!r} at character {other.start() + 1} stands as a speaker "
                            "marker does, but MuTual's speakers are m and f ('m :' / 'f :' or 'M:' / 'F:')")
    turns = []
    shown = shown or str(path)
    for k, m in enumerate(matches):
        end = matches[k + 1].start() if k + 1 < len(matches) else len(text)
        body = text[m.end() : end].strip()
        if is_blank(body):
            raise DialogueError(f"{path}: {field}: turn {k + 1} ({m.group(0)!r}): empty text")
        marker, spaced = m.group(1), m.group(2)
        speaker = _speaker(marker)
        if report is not None:
            if speaker == AMBIGUOUS:
                report.add("ambiguous_speaker_marker", f"{shown}: {field}: turn {k + 1}: marker {m.group(0)!r}; speaker set to {AMBIGUOUS!r}")
            if m.start() > 0 and not text[m.start() - 1].isspace():
                report.add("glued_speaker_marker", f"{shown}: {field}: turn {k + 1}: marker {m.group(0)!r} glued to the previous sentence; split there")
            if marker.isupper() and spaced:
                report.add("spaced_speaker_marker", f"{shown}: {field}: turn {k + 1}: marker {m.group(0)!r} read as {marker + ':'!r}")
        turns.append(Turn(speaker=speaker, text=body))
    return turns


def read_item(path: Path, report: LoadReport, base: Path | None = None) -> ResponseSelectionItem:
    """The item of one MuTual file (named, if it gives no id, by the file's stem)."""
    return parse_item(load_json(path, report), path, report, display(path, base), path.stem)


def is_item(data: Any) -> bool:
    """Whether a JSON value is one of MuTual's items (an object with ``article`` or ``options``, no ``turns``)."""
    return isinstance(data, dict) and ("article" in data or "options" in data) and "turns" not in data


def parse_item(data: Any, path, report: LoadReport | None, shown: str, default_id: str | None = None) -> ResponseSelectionItem:
    """A MuTual item from its JSON object; errors name `path` (a file, or ``file:line``), the load report `shown`."""
    if not isinstance(data, dict):
        raise DialogueError(f"{path}: expected a JSON object with article, options, answers, id")
    for key in ("article", "options", "answers"):
        if key not in data:
            raise DialogueError(f"{path}: {key}: missing field")
    item_id = data.get("id", default_id)
    if "id" in data and (not isinstance(item_id, str) or not item_id.strip()):
        raise DialogueError(f"{path}: id: expected a non-empty string, got {item_id!r}")
    article = data["article"]
    if not isinstance(article, str):
        raise DialogueError(f"{path}: article: expected a string")
    context = split_turns(article, path, "article", report, shown)
    options = data["options"]
    if not isinstance(options, list) or len(options) != N_OPTIONS:
        raise DialogueError(f"{path}: options: expected a list of {N_OPTIONS} strings, got {options!r:.80}")
    candidates = []
    for i, opt in enumerate(options):
        if not isinstance(opt, str):
            raise DialogueError(f"{path}: options[{i}]: expected a string")
        turns = split_turns(opt, path, f"options[{i}]", report, shown)
        if len(turns) != 1:
            raise DialogueError(f"{path}: options[{i}]: expected one turn, found {len(turns)} speaker markers")
        candidates.append(turns[0])
    answer_raw = data["answers"]
    if not isinstance(answer_raw, str):
        raise DialogueError(f"{path}: answers: expected a letter A-D or ' ' (hidden), got {answer_raw!r}")
    letter = answer_raw.strip()
    if letter == "":
        answer = None
    elif letter in ANSWERS:
        answer = ANSWERS.index(letter)
        if letter != answer_raw and report is not None:  # as other loaders count a label with spaces at its ends
            report.add("padded_label", f"{shown}: answers: {answer_raw!r} read as {letter!r}")
    else:
        raise DialogueError(f"{path}: answers: unknown label {answer_raw!r}; allowed: {', '.join(ANSWERS)} or ' ' (hidden)")
    return ResponseSelectionItem(
        context=Dialogue(turns=tuple(context), id=item_id), candidates=tuple(candidates), answer=answer, id=item_id
    )


def load(root: Path, split: str, name: str = "mutual") -> DatasetSplit:
    """Load a split of ``mutual`` or ``mutual-plus`` from the ``mutual`` folder `root`."""
    report = LoadReport(source=f"{name}/{split}")
    folder = root / NAMES[name] / FILE_SPLITS[split]
    if not folder.is_dir():
        raise DataNotFoundError(f"{folder}: split folder not found")
    names = sorted(folder_names(folder), key=natural_key)
    files = [folder / n for n in names if n.endswith(ITEM_FILES)]
    if not files:
        raise DialogueError(f"{folder}: no item files (*.txt)")
    for other in (n for n in names if not n.endswith(ITEM_FILES) and not n.startswith(".")):
        report.add("other_file", f"{display(folder / other, root.parent)}: not an item file (*.txt, *.txt.gz); not read")
    items, first_file = [], {}
    for path in files:
        item = read_item(path, report, base=root.parent)
        if (earlier := first_file.setdefault(item.id, path)) != path:  # scores and submissions are keyed by id
            raise DialogueError(f"{path}: id {item.id!r} is also {earlier.name}'s: one id an item")
        if item.answer is None and split != "test":
            report.add("hidden_answer", f"{display(path, root.parent)}: answers: hidden (' '), in a {split} split")
        if (own := ITEM_ID.fullmatch(item.id)) and own.group(1) != folder.name:  # a file copied from another split
            report.add("id_of_another_split", f"{display(path, root.parent)}: id {item.id!r}, in {folder.name}/")
        items.append(item)
    numbers = {int(m.group(2)) for item in items if (m := ITEM_ID.fullmatch(item.id)) and m.group(1) == folder.name}
    for missing in sorted(set(range(1, max(numbers, default=0) + 1)) - numbers):  # the official ids run from 1 unbroken
        report.add("missing_item", f"{display(folder, root.parent)}: no item {folder.name}_{missing} (the ids run to "
                                   f"{folder.name}_{max(numbers)}): a file deleted?")
    return DatasetSplit(
        name=name, split=split, items=items, report=report, label_kinds=("answer",),
        label_sets={k: list(v) for k, v in LABEL_SETS.items()},
    )


def item_to_dialogue(item: ResponseSelectionItem) -> Dialogue:
    """A response selection item as a plain dialogue for the generic JSONL format.

    The context turns are the dialogue; the candidates and the answer go into ``meta``
    (``{"candidates": [{"speaker", "text"}...], "answer": 0-3 or null}``, and ``"relevance"``, one 0/1 per
    candidate, for an item labelled per candidate: a tab-separated file's, with several or no right candidates).
    """
    meta = dict(item.context.meta)
    meta["candidates"] = [c.to_dict() for c in item.candidates]
    meta["answer"] = item.answer
    if item.relevance is not None:
        meta["relevance"] = list(item.relevance)
    return Dialogue(turns=item.context.turns, id=item.id if item.id is not None else item.context.id, meta=meta)
