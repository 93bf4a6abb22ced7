"""Ranking metrics of response selection: R_n@k, MRR, MAP and P@1, as the MuTual and Ubuntu/Douban
papers compute them.

A group is one context with its n candidates: ``scores`` (higher = better) and ``relevance`` (0/1 per
candidate). Candidates are ranked by score, highest first; ties keep the candidates' original order
(a stable sort, as the official Ubuntu/Douban scripts do with Python's ``sorted``).

* ``R_n@k``: relevant candidates among the top k, over all relevant candidates of the group (with one
  correct answer, as in MuTual: 1 if it is ranked k-th or better, else 0). MuTual reports R4@1, R4@2;
  Ubuntu R10@1, R10@2, R10@5, R2@1.
* ``MRR``: 1 / the rank of the first relevant candidate.
* ``MAP``: mean over groups of the average precision (the mean of precision@rank at each relevant
  candidate's rank).
* ``P@1``: whether the top-ranked candidate is relevant.

Groups with no relevant candidate have no defined recall or rank: they are skipped and counted
(Douban's official evaluation drops them too). Scores are fractions (0-1), as in the papers.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["rank_candidates", "ranking_metrics"]


def rank_candidates(scores: Sequence[float]) -> list[int]:
    """Candidate indices, best first (ties: original order)."""
    values = np.asarray(scores, dtype=float)
    return np.argsort(-values, kind="stable").tolist()


def shown_scores(scores: Sequence[float]) -> list[float]:
    """Candidates' scores as a user sees them (and as they are ranked there, ties in the candidates' order, as the
    server ranks them): rounded to 5 decimals, below which the same text scores differently by its place in a batch."""
    return [round(float(x), 5) for x in scores]


def _group_metrics(scores: Sequence[float], relevance: Sequence[int], ks: Sequence[int]) -> dict[str, float]:
    order = rank_candidates(scores)
    ranked = np.asarray(relevance, dtype=float)[order]
    total = ranked.sum()
    hits = np.cumsum(ranked)
    positions = np.flatnonzero(ranked) + 1  # 1-based ranks of the relevant candidates
    out = {f"R@{k}": float(hits[min(k, len(ranked)) - 1] / total) for k in ks}
    out["MRR"] = float(1.0 / positions[0])
    out["MAP"] = float(np.mean(hits[positions - 1] / positions))
    out["P@1"] = float(ranked[0])
    return out


def ranking_metrics(
    scores: Sequence[Sequence[float]], relevance: Sequence[Sequence[int]], ks: Sequence[int] = (1, 2, 5)
) -> dict[str, float | int]:
    """Mean R_n@k (as ``"R{n}@{k}"`` when every group has n candidates, else ``"R@{k}"``), MRR, MAP, P@1
    over the groups; plus ``groups`` (scored) and ``skipped`` (groups without a relevant candidate). R@k is given for
    the k up to the smallest scored group's size, so that every mean covers the same groups, whatever their order."""
    if len(scores) != len(relevance):
        raise ValueError(f"{len(scores)} groups of scores but {len(relevance)} of relevance labels")
    scored = []
    for i, (s, r) in enumerate(zip(scores, relevance)):
        if len(s) != len(r) or not len(s):
            raise ValueError(f"group {i}: {len(s)} scores for {len(r)} relevance labels")
        if any(x not in (0, 1) for x in r):
            raise ValueError(f"group {i}: relevance labels must be 0 or 1, got {list(r)}")
        if sum(r) > 0:
            scored.append((s, r))
    out: dict[str, float | int] = {"groups": len(scored), "skipped": len(scores) - len(scored)}
    if not scored:
        return out
    sizes = {len(s) for s, _ in scored}
    usable = [k for k in ks if k <= min(sizes)] or [1]
    per_group = [_group_metrics(s, r, usable) for s, r in scored]
    n = sizes.pop() if len(sizes) == 1 else None
    for key in per_group[0]:
        name = f"R{n}{key[1:]}" if key.startswith("R@") and n is not None else key
        out[name] = float(np.mean([g[key] for g in per_group]))
    return out
