"""The loaders on the real benchmark files: published counts, known quirks, the CLI's JSON."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from turnformer.data import available_datasets, dataset_stats, load_split
from turnformer.data.registry import DATASETS
from turnformer.data.report import DataNotFoundError
from turnformer.data.cli import data_app
from turnformer.data.download import load_manifest, verify_folder
from turnformer.dialogue import Dialogue, ResponseSelectionItem

pytestmark = pytest.mark.data

# (dialogues, utterances) per split, from shared/data/SOURCES.md (verified counts).
# MuTual: items, and context turns (our own parse; SOURCES gives items only), pinned against regressions.
EXPECTED = {
    "dailydialog": {"train": (11118, 87170), "validation": (1000, 8069), "test": (1000, 7740)},
    "meld": {"train": (1038, 9989), "validation": (114, 1109), "test": (280, 2610)},
    "emorynlp": {"train": (713, 9934), "validation": (99, 1344), "test": (85, 1328)},
    "swda": {"train": (1115, 192390), "validation": (21, 3272), "test": (19, 4078)},
    # Lee and Dernoncourt's split (the LC Attention paper's Table 3: 1K (177K), 112 (18K), 19 (4K))
    "swda-ld": {"train": (1003, 174255), "validation": (112, 18135), "test": (19, 4078)},
    "mutual": {"train": (7088, 33614), "validation": (886, 4092), "test": (886, 4121)},
    "mutual-plus": {"train": (7088, 33692), "validation": (886, 4090), "test": (886, 4134)},
}
PRIMARY = {"dailydialog": "emotion", "meld": "emotion", "emorynlp": "emotion", "swda": "act", "swda-ld": "act", "mutual": "answer", "mutual-plus": "answer"}


def test_every_dataset_has_expected_counts():
    # corpora fetched by hand (no manifest, not in the shared data) are tested on fixtures in test_more_corpora.py
    assert {name for name in available_datasets() if not DATASETS[name].manual_download} == set(EXPECTED)


def _check_stats(name: str, stats: dict) -> None:
    assert stats["dataset"] == name
    assert list(stats["splits"]) == ["train", "validation", "test"]
    for split, (n_dialogues, n_utterances) in EXPECTED[name].items():
        s = stats["splits"][split]
        assert (s["dialogues"], s["utterances"]) == (n_dialogues, n_utterances), (name, split)
        assert s["label_kind"] == PRIMARY[name]
        if name.startswith("mutual"):
            assert sum(s["labels"].values()) == n_dialogues
        else:
            assert sum(s["labels"].values()) + s.get("unlabelled", {}).get(PRIMARY[name], 0) == n_utterances
        assert isinstance(s["report"], dict)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_dataset_stats_match_sources(name, data_dir):
    _check_stats(name, dataset_stats(name, data_dir))


@pytest.mark.parametrize("name", list(EXPECTED))
def test_cli_stats_json_match_sources(name, data_dir):
    result = CliRunner().invoke(data_app, ["stats", name, "--json", "--data-dir", str(data_dir)])
    assert result.exit_code == 0, result.output
    _check_stats(name, json.loads(result.stdout))


def test_cli_stats_table(data_dir):
    result = CliRunner().invoke(data_app, ["stats", "emorynlp", "--data-dir", str(data_dir)])
    assert result.exit_code == 0, result.output
    assert "713" in result.stdout and "9934" in result.stdout and "Joyful" in result.stdout


def test_cli_stats_of_one_split_written_name_colon_split(data_dir):
    result = CliRunner().invoke(data_app, ["stats", "emorynlp:dev", "--json", "--data-dir", str(data_dir)])
    assert result.exit_code == 0, result.output
    splits = json.loads(result.stdout)["splits"]
    assert list(splits) == ["validation"] and splits["validation"]["dialogues"] == 99
    result = CliRunner().invoke(data_app, ["stats", "emorynlp:bogus", "--data-dir", str(data_dir)])
    assert result.exit_code != 0 and "unknown split 'bogus'" in result.output
    result = CliRunner().invoke(data_app, ["stats", "emorynlp:", "--data-dir", str(data_dir)])
    assert result.exit_code != 0 and "give a split after the colon" in result.output


def test_stats_label_distributions(data_dir):
    dd = dataset_stats("dailydialog", data_dir)["splits"]["train"]
    assert list(dd["labels"]) == ["neutral", "anger", "disgust", "fear", "happiness", "sadness", "surprise"]
    assert sum(dd["other_labels"]["act"].values()) == 87170
    assert dd["report"] == {"merged_split_utterance": 1}
    meld = dataset_stats("meld", data_dir)["splits"]["test"]
    assert sum(meld["other_labels"]["sentiment"].values()) == 2610
    mutual = dataset_stats("mutual", data_dir)["splits"]
    assert mutual["test"]["labels"] == {"hidden": 886}
    assert set(mutual["validation"]["labels"]) == {"A", "B", "C", "D"}


def test_dailydialog_7851_merged_and_reported(data_dir):
    ds = load_split("dailydialog", "train", data_dir)
    assert ds.report.counts == {"merged_split_utterance": 1}
    (message,) = ds.report.messages
    assert "dialogues_train.txt:7852" in message and "#7851" in message
    d = ds[7851]
    assert d.meta["line"] == 7852 and len(d) == 11
    merged = d[4]
    assert merged.text.startswith("I left it at my parent's house") and "Jim's old bike" in merged.text
    # With the merge, speakers still alternate and the act labels line up with the text.
    assert [t.speaker for t in d] == ["A", "B"] * 5 + ["A"]
    assert d[4].label("act") == "inform" and d[5].text == "Let's go then ." and d[5].label("act") == "commissive"
    # Every other dialogue: one label per utterance, no empty text, alternating A/B.
    assert all(t.text and t.speaker == "AB"[i % 2] for dlg in ds for i, t in enumerate(dlg))


def test_dailydialog_split_aliases(data_dir):
    assert load_split("dailydialog", "dev", data_dir).split == "validation"
    assert len(load_split("dailydialog", "val", data_dir)) == 1000


def test_meld_groups_and_reports_gaps(data_dir):
    ds = load_split("meld", "validation", data_dir)
    assert ds.report.counts == {"utterance_id_gap": 2}
    assert all("dev_sent_emo.csv" in m and "Dialogue_ID" in m for m in ds.report.messages)
    d = ds[0]
    assert d.id == "dia0" and d[0].id == "dia0_utt0" and {"season", "episode"} <= set(d.meta)
    assert set(d[0].labels) == {"emotion", "sentiment"}
    train = load_split("meld", "train", data_dir)
    assert any("’" in t.text for dlg in train for t in dlg)  # curly quotes kept
    assert "mojibake_repaired" not in train.report.counts


def test_emorynlp_scenes(data_dir):
    ds = load_split("emorynlp", "test", data_dir)
    assert ds.label_set("emotion") == ["Neutral", "Joyful", "Peaceful", "Powerful", "Scared", "Mad", "Sad"]
    assert not ds.report
    assert all(isinstance(t.speaker, str) and t.speaker for d in ds for t in d)


def test_swda_has_41_tags(data_dir):
    ds = load_split("swda", "train", data_dir)
    assert len(ds.label_set("act")) == 41
    assert ds.num_utterances == 192390 and not ds.report
    assert {s for d in ds for s in d.speakers} == {"A", "B"}
    assert ds[0].id == "2005"


def test_swda_in_lee_and_dernoncourts_split_holds_out_112_training_conversations(data_dir, tmp_path):
    from turnformer.data.swda import LEE_DERNONCOURT_VALIDATION

    whole = {d.id: d for d in load_split("swda", "train", data_dir)}
    train, validation = (load_split("swda-ld", split, data_dir) for split in ("train", "validation"))
    assert {d.id for d in validation} == LEE_DERNONCOURT_VALIDATION and len(LEE_DERNONCOURT_VALIDATION) == 112
    assert {d.id for d in train} == set(whole) - LEE_DERNONCOURT_VALIDATION
    assert all(d.turns == whole[d.id].turns for d in validation)  # the same conversations, read as swda reads them
    assert [d.id for d in load_split("swda-ld", "test", data_dir)] == [d.id for d in load_split("swda", "test", data_dir)]
    # a copy of the corpus missing one of the 112 is refused, naming it
    copy = tmp_path / "swda"
    shutil.copytree(data_dir / "swda", copy)
    (copy / "train" / "2053.txt").unlink()
    (copy / "metadata" / "train_split.txt").write_text("".join(f"{p.stem}\n" for p in sorted((copy / "train").glob("*.txt"))))
    with pytest.raises(DataNotFoundError, match="1 of Lee and Dernoncourt's 112 validation conversations.*2053"):
        load_split("swda-ld", "validation", tmp_path)
    # each split reports its own conversations' repairs alone (validation reported a training file's blank line)
    (copy / "train" / "2005.txt").write_text((data_dir / "swda" / "train" / "2005.txt").read_text() + "\n")
    shutil.copy(data_dir / "swda" / "train" / "2053.txt", copy / "train" / "2053.txt")
    (copy / "metadata" / "train_split.txt").write_text((data_dir / "swda" / "metadata" / "train_split.txt").read_text())
    assert load_split("swda-ld", "train", tmp_path).report.counts == {"blank_line": 1}
    assert not load_split("swda-ld", "validation", tmp_path).report


@pytest.mark.parametrize("name", ["mutual", "mutual-plus"])
def test_mutual_items(name, data_dir):
    train = load_split(name, "train", data_dir)
    first = train[0]
    assert isinstance(first, ResponseSelectionItem) and first.id == "train_1"
    assert [it.id for it in train[:11]] == [f"train_{i}" for i in range(1, 12)]  # natural order
    assert first.answer in range(4) and len(first.candidates) == 4
    assert first.context.speakers == ["m", "f"]
    assert all(c.speaker in {"m", "f"} and not c.text.lower().startswith(("m :", "f :", "m:", "f:")) for c in first.candidates)
    assert all(t.speaker in {"m", "f", "m;f"} for it in train for t in it.context)
    assert train.report.counts["ambiguous_speaker_marker"] == 20
    assert train.report.counts["glued_speaker_marker"] == 1
    glued = next(it for it in train if it.id == "train_1328")
    assert [t.speaker for t in glued.context][:3] == ["f", "m", "f"]
    test = load_split(name, "test", data_dir)
    assert all(it.answer is None for it in test)
    assert isinstance(test[0].context, Dialogue)


@pytest.mark.parametrize("folder", ["dailydialog", "meld", "emorynlp", "swda", "mutual"])
def test_shared_copy_matches_download_manifest(folder, data_dir):
    verify_folder(data_dir / folder, load_manifest(folder))


def test_convert_split_to_jsonl(tmp_path, data_dir):
    from turnformer.data import read_jsonl

    out = tmp_path / "meld-dev.jsonl"
    result = CliRunner().invoke(data_app, ["convert", "meld", "--split", "dev", "--out", str(out), "--data-dir", str(data_dir)])
    assert result.exit_code == 0, result.output
    back = read_jsonl(out, label_sets=load_split("meld", "dev", data_dir).label_sets)
    assert back == load_split("meld", "validation", data_dir).items

    out = tmp_path / "mutual-test.jsonl"
    result = CliRunner().invoke(data_app, ["convert", "mutual", "-s", "test", "-o", str(out), "--data-dir", str(data_dir)])
    assert result.exit_code == 0, result.output
    back = read_jsonl(out)
    assert len(back) == 886 and back[0].meta["answer"] is None and len(back[0].meta["candidates"]) == 4


def test_convert_refuses_to_write_over_a_file_of_the_dataset_it_reads(tmp_path, data_dir):
    """`data convert meld --split test --out DATA/meld/test_sent_emo.csv` replaced the benchmark's CSV with its own
    JSONL (exit 0), and every later read of the split failed."""
    copy = tmp_path / "data" / "meld"
    copy.mkdir(parents=True)
    for split in ("train", "dev", "test"):
        lines = (data_dir / "meld" / f"{split}_sent_emo.csv").read_text(encoding="utf-8").splitlines(keepends=True)
        (copy / f"{split}_sent_emo.csv").write_text("".join(lines[:4]), encoding="utf-8")
    original = (copy / "test_sent_emo.csv").read_bytes()
    result = CliRunner().invoke(data_app, ["convert", "meld", "--split", "test", "--data-dir", str(copy.parent),
                                           "--out", str(copy / "test_sent_emo.csv")])
    assert result.exit_code == 2 and "a file of the meld dataset" in result.output and "give a file outside" in result.output
    assert (copy / "test_sent_emo.csv").read_bytes() == original
    beside = copy / "test.jsonl"  # a new file in the folder is no file the loader reads
    result = CliRunner().invoke(data_app, ["convert", "meld", "--split", "test", "--data-dir", str(copy.parent), "--out", str(beside)])
    assert result.exit_code == 0 and beside.read_text().count("\n") == 1, result.output


def test_stats_of_several_benchmarks_is_refused_as_such_and_the_list_keeps_names_whole(tmp_path, data_dir):
    """`data stats meld emorynlp:test` (or a benchmark beside a file) read every argument as a file: "meld: file not
    found"; a missing .jsonl.gz file was "unknown dataset"; piped, `data list` cut names to "dailydial…"."""
    conversations = tmp_path / "c.jsonl"
    conversations.write_text('{"turns": [{"speaker": "A", "text": "hi"}]}\n')
    runner = CliRunner()
    for args, named in ((["meld", "emorynlp:test"], "meld"), (["meld:test", "meld:test"], "meld:test"),
                        ([str(conversations), "meld"], "meld")):
        result = runner.invoke(data_app, ["stats", *args, "--data-dir", str(data_dir)])
        assert result.exit_code == 2 and f"{named}: a benchmark; stats takes one benchmark" in " ".join(result.output.split())
    result = runner.invoke(data_app, ["stats", str(tmp_path / "gone.jsonl.gz")])
    assert result.exit_code == 2 and "gone.jsonl.gz: file not found" in result.output, result.output
    listed = runner.invoke(data_app, ["list"])  # not a terminal: as piped
    assert listed.exit_code == 0 and "…" not in listed.output
    assert all(f" {name} " in listed.output for name in DATASETS)
