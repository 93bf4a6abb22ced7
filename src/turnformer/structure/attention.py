"""Scaled dot-product attention under the project's empty-row policy, and the one attention module of the models.

A query row whose mask shows no key attends to nothing: its output is exactly zero and its
attention probabilities are all zero. SDPA alone would give NaN for such rows (softmax of all
-inf), so they are opened to every key for the computation and zeroed afterwards, which also
keeps gradients finite.

`MultiHeadAttention` owns the query, key, value and output projections and nothing else: the mask
(a structure-layer predicate, True = visible), additive biases and relative terms (`RelativeTerms`) are
arguments of each call, so every model's attention is this module with the structure it passes in.
`keep_checkpoint_names` lets a model save and load its attention weights under the names its checkpoints
have always used.

Exact truncated back-propagation in one pass (`past`): a recurrent model reads earlier segments through a
detached memory, so their states get no gradient from later queries, while the key and value projection
weights do. Encoding many segments at once, each (query, key) pair that would have gone through memory reads
the key through a copy of its state detached before the projection; the forward values are the same, and
so are the gradients, pair by pair.

Dropout on the attention probabilities, where they are computed here (`probability_dropout`), draws 16 random bits a
probability, 64 at a time, where `F.dropout` draws one random number each (`bernoulli_`), and keeps a bool mask for
backward where `F.dropout` keeps a float32 one; the 1 / (1 - p) scale goes on the output [B, H, Q, D] rather than the
probabilities [B, H, Q, K]. The drop probability is p rounded to a multiple of 2**-16. On the CPU only: CUDA's
`F.dropout` is one fused kernel, and SDPA's own dropout (the path without probabilities) is left as it is.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from turnformer.structure.masks import empty_rows


def masked_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    return_probs: bool = False,
    past: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """query [B,H,Q,D], key/value [B,H,K,D]; mask bool broadcastable to [B,H,Q,K] (True = visible);
    bias float broadcastable to [B,H,Q,K], added to the scores (e.g. the Gaussian local bias).
    `past` = (key_detached, value_detached [B,H,T,D], pairs bool broadcastable to [B,H,Q,T]): the last T keys
    are the current tokens, and a pair marked in `pairs` reads its key and value from the detached copies
    (the module docstring).

    Returns (output [B,H,Q,D], probabilities [B,H,Q,K] or None).
    """
    if mask is not None and mask.dtype != torch.bool:
        raise ValueError(f"mask: expected a bool tensor (True = visible), got {mask.dtype}; a float mask of scores to "
                         "add is a bias")
    scores_shape = (*query.shape[:-1], key.shape[-2])  # [B, H, Q, K]
    for name, given in (("mask", mask), ("bias", bias)):
        if given is not None and not _broadcasts(given.shape, scores_shape):
            raise ValueError(f"{name} {list(given.shape)}: expected a shape that broadcasts to the scores' "
                             f"[B, H, Q, K] = {list(scores_shape)}")
    if past is not None:
        return _attention_with_past(query, key, value, mask, bias, dropout_p, return_probs, *past)
    empty = None
    if mask is not None:
        # Done unconditionally: testing for empty rows first would cost a device-host sync.
        empty = empty_rows(mask).unsqueeze(-1)  # [..., Q, 1]
        mask = mask | empty
    # SDPA takes a boolean mask directly; a bias needs an additive mask instead.
    attn_mask = mask
    if bias is not None:
        attn_mask = bias.to(query.dtype)
        if mask is not None:
            attn_mask = attn_mask.masked_fill(~mask, float("-inf"))
    if return_probs:
        scores = query @ key.transpose(-1, -2) / math.sqrt(query.shape[-1])
        if attn_mask is not None:
            scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
        probs = scores.softmax(dim=-1)
        if empty is not None:
            probs = probs.masked_fill(empty, 0.0)
        dropped, scale = probability_dropout(probs, dropout_p)
        out = dropped @ value
        if scale != 1:
            out = out * scale
        return out, probs
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p)
    if empty is not None:
        out = out.masked_fill(empty, 0.0)
    return out, None


def dropout_mask(shape: torch.Size | tuple[int, ...], p: float, device=None) -> torch.Tensor:
    """bool `shape`: True = dropped, each independently with probability p rounded to a multiple of 2**-16 (16 bits
    of torch's random generator an element, drawn 64 at a time)."""
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability {p}: expected 0 to 1")
    threshold = round(p * 2**16) - 2**15  # P(int16 < threshold) = round(p * 2**16) / 2**16
    if threshold > 2**15 - 1:  # p rounds to 1: every element
        return torch.ones(shape, dtype=torch.bool, device=device)
    n = math.prod(shape)
    bits = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(-2**63, None)  # every 64-bit value
    return bits.view(torch.int16)[:n].view(shape) < threshold


def probability_dropout(probs: torch.Tensor, p: float) -> tuple[torch.Tensor, float]:
    """(probabilities with dropped ones zeroed, the scale for the output they weigh): `F.dropout(probs, p)` @ v ==
    dropped @ v * scale, with `dropout_mask`'s draw on the CPU (`F.dropout` itself elsewhere, scale 1); p = 0 is the
    identity."""
    if p == 0:
        return probs, 1.0
    if probs.device.type != "cpu":  # CUDA's F.dropout is one fused kernel drawing with Philox: left as it is
        return F.dropout(probs, p), 1.0
    dropped = probs.masked_fill(dropout_mask(probs.shape, p, probs.device), 0.0)
    return dropped, (0.0 if p >= 1 else 1 / (1 - p))


def _autocast_state(x: torch.Tensor) -> tuple[str, torch.dtype] | None:
    """The autocast (device type, dtype) a custom function's forward ran under, for its backward to run under too
    (autograd runs backward outside autocast, where the saved float32 inputs would meet half-precision gradients);
    the engine casts each returned gradient back to its input's dtype."""
    device = x.device.type
    return (device, torch.get_autocast_dtype(device)) if torch.is_autocast_enabled(device) else None


def _autocast(state: tuple[str, torch.dtype] | None):
    return torch.autocast(state[0], dtype=state[1]) if state else contextlib.nullcontext()


class _LiveAndPast(torch.autograd.Function):
    """``F.linear(x, weight, bias)`` twice over: the live copy passes gradients to ``x`` and the weights, the past copy
    to the weights only, as if computed from ``x.detach()``: one product forward, one of each kind backward."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        y = F.linear(x, weight, bias)
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        ctx.autocast = _autocast_state(x)
        return y, y.clone()

    @staticmethod
    def backward(ctx, live, past):
        x, weight = ctx.saved_tensors
        with _autocast(ctx.autocast):
            both = (live + past).flatten(0, -2)
            grad_x = live @ weight if ctx.needs_input_grad[0] else None
            grad_weight = both.transpose(0, 1) @ x.flatten(0, -2)
            return grad_x, grad_weight, both.sum(0) if ctx.has_bias else None


def project_live_and_past(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(live, past): ``F.linear(x, weight, bias)`` (``weight`` [out, in]), and the same values as computed from a
    detached ``x``, for `masked_attention`'s ``past``, at the cost of one projection."""
    if not torch.is_grad_enabled():
        y = F.linear(x, weight, bias)
        return y, y
    return _LiveAndPast.apply(x, weight, bias)


def memory_attention(
    hidden: torch.Tensor, query: nn.Linear, key: nn.Linear, value: nn.Linear, heads: int,
    mask: torch.Tensor | None = None, memory: torch.Tensor | None = None, bias: torch.Tensor | None = None,
    dropout_p: float = 0.0, return_probs: bool = False, detached_keys: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A pretrained encoder layer's attention (BERT's, MPNet's): queries from the current tokens `hidden`
    [B, T, d], keys and values from [memory ; current] (`memory` [B, M, d] or None), through `masked_attention`.
    `mask` bool and `bias` float broadcastable to [B, H, T, M+T]; `detached_keys` bool [B, 1, T, T]: the (query,
    current key) pairs read as memory (`masked_attention`'s `past`). Returns the context [B, T, d] before the output
    projection and, when asked, the attention probabilities [B, H, T, M+T]."""
    def split(x: torch.Tensor) -> torch.Tensor:  # [B, L, d] -> [B, H, L, d / H]
        return x.unflatten(-1, (heads, -1)).transpose(1, 2)

    past = None
    if detached_keys is None:
        k, v = key(hidden), value(hidden)
    else:  # pairs read as memory see the states detached
        (k, k_past), (v, v_past) = (project_live_and_past(hidden, m.weight, m.bias) for m in (key, value))
        past = (split(k_past), split(v_past), detached_keys)
    if memory is not None:
        # Projected apart from the current tokens: memory is usually detached, and a joint
        # projection would make backward compute its (discarded) input gradient.
        k, v = torch.cat([key(memory), k], dim=1), torch.cat([value(memory), v], dim=1)
    # Empty rows attend to nothing (zero output), the project-wide policy.
    context, probs = masked_attention(split(query(hidden)), split(k), split(v), mask, bias, dropout_p, return_probs, past)
    return context.transpose(1, 2).flatten(2), probs


class _ReadWithPast(torch.autograd.Function):
    """``a @ b`` where ``b`` [..., K, D] ends with T current rows that some pairs read live and the others through a
    detached copy (``b_past`` [..., T, D], equal in value): one product forward; backward, ``a``'s gradient as usual,
    each current row's gradient split by pair between ``b`` (``live`` [..., Q, T]) and ``b_past``. With
    ``transpose_b``: ``a @ b^T`` (attention scores); without: ``a @ b`` (probabilities times values)."""

    @staticmethod
    def forward(ctx, a, b, b_past, live, transpose_b):
        ctx.save_for_backward(a, b, live)
        ctx.transpose_b = transpose_b
        ctx.autocast = _autocast_state(a)
        return a @ (b.transpose(-1, -2) if transpose_b else b)

    @staticmethod
    def backward(ctx, grad):
        with _autocast(ctx.autocast):
            return _ReadWithPast._backward(ctx, grad)

    @staticmethod
    def _backward(ctx, grad):
        a, b, live = ctx.saved_tensors
        current = live.shape[-1]
        if ctx.transpose_b:  # out [.., Q, K] = a [.., Q, D] @ b^T: the gradient of row k of b sums over queries
            grad_a = grad @ b
            grad_all = grad.transpose(-1, -2) @ a  # [.., K, D]
            grad_live = (grad[..., -current:] * live).transpose(-1, -2) @ a
        else:  # out [.., Q, D] = a [.., Q, K] @ b [.., K, D]
            grad_a = grad @ b.transpose(-1, -2)
            grad_all = a.transpose(-1, -2) @ grad
            grad_live = (a[..., -current:] * live).transpose(-1, -2) @ grad
        grad_b = torch.cat([grad_all[..., :-current, :], grad_live], dim=-2)
        return grad_a, grad_b, grad_all[..., -current:, :] - grad_live, None, None


def _attention_with_past(query, key, value, mask, bias, dropout_p, return_probs, key_detached, value_detached, pairs):
    """`masked_attention` whose pairs in `pairs` read the current keys and values through detached copies."""
    live = ~pairs
    # [B, H, Q, K], a new tensor that nothing saves for backward: the bias and the mask go in in place.
    scores = _ReadWithPast.apply(query * (1 / math.sqrt(query.shape[-1])), key, key_detached, live, True)
    if bias is not None:
        scores.add_(bias.to(scores.dtype))
    empty = None
    if mask is not None:
        empty = empty_rows(mask).unsqueeze(-1)
        scores.masked_fill_(~(mask | empty), float("-inf"))
    probs = scores.softmax(dim=-1)
    dropped, scale = probability_dropout(probs, dropout_p)
    out = _ReadWithPast.apply(dropped, value, value_detached, live, False)
    if scale != 1:
        out = out * scale
    if empty is not None:  # empty rows zeroed in the output [B, H, Q, D] rather than the probabilities [B, H, Q, K]:
        out = out.masked_fill(empty, 0.0)  # the same values and gradients, one pass over a smaller tensor
        if return_probs:
            probs = probs.masked_fill(empty, 0.0)
    return out, probs if return_probs else None


@dataclass(frozen=True)
class RelativeTerms:
    """Relative attention terms (Shaw et al., 2018; PHAED eq. 4-5): each (query, key) pair falls in a bucket r
    (``bucket`` [B, Q, K] long), whose vector B^K_r (row r of ``key`` [R, d]) is added to the key and B^V_r (row r
    of ``value`` [R, d]) to the value; both are split over the heads like the projections. Computed without a
    [Q, K, d] tensor: q . B^K_r as a score bias, and after the softmax the attention mass on each bucket times
    B^V_r. Buckets are rows of ``key``: 0 to R - 1 (`turn_relative_distance` gives future keys negative distances:
    mask them, or shift by r_max into 2 r_max + 1 buckets; torch names an index out of range, unchecked here, since a
    check would wait on the device every call)."""

    bucket: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor


def _broadcasts(shape: torch.Size, target: tuple[int, ...]) -> bool:
    """Whether a tensor of `shape` broadcasts to `target` without growing it."""
    try:
        return torch.broadcast_shapes(shape, target) == torch.Size(target)
    except RuntimeError:
        return False


class MultiHeadAttention(nn.Module):
    """Multi-head attention through `masked_attention` (see the module docstring).

    ``qkv`` (Linear d -> 3d: query, key and value rows, in that order) and ``out`` (Linear d -> d) are built
    here unless given: a model passes its own to keep the initialisation it always had. ``dropout`` applies to
    the attention probabilities while training.
    """

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0, *, qkv: nn.Linear | None = None,
                 out: nn.Linear | None = None):
        super().__init__()
        for name, value in (("d_model", d_model), ("heads", heads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        if d_model % heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by heads ({heads})")
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(d_model, 3 * d_model) if qkv is None else qkv
        self.out = nn.Linear(d_model, d_model) if out is None else out

    def draw_as_torch(self) -> None:
        """Draw the projections as nn.MultiheadAttention does: the input projections Xavier-uniform over the one
        [3d, d] matrix, zero biases (the output projection's weight stays nn.Linear's)."""
        nn.init.xavier_uniform_(self.qkv.weight)
        nn.init.zeros_(self.qkv.bias)
        nn.init.zeros_(self.out.bias)

    def forward(self, x: torch.Tensor, keys: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                bias: torch.Tensor | None = None, relative: RelativeTerms | None = None,
                return_probs: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x [B, Q, d] attends to keys [B, K, d] (None: to itself); mask bool (True = visible) and bias float
        [B, Q, K] for every head or [B, H, Q, K] per head. Returns (output [B, Q, d] after the output projection,
        probabilities [B, H, Q, K] or None)."""
        return self.attend(*self.project(x, keys), mask, bias, relative, return_probs)

    def project(self, x: torch.Tensor, keys: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries from x [B, Q, d], keys and values from keys [B, K, d] (None: x, with one product): each [B, L, d]."""
        if keys is None:
            return self.qkv(x).chunk(3, dim=-1)
        return self.project_queries(x), *self.project_keys(keys)

    def step(self, x: torch.Tensor, mask: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None = None
             ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Self-attention of the newest positions x [B, Q, d] of a sequence whose earlier positions' keys and values are
        `past` ([B, P, d] each; None: none), mask [B, Q, P + Q] (True = visible): (output [B, Q, d], the keys and values
        of all P + Q positions), a key/value cache for decoding a token at a time."""
        query, key, value = self.project(x)
        if past is not None:
            key, value = torch.cat([past[0], key], 1), torch.cat([past[1], value], 1)
        return self.attend(query, key, value, mask)[0], (key, value)

    def project_queries(self, x: torch.Tensor) -> torch.Tensor:
        """`project`'s queries alone [B, Q, d] (keys projected once and kept: a decoder's encoded context)."""
        d, bias = x.shape[-1], self.qkv.bias
        return F.linear(x, self.qkv.weight[:d], None if bias is None else bias[:d])

    def project_keys(self, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`project`'s keys and values alone, from keys [B, K, d]: each [B, K, d]."""
        d, bias = keys.shape[-1], self.qkv.bias
        return F.linear(keys, self.qkv.weight[d:], None if bias is None else bias[d:]).chunk(2, dim=-1)

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, relative: RelativeTerms | None = None,
               return_probs: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`forward` from projected queries [B, Q, d], keys and values [B, K, d]."""
        q, k, v = (self._split(t) for t in (query, key, value))  # [B, H, L, d / H]
        mask, bias = _per_head(mask), _per_head(bias)
        p = self.dropout if self.training else 0.0
        if relative is None:
            out, probs = masked_attention(q, k, v, mask, bias, p, return_probs)
        else:
            out, probs = self._attend_relative(q, k, v, mask, bias, p, relative)
            probs = probs if return_probs else None
        return self.out(out.transpose(1, 2).flatten(2)), probs

    def _attend_relative(self, q, k, v, mask, bias, p, relative: RelativeTerms):
        if p:
            raise ValueError("relative terms read the attention probabilities before dropout: use no attention dropout")
        index = relative.bucket.unsqueeze(1).expand(-1, self.heads, -1, -1)  # [B, H, Q, K]
        # q . (k + B^K_r) = q . k + q . B^K_r: the second term as a score bias gathered by r
        scores = (q @ self._split(relative.key).transpose(-1, -2) / math.sqrt(q.shape[-1])).gather(-1, index)
        out, probs = masked_attention(q, k, v, mask, scores if bias is None else bias + scores, return_probs=True)
        # sum_k a_k (v_k + B^V_r(k)) = a V + sum_r (attention mass on bucket r) B^V_r
        mass = probs.new_zeros(*probs.shape[:-1], relative.value.shape[0]).scatter_add_(-1, index, probs)
        return out + mass @ self._split(relative.value), probs

    def _split(self, x: torch.Tensor) -> torch.Tensor:  # [..., L, d] -> [..., H, L, d / H]
        return x.unflatten(-1, (self.heads, -1)).transpose(-2, -3)


def pretrained_layer_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask,
                               dropout: float = 0.0, scaling: float | None = None, *, visible: torch.Tensor,
                               bucket: torch.Tensor | None = None, bias_table: torch.Tensor | None = None,
                               **_) -> tuple[torch.Tensor, None]:
    """The attention of a pretrained model's layer (transformers' attention-function interface: the layer has
    projected and rotated query [B, H, Q, D] and key / value [B, KV, K, D] itself) through `masked_attention`, with
    this layer's structure instead of the library's mask: query and keys are the last Q and the first K columns of
    the layout that `visible` [B, L, L] (True = visible) describes; with `bias_table` [layers, H, R] each head adds
    ``bias_table[layer, head, bucket]`` to its scores (`bucket` [B, L, L] long: a relative distance, e.g.
    `turn_relative_distance`). ``attention_mask`` (the library's own) is not read. Returns (output [B, Q, H, D], None)."""
    if scaling is not None and abs(scaling - query.shape[-1] ** -0.5) > 1e-9:
        raise ValueError(f"the structure layer's attention scales scores by 1/sqrt(head_dim); this layer asks for {scaling}")
    groups = query.shape[1] // key.shape[1]  # grouped-query attention: each key / value head serves `groups` heads
    key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
    q, k = query.shape[2], key.shape[2]
    bias = None if bias_table is None else bias_table[module.layer_idx][:, bucket[:, k - q:k, :k]].transpose(0, 1)  # [B, H, Q, K]
    out, _ = masked_attention(query, key, value, visible[:, None, k - q:k, :k], bias, dropout if module.training else 0.0)
    return out.transpose(1, 2).contiguous(), None


def _per_head(x: torch.Tensor | None) -> torch.Tensor | None:  # [B, Q, K] -> [B, 1, Q, K]; [B, H, Q, K] as is
    return x.unsqueeze(1) if x is not None and x.dim() == 3 else x


def stacked_linear(*parts: nn.Linear) -> nn.Linear:
    """One Linear whose output rows are those of ``parts``, in order (e.g. the query, key and value projections
    initialised one after the other, as separate layers are)."""
    stacked = nn.Linear(parts[0].in_features, sum(p.out_features for p in parts), bias=parts[0].bias is not None,
                        device="meta")  # no initialisation: the values come from the parts
    stacked.weight = nn.Parameter(torch.cat([p.weight.detach() for p in parts]))
    if stacked.bias is not None:
        stacked.bias = nn.Parameter(torch.cat([p.bias.detach() for p in parts]))
    return stacked


# Where a MultiHeadAttention's weights were in the layouts models had before they shared it, for `keep_checkpoint_names`:
# nn.MultiheadAttention's names, and separate query, key and value projections (one old name per part of qkv).
TORCH_MULTIHEAD_NAMES = {"qkv.weight": "in_proj_weight", "qkv.bias": "in_proj_bias",
                         "out.weight": "out_proj.weight", "out.bias": "out_proj.bias"}
SEPARATE_PROJECTION_NAMES = {"qkv.weight": ("query.weight", "key.weight", "value.weight"),
                             "qkv.bias": ("query.bias", "key.bias", "value.bias")}


def inlined_names(attribute: str) -> dict[str, str]:
    """The names of a MultiHeadAttention held as ``attribute`` whose projections used to be its holder's own."""
    return {f"{attribute}.{name}": name for name in ("qkv.weight", "qkv.bias", "out.weight", "out.bias")}


def keep_checkpoint_names(module: nn.Module, old_names: dict[str, str | tuple[str, ...]]) -> None:
    """Save and load ``module``'s weights under the names its checkpoints have always had.

    ``old_names`` maps a key of ``module.state_dict()`` (relative to the module) to its old key, or to the old keys
    of its parts along dim 0. `state_dict` writes the old names, and `load_state_dict` takes them (or the current
    ones): checkpoints written before and after load either way, including through a loader that checks a file's
    keys against ``state_dict()`` before loading it.
    """
    module.register_state_dict_post_hook(partial(_save_under_old_names, old_names))
    module.register_load_state_dict_pre_hook(partial(_load_old_names, old_names))


def _save_under_old_names(old_names, module, state_dict, prefix, local_metadata) -> None:
    for name, old in old_names.items():
        value = state_dict.pop(prefix + name)
        if isinstance(old, str):
            state_dict[prefix + old] = value
        else:
            for part_name, part in zip(old, value.chunk(len(old))):
                state_dict[prefix + part_name] = part


def _load_old_names(old_names, module, state_dict, prefix, *_) -> None:
    for name, old in old_names.items():
        keys = [prefix + part for part in ((old,) if isinstance(old, str) else old)]
        if all(key in state_dict for key in keys):
            parts = [state_dict.pop(key) for key in keys]
            state_dict[prefix + name] = parts[0] if len(parts) == 1 else torch.cat(parts)
