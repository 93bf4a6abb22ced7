"""The generic JSONL conversation format: reader errors, convenience keys, exact round trips."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnformer.data import LoadReport, read_jsonl, write_jsonl
from turnformer.dialogue import Dialogue, DialogueError, ResponseSelectionItem, Turn, is_blank


def write_lines(path: Path, *lines: str | bytes) -> Path:
    path.write_bytes(b"".join((l if isinstance(l, bytes) else l.encode("utf-8")) + b"\n" for l in lines))
    return path


def conv(*turns, **extra) -> str:
    return json.dumps({"turns": list(turns), **extra}, ensure_ascii=False)


HI = {"speaker": "A", "text": "Hi"}


def test_read_basic_with_labels_ids_meta(tmp_path):
    path = write_lines(
        tmp_path / "conv.jsonl",
        conv({"speaker": "A", "text": "Hi!", "labels": {"emotion": "joy"}, "id": "t1"}, {"speaker": "B", "text": "Hey"},
             id="c1", meta={"source": "test", "n": [1, 2]}),
    )
    (d,) = read_jsonl(path)
    assert d == Dialogue(turns=(Turn("A", "Hi!", {"emotion": "joy"}, id="t1"), Turn("B", "Hey")), id="c1",
                         meta={"source": "test", "n": [1, 2]})


def test_convenience_label_keys(tmp_path):
    path = write_lines(
        tmp_path / "conv.jsonl",
        conv({"speaker": "A", "text": "Hi", "emotion": "joy", "act": "inform", "sentiment": "positive"},
             {"speaker": "B", "text": "Yo", "labels": {"topic": "x"}, "emotion": "neutral"}),
    )
    (d,) = read_jsonl(path)
    assert d[0].labels == {"emotion": "joy", "act": "inform", "sentiment": "positive"}
    assert d[1].labels == {"topic": "x", "emotion": "neutral"}
    write_jsonl([d], tmp_path / "out.jsonl")
    written = json.loads((tmp_path / "out.jsonl").read_text(encoding="utf-8"))
    assert written["turns"][0] == {"speaker": "A", "text": "Hi", "labels": {"emotion": "joy", "act": "inform", "sentiment": "positive"}}


def test_convenience_key_conflict(tmp_path):
    path = write_lines(tmp_path / "conv.jsonl", conv({"speaker": "A", "text": "Hi", "emotion": "joy", "labels": {"emotion": "sad"}}))
    with pytest.raises(DialogueError, match=r"conv\.jsonl:1: turns\[0\]\.emotion: 'joy' disagrees with labels\.emotion = 'sad'"):
        read_jsonl(path)


def test_blank_lines_and_unknown_fields_are_counted(tmp_path):
    path = write_lines(tmp_path / "conv.jsonl", "", conv(HI), "   ", conv({**HI, "extra": 1}, foo=2))
    result = read_jsonl(path)
    assert len(result) == 2
    assert result.report.counts == {"blank_line": 2, "unknown_field": 2}
    assert any("conv.jsonl:1: blank line" in m for m in result.report.messages)
    assert any("conv.jsonl:4: turns[0].extra" in m for m in result.report.messages)
    report = LoadReport(source="mine")
    read_jsonl(path, report=report)
    assert report.counts["blank_line"] == 2


@pytest.mark.parametrize(
    "line, pattern",
    [
        (conv(HI, HI, {"text": "no speaker"}), r"conv\.jsonl:2: turns\[2\]\.speaker: missing speaker"),
        (conv(HI, {"speaker": "  ", "text": "x"}), r"conv\.jsonl:2: turns\[1\]\.speaker: missing speaker"),
        (conv(HI, {"speaker": "B", "text": " \n "}), r"conv\.jsonl:2: turns\[1\]\.text: empty text"),
        # only zero-width and byte-order-mark characters: nothing a tokenizer keeps
        (conv(HI, {"speaker": "B", "text": "\u200b\ufeff\u200d"}), r"conv\.jsonl:2: turns\[1\]\.text: empty text"),
        (conv(HI, {"speaker": "\u200b", "text": "x"}), r"conv\.jsonl:2: turns\[1\]\.speaker: missing speaker"),
        (conv(HI, {"speaker": "B"}), r"conv\.jsonl:2: turns\[1\]\.text: missing text"),
        (conv(HI, {"speaker": "B", "text": 3}), r"conv\.jsonl:2: turns\[1\]\.text: expected a string"),
        # what the line holds is named as JSON names it, not as Python does
        (conv(HI, {"speaker": "B", "text": None}), r"conv\.jsonl:2: turns\[1\]\.text: expected a string, got null$"),
        (conv(HI, {"speaker": "B", "text": {"a": 1}}), r"turns\[1\]\.text: expected a string, got an object$"),
        (json.dumps({"turns": "hi"}), r"conv\.jsonl:2: turns: expected a list of turns, got a string$"),
        (conv(HI, None), r"conv\.jsonl:2: turns\[1\]: expected an object with speaker and text, got null$"),
        (json.dumps(3.5), r"conv\.jsonl:2: expected a JSON object with 'turns', got a number$"),
        (json.dumps({"turns": []}), r"conv\.jsonl:2: turns: a conversation needs at least one turn"),
        (json.dumps({"id": "x"}), r"conv\.jsonl:2: turns: missing field"),
        (json.dumps([1, 2]), r"conv\.jsonl:2: expected a JSON object"),
        (conv(HI, id=7), r"conv\.jsonl:2: id: expected a string"),
        (conv(HI, id=" "), r"conv\.jsonl:2: id: empty \(' '\): name the conversation, or leave the id out"),
        (conv({**HI, "id": ""}), r"conv\.jsonl:2: turns\[0\]\.id: empty \(''\): name the turn"),
        (conv({**HI, "labels": {"": "joy"}}), r"conv\.jsonl:2: turns\[0\]\.labels: label kind '': name what the label is of"),
        (conv(HI, meta=[1]), r"conv\.jsonl:2: meta: expected an object"),
        (conv({**HI, "labels": {"emotion": 1}}), r"conv\.jsonl:2: turns\[0\]\.labels\.emotion: expected a non-empty string"),
        (conv({**HI, "labels": ["joy"]}), r"conv\.jsonl:2: turns\[0\]\.labels: expected an object"),
        ('{"turns": [{"speaker": "A", "text": "Hi"}', r"conv\.jsonl:2: malformed JSON \(column \d+\): Expecting"),
        ("{bad json}", r"conv\.jsonl:2: malformed JSON \(column 2\): Expecting property name"),
        ('{"turns": [{"speaker": "A", "text": "x}]}', r"conv\.jsonl:2: malformed JSON \(column 37\): Unterminated string starting$"),
        ('{"turns": [{"speaker": "A", "text": "Hi", "text": "Bye"}]}',
         r"conv\.jsonl:2 \(column 51\): the key 'text' appears twice in one object \(a JSON reader would keep only the last\)"),
        ('{"turns": [{"speaker": ' + "9" * 5000 + ', "text": "Hi"}]}', r"conv\.jsonl:2: a number of 5000 digits is too long to read"),
    ],
)
def test_reader_errors_name_file_line_field(tmp_path, line, pattern):
    path = write_lines(tmp_path / "conv.jsonl", conv(HI), line, conv(HI))
    with pytest.raises(DialogueError, match=pattern) as info:
        read_jsonl(path)
    assert str(info.value).startswith(str(path))


def test_a_turn_of_invisible_characters_only_is_an_empty_utterance():
    """Zero-width spaces and joiners, byte-order marks and controls: the tokenizer keeps nothing of them. A lone
    combining mark is text: a file that holds one is read, and the commands say the model read nothing of it."""
    for text in ("\u200b", " \ufeff\u2060 ", "\x00\u200c"):
        with pytest.raises(DialogueError, match="empty utterance"):
            Turn("A", text)
    with pytest.raises(DialogueError, match="missing or empty speaker"):
        Turn("\u200b", "hi")
    assert Turn("A", "\u200bhi").text == "\u200bhi" and Turn("A", "\u00e9").text == "\u00e9"   # visible characters stay
    assert Turn("A", "\u0301").text == "\u0301" and Turn("A", "\u2764\ufe0f").text == "\u2764\ufe0f"


def test_a_gzip_compressed_file_is_read_whatever_its_name_and_a_truncated_one_is_named(tmp_path):
    import gzip

    plain = write_lines(tmp_path / "conv.jsonl", conv(HI), conv(HI, {"speaker": "B", "text": "yo"}))
    packed = tmp_path / "conv.data"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert [d.turns for d in read_jsonl(packed)] == [d.turns for d in read_jsonl(plain)]
    truncated = tmp_path / "cut.jsonl.gz"
    truncated.write_bytes(packed.read_bytes()[:20])
    with pytest.raises(DialogueError, match=r"cut\.jsonl\.gz: a gzip file that cannot be decompressed"):
        read_jsonl(truncated)


def test_a_file_compressed_twice_is_named_as_such(tmp_path):
    import gzip

    from turnformer.data._io import read_bytes

    plain = write_lines(tmp_path / "conv.jsonl", conv(HI))
    twice = tmp_path / "twice.jsonl.gz"
    twice.write_bytes(gzip.compress(gzip.compress(plain.read_bytes())))
    for read in (read_jsonl, read_bytes):  # line by line, and whole
        with pytest.raises(DialogueError, match=r"twice\.jsonl\.gz: compressed twice"):
            read(twice)


def test_null_labels_are_no_label_and_counted(tmp_path):
    path = write_lines(tmp_path / "conv.jsonl", conv({**HI, "labels": {"emotion": None, "act": "inform"}},
                                                     {"speaker": "B", "text": "Yo", "emotion": None}))
    result = read_jsonl(path, label_sets={"emotion": ["joy"]})
    assert [t.labels for t in result[0].turns] == [{"act": "inform"}, {}]
    assert result.report.counts == {"null_label": 2}
    assert any("conv.jsonl:1: turns[1].emotion: null" in m for m in result.report.messages)


def test_speakers_padded_with_spaces_or_invisible_characters_are_one_speaker_and_counted(tmp_path):
    """" Ann " and "Ann\u200b" were speakers other than "Ann" to every speaker mask, without a word."""
    path = write_lines(tmp_path / "conv.jsonl", conv({"speaker": "Ann", "text": "Hi"}, {"speaker": "Bob", "text": "Yo"},
                                                     {"speaker": " Ann ", "text": "Hey"}, {"speaker": "Ann\u200b", "text": "So"},
                                                     {"speaker": "Mary Ann", "text": "Hm"}))
    result = read_jsonl(path)
    assert [t.speaker for t in result[0].turns] == ["Ann", "Bob", "Ann", "Ann", "Mary Ann"]
    assert result[0].speaker_ids() == [0, 1, 0, 0, 2]
    assert result.report.counts == {"padded_speaker": 2}
    assert any("conv.jsonl:1: turns[2].speaker: ' Ann ' read as 'Ann'" in m for m in result.report.messages)


def test_labels_padded_with_spaces_are_the_label_and_counted_and_a_blank_label_is_refused(tmp_path):
    """" joy" was a class of its own beside "joy" (or an unknown label against a label set), without a word."""
    path = write_lines(tmp_path / "conv.jsonl", conv({"speaker": "A", "text": "Hi", "emotion": " joy"},
                                                     {"speaker": "B", "text": "Yo", "labels": {"emotion": "joy\u200b", "act": "inform"}},
                                                     {"speaker": "A", "text": "So", "emotion": "joy ", "labels": {"emotion": "joy"}}))
    result = read_jsonl(path, label_sets={"emotion": ["joy"]})
    assert [t.labels for t in result[0].turns] == [{"emotion": "joy"}, {"emotion": "joy", "act": "inform"}, {"emotion": "joy"}]
    assert result.report.counts == {"padded_label": 3}
    assert "conv.jsonl:1: turns[0].emotion: ' joy' read as 'joy'" in "\n".join(result.report.messages)
    for blank in ("  ", "\u200b"):
        path = write_lines(tmp_path / "blank.jsonl", conv({"speaker": "A", "text": "Hi", "labels": {"emotion": blank}}))
        with pytest.raises(DialogueError, match=r"blank.jsonl:1: turns\[0\].labels.emotion: expected a non-empty string label"):
            read_jsonl(path)
    for number, written in ((1, '"1"'), (2.5, '"2.5"')):  # a number says how to write it; true does not
        path = write_lines(tmp_path / "number.jsonl", conv({"speaker": "A", "text": "Hi", "emotion": number}))
        with pytest.raises(DialogueError, match=rf"got {number} \(a number: write it as a string, {written}\)$"):
            read_jsonl(path)
    path = write_lines(tmp_path / "bool.jsonl", conv({"speaker": "A", "text": "Hi", "emotion": True}))
    with pytest.raises(DialogueError, match=r"got true$"):
        read_jsonl(path)


def test_a_label_kind_is_read_as_a_label_is_and_one_written_two_ways_is_refused(tmp_path):
    """A kind "Emotion" on two lines of a file of "emotion" made those turns unlabelled context, without a word."""
    padded = write_lines(tmp_path / "padded.jsonl", conv({"speaker": "A", "text": "Hi", "labels": {" emotion\u200b": "joy"}}))
    result = read_jsonl(padded, label_sets={"emotion": ["joy"]})
    assert result[0].turns[0].labels == {"emotion": "joy"} and result.report.counts == {"padded_label": 1}
    assert "padded.jsonl:1: turns[0].labels: label kind ' emotion\\u200b' read as 'emotion'" in "\n".join(result.report.messages)
    twice = write_lines(tmp_path / "twice.jsonl", conv({"speaker": "A", "text": "Hi", "labels": {"Emotion": "joy"}}),
                        conv({"speaker": "A", "text": "Hi", "emotion": "joy"}))
    with pytest.raises(DialogueError, match="twice.jsonl:2: label kind 'emotion' is written 'Emotion' on line 1; label kinds "
                                            "are compared as written: write one spelling throughout"):
        read_jsonl(twice)
    consistent = write_lines(tmp_path / "consistent.jsonl", *[conv({"speaker": "A", "text": "Hi", "labels": {"Emotion": "joy"}})] * 2)
    assert [d.turns[0].labels for d in read_jsonl(consistent)] == [{"Emotion": "joy"}] * 2  # one spelling: its own kind
    with pytest.raises(DialogueError, match=r"consistent.jsonl:1: turns\[0\].labels.Emotion: label kind 'Emotion' is 'emotion' "
                                            "written otherwise; label kinds are compared as written: write 'emotion'"):
        read_jsonl(consistent, label_sets={"emotion": ["joy"]})  # against the kind a model was trained on
    both = write_lines(tmp_path / "both.jsonl", conv({"speaker": "A", "text": "Hi", "labels": {"emotion ": "joy", "emotion": "joy"}}))
    with pytest.raises(DialogueError, match=r"both.jsonl:1: turns\[0\].labels: label kind 'emotion' named twice"):
        read_jsonl(both)
    assert Turn("A", "hi", labels={" act ": "inform"}).labels == {"act": "inform"}
    with pytest.raises(DialogueError, match="two label kinds differ only by spaces at their ends"):
        Turn("A", "hi", labels={" act": "inform", "act": "question"})


def test_a_speaker_written_with_combining_marks_is_the_same_speaker_and_counted(tmp_path):
    """"José" with a combining accent (NFD) and "José" (NFC) look the same: they were two speakers to every mask."""
    import unicodedata

    decomposed = unicodedata.normalize("NFD", "José")
    path = write_lines(tmp_path / "conv.jsonl", conv({"speaker": "José", "text": "Hi"}, {"speaker": "Ana", "text": "Yo"},
                                                     {"speaker": decomposed, "text": "Hey"}))
    result = read_jsonl(path)
    assert result[0].speaker_ids() == [0, 1, 0] and result[0].turns[2].speaker == "José"
    assert result.report.counts == {"decomposed_speaker": 1}
    assert Turn(decomposed, "hi").speaker == "José"
    from turnformer.tasks.generation import replier

    assert replier(result[0], decomposed) == "José"


def test_a_label_written_with_combining_marks_is_the_same_label_and_counted(tmp_path):
    """"alegría" with a combining accent and "alegría" were two classes that print alike, and a model trained on one
    called the other an unknown label it then listed as allowed."""
    import unicodedata

    composed, decomposed = "alegría", unicodedata.normalize("NFD", "alegría")
    assert composed != decomposed
    path = write_lines(tmp_path / "conv.jsonl", conv({"speaker": "A", "text": "Hi", "labels": {"emotion": composed}},
                                                     {"speaker": "B", "text": "Yo", "emotion": decomposed},
                                                     {"speaker": "A", "text": "Hey", "labels": {"émotion": "x"}},
                                                     {"speaker": "B", "text": "Ho",
                                                      "labels": {unicodedata.normalize("NFD", "émotion"): "y"}}))
    result = read_jsonl(path)
    assert [t.labels for t in result[0].turns] == [{"emotion": composed}, {"emotion": composed}, {"émotion": "x"},
                                                   {"émotion": "y"}]
    assert result.report.counts == {"decomposed_label": 2}
    assert read_jsonl(path, label_sets={"emotion": [composed]})[0].turns[1].labels == {"emotion": composed}


def test_integer_speaker_ids_are_read_as_strings_and_counted(tmp_path):
    path = write_lines(tmp_path / "conv.jsonl", conv({"speaker": 7, "text": "Hi"}, {"speaker": 0, "text": "Yo"}))
    (d,) = read_jsonl(path)
    assert [t.speaker for t in d.turns] == ["7", "0"]
    assert read_jsonl(path).report.counts == {"integer_speaker": 2}
    for bad, message in ((True, "expected a non-empty string \\(or an integer id\\), got true$"), (1.5, ".*got 1.5"),
                         (False, ".*got false$"), ([1], r".*got \[1\]$"),
                         ("", "missing speaker")):
        write_lines(path, conv({"speaker": bad, "text": "Hi"}))
        with pytest.raises(DialogueError, match=r"conv\.jsonl:1: turns\[0\]\.speaker: " + message):
            read_jsonl(path)


def test_two_conversations_with_one_id_are_refused_by_reader_and_writer(tmp_path):
    path = write_lines(tmp_path / "conv.jsonl", conv(HI, id="a"), conv(HI, id="b"), "", conv(HI, id="a"), conv(HI), conv(HI))
    with pytest.raises(DialogueError, match=r"conv\.jsonl:4: id: 'a' is already the id of the conversation on line 1"):
        read_jsonl(path)
    one = Dialogue(turns=(Turn("A", "Hi"),), id="a")
    with pytest.raises(DialogueError, match=r"dialogue 2: id 'a' is already the id of dialogue 0"):
        write_jsonl([one, Dialogue(turns=(Turn("A", "Hi"),)), one], tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()
    assert write_jsonl([Dialogue(turns=(Turn("A", "Hi"),))] * 2, tmp_path / "out.jsonl") == 2   # no id: no clash


def test_a_conversation_whose_turns_share_an_id_is_not_written(tmp_path):
    """The reader refuses two turns with one id (the round-trip property found it): the writer writes no such file."""
    clash = Dialogue(turns=(Turn("A", "Hi", id="u1"), Turn("B", "Hey", id="u1")), id="d")
    with pytest.raises(DialogueError, match=r"dialogue 1 \('d'\): turns\[1\]\.id 'u1' is already the id of turns\[0\]"):
        write_jsonl([Dialogue(turns=(Turn("A", "Hi"),)), clash], tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()
    fine = Dialogue(turns=(Turn("A", "Hi", id="u1"), Turn("B", "Hey", id="u2"), Turn("A", "Bye")), id="d")
    assert write_jsonl([fine], tmp_path / "out.jsonl") == 1 and read_jsonl(tmp_path / "out.jsonl")[0] == fine


def test_a_label_kind_in_other_capitals_is_not_written(tmp_path):
    """The reader refuses a label kind written in two spellings (its turns would be read as unlabelled by a model of
    the other): the writers write no such file, in two conversations or in one turn, and write one spelling."""
    from turnformer.data.table import write_table

    first, other = (Dialogue(turns=(Turn("A", "x", {kind: "joy"}),), id=name) for kind, name in (("Emotion", "a"), ("emotion", "b")))
    both = Dialogue(turns=(Turn("A", "x", {"act": "inform", "ACT": "question"}),), id="c")
    for write, name in ((write_jsonl, "out.jsonl"), (write_table, "out.csv")):
        with pytest.raises(DialogueError, match=r"dialogue 1 \('b'\): turns\[0\]: label kind 'emotion' is written 'Emotion' "
                                                r"in dialogue 0"):
            write([first, other], tmp_path / name)
        with pytest.raises(DialogueError, match=r"dialogue 0 \('c'\): turns\[0\]: label kind 'ACT' is written 'act'"):
            write([both], tmp_path / name)
        assert not (tmp_path / name).exists()
    assert write_jsonl([first, first.__class__(turns=first.turns, id="d")], tmp_path / "out.jsonl") == 2
    assert [d.turns[0].labels for d in read_jsonl(tmp_path / "out.jsonl")] == [{"Emotion": "joy"}] * 2


def test_a_turns_labels_cannot_be_changed_and_a_turn_is_hashed_by_value():
    """Labels are checked when a turn is made: changed afterwards they would be written unchecked (and refused by the
    reader); a turn is a value, hashed as such, pickled and copied whole."""
    import copy
    import dataclasses
    import pickle

    turn = Turn("A", "x", {"emotion": "joy"})
    for change in (lambda l: l.__setitem__("emotion", 5), lambda l: l.update(act="x"), lambda l: l.pop("emotion"),
                   lambda l: l.clear(), lambda l: l.setdefault("act", "x"), lambda l: l.__delitem__("emotion")):
        with pytest.raises(TypeError, match="a turn's labels cannot be changed"):
            change(turn.labels)
    assert turn.labels == {"emotion": "joy"} and json.dumps(turn.labels) == '{"emotion": "joy"}'
    assert hash(turn) == hash(Turn("A ", "x", {"emotion": " joy"})) and len({turn, Turn("A", "x", {"emotion": "joy"})}) == 1
    assert turn not in {Turn("A", "x", {"emotion": "sad"}), Turn("A", "x")}
    assert pickle.loads(pickle.dumps(turn)) == turn == copy.deepcopy(turn)
    assert dataclasses.replace(turn, labels={"emotion": "sad "}).labels == {"emotion": "sad"}


def test_unknown_label_names_allowed_set(tmp_path):
    sets = {"emotion": ["joy", "sad", "neutral"]}
    path = write_lines(tmp_path / "conv.jsonl", conv({**HI, "labels": {"emotion": "joy", "act": "anything"}}),
                       conv(HI, {"speaker": "B", "text": "x", "emotion": "angry"}))
    with pytest.raises(DialogueError, match=r"conv\.jsonl:2: turns\[1\]\.emotion: unknown label 'angry'; allowed: joy, sad, neutral"):
        read_jsonl(path, label_sets=sets)
    path = write_lines(tmp_path / "conv.jsonl", conv({**HI, "labels": {"emotion": "happy"}}))
    with pytest.raises(DialogueError, match=r"conv\.jsonl:1: turns\[0\]\.labels\.emotion: unknown label 'happy'"):
        read_jsonl(path, label_sets=sets)
    assert len(read_jsonl(path)) == 1  # without label sets any label is accepted


def test_undecodable_bytes_name_line(tmp_path):
    path = write_lines(tmp_path / "conv.jsonl", conv(HI), conv(HI), b'{"turns": [{"speaker": "A", "text": "H\xff\xfei"}]}')
    with pytest.raises(DialogueError, match=r"conv\.jsonl:3: undecodable bytes b'\\xff' at column \d+"):
        read_jsonl(path)


def test_crlf_bom_and_unicode_line_separators(tmp_path):
    path = tmp_path / "conv.jsonl"
    text = "a\u2028b\u0085c\x0cd"
    path.write_bytes(b"\xef\xbb\xbf" + conv({"speaker": "A", "text": text}).encode("utf-8") + b"\r\n" + conv(HI).encode() + b"\r\n")
    result = read_jsonl(path)
    assert [d[0].text for d in result] == [text, "Hi"]
    assert result.report.counts == {"bom_removed": 1}


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothere.jsonl"):
        read_jsonl(tmp_path / "nothere.jsonl")


def test_writer_is_atomic(tmp_path):
    path = tmp_path / "out.jsonl"
    write_jsonl([Dialogue.from_turns([("A", "one")])], path)
    before = path.read_bytes()
    bad = Dialogue(turns=(Turn("A", "x"),), meta={"f": float("nan")})
    with pytest.raises(DialogueError, match="cannot be written as JSON"):
        write_jsonl([Dialogue.from_turns([("A", "two")]), bad], path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]  # no temporary file left behind


def test_writer_goes_through_links_pipes_and_dash_without_replacing_them(tmp_path, capsys):
    import threading

    one = [Dialogue.from_turns([("A", "one")], id="c1")]
    target = tmp_path / "real.jsonl"
    link = tmp_path / "link.jsonl"
    link.symlink_to(target.name)
    write_jsonl(one, link)  # renaming a temporary file over the link would put a file in its place
    assert link.is_symlink() and read_jsonl(target) == one
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    write_jsonl(one, fifo)
    reader.join(timeout=10)
    assert fifo.is_fifo() and received == [target.read_bytes()]
    capsys.readouterr()
    write_jsonl(one, "-")  # standard output
    assert capsys.readouterr().out.encode() == target.read_bytes() and not Path("-").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.jsonl", "pipe", "real.jsonl"]


def test_writer_response_selection_items(tmp_path):
    ctx = Dialogue.from_turns([("m", "hello ."), ("f", "hi .")], id="dev_1")
    item = ResponseSelectionItem(context=ctx, candidates=(Turn("m", "a"), Turn("m", "b")), answer=1, id="dev_1")
    write_jsonl([item], tmp_path / "rs.jsonl")
    (d,) = read_jsonl(tmp_path / "rs.jsonl")
    assert d.turns == ctx.turns and d.meta == {"candidates": [{"speaker": "m", "text": "a"}, {"speaker": "m", "text": "b"}], "answer": 1}


def test_items_labelled_per_candidate_keep_their_labels_through_jsonl(tmp_path):
    """A tab-separated file's item (two right candidates, no single answer) is written with meta.relevance and read back
    whole: its labels were lost before, the item read back as one with a hidden answer."""
    from turnformer.data.selection_tsv import read_selection_tsv
    from turnformer.tasks.response_selection import read_selection_file

    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("1\thello there\thi !\n1\thello there\they\n0\thello there\tgo away\n")
    write_jsonl(read_selection_tsv(tsv), tmp_path / "items.jsonl")
    (item,) = read_selection_file(tmp_path / "items.jsonl")
    assert item.gold() == (1, 1, 0) and item.relevance == (1, 1, 0) and item.answer is None
    bad = write_lines(tmp_path / "bad.jsonl", conv(HI, meta={"candidates": [{"text": "a"}, {"text": "b"}], "relevance": [1, 2]}))
    with pytest.raises(DialogueError, match=r"bad.jsonl:1: meta.relevance: expected one 0 or 1 per candidate \(2\)"):
        read_selection_file(bad)


# ----------------------------------------------------------------------------------- round trip
_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30).filter(lambda s: not is_blank(s))
_json_scalar = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False) | _text
_json = st.recursive(_json_scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)
_turn = st.builds(
    Turn,
    speaker=_text,
    text=_text,
    labels=st.dictionaries(st.sampled_from(["emotion", "act", "sentiment", "topic"]), _text, max_size=3),
    id=st.none() | _text,
)
_dialogue = st.builds(
    Dialogue,
    turns=st.lists(_turn, min_size=1, max_size=5, unique_by=lambda t: t.id if t.id is not None else id(t)).map(tuple),
    id=st.none() | _text,
    meta=st.dictionaries(st.text(max_size=8), _json, max_size=3),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_dialogue, max_size=6, unique_by=lambda d: d.id if d.id is not None else id(d)))
def test_write_read_round_trip(dialogues):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "round.jsonl"
        assert write_jsonl(dialogues, path) == len(dialogues)
        raw = path.read_bytes()
        raw.decode("utf-8")  # valid UTF-8
        assert raw.count(b"\n") == len(dialogues)
        back = read_jsonl(path)
        assert list(back) == dialogues
        assert not back.report
        write_jsonl(back, path)  # and writing what was read gives the same bytes
        assert path.read_bytes() == raw
        assert os.listdir(tmp) == ["round.jsonl"]


# ----------------------------------------------------------------------------------- turnformer data stats FILE
def test_data_stats_counts_conversation_files_as_splits(tmp_path):
    from typer.testing import CliRunner

    from turnformer.cli import app

    train = write_lines(tmp_path / "train.jsonl", conv({**HI, "emotion": "joy"}, {"speaker": 2, "text": "Yo", "emotion": "sad"}),
                        "", conv({**HI, "emotion": "joy"}))
    test = write_lines(tmp_path / "test.jsonl", conv(HI, {"speaker": "B", "text": "Yo", "emotion": "sad"}))
    result = CliRunner().invoke(app, ["data", "stats", str(train), str(test), "--json"])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout)
    assert stats["splits"]["train"] == {"dialogues": 2, "utterances": 3, "label_kind": "emotion", "labels": {"joy": 2, "sad": 1},
                                        "report": {"blank_line": 1, "integer_speaker": 1}}
    assert stats["splits"]["test"]["labels"] == {"sad": 1}
    assert stats["splits"]["test"]["unlabelled"] == {"emotion": 1} and "unlabelled" not in stats["splits"]["train"]
    table = CliRunner().invoke(app, ["data", "stats", str(train)])
    assert table.exit_code == 0 and "blank_line: 1" in table.output and "joy" in table.output
    # a label that happens to be named "unlabelled" is a label like any other
    (tmp_path / "other").mkdir()
    odd = write_lines(tmp_path / "other" / "odd.jsonl", conv({**HI, "emotion": "unlabelled"}, {"speaker": "B", "text": "Yo"}))
    odd_stats = json.loads(CliRunner().invoke(app, ["data", "stats", str(odd), "--json"]).output)["splits"]["odd"]
    assert odd_stats["labels"] == {"unlabelled": 1} and odd_stats["unlabelled"] == {"emotion": 1}
    assert "(no label)" in CliRunner().invoke(app, ["data", "stats", str(odd), str(test)]).output
    bad = write_lines(tmp_path / "bad.jsonl", conv(HI), "{oops")
    result = CliRunner().invoke(app, ["data", "stats", str(bad)])
    assert result.exit_code == 2 and "bad.jsonl:2: malformed JSON" in result.output
    result = CliRunner().invoke(app, ["data", "stats", str(train), str(tmp_path / "sub" / "train.jsonl")])
    assert result.exit_code == 2 and "two files are named 'train'" in result.output
    result = CliRunner().invoke(app, ["data", "stats", str(train), str(tmp_path / "dev.jsonl")])
    assert result.exit_code == 2 and "dev.jsonl: file not found" in result.output
    deep = write_lines(tmp_path / "deep.jsonl", "[" * 100_000 + "]" * 100_000)
    result = CliRunner().invoke(app, ["data", "stats", str(deep)])
    assert result.exit_code == 2 and "deep.jsonl:1: JSON nested too deeply" in result.output
    for path in (bad, deep):
        path.unlink()
    folder = CliRunner().invoke(app, ["data", "stats", str(tmp_path), "--json"])  # a folder: its .jsonl files
    assert folder.exit_code == 0, folder.output
    assert json.loads(folder.stdout)["splits"] == stats["splits"]
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(app, ["data", "stats", str(tmp_path / "empty")])
    assert result.exit_code == 2 and "a folder with no conversation files (.jsonl, .jsonl.gz, .csv" in result.output


def test_data_stats_files_share_one_label_kind_and_gzip_files_are_splits(tmp_path):
    """Files read together count the same primary label kind (the first any of them carries), whatever the key order
    in each; a gzip-compressed file is a split named without .jsonl.gz, and a folder of them is read."""
    import gzip

    from typer.testing import CliRunner

    from turnformer.cli import app

    write_lines(tmp_path / "a.jsonl", conv({**HI, "labels": {"emotion": "joy", "act": "inform"}}))
    write_lines(tmp_path / "b.jsonl", conv({**HI, "labels": {"act": "question", "emotion": "sadness"}}))
    (tmp_path / "c.JSONL.gz").write_bytes(gzip.compress((conv({**HI, "labels": {"act": "question"}}) + "\n").encode()))
    (tmp_path / "notes.txt").write_text("not a conversation file")
    result = CliRunner().invoke(app, ["data", "stats", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    splits = json.loads(result.stdout)["splits"]
    assert list(splits) == ["a", "b", "c"] and {s["label_kind"] for s in splits.values()} == {"emotion"}
    assert (splits["a"]["labels"], splits["b"]["labels"], splits["c"]["labels"]) == ({"joy": 1}, {"sadness": 1}, {})
    assert splits["c"]["unlabelled"] == {"emotion": 1} and splits["b"]["other_labels"] == {"act": {"question": 1}}


def test_data_stats_prints_labels_and_names_as_written(tmp_path):
    """Square brackets in a label or a file name are text, not rich style tags: "[joy]" stays, "[/]" does not crash."""
    from typer.testing import CliRunner

    from turnformer.cli import app

    odd = write_lines(tmp_path / "[red]odd.jsonl", conv({**HI, "emotion": "[joy]"}, {"speaker": "B", "text": "x", "emotion": "[/]"}))
    result = CliRunner().invoke(app, ["data", "stats", str(odd)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "[joy]" in result.output and "[/]" in result.output and "[red]odd" in result.output


def test_turns_in_every_form_and_what_is_refused(tmp_path):
    from turnformer.dialogue import as_turn

    pairs = [("A", "hi"), ("B", "ok")]
    expected = Dialogue.from_turns(pairs)
    assert Dialogue.from_turns([{"speaker": "A", "text": "hi"}, Turn("B", "ok")]) == expected
    assert as_turn("yes", "candidates[0]", default_speaker="B") == Turn("B", "yes")
    # a mapping is read as a turn of the file format is: its labels, convenience label fields and id, nothing else
    assert as_turn({"speaker": "A", "text": "hi", "emotion": "joy", "labels": {"act": "inform"}, "id": "t1"}, "turns[0]") == \
        Turn("A", "hi", labels={"emotion": "joy", "act": "inform"}, id="t1")
    for bad, message in (({"speaker": "A", "text": "hi", "lables": {"emotion": "joy"}}, r"turns\[0\]: unknown field 'lables'"),
                         ({"speaker": "A", "text": "hi", "labels": []}, r"turns\[0\]: labels: expected a mapping"),
                         ({"speaker": "A", "text": "hi", "labels": {"emotion": "joy"}, "emotion": "anger"},
                          r"turns\[0\]: emotion: 'anger' disagrees with labels.emotion = 'joy'")):
        with pytest.raises(DialogueError, match=message):
            as_turn(bad, "turns[0]")
    # constructors named what is wrong, not a TypeError from inside
    context, candidate = Dialogue.from_turns(pairs), Turn("B", "fine")
    for build, message in ((lambda: Dialogue(turns=None), "dialogue: turns: expected a sequence of Turns, got NoneType"),
                           (lambda: Dialogue([candidate], meta="xy"), "dialogue: meta: expected a mapping"),
                           (lambda: ResponseSelectionItem(pairs, [candidate]), "item: context: expected a Dialogue, got list"),
                           (lambda: ResponseSelectionItem(context, "xyz"), "item: candidates: expected a sequence of Turns"),
                           (lambda: ResponseSelectionItem(context, ["fine"]), r"item: candidates\[0\] is a str, not a Turn"),
                           (lambda: ResponseSelectionItem(context, [candidate], answer="0"), "answer: expected a candidate's index"),
                           (lambda: ResponseSelectionItem(context, [candidate], answer=True), "answer: expected a candidate's index"),
                           (lambda: ResponseSelectionItem(context, [candidate], relevance=(1.0,)), "relevance must be one 0/1")):
        with pytest.raises(DialogueError, match=message):
            build()
    for bad, message in ((["hi", "ok"], r"turns\[0\]: expected a \(speaker, text\) pair"),
                         ([("A", "hi", "x")], r"turns\[0\]: expected"), ("hi", "expected a list of turns, got str"),
                         ([("A", "hi"), ("B", None)], r"turns\[1\]: text: text must be a string")):
        with pytest.raises(DialogueError, match=message):
            Dialogue.from_turns(bad)
    surrogate = write_lines(tmp_path / "s.jsonl", '{"turns": [{"speaker": "A", "text": "a\\ud800b"}]}')
    with pytest.raises(DialogueError, match=r"s.jsonl:1: turns\[0\].text: not valid Unicode"):
        read_jsonl(surrogate)
    # the same in a speaker, a label (its kind too), a turn's or a conversation's id: named where it is, not failing later
    for field, line in ((r"turns\[0\].speaker", '{"turns": [{"speaker": "\\udc80", "text": "x"}]}'),
                        (r"turns\[0\].labels.emotion", '{"turns": [{"speaker": "A", "text": "x", "labels": {"emotion": "\\ud800"}}]}'),
                        (r"turns\[0\].labels", '{"turns": [{"speaker": "A", "text": "x", "labels": {"\\ud800": "joy"}}]}'),
                        (r"turns\[0\].emotion", '{"turns": [{"speaker": "A", "text": "x", "emotion": "\\ud800x"}]}'),
                        (r"turns\[0\].id", '{"turns": [{"speaker": "A", "text": "x", "id": "\\ud800"}]}'),
                        (r"id", '{"id": "\\ud800", "turns": [{"speaker": "A", "text": "x"}]}')):
        with pytest.raises(DialogueError, match=rf"s.jsonl:1: {field}: not valid Unicode"):
            read_jsonl(write_lines(tmp_path / "s.jsonl", line))
    with pytest.raises(DialogueError, match="speaker: not valid Unicode"):
        Turn("\udc80", "hi")
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps([{"turns": [{"speaker": "A", "text": "hi"}]}], indent=2))
    with pytest.raises(DialogueError, match="pretty.json:1: malformed JSON .* write one conversation per line"):
        read_jsonl(pretty)
    # an array of conversations on one line, or broken over lines after its first: the same hint, not a type name
    array = [{"turns": [{"speaker": "A", "text": "hi"}]}, {"turns": [{"speaker": "B", "text": "yo"}]}]
    one_line = write_lines(tmp_path / "one.json", json.dumps(array))
    split_lines = write_lines(tmp_path / "split.json", json.dumps(array)[:-1] + ",", json.dumps(array[0]) + "]")
    for path in (one_line, split_lines):
        with pytest.raises(DialogueError, match=r"\.json:1: .*write one conversation per line .*jq -c"):
            read_jsonl(path)
    later = write_lines(tmp_path / "later.jsonl", json.dumps(array[0]), json.dumps(array))
    with pytest.raises(DialogueError, match=r"later\.jsonl:2: expected a JSON object with 'turns', got a JSON array \(one conversation per line\)$"):
        read_jsonl(later)
    with pytest.raises(TypeError, match="expected a list of label names, got str"):
        read_jsonl(surrogate, label_sets={"emotion": "joy"})


def test_duplicate_turn_ids_nan_and_tables_are_named(tmp_path):
    import pytest

    from turnformer.data import read_jsonl
    from turnformer.dialogue import DialogueError

    dup = tmp_path / "dup.jsonl"
    dup.write_text('{"turns": [{"speaker": "A", "text": "hi", "id": "t1"}, {"speaker": "B", "text": "yo", "id": "t1"}]}\n')
    with pytest.raises(DialogueError, match=r"dup.jsonl:1: turns\[1\]\.id: 't1' is already the id of turns\[0\]"):
        read_jsonl(dup)
    nan = tmp_path / "nan.jsonl"
    nan.write_text('{"turns": [{"speaker": "A", "text": "hi"}]}\n{"turns": [{"speaker": "A", "text": "hi"}], "meta": {"score": NaN}}\n')
    with pytest.raises(DialogueError, match=r"nan.jsonl:2: NaN is not a JSON value"):
        read_jsonl(nan)
    table = tmp_path / "table.jsonl"
    table.write_text("speaker,text,emotion\nA,hi,joy\n")
    with pytest.raises(DialogueError, match=r"table.jsonl:1: malformed JSON.*looks like a table \(CSV or tab-separated\)"):
        read_jsonl(table)


def test_meta_the_writer_could_not_write_back_utf16_and_a_gzip_cut_in_its_first_line_are_named(tmp_path):
    """A lone surrogate or 1e999 in meta was read, then refused by the writer as "text"; a UTF-16 file without a BOM
    and a file of NUL bytes were "malformed JSON" (or "a table"); a gzip cut in its first line was cut "after line 0"."""
    import gzip

    for meta, message in (('{"\\ud800": 1}', "meta: not valid Unicode"), ('{"a": 1e999}', "meta: a number too large for JSON")):
        path = write_lines(tmp_path / "meta.jsonl", '{"turns": [{"speaker": "A", "text": "x"}], "meta": ' + meta + "}")
        with pytest.raises(DialogueError, match=f"meta.jsonl:1: {message}"):
            read_jsonl(path)
    for content in ('{"turns": [{"speaker": "A", "text": "x"}]}\n'.encode("utf-16-le"), b"\x00\x00,\x00\n"):
        (tmp_path / "wide.jsonl").write_bytes(content)
        with pytest.raises(DialogueError, match="wide.jsonl:1: malformed JSON .*the line holds NUL bytes: the file looks like "
                                                "UTF-16 or binary, not UTF-8 text"):
            read_jsonl(tmp_path / "wide.jsonl")
    (tmp_path / "wide.jsonl").write_bytes('{"turns": [{"speaker": "A", "text": "x"}]}\n'.encode("utf-16"))  # with its BOM
    with pytest.raises(DialogueError, match="wide.jsonl:1: undecodable bytes .* the file is UTF-16 .*: save it as UTF-8"):
        read_jsonl(tmp_path / "wide.jsonl")
    (tmp_path / "cut.jsonl.gz").write_bytes(gzip.compress(b'{"turns": [{"speaker": "A", "text": "x"}]}\n' * 50)[:20])
    with pytest.raises(DialogueError, match="cut.jsonl.gz: a gzip file that cannot be decompressed in its first line"):
        read_jsonl(tmp_path / "cut.jsonl.gz")
    with pytest.raises(DialogueError, match=r"dialogue 0 \(None\): its meta is not valid Unicode"):
        write_jsonl([Dialogue((Turn("A", "x"),), meta={"\ud800": 1})], tmp_path / "out.jsonl")
