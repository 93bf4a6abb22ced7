"""Training throughput of MDFN against the plain encoder, measured in the same run.

    python benchmarks/selection_speed.py [--batches 6] [--repeats 3] [--threads 1] [--frozen-layers 0] [--max-length 256]

-> ``response-selection-training-throughput.json``: (context, candidate) sequences per second of one
training step (forward, backward, AdamW step) of the plain encoder and of MDFN (the MuTual recipe,
all-MiniLM-L6-v2) on the same MuTual training batches (8 items, 32 sequences each; ``--batches``
batches evenly spaced over the length-sorted epoch). The two models alternate batch by batch, who
goes first alternating too; the headline is MDFN's throughput over the plain encoder's, from the
median repeat totals. The heads are randomly initialised (seeded): speed does not depend on training.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from _timing import timed_train_step
from turnformer.results import make_result, write_result
from turnformer.tasks.response_selection import encode_items, load_selection_data, make_selection_batches, special_tokens
from turnformer.models.mdfn import build_mdfn
from turnformer.recipes import find_recipe, load_recipe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--frozen-layers", type=int, default=0)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    recipe = load_recipe(find_recipe("response-selection", "mdfn", "mutual"))
    settings = {**recipe["model_config"], "frozen_layers": args.frozen_layers, "max_length": args.max_length}
    models = {}
    for model_id in ("plain-encoder", "mdfn"):
        torch.manual_seed(0)
        model, tokenizer = build_mdfn(model_id, settings, recipe["backbone"])
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
        models[model_id] = (model.train(), optimizer)
    items = load_selection_data(recipe, args.data_dir)["train"]
    batches, _ = make_selection_batches(encode_items(items, tokenizer, settings["max_turns"]), int(recipe["train"]["batch_size"]),
                                        special_tokens(tokenizer), args.max_length)
    step = max(1, len(batches) // args.batches)
    chosen = batches[::step][: args.batches]
    sequences = sum(b.input_ids.shape[0] for b in chosen)

    def train_step(model_id, batch) -> float:
        return timed_train_step(*models[model_id], batch)

    train_step("plain-encoder", chosen[0]), train_step("mdfn", chosen[0])  # warm-up
    totals = {m: [] for m in models}
    for repeat in range(args.repeats):
        spent = dict.fromkeys(models, 0.0)
        for i, batch in enumerate(chosen):
            order = list(models) if (i + repeat) % 2 == 0 else list(reversed(models))
            for model_id in order:
                spent[model_id] += train_step(model_id, batch)
        for model_id, seconds in spent.items():
            totals[model_id].append(seconds)
    rate = {m: sequences / statistics.median(t) for m, t in totals.items()}
    ratio = rate["mdfn"] / rate["plain-encoder"]
    record = make_result(
        "response-selection-training-throughput", task="response-selection", dataset="mutual", split="train", model="mdfn",
        metric="training_throughput_ratio_mdfn_vs_plain", scores=[ratio], seeds=[0], backbone=recipe["backbone"],
        config={"model_config": settings, "batch_size": recipe["train"]["batch_size"], "batches": len(chosen),
                "sequences": sequences, "repeats": args.repeats, "threads": args.threads},
        extra={"sequences_per_second": rate, "seconds_per_repeat": totals,
               "mean_tokens_per_sequence": sum(int(b.meta.is_real.sum()) for b in chosen) / sequences},
    )
    print(f"sequences/s: plain encoder {rate['plain-encoder']:.2f}, MDFN {rate['mdfn']:.2f}; ratio {ratio:.3f} -> {write_result(record)}")


if __name__ == "__main__":
    main()
