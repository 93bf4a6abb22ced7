"""DailyDialog (Li et al., IJCNLP 2017): two-party everyday conversations with emotion and act labels.

Files (the official ``train.zip``/``validation.zip``/``test.zip``, unpacked)::

    dailydialog/{train,validation,test}/dialogues_{split}.txt          one dialogue a line, utterances ended by __eou__
    dailydialog/{train,validation,test}/dialogues_emotion_{split}.txt  one integer a turn: 0 neutral (no emotion),
                                                                       1 anger, 2 disgust, 3 fear, 4 happiness, 5 sadness, 6 surprise
    dailydialog/{train,validation,test}/dialogues_act_{split}.txt      one integer a turn: 1 inform, 2 question, 3 directive, 4 commissive

Reading: a dialogue line is split on ``__eou__`` and every piece is stripped; the (empty) piece after
the last ``__eou__`` is not an utterance; a line that does not end with ``__eou__`` (a file cut short) is read and
reported (``missing_final_eou``). Line *n* of the text file goes with line *n* of both label files, one label per
utterance; blank lines after a file's last line of text are skipped and counted (``blank_line``).

Speakers: the corpus has no speaker ids. Its dialogues are two-party and turns alternate, so turns are
given speakers ``"A"`` and ``"B"`` alternately, ``"A"`` first. This is an assumption of the corpus
format, not an annotation.

The one known defect, and what is done about it: train line 7852 (dialogue #7851 counted from 0, the
"#7851" of the literature) has 12 text segments but 11 emotion and 11 act labels. Its 5th and 6th
segments, "I left it at my parent's house , but I need one here as well ." and "I've been using Jim's
old bike but he needs it back .", are one answer by the same speaker to "What happened to your old
one ?", wrongly split in two. Merging them (joined by one space) gives 11 utterances whose speakers
still alternate and whose act labels then fit the text (question -> inform -> commissive for "Let's go
then ."); keeping the labelled prefix instead would shift every later label by one turn. So the two
segments are merged, and the repair is counted in the load report as ``merged_split_utterance`` with
file and line. The rule is recognised by content (the first utterance and the two merged segments), so
it applies to this dialogue only; any other mismatch between text and labels raises `DialogueError`
naming the file and line.
"""

from __future__ import annotations

from pathlib import Path

from turnformer.data._io import display, iter_lines
from turnformer.data.report import DatasetSplit, LoadReport
from turnformer.dialogue import Dialogue, DialogueError, Turn, is_blank

NAME = "dailydialog"
SPLITS = ("train", "validation", "test")
EMOTIONS = ["neutral", "anger", "disgust", "fear", "happiness", "sadness", "surprise"]  # codes 0..6
ACTS = ["inform", "question", "directive", "commissive"]  # codes 1..4
EMOTION_CODES = {str(i): label for i, label in enumerate(EMOTIONS)}
ACT_CODES = {str(i + 1): label for i, label in enumerate(ACTS)}
LABEL_SETS = {"emotion": EMOTIONS, "act": ACTS}
SPEAKERS = ("A", "B")
EOU = "__eou__"

# Known wrongly split utterances: (split, first utterance, index of the first of the two segments, its start, the next's start).
KNOWN_SPLIT_UTTERANCES = (
    (
        "train",
        "Sam , can we stop at this bicycle shop ?",
        4,
        "I left it at my parent's house",
        "I've been using Jim's old bike",
    ),
)


def split_utterances(line: str) -> list[str]:
    """Utterances of one dialogue line: split on ``__eou__``, strip, drop the piece after the last marker."""
    pieces = [p.strip() for p in line.split(EOU)]
    if pieces and not pieces[-1]:
        pieces.pop()
    return pieces


def _known_merge(split: str, segments: list[str], n_labels: int) -> int | None:
    if len(segments) != n_labels + 1:
        return None
    for known_split, first, at, start_a, start_b in KNOWN_SPLIT_UTTERANCES:
        if (
            split == known_split
            and segments[0] == first
            and len(segments) > at + 1
            and segments[at].startswith(start_a)
            and segments[at + 1].startswith(start_b)
        ):
            return at
    return None


def _codes(line: str, path: Path, lineno: int, codes: dict[str, str], kind: str) -> list[str]:
    out = []
    for j, code in enumerate(line.split()):
        if code not in codes:
            allowed = ", ".join(f"{k} ({v})" for k, v in codes.items())
            raise DialogueError(f"{path}:{lineno}: {kind} label #{j + 1}: unknown label {code!r}; allowed: {allowed}")
        out.append(codes[code])
    return out


def lines_to_last_text(path: Path, report: LoadReport, base: Path | None) -> list[tuple[int, str]]:
    """A file's numbered lines, without the blank ones after its last line of text (skipped and counted: an editor's
    final empty line, which would put the three files out of step)."""
    lines = list(iter_lines(path, report))
    while lines and not lines[-1][1].strip():
        report.add("blank_line", f"{display(path, base)}:{lines.pop()[0]}: blank line at the end skipped")
    return lines


def load(root: Path, split: str) -> DatasetSplit:
    """Load one split from the ``dailydialog`` folder `root`."""
    folder = root / split
    text_path = folder / f"dialogues_{split}.txt"
    emo_path = folder / f"dialogues_emotion_{split}.txt"
    act_path = folder / f"dialogues_act_{split}.txt"
    base = root.parent
    report = LoadReport(source=f"{NAME}/{split}")

    texts, emotions, acts = (lines_to_last_text(path, report, base) for path in (text_path, emo_path, act_path))
    if not (len(texts) == len(emotions) == len(acts)):
        blank = [sum(not line.strip() for _, line in lines) for lines in (texts, emotions, acts)]
        blanks = f" (blank lines among them: {blank[0]}, {blank[1]} and {blank[2]})" if any(blank) else ""
        raise DialogueError(
            f"{text_path}: {len(texts)} lines, but {emo_path.name} has {len(emotions)} and {act_path.name} has "
            f"{len(acts)}{blanks}: the three files must have one line per dialogue"
        )

    dialogues: list[Dialogue] = []
    for (lineno, text), (_, emo_line), (_, act_line) in zip(texts, emotions, acts):
        where = f"{display(text_path, base)}:{lineno}"
        if not text.strip() and not emo_line.strip() and not act_line.strip():
            report.add("blank_line", f"{where}: blank line skipped (also blank in both label files)")
            continue
        segments = split_utterances(text)
        if not text.rstrip().endswith(EOU):  # every line of the corpus ends its last utterance with the marker
            report.add("missing_final_eou", f"{where}: the line does not end with {EOU}: its last utterance "
                                            f"({segments[-1][-40:] if segments else ''!r}) may be cut short")
        emo = _codes(emo_line, emo_path, lineno, EMOTION_CODES, "emotion")
        act = _codes(act_line, act_path, lineno, ACT_CODES, "act")
        if len(emo) != len(act):
            raise DialogueError(
                f"{emo_path}:{lineno}: {len(emo)} emotion labels but {act_path.name}:{lineno} has {len(act)} act labels"
            )
        if len(segments) != len(emo):
            at = _known_merge(split, segments, len(emo))
            if at is None:
                raise DialogueError(
                    f"{text_path}:{lineno}: {len(segments)} utterances but {len(emo)} labels in "
                    f"{emo_path.name}:{lineno} and {act_path.name}:{lineno}"
                )
            segments[at : at + 2] = [f"{segments[at]} {segments[at + 1]}"]
            report.add(
                "merged_split_utterance",
                f"{where} (dialogue #{len(dialogues)} from 0): {len(segments) + 1} text segments but {len(emo)} labels; "
                f"segments {at + 1} and {at + 2} are one utterance by one speaker, wrongly split, and were merged",
            )
        turns = []
        for j, (utt, e, a) in enumerate(zip(segments, emo, act)):
            if is_blank(utt):
                raise DialogueError(f"{text_path}:{lineno}: utterance {j + 1}: empty text (two __eou__ in a row?)")
            turns.append(Turn(speaker=SPEAKERS[j % 2], text=utt, labels={"emotion": e, "act": a}))
        dialogues.append(Dialogue(turns=tuple(turns), id=f"{split}_{len(dialogues)}", meta={"line": lineno}))

    return DatasetSplit(
        name=NAME, split=split, items=dialogues, report=report, label_kinds=("emotion", "act"),
        label_sets={k: list(v) for k, v in LABEL_SETS.items()},
    )
