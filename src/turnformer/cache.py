"""Where turnformer keeps what it computes once and reads back (dependency parses, sentence vectors, word vectors):
``~/.cache/turnformer``, or ``$TURNFORMER_CACHE`` where it is set."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors.torch import save_file


def cache_root(*parts: str) -> Path:
    """The cache folder (or a path inside it: ``cache_root("parses", "en.sqlite")``)."""
    base = os.environ.get("TURNFORMER_CACHE", "").strip()
    return (Path(base) if base else Path.home() / ".cache" / "turnformer").joinpath(*parts)


def write_safetensors(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    """Write a safetensors file whole or not at all: into a file of this process beside it, then renamed into place,
    so a reader (or another process writing the same file) never sees half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(partial), metadata=metadata)
    os.replace(partial, path)
