"""DialogBERT (Gu et al. 2021), trained from scratch as in the DRA paper, with or without DRA.

Hierarchical encoder, then the `TransformerGenerator` decoder (same embeddings, causal decoder with
position embeddings, tied output):

1. utterance encoder: ``layers`` pre-norm layers whose attention never leaves a token's utterance
   (`SAME_UTTERANCE`), run over the utterances packed into rows as long as the longest (`utterance_rows`; equal
   to the flat context under that mask, tested, in memory and time linear in the number of utterances); input = word
   embedding + position within the utterance. With ``dra`` the mask is DRA's
   `DEPENDENCY` instead (which also stays inside the utterance) and, as the paper does, there is no
   position embedding.
2. an utterance's vector is its [SOU] token's state (DialogBERT's [CLS]);
3. context encoder: ``context_layers`` layers (default ``layers``) over the utterance vectors plus their
   turn embedding (how many utterances back; DialogBERT's utterance-position embedding; off with
   ``turn_embeddings = False``, an order-blind ablation).
4. the decoder cross-attends to the context encoder's utterance states, as DialogBERT's decoder
   does; ``token_memory = True`` also lets it see the utterance encoder's token states.

DialogBERT's pre-training objectives (masked utterance regression, utterance order ranking) are left
out: the DRA paper compares the models on generation alone. Utterance slots in the context encoder
are newest first (slot 0 = the latest utterance).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from turnformer.models.dra import MaskedEncoderLayer, context_meta
from turnformer.models.generator_base import IGNORE, GenerationBatch, GeneratorConfig
from turnformer.models.transformer_generator import TransformerGenerator
from turnformer.structure.masks import DEPENDENCY, GLOBAL, SAME_UTTERANCE
from turnformer.structure.packing import sequence_meta


@dataclass
class DialogBERTConfig(GeneratorConfig):
    dra: bool = False  # the utterance encoder under the dependency mask, without position embeddings
    context_layers: int | None = None  # None: as many as `layers`
    token_memory: bool = False  # the decoder also attends to every context token's state

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.context_layers is not None and self.context_layers < 1:
            raise ValueError(f"context_layers must be >= 1, got {self.context_layers}")


class DialogBERTGenerator(TransformerGenerator):
    config_class = DialogBERTConfig

    def __init__(self, config: DialogBERTConfig, pad_id: int = 0, eou_id: int = 3):
        super().__init__(config, pad_id, eou_id)
        d = config.d_model

        def layers(n):
            return nn.ModuleList(MaskedEncoderLayer(d, config.heads, config.ff, config.dropout) for _ in range(n))

        self.encoder, self.encoder_norm = layers(config.layers), nn.LayerNorm(d)  # the utterance encoder
        self.context_encoder, self.context_norm = layers(config.context_layers or config.layers), nn.LayerNorm(d)

    @property
    def needs_parses(self) -> bool:
        return self.config.dra

    def context_window(self, response_words: int) -> None:
        """No limit: positions count within an utterance, the context encoder reads one vector per utterance."""
        return None

    def _encode(self, batch: GenerationBatch, return_attention: bool = False) -> dict:
        if self.config.dra and batch.context_head is None:
            raise ValueError("dialogbert-dra reads dependency parses: build batches with encode_instances (no context_head)")
        meta = context_meta(batch, self.pad_id)
        # the utterance encoder: the utterances packed into rows, so that memory and time grow with the utterances, not
        # with the square of the context (its attention never leaves an utterance: the same as over the flat context)
        rows = utterance_rows(batch, self.pad_id)
        row_meta = context_meta(rows.batch, self.pad_id)
        # positions within the utterance (none with DRA); turns enter at the context encoder
        x = self.embed_tokens(rows.batch.context,
                              None if self.config.dra else row_meta.position.clamp(max=self.config.max_positions - 1))
        mask = (DEPENDENCY if self.config.dra else SAME_UTTERANCE)(row_meta, row_meta)  # [R, T, T]
        token_attention = []
        for layer in self.encoder:
            x, probs = layer(x, mask, return_attention)
            token_attention.append(rows.to_context(probs) if probs is not None else None)
        tokens = self.encoder_norm(rows.to_context(x))  # [B, L, d]

        # [B, U, L]: which column holds utterance slot u's [SOU] (slot u = turn distance u + 1)
        turns = torch.arange(1, int(batch.context_turn.max()) + 1, device=x.device)
        opens = meta.is_special & meta.position.eq(0)
        select = opens[:, None, :] & batch.context_turn[:, None, :].eq(turns[None, :, None])
        present = select.any(-1)  # [B, U]
        y = select.to(tokens.dtype) @ tokens
        if self.turn is not None:
            y = y + self.turn(turns.clamp(max=self.config.max_turns) * present)
        y = self.dropout(y)
        slots = sequence_meta(~present, utterance_per_token=True)
        every_slot, context_attention = GLOBAL(slots, slots), []  # [B, U, U]
        for layer in self.context_encoder:
            y, probs = layer(y, every_slot, return_attention)
            context_attention.append(probs)
        memory, padding = self.context_norm(y), ~present
        if self.config.token_memory:
            memory, padding = torch.cat([memory, tokens], 1), torch.cat([padding, meta.is_padding], 1)
        return {"memory": memory, "padding": padding, "tokens": token_attention, "utterances": context_attention}

    def encode(self, batch: GenerationBatch) -> tuple[torch.Tensor, torch.Tensor]:
        state = self._encode(batch)
        return state["memory"], state["padding"]

    @torch.no_grad()
    def encoder_attention(self, batch: GenerationBatch, level: str = "tokens") -> list[torch.Tensor]:
        """Each layer's attention probabilities: the utterance encoder's over tokens [B, H, L, L]
        (``level = "tokens"``) or the context encoder's over utterance slots [B, H, U, U] (``"utterances"``)."""
        if level not in ("tokens", "utterances"):
            raise ValueError(f"level is 'tokens' or 'utterances', got {level!r}")
        return self._encode(batch, return_attention=True)[level]


class UtteranceRows(NamedTuple):
    """A flat context's utterances packed into rows of their own: `batch` holds them [R, T] (padded; its context_turn
    numbers each row's utterances 1, 2, ..., its role and heads are the flat context's, the heads counted within the
    row), `row` [R, T] the flat row each token came from and `columns` [R, T] its flat column (-1 on padding)."""

    batch: GenerationBatch
    row: torch.Tensor
    columns: torch.Tensor
    shape: tuple[int, int]  # the flat context's (B, L)

    def to_context(self, values: torch.Tensor) -> torch.Tensor:
        """Per-row token states [R, T, d] as the flat context's [B, L, d], or attention probabilities [R, H, T, T] as
        [B, H, L, L]; zero where the flat context has padding, or (probabilities) two different utterances."""
        real = self.columns.ge(0)  # [R, T]
        if values.dim() == 3:
            out = values.new_zeros(*self.shape, values.shape[-1])
            out[self.row[real], self.columns[real]] = values[real]
            return out
        slot = self.batch.context_turn
        pairs = real[:, :, None] & real[:, None, :] & slot[:, :, None].eq(slot[:, None, :])  # [R, T, T]
        out = values.new_zeros(*self.shape, self.shape[1], values.shape[1])
        out[self.row[:, :, None].expand_as(pairs)[pairs], self.columns[:, :, None].expand_as(pairs)[pairs],
            self.columns[:, None, :].expand_as(pairs)[pairs]] = values.permute(0, 2, 3, 1)[pairs]
        return out.permute(0, 3, 1, 2)


def best_fit(lengths: list[int], width: int) -> tuple[list[int], list[int], list[int]]:
    """Best-fit decreasing, longest first into the row with the least room that holds it: each length's row, its offset
    in the row and its place among the row's (0, 1, ...), rows of `width` (at least the longest length). O(n log n)
    searches: a long conversation's batch holds tens of thousands of utterances."""
    rooms, count = [], []  # (room left, row), sorted; utterances per row
    row, offset, place = [0] * len(lengths), [0] * len(lengths), [0] * len(lengths)
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        k = bisect.bisect_left(rooms, (lengths[i], -1))
        left, r = rooms.pop(k) if k < len(rooms) else (width, len(count))
        if r == len(count):
            count.append(0)
        row[i], offset[i], place[i] = r, width - left, count[r]
        count[r] += 1
        bisect.insort(rooms, (left - lengths[i], r))
    return row, offset, place


def utterance_rows(batch: GenerationBatch, pad_id: int = 0) -> UtteranceRows:
    """The utterances of `batch`'s flat context (each a run of one turn distance) packed into rows as long as the
    longest (`best_fit`): about as many cells as real tokens, where a row per utterance padded each to the longest
    (2.4 times the tokens on DailyDialog). An utterance keeps its tokens' order and gets the next number of its row as
    its turn (what `SAME_UTTERANCE` and the positions within an utterance read; the turns enter at the context
    encoder)."""
    context, turn = batch.context, batch.context_turn
    real = context.ne(pad_id)
    starts = real & torch.cat([torch.ones_like(real[:, :1]), turn[:, 1:].ne(turn[:, :-1])], 1)
    start = starts.nonzero(as_tuple=True)[1]  # [U]: row-major, so each flat row's utterances in order
    run = (starts.flatten().cumsum(0) - 1).view_as(turn)  # each token's utterance among the U
    length = torch.bincount(run[real], minlength=len(start))
    width = int(length.max()) if len(length) else 0
    packed_row, offset, place = (context.new_tensor(values) for values in best_fit(length.tolist(), width))
    flat_row, flat_column = real.nonzero(as_tuple=True)  # every real token [N]
    utterance = run[flat_row, flat_column]
    at = packed_row[utterance], offset[utterance] + flat_column - start[utterance]  # its packed row and column

    def laid_out(values: torch.Tensor, fill: int) -> torch.Tensor:  # [N] values of the real tokens -> [R, T]
        out = values.new_full((int(packed_row.max()) + 1 if len(packed_row) else 0, width), fill)
        out[at] = values
        return out

    columns = laid_out(flat_column, -1)
    head = None
    if batch.context_head is not None:  # arcs counted within the row: a head's flat column shifted as its utterance
        heads = batch.context_head[flat_row, flat_column]
        head = laid_out(torch.where(heads.ge(0), heads + at[1] - flat_column, heads), -1)
    role = None if batch.context_role is None else laid_out(batch.context_role[flat_row, flat_column], 0)
    nothing = context.new_zeros(len(columns), 0)
    rows = GenerationBatch(context=laid_out(context[flat_row, flat_column], pad_id),
                           context_turn=laid_out(place[utterance] + 1, 0), response_in=nothing, response_out=nothing,
                           context_role=role, context_head=head)
    return UtteranceRows(rows, laid_out(flat_row, 0), columns, tuple(context.shape))


__all__ = ["IGNORE", "DialogBERTConfig", "DialogBERTGenerator", "utterance_rows"]
