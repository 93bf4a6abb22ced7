"""Results files and the generated tables of docs/results.md."""

from __future__ import annotations

import json

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
    assert table.index("## dialogue-act") < table.index("## response-selection") and "- `sel-x`: note = n" in table
    assert "- `acts-x`" not in table   # no extra (or only lists and tables): no empty line for it


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


def test_act_grid_cells_keep_their_recipes_predicted_utterances_per_batch():
    """A W x P cell differs from its recipe in the windowing only: W x sub-dialogues per batch stays the recipe's, so
    that a cell of W = 1 does not take five times the updates of one of W = 5."""
    from turnformer.recipes import find_recipe, load_recipe

    cells = load_benchmark_script("erc_experiments").plan("act-grid", (1,), (1,), 120)
    assert {(c.extra["window"], c.extra["padding"]) for c in cells} >= {(1, 0), (5, 2), (10, 5), (20, 5)}
    for cell in cells:
        path = find_recipe("dialogue-act", cell.model, cell.dataset)
        recipe, cell_recipe = load_recipe(path), load_recipe(path, list(cell.overrides))
        assert (cell_recipe["window"], cell_recipe["context_padding"]) == (cell.extra["window"], cell.extra["padding"])
        assert cell_recipe["window"] * cell_recipe["train"]["batch_size"] == recipe["window"] * recipe["train"]["batch_size"]


def test_a_run_cut_by_the_deadline_continues_when_the_command_is_repeated(tmp_path):
    bench = load_benchmark_script("erc_experiments")

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
