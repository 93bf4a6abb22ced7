"""Counts of a benchmark: dialogues, utterances and label distributions per split.

`dataset_stats` returns::

    {"dataset": "dailydialog",
     "splits": {"train": {"dialogues": 11118, "utterances": 87170,
                          "label_kind": "emotion", "labels": {"neutral": 72143, ...},
                          "other_labels": {"act": {"inform": ..., ...}},
                          "report": {"merged_split_utterance": 1}},
                "validation": {...}, "test": {...}}}

``labels`` is the distribution of the dataset's primary label kind (emotion for DailyDialog, MELD
and EmoryNLP; act for SwDA; the answer letter A-D for MuTual, whose hidden test answers count as
``"hidden"``), with every label of the label set listed, zero counts included, in label-set order.
Turns without a label of a kind are counted apart, in ``"unlabelled": {kind: n}`` (present when any).
For MuTual, ``dialogues`` counts items and ``utterances`` their context turns. A conversation file in the
generic JSONL format or a table is one split named after the file (`files_stats` takes several), its first label kind
primary, every label it uses listed; a file is counted a conversation at a time, never held whole.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from rich.console import Console
from rich.table import Table

from turnformer.data.jsonl import iter_jsonl
from turnformer.data.table import CONVERSATION_FILES
from turnformer.data.registry import get_info, load_split, names_benchmark, normalize_split, parse_split_spec
from turnformer.data.report import LoadReport
from turnformer.dialogue import Dialogue, DialogueError, ResponseSelectionItem

HIDDEN = "hidden"


def _distribution(counter: Counter, label_set: list[str]) -> dict[str, int]:
    out = {label: counter.get(label, 0) for label in label_set}
    for label, n in sorted(counter.items()):  # anything outside the set (MuTual's hidden answers)
        if label not in out:
            out[label] = n
    return out


def split_stats(ds, primary: str | None = None) -> dict[str, Any]:
    """Counts for one loaded `DatasetSplit`; `primary`, where given, is the label kind counted as ``labels`` (files
    read together share one)."""
    items = ds.items
    if items and isinstance(items[0], ResponseSelectionItem):
        letters = ds.label_sets.get("answer", ["A", "B", "C", "D"])
        counts = Counter(letters[it.answer] if it.answer is not None else HIDDEN for it in items)
        return {"dialogues": len(items), "utterances": ds.num_utterances, "label_kind": "answer",
                "labels": _distribution(counts, [] if counts.keys() == {HIDDEN} else letters),
                "report": dict(sorted(ds.report.counts.items()))}
    if primary is None:
        try:
            primary = get_info(ds.name).primary_label
        except Exception:  # a split that is not a registered benchmark (e.g. a JSONL file)
            primary = ds.label_kinds[0] if ds.label_kinds else None
    _, _, counts = label_counts(items)
    return labelled_stats(len(items), ds.num_utterances, counts, ds.label_kinds, ds.label_sets, primary, ds.report)


def label_counts(dialogues: Iterable[Dialogue]) -> tuple[int, int, dict[str, Counter]]:
    """Conversations, utterances, and each label kind's labels counted (kinds in the order first met), a conversation
    at a time: what `labelled_stats` needs of a file of any length."""
    n_dialogues = n_utterances = 0
    counts: dict[str, Counter] = {}
    for dialogue in dialogues:
        n_dialogues += 1
        n_utterances += len(dialogue.turns)
        for turn in dialogue.turns:
            for kind, label in turn.labels.items():
                counts.setdefault(kind, Counter())[label] += 1
    return n_dialogues, n_utterances, counts


def labelled_stats(n_dialogues: int, n_utterances: int, counts: dict[str, Counter], kinds: Iterable[str],
                   label_sets: dict[str, list[str]], primary: str | None, report: LoadReport) -> dict[str, Any]:
    """The counts of a split of conversations (module docstring): `counts` (`label_counts`) of the label `kinds` and
    of `primary` (where this split carries none of it: all unlabelled), each over its `label_sets` entry."""
    out: dict[str, Any] = {"dialogues": n_dialogues, "utterances": n_utterances}
    per_kind = {k: counts.get(k, Counter()) for k in dict.fromkeys([*([primary] if primary else []), *kinds])}
    if primary:  # "" or None: a corpus without per-turn labels (EmpatheticDialogues, PERSONA-CHAT)
        out["label_kind"] = primary
        out["labels"] = _distribution(per_kind[primary], label_sets.get(primary, []))
    else:
        out["labels"] = {}
    others = {k: _distribution(c, label_sets.get(k, [])) for k, c in per_kind.items() if k != primary}
    if others:
        out["other_labels"] = others
    # turns without a label of a kind are counted apart, so that no label name can be mistaken for them
    unlabelled = {k: n_utterances - sum(c.values()) for k, c in per_kind.items()}
    if any(unlabelled.values()):
        out["unlabelled"] = {k: n for k, n in unlabelled.items() if n}
    out["report"] = dict(sorted(report.counts.items()))
    return out


def print_stats(stats: dict[str, Any], console=None) -> None:
    """Render `dataset_stats` output as two rich tables: counts and repairs, then the primary labels."""
    console = console or Console(markup=False)  # labels and file names as written, not as style tags
    splits = stats["splits"]
    table = Table(title=stats["dataset"])
    table.add_column("split")
    table.add_column("dialogues", justify="right")
    table.add_column("utterances", justify="right")
    table.add_column("repairs / skips")
    for split, s in splits.items():
        rep = ", ".join(f"{k}: {v}" for k, v in s.get("report", {}).items()) or "-"
        table.add_row(split, str(s["dialogues"]), str(s["utterances"]), rep)
    console.print(table)
    if not any(s["labels"] for s in splits.values()):  # nothing labelled per turn: no label table
        return
    kind = next(iter(splits.values()), {}).get("label_kind", "label")
    labels = Table(title=f"{kind} labels")
    labels.add_column(kind)
    for split in splits:
        labels.add_column(split, justify="right")
    for lab in dict.fromkeys(lab for s in splits.values() for lab in s["labels"]):
        labels.add_row(lab, *(str(s["labels"].get(lab, 0)) for s in splits.values()))
    if any(s.get("unlabelled", {}).get(kind) for s in splits.values()):
        labels.add_row("(no label)", *(str(s.get("unlabelled", {}).get(kind, 0)) for s in splits.values()), style="dim")
    console.print(labels)


def dataset_stats(name: str, data_dir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Counts for every split of benchmark `name` (``NAME:SPLIT``: that split only), in the shape shown in the module
    docstring. A conversation file (JSON Lines or a table) counts as one split, named after the file."""
    if not names_benchmark(name) and (name.lower().endswith(CONVERSATION_FILES) or Path(name).exists()):
        return files_stats([name])  # a pipe or a folder is refused there, named
    one_split = parse_split_spec(name) if ":" in name else None  # NAME:SPLIT, read as predict and evaluate read it
    info = get_info(one_split[0] if one_split else name)
    splits = [normalize_split(one_split[1])] if one_split else info.splits
    return {"dataset": info.name, "splits": {split: split_stats(load_split(info.name, split, data_dir)) for split in splits}}


def file_counts(path: str | os.PathLike[str]) -> tuple[int, int, dict[str, Counter], LoadReport]:
    """`label_counts` of a conversation file (JSON Lines or a table), read a conversation at a time, and its load
    report: a file of any length is never held whole."""
    report = LoadReport(source=str(path))
    return (*label_counts(dialogue for _, dialogue in iter_jsonl(path, report=report)), report)


def file_split_name(path: str | os.PathLike[str]) -> str:
    """The split a conversation file stands for: its name without its ending, ``.gz`` and the one before it
    (``train.jsonl.gz``, ``train.csv`` -> ``train``)."""
    name = Path(path).name
    name = name[:-3] if name.lower().endswith(".gz") else name
    return Path(name).stem


def files_stats(paths: list[str | os.PathLike[str]]) -> dict[str, Any]:
    """Counts of conversation files, each a split named after its file (``train.jsonl`` -> ``train``). The files share
    one primary label kind, the first that any of them carries, so that one table counts the same kind in each."""
    read = {}
    for path in paths:
        name = file_split_name(path)
        if name in read:
            raise DialogueError(f"{path}: two files are named {name!r}; give each split its own name")
        read[name] = file_counts(path)
    primary = next((kind for _, _, counts, _ in read.values() for kind in counts), None)
    return {"dataset": ", ".join(str(p) for p in paths),
            "splits": {name: labelled_stats(n_dialogues, n_utterances, counts, counts,
                                            {kind: sorted(c) for kind, c in counts.items()}, primary, report)
                       for name, (n_dialogues, n_utterances, counts, report) in read.items()}}
