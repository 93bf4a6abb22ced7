"""The benchmarks this package can load, by name, and `load_split` to load one split of one."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable

from turnformer.data import dailydialog, emorynlp, empathetic_dialogues, meld, mutual, personachat, swda
from turnformer.data.locate import not_found_message, resolve_data_dir
from turnformer.data.report import DataNotFoundError, DatasetSplit
from turnformer.dialogue import DialogueError

SPLITS = ("train", "validation", "test")
SPLIT_ALIASES = {
    "train": "train", "training": "train", "trn": "train",
    "validation": "validation", "valid": "validation", "val": "validation", "dev": "validation",
    "test": "test", "tst": "test", "eval": "test",
}


@dataclass(frozen=True)
class DatasetInfo:
    """What a benchmark is: its folder, splits, label kinds and sets, and how to load it."""

    name: str
    title: str
    folder: str  # inside the data directory
    task: str  # "dialogue" (labelled turns) or "response_selection"
    primary_label: str  # the label kind `stats` summarises ("" for a corpus without per-turn labels)
    label_sets: dict[str, list[str]]
    loader: Callable[[Path, str], DatasetSplit] = field(repr=False, compare=False)
    splits: tuple[str, ...] = SPLITS
    file_splits: dict[str, str] = field(default_factory=lambda: {s: s for s in SPLITS})
    speakers: str = ""
    license: str = ""
    # Where to get the files by hand, for a corpus without a download manifest (`turnformer data download`
    # cannot fetch it); "" when there is a manifest. Missing-data errors give this instead of the download command.
    manual_download: str = ""

    @property
    def label_kinds(self) -> tuple[str, ...]:
        return tuple(self.label_sets)


DATASETS: dict[str, DatasetInfo] = {
    info.name: info
    for info in (
        DatasetInfo(
            name="dailydialog", title="DailyDialog (Li et al., IJCNLP 2017)", folder="dailydialog",
            task="dialogue", primary_label="emotion", label_sets=dailydialog.LABEL_SETS, loader=dailydialog.load,
            speakers="two, alternating A/B (not annotated)", license="CC BY-NC-SA 4.0",
        ),
        DatasetInfo(
            name="meld", title="MELD, text (Poria et al., ACL 2019)", folder="meld",
            task="dialogue", primary_label="emotion", label_sets=meld.LABEL_SETS, loader=meld.load,
            file_splits=dict(meld.FILE_SPLITS), speakers="multi-party, named", license="GPL-3.0",
        ),
        DatasetInfo(
            name="emorynlp", title="EmoryNLP emotion detection (Zahiri & Choi 2017)", folder="emorynlp",
            task="dialogue", primary_label="emotion", label_sets=emorynlp.LABEL_SETS, loader=emorynlp.load,
            file_splits=dict(emorynlp.FILE_SPLITS), speakers="multi-party, named", license="Apache-2.0",
        ),
        DatasetInfo(
            name="swda", title="Switchboard Dialogue Act corpus (SwDA)", folder="swda",
            task="dialogue", primary_label="act", label_sets=swda.LABEL_SETS, loader=swda.load,
            file_splits=dict(swda.FILE_SPLITS), speakers="two, A/B", license="GPL-3.0 (processing); LDC/UPenn terms",
        ),
        DatasetInfo(
            name=swda.LEE_DERNONCOURT, title="SwDA in Lee and Dernoncourt's split (1,003 / 112 / 19 conversations)",
            folder="swda", task="dialogue", primary_label="act", label_sets=swda.LABEL_SETS,
            loader=swda.load_lee_dernoncourt, file_splits={"train": "train", "validation": "train", "test": "test"},
            speakers="two, A/B", license="GPL-3.0 (processing); LDC/UPenn terms",
        ),
        DatasetInfo(
            name="mutual", title="MuTual (Cui et al., ACL 2020)", folder="mutual",
            task="response_selection", primary_label="answer", label_sets=mutual.LABEL_SETS,
            loader=partial(mutual.load, name="mutual"), file_splits=dict(mutual.FILE_SPLITS),
            speakers="two, m/f", license="none stated",
        ),
        DatasetInfo(
            name="mutual-plus", title="MuTual-plus (Cui et al., ACL 2020)", folder="mutual",
            task="response_selection", primary_label="answer", label_sets=mutual.LABEL_SETS,
            loader=partial(mutual.load, name="mutual-plus"), file_splits=dict(mutual.FILE_SPLITS),
            speakers="two, m/f", license="none stated",
        ),
        DatasetInfo(
            name="empathetic-dialogues", title="EmpatheticDialogues (Rashkin et al., ACL 2019)",
            folder=empathetic_dialogues.FOLDER, task="dialogue", primary_label="",
            label_sets=dict(empathetic_dialogues.LABEL_SETS), loader=empathetic_dialogues.load,
            file_splits=dict(empathetic_dialogues.FILE_SPLITS), speakers="two, anonymous worker ids (speaker_idx)",
            license="CC BY-NC 4.0",
            manual_download=(
                "Download empatheticdialogues.tar.gz (https://dl.fbaipublicfiles.com/parlai/empatheticdialogues/"
                "empatheticdialogues.tar.gz) and unpack it in the data directory, so that it holds "
                "empatheticdialogues/train.csv, valid.csv and test.csv (see docs/data-format.md)."
            ),
        ),
        DatasetInfo(
            name="personachat", title="PERSONA-CHAT (Zhang et al., ACL 2018), ParlAI text format", folder="personachat",
            task="dialogue", primary_label="", label_sets=dict(personachat.LABEL_SETS), loader=personachat.load,
            file_splits=dict(personachat.FILE_SPLITS), speakers="two, partner/self (self: the persona's speaker)",
            license="see ParlAI",
            manual_download=(
                "Download ParlAI's personachat.tgz (http://parl.ai/downloads/personachat/personachat.tgz) and put the "
                "files of its personachat/ folder in personachat/ in the data directory, so that it holds "
                "personachat/train_self_original.txt, valid_self_original.txt and test_self_original.txt "
                "(see docs/data-format.md)."
            ),
        ),
    )
}

_NAME_ALIASES = {
    "mutual_plus": "mutual-plus", "mutualplus": "mutual-plus", "daily_dialog": "dailydialog", "daily-dialog": "dailydialog",
    "empatheticdialogues": "empathetic-dialogues", "empathetic_dialogues": "empathetic-dialogues",
    "persona-chat": "personachat", "persona_chat": "personachat",
}


def available_datasets() -> list[str]:
    """Names accepted by `load_split`, in a stable order."""
    return list(DATASETS)


def get_info(name: str) -> DatasetInfo:
    key = name.strip().lower()
    key = _NAME_ALIASES.get(key, key)
    try:
        return DATASETS[key]
    except KeyError:
        raise DialogueError(f"unknown dataset {name!r}; available: {', '.join(DATASETS)}") from None


def parse_split_spec(spec: str) -> tuple[str, str] | None:
    """A benchmark split written ``NAME:SPLIT`` (``NAME`` alone: its test split) -> (name, split), or None when NAME
    is no dataset known here (the caller then reads `spec` as a file name). ``NAME:`` with no split is refused."""
    name, colon, split = spec.partition(":")
    key = name.strip().lower()
    name = _NAME_ALIASES.get(key, key)  # as `get_info` reads a name: any letter case, its aliases
    if name not in DATASETS:
        return None
    if colon and not split.strip():
        raise DialogueError(f"{spec}: give a split after the colon: {name}:train, {name}:validation or {name}:test")
    try:  # an unknown split refused here, before anything is said of the dataset (its labels, its size)
        normalize_split(split or "test")
    except DialogueError as e:
        raise DialogueError(f"{spec}: {e}") from None
    return name, split or "test"


def names_benchmark(spec: str) -> bool:
    """Whether `spec` is a benchmark (``NAME`` or ``NAME:SPLIT``, as `parse_split_spec` reads it) rather than a path:
    a bare name wins over a file or folder of that name in the current folder (``./meld`` names those)."""
    return "/" not in spec and os.sep not in spec and parse_split_spec(spec.partition(":")[0]) is not None


def normalize_split(split: str) -> str:
    """``train``/``validation``/``test``; ``dev``, ``val`` and ``valid`` mean ``validation``."""
    key = str(split).strip().lower()
    try:
        return SPLIT_ALIASES[key]
    except KeyError:
        raise DialogueError(f"unknown split {split!r}; use train, validation (or dev/val) or test") from None


def dataset_dir(name: str, data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The folder of dataset `name` inside the data directory; `DataNotFoundError` if it is missing."""
    info = get_info(name)
    path = resolve_data_dir(data_dir) / info.folder
    if not path.is_dir():
        raise DataNotFoundError(not_found_message(info.name, path, info.manual_download))
    return path


def load_split(name: str, split: str, data_dir: str | os.PathLike[str] | None = None) -> DatasetSplit:
    """Load one split of a benchmark from the data directory (see `turnformer.data.locate`)."""
    info = get_info(name)
    canonical = normalize_split(split)
    if canonical not in info.splits:
        raise DialogueError(f"{info.name} has no {canonical} split; it has {', '.join(info.splits)}")
    root = dataset_dir(info.name, data_dir)
    try:
        loaded = info.loader(root, canonical)
    except DataNotFoundError as err:  # the folder exists but a file of this split is missing
        if info.manual_download:  # no manifest: nothing to verify or download
            raise DataNotFoundError(f"{err} ({info.name} at {root} looks incomplete. {info.manual_download})") from None
        there = f" --data-dir {data_dir}" if data_dir is not None else ""  # the commands check and replace this copy
        raise DataNotFoundError(
            f"{err} ({info.name} at {root} looks incomplete; run `turnformer data verify {info.name}{there}` to check it, "
            f"or `turnformer data download {info.name} --force{there}` to replace it)"
        ) from None
    if not loaded.items:  # a header-only file, an empty list of conversations: nothing to train or score on
        what = "items" if info.task == "response_selection" else "conversations"
        skipped = f" ({loaded.report.summary()})" if loaded.report else ""
        raise DialogueError(f"{info.name} {canonical} at {root}: no {what} in its files{skipped}")
    if loaded.report:  # what the loader repaired or skipped, in one line (every command that reads data shows it)
        logging.getLogger(__name__).info("%s %s: %s", info.name, canonical, loaded.report.summary())
    return loaded
