"""What LC Attention's Gaussian bias learned: the centre shift c_i - i and the width w_i (equations 5-7) of
every utterance of every validation sub-dialogue, per trained run.

    python benchmarks/act_bias.py --dataset dailydialog runs/da/dialogue-act-dailydialog-lc-attention/seed*

Sub-dialogues are consecutive runs of W + 2P utterances (the recipe's window with its context padding on both
sides), from the start of each conversation; a shorter conversation is one shorter sub-dialogue. Writes
``dialogue-act-lc-bias-DATASET.json``: the mean width per run (metric), with the shift and width
distributions in ``extra``. A width near D (``max_width``) would say the bias wanted more context than the
recipe allows; a width far below it, that the model chose to look close.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from tqdm import tqdm

from turnformer.data import load_split
from turnformer.dialogue import DialogueError
from turnformer.errors import CheckpointError
from turnformer.results import RESULTS_DIR, make_result, write_result
from turnformer.tasks.dialogue_act import encode_dialogues
from turnformer.tasks.registry import load_trained


@torch.no_grad()
def bias_statistics(run: Path, dataset: str, split: str, data_dir=None) -> dict:
    task, model, tokenizer, record = load_trained(run)
    if task.name != "dialogue-act" or record["recipe"]["model"] != "lc-attention":
        raise SystemExit(f"error: {run}: not an lc-attention dialogue-act run (a {record['recipe']['model']} run)")
    size = record["recipe"]["window"] + 2 * record["recipe"]["context_padding"]
    dialogues = load_split(dataset, split, data_dir).items
    model.eval()
    shifts, widths = [], []
    for dialogue in tqdm(dialogues, desc=run.name, leave=False):
        (ids,), _, _ = encode_dialogues([dialogue], tokenizer, [], model.config.max_utterance_tokens, label_kind="\0none")
        for start in range(0, len(ids), size):
            rows = ids[start : start + size]
            tokens = torch.full((len(rows), max(map(len, rows))), model.config.pad_id, dtype=torch.long)
            for i, row in enumerate(rows):
                tokens[i, : len(row)] = torch.tensor(row)
            vectors = model.encode_utterances(tokens).unsqueeze(0)
            centers, width = model.context.centers_and_widths(vectors, torch.ones(1, len(rows), dtype=torch.bool))
            shifts.append(centers[0] - torch.arange(len(rows)))
            widths.append(width[0])
    shift, width = torch.cat(shifts), torch.cat(widths)
    quantiles = lambda t: {q: round(float(t.quantile(q)), 3) for q in (0.05, 0.25, 0.5, 0.75, 0.95)}  # noqa: E731
    return {"run": str(run), "sub_dialogue": size, "utterances": len(width), "max_shift": model.config.max_shift,
            "max_width": model.config.max_width, "mean_shift": float(shift.mean()), "mean_abs_shift": float(shift.abs().mean()),
            "shift_quantiles": quantiles(shift), "mean_width": float(width.mean()), "width_quantiles": quantiles(width),
            "seed": record["seed"]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="Run folders of lc-attention (one per seed).")
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--split", default="validation")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        stats = [bias_statistics(run, args.dataset, args.split, args.data_dir) for run in args.runs]
    except (DialogueError, CheckpointError) as e:  # not a run folder, no checkpoint, one that does not load, no data
        raise SystemExit(f"error: {e}") from None
    for s in stats:
        print(f"{s['run']}: shift c_i - i mean {s['mean_shift']:+.2f} (|.| {s['mean_abs_shift']:.2f}, C = {s['max_shift']}), "
              f"width mean {s['mean_width']:.2f} (D = {s['max_width']}), quantiles {s['width_quantiles']}")
    record = make_result(f"dialogue-act-lc-bias-{args.dataset}", task="dialogue-act", dataset=args.dataset, split=args.split,
                         model="lc-attention", metric="mean_gaussian_width", scores=[s["mean_width"] for s in stats],
                         seeds=[s["seed"] for s in stats], backbone="all-MiniLM-L6-v2 (vocabulary and embeddings)",
                         extra={"runs": stats})
    print(f"-> {write_result(record, args.results_dir)}")


if __name__ == "__main__":
    main()
