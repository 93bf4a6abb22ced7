"""Greedy decoding with the model's key/value cache (each step reads the newest token: the GPT-2-style decoder's
`CachedSteps`, the encoder-decoders' `CachedDecoderSteps`) against decoding the whole response (and, for the GPT-2-style
decoder, the context) at every step (`WholeSteps`, as before), side by side on a trained checkpoint.

    python benchmarks/decoding_speed.py --checkpoint RUN [--instances 512] [--repeats 2] [--threads 1]

The first ``--instances`` test instances of the checkpoint's data, in the batches its evaluation decodes (its eval
batch size, in the data's order), decoded to the recipe's response length; the two ways take turns, repeat by repeat.
Writes benchmarks/results/decoding-speed-MODEL.json: the speed-up (the fastest repeat of each) as the score, both
times, and whether the replies are the same.
"""

from __future__ import annotations

import argparse
import time

import torch

from _timing import count
from turnformer.dialogue import DialogueError
from turnformer.errors import CheckpointError
from turnformer.models.generator_base import GeneratorBase, WholeSteps
from turnformer.results import make_result, write_result
from turnformer.tasks.generation import eval_batch_size, instance_batches, load_trained, split_instances


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="a run folder of a word generator that decodes with a cache")
    parser.add_argument("--instances", type=count, default=512)
    parser.add_argument("--repeats", type=count, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    try:
        model, vocab, run = load_trained(args.checkpoint)
    except (DialogueError, CheckpointError) as e:  # not a run folder, no checkpoint, one that does not load
        parser.error(f"--checkpoint {args.checkpoint}: {e}")
    kind = type(model)
    if not isinstance(model, GeneratorBase) or kind.stepper is GeneratorBase.stepper:
        raise SystemExit(f"{args.checkpoint}: a {kind.__name__}, which decodes without a cache")
    instances = split_instances(run, "test", args.data_dir)[: args.instances]
    batches = instance_batches(model, instances, vocab, eval_batch_size(run), sort_by_length=False)
    cached_stepper, own = kind.stepper, kind.__dict__.get("stepper")
    whole = lambda self, state: WholeSteps(self, state)  # noqa: E731

    def decode(stepper) -> tuple[float, list]:
        kind.stepper = stepper
        start = time.perf_counter()
        replies = [reply for batch in batches for reply in model.generate(batch)]
        return time.perf_counter() - start, replies

    times = {"cached": [], "whole": []}
    replies = {}
    try:
        for repeat in range(args.repeats):
            for name in (("cached", "whole") if repeat % 2 == 0 else ("whole", "cached")):
                seconds, replies[name] = decode(cached_stepper if name == "cached" else whole)
                times[name].append(round(seconds, 2))
                print(f"repeat {repeat + 1}, {name}: {seconds:.1f} s", flush=True)
    finally:
        if own is None:
            del kind.stepper  # inherited again
        else:
            kind.stepper = own
    speedup = min(times["whole"]) / min(times["cached"])
    recipe = run["recipe"]
    record = make_result(
        f"decoding-speed-{recipe['model']}", task="generation", dataset=recipe["dataset"], split="test", model=recipe["model"],
        backbone="none (trained from scratch)", metric="speedup", scores=[speedup], seeds=[run.get("seed", 1)],
        config=recipe.get("model_config", {}),
        extra={"seconds": times, "instances": len(instances), "batches": len(batches), "threads": args.threads,
               "same_replies": replies["cached"] == replies["whole"],
               "words_per_reply": sum(map(len, replies["cached"])) / len(instances),
               "note": f"greedy decoding with {kind.__name__}'s key/value cache against decoding the whole sequence at "
                       "every step"})
    print(f"{speedup:.2f}x, same replies: {record['extra']['same_replies']} -> {write_result(record)}")


if __name__ == "__main__":
    main()
