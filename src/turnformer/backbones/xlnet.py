"""XLNet's encoder (the DialogXL paper's backbone) whose attention takes conversation structure.

Why the project owns it, rather than calling `transformers.XLNetModel`: DialogXL's memory rows differ
per conversation (each row keeps its own newest tokens, padded at the end), so the relative distance
between a query and a memory key differs from row to row. XLNetModel assumes one layout for the
whole batch (memory, then the current tokens). Here the position term is looked up per
(query, key) pair from absolute running positions (`query_positions`, `key_positions`, e.g.
`TokenMeta.order`); without them the layout is XLNetModel's, and the outputs equal its outputs.

Kept from XLNetModel (parameter names and shapes too, so ``xlnet-base-cased`` loads unchanged; the
configuration is `transformers.XLNetConfig`): relative sinusoidal position embeddings, content bias
``r_w_bias``, position bias ``r_r_bias``, segment bias ``r_s_bias`` with ``seg_embed``, post-LayerNorm
layers, ``clamp_len``, and memory = the hidden states that entered each layer (its ``mems``).
Added, as in `StructuredEncoder`: [B, K], [B, Q, K] or per-head [B, H, Q, K] boolean masks over
[memory ; current] keys, and the project's empty-row policy (a query that sees no key gets zero).
Not implemented: the query stream of two-stream attention (``perm_mask``, ``target_mapping``:
pretraining only), ``attn_type='uni'`` (pass a causal mask instead), ``bi_data``, and the dropout
XLNetModel applies to its final output (``last_hidden_state`` is ``hidden_states[-1]``, as for BERT).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn
from transformers import XLNetConfig
from transformers.activations import ACT2FN

from turnformer.backbones.bert import EncoderOutput, build_attention_mask, check_detached_keys, check_memory
from turnformer.structure.attention import masked_attention

__all__ = ["RelativePositions", "XLNetConfig", "XLNetStructuredEncoder", "relative_positions"]


def _check_supported(config: XLNetConfig) -> None:
    if config.attn_type != "bi":
        raise NotImplementedError(f"attn_type {config.attn_type!r} is not supported (only 'bi'; pass a causal mask instead)")
    if config.bi_data:
        raise NotImplementedError("bi_data=True (a pretraining input pipeline) is not supported")


class RelativePositions(NamedTuple):
    """The position inputs of one forward, shared by every layer: the sinusoid embedding of each
    distance present (``table`` [P, d_model]) and, per (query, key) pair, the row of its distance in
    ``table`` (``index`` [B or 1, 1, Q, K]). Each layer projects the P rows once and gathers, instead
    of projecting B*Q*K distance vectors."""

    table: torch.Tensor
    index: torch.Tensor


def _sinusoid(distances: torch.Tensor, d_model: int) -> torch.Tensor:
    """XLNet's relative position embedding [P, d_model] of integer distances [P] (same float ops)."""
    freq = torch.arange(0, d_model, 2.0, dtype=torch.int64, device=distances.device).float()
    inv_freq = 1 / torch.pow(10000, freq / d_model)
    angles = distances.float()[:, None] * inv_freq
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)


def relative_positions(
    d_model: int,
    batch: int,
    length: int,
    memory_length: int,
    query_positions: torch.Tensor | None = None,
    key_positions: torch.Tensor | None = None,
    clamp_len: int = -1,
    device: torch.device | str | None = None,
) -> RelativePositions:
    """Distances query_position - key_position for every pair, and their embeddings.

    Without positions: XLNetModel's layout, queries at M..M+T-1 and keys at 0..M+T-1. With them:
    `query_positions` [B, T] and `key_positions` [B, M+T], integers, one row per example or a single
    row shared by all (padding should carry ordinary values: the table spans the range of all distances).
    """
    if (query_positions is None) != (key_positions is None):
        raise ValueError("give both query_positions and key_positions, or neither")
    keys = memory_length + length
    if query_positions is None:
        query_positions = torch.arange(memory_length, keys, device=device).unsqueeze(0)
        key_positions = torch.arange(keys, device=device).unsqueeze(0)
    else:
        for name, value, width in (("query_positions", query_positions, length), ("key_positions", key_positions, keys)):
            if value.dim() != 2 or value.shape[1] != width or value.is_floating_point():
                raise ValueError(f"{name} must be integer [batch, {width}], got {value.dtype} {tuple(value.shape)}")
        if query_positions.shape[0] != key_positions.shape[0] or query_positions.shape[0] not in (1, batch):
            raise ValueError(
                f"query_positions and key_positions need {batch} rows (or 1, shared), got "
                f"{query_positions.shape[0]} and {key_positions.shape[0]}"
            )
    distance = query_positions[:, :, None] - key_positions.to(query_positions.device)[:, None, :]  # [B, Q, K]
    if clamp_len > 0:
        distance = distance.clamp(-clamp_len, clamp_len)
    low, high = (int(x) for x in torch.aminmax(distance)) if distance.numel() else (0, 0)
    table = _sinusoid(torch.arange(low, high + 1, device=distance.device), d_model)
    return RelativePositions(table, (distance - low).unsqueeze(1))


class RelativeAttention(nn.Module):
    """XLNet's relative multi-head attention (content stream), its output projection, residual and
    LayerNorm. Parameters are [d_model, heads, d_head] tensors named as in XLNetModel."""

    def __init__(self, config: XLNetConfig):
        super().__init__()
        heads, d_head, d_model = config.n_head, config.d_head, config.d_model
        for name in ("q", "k", "v", "o", "r"):
            setattr(self, name, nn.Parameter(torch.empty(d_model, heads, d_head)))
        self.r_r_bias = nn.Parameter(torch.empty(heads, d_head))
        self.r_s_bias = nn.Parameter(torch.empty(heads, d_head))
        self.r_w_bias = nn.Parameter(torch.empty(heads, d_head))
        self.seg_embed = nn.Parameter(torch.empty(2, heads, d_head))
        self.layer_norm = nn.LayerNorm(d_model, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)
        self.dropout_p = config.dropout

    def forward(
        self,
        hidden: torch.Tensor,
        positions: RelativePositions,
        mask: torch.Tensor | None = None,
        other_segment: torch.Tensor | None = None,
        memory: torch.Tensor | None = None,
        output_attentions: bool = False,
        detached_keys: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`hidden` [B, T, d]; `memory` [B, M, d] or None; `mask` bool broadcastable to [B, H, T, M+T];
        `other_segment` bool [B, T, M+T] (key in another segment than the query) or None;
        `detached_keys` bool [B, 1, T, T]: pairs read as memory (`masked_attention`'s `past`)."""
        source = hidden if memory is None else torch.cat([memory, hidden], dim=1)
        q = torch.einsum("bth,hnd->bntd", hidden, self.q)
        k = torch.einsum("bth,hnd->bntd", source, self.k)
        v = torch.einsum("bth,hnd->bntd", source, self.v)
        batch, heads, length, _ = q.shape

        # Position term (q + r_r_bias) . R[distance]: once per distance present, then gathered per pair.
        k_r = torch.einsum("ph,hnd->npd", positions.table, self.r)
        bd = torch.einsum("bnqd,npd->bnqp", q + self.r_r_bias[:, None], k_r)
        bias = bd.gather(-1, positions.index.expand(batch, heads, length, source.shape[1]))
        if other_segment is not None:  # segment term (q + r_s_bias) . seg_embed[same or other segment]
            ef = torch.einsum("bnqd,snd->bnqs", q + self.r_s_bias[:, None], self.seg_embed)
            bias = bias + torch.where(other_segment[:, None], ef[..., 1:], ef[..., :1])

        # Content term (q + r_w_bias) . k inside the attention; SDPA scales the bias-free scores by
        # 1/sqrt(d_head), XLNet scales the sum, hence the bias is scaled here.
        dropout_p = self.dropout_p if self.training else 0.0
        past = None
        if detached_keys is not None:
            state = hidden.detach()
            past = (torch.einsum("bth,hnd->bntd", state, self.k), torch.einsum("bth,hnd->bntd", state, self.v), detached_keys)
        context, probs = masked_attention(
            q + self.r_w_bias[:, None], k, v, mask, bias=bias * q.shape[-1] ** -0.5,
            dropout_p=dropout_p, return_probs=output_attentions, past=past,
        )
        out = torch.einsum("bnqd,hnd->bqh", context, self.o)
        return self.layer_norm(self.dropout(out) + hidden), probs


class FeedForward(nn.Module):
    def __init__(self, config: XLNetConfig):
        super().__init__()
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.layer_1 = nn.Linear(config.d_model, config.d_inner)
        self.layer_2 = nn.Linear(config.d_inner, config.d_model)
        self.dropout = nn.Dropout(config.dropout)
        act = config.ff_activation
        self.act = ACT2FN[act] if isinstance(act, str) else act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dropout(self.layer_2(self.dropout(self.act(self.layer_1(x)))))
        return self.layer_norm(y + x)


class Layer(nn.Module):
    def __init__(self, config: XLNetConfig):
        super().__init__()
        self.rel_attn = RelativeAttention(config)
        self.ff = FeedForward(config)

    def forward(self, hidden, positions, mask=None, other_segment=None, memory=None, output_attentions=False,
                detached_keys=None):
        hidden, probs = self.rel_attn(hidden, positions, mask, other_segment, memory, output_attentions, detached_keys)
        return self.ff(hidden), probs


class XLNetStructuredEncoder(nn.Module):
    """XLNet encoder with per-layer memory, per-head masks and per-pair relative positions.

    Same call and output as `StructuredEncoder`; parameter names match `transformers.XLNetModel`
    (no ``transformer.`` prefix). ``config`` is an `XLNetConfig`, whose ``hidden_size`` and
    ``num_attention_heads`` are aliases of ``d_model`` and ``n_head``.
    """

    def __init__(self, config: XLNetConfig):
        super().__init__()
        _check_supported(config)
        self.config = config
        self.word_embedding = nn.Embedding(config.vocab_size, config.d_model)
        # Used only by the query stream (pretraining); kept so that checkpoints load with strict keys.
        self.mask_emb = nn.Parameter(torch.empty(1, 1, config.d_model))
        self.layer = nn.ModuleList(Layer(config) for _ in range(config.n_layer))
        self.dropout = nn.Dropout(config.dropout)

    @property
    def num_layers(self) -> int:
        return len(self.layer)

    @property
    def max_positions(self) -> None:
        """Relative positions only: no absolute limit."""
        return None

    def init_weights(self) -> None:
        """XLNet's initialisation: normal(0, initializer_range) for every matrix and relative-attention
        parameter, zero Linear biases, unit LayerNorm."""
        std = self.config.initializer_range
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=std)
                if isinstance(module, nn.Linear) and module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
            elif isinstance(module, RelativeAttention):
                for p in (module.q, module.k, module.v, module.o, module.r,
                          module.r_r_bias, module.r_s_bias, module.r_w_bias, module.seg_embed):
                    nn.init.normal_(p, mean=0.0, std=std)
        nn.init.normal_(self.mask_emb, mean=0.0, std=std)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        memory: list[torch.Tensor] | tuple[torch.Tensor, ...] | None = None,
        memory_mask: torch.Tensor | None = None,
        query_positions: torch.Tensor | None = None,
        key_positions: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        extra_embeddings: torch.Tensor | None = None,
        detached_keys: torch.Tensor | None = None,
    ) -> EncoderOutput:
        """Encode `input_ids` [B, T].

        `memory`: one tensor [B, M, d_model] per layer, the states that went INTO that layer for
        earlier tokens (``previous_output.hidden_states[:-1]``), used as given (not detached).
        `attention_mask` covers the keys [memory ; current]; see `build_attention_mask`.
        `query_positions` [B, T] and `key_positions` [B, M+T]: absolute running positions, the
        relative distance of a pair being their difference; default XLNetModel's layout.
        `token_type_ids`: segments of the current tokens [B, T] (memory is segment 0, as in
        XLNetModel) or of all keys [B, M+T]; only equality matters. None: one segment for all
        (no segment term; the same output as all-equal ids, since that term is then constant per row).
        `extra_embeddings` [B, T, d_model] are added to the word embeddings (speaker-role embeddings).
        `detached_keys` bool [B, T, T]: pairs read as memory (see `StructuredEncoder.forward`).
        """
        batch, length = input_ids.shape
        memory_length = check_memory(memory, self.num_layers, batch, self.config.d_model)
        detached_keys = check_detached_keys(detached_keys, batch, length)
        mask = build_attention_mask(
            attention_mask, memory_mask, batch, self.config.n_head, length, memory_length, input_ids.device
        )
        positions = relative_positions(
            self.config.d_model, batch, length, memory_length, query_positions, key_positions, self.config.clamp_len,
            device=input_ids.device,
        )
        positions = positions._replace(table=self.dropout(positions.table.to(self.word_embedding.weight.dtype)))
        other_segment = _other_segment(token_type_ids, batch, length, memory_length)

        hidden = self.word_embedding(input_ids)
        if extra_embeddings is not None:
            hidden = hidden + extra_embeddings
        hidden = self.dropout(hidden)
        all_hidden = [hidden] if output_hidden_states else None
        all_probs = [] if output_attentions else None
        for i, layer in enumerate(self.layer):
            layer_memory = None if memory is None else memory[i]
            hidden, probs = layer(hidden, positions, mask, other_segment, layer_memory, output_attentions, detached_keys)
            if all_hidden is not None:
                all_hidden.append(hidden)
            if all_probs is not None:
                all_probs.append(probs)
        return EncoderOutput(
            last_hidden_state=hidden,
            hidden_states=None if all_hidden is None else tuple(all_hidden),
            attentions=None if all_probs is None else tuple(all_probs),
        )


def _other_segment(token_type_ids: torch.Tensor | None, batch: int, length: int, memory_length: int) -> torch.Tensor | None:
    """[B, T, M+T] True where the key is in another segment than the query, or None."""
    if token_type_ids is None:
        return None
    keys = memory_length + length
    if token_type_ids.shape == (batch, length):
        key_types = torch.cat([token_type_ids.new_zeros(batch, memory_length), token_type_ids], dim=1)
    elif token_type_ids.shape == (batch, keys):
        key_types = token_type_ids
    else:
        raise ValueError(
            f"token_type_ids has shape {tuple(token_type_ids.shape)}, expected ({batch}, {length}) or ({batch}, {keys})"
        )
    return key_types[:, memory_length:, None] != key_types[:, None, :]
