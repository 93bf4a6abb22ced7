"""Peak memory and time of training steps under glibc's malloc as it is and as `turnformer` sets it.

    python benchmarks/allocator_memory.py [--utterances 300 1200] [--repeats 2] [--threads 1]

Each measurement is a child process of its own (the tunables are read when a process starts): the default model for
files (DialogXL with the memory bias, all-MiniLM-L6-v2) in training mode, forward and backward,
- ``long-N``: one step over one conversation of N utterances (each of ``--utterances``; SwDA's test conversations one
  after another, their act labels, again from the first once they run out), encoded a chunk at a time and recomputed in
  backward: what a step holds does not grow with N, so neither should its peak;
- ``meld``: 12 steps of MELD's first 48 training conversations, 4 a batch, as its recipe trains,
each with ``GLIBC_TUNABLES`` unset (``system``), set to `turnformer.allocator.TUNABLES` (``turnformer``) and to the
earlier setting, a 16 MiB threshold (``16mib``), in turn, ``--repeats`` times. -> ``allocator-memory.json``: each
child's peak resident memory and seconds; its score, the longest step's largest peak as `turnformer` sets malloc.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

from _timing import child_measurement
from turnformer.allocator import TUNABLES
from turnformer.results import make_result, write_result

SETTINGS = {"system": None, "turnformer": TUNABLES, "16mib": "glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=16777216"}


def child(case: str, utterances: int, data_dir: str | None) -> None:
    """One measurement, in this process: prints its seconds and its own peak resident memory."""
    import tomllib
    from importlib import resources

    from turnformer.data import load_split
    from turnformer.dialogue import Dialogue
    from turnformer.tasks.erc import build_erc_model, encode_conversations, make_batch

    recipe = tomllib.loads((resources.files("turnformer") / "recipe_files" / "erc-file-dialogxl-memory-bias.toml").read_text())
    if case == "long":
        kind = "act"
        corpus = [t for d in load_split("swda", "test", data_dir).dialogues for t in d.turns]
        turns = [corpus[i % len(corpus)] for i in range(utterances)]
        batches = [[Dialogue(turns=tuple(turns), id="swda-test")]]
    else:
        kind = "emotion"
        dialogues = load_split("meld", "train", data_dir).dialogues[:48]
        batches = [dialogues[i: i + 4] for i in range(0, len(dialogues), 4)]
    labels = sorted({t.labels[kind] for batch in batches for d in batch for t in d.turns if kind in t.labels})
    model, tokenizer = build_erc_model(recipe["model"], recipe["model_config"], labels, recipe["backbone"])
    model.train()
    start = time.perf_counter()
    for dialogues in batches:
        encoded, _ = encode_conversations(dialogues, tokenizer, kind, labels, model.config.max_utterance_tokens)
        model.loss(make_batch(encoded, tokenizer.pad_token_id)).backward()
    print(json.dumps({"seconds": time.perf_counter() - start, "steps": len(batches),
                      "utterances": sum(len(d) for batch in batches for d in batch),
                      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def measure(case: str, setting: str, args) -> dict:
    """One child process under `setting`."""
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    if SETTINGS[setting]:
        env["GLIBC_TUNABLES"] = SETTINGS[setting]
    env.update(OMP_NUM_THREADS=str(args.threads), TURNFORMER_THREADS=str(args.threads))
    long, _, utterances = case.partition("-")
    return child_measurement(__file__, ["--child", long, "--utterances", utterances or "0"], env, f"{case} under {setting}",
                             args.data_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--utterances", type=int, nargs="+", default=[300, 1200])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--results-dir", default=None)
    parser.add_argument("--child", choices=("long", "meld"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.utterances[0], args.data_dir)
    cases = ["meld", *(f"long-{n}" for n in args.utterances)]
    rows = []
    for repeat in range(args.repeats):
        for case in cases:
            for setting in SETTINGS:
                row = {"case": case, "setting": setting, "repeat": repeat, **measure(case, setting, args)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    summary = {}
    for case in cases:
        for setting in SETTINGS:
            mine = [r for r in rows if r["case"] == case and r["setting"] == setting]
            summary[f"{case}/{setting}"] = {"peak_rss_mib": [round(r["peak_rss_mib"]) for r in mine],
                                            "seconds": [round(r["seconds"], 1) for r in mine]}
    longest = f"long-{max(args.utterances)}"
    record = make_result("allocator-memory", task="erc", dataset="swda test (long), meld train (meld)", split="train",
                         model="dialogxl-memory-bias", backbone="all-MiniLM-L6-v2", metric="long_peak_rss_mib",
                         scores=[max(summary[f"{longest}/turnformer"]["peak_rss_mib"])], seeds=[],
                         extra={"long_peak_rss_mib_system": max(summary[f"{longest}/system"]["peak_rss_mib"]),
                                "settings": {k: v or "unset" for k, v in SETTINGS.items()}, "summary": summary,
                                "rows": rows, "utterances": args.utterances, "threads": args.threads})
    kwargs = {"results_dir": Path(args.results_dir)} if args.results_dir else {}
    print(json.dumps(summary, indent=1), "->", write_result(record, **kwargs))


if __name__ == "__main__":
    main()
