"""Recipes: one TOML file per experiment (dataset x model), with the paper's number beside it.

A recipe names the task, model, dataset (a benchmark name, or ``file`` with ``train_file``,
``validation_file`` and ``test_file`` in the generic JSONL format), the backbone, the model's
settings (``[model_config]``) and the training settings (``[train]``). Command-line flags override
single values (``--set train.epochs=2``).
"""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

from turnformer.dialogue import DialogueError

RECIPES_DIR = Path(__file__).resolve().parents[2] / "recipes"
REQUIRED = ("task", "model", "dataset")


def find_recipe(task: str, model: str, dataset: str) -> Path:
    """recipes/TASK-DATASET-MODEL.toml. For ``dataset = "file"`` (the user's own conversation files), a model
    without a file recipe of its own gets its benchmark recipe; the caller then sets ``dataset = "file"``."""
    path = RECIPES_DIR / f"{task}-{dataset}-{model}.toml"
    if not path.exists() and dataset == "file":
        path = next(iter(sorted(RECIPES_DIR.glob(f"{task}-*-{model}.toml"))), path)
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in RECIPES_DIR.glob("*.toml"))) or "none"
        raise DialogueError(f"no recipe {path.name}; known recipes: {known} (or pass --recipe FILE)")
    return path


FALLBACK_DATASET = "dailydialog"


def recipe_for_dataset(task: str, model: str, dataset: str) -> tuple[Path, str | None]:
    """The recipe for training `model` on benchmark `dataset`, and the dataset name the caller must set in it
    (None: the recipe's own ``dataset`` stands).

    recipes/TASK-DATASET-MODEL.toml, found under the benchmark's registry name too (``daily_dialog``). A
    generation benchmark without a recipe of its own (EmpatheticDialogues, PERSONA-CHAT...) gets the model's
    DailyDialog recipe, to be run with ``dataset`` set to the benchmark: generation reads speakers and texts
    alone, so its settings carry over, while a classification recipe names its own corpus's labels. Anything
    else goes to `find_recipe` (its fallback for ``file``, or its "no recipe" error)."""
    from turnformer.data.registry import get_info  # late import: the registry imports every loader

    try:
        info = get_info(dataset) if dataset != "file" else None
    except DialogueError:
        info = None
    if info is None:
        return find_recipe(task, model, dataset), None
    own = RECIPES_DIR / f"{task}-{info.name}-{model}.toml"
    if own.exists():
        return own, None
    fallback = RECIPES_DIR / f"generation-{FALLBACK_DATASET}-{model}.toml"
    if task != "generation" or not fallback.exists():
        return find_recipe(task, model, dataset), None
    return fallback, info.name


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> dict[str, Any]:
    path = Path(path)
    try:
        recipe = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DialogueError(f"{path}: no such recipe file") from None
    except tomllib.TOMLDecodeError as e:
        raise DialogueError(f"{path}: malformed recipe: {e}") from None
    for key in REQUIRED:
        if key not in recipe:
            raise DialogueError(f"{path}: recipe has no {key!r}")
    recipe.setdefault("model_config", {})
    recipe.setdefault("train", {})
    recipe["recipe_path"] = str(path)
    return apply_overrides(recipe, overrides or [])


def apply_overrides(recipe: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``section.key=value`` (value parsed as TOML, else kept as a string)."""
    recipe = copy.deepcopy(recipe)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep:
            raise DialogueError(f"--set {item!r}: expected KEY=VALUE, e.g. train.epochs=2")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        *sections, last = key.strip().split(".")
        node = recipe
        for section in sections:
            node = node.setdefault(section, {})
            if not isinstance(node, dict):
                raise DialogueError(f"--set {item!r}: {section!r} is not a section")
        node[last] = value
    return recipe
