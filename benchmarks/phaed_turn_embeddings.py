"""What a generation model's turn embeddings became in training, beside the inputs' scale, and how DailyDialog's
responses spread over their speaker's turns (which turn embedding a response gets when counted from the start).

    python benchmarks/phaed_turn_embeddings.py runs/gen-full/generation-dailydialog-phaed-full-cpu/seed2 ... [--data-dir DIR]

For every run folder given (its best/ checkpoint), the norm of each turn-embedding row TE(1), TE(2), ... of
``turn.weight`` and the mean norm of a word's input, its embedding times sqrt(d): written to
``generation-turn-embeddings-<experiment, less generation-dailydialog->-seed<N>.json`` (the headline: the largest
row norm). And the share (%) of
DailyDialog's training and test responses that are their speaker's 1st, 2nd, ... utterance
(`GenerationInstance.response_turn`, from `make_instances` with 4 context turns and 50 words, the recipes'):
``generation-dailydialog-response-turns.json`` (the headline: the share of 1st utterances in training).
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from pathlib import Path

from safetensors import safe_open

from turnformer.data import load_split
from turnformer.results import make_result, run_experiment, write_result
from turnformer.tasks.generation import make_instances


def turn_embedding_norms(run: Path) -> dict:
    """Row norms of the run's trained turn embeddings (TE(1) onward) and the inputs' mean norm."""
    weights = run / "best" / "model.safetensors"
    if not weights.is_file():
        raise SystemExit(f"{run}: no best/model.safetensors (a finished generation run folder is needed)")
    with safe_open(str(weights), "pt") as f:
        if "turn.weight" not in f.keys():
            raise SystemExit(f"{weights}: no turn.weight (a model without turn embeddings)")
        turn, embed = f.get_tensor("turn.weight"), f.get_tensor("embed.weight")
    scale = math.sqrt(embed.shape[1])  # the inputs are E(x) sqrt(d)
    return {"row_norms": [round(x, 4) for x in turn[1:].norm(dim=1).tolist()],
            "input_norm_mean": round(float(embed.norm(dim=1).mean()) * scale, 4)}


def response_turn_shares(data_dir: str | None) -> dict[str, dict[str, float]]:
    """Per split, {turn: % of responses}, turns above 10 pooled under "10+"."""
    shares = {}
    for split in ("train", "test"):
        instances = make_instances(list(load_split("dailydialog", split, data_dir).dialogues), 4, 50)
        counts = Counter(str(i.response_turn) if i.response_turn < 10 else "10+" for i in instances)
        order = sorted(counts, key=lambda k: int(k.rstrip("+")))
        shares[split] = {k: round(100 * counts[k] / len(instances), 2) for k in order}
    return shares


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="*", type=Path, help="Generation run folders (each with best/).")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    for run in args.runs:
        if not (run / "run.json").is_file():
            raise SystemExit(f"{run}: not a run folder (no run.json)")
        description = json.loads((run / "run.json").read_text())
        recipe, (name, seed) = description["recipe"], run_experiment(run, description, "generation-dailydialog-")
        measured = turn_embedding_norms(run)
        record = make_result(f"generation-turn-embeddings-{name}-seed{seed}", task="generation",
                             dataset="dailydialog", split="train", model=recipe["model"], metric="turn_embedding_norm_max",
                             scores=[max(measured["row_norms"])], seeds=[seed],
                             config=recipe.get("model_config", {}), extra=measured)
        print(f"{run}: turn-embedding rows {measured['row_norms']}, inputs {measured['input_norm_mean']} -> {write_result(record)}")
    shares = response_turn_shares(args.data_dir)
    record = make_result("generation-dailydialog-response-turns", task="generation", dataset="dailydialog", split="train",
                         model="-", metric="first_turn_share_percent", scores=[shares["train"]["1"]], seeds=[0],
                         extra={"share_percent": shares})
    print(f"responses by their speaker's turn (%): {shares} -> {write_result(record)}")


if __name__ == "__main__":
    main()
