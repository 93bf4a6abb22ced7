"""The tab-separated response-selection format of the Ubuntu (Lowe et al. / Wu et al.), Douban and
E-commerce corpora: one (context, candidate) pair a line::

    label \\t utterance_1 \\t ... \\t utterance_n \\t response

``label`` is 1 (the response is a correct one) or 0. Consecutive lines with the same context form one
item (training files alternate a positive and a negative line; test files give 10 candidates per
context). The format names no speakers: turns alternate between ``"A"`` and ``"B"``, the first
context utterance being ``"A"``'s, and the response is spoken by whoever follows the last context
utterance. Some releases mark turn ends inside a line with ``__eou__`` / ``__eot__``: those markers
are removed (and counted) from the text. Where items differ in their number of candidates (two identical contexts on
consecutive lines make one item of both), the report counts those not of the most common number and names their lines.

Every error names the file and line (from 1): a label other than 0/1, fewer than two utterances (a
context and a response), an empty utterance. A blank line is skipped and counted.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from pathlib import Path
from typing import Iterator

from turnformer.data._io import iter_lines
from turnformer.data.report import LoadReport
from turnformer.dialogue import Dialogue, DialogueError, ResponseSelectionItem, Turn, is_blank

logger = logging.getLogger(__name__)
SPEAKERS = ("A", "B")
NAMED_LINES = 5  # lines named per candidate count that is not the most common one
_MARKERS = re.compile(r"\s*__eo[ut]__\s*")


def _clean(text: str, where: str, report: LoadReport) -> str:
    cleaned = _MARKERS.sub(" ", text).strip()
    if cleaned != text.strip():
        report.add("turn_marker_removed", f"{where}: __eou__/__eot__ removed")
    return cleaned


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_selection_tsv(path: str | Path, report: LoadReport | None = None, summary: bool = True) -> list[ResponseSelectionItem]:
    """The items of a file in this format, in file order; ids are ``FILESTEM-LINE`` of each group's first line."""
    items = list(iter_selection_tsv(path, report, summary))
    if not items:
        raise DialogueError(f"{path}: no (label, context, response) lines")
    return items


def item_prefix(path: Path) -> str:
    """The start of the ids of a file's items: its name without its endings (``valid.txt.gz`` -> ``valid``, as
    ``valid.txt``), so that the same file gives the same ids compressed or not."""
    name = path.name[: -len(".gz")] if path.name.lower().endswith(".gz") else path.name
    return Path(name).stem


def iter_selection_tsv(path: str | Path, report: LoadReport | None = None, summary: bool = True) -> Iterator[ResponseSelectionItem]:
    """`read_selection_tsv` an item at a time, the file read a line at a time (a file of no items yields none); with
    `summary`, the report's summary is logged once the last line is read (where something was repaired or skipped)."""
    path = Path(path)
    report = report if report is not None else LoadReport(source=str(path))
    group: dict | None = None
    sizes: Counter = Counter()  # number of candidates -> items
    lines: dict[int, list[int]] = {}  # number of candidates -> the first lines of its first items

    def item() -> ResponseSelectionItem:
        n = len(group["candidates"])
        sizes[n] += 1
        if len(lines.setdefault(n, [])) < NAMED_LINES:
            lines[n].append(group["line"])
        return ResponseSelectionItem(context=Dialogue(turns=group["context"], id=group["id"]),
                                     candidates=group["candidates"], id=group["id"], relevance=group["relevance"])

    for number, line in iter_lines(path, report):
        where = f"{path}:{number}"
        if not line.strip():
            report.add("blank_line", f"{where}: blank line skipped")
            continue
        label, *utterances = line.split("\t")
        if label.strip() not in ("0", "1"):
            # a JSON document (a whole-file array or object) has no tab-separated label: say which format was expected
            hint = ("; this looks like JSON: give items as JSON Lines, one object a line (with meta.candidates)"
                    if group is None and line.lstrip()[:1] in ("[", "{") else
                    "; write it 0 or 1" if _number(label) else
                    "; a header line is not part of the format: remove it" if group is None and len(utterances) >= 2 else "")
            raise DialogueError(f"{where}: label: expected 0 or 1 in the first column, got {label[:40]!r}{hint}")
        if len(utterances) < 2:
            raise DialogueError(f"{where}: expected a label, at least one context utterance and a response, "
                                f"separated by tabs; found {len(utterances)} text column(s)")
        texts = [_clean(u, f"{where}: column {i + 2}", report) for i, u in enumerate(utterances)]
        for i, text in enumerate(texts):
            if is_blank(text):
                raise DialogueError(f"{where}: column {i + 2}: empty utterance")
        context = tuple(Turn(speaker=SPEAKERS[i % 2], text=t) for i, t in enumerate(texts[:-1]))
        candidate = Turn(speaker=SPEAKERS[len(context) % 2], text=texts[-1])
        if group is None or group["context"] != context:
            if group is not None:
                yield item()
            group = {"context": context, "id": f"{item_prefix(path)}-{number}", "line": number, "candidates": [], "relevance": []}
        group["candidates"].append(candidate)
        group["relevance"].append(int(label))
    if group is not None:
        yield item()
    if len(sizes) > 1:
        report_sizes(path, sizes, lines, report)
    if summary and report:  # one line (the command shows it)
        logger.info("%s", report.summary())


def report_sizes(path: Path, sizes: Counter, lines: dict[int, list[int]], report: LoadReport) -> None:
    """Count the items whose number of candidates is not the most common one, naming their first lines."""
    usual = sizes.most_common(1)[0][0]
    for n, count in sorted(sizes.items()):
        if n != usual:
            named = ", ".join(map(str, lines[n])) + (", ..." if count > len(lines[n]) else "")
            report.add("items_of_another_size", f"{path}: {count} item(s) of {n} candidates, most of {usual} (lines {named}): "
                       "consecutive lines with the same context make one item", count)
