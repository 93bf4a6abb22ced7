"""How much of its attention DialogXL gives to memory: per layer, the share of the current [CLS]'s attention (averaged
over heads) and of every current token's that falls on memory keys, over the validation conversations of a trained
run, or of the pretrained backbone before any fine-tuning (``pretrained:RECIPE``).

    python benchmarks/erc_memory_attention.py --dataset meld pretrained:erc-meld-dialogxl \
        runs/erc/erc-meld-dialogxl-memory-bias/seed1

Utterances 0-2 are left out (their memory is short or empty). Writes ``erc-memory-attention-DATASET-MODEL.json`` per
model (its runs as seeds; ``-pretrained`` for the untrained backbone): the metric is the [CLS] share in the last layer
(what the classifier reads); the per-layer shares are in ``extra``.
"""

from __future__ import annotations

import argparse

import torch
from tqdm import tqdm

from turnformer.dialogue import DialogueError
from turnformer.errors import CheckpointError
from turnformer.models.dialogxl import DialogXL
from turnformer.recipes import load_recipe
from turnformer.results import make_result, write_result
from turnformer.tasks.erc import build_erc_model, encode_conversations, load_erc_data, load_trained, make_batches

SKIP_FIRST = 3


def load_source(source: str, dataset: str):
    """(model, tokenizer, recipe, labels, seed) of a run folder or of `pretrained:RECIPE` (the recipe's untrained
    model; seed None)."""
    if source.startswith("pretrained:"):
        recipe = load_recipe(source.removeprefix("pretrained:"))
        _, labels = load_erc_data(recipe, only=("validation",))
        model, tokenizer = build_erc_model(recipe["model"], recipe["model_config"], labels, recipe["backbone"])
        seed = None
    else:
        model, tokenizer, run = load_trained(source)
        recipe, labels, seed = run["recipe"], run["labels"], run["seed"]
    if not isinstance(model, DialogXL):
        raise SystemExit(f"{source}: a {recipe['model']} model has no memory; give a DialogXL run or recipe")
    if recipe["dataset"] != dataset:
        raise SystemExit(f"{source}: trained on {recipe['dataset']}, not {dataset}")
    return model.eval(), tokenizer, recipe, labels, seed


@torch.no_grad()
def attention_on_memory(model, batches, cls_id: int, pad_id: int, desc: str = "", skip_first: int = SKIP_FIRST) -> dict:
    """Per layer, the mean share of attention (averaged over heads) on memory keys: of each current [CLS], and of
    every current token, over the utterances from `skip_first` on that have memory."""
    layers = model.encoder.num_layers
    cls_share, token_share, steps = torch.zeros(layers), torch.zeros(layers), 0
    for batch in tqdm(batches, desc=desc, leave=False):
        memory = model.empty_memory(len(batch.lengths))
        for t, input_ids in enumerate(batch.steps):
            memory_length = memory.length
            _, next_memory, out = model.step(input_ids, t, batch.speakers[:, t], memory, output_attentions=True)
            real = input_ids != pad_id
            if t >= skip_first and memory_length and real.any():
                cls_rows = (input_ids == cls_id).int().argmax(1)
                for layer, probs in enumerate(out.attentions):  # [B, H, T, M+T]
                    on_memory = probs[..., :memory_length].sum(-1).mean(1)  # [B, T], averaged over heads
                    cls_share[layer] += on_memory[torch.arange(len(cls_rows)), cls_rows][real[:, 0]].mean()
                    token_share[layer] += on_memory[real].mean()
                steps += 1
            memory = next_memory
    if not steps:
        raise SystemExit(f"{desc}: no utterance at position {skip_first} or later")
    return {"cls": (cls_share / steps).tolist(), "tokens": (token_share / steps).tolist(), "steps": steps}


def memory_shares(source: str, dataset: str, conversations: int) -> dict:
    model, tokenizer, recipe, labels, seed = load_source(source, dataset)
    splits, _ = load_erc_data(recipe, only=("validation",))
    encoded, _ = encode_conversations(splits["validation"][:conversations], tokenizer, recipe.get("label_kind", "emotion"),
                                      labels, model.config.max_utterance_tokens)
    batches = make_batches(encoded, 4, tokenizer.pad_token_id)
    shares = attention_on_memory(model, batches, tokenizer.cls_token_id, tokenizer.pad_token_id, desc=source)
    return {**shares, "model": recipe["model"], "model_config": recipe["model_config"], "backbone": recipe["backbone"],
            "seed": seed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="+", help="run folders, or pretrained:RECIPE")
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--conversations", type=int, default=40, help="first N validation conversations")
    args = parser.parse_args()
    if args.conversations < 1:
        parser.error(f"--conversations {args.conversations}: give 1 or more")
    groups: dict[str, list[tuple[int | None, str, dict]]] = {}
    for source in args.sources:
        try:
            shares = memory_shares(source, args.dataset, args.conversations)
        except (DialogueError, CheckpointError) as e:  # not a run folder or recipe, no checkpoint, no data
            raise SystemExit(f"error: {e}") from None
        print(f"{source}: [CLS] share on memory per layer {[round(x, 3) for x in shares['cls']]}, "
              f"all tokens {[round(x, 3) for x in shares['tokens']]}")
        label = "pretrained" if shares["seed"] is None else shares["model"]
        groups.setdefault(label, []).append((shares["seed"], source, shares))
    for label, runs in groups.items():  # one results file per model (its seeds together), one for the pretrained backbone
        record = make_result(
            f"erc-memory-attention-{args.dataset}-{label}", task="erc", dataset=args.dataset, split="validation",
            model=runs[0][2]["model"], backbone=runs[0][2]["backbone"], metric="last_layer_cls_share_on_memory",
            scores=[shares["cls"][-1] for _, _, shares in runs], seeds=[seed or 0 for seed, _, _ in runs],
            extra={"sources": [source for _, source, _ in runs], "conversations": args.conversations,
                   "skipped_first_utterances": SKIP_FIRST, "cls_share_per_layer": [s["cls"] for _, _, s in runs],
                   "token_share_per_layer": [s["tokens"] for _, _, s in runs], "model_config": runs[0][2]["model_config"],
                   **({"note": "the pretrained backbone before fine-tuning (seed 0: no training)"} if label == "pretrained" else {})},
        )
        print("->", write_result(record))


if __name__ == "__main__":
    main()
