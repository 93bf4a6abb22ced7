"""Collect finished ERC, dialogue-act or response-selection runs (one folder per seed, written by `turnformer train`) into one results
file: the test score at each run's best validation epoch, mean and std over seeds.

    python benchmarks/collect_erc.py --experiment erc-meld-dialogxl runs/meld-dialogxl-s1 runs/meld-dialogxl-s2 ...

A run cut short (time budget, interrupt), trained on a subset, or resumed with changed training settings (its
run.json's ``resumed_with_changes``) is refused unless --allow-partial, and is then marked as such in the results file.
Runs of different recipes, or two runs of one seed, are refused.

--max-epoch N scores the runs as if they had stopped after N epochs: the test score at the best validation epoch
among the first N (the schedules are constant, so longer runs' first epochs are the shorter runs' training). It puts
runs of different lengths side by side at the same budget.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from turnformer.results import machine, machine_line, make_result, paper_score, write_result
from turnformer.tasks.generation import pretrained_start
from turnformer.tasks.metrics import primary_metric


def best_entry(result: dict, max_epoch: int | None = None) -> tuple[dict | None, bool]:
    """The history entry of the run's best validation epoch, among its first `max_epoch` finished epochs if given (the
    earliest of equal scores, as in training), and whether the run is cut short: stopped early, or short of `max_epoch`
    finished epochs (a run cut after them counts in full)."""
    if max_epoch is None:
        return next((h for h in result["history"] if h.get("epoch") == result["best_epoch"]), None), result["stopped_early"]
    finished = [h for h in result["history"] if h.get("complete") and h["epoch"] <= max_epoch]
    def rank(h: dict) -> tuple[float, int]:  # a NaN validation score never beats a number, as in training
        score = h["validation"]["primary"]
        return (-math.inf if math.isnan(score) else score), -h["epoch"]

    return max(finished, key=rank, default=None), len(finished) < max_epoch


def recipe_differences(recipe: dict, other: dict) -> list[str]:
    """The settings two runs' recipes both record and set differently (the task, dataset, model, backbone and the
    training settings `run_config` keeps); a setting only one records is a later default, not a difference."""
    def flat(r: dict) -> dict:
        config = run_config(r)
        return {**{k: r[k] for k in ("task", "dataset", "model", "backbone") if k in r},
                **{f"{section}.{key}": value for section in ("model_config", "train") for key, value in config[section].items()},
                **{k: v for k, v in config.items() if k not in ("model_config", "train")}}

    a, b = flat(recipe), flat(other)
    return [f"{key}: {a[key]!r} / {b[key]!r}" for key in sorted(set(a) & set(b)) if a[key] != b[key]]


def run_config(recipe: dict) -> dict:
    """What a results file records of a run's recipe: the settings that decide its training."""
    return {"model_config": recipe["model_config"], "train": recipe["train"],
            **{k: recipe[k] for k in ("window", "context_padding", "setting", "holdout") if k in recipe}}


def collect(experiment: str, runs: list[Path], allow_partial: bool = False, extra: dict | None = None,
            max_epoch: int | None = None) -> dict:
    """The results record of `runs` (one per seed), or of their first `max_epoch` epochs; raises SystemExit naming a
    run that cannot count."""
    seeds, scores, accuracy, online, validation, best_epochs, seconds, commands = [], [], [], [], [], [], [], []
    precisions = []  # accelerate's mixed precision each run trained under (runs before it was recorded: None)
    machines = {}  # seed -> where its run trained (runs before it was recorded: this machine)
    ranking: dict[str, list[float]] = {}  # response selection: the other ranking metrics; generation: BLEU, Distinct
    recipe = None
    partial_runs = []
    for run in runs:
        try:
            info = json.loads((run / "run.json").read_text())
            result = json.loads((run / "result.json").read_text())
        except (OSError, ValueError) as e:  # no such folder, no finished epoch yet, a damaged file
            raise SystemExit(f"error: {run}: not a trained run ({e})") from None
        best, cut_short = best_entry(result, max_epoch)
        changes = info.get("resumed_with_changes")  # resumed with other training settings: not one run of its recipe
        if cut_short or info.get("limits") or changes:
            if not allow_partial:
                raise SystemExit(f"{run}: cut short, trained on a subset or resumed with changed settings; pass "
                                 "--allow-partial to record it as such")
            partial_runs.append({"run": str(run), "seed": info["seed"], "stop_reason": result["stop_reason"], "limits": info.get("limits"),
                                 **({"resumed_with_changes": changes} if changes else {})})
        if best is None:
            raise SystemExit(f"{run}: no finished epoch")
        if not isinstance(info.get("seed"), int) or isinstance(info["seed"], bool):
            raise SystemExit(f"{run / 'run.json'}: seed {info.get('seed')!r} is not a whole number")
        if info["seed"] in seeds:
            raise SystemExit(f"{run}: seed {info['seed']} twice (also {runs[seeds.index(info['seed'])]}): one run a seed")
        if recipe is not None and (differences := recipe_differences(recipe, info["recipe"])):
            raise SystemExit(f"{run}: trained with another recipe than {runs[0]} ({'; '.join(differences[:5])}): "
                             "one results file holds runs of one recipe")
        recipe = info["recipe"]
        seeds.append(info["seed"])
        generation = info["recipe"]["task"] == "generation"  # primary is minus the perplexity
        scores.append(best["test"]["perplexity"] if generation else best["test"]["primary"])
        if "accuracy" in best["test"]:
            accuracy.append(best["test"]["accuracy"])
        for key in ("R4@2", "R10@2", "R10@5", "MRR", "MAP", "bleu_1", "bleu_2", "bleu_3", "bleu_4", "distinct_1", "distinct_2",
                    "embedding_average", "embedding_extrema", "embedding_greedy"):
            if key in best["test"]:
                ranking.setdefault(key, []).append(best["test"][key])
        if "online_accuracy" in best["test"]:  # dialogue acts: the same model scored online too
            online.append(best["test"]["online_accuracy"])
        validation.append(best["validation"]["perplexity"] if generation else best["validation"]["primary"])
        best_epochs.append(best["epoch"])
        precisions.append(info.get("mixed_precision"))
        machines[info["seed"]] = info.get("machine") or machine()
        seconds.append(result["train_seconds"] if max_epoch is None
                       else sum(h["seconds"] for h in result["history"] if h.get("complete") and h["epoch"] <= max_epoch))
        limits = info.get("limits") or {}
        commands.append(
            f"turnformer train --task {recipe['task']} --model {recipe['model']} --dataset {recipe['dataset']} --seed {info['seed']} --out {run}"
            + (f" --limit-train {limits['train']}" if limits.get("train") else "")
            + (f" --limit-eval {limits['test']}" if limits.get("test") else "")
            + (f" (its first {max_epoch} epochs)" if max_epoch is not None else "")
        )
    task = recipe["task"]
    # MuTual's test answers are hidden: the "test" of its runs is the dev set (see turnformer.tasks.response_selection)
    split = "dev" if task == "response-selection" and recipe["dataset"] in ("mutual", "mutual-plus") else "test"
    metric = {"dialogue-act": "accuracy", "response-selection": "R4@1", "generation": "perplexity"}.get(task) or primary_metric(recipe["dataset"])
    record = make_result(
        experiment, task=task, dataset=recipe["dataset"], split=split, model=recipe["model"],
        backbone=recipe.get("backbone") or pretrained_start(recipe["model"]), config=run_config(recipe),
        metric=metric, scores=scores, seeds=seeds, paper=paper_score(task, recipe["dataset"], recipe["model"]),
        extra={**({"accuracy": accuracy} if accuracy else {}), **ranking, "validation": validation, "best_epoch": best_epochs, "train_seconds": seconds,
               "partial": partial_runs or False, **({"online_accuracy": online} if online else {}),
               **({"max_epoch": max_epoch} if max_epoch is not None else {}),
               **({"mixed_precision": precisions} if any(precisions) else {}), **(extra or {})},
        command="; ".join(commands) + " (recipe values as in config)",
    )
    return {**record, "machine": machine_line(machines)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--allow-partial", action="store_true")
    parser.add_argument("--max-epoch", type=int, default=None, help="Score the runs' first N epochs only.")
    args = parser.parse_args()
    if args.max_epoch is not None and args.max_epoch < 1:
        parser.error(f"--max-epoch {args.max_epoch}: give a number of epochs, 1 or more")
    record = collect(args.experiment, args.runs, args.allow_partial, max_epoch=args.max_epoch)
    print(f"{args.experiment}: {record['mean']:.2f} ± {record['std']:.2f} over seeds {record['seeds']} -> {write_result(record)}")


if __name__ == "__main__":
    main()
