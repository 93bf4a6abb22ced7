"""Additive attention biases and relative distances built from structure (pure tensor functions).

- `gaussian_local_bias`: LC Attention's bias POS[i, j] = -(j - c_i)^2 / (2 w_i^2) over utterances.
- `lc_centers_and_widths`: its centres c_i = i + C tanh(a_i) (so |c_i - i| <= C) and widths
  w_i = D sigmoid(b_i), from whatever logits the model computes (W_c K_mean, W_d K_mean).
- `lc_attention_bias`: equations 5-7 end to end from the keys: K_mean (over the real utterances),
  then per-position logits W_c K_mean and W_d K_mean, centres, widths and the bias.
- `turn_relative_distance`: PHAED's r = min(t - p, r_max) between turns, as embedding indices.
"""

from __future__ import annotations

import torch


def lc_centers_and_widths(
    center_logits: torch.Tensor, width_logits: torch.Tensor, max_shift: float, max_width: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """center_logits, width_logits: [B, N] -> centres and widths [B, N] (equations 6-7)."""
    positions = torch.arange(center_logits.shape[-1], device=center_logits.device, dtype=center_logits.dtype)
    centers = positions + max_shift * torch.tanh(center_logits)
    widths = max_width * torch.sigmoid(width_logits)
    return centers, widths


def gaussian_local_bias(
    centers: torch.Tensor, widths: torch.Tensor, key_positions: torch.Tensor | None = None, min_width: float = 1e-4
) -> torch.Tensor:
    """centers, widths [B, Q] -> bias [B, Q, K] = -(j - c_i)^2 / (2 w_i^2) (equation 5).

    ``key_positions`` [K] (or [B, K]) default to 0..Q-1 (self-attention over the same utterances).
    Widths are floored at ``min_width``: a width of 0 would make every off-centre key -inf.
    """
    if key_positions is None:
        key_positions = torch.arange(centers.shape[-1], device=centers.device, dtype=centers.dtype)
    if key_positions.dim() == 1:
        key_positions = key_positions.unsqueeze(0)
    distance = key_positions.to(centers.dtype).unsqueeze(-2) - centers.unsqueeze(-1)
    width = widths.clamp_min(min_width).unsqueeze(-1)
    return -(distance**2) / (2 * width**2)


def lc_attention_bias(
    keys: torch.Tensor,
    key_mask: torch.Tensor | None,
    center_weight: torch.Tensor,
    width_weight: torch.Tensor,
    max_shift: float,
    max_width: float,
    query_positions: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LC Attention's bias from the keys (equations 5-7): keys [B, N, d], key_mask [B, N] (True = a
    real utterance; None = all real), center_weight / width_weight [N_max, d] (row i is W_i^c / W_i^d,
    N <= N_max) -> (bias [B, N, N], centres [B, N], widths [B, N]).

    K_mean is the mean key over the real utterances; c_i = i + C tanh(W_i^c K_mean) (so W^c = 0 puts
    every centre at i, and |c_i - i| <= C always), w_i = D sigmoid(W_i^d K_mean).

    ``query_positions`` [B, Q] (long) computes only those query rows: bias [B, Q, N], centres and
    widths [B, Q] (online prediction needs the last row alone, linear in N instead of quadratic).
    """
    n = keys.shape[1]
    if n > center_weight.shape[0]:
        raise ValueError(f"{n} utterances, but the bias has parameters for {center_weight.shape[0]} positions")
    if key_mask is None:
        k_mean = keys.mean(dim=1)
    else:
        weights = key_mask.to(keys.dtype).unsqueeze(-1)
        k_mean = (keys * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1.0)
    centers, widths = lc_centers_and_widths(
        k_mean @ center_weight[:n].T, k_mean @ width_weight[:n].T, max_shift, max_width
    )
    key_positions = torch.arange(n, device=keys.device, dtype=keys.dtype)
    if query_positions is not None:
        centers, widths = centers.gather(1, query_positions), widths.gather(1, query_positions)
    return gaussian_local_bias(centers, widths, key_positions), centers, widths


def turn_relative_distance(query_turn: torch.Tensor, key_turn: torch.Tensor, r_max: int) -> torch.Tensor:
    """query_turn [B, Q], key_turn [B, K] -> [B, Q, K] long: min(t - p, r_max) for past or current
    keys (t >= p), and -min(p - t, r_max) for future ones, so a model can embed 2 r_max + 1 buckets
    or mask the future; PHAED uses only t >= p (index r in 0..r_max)."""
    if r_max < 0:
        raise ValueError(f"r_max must be >= 0, got {r_max}")
    return (query_turn.unsqueeze(-1) - key_turn.unsqueeze(-2)).clamp(-r_max, r_max)
