"""What one DialogXL training step takes in memory, measured, beside what the training-memory check estimates.

    python benchmarks/erc_step_memory.py [--backbones all-MiniLM-L6-v2 all-mpnet-base-v2] [--precisions no bf16]
        [--batch-sizes 2 4] [--chunks 256 512] [--tokens 1400 2800] [--threads 1]

Each case is a child process of its own, started as the `turnformer` command starts (its allocator settings): the
DailyDialog memory-bias recipe (memory of 450 tokens) on the backbone, in training mode, at ``chunk_tokens`` CHUNK,
over a batch of B conversations of about T tokens each, T each of ``--tokens`` (SwDA's test utterances one after
another, each row from another place, with their act labels), forward and backward once, under bf16 autocast for
``bf16`` as ``train.mixed_precision=bf16`` runs it. Measured: the peak resident memory during the step (the kernel's high-water
mark, reset just before it) less the memory before it and the gradients' float32 buffers (the optimizer's side, which
the estimate leaves out too). -> ``erc-step-memory.json``: each case's measured and estimated bytes; its score, the
largest ratio of measured to estimated (below 1: the estimate covers every case), per precision in ``extra``.

``--model segment-recurrence``: the DailyDialog segment-recurrence recipe (segments of 64 tokens, a memory of 400;
``--chunks`` does not apply) -> ``erc-step-memory-segment-recurrence.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import tomllib
from importlib import resources
from pathlib import Path

from _timing import child_measurement
from turnformer.allocator import TUNABLES
from turnformer.results import make_result, write_result

RECIPES = {"dialogxl": "erc-dailydialog-dialogxl-memory-bias.toml",
           "segment-recurrence": "erc-dailydialog-segment-recurrence.toml"}


def status_kib(field: str) -> int:
    """A /proc/self/status figure in KiB (VmRSS, VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise SystemExit(f"/proc/self/status has no {field}: this benchmark needs Linux")


def child(model_name: str, backbone: str, precision: str, batch_size: int, chunk: int, tokens: int,
          data_dir: str | None) -> None:
    """One measurement in this process: prints a JSON row."""
    import torch

    from turnformer.data import load_split
    from turnformer.dialogue import Dialogue
    from turnformer.tasks.erc import build_erc_model, encode_conversations, make_batch

    recipe = tomllib.loads((resources.files("turnformer") / "recipe_files" / RECIPES[model_name]).read_text())
    settings = {**recipe["model_config"], **({"chunk_tokens": chunk} if model_name == "dialogxl" else {})}
    corpus = [t for d in load_split("swda", "test", data_dir).dialogues for t in d.turns]
    labels = sorted({t.labels["act"] for t in corpus})
    model, tokenizer = build_erc_model(recipe["model"], settings, labels, backbone)
    model.train()
    dialogues, start = [], 0
    for row in range(batch_size):
        turns, count = [], 0
        while count < tokens:
            turn = corpus[(start + len(turns)) % len(corpus)]
            turns.append(turn)
            count += len(tokenizer(turn.text)["input_ids"])
        dialogues.append(Dialogue(turns=tuple(turns), id=f"swda-test-{row}"))
        start += 7919 * (row + 1)  # each row from another place
    encoded, _ = encode_conversations(dialogues, tokenizer, "act", labels, model.config.max_utterance_tokens)
    batch = make_batch(encoded, tokenizer.pad_token_id)
    longest = int(batch.turn_lengths.sum(1).max())
    gradients = sum(p.numel() * 4 for p in model.parameters() if p.requires_grad)
    before = status_kib("VmRSS") * 1024
    Path("/proc/self/clear_refs").write_text("5")  # the high-water mark starts again from the current RSS
    began = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        loss = model.loss(batch)
    loss.backward()
    seconds = time.perf_counter() - began
    peak = status_kib("VmHWM") * 1024
    measured = peak - before - gradients
    shape = ({"chunk_tokens": chunk, "chunks": len(model.chunks(batch))} if model_name == "dialogxl"
             else {"segment_len": model.config.segment_len})
    print(json.dumps({"model": model_name, "backbone": backbone, "precision": precision, "batch_size": batch_size,
                      **shape, "mem_len": model.config.mem_len, "longest_tokens": longest,
                      "seconds": round(seconds, 1), "rss_before_mib": round(before / 2**20), "peak_mib": round(peak / 2**20),
                      "gradients_mib": round(gradients / 2**20), "measured_bytes": measured,
                      "estimated_bytes": model.training_memory([batch], precision)[0]}))


def measure(case: dict, args) -> dict:
    env = {**os.environ, "GLIBC_TUNABLES": TUNABLES, "OMP_NUM_THREADS": str(args.threads),
           "TURNFORMER_THREADS": str(args.threads)}
    arguments = ["--child", "--model", args.model, "--backbones", case["backbone"], "--precisions", case["precision"], "--batch-sizes",
                 str(case["batch_size"]), "--chunks", str(case["chunk"]), "--tokens", str(case["tokens"])]
    return child_measurement(__file__, arguments, env, str(case), args.data_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backbones", nargs="+", default=["all-MiniLM-L6-v2", "all-mpnet-base-v2"])
    parser.add_argument("--precisions", nargs="+", choices=("no", "bf16"), default=["no", "bf16"])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[2, 4])
    parser.add_argument("--chunks", nargs="+", type=int, default=[256, 512])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1400, 2800], help="tokens a conversation (about)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model", choices=sorted(RECIPES), default="dialogxl")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--results-dir", default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.model, args.backbones[0], args.precisions[0], args.batch_sizes[0], args.chunks[0], args.tokens[0],
                     args.data_dir)
    rows = []
    for backbone in args.backbones:
        for precision in args.precisions:
            for batch_size in args.batch_sizes:
                for chunk in args.chunks if args.model == "dialogxl" else args.chunks[:1]:
                    for tokens in args.tokens:
                        case = {"backbone": backbone, "precision": precision, "batch_size": batch_size, "chunk": chunk,
                                "tokens": tokens}
                        row = measure(case, args)
                        row["ratio"] = round(row["measured_bytes"] / row["estimated_bytes"], 3)
                        rows.append(row)
                        print(json.dumps(row), flush=True)
    worst = {p: max(r["ratio"] for r in rows if r["precision"] == p) for p in args.precisions}
    name, model = (("erc-step-memory", "dialogxl-memory-bias") if args.model == "dialogxl"
                   else (f"erc-step-memory-{args.model}", args.model))
    record = make_result(name, task="erc", dataset="swda test (conversations built from its utterances)",
                         split="test", model=model, backbone=", ".join(args.backbones),
                         metric="measured_over_estimated", scores=[max(worst.values())], seeds=[],
                         extra={"worst_ratio_by_precision": worst, "rows": rows, "tokens": args.tokens,
                                "threads": args.threads, "recipe": RECIPES[args.model]})
    kwargs = {"results_dir": Path(args.results_dir)} if args.results_dir else {}
    print(json.dumps(worst), "->", write_result(record, **kwargs))


if __name__ == "__main__":
    main()
