"""Conversation tables (CSV or tab-separated, one utterance a row): read as the JSON Lines they stand for, every
fault named by its line, MELD's own files read as MELD's loader reads them."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from turnformer.cli import app
from turnformer.data import load_split, read_jsonl
from turnformer.data.jsonl import iter_jsonl
from turnformer.data.table import column_key, reads_as_table
from turnformer.dialogue import Dialogue, DialogueError, Turn

runner = CliRunner()


def table(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_a_table_reads_as_the_conversations_it_stands_for(tmp_path):
    rows = ("Dialogue ID,Speaker,Utterance,Emotion,label:topic,Turn,Notes\n"
            'c1,Ann,"Hi, Bob!",joy,greeting,0,x\n'
            'c1,Bob,"Hello,\nAnn.",neutral,,1,\n'
            "\n"
            "c2,Bob,Bye,sadness,farewell,1,\n"
            "c2, Ann ,See you,,farewell,0,y\n")
    path = table(tmp_path / "conversations.csv", rows)
    assert reads_as_table(path)
    dialogues = read_jsonl(path)
    assert list(dialogues) == [
        Dialogue((Turn("Ann", "Hi, Bob!", {"emotion": "joy", "topic": "greeting"}, id="0"),
                  Turn("Bob", "Hello,\nAnn.", {"emotion": "neutral"}, id="1")), id="c1"),
        Dialogue((Turn("Ann", "See you", {"topic": "farewell"}, id="0"),  # put in its place by the Turn column
                  Turn("Bob", "Bye", {"emotion": "sadness", "topic": "farewell"}, id="1")), id="c2"),
    ]
    assert dialogues.lines == [2, 6]  # the first row of each, the quoted line break and the blank row counted
    report = dialogues.report.counts
    assert report == {"unknown_field": 1, "empty_label": 2, "blank_line": 1, "utterances_reordered": 1, "padded_speaker": 1}
    assert "'Notes'" in dialogues.report.unknown_fields()

    # the same rows tab-separated, semicolon-separated and gzip-compressed: the same conversations
    tsv = table(tmp_path / "conversations.tsv", "conversation\tspeaker\ttext\nc1\tAnn\tHi, Bob!\nc1\tBob\tHello\n")
    semicolons = table(tmp_path / "semicolons.csv", "conversation;speaker;text\nc1;Ann;Hi, Bob!\nc1;Bob;Hello\n")
    packed = tmp_path / "packed.csv.gz"
    packed.write_bytes(gzip.compress(semicolons.read_bytes()))
    expected = [Dialogue((Turn("Ann", "Hi, Bob!"), Turn("Bob", "Hello")), id="c1")]
    assert list(read_jsonl(tsv)) == list(read_jsonl(semicolons)) == list(read_jsonl(packed)) == expected

    # no conversation column: the file is one conversation, and the report says so
    one = read_jsonl(table(tmp_path / "one.csv", "speaker,text\nA,hi\nB,yo\n"))
    assert list(one) == [Dialogue((Turn("A", "hi"), Turn("B", "yo")))] and one.report.counts == {"one_conversation": 1}


def test_a_table_is_read_a_conversation_at_a_time(tmp_path):
    """The first conversation comes before the reader reaches a later fault: a file of any length is never held whole."""
    path = table(tmp_path / "t.csv", "conversation,speaker,text\n1,A,hi\n1,B,yo\n2,A,bye\n2,B,\n")
    read = iter_jsonl(path)
    line, first = next(read)
    assert line == 2 and first.id == "1" and len(first.turns) == 2
    with pytest.raises(DialogueError, match=r"t.csv:5: text: empty text"):
        next(read)


@pytest.mark.parametrize("rows, message", [
    ("a,b\n1,2\n", r"t.csv:1: a conversation table needs a header line naming its text column .* its first line reads \['a', 'b'\]"),
    ("speaker,text,label\nA,hi,joy\n", r"t.csv:1: column 'label': say what its labels are of"),
    ("speaker,text,utterance\nA,hi,hello\n", r"t.csv:1: columns 'text' and 'utterance' are both the text"),
    ("dialogue_id,speaker,text\n1,A,hi\n2,B,yo\n1,A,again\n",
     r"t.csv:4: dialogue_id '1' again, after other conversations \(its rows began on line 2\)"),
    ("dialogue_id,speaker,text,turn\n1,A,hi,0\n1,B,yo,0\n", r"t.csv:3: turn '0' again in conversation '1' \(first on line 2\)"),
    ("dialogue_id,speaker,text\n1,A,hi\n1,,yo\n", r"t.csv:3: speaker: missing speaker"),
    ("dialogue_id,speaker,text\n ,A,hi\n", r"t.csv:2: dialogue_id: empty: every row names its conversation"),
    ("dialogue_id,speaker,text\n1,A,\"hi\n2,B,yo\n", r"t.csv:3: malformed CSV in the row from line 2: .*a quote opened there is not closed"),
    ("dialogue_id,speaker,text\n1,A,hi,extra\n", r"t.csv:2: expected 3 fields \(dialogue_id, speaker, text\), got 4"),
    ("speaker,text,emotion\nA,hi,joy\nB,yo,glee\n", r"t.csv:3: labels.emotion: unknown label 'glee'; allowed: joy, sadness"),
    ("speaker,text,label_Topic,label_topic\nA,hi,x,y\n", r"label kind 'topic' is written 'Topic'"),
    ("s\x00p\x00e\x00a\x00k\x00e\x00r\x00\t\x00t\x00\n", r"t.csv:1: not a conversation table; the line holds NUL bytes"),
])
def test_every_fault_of_a_table_is_named_by_its_line(tmp_path, rows, message):
    with pytest.raises(DialogueError, match=message):
        read_jsonl(table(tmp_path / "t.csv", rows), label_sets={"emotion": ["joy", "sadness"]})


def test_a_file_named_jsonl_stays_json_lines_and_json_is_never_read_as_a_table(tmp_path):
    assert not reads_as_table(table(tmp_path / "t.jsonl", "speaker,text\nA,hi\n"))
    assert not reads_as_table(table(tmp_path / "t.json", '[{"turns": [{"speaker": "A", "text": "hi, you"}]}]\n'))
    assert not reads_as_table(table(tmp_path / "t.txt", '{"turns": [{"speaker": "A", "text": "hi, you"}]}\n'))
    assert read_jsonl(tmp_path / "t.txt")[0].turns[0].text == "hi, you"
    assert column_key(" Dialogue-ID ") == column_key("dialogue_id") == column_key("Dialogue  id") == "dialogue_id"


def test_meld_s_own_files_read_as_a_table_are_what_its_loader_reads(data_dir):
    for split, name in (("validation", "dev"), ("test", "test")):
        loader = load_split("meld", split, data_dir).items
        generic = read_jsonl(data_dir / "meld" / f"{name}_sent_emo.csv")
        assert len(generic) == len(loader) > 100
        assert [f"dia{d.id}" for d in generic] == [d.id for d in loader]
        assert [[(t.speaker, t.text, t.labels) for t in d.turns] for d in generic] == \
               [[(t.speaker, t.text, t.labels) for t in d.turns] for d in loader]


def test_convert_and_stats_take_tables(tmp_path):
    source = table(tmp_path / "mine.csv", "conversation,speaker,text,emotion\nc1,A,hi,joy\nc1,B,yo,\nc2,A,bye,sadness\n")
    out = tmp_path / "mine.jsonl"
    converted = runner.invoke(app, ["data", "convert", str(source), "--out", str(out)])
    assert converted.exit_code == 0, converted.output
    assert list(read_jsonl(out)) == list(read_jsonl(source))
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["c1", "c2"]
    for args, message in ((["--split", "test"], "is a file, written whole"), ([], "")):
        if not args:  # --out the file read is refused, the file kept
            refused = runner.invoke(app, ["data", "convert", str(source), "--out", str(source)])
            assert refused.exit_code == 2 and "it is the file read" in refused.output
            assert source.read_text().startswith("conversation,")
            continue
        wrong = runner.invoke(app, ["data", "convert", str(source), *args, "--out", str(tmp_path / "x.jsonl")])
        assert wrong.exit_code == 2 and message in wrong.output
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "train.csv").write_bytes(source.read_bytes())
    (folder / "test.jsonl").write_bytes(out.read_bytes())
    stats = runner.invoke(app, ["data", "stats", str(folder), "--json"])
    assert stats.exit_code == 0, stats.output
    splits = json.loads(stats.stdout)["splits"]
    assert splits["train"] == splits["test"] | {"report": splits["train"]["report"]}
    assert splits["train"]["labels"] == {"joy": 1, "sadness": 1} and splits["train"]["report"] == {"empty_label": 1}
