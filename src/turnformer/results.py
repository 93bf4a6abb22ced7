"""Results files (one JSON per experiment under benchmarks/results/), the papers' numbers, and the tables built from them.

Every number in docs/results.md comes from these files or, for the papers' numbers, from ``PAPER_SCORES`` and
``PAPER_ACT_GRID`` below: the one place the papers' numbers are written (the recipes hold none), with their other
numbers beside them (online dialogue-act accuracy, DRA's validation scores, XLNet's memory waste). The benchmark
scripts record them beside ours (a results file's ``paper``) from here too.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

# The checkout this package runs from (src/turnformer/ under it) where there is one: its benchmarks/results and its
# commit are a result's, wherever the command starts; an installed copy writes ./benchmarks/results
CHECKOUT = Path(__file__).resolve().parents[2]
RESULTS_DIR = CHECKOUT / "benchmarks" / "results" if (CHECKOUT / "benchmarks").is_dir() else Path("benchmarks/results")
DOCS_DIR = CHECKOUT / "docs" if (CHECKOUT / "docs").is_dir() else Path("docs")  # where the scripts' figures go
# The code a result depends on: a results file lists those of these paths that differ from its commit
CODE_PATHS = ("src", "benchmarks/plans", "benchmarks/*.py", "benchmarks/*.sh", "pyproject.toml", "constraints.txt")

# The score each paper reports for the row a recipe reproduces: (task, dataset, model) -> score, in the paper's metric
# (the results files' "metric"). A recipe's variant that no paper ran (DialogXL's memory bias, MuTual-plus) has none.
PAPER_SCORES: dict[tuple[str, str, str], float] = {
    # DialogXL (Shen et al. 2021), XLNet-base, mean of 5 runs: test weighted F1 (DailyDialog: micro F1 without neutral).
    # Table 2: DialogXL, the BERT-base baseline (concat-context) and XLNet (segment-recurrence)
    ("erc", "meld", "dialogxl"): 62.41, ("erc", "meld", "concat-context"): 61.50, ("erc", "meld", "segment-recurrence"): 61.65,
    ("erc", "emorynlp", "dialogxl"): 34.73, ("erc", "emorynlp", "concat-context"): 34.13,
    ("erc", "emorynlp", "segment-recurrence"): 34.13,
    ("erc", "dailydialog", "dialogxl"): 54.93, ("erc", "dailydialog", "concat-context"): 53.37,
    ("erc", "dailydialog", "segment-recurrence"): 53.62,
    # Table 3: the ablations on MELD; Table 4: speaker-role embeddings instead of speaker and listener heads
    ("erc", "meld", "dialogxl-no-speaker"): 61.92, ("erc", "meld", "dialogxl-no-listener"): 62.03,
    ("erc", "meld", "dialogxl-no-speaker-listener"): 61.70, ("erc", "meld", "dialogxl-no-local"): 61.72,
    ("erc", "meld", "dialogxl-no-global"): 62.15, ("erc", "dailydialog", "dialogxl-speaker-emb"): 54.06,
    # Local Contextual Attention, Tables 4 and 6: offline test accuracy; each context model at
    # its best W x P cell (PAPER_ACT_GRID), the utterance models alone
    ("dialogue-act", "swda", "lc-attention"): 80.34, ("dialogue-act", "swda", "lstm-attention"): 80.12,
    ("dialogue-act", "swda", "lstm-blstm"): 80.00, ("dialogue-act", "swda", "lstm"): 75.59,
    ("dialogue-act", "swda", "minilm-utterance"): 76.88,
    ("dialogue-act", "dailydialog", "lc-attention"): 85.81, ("dialogue-act", "dailydialog", "lstm-attention"): 85.36,
    ("dialogue-act", "dailydialog", "lstm-blstm"): 85.06, ("dialogue-act", "dailydialog", "lstm"): 82.58,
    ("dialogue-act", "dailydialog", "minilm-utterance"): 83.22,
    # MDFN: MuTual dev R4@1 with ELECTRA-large; Tables 4 and 9 (MDFN, the encoder alone), 4 and 7 (the ablations)
    ("response-selection", "mutual", "mdfn"): 0.923, ("response-selection", "mutual", "plain-encoder"): 0.903,
    ("response-selection", "mutual", "mdfn-ua-only"): 0.909, ("response-selection", "mutual", "mdfn-sa-only"): 0.913,
    ("response-selection", "mutual", "mdfn-maxpool"): 0.909, ("response-selection", "mutual", "mdfn-meanpool"): 0.911,
    ("response-selection", "mutual", "mdfn-linear-fusion"): 0.91,
    # PHAED: DailyDialog test perplexity; Table 2 (the Transformer with N = 6, PHAED, DialoGPT as gpt2-scratch),
    # Table 4 (PHAED's ablations, N = 4)
    ("generation", "dailydialog", "transformer"): 27.34, ("generation", "dailydialog", "phaed"): 24.45,
    ("generation", "dailydialog", "gpt2-scratch"): 29.93, ("generation", "dailydialog", "phaed-no-speaker-tokens"): 25.77,
    ("generation", "dailydialog", "phaed-no-turn-emb"): 26.03, ("generation", "dailydialog", "phaed-no-turn-attn"): 26.15,
    ("generation", "dailydialog", "phaed-no-recurrence"): 25.99,
}

# The LC Attention paper's Tables 5 (SwDA) and 6 (DailyDialog): accuracy per (dataset, model, W, P). A grid cell
# the paper did not run (LC Attention with W = 1) has no number; the recipe's (its best cell's) would mislead.
PAPER_ACT_GRID: dict[tuple[str, str, int, int], float] = {
    ("swda", "lstm-blstm", 1, 1): 78.60, ("swda", "lstm-attention", 1, 1): 78.74,
    ("swda", "lstm-blstm", 1, 3): 79.36, ("swda", "lstm-attention", 1, 3): 79.98,
    ("swda", "lstm-blstm", 1, 5): 80.00, ("swda", "lstm-attention", 1, 5): 80.12,
    ("swda", "lstm-blstm", 5, 5): 78.50, ("swda", "lstm-attention", 5, 5): 79.43, ("swda", "lc-attention", 5, 5): 80.27,
    ("swda", "lstm-blstm", 10, 5): 78.31, ("swda", "lstm-attention", 10, 5): 79.00, ("swda", "lc-attention", 10, 5): 80.34,
    ("swda", "lstm-blstm", 20, 5): 78.55, ("swda", "lstm-attention", 20, 5): 78.57, ("swda", "lc-attention", 20, 5): 80.17,
    ("dailydialog", "lstm-blstm", 1, 1): 84.88, ("dailydialog", "lstm-attention", 1, 1): 85.10,
    ("dailydialog", "lstm-blstm", 1, 2): 85.06, ("dailydialog", "lstm-attention", 1, 2): 85.36,
    ("dailydialog", "lstm-blstm", 1, 3): 84.97, ("dailydialog", "lstm-attention", 1, 3): 85.05,
    ("dailydialog", "lstm-blstm", 5, 2): 85.01, ("dailydialog", "lstm-attention", 5, 2): 85.26, ("dailydialog", "lc-attention", 5, 2): 85.81,
    ("dailydialog", "lstm-blstm", 10, 2): 84.97, ("dailydialog", "lstm-attention", 10, 2): 85.13, ("dailydialog", "lc-attention", 10, 2): 85.72,
}

# The LC Attention paper's online setting (each utterance labelled from the preceding ones only), Tables 4 and 6: test
# accuracy of the context models at their recipe's W x P, beside PAPER_SCORES's offline accuracy
PAPER_ONLINE_SCORES: dict[tuple[str, str, str], float] = {
    ("dialogue-act", "swda", "lc-attention"): 78.93, ("dialogue-act", "swda", "lstm-attention"): 78.86,
    ("dialogue-act", "swda", "lstm-blstm"): 78.62,
    ("dialogue-act", "dailydialog", "lc-attention"): 84.83, ("dialogue-act", "dailydialog", "lstm-attention"): 84.68,
    ("dialogue-act", "dailydialog", "lstm-blstm"): 84.55,
}

# DRA's Table 1, DailyDialog validation, per model: (perplexity, BLEU-2, Distinct-2)
DRA_VALIDATION: dict[str, tuple[float, float, float]] = {
    "transformer": (18.278, 19.519, 17.381), "transformer-dra": (17.628, 21.140, 18.396),
    "dialogbert": (20.056, 18.069, 15.562), "dialogbert-dra": (17.878, 21.786, 21.283)}

# The DialogXL paper: over 60% of XLNet's memory (segment recurrence) holds padding on ERC data
XLNET_MEMORY_WASTE_PERCENT = 60.0


def paper_score(task: str, dataset: str, model: str, window: int | None = None, padding: int | None = None) -> float | None:
    """The paper's number for a row: the W x P grid's cell where a window is given, else the recipe's row; None where
    the paper has none."""
    dataset = {"swda-ld": "swda"}.get(dataset, dataset)  # the paper's SwDA split is Lee and Dernoncourt's
    if window is not None:
        return PAPER_ACT_GRID.get((dataset, model, window, padding))
    return PAPER_SCORES.get((task, dataset, model))


def git_commit() -> str:
    """The short commit of the checkout this package runs from (not of the folder the command starts in);
    ``TURNFORMER_COMMIT`` names it where the code runs from a copy without git."""
    if os.environ.get("TURNFORMER_COMMIT"):
        return os.environ["TURNFORMER_COMMIT"]
    if not (CHECKOUT / ".git").exists():
        return "unknown"
    try:
        return subprocess.run(["git", "-C", str(CHECKOUT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def uncommitted_code() -> list[str]:
    """The code files (``CODE_PATHS``) of the checkout that differ from its commit: a result measured with them is not
    the commit's alone. Empty where there is no git checkout."""
    if os.environ.get("TURNFORMER_COMMIT") or not (CHECKOUT / ".git").exists():
        return []
    try:
        out = subprocess.run(["git", "-C", str(CHECKOUT), "status", "--porcelain", "--untracked-files=all", "--",
                              *CODE_PATHS], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    return sorted(line[3:].split(" -> ")[-1] for line in out.splitlines() if line[3:])


def shown_path(path: str | Path) -> str:
    """A file a result names, as a results file records it: relative to the checkout where it lies inside it (no
    machine's folders in the results), else as given."""
    try:
        return Path(path).resolve().relative_to(CHECKOUT).as_posix()
    except ValueError:
        return str(path)


def machine() -> str:
    import torch  # loaded only to describe the machine: building the tables reads results files without it

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
        "commit": git_commit(), "uncommitted": uncommitted_code(), "date": _dt.date.today().isoformat(),
        "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "machine": machine(),
    }


def run_experiment(run_dir: Path, run: dict, prefix: str = "") -> tuple[str, int]:
    """A trained run's experiment name (without `prefix`) and seed, as a measurement's results file names them: the
    seed its run.json records; the name of the folder holding it where it is ``seedN`` (the layout `benchmarks/run.py`
    trains into), else the run folder's own name."""
    seed = int(run.get("seed", 0))
    name = run_dir.resolve().parent.name if run_dir.resolve().name == f"seed{seed}" else run_dir.resolve().name
    return name.removeprefix(prefix), seed


def write_result(record: dict[str, Any], results_dir: Path = RESULTS_DIR) -> Path:
    """Write atomically (temp file, then rename) so a crash never leaves half a result."""
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{record['experiment']}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, path)
    return path


def load_results(results_dir: Path = RESULTS_DIR) -> list[dict[str, Any]]:
    """Every results file of `results_dir`, each checked (`result_problem`): a damaged one is a ValueError naming it,
    never a table built around it."""
    records = []
    for path in sorted(results_dir.glob("*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ValueError(f"{path}: not a results file ({e})") from None
        if problem := result_problem(record, path.stem):
            raise ValueError(f"{path}: {problem}")
        records.append(record)
    return records


def result_problem(record: Any, name: str) -> str | None:
    """What makes `record` (the results file `name`.json) unfit for a table, or None: its entries, scores that are
    finite numbers (at least one), seeds one per score (none for a measurement), a mean and spread of those scores,
    the experiment the file is named after (two files of one experiment would show either in a table)."""
    if not isinstance(record, dict):
        return "expected a JSON object"
    if missing := [key for key in ("experiment", "task", "dataset", "model", "metric", "scores", "seeds", "mean", "std")
                   if key not in record]:
        return f"missing {', '.join(missing)}"
    if record["experiment"] != name:
        return f"experiment {record['experiment']!r}: a results file is named after its experiment ({name!r})"
    scores, seeds = record["scores"], record["seeds"]
    finite = lambda x: isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)  # noqa: E731
    if not isinstance(scores, list) or not scores or not all(map(finite, scores)):
        return f"scores {scores!r:.60}: expected a list of finite numbers, at least one"
    if not isinstance(seeds, list) or (seeds and len(seeds) != len(scores)):
        return f"seeds {seeds!r:.60}: expected one per score (or none, for a measurement)"
    if not finite(record["mean"]) or not finite(record["std"]):
        return f"mean {record['mean']!r}, std {record['std']!r}: expected finite numbers"
    mean, std = mean_std(scores)
    if not math.isclose(record["mean"], mean, rel_tol=1e-6, abs_tol=1e-9):
        return f"mean {record['mean']!r} is not the mean of its scores ({mean:.6g})"
    if not math.isclose(record["std"], std, rel_tol=1e-6, abs_tol=1e-9):
        return f"std {record['std']!r} is not the sample standard deviation of its scores ({std:.6g})"
    return None


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.4g}" if abs(x) < 1 else f"{x:.2f}"


# The main rows of each paper, as docs/results.md opens: (title, experiment ids in the order shown). Sweeps, grids,
# ablations and measurements of speed and memory are in docs/results-all.md.
MAIN_ROWS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("DialogXL: emotion recognition (test weighted F1; DailyDialog micro F1 without neutral)", tuple(
        f"erc-{dataset}-{model}{backbone}" for dataset in ("meld", "emorynlp", "dailydialog") for backbone in ("", "-mpnet")
        for model in ("dialogxl", "dialogxl-one-pass", "dialogxl-memory-bias", "dialogxl-memory-bias-one-pass",
                      "dialogxl-memory-grad", "concat-context", "segment-recurrence"))),
    ("Local Contextual Attention: dialogue acts (test accuracy)", tuple(
        f"dialogue-act-{dataset}-{model}" for dataset in ("swda", "dailydialog")
        for model in ("lc-attention", "lstm", "lstm-blstm", "lstm-attention", "minilm-utterance"))),
    ("MDFN: response selection (MuTual and MuTual-plus dev R4@1)", (
        "response-selection-mutual-mdfn-mpnet", "response-selection-mutual-plain-encoder-mpnet",
        "response-selection-mutual-mdfn", "response-selection-mutual-plain-encoder", "response-selection-mutual-plus-mdfn",
        "response-selection-mutual-plus-plain-encoder", "response-selection-mutual-mdfn-cpu",
        "response-selection-mutual-plain-encoder-cpu")),
    ("DRA and PHAED: response generation on DailyDialog (test perplexity)", (
        *(f"generation-dailydialog-{model}" for model in ("smollm2", "smollm2-phaed")),
        *(f"generation-dailydialog-{model}{scale}" for scale in ("-full-cpu-10epochs", "-full-cpu-2epochs", "-full-cpu", "-cpu")
          for model in ("transformer", "transformer-dra", "dialogbert", "dialogbert-dra", "phaed", "gpt2-scratch")),
        *(f"generation-dailydialog-{model}-cpu" for model in ("smollm2", "smollm2-phaed", "smollm2-zeroshot")))),
)


# Published numbers of encoders of the size we run (base, about 110M parameters), under a paper's main table.
SAME_SIZE_PUBLISHED: dict[str, str] = {
    "DialogXL": "Same-size published numbers: HiTrans (Li et al., COLING 2020; BERT-base) 61.94 on MELD and 36.75 on "
                "EmoryNLP; fine-tuned RoBERTa-base with context, as later papers report it, about 63-65 on MELD and 34-37 on "
                "EmoryNLP. The paper's DialogXL is XLNet-base; ours run on all-MiniLM-L6-v2 (22M parameters) and "
                "all-mpnet-base-v2 (110M; rows `-mpnet`).",
    "MDFN": "Same-size published number: RoBERTa-base, MuTual dev R4@1 0.695 (Cui et al., ACL 2020). The paper's MDFN is "
            "ELECTRA-large.",
}


def seed_machines(result: dict[str, Any]) -> dict[int, str]:
    """Seed -> the machine its run came from: a results file's machine line is one machine, or, where its seeds ran on
    several, "seed 1: MACHINE; seeds 2, 3: MACHINE" (`machine_line`)."""
    line = result.get("machine") or ""
    if not line.startswith("seed"):
        return dict.fromkeys(result.get("seeds") or [0], line)
    out = {}
    for part in line.split("; "):
        head, _, name = part.partition(": ")
        for seed in head.removeprefix("seeds ").removeprefix("seed ").split(", "):
            out[int(seed)] = name
    return out


def machine_line(machines: dict[int, str]) -> str:
    """The machine line of seeds that ran on `machines` (seed -> machine): one machine, or each with its seeds."""
    by_machine: dict[str, list[int]] = {}
    for seed in sorted(machines):
        by_machine.setdefault(machines[seed], []).append(seed)
    if len(by_machine) == 1:
        return next(iter(by_machine))
    return "; ".join(f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}: {name}"
                     for name, seeds in by_machine.items())


def device_of(result: dict[str, Any]) -> str:
    """"GPU (NVIDIA H100 ...)" or "CPU (2 cores)", from the results file's machine line (both where seeds ran on each)."""
    gpus, cpus = {}, {}
    for name in seed_machines(result).values():
        if "no GPU" in name or not name:
            cores = name.split(" CPU cores")[0] if " CPU cores" in name else "?"
            cpus[f"CPU ({cores} cores)"] = None
        else:
            gpus[name.split(", ")[1] if ", " in name else ""] = None
    named = [gpu for gpu in gpus if gpu]
    return ", ".join([*(["GPU (" + ", ".join(named) + ")" if named else "GPU"] if gpus else []), *cpus])


def _ours(r: dict[str, Any]) -> str:
    # the std to the mean's precision: 83.70 ± 0.29 (not ± 0.2919), 0.613 ± 0.004
    mean = _fmt(r["mean"])
    decimals = max(2, len(mean.partition(".")[2])) if abs(r["mean"]) < 1 else 2
    ours = f"{mean} ± {r['std']:.{decimals}f}" if len(r["scores"]) > 1 else mean
    extra = r.get("extra") or {}
    return ours + (" *" if extra.get("partial") or extra.get("subset") else "")


def render_summary(results: list[dict[str, Any]]) -> str:
    """docs/results.md: per paper, one short table of the main rows, ours beside the paper's number (from
    PAPER_SCORES: a number corrected there is corrected here without collecting again), with the device they ran on;
    everything else in results-all.md."""
    by_id = {r["experiment"]: r for r in results}
    lines = [
        "# Results",
        "",
        "Generated by `python benchmarks/make_tables.py` from `benchmarks/results/*.json`; do not edit by hand.",
        "Each paper's main rows: mean ± std over the seeds (test score at the best validation epoch), beside the paper's",
        "number; a score marked * comes from runs cut short, or trained or scored on a subset (its results file names them). Rows",
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
                         f"{_ours(r)} | {_fmt(paper_score(r['task'], r['dataset'], r['model']))} | {len(r['seeds'])} | "
                         f"{device_of(r)} | `{r['experiment']}` |")
        lines.append("")
        note = SAME_SIZE_PUBLISHED.get(title.split(":")[0])
        if note:
            lines += [note, ""]
    return "\n".join(lines).rstrip() + "\n"


def render_markdown(results: list[dict[str, Any]]) -> str:
    """docs/results-all.md: one table per task, ours beside the number each results file was compared with when
    collected (its "paper": PAPER_SCORES's for a recipe's row, a measure's own reference, or none for a variant)."""
    lines = [
        "# All results",
        "",
        "Generated by `python benchmarks/make_tables.py` from `benchmarks/results/*.json`; do not edit by hand.",
        "Scores: mean ± std over the listed seeds (test score at the best validation epoch where training is involved);",
        "a score marked * comes from runs cut short (a time budget), or trained or scored on a subset: its results file names them.",
        "A learning-rate sweep's row (`erc-lr-sweep-MODEL`) is one seed on each of its datasets: its ± is the spread between the",
        "datasets at the chosen rate, and its seeds column counts the datasets.",
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
    Attention paper's Tables 5 and 6: per dataset, a row per (model, W), a column per P, each cell ours (the paper's,
    from PAPER_ACT_GRID)."""
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
                theirs = paper_score("dialogue-act", dataset, model, window, p)
                paper = f" ({_fmt(theirs)})" if theirs is not None else ""
                cut = " *" if r["extra"].get("partial") else ""
                row.append(f"{_fmt(r['mean'])}{seeds}{cut}{paper}")
            lines.append(f"| {model} | {window} | " + " | ".join(row) + " |")
        lines.append("")
    return lines + [""]
