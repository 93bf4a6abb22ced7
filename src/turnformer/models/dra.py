"""Transformer + DRA (Dependency Relation Attention): the DRA paper's Transformer with its encoder's
self-attention restricted by each utterance's dependency arcs.

The model is `TransformerGenerator` (same embeddings, decoder and tied output) except for the encoder:
its first ``dra_layers`` layers (default: all) are `MaskedEncoderLayer`s under the structure layer's
`DEPENDENCY` mask (DRA's equation 2): an utterance's [SOU] sees its whole utterance, every token sees
itself, and a word sees the words it governs; later layers, if any, see the whole context. As in the
paper (section 2, Table 3), the encoder input has no position embedding when DRA is on: the arcs stand
for word order. Turn embeddings stay (per config); the decoder keeps its position embeddings.

Batches must carry `context_head` (``needs_parses``, unless ``dra_layers = 0``: `encode_instances`
parses with spaCy, `turnformer.parsing`). `encoder_attention(batch)` gives each layer's attention for plots.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from turnformer.data.generation_vocab import SPECIALS, UNK
from turnformer.models.generator_base import IGNORE, GenerationBatch, GeneratorConfig
from turnformer.models.transformer_generator import TransformerGenerator
from turnformer.structure.attention import MultiHeadAttention, inlined_names, keep_checkpoint_names
from turnformer.structure.masks import DEPENDENCY, GLOBAL
from turnformer.structure.packing import TokenMeta, token_meta

_UNK_ID = SPECIALS.index(UNK)  # a word, although its id is among the special ones


@dataclass
class DRAConfig(GeneratorConfig):
    dra_layers: int | None = None  # encoder layers under the dependency mask, the first ones; None: all

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dra_layers is not None and not 0 <= self.dra_layers <= self.layers:
            raise ValueError(f"dra_layers must be in 0..layers ({self.layers}), got {self.dra_layers}")


class MaskedEncoderLayer(nn.Module):
    """A pre-norm Transformer encoder layer whose self-attention sees only what a boolean mask
    [B, L, L] (True = visible) shows; a row showing nothing attends to nothing (`masked_attention`).
    Returns (states, attention probabilities [B, H, L, L] when asked, else None)."""

    def __init__(self, d_model: int, heads: int, ff: int, dropout: float):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attention = MultiHeadAttention(d_model, heads, dropout)
        self.ff = nn.Sequential(nn.Linear(d_model, ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(ff, d_model))
        self.dropout = nn.Dropout(dropout)
        keep_checkpoint_names(self, inlined_names("attention"))  # checkpoints name the projections qkv and out

    def forward(self, x: torch.Tensor, mask: torch.Tensor, return_attention: bool = False):
        attended, probs = self.attention(self.norm1(x), mask=mask, return_probs=return_attention)  # [B, L, d]
        x = x + self.dropout(attended)
        return x + self.dropout(self.ff(self.norm2(x))), probs


def context_meta(batch: GenerationBatch, pad_id: int = 0) -> TokenMeta:
    """`TokenMeta` of the flat context: utterance = turn distance (unique per utterance in a row),
    speaker = role (0 = Q, 1 = R; 0 when the batch has no roles), position within the utterance,
    order = column, the special tokens, the dependency heads (all -1 when the batch has none)."""
    ids = batch.context
    padding = ids.eq(pad_id)
    speaker = batch.context_role - 1 if batch.context_role is not None else torch.zeros_like(ids)
    return token_meta(batch.context_turn, speaker, padding, is_special=(ids < len(SPECIALS)) & ids.ne(_UNK_ID),
                      head=batch.context_head)


class TransformerDRA(TransformerGenerator):
    config_class = DRAConfig

    def __init__(self, config: DRAConfig, pad_id: int = 0, eou_id: int = 3):
        super().__init__(config, pad_id, eou_id)
        d = config.d_model
        self.dra_layers = config.layers if config.dra_layers is None else config.dra_layers
        self.encoder = nn.ModuleList(MaskedEncoderLayer(d, config.heads, config.ff, config.dropout) for _ in range(config.layers))
        self.encoder_norm = nn.LayerNorm(d)

    @property
    def needs_parses(self) -> bool:
        return self.dra_layers > 0

    def context_window(self, response_words: int) -> int | None:
        """The baseline's positions; with DRA layers none (the encoder reads no positions), so no limit."""
        return None if self.dra_layers else self.config.max_positions

    def _embed_context(self, batch: GenerationBatch) -> torch.Tensor:
        if not self.dra_layers:  # no DRA: the baseline's input, positions included
            return self._embed(batch.context, batch.context_turn)
        return self.embed_tokens(batch.context, turns=batch.context_turn)  # DRA: no positions

    def _encode(self, batch: GenerationBatch, return_attention: bool = False):
        """(encoded context, its padding, each layer's attention or Nones), as `TransformerGenerator._encode`."""
        if self.dra_layers and batch.context_head is None:
            raise ValueError("transformer-dra reads dependency parses: build batches with encode_instances (no context_head)")
        meta = context_meta(batch, self.pad_id)
        dependency = DEPENDENCY(meta, meta) if self.dra_layers else None
        everything = GLOBAL(meta, meta) if self.dra_layers < len(self.encoder) else None
        x, attention = self._embed_context(batch), []
        for i, layer in enumerate(self.encoder):
            x, probs = layer(x, dependency if i < self.dra_layers else everything, return_attention)
            attention.append(probs)
        return self.encoder_norm(x), meta.is_padding, attention


__all__ = ["IGNORE", "DRAConfig", "MaskedEncoderLayer", "TransformerDRA", "context_meta"]
