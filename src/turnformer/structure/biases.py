"""Additive attention biases and relative distances built from structure (pure tensor functions).

- `gaussian_local_bias`: LC Attention's bias POS[i, j] = -(j - c_i)^2 / (2 w_i^2) over utterances.
- `lc_centers_and_widths`: its centres c_i = i + C tanh(a_i) (so |c_i - i| <= C) and widths
  w_i = D sigmoid(b_i), from whatever logits the model computes (W_c K_mean, W_d K_mean).
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


def turn_relative_distance(query_turn: torch.Tensor, key_turn: torch.Tensor, r_max: int) -> torch.Tensor:
    """query_turn [B, Q], key_turn [B, K] -> [B, Q, K] long: min(t - p, r_max) for past or current
    keys (t >= p), and -min(p - t, r_max) for future ones, so a model can embed 2 r_max + 1 buckets
    or mask the future; PHAED uses only t >= p (index r in 0..r_max)."""
    if r_max < 0:
        raise ValueError(f"r_max must be >= 0, got {r_max}")
    return (query_turn.unsqueeze(-1) - key_turn.unsqueeze(-2)).clamp(-r_max, r_max)
