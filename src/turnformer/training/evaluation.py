"""Evaluating a model: its predictions over a split's batches, an `eval_fn`'s metrics checked and agreed by every
process, the one-line summary of a metric dict, and how far a long evaluation got."""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable, Sequence

import torch
from accelerate.utils import broadcast_object_list, send_to_device
from torch import nn
from tqdm.auto import tqdm

from turnformer.training.files import json_normalise

logger = logging.getLogger(__name__)


def predict_all(model: nn.Module, batches: Sequence[Any], device: torch.device | str | None = None) -> tuple[list, list]:
    """`model.predict` over all batches (eval mode, no gradients), gold and predicted labels concatenated.
    A building block for `eval_fn`s; batches go to `device` (default: the model's)."""
    if device is None:
        device = next(iter(model.parameters())).device
    gold: list = []
    predicted: list = []
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for batch in progress(batches, "evaluate"):
                g, p = model.predict(send_to_device(batch, device))
                gold.extend(g)
                predicted.extend(p)
    finally:
        model.train(was_training)
    return gold, predicted


def evaluate(model: nn.Module, eval_fn: Callable[[nn.Module, str], dict[str, Any]], split: str,
             world: int) -> dict[str, Any]:
    """`eval_fn(model, split)` in eval mode without gradients, checked (a dict with a numeric "primary") and made
    plain JSON; with several processes (`world`), every one of them gets the main process's metrics."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            metrics = eval_fn(model, split)
    finally:
        model.train(was_training)
    if not isinstance(metrics, dict) or "primary" not in metrics:
        raise ValueError(f"eval_fn(model, {split!r}) must return a dict with a 'primary' metric, got {metrics!r}")
    metrics = json_normalise(metrics, f"eval_fn(model, {split!r})")
    if not isinstance(metrics["primary"], (int, float)) or isinstance(metrics["primary"], bool):
        raise ValueError(f"eval_fn(model, {split!r})['primary'] must be a number, got {metrics['primary']!r}")
    if world > 1:
        metrics = broadcast_object_list([metrics], from_process=0)[0]
    return metrics


def reported_score(metrics: dict[str, Any]) -> tuple[str, float]:
    """The primary metric of an evaluation as a reader takes it: its name and value, on one scale for every task: rates
    in percent (a task that reports fractions says ``"unit": "fraction"``), perplexity as itself (its ``primary`` is its
    negative, higher is better)."""
    primary = metrics.get("primary", float("nan"))
    if "perplexity" in metrics and primary == -metrics["perplexity"]:
        return "perplexity", metrics["perplexity"]
    # the metric whose value the primary is: a rate, never a count that happens to equal it (no item skipped: 0)
    name = next((k for k, v in metrics.items() if k != "primary" and isinstance(v, float) and v == primary), "score")
    return name, primary * 100 if metrics.get("unit") == "fraction" else primary


def metric_text(metrics: dict[str, Any] | None) -> str:
    """The primary metric of an evaluation, named (`reported_score`): "perplexity 31.20", "weighted_f1 60.19%"."""
    if not metrics:
        return "-"
    name, value = reported_score(metrics)
    return f"perplexity {value:.2f}" if name == "perplexity" else f"{name} {value:.2f}%"


def progress(items, desc: str, unit: str = "batch", sizes: Sequence[int] | None = None, every_s: float = 30.0):
    """Yield `items` (evaluation, prediction: long on a big file), showing how far it got: a bar on a terminal's
    stderr, gone when done; where stderr is a file or a pipe, a log line every `every_s` seconds instead. `sizes`
    counts `unit`s inside each item (the utterances of conversations), so that one long item moves the count too.
    Only the first process shows it where several evaluate at once (`accelerate launch` sets LOCAL_RANK)."""
    items = list(items)
    sizes = [1] * len(items) if sizes is None else list(sizes)
    total = sum(sizes)
    first_process = os.environ.get("LOCAL_RANK", "0") == "0"
    bar = tqdm(total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True, disable=None if first_process else True)
    lines = first_process and bar.disable  # no bar where stderr is no terminal: lines
    done, start = 0, time.monotonic()
    shown, units = start, unit + ("es" if unit.endswith(("s", "x", "ch", "sh")) else "s")
    try:
        for item, size in zip(items, sizes):
            yield item
            done += size
            bar.update(size)
            if lines and time.monotonic() - shown >= every_s:
                shown = time.monotonic()
                logger.info("%s: %d/%d %s, %.0f s", desc, done, total, units, shown - start)
    finally:
        bar.close()
