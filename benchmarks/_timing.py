"""What the speed benchmarks share: timing, and argument types that refuse sizes below 1 before anything runs."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
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


def child_measurement(script: str, arguments: list[str], env: dict[str, str], what: str, data_dir: str | None = None) -> dict:
    """Run `script` again in a process of its own with `arguments` (and ``--data-dir``) under `env`: the JSON row its
    last line prints; its failure ends the benchmark, naming `what` and showing the end of its errors."""
    command = [sys.executable, script, *arguments, *(["--data-dir", data_dir] if data_dir else [])]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(f"{what} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def spread(items, n: int) -> list:
    """``n`` items evenly spaced over ``items`` (all of them when n >= len): the batches that stand for an epoch."""
    if n >= len(items):
        return list(items)
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)] if n > 1 else [items[len(items) // 2]]


def count(text: str) -> int:
    """An argparse type: a whole number of 1 or more (sizes, repeats, batches), refused with the value named."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of 1 or more") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of 1 or more")
    return value


def counts(text: str) -> list[int]:
    """An argparse type: whole numbers of 1 or more, separated by commas (lengths to sweep)."""
    try:
        return [count(part) for part in text.split(",")]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{text!r}: give whole numbers of 1 or more, separated by commas") from None
