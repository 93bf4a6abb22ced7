"""PHAED's Figure 6: how the decoder's memory length c_max changes its scores on DailyDialog.

Reads the results files of a c_max sweep (``generation-dailydialog-phaed-cmaxC[SUFFIX].json``, written by
``run.py --plan generation`` or ``--plan generation-cpu``) and plots, as the paper does, the change of
each metric against c_max = 1: perplexity, BLEU-1/2 and Distinct-1/2 of greedy responses.

    python benchmarks/phaed_memory_plot.py --suffix=-cpu --out docs/generation-phaed-memory-length.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
DOCS_DIR = Path(__file__).resolve().parents[1] / "docs"  # the figure's default place, wherever the command starts
METRICS = ("perplexity", "bleu_1", "bleu_2", "distinct_1", "distinct_2")


def load_sweep(suffix: str, results_dir: Path = RESULTS) -> dict[int, dict[str, float]]:
    """{c_max: {metric: mean over the run's seeds}} for every c_max whose results file exists."""
    sweep = {}
    for path in sorted(results_dir.glob(f"generation-dailydialog-phaed-cmax*{suffix}.json")):
        c_max = path.name.removeprefix("generation-dailydialog-phaed-cmax").removesuffix(f"{suffix}.json")
        if not c_max.isdigit():  # another suffix (the GPU sweep when asked for the CPU one)
            continue
        record = json.loads(path.read_text())
        values = {"perplexity": record["mean"]}
        for name in METRICS[1:]:  # BLEU and Distinct, both in percent
            scores = record["extra"][name]
            values[name] = sum(scores) / len(scores)
        sweep[int(c_max)] = values
    if 1 not in sweep:
        raise SystemExit(f"no results file for c_max = 1 (generation-dailydialog-phaed-cmax1{suffix}.json in {results_dir}); "
                         "the figure is drawn relative to it")
    return dict(sorted(sweep.items()))


def plot(sweep: dict[int, dict[str, float]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c_values = list(sweep)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(c_values, [sweep[c]["perplexity"] - sweep[1]["perplexity"] for c in c_values], marker="o", color="black")
    left.set(xlabel="memory length c_max", ylabel="Δ perplexity vs c_max = 1 (lower is better)", xticks=c_values)
    for name in METRICS[1:]:
        right.plot(c_values, [sweep[c][name] - sweep[1][name] for c in c_values], marker="o", label=name.replace("_", "-"))
    right.set(xlabel="memory length c_max", ylabel="Δ score vs c_max = 1 (points)", xticks=c_values)
    for ax in (left, right):
        ax.axhline(0, color="grey", linewidth=0.8)
        ax.grid(alpha=0.3)
    right.legend()
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suffix", default="", help="Experiment suffix of the sweep: '' (GPU plan) or '-cpu'.")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    parser.add_argument("--out", type=Path, default=DOCS_DIR / "generation-phaed-memory-length.png")
    args = parser.parse_args()
    sweep = load_sweep(args.suffix, args.results_dir)
    for c_max, values in sweep.items():
        print(f"c_max {c_max}: " + ", ".join(f"{k} {v:.2f}" for k, v in values.items()))
    plot(sweep, args.out, f"PHAED on DailyDialog: memory length c_max (one seed each{', CPU scale' if args.suffix else ''})")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
