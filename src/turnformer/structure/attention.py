"""Scaled dot-product attention under the project's empty-row policy.

A query row whose mask shows no key attends to nothing: its output is exactly zero and its
attention probabilities are all zero. SDPA alone would give NaN for such rows (softmax of all
-inf), so they are opened to every key for the computation and zeroed afterwards, which also
keeps gradients finite.

Exact truncated back-propagation in one pass (`past`): a recurrent model reads earlier segments through a
detached memory, so their states get no gradient from later queries, while the key and value projection
weights do. Encoding many segments at once, each (query, key) pair that would have gone through memory reads
the key through a copy of its state detached before the projection; the forward values are the same, and
so are the gradients, pair by pair.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F

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
        out = F.dropout(probs, p=dropout_p, training=dropout_p > 0) @ value
        return out, probs
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p)
    if empty is not None:
        out = out.masked_fill(empty, 0.0)
    return out, None


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
    scores = _ReadWithPast.apply(query * (1 / math.sqrt(query.shape[-1])), key, key_detached, live, True)  # [B, H, Q, K]
    if bias is not None:
        scores = scores + bias.to(scores.dtype)
    empty = None
    if mask is not None:
        empty = empty_rows(mask).unsqueeze(-1)
        scores = scores.masked_fill(~(mask | empty), float("-inf"))
    probs = scores.softmax(dim=-1)
    if empty is not None:
        probs = probs.masked_fill(empty, 0.0)
    dropped = F.dropout(probs, p=dropout_p, training=dropout_p > 0)
    out = _ReadWithPast.apply(dropped, value, value_detached, live, False)
    return out, probs if return_probs else None
