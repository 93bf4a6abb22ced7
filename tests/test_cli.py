"""The `turnformer` command end to end: plot masks, demo."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from turnformer.cli import app
from turnformer.dialogue import Dialogue, Turn

runner = CliRunner()


@pytest.fixture()
def conversation_file(tmp_path):
    dialogues = [
        Dialogue(turns=(Turn("A", "Hi there."), Turn("B", "Hello!")), id="short"),
        Dialogue(
            turns=(
                Turn("Ross", "We were on a break!", {"emotion": "anger"}),
                Turn("Rachel", "Oh, my god.", {"emotion": "surprise"}),
                Turn("Ross", "Fine.", {"emotion": "neutral"}),
                Turn("Joey", "Guys?", {"emotion": "neutral"}),
            ),
            id="friends",
        ),
    ]
    path = tmp_path / "conversations.jsonl"
    path.write_text("".join(json.dumps(d.to_dict()) + "\n" for d in dialogues), encoding="utf-8")
    return path


def test_plot_masks_json_matches_definitions(conversation_file, tmp_path):
    out = tmp_path / "masks.png"
    result = runner.invoke(
        app,
        ["plot", "masks", "--input", str(conversation_file), "--dialogue", "friends",
         "--kinds", "local,global,speaker,listener", "--window", "1", "--json", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(payload["kinds"]) == {"local", "global", "speaker", "listener"}
    tokens, utt, spk = payload["tokens"], payload["utterance"], payload["speaker"]
    assert tokens[:5] == ["We", "were", "on", "a", "break"]
    assert len(tokens) == len(utt) == len(spk) == len(payload["kinds"]["global"])
    for i in range(len(tokens)):
        for j in range(len(tokens)):
            assert payload["kinds"]["global"][i][j] == 1
            assert payload["kinds"]["speaker"][i][j] == int(spk[i] == spk[j])
            assert payload["kinds"]["listener"][i][j] == int(spk[i] != spk[j])
            assert payload["kinds"]["local"][i][j] == int(0 <= utt[i] - utt[j] <= 1)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_masks_utterance_level(conversation_file):
    result = runner.invoke(
        app, ["plot", "masks", "--input", str(conversation_file), "--dialogue", "1", "--level", "utterances",
              "--kinds", "speaker|same_utterance", "--json"],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["speaker"] == ["Ross", "Rachel", "Ross", "Joey"]
    assert payload["kinds"]["speaker|same_utterance"][0] == [1, 0, 1, 0]


@pytest.mark.parametrize("level", ["utterances", "tokens"])
def test_plot_masks_of_a_part_of_a_conversation_are_the_whole_ones_there(conversation_file, level):
    """--start/--length: a long conversation's utterances can be shown a part at a time, numbered as in the whole."""
    def masks(*part):
        result = runner.invoke(app, ["plot", "masks", "--input", str(conversation_file), "--dialogue", "friends",
                                     "--level", level, "--kinds", "local,speaker", "--window", "1", "--json", *part])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    whole, part = masks(), masks("--start", "1", "--length", "2")
    shown = [i for i, u in enumerate(whole["utterance"]) if u in (1, 2)]
    assert part["utterance"] == [whole["utterance"][i] for i in shown] and set(part["utterance"]) == {1, 2}
    assert part["speaker"] == [whole["speaker"][i] for i in shown]
    for kind in ("local", "speaker"):
        assert part["kinds"][kind] == [[whole["kinds"][kind][i][j] for j in shown] for i in shown]
    assert masks("--start", "3")["utterance"] == [3] * (len(whole["utterance"]) - shown[-1] - 1)  # to the end
    for wrong, said in ((["--start", "4"], "--start 4 out of range: dialogue 'friends' has 4 utterances"),
                        (["--start", "1", "--query-utterance", "2"], "--query-utterance shows the utterances up to it")):
        refused = runner.invoke(app, ["plot", "masks", "--input", str(conversation_file), "--dialogue", "friends",
                                      "--json", *wrong])
        assert refused.exit_code == 2 and said in refused.output, refused.output


def test_plot_masks_query_utterance_is_dialogxl_view(conversation_file):
    result = runner.invoke(
        app, ["plot", "masks", "--input", str(conversation_file), "--dialogue", "friends", "--query-utterance", "2",
              "--kinds", "speaker|same_utterance,local(0)", "--json"],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["query_tokens"] == ["Fine", "."]
    assert payload["speaker"] == ["Ross"] * 6 + ["Rachel"] * 5 + ["Ross"] * 2  # keys: u0..u2 only
    assert payload["kinds"]["speaker|same_utterance"][0] == [1] * 6 + [0] * 5 + [1] * 2
    assert payload["kinds"]["local(0)"][1] == [0] * 11 + [1] * 2


@pytest.mark.parametrize("index", ["4", "-1"])
def test_plot_masks_query_utterance_out_of_range_names_the_option(conversation_file, index):
    result = runner.invoke(
        app, ["plot", "masks", "--input", str(conversation_file), "--dialogue", "friends", "--query-utterance", index, "--json"],
    )
    assert result.exit_code != 0
    assert f"--query-utterance {index} out of range: dialogue 'friends' has 4 utterances (0..3)" in result.output


def test_plot_masks_memory_length_needs_a_query_utterance(conversation_file):
    """--mem-len shapes DialogXL's view of one utterance; without --query-utterance it was read past without a word."""
    result = runner.invoke(app, ["plot", "masks", "--input", str(conversation_file), "--mem-len", "5", "--json"])
    assert result.exit_code == 2 and "--mem-len is DialogXL's view of one utterance: give --query-utterance N" in result.output


def test_plot_masks_wordpiece_tokens(conversation_file):
    result = runner.invoke(
        app, ["plot", "masks", "--input", str(conversation_file), "--dialogue", "short", "--tokenizer", "all-MiniLM-L6-v2",
              "--kinds", "same_utterance", "--json"],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["tokens"][0] == "[CLS]" and payload["tokens"].count("[SEP]") == 2


@pytest.mark.parametrize(
    "args, message",
    [
        (["--dialogue", "nope"], "no dialogue with id 'nope'"),
        (["--kinds", "speakers"], "unknown mask 'speakers'"),
        (["--kinds", "local&|speaker"], "a mask is missing beside '&', '|' or '~'"),  # was "unknown mask ''"
        (["--level", "words"], "level must be"),
    ],
)
def test_plot_masks_bad_input(conversation_file, args, message):
    result = runner.invoke(app, ["plot", "masks", "--input", str(conversation_file), "--json", *args])
    assert result.exit_code == 2
    assert message in result.output


def test_plot_masks_malformed_file(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"turns": [{"speaker": "A", "text": "hi"}]}\n{"turns": [{"speaker": "B", "text": ""}]}\n')
    result = runner.invoke(app, ["plot", "masks", "--input", str(bad), "--json"])
    assert result.exit_code == 2
    assert "bad.jsonl" in result.output and ":2" in result.output


def test_demo_on_real_data(data_dir, tmp_path):
    """The demo's whole path on real MELD files, with the fine-tune shrunk to a few dialogues."""
    result = runner.invoke(app, ["demo", "--out", str(tmp_path), "--data-dir", str(data_dir),
                                 "--train-dialogues", "3", "--eval-dialogues", "3"])
    assert result.exit_code == 0, result.output
    assert "1038" in result.output  # MELD train dialogues, as SOURCES.md counts them
    assert "on the first 3 test dialogues" in result.output
    assert (tmp_path / "masks-utterances.png").stat().st_size > 1000
    assert (tmp_path / "masks-last-utterance.png").stat().st_size > 1000
    assert (tmp_path / "run" / "best" / "model.safetensors").exists()
    assert json.loads((tmp_path / "run" / "result.json").read_text())["best_epoch"] == 1  # as a `train` run's
    assert "annotated one utterance at a time" in result.output
    for option, value in (("--train-dialogues", "-1"), ("--eval-dialogues", "0")):  # refused before any work
        bad = runner.invoke(app, ["demo", "--out", str(tmp_path / "bad"), "--data-dir", str(data_dir), option, value])
        assert bad.exit_code == 2 and f"{option} {value}: give a number of dialogues, 1 or more" in bad.output
        assert not (tmp_path / "bad").exists()
    bad = runner.invoke(app, ["demo", "--out", str(tmp_path / "bad"), "--data-dir", str(data_dir), "--epochs", "0"])
    assert bad.exit_code == 2 and "--epochs" in bad.output
    # a recipe that is no DialogXL (the demo draws its heads, annotates with its session), an --out that is a file:
    # tracebacks after the data had loaded; an unknown model listed every recipe of every task, with an option it lacks
    (tmp_path / "afile").write_text("")
    for args, message in ((["--model", "concat-context"], "--model concat-context: the demo fine-tunes a DialogXL recipe of meld: "
                                                          "dialogxl, dialogxl-memory-bias,"),
                          (["--model", "nope"], "--model nope: the demo fine-tunes a DialogXL recipe of meld"),
                          (["--out", str(tmp_path / "afile")], "a file; give a folder"),
                          (["--out", str(tmp_path / "afile" / "sub")], "is a file, not a folder")):
        bad = runner.invoke(app, ["demo", "--out", str(tmp_path / "bad"), "--data-dir", str(data_dir), *args])
        assert bad.exit_code == 2 and message in " ".join(bad.output.split()) and "Traceback" not in bad.output, bad.output
        assert "dialogues" not in bad.output  # refused before the dataset's statistics


def test_plot_masks_draws_dollar_signs_as_text(tmp_path):
    """A "$" in an id, a speaker or a word is text: matplotlib would read "$x^$" as a broken formula and fail."""
    path = tmp_path / "prices.jsonl"
    path.write_text(json.dumps(Dialogue(turns=(Turn("$x^$", "it costs $5"), Turn("B", "ok $10")), id="d$1$").to_dict()) + "\n")
    for level in ("tokens", "utterances"):
        out = tmp_path / f"{level}.png"
        result = runner.invoke(app, ["plot", "masks", "--input", str(path), "--level", level, "--out", str(out)])
        assert result.exit_code == 0 and out.read_bytes()[:4] == b"\x89PNG", result.output


def test_confusion_matrix_draws_labels_with_dollar_signs(tmp_path):
    from turnformer.tasks.metrics import confusion_matrix_plot

    out = confusion_matrix_plot(["$a^$", "b"], ["b", "b"], ["$a^$", "b"], tmp_path / "cm.png")
    assert out.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("mem_len", [None, 6])
def test_dialogxl_view_is_what_the_model_gives_its_encoder(conversation_file, mem_len):
    """`plot masks --query-utterance t`: every head type sees the query's own utterance, and earlier utterances'
    tokens as DialogXL's own masks show them, token for token."""
    from turnformer.backbones import load_tokenizer, random_backbone, tiny_config
    from turnformer.data import read_jsonl
    from turnformer.models.dialogxl import DialogXL, DialogXLConfig
    from turnformer.plots import mask_view
    from turnformer.tasks.erc import encode_conversations, make_batch

    tokenizer = load_tokenizer("all-MiniLM-L6-v2")
    dialogue = next(d for d in read_jsonl(conversation_file) if d.id == "friends")
    encoder = random_backbone(tiny_config(vocab_size=tokenizer.vocab_size, hidden=48, heads=4, layers=1), seed=0)
    config = DialogXLConfig(num_labels=2, heads=(1, 1, 1, 1), window=1, mem_len=mem_len or 400)
    model = DialogXL(config, encoder, tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id)
    encoded, _ = encode_conversations([dialogue], tokenizer, "none", ["x"], 128)  # no labels needed
    meta, _ = model.conversation_meta(make_batch(encoded, tokenizer.pad_token_id))
    for t in range(1, len(dialogue)):
        rows = (meta.utterance[0] == t).nonzero().flatten()
        cols = ((meta.utterance[0] <= t) & (meta.utterance[0] >= 0)).nonzero().flatten()
        heads = model.layout.build(meta.select(rows), meta.select(cols))[0]  # [4 heads, Q, K]: what the encoder gets
        view = mask_view(dialogue, ["local(1)", "global", "speaker", "listener"], tokenizer=tokenizer, query_utterance=t,
                         mem_len=mem_len)
        for head, kind in enumerate(view.masks):
            assert torch.equal(view.masks[kind], heads[head]), (t, kind)
        listener_own = view.masks["listener"][:, [i for i, u in enumerate(view.utterance) if u == t]]
        assert bool(listener_own.all())  # the current utterance is visible to listener heads too


def test_threads_default_to_the_idle_cores_and_can_be_set(monkeypatch):
    import os

    from turnformer import cli

    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(os, "getloadavg", lambda: (6.2, 0.0, 0.0))
    assert cli.default_threads() == 2  # another job keeps 6 cores busy
    monkeypatch.setattr(os, "getloadavg", lambda: (11.0, 0.0, 0.0))
    assert cli.default_threads() == 1
    monkeypatch.setattr(os, "getloadavg", lambda: (0.1, 0.0, 0.0))
    assert cli.default_threads() == 8
    before = torch.get_num_threads()
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        result = runner.invoke(app, ["--threads", "1", "plot", "masks", "--input", "nope.jsonl", "--json"])
        assert result.exit_code == 2 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_an_interrupted_demo_says_what_it_left_and_that_it_starts_over(data_dir, tmp_path, monkeypatch):
    """Ctrl-C during the demo's fine-tune ended it with the training loop's "saving last" alone: no word of what the
    demo's next call does (it has no --resume: it starts the fine-tune over)."""
    from turnformer.tasks.registry import get_task

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(get_task("erc"), "train", stopped)
    result = runner.invoke(app, ["demo", "--out", str(tmp_path), "--data-dir", str(data_dir), "--train-dialogues", "2",
                                 "--eval-dialogues", "2"])
    assert result.exit_code == 130 and "Traceback" not in result.output, result.output
    assert f"interrupted: the demo's fine-tune in {tmp_path / 'run'} did not finish; the demo run again starts it over" in \
        " ".join(result.output.split())


def test_a_demo_interrupted_before_its_fine_tune_says_so(data_dir, tmp_path, monkeypatch):
    """Ctrl-C while the demo read the data or drew its masks exited 130 without a word."""
    import turnformer.cli as cli

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "draw_head_masks", stopped)
    result = runner.invoke(app, ["demo", "--out", str(tmp_path), "--data-dir", str(data_dir), "--train-dialogues", "2",
                                 "--eval-dialogues", "2"])
    assert result.exit_code == 130 and "Traceback" not in result.output, result.output
    assert "interrupted: the demo stopped before its fine-tune; the demo run again starts over" in " ".join(result.output.split())
    assert not (tmp_path / "run").exists()


def test_every_option_of_every_command_says_what_it_takes():
    """`--help` is where a user reads an option: none is listed without a line of help."""
    import click
    import typer

    def commands(command, path=()):
        yield path, command
        for name, sub in getattr(command, "commands", {}).items():
            yield from commands(sub, (*path, name))

    bare = [f"{' '.join(path)} {param.opts[0]}" for path, command in commands(typer.main.get_command(app))
            for param in command.params if isinstance(param, click.Option) and not param.hidden and not (param.help or "").strip()]
    assert bare == [], bare
