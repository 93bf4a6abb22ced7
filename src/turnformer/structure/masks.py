"""Attention masks as composable predicates over (query token, key token) pairs.

A `Mask` turns query and key metadata (`TokenMeta`, [B, Q] and [B, K]) into a boolean tensor
[B, Q, K], True where the query may attend to the key. Every mask is vectorised over the batch
(broadcast comparisons, no Python loop over tokens) and composes like a predicate:
``LOCAL(5) | SPEAKER``, ``SAME_UTTERANCE & CAUSAL``, ``~SPEAKER``.

Padding never sees and is never seen: every mask, its negation included, is False on any pair with
a padding query or key. A query row can therefore end up with no visible key (a padding query, a
speaker head on a speaker's first utterance with no memory, ...). Project-wide policy: such a row
*attends to nothing*: its attention output is exactly zero for that head (no NaN, no uniform
average over keys); the residual path carries the token on. `empty_rows` finds those rows and
`masked_attention` in `turnformer.structure.attention` implements the policy.

| name | query q may see key k when | papers |
|---|---|---|
| global | k is a real token | DialogXL |
| local(w) | 0 <= utt(q) - utt(k) <= w | DialogXL |
| speaker | spk(k) = spk(q) | DialogXL, MDFN (sender) |
| listener | spk(k) != spk(q) | DialogXL, MDFN (receiver) |
| same_utterance | utt(k) = utt(q) | MDFN M1 |
| other_utterance | utt(k) != utt(q) | MDFN M2 |
| history | utt(k) <= utt(q) | PHAED (inter-query) |
| spoken_by(s) | spk(k) = s | PHAED (queries, responses) |
| reply_to | k is in the latest utterance before q's by another speaker (the one q answers) | PHAED |
| own_turns(n) | k is in one of the n latest utterances of q's speaker before q's own | PHAED (memory of n responses) |
| dependency | q opens k's utterance (special, position 0), or q = k, or q governs k | DRA |
| causal | order(k) <= order(q) | decoders |
| memory | k is a memory token (real, not special) of an earlier utterance | DialogXL |
| recent(n) | k is one of the newest n memory tokens before q's utterance | DialogXL (memory of n tokens) |

``reply_to`` and ``own_turns(n)`` rank a key's utterance among the keys' utterances (which is the latest before
the query's), so the keys must hold every utterance that could count: the whole context, not a window of it.
"""

from __future__ import annotations

import numbers
import re
from dataclasses import dataclass
from typing import Any, Callable

import torch

from turnformer.structure.packing import TokenMeta

PairFn = Callable[[TokenMeta, TokenMeta], torch.Tensor]


def _q(x: torch.Tensor) -> torch.Tensor:  # [B, Q] -> [B, Q, 1]
    return x.unsqueeze(-1)


def _k(x: torch.Tensor) -> torch.Tensor:  # [B, K] -> [B, 1, K]
    return x.unsqueeze(-2)


def real_pairs(q: TokenMeta, k: TokenMeta) -> torch.Tensor:
    """[B, Q, K]: both tokens are real (not padding)."""
    return _q(q.is_real) & _k(k.is_real)


@dataclass(frozen=True)
class Mask:
    """A named predicate over token pairs; call it on (query meta, key meta) to get [B, Q, K]."""

    name: str
    pair_fn: PairFn  # the relation itself, before padding is excluded

    def __call__(self, q: TokenMeta, k: TokenMeta) -> torch.Tensor:
        if q.shape[0] != k.shape[0]:
            raise ValueError(f"mask {self.name}: query batch {q.shape[0]} != key batch {k.shape[0]}")
        return self.pair_fn(q, k) & real_pairs(q, k)

    def __and__(self, other: "Mask") -> "Mask":
        return Mask(f"({self.name} & {other.name})", lambda q, k: self.pair_fn(q, k) & other.pair_fn(q, k))

    def __or__(self, other: "Mask") -> "Mask":
        return Mask(f"({self.name} | {other.name})", lambda q, k: self.pair_fn(q, k) | other.pair_fn(q, k))

    def __invert__(self) -> "Mask":
        return Mask(f"~{self.name}", lambda q, k: ~self.pair_fn(q, k))


# A [1, 1, 1] True broadcasts against the padding mask without materialising a [B, Q, K] tensor.
GLOBAL = Mask("global", lambda q, k: torch.ones((1, 1, 1), dtype=torch.bool, device=q.utterance.device))
SPEAKER = Mask("speaker", lambda q, k: _q(q.speaker) == _k(k.speaker))
LISTENER = Mask("listener", lambda q, k: _q(q.speaker) != _k(k.speaker))
SAME_UTTERANCE = Mask("same_utterance", lambda q, k: _q(q.utterance) == _k(k.utterance))
OTHER_UTTERANCE = Mask("other_utterance", lambda q, k: _q(q.utterance) != _k(k.utterance))
CAUSAL = Mask("causal", lambda q, k: _k(k.order) <= _q(q.order))
HISTORY = Mask("history", lambda q, k: _k(k.utterance) <= _q(q.utterance))


# A count past every index a conversation can have: a larger window, memory length or speaker index is the same
# mask, and a Python integer beyond int64 cannot meet a tensor.
FAR = 2**62


def whole_number(value: Any, what: str) -> int:
    """`value` where it is a whole number >= 0 (numpy's included, not True or False), else a ValueError naming `what`:
    a mask's window or count compared with fractions, or a bool, would select a window no one asked for."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{what} must be a whole number >= 0, got {value!r}")
    if value < 0:
        raise ValueError(f"{what} must be >= 0, got {value}")
    return int(value)


def spoken_by(speaker: int) -> Mask:
    """Keys spoken by ``speaker`` (whoever the query's speaker is)."""
    speaker = whole_number(speaker, "spoken_by's speaker index (padding is -1)")
    return Mask(f"spoken_by({speaker})", lambda q, k: _k(k.speaker) == min(speaker, FAR))  # [B, 1, K]: the same for every query


def _small_ints(values: torch.Tensor) -> torch.Tensor:
    """`values` (and -1) in the smallest of int16, int32, int64 that holds them."""
    low, high = (min(-1, int(values.min())), int(values.max())) if values.numel() else (-1, 0)
    for dtype in (torch.int16, torch.int32):
        if torch.iinfo(dtype).min <= low and high <= torch.iinfo(dtype).max:
            return values.to(dtype)
    return values


def _latest_utterances(candidates: torch.Tensor, k: TokenMeta, n: int) -> torch.Tensor:
    """[B, Q, K]: the candidate keys of each query's ``n`` latest utterances, one utterance at a time (a loop over
    n, not over tokens)."""
    key_utterance = _k(_small_ints(k.utterance))  # [B, 1, K]: the [B, Q, K] search below in 2 bytes a pair, not 8
    chosen, candidates = torch.zeros_like(candidates), candidates.clone()  # updated in place: no [B, Q, K] copies
    # a round takes one utterance: past the keys' distinct utterances it would choose nothing (however large n)
    rounds = min(n, int(torch.unique(key_utterance).numel()))
    for _ in range(rounds):
        latest = torch.where(candidates, key_utterance, -1).amax(-1, keepdim=True)  # [B, Q, 1]; -1: none left
        newest = (key_utterance == latest).logical_and_(candidates)
        chosen.logical_or_(newest)
        candidates.logical_and_(newest.logical_not_())
    return chosen


def _reply_to(q: TokenMeta, k: TokenMeta) -> torch.Tensor:
    earlier_other = (_k(k.speaker) != _q(q.speaker)) & (_k(k.utterance) < _q(q.utterance)) & _k(k.is_real)
    return _latest_utterances(earlier_other, k, 1)


REPLY_TO = Mask("reply_to", _reply_to)


def own_turns(n: int) -> Mask:
    """The ``n`` latest utterances of the query's speaker before the query's own (PHAED: the earlier responses
    a response's decoder remembers)."""
    n = whole_number(n, "own_turns' n")

    def pair_fn(q: TokenMeta, k: TokenMeta) -> torch.Tensor:
        earlier_own = (_k(k.speaker) == _q(q.speaker)) & (_k(k.utterance) < _q(q.utterance)) & _k(k.is_real)
        return _latest_utterances(earlier_own, k, n)

    return Mask(f"own_turns({n})", pair_fn)


def local(window: int) -> Mask:
    """The current utterance and the ``window`` latest utterances before it."""
    window = whole_number(window, "local's window")

    def pair_fn(q: TokenMeta, k: TokenMeta) -> torch.Tensor:
        # Two broadcast comparisons instead of a [B, Q, K] integer difference.
        return (_k(k.utterance) <= _q(q.utterance)) & (_k(k.utterance) >= _q(q.utterance - min(window, FAR)))

    return Mask(f"local({window})", pair_fn)


def recent(n: int | None) -> Mask:
    """The newest ``n`` memory tokens before the query's utterance (``None``: all of them): what a recurrent
    model whose memory keeps ``n`` tokens holds when it reaches the query's utterance."""
    n = None if n is None else whole_number(n, "recent's memory length")

    def pair_fn(q: TokenMeta, k: TokenMeta) -> torch.Tensor:
        index, before = _k(k.memory_index), _q(q.memory_before)
        seen = (index >= 0) & (index < before)
        return seen if n is None else seen & (index >= before - min(n, FAR))

    return Mask("memory" if n is None else f"recent({n})", pair_fn)


MEMORY = recent(None)


def _dependency(q: TokenMeta, k: TokenMeta) -> torch.Tensor:
    # DRA equation 2: row 0 (the utterance's opening special token) sees its whole utterance,
    # every token sees itself, and a governor sees its dependents.
    opens_utterance = _q(q.is_special & (q.position == 0)) & (_q(q.utterance) == _k(k.utterance))
    itself = _q(q.order) == _k(k.order)
    governs = _k(k.head) == _q(q.order)
    return opens_utterance | itself | governs


DEPENDENCY = Mask("dependency", _dependency)

_NAMED = {m.name: m for m in (GLOBAL, SPEAKER, LISTENER, SAME_UTTERANCE, OTHER_UTTERANCE, CAUSAL, HISTORY, REPLY_TO,
                               DEPENDENCY, MEMORY)}
_WITH_NUMBER = {"recent": recent, "own_turns": own_turns, "spoken_by": spoken_by}
MASK_NAMES = sorted(_NAMED) + ["local(w)", "own_turns(n)", "recent(n)", "spoken_by(s)"]


def mask_from_name(spec: str, window: int | None = None) -> Mask:
    """Parse a mask name: ``global``, ``speaker``, ``local(5)`` (or ``local`` with ``window``)...

    ``|``, ``&`` and a leading ``~`` compose as Python's operators do: ``~`` binds tightest, then ``&``, then ``|``
    (``speaker|same_utterance&local(0)`` is ``speaker | (same_utterance & local(0))``); there are no parentheses.
    """
    spec = spec.strip()
    if not spec:  # `local&|speaker`, `speaker|`: a mask missing beside an operator
        raise ValueError("a mask is missing beside '&', '|' or '~' (write e.g. local&speaker, speaker|same_utterance)")
    for op in ("|", "&"):
        if op in spec:
            left, right = spec.rsplit(op, 1)
            a, b = mask_from_name(left, window), mask_from_name(right, window)
            return a | b if op == "|" else a & b
    if spec.startswith("~"):
        return ~mask_from_name(spec[1:], window)
    match = re.fullmatch(r"local(?:\((-?\d+)\))?", spec)  # a negative number: refused by the mask, saying why
    if match:
        w = int(match.group(1)) if match.group(1) else window
        if w is None:
            raise ValueError("local needs a window: write local(5) or pass --window")
        return local(w)
    match = re.fullmatch(r"(\w+)\((-?\d+)\)", spec)
    if match and match.group(1) in _WITH_NUMBER:
        return _WITH_NUMBER[match.group(1)](int(match.group(2)))
    if spec in _NAMED:
        return _NAMED[spec]
    raise ValueError(f"unknown mask {spec!r}; known: {', '.join(MASK_NAMES)}")


def empty_rows(mask: torch.Tensor) -> torch.Tensor:
    """[..., Q]: True for query rows with no visible key (they attend to nothing)."""
    return ~mask.any(dim=-1)
