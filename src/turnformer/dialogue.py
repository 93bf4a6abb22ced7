"""Conversations as data: `Turn` and `Dialogue`, validated on construction.

A turn is one utterance: who said it, what was said, and optional labels keyed by kind
(``{"emotion": "joy", "act": "inform"}``). A dialogue is an ordered, non-empty tuple of turns.
Every check raises `DialogueError`, whose message names where the bad value came from
(``source``: a file and line, a dataset split, or a field path), so that a user can fix the input.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from numbers import Integral
from typing import Any, Iterable, Iterator, Mapping, Sequence


class DialogueError(ValueError):
    """Invalid conversation data; the message names the file, line or field at fault."""


class UnknownLabelError(DialogueError):
    """A label outside the label set a file was read with (a trained model's, or its training file's)."""


CONVENIENCE_LABELS = ("emotion", "act", "sentiment")  # a turn's fields read as labels of that kind
TURN_KEYS = frozenset({"speaker", "text", "labels", "id", *CONVENIENCE_LABELS})


def is_blank(text: str) -> bool:
    """No visible character: only whitespace, control or format characters (zero-width spaces, byte-order marks),
    which the tokenizers drop, leaving an empty utterance. A lone combining mark is text (a model may read nothing of
    it: the commands say so, and label it from its context)."""
    return all(map(invisible, text))


def invisible(c: str) -> bool:
    """Whether a character is whitespace, a control or a format character (zero-width, a byte-order mark)."""
    return c.isspace() or unicodedata.category(c) in ("Cc", "Cf")


def trim_invisible(name: str) -> str:
    """`name` without the spaces and invisible characters (zero-width, byte-order marks, controls) at its ends; a
    blank name stays as it is. Looks at its ends only (a row's every value goes through it)."""
    if name and not invisible(name[0]) and not invisible(name[-1]):  # the most names: nothing to trim
        return name
    start = next((i for i, c in enumerate(name) if not invisible(c)), None)
    if start is None:
        return name
    end = next(i for i in range(len(name) - 1, start - 1, -1) if not invisible(name[i]))
    return name[start : end + 1]


def speaker_name(name: str) -> str:
    """A speaker's name as every speaker mask compares it: without the spaces and invisible characters at its ends
    (`trim_invisible`), its characters composed (Unicode NFC: "José" typed with a combining accent is "José")."""
    return unicodedata.normalize("NFC", trim_invisible(name))


def label_name(name: str) -> str:
    """A label or a label kind as every model compares it, as a speaker's name is (`speaker_name`): "alegría" typed
    with a combining accent is the label "alegría"."""
    return speaker_name(name)


def check_unicode(text: str, where: str) -> None:
    """Refuse, naming `where`, a string that is not valid Unicode: a lone surrogate (from a JSON escape such as
    "\\ud800") cannot be written as UTF-8, so it would fail much later (a tokenizer, an output file, a plot)."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise DialogueError(f"{where}: not valid Unicode ({e.reason} at character {e.start})") from None


CHARS_PER_TOKEN = 64  # more than any tokenizer's pieces of real text hold on average (3-6 characters)


def text_to_read(text: str, max_tokens: int, keep: str = "start") -> tuple[str, bool]:
    """The part of `text` that a model reading `max_tokens` of its tokens is given (its start, or with ``keep="end"``
    its end), and whether it was cut: a text of more than `CHARS_PER_TOKEN` characters a token read is cut there
    before it is tokenised, so that a huge utterance (a file's 25 MB line) costs what a long one does, not its length
    in time and memory. A cut text is one the model read only part of (``truncated``), whatever its tokens; for real
    text, its tokens read are the same."""
    if keep not in ("start", "end"):
        raise ValueError(f"keep = {keep!r}: expected 'start' or 'end'")
    limit = CHARS_PER_TOKEN * (max_tokens + 2)
    if len(text) <= limit:
        return text, False
    return (text[:limit] if keep == "start" else text[-limit:]), True


def texts_to_read(texts: Iterable[str], max_tokens: int) -> tuple[list[str], list[bool]]:
    """`text_to_read` of each text: the texts to tokenise, and which of them were cut."""
    pairs = [text_to_read(text, max_tokens) for text in texts]
    return [text for text, _ in pairs], [cut for _, cut in pairs]


def _where(source: str | None, field_name: str) -> str:
    return f"{source}: {field_name}" if source else field_name


class FrozenLabels(dict):
    """A turn's labels: a dict (JSON writes it, it equals a dict of the same items) that cannot be changed, so that
    labels checked when the turn was made stay checked, and a `Turn` can be hashed. Another label: a new `Turn`
    (``dataclasses.replace(turn, labels={...})``)."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("a turn's labels cannot be changed: make a new Turn (dataclasses.replace(turn, labels=...))")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def __reduce__(self):
        return FrozenLabels, (dict(self),)


@dataclass(frozen=True)
class Turn:
    """One utterance. `labels` maps a label kind (``emotion``, ``act``...) to a label name. The speaker and the labels
    are kept without the spaces and invisible characters at their ends (`trim_invisible`), composed (`speaker_name`,
    `label_name`)."""

    speaker: str
    text: str
    labels: Mapping[str, str] = field(default_factory=dict)
    id: str | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, source: str | None = None) -> None:
        if self.speaker is not None and not isinstance(self.speaker, str):
            raise DialogueError(f"{_where(source, 'speaker')}: speaker must be a string, got {type(self.speaker).__name__} "
                                f"{self.speaker!r}")
        if self.speaker is None or is_blank(self.speaker):
            raise DialogueError(f"{_where(source, 'speaker')}: missing or empty speaker ({self.speaker!r})")
        if not isinstance(self.text, str):
            raise DialogueError(f"{_where(source, 'text')}: text must be a string, got {type(self.text).__name__}")
        if is_blank(self.text):
            raise DialogueError(f"{_where(source, 'text')}: empty utterance ({self.text!r})")
        check_unicode(self.text, _where(source, "text"))
        check_unicode(self.speaker, _where(source, "speaker"))
        if not isinstance(self.labels, Mapping):
            raise DialogueError(f"{_where(source, 'labels')}: labels must be a mapping of kind -> label")
        for kind, label in self.labels.items():
            if not isinstance(kind, str) or is_blank(kind):
                raise DialogueError(f"{_where(source, 'labels')}: label kind {kind!r}: name what the label is of (e.g. "
                                    f"\"emotion\": \"joy\")")
            if not isinstance(label, str) or is_blank(label):
                raise DialogueError(f"{_where(source, f'labels.{kind}')}: label must be a non-empty string, got {label!r}")
            check_unicode(kind, _where(source, "labels"))
            check_unicode(label, _where(source, f"labels.{kind}"))
        if self.id is not None and (not isinstance(self.id, str) or is_blank(self.id)):
            raise DialogueError(f"{_where(source, 'id')}: id must be a non-empty string (or left out), got {self.id!r}")
        if self.id is not None:
            check_unicode(self.id, _where(source, "id"))
        # Frozen labels: a Turn is hashed by value and cannot be changed behind a cache; " joy" is joy, and " emotion "
        # is emotion, composed or not
        labels = FrozenLabels((label_name(kind), label_name(label)) for kind, label in self.labels.items())
        if len(labels) < len(self.labels):
            raise DialogueError(f"{_where(source, 'labels')}: two label kinds differ only by spaces at their ends or "
                                f"combining marks ({', '.join(map(repr, self.labels))})")
        object.__setattr__(self, "labels", labels)
        # " Ann " and "Ann", "José" composed and decomposed, are one speaker to every speaker mask (a file's reader
        # counts what it changed)
        object.__setattr__(self, "speaker", speaker_name(self.speaker))

    def label(self, kind: str) -> str | None:
        return self.labels.get(kind)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"speaker": self.speaker, "text": self.text}
        if self.labels:
            out["labels"] = dict(self.labels)
        if self.id is not None:
            out["id"] = self.id
        return out


def check_id(value: Any, where: str) -> None:
    """A conversation's or an item's id: a non-empty string, or None (left out)."""
    if value is not None and (not isinstance(value, str) or is_blank(value)):
        raise DialogueError(f"{where}: id must be a non-empty string (or left out), got {value!r}")
    if value is not None:
        check_unicode(value, "id")


@dataclass(frozen=True)
class Dialogue:
    """An ordered, non-empty conversation. `meta` holds dataset-specific extras (season, scene...)."""

    turns: tuple[Turn, ...]
    id: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = f"dialogue {self.id!r}" if self.id is not None else "dialogue"
        if isinstance(self.turns, str | bytes | Mapping) or not isinstance(self.turns, Iterable):
            raise DialogueError(f"{where}: turns: expected a sequence of Turns, got {type(self.turns).__name__}")
        object.__setattr__(self, "turns", tuple(self.turns))
        if not isinstance(self.meta, Mapping):
            raise DialogueError(f"{where}: meta: expected a mapping (e.g. {{\"source\": \"mine\"}}), got {type(self.meta).__name__}")
        if not self.turns:
            raise DialogueError(f"{where}: a dialogue needs at least one turn")
        for i, turn in enumerate(self.turns):
            if not isinstance(turn, Turn):
                raise DialogueError(f"{where}: turns[{i}] is a {type(turn).__name__}, not a Turn")
        check_id(self.id, where)
        object.__setattr__(self, "meta", dict(self.meta))

    def __len__(self) -> int:
        return len(self.turns)

    def __iter__(self):
        return iter(self.turns)

    def __getitem__(self, index):
        return self.turns[index]

    @property
    def speakers(self) -> list[str]:
        """Distinct speakers in order of first appearance."""
        return list(dict.fromkeys(t.speaker for t in self.turns))

    def speaker_ids(self) -> list[int]:
        """Each turn's speaker as an index into `speakers` (0 = whoever spoke first)."""
        order = {name: i for i, name in enumerate(self.speakers)}
        return [order[t.speaker] for t in self.turns]

    def labels(self, kind: str) -> list[str | None]:
        return [t.labels.get(kind) for t in self.turns]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.id is not None:
            out["id"] = self.id
        out["turns"] = [t.to_dict() for t in self.turns]
        if self.meta:
            out["meta"] = dict(self.meta)
        return out

    @classmethod
    def from_turns(cls, turns: Iterable[Any], id: str | None = None) -> "Dialogue":
        """Convenience: ``Dialogue.from_turns([("A", "hi"), ("B", "hello")])``; a turn may also be a `Turn`
        or a ``{"speaker": ..., "text": ...}`` mapping (the JSONL format's)."""
        where = f"dialogue {id!r}" if id is not None else "dialogue"
        if isinstance(turns, str | bytes | Mapping) or not isinstance(turns, Iterable):
            raise DialogueError(f"{where}: expected a list of turns, got {type(turns).__name__}")
        return cls(turns=tuple(as_turn(t, f"{where}: turns[{i}]") for i, t in enumerate(turns)), id=id)


def as_turn(value: Any, source: str, default_speaker: str | None = None) -> Turn:
    """A `Turn` from a Turn, a (speaker, text) pair, a mapping of the JSONL format's turn fields (``speaker``, ``text``,
    ``labels``, ``id``, and ``emotion``, ``act``, ``sentiment`` read as labels) or, where a ``default_speaker`` is given,
    a bare text; anything else, or a mapping with another field, is an error naming ``source`` (empty: the fields
    alone, the turn being a whole request's body)."""
    if isinstance(value, Turn):
        return value
    turn_id = None
    if isinstance(value, Mapping):
        speaker, text, turn_id, labels = value.get("speaker"), value.get("text"), value.get("id"), _mapping_labels(value, source)
    elif isinstance(value, str) and default_speaker is not None:
        speaker, text, labels = default_speaker, value, {}
    elif isinstance(value, tuple | list) and len(value) == 2:
        (speaker, text), labels = value, {}
    else:
        raise DialogueError(f"{source}: expected a (speaker, text) pair, a {{\"speaker\", \"text\"}} mapping or a Turn, "
                            f"got {type(value).__name__} {str(value)[:40]!r}")
    if isinstance(speaker, int) and not isinstance(speaker, bool):  # a numeric speaker id, as a conversation file's is read
        speaker = str(speaker)
    try:
        return Turn(speaker=speaker, text=text, labels=labels, id=turn_id)
    except DialogueError as e:
        raise DialogueError(f"{source}: {e}" if source else str(e)) from None


def _mapping_labels(value: Mapping, source: str) -> dict[str, Any]:
    """The labels of a turn given as a mapping: its ``labels`` and its ``emotion``/``act``/``sentiment`` fields, which
    must agree; a field the format has not (a misspelt ``lables``) is refused rather than read past."""
    if unknown := [key for key in value if key not in TURN_KEYS]:
        raise DialogueError(f"{source}: unknown field {', '.join(map(repr, unknown))}; a turn's fields are "
                            f"{', '.join(sorted(TURN_KEYS))}")
    labels = value.get("labels")
    if labels is None:
        labels = {}
    elif not isinstance(labels, Mapping):
        raise DialogueError(f"{source}: labels: expected a mapping of kind -> label, got {type(labels).__name__} {labels!r:.40}")
    labels = dict(labels)
    for kind in CONVENIENCE_LABELS:
        if value.get(kind) is not None:
            if kind in labels and labels[kind] != value[kind]:
                raise DialogueError(f"{source}: {kind}: {value[kind]!r} disagrees with labels.{kind} = {labels[kind]!r}")
            labels[kind] = value[kind]
    return labels


def as_dialogue(value: Any) -> Dialogue:
    """A `Dialogue` as given, or built from a list of turns (`Dialogue.from_turns`)."""
    return value if isinstance(value, Dialogue) else Dialogue.from_turns(value)


def spelling_clashes(labels: Iterable[str]) -> list[list[str]]:
    """The groups of `labels` that differ only in capitals (``joy``, ``Joy``, ``JOY``), each in the order first met;
    [] where there is none."""
    groups: dict[str, list[str]] = {}
    for label in labels:
        if label not in (group := groups.setdefault(label.casefold(), [])):
            group.append(label)
    return [group for group in groups.values() if len(group) > 1]


def said_together(words: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return " and ".join([", ".join(words[:-1]), words[-1]] if len(words) > 1 else words)


def other_spelling(dialogue: Dialogue, kinds: dict[str, tuple[str, Any]], place: Any) -> tuple[int, str, str, Any] | None:
    """The first label kind of `dialogue` written in other capitals than where `kinds` first saw it (``Emotion`` and
    ``emotion``): (its turn, the kind, its first spelling, that place), or None. `kinds` records each kind's first
    spelling at `place` (a file's line, a conversation's index) as the dialogues go by."""
    for j, turn in enumerate(dialogue.turns):
        for kind in turn.labels:
            first, where = kinds.setdefault(kind.casefold(), (kind, place))
            if first != kind:
                return j, kind, first, where
    return None


def with_unique_ids(dialogues: Iterable[Dialogue]) -> Iterator[Dialogue]:
    """`dialogues`, each passed on once checked: two conversations with one id, or two turns of a conversation with
    one, are refused, naming both, and so is a label kind written in other capitals than before (``Emotion`` and
    ``emotion``). The readers refuse such files (predictions are named by the ids; the turns of one spelling would be
    read as unlabelled by a model of the other), so the writers, which write as they go, never write one."""
    index_of_id: dict[str, int] = {}
    kinds: dict[str, tuple[str, Any]] = {}  # a label kind as first written, and where
    for i, dialogue in enumerate(dialogues):
        if clash := other_spelling(dialogue, kinds, i):
            j, kind, first, where = clash
            raise DialogueError(f"dialogue {i} ({dialogue.id!r}): turns[{j}]: label kind {kind!r} is written {first!r} "
                                f"in dialogue {where}; readers compare label kinds as written: write one spelling throughout")
        if dialogue.id is not None:
            if dialogue.id in index_of_id:
                raise DialogueError(f"dialogue {i}: id {dialogue.id!r} is already the id of dialogue {index_of_id[dialogue.id]}")
            index_of_id[dialogue.id] = i
        turn_of_id: dict[str, int] = {}
        for j, turn in enumerate(dialogue.turns):
            if turn.id is not None:
                if turn.id in turn_of_id:
                    raise DialogueError(f"dialogue {i} ({dialogue.id!r}): turns[{j}].id {turn.id!r} is already the id of "
                                        f"turns[{turn_of_id[turn.id]}]")
                turn_of_id[turn.id] = j
        yield dialogue


def output_names(ids: Sequence[str | None], start: int = 0, taken: set[str] | None = None) -> list[str]:
    """The names under which outputs (predictions, replies, rankings) give conversations or items: the id, or where
    there is none, the place in the input ("0", "1", ...), with a "#" in front while another one's id already spells
    it, so that two never share a name. For an input named a block at a time: `start`, the place of the block's first
    one; `taken`, every id of the whole input, to which the names given are added (share it between the blocks)."""
    taken = {i for i in ids if i is not None} if taken is None else taken
    names = []
    for index, given in enumerate(ids, start):
        name = given
        if name is None:
            name = str(index)
            while name in taken:
                name = "#" + name
            taken.add(name)
        names.append(name)
    return names


def label_names(labels: Any, num_labels: int) -> list[str]:
    """The names of a model's `num_labels` outputs, checked: distinct non-empty strings, one per output (a name twice
    would put two outputs under one key)."""
    if isinstance(labels, str | bytes | Mapping) or not isinstance(labels, Iterable):
        raise ValueError(f"labels: expected a list of the model's {num_labels} label names, got {type(labels).__name__}")
    labels = list(labels)
    if len(labels) != num_labels:
        raise ValueError(f"{len(labels)} labels for a model of {num_labels} classes")
    if bad := [label for label in labels if not isinstance(label, str) or is_blank(label)]:
        raise ValueError(f"labels: {bad[0]!r} is not a label name (a non-empty string)")
    if twice := sorted({label for label in labels if labels.count(label) > 1}):
        raise ValueError(f"labels: {', '.join(map(repr, twice))} named more than once")
    return labels


def next_speaker(dialogue: Dialogue) -> str:
    """Who speaks next: the most recent speaker other than the last one (in a two-party conversation, the last
    speaker's partner); in a monologue, a new speaker named after the last one."""
    last = dialogue.turns[-1].speaker
    others = [t.speaker for t in reversed(dialogue.turns) if t.speaker != last]
    return others[0] if others else f"{last}'s partner"


@dataclass(frozen=True)
class ResponseSelectionItem:
    """A context with candidate responses (MuTual, Ubuntu...). `answer` is None when hidden.

    `relevance` (optional, one 0/1 per candidate) is for data with several or no correct responses
    (Douban, E-commerce); MuTual-style items give `answer` only. `gold()` gives the 0/1 labels either way.
    """

    context: Dialogue
    candidates: tuple[Turn, ...]
    answer: int | None = None
    id: str | None = None
    relevance: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        where = f"item {self.id!r}" if self.id is not None else "item"
        check_id(self.id, where)
        if not isinstance(self.context, Dialogue):
            raise DialogueError(f"{where}: context: expected a Dialogue, got {type(self.context).__name__}")
        if isinstance(self.candidates, str | bytes | Mapping) or not isinstance(self.candidates, Iterable):
            raise DialogueError(f"{where}: candidates: expected a sequence of Turns, got {type(self.candidates).__name__}")
        object.__setattr__(self, "candidates", tuple(self.candidates))
        if not self.candidates:
            raise DialogueError(f"{where}: no candidate responses")
        for i, candidate in enumerate(self.candidates):
            if not isinstance(candidate, Turn):
                raise DialogueError(f"{where}: candidates[{i}] is a {type(candidate).__name__}, not a Turn")
        if self.answer is not None and (not isinstance(self.answer, Integral) or isinstance(self.answer, bool)):
            raise DialogueError(f"{where}: answer: expected a candidate's index (an integer), got {self.answer!r}")
        if self.answer is not None and not 0 <= self.answer < len(self.candidates):
            raise DialogueError(f"{where}: answer index {self.answer} out of range for {len(self.candidates)} candidates")
        if self.relevance is not None:
            object.__setattr__(self, "relevance", tuple(self.relevance))
            if len(self.relevance) != len(self.candidates) or any(
                    isinstance(r, bool) or not isinstance(r, Integral) or r not in (0, 1) for r in self.relevance):
                raise DialogueError(f"{where}: relevance must be one 0/1 per candidate, got {self.relevance!r}")
            if self.answer is not None and self.relevance[self.answer] != 1:
                raise DialogueError(f"{where}: answer {self.answer} is not marked relevant in {self.relevance!r}")

    def gold(self) -> tuple[int, ...] | None:
        """0/1 per candidate (None when the answer is hidden)."""
        if self.relevance is not None:
            return self.relevance
        if self.answer is None:
            return None
        return tuple(int(i == self.answer) for i in range(len(self.candidates)))
