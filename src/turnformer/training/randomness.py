"""The random streams of a run: the seed it starts from, the batch order of each epoch, and the generators' state
that a checkpoint keeps, so that a resumed run draws the same numbers as one that was never interrupted."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from accelerate.utils import set_seed as _accelerate_set_seed


def set_seed(seed: int, deterministic: bool = False) -> None:
    """Seed python's `random`, numpy and torch (every device); `deterministic` also asks torch for
    deterministic algorithms (slower; some operations then raise)."""
    _accelerate_set_seed(seed, deterministic=deterministic)


def epoch_order(n_batches: int, seed: int, epoch: int) -> list[int]:
    """The shuffled order of the batch indices for `epoch` (0-based): depends on (seed, epoch) only."""
    return np.random.default_rng([seed, epoch]).permutation(n_batches).tolist()


def get_rng_state() -> dict[str, Any]:
    """The state of python's, numpy's and torch's generators (CUDA's too once it is in use), as `torch.save` and
    `torch.load(weights_only=True)` take it."""
    name, keys, position, has_gauss, cached = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (name, torch.from_numpy(keys.astype(np.int64)), int(position), int(has_gauss), float(cached)),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Put back a state from `get_rng_state` (CUDA's only on as many devices as it was taken on)."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, position, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), position, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])
