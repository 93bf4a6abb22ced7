"""The C allocator's settings for long conversations: glibc's malloc, as the `turnformer` command starts.

A training step over a long conversation allocates and frees the same large tensors chunk after chunk (attention
[B, H, chunk, memory + chunk] per layer, forward, recomputation and backward), between small tensors that live for
the whole step (each chunk's saved memory). glibc's malloc raises its mmap threshold each time such a block is freed,
so the large blocks soon come from the heap, where the long-lived small ones pin it: the heap grows with every chunk,
though what the step holds does not. A fixed threshold of 1 MiB (blocks of 1 MiB and more mapped and returned whole)
keeps the peak near what the step holds, whatever the model's block sizes (an earlier 16 MiB let a 4-head model's
blocks back into the heap: 3.3 GB over 400 utterances where 1 MiB holds 0.67); transparent huge pages for those
mappings keep most of the heap's speed. `benchmarks/allocator_memory.py`: one step of the default file model over
300 and 1,200 of SwDA's utterances peaked at 2.10 and 3.05 GB with malloc as it is, at 1.31 and 1.45 GB so set, for
about a third more time; MELD's batches at 1.63 and 1.19 GB.

The settings are glibc tunables, read when a process starts, so the command starts itself again with them in its
environment (once: a ``GLIBC_TUNABLES`` already set, the user's or ours, is kept as it is). ``TURNFORMER_ALLOCATOR``:
``turnformer`` (the default) or ``system`` (malloc as it is); other C libraries and systems are left alone.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Mapping

TUNABLES = "glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=1048576"


def allocator_environment(environ: Mapping[str, str], system: str, libc: str) -> dict[str, str] | None:
    """The environment to start again with, or None where there is nothing to change: not Linux with glibc, the
    tunables already set, or ``TURNFORMER_ALLOCATOR=system``; another value of it is a ValueError naming it."""
    choice = environ.get("TURNFORMER_ALLOCATOR", "").strip().lower() or "turnformer"
    if choice not in ("turnformer", "system"):
        raise ValueError(f"TURNFORMER_ALLOCATOR={environ['TURNFORMER_ALLOCATOR']!r}: expected turnformer (the default: "
                         "glibc's malloc set for long conversations) or system (malloc as it is)")
    if choice == "system" or system != "Linux" or libc != "glibc" or "GLIBC_TUNABLES" in environ:
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
    try:
        environment = allocator_environment(os.environ, platform.system(), platform.libc_ver()[0])
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    if environment is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], environment)
