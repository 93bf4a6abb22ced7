"""Loaders on small broken files: every error names the file and the line or field at fault."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from turnformer.data import DataNotFoundError, dataset_dir, load_split, normalize_split, resolve_data_dir
from turnformer.data.cli import data_app
from turnformer.dialogue import DialogueError

MELD_HEADER = "Sr No.,Utterance,Speaker,Emotion,Sentiment,Dialogue_ID,Utterance_ID,Season,Episode,StartTime,EndTime\n"


def _meld_row(sr, text, speaker="Ross", emotion="joy", sentiment="positive", did=0, uid=0):
    return f'{sr},{text},{speaker},{emotion},{sentiment},{did},{uid},1,1,"00:00:01,000","00:00:02,000"\n'


def write_meld(root: Path, body: str | bytes, split: str = "train") -> Path:
    folder = root / "meld"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{split}_sent_emo.csv"
    data = body if isinstance(body, bytes) else body.encode("utf-8")
    path.write_bytes(data)
    return path


def write_dailydialog(root: Path, text: str | bytes, emotion: str, act: str, split: str = "train") -> Path:
    folder = root / "dailydialog" / split
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"dialogues_{split}.txt").write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    (folder / f"dialogues_emotion_{split}.txt").write_text(emotion, encoding="utf-8")
    (folder / f"dialogues_act_{split}.txt").write_text(act, encoding="utf-8")
    return folder / f"dialogues_{split}.txt"


# ------------------------------------------------------------------------------------ locating data
def test_resolve_data_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("TURNFORMER_DATA", str(tmp_path / "env"))
    assert resolve_data_dir(tmp_path / "arg") == tmp_path / "arg"
    assert resolve_data_dir(None) == tmp_path / "env"
    monkeypatch.delenv("TURNFORMER_DATA")
    assert resolve_data_dir(None) == Path("~/.cache/turnformer/data").expanduser()


def test_missing_dataset_says_how_to_get_it(tmp_path):
    with pytest.raises(DataNotFoundError) as info:
        dataset_dir("meld", tmp_path)
    msg = str(info.value)
    assert str(tmp_path / "meld") in msg and "--data-dir" in msg and "TURNFORMER_DATA" in msg
    assert "turnformer data download meld" in msg
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, DialogueError)


def test_unknown_dataset_and_split(tmp_path):
    with pytest.raises(DialogueError, match="unknown dataset 'nope'.*dailydialog"):
        load_split("nope", "train", tmp_path)
    with pytest.raises(DialogueError, match="unknown split 'dvv'"):
        load_split("meld", "dvv", tmp_path)
    assert [normalize_split(s) for s in ("dev", "val", "VALID", "validation", "train", "test")] == [
        "validation", "validation", "validation", "validation", "train", "test"]


def test_cli_errors_exit_2_without_traceback(tmp_path):
    runner = CliRunner()
    for args in (["stats", "meld", "--data-dir", str(tmp_path)], ["stats", "nope"],
                 ["convert", "meld", "--split", "bogus", "--out", str(tmp_path / "x.jsonl"), "--data-dir", str(tmp_path)]):
        result = runner.invoke(data_app, args)
        assert result.exit_code == 2, (args, result.output)
        assert result.output.startswith("error: ") and "Traceback" not in result.output
        assert len(result.output.strip().splitlines()) == 1
    write_meld(tmp_path, MELD_HEADER + _meld_row(1, "Hi", emotion="happy"))
    result = runner.invoke(data_app, ["stats", "meld", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2 and "happy" in result.output and "train_sent_emo.csv:2" in result.output


# ---------------------------------------------------------------------------------------------- MELD
def test_meld_small_file_groups_and_orders(tmp_path):
    body = (MELD_HEADER + _meld_row(1, "b", did=0, uid=1) + _meld_row(2, "a", did=0, uid=0)
            + _meld_row(3, '"x, “quoted”"', speaker="Joey", did=2, uid=0) + _meld_row(4, "y", did=2, uid=2))
    write_meld(tmp_path, body)
    ds = load_split("meld", "train", tmp_path)
    assert [[t.text for t in d] for d in ds] == [["a", "b"], ["x, “quoted”", "y"]]
    assert ds.report.counts == {"utterances_reordered": 1, "utterance_id_gap": 1}
    assert any("train_sent_emo.csv" in m and "Dialogue_ID 2" in m and "[1]" in m for m in ds.report.messages)


def test_meld_wrong_field_count(tmp_path):
    bad = '2,Hello,Ross,joy,positive,0,1,1,1,"00:00:01,000"\n'  # 10 fields
    path = write_meld(tmp_path, MELD_HEADER + _meld_row(1, "Hi") + bad)
    with pytest.raises(DialogueError, match=r"train_sent_emo\.csv:3: expected 11 fields.*got 10") as info:
        load_split("meld", "train", tmp_path)
    assert str(path) in str(info.value)


def test_meld_missing_column(tmp_path):
    header = MELD_HEADER.replace("Speaker,", "")
    write_meld(tmp_path, header + "1,Hi,joy,positive,0,0,1,1,a,b\n")
    with pytest.raises(DialogueError, match=r"train_sent_emo\.csv:1: header lacks column\(s\) Speaker"):
        load_split("meld", "train", tmp_path)


def test_meld_unterminated_quote(tmp_path):
    write_meld(tmp_path, MELD_HEADER + _meld_row(1, "Hi") + '2,"never closed,Ross,joy,positive,0,1,1,1,a,b\n')
    with pytest.raises(DialogueError, match=r"train_sent_emo\.csv:\d+: (malformed CSV|expected 11 fields)"):
        load_split("meld", "train", tmp_path)
    # the row a quote opened in is named, not the line the reader stopped at (the file's last)
    write_meld(tmp_path, MELD_HEADER + _meld_row(1, "Hi") + '2,"line one,Ross,joy,positive,0,1,1,1,a,b\n'
               + _meld_row(3, "Hey", uid=2) + _meld_row(4, "Yo", uid=3))
    with pytest.raises(DialogueError, match=r"train_sent_emo\.csv:4: malformed CSV in the row from line 3: "):
        load_split("meld", "train", tmp_path)  # the next row's quoted time closes the quote; a comma is not after it
    write_meld(tmp_path, MELD_HEADER + _meld_row(1, "Hi") + '2,"line one,Ross,joy,positive,0,1,1,1,a,b\n3,x\n4,y\n')
    with pytest.raises(DialogueError, match=r"train_sent_emo\.csv:5: malformed CSV in the row from line 3: .*a quote "
                                            r"opened there is not closed"):
        load_split("meld", "train", tmp_path)


def test_meld_unknown_label_empty_text_missing_speaker_bad_id(tmp_path):
    cases = [
        (_meld_row(2, "Hi", emotion="happy"), r"train_sent_emo\.csv:3: Emotion: unknown label 'happy'; allowed: neutral, surprise"),
        (_meld_row(2, " ", uid=1), r"train_sent_emo\.csv:3: Utterance: empty text"),
        (_meld_row(2, "Hi", speaker="", uid=1), r"train_sent_emo\.csv:3: Speaker: missing speaker"),
        (_meld_row(2, "Hi", uid="x"), r"train_sent_emo\.csv:3: Utterance_ID: expected an integer, got 'x'"),
        (_meld_row(2, "Hi", uid="1_0"), r"train_sent_emo\.csv:3: Utterance_ID: expected an integer, got '1_0'"),
        (_meld_row(2, "Hi", did="\u0663"), r"train_sent_emo\.csv:3: Dialogue_ID: expected an integer, got '\u0663'"),
        (_meld_row(2, "Hi", sentiment="meh", uid=1), r"train_sent_emo\.csv:3: Sentiment: unknown label 'meh'"),
    ]
    for row, pattern in cases:
        write_meld(tmp_path, MELD_HEADER + _meld_row(1, "Hello") + row)
        with pytest.raises(DialogueError, match=pattern):
            load_split("meld", "train", tmp_path)


def test_meld_undecodable_bytes(tmp_path):
    body = (MELD_HEADER + _meld_row(1, "Hello") + _meld_row(2, "Hi", uid=1)).encode("utf-8")
    body = body.replace(b",Hi,", b",H\xff\xfei,")
    write_meld(tmp_path, body)
    with pytest.raises(DialogueError, match=r"train_sent_emo\.csv:3: undecodable bytes b'\\xff' at column 4"):
        load_split("meld", "train", tmp_path)


def test_meld_mojibake_is_repaired_and_reported(tmp_path):
    write_meld(tmp_path, MELD_HEADER + _meld_row(1, "You\u00e2\u20ac\u2122re here"))
    ds = load_split("meld", "train", tmp_path)
    assert ds[0][0].text == "You’re here"
    assert ds.report.counts == {"mojibake_repaired": 1}
    assert "train_sent_emo.csv:2" in ds.report.messages[0]


# --------------------------------------------------------------------------------------- DailyDialog
def test_dailydialog_small_folder(tmp_path):
    write_dailydialog(tmp_path, "Hi . __eou__ Hello ! __eou__\nBye . __eou__\n", "0 4\n0\n", "2 1\n1\n")
    ds = load_split("dailydialog", "train", tmp_path)
    assert [[(t.speaker, t.text, t.labels) for t in d] for d in ds] == [
        [("A", "Hi .", {"emotion": "neutral", "act": "question"}), ("B", "Hello !", {"emotion": "happiness", "act": "inform"})],
        [("A", "Bye .", {"emotion": "neutral", "act": "inform"})],
    ]
    assert not ds.report


def test_dailydialog_a_line_cut_in_its_last_utterance_is_read_and_reported(tmp_path):
    write_dailydialog(tmp_path, "Hi . __eou__ Hello ! __eou__\nBye . __eou__ It is beyond my purs\n", "0 4\n0 0\n", "2 1\n1 1\n")
    ds = load_split("dailydialog", "train", tmp_path)
    assert ds[1].turns[-1].text == "It is beyond my purs" and ds.report.counts == {"missing_final_eou": 1}
    assert "dialogues_train.txt:2: the line does not end with __eou__" in ds.report.messages[0]


def test_dailydialog_label_count_mismatch_is_an_error(tmp_path):
    path = write_dailydialog(tmp_path, "Hi . __eou__ Hello ! __eou__\nA . __eou__ B . __eou__ C . __eou__\n", "0 0\n0 0\n", "1 1\n1 1\n")
    with pytest.raises(DialogueError, match=r"dialogues_train\.txt:2: 3 utterances but 2 labels in dialogues_emotion_train\.txt:2") as info:
        load_split("dailydialog", "train", tmp_path)
    assert str(path) in str(info.value)


def test_dailydialog_line_count_mismatch(tmp_path):
    write_dailydialog(tmp_path, "Hi . __eou__\nYo . __eou__\n", "0\n", "1\n1\n")
    with pytest.raises(DialogueError, match=r"dialogues_train\.txt: 2 lines, but dialogues_emotion_train\.txt has 1"):
        load_split("dailydialog", "train", tmp_path)


def test_dailydialog_unknown_label_and_empty_utterance(tmp_path):
    write_dailydialog(tmp_path, "Hi . __eou__\n", "9\n", "1\n")
    with pytest.raises(DialogueError, match=r"dialogues_emotion_train\.txt:1: emotion label #1: unknown label '9'; allowed: 0 \(neutral\)"):
        load_split("dailydialog", "train", tmp_path)
    write_dailydialog(tmp_path, "Hi . __eou__  __eou__ Yo __eou__\n", "0 0 0\n", "1 1 1\n")
    with pytest.raises(DialogueError, match=r"dialogues_train\.txt:1: utterance 2: empty text"):
        load_split("dailydialog", "train", tmp_path)


def test_dailydialog_undecodable_bytes(tmp_path):
    write_dailydialog(tmp_path, b"Hi . __eou__\nH\xff\xfei . __eou__\n", "0\n0\n", "1\n1\n")
    with pytest.raises(DialogueError, match=r"dialogues_train\.txt:2: undecodable bytes b'\\xff' at column 2"):
        load_split("dailydialog", "train", tmp_path)


# ------------------------------------------------------------------------------------------ EmoryNLP
def write_emory(root: Path, data, split="train") -> Path:
    folder = root / "emorynlp"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{split}_data.json"
    path.write_bytes(data if isinstance(data, bytes) else json.dumps(data, indent=1).encode("utf-8"))
    return path


def test_emorynlp_errors(tmp_path):
    good = {"text": "Hi", "speaker": "Ross Geller", "label": "Joyful"}
    write_emory(tmp_path, [[good, {"text": "Yo", "label": "Mad"}]])
    with pytest.raises(DialogueError, match=r"train_data\.json: scenes\[0\]\[1\]\.speaker: missing speaker"):
        load_split("emorynlp", "train", tmp_path)
    write_emory(tmp_path, [[good], [{"text": "Yo", "speaker": "Joey", "label": "Angry"}]])
    with pytest.raises(DialogueError, match=r"train_data\.json: scenes\[1\]\[0\]\.label: unknown label 'Angry'; allowed: Neutral, Joyful"):
        load_split("emorynlp", "train", tmp_path)
    write_emory(tmp_path, [[{"text": "  ", "speaker": "Joey", "label": "Mad"}]])
    with pytest.raises(DialogueError, match=r"train_data\.json: scenes\[0\]\[0\]\.text: empty text"):
        load_split("emorynlp", "train", tmp_path)
    write_emory(tmp_path, b'[[{"text": "Hi",\n  "speaker": "Ross" "label": "Mad"}]]')
    with pytest.raises(DialogueError, match=r"train_data\.json:2: malformed JSON \(column \d+\): Expecting ','"):
        load_split("emorynlp", "train", tmp_path)
    write_emory(tmp_path, b'[[{"text": "Hi",\n"speaker": "R\xff\xfe", "label": "Mad"}]]')
    with pytest.raises(DialogueError, match=r"train_data\.json:2: undecodable bytes"):
        load_split("emorynlp", "train", tmp_path)


def test_whole_json_files_are_read_as_conversation_lines_are_and_their_turns_errors_name_the_file(tmp_path):
    """EmoryNLP's and MuTual's JSON files kept the last of a key given twice, read NaN, ended in a RecursionError
    traceback when nested deeply, and a turn's own refusals (an id twice in a scene, text that is no valid Unicode)
    named neither the file nor the utterance (the duplicate id only when `data convert` wrote the file)."""
    good = {"text": "Hi", "speaker": "Ross Geller", "label": "Joyful"}
    cases = [
        (b'[[{"text": "a", "text": "b", "speaker": "Ross", "label": "Mad"}]]',
         r"train_data\.json:1 \(column 25\): the key 'text' appears twice in one object"),
        (b'[[{"text": "a", "speaker": "Ross", "label": "Mad"},\n  {"text": "b", "speaker": {"name": "R", "name": "S"}}]]',
         r"train_data\.json:2 \(column 50\): the key 'name' appears twice"),  # the second value, in a nested object
        (b'[[{"text": "a", "speaker": "Ross", "label": "Mad", "utterance_id": NaN}]]',
         r"train_data\.json:1 \(column 68\): NaN is not a JSON value"),  # where, though Python's reader says not
        (b"[" * 100_000 + b"]" * 100_000, r"train_data\.json: JSON nested too deeply to be read"),
        ([[{**good, "utterance_id": "s1_u1"}, {**good, "utterance_id": "s1_u1"}]],
         r"train_data\.json: scenes\[0\]\[1\]\.utterance_id: 's1_u1' is already the id of scenes\[0\]\[0\]$"),
        ([[{**good, "utterance_id": "s1_u1"}]] * 2,  # a scene written twice was read twice, without a word
         r"scenes\[1\]\[0\]\.utterance_id: 's1_u1' is already the id of scenes\[0\]\[0\] \(a scene written twice\?\)"),
        ([[{**good, "text": "a\ud800b"}]], r"train_data\.json: scenes\[0\]\[0\]\.text: not valid Unicode"),
    ]
    for data, message in cases:
        write_emory(tmp_path, data if isinstance(data, bytes) else json.dumps(data).encode())
        with pytest.raises(DialogueError, match=message):
            load_split("emorynlp", "train", tmp_path)
    write_mutual(tmp_path / "deep", {"dev_1.txt": b'{"article": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"})
    with pytest.raises(DialogueError, match=r"dev_1\.txt: JSON nested too deeply to be read"):
        load_split("mutual", "validation", tmp_path / "deep")


def test_emorynlp_speaker_list_joined_and_reported(tmp_path):
    scene = [{"transcript": "Hey", "speakers": ["Chandler Bing", "Joey Tribbiani"], "emotion": "Joyful"},
             {"transcript": "Hi", "speakers": ["Ross Geller"], "emotion": "Neutral"}]
    write_emory(tmp_path, [scene], split="dev")
    ds = load_split("emorynlp", "dev", tmp_path)
    assert [t.speaker for t in ds[0]] == ["Chandler Bing Joey Tribbiani", "Ross Geller"]
    assert ds.report.counts == {"speaker_list_joined": 1}
    assert "dev_data.json: scenes[0][0].speakers" in ds.report.messages[0]


# ---------------------------------------------------------------------------------------------- SwDA
def write_swda(root: Path, lines: bytes, convs=("2001",), labels: str | None = None) -> Path:
    folder = root / "swda"
    (folder / "train").mkdir(parents=True, exist_ok=True)
    (folder / "metadata").mkdir(parents=True, exist_ok=True)
    (folder / "metadata" / "train_split.txt").write_text("\n".join(convs), encoding="utf-8")
    if labels is not None:
        (folder / "metadata" / "labels.txt").write_text(labels, encoding="utf-8")
    path = folder / "train" / f"{convs[0]}.txt"
    path.write_bytes(lines)
    return path


def test_swda_without_a_split_list_reads_the_conversation_files_and_names_the_others(tmp_path):
    """A missing list: every *.txt was read, a backup copy ("2121 (copy).txt") as one more conversation, and a
    compressed conversation was neither read nor counted."""
    path = write_swda(tmp_path, b"A|Hi.|sd\n")
    (path.parent / "2002.txt").write_bytes(b"B|Yo.|b\n")
    (path.parent / "2002 (copy).txt").write_bytes(b"B|Yo.|b\n")
    (path.parent / "2003.txt.gz").write_bytes(b"")
    (tmp_path / "swda" / "metadata" / "train_split.txt").unlink()
    ds = load_split("swda", "train", tmp_path)
    assert [d.id for d in ds] == ["2001", "2002"]
    assert ds.report.counts == {"conversation_list_missing": 1, "other_file": 2}
    assert "read all 2 conversation files (NUMBER.txt) in train/" in ds.report.messages[0]
    assert "2002 (copy).txt: not a conversation's file (NUMBER.txt); not read" in " ".join(ds.report.messages)


def test_a_swda_split_list_naming_a_path_is_refused(tmp_path):
    """A split list's `../test/1` was read from the test split's folder into the training split (id '../test/1')."""
    write_swda(tmp_path, b"A|Okay.|sd\n", convs=("2001",))
    (tmp_path / "swda" / "test").mkdir()
    (tmp_path / "swda" / "test" / "1.txt").write_bytes(b"A|Hello.|sd\n")
    (tmp_path / "swda" / "metadata" / "train_split.txt").write_text("2001\n../test/1\n", encoding="utf-8")
    with pytest.raises(DialogueError, match=r"train_split\.txt:2: '\.\./test/1': a conversation's name, not a path"):
        load_split("swda", "train", tmp_path)


def test_swda_pipes_in_text_and_blank_lines(tmp_path):
    write_swda(tmp_path, b"A|Okay.|fo_o_fw_\"_by_bc\n\nB|a | b|sd\n")
    ds = load_split("swda", "train", tmp_path)
    assert [(t.speaker, t.text, t.label("act")) for t in ds[0]] == [("A", "Okay.", 'fo_o_fw_"_by_bc'), ("B", "a | b", "sd")]
    assert ds.report.counts == {"blank_line": 1}
    assert "swda/train/2001.txt:2" in ds.report.messages[0]


@pytest.mark.parametrize(
    "line, pattern",
    [
        (b"A|no tag", r"2001\.txt:2: expected Speaker\|Text\|tag"),
        (b"A||sd", r"2001\.txt:2: empty text"),
        ("A|\u200b|sd".encode(), r"2001\.txt:2: empty text"),
        (b"|Hello|sd", r"2001\.txt:2: missing speaker"),
        ("\u200b|Hello|sd".encode(), r"2001\.txt:2: missing speaker"),
        (b"1|A|Hello|sd", r"2001\.txt:2: speaker '1': SwDA's speakers are A and B"),
        (b"C|Hello|sd", r"2001\.txt:2: speaker 'C'"),
        (b"A|Hello|zz", r"2001\.txt:2: unknown label 'zz'; allowed: sd, b, sv"),
        (b"A|H\xff\xfeello|sd", r"2001\.txt:2: undecodable bytes b'\\xff' at column 4"),
    ],
)
def test_swda_errors(tmp_path, line, pattern):
    write_swda(tmp_path, b"B|Hi.|sd\n" + line + b"\n")
    with pytest.raises(DialogueError, match=pattern):
        load_split("swda", "train", tmp_path)


def test_swda_listed_file_missing_and_unlisted_file(tmp_path):
    write_swda(tmp_path, b"A|Hi.|sd\n", convs=("2001", "2002"))
    with pytest.raises(DialogueError, match=r"2002\.txt: conversation 2002 is listed"):
        load_split("swda", "train", tmp_path)
    write_swda(tmp_path, b"A|Hi.|sd\n", convs=("2001",))
    (tmp_path / "swda" / "train" / "2003.txt").write_text("A|Yo.|sd\n", encoding="utf-8")
    (tmp_path / "swda" / "train" / "2002.txt").unlink(missing_ok=True)
    ds = load_split("swda", "train", tmp_path)
    assert len(ds) == 1 and ds.report.counts == {"unlisted_conversation_file": 1}


def test_swda_a_conversation_listed_twice_or_in_two_splits_is_refused(tmp_path):
    write_swda(tmp_path, b"A|Hi.|sd\n", convs=("2001", "", "2001"))
    with pytest.raises(DialogueError, match=r"train_split\.txt:3: conversation 2001 is listed twice \(first on line 1\)"):
        load_split("swda", "train", tmp_path)
    write_swda(tmp_path, b"A|Hi.|sd\n", convs=("2001",))
    (tmp_path / "swda" / "metadata" / "test_split.txt").write_text("4001\n2001\n", encoding="utf-8")
    with pytest.raises(DialogueError, match=r"train_split\.txt: conversation\(s\) 2001 also listed in test_split\.txt"):
        load_split("swda", "train", tmp_path)


def test_swda_label_file_must_match(tmp_path):
    write_swda(tmp_path, b"A|Hi.|sd\n", labels="sd\nb\n")
    with pytest.raises(DialogueError, match=r"labels\.txt: tag list differs"):
        load_split("swda", "train", tmp_path)


# -------------------------------------------------------------------------------------------- MuTual
def write_mutual(root: Path, files: dict[str, dict | bytes], sub="mutual", split="dev") -> Path:
    folder = root / "mutual" / sub / split
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        data = content if isinstance(content, bytes) else json.dumps(content).encode("utf-8")
        (folder / name).write_bytes(data)
    return folder


def _item(i, answers="B", article="m : hello . f : hi , how are you ?", split="dev"):
    return {"answers": answers, "options": ["m : fine .", "m : good , thanks .", "m : bad .", "m : ok ."],
            "article": article, "id": f"{split}_{i}"}


def test_mutual_small_folder_order_speakers_hidden(tmp_path):
    write_mutual(tmp_path, {f"dev_{i}.txt": _item(i) for i in (1, 2, 10)})
    write_mutual(tmp_path, {"test_1.txt": _item(1, answers=" ", split="test")}, split="test")
    ds = load_split("mutual", "dev", tmp_path)
    assert [it.id for it in ds] == ["dev_1", "dev_2", "dev_10"]
    item = ds[0]
    assert [(t.speaker, t.text) for t in item.context] == [("m", "hello ."), ("f", "hi , how are you ?")]
    assert [(c.speaker, c.text) for c in item.candidates][1] == ("m", "good , thanks .")
    assert item.answer == 1
    assert load_split("mutual", "test", tmp_path)[0].answer is None


def test_mutual_plus_markers(tmp_path):
    item = {"answers": "D", "article": "M: Hi, Della. F: Only 4 days.M: Great! M;F: Who knows? M : Me.",
            "options": ["F: A.", "F: B.", "F: C.", "F: D."], "id": "train_1"}
    write_mutual(tmp_path, {"train_1.txt": item}, sub="mutual_plus", split="train")
    ds = load_split("mutual-plus", "train", tmp_path)
    ctx = ds[0].context
    assert [(t.speaker, t.text) for t in ctx] == [("m", "Hi, Della."), ("f", "Only 4 days."), ("m", "Great!"), ("m;f", "Who knows?"), ("m", "Me.")]
    assert ds.report.counts == {"glued_speaker_marker": 1, "ambiguous_speaker_marker": 1, "spaced_speaker_marker": 1}
    assert all("mutual/mutual_plus/train/train_1.txt: article: turn" in m for m in ds.report.messages)
    assert ds[0].answer == 3 and [c.speaker for c in ds[0].candidates] == ["f"] * 4


@pytest.mark.parametrize(
    "content, pattern",
    [
        (b'{"answers": "A", "options": [\n"m : a"', r"dev_1\.txt:2: malformed JSON"),
        (_item(1, answers="E"), r"dev_1\.txt: answers: unknown label 'E'; allowed: A, B, C, D"),
        (_item(1, article="hello there"), r"dev_1\.txt: article: no speaker marker"),
        (_item(1, article="well m : hello"), r"dev_1\.txt: article: text before the first speaker marker"),
        (_item(1, article="m : hello f :  "), r"dev_1\.txt: article: turn 2 \('f :'\): empty text"),
        ({k: v for k, v in _item(1).items() if k != "options"}, r"dev_1\.txt: options: missing field"),
        (b'{"answers": "A", "article": "m : h\xff"}', r"dev_1\.txt:1: undecodable bytes"),
    ],
)
def test_mutual_errors(tmp_path, content, pattern):
    write_mutual(tmp_path, {"dev_1.txt": content})
    with pytest.raises(DialogueError, match=pattern):
        load_split("mutual", "dev", tmp_path)


def test_incomplete_dataset_folder(tmp_path):
    (tmp_path / "meld").mkdir()
    with pytest.raises(DataNotFoundError, match=r"train_sent_emo\.csv: file not found.*looks incomplete.*turnformer data download meld --force"):
        load_split("meld", "train", tmp_path)
    (tmp_path / "meld" / "train_sent_emo.csv.gz").write_bytes(b"")  # a compressed copy: named as the cause
    with pytest.raises(DataNotFoundError, match=r"train_sent_emo\.csv: file not found; train_sent_emo\.csv\.gz is there: "
                                                 r"decompress it \(gunzip\)"):
        load_split("meld", "train", tmp_path)
    (tmp_path / "mutual").mkdir()
    with pytest.raises(DataNotFoundError, match=r"mutual_plus/dev: split folder not found"):
        load_split("mutual-plus", "dev", tmp_path)


# ------------------------------------------------------------- copies of the benchmarks a user may have
def test_meld_two_conversations_under_one_dialogue_id_are_refused(tmp_path):
    # one split's file appended to another's: Dialogue_IDs start again at 0
    body = MELD_HEADER + _meld_row(1, "Hello") + _meld_row(2, "Hi", uid=1) + _meld_row(1, "Other scene") + _meld_row(2, "Yes", uid=1)
    write_meld(tmp_path, body)
    with pytest.raises(DialogueError, match=r"train_sent_emo\.csv:4: Dialogue_ID 0, Utterance_ID 0 again \(first on line 2\)"):
        load_split("meld", "train", tmp_path)


def test_meld_a_column_named_twice_or_a_negative_id_is_refused(tmp_path):
    write_meld(tmp_path, MELD_HEADER.replace("\n", ",Emotion\n") + _meld_row(1, "Hello").replace("\n", ",anger\n"))
    with pytest.raises(DialogueError, match=r"train_sent_emo\.csv:1: header names column\(s\) Emotion twice"):
        load_split("meld", "train", tmp_path)
    write_meld(tmp_path, MELD_HEADER + _meld_row(1, "Hello", did=-1))
    with pytest.raises(DialogueError, match=r"train_sent_emo\.csv:2: Dialogue_ID: expected 0 or more, got '-1'"):
        load_split("meld", "train", tmp_path)


def test_meld_every_kind_of_mojibake_is_repaired_in_utterance_and_speaker(tmp_path):
    rows = [
        _meld_row(1, "company\u00e2\x80\x99s", uid=0),  # UTF-8 read as Latin-1
        _meld_row(2, "caf\u00e9 company\u00e2\u20ac\u2122s", uid=1),  # a real é beside UTF-8 read as cp1252
        _meld_row(3, "I\x92m fine", uid=2),  # cp1252's byte read as Latin-1, as MELD's first release has
        _meld_row(4, "Hi", speaker="The Interviewer\u00e2\u20ac\u2122s boss", uid=3),
        _meld_row(5, "na\u00efve caf\u00e9", uid=4),  # nothing to repair
    ]
    write_meld(tmp_path, MELD_HEADER + "".join(rows))
    ds = load_split("meld", "train", tmp_path)
    assert [t.text for t in ds[0]] == ["company’s", "café company’s", "I’m fine", "Hi", "naïve café"]
    assert ds[0][3].speaker == "The Interviewer’s boss"
    assert ds.report.counts == {"mojibake_repaired": 4}
    assert "train_sent_emo.csv:5: Speaker:" in ds.report.messages[3]


def test_meld_padded_label_is_read_and_reported(tmp_path):
    write_meld(tmp_path, MELD_HEADER + _meld_row(1, "Hello", emotion=" surprise "))
    ds = load_split("meld", "train", tmp_path)
    assert ds[0][0].label("emotion") == "surprise" and ds.report.counts == {"padded_label": 1}


def test_line_files_with_lines_ended_by_a_carriage_return_alone_are_refused(tmp_path):
    # read on \n alone, the whole file would be one conversation of every line's utterances, its labels too
    write_dailydialog(tmp_path, b"Hi . __eou__ Yo . __eou__\rBye . __eou__\r", "0 0\r0\r", "1 1\r1\r")
    with pytest.raises(DialogueError, match=r"dialogues_train\.txt:1: a carriage return \(\\r\) inside the line, at byte 26"):
        load_split("dailydialog", "train", tmp_path)
    write_swda(tmp_path, b"A|Hi.|sd\r\nB|Yo.|sd\r\n")  # CRLF reads
    assert len(load_split("swda", "train", tmp_path)[0]) == 2


def test_dailydialog_line_count_mismatch_counts_blank_lines(tmp_path):
    write_dailydialog(tmp_path, "Hi . __eou__\n\nYo . __eou__\n", "0\n0\n", "1\n1\n")
    with pytest.raises(DialogueError, match=r"dialogues_train\.txt: 3 lines, but .* has 2 \(blank lines among them: 1, 0 and 0\)"):
        load_split("dailydialog", "train", tmp_path)
    write_dailydialog(tmp_path, "Hi . __eou__\n\n", "0\n", "1\n \n")  # blank lines after the last: an editor's, skipped
    ds = load_split("dailydialog", "train", tmp_path)
    assert [t.text for d in ds for t in d.turns] == ["Hi ."] and ds.report.counts == {"blank_line": 2}


def test_a_split_without_conversations_is_refused_before_any_work(tmp_path):
    write_meld(tmp_path, MELD_HEADER)
    with pytest.raises(DialogueError, match=r"meld train at .*meld: no conversations in its files"):
        load_split("meld", "train", tmp_path)
    write_emory(tmp_path, [])
    with pytest.raises(DialogueError, match=r"emorynlp train at .*: no conversations in its files"):
        load_split("emorynlp", "train", tmp_path)
    write_swda(tmp_path, b"A|Hi.|sd\n", convs=("",))  # an empty list: every file unlisted, said why
    with pytest.raises(DialogueError, match=r"swda train at .*: no conversations in its files \(swda/train: unlisted_conversation_file: 1\)"):
        load_split("swda", "train", tmp_path)


def test_swda_a_tag_field_starting_with_a_space_is_refused(tmp_path):
    write_swda(tmp_path, b"B|Hi.|sd\nA|Yes | no\n")  # no tag field; "| no" is the text's
    with pytest.raises(DialogueError, match=r"2001\.txt:2: tag field ' no' starts with a space"):
        load_split("swda", "train", tmp_path)
    write_swda(tmp_path, b"B|Hi.|sd  \n")  # spaces after the tag are an editor's
    assert load_split("swda", "train", tmp_path)[0][0].label("act") == "sd"
    write_swda(tmp_path, b"B|Hi.|sd\nA|Okay.|b|b\n")  # a column after the tag: the tag would be read into the text
    with pytest.raises(DialogueError, match=r"2001\.txt:2: the text ends in '\|b', a tag: a column after the tag's\?"):
        load_split("swda", "train", tmp_path)
    write_swda(tmp_path, b"B|Yes | no|sd\n")  # a '|' inside a text is its own
    assert load_split("swda", "train", tmp_path)[0][0].text == "Yes | no"


def test_emorynlp_field_types_two_names_and_padded_labels(tmp_path):
    cases = [
        ({"text": 5, "speaker": "Joey", "label": "Mad"}, r"scenes\[0\]\[0\]\.text: expected a string, got 5"),
        ({"text": "Hi", "speaker": 5, "label": "Mad"}, r"scenes\[0\]\[0\]\.speaker: expected a string or a list of names, got 5"),
        ({"text": "Hi", "transcript": "Yo", "speaker": "Joey", "label": "Mad"}, r"scenes\[0\]\[0\]: both 'text' and 'transcript', differing"),
        ({"text": "Hi", "speaker": "Joey", "label": "Mad", "emotion": "Sad"}, r"scenes\[0\]\[0\]: both 'label' and 'emotion', differing"),
    ]
    for utterance, pattern in cases:
        write_emory(tmp_path, [[utterance]])
        with pytest.raises(DialogueError, match=r"train_data\.json: " + pattern):
            load_split("emorynlp", "train", tmp_path)
    write_emory(tmp_path, [[{"text": "Hi", "transcript": "Hi", "speaker": "Joey", "label": "Joyful "}]])
    ds = load_split("emorynlp", "train", tmp_path)
    assert ds[0][0].label("emotion") == "Joyful" and ds.report.counts == {"padded_label": 1}


def test_mutual_an_id_twice_is_refused_and_a_hidden_answer_outside_test_counted(tmp_path):
    write_mutual(tmp_path, {"dev_1.txt": _item(1), "dev_2.txt": _item(1)})
    with pytest.raises(DialogueError, match=r"dev_2\.txt: id 'dev_1' is also dev_1\.txt's"):
        load_split("mutual", "dev", tmp_path)
    write_mutual(tmp_path, {"dev_2.txt": _item(2, answers=" ")})
    ds = load_split("mutual", "dev", tmp_path)
    assert [it.answer for it in ds] == [1, None] and ds.report.counts == {"hidden_answer": 1}



def test_mutual_a_file_of_another_split_or_a_missing_one_is_counted(tmp_path):
    """A train item copied into dev/, or a dev file deleted, changed the split's items without a word."""
    folder = write_mutual(tmp_path, {f"dev_{i}.txt": _item(i) for i in (1, 2, 4)} | {"train_5.txt": _item(5, split="train")})
    ds = load_split("mutual", "dev", tmp_path)
    assert [it.id for it in ds] == ["dev_1", "dev_2", "dev_4", "train_5"]
    assert ds.report.counts == {"id_of_another_split": 1, "missing_item": 1}
    said = " ".join(ds.report.messages)
    assert "train_5.txt: id 'train_5', in dev/" in said and "no item dev_3 (the ids run to dev_4): a file deleted?" in said
    (folder / "train_5.txt").unlink()
    (folder / "dev_3.txt").write_text(json.dumps(_item(3)))
    assert not load_split("mutual", "dev", tmp_path).report.counts  # the official run: nothing to say
    (folder / "dev_3.txt").write_text(json.dumps(_item(3, answers=" B")))  # counted as the other loaders count it
    ds = load_split("mutual", "dev", tmp_path)
    assert ds[2].answer == 1 and ds.report.counts == {"padded_label": 1}


def test_mutual_a_marker_of_a_speaker_it_has_not_is_refused(tmp_path):
    # read as text, "w :" and its words would be the man's turn
    write_mutual(tmp_path, {"dev_1.txt": _item(1, article="m : hello . w : hi , at 10 : 30 ?")})
    with pytest.raises(DialogueError, match=r"dev_1\.txt: article: 'w :' at character 13 stands as a speaker marker does"):
        load_split("mutual", "dev", tmp_path)


def test_swda_a_conversation_that_is_a_folder_is_named_so(tmp_path):
    write_swda(tmp_path, b"A|Hi.|sd\n", convs=("2001", "2002"))
    (tmp_path / "swda" / "train" / "2002.txt").mkdir()
    with pytest.raises(DialogueError, match=r"2002\.txt: is a directory, expected a file"):
        load_split("swda", "train", tmp_path)


def test_a_pipe_or_fifo_given_as_a_file_is_refused_without_waiting_for_a_writer(tmp_path):
    import os

    from turnformer.data import read_jsonl
    from turnformer.data.stats import dataset_stats

    fifo = tmp_path / "conversations.jsonl"
    os.mkfifo(fifo)  # no writer: opening it would wait for one
    for read in (read_jsonl, lambda path: dataset_stats(str(path))):
        with pytest.raises(DialogueError, match=r"conversations\.jsonl: not a regular file \(a pipe or a device\)"):
            read(fifo)


def test_a_benchmark_named_bare_wins_over_a_folder_or_file_of_its_name_here_in_any_case(tmp_path, monkeypatch):
    from turnformer.data import names_benchmark, parse_split_spec

    assert parse_split_spec("MELD:test") == ("meld", "test") and parse_split_spec("daily_dialog:dev") == ("dailydialog", "dev")
    assert names_benchmark("meld") and names_benchmark("Daily_Dialog:test")
    assert not names_benchmark("./meld") and not names_benchmark("meld.jsonl") and not names_benchmark("nope")
    for split in ("train", "dev", "test"):
        write_meld(tmp_path, MELD_HEADER + _meld_row(1, "Hi", did=0, uid=0) + _meld_row(2, "Bye", did=0, uid=1), split=split)
    monkeypatch.chdir(tmp_path)  # its folder meld/ holds the benchmark's raw files, no conversation files
    for name in ("meld", "MELD:test"):
        result = CliRunner().invoke(data_app, ["stats", name, "--data-dir", str(tmp_path), "--json"])
        assert result.exit_code == 0, result.output
        stats = json.loads(result.stdout)
        assert stats["dataset"] == "meld" and stats["splits"]["test"]["dialogues"] == 1
    result = CliRunner().invoke(data_app, ["stats", "./meld", "--json"])  # the folder, written as a path: its files,
    assert result.exit_code == 0, result.output  # read as conversation tables, a split each
    assert set(json.loads(result.stdout)["splits"]) == {"train_sent_emo", "dev_sent_emo", "test_sent_emo"}
    for raw in (tmp_path / "meld").iterdir():
        raw.rename(raw.with_suffix(".txt"))
    result = CliRunner().invoke(data_app, ["stats", "./meld", "--json"])
    assert result.exit_code == 2 and "meld: a folder with no conversation files (.jsonl, .jsonl.gz, .csv" in result.output


def test_meld_real_text_shaped_like_mojibake_stays(tmp_path):
    """A Latin letter before a curly quote, a guillemet or an ellipsis has the shape of UTF-8 read a byte a character
    ("Spaß“" would decode to N'Ko): such text is kept as written, not "repaired"."""
    texts = ["„Das macht Spaß“", "«CAFÉ»", "He said “Olé…” and left", "Señor Ñ¿", "Ah ×’ x"]
    write_meld(tmp_path, MELD_HEADER + "".join(_meld_row(i + 1, text, uid=i) for i, text in enumerate(texts)))
    ds = load_split("meld", "train", tmp_path)
    assert [t.text for t in ds[0]] == texts and not ds.report


def test_mutual_a_gzipped_item_is_read_and_another_file_counted(tmp_path):
    """Items are *.txt, gzip-compressed *.txt.gz too; a file of another name (an item saved as .json) is not read
    without a word: it is counted."""
    import gzip

    write_mutual(tmp_path, {"dev_1.txt": _item(1), "dev_2.txt.gz": gzip.compress(json.dumps(_item(2)).encode()),
                            "dev_3.json": _item(3), ".hidden": b"x"})
    ds = load_split("mutual", "dev", tmp_path)
    assert [it.id for it in ds] == ["dev_1", "dev_2"]
    assert ds.report.counts == {"other_file": 1} and "dev_3.json: not an item file" in ds.report.messages[0]


def test_meld_an_utterance_longer_than_pythons_csv_field_limit_loads(tmp_path):
    long = "word " * 40_000  # 200,000 characters: past csv's default 131,072
    write_meld(tmp_path, MELD_HEADER + _meld_row(1, f'"{long}"') + _meld_row(2, "Hi", uid=1))
    ds = load_split("meld", "train", tmp_path)
    assert [t.text for t in ds[0]] == [long, "Hi"]


def test_meld_an_error_in_a_row_of_several_lines_names_the_line_it_starts_on(tmp_path):
    write_meld(tmp_path, MELD_HEADER + _meld_row(1, "Hello") + _meld_row(2, '"one\ntwo\nthree"', emotion="happy", uid=1))
    with pytest.raises(DialogueError, match=r"train_sent_emo\.csv:3: Emotion: unknown label 'happy'"):
        load_split("meld", "train", tmp_path)
