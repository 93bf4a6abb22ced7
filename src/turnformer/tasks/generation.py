"""Response generation data, shared by every generator (DRA, PHAED and their baselines).

Instances (DRA's setup): in each conversation every turn after the first is a target response; its
context is the turns before it, at most ``max_context_turns`` (4), newest kept. Text becomes words by
`words` (lower-cased; DailyDialog is already tokenised, so this mostly splits on spaces), cut at
``max_words`` (50) words per utterance; the cuts are counted in the report.

Speaker roles (PHAED): the response's speaker is ``R``; every other speaker of the context is ``Q``
(in DailyDialog's two-party conversations, the partner). A speaker-aware utterance is
``[SOU] [SPEAKER-Q|R] w_1 ... w_n [EOU]`` (PHAED section 3.2); without speaker tokens (an ablation, and
the plain baselines) ``[SOU] w_1 ... w_n [EOU]``. A decoder reads the response's utterance minus its
last token and predicts it shifted by one; the speaker token's prediction is left out of perplexity
(PHAED does so: it is almost certain and would flatter the score).

The vocabulary (DRA): the words of the training conversations seen at least ``min_count`` (3) times;
the rest become ``[UNK]``. It is saved with every checkpoint (`Vocabulary.to_dict`).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from turnformer.dialogue import Dialogue, DialogueError

PAD, UNK, SOU, EOU, SPEAKER_Q, SPEAKER_R = "[PAD]", "[UNK]", "[SOU]", "[EOU]", "[SPEAKER-Q]", "[SPEAKER-R]"
SPECIALS = (PAD, UNK, SOU, EOU, SPEAKER_Q, SPEAKER_R)
_WORDS = re.compile(r"[\w']+|[^\w\s]")


def words(text: str) -> list[str]:
    """Lower-cased words and punctuation marks: ``"Don't go, Jim!"`` -> ``["don't", "go", ",", "jim", "!"]``."""
    return _WORDS.findall(text.lower())


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


@dataclass
class GenerationReport:
    instances: int = 0
    cut_utterances: int = 0  # longer than max_words
    empty_utterances: int = 0  # no word at all (e.g. only symbols the word pattern skips)
    messages: list[str] = field(default_factory=list)


def make_instances(dialogues: Iterable[Dialogue], max_context_turns: int = 4, max_words: int = 50,
                   report: GenerationReport | None = None) -> list[GenerationInstance]:
    """Every (context, response) pair of the conversations (see the module docstring)."""
    if max_context_turns < 1 or max_words < 1:
        raise ValueError(f"need max_context_turns >= 1 and max_words >= 1, got {max_context_turns}, {max_words}")
    report = report if report is not None else GenerationReport()
    out: list[GenerationInstance] = []
    for d_index, dialogue in enumerate(dialogues):
        name = dialogue.id if dialogue.id is not None else str(d_index)
        cut = []
        for t, turn in enumerate(dialogue.turns):
            w = words(turn.text)
            if not w:
                report.empty_utterances += 1
                report.messages.append(f"dialogue {name!r} turn {t}: no words in {turn.text[:40]!r}; kept as [UNK]")
                w = [UNK]
            if len(w) > max_words:
                report.cut_utterances += 1
                w = w[:max_words]
            cut.append(tuple(w))
        for t in range(1, len(dialogue.turns)):
            speaker = dialogue.turns[t].speaker
            first = max(0, t - max_context_turns)
            context = tuple(Utterance(cut[i], "R" if dialogue.turns[i].speaker == speaker else "Q") for i in range(first, t))
            out.append(GenerationInstance(context, Utterance(cut[t], "R"), name, t))
    report.instances += len(out)
    return out


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


__all__ = ["EOU", "PAD", "SOU", "SPEAKER_Q", "SPEAKER_R", "SPECIALS", "UNK", "GenerationInstance", "GenerationReport",
           "Utterance", "Vocabulary", "make_instances", "words"]
