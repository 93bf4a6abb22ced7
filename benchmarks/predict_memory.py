"""Peak memory of `turnformer predict --out` as the input file grows: the predictions made and written a block of
conversations at a time (now) against the same command at an earlier commit (`--baseline`, which held the file, every
prediction and the output whole), side by side on the same checkpoint and files.

    python benchmarks/predict_memory.py [--checkpoint RUN] [--turns 20000,80000,320000] [--baseline COMMIT] [--threads 1]

Without ``--checkpoint``, a small dialogue-act model is trained first (the LSTM utterance encoder on 4 SwDA
conversations, 1 epoch: what it learnt does not matter here, and SwDA's 42 acts make the rows as large as any task's).
The files are SwDA's test conversations repeated, each copy with its own id, until they hold ``--turns`` utterances.
Each command runs in a child process of its own, whose peak resident memory (``ru_maxrss``) is read when it ends;
both outputs are checked to be the same file. ``--baseline`` checks the commit out into a temporary git worktree and
runs its code the same way. Writes benchmarks/results/predict-memory.json: the peak at the largest file as the score,
every peak and time per size.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _timing import peak_memory, repeated, source_trees
from turnformer.data import load_split, write_jsonl
from turnformer.results import make_result, write_result

ROOT = Path(__file__).resolve().parent.parent


def conversation_file(path: Path, turns: int, data_dir) -> int:
    """SwDA's test conversations, repeated with new ids until the file holds `turns` utterances; how many it holds."""
    out, total = repeated(load_split("swda", "test", data_dir).dialogues, turns)
    write_jsonl(out, path)
    return total


def measure(src: Path, checkpoint: Path, source: Path, out: Path, threads: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": str(threads), "TURNFORMER_THREADS": str(threads)}
    command = [sys.executable, "-m", "turnformer.cli", "-q", "predict", "--checkpoint", str(checkpoint),
               "--input", str(source), "--out", str(out)]
    return peak_memory(command, env, "predict")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, default=None, help="a run folder (default: train a small one)")
    parser.add_argument("--turns", default="20000,80000,320000", help="the files' sizes, in utterances")
    parser.add_argument("--baseline", default=None, help="an earlier commit to measure beside this tree")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    sizes = [int(n) for n in args.turns.split(",")]
    folder = Path(tempfile.mkdtemp(prefix="predict-memory-"))
    checkpoint = args.checkpoint
    if checkpoint is None:
        checkpoint = folder / "run"
        train = [sys.executable, "-m", "turnformer.cli", "-q", "train", "--task", "dialogue-act", "--model", "lstm",
                 "--dataset", "swda", "--limit-dialogues", "4", "--set", "train.epochs=1", "--out", str(checkpoint),
                 *(["--data-dir", args.data_dir] if args.data_dir else [])]
        subprocess.run(train, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    rows = []
    with source_trees(ROOT, folder, args.baseline) as trees:
        for size in sizes:
            source = folder / f"conversations-{size}.jsonl"
            turns = conversation_file(source, size, args.data_dir)
            row = {"turns": turns, "file_mib": round(source.stat().st_size / 2**20, 1)}
            outputs = {}
            for name, src in trees.items():
                outputs[name] = folder / f"out-{name}.jsonl"
                row[name] = measure(src, checkpoint, source, outputs[name], args.threads)
                print(f"{turns} utterances, {name}: {row[name]}", flush=True)
            if "baseline" in outputs:
                row["same_output"] = outputs["now"].read_bytes() == outputs["baseline"].read_bytes()
            row["output_mib"] = round(outputs["now"].stat().st_size / 2**20, 1)
            rows.append(row)
            source.unlink()
    run = json.loads((checkpoint / "run.json").read_text())
    record = make_result(
        "predict-memory", task=run["recipe"]["task"], dataset="file (SwDA test conversations, repeated)", split="-",
        model=run["recipe"]["model"], backbone=run["recipe"].get("backbone"), metric="peak_rss_mib",
        scores=[rows[-1]["now"]["peak_rss_mib"]], seeds=[1],
        extra={"sizes": rows, "baseline_commit": args.baseline, "threads": args.threads, "labels": len(run["labels"]),
               "note": "peak resident memory of `turnformer predict --out` in a child process of its own"})
    print(f"wrote {write_result(record)}")


if __name__ == "__main__":
    main()
