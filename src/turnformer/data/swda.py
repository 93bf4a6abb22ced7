"""Switchboard Dialogue Act corpus (SwDA), as processed by NathanDuran/Switchboard-Corpus.

Files::

    swda/{train,val,test}/<conversation>.txt     one utterance a line: Speaker|Text|tag
    swda/metadata/{train,val,test}_split.txt     the conversations of each split, one id a line
    swda/metadata/labels.txt                     the 41 SWBD-DAMSL tags

``val`` is the validation split. Non-verbal ``x`` utterances were removed and ``+`` continuations
merged by that processing. One conversation is one `Dialogue` (id = conversation number), speakers
``"A"``/``"B"``, one ``act`` label a turn.

A line is split on its first and its last ``|``: the speaker is before the first, the tag after the
last, and the text, which may itself contain ``|``, in between. Lines with fewer than
two ``|``, empty text, an empty speaker, a speaker other than ``A``/``B`` (an extra column before the text, whose
real speaker would be read as text), a tag outside the 41, a tag field starting with a space (``A|Yes | no``:
no tag field, a ``|`` in the text read as one) or a text ending in ``|`` and a tag right after it (``A|Okay.|b|b``: a
column after the tag, which would be read into the text; ``A|Yes | no|ny`` is a text's own ``|``) raise
`DialogueError` naming the file and line. Blank lines are skipped and counted (``blank_line``). If a split list is
missing, the split folder's conversation files (``NUMBER.txt``) are read in name order and this is reported
(``conversation_list_missing``; any other file is counted, ``other_file``, and not read);
files in the folder but not on the list are not read and are reported (``unlisted_conversation_file``). A
conversation listed twice, or in two splits' lists, raises `DialogueError` naming the list.

``swda-ld`` is the same corpus in the split of Lee and Dernoncourt (NAACL 2016), which the LC Attention paper
follows (its Table 3: 1K training conversations, 112 validation, 19 test): the 112 validation conversations are
taken out of ``train/`` (1,003 stay for training), the test conversations are ``test/``'s 19, and ``val/``'s 21
conversations, in neither of their splits, are not read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from turnformer.data._io import display, folder_names, iter_lines, text_files
from turnformer.data.report import DataNotFoundError, DatasetSplit, LoadReport
from turnformer.dialogue import Dialogue, DialogueError, Turn, is_blank

NAME = "swda"
LEE_DERNONCOURT = "swda-ld"  # the same files in Lee and Dernoncourt's split
FILE_SPLITS = {"train": "train", "validation": "val", "test": "test"}
# metadata/labels.txt order (most frequent first).
ACTS = [
    "sd", "b", "sv", "%", "aa", "ba", "qy", "ny", "fc", "qw", "nn", "bk", "h", "qy^d", "bh", "^q", "bf",
    'fo_o_fw_"_by_bc', "na", "ad", "^2", "b^m", "qo", "qh", "^h", "ar", "ng", "br", "no", "fp", "qrr",
    "arp_nd", "t3", "oo_co_cc", "aap_am", "t1", "bd", "^g", "qw^d", "fa", "ft",
]
LABEL_SETS = {"act": ACTS}
# Lee and Dernoncourt (2016)'s validation conversations, all in train/ here
LEE_DERNONCOURT_VALIDATION = frozenset((
    "2053", "2067", "2071", "2072", "2160", "2163", "2175", "2253", "2289", "2299", "2340", "2373", "2395", "2399",
    "2455", "2501", "2534", "2558", "2593", "2594", "2598", "2620", "2621", "2623", "2630", "2653", "2713", "2755",
    "2772", "2776", "2790", "2832", "2839", "2842", "2854", "2874", "2888", "2889", "2944", "2959", "2981", "2989",
    "3015", "3046", "3072", "3096", "3148", "3156", "3181", "3184", "3190", "3191", "3202", "3207", "3239", "3246",
    "3250", "3251", "3255", "3257", "3281", "3288", "3290", "3291", "3334", "3346", "3352", "3354", "3382", "3433",
    "3445", "3491", "3497", "3500", "3506", "3509", "3554", "3576", "3584", "3587", "3658", "3659", "3666", "3675",
    "3686", "3697", "3711", "3769", "3797", "3810", "3811", "3921", "4004", "4026", "4037", "4048", "4072", "4318",
    "4321", "4347", "4356", "4372", "4572", "4633", "4660", "4697", "4707", "4716", "4736", "4802", "4890", "4917",
))
_ACT_SET = frozenset(ACTS)
SPEAKERS = ("A", "B")  # the two callers of a Switchboard conversation


def _check_label_file(root: Path) -> None:
    path = root / "metadata" / "labels.txt"
    if not path.is_file():
        return
    found = [line.strip() for _, line in iter_lines(path) if line.strip()]
    if set(found) != _ACT_SET:
        extra = sorted(set(found) - _ACT_SET)
        absent = sorted(_ACT_SET - set(found))
        raise DialogueError(
            f"{path}: tag list differs from the 41 SWBD-DAMSL tags this loader knows "
            f"(extra: {extra or 'none'}; absent: {absent or 'none'})"
        )


def _conversations(root: Path, fsplit: str, report: LoadReport) -> list[str]:
    folder = root / fsplit
    if not folder.is_dir():
        raise DataNotFoundError(f"{folder}: split folder not found")
    on_disk = sorted(p.stem for p in text_files(folder))
    list_path = root / "metadata" / f"{fsplit}_split.txt"
    if not list_path.is_file():  # then a conversation is a file NUMBER.txt; any other file is named, not read
        numbered = [name for name in on_disk if name.isascii() and name.isdigit()]
        report.add("conversation_list_missing", f"{display(list_path, root.parent)}: not found; read all {len(numbered)} "
                                                f"conversation files (NUMBER.txt) in {fsplit}/")
        for name in sorted(set(folder_names(folder)) - {f"{n}.txt" for n in numbered}):
            if not name.startswith("."):
                report.add("other_file", f"{display(folder / name, root.parent)}: not a conversation's file "
                                         "(NUMBER.txt); not read")
        return numbered
    first_line: dict[str, int] = {}
    for lineno, line in iter_lines(list_path):
        if not (conv := line.strip()):
            continue
        if conv in first_line:
            raise DialogueError(f"{list_path}:{lineno}: conversation {conv} is listed twice (first on line {first_line[conv]})")
        if Path(conv).name != conv or conv in (".", ".."):  # a path would be read from outside the split's folder
            raise DialogueError(f"{list_path}:{lineno}: {conv!r}: a conversation's name, not a path (its file is "
                                f"{fsplit}/NAME.txt)")
        first_line[conv] = lineno
    convs, listed = list(first_line), set(first_line)
    for other in FILE_SPLITS.values():  # a conversation in two splits would be trained on and scored
        other_path = root / "metadata" / f"{other}_split.txt"
        if other != fsplit and other_path.is_file():
            shared = sorted(listed & {line.strip() for _, line in iter_lines(other_path)})
            if shared:
                raise DialogueError(f"{list_path}: conversation(s) {', '.join(shared[:5])} also listed in {other_path.name}: "
                                    "a conversation belongs to one split")
    for conv in on_disk:
        if conv not in listed:
            report.add("unlisted_conversation_file", f"{fsplit}/{conv}.txt: not in {list_path.name}; not read")
    return convs


def read_conversation(path: Path, report: LoadReport, conv_id: str, base: Path | None = None) -> Dialogue | None:
    turns = []
    shown = None
    for lineno, line in iter_lines(path, report):
        if not line.strip():
            shown = shown or display(path, base)
            report.add("blank_line", f"{shown}:{lineno}: blank line skipped")
            continue
        first = line.find("|")
        last = line.rfind("|")
        if first < 0 or first == last:
            raise DialogueError(f"{path}:{lineno}: expected Speaker|Text|tag, got {line!r}")
        speaker, text, tag = line[:first].strip(), line[first + 1 : last], line[last + 1 :].rstrip()
        if tag[:1].isspace():  # "A|Yes | no": no tag field, and a "|" inside the text read as its start
            raise DialogueError(f"{path}:{lineno}: tag field {tag!r} starts with a space: a '|' inside the text and no tag "
                                f"field? expected Speaker|Text|tag, got {line!r}")
        if is_blank(speaker):
            raise DialogueError(f"{path}:{lineno}: missing speaker")
        if speaker not in SPEAKERS:
            raise DialogueError(f"{path}:{lineno}: speaker {speaker!r}: SwDA's speakers are A and B (a column before "
                                f"the speaker's?); expected Speaker|Text|tag, got {line!r}")
        if is_blank(text):
            raise DialogueError(f"{path}:{lineno}: empty text ({text!r})")
        if tag not in _ACT_SET:
            raise DialogueError(f"{path}:{lineno}: unknown label {tag!r}; allowed: {', '.join(ACTS)}")
        if (end := text[text.rfind("|") + 1 :]) != text and end.rstrip() in _ACT_SET and not end[:1].isspace():
            raise DialogueError(f"{path}:{lineno}: the text ends in '|{end}', a tag: a column after the tag's? (the "
                                f"model would read the answer in the text); expected Speaker|Text|tag, got {line!r}")
        turns.append(Turn(speaker=speaker, text=text, labels={"act": tag}))
    if not turns:
        report.add("empty_conversation", f"{display(path, base)}: no utterances; skipped")
        return None
    return Dialogue(turns=tuple(turns), id=conv_id)


def load(root: Path, split: str, keep: Callable[[str], bool] | None = None) -> DatasetSplit:
    """A split's conversations, those `keep` takes alone where it is given (the others are not read, and their
    repairs are not in the report)."""
    report = LoadReport(source=f"{NAME}/{split}")
    fsplit = FILE_SPLITS[split]
    _check_label_file(root)
    dialogues = []
    for conv in _conversations(root, fsplit, report):
        if keep is not None and not keep(conv):
            continue
        path = root / fsplit / f"{conv}.txt"
        if not path.exists():  # a folder of that name is named as one when read
            raise DataNotFoundError(f"{path}: conversation {conv} is listed in metadata/{fsplit}_split.txt but its file is missing")
        d = read_conversation(path, report, conv, base=root.parent)
        if d is not None:
            dialogues.append(d)
    return DatasetSplit(
        name=NAME, split=split, items=dialogues, report=report, label_kinds=("act",),
        label_sets={k: list(v) for k, v in LABEL_SETS.items()},
    )


def load_lee_dernoncourt(root: Path, split: str) -> DatasetSplit:
    """A split of ``swda-ld``: training = train/ without Lee and Dernoncourt's 112 validation conversations,
    validation = those 112, test = test/."""
    if split == "test":
        loaded = load(root, "test")
    else:
        missing = sorted(conv for conv in LEE_DERNONCOURT_VALIDATION if not (root / "train" / f"{conv}.txt").is_file())
        if missing:
            raise DataNotFoundError(f"{root / 'train'}: {len(missing)} of Lee and Dernoncourt's 112 validation "
                                    f"conversations are not there (first: {', '.join(missing[:5])})")
        held_out = split == "validation"  # each split reads (and reports on) its own conversations alone
        loaded = load(root, "train", keep=lambda conv: (conv in LEE_DERNONCOURT_VALIDATION) == held_out)
    loaded.name = LEE_DERNONCOURT
    loaded.report.source = f"{LEE_DERNONCOURT}/{split}"
    return loaded
