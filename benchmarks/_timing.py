"""What the speed and memory benchmarks share: timing, peak memory of a child process, an earlier commit's tree, and
argument types that refuse sizes below 1 before anything runs."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Iterator


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


# runs one command and prints its peak resident memory in KiB: a fresh process per measurement, since a process's
# ru_maxrss of its children is the largest over all of them
MEASURE = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:]); "
           "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, done.returncode)")


def peak_memory(command: list[str], env: dict[str, str], what: str) -> dict:
    """Run `command` in a child process of its own under `env`: its peak resident memory (``ru_maxrss``, MiB) and its
    wall time; its failure ends the benchmark, naming `what` and showing the end of its errors."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", MEASURE, *command], capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    peak_kib, returncode = (int(x) for x in done.stdout.split()[-2:])
    if returncode:
        raise SystemExit(f"{what} failed ({returncode}):\n{done.stderr[-2000:]}")
    return {"peak_rss_mib": round(peak_kib / 1024, 1), "seconds": round(seconds, 1)}


@contextmanager
def source_trees(root: Path, folder: Path, baseline: str | None) -> Iterator[dict[str, Path]]:
    """The ``src`` folders to run: this tree's (``now``) and, with `baseline`, that commit's, checked out into a
    temporary git worktree in `folder` (removed afterwards)."""
    trees = {"now": root / "src"}
    if baseline:
        worktree = folder / "baseline"
        subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", "-q", str(worktree), baseline], check=True)
        trees["baseline"] = worktree / "src"
    try:
        yield trees
    finally:
        if baseline:
            subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(folder / "baseline")])


def repeated(dialogues, turns: int) -> tuple[list, int]:
    """`dialogues` repeated, each copy's ids ending in ``-COPY``, until they hold `turns` utterances: the copies, and
    how many utterances they hold (a benchmark's file of a chosen size)."""
    out, total, copy = [], 0, 0
    while total < turns:
        for d in dialogues:
            if total >= turns:
                break
            out.append(replace(d, id=f"{d.id}-{copy}"))
            total += len(d)
        copy += 1
    return out, total


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
