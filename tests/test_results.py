"""Results files and the generated tables of docs/results.md."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
from _benchmark_scripts import load_benchmark_script

from turnformer.results import load_results, make_result, render_markdown, write_result


def test_a_result_is_written_atomically_and_tabled_beside_the_paper(tmp_path):
    accuracy = make_result("acts-x", task="dialogue-act", dataset="dailydialog", split="test", model="lc-attention",
                           metric="accuracy", scores=[83.98, 83.40, 83.73], seeds=[1, 2, 3], paper=85.81)
    recall = make_result("sel-x", task="response-selection", dataset="mutual", split="dev", model="mdfn",
                         metric="r4_at_1", scores=[0.609, 0.613, 0.617], seeds=[1, 2, 3], paper=0.923, extra={"note": "n"})
    for record in (accuracy, recall):
        write_result(record, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["acts-x.json", "sel-x.json"]   # no temporary left behind
    loaded = load_results(tmp_path)
    assert loaded[0]["scores"] == [83.98, 83.40, 83.73] and json.loads((tmp_path / "acts-x.json").read_text())["commit"]
    table = render_markdown(loaded)
    assert "| accuracy | 83.70 ± 0.29 | 85.81 | 3 |" in table      # the std to the mean's precision
    assert "| r4_at_1 | 0.613 ± 0.004 | 0.923 | 3 |" in table
    ranked = make_result("sel-y", task="response-selection", dataset="mutual", split="dev", model="mdfn", metric="r4_at_1",
                         scores=[0.5150, 0.5199, 0.5248], seeds=[1, 2, 3], paper=None)
    assert "| r4_at_1 | 0.5199 ± 0.0049 | - | 3 |" in render_markdown([ranked])   # four decimals each, not ± 0.004900
    assert table.index("## dialogue-act") < table.index("## response-selection") and "- `sel-x`: note = n" in table
    assert "- `acts-x`" not in table   # no extra (or only lists and tables): no empty line for it


def test_act_grid_cells_are_pivoted_by_model_window_and_padding():
    def cell(model, w, p, scores, paper=None, **extra):
        return make_result(f"dialogue-act-dailydialog-{model}-w{w}-p{p}", task="dialogue-act", dataset="dailydialog",
                           split="test", model=model, metric="accuracy", scores=scores, seeds=list(range(1, len(scores) + 1)),
                           paper=paper, extra={"window": w, "padding": p, **extra})

    rows = [cell("lstm-blstm", 1, 2, [84.0, 83.0], 85.06), cell("lc-attention", 5, 2, [83.4], 85.81),
            cell("lstm-blstm", 1, 0, [80.5], partial=[{"stop_reason": "time budget"}]),   # cut short: marked
            cell("lc-attention", 5, 2, [90.0], predicted_per_batch=80),   # the batch sweep is no grid cell
            cell("lc-attention", 5, 2, [91.0], setup="heads1")]           # nor is the setup sweep
    rows[-2]["experiment"] += "-u80"
    rows[-1]["experiment"] += "-heads1"
    table = render_markdown(rows)
    grid = table[table.index("### dialogue-act: the W x P grid"):]
    assert "| model | W | P = 0 | P = 2 |" in grid
    assert "| lc-attention | 5 |  | 83.40 (85.81) |" in grid
    assert "| lstm-blstm | 1 | 80.50 * | 83.50 [2] (85.06) |" in grid
    assert "| accuracy | 80.50 * | - | 1 |" in table and "| accuracy | 83.50 ± 0.71 | 85.06 | 2 |" in table  # and in the main table
    assert "90.00" not in grid and "91.00" not in grid
    assert "W x P grid" not in render_markdown([make_result("x", task="dialogue-act", dataset="d", split="test", model="lstm",
                                                            metric="accuracy", scores=[1.0], seeds=[1])])


def test_phaed_memory_sweep_is_read_per_suffix_and_plotted(tmp_path):
    bench = load_benchmark_script("phaed_memory_plot")
    for c_max, suffix, perplexity in ((1, "-cpu", 90.0), (2, "-cpu", 88.0), (0, "-cpu", 91.0), (1, "", 30.0)):
        extra = {"bleu_1": [9.0 + c_max], "bleu_2": [4.0], "distinct_1": [0.14], "distinct_2": [0.17 + c_max / 100]}
        write_result(make_result(f"generation-dailydialog-phaed-cmax{c_max}{suffix}", task="generation", dataset="dailydialog",
                                 split="test", model="phaed", metric="perplexity", scores=[perplexity], seeds=[1], extra=extra), tmp_path)
    sweep = bench.load_sweep("-cpu", tmp_path)
    assert list(sweep) == [0, 1, 2] and sweep[2]["perplexity"] == 88.0 and sweep[2]["bleu_1"] == 11.0
    assert abs(sweep[2]["distinct_2"] - 0.19) < 1e-9
    assert list(bench.load_sweep("", tmp_path)) == [1]   # the GPU sweep's files are not mixed with the CPU one's
    out = tmp_path / "figure.png"
    bench.plot(sweep, out, "test")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (tmp_path / "generation-dailydialog-phaed-cmax1-cpu.json").unlink()
    with pytest.raises(SystemExit, match="c_max = 1"):
        bench.load_sweep("-cpu", tmp_path)


def test_dialogxl_memory_sweep_is_read_per_prefix_with_its_waste_rates_and_plotted(tmp_path):
    bench = load_benchmark_script("dialogxl_memory_plot")
    for experiment, f1 in (("erc-swda-first30-dialogxl-memory-bias-mem100", 40.0), ("erc-swda-first30-dialogxl-memory-bias-mem1000", 44.0),
                           ("erc-swda-first30-dialogxl-memory-bias-mem100-extra-mem200", 1.0), ("erc-swda-dialogxl-mem100", 2.0)):
        write_result(make_result(experiment, task="erc", dataset="swda", split="test", model="dialogxl-memory-bias",
                                 metric="weighted_f1", scores=[f1], seeds=[1], extra={"accuracy": [f1 + 10]}), tmp_path)
    for length, segment in ((100, 11.6), (1000, 4.3)):
        write_result(make_result(f"memory-waste-swda-mem{length}", task="erc", dataset="swda", split="test",
                                 model="segment-recurrence", metric="memory_waste_rate_percent", scores=[segment], seeds=[0],
                                 config={"batch_size": 4}, extra={"xlnet_utterance_segments_percent": 45.0,
                                                                  "utterance_recurrence_percent_batch4": length / 100}), tmp_path)
    sweep = bench.load_sweep("first30-dialogxl-memory-bias", results_dir=tmp_path)
    assert sweep == {100: {"weighted_f1": 40.0, "accuracy": 50.0}, 1000: {"weighted_f1": 44.0, "accuracy": 54.0}}
    assert list(bench.load_sweep("dialogxl", results_dir=tmp_path)) == [100]   # the other sweep's files are not mixed in
    waste = bench.load_waste(results_dir=tmp_path)
    assert waste[1000] == {"segment recurrence": 4.3, "XLNet memory, one utterance a step": 45.0,
                           "utterance recurrence (DialogXL)": 10.0}
    out = tmp_path / "figure.png"
    bench.plot(sweep, waste, out, "test")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit, match="no results file"):
        bench.load_sweep("absent", results_dir=tmp_path)


def test_figure4_cpu_sweeps_the_memory_bias_variant_on_a_subset_one_conversation_a_batch():
    runs = load_benchmark_script("run").plan("figure4-cpu", (1, 2), (1,), 120)
    assert [r.extra["mem_len"] for r in runs] == [1000, 700, 500, 300, 100, 0]
    for run in runs:
        assert run.model == "dialogxl-memory-bias" and run.seeds == (1,) and (run.limit_train, run.limit_eval) == (30, 8)
        assert f"model_config.mem_len={run.extra['mem_len']}" in run.overrides and "train.batch_size=1" in run.overrides


def test_selection_cpu_plans_share_one_scale_and_differ_only_in_their_learning_rates():
    from turnformer.recipes import find_recipe, load_recipe

    bench = load_benchmark_script("run")
    loaded = {}
    for name in ("selection-cpu", "selection-cpu-head-lr", "selection-cpu-lr"):
        for e in bench.plan(name, (1, 2, 3), (1,), 120):
            recipe = load_recipe(find_recipe("response-selection", e.model, e.dataset), list(e.overrides))
            assert (recipe["model_config"]["frozen_layers"], recipe["model_config"]["max_length"], recipe["train"]["epochs"]) == (4, 128, 2)
            assert e.limit_train == 1500 and e.seeds == (1, 2, 3)
            loaded[e.id] = recipe["train"]
    base = loaded["response-selection-mutual-mdfn-cpu"]
    assert base["lr"] == 3e-5 and "head_lr" not in base
    assert loaded["response-selection-mutual-mdfn-cpu-head-lr"] == {**base, "head_lr": 5e-4}
    assert loaded["response-selection-mutual-plain-encoder-cpu-lr1e-4"]["lr"] == 1e-4


def test_act_grid_cells_keep_their_recipes_predicted_utterances_per_batch():
    """A W x P cell differs from its recipe in the windowing only: W x sub-dialogues per batch stays the recipe's, so
    that a cell of W = 1 does not take five times the updates of one of W = 5."""
    from turnformer.recipes import find_recipe, load_recipe

    cells = load_benchmark_script("run").plan("act-grid", (1,), (1,), 120)
    assert {(c.extra["window"], c.extra["padding"]) for c in cells} >= {(1, 0), (5, 2), (10, 5), (20, 5)}
    for cell in cells:
        path = find_recipe("dialogue-act", cell.model, cell.dataset)
        recipe, cell_recipe = load_recipe(path), load_recipe(path, list(cell.overrides))
        assert (cell_recipe["window"], cell_recipe["context_padding"]) == (cell.extra["window"], cell.extra["padding"])
        assert cell_recipe["window"] * cell_recipe["train"]["batch_size"] == recipe["window"] * recipe["train"]["batch_size"]


def test_act_batch_cells_change_only_the_batch_of_their_recipe():
    from turnformer.recipes import find_recipe, load_recipe

    cells = load_benchmark_script("run").plan("act-batch", (1,), (1,), 120, grid_seeds=(1, 2))
    assert {c.extra["predicted_per_batch"] for c in cells} == {80, 160} and all(c.seeds == (1, 2) for c in cells)
    for cell in cells:
        path = find_recipe("dialogue-act", cell.model, cell.dataset)
        recipe, cell_recipe = load_recipe(path), load_recipe(path, list(cell.overrides))
        assert (cell_recipe["window"], cell_recipe["context_padding"]) == (recipe["window"], recipe["context_padding"])
        assert cell_recipe["window"] * cell_recipe["train"]["batch_size"] == cell.extra["predicted_per_batch"]
        assert cell_recipe["train"]["epochs"] == 3 and cell.id.endswith(f"-u{cell.extra['predicted_per_batch']}")


def test_act_setup_cells_change_one_open_setting_of_their_recipe():
    from turnformer.recipes import find_recipe, load_recipe

    bench = load_benchmark_script("run")
    from plans.dialogue_act import ACT_SETUP  # benchmarks/ is on the path once the runner is loaded

    cells = bench.plan("act-setup", (1,), (1,), 120, grid_seeds=(1, 2))
    assert {(c.dataset, c.model) for c in cells} == {(d, m) for d in ("dailydialog", "swda") for m in ("lc-attention", "lstm-blstm")}
    assert not any(c.model == "lstm-blstm" and c.extra["setup"] == "heads1" for c in cells)   # the BLSTM has no heads
    for cell in cells:
        path = find_recipe("dialogue-act", cell.model, cell.dataset)
        recipe, cell_recipe = load_recipe(path), load_recipe(path, list(cell.overrides))
        changed = {f"{section}.{key}" for section in ("train", "model_config")
                   for key, value in cell_recipe[section].items() if recipe[section].get(key) != value}
        assert changed == {"train.epochs", *ACT_SETUP[cell.extra["setup"]]}, cell.id
        assert (cell_recipe["window"], cell_recipe["context_padding"]) == (recipe["window"], recipe["context_padding"])
        assert cell.seeds == (1, 2) and cell.id.endswith(cell.extra["setup"])


def test_erc_longer_runs_dialogxl_and_its_baseline_ten_epochs_and_dialogxl_with_a_head_rate():
    from turnformer.recipes import find_recipe, load_recipe

    runs = {e.id: e for e in load_benchmark_script("run").plan("erc-longer", (1, 2, 3), (1,), 120)}
    assert set(runs) == {"erc-meld-dialogxl-e10", "erc-meld-concat-context-e10", "erc-emorynlp-dialogxl-e10",
                         "erc-emorynlp-concat-context-e10", "erc-meld-dialogxl-head-lr", "erc-emorynlp-dialogxl-head-lr"}
    for e in runs.values():
        recipe = load_recipe(find_recipe("erc", e.model, e.dataset), list(e.overrides))
        assert e.seeds == (1, 2, 3) and recipe["train"]["epochs"] == (10 if e.id.endswith("-e10") else 4)
        assert recipe["train"].get("head_lr") == (1e-3 if e.id.endswith("head-lr") else None)


def test_a_run_cut_by_the_deadline_continues_when_the_command_is_repeated(tmp_path):
    bench = load_benchmark_script("run")

    def run(name: str, stop_reason: str | None, checkpoint: bool):
        out = tmp_path / name
        out.mkdir()
        (out / "result.json").write_text(json.dumps({"stop_reason": stop_reason, "history": []}))
        if checkpoint:
            (out / "last").mkdir()
        return out

    assert not bench.finished(tmp_path / "never-started")
    assert bench.finished(run("done", None, checkpoint=True))
    assert not bench.finished(run("cut", "time budget of 60 s used up at step 3 (epoch 1, batch 3/9)", checkpoint=True))
    assert bench.finished(run("cut-and-pruned", "time budget of 60 s used up at step 3", checkpoint=False))
    assert bench.finished(run("max-steps", "max_steps=3 reached at step 3", checkpoint=True))


def _fake_run(out, validation: list[float], test: list[float], stop_reason: str | None = None):
    """A finished dialogue-act run folder: run.json and a result.json whose history has one entry per epoch."""
    out.mkdir(parents=True)
    recipe = {"task": "dialogue-act", "model": "lstm-blstm", "dataset": "dailydialog", "model_config": {}, "train": {"epochs": 5},
              "window": 1, "context_padding": 2}
    (out / "run.json").write_text(json.dumps({"seed": 1, "recipe": recipe}))
    history = [{"epoch": i + 1, "complete": True, "seconds": 10.0, "validation": {"primary": v},
                "test": {"primary": t, "accuracy": t, "online_accuracy": t - 1}} for i, (v, t) in enumerate(zip(validation, test))]
    best = max(history, key=lambda h: h["validation"]["primary"])["epoch"]
    (out / "result.json").write_text(json.dumps({"best_epoch": best, "train_seconds": 50.0, "stopped_early": stop_reason is not None,
                                                 "stop_reason": stop_reason, "history": history}))
    return out


def test_a_generation_row_names_the_pretrained_decoder_it_started_from(tmp_path):
    collect = load_benchmark_script("collect_erc").collect
    backbones = {}
    for model in ("smollm2-phaed", "transformer"):
        out = tmp_path / model
        out.mkdir()
        recipe = {"task": "generation", "model": model, "dataset": "dailydialog", "model_config": {}, "train": {"epochs": 1}}
        (out / "run.json").write_text(json.dumps({"seed": 1, "recipe": recipe}))
        entry = {"epoch": 1, "complete": True, "seconds": 1.0, "validation": {"perplexity": 20.0}, "test": {"perplexity": 18.0}}
        (out / "result.json").write_text(json.dumps({"best_epoch": 1, "train_seconds": 1.0, "stopped_early": False,
                                                     "stop_reason": None, "history": [entry]}))
        record = collect("x", [out])
        assert record["scores"] == [18.0]
        backbones[model] = record["backbone"]
    assert backbones == {"smollm2-phaed": "SmolLM2-135M-Instruct (SmolLM2-135M-Instruct.Q4_1.gguf, dequantised to float32)",
                         "transformer": "none (trained from scratch)"}


def test_a_results_file_says_which_mixed_precision_its_runs_trained_under(tmp_path):
    collect = load_benchmark_script("collect_erc").collect
    old = _fake_run(tmp_path / "old", validation=[70], test=[71])   # written before run.json recorded it
    assert "mixed_precision" not in collect("x", [old])["extra"]
    new = _fake_run(tmp_path / "new", validation=[70], test=[72])
    info = json.loads((new / "run.json").read_text())
    (new / "run.json").write_text(json.dumps({**info, "seed": 2, "mixed_precision": "bf16"}))
    assert collect("x", [old, new])["extra"]["mixed_precision"] == [None, "bf16"]


def test_a_results_file_names_the_machine_each_run_trained_on_not_the_one_collecting_it(tmp_path):
    from turnformer.results import machine

    collect = load_benchmark_script("collect_erc").collect
    h200 = "16 CPU cores (x86_64), NVIDIA H200, torch 2.11.0+cu130"
    old = _fake_run(tmp_path / "old", validation=[70], test=[71])  # written before run.json recorded it: this machine
    assert collect("x", [old])["machine"] == machine()
    new = _fake_run(tmp_path / "new", validation=[70], test=[72])
    info = json.loads((new / "run.json").read_text())
    (new / "run.json").write_text(json.dumps({**info, "seed": 2, "machine": h200}))
    assert collect("x", [new])["machine"] == h200
    assert collect("x", [old, new])["machine"] == f"seed 1: {machine()}; seed 2: {h200}"


def test_runs_are_scored_on_their_first_epochs_at_the_best_validation_epoch_among_them(tmp_path):
    collect = load_benchmark_script("collect_erc").collect
    run = _fake_run(tmp_path / "five-epochs", validation=[70, 75, 75, 74, 80], test=[71, 72, 90, 73, 85])
    assert collect("x", [run])["scores"] == [85]
    first_three = collect("x", [run], max_epoch=3)
    # epochs 2 and 3 tie on validation: the earlier counts, as in training; the time is that of three epochs
    assert first_three["scores"] == [72] and first_three["extra"]["best_epoch"] == [2]
    assert first_three["extra"]["train_seconds"] == [30.0] and first_three["extra"]["max_epoch"] == 3
    assert first_three["extra"]["online_accuracy"] == [71] and "(its first 3 epochs)" in first_three["command"]
    # cut by a time budget after its third epoch: complete for the first three, partial for all five
    cut = _fake_run(tmp_path / "cut", validation=[70, 75, 76], test=[71, 72, 74], stop_reason="time budget of 60 s used up")
    assert collect("x", [cut], max_epoch=3)["extra"]["partial"] is False
    with pytest.raises(SystemExit, match="cut short"):
        collect("x", [cut])
    with pytest.raises(SystemExit, match="cut short"):
        collect("x", [cut], max_epoch=4)
    assert collect("x", [cut], max_epoch=4, allow_partial=True)["extra"]["partial"][0]["run"] == str(cut)


def test_a_grid_cell_at_its_recipes_window_and_padding_reads_the_recipes_runs(tmp_path, monkeypatch):
    from turnformer.recipes import find_recipe, load_recipe

    bench = load_benchmark_script("run")
    cells = bench.plan("act-grid", (1,), (1,), 120, grid_seeds=(1, 2))
    at_recipe = [c for c in cells if c.recipe_runs]
    assert {c.recipe_runs for c in at_recipe} == {f"dialogue-act-{d}-{m}" for d in ("swda", "dailydialog")
                                                   for m in ("lc-attention", "lstm-attention", "lstm-blstm")}
    for cell in at_recipe:
        recipe = load_recipe(find_recipe("dialogue-act", cell.model, cell.dataset))
        assert (recipe["window"], recipe["context_padding"]) == (cell.extra["window"], cell.extra["padding"])
    cell = next(c for c in at_recipe if c.id == "dialogue-act-dailydialog-lstm-blstm-w1-p2")
    # seed 1's recipe run has its three epochs; seed 2's has two so far: the cell trains its own
    _fake_run(tmp_path / cell.recipe_runs / "seed1", validation=[70, 75, 76, 77, 78], test=[71, 72, 74, 75, 76])
    _fake_run(tmp_path / cell.recipe_runs / "seed2", validation=[70, 75], test=[71, 72], stop_reason="interrupted")
    assert bench.run_dir(cell, 1, tmp_path) == tmp_path / cell.recipe_runs / "seed1"
    assert bench.run_dir(cell, 2, tmp_path) == tmp_path / cell.id / "seed2"
    monkeypatch.setattr(bench.subprocess, "run", lambda *a, **k: pytest.fail("the recipe's run was trained again"))
    assert bench.run_one(cell, 1, tmp_path, None, single_thread=True, prune=True) == tmp_path / cell.recipe_runs / "seed1"
    assert (tmp_path / cell.recipe_runs / "seed1" / "result.json").exists()   # --prune leaves the recipe's run alone
    other = next(c for c in cells if c.id == "dialogue-act-dailydialog-lstm-blstm-w5-p2")
    assert other.recipe_runs is None and bench.run_dir(other, 1, tmp_path) == tmp_path / other.id / "seed1"


def test_a_cell_reading_runs_of_the_same_command_starts_after_they_finish(tmp_path, monkeypatch):
    """act-split's 3-epoch views read the 6-epoch runs the same command trains: with two workers they must not start
    (and train runs of their own) while those are still training."""
    import threading
    import time

    bench = load_benchmark_script("run")
    events, lock = [], threading.Lock()

    def fake_run_one(experiment, seed, runs_dir, deadline, single_thread, prune):
        with lock:
            events.append(("start", experiment.id, seed))
        time.sleep(0.05 if experiment.recipe_runs else 0.3)
        with lock:
            events.append(("end", experiment.id, seed))

    monkeypatch.setattr(bench, "run_one", fake_run_one)
    monkeypatch.setattr(bench, "collect_all", lambda *a, **k: None)
    monkeypatch.setattr(bench, "earlier_record", lambda e, results_dir=None: None)
    bench.main(["--plan", "act-split", "--models", "lc-attention", "--grid-seeds", "1,2", "--workers", "2",
                "--runs-dir", str(tmp_path)])
    trained = [i for i, (what, eid, _) in enumerate(events) if what == "end" and not eid.endswith("-e3")]
    reading = [i for i, (what, eid, _) in enumerate(events) if what == "start" and eid.endswith("-e3")]
    assert len(trained) == 2 and len(reading) == 2 and max(trained) < min(reading)


def test_a_grid_cell_at_its_recipe_cell_reads_the_recipes_results_file_when_its_runs_are_gone(tmp_path):
    bench = load_benchmark_script("run")
    cells = {c.id: c for c in bench.plan("act-grid", (1,), (1,), 120, grid_seeds=(1, 3))}
    cell = cells["dialogue-act-swda-lstm-blstm-w1-p5"]
    config = {"model_config": {}, "train": {"epochs": 3, "batch_size": cell.extra["batch_size"]}, "window": 1,
              "context_padding": 5, "setting": "offline"}
    commands = [f"turnformer train --task dialogue-act --model lstm-blstm --dataset swda --seed {s} --out r/seed{s}" for s in (1, 2, 3)]

    def recipe_file(**changes):
        record = make_result(cell.recipe_runs, task="dialogue-act", dataset="swda", split="test", model="lstm-blstm",
                             backbone="b", config={**config, **changes}, metric="accuracy", scores=[75.0, 76.0, 77.0],
                             seeds=[1, 2, 3], extra={"validation": [78.0, 79.0, 80.0], "best_epoch": [3, 2, 3], "partial": False},
                             command="; ".join(commands) + " (recipe values as in config)")
        write_result(record, tmp_path / "results")

    recipe_file()
    record = bench.recipe_record(cell, tmp_path / "runs", tmp_path / "results")
    assert record["seeds"] == [1, 3] and record["scores"] == [75.0, 77.0] and record["extra"]["validation"] == [78.0, 80.0]
    assert record["extra"]["best_epoch"] == [3, 3] and record["extra"]["window"] == 1 and record["paper"] == 80.0
    assert "--seed 2" not in record["command"] and "read from dialogue-act-swda-lstm-blstm.json" in record["command"]
    # cells off their model's recipe cell, and recipe runs that trained more epochs than the cell, are trained instead
    assert bench.recipe_record(cells["dialogue-act-swda-lstm-blstm-w10-p5"], tmp_path / "runs", tmp_path / "results") is None
    recipe_file(train={"epochs": 5, "batch_size": cell.extra["batch_size"]})
    assert bench.recipe_record(cell, tmp_path / "runs", tmp_path / "results") is None
    # the recipe's runs, where they are here, come first
    recipe_file()
    for seed in (1, 3):
        _fake_run(tmp_path / "runs" / cell.recipe_runs / f"seed{seed}", validation=[70, 75, 76], test=[71, 72, 74])
    assert bench.recipe_record(cell, tmp_path / "runs", tmp_path / "results") is None


def test_seeds_collected_earlier_are_not_trained_again_and_stay_beside_new_ones(tmp_path):
    from turnformer.recipes import find_recipe, load_recipe

    bench = load_benchmark_script("run")
    experiment = next(e for e in bench.plan("acts", (2, 3), (2, 3), 120) if e.id == "dialogue-act-dailydialog-lstm-blstm")
    config = bench.run_config(load_recipe(find_recipe("dialogue-act", "lstm-blstm", "dailydialog")))

    def results_file(**changes):
        record = make_result(experiment.id, task="dialogue-act", dataset="dailydialog", split="test", model="lstm-blstm",
                             backbone="b", config={**config, **changes}, metric="accuracy", scores=[80.0], seeds=[1],
                             extra={"validation": [81.0], "best_epoch": [4], "train_seconds": [9.0], "old_only": [1], "partial": False},
                             command="turnformer train ... --seed 1 (recipe values as in config)")
        write_result(record, tmp_path / "results")

    results_file(train={**config["train"], "epochs": 9})  # another training: no seed of it counts
    assert bench.earlier_record(experiment, tmp_path / "results") is None
    results_file()
    earlier = bench.earlier_record(experiment, tmp_path / "results")
    assert earlier["seeds"] == [1]
    runs = tmp_path / "runs"
    assert bench.seeds_to_run(experiment, earlier, runs) == [2, 3]
    wider = bench.Experiment(experiment.id, experiment.model, experiment.dataset, (1, 2), task="dialogue-act")
    assert bench.seeds_to_run(wider, earlier, runs) == [2]
    for seed, test in ((3, 70.0), (2, 60.0)):  # out of seed order: the joined record is in seed order
        out = _fake_run(runs / experiment.id / f"seed{seed}", validation=[70, 75], test=[test - 1, test])
        info = json.loads((out / "run.json").read_text())
        info["seed"], info["recipe"] = seed, {**info["recipe"], **config}
        (out / "run.json").write_text(json.dumps(info))
    assert bench.seeds_to_run(wider, earlier, runs) == [2] and bench.seeds_to_run(experiment, None, runs) == [2, 3]
    collect = load_benchmark_script("collect_erc").collect
    record = collect(experiment.id, [runs / experiment.id / "seed3", runs / experiment.id / "seed2"])
    joined = bench.with_earlier_seeds(record, earlier)
    assert joined["seeds"] == [1, 2, 3] and joined["scores"] == [80.0, 60.0, 70.0]
    assert joined["extra"]["validation"] == [81.0, 75, 75] and joined["extra"]["best_epoch"] == [4, 2, 2]
    # a measure that only one side recorded (the earlier file's old_only, the runs' online accuracy) is left out
    assert "old_only" not in joined["extra"] and "online_accuracy" not in joined["extra"] and "online_accuracy" in record["extra"]
    assert joined["mean"] == pytest.approx(70.0) and "seed(s) 1 read from" in joined["command"] and "--seed 2" in joined["command"]
    # runs on disk of another training replace the earlier seeds rather than join them
    other = {**record, "config": {**record["config"], "window": 7}}
    assert bench.with_earlier_seeds(other, earlier) is other
    # a results file that is not JSON is named, not read past
    (tmp_path / "results" / f"{experiment.id}.json").write_text("{not json")
    with pytest.raises(SystemExit, match=f"{experiment.id}.json: not a results file"):
        bench.earlier_record(experiment, tmp_path / "results")


def test_a_cut_run_joined_with_earlier_seeds_stays_marked_partial(tmp_path):
    bench = load_benchmark_script("run")
    collect = load_benchmark_script("collect_erc").collect
    cut = _fake_run(tmp_path / "seed2", validation=[70, 75], test=[71, 72], stop_reason="time budget of 60 s used up")
    info = json.loads((cut / "run.json").read_text())
    info["seed"] = 2
    (cut / "run.json").write_text(json.dumps(info))
    record = collect("x", [cut], allow_partial=True)
    h200 = "16 CPU cores (x86_64), NVIDIA H200, torch 2.11.0+cu130"
    earlier = {**record, "seeds": [1], "scores": [80.0], "commit": "abc", "machine": h200,
               "extra": {**record["extra"], "validation": [81.0], "best_epoch": [4], "train_seconds": [9.0],
                         "accuracy": [80.0], "online_accuracy": [79.0], "partial": False}}
    joined = bench.with_earlier_seeds(record, earlier)
    # one seed, one cut run: its list of cut runs is not mistaken for a measure with one value a seed
    assert joined["seeds"] == [1, 2] and joined["scores"] == [80.0, 72]
    assert joined["machine"] == f"seed 1: {h200}; seed 2: {record['machine']}"  # the earlier seed keeps its machine
    assert [p["run"] for p in joined["extra"]["partial"]] == [str(cut)]


def test_the_whole_seeds_of_a_results_file_with_cut_runs_are_kept_and_only_the_cut_ones_trained_again(tmp_path):
    from turnformer.recipes import find_recipe, load_recipe

    bench = load_benchmark_script("run")
    collect = load_benchmark_script("collect_erc").collect
    experiment = next(e for e in bench.plan("acts", (1, 2, 3), (1, 2, 3), 120) if e.id == "dialogue-act-dailydialog-lstm-blstm")
    config = bench.run_config(load_recipe(find_recipe("dialogue-act", "lstm-blstm", "dailydialog")))

    def results_file(partial):
        record = make_result(experiment.id, task="dialogue-act", dataset="dailydialog", split="test", model="lstm-blstm",
                             backbone="b", config=config, metric="accuracy", scores=[80.0, 60.0, 70.0], seeds=[1, 2, 3],
                             extra={"validation": [81.0, 61.0, 71.0], "best_epoch": [2, 3, 3], "partial": partial,
                                    "note": "seed 1 cut"},
                             command="...")
        write_result(record, tmp_path / "results")

    # seed 1 cut, named by its folder as in files collected before the seed was listed
    results_file([{"run": "runs/gpu/x/seed1", "stop_reason": "time budget of 60 s used up", "limits": None}])
    earlier = bench.earlier_record(experiment, tmp_path / "results")
    assert earlier["seeds"] == [2, 3] and earlier["scores"] == [60.0, 70.0] and earlier["mean"] == pytest.approx(65.0)
    assert earlier["extra"]["validation"] == [61.0, 71.0] and earlier["extra"]["best_epoch"] == [3, 3]
    assert earlier["extra"]["partial"] is False and earlier["extra"]["note"] == "seed 1 cut"
    assert bench.seeds_to_run(experiment, earlier, tmp_path / "runs") == [1]
    # seed 1 trained again, whole: joined with the file's seeds 2 and 3, no longer partial
    run = _fake_run(tmp_path / "runs" / experiment.id / "seed1", validation=[70, 75], test=[74, 90])
    info = json.loads((run / "run.json").read_text())
    info["recipe"] = {**info["recipe"], **config}
    (run / "run.json").write_text(json.dumps(info))
    joined = bench.with_earlier_seeds(collect(experiment.id, [run]), earlier)
    assert joined["seeds"] == [1, 2, 3] and joined["scores"] == [90, 60.0, 70.0] and joined["extra"]["partial"] is False
    # collect names a cut run's seed; a seed that cannot be told, a run on a subset, or no whole seed: none is kept
    cut = _fake_run(tmp_path / "cut-here", validation=[70], test=[71], stop_reason="time budget of 60 s used up")
    listed = collect("x", [cut], allow_partial=True)["extra"]["partial"]
    assert listed[0]["seed"] == 1 and bench.cut_run_seed(listed[0]) == 1
    results_file([{"run": "runs/cut-here", "stop_reason": "time budget of 60 s used up", "limits": None}])
    assert bench.earlier_record(experiment, tmp_path / "results") is None
    results_file([{"run": "runs/x/seed2", "seed": 2, "stop_reason": None, "limits": {"train": 30}}])
    assert bench.earlier_record(experiment, tmp_path / "results") is None
    results_file([{"run": f"runs/x/seed{s}", "seed": s, "stop_reason": "time budget", "limits": None} for s in (1, 2, 3)])
    assert bench.earlier_record(experiment, tmp_path / "results") is None


def test_a_run_without_a_finished_epoch_does_not_stop_the_others_being_collected(tmp_path, monkeypatch, capsys):
    bench = load_benchmark_script("run")
    ids = ["dialogue-act-dailydialog-lstm-blstm", "dialogue-act-dailydialog-lstm"]
    cut = _fake_run(tmp_path / ids[0] / "seed1", validation=[70], test=[71], stop_reason="time budget of 60 s used up")
    result = json.loads((cut / "result.json").read_text())
    result["history"][0]["complete"] = False  # cut inside its first epoch
    (cut / "result.json").write_text(json.dumps(result))
    _fake_run(tmp_path / ids[1] / "seed1", validation=[70, 75], test=[71, 72])
    written = []
    monkeypatch.setattr(bench, "write_result", lambda record, results_dir=None: written.append(record) or Path("results.json"))
    monkeypatch.setattr(bench, "run_one", lambda *a, **k: None)  # no training: the runs are on disk
    monkeypatch.setattr(sys, "argv", ["run.py", "--plan", "acts", "--seeds", "1", "--runs-dir", str(tmp_path),
                                      "--experiments", ",".join(ids)])
    bench.main()
    assert [r["experiment"] for r in written] == [ids[1]] and written[0]["scores"] == [72]
    assert f"{ids[0]}: not collected, runs without a finished epoch" in capsys.readouterr().out


def test_results_md_opens_with_each_papers_main_rows_and_marks_the_device():
    from turnformer.results import render_summary

    main = make_result("erc-meld-dialogxl", task="erc", dataset="meld", split="test", model="dialogxl", metric="weighted_f1",
                       scores=[50.0, 52.0], seeds=[1, 2], paper=62.41, backbone="all-MiniLM-L6-v2")
    main["machine"] = "16 CPU cores (x86_64), NVIDIA H100 80GB HBM3, torch 2.11.0+cu130"
    cpu = make_result("dialogue-act-swda-lstm", task="dialogue-act", dataset="swda", split="test", model="lstm",
                      metric="accuracy", scores=[72.0], seeds=[1], paper=75.59)
    cpu["machine"] = "2 CPU cores (x86_64), no GPU, torch 2.13.0+cpu"
    sweep = make_result("dialogue-act-swda-lstm-w5-p2", task="dialogue-act", dataset="swda", split="test", model="lstm",
                        metric="accuracy", scores=[71.0], seeds=[1])
    page = render_summary([sweep, cpu, main])
    assert page.index("## DialogXL") < page.index("## Local Contextual Attention")  # papers in order, not ids
    assert "| meld | dialogxl | all-MiniLM-L6-v2 | 51.00 ± 1.41 | 62.41 | 2 | GPU (NVIDIA H100 80GB HBM3) |" in page
    assert "| swda | lstm | - | 72.00 | 75.59 | 1 | CPU (2 cores) |" in page
    assert "w5-p2" not in page and "## MDFN" not in page  # sweeps elsewhere; a paper without rows is left out
    subset = make_result("dialogue-act-swda-lstm", task="dialogue-act", dataset="swda", split="test", model="lstm",
                         metric="accuracy", scores=[72.0], seeds=[1], paper=75.59, extra={"subset": {"test_dialogues": 5}})
    assert "| swda | lstm | - | 72.00 * | 75.59 | 1 |" in render_summary([subset])  # scored on part of the split: marked


def test_a_row_whose_seeds_ran_on_several_machines_names_each_gpu_once():
    from turnformer.results import device_of

    h100 = "16 CPU cores (x86_64), NVIDIA H100 80GB HBM3, torch 2.11.0+cu130"
    h200 = "16 CPU cores (x86_64), NVIDIA H200, torch 2.11.0+cu130"
    assert device_of({"machine": f"seed 1: {h100}; seeds 2, 3: {h200}"}) == "GPU (NVIDIA H100 80GB HBM3, NVIDIA H200)"
    assert device_of({"machine": f"seeds 1, 2: {h200}; seed 3: {h200}"}) == "GPU (NVIDIA H200)"
    assert device_of({"machine": h100}) == "GPU (NVIDIA H100 80GB HBM3)"
    cpu = "2 CPU cores (x86_64), no GPU, torch 2.13.0+cpu"
    assert device_of({"machine": f"seed 1: {h200}; seeds 2, 3: {cpu}"}) == "GPU (NVIDIA H200), CPU (2 cores)"
    assert device_of({"machine": cpu, "seeds": [1, 2]}) == "CPU (2 cores)" and device_of({}) == "CPU (? cores)"


def test_a_machine_line_names_each_seeds_machine_and_reads_back():
    from turnformer.results import machine_line, seed_machines

    h200, cpu = "16 CPU cores (x86_64), NVIDIA H200, torch 2.11.0+cu130", "2 CPU cores (x86_64), no GPU, torch 2.13.0+cpu"
    machines = {3: cpu, 1: h200, 2: cpu}
    assert machine_line(machines) == f"seed 1: {h200}; seeds 2, 3: {cpu}"
    assert seed_machines({"machine": machine_line(machines), "seeds": [1, 2, 3]}) == machines
    assert machine_line({1: cpu, 2: cpu}) == cpu and seed_machines({"machine": cpu, "seeds": [1, 2]}) == {1: cpu, 2: cpu}


def test_the_tables_are_built_from_the_checkouts_results_wherever_the_script_starts(tmp_path, monkeypatch):
    """From another folder make_tables read no results and wrote near-empty tables; run from benchmarks/ it failed."""
    tables = load_benchmark_script("make_tables")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs").mkdir()
    tables.main(["--docs", str(tmp_path / "docs")])
    for name in ("results.md", "results-all.md"):  # the committed tables are the results files' (regenerated with them)
        assert (tmp_path / "docs" / name).read_text() == (tables.CHECKOUT / "docs" / name).read_text(), name


def test_a_damaged_results_file_stops_the_tables_naming_it(tmp_path):
    """A damaged file was a bare JSONDecodeError or KeyError; NaN scores, an empty score list, a mean that is not its
    scores' and a second file of one experiment were tabled without a word; an empty folder gave empty tables."""
    tables = load_benchmark_script("make_tables")
    good = make_result("erc-meld-dialogxl", task="erc", dataset="meld", split="test", model="dialogxl", metric="weighted_f1",
                       scores=[50.0, 52.0], seeds=[1, 2], paper=62.41, backbone="all-MiniLM-L6-v2")
    docs = tmp_path / "docs"
    docs.mkdir()
    with pytest.raises(SystemExit, match="no results files"):
        tables.main(["--results", str(tmp_path / "results"), "--docs", str(docs)])
    cases = [("{", "not a results file"), ("[]", "expected a JSON object"),
             (json.dumps({k: v for k, v in good.items() if k != "mean"}), "missing mean"),
             (json.dumps({**good, "scores": [], "seeds": []}), "scores []: expected a list of finite numbers"),
             (json.dumps({**good, "scores": [float("nan"), 1.0]}), "scores [nan, 1.0]: expected a list of finite numbers"),
             (json.dumps({**good, "seeds": [1]}), "seeds [1]: expected one per score"),
             (json.dumps({**good, "mean": None}), "mean None, std "),
             (json.dumps({**good, "mean": 99.0}), "mean 99.0 is not the mean of its scores"),
             (json.dumps({**good, "experiment": "erc-meld-other"}), "experiment 'erc-meld-other': a results file is named after")]
    for content, message in cases:
        results = tmp_path / "results"
        results.mkdir(exist_ok=True)
        (results / "erc-meld-dialogxl.json").write_text(content)
        with pytest.raises(SystemExit) as stopped:
            tables.main(["--results", str(results), "--docs", str(docs)])
        assert str(stopped.value.code).startswith(f"error: {results / 'erc-meld-dialogxl.json'}: {message}"), stopped.value.code
        assert not any(docs.iterdir())  # nothing written
    (tmp_path / "results" / "erc-meld-dialogxl.json").write_text(json.dumps({**good, "machine": "seed one: x"}))
    with pytest.raises(SystemExit) as stopped:  # what only the renderer reads: the file named all the same
        tables.main(["--results", str(tmp_path / "results"), "--docs", str(docs)])
    assert str(stopped.value.code).startswith(f"error: {tmp_path / 'results' / 'erc-meld-dialogxl.json'}: cannot be tabled")
    write_result(good, tmp_path / "results")
    tables.main(["--results", str(tmp_path / "results"), "--docs", str(docs)])
    assert "51.00 ± 1.41" in (docs / "results-all.md").read_text()


def test_a_results_files_commit_and_folder_are_the_checkouts_wherever_a_script_starts(tmp_path, monkeypatch):
    """Started from another folder a benchmark script wrote ./benchmarks/results and the commit of that folder ("unknown"
    outside a git repository, another repository's inside one); a run folder outside run.py's layout was recorded under
    a garbled name and seed 0; a time of day was not recorded."""
    import datetime
    import subprocess

    from turnformer import results

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TURNFORMER_COMMIT", raising=False)
    assert results.RESULTS_DIR == Path(results.__file__).resolve().parents[2] / "benchmarks" / "results"
    expected = (subprocess.run(["git", "-C", str(results.CHECKOUT), "rev-parse", "--short", "HEAD"], capture_output=True,
                               text=True).stdout.strip() if (results.CHECKOUT / ".git").exists() else "unknown")
    record = make_result("x", task="erc", dataset="meld", split="test", model="dialogxl", metric="weighted_f1", scores=[1.0],
                         seeds=[1])
    assert record["commit"] == expected and expected != ""
    assert datetime.datetime.fromisoformat(record["time"]).date().isoformat() == record["date"]
    for folder, seed, name in (("generation-dailydialog-phaed/seed2", 2, "phaed"), ("dra_plain", 1, "dra_plain"),
                               ("generation-dailydialog-x/seed7", 1, "seed7")):  # a seedN folder of another seed is no seed folder
        assert results.run_experiment(tmp_path / folder, {"seed": seed}, "generation-dailydialog-") == (name, seed)


def test_the_speed_scripts_refuse_sizes_below_one_before_they_run():
    timing = load_benchmark_script("_timing")
    assert timing.count("3") == 3 and timing.counts("10,200") == [10, 200]
    for bad in ("0", "-5", "abc", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError, match=f"'{bad}': give a whole number of 1 or more"):
            timing.count(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="'10,-5': give whole numbers of 1 or more, separated by commas"):
        timing.counts("10,-5")


def test_rescored_metrics_keep_the_trainings_provenance_and_say_their_own(tmp_path):
    """benchmarks/generation_rescore.py added embedding metrics to a record under the training's command, commit and
    date alone, and compared the rescored reply metrics with the recorded ones without checking their number."""
    rescore = load_benchmark_script("generation_rescore")
    replies = {name: [1.0, 2.0] for name in rescore.REPLY_METRICS}
    record = make_result("generation-dailydialog-x-cpu", task="generation", dataset="dailydialog", split="test", model="x",
                         metric="perplexity", scores=[80.0, 82.0], seeds=[1, 2], extra=dict(replies), command="run.py --plan x")
    record["commit"] = "0000000"
    write_result(record, tmp_path)
    scored = [{**{k: v[i] for k, v in replies.items()}, **dict.fromkeys(rescore.EMBEDDING_METRICS, 60.0 + i)} for i in range(2)]
    added = rescore.add_embedding_metrics("generation-dailydialog-x-cpu", [1, 2], scored, tmp_path)
    assert (added["command"], added["commit"]) == ("run.py --plan x", "0000000") and added["extra"]["embedding_average"] == [60.0, 61.0]
    assert set(added["extra"]["embedding_metrics_by"]) == {"command", "commit", "date", "time", "machine"}
    with pytest.raises(SystemExit, match="bleu_1 rescored"):
        rescore.add_embedding_metrics("generation-dailydialog-x-cpu", [1, 2], scored[:1], tmp_path)


def test_rescoring_reads_the_conversations_the_run_scored_unless_told(tmp_path, monkeypatch):
    """benchmarks/generation_rescore.py scored every run on the first 100 conversations unless told otherwise: a run
    trained and scored on the whole split (the full-data plans) was rescored on a hundredth of it, and its record gave
    that as the split's score."""
    rescore = load_benchmark_script("generation_rescore")
    runs = {"whole": {"limits": None}, "cut": {"limits": {"train": 1000, "validation": 100, "test": 100}}}
    for name in runs:
        (tmp_path / name / "seed1").mkdir(parents=True)
        (tmp_path / name / "seed1" / "result.json").write_text("{}")
    read = []
    monkeypatch.setattr(rescore, "load_trained", lambda run_dir: (None, None, runs[run_dir.parent.name]))

    def evaluate_split(model, vocab, run, split, data_dir, limit, vectors):
        read.append(limit)
        return {"perplexity": 1.0, "bleu_2": 0.0, "distinct_2": 0.0, "embedding_average": 0.0}

    monkeypatch.setattr(rescore, "evaluate_split", evaluate_split)
    scored = [rescore.score_runs(tmp_path, name, [1], "validation", limit, None, None)[0]
              for name, limit in (("whole", None), ("cut", None), ("whole", 7))]
    assert read == [None, 100, 7]
    assert [m["limit_dialogues"] for m in scored] == [None, 100, 7]
    # conversations chosen by --limit-dialogues make a record of their own, on either split
    for split, limit, name, split_limit in (("validation", None, "x-validation", None),
                                            ("validation", 7, "x-validation-first-7", 7),
                                            ("test", 7, "x-test-first-7", 7)):
        args = argparse.Namespace(split=split, limit_dialogues=limit, runs_dir=tmp_path)
        one = {**dict.fromkeys(rescore.REPLY_METRICS + rescore.EMBEDDING_METRICS, 0.0), "perplexity": 20.0,
               "instances": 9, "sample": [], "limit_dialogues": split_limit}
        record = rescore.split_record("transformer", "x", [1], [one], args)
        assert (record["experiment"], record["split"], record["config"]["limit_dialogues"]) == (name, split, split_limit)
        assert (record["paper"] is not None) == (split == "validation")  # DRA's Table 1 is on validation


def test_a_results_file_lists_the_code_that_differs_from_its_commit(tmp_path, monkeypatch):
    """A result measured with uncommitted changes carried only the commit, as if the commit alone had made it; the
    files it names, and the figures' default places, were taken from the folder a script started in."""
    import subprocess

    from turnformer import results

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                       capture_output=True)

    for name in ("src/a.py", "benchmarks/run.py", "benchmarks/results/x.json", "docs/results.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("1\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "x")
    monkeypatch.setattr(results, "CHECKOUT", tmp_path)
    monkeypatch.delenv("TURNFORMER_COMMIT", raising=False)
    assert results.uncommitted_code() == []
    for name in ("src/a.py", "benchmarks/results/x.json", "docs/results.md", "benchmarks/plans/new.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("2\n")
    assert results.uncommitted_code() == ["benchmarks/plans/new.py", "src/a.py"]  # results and docs are no code
    record = make_result("x", task="erc", dataset="meld", split="test", model="dialogxl", metric="weighted_f1",
                         scores=[1.0], seeds=[1])
    assert record["uncommitted"] == ["benchmarks/plans/new.py", "src/a.py"]
    monkeypatch.setattr(results, "CHECKOUT", tmp_path / "nothing")
    assert results.uncommitted_code() == []

    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    assert results.shown_path(results.CHECKOUT / "docs" / "f.png") == "docs/f.png"
    assert results.shown_path(tmp_path / "f.png") == str(tmp_path / "f.png")
    assert results.DOCS_DIR == results.CHECKOUT / "docs"
    for script, option, name in (("erc_speed", "--plot", "erc-streaming-latency.png"),
                                 ("dialogxl_memory_plot", "--out", "dialogxl-memory-length.png"),
                                 ("phaed_memory_plot", "--out", "generation-phaed-memory-length.png")):
        source = (results.CHECKOUT / "benchmarks" / f"{script}.py").read_text()
        assert f"DOCS_DIR / \"{name}\"" in source and f'default=Path("docs/{name}")' not in source, (script, option)
    monkeypatch.syspath_prepend(str(results.CHECKOUT / "benchmarks"))  # act_speed imports _timing beside it
    assert load_benchmark_script("act_speed").PLOT == results.CHECKOUT / "docs" / "dialogue-act-prediction-time.png"


def _with_run_json(out: Path, **changes) -> Path:
    info = json.loads((out / "run.json").read_text())
    for key, value in changes.items():
        if key == "seed":
            info["seed"] = value
        else:
            section, name = key.split("__")
            info["recipe"].setdefault(section, {})[name] = value
    (out / "run.json").write_text(json.dumps(info))
    return out


def test_collecting_refuses_runs_of_other_recipes_the_same_seed_twice_and_a_seed_not_a_number(tmp_path):
    """Runs of another learning rate were averaged with the others under the last one's name; one folder given twice
    counted twice."""
    collect = load_benchmark_script("collect_erc").collect
    first = _fake_run(tmp_path / "s1", [50, 60], [40, 45])
    second = _with_run_json(_fake_run(tmp_path / "s2", [50, 60], [41, 46]), seed=2)
    assert collect("x", [first, second])["seeds"] == [1, 2]
    other = _with_run_json(_fake_run(tmp_path / "s3", [50, 60], [40, 45]), seed=3, train__lr=0.5)
    _with_run_json(first, train__lr=5e-5)
    with pytest.raises(SystemExit, match=r"s3: trained with another recipe than .*s1 \(train.lr: 5e-05 / 0.5\)"):
        collect("x", [first, other])
    with pytest.raises(SystemExit, match=r"s1: seed 1 twice"):
        collect("x", [first, first])
    text = _with_run_json(_fake_run(tmp_path / "s4", [50, 60], [40, 45]), seed="2")
    with pytest.raises(SystemExit, match=r"seed '2' is not a whole number"):
        collect("x", [first, text])
    # a setting that only one run records (added since, at its default) is not a difference
    newer = _with_run_json(_fake_run(tmp_path / "s5", [50, 60], [40, 45]), seed=5, train__new_setting=1)
    assert collect("x", [second, newer])["seeds"] == [2, 5]


def test_a_nan_validation_epoch_is_never_the_best_of_the_first_epochs(tmp_path):
    collect = load_benchmark_script("collect_erc").collect
    run = _fake_run(tmp_path / "nan", [50, 60, 70], [30, 40, 45])
    result = json.loads((run / "result.json").read_text())
    result["history"][0]["validation"]["primary"] = float("nan")
    (run / "result.json").write_text(json.dumps(result))
    assert collect("x", [run], max_epoch=3)["scores"] == [45]
    assert collect("x", [run], max_epoch=1, allow_partial=True)["scores"] == [30]  # the only epoch there is


def test_a_results_file_whose_std_is_not_its_scores_is_refused():
    from turnformer.results import result_problem

    record = make_result("x", task="erc", dataset="meld", split="test", model="m", metric="f1", scores=[1.0, 3.0], seeds=[1, 2])
    assert result_problem(record, "x") is None
    assert "std 123 is not the sample standard deviation of its scores (1.41421)" in result_problem({**record, "std": 123}, "x")


def test_prune_keeps_the_checkpoint_of_a_run_cut_by_the_deadline_or_failed(tmp_path, monkeypatch):
    """--prune deleted last/ of a run the deadline cut, so it was never continued, and the checkpoints of a run refused
    because another training was writing into its folder."""
    bench = load_benchmark_script("run")
    experiment = bench.plan("table2", (1,), (1,), 120)[0]
    outcomes = {"whole": (0, None), "cut": (0, "time budget of 60 s used up at step 3"), "failed": (2, None)}
    for name, (code, stop_reason) in outcomes.items():
        runs = tmp_path / name
        out = bench.run_dir(experiment, 1, runs)

        def train(command, stop_reason=stop_reason, out=out, code=code, **kwargs):
            (out / "last").mkdir(exist_ok=True)
            (out / "best").mkdir(exist_ok=True)
            if code == 0:
                (out / "result.json").write_text(json.dumps({"stopped_early": stop_reason is not None,
                                                             "stop_reason": stop_reason, "history": []}))
            return subprocess.CompletedProcess(command, code)

        monkeypatch.setattr(bench.subprocess, "run", train)
        bench.run_one(experiment, 1, runs, None, False, prune=True)
        assert (out / "last").is_dir() == (name != "whole"), name


def test_a_learning_rate_sweep_with_a_rate_not_run_on_every_dataset_writes_no_choice(tmp_path, capsys):
    bench = load_benchmark_script("run")
    sweep = [e for e in bench.plan("lr-sweep", (1,), (1,), 120) if e.model == "dialogxl"]
    record = lambda score, partial=False: {"extra": {"validation": [score], "partial": partial}, "recipe": {}}  # noqa: E731
    runs = [(e, record(50.0)) for e in sweep if not (e.extra["lr"] == "1e-4" and e.dataset == "meld")]
    bench.write_sweep("dialogxl", runs, tmp_path)
    assert "no sweep file: rates without a run on every dataset ({'1e-4': ['meld']})" in capsys.readouterr().out
    assert not list(tmp_path.iterdir())
    cut = [{"run": "r", "seed": 1, "stop_reason": "time budget"}]
    bench.write_sweep("dialogxl", [(e, record(50.0, cut if e.extra["lr"] == "5e-5" else False)) for e in sweep], tmp_path)
    assert json.loads((tmp_path / "erc-lr-sweep-dialogxl.json").read_text())["extra"]["partial"] == cut * 2


def test_runs_of_other_settings_than_the_plans_are_said_when_collected(tmp_path, monkeypatch, capsys):
    """A run folder trained with another learning rate was collected under the plan's recipe without a word."""
    bench = load_benchmark_script("run")
    experiment = bench.plan("table2", (1,), (1,), 120)[0]
    run = _with_run_json(_fake_run(bench.run_dir(experiment, 1, tmp_path), [50, 60], [40, 45]), train__lr=0.5)
    plan_recipe = {**json.loads((run / "run.json").read_text())["recipe"], "train": {"epochs": 5, "lr": 5e-5}}
    monkeypatch.setattr(bench, "resolved_recipe", lambda e: plan_recipe)
    record = bench.collected(experiment, None, tmp_path, tmp_path)
    assert record["config"]["train"]["lr"] == 0.5
    assert f"{experiment.id}: warning: its runs trained other settings than the plan's (train.lr: 5e-05 / 0.5)" in \
        capsys.readouterr().out


def test_a_grid_cell_does_not_read_a_recipe_results_file_of_other_settings(tmp_path):
    """A cell took its score from its recipe's results file when epochs, batch, window and padding agreed, whatever the
    learning rate those runs trained with."""
    bench = load_benchmark_script("run")
    cell = {c.id: c for c in bench.plan("act-grid", (1,), (1,), 120)}["dialogue-act-swda-lstm-blstm-w1-p5"]
    settings = bench.resolved_recipe(cell)
    config = {**bench.run_config(settings), "train": {**settings["train"], "epochs": cell.max_epoch}}

    def recipe_file(config):
        record = make_result(cell.recipe_runs, task="dialogue-act", dataset="swda", split="test", model="lstm-blstm",
                             config=config, metric="accuracy", scores=[75.0], seeds=[1],
                             extra={"validation": [78.0], "best_epoch": [3], "partial": False},
                             command="turnformer train --seed 1 --out r/seed1 (recipe values as in config)")
        write_result(record, tmp_path / "results")

    recipe_file(config)
    assert bench.recipe_record(cell, tmp_path / "runs", tmp_path / "results")["scores"] == [75.0]
    recipe_file({**config, "train": {**config["train"], "lr": 0.77}})
    assert bench.recipe_record(cell, tmp_path / "runs", tmp_path / "results") is None


def test_a_run_resumed_with_changed_settings_is_collected_as_partial(tmp_path):
    collect = load_benchmark_script("collect_erc").collect
    run = _fake_run(tmp_path / "changed", [50, 60], [40, 45])
    info = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**info, "resumed_with_changes": ["grad_clip: 1.0 -> 0.5"]}))
    with pytest.raises(SystemExit, match="resumed with changed settings; pass --allow-partial"):
        collect("x", [run])
    partial = collect("x", [run], allow_partial=True)["extra"]["partial"]
    assert partial[0]["resumed_with_changes"] == ["grad_clip: 1.0 -> 0.5"]
