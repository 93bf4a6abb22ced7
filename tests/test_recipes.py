"""The recipes that ship with the package, the registry that knows their tasks and models, and runs described
before every model setting was written in its recipe."""

from __future__ import annotations

import json
import re
from itertools import combinations

import pytest
from typer.testing import CliRunner

from turnformer.cli import app
from turnformer.dialogue import DialogueError
from turnformer.recipes import RECIPES_DIR, find_recipe, load_recipe, recipe_path
from turnformer.tasks.common import RUN_FORMAT, SETTINGS_IMPLIED_BY_ID, run_description, upgrade_run
from turnformer.tasks.registry import MODELS, TASKS, get_model_builder, get_task

runner = CliRunner()
RECIPES = sorted(RECIPES_DIR.glob("*.toml"))


def test_the_recipes_ship_inside_the_package():
    assert RECIPES_DIR.parent.name == "turnformer" and len(RECIPES) > 50


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_every_recipe_loads_and_names_a_task_and_model_the_registry_knows(path):
    recipe = load_recipe(path)
    assert path.stem.startswith(f"{recipe['task']}-") and path.stem.endswith(f"-{recipe['model']}")
    assert get_model_builder(recipe["task"], recipe["model"]) is MODELS[recipe["task"]][recipe["model"]]
    assert get_task(recipe["task"]).name == recipe["task"]


def test_every_model_of_the_registry_has_a_recipe():
    named = {(r["task"], r["model"]) for r in map(load_recipe, RECIPES)}
    assert named == {(task, model) for task, models in MODELS.items() for model in models}


def test_unknown_tasks_and_models_are_named_with_what_is_known():
    with pytest.raises(DialogueError, match="task 'summarise': unknown task; the tasks: erc, dialogue-act"):
        get_task("summarise")
    with pytest.raises(DialogueError, match="unknown response-selection model 'mdfn-cnn'; known: mdfn, plain-encoder"):
        get_model_builder("response-selection", "mdfn-cnn")


def test_a_model_id_implies_no_setting_its_recipe_does_not_write():
    """Two recipes of one task and dataset whose ids share a builder differ in their model config: an ablation is a
    setting of its recipe (PHAED without turn attention: ``turn_attention = false``), not a rule on its id."""
    recipes = [load_recipe(path) for path in RECIPES]
    pairs = 0
    for a, b in combinations(recipes, 2):
        if (a["task"], a["dataset"]) == (b["task"], b["dataset"]) and MODELS[a["task"]][a["model"]] is MODELS[b["task"]][b["model"]]:
            pairs += 1
            assert a["model_config"] != b["model_config"], (a["recipe_path"], b["recipe_path"])
    assert pairs > 20


@pytest.mark.parametrize("task, model", [(task, model) for task, rules in SETTINGS_IMPLIED_BY_ID.items() for model in rules])
def test_the_recipes_write_the_settings_their_model_id_used_to_imply(task, model):
    """So a model trained from a recipe now is the model the same recipe trained before, and results stay valid."""
    recipes = [load_recipe(path) for path in RECIPES_DIR.glob(f"{task}-*-{model}.toml")]
    assert recipes
    for recipe in recipes:
        implied = SETTINGS_IMPLIED_BY_ID[task][model]
        assert {k: recipe["model_config"].get(k) for k in implied} == implied, recipe["recipe_path"]


def test_phaed_without_turn_attention_differs_from_phaed_by_that_setting_alone():
    full, ablation = (load_recipe(find_recipe("generation", m, "dailydialog")) for m in ("phaed", "phaed-no-turn-attn"))
    assert ablation["model_config"] == {**full["model_config"], "turn_attention": False}


def test_a_recipe_is_named_by_its_stem_and_a_file_wins_over_a_name(tmp_path, monkeypatch):
    shipped = RECIPES_DIR / "erc-meld-dialogxl.toml"
    assert recipe_path("erc-meld-dialogxl") == recipe_path("erc-meld-dialogxl.toml") == shipped
    assert load_recipe("erc-meld-dialogxl") == load_recipe(shipped)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "erc-meld-dialogxl.toml").write_text('task = "erc"\nmodel = "dialogxl"\ndataset = "emorynlp"\n')
    assert load_recipe("erc-meld-dialogxl.toml")["dataset"] == "emorynlp"
    with pytest.raises(DialogueError, match="no such recipe file, nor a recipe's name"):
        load_recipe("erc-meld-nothing")


def test_train_takes_a_recipe_name_or_says_it_knows_none(tmp_path):
    result = runner.invoke(app, ["train", "--recipe", "erc-meld-nothing", "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and "erc-meld-nothing: no such recipe file, nor a recipe's name" in result.output


def old_run(task: str, model: str, model_config: dict) -> dict:
    return {"recipe": {"task": task, "model": model, "dataset": "file", "model_config": model_config}, "labels": []}


def test_an_old_run_gets_the_settings_its_model_id_implied_then():
    """Before recipes wrote every setting, an ablation's id set it over the recipe's own value."""
    run = upgrade_run(old_run("generation", "phaed-no-speaker-tokens", {"speaker_tokens": True, "c_max": 1}), MODELS["generation"])
    assert run["recipe"]["model_config"] == {"speaker_tokens": False, "c_max": 1}
    run = upgrade_run(old_run("dialogue-act", "minilm-utterance", {}), MODELS["dialogue-act"])
    assert run["recipe"]["model_config"] == {"context": "lstm", "utterance_encoder": "pretrained"}
    run = upgrade_run(old_run("erc", "dialogxl-few-heads", {"heads": [1, 1, 0, 0]}), MODELS["erc"])
    assert run["recipe"]["model"] == "dialogxl" and run["recipe"]["model_config"] == {"heads": [1, 1, 0, 0]}
    new = {**old_run("generation", "phaed-no-speaker-tokens", {"speaker_tokens": True}), "run_format": RUN_FORMAT}
    assert upgrade_run(new, MODELS["generation"]) == new  # a run written now says everything itself


@pytest.mark.data
def test_a_run_written_before_its_model_settings_were_explicit_still_loads(data_dir, tmp_path):
    """A dialogue-act run from then: no run_format, and no `context` in its recipe (the id ``lstm`` implied it)."""
    out = tmp_path / "run"
    common = ["--data-dir", str(data_dir)]
    trained = runner.invoke(app, ["-q", "train", "--task", "dialogue-act", "--model", "lstm", "--dataset", "dailydialog",
                                  "--limit-dialogues", "3", "--set", "train.epochs=1", "--out", str(out), *common])
    assert trained.exit_code == 0, trained.output
    now = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--limit-dialogues", "2", *common])
    assert now.exit_code == 0, now.output
    run = json.loads((out / "run.json").read_text())
    assert run.pop("run_format") == RUN_FORMAT and run["recipe"]["model_config"].pop("context") == "lstm"
    (out / "run.json").write_text(json.dumps(run))
    then = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--limit-dialogues", "2", *common])
    assert then.exit_code == 0, then.output
    assert json.loads(then.stdout) == json.loads(now.stdout)


def test_every_task_has_the_shape_the_command_line_uses():
    for name, task in TASKS.items():
        assert task.name == name and task.models == MODELS[name]
        assert task.command in ("predict", "generate") and isinstance(task.options, frozenset)
        for method in ("load_data", "train", "load_trained", "evaluate", "predict", "session"):
            assert callable(getattr(task, method)), (name, method)


def test_a_recipe_file_is_read_as_utf8_past_a_byte_order_mark_and_a_folder_or_bad_bytes_are_named(tmp_path):
    shipped = (RECIPES_DIR / "dialogue-act-dailydialog-lstm.toml").read_bytes()
    (tmp_path / "bom.toml").write_bytes(b"\xef\xbb\xbf" + shipped)  # as some editors save it
    assert load_recipe(tmp_path / "bom.toml")["model"] == "lstm"
    (tmp_path / "latin.toml").write_bytes(b"\xff\xfe" + shipped)
    with pytest.raises(DialogueError, match=r"latin\.toml:1: undecodable bytes b'\\xff' at column 1"):
        load_recipe(tmp_path / "latin.toml")
    (tmp_path / "folder").mkdir()
    result = runner.invoke(app, ["train", "--recipe", str(tmp_path / "folder"), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and "folder: is a directory, expected a file" in result.output
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("override, message", [
    ("train.lr=0", "train.lr = 0: a learning rate of 0 trains nothing; expected a number above 0"),
    ("train.head_lr=0", "train.head_lr = 0: a learning rate of 0 trains nothing"),
    ("eval_online=maybe", "eval_online = 'maybe'; expected true or false"),
    ('labels=["inform","question"]', "a benchmark's label set is its own"),
    ("=3", "--set '=3': empty key"),
    (".epochs=3", "--set '.epochs=3': an empty name in '.epochs'"),
])
def test_a_recipe_setting_that_would_be_ignored_or_refused_late_is_refused_when_read(override, message):
    with pytest.raises(DialogueError) as caught:
        load_recipe("dialogue-act-dailydialog-lstm", [override])
    assert message in str(caught.value)


def test_a_setting_the_model_takes_from_its_data_is_refused_in_a_recipe_unless_it_agrees():
    from turnformer.tasks.dialogue_act import build_act_model
    from turnformer.tasks.generation import Vocabulary, build_generator

    vocab = Vocabulary.build([], min_count=1)
    settings = {"d_model": 8, "heads": 2, "layers": 1, "ff": 16}
    assert build_generator("transformer", {**settings, "vocab_size": len(vocab)}, vocab).config.vocab_size == len(vocab)
    with pytest.raises(ValueError, match=rf"model_config.vocab_size = 10: the model takes it from .* \({len(vocab)} here\)"):
        build_generator("transformer", {**settings, "vocab_size": 10}, vocab)
    with pytest.raises(ValueError, match="model_config.vocab_sise: unknown") as caught:
        build_generator("transformer", {**settings, "vocab_sise": 10}, vocab)
    assert "vocab_size" not in str(caught.value).split("known:")[1]  # not offered as a setting
    with pytest.raises(DialogueError, match="model_config.context = 'bogus'; known: lc-attention"):
        build_act_model({"context": "bogus"}, ["a", "b"])


def test_run_description_says_what_the_model_reads_only_part_of(caplog):
    """Training recorded cut inputs in run.json alone; predict and evaluate said theirs on the terminal."""
    reports = {"train": {"truncated_utterances": 2, "unlabelled_utterances": 1},
               "validation": {"truncated_sequences": 4, "dropped_turns": 11924, "dropped_tokens": 0},
               "test": {"truncated_utterances": 0, "cut_utterances": 0}}
    with caplog.at_level("INFO", logger="turnformer"):
        run = run_description({"task": "erc"}, 1, None, ["a"], reports)
    notes = [r.getMessage() for r in caplog.records]
    assert notes == ["note: train: the model reads only part of some inputs (truncated utterances: 2; run.json's encode_reports)",
                     "note: validation: the model reads only part of some inputs (truncated sequences: 4, dropped turns: "
                     "11924; run.json's encode_reports)"]
    assert run["encode_reports"] == reports


def test_a_label_no_training_turn_carries_is_warned_of(tmp_path, caplog):
    from turnformer.tasks.common import load_labelled_data

    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"id": f"c{i}", "turns": [{"speaker": "A", "text": "so happy", "labels": {"emotion": "joy"}},
                                                                 {"speaker": "B", "text": "so sad", "labels": {"emotion": "sadness"}}]}) + "\n"
                             for i in range(2)))
    recipe = {"dataset": "file", "train_file": str(train), "validation_file": str(train), "test_file": str(train),
              "labels": ["joy", "sadness", "fear", "anger"]}
    with caplog.at_level("WARNING", logger="turnformer"):
        splits, labels = load_labelled_data(recipe, "emotion")
    assert labels == ["joy", "sadness", "fear", "anger"] and len(splits["train"]) == 2
    assert [r.getMessage() for r in caplog.records] == [f"{train}: no training turn is labelled 'anger', 'fear': the model "
                                                        "cannot learn to predict them"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="turnformer"):
        load_labelled_data({**recipe, "labels": ["joy", "sadness"]}, "emotion")
        load_labelled_data({**recipe, "labels": []}, "emotion")  # the labels the training file has
    assert not caplog.records

    # a validation label the training file lacks: the error names its line and the way to give every label; a label
    # that differs from one of the set only in capitals says so
    other = tmp_path / "validation.jsonl"
    for label, said in (("fear", f"(the labels of the training file {train}: to score others too, give every label, "
                                 "--set 'labels=[\"...\", ...]')"),
                        ("Joy", "unknown label 'Joy' (the label set has 'joy': capitals count); allowed: joy, sadness")):
        other.write_text(json.dumps({"turns": [{"speaker": "A", "text": "oh", "labels": {"emotion": label}}]}) + "\n")
        with pytest.raises(DialogueError, match=re.escape(said)) as refused:
            load_labelled_data({**recipe, "labels": [], "validation_file": str(other)}, "emotion")
        assert str(refused.value).startswith(f"{other}:1: turns[0].labels.emotion: unknown label {label!r}")
    other.write_text(json.dumps({"turns": [{"speaker": "A", "text": "oh", "labels": {"emotion": "fear"}}]}) + "\n")
    assert load_labelled_data({**recipe, "validation_file": str(other)}, "emotion")[1] == recipe["labels"]  # given


def test_a_setting_of_another_task_a_written_key_or_a_whole_section_is_refused_from_set():
    """`--set window=3` on an emotion model (model_config.window was meant) was kept in run.json and read by nothing;
    `--set file_sha256=...` wrote over what the command records; `--set train={}` dropped the recipe's [train]
    table (its learning rate and epochs) for the defaults, and `--set train=5` replaced it with a number."""
    for recipe, override, message in (
        ("erc-meld-dialogxl", "window=3", "window = 3 is a setting of the dialogue-act task; the erc task does not read "
                                          "it (a model's own settings go under model_config: model_config.window?)"),
        ("erc-meld-dialogxl", "setting=\"online\"", "setting = 'online' is a setting of the dialogue-act task"),
        ("erc-meld-dialogxl", "holdout=2", "holdout = 2 is a setting of the response-selection task"),
        ("erc-meld-dialogxl", "data.min_count=2", "is a setting of the generation task; the erc task does not read it"),
        ("generation-dailydialog-phaed", 'backbone="all-MiniLM-L6-v2"',
         "backbone = 'all-MiniLM-L6-v2' is a setting of the erc and dialogue-act and response-selection tasks"),
        ("response-selection-mutual-mdfn", 'label_kind="emotion"', "is a setting of the erc and dialogue-act tasks"),
        ("erc-meld-dialogxl", 'file_sha256="x"', "file_sha256 is written by the command itself, not set"),
        ("erc-meld-dialogxl", 'recipe_path="x"', "recipe_path is written by the command itself, not set"),
        ("erc-meld-dialogxl", "train.official_lr=1", "train.official_lr records the paper's learning rate and is not read"),
        ("erc-meld-dialogxl", "train=5", "train is a section of settings; set one of them: train.NAME=VALUE"),
        ("erc-meld-dialogxl", "model_config=3", "model_config is a section of settings"),
        ("erc-meld-dialogxl", "train={epochs=1, lr=", "'{epochs=1, lr=' is not a valid TOML inline table ("),
    ):
        with pytest.raises(DialogueError) as caught:
            load_recipe(recipe, [override])
        assert message in str(caught.value), (override, str(caught.value))
    plain = load_recipe("erc-meld-dialogxl")
    assert load_recipe("erc-meld-dialogxl", ["train={}"])["train"] == plain["train"]  # a table merges into the section
    merged = load_recipe("erc-meld-dialogxl", ["train={epochs = 2}"])["train"]
    assert merged == {**plain["train"], "epochs": 2}
    assert load_recipe("dialogue-act-dailydialog-lstm", ["window=3"])["window"] == 3
