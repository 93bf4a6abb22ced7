"""Dialogue acts from the command line: train on a slice of DailyDialog, evaluate, predict online."""

from __future__ import annotations

import json
import re

import pytest
import torch
from typer.testing import CliRunner

from turnformer.cli import app
from turnformer.data import load_split, write_jsonl

runner = CliRunner()
pytestmark = pytest.mark.data


def test_train_evaluate_predict_online(data_dir, tmp_path):
    out = tmp_path / "run"
    common = ["--data-dir", str(data_dir)]
    trained = runner.invoke(app, ["train", "--task", "dialogue-act", "--model", "lc-attention", "--dataset", "dailydialog",
                                  "--limit-dialogues", "6", "--set", "train.epochs=1", "--out", str(out), *common])
    assert trained.exit_code == 0, trained.output
    assert (out / "best").is_dir() and json.loads((out / "run.json").read_text())["recipe"]["task"] == "dialogue-act"
    # stderr is no terminal here (a log file's case): timed loss and epoch lines, no progress bar redrawn with \r
    assert re.search(r"^\d\d:\d\d:\d\d epoch 1/1, batch (\d+)/\1 \(step \1\): loss \d", trained.stderr, re.M)
    assert re.search(r"^\d\d:\d\d:\d\d epoch 1/1: train loss .*, validation .* \(best validation .* at epoch 1\)",
                     trained.stderr, re.M) and "\r" not in trained.stderr
    quiet = runner.invoke(app, ["-q", "train", "--task", "dialogue-act", "--model", "lstm", "--dataset", "dailydialog",
                                "--limit-dialogues", "4", "--set", "train.epochs=1", "--out", str(tmp_path / "quiet"), *common])
    assert quiet.exit_code == 0 and quiet.stderr == "", quiet.output

    scored = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--split", "validation", "--limit-dialogues", "3", *common])
    assert scored.exit_code == 0, scored.output
    scores = json.loads(scored.stdout)
    assert scores.pop("conversations") == 3
    assert scores.pop("utterances") == scores.pop("scored_utterances") > 0  # DailyDialog: every turn has its act
    assert scores.pop("truncated_utterances") == 0  # none longer than the 64 word pieces the model reads
    assert scores.pop("trained_setting") == "offline"
    assert set(scores) == {"offline_accuracy", "online_accuracy"} and all(0 <= v <= 100 for v in scores.values())

    dialogues = load_split("dailydialog", "test", data_dir).dialogues[:2]
    write_jsonl(dialogues, tmp_path / "two.jsonl")
    # the same conversations scored from a file of one's own and as the split's first two
    from_file = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--input", str(tmp_path / "two.jsonl")])
    from_split = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--limit-dialogues", "2", *common])
    assert from_file.exit_code == 0 and from_split.exit_code == 0, from_file.output
    assert json.loads(from_file.stdout) == json.loads(from_split.stdout)

    predicted = runner.invoke(app, ["predict", "--checkpoint", str(out), "--input", str(tmp_path / "two.jsonl"),
                                    "--online", "--out", str(tmp_path / "acts.jsonl")])
    assert predicted.exit_code == 0, predicted.output
    rows = [json.loads(line) for line in (tmp_path / "acts.jsonl").read_text().splitlines()]
    assert len(rows) == sum(len(d) for d in dialogues)
    assert all(r["label"] in {"inform", "question", "directive", "commissive"} for r in rows)
    assert all(abs(sum(r["probabilities"].values()) - 1) < 1e-3 for r in rows)

    # a model trained online predicts online unless --offline says otherwise (it was run offline, on utterances after
    # the one it labels that it never read in training: 17 points lower on DailyDialog)
    online_run = tmp_path / "online-run"
    assert runner.invoke(app, ["-q", "train", "--task", "dialogue-act", "--model", "lc-attention", "--dataset", "dailydialog",
                               "--limit-dialogues", "6", "--set", "train.epochs=1", "--set", 'setting="online"',
                               "--out", str(online_run), *common]).exit_code == 0
    made = {}
    for flags in ((), ("--online",), ("--offline",)):
        done = runner.invoke(app, ["predict", "--checkpoint", str(online_run), "--input", str(tmp_path / "two.jsonl"),
                                   *flags, "--out", "-"])
        assert done.exit_code == 0, done.output
        made[flags] = [json.loads(line)["probabilities"] for line in done.stdout.splitlines()]
    assert made[()] == made[("--online",)] != made[("--offline",)]
    online_scores = json.loads(runner.invoke(app, ["evaluate", "--checkpoint", str(online_run), "--input",
                                                   str(tmp_path / "two.jsonl")]).stdout)
    assert online_scores["trained_setting"] == "online"

    # an over-long utterance is cut to what the model reads, and the user is told which; the table stays readable
    long_text = "very " * 400 + "long"
    (tmp_path / "long.jsonl").write_text(json.dumps({"turns": [{"speaker": "A", "text": "Hi."}, {"speaker": "B", "text": long_text}]}) + "\n")
    shown = runner.invoke(app, ["predict", "--checkpoint", str(out), "--input", str(tmp_path / "long.jsonl")])
    assert shown.exit_code == 0, shown.output
    assert "1 utterance(s) longer than the model's 64 word pieces were cut to their start: 0 turn 1" in " ".join(shown.output.split())
    assert shown.output.count("very") < 40 and "…" in shown.output and "│ 0 " in shown.output   # no id: its place, 0
    written = runner.invoke(app, ["predict", "--checkpoint", str(out), "--input", str(tmp_path / "long.jsonl"),
                                  "--out", str(tmp_path / "long-acts.jsonl")])
    assert written.exit_code == 0, written.output
    rows = [json.loads(line) for line in (tmp_path / "long-acts.jsonl").read_text().splitlines()]
    assert [r["truncated"] for r in rows] == [False, True]  # each row says whether the model read only its start

    # an utterance of which the tokenizer keeps nothing (a combining accent alone) is labelled, and the user told so
    (tmp_path / "mark.jsonl").write_text(json.dumps({"id": "m", "turns": [{"speaker": "A", "text": "Hi."},
                                                                          {"speaker": "B", "text": "\u0301"}]}) + "\n")
    marked = runner.invoke(app, ["predict", "--checkpoint", str(out), "--input", str(tmp_path / "mark.jsonl")])
    assert marked.exit_code == 0, marked.output
    assert ("the tokenizer keeps nothing of 1 utterance(s) (characters it drops, such as a combining mark alone): the model "
            "read no word of them and labelled them from their context: m turn 1") in " ".join(marked.output.split())


@pytest.mark.parametrize("args, message", [
    (["--task", "dialogue-act", "--model", "dialogxl"], "unknown dialogue-act model 'dialogxl'"),
    (["--task", "summarise"], "task 'summarise': unknown task"),
])
def test_unknown_task_or_model_is_one_line_exit_2(tmp_path, args, message):
    result = runner.invoke(app, ["train", *args, "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and message in result.output


def test_plot_utterance_attention(data_dir, tmp_path):
    out = tmp_path / "run"
    common = ["--data-dir", str(data_dir)]
    trained = runner.invoke(app, ["train", "--task", "dialogue-act", "--model", "lc-attention", "--dataset", "dailydialog",
                                  "--limit-dialogues", "3", "--set", "train.epochs=1", "--out", str(out), *common])
    assert trained.exit_code == 0, trained.output
    plotted = runner.invoke(app, ["plot", "act-attention", "--checkpoint", str(out), "--checkpoint", str(out), "--input",
                                  "dailydialog:test", "--dialogue", "1", "--length", "6", "--out", str(tmp_path / "f.png"), *common])
    assert plotted.exit_code == 0, plotted.output
    assert (tmp_path / "f.png").stat().st_size > 1000

    from turnformer.data import load_split
    from turnformer.tasks.dialogue_act import utterance_attention
    from turnformer.tasks.dialogue_act import load_trained

    model, tokenizer, _ = load_trained(out)
    dialogue = load_split("dailydialog", "test", data_dir).dialogues[1]
    matrix = utterance_attention(model, tokenizer, dialogue, 0, 6)
    assert matrix.shape == (min(6, len(dialogue)),) * 2
    assert torch.allclose(matrix.sum(-1), torch.ones(matrix.shape[0]), atol=1e-5)

    blstm = runner.invoke(app, ["train", "--task", "dialogue-act", "--model", "lstm", "--dataset", "dailydialog",
                                "--limit-dialogues", "2", "--set", "train.epochs=1", "--out", str(tmp_path / "lstm"), *common])
    assert blstm.exit_code == 0, blstm.output
    refused = runner.invoke(app, ["plot", "act-attention", "--checkpoint", str(tmp_path / "lstm"), "--input", "dailydialog:test",
                                  "--out", str(tmp_path / "g.png"), *common])
    assert refused.exit_code == 2 and "no attention over utterances" in refused.output


def test_act_attention_panels_of_models_reading_different_lengths_share_one_sub_dialogue(data_dir, tmp_path, monkeypatch):
    """Two runs, one reading 4 utterances, drew a 10 x 10 panel beside a 4 x 4 one under the first's 4 labels, both
    titled lc-attention; --length 0 or --start -1 named neither option."""
    import turnformer.plots

    common = ["--data-dir", str(data_dir)]
    runs = {}
    for name, extra in (("wide", []), ("short", ["--set", "model_config.max_positions=4", "--set", "window=2", "--set", "context_padding=1"])):
        runs[name] = tmp_path / name
        trained = runner.invoke(app, ["train", "--task", "dialogue-act", "--model", "lc-attention", "--dataset", "dailydialog",
                                      "--limit-dialogues", "3", "--set", "train.epochs=1", *extra, "--out", str(runs[name]), *common])
        assert trained.exit_code == 0, trained.output
    drawn = {}
    monkeypatch.setattr(turnformer.plots, "plot_utterance_attention",
                        lambda panels, labels, out, title, first: drawn.update(panels=panels, labels=labels, title=title,
                                                                               first=first))
    plotted = runner.invoke(app, ["plot", "act-attention", "--checkpoint", str(runs["wide"]), "--checkpoint", str(runs["short"]),
                                  "--input", "dailydialog:test", "--dialogue", "1", "--length", "10", "--out",
                                  str(tmp_path / "f.png"), *common])
    assert plotted.exit_code == 0, plotted.output
    assert [(name, tuple(matrix.shape)) for name, matrix in drawn["panels"]] == [
        ("lc-attention (wide)", (4, 4)), ("lc-attention (short)", (4, 4))]
    assert len(drawn["labels"]) == 4 and drawn["title"].endswith("utterances 0..3") and drawn["first"] == 0
    assert "note: --length 10: 4 utterances shown" in " ".join(plotted.output.split())
    for option, value in (("--length", "0"), ("--start", "-1")):
        refused = runner.invoke(app, ["plot", "act-attention", "--checkpoint", str(runs["wide"]), "--input", "dailydialog:test",
                                      option, value, "--out", str(tmp_path / "g.png"), *common])
        assert refused.exit_code == 2 and option in refused.output, refused.output


def test_the_bias_measure_reads_what_lc_attention_learned(data_dir, tmp_path):
    """benchmarks/act_bias.py imported a function the command line no longer has: it could not start."""
    from _benchmark_scripts import load_benchmark_script

    measure = load_benchmark_script("act_bias")
    out, lstm = tmp_path / "run" / "seed1", tmp_path / "lstm"
    for model, folder in (("lc-attention", out), ("lstm", lstm)):
        trained = runner.invoke(app, ["train", "--task", "dialogue-act", "--model", model, "--dataset", "dailydialog", "--seed", "1",
                                      "--limit-dialogues", "2", "--set", "train.epochs=1", "--out", str(folder), "--data-dir", str(data_dir)])
        assert trained.exit_code == 0, trained.output
    common = ["--dataset", "dailydialog", "--data-dir", str(data_dir), "--results-dir", str(tmp_path / "results")]
    measure.main([str(out), *common])
    record = json.loads((tmp_path / "results" / "dialogue-act-lc-bias-dailydialog.json").read_text())
    (stats,) = record["extra"]["runs"]
    assert record["seeds"] == [1] and stats["utterances"] == sum(map(len, load_split("dailydialog", "validation", data_dir).dialogues))
    assert 0 < stats["mean_width"] < stats["max_width"] and abs(stats["mean_shift"]) <= stats["max_shift"]
    with pytest.raises(SystemExit, match="not an lc-attention dialogue-act run"):
        measure.main([str(lstm), *common])
    with pytest.raises(SystemExit, match="error: .*nothing"):
        measure.main([str(tmp_path / "nothing"), *common])
