"""SmolLM2-135M-Instruct, zero-shot, on the DailyDialog generation instances our generators are tested on.

    python benchmarks/generation_zeroshot.py [--eval-dialogues 100] [--limit 200] [--max-new-tokens 40] [--threads 2]

-> ``generation-dailydialog-smollm2-zeroshot-cpu.json``: word-level test perplexity (see
`turnformer.models.smollm2`), BLEU-1..4, Distinct-1/2 and the embedding metrics of its greedy replies, on the instances of the first
``--eval-dialogues`` test conversations (the ``generation-cpu`` plan's test set), the first ``--limit`` of them
(in conversation order). References and replies are mapped through the vocabulary of the plan's 1,000
training conversations (rare words -> [UNK]), as the trained models are scored. No training: one "seed".
"""

from __future__ import annotations

import argparse
import time

import torch

from turnformer.data import load_split
from turnformer.models.smollm2 import PRETRAINED, evaluate_pretrained_lm, load_smollm2
from turnformer.results import make_result, write_result
from turnformer.tasks.generation import Vocabulary, make_instances
from turnformer.tasks.generation_metrics import available_word_vectors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--eval-dialogues", type=int, default=100)
    parser.add_argument("--train-dialogues", type=int, default=1000, help="Conversations the vocabulary is built from.")
    parser.add_argument("--limit", type=int, default=None, help="Score only the first N instances.")
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    train = list(load_split("dailydialog", "train", args.data_dir).dialogues)
    vocab = Vocabulary.build(train[: args.train_dialogues])
    whole_test = list(load_split("dailydialog", "test", args.data_dir).dialogues)
    instances = make_instances(whole_test[: args.eval_dialogues])[: args.limit]
    # scored on part of the test split, or with a vocabulary of part of the training split: marked in the tables
    part = len(instances) < len(make_instances(whole_test)) or args.train_dialogues < len(train)
    subset = {"test_instances": len(instances), "vocabulary_from_train_dialogues": min(args.train_dialogues, len(train))}
    start = time.perf_counter()
    model, tokenizer = load_smollm2()
    loaded = time.perf_counter()
    metrics = evaluate_pretrained_lm(instances, model, tokenizer, args.batch_size, args.max_new_tokens, vocab=vocab,
                                     word_vectors=available_word_vectors())
    done = time.perf_counter()
    record = make_result(
        "generation-dailydialog-smollm2-zeroshot-cpu", task="generation", dataset="dailydialog", split="test",
        model="smollm2-zeroshot", metric="perplexity", scores=[metrics["perplexity"]], seeds=[0],
        backbone=PRETRAINED,
        config={"eval_dialogues": args.eval_dialogues, "instances": len(instances), "max_new_tokens": args.max_new_tokens,
                "vocabulary_from_train_dialogues": args.train_dialogues, "threads": args.threads},
        extra={**{k: v for k, v in metrics.items() if k.startswith(("bleu", "distinct", "embedding"))}, "sample": metrics["sample"],
               "load_seconds": loaded - start, "seconds_per_instance": (done - loaded) / len(instances),
               "note": "zero-shot; perplexity per our word (+ end of turn), see turnformer.models.smollm2",
               **({"subset": subset} if part else {})},
    )
    print(f"perplexity {metrics['perplexity']:.2f}, BLEU-1 {metrics['bleu_1']:.2f}, Distinct-2 {metrics['distinct_2']:.2f} "
          f"-> {write_result(record)}")


if __name__ == "__main__":
    main()
