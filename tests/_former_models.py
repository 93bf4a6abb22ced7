"""Reference copies of the code the models had before the structure layer gave them one metadata builder, one
attention module and mask predicates: metadata built by hand, hand-written multi-head attention, masks built by
hand, nn.Transformer layers. The tests in test_attention_module.py check that the models compute what these did,
and load what these saved."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from turnformer.models.generator_base import GenerationBatch, GeneratorBase, GeneratorConfig
from turnformer.models.phaed import PHAEDConfig
from turnformer.structure.attention import masked_attention
from turnformer.structure.biases import lc_attention_bias, turn_relative_distance
from turnformer.structure.masks import DEPENDENCY, GLOBAL, SAME_UTTERANCE
from turnformer.structure.packing import TokenMeta, memory_counts
from turnformer.tasks.generation import SPECIALS, UNK

Q, R = 1, 2


def dra_context_meta(batch: GenerationBatch, pad_id: int = 0) -> TokenMeta:
    ids, turn = batch.context, batch.context_turn
    padding = ids.eq(pad_id)
    order = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
    starts = torch.ones_like(padding)
    starts[:, 1:] = turn[:, 1:] != turn[:, :-1]
    position = order - torch.where(starts, order, 0).cummax(1).values
    special = (ids < len(SPECIALS)) & ids.ne(SPECIALS.index(UNK)) & ~padding
    speaker = (batch.context_role - 1 if batch.context_role is not None else torch.zeros_like(ids)).masked_fill(padding, -1)
    utterance = turn.masked_fill(padding, -1)
    return TokenMeta(utterance=utterance, speaker=speaker, position=position, order=order,
                     is_special=special, is_padding=padding,
                     head=batch.context_head if batch.context_head is not None else torch.full_like(ids, -1),
                     **dict(zip(("memory_index", "memory_before"), memory_counts(utterance, special, padding))))


def dialogxl_current_meta(model, input_ids, turn, speakers, memory) -> TokenMeta:
    batch, length = input_ids.shape
    padding = input_ids == model.pad_id
    special = (input_ids == model.special_ids[0]) | (input_ids == model.special_ids[1])
    position = torch.arange(length, device=input_ids.device).expand(batch, length)
    start, counted = (torch.zeros(batch, 1, dtype=torch.long, device=input_ids.device) for _ in range(2))
    if memory.length:
        start = memory.meta.order.masked_fill(memory.meta.is_padding, -1).amax(1, keepdim=True) + 1
        counted = memory.meta.memory_index.masked_fill(memory.meta.is_padding, -1).amax(1, keepdim=True) + 1
    utterance, special = torch.full_like(input_ids, turn).masked_fill(padding, -1), special & ~padding
    return TokenMeta(
        utterance=utterance, speaker=speakers.unsqueeze(1).expand(batch, length).masked_fill(padding, -1), position=position,
        order=start + position, is_special=special, is_padding=padding, head=torch.full_like(input_ids, -1),
        **dict(zip(("memory_index", "memory_before"), memory_counts(utterance, special, padding, offset=counted))),
    )


def dialogxl_conversation_meta(model, batch) -> tuple[TokenMeta, torch.Tensor]:
    ids, lengths = batch.input_ids, batch.turn_lengths
    columns = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
    ends = lengths.cumsum(1)
    padding = columns >= ends[:, -1:]
    turn = torch.searchsorted(ends, columns.contiguous(), right=True).clamp(max=lengths.shape[1] - 1)
    position = columns - (ends - lengths).gather(1, turn)
    special = ((ids == model.special_ids[0]) | (ids == model.special_ids[1])) & ~padding
    utterance = turn.masked_fill(padding, -1)
    in_memory = ~special & ~padding
    newest = torch.full_like(lengths, -1).scatter_reduce(1, turn, position.masked_fill(~in_memory, -1), "amax")
    start = (newest + 1).cumsum(1) - (newest + 1) if model.config.mem_len else torch.zeros_like(lengths)
    order = start.gather(1, turn) + position
    meta = TokenMeta(
        utterance=utterance, speaker=batch.speakers.gather(1, turn).masked_fill(padding, -1), position=position,
        order=order, is_special=special, is_padding=padding, head=torch.full_like(ids, -1),
        **dict(zip(("memory_index", "memory_before"), memory_counts(utterance, special, padding))),
    )
    if model.config.positions == "utterance":
        return meta, position.masked_fill(padding, 0)
    if model.encoder.max_positions is None:
        return meta, order
    shift = (start + lengths - model.encoder.max_positions).clamp(min=0)
    return meta, (order - shift.gather(1, turn)).masked_fill(padding, 0)


class MDFNBlock(nn.Module):
    """MDFN's decoupling channel."""

    def __init__(self, hidden: int, heads: int, dropout: float, eps: float = 1e-12):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x, mask):
        b, t, d = x.shape
        split = lambda y: y.view(b, t, self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
        q, k, v = (split(y) for y in self.qkv(x).chunk(3, dim=-1))
        p = self.dropout.p if self.training else 0.0
        attended, _ = masked_attention(q, k, v, mask.unsqueeze(1), dropout_p=p)
        return self.norm(x + self.dropout(self.out(attended.transpose(1, 2).reshape(b, t, d))))


class DRALayer(nn.Module):
    """DRA's (and DialogBERT's) masked pre-norm encoder layer."""

    def __init__(self, d_model: int, heads: int, ff: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv, self.out = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(ff, d_model))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask, return_attention=False):
        b, length, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, length, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        p = self.dropout.p if self.training else 0.0
        attended, probs = masked_attention(q, k, v, mask[:, None], dropout_p=p, return_probs=return_attention)
        x = x + self.dropout(self.out(attended.transpose(1, 2).reshape(b, length, d)))
        return x + self.dropout(self.ff(self.norm2(x))), probs


class LCAttention(nn.Module):
    """LC Attention's context encoder (mask [B, L] of real utterances, keys only)."""

    def __init__(self, d: int, heads: int, max_positions: int, gaussian: bool, max_shift=2.0, max_width=5.0):
        super().__init__()
        self.heads, self.gaussian, self.max_shift, self.max_width = heads, gaussian, max_shift, max_width
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        if gaussian:
            self.center_weight = nn.Parameter(torch.zeros(max_positions, d))
            self.width_weight = nn.Parameter(torch.empty(max_positions, d).uniform_(-d**-0.5, d**-0.5))

    def forward(self, x, mask, return_probs=False, query_positions=None):
        b, n, d = x.shape
        k, v = F.linear(x, self.qkv.weight[d:], self.qkv.bias[d:]).chunk(2, dim=-1)
        queries = x if query_positions is None else x.gather(1, query_positions.unsqueeze(-1).expand(-1, -1, d))
        q = F.linear(queries, self.qkv.weight[:d], self.qkv.bias[:d])
        bias = None
        if self.gaussian:
            bias, _, _ = lc_attention_bias(k, mask, self.center_weight, self.width_weight, self.max_shift, self.max_width,
                                           query_positions)
            bias = bias.unsqueeze(1)
        split = lambda t: t.view(b, t.shape[1], self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
        out, probs = masked_attention(split(q), split(k), split(v), mask[:, None, None, :], bias, return_probs=return_probs)
        return queries + self.out(out.transpose(1, 2).reshape(b, q.shape[1], d)), probs


def causal_mask(length: int, device) -> torch.Tensor:
    """True above the diagonal: what a decoder position may NOT see (nn.Transformer's convention)."""
    return torch.triu(torch.ones(length, length, dtype=torch.bool, device=device), 1)


class FormerGenerator(GeneratorBase):
    """The former loss: every response row projected onto the vocabulary, then IGNORE left out."""

    def loss(self, batch: GenerationBatch) -> torch.Tensor:
        return F.cross_entropy(self(batch).flatten(0, 1), batch.response_out.flatten(), ignore_index=-100)


class TransformerGenerator(FormerGenerator):
    """The encoder-decoder baseline on nn.TransformerEncoder / nn.TransformerDecoder."""

    def __init__(self, config: GeneratorConfig, pad_id: int = 0, eou_id: int = 3):
        super().__init__()
        self._add_embeddings(config, pad_id, eou_id)
        d = config.d_model

        def layer(kind):
            return kind(d, config.heads, config.ff, config.dropout, batch_first=True, norm_first=True)

        self.encoder = nn.TransformerEncoder(layer(nn.TransformerEncoderLayer), config.layers, norm=nn.LayerNorm(d),
                                             enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(layer(nn.TransformerDecoderLayer), config.layers, norm=nn.LayerNorm(d))
        self._init_word_embeddings()

    def _embed(self, ids, turn=None):
        return self.embed_tokens(ids, torch.arange(ids.shape[1], device=ids.device), turn)

    def encode(self, batch: GenerationBatch):
        padding = batch.context.eq(self.pad_id)
        return self.encoder(self._embed(batch.context, batch.context_turn), src_key_padding_mask=padding), padding

    @torch.no_grad()
    def encoder_attention(self, batch: GenerationBatch) -> list[torch.Tensor]:
        padding = batch.context.eq(self.pad_id)
        x, out = self._embed(batch.context, batch.context_turn), []
        for layer in self.encoder.layers:
            h = layer.norm1(x)
            out.append(layer.self_attn(h, h, h, key_padding_mask=padding, need_weights=True, average_attn_weights=False)[1])
            x = layer(x, src_key_padding_mask=padding)
        return out

    def decode(self, state, response_in, last_only=False):
        memory, memory_padding = state
        hidden = self.decoder(self._embed(response_in), memory, tgt_mask=causal_mask(response_in.shape[1], response_in.device),
                              tgt_key_padding_mask=response_in.eq(self.pad_id), memory_key_padding_mask=memory_padding)
        return (hidden[:, -1] if last_only else hidden) @ self.embed.weight.T


class GPT2Generator(FormerGenerator):
    """The decoder-only baseline on nn.TransformerEncoder with a causal mask (its `pack` is unchanged)."""

    def __init__(self, config: GeneratorConfig, pad_id: int = 0, eou_id: int = 3):
        super().__init__()
        self._add_embeddings(config, pad_id, eou_id)
        d = config.d_model
        layer = nn.TransformerEncoderLayer(d, config.heads, config.ff, config.dropout, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.layers = nn.TransformerEncoder(layer, config.layers, norm=nn.LayerNorm(d), enable_nested_tensor=False)
        self._init_word_embeddings()

    def encode(self, batch):
        return batch.context, batch.context_turn, batch.context.ne(self.pad_id).sum(1)

    def decode(self, state, response_in, last_only=False):
        from turnformer.models.gpt2_generator import GPT2Generator as Current

        ids, turns, start = Current.pack(self, state, response_in)
        x = self.embed_tokens(ids, torch.arange(ids.shape[1], device=ids.device), turns)
        hidden = self.layers(x, mask=causal_mask(ids.shape[1], ids.device), is_causal=True)
        steps = torch.arange(response_in.shape[1], device=ids.device)
        steps = steps[-1:] if last_only else steps
        rows = hidden.gather(1, (start[:, None] + steps)[:, :, None].expand(-1, -1, hidden.shape[-1]))
        logits = rows @ self.embed.weight.T
        return logits[:, 0] if last_only else logits


class TransformerDRA(TransformerGenerator):
    def __init__(self, config, pad_id: int = 0, eou_id: int = 3):
        super().__init__(config, pad_id, eou_id)
        d = config.d_model
        self.dra_layers = config.layers if config.dra_layers is None else config.dra_layers
        self.encoder = nn.ModuleList(DRALayer(d, config.heads, config.ff, config.dropout) for _ in range(config.layers))
        self.encoder_norm = nn.LayerNorm(d)

    def encode(self, batch):
        meta = dra_context_meta(batch, self.pad_id)
        dependency = DEPENDENCY(meta, meta) if self.dra_layers else None
        everything = GLOBAL(meta, meta) if self.dra_layers < len(self.encoder) else None
        x = self.embed_tokens(batch.context, turns=batch.context_turn) if self.dra_layers else self._embed(batch.context, batch.context_turn)
        for i, layer in enumerate(self.encoder):
            x, _ = layer(x, dependency if i < self.dra_layers else everything)
        return self.encoder_norm(x), meta.is_padding


class DialogBERT(TransformerGenerator):
    def __init__(self, config, pad_id: int = 0, eou_id: int = 3):
        super().__init__(config, pad_id, eou_id)
        d = config.d_model

        def layers(n):
            return nn.ModuleList(DRALayer(d, config.heads, config.ff, config.dropout) for _ in range(n))

        self.encoder, self.encoder_norm = layers(config.layers), nn.LayerNorm(d)
        self.context_encoder, self.context_norm = layers(config.context_layers or config.layers), nn.LayerNorm(d)

    def encode(self, batch):
        meta = dra_context_meta(batch, self.pad_id)
        x = self.embed_tokens(batch.context, None if self.config.dra else meta.position.clamp(max=self.config.max_positions - 1))
        mask = (DEPENDENCY if self.config.dra else SAME_UTTERANCE)(meta, meta)
        for layer in self.encoder:
            x, _ = layer(x, mask)
        tokens = self.encoder_norm(x)
        turns = torch.arange(1, int(batch.context_turn.max()) + 1, device=x.device)
        opens = meta.is_special & meta.position.eq(0)
        select = opens[:, None, :] & batch.context_turn[:, None, :].eq(turns[None, :, None])
        present = select.any(-1)
        y = select.to(tokens.dtype) @ tokens
        if self.turn is not None:
            y = y + self.turn(turns.clamp(max=self.config.max_turns) * present)
        y = self.dropout(y)
        for layer in self.context_encoder:
            y, _ = layer(y, present[:, :, None] & present[:, None, :])
        memory, padding = self.context_norm(y), ~present
        if self.config.token_memory:
            memory, padding = torch.cat([memory, tokens], 1), torch.cat([padding, meta.is_padding], 1)
        return memory, padding
class PHAEDAttention(nn.Module):
    def __init__(self, d: int, heads: int, relative: int = 0):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value, self.out = (nn.Linear(d, d) for _ in range(4))
        self.rel_key = nn.Parameter(torch.randn(relative, d) * 0.02) if relative else None
        self.rel_value = nn.Parameter(torch.randn(relative, d) * 0.02) if relative else None

    def _split(self, x):
        return x.unflatten(-1, (self.heads, -1)).transpose(-2, -3)

    def forward(self, x, keys, mask, relative=None):
        q, k, v = self._split(self.query(x)), self._split(self.key(keys)), self._split(self.value(keys))
        mask = mask.unsqueeze(1)
        if self.rel_key is None or relative is None:
            out, _ = masked_attention(q, k, v, mask)
        else:
            index = relative.unsqueeze(1).expand(-1, self.heads, -1, -1)
            bias = (q @ self._split(self.rel_key).transpose(-1, -2) / math.sqrt(q.shape[-1])).gather(-1, index)
            out, probs = masked_attention(q, k, v, mask, bias, return_probs=True)
            mass = probs.new_zeros(*probs.shape[:-1], self.rel_value.shape[0]).scatter_add_(-1, index, probs)
            out = out + mass @ self._split(self.rel_value)
        return self.out(out.transpose(1, 2).flatten(2))


class PHAEDLayer(nn.Module):
    def __init__(self, config: PHAEDConfig, cross: bool = False, relative: int = 0):
        super().__init__()
        d = config.d_model
        self.self_norm, self.self_attention = nn.LayerNorm(d), PHAEDAttention(d, config.heads, relative)
        self.cross_norm = nn.LayerNorm(d) if cross else None
        self.cross_attention = PHAEDAttention(d, config.heads) if cross else None
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


class PHAED(FormerGenerator):
    """PHAED with its masks built by hand from a dictionary of ranks."""

    def __init__(self, config: PHAEDConfig, pad_id: int = 0, eou_id: int = 3):
        super().__init__()
        self._add_embeddings(config, pad_id, eou_id)
        d = config.d_model
        relative = config.r_max + 1 if config.turn_attention else 0
        self.inner = nn.ModuleList(PHAEDLayer(config) for _ in range(config.layers))
        self.inter = nn.ModuleList(PHAEDLayer(config, relative=relative) for _ in range(config.inter_layers))
        self.encoder_norm = nn.LayerNorm(d)
        self.decoder = nn.ModuleList(PHAEDLayer(config, cross=True) for _ in range(config.layers))
        self.decoder_norm = nn.LayerNorm(d)
        self._init_word_embeddings()

    @staticmethod
    def _context_meta(batch):
        turn, role = batch.context_turn, batch.context_role * batch.context_turn.gt(0)
        index = torch.arange(turn.shape[1], device=turn.device).expand_as(turn)
        opens = torch.ones_like(turn, dtype=torch.bool)
        opens[:, 1:] = turn[:, 1:] != turn[:, :-1]
        position = (index - torch.where(opens, index, 0).cummax(1).values) * turn.gt(0)
        utterance_role = role.new_zeros(turn.shape[0], int(turn.max()) + 1).scatter_reduce(1, turn, role, "amax")
        q_rank = utterance_role.eq(Q).cumsum(1).gather(1, turn)
        r_rank = utterance_role.eq(R).cumsum(1).gather(1, turn)
        return {"turn": turn, "role": role, "position": position, "q_rank": q_rank, "r_rank": r_rank, "answers": q_rank + 1}

    def encode(self, batch):
        m = self._context_meta(batch)
        is_q, is_r = m["role"].eq(Q), m["role"].eq(R)
        aligned = torch.where(is_r, m["r_rank"] + 1, m["q_rank"])
        x = embedded = self.embed_tokens(batch.context, m["position"], aligned)

        def pairs(a, b):
            return a.unsqueeze(-1) & b.unsqueeze(-2)

        same_utterance = m["turn"].unsqueeze(-1) == m["turn"].unsqueeze(-2)
        inner_mask = pairs(is_q, is_q) & same_utterance
        for layer in self.inner:
            x = layer(x, inner_mask)
        inter_mask = pairs(is_q, is_q) & (m["q_rank"].unsqueeze(-2) >= m["q_rank"].unsqueeze(-1))
        relative = turn_relative_distance(-m["q_rank"], -m["q_rank"], self.config.r_max).clamp(min=0)
        for layer in self.inter:
            x = layer(x, inter_mask, relative=relative)
        encoded = self.encoder_norm(x)
        cross_mask = (is_q & m["q_rank"].eq(1)).unsqueeze(1)
        memory, memory_mask = None, (is_r & m["r_rank"].le(self.config.c_max)).unsqueeze(1)
        if self.config.c_max > 0:
            with torch.no_grad():
                h, memory = embedded.detach(), []
                own_past = pairs(is_r, is_r) & same_utterance & (m["position"].unsqueeze(-1) >= m["position"].unsqueeze(-2))
                answered = is_q.unsqueeze(1) & (m["q_rank"].unsqueeze(1) == m["answers"].unsqueeze(-1))
                for layer in self.decoder:
                    memory.append(h)
                    h = layer(h, own_past, cross=encoded, cross_mask=answered)
        return encoded, cross_mask, memory, memory_mask

    def decode(self, state, response_in, last_only=False):
        encoded, cross_mask, memory, memory_mask = state
        length = response_in.shape[1]
        position = torch.arange(length, device=response_in.device).expand_as(response_in)
        x = self.embed_tokens(response_in, position, torch.ones_like(response_in))
        mask = ~causal_mask(length, x.device) & response_in.ne(self.pad_id).unsqueeze(1)
        if memory is not None:
            mask = torch.cat([memory_mask.expand(-1, length, -1), mask], -1)
        for n, layer in enumerate(self.decoder):
            x = layer(x, mask, memory=None if memory is None else memory[n], cross=encoded, cross_mask=cross_mask)
        hidden = self.decoder_norm(x[:, -1] if last_only else x)
        return hidden @ self.embed.weight.T
