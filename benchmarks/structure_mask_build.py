"""Time to build the four DialogXL head masks for a batch, vectorised vs a per-token-pair Python
reference, measured in the same run (and checked equal).

    python benchmarks/structure_mask_build.py [--batch 32] [--length 512] [--repeats 20]

Dialogues are synthetic and seeded: utterances of 5-30 tokens from 2-4 speakers filling exactly
``length`` tokens (the cost depends on the shape, not on the words). Head layout: MELD's official
counts (local 5, global 5, speaker 1, listener 1; window 5), structure on memory keys only.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from _timing import count
from turnformer.results import make_result, write_result
from turnformer.structure import TokenMeta, dialogxl_layout
from turnformer.structure.reference import reference_dialogxl_masks

COUNTS, WINDOW = (5, 5, 1, 1), 5


def synthetic_meta(batch: int, length: int, seed: int) -> TokenMeta:
    rng = random.Random(seed)
    utterances, speakers = [], []
    for _ in range(batch):
        n_speakers = rng.randint(2, 4)
        utt, spk, u = [], [], 0
        while len(utt) < length:
            n = rng.randint(5, 30)
            utt += [u] * n
            spk += [rng.randrange(n_speakers)] * n
            u += 1
        utterances.append(utt[:length])
        speakers.append(spk[:length])
    return TokenMeta.from_lists(utterances, speakers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=count, default=32)
    parser.add_argument("--length", type=count, default=512)
    parser.add_argument("--repeats", type=count, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(2)
    meta = synthetic_meta(args.batch, args.length, args.seed)
    layout = dialogxl_layout(*COUNTS, window=WINDOW)

    layout.build(meta, meta)  # warm-up
    vectorised = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        masks = layout.build(meta, meta)
        vectorised.append(time.perf_counter() - start)

    start = time.perf_counter()
    reference = reference_dialogxl_masks(meta, meta, COUNTS, WINDOW)
    reference_seconds = time.perf_counter() - start
    if masks.tolist() != reference:
        raise SystemExit("vectorised masks differ from the reference")

    vectorised_seconds = statistics.median(vectorised)
    ratio = reference_seconds / vectorised_seconds
    record = make_result(
        "structure-mask-build", task="structure", dataset="synthetic", split="-", model="dialogxl-head-masks",
        metric="speedup_vs_python_reference", scores=[ratio], seeds=[args.seed],
        config={"batch": args.batch, "length": args.length, "heads": list(COUNTS), "window": WINDOW, "repeats": args.repeats},
        extra={
            "vectorised_seconds_median": vectorised_seconds,
            "vectorised_seconds_all": vectorised,
            "reference_seconds": reference_seconds,
            "mask_shape": list(masks.shape),
            "equal_to_reference": True,
        },
    )
    path = write_result(record)
    print(f"vectorised {vectorised_seconds * 1e3:.1f} ms, reference {reference_seconds:.1f} s, speedup {ratio:.0f}x -> {path}")


if __name__ == "__main__":
    main()
