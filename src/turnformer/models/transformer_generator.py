"""Transformer encoder-decoder response generator: the DRA and PHAED papers' Transformer baseline.

The context (at most 4 utterances, oldest first, each ``[SOU] [SPEAKER-Q|R]? words [EOU]``; see
`turnformer.tasks.generation`) is one flat sequence for the encoder; every token gets its word
embedding (scaled by sqrt(d)), a position embedding (position in the flat context) and, as in PHAED,
a turn embedding: how many utterances back from the response its utterance is (1 = the newest,
capped at ``max_turns``). The decoder reads the response, causally masked, and cross-attends to the
encoded context; the output projection is tied to the word embeddings. Greedy decoding by `generate`,
beam search by `beam_search`.

The layers are PyTorch's pre-norm Transformer layers around the structure layer's `MultiHeadAttention`:
the encoder sees the whole context (`GLOBAL`), the decoder its own past (`CAUSAL`) and the whole encoded
context, and a padding token sees nothing. They keep nn.TransformerEncoder's and nn.TransformerDecoder's
parameter names and initialisation (one layer initialised, then copied ``layers`` times; Xavier-uniform
attention input projections), so that seeds give the weights and checkpoints the models they gave before.
"""

from __future__ import annotations

import copy
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from turnformer.models.generator_base import IGNORE, GenerationBatch, GeneratorBase, GeneratorConfig
from turnformer.structure.attention import TORCH_MULTIHEAD_NAMES, MultiHeadAttention, keep_checkpoint_names
from turnformer.structure.masks import CAUSAL, GLOBAL
from turnformer.structure.packing import sequence_meta


def torch_initialised_attention(d: int, heads: int, dropout: float) -> MultiHeadAttention:
    """A `MultiHeadAttention` initialised as nn.MultiheadAttention is (the output projection drawn first, then
    Xavier-uniform input projections; zero biases) and saved under its names (in_proj_weight, out_proj...)."""
    out = nn.Linear(d, d)
    qkv = nn.utils.skip_init(nn.Linear, d, 3 * d)  # drawn below, after the output projection
    attention = MultiHeadAttention(d, heads, dropout, qkv=qkv, out=out)
    attention.draw_as_torch()
    keep_checkpoint_names(attention, TORCH_MULTIHEAD_NAMES)
    return attention


class EncoderLayer(nn.Module):
    """nn.TransformerEncoderLayer (pre-norm): x + attention(norm1(x)), then x + FFN(norm2(x)), with dropout on
    each sub-layer's output and on the attention probabilities."""

    def __init__(self, d: int, heads: int, ff: int, dropout: float, activation: Callable = F.relu):
        super().__init__()
        self.self_attn = torch_initialised_attention(d, heads, dropout)
        self.linear1, self.linear2 = nn.Linear(d, ff), nn.Linear(ff, d)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.dropout = nn.Dropout(dropout)
        self.activation = activation

    def forward(self, x: torch.Tensor, mask: torch.Tensor, return_probs: bool = False):
        """x [B, L, d], mask [B, L, L] (True = visible) -> (x [B, L, d], attention [B, H, L, L] or None)."""
        attended, probs = self.self_attn(self.norm1(x), mask=mask, return_probs=return_probs)
        return self._feed_forward(x + self.dropout(attended)), probs

    def step(self, x: torch.Tensor, mask: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None = None):
        """`forward` for the newest positions x [B, Q, d] of a sequence whose earlier positions' keys and values are
        `past` ([B, P, d] each; None: none): mask [B, Q, P + Q] (True = visible). Returns (x [B, Q, d], the keys and
        values of all P + Q positions): a key/value cache, for decoding a token at a time."""
        attended, kept = self.self_attn.step(self.norm1(x), mask, past)
        return self._feed_forward(x + self.dropout(attended)), kept

    def _feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.dropout(self.linear2(self.dropout(self.activation(self.linear1(self.norm2(x))))))


class DecoderLayer(nn.Module):
    """nn.TransformerDecoderLayer (pre-norm): self-attention, cross-attention to the encoded context, FFN."""

    def __init__(self, d: int, heads: int, ff: int, dropout: float):
        super().__init__()
        self.self_attn = torch_initialised_attention(d, heads, dropout)
        self.multihead_attn = torch_initialised_attention(d, heads, dropout)
        self.linear1, self.linear2 = nn.Linear(d, ff), nn.Linear(ff, d)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor, memory_mask: torch.Tensor) -> torch.Tensor:
        """x [B, L, d], memory [B, M, d], mask [B, L, L] and memory_mask [B, L, M] (True = visible) -> [B, L, d]."""
        return self.step(x, self.multihead_attn.project_keys(memory), mask, memory_mask)[0]

    def step(self, x: torch.Tensor, memory: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor, memory_mask: torch.Tensor,
             past: tuple[torch.Tensor, torch.Tensor] | None = None):
        """`forward` for the newest positions x [B, Q, d] of a response whose earlier positions' self-attention keys
        and values are `past` ([B, P, d] each; None: none), over the encoded context's cross-attention keys and values
        `memory` ([B, M, d] each, projected once: ``multihead_attn.project_keys``); mask [B, Q, P + Q], memory_mask
        [B, Q, M] (True = visible). Returns (x [B, Q, d], the self-attention keys and values of all P + Q positions)."""
        attended, kept = self.self_attn.step(self.norm1(x), mask, past)
        x = x + self.dropout(attended)
        x = x + self.dropout(self.multihead_attn.attend(self.multihead_attn.project_queries(self.norm2(x)), *memory, memory_mask)[0])
        return x + self.dropout(self.linear2(self.dropout(F.relu(self.linear1(self.norm3(x)))))), kept


class LayerStack(nn.Module):
    """``count`` copies of ``layer`` (``layers``) and a final LayerNorm (``norm``), as nn.TransformerEncoder and
    nn.TransformerDecoder make them: the copies start equal."""

    def __init__(self, layer: nn.Module, count: int, d: int):
        super().__init__()
        self.layers = nn.ModuleList(copy.deepcopy(layer) for _ in range(count))
        self.norm = nn.LayerNorm(d)


class TransformerGenerator(GeneratorBase):
    config_class = GeneratorConfig

    def __init__(self, config: GeneratorConfig, pad_id: int = 0, eou_id: int = 3):
        super().__init__()
        self._add_embeddings(config, pad_id, eou_id)
        d = config.d_model
        self.encoder = LayerStack(EncoderLayer(d, config.heads, config.ff, config.dropout), config.layers, d)
        self.decoder = LayerStack(DecoderLayer(d, config.heads, config.ff, config.dropout), config.layers, d)
        self._init_word_embeddings()

    def context_window(self, response_words: int) -> int:
        """The encoder's positions: the whole context is one sequence (the decoder's positions are the response's)."""
        return self.config.max_positions

    def _embed(self, ids: torch.Tensor, turn: torch.Tensor | None = None) -> torch.Tensor:
        if ids.shape[1] > self.config.max_positions:
            raise ValueError(f"a sequence of {ids.shape[1]} tokens is over max_positions = {self.config.max_positions}")
        return self.embed_tokens(ids, torch.arange(ids.shape[1], device=ids.device), turn)

    def _encode(self, batch: GenerationBatch, return_attention: bool = False):
        """(encoded context [B, Lc, d], its padding [B, Lc], each layer's attention [B, H, Lc, Lc] or Nones)."""
        padding = batch.context.eq(self.pad_id)
        context = sequence_meta(padding)  # the whole context is visible: only its padding matters
        visible = GLOBAL(context, context)
        x, attention = self._embed(batch.context, batch.context_turn), []
        for layer in self.encoder.layers:
            x, probs = layer(x, visible, return_attention)
            attention.append(probs)
        return self.encoder.norm(x), padding, attention

    def encode(self, batch: GenerationBatch) -> tuple[torch.Tensor, torch.Tensor]:
        memory, padding, _ = self._encode(batch)
        return memory, padding

    @torch.no_grad()
    def encoder_attention(self, batch: GenerationBatch) -> list[torch.Tensor]:
        """Each encoder layer's attention probabilities [B, H, L, L] (for plots; zero where the mask hides a key)."""
        return self._encode(batch, return_attention=True)[2]

    def decode_states(self, state, response_in: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        memory, memory_padding = state
        response = sequence_meta(response_in.eq(self.pad_id))
        causal, cross = CAUSAL(response, response), GLOBAL(response, sequence_meta(memory_padding))  # [B, Lr, Lr | M]
        x = self._embed(response_in)
        for layer in self.decoder.layers:
            x = layer(x, memory, causal, cross)
        return self.decoder.norm(x[:, -1] if last_only else x)  # decoding needs only the last row

    def stepper(self, state) -> "CachedDecoderSteps":
        return CachedDecoderSteps(self, state)


class CachedDecoderSteps:
    """Decoding's next-token logits with the decoder's keys and values kept: the encoded context's cross-attention keys
    and values are projected once per layer; the first call reads the response prefix as `decode` does, keeping each
    layer's self-attention keys and values; every later call reads only the token added since, at its position. A
    padding token (a row already ended) sees nothing, as in `decode`. The logits equal ``decode(state, response_in,
    last_only=True)`` (tested)."""

    def __init__(self, model: TransformerGenerator, state):
        memory, padding = state
        self.model = model
        self.memory = [layer.multihead_attn.project_keys(memory) for layer in model.decoder.layers]  # per layer: [B, M, d] x 2
        self.memory_visible = ~padding  # [B, M]
        self.past: list[tuple[torch.Tensor, torch.Tensor]] = []  # per layer: keys and values [B, T, d]
        self.visible = None  # [B, T]: response tokens that are not padding

    def __call__(self, response_in: torch.Tensor) -> torch.Tensor:
        m, first = self.model, self.visible is None
        read = 0 if first else self.visible.shape[1]
        if not first and response_in.shape[1] != read + 1:
            raise ValueError(f"a cached decoding step takes the response one token longer ({read + 1}), got {response_in.shape[1]}")
        new = response_in if first else response_in[:, -1:]  # [B, Q]
        real = new.ne(m.pad_id)
        if first:
            response = sequence_meta(~real)
            mask, x, self.visible = CAUSAL(response, response), m._embed(new), real  # [B, Q, Q]
        else:
            if read >= m.config.max_positions:
                raise ValueError(f"a sequence of {read + 1} tokens is over max_positions = {m.config.max_positions}")
            self.visible = torch.cat([self.visible, real], 1)
            mask = real[:, :, None] & self.visible[:, None, :]  # [B, 1, T + 1]: a real token sees every earlier real one
            x = m.embed_tokens(new, torch.full_like(new, read))
        cross = real[:, :, None] & self.memory_visible[:, None, :]  # [B, Q, M]
        for i, layer in enumerate(m.decoder.layers):
            x, kept = layer.step(x, self.memory[i], mask, cross, self.past[i] if i < len(self.past) else None)
            self.past[i:i + 1] = [kept]
        return m.decoder.norm(x[:, -1]) @ m.embed.weight.T

    def reorder(self, rows: torch.Tensor) -> None:
        """Row i of the next step continues row ``rows[i]`` of this one (beam search keeps some hypotheses twice)."""
        self.past = [(key[rows], value[rows]) for key, value in self.past]
        self.memory = [(key[rows], value[rows]) for key, value in self.memory]
        self.visible, self.memory_visible = self.visible[rows], self.memory_visible[rows]


__all__ = ["IGNORE", "CachedDecoderSteps", "DecoderLayer", "EncoderLayer", "GenerationBatch", "GeneratorConfig", "LayerStack",
           "TransformerGenerator"]
