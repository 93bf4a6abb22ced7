"""What the speed benchmarks share."""

from __future__ import annotations

import time


def timed_train_step(model, optimizer, batch) -> float:
    """Seconds of one training step (forward, backward, optimizer step) of `model` on `batch`, in train mode."""
    model.train()
    start = time.perf_counter()
    loss = model.loss(batch)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return time.perf_counter() - start


def spread(items, n: int) -> list:
    """``n`` items evenly spaced over ``items`` (all of them when n >= len): the batches that stand for an epoch."""
    if n >= len(items):
        return list(items)
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)] if n > 1 else [items[len(items) // 2]]
