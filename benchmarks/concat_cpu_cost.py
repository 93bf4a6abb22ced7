"""What the concatenated-context baseline costs to train, in its recipe's setting and in the cheaper ones of plan
``concat-cpu``, side by side in one run on the same MELD training batches.

    python benchmarks/concat_cpu_cost.py [--backbone all-MiniLM-L6-v2] [--batches 12] [--repeats 2] [--threads 1]
    python benchmarks/concat_cpu_cost.py --count-only [--dataset emorynlp]

-> ``concat-cpu-cost.json`` (``concat-cpu-cost-BACKBONE.json`` for another backbone). Per setting (`settings_for`: the
recipe, 512 tokens and every layer trained; the backbone's lower half frozen; the history cut to 128 tokens; both):
seconds of a training step (forward, backward, AdamW) over ``--batches`` batches evenly spaced over the epoch (batched
as training batches them: 4 conversations, sorted by length), the sum scaled to the epoch's batch count; the tokens
the rows encode over the whole epoch (every row re-encodes its history). The settings alternate batch by batch (who
goes first rotates); every setting starts from the same weights. Beside them the recipe without ``checkpoint``
(``no-checkpoint``: every chunk's graph kept until backward). Then, each in a process of its own, one training step
on the epoch's largest batch (the most padded tokens) per setting, and for the recipe as the model ran before its
token budget and recompute (``before``: chunks of 32 rows, every graph kept): its seconds and the process's peak
resident memory, beside the resident memory before the step.
``--count-only`` times nothing: the epoch's tokens and rows cut at 512, 256 and 128 tokens of history, beside the
tokens of encoding every utterance once (``concat-cpu-tokens-DATASET.json``), on ``--dataset`` (MELD or EmoryNLP, the training split).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import spread, timed_train_step  # noqa: E402
from turnformer.data import load_split  # noqa: E402
from turnformer.models.baselines import ConcatContext  # noqa: E402
from turnformer.recipes import find_recipe, load_recipe  # noqa: E402
from turnformer.results import make_result, write_result  # noqa: E402
from turnformer.tasks.erc import build_erc_model, encode_conversations, make_batches  # noqa: E402
from turnformer.training import build_optimizer  # noqa: E402

MINILM = "all-MiniLM-L6-v2"
COUNTED_LENGTHS = {"recipe": {}, "len256": {"max_length": 256}, "len128": {"max_length": 128}}  # --count-only


def settings_for(layers: int) -> dict[str, dict]:
    """The concat-cpu settings on a backbone of `layers` layers (its lower half: layers // 2)."""
    half = {"frozen_layers": layers // 2}
    return {"recipe": {}, "frozen-half": half, "len128": {"max_length": 128}, "frozen-half-len128": {**half, "max_length": 128}}


def epoch_tokens(model: ConcatContext, batches) -> tuple[int, int]:
    """(tokens the rows of `batches` encode, rows cut by max_length): what an epoch's forward passes read."""
    tokens = cut = 0
    for batch in batches:
        for chunk in model.build_inputs(batch):
            tokens += int(chunk.attention_mask.sum())
            cut += sum(1 for n in chunk.truncated if n)
    return tokens, cut


def largest_batch(model: ConcatContext, batches):
    """The batch whose chunks hold the most padded tokens: the step with the highest memory."""
    return max(batches, key=lambda b: sum(chunk.input_ids.numel() for chunk in model.build_inputs(b)))


def resident_gigabytes() -> tuple[float, float]:
    """(resident memory now, the process's peak so far), in GB (Linux: /proc/self/status)."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 2**20, int(fields["VmHWM"].split()[0]) / 2**20


def peak_step(model: ConcatContext, optimizer, batch) -> dict:
    """One training step on `batch`: its seconds, resident memory before it and the peak after it (GB)."""
    before, _ = resident_gigabytes()
    seconds = timed_train_step(model, optimizer, batch)
    return {"seconds": seconds, "resident_gb_before": before, "peak_resident_gb": resident_gigabytes()[1]}


def count_tokens(base: ConcatContext, batches, encoded, args) -> None:
    """The epoch's tokens and rows cut at each history length (`COUNTED_LENGTHS`; frozen layers change neither),
    beside the tokens of encoding each utterance once, [CLS] and [SEP] included, cut as the model cuts it."""
    once = sum(len(ids) for c in encoded for ids in c.turn_ids)
    rows = sum(sum(b.lengths) for b in batches)
    out = {}
    for name, changes in COUNTED_LENGTHS.items():
        model = ConcatContext(dataclasses.replace(base.config, **changes), base.encoder, base.cls_id, base.sep_id, base.pad_id)
        tokens, cut = epoch_tokens(model, batches)
        out[name] = {"settings": changes, "epoch_tokens": tokens, "epoch_rows_cut": cut, "times_once": tokens / once}
        print(f"{name}: {tokens} tokens an epoch ({tokens / once:.1f} times {once} once), {cut} of {rows} rows cut")
    record = make_result(
        f"concat-cpu-tokens-{args.dataset}", task="erc", dataset=args.dataset, split="train", model="concat-context",
        backbone=args.backbone, metric="epoch_tokens_vs_once", scores=[out["recipe"]["times_once"]], seeds=[args.seed],
        extra={"tokens_once": once, "rows": rows, **out})
    print(write_result(record))


# beside the plan's settings: the recipe without recomputing its chunks in backward, and as the model ran before it
# had either the token budget or the recompute (chunks of 32 rows, every chunk's graph kept until backward)
NO_CHECKPOINT = {"no-checkpoint": {"checkpoint": False}}
BEFORE = {"before": {"checkpoint": False, "max_tokens_per_forward": 2**31}}


def build_setting(base: ConcatContext, changes: dict, recipe: dict):
    """A copy of `base` with `changes` to its config, the same weights, and its AdamW."""
    model = ConcatContext(dataclasses.replace(base.config, **changes), copy.deepcopy(base.encoder), base.cls_id,
                          base.sep_id, base.pad_id)
    model.load_state_dict(base.state_dict())
    return model, build_optimizer(model, float(recipe["train"]["lr"]), float(recipe["train"]["weight_decay"]))


def peak_in_own_process(name: str, args) -> dict:
    """`peak_step` of setting `name` on the largest batch, in a fresh process (its peak memory is the step's own)."""
    command = [sys.executable, __file__, "--peak-of", name, "--threads", str(args.threads), "--backbone", args.backbone,
               "--seed", str(args.seed), *(["--data-dir", args.data_dir] if args.data_dir else [])]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:  # e.g. killed for memory: say so in the results rather than lose the others
        return {"error": f"exit status {done.returncode}: {done.stderr.strip()[-300:]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backbone", default=MINILM)
    parser.add_argument("--batches", type=int, default=12, help="batches evenly spaced over the epoch")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--dataset", default="meld", choices=("meld", "emorynlp"), help="--count-only's dataset")
    parser.add_argument("--count-only", action="store_true", help="count the epoch's tokens per setting; time nothing")
    parser.add_argument("--peak-of", default=None, help=argparse.SUPPRESS)  # one setting's peak step (a child process)
    args = parser.parse_args()
    if args.dataset != "meld" and not args.count_only:
        parser.error("--dataset: the timed comparison runs on MELD; other datasets with --count-only")
    torch.set_num_threads(args.threads)
    recipe = load_recipe(find_recipe("erc", "concat-context", args.dataset))
    split = load_split(args.dataset, "train", args.data_dir)
    labels = split.label_set(recipe.get("label_kind", "emotion"))
    torch.manual_seed(args.seed)
    base, tokenizer = build_erc_model("concat-context", recipe["model_config"], labels, args.backbone)
    encoded, _ = encode_conversations(split.dialogues, tokenizer, recipe.get("label_kind", "emotion"), labels,
                                      base.config.max_utterance_tokens)
    all_batches = make_batches(encoded, int(recipe["train"]["batch_size"]), tokenizer.pad_token_id)
    batches = spread(all_batches, args.batches)
    settings = settings_for(base.encoder.num_layers)
    if args.count_only:
        count_tokens(base, all_batches, encoded, args)
        return
    if args.peak_of:
        model, optimizer = build_setting(base, {**settings, **NO_CHECKPOINT, **BEFORE}[args.peak_of], recipe)
        print(json.dumps(peak_step(model, optimizer, largest_batch(model, all_batches))))
        return
    settings = {**settings, **NO_CHECKPOINT}
    models, optimizers = {}, {}
    for name, changes in settings.items():
        models[name], optimizers[name] = build_setting(base, changes, recipe)
    start = time.perf_counter()
    for name in settings:  # warm-up
        timed_train_step(models[name], optimizers[name], batches[0])
    seconds = {name: [[] for _ in range(args.repeats)] for name in settings}
    names = list(settings)
    for r in range(args.repeats):
        for i, batch in enumerate(batches):
            shift = (r + i) % len(names)
            for name in names[shift:] + names[:shift]:
                seconds[name][r].append(timed_train_step(models[name], optimizers[name], batch))
    out = {}
    for name in settings:
        totals = [sum(run) for run in seconds[name]]
        tokens, cut = epoch_tokens(models[name], all_batches)
        out[name] = {"settings": settings[name], "seconds_per_repeat": totals,
                     "epoch_minutes": statistics.median(totals) / len(batches) * len(all_batches) / 60,
                     "epoch_tokens": tokens, "epoch_rows_cut": cut,
                     "trained_parameters": sum(p.numel() for p in models[name].parameters() if p.requires_grad)}
    for name in settings:
        out[name]["time_vs_recipe"] = out[name]["epoch_minutes"] / out["recipe"]["epoch_minutes"]
    del models, optimizers
    largest = {name: peak_in_own_process(name, args) for name in (*settings, *BEFORE)}
    suffix = "" if args.backbone == MINILM else f"-{args.backbone.rstrip('/').rsplit('/', 1)[-1]}"
    record = make_result(
        f"concat-cpu-cost{suffix}", task="erc", dataset="meld", split="train", model="concat-context", backbone=args.backbone,
        metric="training_time_vs_recipe", scores=[out["frozen-half"]["time_vs_recipe"]], seeds=[args.seed],
        config={"threads": args.threads, "batches": len(batches), "repeats": args.repeats, "batch_size": recipe["train"]["batch_size"]},
        extra={"batches_of_epoch": len(all_batches), "rows_of_epoch": sum(sum(b.lengths) for b in all_batches),
               "seconds": time.perf_counter() - start, **out, "largest_batch_step": largest})
    for name, row in out.items():
        print(f"{name}: {row['epoch_minutes']:.1f} min an epoch ({row['time_vs_recipe']:.2f} of the recipe), "
              f"{row['epoch_tokens']} tokens, {row['epoch_rows_cut']} rows cut")
    for name, row in largest.items():
        print(f"{name}, the largest batch: " + (row["error"] if "error" in row else
              f"{row['seconds']:.1f} s, peak {row['peak_resident_gb']:.2f} GB resident ({row['resident_gb_before']:.2f} before)"))
    print(write_result(record))


if __name__ == "__main__":
    main()
