"""A user's file of long conversations, trained as a user would: `turnformer train --dataset file` with its defaults.

    python benchmarks/erc_long_file.py [--train 108] [--eval 20] [--utterances 50] [--epochs 2] [--threads 2]

The conversations are SwDA's (two speakers), cut into pieces of 50 utterances and written to generic JSONL files with
their dialogue-act labels (`label_kind = "act"`): the shape of a corpus of long dyadic sessions (108 training
conversations of about 50 utterances). The command is the
default for files (DialogXL with the memory bias, batches of 4 conversations) run in a child process; the result
-> ``erc-long-file.json``: the child's peak resident memory, its training loss after each epoch against the loss of
predicting the label frequencies (the entropy of the training labels), and the test score at the best validation epoch.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from turnformer.data import load_split, write_jsonl
from turnformer.dialogue import Dialogue
from turnformer.results import make_result, write_result


def pieces(dialogue: Dialogue, size: int) -> list[Dialogue]:
    """The conversation cut into consecutive pieces of `size` utterances (the last may be shorter; 0: whole)."""
    if not size:
        return [dialogue]
    return [replace(dialogue, turns=dialogue.turns[i: i + size], id=f"{dialogue.id}-{i // size}")
            for i in range(0, len(dialogue.turns), size)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=int, default=108, help="training conversations (the first N)")
    parser.add_argument("--eval", type=int, default=20, help="validation and test conversations (the first N of each)")
    parser.add_argument("--utterances", type=int, default=50, help="SwDA's conversations cut into pieces of this many "
                        "utterances (0: whole, about 170)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--results-dir", default=None)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="long-file-"))
    files, sizes = {}, {}
    for split, n in (("train", args.train), ("validation", args.eval), ("test", args.eval)):
        dialogues = [piece for d in load_split("swda", split, args.data_dir).dialogues for piece in pieces(d, args.utterances)][:n]
        files[split] = folder / f"{split}.jsonl"
        write_jsonl(dialogues, files[split])
        sizes[split] = {"conversations": len(dialogues), "utterances": sum(len(d) for d in dialogues),
                        "longest": max(len(d) for d in dialogues)}
        if split == "train":
            counts = Counter(t.labels["act"] for d in dialogues for t in d.turns if "act" in t.labels)
    total = sum(counts.values())
    frequency_loss = -sum(c / total * math.log(c / total) for c in counts.values())
    out = folder / "run"
    command = [sys.executable, "-m", "turnformer.cli", "train", "--dataset", "file", "--train-file", str(files["train"]),
               "--validation-file", str(files["validation"]), "--test-file", str(files["test"]), "--out", str(out),
               "--set", 'label_kind="act"', "--set", f"train.epochs={args.epochs}"]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"training failed ({done.returncode}):\n{done.stderr[-2000:]}")
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    result = json.loads((out / "result.json").read_text())
    run = json.loads((out / "run.json").read_text())
    losses = [h["train_loss"] for h in result["history"] if h.get("complete")]
    recipe = json.loads(json.dumps(run["recipe"]).replace(str(folder), "FOLDER"))  # the files' temporary folder, named
    recipe["recipe_path"] = Path(recipe.get("recipe_path", "")).name
    extra = {"peak_rss_mib": peak_mib, "train_loss_per_epoch": losses, "label_frequency_loss": frequency_loss,
             "labels": len(counts), "sizes": sizes, "seconds": seconds, "train_seconds": result["train_seconds"],
             "validation_at_best": result["validation_at_best"], "best_epoch": result["best_epoch"],
             "model": run["recipe"]["model"], "train_command": " ".join(["turnformer", *command[3:]]).replace(str(folder), "FOLDER"),
             "note": "SwDA conversations written as a user's JSONL files; act labels; the default model for files"}
    record = make_result("erc-long-file", task="erc", dataset="file (SwDA conversations)", split="test",
                         model=run["recipe"]["model"], backbone=run["recipe"]["backbone"], metric="weighted_f1",
                         scores=[result["test_at_best"]], seeds=[1], config=recipe, extra=extra)
    kwargs = {"results_dir": Path(args.results_dir)} if args.results_dir else {}
    print(f"peak {peak_mib:.0f} MiB; training loss {losses} against {frequency_loss:.3f} for the label frequencies; "
          f"test {result['test_at_best']:.2f} -> {write_result(record, **kwargs)}")


if __name__ == "__main__":
    main()
