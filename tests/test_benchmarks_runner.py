"""The benchmark runner (benchmarks/run.py) and its plans (benchmarks/plans/): every plan's experiments load as
recipes, --dry-run lists the runs the runner starts, and what a run trains is written down complete."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import pytest
from _benchmark_scripts import load_benchmark_script

from turnformer.recipes import RECIPES_DIR, find_recipe, load_recipe
from turnformer.results import DRA_VALIDATION, PAPER_ACT_GRID, PAPER_ONLINE_SCORES, PAPER_SCORES, paper_score

bench = load_benchmark_script("run")


def every_experiment():
    return [e for name in bench.PLANS for e in bench.plan(name, (1, 2, 3), (1, 2), 120, grid_seeds=(1, 2))]


def without_path(recipe: dict) -> dict:
    return {k: v for k, v in recipe.items() if k != "recipe_path"}


def test_every_plan_resolves_to_recipes_that_load_with_their_overrides():
    experiments = every_experiment()
    assert len({e.id for e in experiments}) == len(experiments)  # one results file an experiment
    for e in experiments:
        recipe = bench.resolved_recipe(e)  # as `turnformer train --dataset` finds it (swda-ld: swda's, retargeted)
        assert (recipe["task"], recipe["model"], recipe["dataset"]) == (e.task, e.model, e.dataset), e.id
        assert e.seeds and all(isinstance(s, int) for s in e.seeds), e.id
        assert all(isinstance(limit, (int, type(None))) for limit in (e.limit_train, e.limit_eval)), e.id
    figure4 = bench.plan("figure4", (4, 5), (1,), 80)
    assert {e.seeds for e in figure4} == {(4,)} and {e.limit_train for e in figure4} == {80}   # --seeds, --swda-train
    with pytest.raises(SystemExit, match="unknown plan 'nope'; known: lr-sweep, table2"):
        bench.plan("nope", (1,), (1,), 120)


GPU_MPNET_PLANS = ("lr-sweep", "seeds", "paper-attention", "memory-grad", "baselines", "dailydialog", "dailydialog-rest",
                   "selection", "selection-plus", "selection-ablations", "submission", "speed", "acts-frozen")


def test_the_gpu_mpnet_script_names_runs_whose_recipes_load_with_its_settings():
    """benchmarks/gpu_mpnet.sh LIST=1: every run of every plan is a shipped recipe that loads with the settings the
    script passes (all-mpnet-base-v2, the plan's rate, the run's own settings); an unknown plan is refused."""
    script = Path(__file__).parents[1] / "benchmarks" / "gpu_mpnet.sh"
    env = {"PATH": "/usr/bin:/bin", "LIST": "1", "LR": "3e-5"}
    listed = subprocess.run(["bash", str(script), *GPU_MPNET_PLANS], env=env, capture_output=True, text=True, check=True)
    runs = [line.split() for line in listed.stdout.splitlines()]
    assert len(runs) == 74  # `baselines` repeats two runs of `seeds`: a run that has finished is not started again
    for experiment, task, model, dataset, lr, seed, *rest in runs:
        overrides = [] if lr == "recipe" else ["backbone=all-mpnet-base-v2", f"train.lr={lr}"]  # as the script writes them
        recipe = load_recipe(find_recipe(task, model, dataset), overrides + rest[1:])
        assert (recipe["task"], recipe["model"], recipe["dataset"]) == (task, model, dataset), experiment
        assert int(seed) in (1, 2, 3) and experiment.startswith(f"{task}-{dataset}-{model}"), experiment
        if lr != "recipe":
            assert recipe["train"]["lr"] == float(lr) and experiment.endswith(f"-mpnet-lr{lr}"), experiment
    assert {run[4] for run in runs if run[2] in ("dialogxl", "dialogxl-memory-grad")} == {"3e-5"}  # LR sets the rate
    dailydialog = [run for run in runs if run[3] == "dailydialog"]
    assert len(dailydialog) == len({tuple(run[:6]) for run in dailydialog}) == 13
    assert [run[2] for run in dailydialog[:5]] == ["dialogxl-memory-bias"] * 3 + ["segment-recurrence", "concat-context"]
    assert {run[-1] for run in dailydialog if run[2] == "concat-context"} == {"train.epochs=2"}
    refused = subprocess.run(["bash", str(script), "nope"], env=env, capture_output=True, text=True)
    assert refused.returncode == 2 and "unknown plan nope" in refused.stderr


# The recipes on a paper's benchmark that have no score of the papers, and why. Any other recipe on a benchmark is a
# row a paper ran, and its number is in turnformer.results.
NO_PAPER_SCORE = {
    ("erc", "swda", "dialogxl"): "stands in for IEMOCAP, where the DialogXL paper sweeps the memory (Figure 4)",
    ("erc", "meld", "dialogxl-speaker-emb"): "the DialogXL paper reports speaker-role embeddings on other datasets",
    ("response-selection", "mutual-plus", "mdfn"): "MuTual-plus: a variant no paper ran",
    ("response-selection", "mutual-plus", "plain-encoder"): "MuTual-plus: a variant no paper ran",
    ("generation", "dailydialog", "smollm2"): "a pretrained decoder fine-tuned: the row a user would deploy, no paper's",
    ("generation", "dailydialog", "smollm2-phaed"): "the same with PHAED's speaker tokens and turn attention: ours",
}
# DialogXL with a learned memory bias, or gradients through memory; dialogue acts over a frozen sentence encoder's vectors
OUR_VARIANTS = ("-memory-bias", "-memory-grad", "-frozen-mpnet", "frozen-mpnet-utterance")


def test_every_recipe_a_paper_ran_has_the_papers_score_and_no_recipe_holds_one():
    """The papers' numbers have one home, turnformer.results: no recipe file holds one, each recipe on a benchmark
    that a paper ran has one there (DRA's DailyDialog rows their validation scores), and each number there is a
    recipe's row."""
    rows = set()
    for path in sorted(RECIPES_DIR.glob("*.toml")):
        recipe = tomllib.loads(path.read_text(encoding="utf-8"))
        row = (recipe["task"], recipe["dataset"], recipe["model"])
        rows.add(row)
        assert not [key for key in recipe if key.startswith("paper")], path.name
        if row[1] == "file" or row[2].endswith(OUR_VARIANTS) or row in NO_PAPER_SCORE:
            assert paper_score(*row) is None, path.name
        else:
            assert paper_score(*row) is not None or (row[0] == "generation" and row[2] in DRA_VALIDATION), path.name
    assert set(PAPER_SCORES) | set(PAPER_ONLINE_SCORES) <= rows
    assert {("dialogue-act", dataset, model) for dataset, model, _, _ in PAPER_ACT_GRID} <= rows
    assert {("generation", "dailydialog", model) for model in DRA_VALIDATION} <= rows
    assert set(NO_PAPER_SCORE) <= rows


TABLE2_RUNS = [  # as the runner started them before its plans were data: DailyDialog first, concat-context first
    "erc-dailydialog-concat-context seed 3", "erc-dailydialog-dialogxl seed 1", "erc-dailydialog-dialogxl seed 2",
    "erc-dailydialog-segment-recurrence seed 3", "erc-meld-concat-context seed 3", "erc-emorynlp-concat-context seed 3",
    "erc-meld-dialogxl seed 1", "erc-meld-dialogxl seed 2", "erc-meld-segment-recurrence seed 3",
    "erc-emorynlp-dialogxl seed 1", "erc-emorynlp-dialogxl seed 2", "erc-emorynlp-segment-recurrence seed 3"]
SEED_MAJOR_RUNS = [  # --seed-major: every first seed, then every second one, one-seed experiments last
    "response-selection-mutual-plain-encoder-cpu seed 1", "response-selection-mutual-mdfn-cpu seed 1",
    "response-selection-mutual-plain-encoder-cpu seed 2", "response-selection-mutual-mdfn-cpu seed 2",
    *(f"erc-swda-first30-dialogxl-memory-bias-mem{m} seed 1" for m in (1000, 700, 500, 300, 100, 0))]


@pytest.mark.parametrize("argv, runs", [
    (["--plan", "table2", "--seeds", "1,2", "--baseline-seeds", "3"], TABLE2_RUNS),
    (["--plan", "figure4-cpu", "--plan", "selection-cpu", "--seed-major", "--seeds", "1,2"], SEED_MAJOR_RUNS)])
def test_dry_run_lists_the_runs_it_would_start_and_starts_none(argv, runs, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no results collected earlier: every seed is to be trained
    monkeypatch.setattr(bench.subprocess, "run", lambda *a, **k: pytest.fail("--dry-run started a run"))
    bench.main([*argv, "--runs-dir", "runs", "--results-dir", "results", "--dry-run"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{len(runs)} runs would start") and [line.split(":")[0] for line in lines[1:]] == runs
    assert not any(tmp_path.iterdir())
    if "figure4-cpu" in argv:
        assert lines[-1].endswith(
            "turnformer train --task erc --model dialogxl-memory-bias --dataset swda --seed 1 --out "
            "runs/erc-swda-first30-dialogxl-memory-bias-mem0/seed1 --set model_config.mem_len=0 --set train.batch_size=1 "
            "--set train.epochs=2 --limit-train 30 --limit-eval 8")


def test_bf16_plans_on_a_cpu_without_bfloat16_instructions_are_warned_of_up_front(tmp_path, monkeypatch, capsys):
    import torch

    from turnformer.training import loop

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for has_bf16, plan in ((False, "mpnet-cpu"), (True, "mpnet-cpu"), (False, "table2")):
        monkeypatch.setattr(loop, "cpu_has_bf16", lambda: has_bf16)
        bench.main(["--plan", plan, "--runs-dir", "runs", "--results-dir", "results", "--dry-run"])
        err = capsys.readouterr().err
        warned = plan == "mpnet-cpu" and not has_bf16
        assert ("no bfloat16 instructions" in err) == warned, (plan, has_bf16)
        if warned:
            assert "experiment(s) train in bf16 mixed precision (erc-" in err and "train.mixed_precision=no" in err


@pytest.mark.parametrize("argv, message", [
    (["--models", "transformr"], "--models: not in the plans: transformr (the plans have"),
    (["--datasets", "daily"], "--datasets: not in the plans: daily"),
    (["--seeds", "x"], "--seeds x: give whole numbers separated by commas"),
    (["--grid-seeds", "0,-1"], "--grid-seeds 0,-1: seeds are 0 or more"),
    (["--workers", "0"], "--workers 0: give 1 or more"),
    (["--deadline", "-5"], "--deadline -5.0: give the seconds from now, above 0"),
    (["--deadline", "0"], "--deadline 0.0: give the seconds from now, above 0"),
    # two runs of one seed trained into one folder, counted twice; a seed training refuses; all of SwDA for 0
    (["--seeds", "9,9"], "--seeds 9,9: seed 9 given twice"), (["--plan", "generation-full-cpu"], "--plan generation-full-cpu given twice"),
    (["--seeds", "99999999999999999999"], "seeds are at most 4294967295"),
    (["--swda-train", "0"], "--swda-train 0: give 1 or more training conversations")])
def test_options_that_would_select_nothing_or_fail_later_are_refused(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        bench.main(["--plan", "generation-full-cpu", *argv, "--runs-dir", "runs", "--results-dir", "results", "--dry-run"])
    assert message in str(stopped.value.code) + capsys.readouterr().err and not any(tmp_path.iterdir())


def test_results_are_the_checkouts_wherever_the_runner_starts_and_a_damaged_run_result_is_named(tmp_path, monkeypatch, capsys):
    """From another folder the runner read no earlier results (and retrained every seed into ./benchmarks/results);
    a --runs-dir that is a file, and a result.json that is not a run's, ended in tracebacks."""
    monkeypatch.chdir(tmp_path)
    assert bench.parse_args(["--plan", "table2"]).results_dir == Path(bench.__file__).resolve().parent / "results"
    (tmp_path / "afile").write_text("")
    with pytest.raises(SystemExit):
        bench.main(["--plan", "table2", "--runs-dir", "afile", "--dry-run"])
    assert "--runs-dir afile: a file; give a folder" in capsys.readouterr().err
    run = tmp_path / "runs" / "seed1"
    run.mkdir(parents=True)
    for content in ("garbage", "[]", "{}"):
        (run / "result.json").write_text(content)
        with pytest.raises(SystemExit, match=f"{run / 'result.json'}: not a run's result"):
            bench.finished(run)


def test_every_experiments_recipe_is_written_as_a_recipe_file_that_loads_back_the_same(tmp_path):
    path = tmp_path / "config.toml"
    for e in every_experiment():
        resolved = bench.resolved_recipe(e)
        path.write_text(bench.recipe_toml(resolved))
        assert without_path(load_recipe(path)) == resolved, e.id


def test_a_run_starts_by_writing_its_complete_recipe_into_its_folder(tmp_path, monkeypatch):
    experiment = next(e for e in bench.plan("figure4-cpu", (2,), (1,), 120) if e.extra["mem_len"] == 0)
    started = []
    monkeypatch.setattr(bench.subprocess, "run", lambda command, **k: started.append(command) or subprocess.CompletedProcess(command, 0))
    out = bench.run_one(experiment, 2, tmp_path, None, single_thread=True, prune=False)
    config = out / "config.toml"
    recipe = load_recipe(find_recipe("erc", "dialogxl-memory-bias", "swda"), list(experiment.overrides))
    assert without_path(load_recipe(config)) == without_path(recipe)
    assert load_recipe(config)["model_config"]["mem_len"] == 0 and load_recipe(config)["train"]["batch_size"] == 1
    header = config.read_text().splitlines()[:2]
    assert "erc-swda-dialogxl-memory-bias with --set model_config.mem_len=0 --set train.batch_size=1" in header[0]
    assert header[1].endswith("turnformer train --recipe config.toml --seed 2 --out DIR --limit-train 30 --limit-eval 8")
    assert started[0][started[0].index("train"):] == bench.train_arguments(experiment, 2, out, None)


def test_a_run_is_not_started_in_the_last_minute_before_the_deadline_and_one_started_ends_by_it(tmp_path, monkeypatch, capsys):
    experiment = next(e for e in bench.plan("figure4-cpu", (2,), (1,), 120) if e.extra["mem_len"] == 0)
    started = []
    monkeypatch.setattr(bench.subprocess, "run", lambda command, **k: started.append(command) or subprocess.CompletedProcess(command, 0))
    out = bench.run_one(experiment, 2, tmp_path, bench.time.time() + 30, single_thread=True, prune=False)
    assert started == [] and not out.exists()
    assert f"{experiment.id} seed 2: not started" in capsys.readouterr().out
    bench.run_one(experiment, 2, tmp_path, bench.time.time() + 300, single_thread=True, prune=False)
    budget = float(started[0][started[0].index("--time-budget") + 1])
    assert 290 < budget <= 300


def fake_run(out: Path, seed: int, recipe: dict, validation: float) -> None:
    """A finished run of one epoch, as `turnformer train` leaves it."""
    out.mkdir(parents=True)
    (out / "run.json").write_text(json.dumps({"seed": seed, "recipe": recipe}))
    history = [{"epoch": 1, "complete": True, "seconds": 1.0, "validation": {"primary": validation},
                "test": {"primary": validation - 1}}]
    (out / "result.json").write_text(json.dumps({"best_epoch": 1, "train_seconds": 1.0, "stopped_early": False,
                                                 "stop_reason": None, "history": history}))


def test_an_interrupted_run_is_said_as_such_and_ctrl_c_ends_the_runner_without_a_traceback(tmp_path, monkeypatch, capsys):
    """A training stopped by Ctrl-C (exit 130, its checkpoint saved) was reported as FAILED, and the runner ended in a
    KeyboardInterrupt traceback."""
    experiment = next(e for e in bench.plan("figure4-cpu", (2,), (1,), 120) if e.extra["mem_len"] == 0)

    def interrupted(command, stdout, **kwargs):
        stdout.write("interrupted (Ctrl-C): saved DIR/last at step 7\n")
        return subprocess.CompletedProcess(command, 130)

    monkeypatch.setattr(bench.subprocess, "run", interrupted)
    bench.run_one(experiment, 2, tmp_path, None, single_thread=True, prune=False)
    said = capsys.readouterr().out
    assert f"{experiment.id} seed 2: interrupted: interrupted (Ctrl-C): saved DIR/last at step 7" in said and "FAILED" not in said

    def ctrl_c(*args):
        raise KeyboardInterrupt

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bench, "run_one", ctrl_c)
    monkeypatch.setattr(bench, "collect_all", lambda *args: pytest.fail("an interrupted command collected"))
    with pytest.raises(SystemExit) as stopped:
        bench.main(["--plan", "figure4-cpu", "--runs-dir", "runs", "--results-dir", "results"])
    assert stopped.value.code == 130 and "interrupted: nothing collected" in capsys.readouterr().err


def test_a_results_file_holds_the_recipe_its_runs_trained(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no results collected earlier
    written = []
    monkeypatch.setattr(bench, "write_result", lambda record, results_dir=None: written.append(record) or Path("results.json"))
    monkeypatch.setenv("TURNFORMER_COMMIT", "abc1234")  # the records' commit, without asking git
    monkeypatch.setattr(bench.subprocess, "run", lambda *a, **k: pytest.fail("a finished run was started again"))
    sweep = [e for e in bench.plan("lr-sweep", (1,), (1,), 120) if e.model == "dialogxl"]
    table3 = bench.plan("table3", (1,), (1,), 120)[0]
    for e in (*sweep, table3):
        fake_run(tmp_path / "runs" / e.id / "seed1", 1, bench.resolved_recipe(e), 60.0 if e.extra.get("lr") == "5e-5" else 50.0)
    bench.main(["--plan", "table3", "--plan", "lr-sweep", "--models", "dialogxl,dialogxl-no-speaker", "--seeds", "1",
                "--runs-dir", "runs", "--results-dir", "results", "--experiments", ",".join(e.id for e in (*sweep, table3))])
    ablation, chosen = written
    assert ablation["recipe"] == {"name": "erc-meld-dialogxl-no-speaker", "overrides": [], "limit_train": None,
                                  "limit_eval": None, "settings": bench.resolved_recipe(table3)}
    assert ablation["paper"] == 61.92 and chosen["extra"]["chosen_lr"] == "5e-5"
    assert chosen["recipes"]["lr-meld-dialogxl-1e-4"]["overrides"] == ["train.lr=1e-4"]
    assert chosen["recipes"]["lr-emorynlp-dialogxl-2e-5"]["settings"]["train"]["lr"] == 2e-5
