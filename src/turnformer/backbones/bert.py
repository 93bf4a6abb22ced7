"""A compact BERT encoder whose attention takes conversation structure.

Differences from `transformers.BertModel`, and the reason for this module:

* every layer accepts extra *memory* keys/values (hidden states of earlier tokens, fed into that
  layer in an earlier pass), Transformer-XL style, for recurrent models such as DialogXL;
* the attention mask may differ per query and per head (``[B, K]``, ``[B, Q, K]`` or
  ``[B, H, Q, K]``, True = may attend), which is how speaker/turn structure enters the model;
* a query row that can see no key attends to nothing: its output for that head is exactly zero
  (the project-wide empty-row policy), never NaN and never a uniform average.

Parameter names mirror Hugging Face BERT's state dict (``embeddings.word_embeddings.weight``,
``encoder.layer.0.attention.self.query.weight``, ...), so BERT checkpoints load unchanged.
The configuration is `transformers.BertConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import BertConfig
from transformers.activations import ACT2FN

from turnformer.structure.attention import memory_attention

__all__ = ["BertConfig", "EncoderOutput", "StructuredEncoder", "bert_init", "build_attention_mask", "check_attention_bias", "check_detached_keys",
           "check_memory"]


@dataclass
class EncoderOutput:
    """What `StructuredEncoder.forward` returns.

    ``hidden_states[l]`` (when asked for) is the input of layer ``l``; ``hidden_states[0]`` is the
    embeddings output and ``hidden_states[-1] is last_hidden_state``. ``hidden_states[:-1]`` is
    therefore exactly the ``memory`` list a later pass needs.
    """

    last_hidden_state: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None  # per layer [B, H, T, M+T]
    pooler_output: torch.Tensor | None = None


def _check_supported(config: BertConfig) -> None:
    kind = getattr(config, "position_embedding_type", "absolute") or "absolute"
    if kind != "absolute":
        raise NotImplementedError(f"position_embedding_type {kind!r} is not supported (only 'absolute')")
    if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
        raise NotImplementedError("decoder / cross-attention BERT configurations are not supported")
    if config.hidden_size % config.num_attention_heads:
        raise ValueError(
            f"hidden_size {config.hidden_size} is not a multiple of num_attention_heads {config.num_attention_heads}"
        )


class Embeddings(nn.Module):
    """Word + position + token-type embeddings, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig, use_position_embeddings: bool = True):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        # Kept even when unused, so that a BERT checkpoint still loads with strict key checking.
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.use_position_embeddings = use_position_embeddings

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        extra_embeddings: torch.Tensor | None = None,
    ) -> torch.Tensor:
        length = input_ids.shape[1]
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        if extra_embeddings is not None:  # e.g. speaker-role embeddings, summed before the LayerNorm like the others
            x = x + extra_embeddings
        if self.use_position_embeddings:
            if position_ids is None:
                limit = self.position_embeddings.num_embeddings
                if length > limit:
                    raise ValueError(f"sequence of {length} tokens is longer than max_position_embeddings={limit}")
                position_ids = torch.arange(length, device=input_ids.device).unsqueeze(0)
            elif position_ids.numel() and int(position_ids.max()) >= self.position_embeddings.num_embeddings:
                # Recurrent models keep counting positions across turns; say so instead of an IndexError.
                raise ValueError(
                    f"position id {int(position_ids.max())} is out of range for "
                    f"max_position_embeddings={self.position_embeddings.num_embeddings}"
                )
            x = x + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(x))


class SelfAttention(nn.Module):
    """Multi-head attention: queries from the current tokens, keys/values from [memory ; current]."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_p = config.attention_probs_dropout_prob

    def forward(
        self,
        hidden: torch.Tensor,
        mask: torch.Tensor | None = None,
        memory: torch.Tensor | None = None,
        output_attentions: bool = False,
        bias: torch.Tensor | None = None,
        detached_keys: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`memory_attention` with this layer's projections: the context [B, T, hidden] (before the output
        projection) and, when asked, the attention probabilities [B, H, T, M+T]."""
        return memory_attention(hidden, self.query, self.key, self.value, self.num_heads, mask, memory, bias,
                                self.dropout_p if self.training else 0.0, output_attentions, detached_keys)


class SelfOutput(nn.Module):
    """Output projection of the attention block, dropout, residual, LayerNorm."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, context: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(context)) + residual)


class Attention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.self = SelfAttention(config)  # the name `self` matches BERT's state-dict keys
        self.output = SelfOutput(config)

    def forward(self, hidden, mask=None, memory=None, output_attentions=False, bias=None, detached_keys=None):
        context, probs = self.self(hidden, mask, memory, output_attentions, bias, detached_keys)
        return self.output(context, hidden), probs


class Intermediate(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        act = config.hidden_act
        self.act = ACT2FN[act] if isinstance(act, str) else act  # same functions as transformers

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.dense(x))


class Output(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class Layer(nn.Module):
    """Attention block then feed-forward block. The feed-forward halves (`intermediate`, `output`)
    sit directly under the layer, not in a FeedForward module, because BERT checkpoints name them so."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = Attention(config)
        self.intermediate = Intermediate(config)
        self.output = Output(config)

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(self.intermediate(x), x)

    def forward(self, hidden, mask=None, memory=None, output_attentions=False, bias=None, detached_keys=None):
        hidden, probs = self.attention(hidden, mask, memory, output_attentions, bias, detached_keys)
        return self.feed_forward(hidden), probs


class Encoder(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(Layer(config) for _ in range(config.num_hidden_layers))


class Pooler(nn.Module):
    """BERT's pooler: tanh(dense(first token))."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))


def build_attention_mask(
    attention_mask: torch.Tensor | None,
    memory_mask: torch.Tensor | None,
    batch: int,
    num_heads: int,
    length: int,
    memory_length: int,
    device: torch.device,
) -> torch.Tensor | None:
    """Bring the user's masks to one bool tensor broadcastable to [B, H, T, M+T], or None.

    `attention_mask` is bool (or integer 0/1) of shape [B, K], [B, T, K] or [B, H, T, K], with
    K = M+T (keys are [memory ; current]). With memory, K = T is also accepted: the memory part
    is then taken from `memory_mask` alone. `memory_mask` [B, M] marks real memory tokens and is
    combined (AND) with `attention_mask`.
    """
    keys = memory_length + length
    mask = None
    if attention_mask is not None:
        mask = _as_bool(attention_mask, "attention_mask")
        if mask.shape[-1] == length and memory_length:
            # Mask over current keys only: memory keys are visible unless memory_mask says otherwise.
            mask = torch.cat([mask.new_ones(*mask.shape[:-1], memory_length), mask], dim=-1)
        if mask.shape[-1] != keys or mask.shape[0] != batch:
            raise ValueError(
                f"attention_mask of shape {tuple(mask.shape)} does not cover batch {batch} x {keys} keys "
                f"({memory_length} memory + {length} current)"
            )
        if mask.dim() == 2:
            mask = mask[:, None, None, :]
        elif mask.dim() == 3:
            if mask.shape[1] != length:
                raise ValueError(f"attention_mask [B, Q, K] has Q={mask.shape[1]}, expected {length} queries")
            mask = mask[:, None]
        elif mask.dim() == 4:
            if mask.shape[1] not in (1, num_heads) or mask.shape[2] not in (1, length):
                raise ValueError(
                    f"attention_mask [B, H, Q, K] has shape {tuple(mask.shape)}; expected H in (1, {num_heads}) "
                    f"and Q in (1, {length})"
                )
        else:
            raise ValueError(f"attention_mask must have 2, 3 or 4 dimensions, got shape {tuple(mask.shape)}")
    if memory_mask is not None and memory_length:
        real = _as_bool(memory_mask, "memory_mask")
        if real.shape != (batch, memory_length):
            raise ValueError(f"memory_mask has shape {tuple(real.shape)}, expected ({batch}, {memory_length})")
        keys_ok = torch.cat([real, real.new_ones(batch, length)], dim=1)[:, None, None, :]
        mask = keys_ok if mask is None else mask & keys_ok
    return None if mask is None else mask.to(device)


def check_attention_bias(attention_bias, num_layers: int) -> None:
    """A per-layer attention bias list must have one tensor per layer (None: no bias)."""
    if attention_bias is not None and len(attention_bias) != num_layers:
        raise ValueError(f"attention_bias has {len(attention_bias)} tensors, expected one per layer ({num_layers})")


def check_detached_keys(pairs: torch.Tensor | None, batch: int, length: int) -> torch.Tensor | None:
    """`detached_keys` [B, T, T] (bool) as [B, 1, T, T], or None. Memory keys are read as given: detach them
    yourself. Without gradients (evaluation) the pairs change nothing and are dropped."""
    if pairs is None or not torch.is_grad_enabled():
        return None
    if pairs.dtype != torch.bool or pairs.shape != (batch, length, length):
        raise ValueError(f"detached_keys must be bool [{batch}, {length}, {length}], got {pairs.dtype} {tuple(pairs.shape)}")
    return pairs.unsqueeze(1)


def check_memory(memory, num_layers: int, batch: int, hidden: int) -> int:
    """The memory length M of a per-layer memory list (0 for None); a wrong count or shape raises."""
    if memory is None:
        return 0
    if len(memory) != num_layers:
        raise ValueError(f"memory has {len(memory)} tensors, expected one per layer ({num_layers})")
    memory_length = memory[0].shape[1]
    for i, m in enumerate(memory):
        if m.shape != (batch, memory_length, hidden):
            raise ValueError(f"memory[{i}] has shape {tuple(m.shape)}, expected ({batch}, {memory_length}, {hidden})")
    return memory_length


def _as_bool(mask: torch.Tensor, name: str) -> torch.Tensor:
    if mask.dtype == torch.bool:
        return mask
    if mask.is_floating_point():
        # A float mask is ambiguous (0/1 keep-mask or additive -inf mask): refuse rather than guess.
        raise TypeError(f"{name} must be bool (True = may attend) or integer 0/1, got {mask.dtype}")
    return mask != 0


def bert_init(model: nn.Module, std: float) -> None:
    """BERT's initialisation (MPNet's too): normal(0, std) for matrices and embeddings, zero biases
    and padding rows, unit LayerNorm."""
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
            if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)


class StructuredEncoder(nn.Module):
    """BERT encoder with per-layer memory and per-head attention masks.

    Parameter names match `transformers.BertModel` (no ``bert.`` prefix). ``pooler`` is None
    when the checkpoint has no pooler weights.
    """

    def __init__(self, config: BertConfig, use_position_embeddings: bool = True, add_pooler: bool = True):
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
        """Usable absolute positions 0..max_positions-1 (every structured encoder says so; None: unbounded)."""
        return self.config.max_position_embeddings

    def init_weights(self) -> None:
        """BERT's initialisation (`bert_init`)."""
        bert_init(self, self.config.initializer_range)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        memory: list[torch.Tensor] | tuple[torch.Tensor, ...] | None = None,
        memory_mask: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        extra_embeddings: torch.Tensor | None = None,
        attention_bias: list[torch.Tensor] | tuple[torch.Tensor, ...] | None = None,
        detached_keys: torch.Tensor | None = None,
    ) -> EncoderOutput:
        """Encode `input_ids` [B, T].

        `memory`: one tensor [B, M, hidden] per layer, the hidden states that went INTO that layer
        for earlier tokens (``previous_output.hidden_states[:-1]``). Memory is used as given: it is
        neither re-encoded nor detached (detach it yourself for truncated back-propagation).
        `attention_mask` covers the keys [memory ; current]; see `build_attention_mask`.
        `position_ids` default to 0..T-1; pass them explicitly to continue a memory's positions.
        `extra_embeddings` [B, T, hidden] are added to the input embeddings (speaker-role embeddings).
        `attention_bias`: one float tensor per layer, broadcastable to [B, H, T, M+T], added to that
        layer's scaled attention scores (DialogXL's learned memory bias).
        `detached_keys` bool [B, T, T]: (query, current key) pairs that read the key as if it were memory,
        through its state detached (one pass over many utterances, exactly as a recurrent pass; see
        `check_detached_keys`).
        """
        batch, length = input_ids.shape
        memory_length = check_memory(memory, self.num_layers, batch, self.config.hidden_size)
        check_attention_bias(attention_bias, self.num_layers)
        detached_keys = check_detached_keys(detached_keys, batch, length)
        mask = build_attention_mask(
            attention_mask, memory_mask, batch, self.config.num_attention_heads, length, memory_length, input_ids.device
        )

        hidden = self.embeddings(input_ids, token_type_ids, position_ids, extra_embeddings)
        all_hidden = [hidden] if output_hidden_states else None
        all_probs = [] if output_attentions else None
        for i, layer in enumerate(self.encoder.layer):
            layer_memory = None if memory is None else memory[i]
            layer_bias = None if attention_bias is None else attention_bias[i]
            hidden, probs = layer(hidden, mask, layer_memory, output_attentions, layer_bias, detached_keys)
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
