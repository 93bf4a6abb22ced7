"""Where in a conversation does a trained generator lose? Its perplexity on a split, by how far in the response is.

    python benchmarks/generation_by_context.py runs/gen-full/generation-dailydialog-transformer-full-cpu/seed2 \\
        runs/gen-full/generation-dailydialog-phaed-full-cpu/seed2 ... [--split test] [--limit N]

For every run folder given (its best/ checkpoint), the perplexity of the split's responses, nothing retrained, in
groups by the response's place in its conversation (its turn t, counted from 0; the recipes read at most
``max_context_turns`` = 4 utterances of context):

- ``turn 1``: one utterance of context, no earlier response of the responder (PHAED's memory is empty);
- ``turn 2``, ``turn 3``: two and three utterances of context; the responder has spoken before (in a two-party
  conversation, at t - 2: PHAED's memory holds it);
- ``turn 4``: the whole conversation so far fits the context;
- ``turns 5+``: the context is the last 4 utterances of a longer conversation.

A model that loses to another by the same amount in every group loses in what every response shares (the words'
prediction), not in how it reads a longer context; a loss that grows with the context is in the context's reading.
The groups' perplexities combine to the whole split's (the tokens' mean negative log-likelihood, weighted by tokens),
which is checked. Written to ``generation-by-context-<experiment, less generation-dailydialog->-seed<N>.json`` (the
headline: the whole split's perplexity; the groups under ``extra``).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from turnformer.dialogue import DialogueError
from turnformer.errors import CheckpointError
from turnformer.results import make_result, run_experiment, write_result
from turnformer.tasks.generation import eval_batch_size, evaluate_perplexity, instance_batches, load_trained, split_instances

GROUPS = ("turn 1", "turn 2", "turn 3", "turn 4", "turns 5+")


def group_of(turn: int) -> str:
    """The group of a response at turn `turn` (>= 1: a conversation's first utterance is no response)."""
    if turn < 1:
        raise ValueError(f"a response is at turn 1 or later, got {turn}")
    return GROUPS[min(turn, 5) - 1]


def by_context(model, vocab, run: dict, split: str, data_dir=None, limit: int | None = None) -> dict:
    """{group: {"instances", "tokens", "perplexity"}} of a trained generator on a split, and "all" (every group)."""
    instances = split_instances(run, split, data_dir, limit)
    grouped = {g: [x for x in instances if group_of(x.turn) == g] for g in GROUPS}
    out = {}
    for group, members in grouped.items():
        if not members:
            continue
        scored = evaluate_perplexity(model, instance_batches(model, members, vocab, eval_batch_size(run)))
        out[group] = {"instances": len(members), "tokens": scored["tokens"], "perplexity": scored["perplexity"]}
    tokens = sum(g["tokens"] for g in out.values())
    nll = sum(g["tokens"] * math.log(g["perplexity"]) for g in out.values())
    out["all"] = {"instances": len(instances), "tokens": tokens, "perplexity": math.exp(nll / tokens)}
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="Run folders of trained word generators (each with best/).")
    parser.add_argument("--split", default="test", choices=("validation", "test"))
    parser.add_argument("--limit", type=int, default=None, help="Only the split's first N conversations.")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    for run_dir in args.runs:
        try:
            model, vocab, run = load_trained(run_dir)
            groups = by_context(model, vocab, run, args.split, args.data_dir, args.limit)
        except (DialogueError, CheckpointError) as e:  # not a run folder, no checkpoint, a checkpoint that does not load, no data
            raise SystemExit(f"error: {e}") from None
        name, seed = run_experiment(run_dir, run, "generation-dailydialog-")
        record = make_result(f"generation-by-context-{name}-seed{seed}", task="generation", dataset=run["recipe"]["dataset"],
                             split=args.split, model=run["recipe"]["model"], metric="perplexity",
                             scores=[groups["all"]["perplexity"]], seeds=[seed],
                             config=run["recipe"].get("model_config", {}), extra={"groups": groups, "limit": args.limit})
        shown = ", ".join(f"{g} {v['perplexity']:.2f} ({v['instances']})" for g, v in groups.items())
        print(f"{run_dir}: {shown} -> {write_result(record)}", flush=True)


if __name__ == "__main__":
    main()
