"""PHAED (Personalized Hierarchical Attentive Encoder-Decoder) response generator, mapped onto our instances.

Each instance is one response with its context (at most 4 utterances, flat in ``batch.context``;
``batch.context_role`` tells queries (role Q, another speaker) from earlier responses of the responder
(role R)). There is no state across instances: the turn-level recurrence memory is recomputed per instance.

- Input (eq. 2): B(x) = E(x) sqrt(d) + TE(turn) + PE(i), i = the token's position *within its utterance*.
  TE is the *aligned* turn, counted back from the response: the newest query and the response share
  TE(1), the next older query and the newest earlier response share TE(2), ... (capped at ``max_turns``;
  none with ``turn_embeddings=False``). Counting back instead of from the conversation's start, as the
  Transformer baseline does, because the instances see a window of the conversation, not all of it.
- Inner-query encoding (sec. 3.3.1): ``layers`` pre-norm Transformer layers over the flat context whose
  self-attention is restricted to the same query utterance; R utterances are never read by the encoder.
- Inter-query encoding (eq. 3-5): ``inter_layers`` pre-norm layers of turn-level relative attention: a
  query token attends to the tokens of every query at or before its own (t >= p, turns counted in
  queries), with learnable B^K_r, B^V_r added to keys and values, r = min(t - p, r_max); r_max + 1
  vectors (r = 0 included; the paper's d x r_max is one short). Computed as in Shaw et al.: a score bias
  q . B^K_r and, after the softmax, the attention mass on each r times B^V_r, so no (Q, K, d) tensor.
  ``turn_attention=False`` (ablation) keeps the same layer, mask (queries at or before) and FFN, but
  plain attention: no relative vectors.
- Decoder with turn-level recurrence (eq. 6-8): ``layers`` pre-norm layers; each layer's self-attention
  keys / values are [SG(memory) ; response states] (causal on the response), then cross-attention to
  the encoded query the response answers (S^_t: the newest query of the context; it has seen the older
  ones by eq. 3-5), then FFN; the output projection is tied to the word embeddings (eq. 8). The memory
  of layer n is the layer-(n-1) states of the newest ``c_max`` earlier responses (context R utterances),
  computed by the same decoder under ``torch.no_grad()`` (stop-gradient) in `encode`, each earlier
  response with causal self-attention on itself and cross-attention to the query it answered (the
  newest query before it). ``c_max=0`` (ablation): no memory.

Simplifications: the recurrence is one level deep (earlier responses are decoded without a memory of
their own), so exactly ``c_max`` earlier responses are visible, where Transformer-XL's would reach
N * c_max back; the memory is recomputed per instance; no dropout on attention probabilities (only on
sub-layer outputs and in the FFN); a query with no visible key (no query in the context, an earlier
response answering no query) outputs zero by the project's empty-row policy (`masked_attention`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from turnformer.models.generator_base import IGNORE, GenerationBatch, GeneratorBase, GeneratorConfig, causal_mask
from turnformer.structure.attention import masked_attention
from turnformer.structure.biases import turn_relative_distance

Q, R = 1, 2  # batch.context_role values


@dataclass
class PHAEDConfig(GeneratorConfig):
    r_max: int = 4  # largest turn-level relative distance between queries (eq. 4)
    c_max: int = 2  # earlier responses in the decoder's memory (eq. 6); 0 = no recurrence
    turn_attention: bool = True  # False: plain attention in the inter-query encoder (ablation)
    inter_layers: int = 1  # turn-level relative attention layers (eq. 3)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.r_max < 0 or self.c_max < 0 or self.inter_layers < 1:
            raise ValueError(f"need r_max >= 0, c_max >= 0 and inter_layers >= 1: {self}")


class Attention(nn.Module):
    """Multi-head attention through `masked_attention`; with ``relative`` > 0 buckets, PHAED's turn-level
    relative attention (eq. 4-5): B^K_r added to the keys and B^V_r to the values."""

    def __init__(self, d: int, heads: int, relative: int = 0):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value, self.out = (nn.Linear(d, d) for _ in range(4))
        self.rel_key = nn.Parameter(torch.randn(relative, d) * 0.02) if relative else None  # B^K (one row per r)
        self.rel_value = nn.Parameter(torch.randn(relative, d) * 0.02) if relative else None  # B^V

    def _split(self, x: torch.Tensor) -> torch.Tensor:  # [..., L, d] -> [..., H, L, d / H]
        return x.unflatten(-1, (self.heads, -1)).transpose(-2, -3)

    def forward(self, x, keys, mask, relative=None):
        """x [B, Lq, d], keys [B, Lk, d], mask [B, Lq, Lk] (True = visible), relative [B, Lq, Lk] long r."""
        q, k, v = self._split(self.query(x)), self._split(self.key(keys)), self._split(self.value(keys))
        mask = mask.unsqueeze(1)
        if self.rel_key is None or relative is None:
            out, _ = masked_attention(q, k, v, mask)
        else:
            index = relative.unsqueeze(1).expand(-1, self.heads, -1, -1)  # [B, H, Lq, Lk]
            # q . (k + B^K_r) = q . k + q . B^K_r: the second term as a score bias gathered by r
            bias = (q @ self._split(self.rel_key).transpose(-1, -2) / math.sqrt(q.shape[-1])).gather(-1, index)
            out, probs = masked_attention(q, k, v, mask, bias, return_probs=True)
            # sum_k a_k (v_k + B^V_r(k)) = a V + sum_r (attention mass on bucket r) B^V_r
            mass = probs.new_zeros(*probs.shape[:-1], self.rel_value.shape[0]).scatter_add_(-1, index, probs)
            out = out + mass @ self._split(self.rel_value)
        return self.out(out.transpose(1, 2).flatten(2))


class Layer(nn.Module):
    """Pre-norm layer: self-attention (keys [memory ; x]), optional cross-attention, FFN; each sub-layer
    adds dropout(f(LayerNorm(x))) to x."""

    def __init__(self, config: PHAEDConfig, cross: bool = False, relative: int = 0):
        super().__init__()
        d = config.d_model
        self.self_norm, self.self_attention = nn.LayerNorm(d), Attention(d, config.heads, relative)
        self.cross_norm = nn.LayerNorm(d) if cross else None
        self.cross_attention = Attention(d, config.heads) if cross else None
        self.ff_norm = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, config.ff), nn.ReLU(), nn.Dropout(config.dropout), nn.Linear(config.ff, d))
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x, mask, memory=None, relative=None, cross=None, cross_mask=None):
        h = self.self_norm(x)
        keys = h if memory is None else torch.cat([self.self_norm(memory), h], 1)
        x = x + self.dropout(self.self_attention(h, keys, mask, relative))
        if self.cross_attention is not None:
            x = x + self.dropout(self.cross_attention(self.cross_norm(x), cross, cross_mask))
        return x + self.dropout(self.ff(self.ff_norm(x)))


class PHAED(GeneratorBase):
    """Hierarchical (inner- then inter-query) encoder of the queries, and a decoder that also attends
    to the stop-gradient states of the responder's earlier responses (see the module docstring)."""

    config_class = PHAEDConfig

    def __init__(self, config: PHAEDConfig, pad_id: int = 0, eou_id: int = 3):
        super().__init__()
        self._add_embeddings(config, pad_id, eou_id)  # PE(i): position within the utterance; TE: aligned turn
        d = config.d_model
        relative = config.r_max + 1 if config.turn_attention else 0
        self.inner = nn.ModuleList(Layer(config) for _ in range(config.layers))
        self.inter = nn.ModuleList(Layer(config, relative=relative) for _ in range(config.inter_layers))
        self.encoder_norm = nn.LayerNorm(d)
        self.decoder = nn.ModuleList(Layer(config, cross=True) for _ in range(config.layers))
        self.decoder_norm = nn.LayerNorm(d)
        self._init_word_embeddings()

    def _embed(self, ids: torch.Tensor, position: torch.Tensor, turn: torch.Tensor) -> torch.Tensor:
        """Eq. 2: E(x) sqrt(d) + TE(turn) + PE(position)."""
        longest = int(position.max()) + 1
        if longest > self.config.max_positions:
            raise ValueError(f"an utterance of {longest} tokens is over max_positions = {self.config.max_positions}")
        return self.embed_tokens(ids, position, turn)

    @staticmethod
    def _context_meta(batch: GenerationBatch) -> dict[str, torch.Tensor]:
        """Per context token [B, Lc]: position in its utterance, role, and its rank among the context's
        queries (Q) or earlier responses (R), 1 = newest; ``answers``: the rank of the query an R
        utterance answers (the newest query before it)."""
        if batch.context_role is None:
            raise ValueError("PHAED needs batch.context_role (1 = query, 2 = earlier response, 0 = padding)")
        turn, role = batch.context_turn, batch.context_role * batch.context_turn.gt(0)
        index = torch.arange(turn.shape[1], device=turn.device).expand_as(turn)
        opens = torch.ones_like(turn, dtype=torch.bool)
        opens[:, 1:] = turn[:, 1:] != turn[:, :-1]  # first token of an utterance
        position = (index - torch.where(opens, index, 0).cummax(1).values) * turn.gt(0)
        # per utterance u = 1..T (how many back): its role; cumulative counts give ranks from the newest
        utterance_role = role.new_zeros(turn.shape[0], int(turn.max()) + 1).scatter_reduce(1, turn, role, "amax")
        q_rank = utterance_role.eq(Q).cumsum(1).gather(1, turn)
        r_rank = utterance_role.eq(R).cumsum(1).gather(1, turn)
        return {"turn": turn, "role": role, "position": position, "q_rank": q_rank, "r_rank": r_rank, "answers": q_rank + 1}

    def encode(self, batch: GenerationBatch):
        """Encoded queries, the response's cross-attention mask, and the decoder memory with its mask."""
        m = self._context_meta(batch)
        is_q, is_r = m["role"].eq(Q), m["role"].eq(R)
        aligned = torch.where(is_r, m["r_rank"] + 1, m["q_rank"])  # aligned turn; the response's is 1
        x = embedded = self._embed(batch.context, m["position"], aligned)

        def pairs(a, b):  # [B, L] x [B, L] -> [B, L, L]
            return a.unsqueeze(-1) & b.unsqueeze(-2)

        same_utterance = m["turn"].unsqueeze(-1) == m["turn"].unsqueeze(-2)
        inner_mask = pairs(is_q, is_q) & same_utterance
        for layer in self.inner:
            x = layer(x, inner_mask)
        # keys at or before the query (rank counts back); conversation order t = -rank, so t - p = rank(p) - rank(t)
        inter_mask = pairs(is_q, is_q) & (m["q_rank"].unsqueeze(-2) >= m["q_rank"].unsqueeze(-1))
        relative = turn_relative_distance(-m["q_rank"], -m["q_rank"], self.config.r_max).clamp(min=0)
        for layer in self.inter:
            x = layer(x, inter_mask, relative=relative)
        encoded = self.encoder_norm(x)
        cross_mask = (is_q & m["q_rank"].eq(1)).unsqueeze(1)  # the response answers the newest query

        memory, memory_mask = None, (is_r & m["r_rank"].le(self.config.c_max)).unsqueeze(1)
        if self.config.c_max > 0:
            with torch.no_grad():  # SG(M) of eq. 7: earlier responses, each decoded on its own
                h, memory = embedded.detach(), []
                own_past = pairs(is_r, is_r) & same_utterance & (m["position"].unsqueeze(-1) >= m["position"].unsqueeze(-2))
                answered = is_q.unsqueeze(1) & (m["q_rank"].unsqueeze(1) == m["answers"].unsqueeze(-1))
                for layer in self.decoder:
                    memory.append(h)  # layer n's memory: the states entering it (eq. 6)
                    h = layer(h, own_past, cross=encoded, cross_mask=answered)
        return encoded, cross_mask, memory, memory_mask

    def decode(self, state, response_in: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        encoded, cross_mask, memory, memory_mask = state
        length = response_in.shape[1]
        position = torch.arange(length, device=response_in.device).expand_as(response_in)
        x = self._embed(response_in, position, torch.ones_like(response_in))
        mask = ~causal_mask(length, x.device) & response_in.ne(self.pad_id).unsqueeze(1)
        if memory is not None:
            mask = torch.cat([memory_mask.expand(-1, length, -1), mask], -1)
        for n, layer in enumerate(self.decoder):
            x = layer(x, mask, memory=None if memory is None else memory[n], cross=encoded, cross_mask=cross_mask)
        hidden = self.decoder_norm(x[:, -1] if last_only else x)
        return hidden @ self.embed.weight.T  # eq. 8, tied to the word embeddings


__all__ = ["IGNORE", "PHAED", "PHAEDConfig"]
