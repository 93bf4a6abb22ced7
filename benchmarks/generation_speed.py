"""Training throughput and decoding latency of every response generator against the Transformer baseline,
measured in the same run, and DRA's parse time per dialogue beside its generation time (DRA's Table 4).

    python benchmarks/generation_speed.py [--batches 6] [--repeats 3] [--threads 1] [--d-model 128] [--layers 2]

-> ``generation-speed.json``: for each model, training tokens per second (forward, backward, AdamW step on the
same DailyDialog training batches: ``--batches`` batches of 32 instances evenly spaced over the length-sorted
data; tokens = the real context and response tokens) and greedy decoding latency per response (one
instance at a time, ``--decode`` test instances, exactly ``--words`` words each: untrained models rarely stop
early, so every model decodes the same number of steps); the headline ratios are against the Transformer
(median repeat totals; the models take turns batch by batch, who goes first alternating). Also, for
Transformer+DRA on ``--parse-dialogues`` test conversations: seconds of spaCy parsing per conversation (no
cache) and seconds of greedy generation of all its responses. Weights are random (seeded): speed does not
depend on training. The sizes are the CPU experiments' (``--d-model``, ``--layers``; the GPT-2-style decoder
gets twice the layers, as deep as encoder plus decoder).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from _timing import count, timed_train_step
from turnformer.data import load_split
from turnformer.parsing import DependencyParser
from turnformer.results import make_result, write_result
from turnformer.tasks.generation import (build_generator, encode_instances, make_generation_batches, make_instances,
                                         Vocabulary)

MODELS = ("transformer", "transformer-dra", "dialogbert", "dialogbert-dra", "phaed", "gpt2-scratch")
SETTINGS = {"dialogbert-dra": {"dra": True}}  # what makes the model its id names (its recipe's setting)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=count, default=6)
    parser.add_argument("--repeats", type=count, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--decode", type=int, default=10, help="Test instances decoded one at a time per model.")
    parser.add_argument("--words", type=int, default=20, help="Words generated per response.")
    parser.add_argument("--parse-dialogues", type=int, default=20)
    parser.add_argument("--train-dialogues", type=int, default=1000)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    train = list(load_split("dailydialog", "train", args.data_dir).dialogues)[: args.train_dialogues]
    test = list(load_split("dailydialog", "test", args.data_dir).dialogues)
    vocab = Vocabulary.build(train)
    instances, test_instances = make_instances(train), make_instances(test)
    spacy_parser = DependencyParser(cache_path=False)
    models, batches, decode_batches = {}, {}, {}
    for model_id in MODELS:
        torch.manual_seed(0)
        settings = {"d_model": args.d_model, "heads": 4, "ff": 4 * args.d_model,
                    "layers": args.layers * (2 if model_id == "gpt2-scratch" else 1), "max_response_words": args.words,
                    **SETTINGS.get(model_id, {})}
        model = build_generator(model_id, settings, vocab)
        models[model_id] = (model, torch.optim.AdamW(model.parameters(), lr=1e-4))
        encoded = encode_instances(instances, vocab, model, spacy_parser)
        every = make_generation_batches(encoded, 32)
        batches[model_id] = every[:: max(1, len(every) // args.batches)][: args.batches]
        decode_batches[model_id] = make_generation_batches(encode_instances(test_instances[: args.decode], vocab, model, spacy_parser), 1,
                                                           sort_by_length=False)
    tokens = sum(int(b.context.ne(0).sum() + b.response_in.ne(0).sum()) for b in batches["transformer"])

    def train_step(model_id, batch) -> float:
        return timed_train_step(*models[model_id], batch)

    def decode_all(model_id) -> float:
        model = models[model_id][0].eval()
        eos, model.eou_id = model.eou_id, -1  # no early stop: every model decodes --words words
        start = time.perf_counter()
        for batch in decode_batches[model_id]:
            model.generate(batch, args.words)
        model.eou_id = eos
        return time.perf_counter() - start

    for model_id in MODELS:  # warm-up
        train_step(model_id, batches[model_id][0])
    train_totals = {m: [] for m in MODELS}
    decode_totals = {m: [] for m in MODELS}
    for repeat in range(args.repeats):
        spent = dict.fromkeys(MODELS, 0.0)
        for i in range(args.batches):
            order = MODELS if (i + repeat) % 2 == 0 else tuple(reversed(MODELS))
            for model_id in order:
                spent[model_id] += train_step(model_id, batches[model_id][i])
        for model_id in (MODELS if repeat % 2 == 0 else tuple(reversed(MODELS))):
            train_totals[model_id].append(spent[model_id])
            decode_totals[model_id].append(decode_all(model_id))
    tokens_per_second = {m: tokens / statistics.median(t) for m, t in train_totals.items()}
    latency = {m: statistics.median(t) / args.decode for m, t in decode_totals.items()}
    throughput_ratio = {m: tokens_per_second[m] / tokens_per_second["transformer"] for m in MODELS}
    latency_ratio = {m: latency[m] / latency["transformer"] for m in MODELS}

    # DRA's Table 4: parsing a conversation's utterances (no cache) against generating its responses
    parse_seconds, generate_seconds = [], []
    model = models["transformer-dra"][0].eval()
    for dialogue in test[: args.parse_dialogues]:
        fresh = DependencyParser(cache_path=False)
        dialogue_instances = make_instances([dialogue])
        start = time.perf_counter()
        fresh.parse_many(sorted({u.words for x in dialogue_instances for u in (*x.context, x.response)}))
        parse_seconds.append(time.perf_counter() - start)
        start = time.perf_counter()
        for batch in make_generation_batches(encode_instances(dialogue_instances, vocab, model, fresh), 64):
            model.generate(batch, args.words)
        generate_seconds.append(time.perf_counter() - start)

    record = make_result(
        "generation-speed", task="generation", dataset="dailydialog", split="train", model="all generators",
        metric="training_throughput_ratio_phaed_vs_transformer", scores=[throughput_ratio["phaed"]], seeds=[0],
        backbone="none (random weights)",
        config={"d_model": args.d_model, "layers": args.layers, "batch_size": 32, "batches": args.batches, "tokens": tokens,
                "repeats": args.repeats, "threads": args.threads, "decode_instances": args.decode, "words": args.words,
                "vocabulary": len(vocab)},
        extra={"training_tokens_per_second": tokens_per_second, "training_throughput_ratio_vs_transformer": throughput_ratio,
               "decoding_seconds_per_response": latency, "decoding_latency_ratio_vs_transformer": latency_ratio,
               "dra_parse_seconds_per_dialogue": statistics.fmean(parse_seconds),
               "dra_generation_seconds_per_dialogue": statistics.fmean(generate_seconds),
               "parse_dialogues": len(parse_seconds)},
    )
    for m in MODELS:
        print(f"{m:16s} {tokens_per_second[m]:8.0f} tokens/s (x{throughput_ratio[m]:.2f})  "
              f"{latency[m] * 1000:7.1f} ms/response (x{latency_ratio[m]:.2f})")
    print(f"DRA: parse {statistics.fmean(parse_seconds):.3f} s, generate {statistics.fmean(generate_seconds):.3f} s per dialogue "
          f"-> {write_result(record)}")


if __name__ == "__main__":
    main()
