"""Scaled dot-product attention under the project's empty-row policy.

A query row whose mask shows no key attends to nothing: its output is exactly zero and its
attention probabilities are all zero. SDPA alone would give NaN for such rows (softmax of all
-inf), so they are opened to every key for the computation and zeroed afterwards, which also
keeps gradients finite.
"""

from __future__ import annotations

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
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """query [B,H,Q,D], key/value [B,H,K,D]; mask bool broadcastable to [B,H,Q,K] (True = visible);
    bias float broadcastable to [B,H,Q,K], added to the scores (e.g. the Gaussian local bias).

    Returns (output [B,H,Q,D], probabilities [B,H,Q,K] or None).
    """
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
