"""Checks every response generator must pass, shared by the tests of each model."""

from __future__ import annotations

import torch


def fit(model, batch, steps: int, lr: float = 1e-2) -> float:
    """`steps` Adam steps on one batch; returns the loss before them and leaves the model in eval mode."""
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    first = float(model.loss(batch).detach())
    for _ in range(steps):
        optimizer.zero_grad()
        model.loss(batch).backward()
        optimizer.step()
    model.eval()
    return first


def assert_learns_its_training_responses(model, batch, steps: int) -> None:
    """Overfitting one batch divides the loss by 10, and greedy decoding then gives back (all but at most
    one of) the training responses."""
    first = fit(model, batch, steps)
    assert float(model.loss(batch).detach()) < first / 10
    references, hypotheses = model.predict(batch)
    assert sum(r == h for r, h in zip(references, hypotheses)) >= len(batch) - 1
