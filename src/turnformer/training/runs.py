"""A run's folder (`out_dir`): what makes a folder a run's, and how a fresh run replaces an earlier one there without
mixing with it and without losing it before the new run has a checkpoint of its own."""

from __future__ import annotations

import logging
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

from turnformer.errors import CheckpointError

try:
    import fcntl
except ImportError:  # not on Windows: runs there are not guarded against a second one
    fcntl = None

logger = logging.getLogger(__name__)

RUN_ENTRIES = ("last", "best", "run.json", "result.json")  # what makes a folder a run's


def replaced_run_folder(out_dir: Path) -> Path:
    """Where a fresh run into `out_dir` keeps the run it replaces until its own first checkpoint."""
    return out_dir.with_name(out_dir.name + ".replaced")


def holds_set_aside_run(aside: Path) -> bool:
    """Whether `aside` is a folder holding nothing but a run's entries: the run `set_aside_earlier_run` set aside there
    (a folder of that name with anything else in it is someone else's)."""
    return aside.is_dir() and all(path.name in RUN_ENTRIES for path in aside.iterdir())


def set_aside_earlier_run(out_dir: Path) -> Path | None:
    """Move an earlier run's entries out of `out_dir` (a fresh run starts there), so that the folder never mixes two
    runs; they are deleted once the new run has a checkpoint, so that an interrupted start loses nothing. Entries
    left by an earlier replacement that never reached its first checkpoint are deleted: the run they replaced is
    still set aside."""
    present = [out_dir / name for name in RUN_ENTRIES if (out_dir / name).exists()]
    aside = replaced_run_folder(out_dir)
    if aside.exists() and not holds_set_aside_run(aside):
        raise CheckpointError(f"{aside}: in the way of the run that {out_dir} holds, which a fresh run sets aside there "
                              "until its first checkpoint; it is not a run set aside (it holds other files): move or "
                              "rename it, then start again")
    if aside.exists():
        for path in present:
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
        return aside
    if not present:
        return None
    aside.mkdir()
    for path in present:
        os.replace(path, aside / path.name)
    logger.warning("%s held a run: set aside in %s until this run's first checkpoint, then deleted", out_dir, aside)
    return aside


def delete_replaced_run(aside: Path, out_dir: Path) -> None:
    """The run in `out_dir` has a checkpoint now: the run it replaced, set aside in `aside`, goes."""
    shutil.rmtree(aside, ignore_errors=True)
    logger.info("deleted %s, the run that %s replaces, now that the new run has a checkpoint", aside, out_dir)


@contextmanager
def only_run_in(out_dir: Path, main_process: bool = True):
    """Within the block no other training writes into `out_dir`: a second one started there meanwhile is refused
    (a CheckpointError naming the folder) before it touches the folder, where both would overwrite each other's
    checkpoints. The lock is the folder's own (``flock``): nothing is left in it, and it ends with the process. Taken
    by the main process only (the others of a multi-process run share the folder)."""
    if not main_process or fcntl is None:
        yield
        return
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CheckpointError(f"{out_dir}: the run's folder cannot be made ({e.strerror or e})") from None
    fd = os.open(out_dir, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CheckpointError(f"{out_dir}: another training is writing into this folder now; wait for it to end, or "
                                  "give another output folder") from None
        yield
    finally:
        os.close(fd)
