"""Bad input and awkward use of the commands end with a one-line error (exit 2) that names the file, option
or setting at fault, before any long work; nothing is lost or half-written."""

from __future__ import annotations

import errno
import gzip
import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from turnformer.cli import app
from turnformer.data import write_jsonl
from turnformer.dialogue import Dialogue, DialogueError, Turn

runner = CliRunner()


def _dialogue(i: int, turns: int = 3, label: str | None = None) -> Dialogue:
    texts = ["great news, I passed!", "my dog died", "that is wonderful", "it is raining again"]
    return Dialogue(tuple(Turn("Ann" if j % 2 else "Bob", texts[(i + j) % 4],
                               {"emotion": label or ("joy" if (i + j) % 2 else "sadness")}) for j in range(turns)), id=f"d{i}")


def _write(folder: Path, name: str, dialogues) -> Path:
    path = folder / name
    write_jsonl(list(dialogues), path)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("conversations")
    return {"train": _write(folder, "train.jsonl", [_dialogue(i) for i in range(6)]),
            "validation": _write(folder, "validation.jsonl", [_dialogue(i) for i in range(6, 8)]),
            "test": _write(folder, "test.jsonl", [_dialogue(i) for i in range(8, 10)])}


def _tiny(backbone) -> list[str]:
    settings = [f'backbone="{backbone}"', "model_config.heads=[1,1,1,1]", "train.batch_size=2", "train.epochs=1"]
    return [arg for s in settings for arg in ("--set", s)]


@pytest.fixture(scope="module")
def trained_run(tiny_backbone_dir, files, tmp_path_factory):
    """A one-epoch DialogXL run trained from inside the data folder with relative file names."""
    out = tmp_path_factory.mktemp("run") / "run"
    here = Path.cwd()
    os.chdir(files["train"].parent)
    try:
        result = runner.invoke(app, ["train", "--train-file", "train.jsonl", "--validation-file", "validation.jsonl",
                                     "--test-file", "test.jsonl", "--out", str(out), *_tiny(tiny_backbone_dir)])
    finally:
        os.chdir(here)
    assert result.exit_code == 0, result.output
    return out


def test_a_run_records_the_machine_it_trained_on(trained_run):
    from turnformer.results import machine  # a results file collected on another machine names this one

    assert json.loads((trained_run / "run.json").read_text())["machine"] == machine()


def test_file_options_imply_dataset_file_and_evaluate_works_from_anywhere(trained_run, files, tmp_path, monkeypatch):
    recipe = json.loads((trained_run / "run.json").read_text())["recipe"]
    assert recipe["dataset"] == "file" and recipe["test_file"] == str(files["test"].resolve())
    monkeypatch.chdir(tmp_path)  # another folder: the run's files are found by their absolute paths
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(trained_run), "--split", "validation"])
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout)
    assert 0 <= metrics["weighted_f1"] <= 100 and (metrics["conversations"], metrics["utterances"]) == (2, 6)
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(trained_run), "--split", "validation", "--limit-dialogues", "1"])
    assert result.exit_code == 0, result.output
    assert (json.loads(result.stdout)["conversations"], json.loads(result.stdout)["utterances"]) == (1, 3)


def test_evaluate_scores_a_labelled_file_of_ones_own(trained_run, files, tmp_path):
    """--input scores any labelled file with the run's label set: the validation file by path scores as the split."""
    by_split = runner.invoke(app, ["evaluate", "--checkpoint", str(trained_run), "--split", "validation"])
    by_file = runner.invoke(app, ["evaluate", "--checkpoint", str(trained_run), "--input", str(files["validation"])])
    assert by_split.exit_code == 0 and by_file.exit_code == 0, by_file.output
    assert json.loads(by_file.stdout) == json.loads(by_split.stdout) and json.loads(by_file.stdout)["truncated_utterances"] == 0
    long_one = _write(tmp_path, "long.jsonl", [Dialogue((Turn("Bob", "very " * 600, {"emotion": "joy"}),
                                                         Turn("Ann", "my dog died", {"emotion": "sadness"})), id="long")])
    scored = runner.invoke(app, ["evaluate", "--checkpoint", str(trained_run), "--input", str(long_one)])
    assert scored.exit_code == 0 and json.loads(scored.stdout)["truncated_utterances"] == 1  # scored on its start

    unknown = _write(tmp_path, "other.jsonl", [_dialogue(0), _dialogue(1, label="anger")])
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(trained_run), "--input", str(unknown)])
    assert result.exit_code == 2 and f"{unknown}:2: turns[0].labels.emotion: unknown label 'anger'" in result.output
    unlabelled = tmp_path / "unlabelled.jsonl"
    unlabelled.write_text(json.dumps({"turns": [{"speaker": "A", "text": "hi"}]}) + "\n")
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(trained_run), "--input", str(unlabelled)])
    assert result.exit_code == 2 and f"{unlabelled.resolve()}: no turn carries an 'emotion' label" in result.output
    unlabelled.write_text(json.dumps({"turns": [{"speaker": "A", "text": "hi", "act": "inform"}]}) + "\n")  # another kind
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(trained_run), "--input", str(unlabelled)])
    assert result.exit_code == 2 and ("nothing to score (its turns carry 'act' labels; this model was trained on 'emotion' "
                                      "labels and scores those)") in " ".join(result.output.split()), result.output
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(trained_run), "--input", str(tmp_path / "missing.jsonl")])
    assert result.exit_code == 2 and "missing.jsonl: no such file" in result.output
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(trained_run), "--input", str(unknown), "--split", "test"])
    assert result.exit_code == 2 and "--input and --split: give one or the other" in result.output


def test_file_options_with_a_benchmark_are_refused(files, tmp_path):
    result = runner.invoke(app, ["train", "--dataset", "meld", "--train-file", str(files["train"]), "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "--train-file is for your own data: drop --dataset meld" in result.output
    result = runner.invoke(app, ["train", "--train-file", str(files["train"]), "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "needs a validation file (the best epoch is chosen on it): --validation-file PATH" in result.output  # the file recipe, not MELD


@pytest.mark.parametrize("setting, message", [
    ("train.lr=abc", "train.lr = 'abc'; expected a number"),
    ("train.lr=nan", "train.lr = nan; expected a number, 0 or more"),
    ("train.batch_size=0", "train.batch_size = 0; expected a whole number, 1 or more"),
    ("train.epoch=3", "unknown setting train.epoch; known: batch_size, epochs"),
    ('train.scheduler="cosine"', "train.scheduler = 'cosine'; known: linear, constant"),
    ('train.mixed_precision="fp8"', "train.mixed_precision = 'fp8'; known: no, bf16, fp16"),
    ("trian.epochs=3", "unknown recipe key 'trian'; known: backbone"),
    ("holdout=-1", "holdout = -1; expected a whole number, 0 or more"),
    ("model_config.mem_len=-5", "model_config.mem_len = -5: must be 0 or more"),
    ("model_config.dropout=1.0", "model_config.dropout = 1.0: must be at least 0 and below 1"),
    ("model_config.mem_len=2.5", "model_config.mem_len = 2.5: expected a whole number"),
    ('model_config.memory_grad="yes"', "model_config.memory_grad = 'yes': expected true or false"),
    ('labels="joy"', "labels = 'joy'; expected a list of distinct label names"),  # was read as the labels j, o, y
    ("label_kind=3", "label_kind = 3; expected a label kind"),
    ("model_config.bogus=1", "model_config.bogus: unknown DialogXLConfig settings; known: "),
    ('task="generation"', "--set task=\"generation\": the task is --task's to set; give --task generation"),
    ("model=lstm", "--set model=lstm: the model is --model's to set; give --model lstm"),
    ('dataset="dailydialog"', "the dataset is --dataset's to set; give --dataset dailydialog"),
])
def test_bad_settings_name_the_key(files, tmp_path, setting, message):
    result = runner.invoke(app, ["train", "--train-file", str(files["train"]), "--validation-file", str(files["validation"]),
                                 "--test-file", str(files["test"]), "--out", str(tmp_path / "x"), "--set", setting])
    assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / "x").exists()


def test_a_run_folder_that_cannot_be_made_is_named(files, tmp_path):
    blocking = tmp_path / "notes.txt"
    blocking.write_text("keep me")
    data = ["--train-file", str(files["train"]), "--validation-file", str(files["validation"]), "--test-file", str(files["test"])]
    for out, why in ((blocking, "a file; give a folder for the run"), (blocking / "run", f"{blocking} is a file, not a folder")):
        result = runner.invoke(app, ["train", *data, "--out", str(out)])
        assert result.exit_code == 2 and f"--out {out}: {why}" in result.output and "Errno" not in result.output
    assert blocking.read_text() == "keep me"


def test_train_refuses_an_output_that_is_no_folder_and_a_budget_that_is_no_time(files, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = ["--train-file", str(files["train"]), "--validation-file", str(files["validation"]), "--test-file", str(files["test"])]
    result = runner.invoke(app, ["train", *data, "--out", "-"])
    assert result.exit_code == 2 and "--out -: a run is a folder" in result.output and not (tmp_path / "-").exists()
    for nameless in ("", ".", ".."):  # "PosixPath('.') has an empty name", once the models had loaded
        result = runner.invoke(app, ["train", *data, "--out", nameless])
        assert result.exit_code == 2 and "a run is a folder of its own" in result.output, result.output
    for budget in ("-1", "0", "nan"):
        result = runner.invoke(app, ["train", *data, "--out", "x", "--time-budget", budget])
        assert result.exit_code == 2 and "give a number of seconds above 0" in result.output, result.output
        assert not (tmp_path / "x").exists()


def test_a_recipe_runs_on_the_dataset_given():
    from turnformer.cli import training_recipe

    assert training_recipe("erc", "dialogxl", "emorynlp", "erc-meld-dialogxl", {}, [])["dataset"] == "emorynlp"
    assert training_recipe("erc", "dialogxl", None, "erc-meld-dialogxl", {}, [])["dataset"] == "meld"  # the recipe's own


def test_a_recipe_of_another_task_or_model_than_the_options_is_refused(tmp_path):
    for option, value, says in (("--task", "generation", "trains task 'erc'"), ("--model", "lstm", "trains model 'dialogxl'")):
        result = runner.invoke(app, ["train", "--recipe", "erc-meld-dialogxl", option, value, "--out", str(tmp_path / "x")])
        assert result.exit_code == 2 and f"{option} {value}: the recipe erc-meld-dialogxl {says}" in result.output, result.output
        assert not (tmp_path / "x").exists()


def test_an_output_file_of_the_run_read_is_refused(trained_run, files, tmp_path):
    """predict --out over a file of its own run (run.json, a checkpoint's weights) would leave a run that no longer
    loads: refused before any work, the file as it was; a new file in the run folder is written."""

    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    for checkpoint in (run, run / "best"):
        for out, says in ((run / "run.json", "the run.json"), (run / "best" / "model.safetensors", "a file in best/")):
            before = out.read_bytes()
            result = runner.invoke(app, ["predict", "--checkpoint", str(checkpoint), "--input", str(files["test"]),
                                         "--out", str(out)])
            message = " ".join(result.output.split())
            assert result.exit_code == 2 and f"{says} of the run {checkpoint}" in message, result.output
            assert out.read_bytes() == before
    folder = runner.invoke(app, ["predict", "--checkpoint", str(run / "best"), "--input", str(files["test"]), "--out", str(run)])
    assert folder.exit_code == 2 and f"the folder of the run {run / 'best'}" in " ".join(folder.output.split()), folder.output
    result = runner.invoke(app, ["predict", "--checkpoint", str(run), "--input", str(files["test"]),
                                 "--out", str(run / "predictions.jsonl")])
    assert result.exit_code == 0 and (run / "predictions.jsonl").read_text(), result.output


@pytest.mark.parametrize("option", ["--limit-train", "--limit-dialogues", "--limit-eval"])
def test_limits_must_be_positive(files, tmp_path, option):
    result = runner.invoke(app, ["train", "--train-file", str(files["train"]), "--validation-file", str(files["validation"]),
                                 "--test-file", str(files["test"]), "--out", str(tmp_path / "x"), option, "0"])
    assert result.exit_code == 2 and f"{option} 0: give a number of dialogues, 1 or more" in result.output


def test_unknown_label_and_empty_split_name_the_file(tiny_backbone_dir, files, tmp_path):
    odd = _write(tmp_path, "odd-test.jsonl", [_dialogue(20), _dialogue(21, label="anger")])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    common = ["--train-file", str(files["train"]), *_tiny(tiny_backbone_dir)]
    result = runner.invoke(app, ["train", *common, "--validation-file", str(files["validation"]), "--test-file", str(odd),
                                 "--out", str(tmp_path / "a")])
    assert result.exit_code == 2 and f"{odd}:2" in result.output and "unknown label 'anger'" in result.output
    result = runner.invoke(app, ["train", *common, "--validation-file", str(empty), "--test-file", str(files["test"]),
                                 "--out", str(tmp_path / "b")])
    assert result.exit_code == 2 and f"{empty}: no conversations in the validation file" in result.output
    assert not (tmp_path / "b" / "last").exists()  # refused before training


def test_a_training_file_with_one_label_is_refused(files, tmp_path):
    joyful = _write(tmp_path, "joy.jsonl", [_dialogue(i, label="joy") for i in range(3)])
    result = runner.invoke(app, ["train", "--train-file", str(joyful), "--validation-file", str(files["validation"]),
                                 "--test-file", str(files["test"]), "--out", str(tmp_path / "x")])
    assert result.exit_code == 2, result.output
    assert f"{joyful}: every labelled turn has the same 'emotion' label, 'joy'; a classifier needs two labels" in result.output


def test_labels_that_differ_only_in_capitals_are_refused(files, tmp_path):
    """Half a file saying Joy and half joy trained four classes for two, without a word."""
    mixed = _write(tmp_path, "mixed.jsonl", [_dialogue(i, label=label) for i, label in enumerate(["joy", "Joy", "sadness", "joy"])])
    result = runner.invoke(app, ["train", "--train-file", str(mixed), "--validation-file", str(files["validation"]),
                                 "--test-file", str(files["test"]), "--out", str(tmp_path / "x")])
    assert result.exit_code == 2, result.output
    assert f"{mixed}: the 'emotion' labels 'joy' and 'Joy' differ only in capitals" in result.output.replace("\n", "")
    assert not (tmp_path / "x").exists()
    said = " ".join(result.output.split())
    assert "differ only in capitals (first at lines 1 and 2): labels are compared as written" in said
    three = _write(tmp_path, "three.jsonl", [_dialogue(i, label=label) for i, label in enumerate(["joy", "Sad", "JOY", "sad", "Joy"])])
    result = runner.invoke(app, ["train", "--train-file", str(three), "--validation-file", str(files["validation"]),
                                 "--test-file", str(files["test"]), "--out", str(tmp_path / "x")])
    said = " ".join(result.output.split())  # every spelling named, and where each is first met
    assert result.exit_code == 2 and "labels 'JOY', 'Joy' and 'joy' differ only in capitals (first at lines 3, 5 and 1), " \
        "and so do 'Sad' and 'sad' (first at lines 2 and 4)" in said, said
    stats = runner.invoke(app, ["data", "stats", str(three)])  # the first look at a file says what training will refuse
    said = " ".join(stats.output.split())
    assert stats.exit_code == 0 and f"warning: {three}: the 'emotion' labels 'JOY', 'Joy' and 'joy' differ only in " \
        "capitals: counted apart here, and refused by training" in said and "labels 'Sad' and 'sad' differ" in said, said


def test_utterance_length_over_the_backbone_positions(tiny_backbone_dir, files, tmp_path):
    result = runner.invoke(app, ["train", "--train-file", str(files["train"]), "--validation-file", str(files["validation"]),
                                 "--test-file", str(files["test"]), "--out", str(tmp_path / "x"), *_tiny(tiny_backbone_dir),
                                 "--set", "model_config.max_utterance_tokens=1000"])
    assert result.exit_code == 2 and "max_utterance_tokens = 1000 is over the backbone's 128 positions" in result.output
    # too few for a word, and a concatenated context longer than the positions: the setting named, not the code's name
    for setting, message in (("model_config.max_utterance_tokens=1", "model_config.max_utterance_tokens = 1: at least 3"),):
        result = runner.invoke(app, ["train", "--train-file", str(files["train"]), "--validation-file", str(files["validation"]),
                                     "--test-file", str(files["test"]), "--out", str(tmp_path / "x"), *_tiny(tiny_backbone_dir),
                                     "--set", setting])
        assert result.exit_code == 2 and message in result.output, result.output
    result = runner.invoke(app, ["train", "--model", "concat-context", "--train-file", str(files["train"]),
                                 "--validation-file", str(files["validation"]), "--test-file", str(files["test"]),
                                 "--out", str(tmp_path / "x"), "--set", f"backbone={json.dumps(str(tiny_backbone_dir))}"])
    assert result.exit_code == 2 and "model_config.max_length = 512: over the backbone's 128 positions" in result.output, result.output


def test_checkpoint_problems(trained_run, files, tmp_path):
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "run.json").write_text((trained_run / "run.json").read_text())
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(unfinished)])
    assert result.exit_code == 2 and "without a best checkpoint yet" in result.output
    # an --overwrite cut before the new run's first checkpoint: the run it replaces is whole beside it, and named
    aside = _copy_run(trained_run, tmp_path / "unfinished.replaced")
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(unfinished)])
    assert result.exit_code == 2 and f"the run it replaces is kept in {aside} (pass that folder to use it)" in \
        result.output.replace("\n", ""), result.output
    assert runner.invoke(app, ["evaluate", "--checkpoint", str(aside)]).exit_code == 0
    shutil.rmtree(aside)
    (unfinished / "result.json").write_text((trained_run / "result.json").read_text())  # finished, then pruned
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(unfinished)])
    assert result.exit_code == 2 and "a finished run whose checkpoints were removed" in result.output


    damaged = tmp_path / "damaged"  # best/ without its weights; then a finished run with last/ alone
    shutil.copytree(trained_run, damaged)
    (damaged / "best" / "model.safetensors").unlink()
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(damaged)])
    message = " ".join(result.output.split())
    assert result.exit_code == 2 and "best: an incomplete checkpoint, without its model.safetensors" in message, message
    shutil.rmtree(damaged / "best")
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(damaged)])
    message = " ".join(result.output.split())
    assert result.exit_code == 2 and f"without a best checkpoint (it has a latest checkpoint: pass {damaged / 'last'}" in message
    assert runner.invoke(app, ["evaluate", "--checkpoint", str(damaged / "last")]).exit_code == 0

    corrupt = tmp_path / "corrupt"
    (corrupt / "best").mkdir(parents=True)
    (corrupt / "run.json").write_text((trained_run / "run.json").read_text())
    for item in (trained_run / "best").iterdir():
        (corrupt / "best" / item.name).write_bytes(item.read_bytes())
    (corrupt / "best" / "model.safetensors").write_bytes(b"not a safetensors file")
    for command in (["evaluate"], ["predict", "--input", str(files["test"])]):
        result = runner.invoke(app, [*command, "--checkpoint", str(corrupt)])
        assert result.exit_code == 2 and "model.safetensors" in result.output and "Traceback" not in result.output, result.output


def _copy_run(run: Path, to: Path, **run_json) -> Path:
    """A copy of a run folder whose run.json has the given entries replaced (None: left out)."""
    (to / "best").mkdir(parents=True)
    for item in (run / "best").iterdir():
        (to / "best" / item.name).write_bytes(item.read_bytes())
    description = {**json.loads((run / "run.json").read_text()), **run_json}
    (to / "run.json").write_text(json.dumps({k: v for k, v in description.items() if v is not None}))
    return to


def test_a_refused_resume_leaves_the_run_as_it_was(trained_run, files, tmp_path):
    """--resume with another model config is refused; the run's run.json (what evaluate and predict read) was
    already replaced by then, so the run no longer loaded."""

    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    before = (run / "run.json").read_bytes()
    result = runner.invoke(app, ["train", "--train-file", str(files["train"]), "--validation-file", str(files["validation"]),
                                 "--test-file", str(files["test"]), "--out", str(run), "--resume",
                                 *_tiny(json.loads(before)["recipe"]["backbone"]), "--set", "model_config.window=2"])
    assert result.exit_code == 2 and "cannot resume from" in result.output and "window" in result.output, result.output
    assert (run / "run.json").read_bytes() == before
    assert runner.invoke(app, ["evaluate", "--checkpoint", str(run)]).exit_code == 0


def test_a_checkpoint_written_with_dotdot_is_the_folder_it_names(trained_run):
    """run/best/../.. (the folder holding the run) read as run/best/.. one level up: "incomplete: missing model"."""
    from turnformer.tasks.common import checkpoint_paths

    with pytest.raises(DialogueError, match="not a turnformer run"):
        checkpoint_paths(trained_run / "best" / ".." / "..")
    assert checkpoint_paths(trained_run / "best" / ".." / "best")[1] == checkpoint_paths(trained_run)[1]


def test_a_tasks_own_loader_given_another_tasks_run_says_so(trained_run):
    """erc's loader given a generation run failed with a bare KeyError 'backbone'; the others' named no task."""
    from turnformer.tasks import dialogue_act, erc, generation, response_selection
    from turnformer.tasks.registry import load_trained

    assert load_trained(trained_run)[0].name == "erc" and erc.load_trained(trained_run)[0] is not None
    for module in (dialogue_act, generation, response_selection):
        with pytest.raises(DialogueError, match=rf"a run of task 'erc', not '{module.TASK.name}': load it with "
                                                "turnformer.tasks.registry.load_trained"):
            module.load_trained(trained_run)


def test_corrupt_run_description_names_the_file(trained_run, files, tmp_path):
    """A run.json that is JSON but not a run description was a traceback (a list) or a bare "'labels'" (a missing entry)."""
    cases = [(b"[]", "expected a JSON object with a 'recipe' object"), (b"\xff\xfe{}", "'utf-8' codec can't decode byte 0xff"),
             (json.dumps({**json.loads((trained_run / "run.json").read_text()), "labels": None}).encode(),
              "labels: expected the model's list of label names, got None")]
    described = json.loads((trained_run / "run.json").read_text())
    for dataset in ("bogus", ["meld"]):  # one hand-edited or from a newer version: named, not a bare "unknown dataset"
        cases.append((json.dumps({**described, "recipe": {**described["recipe"], "dataset": dataset}}).encode(),
                      f"recipe.dataset: unknown dataset {dataset!r}; available: dailydialog, meld,"))
    for i, (content, message) in enumerate(cases):
        run = _copy_run(trained_run, tmp_path / f"run{i}")
        (run / "run.json").write_bytes(content)
        for command in (["evaluate"], ["predict", "--input", str(files["test"])], ["generate", "--input", str(files["test"])]):
            result = runner.invoke(app, [*command, "--checkpoint", str(run)])
            assert result.exit_code == 2 and f"{run / 'run.json'}: corrupt run description: {message}" in result.output, result.output
    # an entry the checks above do not cover: named, not a bare "'backbone'"
    description = json.loads((trained_run / "run.json").read_text())
    run = _copy_run(trained_run, tmp_path / "no-backbone", recipe={k: v for k, v in description["recipe"].items() if k != "backbone"})
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(run)])
    assert result.exit_code == 2 and "missing entry 'backbone' in the recipe or run description" in result.output, result.output


def test_labels_of_the_run_description_are_checked_against_the_checkpoint(trained_run, files, tmp_path):
    """run.json's labels name the model's outputs: a label named twice lost one class's probability without a word, and
    labels renamed (or a run.json copied from another run) put other names on them; the checkpoint's label_map.json
    holds the names it was trained with."""
    labels = json.loads((trained_run / "run.json").read_text())["labels"]
    assert len(labels) >= 2
    twice = _copy_run(trained_run, tmp_path / "twice", labels=[labels[0]] * len(labels))
    renamed = _copy_run(trained_run, tmp_path / "renamed", labels=[f"x{i}" for i in range(len(labels))])
    for run, message in ((twice, f"corrupt run description: labels: {labels[0]!r} named more than once"),
                         (renamed, "differ from the checkpoint's")):
        result = runner.invoke(app, ["predict", "--checkpoint", str(run), "--input", str(files["test"])])
        assert result.exit_code == 2 and str(run / "run.json") in result.output and message in result.output, result.output
    assert runner.invoke(app, ["predict", "--checkpoint", str(_copy_run(trained_run, tmp_path / "same")),
                               "--input", str(files["test"])]).exit_code == 0


def test_splits_without_labels_are_refused_before_any_work(trained_run, tiny_backbone_dir, files, tmp_path):
    """A validation or test file whose turns carry no label was trained on for an epoch, then failed with "gold and pred
    are empty" (`evaluate`: a traceback); now the error names the file."""
    unlabelled = _write(tmp_path, "unlabelled.jsonl", [Dialogue(tuple(Turn(t.speaker, t.text) for t in _dialogue(i)), id=f"u{i}")
                                                       for i in range(2)])
    result = runner.invoke(app, ["train", "--train-file", str(files["train"]), "--validation-file", str(unlabelled),
                                 "--test-file", str(files["test"]), "--out", str(tmp_path / "x"), *_tiny(tiny_backbone_dir)])
    assert result.exit_code == 2 and f"{unlabelled}: no turn carries an 'emotion' label: the validation split cannot be scored" in result.output
    assert not (tmp_path / "x").exists()
    result = runner.invoke(app, ["train", "--train-file", str(unlabelled), "--validation-file", str(files["validation"]),
                                 "--test-file", str(files["test"]), "--out", str(tmp_path / "x"), *_tiny(tiny_backbone_dir)])
    assert result.exit_code == 2 and f"{unlabelled}: no turn carries an 'emotion' label: nothing to learn" in result.output
    # labels under a field the reader does not know ({"label": "joy"}): the error names the field it ignored
    misnamed = tmp_path / "misnamed.jsonl"
    misnamed.write_text("".join(json.dumps({"turns": [{"speaker": "A", "text": "hi", "label": "joy"}], "source": "x"}) + "\n"
                                for _ in range(2)))
    result = runner.invoke(app, ["train", "--train-file", str(misnamed), "--validation-file", str(files["validation"]),
                                 "--test-file", str(files["test"]), "--out", str(tmp_path / "x"), *_tiny(tiny_backbone_dir)])
    assert result.exit_code == 2 and ("nothing to learn (fields ignored as unknown: 'source', 'label'; a turn's label is read "
                                      "from \"labels\": {\"emotion\": ...} or a top-level \"emotion\" field)") in result.output, result.output

    recipe = {**json.loads((trained_run / "run.json").read_text())["recipe"], "test_file": str(unlabelled)}
    run = _copy_run(trained_run, tmp_path / "run", recipe=recipe)
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(run)])
    assert result.exit_code == 2 and f"{unlabelled}: no turn carries an 'emotion' label: the test split cannot be scored" in result.output
    # a file given to the trained model (--input) is spoken of as a file, not as the run's test split
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(trained_run), "--input", str(empty)])
    assert result.exit_code == 2 and f"{empty}: no conversations in the file" in result.output, result.output
    partly = _write(tmp_path, "partly.jsonl", [Dialogue(tuple(Turn(t.speaker, t.text) for t in _dialogue(0)), id="u"), _dialogue(1)])
    run = _copy_run(trained_run, tmp_path / "run-partly", recipe={**recipe, "test_file": str(partly)})
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(run), "--limit-dialogues", "1"])
    assert result.exit_code == 2 and "--limit-dialogues 1: no turn carries an 'emotion' label" in result.output, result.output
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(run)])
    assert result.exit_code == 0, result.output
    assert (json.loads(result.stdout)["utterances"], json.loads(result.stdout)["scored_utterances"]) == (6, 3)  # 3 unlabelled
    # a training file with labels whose first conversation has none: --limit-train 1 leaves nothing to learn
    result = runner.invoke(app, ["train", "--train-file", str(partly), "--validation-file", str(files["validation"]),
                                 "--test-file", str(files["test"]), "--out", str(tmp_path / "y"), "--limit-train", "1",
                                 *_tiny(tiny_backbone_dir)])
    assert result.exit_code == 2 and "the first 1 train dialogues: no turn carries an 'emotion' label: nothing to learn" in result.output
    assert not (tmp_path / "y").exists()


def test_predict_outputs_and_inputs(trained_run, files, tmp_path):
    nested = tmp_path / "new" / "folder" / "predictions.jsonl"
    result = runner.invoke(app, ["predict", "--checkpoint", str(trained_run), "--input", str(files["test"]), "--out", str(nested)])
    assert result.exit_code == 0, result.output
    assert len(nested.read_text().splitlines()) == 6 and not list(nested.parent.glob("*.tmp"))
    result = runner.invoke(app, ["predict", "--checkpoint", str(trained_run), "--input", str(files["test"]), "--out", "-"])
    assert result.exit_code == 0 and result.stdout == nested.read_text()  # "-": the same lines on standard output
    assert "wrote 6 predictions to standard output" in result.stderr
    result = runner.invoke(app, ["predict", "--checkpoint", str(trained_run), "--input", str(files["test"]), "--out", str(tmp_path)])
    assert result.exit_code == 2 and "a folder; give a file name" in result.output and not list(tmp_path.glob("*.tmp"))

    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    result = runner.invoke(app, ["predict", "--checkpoint", str(trained_run), "--input", str(empty)])
    assert result.exit_code == 2 and f"{empty}: no conversations in the file" in result.output
    blocking = tmp_path / "notes.txt"
    blocking.write_text("keep me")
    result = runner.invoke(app, ["predict", "--checkpoint", str(trained_run), "--input", str(files["test"]), "--out", str(blocking / "p.jsonl")])
    assert result.exit_code == 2 and f"--out {blocking / 'p.jsonl'}: {blocking} is a file, not a folder" in result.output
    assert blocking.read_text() == "keep me"
    for out, why in ((tmp_path, "a folder; give a file name"), (blocking / "meld.jsonl", f"{blocking} is a file, not a folder")):
        # checked before the split is read (there is no data in --data-dir)
        result = runner.invoke(app, ["data", "convert", "meld", "--split", "test", "--out", str(out), "--data-dir", str(tmp_path / "none")])
        assert result.exit_code == 2 and f"--out {out}: {why}" in result.output
    same = tmp_path / "same.jsonl"   # --out that is --input: refused, the conversations kept
    same.write_text(files["test"].read_text())
    result = runner.invoke(app, ["predict", "--checkpoint", str(trained_run), "--input", str(same), "--out", str(same)])
    assert result.exit_code == 2 and f"--out {same}: it is the --input file" in result.output
    assert same.read_text() == files["test"].read_text()
    for command in ("predict", "generate"):  # JSON written under a table's name: refused before any work
        table = tmp_path / "predictions.csv"
        result = runner.invoke(app, [command, "--checkpoint", str(trained_run), "--input", str(files["test"]), "--out", str(table)])
        assert result.exit_code == 2 and f"--out {table}: the " in result.output and "name the file .jsonl" in result.output
        assert not table.exists()
    packed = tmp_path / "predictions.jsonl.gz"   # a .gz name is written compressed, as the readers read it
    result = runner.invoke(app, ["predict", "--checkpoint", str(trained_run), "--input", str(files["test"]), "--out", str(packed)])
    assert result.exit_code == 0 and gzip.decompress(packed.read_bytes()).decode() == nested.read_text()
    result = runner.invoke(app, ["predict", "--checkpoint", str(trained_run), "--input", "meld:"])
    assert result.exit_code == 2 and "meld:: give a split after the colon: meld:train, meld:validation or meld:test" in result.output
    result = runner.invoke(app, ["predict", "--checkpoint", str(trained_run), "--input", str(files["test"]), "--task", "emotions"])
    assert result.exit_code == 2 and "--task emotions: unknown task; known: erc, dialogue-act" in result.output
    result = runner.invoke(app, ["predict", "--checkpoint", str(trained_run), "--input", str(files["test"]), "--task", "dialogue-act"])
    assert result.exit_code == 2 and "is a model for erc" in result.output


def test_an_output_that_cannot_be_written_is_said_in_words():
    """A full disk under `predict --out -` was "error: [Errno 28] No space left on device"."""
    from turnformer.cli import describe

    assert describe(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))) == "the output cannot be written: " + os.strerror(errno.ENOSPC)
    assert describe(FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), "x.jsonl")) == "x.jsonl: " + os.strerror(errno.ENOENT)


def test_resume_without_a_checkpoint_says_so(tiny_backbone_dir, files, tmp_path):
    result = runner.invoke(app, ["train", "--train-file", str(files["train"]), "--validation-file", str(files["validation"]),
                                 "--test-file", str(files["test"]), "--out", str(tmp_path / "fresh"), "--resume",
                                 *_tiny(tiny_backbone_dir)])
    assert result.exit_code == 0, result.output
    assert "holds no checkpoint yet; starting from the beginning" in result.output
    assert result.output.count("no checkpoint") == 1, result.output  # said once, not by the command and again by the loop


def test_resume_on_other_data_warns(tiny_backbone_dir, files, tmp_path):
    out = tmp_path / "run"
    common = ["--validation-file", str(files["validation"]), "--test-file", str(files["test"]), "--out", str(out), *_tiny(tiny_backbone_dir)]
    assert runner.invoke(app, ["train", "--train-file", str(files["train"]), *common]).exit_code == 0
    assert (out / "last").is_dir()
    finished = (out / "result.json").read_text()
    same = runner.invoke(app, ["train", "--train-file", str(files["train"]), "--resume", *common])
    assert same.exit_code == 0, same.output
    assert "warning" not in same.output
    assert (out / "result.json").read_text() == finished  # a finished run resumed keeps its result (its train_seconds too)
    other = runner.invoke(app, ["train", "--train-file", str(files["validation"]), "--limit-train", "1", "--resume", *common])
    assert other.exit_code == 0, other.output
    assert "warning: --resume: this run reads other data or settings" in other.output
    assert f"train_file: {str(files['train'].resolve())!r} -> {str(files['validation'].resolve())!r}" in other.output
    assert "limits: None -> {'train': 1}" in other.output


def test_resume_alone_continues_the_run_as_its_run_json_records_it(tiny_backbone_dir, files, tmp_path):
    """`train --out RUN --resume` without the run's options fell back to the defaults (MELD's DialogXL) and failed."""
    out = tmp_path / "run"
    cut = runner.invoke(app, ["train", "--train-file", str(files["train"]), "--validation-file", str(files["validation"]),
                              "--test-file", str(files["test"]), "--out", str(out), "--limit-train", "4", "--seed", "7",
                              "--time-budget", "0.001", *_tiny(tiny_backbone_dir)])
    assert cut.exit_code == 0 and json.loads((out / "result.json").read_text())["best_epoch"] is None, cut.output
    resumed = runner.invoke(app, ["train", "--out", str(out), "--resume"])
    assert resumed.exit_code == 0, resumed.output
    said = " ".join(resumed.output.split())
    assert f"--resume: {out} as its run.json records it: --task erc --model dialogxl-memory-bias on file, seed 7, " \
           "limits {'train': 4}" in said and "warning" not in said, resumed.output
    result = json.loads((out / "result.json").read_text())
    assert result["best_epoch"] == 1 and result["history"][0]["complete"]
    assert json.loads((out / "run.json").read_text())["seed"] == 7
    # a finished run resumed with other settings trains nothing, and its record stays the one it was trained with
    recorded = (out / "run.json").read_text()
    same = runner.invoke(app, ["train", "--out", str(out), "--resume", "--set", "train.batch_size=4"])
    assert same.exit_code == 0 and (out / "run.json").read_text() == recorded, same.output
    other_seed = runner.invoke(app, ["train", "--out", str(out), "--resume", "--seed", "9"])
    assert other_seed.exit_code == 2 and "--seed 9: the run in" in other_seed.output and "started with seed 7" in other_seed.output
    # --set alone with --resume changes the recorded run (here one more epoch), not the defaults' (MELD's)
    more = runner.invoke(app, ["train", "--out", str(out), "--resume", "--set", "train.epochs=2"])
    assert more.exit_code == 0 and "as its run.json records it with --set" in " ".join(more.output.split()), more.output
    assert [e["epoch"] for e in json.loads((out / "result.json").read_text())["history"]] == [1, 2]
    assert json.loads((out / "run.json").read_text())["seed"] == 7
    with_files = runner.invoke(app, ["train", "--train-file", str(files["train"]), "--validation-file", str(files["validation"]),
                                     "--test-file", str(files["test"]), "--out", str(out), "--resume", "--limit-train", "4",
                                     *_tiny(tiny_backbone_dir), "--set", "train.epochs=2"])
    assert with_files.exit_code == 0 and "warning" not in with_files.output, with_files.output  # its seed, 7, is the run's
    refused = runner.invoke(app, ["train", "--out", str(out), "--resume", "--set", 'train_file="other.jsonl"'])
    assert refused.exit_code == 2 and "the train_file is --train-file's to set" in refused.output, refused.output
    # a --limit-* given changes its own splits' limits and keeps the others (--limit-eval dropped the train limit)
    evaluated = runner.invoke(app, ["train", "--out", str(out), "--resume", "--limit-eval", "3"])
    assert evaluated.exit_code == 0 and "limits {'train': 4, 'validation': 3, 'test': 3}" in " ".join(
        evaluated.output.split()), evaluated.output
    (out / "run.json").write_text("{")
    broken = runner.invoke(app, ["train", "--out", str(out), "--resume"])
    assert broken.exit_code == 2 and f"{out / 'run.json'}: not a run description this version reads" in broken.output
    (out / "run.json").unlink()  # the defaults (MELD's DialogXL) met the run's checkpoint and failed on its config
    missing = runner.invoke(app, ["train", "--out", str(out), "--resume"])
    assert missing.exit_code == 2 and f"{out / 'run.json'}: missing, so the run's options are not known" in " ".join(
        missing.output.split()), missing.output


def test_a_training_file_edited_so_its_label_counts_change_order_resumes_with_the_runs_labels(tiny_backbone_dir, files, tmp_path):
    """Labels read from a training file come in order of their counts: an edit that changed the order made the
    checkpoint's label map differ, and the resume was refused after the warning that the file had changed."""
    train = _write(tmp_path, "train.jsonl", [_dialogue(i, label="joy") for i in range(3)] + [_dialogue(9, label="sadness")])
    out = tmp_path / "run"
    common = ["--train-file", str(train), "--validation-file", str(files["validation"]), "--test-file", str(files["test"]),
              "--out", str(out), *_tiny(tiny_backbone_dir)]
    assert runner.invoke(app, ["train", *common]).exit_code == 0
    assert json.loads((out / "run.json").read_text())["labels"] == ["joy", "sadness"]
    _write(tmp_path, "train.jsonl", [_dialogue(i, label="sadness") for i in range(3)] + [_dialogue(9, label="joy")])
    resumed = runner.invoke(app, ["train", *common, "--resume", "--set", "train.epochs=2"])
    assert resumed.exit_code == 0 and "its content changed since" in resumed.output, resumed.output
    assert json.loads((out / "run.json").read_text())["labels"] == ["joy", "sadness"]  # the classifier's order


def test_a_data_file_changed_since_the_run_read_it_is_warned_about(tiny_backbone_dir, files, tmp_path):
    own = {split: tmp_path / path.name for split, path in files.items()}   # copies: the module's files stay as they are
    for split, path in files.items():
        own[split].write_text(path.read_text())
    out = tmp_path / "run"
    common = ["--train-file", str(own["train"]), "--validation-file", str(own["validation"]), "--test-file", str(own["test"]),
              "--out", str(out), *_tiny(tiny_backbone_dir)]
    assert runner.invoke(app, ["train", *common]).exit_code == 0
    recorded = json.loads((out / "run.json").read_text())["recipe"]["file_sha256"]
    assert sorted(recorded) == ["test_file", "train_file", "validation_file"] and all(len(d) == 64 for d in recorded.values())
    unchanged = runner.invoke(app, ["evaluate", "--checkpoint", str(out)])
    assert unchanged.exit_code == 0 and "warning" not in unchanged.output
    for split in ("train", "test"):   # the same paths, other contents
        own[split].write_text(own[split].read_text().replace('"text": "', '"text": "changed '))
    scored = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--split", "test"])
    assert scored.exit_code == 0 and f"warning: test_file {own['test'].resolve()}: its content changed since" in scored.output
    assert "the scores are of the file as it is now" in scored.output
    validation = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--split", "validation"])
    assert validation.exit_code == 0 and "warning" not in validation.output   # that file is as it was
    resumed = runner.invoke(app, ["train", "--resume", *common])
    assert resumed.exit_code == 0, resumed.output
    assert "warning: --resume: this run reads other data or settings" in resumed.output
    assert f"train_file {own['train'].resolve()}: its content changed since" in resumed.output


def test_a_run_trained_through_the_python_api_records_its_files_too(tiny_backbone_dir, files, tmp_path):
    """`Task.train` from Python records what the files held, as the command does: `evaluate` can tell one changed."""
    from turnformer.recipes import load_recipe
    from turnformer.tasks.erc import TASK

    own = {split: tmp_path / path.name for split, path in files.items()}
    for split, path in files.items():
        own[split].write_text(path.read_text())
    settings = [s for s in _tiny(tiny_backbone_dir) if s != "--set"]
    recipe = load_recipe("erc-file-dialogxl", [*settings, *(f'{split}_file="{own[split]}"' for split in own)])
    TASK.train(recipe, tmp_path / "run", seed=1)
    recorded = json.loads((tmp_path / "run" / "run.json").read_text())["recipe"]["file_sha256"]
    assert sorted(recorded) == ["test_file", "train_file", "validation_file"]
    own["test"].write_text(own["test"].read_text().replace('"text": "', '"text": "changed '))
    scored = runner.invoke(app, ["evaluate", "--checkpoint", str(tmp_path / "run"), "--split", "test"])
    assert scored.exit_code == 0 and f"warning: test_file {own['test']}: its content changed since" in scored.output


def test_generation_says_the_one_turn_conversations_it_leaves_out(tmp_path):
    """A conversation of one turn gives no (context, response) pair: training and evaluation left it out without a word."""
    mixed = _write(tmp_path, "mixed.jsonl", [*[_dialogue(i, turns=2) for i in range(3)], _dialogue(9, turns=1)])
    tiny = ["model_config.d_model=16", "model_config.ff=32", "model_config.layers=1", "train.epochs=1", "train.warmup_steps=0"]
    out = tmp_path / "generator"
    result = runner.invoke(app, ["train", "--task", "generation", "--model", "transformer", "--train-file", str(mixed),
                                 "--validation-file", str(mixed), "--test-file", str(mixed), "--out", str(out),
                                 *[arg for s in tiny for arg in ("--set", s)]])
    said = "split: 1 conversation(s) of one turn give no (context, response) pair (dialogue 'd9': one turn)"
    assert result.exit_code == 0 and all(f"{split} {said}" in result.output for split in ("train", "validation", "test"))
    reused = " ".join(result.output.split())  # one file for all three: allowed, and said
    assert f"warning: --validation-file {mixed} is the --train-file: the best epoch is chosen on conversations the " \
           "model trains on" in reused and f"warning: --test-file {mixed} is the --train-file: its scores" in reused
    assert json.loads((out / "run.json").read_text())["encode_reports"]["train"]["one_turn_dialogues"] == 1
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--input", str(mixed)])
    assert result.exit_code == 0 and f"test {said}" in result.output, result.output


def test_generation_needs_two_turn_conversations(tmp_path):
    one_turn = _write(tmp_path, "one.jsonl", [_dialogue(i, turns=1) for i in range(4)])
    two_turns = _write(tmp_path, "two.jsonl", [_dialogue(i, turns=2) for i in range(4)])
    result = runner.invoke(app, ["train", "--task", "generation", "--model", "transformer", "--train-file", str(two_turns),
                                 "--validation-file", str(one_turn), "--test-file", str(two_turns), "--out", str(tmp_path / "g")])
    assert result.exit_code == 2 and "validation split: no (context, response) pairs" in result.output
    assert f"{one_turn.resolve()}: validation split" in result.output.replace("\n", ""), result.output  # the file is named

    tiny = ["model_config.d_model=16", "model_config.ff=32", "model_config.layers=1", "train.epochs=1", "train.warmup_steps=0"]
    out = tmp_path / "generator"
    result = runner.invoke(app, ["train", "--task", "generation", "--model", "transformer", "--train-file", str(two_turns),
                                 "--validation-file", str(two_turns), "--test-file", str(two_turns), "--out", str(out),
                                 *[arg for s in tiny for arg in ("--set", s)]])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--limit-dialogues", "0"])
    assert result.exit_code == 2 and "--limit-dialogues 0: give a number of dialogues" in result.output
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--input", str(one_turn)])
    assert result.exit_code == 2 and f"{one_turn.resolve()}: test split: no (context, response) pairs" in result.output.replace("\n", "")
    result = runner.invoke(app, ["plot", "attention", "--checkpoint", str(out), "--input", str(two_turns), "--json"])
    assert result.exit_code == 2 and ("a run of generation model 'transformer'; attention plots need a DialogXL run"
                                      in result.output.replace("\n", "")), result.output  # the model as the user named it
    result = runner.invoke(app, ["generate", "--checkpoint", str(out), "--input", str(two_turns), "--speaker", "  "])
    assert result.exit_code == 2 and "--speaker '  ': empty" in result.output and "Traceback" not in result.output
    result = runner.invoke(app, ["generate", "--checkpoint", str(out), "--input", str(two_turns), "--beam", "1000"])
    assert result.exit_code == 2 and "--beam" in result.output and "less than or equal to 32" in result.output


def test_response_selection_files(tmp_path):
    from turnformer.tasks.response_selection import dialogue_to_item, read_selection_file

    csv_named = tmp_path / "pairs.csv"  # tab-separated, whatever the name says
    csv_named.write_text("1\thello there\thi !\n0\thello there\tgo away\n")
    items = read_selection_file(csv_named)
    assert [item.gold() for item in items] == [(1, 0)]  # one context, two candidates
    negatives = tmp_path / "negatives.tsv"
    negatives.write_text("0\thello there\tgo away\n")
    result = runner.invoke(app, ["train", "--task", "response-selection", "--model", "mdfn", "--train-file", str(csv_named),
                                 "--validation-file", str(negatives), "--test-file", str(csv_named), "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and f"{negatives}: no item has a right candidate" in result.output

    # a training item without an answer gave a NaN loss (binary objective) or failed mid-epoch (choice): refused first
    unanswered = _write(tmp_path, "unanswered.jsonl", [
        Dialogue((Turn("A", "hi"),), id="known", meta={"candidates": ["hello", "go away"], "answer": 0}),
        Dialogue((Turn("A", "hi"),), id="open", meta={"candidates": ["hello", "go away"]})])
    for model in ("mdfn", "plain-encoder"):
        result = runner.invoke(app, ["train", "--task", "response-selection", "--model", model, "--train-file", str(unanswered),
                                     "--validation-file", str(csv_named), "--test-file", str(csv_named), "--out", str(tmp_path / "r")])
        assert result.exit_code == 2 and f"{unanswered}: 1 training item(s) without an answer (first: open)" in result.output, result.output
    mixed = tmp_path / "mixed.tsv"  # the second context has no right candidate: nothing for a choice among them
    mixed.write_text("1\thello there\thi !\n0\thello there\tgo away\n0\tbye now\tgo away\n")
    result = runner.invoke(app, ["train", "--task", "response-selection", "--model", "plain-encoder", "--train-file", str(mixed),
                                 "--validation-file", str(csv_named), "--test-file", str(csv_named), "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and "1 training item(s) with no right candidate" in result.output, result.output
    alone = tmp_path / "alone.tsv"  # right answers without wrong ones: a choice of one, or "right" to every response
    alone.write_text("1\thello there\thi !\n1\tbye now\tsee you\n")
    for model, message in (("plain-encoder", "2 training item(s) of one candidate (first: "),
                           ("mdfn", "no training item has a wrong candidate")):
        result = runner.invoke(app, ["train", "--task", "response-selection", "--model", model, "--train-file", str(alone),
                                     "--validation-file", str(csv_named), "--test-file", str(csv_named), "--out", str(tmp_path / "r")])
        assert result.exit_code == 2 and message in result.output.replace("\n", ""), result.output
    # a validation file of one-candidate items: every epoch scored NaN and the best was chosen on it; refused first
    result = runner.invoke(app, ["train", "--task", "response-selection", "--model", "mdfn", "--train-file", str(csv_named),
                                 "--validation-file", str(alone), "--test-file", str(csv_named), "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and (f"{alone}: the items of the validation split: each one with a right candidate has "
                                      "no other") in result.output.replace("\n", ""), result.output
    assert not (tmp_path / "r").exists()

    dialogue = Dialogue((Turn("A", "hi"),), id="x", meta={"candidates": [{"speaker": "B", "text": "hello"}], "answer": 3})
    with pytest.raises(DialogueError, match="meta.answer = 3: out of range for 1 candidates"):
        dialogue_to_item(dialogue, "f.jsonl: dialogue x")
    jsonl = _write(tmp_path, "items.jsonl", [Dialogue((Turn("A", "hi"),), id="ok", meta={"candidates": [{"text": "hello"}], "answer": 0}),
                                             dialogue])
    jsonl.write_text("\n" + jsonl.read_text())   # a blank first line: the second item is on line 3
    with pytest.raises(DialogueError, match=f"{jsonl}:3: meta.answer = 3"):
        read_selection_file(jsonl)

    # a candidate's integer speaker is its string, as a turn's is (0 was taken for "no speaker"); a blank one names its line
    numbered = tmp_path / "numbered.jsonl"
    numbered.write_text(json.dumps({"turns": [{"speaker": 1, "text": "hi"}], "meta": {"candidates": [{"speaker": 0, "text": "yo"}]}}) + "\n")
    assert [c.speaker for c in read_selection_file(numbered)[0].candidates] == ["0"]
    numbered.write_text(json.dumps({"turns": [{"speaker": "A", "text": "hi"}], "meta": {"candidates": [{"speaker": " ", "text": "yo"}]}}) + "\n")
    with pytest.raises(DialogueError, match=f"{numbered}:1: meta.candidates\\[0\\].speaker: expected a non-empty string"):
        read_selection_file(numbered)


def test_figure_paths_are_checked_before_any_work(trained_run, files, tmp_path):
    """A folder, an unknown format or a file in the way is one error line naming the path; no extension means PNG."""
    stray = tmp_path / "a-file"
    stray.write_text("")
    masks = ["plot", "masks", "--input", str(files["test"]), "--out"]
    confusion = ["evaluate", "--checkpoint", str(trained_run), "--confusion"]
    for out, message in ((tmp_path, "is a folder; give a file name"), (tmp_path / "m.txt", "cannot write a figure as '.txt'"),
                         (stray / "m.png", f"{stray} is a file, not a folder"),
                         ("-", "-: a figure is written to a file")):  # was written to a file named -.png
        for command in (masks, confusion):
            result = runner.invoke(app, [*command, str(out)])
            assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output, result.output
    negative = runner.invoke(app, ["plot", "masks", "--input", str(files["test"]), "--json", "--window", "-1"])
    assert negative.exit_code == 2 and "--window" in negative.output  # named as the option, not "local window must be >= 0"
    result = runner.invoke(app, [*masks, str(tmp_path / "no-extension")])
    assert result.exit_code == 0 and (tmp_path / "no-extension.png").read_bytes()[:4] == b"\x89PNG"
    assert "no-extension.png" in result.output
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(trained_run), "--confusion", str(tmp_path / "cm.svg")])
    assert result.exit_code == 0 and (tmp_path / "cm.svg").read_text().lstrip().startswith("<?xml")


def test_predict_names_conversations_without_id_by_their_place(trained_run, tmp_path):
    no_ids = tmp_path / "no-ids.jsonl"
    no_ids.write_text("".join(json.dumps({"turns": [{"speaker": "A", "text": "great news"}, {"speaker": "B", "text": "oh no"}]}) + "\n"
                              for _ in range(2)))
    out = tmp_path / "p.jsonl"
    result = runner.invoke(app, ["predict", "--checkpoint", str(trained_run), "--input", str(no_ids), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert [(r["dialogue"], r["turn"]) for r in map(json.loads, out.read_text().splitlines())] == [("0", 0), ("0", 1), ("1", 0), ("1", 1)]
    # a conversation whose id spells another one's place: the one without id gets a "#" in front, never the same name
    clash = tmp_path / "clash.jsonl"
    clash.write_text("".join(json.dumps({**({"id": "1"} if i == 0 else {}), "turns": [{"speaker": "A", "text": "hi"}]}) + "\n"
                             for i in range(2)))
    result = runner.invoke(app, ["predict", "--checkpoint", str(trained_run), "--input", str(clash), "--out", str(out)])
    assert result.exit_code == 0 and [json.loads(r)["dialogue"] for r in out.read_text().splitlines()] == ["1", "#1"], result.output


def test_output_names_never_collide():
    from turnformer.dialogue import output_names

    assert output_names(["a", None, None]) == ["a", "1", "2"]
    assert output_names(["1", None, "#2", None]) == ["1", "#1", "#2", "3"]
    assert output_names([None, "0", "#0"]) == ["##0", "0", "#0"]


def test_user_text_is_printed_as_written(trained_run, tmp_path):
    """Texts, file names and labels with square brackets are not rich markup: "[laughs]" stays in the predict table, and
    "[/]" (a closing tag with nothing to close) neither crashes a command nor vanishes from an error line."""
    marked = tmp_path / "marked.jsonl"
    marked.write_text(json.dumps({"id": "m", "turns": [{"speaker": "[A]", "text": "[laughs] so [b]great[/b] [/]"}]}) + "\n")
    result = runner.invoke(app, ["predict", "--checkpoint", str(trained_run), "--input", str(marked)], env={"COLUMNS": "250"})
    assert result.exit_code == 0 and "[laughs] so [b]great[/b] [/]" in result.output and "[A]" in result.output, result.output
    missing = tmp_path / "[/]" / "[bold]x.jsonl"
    result = runner.invoke(app, ["predict", "--checkpoint", str(trained_run), "--input", str(missing)], env={"COLUMNS": "250"})
    assert result.exit_code == 2 and f"error: {missing}: no such file" in result.output, result.output


def test_response_selection_jsonl_with_a_byte_order_mark(tmp_path):
    from turnformer.tasks.response_selection import prediction_rows, read_selection_file

    item = {"turns": [{"speaker": "A", "text": "hello"}], "meta": {"candidates": [{"speaker": "B", "text": "hi"},
                                                                                 {"speaker": "B", "text": "bye"}], "answer": 0}}
    path = tmp_path / "bom.jsonl"
    path.write_text("\ufeff" + json.dumps(item) + "\n", encoding="utf-8")
    items = read_selection_file(path)
    assert len(items) == 1 and items[0].answer == 0 and [c.text for c in items[0].candidates] == ["hi", "bye"]
    assert prediction_rows(items, [[0.2, 0.1]])[0]["id"] == "0"   # no id: its place in the file


def test_candidates_whose_scores_differ_below_what_is_shown_keep_their_order(tmp_path):
    """The same text scores differently in the eighth digit by its place in a batch: the ranking a user gets (predict,
    the server) is of the scores shown, so such candidates tie and keep their order."""
    from turnformer.tasks.ranking import rank_candidates, shown_scores
    from turnformer.tasks.response_selection import prediction_rows, read_selection_file

    item = {"turns": [{"speaker": "A", "text": "where to ?"}], "meta": {"candidates": ["why ?", "why ?", "ok ."], "answer": 1}}
    path = tmp_path / "same.jsonl"
    path.write_text(json.dumps(item) + "\n")
    (row,) = prediction_rows(read_selection_file(path), [[0.006297389, 0.006297404, 0.02145]])
    assert row["scores"] == [0.0063, 0.0063, 0.02145] and row["ranking"] == [2, 0, 1] and row["best"] == 2
    assert rank_candidates(shown_scores([0.006297404, 0.006297389])) == [0, 1]


def test_every_model_config_refuses_bad_sizes():
    from turnformer.models.baselines import ConcatContextConfig, SegmentRecurrenceConfig
    from turnformer.models.lc_attention import LCConfig
    from turnformer.models.mdfn import MDFNConfig
    from turnformer.models.phaed import PHAEDConfig

    cases = [(LCConfig, {"num_labels": 4, "heads": 0}, "model_config.heads = 0: must be 1 or more"),
             (LCConfig, {"num_labels": 4, "max_width": 0.0}, "model_config.max_width = 0.0: must be above 0"),
             (LCConfig, {"num_labels": 4, "max_shift": -1.0}, "model_config.max_shift = -1.0: must be 0 or more"),
             (ConcatContextConfig, {"num_labels": 4, "max_length": 0}, "model_config.max_length = 0: must be 1 or more"),
             (SegmentRecurrenceConfig, {"num_labels": 4, "mem_len": -1}, "model_config.mem_len = -1: must be 0 or more"),
             (MDFNConfig, {"dropout": -0.1}, "model_config.dropout = -0.1"),
             (PHAEDConfig, {"vocab_size": 10, "layers": 0}, "model_config.layers = 0: must be 1 or more")]
    for config, settings, message in cases:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
            config(**settings)
    assert SegmentRecurrenceConfig(num_labels=4, mem_len=0).mem_len == 0   # no memory is a setting, not a mistake
    from turnformer.models.dialogxl import DialogXLConfig

    for heads in ("five", [1, 1, 1, "a"], [1.5, 1, 1, 0.5], [1, 1, 1, 1, 0], [True, 1, 1, 1]):  # each a traceback once
        with pytest.raises(ValueError, match=r"model_config\.heads = .*: expected 4 whole numbers"):
            DialogXLConfig.from_dict({"num_labels": 4, "heads": heads})
    assert DialogXLConfig.from_dict({"num_labels": 4, "heads": [2, 2, 1, 1]}).heads == (2, 2, 1, 1)


def test_a_wrong_model_setting_is_refused_before_any_data_is_read(tmp_path):
    """Every task checks its recipe's model and [model_config] before it reads a file: the data files named here do
    not exist, so a check made after reading them would say that instead (and a benchmark would first be read whole)."""
    missing = {name: str(tmp_path / f"{name}.jsonl") for name in ("train", "validation", "test")}
    cases = [("erc", "dialogxl", "model_config.mem_len=-5", "model_config.mem_len = -5: must be 0 or more"),
             ("erc", "segment-recurrence", "model_config.foo=1", "model_config.foo: unknown SegmentRecurrenceConfig"),
             ("dialogue-act", "lc-attention", "window=70", "W + 2P = 74 is over model_config.max_positions = 64"),
             ("dialogue-act", "lc-attention-frozen-mpnet", "model_config.heads=0", "model_config.heads = 0: must be 1"),
             ("response-selection", "mdfn", "model_config.dropout=2", "model_config.dropout = 2"),
             ("generation", "phaed", "model_config.max_positions=10", "over model_config.max_positions = 10"),
             ("generation", "smollm2", "model_config.max_tokens=0", "model_config.max_tokens = 0: must be 1")]
    for task, model, setting, message in cases:
        result = runner.invoke(app, ["train", "--task", task, "--model", model, "--train-file", missing["train"],
                                     "--validation-file", missing["validation"], "--test-file", missing["test"],
                                     "--set", setting, "--out", str(tmp_path / "run")])
        assert result.exit_code == 2 and message in result.output, (task, model, result.output)
        assert "jsonl" not in result.output and not (tmp_path / "run").exists(), result.output


def test_a_warning_is_one_line_without_python_source(tmp_path):
    conversation = _write(tmp_path, "cjk.jsonl", [Dialogue((Turn("A", "你好，今天怎么样？"), Turn("B", "很好")), id="c1")])
    result = runner.invoke(app, ["plot", "masks", "--input", str(conversation), "--kinds", "local", "--window", "1",
                                 "--out", str(tmp_path / "masks.png")])
    assert result.exit_code == 0, result.output
    assert "warning: " in result.output and "drawn as boxes (你好，今天怎么样？很)" in result.output
    assert "UserWarning" not in result.output and "write_figure(" not in result.output


def test_an_output_that_fails_when_written_is_one_line(trained_run, files, tmp_path, monkeypatch):
    """--out passes its check before the work, then the write fails (a full disk): one error line naming the file,
    exit 2, no half-written file."""
    from turnformer.data import _io

    def full_disk(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_io, "_write", full_disk)
    out = tmp_path / "p.jsonl"
    result = runner.invoke(app, ["predict", "--checkpoint", str(trained_run), "--input", str(files["test"]), "--out", str(out)])
    assert result.exit_code == 2 and f"error: {out}: cannot be written: No space left on device" in " ".join(result.output.split())
    assert "Traceback" not in result.output and not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("p.jsonl")] == []  # nor a partial one to go on from


def test_terminal_control_characters_in_a_text_are_shown_as_escapes(trained_run, tmp_path):
    """An escape sequence in an utterance does not reach the terminal from the predict table; the JSONL keeps it."""
    coloured = tmp_path / "coloured.jsonl"
    coloured.write_text(json.dumps({"id": "c", "turns": [{"speaker": "A", "text": "\u001b[31mred\u001b[0m now"}]}) + "\n")
    result = runner.invoke(app, ["predict", "--checkpoint", str(trained_run), "--input", str(coloured)], env={"COLUMNS": "250"})
    assert result.exit_code == 0 and "\\x1b[31mred\\x1b[0m now" in result.output and "\u001b[31m" not in result.output
    result = runner.invoke(app, ["predict", "--checkpoint", str(trained_run), "--input", str(coloured), "--out", "-"])
    assert json.loads(result.stdout.splitlines()[0])["text"] == "\u001b[31mred\u001b[0m now"


def test_plot_masks_refuses_no_kinds_and_a_view_too_large(tmp_path):
    conversation = tmp_path / "long.jsonl"
    turns = [{"speaker": "AB"[i % 2], "text": "one two three four five six seven eight nine ten"} for i in range(250)]
    conversation.write_text(json.dumps({"id": "long", "turns": turns}) + "\n")
    for kinds in ("", ",", " "):
        result = runner.invoke(app, ["plot", "masks", "--input", str(conversation), "--kinds", kinds, "--json"])
        assert result.exit_code == 2 and "--kinds" in result.output and "name at least one mask" in result.output
    result = runner.invoke(app, ["plot", "masks", "--input", str(conversation), "--kinds", "local", "--json"])
    assert result.exit_code == 2 and "2500 x 2500 tokens: too many to draw or print" in " ".join(result.output.split())
    # one utterance's view of the same conversation, or the utterances, stay small enough
    result = runner.invoke(app, ["plot", "masks", "--input", str(conversation), "--kinds", "local", "--json", "--level", "utterances"])
    assert result.exit_code == 0 and len(json.loads(result.stdout)["tokens"]) == 250
    many = tmp_path / "many.jsonl"
    many.write_text(json.dumps({"id": "many", "turns": turns * 10}) + "\n")
    result = runner.invoke(app, ["plot", "masks", "--input", str(many), "--kinds", "local", "--json", "--level", "utterances"])
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and "2500 x 2500 utterances: too many" in said and "--level utterances" not in said
    result = runner.invoke(app, ["plot", "masks", "--input", str(conversation), "--dialogue", "\u00b2", "--json"])
    assert result.exit_code == 2 and "no dialogue with id '\u00b2'" in result.output
    # the names predict gives: an id, else the place ("#1" where another's id is "1")
    named = tmp_path / "named.jsonl"
    named.write_text("".join(json.dumps({**({"id": i} if i else {}), "turns": [{"speaker": "A", "text": text}]}) + "\n"
                             for i, text in (("a", "first one"), (None, "second one"), ("1", "third one"))))
    for wanted, text in (("#1", "second"), ("1", "third"), ("a", "first"), ("0", "first")):
        result = runner.invoke(app, ["plot", "masks", "--input", str(named), "--dialogue", wanted, "--json"])
        assert result.exit_code == 0 and json.loads(result.stdout)["tokens"][0] == text, (wanted, result.output)


def test_more_threads_than_cores_are_the_cores(monkeypatch):
    import torch

    from turnformer import cli

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    before = torch.get_num_threads()
    try:
        with pytest.warns(UserWarning, match="--threads 100000: this machine has 2 cores; using 2"):
            cli.set_threads(100000)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_a_reader_that_stops_early_ends_the_command_quietly(trained_run, tmp_path):
    """`predict --out - | head -1`: the command ends with the shell's code for a closed pipe (141), saying nothing,
    neither an error nor that it wrote every row; unbuffered (PYTHONUNBUFFERED) too, where one write can take only part
    of a block and the rest was dropped without a word."""
    import subprocess
    import sys

    many = _write(tmp_path, "many.jsonl", [_dialogue(i, turns=1) for i in range(3000)])  # rows far past a pipe's buffer
    for unbuffered in ("", "1"):
        env = {**os.environ, "PYTHONUNBUFFERED": unbuffered, "TURNFORMER_ALLOCATOR": "system"}
        command = [sys.executable, "-c", "from turnformer.cli import main; main()", "predict", "--checkpoint",
                   str(trained_run), "--input", str(many), "--out", "-"]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        first = process.stdout.readline()
        process.stdout.close()  # as `head -1` does
        _, said = process.communicate(timeout=300)
        assert json.loads(first)["dialogue"] == "d0" and process.returncode == 141, said.decode()
        assert b"wrote" not in said and b"error" not in said.lower() and b"Traceback" not in said, said.decode()


def test_every_byte_is_written_to_a_stream_that_takes_part_of_each_write():
    from turnformer.data._io import OutputClosed, write_all

    class Raw:  # an unbuffered pipe: each write takes at most 5 bytes
        def __init__(self):
            self.data = b""

        def write(self, view):
            self.data += bytes(view[:5])
            return min(5, len(view))

        def flush(self):
            pass

    raw = Raw()
    write_all(raw, b"0123456789abcdefghij-")
    assert raw.data == b"0123456789abcdefghij-"

    class Gone(Raw):
        def write(self, view):
            raise BrokenPipeError(32, "Broken pipe")

    with pytest.raises(OutputClosed):
        write_all(Gone(), b"x")


def test_a_setting_of_the_run_description_that_cannot_build_the_model_names_the_run_file(trained_run, tmp_path):
    description = json.loads((trained_run / "run.json").read_text())
    recipe = description["recipe"]
    run = _copy_run(trained_run, tmp_path / "bad-window", recipe={**recipe, "model_config": {**recipe["model_config"], "window": "x"}})
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(run)])
    assert result.exit_code == 2 and f"{run / 'run.json'}: model_config.window = 'x'" in result.output, result.output


def test_evaluate_refuses_a_blank_split_and_a_folder_as_input_before_any_work(trained_run, tmp_path):
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(tmp_path / "nothing"), "--split", ""])
    assert result.exit_code == 2 and "unknown split ''; use train, validation (or dev/val) or test" in result.output
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(trained_run), "--input", str(tmp_path)])
    assert result.exit_code == 2 and f"--input {tmp_path}: a folder; give a labelled conversation file" in result.output


def test_train_names_a_bad_seed_an_unknown_dataset_and_a_file_in_place_of_the_checkpoint(files, tmp_path):
    result = runner.invoke(app, ["train", "--train-file", str(files["train"]), "--out", str(tmp_path / "r"), "--seed", "-1"])
    assert result.exit_code == 2 and "--seed" in result.output and not (tmp_path / "r").exists()
    result = runner.invoke(app, ["train", "--task", "dialogue-act", "--model", "lstm", "--dataset", "bogus", "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and "unknown dataset 'bogus'; available: dailydialog" in result.output
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "last").write_text("not a checkpoint")
    result = runner.invoke(app, ["train", "--train-file", str(files["train"]), "--validation-file", str(files["validation"]),
                                 "--test-file", str(files["test"]), "--out", str(tmp_path / "r"), "--resume"])
    assert result.exit_code == 2 and "a file where the run's checkpoint folder should be" in result.output
    assert (tmp_path / "r" / "last").read_text() == "not a checkpoint"


def test_data_commands_name_the_data_folder_given(tmp_path):
    (tmp_path / "afile").write_text("hi")
    result = runner.invoke(app, ["data", "download", "dailydialog", "--data-dir", str(tmp_path / "afile")])
    assert result.exit_code == 2 and "a file, not a folder" in result.output and "downloading" not in result.output
    copy = tmp_path / "dd"
    (copy / "dailydialog" / "test").mkdir(parents=True)  # a copy whose test files are gone
    from turnformer.data import load_split

    with pytest.raises(DialogueError) as caught:
        load_split("dailydialog", "test", copy)
    assert f"turnformer data verify dailydialog --data-dir {copy}" in str(caught.value)


def test_a_setting_that_contradicts_the_model_id_is_refused(tmp_path):
    """`--model dialogbert-dra --set model_config.dra=false` (or a recipe of that id without `dra`) trained DialogBERT
    without DRA and filed it as dialogbert-dra; an ablation id with its part switched back on was the full model."""
    from turnformer.tasks.common import model_id_settings

    two_turns = _write(tmp_path, "two.jsonl", [_dialogue(i, turns=2) for i in range(4)])
    files = ["--train-file", str(two_turns), "--validation-file", str(two_turns), "--test-file", str(two_turns)]
    for model, setting, message in (("dialogbert-dra", "dra=false", "model_config.dra = False: the model 'dialogbert-dra' is the one with dra = True"),
                                    ("dialogbert", "dra=true", "model_config.dra = True: the model 'dialogbert' is the one with dra = False"),
                                    ("phaed-no-turn-emb", "turn_embeddings=true", "the model 'phaed-no-turn-emb' is the one with turn_embeddings = False")):
        result = runner.invoke(app, ["train", "--task", "generation", "--model", model, *files, "--out", str(tmp_path / model),
                                     "--set", f"model_config.{setting}"])
        assert result.exit_code == 2 and message in result.output.replace("\n", ""), result.output
        assert not (tmp_path / model).exists()
    recipe = {"task": "generation", "model": "dialogbert-dra", "model_config": {"d_model": 16}}
    assert model_id_settings(recipe, "r.toml")["model_config"] == {"d_model": 16, "dra": True}  # left out: the id's
    assert model_id_settings({"task": "erc", "model": "dialogxl"}, "r.toml")["model_config"] == {}  # ERC's ids name none


def test_an_interrupted_output_of_a_benchmark_split_goes_on_only_from_the_same_data_folder(trained_run, tmp_path, monkeypatch):
    """The resume key of predict / generate named a benchmark split alone: stopped on one copy of the data and run again
    with --data-dir on another, the output would have gone on from the first copy's replies."""
    from turnformer.cli import work_key

    monkeypatch.setenv("TURNFORMER_DATA", str(tmp_path / "a"))
    first = work_key("generate", trained_run, "dailydialog:test", None, beam=1)
    assert work_key("generate", trained_run, "dailydialog:test", str(tmp_path / "a"), beam=1) == first  # the same folder
    assert work_key("generate", trained_run, "dailydialog:test", str(tmp_path / "b"), beam=1) != first
    monkeypatch.setenv("TURNFORMER_DATA", str(tmp_path / "b"))
    assert work_key("generate", trained_run, "dailydialog:test", None, beam=1) != first


TINY_GENERATOR = ["model_config.d_model=16", "model_config.ff=32", "model_config.layers=1", "train.epochs=1",
                  "train.warmup_steps=0"]


def test_a_recipes_own_file_paths_are_checked_and_recorded_absolute_so_the_run_is_evaluated_from_anywhere(tmp_path, monkeypatch):
    _write(tmp_path, "two.jsonl", [_dialogue(i, turns=2) for i in range(4)])
    recipe = tmp_path / "mine.toml"
    recipe.write_text('task = "generation"\nmodel = "transformer"\ndataset = "file"\ntrain_file = "two.jsonl"\n'
                      'validation_file = "two.jsonl"\ntest_file = "two.jsonl"\n')
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["train", "--recipe", str(recipe), "--out", "run", *[a for s in TINY_GENERATOR for a in ("--set", s)]])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "run" / "run.json").read_text())["recipe"]["train_file"] == str((tmp_path / "two.jsonl").resolve())
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(tmp_path / "run")])
    assert result.exit_code == 0 and json.loads(result.stdout)["instances"] == 4, result.output
    for value, shown in (("5", "5"), ('["two.jsonl"]', "['two.jsonl']"), ('" "', "' '")):
        recipe.write_text(recipe.read_text().replace('train_file = "two.jsonl"', f"train_file = {value}"))
        result = runner.invoke(app, ["train", "--recipe", str(recipe), "--out", str(tmp_path / "bad")])
        assert result.exit_code == 2, result.output
        assert f"mine.toml: train_file = {shown}; expected the path of a file" in " ".join(result.output.split())
        recipe.write_text(recipe.read_text().replace(f"train_file = {value}", 'train_file = "two.jsonl"'))


def test_a_task_without_a_model_takes_its_file_recipes_model_or_asks_for_one(tmp_path):
    two = _write(tmp_path, "two.jsonl", [_dialogue(i, turns=2) for i in range(4)])
    out = tmp_path / "generator"
    result = runner.invoke(app, ["train", "--task", "generation", "--train-file", str(two), "--validation-file", str(two),
                                 "--test-file", str(two), "--out", str(out), *[a for s in TINY_GENERATOR for a in ("--set", s)]])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "run.json").read_text())["recipe"]["model"] == "transformer"
    result = runner.invoke(app, ["train", "--task", "dialogue-act", "--dataset", "swda", "--out", str(tmp_path / "acts")])
    assert result.exit_code == 2 and "--task dialogue-act on swda: name the model with --model (lc-attention" in result.output
    assert not (tmp_path / "acts").exists()


def test_generation_refuses_words_its_positions_cannot_hold_before_training(tmp_path):
    two = _write(tmp_path, "two.jsonl", [_dialogue(i, turns=2) for i in range(4)])
    for model in ("transformer", "phaed", "dialogbert"):
        result = runner.invoke(app, ["train", "--task", "generation", "--model", model, "--train-file", str(two),
                                     "--validation-file", str(two), "--test-file", str(two), "--out", str(tmp_path / model),
                                     "--set", "data.max_words=1000"])
        assert result.exit_code == 2, result.output
        assert ("data.max_words = 1000 and model_config.max_response_words = 50 make utterances of up to 1003 tokens, "
                "over model_config.max_positions = 512") in " ".join(result.output.split())
        assert not (tmp_path / model / "last").exists()


def test_evaluating_a_file_of_words_the_model_never_saw_says_so(tmp_path):
    two = _write(tmp_path, "two.jsonl", [_dialogue(i, turns=2) for i in range(4)])
    unseen = tmp_path / "unseen.jsonl"
    unseen.write_text(json.dumps({"id": "z", "turns": [{"speaker": "A", "text": "zebra quokka lynx"},
                                                      {"speaker": "B", "text": "okapi tapir narwhal"}]}) + "\n")
    out = tmp_path / "generator"
    result = runner.invoke(app, ["train", "--task", "generation", "--model", "transformer", "--train-file", str(two),
                                 "--validation-file", str(two), "--test-file", str(two), "--out", str(out),
                                 "--set", "data.min_count=1", *[a for s in TINY_GENERATOR for a in ("--set", s)]])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--input", str(unseen)])
    assert result.exit_code == 0 and json.loads(result.stdout)["unknown_rate"] == 1.0, result.output
    said = " ".join(result.output.split())
    assert "test split: 100% of its response words are not in the training vocabulary" in said and f"({unseen.resolve()})" in said
    result = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--input", str(two)])
    assert result.exit_code == 0 and json.loads(result.stdout)["unknown_rate"] == 0.0 and "response words are not" not in result.output


def test_output_that_cannot_be_written_is_one_line_not_a_traceback():
    import subprocess
    import sys

    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "turnformer.cli", "data", "list"], stdout=full, stderr=subprocess.PIPE,
                              text=True)
    assert done.returncode == 2 and done.stderr.strip() == "error: the output cannot be written: No space left on device"


@pytest.mark.parametrize("command", [["data", "stats"], ["plot", "masks", "--json", "--input"]])
def test_a_reader_gone_before_a_table_or_a_json_line_ends_the_command_as_a_closed_pipe(tmp_path, command):
    """rich's console and a plain write to standard output both end on a closed pipe with 141, quietly, as `--out -`
    does (rich's own answer, and click's, is exit code 1)."""
    import subprocess
    import sys

    conversations = _write(tmp_path, "c.jsonl", [_dialogue(i) for i in range(3)])
    env = {**os.environ, "TURNFORMER_ALLOCATOR": "system"}
    process = subprocess.Popen([sys.executable, "-c", "from turnformer.cli import main; main()", *command, str(conversations)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    process.stdout.close()  # the reader is gone before the command writes
    _, said = process.communicate(timeout=120)
    assert process.returncode == 141 and b"Traceback" not in said and b"error" not in said.lower(), said.decode()


def test_threads_are_set_without_loading_torch_and_a_usage_error_answers_without_it():
    import subprocess
    import sys

    script = ("import sys; from typer.testing import CliRunner; from turnformer import cli\n"
              "result = CliRunner().invoke(cli.app, ['--threads', '1', 'train', '--bogus'])\n"
              "print(result.exit_code, 'torch' in sys.modules, __import__('os').environ.get('OMP_NUM_THREADS'))\n"
              "import torch; print(torch.get_num_threads())")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TURNFORMER_THREADS")}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120).stdout
    assert out.split() == ["2", "False", "1", "1"], out


def test_an_interrupted_command_without_its_own_message_says_it_was_interrupted(monkeypatch, capsys):
    import sys

    from turnformer import cli
    from turnformer.data import cli as data_cli

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(data_cli, "_run", interrupt)
    monkeypatch.setattr(cli, "INTERRUPT_SAID", [])
    monkeypatch.setenv("TURNFORMER_ALLOCATOR", "system")
    monkeypatch.setattr(sys, "argv", ["turnformer", "data", "stats", "meld"])
    with pytest.raises(SystemExit) as end:
        cli.main()
    assert end.value.code == 130 and "interrupted (Ctrl-C)" in capsys.readouterr().err


def test_a_refused_command_leaves_no_output_folder_behind(trained_run, tmp_path):
    junk = tmp_path / "junk.jsonl"
    junk.write_text("not json\n")
    out = tmp_path / "new" / "deeper" / "p.jsonl"
    result = CliRunner().invoke(app, ["predict", "--checkpoint", str(trained_run), "--input", str(junk), "--out", str(out)])
    assert result.exit_code == 2 and not (tmp_path / "new").exists(), result.output
    good = _write(tmp_path, "good.jsonl", [_dialogue(0)])
    result = CliRunner().invoke(app, ["predict", "--checkpoint", str(trained_run), "--input", str(good), "--out", str(out)])
    assert result.exit_code == 0 and out.is_file(), result.output  # the folders are made when the file is written


def test_an_output_check_creates_nothing_but_refuses_a_folder_it_may_not_write_in(tmp_path):
    from turnformer.data._io import check_output_file

    assert check_output_file(tmp_path / "a" / "b" / "c.txt") == tmp_path / "a" / "b" / "c.txt"
    assert list(tmp_path.iterdir()) == []
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        if os.access(locked, os.W_OK):  # as root every folder is writable: take one that no one may write in
            if not os.path.isdir("/sys/kernel"):
                pytest.skip("running as a user who may write in a read-only folder, and no /sys (Linux) here")
            refused = Path("/sys/kernel")
        else:
            refused = locked
        for path in (refused / "c.txt", refused / "new" / "c.txt"):
            with pytest.raises(DialogueError, match="cannot be written: (Permission denied|Operation not permitted)"):
                check_output_file(path)
        if os.path.isfile("/proc/version"):  # a file that exists, in a folder where no file can be made: the folder is named
            with pytest.raises(DialogueError, match=r"/proc/version: cannot be written: .* \(making a file in /proc, as"):
                check_output_file(Path("/proc/version"))
    finally:
        locked.chmod(0o755)


def test_an_interrupt_before_the_first_block_leaves_no_partial_file(tmp_path):
    from turnformer.data._io import PartialOutput

    def blocks():
        raise KeyboardInterrupt
        yield b"", 0

    out = tmp_path / "new" / "p.jsonl"
    with pytest.raises(KeyboardInterrupt):
        PartialOutput(out, {"k": 1}).write(blocks(), lambda: None)
    assert not (tmp_path / "new").exists()
    PartialOutput(out, {"k": 1}).write(iter([]), lambda: None)  # no block at all: an empty file
    assert out.read_bytes() == b"" and sorted(p.name for p in out.parent.iterdir()) == ["p.jsonl"]


def test_a_ctrl_c_while_the_command_line_loads_ends_it_without_a_traceback():
    import subprocess
    import sys

    script = ("import builtins\n"
              "real = builtins.__import__\n"
              "def loading(name, *args, **kwargs):\n"
              "    if name == 'turnformer.cli':\n"
              "        raise KeyboardInterrupt\n"
              "    return real(name, *args, **kwargs)\n"
              "builtins.__import__ = loading\n"
              "from turnformer.__main__ import main\n"
              "main()\n")
    done = subprocess.run([sys.executable, "-c", script, "data", "list"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (130, "interrupted (Ctrl-C)\n")
    shown = subprocess.run([sys.executable, "-m", "turnformer", "--help"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and "Usage: python -m turnformer" in shown.stdout
