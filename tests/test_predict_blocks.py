"""`predict` and `generate` read a file and make its predictions a block of conversations at a time, so that a file of
any length is never held whole: the output is the same whatever the blocks (rows, names of conversations without
id, notes), a fault anywhere in the file is named before anything is written, and the writer streams."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from turnformer.cli import app
from turnformer.data import write_jsonl
from turnformer.data._io import PartialOutput, iter_lines, write_chunks, write_file
from turnformer.dialogue import Dialogue, DialogueError, Turn, output_names
from turnformer.tasks import common

runner = CliRunner()

TEXTS = ["great news, I passed!", "my dog died", "that is wonderful", "it is raining again", "okay"]


def conversations(n: int) -> list[Dialogue]:
    """`n` conversations of 1 to 5 turns; every third without id, one whose id spells another's place ("6"), and a
    very long utterance in one (c8's turn 1, longer than the models read)."""
    out = []
    for i in range(n):
        turns = tuple(Turn("Ann" if j % 2 else "Bob", TEXTS[(i + j) % 5] if (i, j) != (8, 1) else "word " * 400)
                      for j in range(1 + i % 5))
        out.append(Dialogue(turns, id=None if i % 3 == 0 else ("6" if i == 7 else f"c{i}")))
    return out


@pytest.fixture(scope="module")
def input_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("input") / "conversations.jsonl"
    write_jsonl(conversations(14), path)
    return path


DEFAULT_BLOCK_UTTERANCES = common.BLOCK_UTTERANCES


def _run(args: list[str], block_utterances: int | None, monkeypatch):
    """The command, its blocks `block_utterances` utterances (None: the default, whatever an earlier call set); it must
    succeed."""
    monkeypatch.setattr(common, "BLOCK_UTTERANCES", DEFAULT_BLOCK_UTTERANCES if block_utterances is None else block_utterances)
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result


def _same_whatever_the_blocks(args: list[str], out: Path, monkeypatch) -> list[dict]:
    """The command's output file and notes with one block, and with blocks of 4 and of 1 utterance: equal."""
    outputs = []
    for size in (None, 4, 1):
        result = _run([*args, "--out", str(out)], size, monkeypatch)
        notes = [line for line in result.stderr.splitlines() if line.startswith("note:")]
        outputs.append((out.read_text(), notes, [line for line in result.stderr.splitlines() if line.startswith("wrote")]))
    assert outputs[1] == outputs[0] and outputs[2] == outputs[0]
    return [json.loads(line) for line in outputs[0][0].splitlines()]


@pytest.fixture(scope="module")
def erc_run(tiny_backbone_dir, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("erc")
    labelled = [Dialogue(tuple(Turn(t.speaker, t.text, {"emotion": "joy" if j % 2 else "sadness"}) for j, t in enumerate(d.turns)),
                         id=f"t{i}") for i, d in enumerate(conversations(6))]
    for split in ("train", "validation", "test"):
        write_jsonl(labelled, folder / f"{split}.jsonl")
    out = folder / "run"
    settings = [f'backbone="{tiny_backbone_dir}"', "model_config.heads=[1,1,1,1]", "train.batch_size=2", "train.epochs=1",
                "model_config.max_utterance_tokens=16"]
    result = runner.invoke(app, ["train", *(f"--{s}-file={folder / s}.jsonl" for s in ("train", "validation", "test")),
                                 "--out", str(out), *(arg for s in settings for arg in ("--set", s))])
    assert result.exit_code == 0, result.output
    return out


def test_emotion_predictions_are_the_same_whatever_the_blocks(erc_run, input_file, tmp_path, monkeypatch):
    rows = _same_whatever_the_blocks(["predict", "--checkpoint", str(erc_run), "--input", str(input_file)],
                                     tmp_path / "p.jsonl", monkeypatch)
    dialogues = conversations(14)
    assert len(rows) == sum(len(d) for d in dialogues)
    # a conversation without id is named by its place in the whole file, "#6" where another's id is "6"
    names = [r["dialogue"] for r in rows if r["turn"] == 0]
    assert names == output_names([d.id for d in dialogues]) and names[6:10] == ["#6", "6", "c8", "9"]
    assert [(r["dialogue"], r["turn"]) for r in rows if r["truncated"]] == [("c8", 1)]

    # the table: one per block, every conversation in one of them
    monkeypatch.setattr(common, "BLOCK_UTTERANCES", 10)
    shown = runner.invoke(app, ["predict", "--checkpoint", str(erc_run), "--input", str(input_file)])
    assert shown.exit_code == 0, shown.output
    blocks = common.conversation_blocks(str(input_file)).count
    assert blocks > 3 and shown.stdout.count("┃ dialogue") == blocks
    assert all(f"│ {name} " in shown.stdout for name in ("0", "c1", "#6", "c13"))


def test_a_fault_anywhere_in_the_file_is_named_before_anything_is_written(erc_run, input_file, tmp_path, monkeypatch):
    monkeypatch.setattr(common, "BLOCK_UTTERANCES", 2)
    out = tmp_path / "p.jsonl"
    lines = input_file.read_text().splitlines()
    for bad, message in ((lines + ['{"turns": [{"speaker": "A"}]}'], f":{len(lines) + 1}: "),
                         (lines + [lines[1]], f":{len(lines) + 1}: id: 'c1' is already the id of the conversation on line 2"),
                         (lines + [json.dumps({"turns": [{"speaker": "A", "text": "hi"}], "meta": {"candidates": ["a"]}})],
                          f":{len(lines) + 1}: a response-selection item")):
        broken = tmp_path / "broken.jsonl"
        broken.write_text("\n".join(bad) + "\n")
        result = runner.invoke(app, ["predict", "--checkpoint", str(erc_run), "--input", str(broken), "--out", str(out)])
        assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output
        assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".p.jsonl")]


def test_an_error_while_the_blocks_are_made_leaves_the_output_as_it_was(erc_run, input_file, tmp_path, monkeypatch):
    out = tmp_path / "p.jsonl"
    out.write_text("kept\n")
    calls = []

    def fails_on_the_second_block(self, model, tokenizer, run, dialogues, desc="predict"):
        calls.append(desc)
        if len(calls) == 2:
            raise DialogueError("the second block failed")
        return original(self, model, tokenizer, run, dialogues, desc)

    from turnformer.tasks.erc import EmotionRecognition
    original = EmotionRecognition.annotate
    monkeypatch.setattr(EmotionRecognition, "annotate", fails_on_the_second_block)
    monkeypatch.setattr(common, "BLOCK_UTTERANCES", 20)
    result = runner.invoke(app, ["predict", "--checkpoint", str(erc_run), "--input", str(input_file), "--out", str(out)])
    assert result.exit_code == 2 and "error: the second block failed" in result.output
    assert calls == ["predict (block 1 of 3)", "predict (block 2 of 3)"]
    assert out.read_text() == "kept\n" and [p.name for p in tmp_path.iterdir()] == ["p.jsonl"]


def test_dialogue_acts_offline_and_online_are_the_same_whatever_the_blocks(data_dir, input_file, tmp_path, monkeypatch):
    run = tmp_path / "run"
    _run(["train", "--task", "dialogue-act", "--model", "lstm", "--dataset", "dailydialog", "--limit-dialogues", "4",
          "--set", "train.epochs=1", "--out", str(run), "--data-dir", str(data_dir)], None, monkeypatch)
    for online in ([], ["--online"]):
        rows = _same_whatever_the_blocks(["predict", "--checkpoint", str(run), "--input", str(input_file), *online],
                                         tmp_path / "p.jsonl", monkeypatch)
        assert len(rows) == sum(len(d) for d in conversations(14)) and len(rows[0]["probabilities"]) == 4  # DailyDialog's acts


def test_generated_replies_are_the_same_whatever_the_blocks(data_dir, input_file, tmp_path, monkeypatch):
    run = tmp_path / "run"
    _run(["train", "--task", "generation", "--model", "transformer", "--dataset", "dailydialog", "--limit-dialogues", "8",
          "--set", "model_config.d_model=32", "--set", "model_config.ff=64", "--set", "model_config.layers=1",
          "--set", "train.epochs=1", "--out", str(run), "--data-dir", str(data_dir)], None, monkeypatch)
    rows = _same_whatever_the_blocks(["generate", "--checkpoint", str(run), "--input", str(input_file)],
                                     tmp_path / "r.jsonl", monkeypatch)
    assert [r["id"] for r in rows] == output_names([d.id for d in conversations(14)])
    # more turns than the 4 it reads (c4 and 9, of 5 turns), or an utterance over its 50 words (c8)
    assert [r["id"] for r in rows if r["truncated"]] == ["c4", "c8", "9"]
    from turnformer.tasks.generation import ResponseGenerator

    source = tmp_path / "in.jsonl"
    source.write_text(input_file.read_text())
    _goes_on_after_an_interrupt(["generate", "--checkpoint", str(run), "--input", str(source)], tmp_path / "r.jsonl",
                                ResponseGenerator, "respond_all", monkeypatch, at=6)  # c4 and c8 noted before it


def _annotations_of_turn_lists(task, model, tokenizer, run) -> None:
    """`annotate` (and its model's `predict_dialogues`) take a lone `Dialogue`, or conversations as lists of turns,
    as the `Dialogue`s they stand for; a turn it cannot use is a `DialogueError` naming its place."""
    dialogues = conversations(4)
    expected = task.annotate(model, tokenizer, run, dialogues)
    pairs = [[(t.speaker, t.text) for t in d.turns] for d in dialogues]
    assert task.annotate(model, tokenizer, run, pairs) == expected
    (alone,) = task.annotate(model, tokenizer, run, dialogues[1])  # read without batch-mates: the same to float rounding
    assert [r["label"] for r in alone] == [r["label"] for r in expected[1]]
    assert [r["probabilities"] for r in alone] == [pytest.approx(r["probabilities"], abs=1e-6) for r in expected[1]]
    for bad, where in (([[("Ann", "hi"), (None, "yo")]], r"dialogues\[0\]: .*turns\[1\]: speaker"), ([[("Ann", "   ")]], r"turns\[0\]")):
        with pytest.raises(DialogueError, match=where):
            task.annotate(model, tokenizer, run, bad)


def test_the_python_api_takes_conversations_as_lists_of_turns(erc_run, data_dir, tmp_path):
    from turnformer.tasks import dialogue_act, erc

    model, tokenizer, run = erc.load_trained(erc_run)
    _annotations_of_turn_lists(erc.TASK, model, tokenizer, run)
    pairs = [(t.speaker, t.text) for t in conversations(3)[2].turns]
    view = erc.attention_view(model, tokenizer, conversations(3)[2], 1)
    assert erc.attention_view(model, tokenizer, pairs, 1) == dataclasses.replace(view, dialogue=None)  # no id given
    for bad in (True, 1.0):
        with pytest.raises(ValueError, match=r"utterance: expected an utterance's index \(a whole number\), got"):
            erc.attention_view(model, tokenizer, pairs, bad)

    act_run = tmp_path / "act"
    trained = runner.invoke(app, ["train", "--task", "dialogue-act", "--model", "lc-attention", "--dataset", "dailydialog",
                                  "--limit-dialogues", "3", "--set", "train.epochs=1", "--out", str(act_run), "--data-dir", str(data_dir)])
    assert trained.exit_code == 0, trained.output
    model, tokenizer, run = dialogue_act.load_trained(act_run)
    _annotations_of_turn_lists(dialogue_act.TASK, model, tokenizer, run)
    assert torch.equal(dialogue_act.utterance_attention(model, tokenizer, pairs, 0, 3),
                       dialogue_act.utterance_attention(model, tokenizer, conversations(3)[2], 0, 3))


def test_blocks_cut_between_conversations_and_a_long_one_is_alone(tmp_path):
    path = tmp_path / "c.jsonl"
    dialogues = conversations(14)
    write_jsonl(dialogues, path)
    blocks = common.conversation_blocks(str(path), block_utterances=6)
    made = list(blocks)
    assert len(blocks) == 14 and blocks.utterances == sum(len(d) for d in dialogues) and blocks.count == len(made)
    assert [d for _, block in made for d in block] == dialogues
    assert all(sum(map(len, block)) <= 6 or len(block) == 1 for _, block in made)
    assert [name for names, _ in made for name in names] == output_names([d.id for d in dialogues])
    assert list(blocks) == made  # read again: the same
    assert blocks.desc(1) == f"predict (block 2 of {len(made)})" and common.conversation_blocks(str(path)).desc(0) == "predict"


def test_output_names_a_block_at_a_time_equal_the_whole():
    ids = [None, "0", None, "#2", None, "x", None, None, "6"]
    taken = {i for i in ids if i is not None}
    names = [n for start in range(0, len(ids), 2) for n in output_names(ids[start:start + 2], start, taken)]
    assert names == output_names(ids) == ["#0", "0", "2", "#2", "4", "x", "#6", "7", "6"]


def test_write_chunks_streams_and_leaves_nothing_half_written(tmp_path):
    out = tmp_path / "o.jsonl"
    assert write_chunks(out, (f"{i}\n".encode() for i in range(3))) == 6 and out.read_text() == "0\n1\n2\n"

    def failing(error):
        yield b"first\n"
        raise error

    with pytest.raises(DialogueError, match="made badly"):
        write_chunks(out, failing(DialogueError("made badly")))
    with pytest.raises(FileNotFoundError) as raised:  # the maker's own error, not a failure to write `out`
        write_chunks(out, failing(FileNotFoundError(2, "No such file", "input.jsonl")))
    assert "input.jsonl" in str(raised.value) and "cannot be written" not in str(raised.value)
    assert out.read_text() == "0\n1\n2\n" and [p.name for p in tmp_path.iterdir()] == ["o.jsonl"]

    packed = tmp_path / "o.jsonl.gz"  # compressed as it is written, read back a line at a time
    write_chunks(packed, (f"{i}\n".encode() for i in range(1000)))
    assert [line for _, line in iter_lines(packed)] == [str(i) for i in range(1000)]
    write_file(packed, b"a\r\nb")
    assert gzip.decompress(packed.read_bytes()) == b"a\r\nb" and list(iter_lines(packed)) == [(1, "a"), (2, "b")]


def test_a_last_line_without_a_line_break_is_read_and_counted(tmp_path):
    """A file cut short inside its last line (a selection TSV's response, a table's text) was read as a shorter text
    without a word; a last line without a line break is now counted (a whole file may end so too: read as it is)."""
    from turnformer.data.report import LoadReport
    from turnformer.data.selection_tsv import read_selection_tsv

    cut = tmp_path / "pairs.tsv"
    cut.write_bytes(b"1\thi\tthe bank .\n0\thi\tthe r")
    report = LoadReport(source="pairs")
    assert [line for _, line in iter_lines(cut, report)] == ["1\thi\tthe bank .", "0\thi\tthe r"]
    assert report.counts == {"no_final_line_break": 1} and "pairs.tsv:2: the last line has no line break" in report.messages[0]
    for whole in (b"a\nb\n", b"a\r\nb\r\n", b"a\n\n", b""):  # ended, or nothing after the last break
        cut.write_bytes(whole)
        report = LoadReport(source="whole")
        list(iter_lines(cut, report))
        assert not report.counts
    cut.write_bytes(b"1\thi\tthe bank .\n0\thi\tthe r")  # a reader's load report says it
    caught = LoadReport(source="pairs")
    assert [c.text for c in read_selection_tsv(cut, report=caught)[0].candidates] == ["the bank .", "the r"]
    assert caught.counts["no_final_line_break"] == 1


def test_a_cut_gzip_file_is_named_with_the_last_line_read(tmp_path):
    whole = gzip.compress("".join(f"line {i}\n" for i in range(5000)).encode())
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(DialogueError, match=r"cut\.jsonl\.gz: a gzip file that cannot be decompressed after line \d+"):
        list(iter_lines(cut))
    with pytest.raises(DialogueError, match="is a directory"):
        list(iter_lines(tmp_path))


def test_an_interrupted_output_gives_back_the_rows_of_its_recorded_blocks(tmp_path):
    """What a maker rebuilds on going on (a submission's lines) comes from the rows of the recorded blocks only: a block
    written but not recorded when the run stopped is cut off, plain or gzip-compressed."""
    blocks = [[{"id": f"i{b}-{r}", "ranking": [r, b]} for r in range(3)] for b in range(4)]

    def made(stop_after: int):
        for b, rows in enumerate(blocks):
            if b == stop_after:
                raise KeyboardInterrupt
            yield "".join(json.dumps(row) + "\n" for row in rows).encode(), len(rows)

    for name in ("out.jsonl", "out.jsonl.gz"):
        out = PartialOutput(tmp_path / name, {"input": "x"})
        with pytest.raises(KeyboardInterrupt):
            out.write(made(2), lambda: {"count": 1})
        with open(out.partial, "ab") as fh:  # the next block, on disk but not in the record
            fh.write(gzip.compress(b'{"id": "lost"}\n') if name.endswith(".gz") else b'{"id": "lost"}\n')
        again = PartialOutput(tmp_path / name, {"input": "x"})
        assert again.kept() == {"count": 1} and (again.blocks, again.rows) == (2, 6)
        assert list(again.kept_rows()) == blocks[0] + blocks[1]
        again.write((block for b, block in enumerate(made(len(blocks))) if b >= 2), dict)  # the blocks left
        assert [json.loads(line) for line in _text(tmp_path / name).splitlines()] == [r for rows in blocks for r in rows]
        assert PartialOutput(tmp_path / name, {"input": "y"}).kept() is None  # another key: nothing to go on from


def test_rankings_and_the_submission_are_the_same_whatever_the_blocks(data_dir, tiny_backbone_dir, tmp_path, monkeypatch):
    run = tmp_path / "run"
    _run(["train", "--task", "response-selection", "--model", "mdfn", "--dataset", "mutual", "--limit-dialogues", "4",
          "--set", f'backbone="{tiny_backbone_dir}"', "--set", "model_config.max_length=48", "--set", "train.epochs=1",
          "--out", str(run), "--data-dir", str(data_dir)], None, monkeypatch)
    from turnformer.data import load_split

    items = load_split("mutual", "validation", data_dir).items[:12]
    jsonl, tsv = tmp_path / "items.jsonl", tmp_path / "items.tsv"
    write_jsonl([dataclasses.replace(item, id=None, context=dataclasses.replace(item.context, id=None)) if i % 3 == 0 else item
                 for i, item in enumerate(items)], jsonl)
    tsv.write_text("".join(f"{int(i == item.answer)}\t" + "\t".join(t.text for t in item.context.turns) + f"\t{c.text}\n"
                           for item in items for i, c in enumerate(item.candidates)))
    for source in (jsonl, tsv):
        made = []
        for size in (None, 7, 1):
            result = _run(["predict", "--checkpoint", str(run), "--input", str(source), "--submission", str(tmp_path / "s.txt"),
                           "--out", str(tmp_path / "r.jsonl")], size, monkeypatch)
            made.append(((tmp_path / "r.jsonl").read_text(), (tmp_path / "s.txt").read_text(),
                         [line for line in result.stderr.splitlines() if line.startswith(("note:", "wrote"))]))
        assert made[1] == made[0] and made[2] == made[0]
        rows = [json.loads(line) for line in made[0][0].splitlines()]
        assert len(rows) == len(made[0][1].splitlines()) == 12 and "wrote the rankings of 12 items to" in made[0][2][-2]
        assert [r["id"] for r in rows] == (output_names([item.id if i % 3 else None for i, item in enumerate(items)])
                                           if source == jsonl else [f"items-{1 + 4 * i}" for i in range(12)])
    from turnformer.tasks import response_selection

    for source in (jsonl, tsv):  # the submission and the note on what was cut cover the blocks made before the interrupt
        _goes_on_after_an_interrupt(["predict", "--checkpoint", str(run), "--input", str(source), "--submission",
                                     str(tmp_path / "s.txt")], tmp_path / "r.jsonl", response_selection, "score_items",
                                    monkeypatch, also=(tmp_path / "s.txt",))


def _text(path: Path) -> str:
    """A file's text; a gzip file's (of one member or several) decompressed."""
    data = path.read_bytes()
    return (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode("utf-8")


def _goes_on_after_an_interrupt(args: list[str], out: Path, owner, name: str, monkeypatch, also: tuple[Path, ...] = (),
                                at: int = 3):
    """The command (its blocks 6 utterances) interrupted by Ctrl-C in its block `at`, then run again: the second run
    makes only the blocks left (``owner.name`` is called once a block), and its output, the files in `also`, its notes
    and its "wrote" lines are those of a run never interrupted. Then an input changed since the interruption: made
    anew, whole."""
    monkeypatch.setattr(common, "BLOCK_UTTERANCES", 6)  # for the interrupted runs too
    said = lambda result: [line for line in result.stderr.splitlines() if line.startswith(("note:", "wrote"))]  # noqa: E731
    whole = _run([*args, "--out", str(out)], 6, monkeypatch)
    expected = (_text(out), [_text(f) for f in also], said(whole))
    for f in (out, *also):
        f.unlink()
    original, calls = getattr(owner, name), []

    def counted(*a, **k):
        calls.append(1)
        if len(calls) == at and interrupt:
            raise KeyboardInterrupt
        return original(*a, **k)

    monkeypatch.setattr(owner, name, counted)
    partial = out.with_name(out.name + ".partial")
    for changed in (False, True):
        calls.clear()
        interrupt = True
        stopped = runner.invoke(app, [*args, "--out", str(out)])
        message = " ".join(stopped.stderr.split())
        assert stopped.exit_code == 130 and "interrupted (Ctrl-C): " in message and f"kept in {partial}" in message
        blocks = int(message.split(f"(blocks 1-{at - 1} of ")[1].split(")")[0])
        kept = _text(partial)
        assert kept and expected[0].startswith(kept) and len(kept) < len(expected[0])
        assert (_text(out) if out.exists() else None) == (expected[0] if changed else None)  # as it was
        if changed:
            source = Path(args[args.index("--input") + 1])
            source.write_text(source.read_text())  # the same text, a new modification time: another input
        calls.clear()
        interrupt = False
        again = _run([*args, "--out", str(out)], 6, monkeypatch)
        assert len(calls) == (blocks if changed else blocks - at + 1) and ("going on from" in again.stderr) != changed
        assert ("with another model, input or options (or before its first block was done); starting anew"
                in " ".join(again.stderr.split())) == changed
        assert (_text(out), [_text(f) for f in also], said(again)) == expected
        assert not partial.exists() and not out.with_name(out.name + ".partial.json").exists()


def test_an_interrupted_predict_goes_on_where_it_stopped(erc_run, input_file, tmp_path, monkeypatch):
    from turnformer.tasks.erc import EmotionRecognition

    source = tmp_path / "in.jsonl"
    source.write_text(input_file.read_text())
    for at in (3, 6):  # c8's long utterance, the note's, in a block made after the interrupt, then in one before it
        _goes_on_after_an_interrupt(["predict", "--checkpoint", str(erc_run), "--input", str(source)], tmp_path / "p.jsonl",
                                    EmotionRecognition, "annotate", monkeypatch, at=at)
    gz = tmp_path / "p.jsonl.gz"  # compressed, a gzip member a block: read back as one file
    _goes_on_after_an_interrupt(["predict", "--checkpoint", str(erc_run), "--input", str(source)], gz,
                                EmotionRecognition, "annotate", monkeypatch)
    assert [line for _, line in iter_lines(gz)] == (tmp_path / "p.jsonl").read_text().splitlines()


def test_a_huge_utterance_is_cut_before_it_is_tokenised_and_read_the_same(tiny_backbone_dir):
    """A 25 MB utterance took 3.8 GB and half a minute to tokenise whole, though the model reads 128 word pieces: now
    every reader cuts it first (`text_to_read`); the pieces read, the cut's count and the notes stay the same."""
    from transformers import AutoTokenizer

    from turnformer.data.generation_vocab import words
    from turnformer.dialogue import CHARS_PER_TOKEN, text_to_read
    from turnformer.tasks.dialogue_act import word_pieces
    from turnformer.tasks.erc import encode_conversations

    tokenizer = AutoTokenizer.from_pretrained(tiny_backbone_dir)
    given = []

    class Spy:  # the tokenizer, recording the longest text it is given
        def __getattr__(self, name):
            return getattr(tokenizer, name)

        def __call__(self, texts, **kwargs):
            given.append(max(map(len, [texts] if isinstance(texts, str) else texts)))
            return tokenizer(texts, **kwargs)

    huge = "the weather is lovely today , is it not ? " * 20_000  # 860 K characters
    dialogue = Dialogue((Turn("A", huge, labels={"emotion": "joy"}), Turn("B", "short", labels={"emotion": "joy"})))
    assert text_to_read("short", 8) == ("short", False) and text_to_read(huge, 8) == (huge[: CHARS_PER_TOKEN * 10], True)
    assert text_to_read(huge, 8, keep="end") == (huge[-CHARS_PER_TOKEN * 10 :], True)
    with pytest.raises(ValueError, match="keep = 'middle': expected 'start' or 'end'"):
        text_to_read(huge, 8, keep="middle")
    encoded, report = encode_conversations([dialogue], Spy(), "emotion", ["joy"], 16)
    whole = tokenizer(huge, verbose=False)["input_ids"]
    assert encoded[0].turn_ids[0] == [*whole[:15], whole[-1]] and report.truncated_utterances == 1
    pieces, counts = word_pieces([huge, "short"], Spy(), 16)
    assert pieces[0] == whole[1:17] and counts["truncated_utterances"] == 1
    marked = common.mark_cut([[{}, {}]], [dialogue], Spy(), 16, with_specials=True)
    assert [p["truncated"] for p in marked[0]] == [True, False]
    assert max(given) <= CHARS_PER_TOKEN * 18
    assert words(huge, 5) == words(huge)[:5] == ["the", "weather", "is", "lovely", "today"]
    # a text cut within what a tokenizer reads as one piece (no word boundary for 1,152 characters) is said to be cut
    assert word_pieces(["x" * 2000], tokenizer, 16)[1]["truncated_utterances"] == 1
    # response selection: a candidate keeps its start, a context turn its end, as a sequence does: the same tokens
    from turnformer.dialogue import ResponseSelectionItem
    from turnformer.tasks.response_selection import encode_items, make_selection_batches, special_tokens

    item = ResponseSelectionItem(Dialogue((Turn("A", "hello there"), Turn("B", "end of a long turn . " + huge))),
                                 (Turn("A", huge + " and its end"), Turn("A", "fine")), answer=1)
    given.clear()
    (cut,), (whole,) = (make_selection_batches(encode_items([item], tokenize, 20, length), 2, special_tokens(tokenizer), 32)[0]
                        for tokenize, length in ((Spy(), 32), (tokenizer, None)))
    assert torch.equal(cut.input_ids, whole.input_ids) and max(given) <= CHARS_PER_TOKEN * 34
