"""EmoryNLP emotion detection (Zahiri & Choi 2017): multi-party Friends scenes, 7 emotions.

Files: ``emorynlp/{train,dev,test}_data.json`` (``dev`` is the validation split), each a JSON list of
scenes, each scene a list of utterances ``{"text": ..., "speaker": ..., "label": ...}`` with labels
Neutral, Joyful, Peaceful, Powerful, Scared, Mad, Sad (kept with their capitals, as in the data).
One scene is one `Dialogue` (id ``<split>_<index>``).

Utterances in the shape of the official release (``{"transcript": ..., "speakers": [...],
"emotion": ...}``) are read too. The official release lists speakers: several speakers (``["Chandler
Bing", "Joey Tribbiani"]``) are joined with one space, as the widely used processed files above do
(so both give the same speaker strings); each join is counted as ``speaker_list_joined``. The
processed files here have a plain string everywhere.

A label with spaces at its ends is read without them (counted, ``padded_label``). Malformed JSON raises
`DialogueError` with file, line and column; a bad field raises it with the field path, e.g.
``train_data.json: scenes[3][5].speaker: missing speaker``, and so does an utterance giving one field under
both its names with different values (``text`` and ``transcript``, ``label`` and ``emotion``), and so does an
``utterance_id`` given twice in a file (in one scene, or in two: a scene written twice).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from turnformer.data._io import display, load_json
from turnformer.data.report import DatasetSplit, LoadReport
from turnformer.dialogue import Dialogue, DialogueError, Turn, is_blank, trim_invisible

NAME = "emorynlp"
FILE_SPLITS = {"train": "train", "validation": "dev", "test": "test"}
EMOTIONS = ["Neutral", "Joyful", "Peaceful", "Powerful", "Scared", "Mad", "Sad"]
LABEL_SETS = {"emotion": EMOTIONS}


def _field(utt: dict, names: tuple[str, str], path: Path, at: str) -> tuple[str | None, Any]:
    """The field's name and value, under the processed files' name or the official release's; both, differing, is
    an error (which one is meant cannot be told)."""
    present = [name for name in names if name in utt]
    if len(present) == 2 and utt[present[0]] != utt[present[1]]:
        raise DialogueError(f"{path}: {at}: both {present[0]!r} and {present[1]!r}, differing: give one")
    return (present[0], utt[present[0]]) if present else (None, None)


def _scenes(data: Any, path: Path) -> list[tuple[str, Any]]:
    """(field path, scene) pairs for the processed list-of-scenes format or the official episodes format."""
    if isinstance(data, list):
        return [(f"scenes[{i}]", scene) for i, scene in enumerate(data)]
    if isinstance(data, dict) and isinstance(data.get("episodes"), list):
        out = []
        for e, ep in enumerate(data["episodes"]):
            scenes = ep.get("scenes") if isinstance(ep, dict) else None
            if not isinstance(scenes, list):
                raise DialogueError(f"{path}: episodes[{e}].scenes: expected a list of scenes")
            for s, scene in enumerate(scenes):
                where = f"episodes[{e}].scenes[{s}]"
                if not isinstance(scene, dict) or not isinstance(scene.get("utterances"), list):
                    raise DialogueError(f"{path}: {where}.utterances: expected a list of utterances")
                out.append((f"{where}.utterances", scene["utterances"]))
        return out
    raise DialogueError(f"{path}: expected a JSON list of scenes (or an object with 'episodes'), got {type(data).__name__}")


def read_file(path: Path, report: LoadReport, split: str, base: Path | None = None) -> list[Dialogue]:
    data = load_json(path, report)
    shown = display(path, base)
    dialogues, turn_ids = [], {}  # an utterance id -> where in the file it is (ids are unique across scenes)
    for where, scene in _scenes(data, path):
        if not isinstance(scene, list):
            raise DialogueError(f"{path}: {where}: expected a list of utterances, got {type(scene).__name__}")
        if not scene:
            report.add("empty_scene", f"{shown}: {where}: scene with no utterances skipped")
            continue
        turns = []
        for j, utt in enumerate(scene):
            at = f"{where}[{j}]"
            if not isinstance(utt, dict):
                raise DialogueError(f"{path}: {at}: expected an object with text, speaker and label")
            key, text = _field(utt, ("text", "transcript"), path, at)
            if key is None:
                raise DialogueError(f"{path}: {at}.text: missing text")
            if not isinstance(text, str):
                raise DialogueError(f"{path}: {at}.{key}: expected a string, got {text!r}")
            if is_blank(text):
                raise DialogueError(f"{path}: {at}.{key}: empty text ({text!r})")
            key, speaker = _field(utt, ("speaker", "speakers"), path, at)
            if isinstance(speaker, list):
                names = [s.strip() for s in speaker if isinstance(s, str) and not is_blank(s)]
                if len(names) != len(speaker):
                    raise DialogueError(f"{path}: {at}.{key}: speaker list has empty or non-string names: {speaker!r}")
                if len(names) > 1:
                    report.add("speaker_list_joined", f"{shown}: {at}.{key}: {names} joined as {' '.join(names)!r}")
                speaker = " ".join(names)
            if speaker is not None and not isinstance(speaker, str):
                raise DialogueError(f"{path}: {at}.{key}: expected a string or a list of names, got {speaker!r}")
            if speaker is None or is_blank(speaker):
                raise DialogueError(f"{path}: {at}.{key or 'speaker'}: missing speaker")
            key, label = _field(utt, ("label", "emotion"), path, at)
            if key is None:
                raise DialogueError(f"{path}: {at}.label: missing label")
            if (trimmed := trim_invisible(label) if isinstance(label, str) else label) not in EMOTIONS:
                raise DialogueError(f"{path}: {at}.{key}: unknown label {label!r}; allowed: {', '.join(EMOTIONS)}")
            if trimmed != label:
                report.add("padded_label", f"{shown}: {at}.{key}: {label!r} read as {trimmed!r}")
                label = trimmed
            turn_id = utt.get("utterance_id") if isinstance(utt.get("utterance_id"), str) else None
            if turn_id is not None and (earlier := turn_ids.setdefault(turn_id, at)) != at:
                again = " (a scene written twice?)" if not earlier.startswith(f"{where}[") else ""
                raise DialogueError(f"{path}: {at}.utterance_id: {turn_id!r} is already the id of {earlier}{again}")
            try:
                turns.append(Turn(speaker=speaker.strip(), text=text, labels={"emotion": label}, id=turn_id))
            except DialogueError as err:  # what the turn itself refuses (text that is not valid Unicode...)
                raise DialogueError(f"{path}: {at}.{err}") from None
        dialogues.append(Dialogue(turns=tuple(turns), id=f"{split}_{len(dialogues)}"))
    return dialogues


def load(root: Path, split: str) -> DatasetSplit:
    report = LoadReport(source=f"{NAME}/{split}")
    path = root / f"{FILE_SPLITS[split]}_data.json"
    dialogues = read_file(path, report, split, base=root.parent)
    return DatasetSplit(
        name=NAME, split=split, items=dialogues, report=report, label_kinds=("emotion",),
        label_sets={k: list(v) for k, v in LABEL_SETS.items()},
    )
