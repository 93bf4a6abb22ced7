"""Packing dialogues into token ids with per-token metadata.

Every structure in the five papers is a function of two tokens' metadata, so packing records, for
each token of a batch, everything a mask or bias needs (`TokenMeta`):

- ``utterance``: the turn index of the token's utterance in its dialogue (absolute, so distances
  survive truncation); ``-1`` on padding.
- ``speaker``: the speaker index (0 = first speaker of the dialogue); ``-1`` on padding.
- ``position``: position inside the utterance (0 = its first token, a prefix special token included).
- ``order``: position along the conversation (0, 1, 2...). Keys earlier in ``order`` are in the past;
  memory keys carry the order they had when they were current, so causal masks hold across memory.
- ``is_special`` / ``is_padding``: flags. A sequence-start token ([CLS]) belongs to the first packed
  utterance; an utterance prefix ([SOU]) or suffix ([SEP], [EOU]) belongs to its utterance.
- ``head``: the ``order`` of the token's dependency governor, or ``-1`` (root, special, padding).
- ``memory_index`` / ``memory_before``: the recency clock of Transformer-XL style memory, whose tokens
  are the real, non-special ones (`is_memory_token`). ``memory_index`` is a memory token's index among
  its conversation's memory tokens (0, 1, 2...; ``-1`` for any other token); ``memory_before`` counts
  the memory tokens of the utterances before the token's own. A key is among the newest ``n`` memory
  tokens before a query's utterance when ``memory_before(q) - n <= memory_index(k) < memory_before(q)``
  (`turnformer.structure.masks.recent`), which lets one pass over many utterances see exactly what a
  recurrent pass with a memory of ``n`` tokens sees.

Layout of one packed dialogue: ``[bos] (prefix? u_1 suffix?) (prefix? u_2 suffix?) ... pad...``.
Truncation is oldest-first: ``max_turns`` keeps the newest turns, then tokens are dropped from the
oldest end until the sequence fits ``max_length`` (the bos token is always kept); the number of
dropped tokens is recorded per dialogue in ``PackedBatch.truncated`` so nothing is lost silently.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, fields, replace
from typing import Callable, Iterable, Sequence

import numpy as np
import torch

from turnformer.dialogue import Dialogue, DialogueError, as_dialogue


@dataclass(frozen=True)
class TokenMeta:
    """Per-token metadata of a batch; every field is a [batch, length] tensor."""

    utterance: torch.Tensor
    speaker: torch.Tensor
    position: torch.Tensor
    order: torch.Tensor
    is_special: torch.Tensor
    is_padding: torch.Tensor
    head: torch.Tensor
    memory_index: torch.Tensor
    memory_before: torch.Tensor

    @property
    def shape(self) -> torch.Size:
        return self.utterance.shape

    @property
    def is_real(self) -> torch.Tensor:
        return ~self.is_padding

    @property
    def is_memory_token(self) -> torch.Tensor:
        """[B, L]: tokens that enter a recurrent memory (real, not special)."""
        return ~self.is_padding & ~self.is_special

    def to(self, device) -> "TokenMeta":
        return TokenMeta(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})

    def rows(self, index: slice) -> "TokenMeta":
        """Rows ``index`` of every field (e.g. a chunk of the sequences, scored a chunk at a time)."""
        return TokenMeta(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def select(self, index: slice | torch.Tensor) -> "TokenMeta":
        """Columns ``index`` of every field (e.g. one utterance's tokens, or the newest memory)."""
        return TokenMeta(**{f.name: getattr(self, f.name)[:, index] for f in fields(self)})

    def take(self, columns: torch.Tensor, valid: torch.Tensor) -> "TokenMeta":
        """Columns [B, T] of every field, row by row (e.g. a chunk of utterances); a column not `valid` is padding."""
        taken = {f.name: getattr(self, f.name).gather(1, columns) for f in fields(self)}
        for name, fill in (("utterance", -1), ("speaker", -1), ("memory_index", -1)):
            taken[name] = taken[name].masked_fill(~valid, fill)
        taken["is_special"] = taken["is_special"] & valid
        taken["is_padding"] = taken["is_padding"] | ~valid
        return TokenMeta(**taken)

    def rows(self, index: torch.Tensor) -> "TokenMeta":
        """Rows ``index`` of every field (e.g. the hypotheses a beam search keeps)."""
        return TokenMeta(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    @staticmethod
    def concat(parts: Sequence["TokenMeta"]) -> "TokenMeta":
        """Join along the length axis, e.g. ``[memory ; current]`` as attention keys."""
        return TokenMeta(**{f.name: torch.cat([getattr(p, f.name) for p in parts], dim=1) for f in fields(TokenMeta)})

    @staticmethod
    def from_lists(
        utterance: Sequence[Sequence[int]],
        speaker: Sequence[Sequence[int]],
        *,
        is_special: Sequence[Sequence[bool]] | None = None,
        head: Sequence[Sequence[int]] | None = None,
    ) -> "TokenMeta":
        """Build metadata from ragged per-token lists (padding added); handy for tests and plots. Every list has one
        row per sequence and, in it, one entry per token of `utterance`'s row."""
        lengths = [len(u) for u in utterance]
        for name, rows in (("speaker", speaker), ("is_special", is_special), ("head", head)):
            if rows is None:
                continue
            if len(rows) != len(utterance):
                raise ValueError(f"{name}: {len(rows)} rows for {len(utterance)} rows of utterance")
            if (wrong := next((i for i, row in enumerate(rows) if len(row) != lengths[i]), None)) is not None:
                raise ValueError(f"{name}[{wrong}]: {len(rows[wrong])} entries for the {lengths[wrong]} tokens of utterance[{wrong}]")
        for name, rows in (("utterance", utterance), ("speaker", speaker)):  # -1 is padding, added here
            for i, row in enumerate(rows):
                for j, value in enumerate(row):
                    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
                        raise ValueError(f"{name}[{i}][{j}] = {value!r}: expected a whole number >= 0 (padding is added)")
        width = max(lengths, default=0)
        batch = len(utterance)

        def padded(rows, fill, dtype):
            out = np.full((batch, width), fill, dtype=dtype)
            for i, row in enumerate(rows):
                out[i, : len(row)] = row
            return torch.from_numpy(out)

        special = padded(is_special, False, np.bool_) if is_special is not None else None
        heads = padded(head, -1, np.int64) if head is not None else None
        is_padding = padded([[False] * n for n in lengths], True, np.bool_)
        return token_meta(padded(utterance, -1, np.int64), padded(speaker, -1, np.int64), is_padding,
                          is_special=special, head=heads)


def token_meta(
    utterance: torch.Tensor,
    speaker: torch.Tensor,
    is_padding: torch.Tensor,
    *,
    is_special: torch.Tensor | None = None,
    head: torch.Tensor | None = None,
    memory_offset: torch.Tensor | int = 0,
) -> TokenMeta:
    """`TokenMeta` of rows [B, L] whose utterances come in runs, oldest first: the one place where a token's
    position inside its utterance and the memory clock are computed.

    ``utterance`` and ``speaker`` become -1 on padding; ``position`` counts from 0 wherever the utterance changes
    along the row (0 on padding); ``order`` is the column (a model with running positions replaces it);
    ``is_special`` defaults to no special token and ``head`` to no dependency arc (-1); ``memory_offset`` [B, 1]
    counts the memory tokens of each row's conversation before its first column (`memory_counts`).
    """
    utterance, speaker = utterance.masked_fill(is_padding, -1), speaker.masked_fill(is_padding, -1)
    special = torch.zeros_like(is_padding) if is_special is None else is_special & ~is_padding
    columns = torch.arange(utterance.shape[1], device=utterance.device).expand_as(utterance)
    memory_index, memory_before = memory_counts(utterance, special, is_padding, memory_offset)
    return TokenMeta(
        utterance=utterance,
        speaker=speaker,
        position=(columns - _run_starts(utterance)).masked_fill(is_padding, 0),
        order=columns.clone(),
        is_special=special,
        is_padding=is_padding,
        head=torch.full_like(utterance, -1) if head is None else head,
        memory_index=memory_index,
        memory_before=memory_before,
    )


def kept_columns(keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The columns of each row's kept tokens (``keep`` [B, L]), first to last, as [B, T] (`TokenMeta.take`'s arguments):
    T is the most any row keeps (at least 1 where L is); a row that keeps fewer fills its place with its other columns,
    marked not valid [B, T]. A model computes only the tokens it reads (PHAED: the queries in its encoder)."""
    count = keep.sum(1, keepdim=True)  # [B, 1]
    width = min(max(int(count.max()) if keep.numel() else 0, 1), keep.shape[1])
    columns = torch.argsort(keep.logical_not().to(torch.uint8), dim=1, stable=True)[:, :width]  # kept first, in order
    return columns, torch.arange(width, device=keep.device) < count


def sequence_meta(is_padding: torch.Tensor, utterance_per_token: bool = False) -> TokenMeta:
    """`TokenMeta` of plain sequences [B, L] (what a global or causal mask needs): the tokens of one utterance of
    one speaker (a response, a decoder-only sequence), or with ``utterance_per_token`` one utterance each (a
    sequence of utterance vectors)."""
    columns = torch.arange(is_padding.shape[1], device=is_padding.device).expand_as(is_padding)
    utterance = columns if utterance_per_token else torch.zeros_like(columns)
    return token_meta(utterance, torch.zeros_like(columns), is_padding)


def _run_starts(utterance: torch.Tensor) -> torch.Tensor:
    """[B, L]: the column where each token's run of one utterance index begins."""
    columns = torch.arange(utterance.shape[1], device=utterance.device).expand_as(utterance)
    starts = torch.ones_like(utterance, dtype=torch.bool)
    starts[:, 1:] = utterance[:, 1:] != utterance[:, :-1]
    return torch.where(starts, columns, 0).cummax(1).values


def memory_counts(utterance: torch.Tensor, is_special: torch.Tensor, is_padding: torch.Tensor,
                  offset: torch.Tensor | int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(``memory_index``, ``memory_before``) [B, L] of rows whose utterances come in runs, oldest first;
    ``offset`` [B, 1] counts the memory tokens of the row's conversation before its first column."""
    eligible = ~is_special & ~is_padding
    before_token = eligible.long().cumsum(1) - eligible.long() + offset  # memory tokens before each column
    index = before_token.masked_fill(~eligible, -1)
    return index, before_token.gather(1, _run_starts(utterance))


@dataclass(frozen=True)
class PackedBatch:
    """Token ids of a batch of dialogues, with their metadata."""

    input_ids: torch.Tensor  # [B, T]
    meta: TokenMeta
    truncated: list[int]  # tokens dropped per dialogue by oldest-first truncation
    tokens: list[list[str]] | None = None  # token strings, when the tokenizer can give them

    @property
    def attention_mask(self) -> torch.Tensor:
        return self.meta.is_real


@dataclass(frozen=True)
class SpecialTokens:
    """Special token ids of a layout; ``None`` leaves that slot out."""

    pad: int = 0
    bos: int | None = None  # once per sequence, e.g. [CLS]
    prefix: int | None = None  # before every utterance, e.g. [SOU]
    suffix: int | None = None  # after every utterance, e.g. [SEP] or [EOU]


def pack_token_ids(
    turn_token_ids: Sequence[Sequence[Sequence[int]]],
    turn_speakers: Sequence[Sequence[int]],
    special: SpecialTokens,
    *,
    max_length: int | None = None,
    max_turns: int | None = None,
    turn_heads: Sequence[Sequence[Sequence[int]]] | None = None,
    pad_to: int | None = None,
) -> PackedBatch:
    """Pack already-tokenised dialogues (dialogue -> turn -> token ids) into one padded batch.

    ``turn_heads``, when given, holds for each word-token its governor as a 1-based index into the
    same utterance's tokens, 0 for the root (as dependency parsers print triples); a root is governed
    by the utterance's prefix token when the layout has one, otherwise by nobody.
    """
    if len(turn_token_ids) != len(turn_speakers):
        raise ValueError("turn_token_ids and turn_speakers must have one entry per dialogue")
    for name, value in (("max_length", max_length), ("max_turns", max_turns)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} = {value!r}: expected 1 or more, a whole number (None: no limit)")
    rows = []
    for d, (turns, speakers) in enumerate(zip(turn_token_ids, turn_speakers)):
        if len(turns) != len(speakers):
            raise ValueError(f"dialogue {d}: {len(turns)} turns but {len(speakers)} speakers")
        heads = turn_heads[d] if turn_heads is not None else None
        rows.append(_pack_one(turns, speakers, heads, special, max_length, max_turns))
    width = max(len(r["ids"]) for r in rows) if rows else 0
    if pad_to is not None:
        width = max(width, pad_to)
    batch = len(rows)

    def stack(key, fill, dtype):
        out = np.full((batch, width), fill, dtype=dtype)
        for i, r in enumerate(rows):
            out[i, : len(r[key])] = r[key]
        return torch.from_numpy(out)

    ids = stack("ids", special.pad, np.int64)
    meta = token_meta(stack("utt", -1, np.int64), stack("spk", -1, np.int64), stack("pad", True, np.bool_),
                      is_special=stack("special", False, np.bool_), head=stack("head", -1, np.int64))
    return PackedBatch(input_ids=ids, meta=meta, truncated=[r["truncated"] for r in rows])


def _pack_one(turns, speakers, heads, special: SpecialTokens, max_length, max_turns) -> dict:
    first_turn = 0 if max_turns is None else max(0, len(turns) - max_turns)
    extra = (special.prefix is not None) + (special.suffix is not None)  # a turn's special tokens
    dropped = sum(len(t) + extra for t in turns[:first_turn])
    if max_length is not None:  # the turns the cut below would drop whole are not packed (a long history costs its end)
        first_turn, skipped = _first_turn_reaching(turns, first_turn, special, max_length)
        dropped += skipped
    ids, utt, spk, special_flag, head = [], [], [], [], []
    for t in range(first_turn, len(turns)):
        start = len(ids) + (1 if special.bos is not None else 0)
        word_ids = list(turns[t])
        before = [special.prefix] if special.prefix is not None else []
        after = [special.suffix] if special.suffix is not None else []
        piece = before + word_ids + after
        flags = [True] * len(before) + [False] * len(word_ids) + [True] * len(after)
        piece_heads = [-1] * len(piece)
        if heads is not None:
            first_word = start + len(before)  # order of the utterance's first word
            governed = heads[t]
            if len(governed) != len(word_ids):
                raise ValueError(f"turn {t}: {len(governed)} dependency heads for {len(word_ids)} tokens")
            for j, g in enumerate(governed):
                if isinstance(g, bool) or not isinstance(g, numbers.Integral) or not 0 <= g <= len(word_ids):
                    raise ValueError(f"turn {t}: token {j + 1}'s dependency head {g!r}: expected 0 (the root) to "
                                     f"{len(word_ids)} (a 1-based index into the turn's tokens)")
                if g > 0:
                    piece_heads[len(before) + j] = first_word + g - 1
                elif before:
                    piece_heads[len(before) + j] = start
        ids += piece
        utt += [t] * len(piece)
        spk += [speakers[t]] * len(piece)
        special_flag += flags
        head += piece_heads
    if special.bos is not None:
        ids = [special.bos] + ids
        utt = [first_turn if utt else 0] + utt
        spk = [spk[0] if spk else 0] + spk
        special_flag = [True] + special_flag
        head = [-1] + head
    cut = 0
    if max_length is not None and len(ids) > max_length:
        keep_head = 1 if special.bos is not None else 0
        cut = len(ids) - max_length
        sl = slice(keep_head + cut, None)
        ids, utt, spk, special_flag = ids[:keep_head] + ids[sl], utt[:keep_head] + utt[sl], spk[:keep_head] + spk[sl], special_flag[:keep_head] + special_flag[sl]
        # Heads are orders in the untruncated sequence: shift them, and cut arcs to dropped tokens.
        kept_heads = [h - cut if h >= keep_head + cut else -1 for h in head[sl]]
        head = head[:keep_head] + kept_heads
        if keep_head and len(utt) > 1:  # bos joins the oldest utterance still present
            utt[0], spk[0] = utt[1], spk[1]
    return {
        "ids": ids,
        "utt": utt,
        "spk": spk,
        "special": special_flag,
        "pad": [False] * len(ids),
        "head": head,
        "truncated": dropped + cut,
    }


def _first_turn_reaching(turns, first_turn: int, special: SpecialTokens, max_length: int) -> tuple[int, int]:
    """(s, tokens of turns first_turn .. s-1 with their special tokens): s is the newest turn from which the packed
    turns still fill `max_length`, so that oldest-first truncation would drop every turn before it whole; where the
    turns do not overflow (or nothing but the bos token fits), (first_turn, 0)."""
    budget = max_length - (special.bos is not None)
    extra = (special.prefix is not None) + (special.suffix is not None)
    kept, s = 0, len(turns)
    while s > first_turn and kept < budget:
        s -= 1
        kept += len(turns[s]) + extra
    skipped = sum(map(len, turns[first_turn:s])) + extra * (s - first_turn) if kept >= budget > 0 else 0
    return (s, skipped) if skipped else (first_turn, 0)  # nothing to skip: pack as given


def pack_dialogues(
    dialogues: Sequence[Dialogue],
    tokenizer,
    *,
    special: SpecialTokens | None = None,
    max_length: int | None = None,
    max_turns: int | None = None,
    with_tokens: bool = False,
) -> PackedBatch:
    """Tokenise and pack dialogues with a Hugging Face tokenizer (or any callable text -> ids). A dialogue is a
    `Dialogue` or a list of turns (`as_dialogue`); one `Dialogue` alone is a batch of one.

    By default the BERT layout: ``[CLS] u_1 [SEP] u_2 [SEP] ...`` with the tokenizer's own ids.
    """
    dialogues = conversations(dialogues)
    texts = [t.text for d in dialogues for t in d.turns]
    encode: Callable[[list[str]], list[list[int]]]
    if hasattr(tokenizer, "convert_tokens_to_ids"):
        encode = lambda xs: tokenizer(xs, add_special_tokens=False, verbose=False)["input_ids"] if xs else []  # noqa: E731
        # verbose=False: a long utterance is no error here; max_length, or the encoder, reports one
        if special is None:
            special = SpecialTokens(pad=tokenizer.pad_token_id or 0, bos=tokenizer.cls_token_id, suffix=tokenizer.sep_token_id)
    else:
        encode = lambda xs: [list(tokenizer(x)) for x in xs]  # noqa: E731
        special = special or SpecialTokens()
    flat = encode(texts)
    per_dialogue, start = [], 0
    for d in dialogues:
        per_dialogue.append(flat[start : start + len(d)])
        start += len(d)
    packed = pack_token_ids(
        per_dialogue, [d.speaker_ids() for d in dialogues], special, max_length=max_length, max_turns=max_turns
    )
    if with_tokens and hasattr(tokenizer, "convert_ids_to_tokens"):
        tokens = [tokenizer.convert_ids_to_tokens(row[packed.meta.is_real[i]].tolist()) for i, row in enumerate(packed.input_ids)]
        packed = replace(packed, tokens=tokens)
    return packed


def conversations(dialogues) -> list[Dialogue]:
    """A batch of conversations as `Dialogue`s: each given as a `Dialogue` or a list of turns; a lone `Dialogue` is a
    batch of one. What is not a conversation is a `DialogueError` naming its place (``dialogues[2]: turns[0]: ...``)."""
    if isinstance(dialogues, Dialogue):
        return [dialogues]
    if isinstance(dialogues, str | bytes) or not isinstance(dialogues, Iterable):
        raise DialogueError(f"dialogues: expected a list of conversations, got {type(dialogues).__name__}")
    batch = []
    for i, dialogue in enumerate(dialogues):
        try:
            batch.append(as_dialogue(dialogue))
        except DialogueError as e:
            raise DialogueError(f"dialogues[{i}]: {e} (a list of conversations, each a Dialogue or a list of turns)") from None
    return batch


def closing_special_ids(tokenizer) -> set[int]:
    """The special tokens a tokenizer closes a text with ([SEP]; XLNet's <sep> <cls>; an end-of-text token), which a
    cut keeps: not [UNK], [PAD] or [MASK], which a text's own words can be."""
    ids = (getattr(tokenizer, name, None) for name in ("sep_token_id", "cls_token_id", "eos_token_id"))
    return {i for i in ids if i is not None}


def truncate_keeping_end_specials(ids: list[int], limit: int, special: set[int]) -> list[int]:
    """Cut ``ids`` to ``limit`` tokens, dropping words, not the closing special tokens ([SEP] for BERT,
    <sep> <cls> for XLNet, whose classifier reads that final <cls>: `closing_special_ids`). Ids that fit are kept
    whole. Ids that end in none of `special` keep their last token too (taken for the closing one), so a cut keeps
    the start and the last token, not the start alone."""
    if len(ids) <= limit:
        return list(ids)
    tail = 0
    while tail < len(ids) - 1 and ids[len(ids) - 1 - tail] in special:
        tail += 1
    tail = max(tail, 1)
    if limit <= tail:
        raise ValueError(f"a limit of {limit} tokens leaves no room for a word beside the {tail} special token(s) at the end")
    return ids[: limit - tail] + ids[len(ids) - tail :]
