"""How much of an emotion-recognition training epoch is padding, with conversations grouped as training groups them
(`turnformer.tasks.erc.make_batches`: by tokens, then turns) and as it grouped them before (by turns alone).

    python benchmarks/erc_batch_padding.py [--datasets meld,emorynlp,dailydialog,swda] [--backbone NAME]

-> ``erc-batch-padding-DATASET.json``: for each dataset's training split, batched at its DialogXL recipe's batch size, and
each grouping: the real tokens, the padded token slots the batches' rows hold (conversations x longest row; what
every layer's projections are computed over), and the (query, key) pairs DialogXL's one pass computes attention
for (each chunk, `DialogXL.chunks` at the recipe's ``chunk_tokens``: conversations x chunk width x (memory width +
chunk width), the memory holding each row's newest ``mem_len`` tokens of earlier utterances, special tokens left
out, padded to the longest row). Counted from token counts (each utterance through the backbone's tokenizer, cut
at the recipe's ``max_utterance_tokens`` as `encode_conversations` does): nothing is timed, and the counts are
the same on any machine.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Callable

from turnformer.models.dialogxl import chunk_ranges
from turnformer.results import make_result, write_result
from turnformer.tasks.erc import batch_order

GROUPINGS: dict[str, Callable] = {
    "tokens": batch_order,  # make_batches' grouping
    "turns": lambda c: len(c.turn_ids),  # before 2026-11-30
}


def count(encoded, batch_size: int, order: Callable, chunk_tokens: int, mem_len: int, specials: int) -> dict:
    ordered = sorted(encoded, key=order)
    real = slots = pairs = chunks = 0
    for i in range(0, len(ordered), batch_size):
        group = ordered[i: i + batch_size]
        turns = max(len(c.turn_ids) for c in group)
        lengths = [[len(t) for t in c.turn_ids] + [0] * (turns - len(c.turn_ids)) for c in group]
        real += sum(map(sum, lengths))
        slots += len(group) * max(map(sum, lengths))
        for a, b in chunk_ranges(lengths, chunk_tokens):
            width = max(sum(row[a:b]) for row in lengths)
            memory = max(min(mem_len, sum(max(n - specials, 0) for n in row[:a])) for row in lengths)
            pairs += len(group) * width * (memory + width)
            chunks += 1
    return {"real_tokens": real, "padded_slots": slots, "slots_per_real_token": slots / real, "attention_pairs": pairs,
            "chunks": chunks, "batches": -(-len(ordered) // batch_size)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", default="meld,emorynlp,dailydialog,swda",
                        help="datasets with a DialogXL recipe, comma-separated")
    parser.add_argument("--backbone", default="all-MiniLM-L6-v2")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--results-dir", default=None)
    args = parser.parse_args()
    from turnformer.backbones import load_backbone
    from turnformer.data import load_split
    from turnformer.recipes import RECIPES_DIR, find_recipe, load_recipe

    recipes = RECIPES_DIR.glob("erc-*-dialogxl.toml")  # erc-file-: a recipe for conversation files, not a dataset
    known = sorted(path.name[4:-len("-dialogxl.toml")] for path in recipes if path.name != "erc-file-dialogxl.toml")
    unknown = [d for d in args.datasets.split(",") if d not in known]
    if unknown:
        parser.error(f"--datasets: no DialogXL recipe for {', '.join(unknown)}; those with one: {', '.join(known)}")
    from turnformer.tasks.erc import encode_conversations

    _, tokenizer = load_backbone(args.backbone)
    specials = len(tokenizer("a", add_special_tokens=True)["input_ids"]) - len(tokenizer("a", add_special_tokens=False)["input_ids"])
    for dataset in args.datasets.split(","):
        start = time.perf_counter()
        recipe = load_recipe(find_recipe("erc", "dialogxl", dataset))
        config, kind = recipe["model_config"], recipe.get("label_kind", "emotion")
        split = load_split(dataset, "train", args.data_dir)
        encoded, _ = encode_conversations(split.dialogues, tokenizer, kind, split.label_set(kind),
                                          config.get("max_utterance_tokens", 128))
        setting = {"batch_size": recipe["train"]["batch_size"], "chunk_tokens": config.get("chunk_tokens", 512),
                   "mem_len": config["mem_len"]}
        counts = {name: count(encoded, setting["batch_size"], order, setting["chunk_tokens"], setting["mem_len"], specials)
                  for name, order in GROUPINGS.items()}
        now, before = counts["tokens"], counts["turns"]
        print(f"{dataset}: padded slots per real token {now['slots_per_real_token']:.2f} (grouped by turns: "
              f"{before['slots_per_real_token']:.2f}); attention pairs {now['attention_pairs'] / before['attention_pairs']:.2f} "
              "times those grouped by turns", flush=True)
        record = make_result(f"erc-batch-padding-{dataset}", task="erc", dataset=dataset, split="train", model="dialogxl",
                             backbone=args.backbone, metric="padded_slots_per_real_token",
                             scores=[now["slots_per_real_token"]], seeds=[0], config=setting,
                             extra={**counts, "seconds": time.perf_counter() - start})
        kwargs = {"results_dir": Path(args.results_dir)} if args.results_dir else {}
        print("->", write_result(record, **kwargs))


if __name__ == "__main__":
    main()
