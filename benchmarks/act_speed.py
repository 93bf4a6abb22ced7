"""Speed of the dialogue-act models on CPU, every figure measured against a reference in the same run.

    python benchmarks/act_speed.py timing     [--lengths 10,25,50,100,200,400] [--repeats 30] [--threads 1]
    python benchmarks/act_speed.py throughput [--batches 12] [--utterances 60] [--threads 1]

``timing`` -> ``dialogue-act-prediction-time.json`` and ``docs/dialogue-act-prediction-time.png`` (the LC
Attention paper's Table 2, measured): the time of the context layer alone (the paper leaves out the
utterance encoder) on a sub-dialogue of n utterance vectors, offline (every utterance labelled) and
online (the newest utterance labelled from the n - 1 before it), for the bidirectional LSTM context
(``lstm-blstm``), plain attention (``lstm-attention``) and LC Attention (``lc-attention``). Online,
attention computes one query row (`LCAttentionModel.contextualise_at`), the BLSTM must run over the
whole sub-dialogue. Median of ``--repeats``; the models are randomly initialised (seeded, the recipes'
sizes, ``max_positions`` raised to the longest n): timing does not depend on training.

``throughput`` -> ``dialogue-act-throughput.json``: training throughput (predicted utterances per second
of full training steps: forward, backward, AdamW) of the four models on real DailyDialog training
batches built as their recipes build them, and the online latency per utterance of
`DialogueActSession` (tokenising, encoding the utterance, the context layer) on real test
conversations; each model's figures also as a ratio to the single-utterance LSTM's, measured in the
same run, batch by batch in turn.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from _timing import count, counts, timed_train_step
from turnformer.models.lc_attention import MODEL_IDS, LCAttentionModel, LCConfig
from turnformer.results import DOCS_DIR, make_result, shown_path, write_result

PLOT = DOCS_DIR / "dialogue-act-prediction-time.png"
TIMED = ("lstm-blstm", "lstm-attention", "lc-attention")


def _median_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


@torch.no_grad()
def timing(lengths: list[int], repeats: int) -> dict:
    result = {m: {"offline_ms": [], "online_ms": []} for m in TIMED}
    for model_id in TIMED:
        torch.manual_seed(0)
        model = LCAttentionModel(LCConfig(num_labels=41, context=model_id, vocab_size=8, max_positions=max(lengths))).eval()
        for n in lengths:
            vectors = torch.randn(1, n, model.config.hidden)
            mask = torch.ones(1, n, dtype=torch.bool)
            last = torch.tensor([n - 1])
            result[model_id]["offline_ms"].append(_median_ms(lambda: model.contextualise(vectors, mask), repeats))
            result[model_id]["online_ms"].append(_median_ms(lambda: model.contextualise_at(vectors, mask, last), repeats))
    return result


def plot(lengths: list[int], result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for model_id, colour in zip(TIMED, ("tab:blue", "tab:orange", "tab:green")):
        ax.plot(lengths, result[model_id]["offline_ms"], "-o", color=colour, label=f"{model_id} offline")
        ax.plot(lengths, result[model_id]["online_ms"], "--s", color=colour, label=f"{model_id} online")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("utterances in the sub-dialogue (n)")
    ax.set_ylabel("context layer time (ms, median)")
    ax.set_title("Dialogue-act context layer: offline vs online prediction")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def throughput(n_batches: int, n_utterances: int, data_dir=None) -> dict:
    from turnformer.data import load_split
    from turnformer.recipes import find_recipe, load_recipe
    from turnformer.tasks.dialogue_act import DialogueActSession, prepare_dialogue_act

    models, batches = {}, {}
    for model_id in MODEL_IDS:
        recipe = load_recipe(find_recipe("dialogue-act", model_id, "dailydialog"))
        torch.manual_seed(0)
        model, tokenizer, labels, prepared, _ = prepare_dialogue_act(recipe, data_dir, {"validation": 1, "test": 1})
        train = prepared["train"]["offline"]
        step = max(1, len(train) // n_batches)
        batches[model_id] = train[::step][:n_batches]
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        models[model_id] = (model, tokenizer, labels, optimizer, int(recipe.get("context_padding", 0)))

    def train_step(model_id, batch) -> float:
        model, _, _, optimizer, _ = models[model_id]
        return timed_train_step(model, optimizer, batch)

    spent = dict.fromkeys(MODEL_IDS, 0.0)
    for model_id in MODEL_IDS:
        train_step(model_id, batches[model_id][0])  # warm-up
    for i in range(n_batches):
        order = list(MODEL_IDS) if i % 2 == 0 else list(reversed(MODEL_IDS))
        for model_id in order:
            spent[model_id] += train_step(model_id, batches[model_id][i])
    targets = {m: sum(int(b.target.sum()) for b in batches[m]) for m in MODEL_IDS}
    train_rate = {m: targets[m] / spent[m] for m in MODEL_IDS}
    # What the fine-tuned MiniLM's sorted chunks save: the same steps with each batch through the backbone at once,
    # padded to its longest utterance, alternating with the chunked steps.
    minilm, chunked_fn = models["minilm-utterance"][0], models["minilm-utterance"][0]._encode_pretrained
    chunking = {"sorted chunks of 8": 0.0, "one padded batch": 0.0}
    for i, batch in enumerate(batches["minilm-utterance"]):
        for way in (chunking if i % 2 == 0 else reversed(chunking)):
            minilm._encode_pretrained = chunked_fn if way == "sorted chunks of 8" else (lambda t: chunked_fn(t, chunk=len(t)))
            chunking[way] += train_step("minilm-utterance", batch)
    minilm._encode_pretrained = chunked_fn

    turns = [t for d in load_split("dailydialog", "test", data_dir).dialogues for t in d.turns][:n_utterances]
    latency = {}
    for model_id in MODEL_IDS:
        model, tokenizer, labels, _, padding = models[model_id]
        session = DialogueActSession(model, tokenizer, labels, padding)
        times = []
        for turn in turns:
            start = time.perf_counter()
            session.add(turn.speaker, turn.text)
            times.append(time.perf_counter() - start)
        latency[model_id] = 1000 * statistics.median(times[5:])
    return {
        "train_utterances_per_second": train_rate, "train_seconds": spent, "train_target_utterances": targets,
        "train_rate_vs_lstm": {m: train_rate[m] / train_rate["lstm"] for m in MODEL_IDS},
        "online_latency_ms": latency, "online_latency_vs_lstm": {m: latency[m] / latency["lstm"] for m in MODEL_IDS},
        "minilm_step_seconds": chunking, "minilm_chunking_speedup": chunking["one padded batch"] / chunking["sorted chunks of 8"],
        "batches": n_batches, "utterances": len(turns),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("timing", "throughput"))
    parser.add_argument("--lengths", type=counts, default="10,25,50,100,200,400")
    parser.add_argument("--repeats", type=count, default=30)
    parser.add_argument("--batches", type=count, default=12)
    parser.add_argument("--utterances", type=count, default=60)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    common = {"task": "dialogue-act", "split": "-", "seeds": [0], "backbone": "all-MiniLM-L6-v2 (vocabulary and embeddings)"}

    if args.what == "timing":
        lengths = args.lengths
        result = timing(lengths, args.repeats)
        plot(lengths, result, PLOT)
        ratio = result["lstm-blstm"]["online_ms"][-1] / result["lc-attention"]["online_ms"][-1]
        record = make_result(
            "dialogue-act-prediction-time", dataset="synthetic utterance vectors", model="lc-attention",
            metric=f"online_time_ratio_blstm_vs_lc_attention_at_{lengths[-1]}", scores=[ratio],
            config={"lengths": lengths, "repeats": args.repeats, "threads": args.threads, "hidden": 256, "heads": 4},
            extra={"lengths": lengths, **{f"{m}_{k}": v for m, r in result.items() for k, v in r.items()}, "plot": shown_path(PLOT)}, **common,
        )
        for m, r in result.items():
            print(f"{m}: offline {[round(x, 2) for x in r['offline_ms']]} ms, online {[round(x, 2) for x in r['online_ms']]} ms")
        print(f"online, n = {lengths[-1]}: BLSTM / LC Attention = {ratio:.1f} -> {write_result(record)}, {PLOT}")
        return

    result = throughput(args.batches, args.utterances, args.data_dir)
    record = make_result(
        "dialogue-act-throughput", dataset="dailydialog", model="lc-attention",
        metric="train_throughput_ratio_lc_attention_vs_lstm", scores=[result["train_rate_vs_lstm"]["lc-attention"]],
        config={"batches": args.batches, "utterances": args.utterances, "threads": args.threads}, extra=result, **common,
    )
    for m in MODEL_IDS:
        print(f"{m}: training {result['train_utterances_per_second'][m]:.0f} utterances/s, "
              f"online {result['online_latency_ms'][m]:.2f} ms per utterance")
    print(f"minilm-utterance: sorted chunks make a training step {result['minilm_chunking_speedup']:.2f}x faster")
    print(f"-> {write_result(record)}")


if __name__ == "__main__":
    main()
