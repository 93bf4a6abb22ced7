"""Does a trained PHAED tell its memory of earlier responses from the response by their turn embeddings?

    python benchmarks/phaed_memory_turns.py runs/gen-full/generation-dailydialog-phaed-full-cpu/seed2 ... [--split test]

PHAED's positions count within an utterance, so in the decoder's self-attention over [memory ; response] an earlier
response's word at position i carries the same position embedding as the response's own word at i: only the turn
embedding (TE) tells them apart. For every run folder given (a PHAED run, its best/ checkpoint), the perplexity of
the split's responses, nothing retrained, with the memory's turn embeddings:

- ``trained``: as the model was trained;
- ``response``: every earlier response's tokens given the response's own TE (memory and response told apart by
  their words alone);
- ``none``: every earlier response given no TE (the padding row, zero): told apart from the response, by nothing
  it was trained on;
- ``farther``: every earlier response given the TE one turn further from the response than its own (TE(3) for
  TE(2) counted back; TE(t - 2) for TE(t - 1) counted from the start, at least TE(1)): told apart, at another turn;
- ``no-memory``: the decoder reads no memory (``c_max = 0`` at inference).

A PHAED without memory (``phaed-no-recurrence``) is scored as trained only; one without turn embeddings
(``phaed-no-turn-emb``) as trained and without its memory. Only the memory changes: an earlier
response's tokens are read by no other part of the model (the encoder's masks keep them out of the queries;
cross-attention reads queries). Written to
``generation-phaed-memory-turns-<experiment, less generation-dailydialog->-seed<N>.json`` (the headline: the
perplexity as trained; every variant under ``extra.perplexity``).
"""

from __future__ import annotations

import argparse
import json
from contextlib import contextmanager
from pathlib import Path

import torch

from turnformer.dialogue import DialogueError
from turnformer.errors import CheckpointError
from turnformer.models.phaed import PHAED, RESPONDER
from turnformer.results import make_result, run_experiment, write_result
from turnformer.tasks.generation import evaluate_perplexity, load_trained, split_batches

VARIANTS = ("trained", "response", "none", "farther", "no-memory")
EARLIER_RESPONSE_ROLE = RESPONDER + 1  # GenerationBatch.context_role on an earlier response of the responder


@contextmanager
def memory_variant(model: PHAED, variant: str):
    """Within the block, `model` decodes with its memory as `variant` says (see the module docstring)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}: expected one of {', '.join(VARIANTS)}")
    encode, embed = model.encode, model._embed
    current = {}

    def patched_embed(ids, position, turn):
        batch = current.get("batch")
        if batch is None or ids is not batch.context or variant in ("trained", "no-memory"):
            return embed(ids, position, turn)
        if variant == "response":
            memory_turn = model._response_turn(batch).expand_as(turn)  # [B, Lc]
        elif variant == "none":
            memory_turn = torch.zeros_like(turn)
        else:  # farther
            memory_turn = turn + 1 if model.config.turn_count == "back" else (turn - 1).clamp(min=1)
        return embed(ids, position, torch.where(batch.context_role.eq(EARLIER_RESPONSE_ROLE), memory_turn, turn))

    def patched_encode(batch):
        current["batch"] = batch
        try:
            state = encode(batch)
        finally:
            current.clear()
        return state._replace(memory=None) if variant == "no-memory" else state

    model.encode, model._embed = patched_encode, patched_embed
    try:
        yield model
    finally:
        del model.encode, model._embed  # the class's own methods again


def memory_perplexities(run: Path, split: str = "test", data_dir=None, limit: int | None = None) -> dict[str, float]:
    """{variant: perplexity of the split's responses} of the PHAED run's best checkpoint; of a PHAED without memory
    (``c_max = 0``), as trained only; of one without turn embeddings (``phaed-no-turn-emb``), as trained and without
    its memory (the other variants change only turn embeddings)."""
    model, vocab, description = load_trained(run)
    if not isinstance(model, PHAED):
        raise SystemExit(f"{run}: not a PHAED run")
    batches, _ = split_batches(model, vocab, description, split, data_dir, limit)
    scores = {}
    variants = VARIANTS if model.config.turn_embeddings else ("trained", "no-memory")
    for variant in variants if model.config.c_max > 0 else ("trained",):
        with memory_variant(model, variant):
            scores[variant] = round(evaluate_perplexity(model, batches)["perplexity"], 4)
        print(f"{run} {variant}: perplexity {scores[variant]}", flush=True)
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="PHAED run folders (each with best/).")
    parser.add_argument("--split", default="test", choices=("validation", "test"))
    parser.add_argument("--limit", type=int, default=None, help="Only the split's first N conversations.")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    for run in args.runs:
        try:
            scores = memory_perplexities(run, args.split, args.data_dir, args.limit)
        except (DialogueError, CheckpointError) as e:  # not a run folder, no checkpoint, a checkpoint that does not load, no data
            raise SystemExit(f"error: {e}") from None
        description = json.loads((run / "run.json").read_text())
        recipe, (name, seed) = description["recipe"], run_experiment(run, description, "generation-dailydialog-")
        record = make_result(f"generation-phaed-memory-turns-{name}-seed{seed}", task="generation", dataset="dailydialog",
                             split=args.split, model=recipe["model"], metric="perplexity", scores=[scores["trained"]],
                             seeds=[seed], config=recipe.get("model_config", {}),
                             extra={"perplexity": scores, "limit": args.limit})
        print(f"{run}: {scores} -> {write_result(record)}", flush=True)


if __name__ == "__main__":
    main()
