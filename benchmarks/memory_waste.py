"""Memory waste of segment recurrence vs DialogXL's utterance recurrence on a real dataset split,
from token counts alone (no network is run).

    python benchmarks/memory_waste.py [--dataset meld] [--split train] [--data-dir DIR]
                                      [--segment-len 64] [--mem-len 400] [--batch-size 4]
    python benchmarks/memory_waste.py --dataset swda --mem-lens 100,200,300,400,500,600,700,800,900,1000

The DialogXL paper says that over 60% of XLNet's memory holds padding on ERC data. This script
counts, for every step whose memory is non-empty, the share of memory slots ([batch, memory
length]) holding padding, exactly as the models store them (`turnformer.models.baselines`; a unit
test checks the counts against the models' own measurements):

- segment recurrence (`SegmentRecurrence`): each conversation is one stream ``u_0 [SEP] u_1 [SEP]
  ...`` cut into ``--segment-len`` segments, the batch's conversations run in lock-step, the last
  segment of each is padded and finished conversations are all padding; memory = the newest
  ``--mem-len`` slots, padding included;
- utterance recurrence (DialogXL): memory keeps each conversation's newest ``--utterance-mem-len``
  non-special tokens without padding; padding appears only when conversations of one batch hold
  different numbers of tokens (never with batch size 1).

Also reported (in ``extra``): XLNet-style memory with one utterance per segment, i.e. DialogXL's
batching (utterance t of every conversation, padded to the longest, special tokens included) but
with XLNet's memory that keeps everything; and how many ConcatContext rows exceed ``--max-length``.

Batches are formed as in training (`turnformer.tasks.erc.make_batches`: conversations sorted by
number of tokens, then of turns, then cut into batches; the results files of before 2026-11-30 sorted them
by turns); ``extra.batches_in_data_order`` repeats the three batched measures with batches taken in the
split's own order, as the paper batches. Utterances are tokenised with the all-MiniLM-L6-v2 tokenizer and cut at ``--max-utterance-tokens`` as `encode_conversations` does. The headline score
is the segment-recurrence waste in percent, averaged over steps; pooled shares are in ``extra``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from turnformer.backbones import load_tokenizer
from turnformer.data import load_split
from turnformer.dialogue import DialogueError
from turnformer.models.baselines import (
    WasteStats,
    segment_recurrence_waste_counts,
    strip_special,
    utterance_recurrence_waste_counts,
)
from turnformer.results import RESULTS_DIR, XLNET_MEMORY_WASTE_PERCENT, make_result, write_result

BACKBONE = "all-MiniLM-L6-v2"


def tokenize(dialogues, tokenizer, max_utterance_tokens: int) -> list[list[list[int]]]:
    """Turn ids ``[CLS] tokens [SEP]`` per dialogue, cut as `encode_conversations` cuts them."""
    texts = [t.text for d in dialogues for t in d.turns]
    flat = tokenizer(texts, add_special_tokens=True)["input_ids"] if texts else []
    out, k = [], 0
    for d in dialogues:
        turns = []
        for _ in d.turns:
            ids = flat[k]
            k += 1
            if len(ids) > max_utterance_tokens:
                ids = ids[: max_utterance_tokens - 1] + ids[-1:]
            turns.append(ids)
        out.append(turns)
    return out


def batches_like_training(conversations: list[list[list[int]]], batch_size: int) -> list[list[list[list[int]]]]:
    """`make_batches`' grouping: stable sort by number of tokens, then of turns; then consecutive batches."""
    ordered = sorted(conversations, key=lambda turns: (sum(map(len, turns)), len(turns)))
    return [ordered[i : i + batch_size] for i in range(0, len(ordered), batch_size)]


def batches_in_data_order(conversations: list[list[list[int]]], batch_size: int) -> list[list[list[list[int]]]]:
    """Consecutive batches in the split's own order (how the DialogXL paper batches)."""
    return [conversations[i : i + batch_size] for i in range(0, len(conversations), batch_size)]


def utterance_segment_waste_counts(batches, mem_len: int) -> WasteStats:
    """XLNet memory over DialogXL's steps: step t is utterance t of every conversation padded to the
    longest (special tokens included; finished conversations all padding); the memory read by a
    step is the newest ``mem_len`` columns of all earlier steps, padding included."""
    stats = WasteStats()
    for conversations in batches:
        steps = []  # (width, real tokens per row)
        for t in range(max(len(c) for c in conversations)):
            if steps:
                budget, padding, total = mem_len, 0, 0
                for width, real in reversed(steps):
                    if budget <= 0:
                        break
                    take = min(width, budget)  # the newest `take` columns of that step
                    padding += sum(take - max(0, n - (width - take)) for n in real)
                    total += take * len(real)
                    budget -= take
                stats.add(padding, total)
            real = [len(c[t]) if t < len(c) else 0 for c in conversations]
            steps.append((max(real), real))
    return stats


def concat_truncation(conversations, max_length: int, cls_id: int, sep_id: int, pad_id: int) -> dict:
    """ConcatContext rows ([CLS] u_0 [SEP] ... u_t [SEP]) longer than ``max_length``."""
    rows = cut_rows = cut_tokens = 0
    for turns in conversations:
        length = 1
        for ids in turns:
            length += len(strip_special(ids, cls_id, sep_id, pad_id)) + 1
            rows += 1
            if length > max_length:
                cut_rows += 1
                cut_tokens += length - max_length
    return {"rows": rows, "truncated_rows": cut_rows, "truncated_tokens": cut_tokens,
            "truncated_rows_percent": 100.0 * cut_rows / rows if rows else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="meld")
    parser.add_argument("--split", default=None, help="default: test for swda, train otherwise")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--segment-len", type=int, default=64)
    parser.add_argument("--mem-len", type=int, default=400, help="segment recurrence memory length")
    parser.add_argument("--utterance-mem-len", type=int, default=400, help="DialogXL memory length")
    parser.add_argument("--mem-lens", default=None, help="A sweep, e.g. 100,200,...,1000: both memories at each length, "
                        "written to memory-waste-DATASET-memN.json (DialogXL's Figure 4)")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-utterance-tokens", type=int, default=128)
    parser.add_argument("--max-length", type=int, default=512, help="ConcatContext sequence length")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args()
    split = args.split or ("test" if args.dataset == "swda" else "train")

    start = time.perf_counter()
    try:
        dialogues = list(load_split(args.dataset, split, args.data_dir).dialogues)
    except DialogueError as e:  # an unknown dataset, no data
        parser.error(f"--dataset {args.dataset}: {e}")
    tokenizer = load_tokenizer(BACKBONE)
    conversations = tokenize(dialogues, tokenizer, args.max_utterance_tokens)
    if args.mem_lens:  # the sweep of DialogXL's Figure 4: both memories at each length, one file each
        for mem_len in (int(m) for m in args.mem_lens.split(",")):
            measure(conversations, tokenizer, args, split, mem_len, mem_len, f"memory-waste-{args.dataset}-mem{mem_len}",
                    time.perf_counter())
    else:
        measure(conversations, tokenizer, args, split, args.mem_len, args.utterance_mem_len, f"memory-waste-{args.dataset}", start)


def measure(conversations, tokenizer, args, split: str, mem_len: int, utterance_mem_len: int, experiment: str,
            start: float) -> None:
    cls_id, sep_id, pad_id = tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id
    batched = batches_like_training(conversations, args.batch_size)
    single = batches_like_training(conversations, 1)

    pct = lambda x: 100.0 * x  # noqa: E731
    segment = segment_recurrence_waste_counts(batched, args.segment_len, mem_len, cls_id, sep_id, pad_id)
    segment1 = segment_recurrence_waste_counts(single, args.segment_len, mem_len, cls_id, sep_id, pad_id)
    utterance = utterance_recurrence_waste_counts(batched, utterance_mem_len, cls_id, sep_id)
    utterance1 = utterance_recurrence_waste_counts(single, utterance_mem_len, cls_id, sep_id)
    xlnet_steps = utterance_segment_waste_counts(batched, mem_len)
    in_order = batches_in_data_order(conversations, args.batch_size)
    data_order = {
        "segment_recurrence_percent": pct(segment_recurrence_waste_counts(in_order, args.segment_len, mem_len, cls_id, sep_id, pad_id).rate),
        "utterance_recurrence_percent": pct(utterance_recurrence_waste_counts(in_order, utterance_mem_len, cls_id, sep_id).rate),
        "xlnet_utterance_segments_percent": pct(utterance_segment_waste_counts(in_order, mem_len).rate),
    }
    concat = concat_truncation(conversations, args.max_length, cls_id, sep_id, pad_id)
    seconds = time.perf_counter() - start

    stream_lengths = [sum(len(strip_special(ids, cls_id, sep_id, pad_id)) + 1 for ids in c) for c in conversations]
    record = make_result(
        experiment, task="erc", dataset=args.dataset, split=split, model="segment-recurrence",
        metric="memory_waste_rate_percent", scores=[pct(segment.rate)], seeds=[0], backbone=BACKBONE, paper=XLNET_MEMORY_WASTE_PERCENT,
        config={"segment_len": args.segment_len, "mem_len": mem_len, "utterance_mem_len": utterance_mem_len,
                "batch_size": args.batch_size, "max_utterance_tokens": args.max_utterance_tokens,
                "max_length": args.max_length},
        extra={
            f"utterance_recurrence_percent_batch{args.batch_size}": pct(utterance.rate),
            "utterance_recurrence_percent_batch1": pct(utterance1.rate),
            "segment_recurrence_percent_batch1": pct(segment1.rate),
            "segment_recurrence_slot_percent": pct(segment.slot_rate),
            "utterance_recurrence_slot_percent": pct(utterance.slot_rate),
            "xlnet_utterance_segments_percent": pct(xlnet_steps.rate),
            "xlnet_utterance_segments_slot_percent": pct(xlnet_steps.slot_rate),
            "segment_len": args.segment_len, "mem_len": mem_len, "utterance_mem_len": utterance_mem_len,
            "batch_size": args.batch_size,
            "definition": "per step with a non-empty memory: padding slots / all slots of the [batch, memory] tensor "
                          "the step reads; *_percent = mean over steps, *_slot_percent = pooled over steps",
            "counts": {"segment": segment.to_dict(), "segment_batch1": segment1.to_dict(), "utterance": utterance.to_dict(),
                       "utterance_batch1": utterance1.to_dict(), "xlnet_utterance_segments": xlnet_steps.to_dict()},
            "dialogues": len(conversations), "utterances": sum(len(c) for c in conversations),
            "stream_tokens_mean": statistics.fmean(stream_lengths) if stream_lengths else 0.0,
            "stream_tokens_max": max(stream_lengths, default=0),
            "batches_in_data_order": data_order,
            "concat_context_truncation": concat,
            "seconds": seconds,
        },
    )
    path = write_result(record, args.results_dir)
    print(
        f"{args.dataset} {split}, memory {mem_len}: segment recurrence {pct(segment.rate):.1f}% (batch {args.batch_size}), "
        f"{pct(segment1.rate):.1f}% (batch 1); utterance recurrence {pct(utterance.rate):.1f}% (batch {args.batch_size}), "
        f"{pct(utterance1.rate):.1f}% (batch 1); XLNet memory over utterance steps {pct(xlnet_steps.rate):.1f}%; "
        f"{seconds:.1f} s -> {path}"
    )


if __name__ == "__main__":
    main()
