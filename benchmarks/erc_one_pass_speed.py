"""One-pass DialogXL against the true limit: `transformers`' own model on the same tokens, packed.

    python benchmarks/erc_one_pass_speed.py training [--batches 24] [--repeats 3] [--threads 2] [--device cpu] [--backbone NAME]
                                                     [--precision bf16] [--dataset NAME] [--chunk-tokens N]
    python benchmarks/erc_one_pass_speed.py encoder  [--repeats 3] [--threads 2] [--backbone NAME]
    python benchmarks/erc_one_pass_speed.py memory   [--lengths 50,200] [--threads 2] [--model concat-context] [--no-checkpoint]
        [--allocator turnformer]

``training`` -> ``erc-one-pass-speed[-DEVICE].json``: tokens per second of a whole training step (forward,
backward, AdamW step) on real MELD training conversations, batched as training batches them (batch size 4,
conversations grouped by length), for four sides, interleaved batch by batch (who goes first rotates).
``--dataset emorynlp|dailydialog`` times that dataset's conversations under its DialogXL recipe
(``...-DATASET...json``; set ``--batch-size`` to its recipe's), ``--chunk-tokens N`` DialogXL's chunk
(``...-chunkN...json``):

* ``hf_packed``: `transformers.BertModel` (all-MiniLM-L6-v2, its default attention) on the same token ids,
  one conversation a row (``[CLS] u_1 [SEP] [CLS] u_2 [SEP] ...``), padding masked, rows cut to its 512
  positions, the same classifier on every [CLS], the same loss and optimizer: the plainest fast path, and the
  limit worth measuring against;
* ``one_pass``: DialogXL (the MELD recipe: heads 5,5,1,1, window 5, mem_len 400), `DialogXL.logits`;
* ``one_pass_memory_bias``: the same with the learned memory bias (the recipe that scores best);
* ``recurrent``: DialogXL one utterance at a time (`DialogXL.logits_per_step`), the path it replaces.

Tokens are the real tokens each side encodes; the headline is one_pass / hf_packed (target: 0.8 or more),
and the speedup over the recurrent path.

``encoder`` -> ``erc-encoder-vs-transformers[-DEVICE].json``: the project's `StructuredEncoder` against
`transformers.BertModel`, the same weights, plain batches with no structure (single sentences of MELD,
padding masked), forward and backward: target 0.9 or more of its throughput.

``memory`` -> ``erc-one-pass-memory.json``: peak resident memory of DialogXL training (all-MiniLM-L6-v2, batch
4, the MELD recipe's settings) on conversations of each length, MELD utterances chained in file order,
each length in a fresh process (the peak of a process never goes down): it must not grow with the length
beyond the chunk. ``--model concat-context`` or ``segment-recurrence``: the same for a baseline (its MELD recipe;
``erc-memory-MODEL[-no-checkpoint].json``), ``--no-checkpoint`` keeping every chunk's or segment's graph until
backward; a length whose process fails (killed for memory) is recorded as such and the longer ones not tried.
``--allocator turnformer``: the processes start with glibc's malloc set as the `turnformer` command starts it
(`turnformer.allocator`; file ``...-turnformer-allocator.json``); the default, ``system``, leaves malloc as it is, whose
peak over steps that free and allocate many blocks varies from run to run (segment recurrence at 200 utterances:
2.2 and 3.1 GB in two runs of the same code, 1.26 GB both times with the command's setting).

``--backbone all-mpnet-base-v2`` (``training``, ``encoder``): the same against `transformers.MPNetModel`
(results files ``...-mpnet[-DEVICE].json``); the default is all-MiniLM-L6-v2 against `BertModel`.

``--precision bf16`` (``training``): every side's forward under bfloat16 autocast, as ``train.mixed_precision = "bf16"``
trains (``...-bf16[-DEVICE].json``), with a fifth side, ``one_pass_float32`` (one-pass DialogXL without autocast,
interleaved like the others): what mixed precision itself gains on this machine. On a CPU without bfloat16
instructions, where autocast emulates the type, the file is ``...-bf16-emulated.json``.

Classifier heads are randomly initialised (seeded): speed does not depend on training.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn

from _timing import count, counts
from turnformer.allocator import TUNABLES
from turnformer.results import make_result, write_result

BACKBONE = "all-MiniLM-L6-v2"
HF_LIMIT = 512


def setup(threads: int, device: str, seed: int = 0, data_dir=None, model_id: str = "dialogxl", changes: dict | None = None,
          backbone: str = BACKBONE, dataset: str = "meld"):
    """`dataset`'s recipe of `model_id` (DialogXL or a baseline) with `changes` to its model_config, on `backbone`."""
    from turnformer.data import load_split
    from turnformer.recipes import find_recipe, load_recipe
    from turnformer.tasks.erc import build_erc_model

    torch.set_num_threads(threads)
    recipe = load_recipe(find_recipe("erc", model_id, dataset))
    split = load_split(dataset, "train", data_dir)
    labels = split.label_set(recipe.get("label_kind", "emotion"))
    torch.manual_seed(seed)
    model, tokenizer = build_erc_model(model_id, {**recipe["model_config"], **(changes or {})}, labels, backbone)
    return recipe, split, labels, model.to(device), tokenizer


def hf_model(device: str, backbone: str = BACKBONE) -> nn.Module:
    """`transformers`' own model of `backbone` (BertModel, MPNetModel), without its pooler."""
    from transformers import AutoModel

    from turnformer.backbones import resolve_backbone

    return AutoModel.from_pretrained(str(resolve_backbone(backbone)), dtype=torch.float32, add_pooling_layer=False).to(device)


class HFPacked(nn.Module):
    """`transformers`' model over whole conversations, one a row, with DialogXL's classifier on each [CLS]."""

    def __init__(self, encoder: nn.Module, classifier: nn.Module, cls_id: int):
        super().__init__()
        self.encoder, self.classifier, self.cls_id = encoder, classifier, cls_id

    def loss(self, batch) -> torch.Tensor:
        ids = batch.input_ids[:, :HF_LIMIT]
        real = torch.arange(ids.shape[1], device=ids.device) < batch.turn_lengths.sum(1, keepdim=True)
        hidden = self.encoder(input_ids=ids, attention_mask=real.long()).last_hidden_state
        rows, columns = ((ids == self.cls_id) & real).nonzero(as_tuple=True)
        turn = (columns[:, None] >= batch.turn_lengths.cumsum(1)[rows]).sum(1)  # the utterance of each [CLS]
        logits = self.classifier(hidden[rows, columns])
        return nn.functional.cross_entropy(logits, batch.labels[rows, turn], ignore_index=-100)

    @staticmethod
    def tokens(batch) -> int:
        return int(batch.turn_lengths.sum(1).clamp(max=HF_LIMIT).sum())


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(step, optimizer, batch, device: str, precision: str = "float32") -> float:
    """Seconds of one training step; ``precision="bf16"``: its forward under bfloat16 autocast, as accelerate's
    mixed precision runs it."""
    optimizer.zero_grad(set_to_none=True)
    sync(device)
    start = time.perf_counter()
    with torch.autocast(device.split(":")[0], dtype=torch.bfloat16, enabled=precision == "bf16"):
        loss = step(batch)
    loss.backward()
    optimizer.step()
    sync(device)
    return time.perf_counter() - start


def spread(items: list, n: int) -> list:
    if n >= len(items):
        return list(items)
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)] if n > 1 else [items[len(items) // 2]]


def training(args) -> dict:
    from turnformer.models.dialogxl import DialogXL, DialogXLConfig
    from turnformer.tasks.erc import encode_conversations, make_batches
    from turnformer.training import build_optimizer

    changes = {"chunk_tokens": args.chunk_tokens} if args.chunk_tokens else None
    recipe, split, labels, model, tokenizer = setup(args.threads, args.device, data_dir=args.data_dir, backbone=args.backbone,
                                                    dataset=args.dataset, changes=changes)
    encoded, _ = encode_conversations(split.dialogues, tokenizer, "emotion", labels, model.config.max_utterance_tokens)
    all_batches = make_batches(encoded, args.batch_size, tokenizer.pad_token_id)
    batches = [b.to(args.device) for b in spread(all_batches, args.batches)]
    biased = DialogXL(DialogXLConfig.from_dict({**model.config.to_dict(), "memory_bias": -4.0}), model.encoder,
                      tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id).to(args.device)
    hf = HFPacked(hf_model(args.device, args.backbone), model.classifier, tokenizer.cls_token_id).to(args.device)
    recurrent_loss = lambda b: nn.functional.cross_entropy(  # noqa: E731
        torch.stack(model.logits_per_step(b), 1).flatten(0, 1), b.labels.flatten(), ignore_index=-100)
    sides = {"hf_packed": (hf, hf.loss), "one_pass": (model, model.loss), "one_pass_memory_bias": (biased, biased.loss),
             "recurrent": (model, recurrent_loss)}
    if args.skip_recurrent:
        del sides["recurrent"]
    precision = dict.fromkeys(sides, args.precision)
    if args.precision != "float32":  # the gain of mixed precision itself, measured beside it
        float32 = DialogXL(model.config, copy.deepcopy(model.encoder), tokenizer.cls_token_id, tokenizer.sep_token_id,
                           tokenizer.pad_token_id).to(args.device)
        sides["one_pass_float32"], precision["one_pass_float32"] = (float32, float32.loss), "float32"
    optimizers = {name: build_optimizer(module, 2e-5, 0.01) for name, (module, _) in sides.items()}
    for module, _ in sides.values():
        module.train()
    for name, (_, step) in sides.items():  # warm-up
        timed(step, optimizers[name], batches[0], args.device, precision[name])
    seconds = {name: [] for name in sides}
    per_batch = [{name: [] for name in sides} for _ in batches]  # each batch's seconds, a repeat each
    for r in range(args.repeats):
        totals = dict.fromkeys(sides, 0.0)
        for i, batch in enumerate(batches):
            names = list(sides)
            shift = (r + i) % len(names)
            for name in names[shift:] + names[:shift]:
                took = timed(sides[name][1], optimizers[name], batch, args.device, precision[name])
                totals[name] += took
                per_batch[i][name].append(took)
        for name in sides:
            seconds[name].append(totals[name])
        print(f"repeat {r + 1}/{args.repeats}: " + ", ".join(f"{n} {s:.1f} s" for n, s in totals.items()), flush=True)
    tokens = int(sum(int(b.turn_lengths.sum()) for b in batches))
    hf_tokens = sum(HFPacked.tokens(b) for b in batches)
    rate = {name: (hf_tokens if name == "hf_packed" else tokens) / statistics.median(s) for name, s in seconds.items()}
    out = {
        "tokens": tokens, "hf_tokens": hf_tokens, "batches": len(batches), "batches_of_epoch": len(all_batches),
        "batch_size": args.batch_size, "repeats": args.repeats, "seconds_per_repeat": seconds,
        "tokens_per_second": rate,
        "ratio_one_pass_vs_hf_packed": rate["one_pass"] / rate["hf_packed"],
        "ratio_memory_bias_vs_hf_packed": rate["one_pass_memory_bias"] / rate["hf_packed"],
        "chunk_tokens": model.config.chunk_tokens,
        # batch by batch, in epoch order: its size, the longest conversation, the chunks DialogXL encodes it in, and
        # each side's median seconds over the repeats
        "per_batch": [{"conversations": len(b.lengths), "utterances": b.turn_lengths.shape[1],
                       "longest_tokens": int(b.turn_lengths.sum(1).max()), "tokens": int(b.turn_lengths.sum()),
                       "hf_tokens": HFPacked.tokens(b), "chunks": len(model.chunks(b)),
                       "seconds": {name: statistics.median(t) for name, t in times.items()}}
                      for b, times in zip(batches, per_batch)],
    }
    if "recurrent" in rate:
        out["speedup_over_recurrent"] = rate["one_pass"] / rate["recurrent"]
    if "one_pass_float32" in rate:
        out[f"speedup_{args.precision}_over_float32"] = rate["one_pass"] / rate["one_pass_float32"]
    return out


def encoder_speed(args) -> dict:
    from turnformer.backbones import load_backbone
    from turnformer.data import load_split

    torch.set_num_threads(args.threads)
    ours, tokenizer = load_backbone(args.backbone)
    ours, theirs = ours.to(args.device).train(), hf_model(args.device, args.backbone).train()
    for p in list(ours.parameters()) + list(theirs.parameters()):
        p.requires_grad_(True)
    texts = [t.text for d in load_split("meld", "train", args.data_dir).dialogues for t in d.turns]
    texts = spread(texts, args.batches * args.batch_size * 8)
    batches = []
    for i in range(0, len(texts), args.batch_size * 8):
        enc = tokenizer(texts[i: i + args.batch_size * 8], padding=True, truncation=True, max_length=128, return_tensors="pt")
        batches.append((enc["input_ids"].to(args.device), enc["attention_mask"].to(args.device)))
    sides = {"transformers": lambda ids, mask: theirs(input_ids=ids, attention_mask=mask).last_hidden_state,
             "structured_encoder": lambda ids, mask: ours(ids, attention_mask=mask.bool()).last_hidden_state}
    seconds = {name: [] for name in sides}
    for r in range(args.repeats + 1):  # the first repeat warms up
        totals = dict.fromkeys(sides, 0.0)
        for i, (ids, mask) in enumerate(batches):
            for name in (list(sides) if (r + i) % 2 == 0 else list(sides)[::-1]):
                sync(args.device)
                start = time.perf_counter()
                sides[name](ids, mask).float().pow(2).mean().backward()
                sync(args.device)
                totals[name] += time.perf_counter() - start
        if r:
            for name in sides:
                seconds[name].append(totals[name])
    tokens = int(sum(int(mask.sum()) for _, mask in batches))
    rate = {name: tokens / statistics.median(s) for name, s in seconds.items()}
    return {"tokens": tokens, "batches": len(batches), "sentences_per_batch": args.batch_size * 8, "repeats": args.repeats,
            "seconds_per_repeat": seconds, "tokens_per_second": rate,
            "ratio": rate["structured_encoder"] / rate["transformers"]}


def memory_child(args) -> None:
    """One length, in this process: a few training steps on conversations of `args.length` utterances."""
    from turnformer.dialogue import Dialogue
    from turnformer.tasks.erc import encode_conversations, make_batches
    from turnformer.training import build_optimizer

    recipe, split, labels, model, tokenizer = setup(args.threads, "cpu", data_dir=args.data_dir, model_id=args.model,
                                                    changes={"checkpoint": False} if args.no_checkpoint else None)
    turns = [t for d in split.dialogues for t in d.turns]
    conversations = [Dialogue(tuple(turns[i * args.length: (i + 1) * args.length]), id=f"chain-{i}") for i in range(args.batch_size)]
    encoded, _ = encode_conversations(conversations, tokenizer, "emotion", labels, model.config.max_utterance_tokens)
    batch = make_batches(encoded, args.batch_size, tokenizer.pad_token_id)[0]
    optimizer = build_optimizer(model, 2e-5, 0.01)
    model.train()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    steps, peaks = [], []
    for _ in range(args.steps):
        steps.append(timed(model.loss, optimizer, batch, "cpu"))
        peaks.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"utterances": args.length, "tokens_per_conversation": int(batch.turn_lengths.sum(1).max()),
                      **({"chunks": len(model.chunks(batch))} if args.model == "dialogxl" else {}), "peak_rss_mib": peak / 1024, "rss_before_training_mib": before / 1024,
                      "step_seconds": steps, "peak_rss_mib_after_each_step": peaks}))


def memory(args) -> dict:
    rows = []
    for length in args.lengths:
        command = [sys.executable, __file__, "memory-child", "--length", str(length), "--threads", str(args.threads),
                   "--batch-size", str(args.batch_size), "--steps", str(args.steps), "--model", args.model,
                   *(["--no-checkpoint"] if args.no_checkpoint else [])] + (["--data-dir", args.data_dir] if args.data_dir else [])
        env = {**os.environ, "GLIBC_TUNABLES": TUNABLES} if args.allocator == "turnformer" else None
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        if done.returncode != 0:  # e.g. killed for memory: recorded, and the longer lengths are not tried
            rows.append({"utterances": length, "error": f"exit status {done.returncode}: {done.stderr.strip()[-300:]}"})
            print(rows[-1], flush=True)
            break
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    return {"rows": rows, "peak_rss_mib": [r["peak_rss_mib"] for r in rows if "peak_rss_mib" in r], "batch_size": args.batch_size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=["training", "encoder", "memory", "memory-child"])
    parser.add_argument("--batches", type=count, default=24)
    parser.add_argument("--batch-size", type=count, default=4)
    parser.add_argument("--repeats", type=count, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--lengths", type=counts, default="50,200")
    parser.add_argument("--length", type=count, default=50)
    parser.add_argument("--steps", type=int, default=4, help="memory: training steps at each length")
    parser.add_argument("--allocator", choices=["system", "turnformer"], default="system",
                        help="memory: malloc as it is, or as the turnformer command sets it")
    parser.add_argument("--model", default="dialogxl", choices=["dialogxl", "concat-context", "segment-recurrence"],
                        help="memory: the model whose MELD recipe trains (the baselines too)")
    parser.add_argument("--no-checkpoint", action="store_true",
                        help="memory, a baseline: keep every chunk's (segment's) graph until backward")
    parser.add_argument("--skip-recurrent", action="store_true", help="training: leave the recurrent path out")
    parser.add_argument("--backbone", default=BACKBONE, choices=[BACKBONE, "all-mpnet-base-v2"],
                        help="training, encoder: the backbone, against transformers' own model of it")
    parser.add_argument("--precision", default="float32", choices=["float32", "bf16"],
                        help="training: every side under bfloat16 autocast (accelerate's mixed precision), with "
                             "one-pass DialogXL in float32 beside them")
    parser.add_argument("--dataset", default="meld", choices=["meld", "emorynlp", "dailydialog"],
                        help="training: the dataset whose training conversations, batched as its recipe does, are timed")
    parser.add_argument("--chunk-tokens", type=count, default=None,
                        help="training: DialogXL's model_config.chunk_tokens (default: the recipe's)")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--results-dir", default=None)
    args = parser.parse_args()
    if args.part == "memory-child":
        return memory_child(args)
    if args.backbone != BACKBONE and args.part not in ("training", "encoder"):
        parser.error(f"--backbone {args.backbone}: for training and encoder only")
    if args.precision != "float32" and args.part != "training":
        parser.error(f"--precision {args.precision}: for training only")
    if (args.dataset != "meld" or args.chunk_tokens) and args.part != "training":
        parser.error("--dataset and --chunk-tokens: for training only")
    from turnformer.training.loop import cpu_has_bf16

    # bf16 on a CPU without bfloat16 instructions (autocast emulates it) is a measurement of its own
    cpu_bf16 = {"cpu_bf16": cpu_has_bf16()} if args.precision == "bf16" and args.device == "cpu" else {}
    emulated_bf16 = cpu_bf16 == {"cpu_bf16": False}
    suffix = (("" if args.dataset == "meld" else f"-{args.dataset}") + ("" if args.backbone == BACKBONE else "-mpnet")
              + ("" if args.precision == "float32" else f"-{args.precision}")
              + ("-emulated" if emulated_bf16 else "")
              + (f"-chunk{args.chunk_tokens}" if args.chunk_tokens else "")
              + ("" if args.device == "cpu" else f"-{args.device.split(':')[0]}"))
    common = dict(task="erc", dataset=args.dataset, split="train", model="dialogxl", backbone=args.backbone, seeds=[0])
    config = {"threads": args.threads, "device": args.device, "batch_size": args.batch_size, "repeats": args.repeats,
              "precision": args.precision, **cpu_bf16}
    start = time.perf_counter()
    if args.part == "training":
        out = training(args)
        record = make_result(f"erc-one-pass-speed{suffix}", metric="tokens_per_second_vs_transformers_packed",
                             scores=[out["ratio_one_pass_vs_hf_packed"]], config=config,
                             extra={"target_at_least": 0.8, **out}, **common)
        print(f"one pass {out['tokens_per_second']['one_pass']:.0f} tokens/s, transformers packed "
              f"{out['tokens_per_second']['hf_packed']:.0f}: ratio {out['ratio_one_pass_vs_hf_packed']:.2f} "
              f"(memory bias {out['ratio_memory_bias_vs_hf_packed']:.2f})"
              + (f"; speedup over the recurrence {out['speedup_over_recurrent']:.1f}x" if "speedup_over_recurrent" in out else "")
              + (f"; {args.precision} over float32 {out[f'speedup_{args.precision}_over_float32']:.2f}x"
                 if args.precision != "float32" else ""))
    elif args.part == "encoder":
        out = encoder_speed(args)
        record = make_result(f"erc-encoder-vs-transformers{suffix}", metric="tokens_per_second_vs_transformers",
                             scores=[out["ratio"]], config=config, extra={"target_at_least": 0.9, **out}, **common)
        print(f"StructuredEncoder {out['tokens_per_second']['structured_encoder']:.0f} tokens/s, transformers "
              f"{out['tokens_per_second']['transformers']:.0f}: ratio {out['ratio']:.2f}")
    else:
        out = memory(args)
        name = "erc-one-pass-memory" if args.model == "dialogxl" else f"erc-memory-{args.model}"
        common["model"] = args.model
        name += ("-no-checkpoint" if args.no_checkpoint else "") + ("-turnformer-allocator" if args.allocator == "turnformer" else "")
        record = make_result(name, metric="peak_rss_mib_longest", scores=out["peak_rss_mib"][-1:],
                             config={**config, "steps": args.steps, "allocator": args.allocator},
                             extra={"target_under_mib": 4096, "lengths": args.lengths, **out}, **common)
    record["extra"]["seconds"] = time.perf_counter() - start
    kwargs = {"results_dir": Path(args.results_dir)} if args.results_dir else {}
    print("->", write_result(record, **kwargs))


if __name__ == "__main__":
    main()
