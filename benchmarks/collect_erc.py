"""Collect finished ERC runs (one folder per seed, written by `turnformer train`) into one results
file: the test score at each run's best validation epoch, mean and std over seeds.

    python benchmarks/collect_erc.py --experiment erc-meld-dialogxl runs/meld-dialogxl-s1 runs/meld-dialogxl-s2 ...

A run cut short (time budget, interrupt) or trained on a subset is refused unless --allow-partial,
and is then marked as such in the results file.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from turnformer.results import make_result, write_result
from turnformer.tasks.metrics import primary_metric


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--model", default="dialogxl")
    parser.add_argument("--allow-partial", action="store_true")
    args = parser.parse_args()

    seeds, scores, accuracy, best_epochs, seconds, commands = [], [], [], [], [], []
    recipe = None
    for run in args.runs:
        info = json.loads((run / "run.json").read_text())
        result = json.loads((run / "result.json").read_text())
        partial = result["stopped_early"] or info.get("limits")
        if partial and not args.allow_partial:
            raise SystemExit(f"{run}: cut short or trained on a subset; pass --allow-partial to record it as such")
        if result["best_epoch"] is None:
            raise SystemExit(f"{run}: no finished epoch")
        best = next(h for h in result["history"] if h.get("epoch") == result["best_epoch"])
        recipe = info["recipe"]
        seeds.append(info["seed"])
        scores.append(best["test"]["primary"])
        accuracy.append(best["test"]["accuracy"])
        best_epochs.append(result["best_epoch"])
        seconds.append(result["train_seconds"])
        commands.append(f"turnformer train --dataset {recipe['dataset']} --out {run} --seed {info['seed']}")
    record = make_result(
        args.experiment, task=recipe["task"], dataset=recipe["dataset"], split="test", model=args.model,
        backbone=recipe["backbone"], config={"model_config": recipe["model_config"], "train": recipe["train"]},
        metric=primary_metric(recipe["dataset"]), scores=scores, seeds=seeds, paper=recipe.get("paper"),
        extra={"accuracy": accuracy, "best_epoch": best_epochs, "train_seconds": seconds,
               "runs": [str(r) for r in args.runs], "partial": bool(args.allow_partial)},
        command="; ".join(commands),
    )
    print(f"{args.experiment}: {record['mean']:.2f} ± {record['std']:.2f} over seeds {seeds} -> {write_result(record)}")


if __name__ == "__main__":
    main()
