"""DialogXL's Figure 4: test score against the maximum memory length, with the memory waste rates beside.

Reads the results files of a memory sweep (``erc-swda-PREFIX-memN.json``, written by ``run.py --plan
figure4-cpu`` or ``--plan figure4``) and the waste rates at the same lengths (``memory-waste-swda-memN.json``, written
by ``memory_waste.py --dataset swda --mem-lens ...``). Left: test weighted F1 and accuracy of each memory length.
Right: the share of padding in memory (per step, mean over steps) of segment recurrence, of XLNet's memory fed one
utterance a step (the paper's "vanilla XLNet"), and of DialogXL's utterance recurrence, batches of 4.

    python benchmarks/dialogxl_memory_plot.py --prefix first30-dialogxl-memory-bias --out docs/dialogxl-memory-length.png
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from turnformer.plots import write_figure
from turnformer.results import DOCS_DIR

RESULTS = Path(__file__).resolve().parent / "results"
WASTE_CURVES = {  # label -> where the rate is in a memory-waste record
    "segment recurrence": lambda r: r["mean"],
    "XLNet memory, one utterance a step": lambda r: r["extra"]["xlnet_utterance_segments_percent"],
    "utterance recurrence (DialogXL)": lambda r: r["extra"][f"utterance_recurrence_percent_batch{r['config']['batch_size']}"],
}


def load_sweep(prefix: str, dataset: str = "swda", results_dir: Path = RESULTS) -> dict[int, dict[str, float]]:
    """{memory length: {"weighted_f1", "accuracy"}} (means over the run's seeds) for every length with a results file."""
    pattern = re.compile(rf"erc-{re.escape(dataset)}-{re.escape(prefix)}-mem(\d+)\.json")
    sweep = {}
    for path in results_dir.glob(f"erc-{dataset}-{prefix}-mem*.json"):
        match = pattern.fullmatch(path.name)
        if not match:  # another sweep whose prefix starts like this one
            continue
        record = json.loads(path.read_text())
        accuracy = record["extra"]["accuracy"]  # test accuracy of each seed
        sweep[int(match.group(1))] = {"weighted_f1": record["mean"], "accuracy": sum(accuracy) / len(accuracy)}
    if not sweep:
        raise SystemExit(f"no results file erc-{dataset}-{prefix}-memN.json in {results_dir}")
    return dict(sorted(sweep.items()))


def load_waste(dataset: str = "swda", results_dir: Path = RESULTS) -> dict[int, dict[str, float]]:
    """{memory length: {curve label: waste in percent}} from memory-waste-DATASET-memN.json."""
    waste = {}
    for path in results_dir.glob(f"memory-waste-{dataset}-mem*.json"):
        length = path.name.removeprefix(f"memory-waste-{dataset}-mem").removesuffix(".json")
        if length.isdigit():
            record = json.loads(path.read_text())
            waste[int(length)] = {label: rate(record) for label, rate in WASTE_CURVES.items()}
    return dict(sorted(waste.items()))


def plot(sweep: dict[int, dict[str, float]], waste: dict[int, dict[str, float]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    lengths = list(sweep)
    for name, label in (("weighted_f1", "weighted F1"), ("accuracy", "accuracy")):
        left.plot(lengths, [sweep[m][name] for m in lengths], marker="o", label=label)
    left.set(xlabel="maximum memory length (tokens)", ylabel="test score (%)", xticks=lengths)
    left.legend()
    for label in WASTE_CURVES:
        right.plot(list(waste), [waste[m][label] for m in waste], marker=".", label=label)
    right.set(xlabel="maximum memory length (tokens)", ylabel="padding in memory (%)", ylim=(0, 100))
    right.legend()
    for ax in (left, right):
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    write_figure(fig, path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prefix", default="first30-dialogxl-memory-bias", help="The sweep's experiment ids between "
                        "'erc-swda-' and '-memN' (the figure4 plan's: dialogxl).")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    parser.add_argument("--out", type=Path, default=DOCS_DIR / "dialogxl-memory-length.png")
    args = parser.parse_args()
    sweep, waste = load_sweep(args.prefix, results_dir=args.results_dir), load_waste(results_dir=args.results_dir)
    for length, values in sweep.items():
        print(f"memory {length}: " + ", ".join(f"{k} {v:.2f}" for k, v in values.items()))
    plot(sweep, waste, args.out, f"DialogXL ({args.prefix}) on SwDA acts: memory length (one seed each)")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
