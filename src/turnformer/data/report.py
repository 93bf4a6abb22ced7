"""What a loader returns: the items of one split, and a report of everything it repaired or skipped.

Loaders never drop or change data silently. Every repair, skip or notable irregularity is counted in
`LoadReport.counts` under a short reason (``merged_split_utterance``, ``blank_line``...) and described
in `LoadReport.messages` with the file and line (or field) it concerns: the first `MESSAGES_PER_REASON` of each
reason, so that a file of any length (a million empty labels) is reported in bounded memory; the counts are whole.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator, Union

from turnformer.dialogue import Dialogue, DialogueError, ResponseSelectionItem


MESSAGES_PER_REASON = 100


class DataNotFoundError(DialogueError, FileNotFoundError):
    """A dataset (or one of its files) is not where the user pointed us."""


class DownloadError(DialogueError):
    """A download failed or its files did not match the pinned checksums."""


@dataclass
class LoadReport:
    """Repairs, skips and irregularities met while loading one source, counted by reason."""

    source: str
    counts: Counter = field(default_factory=Counter)
    messages: list[str] = field(default_factory=list)
    ignored_fields: Counter = field(default_factory=Counter)  # unknown field names read past, first seen first
    first_seen: dict = field(default_factory=dict)  # unknown field name -> "file:line: path" of its first occurrence

    def ignore_field(self, where: str, path: str, name: str) -> None:
        """Count an unknown field (`path` within the record at `where`, e.g. ``turns[2].label``) that was skipped."""
        self.add("unknown_field", f"{where}: {path}: unknown field ignored")
        self.ignored_fields[name] += 1
        self.first_seen.setdefault(name, f"{where}: {path}")

    def unknown_fields(self) -> str:
        """The unknown fields, each with its count and first occurrence: ``'label' x20 (first t.jsonl:1: turns[0].label)``."""
        return ", ".join(f"{name!r} x{n} (first {self.first_seen.get(name, '?')})" for name, n in self.ignored_fields.items())

    def add(self, reason: str, message: str, n: int = 1) -> None:
        """Count `n` occurrences of `reason`, and keep a message naming the file and line or field (the first
        `MESSAGES_PER_REASON` of a reason)."""
        self.counts[reason] += n
        if self.counts[reason] - n < MESSAGES_PER_REASON:
            self.messages.append(message)

    def merge(self, other: "LoadReport") -> None:
        self.counts.update(other.counts)
        self.messages.extend(other.messages)
        self.ignored_fields.update(other.ignored_fields)
        for name, where in other.first_seen.items():
            self.first_seen.setdefault(name, where)

    def __bool__(self) -> bool:  # a report is "truthy" when something was repaired or skipped
        return bool(+self.counts)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "counts": dict(sorted(self.counts.items())), "messages": list(self.messages)}

    def summary(self) -> str:
        if not self:
            return f"{self.source}: nothing repaired or skipped"
        parts = ", ".join(f"{reason}: {n}" for reason, n in sorted(self.counts.items()))
        unknown = f"; unknown fields ignored: {self.unknown_fields()}" if self.ignored_fields else ""
        return f"{self.source}: {parts}{unknown}"


Item = Union[Dialogue, ResponseSelectionItem]


@dataclass
class DatasetSplit:
    """One split of a benchmark: its items, the label kinds they carry, and the load report.

    `items` holds `Dialogue` objects, or `ResponseSelectionItem` objects for response selection
    benchmarks (MuTual). `label_sets` maps each label kind to its ordered list of valid labels.
    """

    name: str
    split: str
    items: list
    report: LoadReport
    label_kinds: tuple[str, ...] = ()
    label_sets: dict[str, list[str]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Item]:
        return iter(self.items)

    def __getitem__(self, index):
        return self.items[index]

    def label_set(self, kind: str) -> list[str]:
        try:
            return self.label_sets[kind]
        except KeyError:
            raise DialogueError(
                f"{self.name}/{self.split}: no label kind {kind!r}; it has {list(self.label_kinds) or 'none'}"
            ) from None

    @property
    def dialogues(self) -> list[Dialogue]:
        """The conversations: the items themselves, or each item's context for response selection."""
        return [it.context if isinstance(it, ResponseSelectionItem) else it for it in self.items]

    @property
    def num_utterances(self) -> int:
        """Turns in all dialogues (for response selection: context turns, candidates not counted)."""
        return sum(len(d) for d in self.dialogues)
