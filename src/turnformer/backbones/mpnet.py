"""MPNet's encoder (all-mpnet-base-v2) whose attention takes conversation structure.

MPNet is BERT-shaped with two differences, both kept from `transformers.MPNetModel`:

* absolute position embeddings with fairseq's padding offset: position ``p`` (0-based) reads row
  ``p + padding_idx + 1`` of ``embeddings.position_embeddings`` (padding_idx is 1, hard-coded as in
  MPNetModel), so a table of ``max_position_embeddings`` rows (514) holds ``max_positions`` (512)
  usable positions; there are no token-type embeddings;
* a T5-style bucketed relative position bias, one value per head and bucket
  (``encoder.relative_attention_bias``), computed once per forward and added to every layer's scores.

Added, as in `StructuredEncoder`: [B, K], [B, Q, K] or per-head [B, H, Q, K] boolean masks over
[memory ; current] keys, per-layer memory (the states that entered each layer for earlier tokens),
and the project's empty-row policy (a query that sees no key gets zero).

Positions. A query's absolute position is its ``position_ids`` entry (0-based, for the embedding),
and the relative bias of a (query, key) pair comes from ``key_position - query_position``:

* no memory, no ``position_ids``: 0..T-1, MPNetModel's layout (its bias always uses 0..T-1, and its
  embeddings number the non-padding tokens 0.. : the same on the real tokens of right-padded batches);
* ``position_ids`` given: they feed both the embeddings and the bias (MPNetModel would still use
  0..T-1 for the bias; identical when the given positions are 0..T-1);
* memory of M tokens: the memory comes right before the current tokens, as in one concatenated
  sequence. Without ``position_ids`` memory keys are 0..M-1 and the current tokens M..M+T-1; with
  them, memory key j is at ``position_ids[:, 0] - M + j``. ``key_position_ids`` [B, M] overrides the
  memory keys' positions (e.g. running positions in a conversation when memory rows are padded
  differently per row, as DialogXL's are); memory keys need no embedding row, so any integers do.

With these defaults, encoding [A ; B] in one pass under a causal-by-segment mask equals encoding A,
then B with A's layer inputs as memory (tested).

Parameter names mirror MPNetModel's state dict (``encoder.layer.0.attention.attn.q.weight``,
``encoder.relative_attention_bias.weight``, ...), so MPNet checkpoints load with strict key checks;
the configuration is `transformers.MPNetConfig`.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from transformers import MPNetConfig

from turnformer.backbones.bert import (
    EncoderOutput,
    Intermediate,
    Output,
    Pooler,
    bert_init,
    build_attention_mask,
    check_attention_bias,
    check_detached_keys,
    check_memory,
)
from turnformer.structure.attention import memory_attention

__all__ = ["MPNetConfig", "MPNetStructuredEncoder", "relative_position_bucket"]

PADDING_IDX = 1  # MPNetEmbeddings hard-codes it, whatever config.pad_token_id says
NUM_BUCKETS = 32  # MPNetEncoder.compute_position_bias's buckets, whatever relative_attention_num_buckets says
MAX_DISTANCE = 128


def relative_position_bucket(relative_position: torch.Tensor, num_buckets: int = NUM_BUCKETS,
                             max_distance: int = MAX_DISTANCE) -> torch.Tensor:
    """MPNet's (T5's bidirectional) bucket of each ``key_position - query_position``: half the
    buckets per direction, exact up to a quarter of them, then logarithmic up to `max_distance`."""
    n = -relative_position
    num_buckets //= 2
    ret = (n < 0).to(torch.long) * num_buckets
    n = torch.abs(n)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    val_if_large = max_exact + (
        torch.log(n.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).to(torch.long)
    val_if_large = torch.min(val_if_large, torch.full_like(val_if_large, num_buckets - 1))
    return ret + torch.where(is_small, n, val_if_large)


def _check_supported(config: MPNetConfig) -> None:
    if config.hidden_size % config.num_attention_heads:
        raise ValueError(
            f"hidden_size {config.hidden_size} is not a multiple of num_attention_heads {config.num_attention_heads}"
        )
    if config.relative_attention_num_buckets < NUM_BUCKETS:
        raise ValueError(
            f"relative_attention_num_buckets {config.relative_attention_num_buckets} < {NUM_BUCKETS}: "
            f"MPNet computes {NUM_BUCKETS} buckets"
        )
    if config.max_position_embeddings <= PADDING_IDX + 1:
        raise ValueError(f"max_position_embeddings {config.max_position_embeddings} leaves no usable position")


class Embeddings(nn.Module):
    """Word + position embeddings (position p reads row p + padding_idx + 1), LayerNorm, dropout."""

    def __init__(self, config: MPNetConfig, use_position_embeddings: bool = True):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=PADDING_IDX)
        # Kept even when unused, so that a checkpoint still loads with strict key checking.
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size, padding_idx=PADDING_IDX)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.use_position_embeddings = use_position_embeddings

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor,
                extra_embeddings: torch.Tensor | None = None) -> torch.Tensor:
        x = self.word_embeddings(input_ids)
        if self.use_position_embeddings:
            x = x + self.position_embeddings(position_ids + PADDING_IDX + 1)
        if extra_embeddings is not None:  # e.g. speaker-role embeddings, summed before the LayerNorm like the others
            x = x + extra_embeddings
        return self.dropout(self.LayerNorm(x))


class SelfAttention(nn.Module):
    """Multi-head attention with the relative position bias: queries from the current tokens,
    keys/values from [memory ; current]; the output projection ``o`` is part of it, as in MPNet."""

    def __init__(self, config: MPNetConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.q = nn.Linear(config.hidden_size, config.hidden_size)
        self.k = nn.Linear(config.hidden_size, config.hidden_size)
        self.v = nn.Linear(config.hidden_size, config.hidden_size)
        self.o = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_p = config.attention_probs_dropout_prob

    def forward(self, hidden, bias, mask=None, memory=None, output_attentions=False, detached_keys=None):
        # MPNet adds the bias to the already scaled scores, as masked_attention does.
        context, probs = memory_attention(hidden, self.q, self.k, self.v, self.num_heads, mask, memory, bias,
                                          self.dropout_p if self.training else 0.0, output_attentions, detached_keys)
        return self.o(context), probs


class Attention(nn.Module):
    def __init__(self, config: MPNetConfig):
        super().__init__()
        self.attn = SelfAttention(config)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden, bias, mask=None, memory=None, output_attentions=False, detached_keys=None):
        out, probs = self.attn(hidden, bias, mask, memory, output_attentions, detached_keys)
        return self.LayerNorm(self.dropout(out) + hidden), probs


class Layer(nn.Module):
    def __init__(self, config: MPNetConfig):
        super().__init__()
        self.attention = Attention(config)
        self.intermediate = Intermediate(config)  # same modules and names as BERT's
        self.output = Output(config)

    def forward(self, hidden, bias, mask=None, memory=None, output_attentions=False, detached_keys=None):
        hidden, probs = self.attention(hidden, bias, mask, memory, output_attentions, detached_keys)
        return self.output(self.intermediate(hidden), hidden), probs


class Encoder(nn.Module):
    def __init__(self, config: MPNetConfig):
        super().__init__()
        self.layer = nn.ModuleList(Layer(config) for _ in range(config.num_hidden_layers))
        self.relative_attention_bias = nn.Embedding(config.relative_attention_num_buckets, config.num_attention_heads)


def _check_positions(name: str, value: torch.Tensor, batch: int, width: int) -> torch.Tensor:
    if value.dim() == 1:
        value = value.unsqueeze(0)
    if value.dim() != 2 or value.shape[1] != width or value.shape[0] not in (1, batch) or value.is_floating_point():
        raise ValueError(f"{name} must be integer [batch or 1, {width}], got {value.dtype} {tuple(value.shape)}")
    return value


class MPNetStructuredEncoder(nn.Module):
    """MPNet encoder with per-layer memory, per-head attention masks and relative positions over
    [memory ; current] keys.

    Same call and output as `StructuredEncoder`; parameter names match `transformers.MPNetModel`
    (no ``mpnet.`` prefix). ``pooler`` is None when the checkpoint has no pooler weights.
    """

    def __init__(self, config: MPNetConfig, use_position_embeddings: bool = True, add_pooler: bool = True):
        super().__init__()
        _check_supported(config)
        self.config = config
        self.embeddings = Embeddings(config, use_position_embeddings)
        self.encoder = Encoder(config)
        self.pooler = Pooler(config) if add_pooler else None

    @property
    def num_layers(self) -> int:
        return len(self.encoder.layer)

    @property
    def max_positions(self) -> int:
        """Usable absolute positions 0..max_positions-1 (the table's first rows are the padding offset)."""
        return self.config.max_position_embeddings - PADDING_IDX - 1

    def init_weights(self) -> None:
        """MPNet's initialisation is BERT's (`bert_init`; the relative bias table is an embedding too)."""
        bert_init(self, self.config.initializer_range)

    def positions(
        self,
        batch: int,
        length: int,
        memory_length: int,
        position_ids: torch.Tensor | None = None,
        key_position_ids: torch.Tensor | None = None,
        device: torch.device | str | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(query positions [B or 1, T], key positions [B or 1, M+T]) under the rules of the module
        docstring; the query positions are checked against the embedding table."""
        if position_ids is None:
            queries = torch.arange(memory_length, memory_length + length, device=device).unsqueeze(0)
        else:
            queries = _check_positions("position_ids", position_ids, batch, length).to(device)
        if key_position_ids is None:
            start = queries[:, :1] if length else torch.full((queries.shape[0], 1), memory_length, device=device)
            memory_keys = start - memory_length + torch.arange(memory_length, device=device)
        else:
            memory_keys = _check_positions("key_position_ids", key_position_ids, batch, memory_length).to(device)
        rows = max(queries.shape[0], memory_keys.shape[0])
        keys = torch.cat([memory_keys.expand(rows, -1), queries.expand(rows, -1)], dim=1)
        if self.embeddings.use_position_embeddings and queries.numel():
            low, high = (int(x) for x in torch.aminmax(queries))
            if low < 0 or high >= self.max_positions:
                raise ValueError(
                    f"position id {high if high >= self.max_positions else low} is out of range: MPNet has positions "
                    f"0..{self.max_positions - 1} (max_position_embeddings={self.config.max_position_embeddings} "
                    f"less the padding offset {PADDING_IDX + 1})"
                )
        return queries, keys

    def position_bias(self, query_positions: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
        """[B or 1, H, Q, K]: the learnt bias of each pair's bucketed ``key - query`` distance."""
        relative = key_positions[:, None, :] - query_positions[:, :, None]
        values = self.encoder.relative_attention_bias(relative_position_bucket(relative))  # [B, Q, K, H]
        return values.permute(0, 3, 1, 2)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        memory: list[torch.Tensor] | tuple[torch.Tensor, ...] | None = None,
        memory_mask: torch.Tensor | None = None,
        key_position_ids: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        extra_embeddings: torch.Tensor | None = None,
        attention_bias: list[torch.Tensor] | tuple[torch.Tensor, ...] | None = None,
        detached_keys: torch.Tensor | None = None,
        query_positions: torch.Tensor | None = None,
        key_positions: torch.Tensor | None = None,
    ) -> EncoderOutput:
        """Encode `input_ids` [B, T].

        `memory`: one tensor [B, M, hidden] per layer, the hidden states that went INTO that layer
        for earlier tokens (``previous_output.hidden_states[:-1]``), used as given (not detached).
        `attention_mask` covers the keys [memory ; current]; see `build_attention_mask`.
        `position_ids` [B or 1, T] (0-based) and `key_position_ids` [B or 1, M]: see the module
        docstring; by default the memory comes right before the current tokens.
        `token_type_ids` are accepted for a uniform call and ignored: MPNet has no token types.
        `extra_embeddings` [B, T, hidden] are added to the input embeddings (speaker-role embeddings).
        `attention_bias`: one float tensor per layer, broadcastable to [B, H, T, M+T], added to that
        layer's scores beside the relative-position bias (DialogXL's learned memory bias).
        `detached_keys` bool [B, T, T]: pairs read as memory (see `StructuredEncoder.forward`).
        `query_positions` [B, T] and `key_positions` [B, M+T]: the positions the relative bias measures its
        distances between, where they are not the absolute ones (one pass over utterances whose absolute
        positions were shifted each on its own, as DialogXL's are in a long conversation); give both or neither.
        """
        del token_type_ids  # MPNet has no token-type embeddings (its tokenizer returns none)
        batch, length = input_ids.shape
        memory_length = check_memory(memory, self.num_layers, batch, self.config.hidden_size)
        check_attention_bias(attention_bias, self.num_layers)
        detached_keys = check_detached_keys(detached_keys, batch, length)
        mask = build_attention_mask(
            attention_mask, memory_mask, batch, self.config.num_attention_heads, length, memory_length, input_ids.device
        )
        queries, keys = self.positions(batch, length, memory_length, position_ids, key_position_ids, input_ids.device)
        hidden = self.embeddings(input_ids, queries, extra_embeddings)
        if (query_positions is None) != (key_positions is None):
            raise ValueError("give both query_positions and key_positions, or neither")
        if query_positions is not None:
            queries = _check_positions("query_positions", query_positions, batch, length).to(input_ids.device)
            keys = _check_positions("key_positions", key_positions, batch, memory_length + length).to(input_ids.device)
        bias = self.position_bias(queries, keys).to(hidden.dtype)  # once, shared by every layer

        all_hidden = [hidden] if output_hidden_states else None
        all_probs = [] if output_attentions else None
        for i, layer in enumerate(self.encoder.layer):
            layer_bias = bias if attention_bias is None else bias + attention_bias[i]
            hidden, probs = layer(hidden, layer_bias, mask, None if memory is None else memory[i], output_attentions,
                                  detached_keys)
            if all_hidden is not None:
                all_hidden.append(hidden)
            if all_probs is not None:
                all_probs.append(probs)
        return EncoderOutput(
            last_hidden_state=hidden,
            hidden_states=None if all_hidden is None else tuple(all_hidden),
            attentions=None if all_probs is None else tuple(all_probs),
            pooler_output=None if self.pooler is None else self.pooler(hidden),
        )
