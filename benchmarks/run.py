"""The benchmark runner: the experiments of one or more plans (benchmarks/plans/, one module per task) as
`turnformer train` runs, several at a time, each experiment collected into a results file
(benchmarks/results/EXPERIMENT.json) by `collect_erc.collect`.

    python benchmarks/run.py --plan table2 [--plan table3 ...] [--workers 8] [--runs-dir runs/erc]
                             [--seeds 1,2,3] [--deadline SECONDS] [--prune] [--dry-run]

``benchmarks/erc_experiments.py``, the runner's first name, takes the same arguments. The plans are listed below.

A run whose folder already holds result.json is not run again, and an interrupted one continues
(``--resume``), so the command can be repeated until everything is done. A seed whose run folder is gone but which
the experiment's results file holds, collected from a whole run of the recipe as it is now, is not trained again: the
file keeps it beside the seeds collected later (``--seeds 2,3`` adds to a file of seed 1), and its command says so.
A seed whose run was cut short is trained again (or continued, where its folder is here); the file's whole seeds stay.
``--deadline`` gives every run a time budget ending that many seconds after the start: runs cut by it are recorded as partial,
and continue from their checkpoint when the command is repeated. A run not started a minute before the deadline
(``LAST_START``) is not started: the command ends by its deadline, and a repeat of it starts that run.
With ``--workers`` above 1 every run gets one CPU thread (the runs share the machine, or one GPU).
``--dry-run`` prints the runs the command would start, and starts none. Ctrl-C stops the runs (each saves its
checkpoint and says so) and the command, which collects nothing then: repeated, it goes on.

What a results row trained is one file: every run folder gets config.toml when its run starts, the complete recipe
(the recipe file with the plan's overrides applied; ``turnformer train --recipe config.toml`` trains it again), and
every results file the runner writes holds the same settings under "recipe", with the recipe's name, the overrides
and the data limits.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collect_erc import collect, recipe_differences, run_config  # noqa: E402
from plans import PLANS, TASKS, Experiment  # noqa: E402

from turnformer.recipes import load_recipe, recipe_for_dataset  # noqa: E402
from turnformer.results import machine_line, make_result, mean_std, paper_score, seed_machines, write_result  # noqa: E402

CHECKOUT_RESULTS = Path(__file__).resolve().parent / "results"  # benchmarks/results, wherever the command runs from
MAX_SEED = 2**32 - 1  # the most `turnformer train --seed` takes


def plan(name: str, seeds: tuple[int, ...], baseline_seeds: tuple[int, ...], swda_train: int,
         grid_seeds: tuple[int, ...] = (1,)) -> list[Experiment]:
    """Plan `name`'s experiments with the command line's seeds and SwDA training subset in place."""
    if name not in PLANS:
        raise SystemExit(f"unknown plan {name!r}; known: {', '.join(PLANS)}")
    options = {"seeds": seeds, "baseline_seeds": baseline_seeds, "grid_seeds": grid_seeds, "swda_train": swda_train}
    return [experiment.resolved(options) for experiment in PLANS[name]]


def run_result(out: Path) -> dict | None:
    """The result.json `turnformer train` left in `out` (None where there is none); one that is not a run's result
    stops the command, naming it."""
    path = out / "result.json"
    if not path.exists():
        return None
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SystemExit(f"{path}: not a run's result ({e}); move it away to train the run again") from None
    if not isinstance(result, dict) or not isinstance(result.get("history"), list):
        raise SystemExit(f"{path}: not a run's result (no history of epochs); move it away to train the run again")
    return result


def finished(out: Path) -> bool:
    """A run with its result, unless a time budget (--deadline) cut it and its checkpoint is there to go on from."""
    if (result := run_result(out)) is None:
        return False
    reason = result.get("stop_reason") or ""
    return not (reason.startswith("time budget") and (out / "last").is_dir())


def finished_epochs(out: Path) -> int:
    result = run_result(out)
    return 0 if result is None else sum(1 for h in result["history"] if isinstance(h, dict) and h.get("complete"))


def run_dir(experiment: Experiment, seed: int, runs_dir: Path) -> Path:
    """Where the experiment's run of `seed` is: a grid cell at its model's recipe cell reads the recipe's run when that
    has finished the cell's epochs (the schedules are constant, so those epochs are the cell's training), else its own."""
    if experiment.recipe_runs:
        recipe_run = runs_dir / experiment.recipe_runs / f"seed{seed}"
        if finished_epochs(recipe_run) >= experiment.max_epoch:
            return recipe_run
    return runs_dir / experiment.id / f"seed{seed}"


def recipe_record(experiment: Experiment, runs_dir: Path, results_dir: Path = CHECKOUT_RESULTS) -> dict | None:
    """A grid cell at its model's recipe cell whose recipe runs are not all here: its record taken from the recipe's
    results file, if those runs trained exactly the cell's epochs, windowing and batch, whole, over the cell's seeds
    (the test score at their best validation epoch is then the cell's). None where the cell must be trained."""
    path = results_dir / f"{experiment.recipe_runs}.json"
    if (not experiment.recipe_runs or not path.exists()
            or all(run_dir(experiment, s, runs_dir).parent.name == experiment.recipe_runs for s in experiment.seeds)):
        return None
    recipe = json.loads(path.read_text())
    config, extra = recipe["config"], experiment.extra
    trained = {**{k: recipe[k] for k in ("task", "dataset", "model")}, **config}  # (its "backbone" is a label)
    other = [d for d in recipe_differences(resolved_recipe(experiment), trained) if not d.startswith("train.epochs:")]
    same_training = (config["train"]["epochs"] == experiment.max_epoch and config["train"]["batch_size"] == extra["batch_size"]
                     and (config["window"], config["context_padding"]) == (extra["window"], extra["padding"]) and not other)
    if not same_training or recipe["extra"].get("partial") or not set(experiment.seeds) <= set(recipe["seeds"]):
        return None
    index = [recipe["seeds"].index(s) for s in experiment.seeds]
    per_seed = {k: [v[i] for i in index] for k, v in recipe["extra"].items() if isinstance(v, list) and len(v) == len(recipe["seeds"])}
    commands = recipe["command"].removesuffix(" (recipe values as in config)").split("; ")
    return make_result(
        experiment.id, task=recipe["task"], dataset=recipe["dataset"], split=recipe["split"], model=recipe["model"],
        backbone=recipe["backbone"], config=config, metric=recipe["metric"], scores=[recipe["scores"][i] for i in index],
        seeds=experiment.seeds, paper=paper_score(experiment.task, experiment.dataset, experiment.model, extra["window"], extra["padding"]),
        extra={**per_seed, "partial": False, "max_epoch": experiment.max_epoch, **extra},
        command="; ".join(commands[i] for i in index) + f" (recipe values as in config; read from {path.name}, commit {recipe['commit']})")


def scored_epochs(config: dict, max_epoch: int | None) -> int | None:
    epochs = config["train"].get("epochs")
    return min(epochs, max_epoch) if epochs and max_epoch else max_epoch or epochs


def earlier_record(experiment: Experiment, results_dir: Path = CHECKOUT_RESULTS) -> dict | None:
    """The experiment's results file from an earlier collection, if it trained the recipe as it is now, scored over the
    same epochs, with the seeds of its whole runs only: those are not trained again when their run folders are gone,
    and stay in the file when other seeds are collected. None otherwise."""
    path = results_dir / f"{experiment.id}.json"
    if not path.exists() or experiment.limit_train or experiment.limit_eval:
        return None
    try:
        earlier = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise SystemExit(f"{path}: not a results file ({e}); move it away to collect the experiment afresh")
    same = (earlier.get("config") == run_config(resolved_recipe(experiment))
            and scored_epochs(earlier["config"], earlier["extra"].get("max_epoch")) == scored_epochs(earlier["config"], experiment.max_epoch))
    return whole_seeds_only(earlier) if same else None


def cut_run_seed(cut: dict) -> int | None:
    """The seed of a cut run listed in a results file's "partial"; files from before it was listed there: the folder's seedN."""
    if "seed" in cut:
        return cut["seed"]
    match = re.fullmatch(r"seed(\d+)", Path(cut.get("run", "")).name)  # no run named: the seed cannot be told
    return int(match[1]) if match else None


def whole_seeds_only(earlier: dict) -> dict | None:
    """`earlier` without the seeds of its cut runs (its "partial" list), which are trained again; None where no seed
    is whole, or where a cut run's seed cannot be told or it trained on a subset (then none of the file is the recipe's)."""
    cut_seeds = set()
    for cut in earlier["extra"].get("partial") or []:
        seed = cut_run_seed(cut)
        if seed is None or cut.get("limits"):
            return None
        cut_seeds.add(seed)
    if not cut_seeds:
        return earlier
    keep = [i for i, s in enumerate(earlier["seeds"]) if s not in cut_seeds]
    if not keep:
        return None
    count = len(earlier["seeds"])
    extra = {k: [v[i] for i in keep] if isinstance(v, list) and len(v) == count and k != "partial" else v
             for k, v in earlier["extra"].items()}
    scores = [earlier["scores"][i] for i in keep]
    mean, std = mean_std(scores)
    return {**earlier, "seeds": [earlier["seeds"][i] for i in keep], "scores": scores, "mean": mean, "std": std,
            "extra": {**extra, "partial": False}}


def seeds_to_run(experiment: Experiment, earlier: dict | None, runs_dir: Path) -> list[int]:
    """The experiment's seeds that its runs give: all but those an earlier collection holds whose run folders are gone."""
    return [s for s in experiment.seeds
            if not (earlier and s in earlier["seeds"] and not (run_dir(experiment, s, runs_dir) / "result.json").exists())]


def with_earlier_seeds(record: dict, earlier: dict) -> dict:
    """`record` (the runs on disk) joined with the seeds of an earlier collection of the same training that it lacks,
    in seed order; a seed in both is the runs' own. `earlier` must come from `earlier_record`."""
    if record["config"] != earlier["config"]:  # the runs on disk trained something else: the earlier seeds cannot join
        print(f"{record['experiment']}: warning: seeds {earlier['seeds']} of the earlier results file were trained with "
              f"other settings than the runs here, and are replaced by seeds {record['seeds']}", flush=True)
        return record
    kept = [i for i, s in enumerate(earlier["seeds"]) if s not in record["seeds"]]
    if not kept:
        return record

    def per_seed(r: dict) -> dict:  # "partial" lists the cut runs, not one entry a seed, whatever its length
        return {k: v for k, v in r["extra"].items() if k != "partial" and isinstance(v, list) and len(v) == len(r["seeds"])}

    new, old = per_seed(record), per_seed(earlier)
    rows = [(s, record["scores"][i], {k: v[i] for k, v in new.items()}) for i, s in enumerate(record["seeds"])]
    rows += [(earlier["seeds"][i], earlier["scores"][i], {k: v[i] for k, v in old.items()}) for i in kept]
    rows.sort(key=lambda row: row[0])
    keys = [k for k in new if k in old]  # a measure the earlier runs did not record is dropped rather than left uneven
    seeds_read = ", ".join(str(earlier["seeds"][i]) for i in kept)
    earlier_machines = seed_machines(earlier)
    machines = {**{earlier["seeds"][i]: earlier_machines.get(earlier["seeds"][i], "") for i in kept}, **seed_machines(record)}
    joined = make_result(
        record["experiment"], task=record["task"], dataset=record["dataset"], split=record["split"], model=record["model"],
        backbone=record["backbone"], config=record["config"], metric=record["metric"], paper=record["paper"],
        seeds=[row[0] for row in rows], scores=[row[1] for row in rows],
        extra={**{k: v for k, v in record["extra"].items() if k not in new}, **{k: [row[2][k] for row in rows] for k in keys}},
        command=f"{record['command']}; seed(s) {seeds_read} read from {record['experiment']}.json as collected at commit {earlier['commit']}")
    return {**joined, "machine": machine_line(machines)}  # each seed's own machine


def resolved_recipe(experiment: Experiment) -> dict:
    """The complete recipe the experiment's runs train: its recipe file (as `turnformer train --dataset` finds it) with
    the plan's overrides applied."""
    path, retarget = recipe_for_dataset(experiment.task, experiment.model, experiment.dataset)
    recipe = load_recipe(path, [*([f"dataset={retarget}"] if retarget else []), *experiment.overrides])
    return {k: v for k, v in recipe.items() if k != "recipe_path"}  # where the file lies is no setting


def recipe_entry(experiment: Experiment) -> dict:
    """A results file's "recipe": what its runs trained, complete (the settings as each run's config.toml holds them)."""
    return {"name": experiment.recipe, "overrides": list(experiment.overrides), "limit_train": experiment.limit_train,
            "limit_eval": experiment.limit_eval, "settings": resolved_recipe(experiment)}


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def recipe_toml(recipe: dict) -> str:
    """`recipe` as a recipe file: its top-level values, then one [table] per section (recipes nest no deeper)."""
    lines = [f"{toml_key(k)} = {toml_value(v)}" for k, v in recipe.items() if not isinstance(v, dict)]
    for section, table in recipe.items():
        if isinstance(table, dict):
            lines += ["", f"[{toml_key(section)}]", *(f"{toml_key(k)} = {toml_value(v)}" for k, v in table.items())]
    return "\n".join(lines) + "\n"


def limit_arguments(experiment: Experiment) -> list[str]:
    return ((["--limit-train", str(experiment.limit_train)] if experiment.limit_train else [])
            + (["--limit-eval", str(experiment.limit_eval)] if experiment.limit_eval else []))


def write_config(experiment: Experiment, seed: int, out: Path) -> None:
    """out/config.toml: the complete recipe the run trains, headed by how it came about and how to train it again."""
    sets = " ".join(f"--set {o}" for o in experiment.overrides) or "no overrides"
    header = [f"# {experiment.recipe} with {sets}: experiment {experiment.id} of benchmarks/run.py, seed {seed}. Trained again by",
              f"#   turnformer train --recipe config.toml --seed {seed} --out DIR {' '.join(limit_arguments(experiment))}".rstrip()]
    (out / "config.toml").write_text("\n".join(header) + "\n" + recipe_toml(resolved_recipe(experiment)))


# the least time before the deadline at which a run is started: loading the data and a first evaluation take that much
LAST_START = 60.0


def train_arguments(experiment: Experiment, seed: int, out: Path, deadline: float | None) -> list[str]:
    """`turnformer train`'s arguments for the experiment's run of `seed` in `out`: continued where it has a checkpoint,
    stopped by the deadline."""
    arguments = ["train", "--task", experiment.task, "--model", experiment.model, "--dataset", experiment.dataset,
                 "--seed", str(seed), "--out", str(out)]
    arguments += [arg for o in experiment.overrides for arg in ("--set", o)]
    arguments += limit_arguments(experiment)
    if (out / "last").exists():
        arguments.append("--resume")
    if deadline is not None:
        arguments += ["--time-budget", str(max(1.0, deadline - time.time()))]
    return arguments


def starts(experiment: Experiment, out: Path) -> bool:
    """Whether the run in `out` is to be trained: not finished, and the experiment's own (a recipe's run that a grid
    cell reads is not run again)."""
    return out.parent.name == experiment.id and not finished(out)


INTERRUPTED = (130, 143)  # a training's exit on Ctrl-C or SIGTERM (the shells' codes), after saving what it had


def run_one(experiment: Experiment, seed: int, runs_dir: Path, deadline: float | None, single_thread: bool, prune: bool) -> Path:
    out = run_dir(experiment, seed, runs_dir)
    if not starts(experiment, out):
        return out
    if deadline is not None and (left := deadline - time.time()) < LAST_START:
        # one write a line: the runs' threads print side by side
        print(f"{experiment.id} seed {seed}: not started, {max(left, 0):.0f} s before the deadline\n", end="", flush=True)
        return out
    out.mkdir(parents=True, exist_ok=True)
    write_config(experiment, seed, out)
    command = [sys.executable, "-m", "turnformer.cli", *train_arguments(experiment, seed, out, deadline)]
    env = dict(os.environ)
    if single_thread:
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    with open(out / "train.log", "a") as log:
        log.write(" ".join(command) + "\n")
        log.flush()
        code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
    said = (out / "train.log").read_text().strip().splitlines()
    if code == 0:
        status = "done"
    elif code in INTERRUPTED:  # Ctrl-C or SIGTERM: the training said whether it saved a checkpoint to go on from
        status = f"interrupted: {said[-1]}"
    else:
        status = f"FAILED ({code}): " + " | ".join(said[-3:])
    print(f"{experiment.id} seed {seed}: {status}\n", end="", flush=True)
    result = run_result(out) if code == 0 else None
    if prune and result is not None and not result.get("stopped_early"):
        # trained whole: its records stay, its checkpoints go; a run cut by the deadline keeps last/ to go on from, and a
        # failed one (refused, as when another training writes into the folder) keeps what is there
        for name in ("last", "best"):
            shutil.rmtree(out / name, ignore_errors=True)
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, epilog="Plans:\n\n" + "\n".join(task.__doc__ for task in TASKS),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plan", action="append", required=True)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/erc"))
    parser.add_argument("--results-dir", type=Path, default=CHECKOUT_RESULTS,
                        help="Where results files are read and written (default: this checkout's benchmarks/results, "
                             "wherever the command runs from).")
    parser.add_argument("--seeds", default="1,2,3", help="Seeds of DialogXL and its variants.")
    parser.add_argument("--baseline-seeds", default=None, help="Seeds of the baselines (default: --seeds).")
    parser.add_argument("--grid-seeds", default="1", help="Seeds of the act-grid cells (fewer than the main rows').")
    parser.add_argument("--swda-train", type=int, default=120, help="Training conversations of SwDA for figure4.")
    parser.add_argument("--deadline", type=float, default=None, help="Seconds from now by which every run stops.")
    parser.add_argument("--prune", action="store_true", help="Delete a run's checkpoints when it has trained whole (keep its records; a run cut by --deadline or failed "
                             "keeps them).")
    parser.add_argument("--datasets", default=None, help="Keep only the experiments on these datasets (comma-separated).")
    parser.add_argument("--models", default=None, help="Keep only the experiments of these models (comma-separated).")
    parser.add_argument("--experiments", default=None, help="Keep only these experiment ids (comma-separated), "
                        "e.g. one cell of a grid: dialogue-act-dailydialog-lc-attention-w1-p2.")
    parser.add_argument("--seed-major", action="store_true",
                        help="Run every experiment's first seed before any second one, one-seed experiments last "
                             "(a cut run then still has every main row).")
    parser.add_argument("--dry-run", action="store_true", help="Print the runs the command would start; start none.")
    args = parser.parse_args(argv)
    if twice := sorted({name for name in args.plan if args.plan.count(name) > 1}):
        parser.error(f"--plan {twice[0]} given twice")
    for option in ("runs_dir", "results_dir"):
        if getattr(args, option).exists() and not getattr(args, option).is_dir():
            parser.error(f"--{option.replace('_', '-')} {getattr(args, option)}: a file; give a folder")
    if args.swda_train < 1:
        parser.error(f"--swda-train {args.swda_train}: give 1 or more training conversations")
    if args.workers < 1:
        parser.error(f"--workers {args.workers}: give 1 or more")
    if args.deadline is not None and not args.deadline > 0:
        parser.error(f"--deadline {args.deadline}: give the seconds from now, above 0")
    for option in ("seeds", "baseline_seeds", "grid_seeds"):
        if getattr(args, option) is not None:
            try:
                seed_list(getattr(args, option))
            except ValueError as e:
                parser.error(f"--{option.replace('_', '-')} {getattr(args, option)}: {e}")
    return args


def seed_list(text: str) -> tuple[int, ...]:
    """Seeds written 1,2,3: whole numbers, 0 or more (training refuses a negative seed), each once."""
    try:
        seeds = tuple(int(s) for s in text.split(","))
    except ValueError:
        raise ValueError("give whole numbers separated by commas, e.g. 1,2,3") from None
    if any(s < 0 for s in seeds):
        raise ValueError("seeds are 0 or more")
    if any(s > MAX_SEED for s in seeds):
        raise ValueError(f"seeds are at most {MAX_SEED}")
    if twice := sorted({s for s in seeds if seeds.count(s) > 1}):  # two runs of one seed would train into one folder
        raise ValueError(f"seed {twice[0]} given twice")
    return seeds


def selected_experiments(args: argparse.Namespace) -> list[Experiment]:
    """The experiments of the plans named, with the command line's seeds, narrowed by --datasets, --models and
    --experiments."""
    seeds = seed_list(args.seeds)
    baseline_seeds = seed_list(args.baseline_seeds) if args.baseline_seeds else seeds
    experiments = [e for name in args.plan
                   for e in plan(name, seeds, baseline_seeds, args.swda_train, seed_list(args.grid_seeds))]
    for option, of in (("datasets", lambda e: e.dataset), ("models", lambda e: e.model)):
        if given := getattr(args, option):
            unknown = sorted(set(given.split(",")) - {of(e) for e in experiments})
            if unknown:
                raise SystemExit(f"--{option}: not in the plans: {', '.join(unknown)} (the plans have "
                                 f"{', '.join(sorted({of(e) for e in experiments}))})")
            experiments = [e for e in experiments if of(e) in given.split(",")]
    if args.experiments:
        wanted = args.experiments.split(",")
        unknown = sorted(set(wanted) - {e.id for e in experiments})
        if unknown:
            raise SystemExit(f"--experiments: not in the plans: {', '.join(unknown)}")
        experiments = [e for e in experiments if e.id in wanted]
    return experiments


def scheduled_jobs(experiments: list[Experiment], earlier: dict, runs_dir: Path, seed_major: bool) -> list[tuple[Experiment, int]]:
    """(experiment, seed) of every run to train, longest first (DailyDialog, SwDA), so that the pool does not end
    waiting on one long run; with `seed_major`, every experiment's first seed before any second one, experiments of
    one seed (ablations) last."""
    jobs = [(e, s) for e in experiments for s in seeds_to_run(e, earlier.get(e.id), runs_dir)]
    weight = {"dailydialog": 3, "swda": 2}
    jobs.sort(key=lambda job: ((len(job[0].seeds) == 1, job[0].seeds.index(job[1])) if seed_major else (0, 0),
                               -weight.get(job[0].dataset, 1), job[0].model != "concat-context"))
    return jobs


def emulated_bf16_warning(experiments: list[Experiment]) -> str | None:
    """A line for experiments that train in bf16 where no GPU is and the CPU has no bfloat16 instructions: autocast
    emulates the type there, many times slower than float32 (docs/dialogxl.md). None otherwise."""
    bf16 = [e.id for e in experiments if "train.mixed_precision=bf16" in e.overrides]
    if not bf16:
        return None
    import torch
    from turnformer.training.loop import cpu_has_bf16

    if torch.cuda.is_available() or cpu_has_bf16():
        return None
    return (f"warning: {len(bf16)} experiment(s) train in bf16 mixed precision ({bf16[0]}{', ...' if len(bf16) > 1 else ''}) "
            "and this CPU has no bfloat16 instructions: autocast emulates the type, many times slower than float32 "
            "(train each with `turnformer train ... --set train.mixed_precision=no` instead)")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    deadline = time.time() + args.deadline if args.deadline is not None else None
    experiments = selected_experiments(args)
    if warning := emulated_bf16_warning(experiments):
        print(warning, file=sys.stderr, flush=True)
    from_recipe_files = {e.id: record for e in experiments if (record := recipe_record(e, args.runs_dir, args.results_dir))}
    earlier = {e.id: record for e in experiments
               if e.id not in from_recipe_files and (record := earlier_record(e, args.results_dir))}
    jobs = scheduled_jobs([e for e in experiments if e.id not in from_recipe_files], earlier, args.runs_dir, args.seed_major)
    if args.dry_run:
        starting = [(e, s, out) for e, s in jobs if starts(e, out := run_dir(e, s, args.runs_dir))]
        print(f"{len(starting)} runs would start, {args.workers} at a time (--dry-run: none started)", flush=True)
        for e, s, out in starting:
            print(f"{e.id} seed {s}: turnformer {' '.join(train_arguments(e, s, out, deadline))}", flush=True)
        return
    to_train = sum(1 for e, s in jobs if starts(e, run_dir(e, s, args.runs_dir)))
    print(f"{to_train} of {len(jobs)} runs to train (the others have finished), {args.workers} at a time", flush=True)
    # a cell that reads the runs of another experiment of this command starts once those have finished
    ids = {e.id for e in experiments}
    readers = {e.id for e in experiments if e.recipe_runs in ids}
    try:
        with ThreadPoolExecutor(args.workers) as pool:
            for phase in ([job for job in jobs if job[0].id not in readers], [job for job in jobs if job[0].id in readers]):
                list(pool.map(lambda job: run_one(*job, args.runs_dir, deadline, args.workers > 1, args.prune), phase))
    except KeyboardInterrupt:  # Ctrl-C reaches the trainings too: each has saved its checkpoint and said so above
        print("interrupted: nothing collected; the same command goes on with the runs not finished", file=sys.stderr,
              flush=True)
        raise SystemExit(130) from None
    collect_all(experiments, from_recipe_files, earlier, args.runs_dir, args.results_dir)


def collected(e: Experiment, earlier: dict | None, runs_dir: Path, results_dir: Path) -> dict | None:
    """Experiment `e`'s record from its runs, joined with the seeds `earlier` keeps; None, saying why, where there is
    nothing to collect."""
    runs = [run_dir(e, s, runs_dir) for s in seeds_to_run(e, earlier, runs_dir)]
    # a run without result.json, or cut before its first epoch ended, holds no score: the others are still collected
    missing = [r for r in runs if finished_epochs(r) == 0]
    if missing:
        unstarted, cut = [str(r) for r in missing if not r.exists()], [str(r) for r in missing if r.exists()]
        why = [f"{what}: {', '.join(rs)}" for what, rs in (("runs not started", unstarted),
                                                          ("runs without a finished epoch", cut)) if rs]
        print(f"{e.id}: not collected, {'; '.join(why)}", flush=True)
        return None
    if not runs:
        print(f"{e.id}: seeds {list(e.seeds)} already collected in {results_dir / e.id}.json", flush=True)
        return None
    record = collect(e.id, runs, allow_partial=True, extra=e.extra, max_epoch=e.max_epoch)
    trained = json.loads((runs[0] / "run.json").read_text())["recipe"]
    if differences := recipe_differences(resolved_recipe(e), trained):  # the file's config is the runs', said here
        print(f"{e.id}: warning: its runs trained other settings than the plan's ({'; '.join(differences[:5])}); the "
              "results file records the runs' own", flush=True)
    if earlier is not None:
        record = with_earlier_seeds(record, earlier)
    if "window" in e.extra:  # a cell of the W x P grid: the paper's number for that cell, if it ran it
        record["paper"] = paper_score(e.task, e.dataset, e.model, e.extra["window"], e.extra["padding"])
    if e.extra.get("mem_len") == 0:  # DialogXL without memory (each utterance alone) is not the paper's model
        record["paper"] = None
    return record


def collect_all(experiments: list[Experiment], from_recipe_files: dict, earlier: dict, runs_dir: Path, results_dir: Path) -> None:
    """Every experiment's results file, with the recipe its runs trained; the lr-sweep's runs make one file a model."""
    sweep: dict[str, list[tuple[Experiment, dict]]] = {}
    for e in experiments:
        if e.id in from_recipe_files:
            record = {**from_recipe_files[e.id], "recipe": recipe_entry(e)}
            print(f"{e.id}: {record['mean']:.2f} ± {record['std']:.2f} over seeds {record['seeds']}, from the recipe's results"
                  f" -> {write_result(record, results_dir)}", flush=True)
            continue
        record = collected(e, earlier.get(e.id), runs_dir, results_dir)
        if record is None:
            continue
        record["recipe"] = recipe_entry(e)
        if e.id.startswith("lr-"):
            sweep.setdefault(e.model, []).append((e, record))
            continue
        print(f"{e.id}: {record['mean']:.2f} ± {record['std']:.2f} over seeds {record['seeds']} -> "
              f"{write_result(record, results_dir)}", flush=True)
    for model, runs in sweep.items():
        write_sweep(model, runs, results_dir)


def write_sweep(model: str, runs: list[tuple[Experiment, dict]], results_dir: Path) -> None:
    """erc-lr-sweep-MODEL.json: validation score of every (rate, dataset); the rate with the best mean; the recipe of
    every run under "recipes"."""
    rates: dict[str, dict[str, float]] = {}
    for e, record in runs:
        rates.setdefault(e.extra["lr"], {})[e.dataset] = record["extra"]["validation"][0]
    datasets = {e.dataset for e, _ in runs}
    if missing := {lr: sorted(datasets - set(scores)) for lr, scores in rates.items() if set(scores) != datasets}:
        # a rate scored on fewer datasets is not comparable with the others' means
        print(f"{model}: no sweep file: rates without a run on every dataset ({missing})", flush=True)
        return
    mean = {lr: sum(scores.values()) / len(scores) for lr, scores in rates.items()}
    chosen = max(mean, key=mean.get)
    partial = [cut for _, r in runs for cut in (r["extra"].get("partial") or [])]
    record = make_result(
        f"erc-lr-sweep-{model}", task="erc", dataset="meld+emorynlp", split="validation", model=model,
        metric="weighted_f1_at_chosen_lr", scores=list(rates[chosen].values()), seeds=[1] * len(rates[chosen]),
        backbone="all-MiniLM-L6-v2",
        extra={"chosen_lr": chosen, "validation": rates, "mean_by_lr": mean, "partial": partial or False,
               "selection": "best mean validation weighted F1 over MELD and EmoryNLP (one seed each)"},
    )
    record["recipes"] = {e.id: r["recipe"] for e, r in runs}
    print(f"{model}: learning rate {chosen} chosen on validation -> {write_result(record, results_dir)}", flush=True)


if __name__ == "__main__":
    try:
        main()
    except SystemExit as refused:  # a message (an unknown plan, a results file to move away): a usage error, exit 2
        if not isinstance(refused.code, str):
            raise
        print(refused.code, file=sys.stderr)
        sys.exit(2)
