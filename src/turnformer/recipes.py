"""Recipes: one TOML file per experiment (dataset x model). They ship with the package
(``turnformer/recipe_files/TASK-DATASET-MODEL.toml``) and are named by their file's stem, e.g. ``erc-meld-dialogxl``.
The papers' scores are in `turnformer.results` (`PAPER_SCORES`), not in the recipes.

A recipe names the task, model, dataset (a benchmark name, or ``file`` with ``train_file``,
``validation_file`` and ``test_file`` in the generic JSONL format), the backbone, the model's
settings (``[model_config]``) and the training settings (``[train]``). Command-line flags override
single values (``--set train.epochs=2``).
"""

from __future__ import annotations

import copy
import hashlib
import math
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from turnformer.data._io import read_text
from turnformer.data.registry import get_info
from turnformer.dialogue import DialogueError

if TYPE_CHECKING:
    from turnformer.training import TrainConfig

RECIPES_DIR = Path(__file__).resolve().parent / "recipe_files"  # package data, installed beside this module
REQUIRED = ("task", "model", "dataset")
FILE_FALLBACK = {"erc": "meld"}  # whose recipe a model without a file recipe takes on the user's files
# the model trained on the user's files when none is named: for emotions the setting that measured best on the
# benchmarks; for the other tasks that train on files, the model of their file recipe
DEFAULT_FILE_MODEL = {"erc": "dialogxl-memory-bias", "response-selection": "mdfn", "generation": "transformer"}


def find_recipe(task: str, model: str, dataset: str) -> Path:
    """The recipe TASK-DATASET-MODEL. For ``dataset = "file"`` (the user's own conversation files), a model
    without a file recipe of its own gets a benchmark recipe (for emotion recognition MELD's: the multi-party
    benchmark, batches of 4 conversations); the caller then sets ``dataset = "file"`` and says so."""
    path = RECIPES_DIR / f"{task}-{dataset}-{model}.toml"
    if not path.exists() and dataset == "file":
        preferred = RECIPES_DIR / f"{task}-{FILE_FALLBACK.get(task, '')}-{model}.toml"
        path = preferred if preferred.exists() else next(iter(sorted(RECIPES_DIR.glob(f"{task}-*-{model}.toml"))), path)
    if not path.exists():
        if dataset != "file":
            try:
                get_info(dataset)
            except DialogueError as e:  # an unknown dataset is said as such, with the known ones
                raise DialogueError(f"no recipe {path.name}: {e}") from None
        known = ", ".join(sorted(p.stem for p in RECIPES_DIR.glob("*.toml"))) or "none"
        raise DialogueError(f"no recipe {path.name}; known recipes: {known} (or pass --recipe FILE)")
    return path


def recipe_path(recipe: str | Path) -> Path:
    """A recipe file given by its path, or by the name of a recipe that ships with the package (``erc-meld-dialogxl``,
    with or without ``.toml``); a file that exists wins over a name."""
    path = Path(recipe)
    shipped = RECIPES_DIR / f"{path.name.removesuffix('.toml')}.toml"
    if path.exists() or path.name != str(recipe) or not shipped.is_file():
        return path
    return shipped


FALLBACK_DATASET = "dailydialog"


def recipe_for_dataset(task: str, model: str, dataset: str) -> tuple[Path, str | None]:
    """The recipe for training `model` on benchmark `dataset`, and the dataset name the caller must set in it
    (None: the recipe's own ``dataset`` stands).

    The recipe TASK-DATASET-MODEL, found under the benchmark's registry name too (``daily_dialog``). A
    generation benchmark without a recipe of its own (EmpatheticDialogues, PERSONA-CHAT...) gets the model's
    DailyDialog recipe, to be run with ``dataset`` set to the benchmark: generation reads speakers and texts
    alone, so its settings carry over, while a classification recipe names its own corpus's labels. Anything
    else goes to `find_recipe` (its fallback for ``file``, or its "no recipe" error). A benchmark read from another's
    folder in a split of its own (``swda-ld``: SwDA in Lee and Dernoncourt's split) without a recipe of its own gets
    that benchmark's recipe, to be run with ``dataset`` set to it: same corpus, same labels."""
    try:
        info = get_info(dataset) if dataset != "file" else None
    except DialogueError:
        info = None
    if info is None:
        return find_recipe(task, model, dataset), None
    own = RECIPES_DIR / f"{task}-{info.name}-{model}.toml"
    if own.exists():
        return own, None
    same_corpus = RECIPES_DIR / f"{task}-{info.folder}-{model}.toml"
    if info.folder != info.name and same_corpus.exists():
        return same_corpus, info.name
    fallback = RECIPES_DIR / f"generation-{FALLBACK_DATASET}-{model}.toml"
    if task != "generation" or not fallback.exists():
        return find_recipe(task, model, dataset), None
    return fallback, info.name


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """The recipe in the file `path` (or of that name, see `recipe_path`), checked, with ``--set`` `overrides`."""
    path = recipe_path(path)
    try:
        recipe = tomllib.loads(read_text(path))  # UTF-8, a byte-order mark read past; a folder or bad bytes named
    except FileNotFoundError:
        raise DialogueError(f"{path}: no such recipe file, nor a recipe's name (they read like erc-meld-dialogxl)") from None
    except OSError as e:
        raise DialogueError(f"{path}: the recipe cannot be read ({e.strerror or e})") from None
    except tomllib.TOMLDecodeError as e:
        raise DialogueError(f"{path}: malformed recipe: {e}") from None
    for key in REQUIRED:
        if key not in recipe:
            raise DialogueError(f"{path}: recipe has no {key!r}")
    recipe.setdefault("model_config", {})
    recipe.setdefault("train", {})
    recipe["recipe_path"] = str(path)
    recipe = apply_overrides(recipe, overrides or [])
    source = f"{path.name}{' with --set' if overrides else ''}"
    check_recipe_keys(recipe, source)
    check_train_settings(recipe["train"], source)
    return recipe


# What a recipe may hold at its top level besides [train]
RECIPE_KEYS = ("task", "model", "dataset", "label_kind", "labels", "backbone", "window", "context_padding", "setting",
               "eval_online", "holdout", "train_file", "validation_file", "test_file", "file_sha256", "recipe_path",
               "model_config", "data")
SPLIT_FILE_KEYS = ("train_file", "validation_file", "test_file")
# The top-level keys that only some tasks read (the rest every task reads): one set for another task is refused, not
# silently ignored (`window=3` for an emotion model, where model_config.window was meant)
TASK_KEYS = {
    "erc": ("label_kind", "labels", "backbone"),
    "dialogue-act": ("label_kind", "labels", "backbone", "window", "context_padding", "setting", "eval_online"),
    "response-selection": ("backbone", "holdout"),
    "generation": ("data",),
}
WRITTEN_KEYS = ("file_sha256", "recipe_path")  # what the commands write into a run's recipe, never --set
# Whole-number settings and their least values: top-level (dialogue acts' windows, response selection's held-out
# items) and [data] of the generation recipes
WHOLE_SETTINGS = {"window": 1, "context_padding": 0, "holdout": 0}
DATA_SETTINGS = {"min_count": 1, "max_context_turns": 1, "max_words": 1}


def check_recipe_keys(recipe: dict[str, Any], source: str) -> None:
    """Refuse, naming it, a top-level key no task reads (a typo, or a --set into a section that does not exist), a key
    that only another task reads, and a bad [data] setting. [model_config] is checked by each model's config, [train]
    by `check_train_settings`."""
    unknown = [k for k in recipe if k not in (*RECIPE_KEYS, "train")]
    if unknown:
        settable = sorted(set(RECIPE_KEYS) - set(WRITTEN_KEYS))  # what the commands write is no key to give
        raise DialogueError(f"{source}: unknown recipe key {unknown[0]!r}; known: {', '.join(settable)}, train")
    for key in ("model_config", "data"):
        if not isinstance(recipe.get(key, {}), dict):
            raise DialogueError(f"{source}: {key} must be a table of settings, got {recipe[key]!r}")
    unknown = [k for k in recipe.get("data", {}) if k not in DATA_SETTINGS]
    if unknown:
        raise DialogueError(f"{source}: unknown setting data.{unknown[0]}; known: {', '.join(DATA_SETTINGS)}")
    if "label_kind" in recipe and (not isinstance(recipe["label_kind"], str) or not recipe["label_kind"].strip()):
        raise DialogueError(f"{source}: label_kind = {recipe['label_kind']!r}; expected a label kind such as \"emotion\" or \"act\"")
    for key in SPLIT_FILE_KEYS:
        if key in recipe and (not isinstance(recipe[key], str) or not recipe[key].strip()):
            raise DialogueError(f"{source}: {key} = {recipe[key]!r}; expected the path of a file, in quotes")
    if "eval_online" in recipe and not isinstance(recipe["eval_online"], bool):
        raise DialogueError(f"{source}: eval_online = {recipe['eval_online']!r}; expected true or false")
    labels = recipe.get("labels")
    if labels is not None and recipe.get("dataset") != "file":
        raise DialogueError(f"{source}: labels = {labels!r}: a benchmark's label set is its own; labels are for your own "
                            "data (dataset = \"file\")")
    if labels is not None and (not isinstance(labels, list) or not labels or not all(isinstance(x, str) and x for x in labels)
                               or len(set(labels)) != len(labels)):
        raise DialogueError(f"{source}: labels = {labels!r}; expected a list of distinct label names, e.g. [\"joy\", \"anger\"]")
    settings = [(key, recipe[key], least) for key, least in WHOLE_SETTINGS.items() if key in recipe]
    settings += [(f"data.{key}", value, DATA_SETTINGS[key]) for key, value in recipe.get("data", {}).items()]
    for name, value, least in settings:
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise DialogueError(f"{source}: {name} = {value!r}; expected a whole number, {least} or more")
    if (task := recipe.get("task")) in TASK_KEYS:
        others = {key for keys in TASK_KEYS.values() for key in keys} - set(TASK_KEYS[task])
        if foreign := sorted(k for k in recipe if k in others):
            readers = [name for name, keys in TASK_KEYS.items() if foreign[0] in keys]
            hint = f" (a model's own settings go under model_config: model_config.{foreign[0]}?)" if foreign[0] != "data" else ""
            raise DialogueError(f"{source}: {foreign[0]} = {recipe[foreign[0]]!r} is a setting of the {' and '.join(readers)} "
                                f"task{'s' if len(readers) > 1 else ''}; the {task} task does not read it{hint}")


# The [train] settings the tasks read: type and least value (official_lr documents the paper's rate, unread).
TRAIN_SETTINGS: dict[str, tuple[type, float]] = {
    "epochs": (int, 1), "batch_size": (int, 1), "eval_batch_size": (int, 1), "warmup_steps": (int, 0),
    "save_every_steps": (int, 1), "lr": (float, 0), "head_lr": (float, 0), "official_lr": (float, 0),
    "weight_decay": (float, 0), "grad_clip": (float, 0),
}
ABOVE_LEAST = ("lr", "head_lr", "official_lr")  # learning rates: above 0, not 0
SCHEDULERS = ("linear", "constant")
MIXED_PRECISIONS = ("no", "bf16", "fp16")  # accelerate's (TrainConfig.mixed_precision)


def check_train_settings(train: dict[str, Any], source: str) -> None:
    """Refuse, naming the setting, an unknown [train] key or a value of the wrong type or range."""
    if not isinstance(train, dict):
        raise DialogueError(f"{source}: [train] must be a table of settings")
    for key, value in train.items():
        if key in ("scheduler", "mixed_precision"):
            known = SCHEDULERS if key == "scheduler" else MIXED_PRECISIONS
            if value not in known:
                raise DialogueError(f"{source}: train.{key} = {value!r}; known: {', '.join(known)}")
            continue
        if key not in TRAIN_SETTINGS:
            known = sorted([*TRAIN_SETTINGS, "scheduler", "mixed_precision"])
            raise DialogueError(f"{source}: unknown setting train.{key}; known: {', '.join(known)}")
        kind, least = TRAIN_SETTINGS[key]
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        if key == "head_lr" and value is None:
            continue
        if not numeric or (kind is int and not isinstance(value, int)) or not math.isfinite(value) or value < least:
            wanted = "a whole number" if kind is int else "a number"
            raise DialogueError(f"{source}: train.{key} = {value!r}; expected {wanted}, {least:g} or more")
        if key in ABOVE_LEAST and value == least:
            raise DialogueError(f"{source}: train.{key} = {value!r}: a learning rate of 0 trains nothing; expected a number "
                                "above 0")


def recipe_train_config(settings: dict, defaults: dict, *, seed: int, out_dir, resume: bool = False,
                        time_budget_s: float | None = None) -> TrainConfig:
    """A recipe's [train] settings as a TrainConfig, every setting it may hold read the same way for every task
    (schedule, warm-up and head_lr included); `defaults` are the task's values for those the recipe leaves out."""
    from turnformer.training import TrainConfig  # torch: the training package loads it; reading a recipe does not

    merged = {"weight_decay": 0.0, "grad_clip": 5.0, "scheduler": "constant", "warmup_steps": 0, **defaults, **settings}
    head_lr = merged.get("head_lr")
    return TrainConfig(
        epochs=int(merged["epochs"]), lr=float(merged["lr"]), seed=seed, out_dir=Path(out_dir),
        weight_decay=float(merged["weight_decay"]), grad_clip=float(merged["grad_clip"]), resume=resume,
        time_budget_s=time_budget_s, save_every_steps=merged.get("save_every_steps"), scheduler=merged["scheduler"],
        warmup_steps=int(merged["warmup_steps"]), head_lr=float(head_lr) if head_lr is not None else None,
        mixed_precision=merged.get("mixed_precision"),
    )


def file_digests(recipe: dict[str, Any]) -> dict[str, str]:
    """The SHA-256 of each data file a recipe names (``train_file``... that are files): recorded when a run starts
    (``file_sha256``), so that a resumed run or `evaluate` can tell that a file read again has changed since."""
    digests = {}
    for key in SPLIT_FILE_KEYS:
        path = Path(recipe[key]) if recipe.get(key) else None
        if path is not None and path.is_file():
            with open(path, "rb") as fh:
                digests[key] = hashlib.file_digest(fh, "sha256").hexdigest()
    return digests


def changed_files(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The data files that recipe `now` reads at the same paths as recipe `before` did, whose content has changed since
    `before` recorded its ``file_sha256``: one line each."""
    digests, current = before.get("file_sha256"), file_digests(now)
    digests = digests if isinstance(digests, dict) else {}
    return [f"{key} {now[key]}: its content changed since (SHA-256 {digests[key][:12]}... -> {current[key][:12]}...)"
            for key in SPLIT_FILE_KEYS if key in digests and key in current and before.get(key) == now.get(key)
            and digests[key] != current[key]]


def apply_overrides(recipe: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``section.key=value`` (value parsed as TOML, else kept as a string)."""
    recipe = copy.deepcopy(recipe)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep:
            raise DialogueError(f"--set {item!r}: expected KEY=VALUE, e.g. train.epochs=2")
        try:
            value, unparsed = tomllib.loads(f"v = {raw}")["v"], None
        except tomllib.TOMLDecodeError as e:
            value, unparsed = raw, e
        *sections, last = key.strip().split(".")
        if not all(part.strip() for part in (*sections, last)):
            raise DialogueError(f"--set {item!r}: {'empty key' if not key.strip() else f'an empty name in {key.strip()!r}'}; "
                                "expected KEY=VALUE, e.g. train.epochs=2")
        if key.strip() in WRITTEN_KEYS:
            raise DialogueError(f"--set {item!r}: {key.strip()} is written by the command itself, not set")
        if key.strip() == "train.official_lr":  # a recipe's record of the paper's rate: set, it would change nothing
            raise DialogueError(f"--set {item!r}: train.official_lr records the paper's learning rate and is not read; "
                                "the rate trained with is train.lr")
        node = recipe
        for section in sections:
            node = node.setdefault(section, {})
            if not isinstance(node, dict):
                raise DialogueError(f"--set {item!r}: {section!r} is not a section")
        if isinstance(node.get(last), dict):  # a section: its keys are set one by one, never the whole table replaced
            if not isinstance(value, dict):
                if raw.strip().startswith("{"):
                    raise DialogueError(f"--set {item!r}: {raw.strip()!r} is not a valid TOML inline table ({unparsed}); "
                                        f"e.g. {key.strip()}={{name = 1, other = 'x'}}")
                raise DialogueError(f"--set {item!r}: {key.strip()} is a section of settings; set one of them: "
                                    f"{key.strip()}.NAME=VALUE, or all at once as a TOML inline table")
            value = {**node[last], **value}
        node[last] = value
    return recipe
