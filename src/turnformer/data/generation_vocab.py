"""Words and the word vocabulary of response generation: what the generators (`turnformer.models`) and the
generation task (`turnformer.tasks.generation`) both read, so it sits below them.

Text becomes words by `words` (lower-cased; DailyDialog is already tokenised, so this mostly splits on spaces).
A speaker-aware utterance is ``[SOU] [SPEAKER-Q|R] w_1 ... w_n [EOU]`` (PHAED section 3.2): the response's
speaker is ``R``, every other speaker of the context ``Q``; without speaker tokens ``[SOU] w_1 ... w_n [EOU]``.

The vocabulary (DRA): the special tokens first, then the words of the training conversations seen at least
``min_count`` times; the rest become ``[UNK]``. It is saved with every checkpoint (`Vocabulary.to_dict`).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from itertools import islice
from typing import Iterable, Sequence

import regex

from turnformer.dialogue import Dialogue, DialogueError

PAD, UNK, SOU, EOU, SPEAKER_Q, SPEAKER_R = "[PAD]", "[UNK]", "[SOU]", "[EOU]", "[SPEAKER-Q]", "[SPEAKER-R]"
SPECIALS = (PAD, UNK, SOU, EOU, SPEAKER_Q, SPEAKER_R)
# A word: letters, digits, apostrophes and the marks written on them (Devanagari's vowel signs, Arabic's harakat, an
# accent no precomposed letter has), which Python's re reads as punctuation of their own; else one punctuation mark
_WORDS = regex.compile(r"(?:[\w']|\p{M})+|[^\w\s]")
# Invisible format characters (joiners, soft hyphens, direction marks, byte-order marks): no word and no mark of their
# own; a zero-width space parts words as a space does
_INVISIBLE = regex.compile("[\u00ad\u061c\u180e\u200c-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")


def words(text: str, limit: int | None = None) -> list[str]:
    """Lower-cased words and punctuation marks: ``"Don't go, Jim!"`` -> ``["don't", "go", ",", "jim", "!"]``; with
    `limit`, the first `limit` of them, the rest of the text not read (a huge text costs what a long one does). Text
    is read in its composed form (NFC: an accent typed as a mark of its own stays in its word), without invisible
    format characters."""
    if not text.isascii():
        text = _INVISIBLE.sub("", unicodedata.normalize("NFC", text).replace("\u200b", " "))
    if limit is None:
        return _WORDS.findall(text.lower())
    return [match.group() for match in islice(_WORDS.finditer(text.lower()), limit)]


def detokenize(tokens: Sequence[str]) -> str:
    """`words`' lower-cased words as ordinary text: ``["i", "don't", "know", ",", "thanks", "."]`` -> "I don't know, thanks.".
    Marks are glued to the word they belong to: closing ones and ``.,!?;:%`` (and their full-width forms) to the one
    before, opening brackets, ``$ #`` and ``¿ ¡`` to the one after, a contraction's typographic apostrophe to both its parts (DailyDialog writes
    "I ’ m"), and double quotes in pairs, each to the words it encloses. What `words` split inside a written word is
    joined again: numbers (``3 . 50``, ``7 : 30``, ``10 , 000``), hyphenated words (``e - mail``), web and e-mail
    addresses (``www . google . com``, ``a . b @ c . com``; not a path after the address), abbreviations of single
    letters (``p . m .``, after which no word is capitalised)."""
    tokens, quotes = list(tokens), 0
    for i, token in enumerate(tokens):
        if token == '"':
            quotes += 1
            tokens[i] = '"\x00' if quotes % 2 else '\x00"'  # \x00: glue this side to the neighbour
    text = re.sub(r" ([.,!?;:%)\]}，。！？：；、）」』】％])", r"\1", " ".join(tokens))  # and their full-width forms
    text = re.sub(r"([(\[{$#（「『【¿¡]) ", r"\1", text)  # and Spanish's opening marks
    text = re.sub(r"([，。！？：；、）」』】]) ", r"\1", text)  # full-width marks hold their own space
    text = re.sub(r"(?<=\w) ’ (?=(?:s|m|t|d|ll|re|ve)\b)", "’", text)  # "I ’ m" (`words` keeps "I'm" whole)
    text = _join_within_words(text)
    text = text.replace("\x00 ", "").replace(" \x00", "").replace("\x00", "")
    text = re.sub(r"\bi\b", "I", text)
    # a sentence's first word capitalised, not one after an abbreviation of single letters ("p.m. in")
    return re.sub(r"(^|(?<!\.[a-z])[.!?] )([¿¡]?[a-z])", lambda m: m.group(1) + m.group(2).upper(), text)


# What `words` splits inside a written word, after `detokenize` glued marks to the word before ("3. 50"): a decimal
# point or a time's colon between digits, a thousands comma between a group of one to three digits and one of three,
# a hyphen between letters or digits (DailyDialog writes "e-mail" 13 times as often as a spaced dash), the dots
# and @ of web and e-mail addresses, and the dots of an abbreviation of single letters
_WITHIN_WORDS = (
    (re.compile(r"(?<=\d)([.:]) (?=\d)"), r"\1"),
    (re.compile(r"\b(\d{1,3}(?:,\d{3})*), (?=\d{3}\b)"), r"\1,"),  # "10 , 000", not "1990 , 100"
    (re.compile(r"(?<=[^\W_]) - (?=[^\W_])"), "-"),
    (re.compile(r"\b(www)\. (?=\w)|(?<=\w)\. (?=(?:com|org|net|edu|gov)\b)", re.IGNORECASE), lambda m: (m.group(1) or "") + "."),
    (re.compile(r"(?<=\w) @ (?=\w)"), "@"),
    (re.compile(r"(?<=\w)\. (?=[\w.]+@)"), "."),  # an e-mail address's dots before its @ (a.b@c.com)
    (re.compile(r"(?<=\b[a-z])\. (?=[a-z]\.(?:\W|$))"), "."),  # an abbreviation of single letters (p.m., u.s.a.)
)


def _join_within_words(text: str) -> str:
    for pattern, joined in _WITHIN_WORDS:
        text = pattern.sub(joined, text)
    return text

@dataclass(frozen=True)
class Utterance:
    words: tuple[str, ...]
    role: str  # "Q" or "R"


@dataclass(frozen=True)
class GenerationInstance:
    """One target response with its context (oldest first), and where it comes from."""

    context: tuple[Utterance, ...]
    response: Utterance
    dialogue_id: str
    turn: int  # the response's index in its conversation
    # the response's aligned turn counted from the conversation's start: how many utterances its speaker has spoken up
    # to and including it (PHAED's TE(t) with ``turn_count = "conversation"``); 0 = not known
    response_turn: int = 0


class Vocabulary:
    """Words <-> ids; the special tokens first (``[PAD]`` = 0)."""

    def __init__(self, tokens: Sequence[str]):
        if tuple(tokens[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"a vocabulary starts with the special tokens {SPECIALS}")
        if len(set(tokens)) != len(tokens):
            raise ValueError("a vocabulary lists each token once")
        self.tokens = list(tokens)
        self.index = {t: i for i, t in enumerate(self.tokens)}

    @classmethod
    def build(cls, dialogues: Iterable[Dialogue], min_count: int = 3) -> "Vocabulary":
        """From the words of the (training) conversations, each utterance counted once; ties in frequency
        are broken alphabetically so the ids do not depend on the data's order."""
        counts = Counter(w for d in dialogues for turn in d.turns for w in words(turn.text))
        kept = sorted((w for w, c in counts.items() if c >= min_count and w not in SPECIALS), key=lambda w: (-counts[w], w))
        return cls([*SPECIALS, *kept])

    def __len__(self) -> int:
        return len(self.tokens)

    def id(self, token: str) -> int:
        return self.index.get(token, self.index[UNK])

    def encode(self, tokens: Sequence[str]) -> list[int]:
        return [self.id(t) for t in tokens]

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> list[str]:
        out = []
        for i in ids:
            token = self.tokens[int(i)]
            if skip_special and token in SPECIALS and token != UNK:
                continue
            out.append(token)
        return out

    def utterance_ids(self, utterance: Utterance, speaker_tokens: bool = True) -> list[int]:
        """``[SOU] [SPEAKER-X]? words [EOU]`` as ids."""
        speaker = [self.index[SPEAKER_R if utterance.role == "R" else SPEAKER_Q]] if speaker_tokens else []
        return [self.index[SOU], *speaker, *self.encode(utterance.words), self.index[EOU]]

    def unknown_rate(self, instances: Sequence[GenerationInstance]) -> float:
        """Share of response words that are [UNK] (a quick check of ``min_count`` on another split)."""
        total = sum(len(x.response.words) for x in instances)
        unknown = sum(1 for x in instances for w in x.response.words if w not in self.index)
        return unknown / total if total else 0.0

    def to_dict(self) -> dict:
        return {"tokens": self.tokens}

    @classmethod
    def from_dict(cls, data: dict) -> "Vocabulary":
        if not isinstance(data, dict) or not isinstance(data.get("tokens"), list):
            raise DialogueError("vocabulary: expected {\"tokens\": [...]}")
        return cls(data["tokens"])


__all__ = ["EOU", "PAD", "SOU", "SPEAKER_Q", "SPEAKER_R", "SPECIALS", "UNK", "GenerationInstance", "Utterance", "Vocabulary",
           "detokenize", "words"]
