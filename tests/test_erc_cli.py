"""train -> resume -> evaluate -> predict on a user's conversation file, with a tiny random backbone."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from turnformer.cli import app
from turnformer.data import write_jsonl
from turnformer.dialogue import Dialogue, Turn

runner = CliRunner()


@pytest.fixture(scope="module")
def conversation_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("conversations")
    happy = ["great news, I passed!", "that is wonderful", "I love this"]
    sad = ["my dog died", "I failed the exam", "it is raining again"]
    dialogues = []
    for i in range(12):
        turns = []
        for j in range(3 + i % 3):
            text, label = (happy[j % 3], "joy") if (i + j) % 2 else (sad[j % 3], "sadness")
            turns.append(Turn("Ann" if j % 2 else "Bob", text, {"emotion": label}))
        dialogues.append(Dialogue(tuple(turns), id=f"d{i}"))
    paths = {}
    for split, part in (("train", dialogues[:8]), ("validation", dialogues[8:10]), ("test", dialogues[10:])):
        paths[split] = folder / f"{split}.jsonl"
        write_jsonl(part, paths[split])
    return paths


def _train_args(files, backbone, out, *extra):
    return [
        "train", "--dataset", "file", "--train-file", str(files["train"]), "--validation-file", str(files["validation"]),
        "--test-file", str(files["test"]), "--out", str(out), "--seed", "3",
        "--set", f'backbone="{backbone}"', "--set", "model_config.heads=[1,1,1,1]", "--set", "train.lr=1e-3",
        "--set", "train.batch_size=2", *extra,
    ]


def test_train_resume_evaluate_predict(tiny_backbone_dir, conversation_files, tmp_path):
    out = tmp_path / "run"
    first = runner.invoke(app, _train_args(conversation_files, tiny_backbone_dir, out, "--set", "train.epochs=1"))
    assert first.exit_code == 0, first.output
    assert (out / "best" / "model.safetensors").exists() and (out / "run.json").exists()
    resumed = runner.invoke(app, _train_args(conversation_files, tiny_backbone_dir, out, "--set", "train.epochs=2", "--resume"))
    assert resumed.exit_code == 0, resumed.output
    history = json.loads((out / "result.json").read_text())["history"]
    assert [entry["epoch"] for entry in history] == [1, 2]  # the resumed run continued, it did not restart

    evaluated = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--split", "test", "--confusion", str(tmp_path / "cm.png")])
    assert evaluated.exit_code == 0, evaluated.output
    metrics = json.loads(evaluated.stdout)
    assert 0 <= metrics["weighted_f1"] <= 100 and metrics["primary"] == metrics["weighted_f1"]
    assert (tmp_path / "cm.png").exists()
    dev = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--split", "dev"])  # as NAME:dev reads it
    validation = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--split", "validation"])
    assert dev.exit_code == 0 and json.loads(dev.stdout) == json.loads(validation.stdout), dev.output
    unknown = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--split", "devel"])
    assert unknown.exit_code == 2 and "unknown split 'devel'" in unknown.output

    predictions = tmp_path / "pred.jsonl"
    predicted = runner.invoke(app, ["predict", "--checkpoint", str(out), "--input", str(conversation_files["test"]), "--out", str(predictions)])
    assert predicted.exit_code == 0, predicted.output
    rows = [json.loads(line) for line in predictions.read_text().splitlines()]
    assert len(rows) == sum(1 for line in conversation_files["test"].read_text().splitlines() for _ in json.loads(line)["turns"])
    assert all(set(r["probabilities"]) == {"joy", "sadness"} and r["label"] in ("joy", "sadness") for r in rows)
    assert all(abs(sum(r["probabilities"].values()) - 1) < 1e-3 for r in rows)


def test_train_reports_bad_input(conversation_files, tmp_path):
    result = runner.invoke(app, ["train", "--dataset", "file", "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "train_file" in result.output
    result = runner.invoke(app, ["train", "--task", "summarisation", "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "task 'summarisation': unknown task" in result.output
    result = runner.invoke(app, ["train", "--task", "generation", "--out", str(tmp_path / "x")])  # no default model on a benchmark
    assert result.exit_code == 2 and "--task generation on meld: name the model with --model (transformer" in result.output
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(tmp_path)])
    assert result.exit_code == 2 and "not a turnformer run" in result.output
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(tmp_path / "typo")])
    assert result.exit_code == 2 and f"{tmp_path / 'typo'}: no such run or checkpoint folder" in result.output
    (tmp_path / "model.safetensors").write_bytes(b"")
    result = runner.invoke(app, ["predict", "--checkpoint", str(tmp_path / "model.safetensors"), "--input", "x.jsonl"])
    assert result.exit_code == 2 and "model.safetensors: a file; give the run folder" in result.output


@pytest.mark.data
def test_evaluate_on_a_file_keeps_the_trained_datasets_metric(data_dir, tiny_backbone_dir, tmp_path):
    """A DailyDialog emotion model scored on a file of DailyDialog conversations: the same numbers as the split's
    first ones, and its primary metric is still micro F1 without neutral (not the weighted F1 of other files)."""
    from turnformer.data import load_split

    out, common = tmp_path / "run", ["--data-dir", str(data_dir)]
    trained = runner.invoke(app, ["train", "--dataset", "dailydialog", "--limit-dialogues", "4", "--out", str(out),
                                  "--set", f'backbone="{tiny_backbone_dir}"', "--set", "model_config.heads=[1,1,1,1]",
                                  "--set", "train.epochs=1", "--set", "train.batch_size=2", *common])
    assert trained.exit_code == 0, trained.output
    write_jsonl(load_split("dailydialog", "test", data_dir).dialogues[:4], tmp_path / "four.jsonl")
    from_file = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--input", str(tmp_path / "four.jsonl")])
    from_split = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--limit-dialogues", "4", *common])
    assert from_file.exit_code == 0 and from_split.exit_code == 0, from_file.output
    scores = json.loads(from_file.stdout)
    assert scores == json.loads(from_split.stdout) and scores["primary"] == scores["micro_f1_no_neutral"]


def test_files_get_the_best_measured_setting_and_every_model_has_settings_for_files(tiny_backbone_dir, conversation_files, tmp_path):
    from turnformer.recipes import DEFAULT_FILE_MODEL, find_recipe, load_recipe
    from turnformer.tasks.erc import ERC_MODELS

    out = tmp_path / "run"
    trained = runner.invoke(app, _train_args(conversation_files, tiny_backbone_dir, out, "--set", "train.epochs=1"))
    assert trained.exit_code == 0, trained.output
    recipe = json.loads((out / "run.json").read_text())["recipe"]
    assert recipe["model"] == DEFAULT_FILE_MODEL["erc"] == "dialogxl-memory-bias"
    assert recipe["model_config"]["memory_bias"] == -4.0 and recipe["train"]["head_lr"] == 1e-3
    for model in (*ERC_MODELS, "dialogxl-memory-bias", "dialogxl-memory-grad"):  # a file recipe of their own
        assert find_recipe("erc", model, "file").name == f"erc-file-{model}.toml"
        assert load_recipe(find_recipe("erc", model, "file"))["train"]["batch_size"] == 4
    # a paper ablation takes MELD's settings (batches of 4 conversations), and the command says so
    assert find_recipe("erc", "dialogxl-no-speaker", "file").name == "erc-meld-dialogxl-no-speaker.toml"
    ablation = runner.invoke(app, _train_args(conversation_files, tiny_backbone_dir, tmp_path / "ablation", "--model",
                                              "dialogxl-no-speaker", "--set", "train.epochs=1", "--set", "model_config.heads=[1,3,0,0]"))
    assert ablation.exit_code == 0, ablation.output
    assert "no recipe erc-file-dialogxl-no-speaker.toml: training on your files with the settings of erc-meld-dialogxl-no-speaker.toml" in ablation.output


def test_a_run_folder_is_not_trained_into_twice_without_resume_or_overwrite(tiny_backbone_dir, conversation_files, tmp_path):
    out = tmp_path / "run"
    assert runner.invoke(app, _train_args(conversation_files, tiny_backbone_dir, out, "--set", "train.epochs=1")).exit_code == 0
    before = (out / "best" / "model.safetensors").read_bytes()
    again = runner.invoke(app, _train_args(conversation_files, tiny_backbone_dir, out, "--set", "train.epochs=1"))
    assert again.exit_code == 2 and "holds a run (last, best, run.json, result.json): --resume continues it, --overwrite replaces it" in " ".join(again.output.split())
    assert (out / "best" / "model.safetensors").read_bytes() == before
    both = runner.invoke(app, _train_args(conversation_files, tiny_backbone_dir, out, "--resume", "--overwrite"))
    assert both.exit_code == 2 and "give one of them" in both.output
    replaced = runner.invoke(app, _train_args(conversation_files, tiny_backbone_dir, out, "--set", "train.epochs=1", "--seed", "4", "--overwrite"))
    assert replaced.exit_code == 0, replaced.output
    assert json.loads((out / "run.json").read_text())["seed"] == 4 and not (tmp_path / "run.replaced").exists()


@pytest.mark.skipif(not __import__("os").path.isdir("/sys/kernel"), reason="needs a read-only /sys (Linux)")
def test_an_output_path_that_cannot_be_written_fails_before_the_work(tiny_backbone_dir, conversation_files, tmp_path):
    out = tmp_path / "run"
    assert runner.invoke(app, _train_args(conversation_files, tiny_backbone_dir, out, "--set", "train.epochs=1")).exit_code == 0
    for command in (["predict", "--checkpoint", str(out), "--input", str(conversation_files["test"]), "--out", "/sys/x.jsonl"],
                    ["evaluate", "--checkpoint", str(out), "--split", "test", "--confusion", "/sys/cm.png"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2 and "/sys/" in result.output and "cannot be written" in result.output, result.output
        assert "Traceback" not in result.output


@pytest.mark.parametrize("signum, code, name", [(__import__("signal").SIGTERM, 143, "SIGTERM"), (__import__("signal").SIGINT, 130, "Ctrl-C")])
def test_a_signal_says_what_was_saved_and_how_to_resume(tiny_backbone_dir, conversation_files, tmp_path, signum, code, name):
    import os
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    args = _train_args(conversation_files, tiny_backbone_dir, out, "--set", "train.epochs=100000", "--set", "train.save_every_steps=1")
    import signal

    # a test worker may run with Ctrl-C ignored (pytest-xdist), which a child inherits: give it the default back
    process = subprocess.Popen([sys.executable, "-m", "turnformer.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not (out / "last" / "trainer_state.json").exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.2)
    time.sleep(1.0)  # well into training, past evaluations too
    process.send_signal(signum)
    try:
        _, stderr = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    assert process.returncode == code, stderr[-2000:]
    message = " ".join(stderr.split())
    assert f"interrupted ({name}): saved {out / 'last'} at step" in message and "with --resume continues it" in message
    resumed = runner.invoke(app, _train_args(conversation_files, tiny_backbone_dir, out, "--set", "train.epochs=1", "--resume"))
    assert resumed.exit_code == 0, resumed.output


def test_a_misspelt_label_field_is_named_and_never_trains_on_nothing(tiny_backbone_dir, tmp_path):
    """20 of 40 training conversations write "label" for "labels": the unknown field is named with its first line,
    the missing labels are called a likely misspelling, the unlabelled conversations are skipped (no NaN loss)."""
    lines = []
    for i in range(40):
        turns = [{"speaker": "A" if j % 2 else "B", "text": ["so happy", "so sad"][(i + j) % 2]} for j in range(3)]
        for j, turn in enumerate(turns):
            label = ["joy", "sadness"][(i + j) % 2]
            if i % 2:
                turn["label"] = {"emotion": label}  # misspelt
            else:
                turn["labels"] = {"emotion": label}
        lines.append(json.dumps({"id": f"c{i}", "turns": turns}))
    train = tmp_path / "train.jsonl"
    train.write_text("\n".join(lines) + "\n")
    files = {"train": train, "validation": train, "test": train}
    result = runner.invoke(app, _train_args(files, tiny_backbone_dir, tmp_path / "run", "--set", "train.epochs=1"))
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    assert f"unknown fields ignored: 'label' x60 (first {train}:2: turns[0].label)" in output
    assert "60 turns (20 of 40 conversations wholly) carry no 'emotion' label" in output and 'misspelling of "labels"' in output
    assert "20 of 40 training conversations carry no 'emotion' label: skipped" in output
    history = json.loads((tmp_path / "run" / "result.json").read_text())["history"]
    assert all(h["train_loss"] == h["train_loss"] for h in history)  # never NaN


def test_a_labelling_model_refuses_response_selection_items(tiny_backbone_dir, conversation_files, tmp_path):
    out = tmp_path / "run"
    assert runner.invoke(app, _train_args(conversation_files, tiny_backbone_dir, out, "--set", "train.epochs=1")).exit_code == 0
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"turns": [{"speaker": "A", "text": "hi", "emotion": "joy"}]}) + "\n"
                     + json.dumps({"turns": [{"speaker": "A", "text": "Ready?", "emotion": "joy"}],
                                   "meta": {"candidates": ["Yes.", "No."]}}) + "\n")
    result = runner.invoke(app, ["predict", "--checkpoint", str(out), "--input", str(items)])
    message = " ".join(result.output.split())
    assert result.exit_code == 2 and f"{items}:2: a response-selection item (meta.candidates)" in message
    assert "emotion-recognition (erc) model" in message
    scored = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--input", str(items)])
    assert scored.exit_code == 2 and "a response-selection item" in scored.output


def test_a_checkpoint_from_before_one_pass_still_loads_and_predicts_alike(tiny_backbone_dir, conversation_files, tmp_path):
    """A run written before chunk_tokens, memory_grad and checksums existed: its config lacks them, and it has no
    checksums.json; it loads, at those settings' defaults, and predicts as the run does."""
    out = tmp_path / "run"
    assert runner.invoke(app, _train_args(conversation_files, tiny_backbone_dir, out, "--set", "train.epochs=1")).exit_code == 0
    predictions = tmp_path / "now.jsonl"
    assert runner.invoke(app, ["predict", "--checkpoint", str(out), "--input", str(conversation_files["test"]), "--out", str(predictions)]).exit_code == 0
    for name in ("best", "last"):
        config_path = out / name / "config.json"
        config = json.loads(config_path.read_text())
        for key in ("chunk_tokens", "memory_grad"):
            config["model"].pop(key, None)
        config_path.write_text(json.dumps(config))
        (out / name / "checksums.json").unlink()
    run = json.loads((out / "run.json").read_text())
    del run["recipe"]["model_config"]["chunk_tokens"]
    (out / "run.json").write_text(json.dumps(run))
    old = tmp_path / "old.jsonl"
    result = runner.invoke(app, ["predict", "--checkpoint", str(out), "--input", str(conversation_files["test"]), "--out", str(old)])
    assert result.exit_code == 0, result.output
    assert old.read_text() == predictions.read_text()


def test_quiet_leaves_out_what_was_written(tiny_backbone_dir, conversation_files, tmp_path):
    out = tmp_path / "run"
    assert runner.invoke(app, _train_args(conversation_files, tiny_backbone_dir, out, "--set", "train.epochs=1")).exit_code == 0
    command = ["predict", "--checkpoint", str(out), "--input", str(conversation_files["test"]), "--out", str(tmp_path / "p.jsonl")]
    loud, quiet = runner.invoke(app, command), runner.invoke(app, ["-q", *command])
    assert loud.exit_code == quiet.exit_code == 0
    assert "wrote" in loud.output and "wrote" not in quiet.output


def test_a_backbone_folder_named_relatively_is_recorded_whole_and_an_empty_name_is_refused(tiny_backbone_dir,
                                                                                           conversation_files, tmp_path,
                                                                                           monkeypatch):
    """A run trained with `backbone="tiny-bert"` (a folder beside the command) recorded it so, and could not be
    evaluated or served from any other folder; `backbone=""` trained whatever model folder the command started in."""
    monkeypatch.chdir(tiny_backbone_dir.parent)
    out = tmp_path / "run"
    trained = runner.invoke(app, _train_args(conversation_files, tiny_backbone_dir.name, out, "--set", "train.epochs=1"))
    assert trained.exit_code == 0, trained.output
    assert json.loads((out / "run.json").read_text())["recipe"]["backbone"] == str(tiny_backbone_dir.resolve())
    monkeypatch.chdir(tmp_path)
    evaluated = runner.invoke(app, ["evaluate", "--checkpoint", str(out)])
    assert evaluated.exit_code == 0, evaluated.output
    monkeypatch.chdir(tiny_backbone_dir)  # a model folder: an empty name would have been it
    empty = runner.invoke(app, _train_args(conversation_files, "", tmp_path / "empty", "--set", "train.epochs=1"))
    assert empty.exit_code == 2 and "backbone '': empty; give a name" in empty.output, empty.output
    assert not (tmp_path / "empty").exists()


def test_predict_on_a_benchmark_of_other_labels_says_so(caplog):
    """`predict --input emorynlp:test` with a model of other emotions (or an act model on MELD, which has no acts)
    labelled every utterance with the model's own set, without a word."""
    from turnformer.data.registry import DATASETS
    from turnformer.tasks.common import say_other_labels

    meld = DATASETS["meld"].label_sets["emotion"]
    run = {"recipe": {"label_kind": "emotion"}, "labels": list(reversed(meld))}
    with caplog.at_level("WARNING", logger="turnformer"):
        say_other_labels("meld:test", run)  # the same set, in another order
        say_other_labels("file.jsonl", run)
        assert not caplog.text
        say_other_labels("emorynlp:test", run)
        assert "emorynlp:test: emorynlp's 'emotion' labels (" in caplog.text and "are not the model's" in caplog.text
        caplog.clear()
        say_other_labels("meld", {"recipe": {"label_kind": "act"}, "labels": ["inform", "question"]})
        assert "meld: meld has no 'act' labels; the model gives its own (inform, question) all the same" in caplog.text


def test_a_run_left_between_a_saves_two_renames_and_an_interrupted_overwrite_are_said_as_they_are(
        tiny_backbone_dir, conversation_files, tmp_path, monkeypatch):
    """A save cut between its renames leaves .last.old / .best.old: --resume said "holds no checkpoint yet" and then
    resumed, and `evaluate` called the run one without a best checkpoint. Ctrl-C early in an --overwrite credited the
    command with the old run's checkpoint."""
    out = tmp_path / "run"
    assert runner.invoke(app, _train_args(conversation_files, tiny_backbone_dir, out, "--set", "train.epochs=1")).exit_code == 0
    (out / "last").rename(out / ".last.old")
    resumed = runner.invoke(app, _train_args(conversation_files, tiny_backbone_dir, out, "--set", "train.epochs=2", "--resume"))
    assert resumed.exit_code == 0 and "holds no checkpoint yet" not in resumed.output, resumed.output
    assert [h["epoch"] for h in json.loads((out / "result.json").read_text())["history"]] == [1, 2]

    (out / "best").rename(out / ".best.old")
    evaluated = runner.invoke(app, ["evaluate", "--checkpoint", str(out)])
    assert evaluated.exit_code == 2 and f"its best/ is at {out / '.best.old'}, where a save cut short left it" in \
        " ".join(evaluated.output.split()), evaluated.output
    (out / ".best.old").rename(out / "best")

    from turnformer.tasks.registry import get_task

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(get_task("erc"), "train", stopped)
    step = json.loads((out / "last" / "trainer_state.json").read_text())["global_step"]
    replaced = runner.invoke(app, _train_args(conversation_files, tiny_backbone_dir, out, "--overwrite"))
    assert replaced.exit_code == 130
    assert f"no checkpoint was written: {out / 'last'} is as it was, at step {step}" in " ".join(replaced.output.split())


def test_resume_with_a_data_file_moved_but_the_same_is_not_warned(tiny_backbone_dir, conversation_files, tmp_path):
    out, moved = tmp_path / "run", tmp_path / "moved.jsonl"
    assert runner.invoke(app, _train_args(conversation_files, tiny_backbone_dir, out, "--set", "train.epochs=1")).exit_code == 0
    moved.write_bytes(conversation_files["train"].read_bytes())
    files = {**conversation_files, "train": moved}
    resumed = runner.invoke(app, _train_args(files, tiny_backbone_dir, out, "--set", "train.epochs=2", "--resume"))
    assert resumed.exit_code == 0 and "mixes the two trainings" not in resumed.output, resumed.output
    moved.write_text(conversation_files["train"].read_text().replace("great news", "good news"))
    changed = runner.invoke(app, _train_args(files, tiny_backbone_dir, out, "--set", "train.epochs=3", "--resume"))
    assert changed.exit_code == 0 and "mixes the two trainings" in " ".join(changed.output.split()), changed.output


def test_a_runs_test_file_moved_since_training_is_named_with_how_to_score_it(tiny_backbone_dir, conversation_files, tmp_path):
    files = {split: tmp_path / path.name for split, path in conversation_files.items()}
    for split, path in files.items():
        path.write_bytes(conversation_files[split].read_bytes())
    out = tmp_path / "run"
    assert runner.invoke(app, _train_args(files, tiny_backbone_dir, out, "--set", "train.epochs=1")).exit_code == 0
    moved = files["test"].rename(tmp_path / "elsewhere.jsonl")
    gone = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--split", "test"])
    assert gone.exit_code != 0 and "the run's test file, moved or deleted since the run was trained" in " ".join(gone.output.split())
    assert "--input FILE" in gone.output and str(files["test"].name) in gone.output
    found = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--input", str(moved)])
    assert found.exit_code == 0, found.output
    assert runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--split", "validation"]).exit_code == 0


def test_a_run_resumes_under_another_chunk_size_but_not_another_model(tiny_backbone_dir, conversation_files, tmp_path, caplog):
    """chunk_tokens changes how DialogXL computes, not what: a resumed run may lower (or raise) it, and says so; a
    setting that changes the model is still refused."""
    out = tmp_path / "run"
    first = runner.invoke(app, _train_args(conversation_files, tiny_backbone_dir, out, "--set", "train.epochs=1"))
    assert first.exit_code == 0, first.output
    other = runner.invoke(app, _train_args(conversation_files, tiny_backbone_dir, out, "--set", "train.epochs=2",
                                           "--set", "model_config.window=2", "--resume"))
    assert other.exit_code != 0 and "window: 5 in the checkpoint, 2 here" in " ".join(other.output.split())
    with caplog.at_level("WARNING"):
        resumed = runner.invoke(app, _train_args(conversation_files, tiny_backbone_dir, out, "--set", "train.epochs=2",
                                                 "--set", "model_config.chunk_tokens=1", "--resume"))
    assert resumed.exit_code == 0, resumed.output
    assert "chunk_tokens 512 -> 1" in caplog.text
    history = json.loads((out / "result.json").read_text())["history"]
    assert [entry["epoch"] for entry in history] == [1, 2]
    assert json.loads((out / "last" / "config.json").read_text())["model"]["chunk_tokens"] == 1


def test_tables_train_and_predict_as_the_json_lines_they_stand_for(tiny_backbone_dir, conversation_files, tmp_path):
    """The same conversations as CSV tables (one utterance a row): the same training, scores and predictions."""
    import csv

    from turnformer.data import read_jsonl

    tables = {}
    for split, path in conversation_files.items():
        tables[split] = tmp_path / f"{split}.csv"
        with open(tables[split], "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["conversation_id", "speaker", "utterance", "emotion"])
            writer.writerows([d.id, t.speaker, t.text, t.labels["emotion"]] for d in read_jsonl(path) for t in d.turns)
    scores, predictions = {}, {}
    for name, files in (("jsonl", conversation_files), ("csv", tables)):
        out = tmp_path / name
        trained = runner.invoke(app, _train_args(files, tiny_backbone_dir, out, "--set", "train.epochs=1"))
        assert trained.exit_code == 0, trained.output
        result = json.loads((out / "result.json").read_text())
        scores[name] = [{k: v for k, v in e.items() if "seconds" not in k} for e in result["history"]]
        predicted = runner.invoke(app, ["predict", "--checkpoint", str(out), "--input", str(files["test"]),
                                        "--out", str(tmp_path / f"{name}-predictions.jsonl")])
        assert predicted.exit_code == 0, predicted.output
        predictions[name] = (tmp_path / f"{name}-predictions.jsonl").read_text()
    assert scores["csv"] == scores["jsonl"] and predictions["csv"] == predictions["jsonl"]
    assert len(predictions["csv"].splitlines()) == sum(len(d.turns) for d in read_jsonl(tables["test"])) > 0

    # rows in another order, with a place column: each prediction names its row by turn_id, the turn's place in it
    placed = tmp_path / "placed.csv"
    lines = tables["test"].read_text().splitlines()
    placed.write_text("\n".join([lines[0] + ",turn"] + [f"{line},{i}" for i, line in enumerate(lines[1:])][::-1]) + "\n")
    out = tmp_path / "placed-predictions.jsonl"
    predicted = runner.invoke(app, ["predict", "--checkpoint", str(tmp_path / "csv"), "--input", str(placed), "--out", str(out)])
    assert predicted.exit_code == 0, predicted.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    original = [json.loads(line) for line in predictions["csv"].splitlines()]  # row i of the table is place i
    by_dialogue: dict[str, list[dict]] = {}
    for row in original:
        by_dialogue.setdefault(row["dialogue"], []).append(row)
    expected = [row for name in reversed(list(by_dialogue)) for row in by_dialogue[name]]  # turns put back in order
    assert [row["turn_id"] for row in rows] == [str(original.index(row)) for row in expected]
    assert [(r["dialogue"], r["turn"], r["text"], r["label"]) for r in rows] == \
           [(r["dialogue"], r["turn"], r["text"], r["label"]) for r in expected]
    assert all(abs(r["probabilities"][k] - e["probabilities"][k]) < 1e-3 for r, e in zip(rows, expected) for k in e["probabilities"])
