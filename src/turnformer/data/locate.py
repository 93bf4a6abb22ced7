"""Where the benchmark files live.

The data directory is, in order of precedence:

1. the directory passed explicitly (``--data-dir DIR`` on the command line, ``data_dir=`` in Python);
2. the environment variable ``TURNFORMER_DATA``;
3. the default ``~/.cache/turnformer/data`` (where ``turnformer data download NAME`` puts files).

Inside it each benchmark has its own folder (``dailydialog/``, ``meld/``, ``emorynlp/``, ``swda/``,
``mutual/``, ``empatheticdialogues/``, ``personachat/``), laid out as the official repositories lay them out (see ``docs/data-format.md``).
"""

from __future__ import annotations

import os
from pathlib import Path


ENV_VAR = "TURNFORMER_DATA"
DEFAULT_DATA_DIR = Path("~/.cache/turnformer/data")


def resolve_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The data directory: `data_dir` if given, else ``$TURNFORMER_DATA``, else ``~/.cache/turnformer/data``."""
    if data_dir is not None and str(data_dir) != "":
        return Path(data_dir).expanduser()
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        return Path(env).expanduser()
    return DEFAULT_DATA_DIR.expanduser()


def not_found_message(name: str, path: Path, manual_download: str = "") -> str:
    """Where the data was looked for, and the ways out. `manual_download` (how to get the files by hand) replaces
    the download command for a corpus that `turnformer data download` cannot fetch."""
    if manual_download:
        return (
            f"{name} data not found at {path}. Pass --data-dir DIR (the folder that holds {path.name}/) or "
            f"set {ENV_VAR}=DIR. {manual_download}"
        )
    return (
        f"{name} data not found at {path}. Pass --data-dir DIR (the folder that holds {path.name}/), "
        f"set {ENV_VAR}=DIR, or run `turnformer data download {name}`."
    )
