"""Conversation tables: a CSV or tab-separated file with a header line and one utterance a row (``docs/data-format.md``).

::

    conversation_id,speaker,text,emotion
    c1,Ann,Hi!,joy
    c1,Bob,"Hello, Ann.",neutral

Columns are told by their names in the header, in any letter case, with spaces, hyphens, dots and underscores alike
(``Dialogue_ID``, ``dialogue id`` and ``DialogueID`` are ``dialogue_id``); `ROLES` lists the names of each:

* the text and the speaker (required);
* the conversation: its rows are consecutive, and its value is the conversation's id; without such a column the
  file is one conversation (counted, ``one_conversation``);
* the utterance's place (``utterance_id``, ``turn``...): its values are the turns' ids, unique in a conversation (an
  empty cell: no id); where all are whole numbers they put the conversation's rows in their order (counted where the
  file had them in another, ``utterances_reordered``), else the file's order is kept;
* labels: ``emotion``, ``act`` (or ``act_tag``, ``dialogue_act``...), ``sentiment``, and ``label_KIND`` (or
  ``label:KIND``) for a kind of one's own; an empty cell is no label (counted, ``empty_label``);
* ``meta``: the conversation's meta, a JSON object, on its first row (any later row's is empty or the same).

A row that repeats the header (tables written one after the other) is skipped and counted (``header_again``); another
header line among the rows (a row that names a text and a speaker column, and whose cell under the text column is a
column's name) is an error.

Every other column is ignored and counted (``unknown_field``). The delimiter is the first of tab, comma and semicolon
that splits the header into a text and a speaker column. A file is read as a table where its name does not say JSON
Lines (``.jsonl``) and its first line is not JSON but holds a delimiter, or its name says a table (`reads_as_table`).
The file is read a row at a time (gzip-compressed or not, as JSON Lines are), a conversation held until its last row.

This module reads the table's shape (header, rows, conversations); each row's values are then checked as a JSON
turn's are (`turnformer.data.jsonl.parse_turn`, in `turnformer.data.jsonl.iter_jsonl`), and errors name the row's line.
`write_table` writes conversations as such a table (CSV, or tab-separated for a ``.tsv`` name), which reads back as
the conversations written.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Iterator

from turnformer.data._io import NUL_HINT, first_line, iter_lines, read_json, write_chunks
from turnformer.data.report import LoadReport
from turnformer.dialogue import (Dialogue, DialogueError, ResponseSelectionItem, is_blank, output_names, with_unique_ids,
                                 trim_invisible)

DELIMITERS = ("\t", ",", ";")
NAME_LENGTH = 40  # no column name of `ROLES` is longer, spaces and all
# the names of conversation files in a folder given for its files (`turnformer data stats FOLDER`)
CONVERSATION_FILES = (".jsonl", ".jsonl.gz", ".csv", ".csv.gz", ".tsv", ".tsv.gz")

# each role's column names, as `column_key` writes them
ROLES = {
    "text": ("text", "utterance", "utterance_text", "sentence", "message", "msg", "content", "transcript", "body"),
    "speaker": ("speaker", "speaker_id", "speaker_name", "role", "participant", "caller", "sender", "author"),
    "conversation": ("conversation_id", "conversation", "conversation_no", "dialogue_id", "dialogue", "dialogue_no",
                     "dialog_id", "dialog", "conv_id", "session_id", "thread_id", "chat_id", "call_id"),
    "utterance": ("utterance_id", "utterance_index", "utterance_no", "turn_id", "turn", "turn_index", "turn_number",
                  "turn_no"),
    "emotion": ("emotion",),
    "act": ("act", "act_tag", "dialogue_act", "dialog_act", "da", "da_tag"),
    "sentiment": ("sentiment",),
    "meta": ("meta",),
}
LABEL_KINDS = ("emotion", "act", "sentiment")
OWN_KIND = re.compile(r"labels?[\s_\-.:]+(?P<kind>.+)", re.IGNORECASE)  # label_topic, label:topic -> topic


def column_key(name: str) -> str:
    """A header name as `ROLES` writes it: small letters, runs of spaces, hyphens, dots, colons and underscores as one
    underscore, a capital after a small letter or digit starting a word, none at the ends (``Dialogue_ID``,
    ``dialogue id`` and ``DialogueID`` -> ``dialogue_id``)."""
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", trim_invisible(name))
    return re.sub(r"[\s_\-.:]+", "_", words.lower()).strip("_")


def reads_as_table(path: Path) -> bool:
    """Whether a conversation file is read as a table: its name does not say JSON Lines (``.jsonl``, ``.jsonl.gz``),
    and its first line that is not blank is not JSON (``{``, ``[``) but holds a tab, comma or semicolon, or the name
    ends in .csv or .tsv (then .gz), whose header is then refused by name where it names no text and speaker column."""
    if Path(path).name.lower().endswith((".jsonl", ".jsonl.gz")):
        return False
    line = first_line(Path(path)).strip()
    return bool(line) and line[0] not in "{[" and (any(d in line for d in DELIMITERS)
                                                    or Path(path).name.lower().endswith(TABLE_FILES))


@dataclass
class Columns:
    """Where each role is in the header: `roles` maps a role (`ROLES`) to its column; `kinds` a label column to its
    label kind; `names` the header as written."""

    names: list[str]
    roles: dict[str, int]
    kinds: dict[int, str] = field(default_factory=dict)

    def name(self, role: str) -> str:
        return self.names[self.roles[role]]


def columns(header: list[str], where: str) -> Columns:
    """The roles of a header's columns; two columns of one role (``text`` and ``utterance``; ``emotion`` and
    ``label_emotion``) are an error, since which one holds the data cannot be told."""
    roles: dict[str, int] = {}
    kinds: dict[int, str] = {}
    for i, name in enumerate(header):
        key = column_key(name)
        if key in ("label", "labels", "class", "tag"):
            raise DialogueError(f"{where}: column {name!r}: say what its labels are of: name it emotion, act or sentiment, "
                                "or label_KIND for a kind of your own (label_topic)")
        role = next((r for r, names in ROLES.items() if key in names), None)
        own = OWN_KIND.fullmatch(trim_invisible(name)) if role is None else None
        kind = role if role in LABEL_KINDS else trim_invisible(own["kind"]) if own else None
        role = f"label {kind}" if kind is not None else role
        if role is None:
            continue
        if role in roles:
            raise DialogueError(f"{where}: columns {header[roles[role]]!r} and {name!r} are both the {role}: keep one, "
                                "or rename the other")
        roles[role] = i
        if kind is not None:
            kinds[i] = kind
    return Columns(names=header, roles=roles, kinds=kinds)


def required_columns_message(where: str, cells: list[str]) -> str:
    return (f"{where}: a conversation table needs a header line naming its text column ({', '.join(ROLES['text'])}) "
            f"and its speaker column ({', '.join(ROLES['speaker'])}), separated by tabs, commas or semicolons; its first "
            f"line reads {cells!r}. Or write JSON Lines, one conversation a line, and name the file .jsonl "
            "(docs/data-format.md)")


def header(line: str, where: str, report: LoadReport) -> tuple[str, Columns]:
    """The delimiter and the columns of a table's header `line` (at `where`, ``file:line``), what it leaves out counted
    in `report`."""
    for delimiter in DELIMITERS:
        cols = columns(next(csv.reader([line], delimiter=delimiter)), where)
        if "text" in cols.roles and "speaker" in cols.roles:
            break
    else:
        if "\x00" in line:
            raise DialogueError(f"{where}: not a conversation table{NUL_HINT}")
        raise DialogueError(required_columns_message(where, next(csv.reader([line]))))
    for i, name in enumerate(cols.names):
        if i not in cols.roles.values():
            report.ignore_field(where, f"column {name!r}{id_hint(name, cols)}", name)
    if "conversation" not in cols.roles:
        report.add("one_conversation", f"{where}: no conversation column ({', '.join(ROLES['conversation'])}): the file "
                   "read as one conversation")
    return delimiter, cols


def id_hint(name: str, cols: Columns) -> str:
    """For an ignored column named like an id (``id``, ``scene_id``) in a table without a conversation column, what
    to call it to be read: the file is otherwise one conversation."""
    key = column_key(name)
    if "conversation" in cols.roles or not (key == "id" or key.endswith("_id")):
        return ""
    place = "" if "utterance" in cols.roles or key != "id" else "; the utterance's place? utterance_id"
    return f" (the row's conversation? name the column conversation_id{place})"


@dataclass
class TableConversation:
    """One conversation of a table: the line its first row starts on, its id (None for a file without a
    conversation column) and its rows, each ``(line, turn)``: a turn object as a JSON turn writes it
    (speaker, text, labels, id), for `turnformer.data.jsonl.parse_turn`; and its meta as the meta column's JSON reads
    (None without one), for `turnformer.data.jsonl.parse_meta`."""

    line: int
    id: str | None
    rows: list[tuple[int, dict]]
    meta: Any = None


def iter_table(path: Path, report: LoadReport) -> Iterator[TableConversation]:
    """The conversations of a table, in the file's order, a row at a time (module docstring)."""
    path = Path(path)
    numbered = iter_lines(path, report)  # gzip, UTF-8, a byte-order mark and line ends as in JSON Lines
    start, header_line = next(((n, line) for n, line in numbered if line.strip()), (0, ""))
    if not header_line:
        return
    lines = (line + "\n" for _, line in numbered)
    delimiter, cols = header(header_line, f"{path}:{start}", report)
    csv.field_size_limit(max(csv.field_size_limit(), 1 << 30))  # a field may hold a long text (Python's limit: 128K)
    reader = csv.reader(lines, delimiter=delimiter, strict=True)
    done: dict[str, int] = {}  # a finished conversation's id -> its first line
    conversation: TableConversation | None = None
    line_of_place: dict[str, int] = {}  # in the conversation read: an utterance's place -> its line
    while True:
        line = start + reader.line_num + 1  # where the row starts (a quoted field may hold line breaks)
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as err:
            raise DialogueError(f"{path}:{start + reader.line_num}: malformed {table_name(delimiter)} in the row from line "
                                f"{line}: {err}{' (a quote opened there is not closed)' if 'end of data' in str(err) else ''}") from None
        if not row or all(is_blank(value) for value in row):
            report.add("blank_line", f"{path}:{line}: blank row skipped")
            continue
        text = row[cols.roles["text"]] if len(row) > cols.roles["text"] else ""
        if row == cols.names:  # tables written one after the other
            report.add("header_again", f"{path}:{line}: the header line again, skipped")
            continue
        if is_header(row, text):
            raise DialogueError(f"{path}:{line}: a header line ({', '.join(row)}) among the rows, other than the first "
                                f"({', '.join(cols.names)}): tables of other columns written one after the other? Give "
                                "each table its own file, or write them under one header")
        if len(row) != len(cols.names):
            raise DialogueError(f"{path}:{line}: expected {len(cols.names)} fields ({', '.join(cols.names)}), got "
                                f"{len(row)}")
        cid = cell(row, cols, "conversation", path, line, "every row names its conversation")
        if conversation is None or cid != conversation.id:
            if cid in done:
                raise DialogueError(
                    f"{path}:{line}: {cols.name('conversation')} {cid!r} again, after other conversations (its rows "
                    f"began on line {done[cid]}): a conversation's rows must be consecutive (sort the file by "
                    f"{cols.name('conversation')}, keeping each conversation's order)")
            if conversation is not None:
                done[conversation.id] = conversation.line
                yield ordered(conversation, cols, path, report)
            conversation = TableConversation(line=line, id=cid, rows=[], meta=meta_cell(row, cols, path, line))
            line_of_place = {}
        elif (meta := meta_cell(row, cols, path, line)) is not None and meta != conversation.meta:
            raise DialogueError(f"{path}:{line}: {cols.name('meta')}: differs from the meta of {conversation_name(cid)} on "
                                f"line {conversation.line}: a conversation has one meta (on its first row, or the same on each)")
        turn = row_turn(row, cols, path, line, report)
        if (place := turn.get("id")) is not None:
            if place in line_of_place:
                raise DialogueError(f"{path}:{line}: {cols.name('utterance')} {place!r} again in {conversation_name(cid)} "
                                    f"(first on line {line_of_place[place]}): an utterance's place is unique in its "
                                    "conversation (a column of other values, such as a speaker's turn shared by several "
                                    "utterances: rename it, and it is ignored)")
            line_of_place[place] = line
        conversation.rows.append((line, turn))
    if conversation is not None:
        yield ordered(conversation, cols, path, report)


def is_header(row: list[str], text: str) -> bool:
    """Whether a row is another table's header: its cells name a text and a speaker column, and its `text` (the cell
    under the table's text column) is a column's name too: a row where a "caller" says "The refund came through" with
    the emotion "content" names both, and is a row. Cheap, as it looks at every row: a cell's letters and digits alone,
    in small letters, against `ROLES`' names written so."""
    if len(text) > NAME_LENGTH or squashed(text) not in COLUMN_NAMES:  # a long text is no column's name
        return False
    words = {squashed(value) for value in row if len(value) <= NAME_LENGTH}
    return not SQUASHED_NAMES["text"].isdisjoint(words) and not SQUASHED_NAMES["speaker"].isdisjoint(words)


def squashed(name: str) -> str:
    """A name's letters and digits alone, in small letters (``Dialogue_ID`` -> ``dialogueid``)."""
    return re.sub(r"[\W_]+", "", name).lower()


SQUASHED_NAMES = {role: frozenset(map(squashed, names)) for role, names in ROLES.items()}  # `is_header`
COLUMN_NAMES = frozenset().union(*SQUASHED_NAMES.values())


def row_turn(row: list[str], cols: Columns, path: Path, line: int, report: LoadReport) -> dict:
    """A row as a JSON turn writes it: speaker, text, labels (an empty cell is none, counted) and id (its place)."""
    turn: dict = {"speaker": row[cols.roles["speaker"]], "text": row[cols.roles["text"]], "labels": {}}
    for i, kind in cols.kinds.items():
        if is_blank(row[i]):
            report.add("empty_label", f"{path}:{line}: {cols.names[i]}: empty, read as no label of this kind")
        else:
            turn["labels"][kind] = row[i]
    if (place := cell(row, cols, "utterance", path, line)) is not None:
        turn["id"] = place
    return turn


def table_name(delimiter: str) -> str:
    return "tab-separated table" if delimiter == "\t" else "CSV"


def conversation_name(cid: str | None) -> str:
    return f"conversation {cid!r}" if cid is not None else "the conversation"


def cell(row: list[str], cols: Columns, role: str, path: Path, line: int, blank: str | None = None) -> str | None:
    """The value of `role`'s column in `row`, without spaces at its ends; None where the header has no such column, or
    it is blank and `blank` is None; else a blank one is an error (`blank` says what to do)."""
    if role not in cols.roles:
        return None
    value = trim_invisible(row[cols.roles[role]])
    if is_blank(value) and blank is None:
        return None
    if is_blank(value):
        raise DialogueError(f"{path}:{line}: {cols.name(role)}: empty: {blank}")
    return value


def meta_cell(row: list[str], cols: Columns, path: Path, line: int) -> Any:
    """The JSON a row's meta cell holds (None where it is blank or the header has no meta column)."""
    if "meta" not in cols.roles or is_blank(text := row[cols.roles["meta"]]):
        return None
    try:
        return read_json(text)
    except ValueError as err:  # malformed JSON, NaN
        raise DialogueError(f"{path}:{line}: {cols.name('meta')}: not JSON ({err}): the conversation's meta is a JSON "
                            "object") from None


def ordered(conversation: TableConversation, cols: Columns, path: Path, report: LoadReport) -> TableConversation:
    """`conversation` with its rows in the order of their places where every place is a whole number."""
    if not whole_numbers([turn.get("id") for _, turn in conversation.rows]):
        return conversation
    rows = sorted(conversation.rows, key=lambda row: int(row[1]["id"]))
    if rows != conversation.rows:
        report.add("utterances_reordered", f"{path}:{conversation.line}: {conversation_name(conversation.id)}: rows not "
                   f"in {cols.name('utterance')} order; sorted")
    return replace(conversation, rows=rows)


def whole_numbers(places: list[str | None]) -> bool:
    """Whether every place of a conversation's rows is a whole number, which puts the rows in their order."""
    return all(p is not None and p.isascii() and p.isdigit() for p in places)


# the names a table is written under (`write_table`); tab-separated for .tsv
TABLE_FILES = (".csv", ".csv.gz", ".tsv", ".tsv.gz")


def writes_as_table(path: Path | str) -> bool:
    """Whether an output file is written as a table: its name ends in .csv or .tsv (then .gz, compressed)."""
    return str(path) != "-" and Path(path).name.lower().endswith(TABLE_FILES)


def write_table(dialogues: Iterable[Dialogue], path: Path | str) -> int:
    """Write conversations as a table, one utterance a row, atomically (`write_chunks`: a temporary file renamed, gzip
    for a name ending in .gz); returns the conversations written. The columns: conversation_id (a conversation without
    an id under its place, as outputs name it), turn_id (where any turn has an id), speaker, text, a column per label
    kind (``emotion``, ``act``, ``sentiment``, else ``label_KIND``), and meta (JSON, where any conversation has one).
    What a table would not give back is refused before a row is written, naming the conversation: response-selection
    items (write them as JSON Lines), a carriage return in a value, an id with spaces at its ends, whole-number turn
    ids out of order (the reader would sort them), a row the reader would take for a header (`is_header`), a label
    kind that starts with a separator, two conversations (or two turns of one) with one id. `dialogues` is gone through twice, the columns found in the first pass and the rows
    written in the second, a conversation at a time: give a collection, or what reads a file anew at each pass
    (`turnformer.data.jsonl.FileConversations`) for a file of any length."""
    if isinstance(dialogues, Iterator):  # a one-pass iterator: held
        dialogues = list(dialogues)
    kinds: dict[str, None] = {}
    ids: set[str] = set()
    with_ids = with_meta = False
    count = 0
    for i, dialogue in enumerate(with_unique_ids(writable(dialogues))):
        kinds.update(dict.fromkeys(kind for turn in dialogue.turns for kind in turn.labels))
        with_ids = with_ids or any(turn.id is not None for turn in dialogue.turns)
        with_meta = with_meta or bool(dialogue.meta)
        if dialogue.id is not None:
            ids.add(dialogue.id)
        count = i + 1
    header = ["conversation_id", *(["turn_id"] if with_ids else []), "speaker", "text", *map(kind_column, kinds),
              *(["meta"] if with_meta else [])]
    delimiter = "\t" if ".tsv" in Path(path).name.lower() else ","

    def rows() -> Iterator[bytes]:  # a conversation's rows at a time
        out = io.StringIO()
        writer = csv.writer(out, delimiter=delimiter, lineterminator="\n")
        writer.writerow(header)
        n = 0
        for n, dialogue in enumerate(dialogues, 1):
            name = output_names([dialogue.id], n - 1, ids)[0]  # a place never spells another one's id
            meta = json.dumps(dialogue.meta, ensure_ascii=False, allow_nan=False) if dialogue.meta else ""
            for turn in dialogue.turns:
                writer.writerow([name, *([turn.id or ""] if with_ids else []), turn.speaker, turn.text,
                                 *(turn.labels.get(kind, "") for kind in kinds), *([meta] if with_meta else [])])
            yield out.getvalue().encode("utf-8")
            out.seek(0)
            out.truncate()
        if n != count:
            raise DialogueError(f"{path}: {count} conversations in the first pass, {n} in the second: the file read "
                                "changed while it was written")
        yield out.getvalue().encode("utf-8")  # the header, where there was no conversation

    write_chunks(Path(path), rows())
    return count


def kind_column(kind: str) -> str:
    """The column a label kind is written in: its name where it is one of `LABEL_KINDS`, else ``label_KIND``."""
    if kind != trim_invisible(kind) or re.match(r"[\s_\-.:]", kind):
        raise DialogueError(f"label kind {kind!r}: a table's label_KIND column would read it without what starts it; "
                            "write JSON Lines")
    return kind if kind in LABEL_KINDS else f"label_{kind}"


def writable(dialogues: Iterable[Dialogue]) -> Iterator[Dialogue]:
    """`dialogues`, each once `check_writable` has let it through (named by its id, or its place)."""
    for i, dialogue in enumerate(dialogues):
        check_writable(dialogue, dialogue.id if getattr(dialogue, "id", None) is not None else str(i))
        yield dialogue


def check_writable(dialogue: Dialogue, name: str) -> None:
    """Refuse a conversation a table would not give back as it is (`write_table`)."""
    where = f"conversation {name!r}"
    if isinstance(dialogue, ResponseSelectionItem) or "candidates" in dialogue.meta:
        raise DialogueError(f"{where}: a response-selection item (candidates): write items as JSON Lines (.jsonl)")
    ids = [dialogue.id] + [turn.id for turn in dialogue.turns]
    if any(i is not None and i != trim_invisible(i) for i in ids):
        raise DialogueError(f"{where}: an id with spaces at its ends, which a table reads without them: write JSON Lines")
    values = [v for turn in dialogue.turns for v in (turn.speaker, turn.text, *turn.labels.values())]
    if any("\r" in v for v in values + [i for i in ids if i is not None]):
        raise DialogueError(f"{where}: a carriage return (\\r) in a value, which a table's lines do not keep: write "
                            "JSON Lines")
    for i, turn in enumerate(dialogue.turns):
        if is_header(row := [name, turn.id or "", turn.speaker, turn.text, *turn.labels.values()], turn.text):
            raise DialogueError(f"{where}: turn {i}: its row ({', '.join(row)}) would read as another table's header "
                                "line (its text is a column's name, beside a speaker and a text column's names): write "
                                "JSON Lines")
    places = [turn.id for turn in dialogue.turns]
    if whole_numbers(places) and places != sorted(places, key=int):
        raise DialogueError(f"{where}: its turn ids are whole numbers out of order, which a table reads as the turns' "
                            "order: write JSON Lines")


__all__ = ["CONVERSATION_FILES", "ROLES", "TABLE_FILES", "TableConversation", "column_key", "iter_table",
           "reads_as_table", "write_table", "writes_as_table"]
