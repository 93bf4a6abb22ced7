"""Files that survive a crash: a directory filled aside and renamed into place whole, JSON flushed to the disk, and
JSON read back with a missing, truncated or corrupt file named in a CheckpointError."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from turnformer.errors import CheckpointError


@contextlib.contextmanager
def atomic_directory(out_dir: Path, name: str):
    """Yield a temporary sibling directory to fill; on success it replaces `out_dir/name`: the old
    one is renamed away, the new one renamed in, the old one deleted. A crash leaves either the old
    or the new checkpoint (or, between the two renames, the old one under `.name.old`, which
    `recover_swap` puts back), never a half-written one."""
    out_dir.mkdir(parents=True, exist_ok=True)
    final, tmp, old = out_dir / name, out_dir / f".{name}.tmp", out_dir / f".{name}.old"
    recover_swap(out_dir, name)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        fsync(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    fsync(out_dir)
    shutil.rmtree(old, ignore_errors=True)


def recover_swap(out_dir: Path, name: str) -> None:
    """After a crash between the two renames of `atomic_directory`, put the old checkpoint back."""
    final, old = out_dir / name, out_dir / f".{name}.old"
    if not final.exists() and old.is_dir():
        os.replace(old, final)


def fsync(path: Path) -> None:
    """Flush a file or a directory (its entries: a rename) to the disk, where the system allows it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_json(path: Path, data: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=False)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as error:
        raise CheckpointError(f"{path} is missing") from error
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path}: not valid JSON (truncated or corrupt checkpoint?): {error}") from error


def json_normalise(value: Any, what: str) -> Any:
    """`value` as plain JSON types (tuples -> lists, numpy/torch scalars -> numbers), or a TypeError."""

    def default(obj: Any) -> Any:
        if isinstance(obj, (np.generic, torch.Tensor)) and getattr(obj, "ndim", 0) == 0:
            return obj.item()
        if isinstance(obj, (np.ndarray, torch.Tensor)):
            return obj.tolist()
        if isinstance(obj, Path):
            return str(obj)
        raise TypeError(f"{type(obj).__name__} is not JSON-serialisable")

    try:
        return json.loads(json.dumps(value, default=default))
    except (TypeError, ValueError) as error:
        raise TypeError(f"{what} must be JSON-serialisable: {error}") from error
