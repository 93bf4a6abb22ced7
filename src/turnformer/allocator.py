"""The C allocator's settings for long conversations: glibc's malloc, as the `turnformer` command starts.

A training step over a long conversation allocates and frees the same large tensors chunk after chunk (attention
[B, H, chunk, memory + chunk] per layer, forward, recomputation and backward), between small tensors that live for
the whole step (each chunk's saved memory). glibc's malloc raises its mmap threshold each time such a block is freed,
so the large blocks soon come from the heap, where the long-lived small ones pin it: the heap grows with every chunk,
though what the step holds does not (`benchmarks/allocator_memory.py`: one step of the default file model over a
600-utterance conversation peaked at 3.7-4.3 GB resident, over 1.4 GB with the settings below). A fixed threshold
(blocks of 16 MiB and more mapped and returned whole) keeps the peak at what the step holds; transparent huge pages
for those mappings keep it as fast as the heap.

The settings are glibc tunables, read when a process starts, so the command starts itself again with them in its
environment (once: a ``GLIBC_TUNABLES`` already set, the user's or ours, is kept as it is). ``TURNFORMER_ALLOCATOR=system``
turns this off; other C libraries and systems are left alone.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Mapping

TUNABLES = "glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=16777216"


def allocator_environment(environ: Mapping[str, str], system: str, libc: str) -> dict[str, str] | None:
    """The environment to start again with, or None where there is nothing to change: not Linux with glibc, the
    tunables already set, or ``TURNFORMER_ALLOCATOR=system``."""
    if system != "Linux" or libc != "glibc" or "GLIBC_TUNABLES" in environ:
        return None
    if environ.get("TURNFORMER_ALLOCATOR", "").strip().lower() == "system":
        return None
    return {**environ, "GLIBC_TUNABLES": TUNABLES}


def started_as(program: str, module_file: str) -> bool:
    """Whether this process is the `turnformer` command itself (its script, or ``python -m turnformer.cli``), not a
    program of a user's that calls into it: only the command's own process is started again."""
    return Path(program).name == "turnformer" or Path(program).resolve() == Path(module_file).resolve()


def start_with_allocator_settings(module_file: str) -> None:
    """Start this process again with `allocator_environment`, where it changes anything (it does not return then)."""
    if not started_as(sys.argv[0], module_file):
        return
    environment = allocator_environment(os.environ, platform.system(), platform.libc_ver()[0])
    if environment is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], environment)
