"""Results files (one JSON per experiment under benchmarks/results/) and the tables built from them.

Every number in docs/results.md comes from these files; nothing there is typed by hand.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

RESULTS_DIR = Path("benchmarks/results")


def git_commit() -> str:
    """The checkout's short commit; ``TURNFORMER_COMMIT`` names it where the code runs from a copy without git."""
    if os.environ.get("TURNFORMER_COMMIT"):
        return os.environ["TURNFORMER_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine() -> str:
    import torch

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{os.cpu_count()} CPU cores ({platform.machine()}), {device}, torch {torch.__version__}"


def mean_std(scores: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single score)."""
    mean = statistics.fmean(scores)
    return mean, (statistics.stdev(scores) if len(scores) > 1 else 0.0)


def make_result(
    experiment: str, *, task: str, dataset: str, split: str, model: str, metric: str,
    scores: Sequence[float], seeds: Sequence[int], backbone: str | None = None, config: dict | None = None,
    paper: float | None = None, extra: dict | None = None, command: str | None = None,
) -> dict[str, Any]:
    mean, std = mean_std(scores)
    return {
        "experiment": experiment, "task": task, "dataset": dataset, "split": split, "model": model,
        "backbone": backbone, "config": config or {}, "metric": metric, "seeds": list(seeds),
        "scores": list(scores), "mean": mean, "std": std, "paper": paper, "extra": extra or {},
        "command": command or " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "commit": git_commit(), "date": _dt.date.today().isoformat(), "machine": machine(),
    }


def write_result(record: dict[str, Any], results_dir: Path = RESULTS_DIR) -> Path:
    """Write atomically (temp file, then rename) so a crash never leaves half a result."""
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{record['experiment']}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, path)
    return path


def load_results(results_dir: Path = RESULTS_DIR) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(results_dir.glob("*.json"))]


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.4g}" if abs(x) < 1 else f"{x:.2f}"


# The main rows of each paper, as docs/results.md opens: (title, experiment ids in the order shown). Sweeps, grids,
# ablations and measurements of speed and memory are in docs/results-all.md.
MAIN_ROWS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("DialogXL: emotion recognition (test weighted F1; DailyDialog micro F1 without neutral)", tuple(
        f"erc-{dataset}-{model}" for dataset in ("meld", "emorynlp", "dailydialog")
        for model in ("dialogxl", "dialogxl-one-pass", "dialogxl-memory-bias", "dialogxl-memory-bias-one-pass",
                      "dialogxl-memory-grad", "concat-context", "segment-recurrence"))),
    ("Local Contextual Attention: dialogue acts (test accuracy)", tuple(
        f"dialogue-act-{dataset}-{model}" for dataset in ("swda", "dailydialog")
        for model in ("lc-attention", "lstm", "lstm-blstm", "lstm-attention", "minilm-utterance"))),
    ("MDFN: response selection (MuTual and MuTual-plus dev R4@1)", (
        "response-selection-mutual-mdfn", "response-selection-mutual-plain-encoder", "response-selection-mutual-plus-mdfn",
        "response-selection-mutual-plus-plain-encoder", "response-selection-mutual-mdfn-cpu",
        "response-selection-mutual-plain-encoder-cpu")),
    ("DRA and PHAED: response generation on DailyDialog (test perplexity)", tuple(
        f"generation-dailydialog-{model}-cpu" for model in ("transformer", "transformer-dra", "dialogbert", "dialogbert-dra",
                                                             "phaed", "gpt2-scratch", "smollm2-zeroshot"))),
)


def device_of(result: dict[str, Any]) -> str:
    """"GPU (NVIDIA H100 ...)" or "CPU (2 cores)", from the results file's machine line."""
    machine = result.get("machine") or ""
    if "no GPU" in machine or not machine:
        cores = machine.split(" CPU cores")[0] if " CPU cores" in machine else "?"
        return f"CPU ({cores} cores)"
    return "GPU (" + machine.split(", ")[1] + ")" if ", " in machine else "GPU"


def _ours(r: dict[str, Any]) -> str:
    # the std to the mean's precision: 83.70 ± 0.29 (not ± 0.2919), 0.613 ± 0.004
    mean = _fmt(r["mean"])
    decimals = max(2, len(mean.partition(".")[2])) if abs(r["mean"]) < 1 else 2
    ours = f"{mean} ± {r['std']:.{decimals}f}" if len(r["scores"]) > 1 else mean
    return ours + (" *" if (r.get("extra") or {}).get("partial") else "")


def render_summary(results: list[dict[str, Any]]) -> str:
    """docs/results.md: per paper, one short table of the main rows, ours beside the paper's number, with the device
    they ran on; everything else in results-all.md."""
    by_id = {r["experiment"]: r for r in results}
    lines = [
        "# Results",
        "",
        "Generated by `python benchmarks/make_tables.py` from `benchmarks/results/*.json`; do not edit by hand.",
        "Each paper's main rows: mean ± std over the seeds (test score at the best validation epoch), beside the paper's",
        "number; a score marked * comes from runs cut short or trained on a subset (its results file names them). Rows",
        "`-one-pass` and `-memory-grad` ran with DialogXL's one-pass path, the others with the recurrence (equal in",
        "outputs and gradients; `docs/dialogxl.md`). Every other result (sweeps, grids, ablations, speed and memory) is in",
        "[results-all.md](results-all.md); what the numbers mean is in each system's page under `docs/`.",
        "",
    ]
    for title, ids in MAIN_ROWS:
        rows = [by_id[i] for i in ids if i in by_id]
        if not rows:
            continue
        lines += [f"## {title}", "", "| dataset | model | backbone | ours | paper | seeds | device | results file |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['dataset']} | {r['experiment'].split(r['dataset'] + '-', 1)[-1]} | {r.get('backbone') or '-'} | "
                         f"{_ours(r)} | {_fmt(r.get('paper'))} | {len(r['seeds'])} | {device_of(r)} | `{r['experiment']}` |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def render_markdown(results: list[dict[str, Any]]) -> str:
    """docs/results-all.md: one table per task, ours beside the paper's number."""
    lines = [
        "# All results",
        "",
        "Generated by `python benchmarks/make_tables.py` from `benchmarks/results/*.json`; do not edit by hand.",
        "Scores: mean ± std over the listed seeds (test score at the best validation epoch where training is involved);",
        "a score marked * comes from runs cut short (a time budget) or trained on a subset: its results file names them.",
        "",
    ]
    by_task: dict[str, list[dict]] = {}
    for r in results:
        by_task.setdefault(r["task"], []).append(r)
    for task, rows in sorted(by_task.items()):
        lines += [f"## {task}", "", "| experiment | dataset | split | model | backbone | metric | ours | paper | seeds | commit | machine |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            ours = _ours(r)
            lines.append(
                f"| {r['experiment']} | {r['dataset']} | {r['split']} | {r['model']} | {r.get('backbone') or '-'} | "
                f"{r['metric']} | {ours} | {_fmt(r.get('paper'))} | {len(r['seeds'])} | {r['commit']} | {r['machine']} |"
            )
        lines.append("")
        for r in rows:
            scalars = [f"{k} = {_fmt(v) if isinstance(v, float) else v}" for k, v in (r.get("extra") or {}).items() if not isinstance(v, (dict, list))]
            if scalars:  # lists and tables of `extra` stay in the results file
                lines.append(f"- `{r['experiment']}`: " + ", ".join(scalars))
        lines += ["", ""]
        if task == "dialogue-act":
            lines += render_act_grid(rows)
    return "\n".join(lines).rstrip() + "\n"


def render_act_grid(rows: list[dict[str, Any]]) -> list[str]:
    """The W x P grid cells (results whose ``extra`` names ``window`` and ``padding``, at the grid's batch of
    predicted utterances and the recipe's settings: not the act-batch or act-setup sweeps') pivoted like the LC
    Attention paper's Tables 5 and 6: per dataset, a row per (model, W), a column per P, each cell ours (the paper's)."""
    cells = {(r["dataset"], r["model"], r["extra"]["window"], r["extra"]["padding"]): r for r in rows
             if {"window", "padding"} <= set(r.get("extra") or {}) and not {"predicted_per_batch", "setup"} & set(r["extra"])}
    if not cells:
        return []
    lines = ["### dialogue-act: the W x P grid", "",
             "Offline test accuracy of each window W and context padding P, ours (the paper's, where it ran that cell); "
             "over the cell's seeds, their number in brackets where above one; * marks a cell whose runs were cut short "
             "(its results file names them).", ""]
    for dataset in sorted({d for d, *_ in cells}):
        paddings = sorted({p for d, _, _, p in cells if d == dataset})
        lines += [f"**{dataset}**", "", "| model | W | " + " | ".join(f"P = {p}" for p in paddings) + " |",
                  "|---|---|" + "---|" * len(paddings)]
        for model, window in sorted({(m, w) for d, m, w, _ in cells if d == dataset}):
            row = []
            for p in paddings:
                r = cells.get((dataset, model, window, p))
                if r is None:
                    row.append("")
                    continue
                seeds = f" [{len(r['seeds'])}]" if len(r["seeds"]) > 1 else ""
                paper = f" ({_fmt(r['paper'])})" if r.get("paper") is not None else ""
                cut = " *" if r["extra"].get("partial") else ""
                row.append(f"{_fmt(r['mean'])}{seeds}{cut}{paper}")
            lines.append(f"| {model} | {window} | " + " | ".join(row) + " |")
        lines.append("")
    return lines + [""]
