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
