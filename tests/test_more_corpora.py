"""EmpatheticDialogues and PERSONA-CHAT: loaders on small files in the published formats, their errors,
the registry, `data stats`, and training a generator on EmpatheticDialogues from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from turnformer.cli import app
from turnformer.data import DataNotFoundError, dataset_stats, get_info, load_split
from turnformer.data import empathetic_dialogues, personachat
from turnformer.data.cli import data_app
from turnformer.dialogue import DialogueError
from turnformer.recipes import RECIPES_DIR, find_recipe, recipe_for_dataset

runner = CliRunner()

# ------------------------------------------------------------------------------------ EmpatheticDialogues
ED_HEADER = "conv_id,utterance_idx,context,prompt,speaker_idx,utterance,selfeval,tags\n"
FIREWORKS = "I remember going to the fireworks with my best friend. There was a lot of people_comma_ but it only felt like us in the world."
ED_TRAIN = ED_HEADER + (
    # lines 2-3: the first conversation of the official train.csv (``_comma_`` in prompt and utterance)
    f"hit:0_conv:1,1,sentimental,{FIREWORKS},1,I remember going to see the fireworks with my best friend. "
    "Although there was a lot of people_comma_ we felt like the only people in the world.,5|5|5_2|2|5,\n"
    f"hit:0_conv:1,2,sentimental,{FIREWORKS},0,Was this a friend you were in love with_comma_ or just a best friend?,5|5|5_2|2|5,\n"
    f"hit:0_conv:1,3,sentimental,{FIREWORKS},1,This was a best friend. I miss her.,5|5|5_2|2|5,\n"
    # lines 5-6: a second conversation; line 6 has two stray commas in its trailing columns (10 fields)
    "hit:1_conv:2,1,proud,I finally passed my driving test.,52,I passed my driving test today!,4|4|4_3|3|3,\n"
    "hit:1_conv:2,2,proud,I finally passed my driving test.,53,Congratulations_comma_ that is great news.,4|4|4_3|3|3,a,b,c\n"
)
ED_VALID = ED_HEADER + (
    "hit:2_conv:4,1,afraid,A spider was in my bed.,7,There was a spider in my bed last night.,,\n"
    "hit:2_conv:4,2,afraid,A spider was in my bed.,8,Oh no_comma_ what did you do?,,\n"
)
ED_TEST = ED_HEADER + (
    "hit:3_conv:6,1,grateful,My friend helped me move.,9,My friend helped me move house.,,\n"
    "hit:3_conv:6,2,grateful,My friend helped me move.,10,That is a good friend.,,\n"
)


def write_ed(root: Path, train: str = ED_TRAIN, valid: str = ED_VALID, test: str = ED_TEST) -> Path:
    folder = root / "empatheticdialogues"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (("train", train), ("valid", valid), ("test", test)):
        (folder / f"{name}.csv").write_text(text, encoding="utf-8")
    return folder


def test_empathetic_dialogues_turns_speakers_and_meta(tmp_path):
    write_ed(tmp_path)
    ds = load_split("empathetic-dialogues", "train", tmp_path)
    assert (ds.name, ds.split, len(ds), ds.num_utterances) == ("empathetic-dialogues", "train", 2, 5)
    first, second = ds.items
    assert first.id == "hit:0_conv:1" and [t.id for t in first.turns] == ["hit:0_conv:1_utt:1", "hit:0_conv:1_utt:2", "hit:0_conv:1_utt:3"]
    assert [(t.speaker, t.text) for t in first.turns] == [
        ("1", "I remember going to see the fireworks with my best friend. Although there was a lot of people, we felt like "
              "the only people in the world."),
        ("0", "Was this a friend you were in love with, or just a best friend?"),
        ("1", "This was a best friend. I miss her."),
    ]
    assert first.meta == {"emotion": "sentimental", "situation": FIREWORKS.replace("_comma_", ","), "line": 2}
    assert [(t.speaker, t.text) for t in second.turns] == [("52", "I passed my driving test today!"),
                                                          ("53", "Congratulations, that is great news.")]
    assert second.meta == {"emotion": "proud", "situation": "I finally passed my driving test.", "line": 5}
    assert all(not t.labels for d in ds.items for t in d.turns)  # the emotion is the conversation's, not a turn's
    assert ds.label_kinds == () and ds.label_sets == {}
    assert dict(ds.report.counts) == {"extra_fields": 1}
    assert ds.report.messages == ["empatheticdialogues/train.csv:6: 10 comma-separated fields instead of 8; the first 8 are used"]
    assert [d.id for d in load_split("empathetic-dialogues", "valid", tmp_path).items] == ["hit:2_conv:4"]  # valid.csv


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("hit:5_conv:9,1,proud,A prompt.,3,Too few fields\n", r"expected 8 comma-separated fields .*got 6"),
        ("hit:5_conv:9,one,proud,A prompt.,3,Hello there.,,\n", r"utterance_idx: expected an integer, got 'one'"),
        ("hit:5_conv:9,1,proud,A prompt.,x3,Hello there.,,\n", r"speaker_idx: expected an integer"),
        ("hit:5_conv:9,1,happy,A prompt.,3,Hello there.,,\n", r"context: unknown emotion 'happy'; allowed: afraid"),
        ("hit:5_conv:9,1,proud,A prompt.,3, ,,\n", r"utterance: empty text"),
    ],
)
def test_empathetic_dialogues_malformed_line_names_file_and_line(tmp_path, line, message):
    folder = write_ed(tmp_path, train=ED_TRAIN + line)
    with pytest.raises(DialogueError, match=message) as info:
        load_split("empathetic-dialogues", "train", tmp_path)
    assert str(info.value).startswith(f"{folder / 'train.csv'}:7: ")


def test_empathetic_dialogues_a_comma_left_in_the_utterance_is_refused(tmp_path):
    # read on every comma, the utterance would end at it and its rest go into selfeval
    line = "hit:5_conv:9,1,proud,A prompt.,3,Was this a friend, or just a best friend?,5|5|5_2|2|5,\n"
    folder = write_ed(tmp_path, train=ED_TRAIN + line)
    with pytest.raises(DialogueError, match=r":7: utterance: a comma not written _comma_ \(after 'Was this a friend'\)"):
        load_split("empathetic-dialogues", "train", tmp_path)
    assert (folder / "train.csv").is_file()


@pytest.mark.parametrize(
    ("indices", "bad_line", "message"),
    [((1, 3), 8, r"hit:5_conv:9: utterance_idx 3, expected 2"),  # a gap
     ((2, 3), 7, r"utterance_idx 2, expected 1"),  # the first turn missing
     ((1, 2, 2), 9, r"hit:5_conv:9: utterance_idx 2 repeated"),  # a duplicate: the later line is named
     ((0, 1), 7, r"hit:5_conv:9: utterance_idx 0, expected 1")],  # counted from 0: not a repeat
)
def test_empathetic_dialogues_utterance_idx_gap_or_duplicate(tmp_path, indices, bad_line, message):
    rows = "".join(f"hit:5_conv:9,{i},proud,A prompt.,{3 + n % 2},Turn number {i}.,,\n" for n, i in enumerate(indices))
    folder = write_ed(tmp_path, train=ED_TRAIN + rows)
    with pytest.raises(DialogueError, match=message) as info:
        load_split("empathetic-dialogues", "train", tmp_path)
    assert str(info.value).startswith(f"{folder / 'train.csv'}:{bad_line}: ")


def test_empathetic_dialogues_bad_header(tmp_path):
    folder = write_ed(tmp_path, train="conv_id,utterance_idx,context\n")
    with pytest.raises(DialogueError, match=r"train\.csv:1: expected the header conv_id,utterance_idx,") as info:
        load_split("empathetic-dialogues", "train", tmp_path)
    assert str(folder / "train.csv") in str(info.value)


# ------------------------------------------------------------------------------------------ PERSONA-CHAT
CANDS = "my mom was single with 3 boys , so we never left the projects .|i try to wear all black every day ."
PC_SELF = (
    "1 your persona: i like to remodel homes.\n"
    "2 your persona: i like to go hunting.\n"
    f"3 hi , how are you doing ?\tyou must be very fast . hunting is one of my favorite hobbies .\t\t{CANDS}|"
    "you must be very fast . hunting is one of my favorite hobbies .\n"
    f"4 i am an actor . what do you do ?\ti remodel homes .\t\t{CANDS}|i remodel homes .\n"
    "1 your persona: i read twenty books a year.\n"
    f"2 __SILENCE__\thello what are doing today ?\t\t{CANDS}|hello what are doing today ?\n"
    f"3 i just got done watching a horror movie\ti rather read , i have read about 20 books this year .\t\t{CANDS}|"
    "i rather read , i have read about 20 books this year .\n"
)
PC_BOTH = (
    "1 your persona: i like to remodel homes.\n"
    "2 partner's persona: i am an actor.\n"
    "3 partner's persona: i love cats.\n"
    f"4 hi !\thello !\t\t{CANDS}|hello !\n"
)


def write_pc(root: Path, text: str = PC_SELF, split: str = "train", variant: str = "self_original") -> Path:
    folder = root / "personachat"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{split}_{variant}.txt"
    path.write_text(text, encoding="utf-8")
    return path


def test_personachat_turns_speakers_and_personas(tmp_path):
    write_pc(tmp_path)
    ds = load_split("personachat", "train", tmp_path)
    assert (ds.name, len(ds), ds.num_utterances) == ("personachat", 2, 7)
    first, second = ds.items
    assert first.id == "train_0" and [(t.speaker, t.text) for t in first.turns] == [
        ("partner", "hi , how are you doing ?"),
        ("self", "you must be very fast . hunting is one of my favorite hobbies ."),
        ("partner", "i am an actor . what do you do ?"),
        ("self", "i remodel homes ."),
    ]
    assert first.meta == {"persona": ["i like to remodel homes.", "i like to go hunting."], "partner_persona": [], "line": 1}
    # __SILENCE__: the self speaker starts, the placeholder turn is dropped
    assert second.id == "train_1" and [(t.speaker, t.text) for t in second.turns] == [
        ("self", "hello what are doing today ?"),
        ("partner", "i just got done watching a horror movie"),
        ("self", "i rather read , i have read about 20 books this year ."),
    ]
    assert second.meta == {"persona": ["i read twenty books a year."], "partner_persona": [], "line": 5}
    assert dict(ds.report.counts) == {"silence_dropped": 1}
    assert ds.report.messages == ["personachat/train_self_original.txt:6: __SILENCE__: the self speaker starts; placeholder turn dropped"]


def test_personachat_variant_with_partner_persona_and_persona_only_dialogue(tmp_path):
    write_pc(tmp_path, PC_BOTH + "1 your persona: i have no one to talk to.\n", split="valid", variant="both_original")
    ds = personachat.load(tmp_path / "personachat", "validation", variant="both_original")
    (only,) = ds.items
    assert [(t.speaker, t.text) for t in only.turns] == [("partner", "hi !"), ("self", "hello !")]
    assert only.meta == {"persona": ["i like to remodel homes."], "partner_persona": ["i am an actor.", "i love cats."], "line": 1}
    assert dict(ds.report.counts) == {"dialogue_without_turns": 1}  # the trailing persona-only dialogue
    with pytest.raises(DialogueError, match="unknown PERSONA-CHAT variant 'none_revised'"):
        personachat.load(tmp_path / "personachat", "validation", variant="none_revised")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("hello there\thi\t\tx|hi\n", r"expected a line number, a space and text"),
        ("5 hello there , no tab here\n", r"found no tab"),
        ("7 hello\thi\t\tx|hi\n", r"line number 7, expected 5 or 1"),
        ("5 your persona: i like cats.\n", r"persona line after the dialogue's first utterance line"),
        ("5 __SILENCE__\thi\t\tx|hi\n", r"__SILENCE__ is only expected as a dialogue's first utterance"),
        ("5 \thi\t\tx|hi\n", r"empty utterance"),
        ("5 hello\t\u200b\t\tx|hi\n", r"empty response"),  # invisible characters alone, as an empty one
        ("5 hello\t\x01\t\tx|hi\n", r"empty response"),
    ],
)
def test_personachat_malformed_line_names_file_and_line(tmp_path, line, message):
    path = write_pc(tmp_path, PC_SELF.split("1 your persona: i read")[0] + line)
    with pytest.raises(DialogueError, match=message) as info:
        load_split("personachat", "train", tmp_path)
    assert str(info.value).startswith(f"{path}:5: ")


# -------------------------------------------------------------------------------- registry, missing data, stats
def test_registry_entries_and_aliases():
    for name, folder in (("empathetic-dialogues", "empatheticdialogues"), ("personachat", "personachat")):
        info = get_info(name)
        assert (info.task, info.folder, info.label_sets, info.primary_label) == ("dialogue", folder, {}, "")
        assert info.file_splits == {"train": "train", "validation": "valid", "test": "test"} and info.manual_download
    assert get_info("EmpatheticDialogues").name == "empathetic-dialogues" and get_info("persona-chat").name == "personachat"
    assert len(set(empathetic_dialogues.EMOTIONS)) == 32 and "sentimental" in empathetic_dialogues.EMOTIONS


@pytest.mark.parametrize(("name", "folder", "hint"), [("empathetic-dialogues", "empatheticdialogues", "empatheticdialogues.tar.gz"),
                                                      ("personachat", "personachat", "personachat.tgz")])
def test_missing_folder_or_file_says_where_to_put_the_files(tmp_path, name, folder, hint):
    with pytest.raises(DataNotFoundError) as info:
        load_split(name, "train", tmp_path)
    msg = str(info.value)
    assert str(tmp_path / folder) in msg and "--data-dir" in msg and "TURNFORMER_DATA" in msg and hint in msg
    assert "turnformer data download" not in msg  # there is no download manifest for these corpora
    (tmp_path / folder).mkdir()
    with pytest.raises(DataNotFoundError, match=r"file not found .*looks incomplete\. Download") as info:
        load_split(name, "test", tmp_path)
    assert "turnformer data" not in str(info.value)


def test_stats_on_both_corpora(tmp_path):
    write_ed(tmp_path)
    for split in ("train", "valid", "test"):
        write_pc(tmp_path, split=split)
    ed = dataset_stats("empathetic-dialogues", tmp_path)["splits"]
    assert {s: (v["dialogues"], v["utterances"]) for s, v in ed.items()} == {"train": (2, 5), "validation": (1, 2), "test": (1, 2)}
    assert ed["train"]["labels"] == {} and ed["train"]["report"] == {"extra_fields": 1} and "other_labels" not in ed["train"]
    result = runner.invoke(data_app, ["stats", "personachat", "--json", "--data-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    pc = json.loads(result.stdout)
    assert pc["dataset"] == "personachat" and pc["splits"]["test"]["dialogues"] == 2 and pc["splits"]["test"]["utterances"] == 7
    table = runner.invoke(data_app, ["stats", "empathetic-dialogues", "--data-dir", str(tmp_path)])
    assert table.exit_code == 0 and "extra_fields: 1" in table.output, table.output
    assert "labels" not in table.output and "label_kind" not in ed["train"]   # no per-turn labels, no label table


# ------------------------------------------------------------------------------------- recipes and the CLI
def test_recipe_fallback_for_benchmarks_without_a_recipe():
    own = RECIPES_DIR / "generation-dailydialog-transformer.toml"
    assert recipe_for_dataset("generation", "transformer", "dailydialog") == (own, None)
    assert recipe_for_dataset("generation", "transformer", "empathetic-dialogues") == (own, "empathetic-dialogues")
    assert recipe_for_dataset("generation", "phaed", "persona_chat") == (RECIPES_DIR / "generation-dailydialog-phaed.toml", "personachat")
    assert recipe_for_dataset("erc", "dialogxl", "meld") == (RECIPES_DIR / "erc-meld-dialogxl.toml", None)  # its own recipe
    # the same corpus in another split: that corpus's recipe, retargeted; MuTual-plus keeps its own
    assert recipe_for_dataset("dialogue-act", "lc-attention", "swda-ld") == (RECIPES_DIR / "dialogue-act-swda-lc-attention.toml", "swda-ld")
    assert recipe_for_dataset("response-selection", "mdfn", "mutual-plus") == (RECIPES_DIR / "response-selection-mutual-plus-mdfn.toml", None)
    assert recipe_for_dataset("generation", "transformer", "file") == (find_recipe("generation", "transformer", "file"), None)
    with pytest.raises(DialogueError, match="no recipe generation-nope-transformer.toml"):
        recipe_for_dataset("generation", "transformer", "nope")
    with pytest.raises(DialogueError, match="no recipe response-selection-personachat-mdfn.toml"):
        recipe_for_dataset("response-selection", "mdfn", "personachat")  # no DailyDialog recipe to fall back on


def test_train_generation_on_empathetic_dialogues_from_the_command_line(tmp_path):
    data = tmp_path / "data"
    write_ed(data)
    out = tmp_path / "run"
    tiny = ["model_config.d_model=16", "model_config.heads=2", "model_config.ff=32", "model_config.layers=1",
            "train.epochs=1", "train.warmup_steps=1", "train.batch_size=8", "data.min_count=1"]
    result = runner.invoke(app, ["train", "--task", "generation", "--model", "transformer", "--dataset", "empathetic-dialogues",
                                 "--data-dir", str(data), "--out", str(out), "--limit-train", "2", "--limit-eval", "1",
                                 *[arg for s in tiny for arg in ("--set", s)]])
    assert result.exit_code == 0, result.output
    assert "using generation-dailydialog-transformer.toml with dataset = 'empathetic-dialogues'" in result.output
    summary = json.loads((out / "result.json").read_text())
    assert summary["best_epoch"] == 1 and summary["test_at_best"] is not None
    test_metrics = [h for h in summary["history"] if "test" in h][-1]["test"]
    assert test_metrics["perplexity"] > 1 and "bleu_2" in test_metrics
    run = json.loads((out / "run.json").read_text())
    assert run["recipe"]["dataset"] == "empathetic-dialogues" and not any(k.startswith("paper") for k in run["recipe"])
    assert run["encode_reports"]["train"]["dialogues"] == 2 and run["encode_reports"]["train"]["instances"] == 3
    assert run["encode_reports"]["test"]["instances"] == 1


@pytest.mark.parametrize("name", ["empathetic-dialogues", "personachat"])
def test_download_of_a_corpus_fetched_by_hand_says_how_to_get_it(name, tmp_path):
    from turnformer.data.download import DownloadError, download

    with pytest.raises(DownloadError, match=r"cannot be downloaded by turnformer.*Download .*docs/data-format\.md"):
        download(name, tmp_path)
    assert list(tmp_path.iterdir()) == []   # nothing written


@pytest.mark.parametrize("line", ["hit:5_conv:9,1,proud,A prompt.,3,This was a best friend. I won $1,000,5|5|5_2|2|5,\n",
                                  "hit:5_conv:9,1,proud,A prompt.,3,We won 2,1,,\n"])
def test_empathetic_dialogues_a_comma_before_digits_in_the_utterance_is_refused(tmp_path, line):
    # the digits after the stray comma ("000", "1") are no selfeval (numbers parted by | and _): the utterance would be
    # read as "... I won $1"
    write_ed(tmp_path, train=ED_TRAIN + line)
    with pytest.raises(DialogueError, match=r":7: utterance: a comma not written _comma_"):
        load_split("empathetic-dialogues", "train", tmp_path)
