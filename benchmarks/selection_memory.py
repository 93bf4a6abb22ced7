"""Peak memory of scoring response-selection items as their number of candidates grows: `turnformer evaluate --input`
on files of the same items with 4 to 50 candidates each, this tree against an earlier commit (`--baseline`), side by
side on one checkpoint and the same files.

    python benchmarks/selection_memory.py [--checkpoint RUN] [--candidates 4,10,25,50] [--items 64] [--baseline COMMIT]

Without ``--checkpoint``, an MDFN on all-MiniLM-L6-v2 reading 256 tokens a sequence is trained first on 8 MuTual
items for 1 epoch (what it learnt does not matter here; its size and sequence length do). The files hold MuTual's
first ``--items`` dev items, each with its own 4 candidates and then the next items' until it has as many as asked
(its answer unchanged). Each command runs in a child process of its own, whose peak resident memory (``ru_maxrss``) is
read when it ends; the two trees' metrics are compared (the largest difference; counts equal). Writes
benchmarks/results/selection-memory.json: the peak at the most candidates as the score, every peak and time per size.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from _timing import count, counts, peak_memory, source_trees
from turnformer.data import load_split, write_jsonl
from turnformer.results import make_result, write_result

ROOT = Path(__file__).resolve().parent.parent


def items_file(path: Path, items: int, candidates: int, data_dir) -> None:
    """MuTual's first `items` dev items, each given the next items' candidates after its own up to `candidates`."""
    dev = list(load_split("mutual", "validation", data_dir).items)
    pool = [c for item in dev for c in item.candidates]
    out = []
    for i, item in enumerate(dev[:items]):
        extra = pool[4 * (i + 1) : 4 * (i + 1) + candidates - len(item.candidates)]
        out.append(dataclasses.replace(item, candidates=(*item.candidates, *extra)))
    write_jsonl(out, path)


def measure(src: Path, checkpoint: Path, source: Path, out: Path, threads: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": str(threads), "TURNFORMER_THREADS": str(threads)}
    # the metrics to `out` (the measuring process reads its own standard output); exec: the same process is measured
    command = ["sh", "-c", f'exec "$@" > {shlex.quote(str(out))}', "sh", sys.executable, "-m", "turnformer", "-q",
               "evaluate", "--checkpoint", str(checkpoint), "--input", str(source)]
    return peak_memory(command, env, "evaluate")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, default=None, help="a run folder (default: train a small one)")
    parser.add_argument("--candidates", type=counts, default=[4, 10, 25, 50], help="candidates an item, to sweep")
    parser.add_argument("--items", type=count, default=64, help="items a file")
    parser.add_argument("--baseline", default=None, help="an earlier commit to measure beside this tree")
    parser.add_argument("--threads", type=count, default=2)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="selection-memory-"))
    checkpoint = args.checkpoint
    if checkpoint is None:
        checkpoint = folder / "run"
        train = [sys.executable, "-m", "turnformer.cli", "-q", "train", "--task", "response-selection", "--model", "mdfn",
                 "--dataset", "mutual", "--limit-dialogues", "8", "--set", "train.epochs=1",
                 "--set", "model_config.max_length=256", "--out", str(checkpoint),
                 *(["--data-dir", args.data_dir] if args.data_dir else [])]
        subprocess.run(train, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    rows = []
    with source_trees(ROOT, folder, args.baseline) as trees:
        for candidates in args.candidates:
            source = folder / f"items-{candidates}.jsonl"
            items_file(source, args.items, candidates, args.data_dir)
            row, metrics = {"candidates": candidates, "items": args.items}, {}
            for name, src in trees.items():
                out = folder / f"metrics-{name}.json"
                row[name] = measure(src, checkpoint, source, out, args.threads)
                metrics[name] = json.loads(out.read_text())
                print(f"{candidates} candidates, {name}: {row[name]}", flush=True)
            if "baseline" in metrics:  # the items' order sums the means: equal up to the last bits of a float
                row["metrics_differ_by"] = max(abs(v - metrics["baseline"][k]) for k, v in metrics["now"].items()
                                               if isinstance(v, float))
                row["same_counts"] = all(v == metrics["baseline"][k] for k, v in metrics["now"].items()
                                         if not isinstance(v, float))
            row["R@1"] = next(v for k, v in metrics["now"].items() if k.endswith("@1") and k.startswith("R"))
            rows.append(row)
            source.unlink()
    run = json.loads((checkpoint / "run.json").read_text())
    record = make_result(
        "selection-memory", task=run["recipe"]["task"], dataset="file (MuTual dev items, candidates added)", split="-",
        model=run["recipe"]["model"], backbone=run["recipe"].get("backbone"), metric="peak_rss_mib",
        scores=[rows[-1]["now"]["peak_rss_mib"]], seeds=[1],
        extra={"sizes": rows, "baseline_commit": args.baseline, "threads": args.threads,
               "max_length": json.loads((checkpoint / "best" / "config.json").read_text())["model"].get("max_length"),
               "note": "peak resident memory of `turnformer evaluate --input` in a child process of its own"})
    print(f"wrote {write_result(record)}")


if __name__ == "__main__":
    main()
