"""What a plan lists: experiments, each a recipe (task, dataset, model) with the overrides applied to it, its seeds
and its data limits. A value the runner's command line gives (its seed lists, SwDA's training subset) is named in a
plan by an `Option`, which the runner replaces by that option's value."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from turnformer.recipes import recipe_for_dataset


@dataclass(frozen=True)
class Option:
    """The value of the runner's command-line option `name` (as argparse stores it); `first`: its first item only."""

    name: str
    first: bool = False

    def value(self, options: dict):
        value = options[self.name]
        return value[:1] if self.first else value


SEEDS = Option("seeds")  # --seeds: DialogXL, its variants and every task's main rows
FIRST_SEED = Option("seeds", first=True)  # ablations and sweeps: one seed
BASELINE_SEEDS = Option("baseline_seeds")  # --baseline-seeds (default: --seeds)
FIRST_BASELINE_SEED = Option("baseline_seeds", first=True)
GRID_SEEDS = Option("grid_seeds")  # --grid-seeds: the dialogue-act W x P grid and its sweeps
SWDA_TRAIN = Option("swda_train")  # --swda-train: SwDA's training conversations in figure4


@dataclass(frozen=True)
class Experiment:
    """One row of results: benchmarks/results/ID.json, collected from its runs RUNS_DIR/ID/seedN, each
    `turnformer train` of the recipe TASK-DATASET-MODEL with `overrides` (``--set``) on the first `limit_train`
    training and `limit_eval` validation and test dialogues (None: all)."""

    id: str
    model: str
    dataset: str
    seeds: tuple[int, ...] | Option
    overrides: tuple[str, ...] = ()
    limit_train: int | Option | None = None
    limit_eval: int | None = None
    extra: dict = field(default_factory=dict, hash=False)  # copied into the results file's "extra"
    task: str = "erc"
    max_epoch: int | None = None  # scored on its first epochs only (collect_erc --max-epoch)
    # a grid cell at its model's recipe cell: that experiment's runs (the same training over its first epochs) count
    recipe_runs: str | None = None

    @property
    def recipe(self) -> str:
        """The recipe's name, as `turnformer train --dataset` finds it (a corpus read in another's split: that one's)."""
        return recipe_for_dataset(self.task, self.model, self.dataset)[0].stem

    def resolved(self, options: dict) -> Experiment:
        """This experiment with the command line's values (`options`: argparse's, by name) in place of its Options."""
        given = {name: value.value(options) for name in ("seeds", "limit_train")
                 if isinstance(value := getattr(self, name), Option)}
        return replace(self, **given)
