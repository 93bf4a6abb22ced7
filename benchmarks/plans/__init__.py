"""The benchmark runner's plans (`benchmarks/run.py --plan NAME`), one module per task: each plan a list of
experiments (`Experiment`: a recipe, the overrides applied to it, its seeds and data limits)."""

from __future__ import annotations

from . import dialogue_act, erc, generation, response_selection
from .experiment import Experiment

TASKS = (erc, dialogue_act, response_selection, generation)
PLANS: dict[str, list[Experiment]] = {name: plan for task in TASKS for name, plan in task.PLANS.items()}

__all__ = ["PLANS", "TASKS", "Experiment"]
