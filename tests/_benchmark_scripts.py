"""Load a script of benchmarks/ (not a package) as a module, to test its functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def load_benchmark_script(name: str):
    """benchmarks/NAME.py as a module."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
