"""DialogXL's speed on CPU, each side measured against its reference in the same run.

    python benchmarks/erc_speed.py training  [--batches 16] [--repeats 3] [--threads 1]
    python benchmarks/erc_speed.py streaming [--lengths 10,50,200,1000] [--repeats 5] [--threads 1]

``training`` -> ``erc-training-overhead.json``: query tokens per second of one training step
(forward, backward, AdamW step) of DialogXL (the MELD recipe: heads 5,5,1,1, window 5, mem_len 400)
on real MELD training conversations, batched as training batches them (`encode_conversations`,
`make_batches`, batch size 4), against the bare backbone on exactly the same step tensors: each
utterance alone (no memory, no mask beyond padding), the same classifier, loss and optimizer step.
``--batches`` batches evenly spaced over the length-sorted list stand for the epoch. The two
sides alternate batch by batch (who goes first alternates too) in every repeat; the headline is
bare tokens/s / DialogXL tokens/s from the median repeat totals (target: at most 1.5).

``streaming`` -> ``erc-streaming-latency.json`` and ``docs/erc-streaming-latency.png``: the time
to label the utterance that arrives when a conversation reaches each length: DialogXL's streaming
session (`DialogXLSession.add`: tokenise, one step against the bounded memory) against the
ConcatContext baseline, which re-encodes ``[CLS] u_0 [SEP] ... u_t [SEP]`` truncated oldest-first
to 512 tokens for that utterance (tokenising only the new utterance; older ones are kept as ids).
The conversation chains real MELD utterances, dialogue after dialogue, speakers kept. Each timed
utterance is repeated from the same state; the median is reported.

Classifier heads are randomly initialised (seeded): speed does not depend on training. Torch
runs on ``--threads`` threads (default 1: on a machine shared with other jobs, more threads
than free cores makes every matrix product wait for the slowest thread).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import count, counts, spread  # noqa: E402
from turnformer.backbones import load_backbone  # noqa: E402
from turnformer.dialogue import Dialogue  # noqa: E402
from turnformer.models.baselines import ConcatContext, ConcatContextConfig  # noqa: E402
from turnformer.models.dialogxl import ConversationBatch, DialogXL, DialogXLConfig, DialogXLSession  # noqa: E402
from turnformer.plots import save_figure  # noqa: E402
from turnformer.results import DOCS_DIR, make_result, shown_path, write_result  # noqa: E402
from turnformer.structure import pack_token_ids  # noqa: E402
from turnformer.training import build_optimizer  # noqa: E402

BACKBONE = "all-MiniLM-L6-v2"
RANDOM_HEADS = "classifier heads randomly initialised (seeded): speed does not depend on training"


# --------------------------------------------------------------------------------------------
# Training throughput


def bare_loss(model: DialogXL, batch: ConversationBatch) -> torch.Tensor:
    """DialogXL's loss with the bare backbone: every step's utterances encoded alone, padding masked."""
    logits = [
        model.classifier(model.cls_states(model.encoder(ids, attention_mask=ids != model.pad_id).last_hidden_state, ids))
        for ids in batch.steps
    ]
    return nn.functional.cross_entropy(torch.stack(logits, 1).flatten(0, 1), batch.labels.flatten(), ignore_index=-100)


def timed_step(loss_fn, optimizer, batch) -> tuple[float, float]:
    """(forward + backward seconds, optimizer step seconds) of one training step."""
    optimizer.zero_grad(set_to_none=True)
    start = time.perf_counter()
    loss_fn(batch).backward()
    middle = time.perf_counter()
    optimizer.step()
    return middle - start, time.perf_counter() - middle


def query_tokens(batch: ConversationBatch, pad_id: int) -> int:
    return sum(int((ids != pad_id).sum()) for ids in batch.steps)


def training_overhead(model: DialogXL, batches: Sequence[ConversationBatch], repeats: int, lr: float = 2e-5) -> dict:
    """Interleaved training-step timings of DialogXL and of the bare backbone on ``batches``."""
    model.train()
    optimizer = build_optimizer(model, lr, 0.01)
    sides = {"dialogxl": model.loss, "bare": lambda b: bare_loss(model, b)}
    for loss_fn in sides.values():  # warm-up
        timed_step(loss_fn, optimizer, batches[0])
    raw = {side: [] for side in sides}  # per repeat: per batch [forward+backward, optimizer]
    for r in range(repeats):
        for side in raw:
            raw[side].append([])
        for i, batch in enumerate(batches):
            order = list(sides) if (r + i) % 2 == 0 else list(sides)[::-1]
            for side in order:
                raw[side][r].append(timed_step(sides[side], optimizer, batch))
    tokens = sum(query_tokens(b, model.pad_id) for b in batches)
    out = {"query_tokens": tokens, "padded_query_slots": sum(b.numel() for batch in batches for b in batch.steps),
           "batches": len(batches), "utterance_steps": sum(len(b.steps) for b in batches), "repeats": repeats}
    for side, runs in raw.items():
        step = [sum(f + o for f, o in run) for run in runs]
        fwd_bwd = [sum(f for f, _ in run) for run in runs]
        out[side] = {
            "tokens_per_second": tokens / statistics.median(step),
            "forward_backward_tokens_per_second": tokens / statistics.median(fwd_bwd),
            "step_seconds_per_repeat": step,
            "forward_backward_seconds_per_repeat": fwd_bwd,
            "seconds_per_batch": [[round(f + o, 5) for f, o in run] for run in runs],
        }
    out["overhead"] = out["bare"]["tokens_per_second"] / out["dialogxl"]["tokens_per_second"]
    out["forward_backward_overhead"] = (
        out["bare"]["forward_backward_tokens_per_second"] / out["dialogxl"]["forward_backward_tokens_per_second"]
    )
    out["overhead_per_repeat"] = [d / b for d, b in zip(out["dialogxl"]["step_seconds_per_repeat"], out["bare"]["step_seconds_per_repeat"])]
    return out


# --------------------------------------------------------------------------------------------
# Streaming latency


def chain_turns(dialogues: Sequence[Dialogue], n: int) -> list[tuple[str, str]]:
    """The first ``n`` (speaker, text) turns of the dialogues read one after another."""
    turns = [(t.speaker, t.text) for d in dialogues for t in d.turns][:n]
    if len(turns) < n:
        raise ValueError(f"only {len(turns)} turns available, {n} wanted")
    return turns


class ConcatStream:
    """ConcatContext's work for each new utterance: the history kept as token ids, the new one
    tokenised, ``[CLS] u_0 [SEP] ... u_t [SEP]`` packed with oldest-first truncation to
    ``max_length`` and token types as `ConcatContext.build_inputs` sets them, then encoded whole."""

    def __init__(self, model: ConcatContext, tokenizer):
        self.model, self.tokenizer = model.eval(), tokenizer
        self.words: list[list[int]] = []
        self.speakers: list[int] = []
        self.names: dict[str, int] = {}
        self.last_length = 0

    def append(self, speaker: str, text: str) -> None:
        """Keep the utterance in the history without labelling it."""
        limit = self.model.config.max_utterance_tokens - 2
        self.words.append(self.tokenizer(text, add_special_tokens=False)["input_ids"][:limit])
        self.speakers.append(self.names.setdefault(speaker, len(self.names)))

    @torch.no_grad()
    def add(self, speaker: str, text: str) -> torch.Tensor:
        """Label a new utterance: class probabilities from the re-encoded history."""
        self.append(speaker, text)
        # Only the newest turns that can fit are packed: the same tokens as packing everything.
        max_length, kept, size = self.model.config.max_length, 0, 1
        while kept < len(self.words) and size < max_length:
            kept += 1
            size += len(self.words[-kept]) + 1
        packed = pack_token_ids([self.words], [self.speakers], self.model.special, max_length=max_length, max_turns=kept)
        real = packed.meta.is_real
        types = torch.zeros_like(packed.input_ids)
        if self.model.use_token_types:
            types = (packed.meta.utterance == len(self.words) - 1) & real
            types[:, 0] = False
            types = types.long()
        self.last_length = packed.input_ids.shape[1]
        out = self.model.encoder(packed.input_ids, token_type_ids=types, attention_mask=real)
        return self.model.classifier(out.last_hidden_state[:, 0]).softmax(-1)[0]

    def snapshot(self):
        return list(self.words), list(self.speakers), dict(self.names)

    def restore(self, state) -> None:
        self.words, self.speakers, self.names = list(state[0]), list(state[1]), dict(state[2])


class SessionState:
    """Save and restore a `DialogXLSession` (its memory is never modified in place)."""

    def __init__(self, session: DialogXLSession):
        self.session = session

    def snapshot(self):
        s = self.session
        return s.memory, dict(s.speakers), s.turn

    def restore(self, state) -> None:
        self.session.memory, self.session.speakers, self.session.turn = state[0], dict(state[1]), state[2]


def timed_add(stream, state, speaker: str, text: str, repeats: int) -> list[float]:
    """Seconds of ``stream.add(speaker, text)``, ``repeats`` times from the same state (the state
    after the last call is kept, so the conversation goes on as if it had been added once)."""
    saved = state.snapshot()
    times = []
    for _ in range(repeats):
        state.restore(saved)
        start = time.perf_counter()
        stream.add(speaker, text)
        times.append(time.perf_counter() - start)
    return times


def streaming_latency(dialogxl: DialogXL, concat: ConcatContext, tokenizer, labels: Sequence[str],
                      turns: Sequence[tuple[str, str]], lengths: Sequence[int], repeats: int) -> dict:
    """Per-utterance latency of both streams at each conversation length (milliseconds)."""
    session = DialogXLSession(dialogxl, tokenizer, labels)
    concat_stream = ConcatStream(concat, tokenizer)
    streams = {"dialogxl": (session, SessionState(session)), "concat": (concat_stream, concat_stream)}
    for stream, state in streams.values():  # warm-up, then start afresh
        saved = state.snapshot()
        stream.add(*turns[0])
        state.restore(saved)
    wanted = set(lengths)
    out = {"lengths": sorted(wanted), "repeats": repeats}
    for name in streams:
        out[name] = {"median_ms": [], "all_ms": []}
    out["dialogxl"]["memory_tokens"], out["concat"]["sequence_tokens"] = [], []
    for n, (speaker, text) in enumerate(turns[: max(wanted)], start=1):
        if n not in wanted:
            session.add(speaker, text)
            concat_stream.append(speaker, text)
            continue
        out["dialogxl"]["memory_tokens"].append(session.memory.length)  # what the new utterance attends to
        order = list(streams) if n % 2 else list(streams)[::-1]
        for name in order:
            ms = [1e3 * s for s in timed_add(*streams[name], speaker, text, repeats)]
            out[name]["all_ms"].append(ms)
            out[name]["median_ms"].append(statistics.median(ms))
        out["concat"]["sequence_tokens"].append(concat_stream.last_length)
    out["speedup"] = [c / d for c, d in zip(out["concat"]["median_ms"], out["dialogxl"]["median_ms"])]
    return out


def plot_latency(result: dict, out: str | Path) -> Path:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lengths = result["lengths"]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(lengths, result["concat"]["median_ms"], "o-",
            label=f"ConcatContext (re-encodes up to {max(result['concat']['sequence_tokens'])} tokens)")
    ax.plot(lengths, result["dialogxl"]["median_ms"], "s-", label=f"DialogXL session (memory up to {max(result['dialogxl']['memory_tokens'])} tokens)")
    for x, y, r in zip(lengths, result["dialogxl"]["median_ms"], result["speedup"]):
        ax.annotate(f"{r:.1f}x faster", (x, y), textcoords="offset points", xytext=(0, -14), ha="center", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.set_xlim(min(lengths) / 1.6, max(lengths) * 1.6)
    ax.set_ylim(min(result["dialogxl"]["median_ms"]) / 1.6, max(result["concat"]["median_ms"]) * 1.3)
    ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1, 2, 5)))
    ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("conversation length (utterances)")
    ax.set_ylabel("latency of the new utterance (ms, median)")
    ax.set_title("Streaming emotion recognition, all-MiniLM-L6-v2, CPU")
    ax.legend(fontsize=8, loc="center right")
    ax.grid(True, which="both", alpha=0.3)
    return save_figure(fig, out)


# --------------------------------------------------------------------------------------------
# Command line


def build_models(model_config: dict, labels: Sequence[str], seed: int):
    """DialogXL and ConcatContext sharing one pretrained backbone; classifier heads random (seeded)."""
    encoder, tokenizer = load_backbone(BACKBONE)
    ids = tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id
    torch.manual_seed(seed)
    config = DialogXLConfig.from_dict({**model_config, "num_labels": len(labels), "backbone": BACKBONE})
    dialogxl = DialogXL(config, encoder, *ids)
    concat = ConcatContext(ConcatContextConfig(num_labels=len(labels), backbone=BACKBONE), encoder, *ids)
    return dialogxl, concat, tokenizer


def main() -> None:
    from turnformer.data import load_split
    from turnformer.recipes import find_recipe, load_recipe
    from turnformer.tasks.erc import encode_conversations, make_batches

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=["training", "streaming"])
    parser.add_argument("--batches", type=int, default=16, help="training: batches evenly spaced over the epoch")
    parser.add_argument("--lengths", type=counts, default="10,50,200,1000", help="streaming: conversation lengths")
    parser.add_argument("--repeats", type=count, default=None, help="default: 3 (training), 5 (streaming)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--plot", default=str(DOCS_DIR / "erc-streaming-latency.png"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    recipe = load_recipe(find_recipe("erc", "dialogxl", "meld"))
    split = load_split("meld", "train", args.data_dir)
    labels = split.label_set(recipe.get("label_kind", "emotion"))
    dialogxl, concat, tokenizer = build_models(recipe["model_config"], labels, args.seed)
    batch_size = int(recipe["train"]["batch_size"])
    common = dict(task="erc", dataset="meld", split="train", model="dialogxl", backbone=BACKBONE, seeds=[args.seed])
    config = {**dialogxl.config.to_dict(), "threads": args.threads}

    if args.part == "training":
        encoded, _ = encode_conversations(split.dialogues, tokenizer, recipe.get("label_kind", "emotion"), labels,
                                          dialogxl.config.max_utterance_tokens)
        all_batches = make_batches(encoded, batch_size, tokenizer.pad_token_id)
        batches = spread(all_batches, args.batches)
        start = time.perf_counter()
        result = training_overhead(dialogxl, batches, args.repeats or 3, lr=float(recipe["train"]["lr"]))
        result["seconds"] = time.perf_counter() - start
        result["batches_of_epoch"] = len(all_batches)
        result["note"] = RANDOM_HEADS + "; bare = the same encoder, classifier, loss and AdamW step on the same step tensors, each utterance alone"
        record = make_result(
            "erc-training-overhead", metric="training_overhead_vs_bare_backbone", scores=[result["overhead"]],
            config={**config, "batch_size": batch_size, "batches": len(batches), "repeats": result["repeats"]},
            extra={"target_at_most": 1.5, "dialogxl_tokens_per_second": result["dialogxl"]["tokens_per_second"],
                   "bare_tokens_per_second": result["bare"]["tokens_per_second"], **result}, **common,
        )
        print(f"DialogXL {result['dialogxl']['tokens_per_second']:.0f} tokens/s, bare backbone "
              f"{result['bare']['tokens_per_second']:.0f} tokens/s: overhead {result['overhead']:.2f} "
              f"(forward+backward only {result['forward_backward_overhead']:.2f}) -> {write_result(record)}")
        return

    lengths = args.lengths
    turns = chain_turns(split.dialogues, max(lengths))
    result = streaming_latency(dialogxl, concat, tokenizer, labels, turns, lengths, args.repeats or 5)
    result["speakers_in_chain"] = len({s for s, _ in turns})
    result["note"] = RANDOM_HEADS + "; the conversation chains MELD training dialogues in file order"
    plot = plot_latency(result, args.plot)
    curve = "; ".join(f"{n}: {d:.1f} vs {c:.1f}" for n, d, c in zip(result["lengths"], result["dialogxl"]["median_ms"], result["concat"]["median_ms"]))
    record = make_result(
        "erc-streaming-latency", metric="streaming_speedup_vs_concat", scores=[result["speedup"][-1]],
        config={**config, "concat_max_length": concat.config.max_length, "lengths": lengths, "repeats": result["repeats"]},
        extra={"at_length": max(lengths), "latency_ms_dialogxl_vs_concat": curve, "plot": shown_path(plot), **result}, **common,
    )
    print(f"DialogXL vs ConcatContext per new utterance (ms): {curve}; speedup at {max(lengths)}: "
          f"{result['speedup'][-1]:.1f}x -> {write_result(record)}, {plot}")


if __name__ == "__main__":
    main()
