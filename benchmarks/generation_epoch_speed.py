"""A training epoch of the Transformer generator at the recipe's size on all of DailyDialog, against transformers' own
encoder-decoder doing the same work on the same tokens (the plainest fast path), and against our former path.

    python benchmarks/generation_epoch_speed.py [--batches 12] [--repeats 3] [--threads 2]

Side by side in one run, each a training step (forward, backward, AdamW) on the same ``--batches`` training batches of 64
instances, evenly spaced over the epoch's batches (so their mean is the epoch's mean):

- ``ours``: `TransformerGenerator` as it trains now: batches sorted by context length in steps of 4 tokens, then by
  response length (`CONTEXT_LENGTH_STEP`), the output projection only on the rows with a target;
- ``ours_former``: the same model as it trained before: batches sorted by context length alone, every response row
  projected onto the vocabulary (the loss then leaves padding out);
- ``mbart`` / ``mbart_former_batches``: transformers' `MBartForConditionalGeneration` (pre-norm like ours) of the same
  sizes (width, layers, heads, feed-forward, vocabulary, learned positions, tied output, dropout 0.1 on attention
  probabilities, sub-layer outputs and the feed-forward's inside), on the same tokens: context ids with their padding
  mask, the response input as ``decoder_input_ids``, the targets as ``labels`` (its loss projects every row).

-> ``generation-epoch-speed.json``: seconds a batch (median over repeats of the batches' total, divided by their
number) and the epoch's seconds at that rate for each; the headline is ours against transformers' model on our batches.
"""

from __future__ import annotations

import argparse
import statistics

import torch
from transformers import MBartConfig, MBartForConditionalGeneration

from _timing import timed_train_step
from turnformer.models.generator_base import IGNORE
from turnformer.recipes import load_recipe
from turnformer.results import make_result, write_result
from turnformer.tasks.generation import (GenerationBatch, Vocabulary, build_generator, encode_instance, load_generation_data,
                                         make_generation_batches, make_instances)


class FormerLoss(torch.nn.Module):
    """The model's former loss: every response row projected onto the vocabulary, IGNORE left out afterwards."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def loss(self, batch: GenerationBatch) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.model(batch).flatten(0, 1), batch.response_out.flatten(), ignore_index=IGNORE)


class MBartOnOurBatches(torch.nn.Module):
    """transformers' encoder-decoder on our batches' tokens (pad id 0)."""

    def __init__(self, model: MBartForConditionalGeneration) -> None:
        super().__init__()
        self.model = model

    def loss(self, batch: GenerationBatch) -> torch.Tensor:
        return self.model(input_ids=batch.context, attention_mask=batch.context.ne(0), decoder_input_ids=batch.response_in,
                          decoder_attention_mask=batch.response_in.ne(0), labels=batch.response_out).loss


def former_batches(encoded, batch_size: int) -> list[GenerationBatch]:
    """Batches as they were made before: sorted by context length alone."""
    by_context = sorted(encoded, key=lambda row: len(row[0]))
    return make_generation_batches(by_context, batch_size, sort_by_length=False)


def evenly_spaced(batches: list, n: int) -> list:
    return [batches[round(i * (len(batches) - 1) / max(1, n - 1))] for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--limit-dialogues", type=int, default=None, help="Only the first N training conversations (quick checks).")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    recipe = load_recipe("generation-dailydialog-transformer")
    data, config, size = recipe["data"], recipe["model_config"], recipe["train"]["batch_size"]
    train = load_generation_data(recipe, args.data_dir, ("train",))["train"][: args.limit_dialogues]
    vocab = Vocabulary.build(train, data["min_count"])
    encoded = [encode_instance(x, vocab) for x in make_instances(train, data["max_context_turns"], data["max_words"])]
    now, before = make_generation_batches(encoded, size), former_batches(encoded, size)
    sampled = {"now": evenly_spaced(now, args.batches), "former": evenly_spaced(before, args.batches)}

    torch.manual_seed(0)
    ours = build_generator("transformer", config, vocab)
    mbart = MBartOnOurBatches(MBartForConditionalGeneration(MBartConfig(
        vocab_size=len(vocab), d_model=config["d_model"], encoder_layers=config["layers"], decoder_layers=config["layers"],
        encoder_attention_heads=config["heads"], decoder_attention_heads=config["heads"], encoder_ffn_dim=config["ff"],
        decoder_ffn_dim=config["ff"], activation_function="relu", dropout=config["dropout"], attention_dropout=config["dropout"],
        activation_dropout=config["dropout"], max_position_embeddings=config["max_positions"], pad_token_id=0,
        bos_token_id=2, eos_token_id=3, decoder_start_token_id=2, scale_embedding=True, tie_word_embeddings=True)))
    rows = {"ours": (ours, "now"), "ours_former": (FormerLoss(ours), "former"), "mbart": (mbart, "now"),
            "mbart_former_batches": (mbart, "former")}
    optimizers = {name: torch.optim.AdamW(model.parameters(), lr=1e-4) for name, (model, _) in rows.items()}
    names = list(rows)
    for name in names:  # warm-up
        timed_train_step(rows[name][0], optimizers[name], sampled[rows[name][1]][0])
    totals = {name: [] for name in names}
    for repeat in range(args.repeats):
        spent = dict.fromkeys(names, 0.0)
        for i in range(args.batches):
            for name in (names if (i + repeat) % 2 == 0 else reversed(names)):  # who goes first alternates
                model, batching = rows[name]
                spent[name] += timed_train_step(model, optimizers[name], sampled[batching][i])
        for name in names:
            totals[name].append(spent[name])
        print(f"repeat {repeat + 1}/{args.repeats}: " + ", ".join(f"{n} {spent[n] / args.batches:.3f} s" for n in names), flush=True)
    per_batch = {name: statistics.median(t) / args.batches for name, t in totals.items()}
    epoch = {name: per_batch[name] * len(now if rows[name][1] == "now" else before) for name in names}
    padded = {key: {"context": sum(b.context.numel() for b in batches), "response": sum(b.response_in.numel() for b in batches)}
              for key, batches in (("now", now), ("former", before))}
    real = {"context": sum(len(row[0]) for row in encoded), "response": sum(len(row[2]) for row in encoded)}
    ratio = per_batch["mbart"] / per_batch["ours"]
    record = make_result(
        "generation-epoch-speed", task="generation", dataset="dailydialog", split="train", model="transformer",
        metric="speed_vs_transformers_mbart", scores=[ratio], seeds=[0], backbone="none (random weights)",
        config={**config, "batch_size": size, "batches": args.batches, "repeats": args.repeats, "threads": args.threads,
                "vocabulary": len(vocab), "instances": len(encoded), "epoch_batches": len(now)},
        extra={"seconds_per_batch": per_batch, "epoch_seconds": epoch, "padded_tokens": padded, "real_tokens": real,
               "speedup_over_former_path": per_batch["ours_former"] / per_batch["ours"]})
    for name in names:
        print(f"{name:22s} {per_batch[name]:.3f} s a batch, {epoch[name] / 60:.1f} min an epoch")
    print(f"ours vs transformers' MBart on the same batches: x{ratio:.2f} -> {write_result(record)}")


if __name__ == "__main__":
    main()
