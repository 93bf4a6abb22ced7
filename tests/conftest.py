"""Shared fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real benchmark files: $TURNFORMER_DATA, else the shared data folder beside the checkout."""
    env = os.environ.get("TURNFORMER_DATA", "").strip()
    path = Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"
    if not path.is_dir():
        pytest.skip(f"benchmark data not found at {path}: set TURNFORMER_DATA to the folder holding dailydialog/, meld/, ...")
    return path
