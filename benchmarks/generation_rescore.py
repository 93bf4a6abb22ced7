"""Greedy replies of trained generators' best checkpoints, scored again on a split.

- ``--split validation``: DRA's Table 1 is on the validation set (perplexity, BLEU-2, Distinct-2). The training runs
  record validation perplexity only; this writes ``generation-dailydialog-MODEL[SUFFIX]-validation.json`` per model:
  validation perplexity per seed, BLEU-1..4, Distinct-1/2 and the embedding metrics in ``extra``, DRA's Table 1
  DailyDialog numbers beside them.
- ``--split test``: runs trained before the training loop scored the embedding metrics: their records
  (``generation-dailydialog-MODEL[SUFFIX].json``) get ``embedding_average`` / ``_extrema`` / ``_greedy`` per seed
  from the same checkpoints on the same test conversations, after checking that BLEU and Distinct come out as the
  runs recorded them (greedy decoding is deterministic).

    python benchmarks/generation_rescore.py --split validation [--models transformer,transformer-dra,...]
    python benchmarks/generation_rescore.py --split test --models transformer,...,phaed-no-recurrence
                                            [--runs-dir runs/gen] [--suffix=-cpu]
    python benchmarks/generation_rescore.py --split test --limit-dialogues 100 --runs-dir runs/gen-full \
                                            --suffix=-full-cpu-10epochs --models transformer --seeds 1

Word vectors: all-MiniLM-L6-v2's word pieces (`turnformer.tasks.generation_metrics.minilm_word_vectors`).
By default each run is scored on the conversations it scored itself (its ``run.json``'s limits: the ``generation-cpu``
plan's first 100 validation and test conversations, all of them for the full-data plans). ``--limit-dialogues N``
scores the first N of either split instead, into a record of their own, ``...-SPLIT-first-N.json`` (so that a run
trained on all the data can be set beside rows scored on the first 100 conversations).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from turnformer.results import DRA_VALIDATION, RESULTS_DIR, make_result, write_result
from turnformer.tasks.generation import evaluate_split, load_trained, pretrained_start
from turnformer.tasks.generation_metrics import minilm_word_vectors

REPLY_METRICS = ("bleu_1", "bleu_2", "bleu_3", "bleu_4", "distinct_1", "distinct_2")
EMBEDDING_METRICS = ("embedding_average", "embedding_extrema", "embedding_greedy")


def score_runs(runs_dir: Path, experiment: str, seeds: list[int], split: str, limit: int, vectors, data_dir) -> list[dict]:
    out = []
    for seed in seeds:
        run_dir = runs_dir / experiment / f"seed{seed}"
        if not (run_dir / "result.json").exists():
            raise SystemExit(f"{run_dir}: no finished run (result.json) to score")
        model, vocab, run = load_trained(run_dir)
        # by default the conversations the run itself scored (run.json's limits; none: the whole split)
        run_limit = limit if limit is not None else (run.get("limits") or {}).get(split)
        out.append({**evaluate_split(model, vocab, run, split, data_dir, run_limit, vectors), "limit_dialogues": run_limit})
        print(f"{experiment} seed {seed} {split}: perplexity {out[-1]['perplexity']:.2f}, BLEU-2 {out[-1]['bleu_2']:.2f}, "
              f"Distinct-2 {out[-1]['distinct_2']:.2f}, embedding average {out[-1]['embedding_average']:.2f}", flush=True)
    return out


def split_record(model_id: str, experiment: str, seeds: list[int], scored: list[dict], args) -> dict:
    """The scores of `scored` as a record of their own: EXPERIMENT-validation (the conversations the runs scored), or
    EXPERIMENT-SPLIT-first-N where --limit-dialogues N chose them."""
    name = f"{experiment}-{args.split}" + (f"-first-{args.limit_dialogues}" if args.limit_dialogues is not None else "")
    paper = DRA_VALIDATION.get(model_id) if args.split == "validation" else None
    return make_result(
        name, task="generation", dataset="dailydialog", split=args.split, model=model_id,
        metric="perplexity", scores=[m["perplexity"] for m in scored], seeds=seeds, paper=paper[0] if paper else None,
        backbone=pretrained_start(model_id), config={"limit_dialogues": scored[0]["limit_dialogues"], "runs": str(args.runs_dir / experiment)},
        extra={**{k: [m[k] for m in scored] for k in REPLY_METRICS + EMBEDDING_METRICS},
               "instances": scored[0]["instances"], "sample": scored[0]["sample"],
               "paper_bleu_2": paper[1] if paper else None, "paper_distinct_2": paper[2] if paper else None,
               "note": "greedy replies of each run's best checkpoint (lowest validation perplexity)"},
    )


def add_embedding_metrics(experiment: str, seeds: list[int], scored: list[dict], results_dir: Path) -> dict:
    """The runs' results record with the embedding metrics of `scored` added (BLEU and Distinct checked first)."""
    path = results_dir / f"{experiment}.json"
    record = json.loads(path.read_text())
    if record["seeds"] != seeds:
        raise SystemExit(f"{path}: seeds {record['seeds']}, rescored {seeds}")
    for name in REPLY_METRICS:
        again = [m[name] for m in scored]
        if len(again) != len(record["extra"][name]) or any(abs(a - b) > 1e-6 for a, b in zip(record["extra"][name], again)):
            raise SystemExit(f"{experiment}: {name} rescored {again}, recorded {record['extra'][name]}: not the runs' checkpoints or data")
    record["extra"].update({k: [m[k] for m in scored] for k in EMBEDDING_METRICS})
    record["extra"]["embedding_metrics"] = ("rescored from the same best checkpoints on the same test conversations "
                                            "(benchmarks/generation_rescore.py --split test)")
    # the record's command, commit and time stay the training's; the rescoring's own are kept beside them
    rescoring = make_result(experiment, task=record["task"], dataset=record["dataset"], split=record["split"],
                            model=record["model"], metric=record["metric"], scores=record["scores"], seeds=seeds)
    record["extra"]["embedding_metrics_by"] = {key: rescoring.get(key) for key in ("command", "commit", "date", "time", "machine")}
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", choices=("validation", "test"), required=True)
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/gen"))
    parser.add_argument("--suffix", default="-cpu", help="Experiment suffix of the runs: '-cpu' or '' (the GPU plan).")
    parser.add_argument("--models", default=",".join(DRA_VALIDATION))
    parser.add_argument("--seeds", default=None, help="Default: 1,2,3 for validation; the record's seeds for test.")
    parser.add_argument("--limit-dialogues", type=int, default=None,
                        help="The first N conversations of the split, into a record of their own "
                             "(default: those the run scored, its run.json's limits).")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    vectors = minilm_word_vectors()

    for model_id in args.models.split(","):
        experiment = f"generation-dailydialog-{model_id}{args.suffix}"
        if args.seeds:
            seeds = [int(s) for s in args.seeds.split(",")]
        elif args.split == "test":
            seeds = json.loads((RESULTS_DIR / f"{experiment}.json").read_text())["seeds"]
        else:
            seeds = [1, 2, 3]
        scored = score_runs(args.runs_dir, experiment, seeds, args.split, args.limit_dialogues, vectors, args.data_dir)
        if args.split == "validation" or args.limit_dialogues is not None:
            record = split_record(model_id, experiment, seeds, scored, args)
        else:
            record = add_embedding_metrics(experiment, seeds, scored, RESULTS_DIR)
        print(f"-> {write_result(record)}", flush=True)


if __name__ == "__main__":
    main()
