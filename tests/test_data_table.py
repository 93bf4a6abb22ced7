"""Conversation tables (CSV or tab-separated, one utterance a row): read as the JSON Lines they stand for, every
fault named by its line, MELD's own files read as MELD's loader reads them."""

from __future__ import annotations

import gzip
import json
import re
import tempfile
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from turnformer.cli import app
from turnformer.data import load_split, read_jsonl, write_jsonl
from turnformer.data.jsonl import FileConversations, iter_jsonl
from turnformer.data.table import column_key, reads_as_table, write_table
from turnformer.dialogue import Dialogue, DialogueError, Turn, is_blank, output_names, trim_invisible

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

    # a meta column: the conversation's meta, on its first row or on each; an empty place is no id (and no order)
    meta = read_jsonl(table(tmp_path / "meta.csv", 'conversation,speaker,text,turn,meta\n1,A,hi,,"{""n"": [1]}"\n'
                                                   '1,B,yo,0,\n1,A,ok,x,"{""n"": [1]}"\n'))
    assert list(meta) == [Dialogue((Turn("A", "hi"), Turn("B", "yo", id="0"), Turn("A", "ok", id="x")), id="1",
                                   meta={"n": [1]})]

    # no conversation column: the file is one conversation, and the report says so
    one = read_jsonl(table(tmp_path / "one.csv", "speaker,text\nA,hi\nB,yo\n"))
    assert list(one) == [Dialogue((Turn("A", "hi"), Turn("B", "yo")))] and one.report.counts == {"one_conversation": 1}
    # ... and an ignored column named like an id is told what to be called to be read
    with_id = read_jsonl(table(tmp_path / "id.csv", "id,speaker,text\nd1,A,hi\nd2,B,yo\n"))
    assert len(list(with_id)) == 1 and "column 'id' (the row's conversation? name the column conversation_id; the " \
        "utterance's place? utterance_id)" in with_id.report.summary()
    scene = read_jsonl(table(tmp_path / "scene.csv", "SceneID,turn,speaker,text\ns1,1,A,hi\n"))
    assert "column 'SceneID' (the row's conversation? name the column conversation_id)" in scene.report.summary()
    named = read_jsonl(table(tmp_path / "named.csv", "conversation,row_id,speaker,text\ns1,1,A,hi\n"))
    assert "column 'row_id'" in named.report.summary() and "name the column" not in named.report.summary()


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
    ('conversation,speaker,text,meta\n1,A,hi,"{""a"": 1}"\n1,B,yo,"{""a"": 2}"\n',
     r"t.csv:3: meta: differs from the meta of conversation '1' on line 2"),
    ("conversation,speaker,text,meta\n1,A,hi,nope\n", r"t.csv:2: meta: not JSON"),
    ("conversation,speaker,text,meta\n1,A,hi,[1]\n", r"t.csv:2: meta: expected an object, got a list"),
    # a header of other columns among the rows: two tables written one after the other
    ("conversation,speaker,text\n1,A,hi\nspeaker,utterance,conversation\n",
     r"t.csv:3: a header line \(speaker, utterance, conversation\) among the rows"),
    # a name that says a table, with a header split by none of the three: the table's message, not JSON's
    ("speaker|text\nA|hi\n", r"t.csv:1: a conversation table needs a header line naming its text column"),
    ("text\nhello\n", r"t.csv:1: a conversation table needs a header line naming its text column"),
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
    assert not reads_as_table(table(tmp_path / "t.txt", "speaker|text\n"))  # neither a table's name nor its delimiter


def test_camel_case_names_a_repeated_header_and_composed_labels(tmp_path):
    """DialogueID was an unknown column, and the file one conversation; a second table's header under the first was a
    conversation whose label was a new class "Emotion"; "alegría" typed two ways was two classes."""
    import unicodedata

    decomposed = unicodedata.normalize("NFD", "alegría")
    rows = ("DialogueID,SpeakerName,UtteranceText,Emotion,TurnNo\n"
            "d1,Ann,I got the job!,alegría,0\nd1,Bob,Congrats!,neutral,1\n"
            "DialogueID,SpeakerName,UtteranceText,Emotion,TurnNo\n"
            f"d2,Cat,Great,{decomposed},0\n")
    dialogues = read_jsonl(table(tmp_path / "t.csv", rows))
    assert [(d.id, [(t.speaker, t.labels["emotion"], t.id) for t in d.turns]) for d in dialogues] == [
        ("d1", [("Ann", "alegría", "0"), ("Bob", "neutral", "1")]), ("d2", [("Cat", "alegría", "0")])]
    assert dialogues.report.counts == {"header_again": 1, "decomposed_label": 1}
    assert column_key("dialogID") == "dialog_id" and column_key("ConversationID") == "conversation_id"


def test_convert_reads_a_file_a_conversation_at_a_time_and_a_late_fault_writes_nothing(tmp_path):
    """`data convert FILE` held the whole file (600 MB for a 57 MB table): it now reads the file as it writes, twice for
    a table (its columns, then its rows), and a fault found on the way leaves --out as it was."""
    source = table(tmp_path / "in.csv", "conversation,speaker,text,emotion,turn\nc1,A,hi,joy,0\nc1,B,yo,,1\n"
                                         "c2,A,bye,sadness,\n")
    conversations = FileConversations(source)
    out = tmp_path / "out.tsv"
    assert write_table(conversations, out) == 2 and conversations.passes == 2
    assert list(read_jsonl(out)) == list(read_jsonl(source)) and conversations.report.counts == {"empty_label": 1}
    assert write_table(iter(read_jsonl(source)), tmp_path / "once.tsv") == 2  # a one-pass iterator: held, written alike
    assert (tmp_path / "once.tsv").read_bytes() == out.read_bytes()
    late = table(tmp_path / "late.csv", "conversation,speaker,text\nc1,A,hi\nc2,B,\n")
    for name in ("kept.csv", "kept.jsonl"):
        kept = table(tmp_path / name, "keep me")
        result = runner.invoke(app, ["data", "convert", str(late), "--out", str(kept)])
        assert result.exit_code == 2 and "late.csv:3: text: empty text" in result.output
        assert kept.read_text() == "keep me" and not list(tmp_path.glob(".*.tmp"))


def test_a_reason_met_on_every_row_keeps_its_first_messages_and_its_whole_count(tmp_path):
    """Every repair kept its message: a million empty labels were a million messages held beside a file read a
    conversation at a time."""
    from turnformer.data.report import MESSAGES_PER_REASON

    rows = "".join(f"c{i // 3},A,hi {i},\n" for i in range(3 * MESSAGES_PER_REASON))
    dialogues = read_jsonl(table(tmp_path / "t.csv", "conversation,speaker,text,emotion\n" + rows))
    assert dialogues.report.counts == {"empty_label": 3 * MESSAGES_PER_REASON}
    assert len(dialogues.report.messages) == MESSAGES_PER_REASON
    assert dialogues.report.messages[-1].startswith(f"{tmp_path / 't.csv'}:{MESSAGES_PER_REASON + 1}: emotion: empty")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from([" ", "\t", "\n", "\u200b", "\ufeff", "\x00", "\u2028", "\xa0", "a", "é", "Z"]),
               max_size=8))
def test_trimming_looks_at_the_ends_only_and_trims_as_the_whole_name_read_did(name):
    """`trim_invisible` went through every character of every value of every row; it now stops at the first visible
    one from each end: the same result as marking every character."""
    marks = [c.isspace() or unicodedata.category(c) in ("Cc", "Cf") for c in name]
    expected = name if all(marks) else name[marks.index(False): len(name) - marks[::-1].index(False)]
    assert trim_invisible(name) == expected and is_blank(name) == all(marks)


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
    header = table(tmp_path / "header.csv", "conversation,speaker,text,emotion\n")  # nothing to convert: said
    empty = runner.invoke(app, ["data", "convert", str(header), "--out", str(tmp_path / "none.jsonl")])
    assert empty.exit_code == 0 and (tmp_path / "none.jsonl").read_text() == ""
    assert f"warning: {header} holds no conversations" in " ".join(empty.output.split())
    for files in ([header], [header, source]):  # data stats counts it, and says it is empty
        counted = runner.invoke(app, ["data", "stats", *map(str, files), "--json"])
        assert counted.exit_code == 0 and json.loads(counted.stdout)["splits"]["header"]["dialogues"] == 0
        assert " ".join(counted.stderr.split()).count("holds no conversations") == 1
        assert f"warning: {header} holds no conversations" in " ".join(counted.stderr.split())


_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r"), min_size=1,
                max_size=20).filter(lambda s: not is_blank(s))
_id = _text.filter(lambda s: s == trim_invisible(s))
_turn = st.builds(Turn, speaker=_text, text=_text,
                  labels=st.dictionaries(st.sampled_from(["emotion", "act", "sentiment", "topic", "Mood: of A"]), _text, max_size=3),
                  id=st.none() | _id | st.integers(0, 30).map(str))
_dialogue = st.builds(
    Dialogue,
    turns=st.lists(_turn, min_size=1, max_size=5, unique_by=lambda t: t.id if t.id is not None else id(t)).map(tuple),
    id=st.none() | _id,
    meta=st.dictionaries(st.text(max_size=8), st.none() | st.integers() | _text | st.lists(st.integers(), max_size=3), max_size=3),
)


@settings(max_examples=80, deadline=None)
@given(st.lists(_dialogue, max_size=5, unique_by=lambda d: d.id if d.id is not None else id(d)), st.sampled_from(["csv", "tsv.gz"]))
def test_conversations_written_as_a_table_read_back_as_written(dialogues, ending):
    """A table gives back what was written, or the writer refuses it up front (turn ids that are whole numbers out of
    order), naming the conversation; a conversation without id comes back under its place."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"round.{ending}"
        try:
            written = write_table(dialogues, path)
        except DialogueError as refused:
            assert "whole numbers out of order" in str(refused) and not path.exists()
            return
        assert written == len(dialogues)
        back = read_jsonl(path) if dialogues else []
        names = output_names([d.id for d in dialogues])
        assert list(back) == [Dialogue(d.turns, id=name, meta=d.meta) for name, d in zip(names, dialogues)]


def test_what_a_table_would_not_give_back_is_refused(tmp_path):
    from turnformer.dialogue import ResponseSelectionItem

    cases = [
        ([Dialogue((Turn("A", "hi\rthere"),), id="c")], "conversation 'c': a carriage return"),
        ([Dialogue((Turn("A", "hi", id="2"), Turn("B", "yo", id="1")), id="c")], "whole numbers out of order"),
        ([Dialogue((Turn("A", "hi"),), id="c"), Dialogue((Turn("A", "yo"),), id="c")], "dialogue 1: id 'c' is already"),
        ([Dialogue((Turn("A", "hi", id="t"), Turn("B", "yo", id="t")), id="c")], "turns[1].id 't' is already the id of"),
        ([Dialogue((Turn("A", "hi", {"_x": "y"}),))], "label kind '_x'"),
        ([ResponseSelectionItem(Dialogue((Turn("A", "hi"),)), (Turn("B", "yo"), Turn("B", "no")), 0, id="i")], "response-selection item"),
    ]
    for dialogues, message in cases:
        with pytest.raises(DialogueError, match=re.escape(message)):
            write_table(dialogues, tmp_path / "t.csv")
        assert not (tmp_path / "t.csv").exists()
    # data convert writes a table for an --out named .csv, and reads it back as the JSON Lines it came from
    source = tmp_path / "mine.jsonl"
    write_jsonl([Dialogue((Turn("A", "hi, you", {"emotion": "joy"}, id="0"), Turn("B", "yo")), id="c1", meta={"n": 1})],
                source)
    converted = runner.invoke(app, ["data", "convert", str(source), "--out", str(tmp_path / "mine.csv")])
    assert converted.exit_code == 0, converted.output
    assert (tmp_path / "mine.csv").read_text().splitlines() == [
        "conversation_id,turn_id,speaker,text,emotion,meta", 'c1,0,A,"hi, you",joy,"{""n"": 1}"', 'c1,,B,yo,,"{""n"": 1}"']
    assert list(read_jsonl(tmp_path / "mine.csv")) == list(read_jsonl(source))


def test_a_row_of_column_names_is_a_row_where_its_text_is_not_one_and_else_is_refused_when_written(tmp_path):
    """A caller's "The refund came through" with the emotion "content" names a speaker and a text column: it was read
    as another table's header line (an error), and a row that spelled the header was skipped, the conversation lost.
    A row is a header only where its text is a column's name too, and the writer refuses a row that would be read so."""
    calls = [Dialogue((Turn("caller", "The refund came through, thanks.", {"emotion": "content"}), Turn("agent", "Glad.")),
                      id="call1")]
    assert write_table(calls, tmp_path / "calls.csv") == 1
    assert list(read_jsonl(tmp_path / "calls.csv")) == calls
    for turn in (Turn("Speaker", "Text?"), Turn("speaker", "text", {"emotion": "emotion"})):
        with pytest.raises(DialogueError, match=r"conversation 'c': turn 0: its row \(c, , .*\) would read as another "
                                                r"table's header line"):
            write_table([Dialogue((turn,), id="c")], tmp_path / "t.csv")
        assert not (tmp_path / "t.csv").exists()


@pytest.mark.parametrize("name", ["meld", "emorynlp", "dailydialog", "swda"])
def test_a_benchmark_split_written_as_a_table_reads_back_whole(data_dir, tmp_path, name):
    split = load_split(name, "test", data_dir)
    path = tmp_path / f"{name}.tsv.gz"
    assert write_table(split.items, path) == len(split.items) > 10
    assert list(read_jsonl(path)) == list(split.items)
