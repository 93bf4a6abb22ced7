"""The generic conversation format: JSON Lines, one conversation a line (see ``docs/data-format.md``).

::

    {"id": "c1", "turns": [{"speaker": "A", "text": "Hi!", "labels": {"emotion": "joy"}},
                           {"speaker": "B", "text": "Hello.", "id": "c1-2"}], "meta": {"source": "mine"}}

* ``turns`` (required): a non-empty list; each turn needs ``speaker`` (a non-empty string; an integer id is
  read as its string and counted, ``integer_speaker``; spaces and invisible characters at its ends are removed and
  counted, ``padded_speaker``; a name written with combining marks is composed, Unicode NFC, and counted,
  ``decomposed_speaker``) and ``text``
  (a string that is not blank), and may have ``labels`` (an object mapping a label kind to a label
  string; ``null`` is no label of that kind, counted as ``null_label``; spaces and invisible characters at a
  label's or a kind's ends are removed and counted, ``padded_label``; one written with combining marks is composed,
  Unicode NFC, and counted, ``decomposed_label``; one kind written in other capitals than on an
  earlier line, ``Emotion`` and ``emotion``, is an error) and ``id`` (a string).
* Convenience: a turn's top-level string fields ``emotion``, ``act`` and ``sentiment`` are read as
  labels of that kind (``{"speaker": "A", "text": "Hi", "emotion": "joy"}``). If ``labels`` names the
  same kind, the two must agree. The writer always writes ``labels``.
* ``id`` (optional string, unique in its file) and ``meta`` (optional object, any JSON) belong to the conversation.
* Blank lines are skipped and counted in the load report; other unknown fields are ignored and counted
  (``unknown_field``), never silently.

A file whose name does not end in ``.jsonl`` and whose first line is a table's header is read as a conversation table,
one utterance a row (`turnformer.data.table`), its rows checked as turns are here (`parse_turn`).

Every error names the file, the line (from 1) and the field, e.g.
``conv.jsonl:3: turns[2].speaker: missing speaker``; undecodable bytes, malformed JSON and labels outside
a given label set are errors too. `write_jsonl` writes UTF-8 atomically (a temporary file, then
``os.replace``), and `read_jsonl` reads back exactly what it wrote.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from turnformer.data._io import (NUL_HINT, DuplicateKeyError, check_output_file, duplicate_key_at, iter_lines, json_fault,
                                 read_json, write_chunks)
from turnformer.data.mutual import is_item, item_to_dialogue, parse_item
from turnformer.data.report import LoadReport
from turnformer.data.table import iter_table, reads_as_table
from turnformer.dialogue import (CONVENIENCE_LABELS, TURN_KEYS, Dialogue, DialogueError, ResponseSelectionItem, Turn,
                                 UnknownLabelError, check_unicode, is_blank, label_name, other_spelling, speaker_name, trim_invisible,
                                 with_unique_ids)
DIALOGUE_KEYS = frozenset({"id", "turns", "meta"})

logger = logging.getLogger(__name__)


class DialogueList(list):
    """A list of dialogues with the `LoadReport` of the file they came from (``.report``) and, for a file read by
    `read_jsonl`, each dialogue's line in it (``.lines``, from 1), for messages about a dialogue found later."""

    report: LoadReport
    lines: list[int]

    def __init__(self, items: Iterable[Dialogue] = (), report: LoadReport | None = None, lines: Iterable[int] = ()):
        super().__init__(items)
        self.report = report if report is not None else LoadReport(source="")
        self.lines = list(lines)


JSON_TYPES = {dict: "an object", list: "a list", str: "a string", bool: "true or false", int: "a number", float: "a number"}


def json_type(value: Any) -> str:
    """What a value read from JSON is, in JSON's words ("an object", "null"), for messages about a file."""
    return "null" if value is None else JSON_TYPES.get(type(value), type(value).__name__)


def as_written(value: Any) -> str:
    """A value read from a file, for a message, as JSON writes it (true, null, [1]); a string quoted as elsewhere."""
    return repr(value) if isinstance(value, str) else json.dumps(value, ensure_ascii=False)[:80]


def _err(where: str, field: str, msg: str) -> DialogueError:
    return DialogueError(f"{where}: {field}: {msg}" if field else f"{where}: {msg}")


def parse_dialogue(
    obj: Any,
    where: str,
    label_sets: Mapping[str, list[str]] | None = None,
    report: LoadReport | None = None,
) -> Dialogue:
    """Build a `Dialogue` from one parsed JSON object; `where` (``file:line``) prefixes every error."""
    if not isinstance(obj, dict):
        raise _err(where, "", f"expected a JSON object with 'turns', got {json_type(obj)}")
    for key in obj:
        if key not in DIALOGUE_KEYS and report is not None:
            report.ignore_field(where, key, key)
    if "turns" not in obj:
        raise _err(where, "turns", "missing field")
    turns_raw = obj["turns"]
    if not isinstance(turns_raw, list):
        raise _err(where, "turns", f"expected a list of turns, got {json_type(turns_raw)}")
    if not turns_raw:
        raise _err(where, "turns", "a conversation needs at least one turn")
    dlg_id = obj.get("id")
    if dlg_id is not None and not isinstance(dlg_id, str):
        raise _err(where, "id", f"expected a string, got {as_written(dlg_id)}")
    if dlg_id is not None and is_blank(dlg_id):
        raise _err(where, "id", f"empty ({dlg_id!r}): name the conversation, or leave the id out")
    if dlg_id is not None:
        check_unicode(dlg_id, f"{where}: id")
    meta = parse_meta(obj.get("meta"), where)

    turns, turn_ids = [], {}
    for i, t in enumerate(turns_raw):
        turn = parse_turn(t, where, f"turns[{i}].", label_sets, report)
        if turn.id is not None and turn.id in turn_ids:
            raise _err(where, f"turns[{i}].id", f"{turn.id!r} is already the id of turns[{turn_ids[turn.id]}]")
        if turn.id is not None:
            turn_ids[turn.id] = i
        turns.append(turn)
    return Dialogue(turns=tuple(turns), id=dlg_id, meta=meta)


def parse_meta(meta: Any, where: str) -> dict:
    """A conversation's ``meta`` as read (None: an empty one); `where` (``file:line``) prefixes every error."""
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise _err(where, "meta", f"expected an object, got {json_type(meta)}")
    try:  # what the writer could not write back: a lone surrogate ("\ud800"), a number read as infinity (1e999)
        json.dumps(meta, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except UnicodeEncodeError as e:
        raise _err(where, "meta", f"not valid Unicode ({e.reason})") from None
    except ValueError:
        raise _err(where, "meta", "a number too large for JSON (read as infinity, e.g. 1e999)") from None
    return meta


def parse_turn(
    t: Any,
    where: str,
    at: str,
    label_sets: Mapping[str, list[str]] | None = None,
    report: LoadReport | None = None,
) -> Turn:
    """Build a `Turn` from one parsed turn object (a JSON turn, or a table's row); `where` (``file:line``) and `at`
    (the turn's place, ``turns[2].``, or "" for a row that is one turn) prefix every error."""
    if not isinstance(t, dict):
        raise _err(where, at.rstrip("."), f"expected an object with speaker and text, got {json_type(t)}")
    for key in t:
        if key not in TURN_KEYS and report is not None:
            report.ignore_field(where, f"{at}{key}", key)
    speaker = t.get("speaker")
    if speaker is None:
        raise _err(where, f"{at}speaker", "missing speaker")
    if isinstance(speaker, int) and not isinstance(speaker, bool):  # numeric speaker ids are common in exports
        if report is not None:
            report.add("integer_speaker", f"{where}: {at}speaker: integer id {speaker} read as the string {str(speaker)!r}")
        speaker = str(speaker)
    if not isinstance(speaker, str):
        raise _err(where, f"{at}speaker", f"expected a non-empty string (or an integer id), got {as_written(speaker)}")
    if is_blank(speaker):
        raise _err(where, f"{at}speaker", f"missing speaker (blank: {speaker!r})")
    if (trimmed := trim_invisible(speaker)) != speaker:  # " Ann " and "Ann" are one speaker to every speaker mask
        if report is not None:
            report.add("padded_speaker", f"{where}: {at}speaker: {speaker!r} read as {trimmed!r}")
        speaker = trimmed
    if (composed := speaker_name(speaker)) != speaker:  # so are "José" with a combining accent and "José"
        if report is not None:
            report.add("decomposed_speaker", f"{where}: {at}speaker: {speaker!r} read composed (Unicode NFC) as {composed!r}")
        speaker = composed
    if "text" not in t:
        raise _err(where, f"{at}text", "missing text")
    text = t["text"]
    if not isinstance(text, str):
        raise _err(where, f"{at}text", f"expected a string, got {json_type(text)}")
    if is_blank(text):
        raise _err(where, f"{at}text", f"empty text ({text!r})")
    labels_raw = t.get("labels")
    if labels_raw is None:
        labels: dict[str, str] = {}
    elif isinstance(labels_raw, dict):
        labels = {}
        for written, label in labels_raw.items():
            kind = _label_kind(written, where, f"{at}labels", label_sets, report)
            if (label := _label(label, where, f"{at}labels.{written}", report)) is not None:
                if kind in labels:
                    raise _err(where, f"{at}labels", f"label kind {kind!r} named twice (once with spaces at its ends)")
                labels[kind] = label
    else:
        raise _err(where, f"{at}labels", f"expected an object of kind -> label, got {json_type(labels_raw)}")
    for kind in CONVENIENCE_LABELS:
        if kind in t:
            label = _label(t[kind], where, f"{at}{kind}", report)
            if label is None:
                continue
            if kind in labels and labels[kind] != label:
                raise _err(where, f"{at}{kind}", f"{label!r} disagrees with labels.{kind} = {labels[kind]!r}")
            labels[kind] = label
    if label_sets:
        for kind, label in labels.items():
            allowed = label_sets.get(kind)
            if allowed is not None and label not in allowed:
                field = f"{at}labels.{kind}" if isinstance(labels_raw, dict) and kind in labels_raw else f"{at}{kind}"
                same = [a for a in allowed if a.casefold() == label.casefold()]  # capitals count: say so
                hint = f" (the label set has {same[0]!r}: capitals count)" if same else ""
                raise UnknownLabelError(f"{where}: {field}: unknown label {label!r}{hint}; allowed: {', '.join(allowed)}")
    turn_id = t.get("id")
    if turn_id is not None and not isinstance(turn_id, str):
        raise _err(where, f"{at}id", f"expected a string, got {as_written(turn_id)}")
    if turn_id is not None and is_blank(turn_id):
        raise _err(where, f"{at}id", f"empty ({turn_id!r}): name the turn, or leave the id out")
    try:
        return Turn(speaker=speaker, text=text, labels=labels, id=turn_id)
    except DialogueError as e:  # what only the Turn checks (invalid Unicode): with the line and turn
        raise DialogueError(f"{where}: {at}{e}") from None


TABLE_HINT = ("; the file looks like a table (CSV or tab-separated), not JSON Lines: one conversation a line, "
              '{"turns": [{"speaker": "A", "text": "Hi!", "emotion": "joy"}, ...]}; a file whose name does not end in '
              ".jsonl (.csv, .tsv) is read as a table of utterances with a header line (docs/data-format.md; response "
              "selection also reads tab-separated files: --task response-selection)")


ONE_DOCUMENT_HINT = ("; the file looks like one JSON document: write one conversation per line (JSON Lines), "
                     "e.g. jq -c '.[]' FILE.json > FILE.jsonl for an array of conversations")


def _label(value, where: str, field: str, report: LoadReport | None) -> str | None:
    """A turn's label as read: None for null (counted, `null_label`); a string without the spaces and invisible
    characters at its ends (" joy" is the label joy; counted, `padded_label`), its characters composed (Unicode NFC:
    "alegría" typed with a combining accent is one label with "alegría"; counted, `decomposed_label`); anything else,
    or a blank string, an error."""
    if value is None:  # exports of partly labelled data write null for "no label"
        _count_null_label(report, where, field)
        return None
    if not isinstance(value, str) or is_blank(value):
        number = isinstance(value, int | float) and not isinstance(value, bool)  # a label 1: write it "1"
        raise _err(where, field, f"expected a non-empty string label, got {as_written(value)}"
                   + (f" (a number: write it as a string, \"{as_written(value)}\")" if number else ""))
    check_unicode(value, f"{where}: {field}")
    if (trimmed := trim_invisible(value)) != value:
        if report is not None:
            report.add("padded_label", f"{where}: {field}: {value!r} read as {trimmed!r}")
    return _composed(trimmed, where, field, report)


def _composed(label: str, where: str, field: str, report: LoadReport | None) -> str:
    """A label or a label kind with its characters composed (`label_name`), counted where that changed it."""
    if (composed := label_name(label)) != label and report is not None:
        report.add("decomposed_label", f"{where}: {field}: {label!r} read composed (Unicode NFC) as {composed!r}")
    return composed


def _label_kind(kind: str, where: str, field: str, label_sets: Mapping[str, Any] | None, report: LoadReport | None) -> str:
    """A label kind as read: without the spaces and invisible characters at its ends (counted, `padded_label`), as
    labels are; one that is a kind of `label_sets` written in other capitals (``Emotion``) is refused: kinds are
    compared as written, so its labels would be read as no label of the kind trained on."""
    if is_blank(kind):
        raise _err(where, field, f"label kind {kind!r}: name what the label is of (e.g. \"emotion\": \"joy\")")
    check_unicode(kind, f"{where}: {field}")
    if (trimmed := trim_invisible(kind)) != kind and report is not None:
        report.add("padded_label", f"{where}: {field}: label kind {kind!r} read as {trimmed!r}")
    trimmed = _composed(trimmed, where, field, report)
    if label_sets and trimmed not in label_sets:
        if same := next((known for known in label_sets if known.casefold() == trimmed.casefold()), None):
            raise _err(where, f"{field}.{kind}", f"label kind {kind!r} is {same!r} written otherwise; label kinds are "
                       f"compared as written: write {same!r}")
    return trimmed


def _count_null_label(report: LoadReport | None, where: str, field: str) -> None:
    if report is not None:
        report.add("null_label", f"{where}: {field}: null, read as no label of this kind")


def read_jsonl(
    path: str | os.PathLike[str],
    label_sets: Mapping[str, list[str]] | None = None,
    report: LoadReport | None = None,
) -> DialogueList:
    """Read a JSON Lines conversation file; the result is a list with a ``.report`` attribute.

    With `label_sets` (``{"emotion": ["joy", ...]}``), labels of a listed kind must be in its list;
    kinds not listed are not checked.
    """
    report = report if report is not None else LoadReport(source=str(path))
    out = DialogueList(report=report)
    for lineno, dialogue in iter_jsonl(path, label_sets, report):
        out.append(dialogue)
        out.lines.append(lineno)
    return out


class FileConversations:
    """A conversation file's conversations, read anew, a conversation at a time, at every pass over them (`iter_jsonl`):
    for a writer that goes through them twice (`turnformer.data.table.write_table`) without holding the file. The
    load report is the first pass's, logged once."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.report = LoadReport(source=str(path))
        self.passes = 0

    def __iter__(self) -> Iterator[Dialogue]:
        self.passes += 1
        report = self.report if self.passes == 1 else LoadReport(source=str(self.path))
        return (dialogue for _, dialogue in iter_jsonl(self.path, report=report, summary=self.passes == 1))


def iter_jsonl(
    path: str | os.PathLike[str],
    label_sets: Mapping[str, list[str]] | None = None,
    report: LoadReport | None = None,
    summary: bool = True,
) -> Iterator[tuple[int, Dialogue]]:
    """`read_jsonl` a conversation at a time: ``(line, dialogue)``, the file read a line at a time (what a file of any
    length needs: `turnformer.tasks.common.conversation_blocks`). The checks are `read_jsonl`'s, the one on ids
    across the file included; with `summary`, the report's summary is logged once the last line is read."""
    for kind, allowed in (label_sets or {}).items():
        if isinstance(allowed, str) or not isinstance(allowed, list | tuple | set | frozenset):  # a string would match substrings
            raise TypeError(f"label_sets[{kind!r}]: expected a list of label names, got {type(allowed).__name__}")
    path = Path(path)
    report = report if report is not None else LoadReport(source=str(path))
    line_of_id: dict[str, int] = {}  # predictions are keyed by conversation id: two conversations cannot share one
    kinds: dict[str, tuple[str, Any]] = {}  # a label kind in small letters -> as first written, and the line
    read = _table_dialogues if reads_as_table(path) else _json_dialogues
    for lineno, dialogue in read(path, label_sets, report):
        where = f"{path}:{lineno}"
        if dialogue.id is not None:
            if dialogue.id in line_of_id:
                raise _err(where, "id", f"{dialogue.id!r} is already the id of the conversation on line {line_of_id[dialogue.id]}")
            line_of_id[dialogue.id] = lineno
        if clash := other_spelling(dialogue, kinds, lineno):  # the turns of one spelling would be read as unlabelled
            _, kind, first, line = clash                          # by a model of the other
            raise _err(where, "", f"label kind {kind!r} is written {first!r} on line {line}; label kinds are compared "
                       "as written: write one spelling throughout")
        yield lineno, dialogue
    if summary and report:  # one line, where something was repaired, skipped or ignored (the command shows it)
        logger.log(logging.WARNING if report.ignored_fields else logging.INFO, "%s", report.summary())


def _json_dialogues(path: Path, label_sets: Mapping[str, list[str]] | None, report: LoadReport) -> Iterator[tuple[int, Dialogue]]:
    """The conversations of a JSON Lines file, ``(line, dialogue)``, a line at a time."""
    for lineno, line in iter_lines(path, report):
        where = f"{path}:{lineno}"
        if not line.strip():
            report.add("blank_line", f"{where}: blank line skipped")
            continue
        try:
            obj = read_json(line)
        except json.JSONDecodeError as err:
            hint = (NUL_HINT if "\x00" in line else
                    ONE_DOCUMENT_HINT if lineno == 1 and (line.strip() == "{" or line.lstrip().startswith("[")) else
                    TABLE_HINT if lineno == 1 and not line.lstrip().startswith("{") and ("," in line or "\t" in line) else "")
            raise DialogueError(f"{where}: {json_fault(err)}{hint}") from None
        except DuplicateKeyError as err:  # which of the line's objects: the column of the key's second value
            at = duplicate_key_at(line)
            raise DialogueError(f"{where} (column {at[1]}): {err}" if at else f"{where}: {err}") from None
        except ValueError as err:  # NaN or Infinity, which JSON does not have
            raise DialogueError(f"{where}: {err}") from None
        except RecursionError:
            raise DialogueError(f"{where}: JSON nested too deeply to be a conversation") from None
        if isinstance(obj, list):  # a whole JSON array on one line: name the format rather than the type
            hint = ONE_DOCUMENT_HINT if lineno == 1 else " (one conversation per line)"
            raise DialogueError(f"{where}: expected a JSON object with 'turns', got a JSON array{hint}")
        if is_item(obj):  # one of MuTual's items (a MuTual file is one such line): its context, candidates in meta
            yield lineno, item_to_dialogue(parse_item(obj, where, report, where))
            continue
        yield lineno, parse_dialogue(obj, where, label_sets, report)


def _table_dialogues(path: Path, label_sets: Mapping[str, list[str]] | None, report: LoadReport) -> Iterator[tuple[int, Dialogue]]:
    """The conversations of a table (`turnformer.data.table`), ``(line of the first row, dialogue)``, each row's turn
    checked as a JSON turn is, its errors naming the row's line."""
    for conversation in iter_table(path, report):
        turns = [parse_turn(turn, f"{path}:{line}", "", label_sets, report) for line, turn in conversation.rows]
        meta = parse_meta(conversation.meta, f"{path}:{conversation.line}")
        yield conversation.line, Dialogue(turns=tuple(turns), id=conversation.id, meta=meta)


def refuse_selection_items(dialogues: "DialogueList", source, reader: str) -> None:
    """Raise, naming its line, where a file read for `reader` (a model that labels utterances: "an emotion-recognition
    (erc) model, ...") holds a response-selection item (``meta.candidates``), whose candidates it would ignore."""
    for dialogue, line in zip(dialogues, getattr(dialogues, "lines", ())):
        refuse_selection_item(dialogue, line, source, reader)


def refuse_selection_item(dialogue: Dialogue, line: int, source, reader: str) -> None:
    """`refuse_selection_items` for one conversation, on `line` of `source`."""
    if "candidates" in (dialogue.meta or {}):
        raise DialogueError(f"{source}:{line}: a response-selection item (meta.candidates); the checkpoint is {reader}: "
                            "give it conversations without candidates, or a response-selection checkpoint")


def _as_dialogue(d: Any, index: int) -> Dialogue:
    if isinstance(d, Dialogue):
        return d
    if isinstance(d, ResponseSelectionItem):
        return item_to_dialogue(d)
    raise DialogueError(f"item {index}: expected a Dialogue, got {type(d).__name__}")


def dumps_dialogue(d: Dialogue) -> str:
    """One conversation as one JSON line (no newline), UTF-8 text kept readable."""
    try:
        return json.dumps(d.to_dict(), ensure_ascii=False, allow_nan=False, separators=(", ", ": "))
    except (TypeError, ValueError) as err:
        raise DialogueError(f"dialogue {d.id!r}: cannot be written as JSON: {err}") from None


def write_jsonl(dialogues: Iterable[Dialogue | ResponseSelectionItem], path: str | os.PathLike[str]) -> int:
    """Write conversations to `path`, one a line, atomically, a conversation at a time (`write_chunks`: the file
    appears whole after the last one, and a conversation refused on the way leaves `path` as it was); returns the
    number written.

    Response selection items are written as their context with ``meta.candidates``/``meta.answer``.
    """
    path = check_output_file(Path(path))
    written = 0

    def lines() -> Iterator[bytes]:
        nonlocal written
        for i, dialogue in enumerate(with_unique_ids(_as_dialogue(d, i) for i, d in enumerate(dialogues))):
            try:
                yield dumps_dialogue(dialogue).encode("utf-8") + b"\n"
            except UnicodeEncodeError as err:
                raise DialogueError(f"dialogue {i} ({dialogue.id!r}): its meta is not valid Unicode ({err.reason})") from None
            written += 1

    write_chunks(path, lines())
    return written


__all__ = ["DialogueList", "FileConversations", "dumps_dialogue", "iter_jsonl", "parse_dialogue", "parse_turn", "read_jsonl", "refuse_selection_items", "write_jsonl"]
