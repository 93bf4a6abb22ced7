"""How long `turnformer plot attention` and the server's /v1/attention take to read a late utterance of a long
conversation: the utterances before it encoded one at a time (`DialogXL.step`, as before) or a chunk at a time
(`DialogXL.memory_after`, as now), side by side on the same checkpoint and conversation.

    python benchmarks/attention_view_speed.py --checkpoint RUN [--turns 50,200] [--repeats 3] [--threads 1]

Any DialogXL checkpoint serves (the time does not depend on what its weights learnt). The conversation is the test
split of the checkpoint's dataset, its conversations joined end to end until it has the most of ``--turns``
utterances; the query is its last utterance. Writes benchmarks/results/attention-view-speed.json:
the speed-up at the longest length as its score, both times (the fastest of ``--repeats``) per length and the largest
difference between the two ways' attention weights.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from turnformer.dialogue import Dialogue, DialogueError
from turnformer.errors import CheckpointError
from _timing import count, counts
from turnformer.models.dialogxl import DialogXL
from turnformer.results import make_result, write_result
from turnformer.tasks import erc


def stepped_memory(model, batch, end: int):
    """The reference: the utterances before `end` stepped one at a time."""
    memory = model.empty_memory(1)
    for t in range(end):
        _, memory, _ = model.step(batch.steps[t], t, batch.speakers[:, t], memory)
    return memory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--turns", type=counts, default="50,200")
    parser.add_argument("--repeats", type=count, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    try:
        model, tokenizer, run = erc.load_trained(args.checkpoint)
    except (DialogueError, CheckpointError) as e:  # not a run folder, no checkpoint, one that does not load
        parser.error(f"--checkpoint {args.checkpoint}: {e}")
    if not isinstance(model, DialogXL):
        parser.error(f"--checkpoint {args.checkpoint}: a {type(model).__name__} run; the attention view needs a DialogXL run")
    test = erc.EmotionRecognition().load_data(run["recipe"], only=["test"])["test"]
    turns = [turn for dialogue in test for turn in dialogue.turns]
    rows = []
    for n in args.turns:
        dialogue = Dialogue(tuple(turns[:n]), id=f"joined-{n}")
        times = {"one_at_a_time": [], "chunks": []}
        views = {}
        for _ in range(args.repeats):
            for name in times:
                original = model.memory_after
                if name == "one_at_a_time":
                    model.memory_after = lambda batch, end: stepped_memory(model, batch, end)
                start = time.perf_counter()
                views[name] = erc.attention_view(model, tokenizer, dialogue, n - 1)
                times[name].append(time.perf_counter() - start)
                model.memory_after = original
        difference = max(abs(a - b) for kind in views["chunks"].weights
                         for a, b in zip(views["chunks"].weights[kind], views["one_at_a_time"].weights[kind]))
        row = {"turns": n, "seconds": {k: min(v) for k, v in times.items()}, "all_seconds": times,
               "largest_weight_difference": difference, "keys": len(views["chunks"].tokens)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    recipe, longest = run["recipe"], rows[-1]["seconds"]
    record = make_result(
        "attention-view-speed", task="erc", dataset=recipe["dataset"], split="test", model=recipe["model"],
        backbone=recipe["backbone"], metric="speedup", scores=[longest["one_at_a_time"] / longest["chunks"]],
        seeds=[run.get("seed", 0)], config={"turns": args.turns, "repeats": args.repeats, "threads": torch.get_num_threads(),
                                             "mem_len": model.config.mem_len, "chunk_tokens": model.config.chunk_tokens,
                                             # the time does not depend on what the weights learnt
                                             "checkpoint": {"recipe": Path(recipe.get("recipe_path", "?")).stem, "limits": run.get("limits"),
                                                            "epochs": recipe["train"]["epochs"]}},
        extra={"rows": rows}, command="python benchmarks/attention_view_speed.py " + " ".join(sys.argv[1:]))
    print(f"wrote {write_result(record)}")

if __name__ == "__main__":
    main()
