"""`turnformer plot attention` (DialogXL's Figure 5) with a tiny random backbone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from turnformer.cli import app
from turnformer.data import write_jsonl
from turnformer.dialogue import Dialogue, Turn

runner = CliRunner()


@pytest.fixture(scope="module")
def conversations(tmp_path_factory):
    folder = tmp_path_factory.mktemp("conversations")
    lines = [("Ross", "we were on a break", "anger"), ("Rachel", "oh my god", "surprise"), ("Ross", "fine", "neutral"),
             ("Joey", "guys?", "neutral"), ("Rachel", "I can not believe you", "anger"), ("Ross", "me neither", "sadness")]
    dialogues = [Dialogue(tuple(Turn(s, t, {"emotion": e}) for s, t, e in lines[: 3 + i]), id=f"d{i}") for i in range(4)]
    paths = {}
    for split, part in (("train", dialogues), ("validation", dialogues[:2]), ("test", dialogues[2:])):
        paths[split] = folder / f"{split}.jsonl"
        write_jsonl(part, paths[split])
    return paths


def test_untrained_backbone_json_follows_the_head_masks(tiny_backbone_dir, conversations, tmp_path):
    out = tmp_path / "attention.png"
    result = runner.invoke(app, [
        "plot", "attention", "--input", str(conversations["train"]), "--dialogue", "d3", "--utterance", "5",
        "--backbone", str(tiny_backbone_dir), "--heads", "1,1,1,1", "--window", "1", "--json", "--out", str(out),
    ])
    assert result.exit_code == 0, result.output
    view = json.loads(result.stdout.strip().splitlines()[-1])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert view["dialogue"] == "d3" and view["utterance"] == 5
    assert view["head_counts"] == {"local": 1, "global": 1, "speaker": 1, "listener": 1}
    tokens, utt, spk = view["tokens"], view["key_utterance"], view["speaker"]
    assert len(tokens) == len(utt) == len(spk) and utt == sorted(utt) and set(utt) == set(range(6))
    assert tokens[utt.index(5):] == ["[CLS]", "me", "neither", "[SEP]"]  # the current utterance, after the memory
    assert "[CLS]" not in tokens[: utt.index(5)]  # memory holds no special tokens
    for kind, weights in view["weights"].items():
        assert len(weights) == len(tokens) and abs(sum(weights) - 1) < 1e-4, kind
    # The structure restricts memory keys only: what each head type may not see gets exactly zero.
    for i, u in enumerate(utt):
        if u == 5:
            continue
        if spk[i] != "Ross":
            assert view["weights"]["speaker"][i] == 0
        else:
            assert view["weights"]["listener"][i] == 0
        if u < 4:
            assert view["weights"]["local"][i] == 0
    assert abs(sum(view["utterance_weights"]["global"].values()) - 1) < 1e-4


def test_trained_checkpoint(tiny_backbone_dir, conversations, tmp_path):
    run = tmp_path / "run"
    trained = runner.invoke(app, [
        "train", "--dataset", "file", "--train-file", str(conversations["train"]),
        "--validation-file", str(conversations["validation"]), "--test-file", str(conversations["test"]),
        "--out", str(run), "--set", f'backbone="{tiny_backbone_dir}"', "--set", "model_config.heads=[2,0,1,1]",
        "--set", "train.epochs=1", "--set", "train.batch_size=2",
    ])
    assert trained.exit_code == 0, trained.output
    result = runner.invoke(app, ["plot", "attention", "--input", str(conversations["test"]), "--checkpoint", str(run), "--json"])
    assert result.exit_code == 0, result.output
    view = json.loads(result.stdout)
    assert view["dialogue"] == "d2" and view["utterance"] == 4  # defaults: the first dialogue, its last utterance
    assert view["head_counts"] == {"local": 2, "global": 0, "speaker": 1, "listener": 1}
    assert set(view["weights"]) == {"local", "speaker", "listener"}  # a type with no heads is left out
    for option, value in (("--heads", "9,9,9,9"), ("--window", "0")):  # --backbone's: a run's were silently kept
        ignored = runner.invoke(app, ["plot", "attention", "--input", str(conversations["test"]), "--checkpoint", str(run),
                                      "--json", option, value])
        assert ignored.exit_code == 2 and f"{option} is for --backbone" in ignored.output, ignored.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--dialogue", "nope"], "no dialogue with id 'nope'"),
        (["--dialogue", "d0", "--utterance", "3"], "--utterance 3 out of range: dialogue 'd0' has 3 utterances (0..2)"),
        (["--utterance", "-1"], "--utterance -1 out of range"),
        (["--heads", "1,1,2"], "--heads '1,1,2': give four counts"),
    ],
)
def test_bad_input_is_one_line_exit_2(tiny_backbone_dir, conversations, args, message):
    result = runner.invoke(app, ["plot", "attention", "--input", str(conversations["train"]), "--backbone", str(tiny_backbone_dir),
                                 "--heads", "1,1,1,1", "--json", *args])
    assert result.exit_code == 2
    assert message in result.output and len(result.output.strip().splitlines()) == 1


def test_needs_exactly_one_model_source(conversations, tmp_path):
    result = runner.invoke(app, ["plot", "attention", "--input", str(conversations["train"]), "--json"])
    assert result.exit_code == 2 and "--checkpoint RUN_DIR or --backbone NAME" in result.output
    result = runner.invoke(app, ["plot", "attention", "--input", str(conversations["train"]), "--backbone", "x"])
    assert result.exit_code == 2 and "--out FILE.png, --json" in result.output


def test_figures_of_a_long_conversation_stay_readable(monkeypatch, tmp_path):
    """500 utterances drew 499 boundary lines and 500 tick labels over every panel: solid orange, a black smear."""
    from pathlib import Path

    from turnformer import plots
    from turnformer.dialogue import Dialogue

    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, out: figures.append(fig) or Path(out))
    long = Dialogue.from_turns([("ABC"[i % 3], "hello there") for i in range(500)], id="long")
    plots.plot_masks(plots.mask_view(long, ["local(2)", "speaker"], level="utterances"), tmp_path / "m.png")
    short = Dialogue.from_turns([("AB"[i % 2], "hello there") for i in range(6)], id="short")
    plots.plot_masks(plots.mask_view(short, ["local(2)"], level="tokens"), tmp_path / "s.png")
    view = plots.AttentionView("d", 499, ["t"] * 1000, [u // 2 for u in range(1000)], ["A"] * 1000,
                               {"local": [0.001] * 1000}, {"local": 1})
    plots.plot_attention(view, tmp_path / "a.png")
    few = plots.AttentionView("d", 1, ["[CLS]", "hi", "[CLS]", "yo"], [0, 0, 1, 1], ["A", "A", "B", "B"], {"local": [0.1] * 4}, {"local": 1})
    plots.plot_attention(few, tmp_path / "f.png")
    (masks, *_), _, (attention,), (narrow,) = (fig.axes for fig in figures)
    assert not masks.lines and len(masks.get_xticks()) <= plots.MOST_TICKS and len(masks.get_yticks()) <= plots.MOST_TICKS
    assert len(figures[1].axes[0].lines) == 2 * 5  # a short one keeps its utterance boundaries, both ways
    assert not attention.lines and len(attention.get_xticks()) <= plots.MOST_TICKS
    # a narrow figure's title is broken into lines that fit it, not cut at both sides
    lines = figures[-1]._suptitle.get_text().splitlines()
    assert len(lines) >= 2 and max(map(len, lines)) * 0.6 * 9 / 72 <= figures[-1].get_figwidth()


def test_plot_words_keep_their_marks_and_labels_are_cut_to_fit():
    from turnformer.plots import word_tokens
    from turnformer.tasks.common import shorten

    assert word_tokens("नमस्ते दुनिया") == ["नमस्ते", "दुनिया"] and word_tokens("ไม่เป็นไร") == ["ไม่เป็นไร"]
    assert word_tokens("cafe\u0301 ok") == ["café", "ok"] and word_tokens("a\u202eb\u200bc") == ["a", "b", "c"]
    assert word_tokens("Don't go, Jim!") == ["Don't", "go", ",", "Jim", "!"]
    assert shorten("S" * 300, 12) == "S" * 11 + "…" and shorten("😀" * 50, 28) == "😀" * 13 + "…"  # 27 columns and "…"
    assert shorten("hello", 28) == "hello"


def test_a_figure_is_never_written_over_the_conversations_it_reads(tmp_path):
    conversations = tmp_path / "conv.png"
    write_jsonl([Dialogue((Turn("A", "a b"), Turn("B", "c d")), id="m")], conversations)
    before = conversations.read_bytes()
    result = runner.invoke(app, ["plot", "masks", "--input", str(conversations), "--out", str(conversations)])
    assert result.exit_code == 2 and "it is the --input file" in result.output
    assert conversations.read_bytes() == before


def test_a_view_too_wide_to_draw_shows_the_keys_from_the_memorys_oldest_token(monkeypatch):
    """DialogXL's view of a late utterance over a long conversation: with --mem-len, the keys the memory has passed
    are left out where all of them would be too many to draw; the rest are the whole view's, column for column."""
    from turnformer import plots

    dialogue = Dialogue(tuple(Turn("A" if i % 2 else "B", f"utterance {i} has five words") for i in range(30)), id="long")
    kinds = ["local(1)", "global", "speaker", "listener"]
    whole = plots.mask_view(dialogue, kinds, query_utterance=29, mem_len=12)
    monkeypatch.setattr(plots, "MAX_VIEW_CELLS", len(whole.query_tokens) * len(whole.tokens) - 1)
    cut = plots.mask_view(dialogue, kinds, query_utterance=29, mem_len=12)
    kept = len(cut.tokens)
    assert kept == 12 + 5 and cut.utterance == whole.utterance[-kept:]  # the memory, and the query's own 5 words
    for kind in kinds:
        assert torch.equal(cut.masks[kind], whole.masks[kind][:, -kept:])
        assert not whole.masks[kind][:, :-kept].any()  # what is left out, no head sees


def test_utterance_attention_panels_share_one_scale_with_a_colour_bar(tmp_path, monkeypatch):
    """Each panel was scaled to its own maximum, without a colour bar: an even 0.1 drew as dark as a peak of 0.9."""
    import turnformer.plots as plots

    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, out: figures.append(fig) or Path(out))
    even = torch.full((4, 4), 0.25)
    peaked = torch.eye(4) * 0.9 + 0.025
    plots.plot_utterance_attention([("plain", even), ("local", peaked)], ["a", "b", "c", "d"], tmp_path / "f.png")
    (fig,) = figures
    panels = [ax for ax in fig.axes if ax.images]
    assert [ax.images[0].get_clim() for ax in panels] == [(0, pytest.approx(0.925))] * 2
    assert any(ax.get_ylabel() == "attention weight" for ax in fig.axes)  # the colour bar, named
    # laid out as write_figure lays it out: the colour bar beside the panels (tight_layout had drawn it over the
    # second), the keys numbered as the rows are (from --start)
    plots.plot_utterance_attention([("plain", even), ("local", peaked)], ["7 a", "8 b", "9 c", "10 d"], tmp_path / "g.png",
                                   first=7)
    fig = figures[-1]
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    fig.canvas.draw()
    (bar,) = [ax for ax in fig.axes if ax.get_ylabel() == "attention weight"]
    for ax in (ax for ax in fig.axes if ax.images):
        assert not ax.get_window_extent().overlaps(bar.get_window_extent())
        assert [t.get_text() for t in ax.get_xticklabels()] == ["7", "8", "9", "10"]
