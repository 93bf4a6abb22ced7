"""What every task shares: the splits of a recipe's data, a user's split files, limits on how much is read,
labelled conversations with their label set, a trained run's files and description, the input of a trained model
and what it predicted. Every task module imports this one, and none imports another task module.
"""

from __future__ import annotations

import json
import logging
import unicodedata
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Iterator, Mapping, Sequence

from turnformer.data import DATASETS, load_split, names_benchmark, parse_split_spec, read_jsonl
from turnformer.data.jsonl import iter_jsonl, refuse_selection_item, refuse_selection_items
from turnformer.dialogue import (Dialogue, DialogueError, UnknownLabelError, output_names, said_together, spelling_clashes,
                                 texts_to_read)
from turnformer.recipes import file_digests
from turnformer.tasks.base import ModelBuilder, Predictions
from turnformer.training import LABEL_MAP_FILE, MODEL_FILE
from turnformer.training.runs import holds_set_aside_run, replaced_run_folder

logger = logging.getLogger(__name__)

SPLITS = ("train", "validation", "test")


def check_split(split: str, recipe: dict | None = None) -> None:
    """Refuse an unknown split, and, for a run trained on a user's files (its `recipe`), a split whose file has moved
    since, saying how to score it where it is now."""
    if split not in SPLITS:
        raise DialogueError(f"unknown split {split!r}; known: {', '.join(SPLITS)}")
    path = (recipe or {}).get(f"{split}_file") if (recipe or {}).get("dataset") == "file" else None
    if path and not Path(path).exists():
        raise DialogueError(f"{path}: file not found: the run's {split} file, moved or deleted since the run was trained "
                            f"(score it where it is now with --input FILE)")


def kind_label(kind: str) -> str:
    """'an 'emotion' label', 'an 'act' label', 'a 'sentiment' label': the article of the kind's name."""
    return f"{'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind!r} label"


def label_set_from_data(dialogues: Sequence[Dialogue], kind: str) -> list[str]:
    """The labels of a user's file, most frequent first (ties by name), for files with no fixed set."""
    counts = Counter(label for d in dialogues for label in d.labels(kind) if label is not None)
    if not counts:
        raise DialogueError(f"no turn carries {kind_label(kind)}: nothing to learn")
    return [label for label, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def check_spellings(dialogues: Sequence[Dialogue], labels: Sequence[str], kind: str, source: str) -> None:
    """Refuse labels of `dialogues` (a file's, `source`) that differ only in capitals (``Joy`` and ``joy``; the reader
    has trimmed their spaces): read as written, they would be two classes that split one, and nothing would say so.
    The error names every spelling and the line (or conversation) where each is first met."""
    clashes = spelling_clashes(labels)
    if not clashes:
        return
    lines, first = getattr(dialogues, "lines", None), {}
    for i, dialogue in enumerate(dialogues):
        for label in dialogue.labels(kind):
            first.setdefault(label, lines[i] if lines else f"conversation {i}")

    def group(spellings: list[str]) -> str:
        places = said_together([str(first.get(label, "?")) for label in spellings])
        return f"{said_together([repr(label) for label in spellings])} (first at {'lines ' if lines else ''}{places})"
    more = "".join(f", and so do {group(spellings)}" for spellings in clashes[1:])
    names, places = group(clashes[0]).split(" (", 1)
    raise DialogueError(f"{source}: the {kind!r} labels {names} differ only in capitals ({places}{more}: labels are "
                        "compared as written, so they would be two classes; write them alike")


def split_file(recipe: dict, split: str) -> str:
    """The path of a ``dataset = "file"`` recipe's `split`; its absence is an error naming the option that gives it."""
    path = recipe.get(f"{split}_file")
    if not path:
        why = "the best epoch is chosen on it" if split == "validation" else f"the {split} split is read from it"
        raise DialogueError(f"training on your own files needs a {split} file ({why}): --{split}-file PATH "
                            f"(or {split}_file in a recipe)")
    return path


def read_split_files(recipe: dict, only: Sequence[str] = SPLITS,
                     label_sets: dict[str, list[str]] | None = None) -> dict[str, list[Dialogue]]:
    """The conversations of a ``dataset = "file"`` recipe: its ``train_file``, ``validation_file`` and
    ``test_file`` (generic JSONL), or those of the splits in ``only``. With ``label_sets``, a label
    outside them is an error that names the file and line."""
    splits = {}
    for split in only:
        path = split_file(recipe, split)
        splits[split] = read_jsonl(path, label_sets)  # a list, with the load report kept for error hints
        if not splits[split]:
            raise DialogueError(f"{path}: no conversations in the {'' if scores_input(recipe, split) else split + ' '}file")
    return splits


def scores_input(recipe: dict, split: str) -> bool:
    """Whether `split` of a recipe is a user's file given to a trained model to score (`scored_run`): its messages
    speak of the file and of the model, not of a split and of training."""
    return split == "test" and bool(recipe.get("scored_input"))


def require_labels(dialogues: Sequence[Dialogue], kind: str, path, split: str, scoring: bool = False) -> None:
    """Fail, naming the file, where no turn of a split carries a label of `kind`: nothing to learn or to score
    (`scoring`: a file given to a trained model, whose label kind is its own)."""
    if not any(kind in turn.labels for d in dialogues for turn in d.turns):
        why = "nothing to learn" if split == "train" else "nothing to score" if scoring else f"the {split} split cannot be scored"
        present = sorted({other for d in dialogues for turn in d.turns for other in turn.labels})
        report = getattr(dialogues, "report", None)  # a file's conversations as read carry their load report
        ignored = list(report.ignored_fields)[:5] if report else []
        if present and scoring:
            hint = (f" (its turns carry {', '.join(map(repr, present))} labels; this model was trained on {kind!r} labels "
                    "and scores those)")
        elif present:
            hint = (f" (its turns carry {', '.join(map(repr, present))} labels; the kind read is the recipe's label_kind: "
                    f"train with --set label_kind=\"{present[0]}\" for those)")
        elif ignored:  # e.g. {"label": "question"}: a field the reader does not know, not a label
            hint = (f" (fields ignored as unknown: {', '.join(map(repr, ignored))}; a turn's label is read from "
                    f"\"labels\": {{\"{kind}\": ...}} or a top-level \"{kind}\" field)")
        else:
            hint = ""
        raise DialogueError(f"{path}: no turn carries {kind_label(kind)}: {why}{hint}")


def warn_unlabelled(dialogues: Sequence[Dialogue], kind: str, source) -> None:
    """Say so where turns of a file carry no `kind` label while the file has fields the reader does not know (a
    misspelt ``"label"`` for ``"labels"``, say): they would be read as context only, silently."""
    report = getattr(dialogues, "report", None)
    missing = sum(kind not in t.labels for d in dialogues for t in d.turns)
    if not missing or report is None or not report.ignored_fields:
        return
    whole = sum(not any(kind in t.labels for t in d.turns) for d in dialogues)
    logger.warning("%s: %d turns (%d of %d conversations wholly) carry no %r label, and the file has fields the reader does "
                   "not know: %s. A misspelling of \"labels\" or \"%s\"? Such turns are context only, never learnt or scored",
                   source, missing, whole, len(dialogues), kind, report.unknown_fields(), kind)


def utterance_counts(dialogues: list[Dialogue], kind: str) -> dict[str, int]:
    """How many utterances a scored split holds, and how many of them carry a `kind` label and so are scored
    (an unlabelled turn is context only)."""
    return {"utterances": sum(len(d) for d in dialogues),
            "scored_utterances": sum(kind in t.labels for d in dialogues for t in d.turns)}


def apply_limits(splits: dict[str, list[Dialogue]], limits: dict[str, int] | None, kind: str, option: str | None = None) -> None:
    """Keep the first N dialogues of the splits named in ``limits``; refuse a cut that leaves a split without labels
    before any work (a whole split with labels can still start with unlabelled conversations). The error names
    ``option`` (e.g. ``--limit-dialogues``) where one option set the limit."""
    for split, n in (limits or {}).items():
        splits[split] = splits[split][:n]
        require_labels(splits[split], kind, f"{option} {n}" if option else f"the first {n} {split} dialogues", split)


def load_labelled_data(recipe: dict, kind: str, data_dir=None, only: Sequence[str] = SPLITS,
                       labels: Sequence[str] | None = None) -> tuple[dict[str, list[Dialogue]], list[str] | None]:
    """The splits of a recipe's dataset (all three, or those in ``only``), whose turns carry labels of `kind`, and
    its label set: fixed by the benchmark, or, for a user's file, ``labels`` (a trained model's), the recipe's, or
    those seen in its training split (None when that split is not read)."""
    if recipe["dataset"] == "file":
        labels = list(labels or recipe.get("labels") or [])
        splits = {}
        if not labels and "train" in only:
            splits = read_split_files(recipe, ["train"])
            require_labels(splits["train"], kind, recipe["train_file"], "train")
            labels = label_set_from_data(splits["train"], kind)
            check_spellings(splits["train"], labels, kind, recipe["train_file"])
            if len(labels) == 1:  # every utterance would get it: nothing to learn, a perfect score that means nothing
                raise DialogueError(f"{recipe['train_file']}: every labelled turn has the same {kind!r} label, {labels[0]!r}; "
                                    "a classifier needs two labels or more in its training file (or a recipe's labels)")
        # every other split is checked against the training labels as it is read: an error names its file and line
        rest = [split for split in only if split not in splits]
        try:
            splits.update(read_split_files(recipe, rest, {kind: labels} if labels else None))
        except UnknownLabelError as e:
            if "train" not in splits:  # a trained model's labels, or the recipe's
                raise
            raise UnknownLabelError(f"{e} (the labels of the training file {recipe['train_file']}: to score others too, "
                                    f"give every label, --set 'labels=[\"...\", ...]')") from None
        for split in rest:  # a split without a label would be read, encoded and trained on before failing to score
            require_labels(splits[split], kind, recipe[f"{split}_file"], split, scores_input(recipe, split))
        for split in only:
            warn_unlabelled(splits[split], kind, recipe[f"{split}_file"])
            refuse_selection_items(splits[split], recipe[f"{split}_file"], f"a model that labels every utterance with {kind_label(kind)}")
        if "train" in only and (unseen := sorted(set(labels) - {lab for d in splits["train"] for lab in d.labels(kind)})):
            logger.warning("%s: no training turn is labelled %s: the model cannot learn to predict %s",
                           recipe["train_file"], ", ".join(map(repr, unseen)), "them" if len(unseen) > 1 else "it")
        return {split: splits[split] for split in only}, labels or None
    loaded = {split: load_split(recipe["dataset"], split, data_dir) for split in only}
    return {s: list(ds.dialogues) for s, ds in loaded.items()}, next(iter(loaded.values())).label_set(kind)


def resumed_labels(out_dir, resume: bool) -> list[str] | None:
    """The label set of the run a resumed training continues, as its run.json records it: the order its classifier was
    trained in. Read anew from a training file edited since, labels come in order of their counts, and an edit that
    changed that order made the checkpoint's label map differ (the resume refused). None for a new run."""
    if not resume:
        return None
    try:
        labels = json.loads((Path(out_dir) / "run.json").read_text(encoding="utf-8")).get("labels")
    except (OSError, ValueError, AttributeError):  # no run yet (a resume with nothing to resume starts it)
        return None
    return list(labels) if isinstance(labels, list) and labels else None


def folder_above(path: Path) -> Path:
    """The folder `path` is in: its parent as written, or where it is written with ".." (run/best/../.. is not in
    run/best/..), the parent of the folder it names."""
    return path.resolve().parent if ".." in path.parts else path.parent


def checkpoint_paths(checkpoint, labelled_tasks: Collection[str] = (), task: str | None = None) -> tuple[Path, dict]:
    """A run folder or one of its checkpoints (best/, last/) -> (weights folder, run.json). A run of one of
    `labelled_tasks` (whose models label utterances) must name its labels; with `task`, the run must be of it (a
    task's own loader given another task's run)."""
    checkpoint = Path(checkpoint)
    if not checkpoint.exists():
        raise DialogueError(f"{checkpoint}: no such run or checkpoint folder")
    if not checkpoint.is_dir():
        raise DialogueError(f"{checkpoint}: a file; give the run folder (or its best/ or last/ checkpoint)")
    weights = checkpoint / "best" if (checkpoint / "best").is_dir() else checkpoint
    if (checkpoint / "run.json").exists() and not (weights / MODEL_FILE).exists():
        latest = (f" (it has a latest checkpoint: pass {checkpoint / 'last'} to use it)"
                  if (checkpoint / "last" / MODEL_FILE).exists() else "")
        finished = (checkpoint / "result.json").exists()
        if weights == checkpoint and (checkpoint / ".best.old" / MODEL_FILE).exists():  # a save cut between its renames
            raise DialogueError(f"{checkpoint}: its best/ is at {checkpoint / '.best.old'}, where a save cut short left "
                                "it: the run's next `train --resume` puts it back; or pass that folder")
        if weights != checkpoint:
            raise DialogueError(f"{weights}: an incomplete checkpoint, without its {MODEL_FILE}{latest}")
        if finished and not latest:  # its checkpoints since removed (run.py --prune)
            raise DialogueError(f"{checkpoint}: a finished run whose checkpoints were removed (its scores are in "
                                "result.json); train it again to use the model")
        aside = replaced_run_folder(checkpoint)  # a run --overwrite sets aside until the new one's first checkpoint
        earlier = (f"; the run it replaces is kept in {aside} (pass that folder to use it)"
                   if holds_set_aside_run(aside) and (aside / "best" / MODEL_FILE).exists() else "")
        raise DialogueError(f"{checkpoint}: a run without a best checkpoint"
                            f"{'' if finished else ' yet: training has not finished an epoch'}{latest}{earlier}")
    for folder in (checkpoint, folder_above(checkpoint)):
        if (folder / "run.json").exists():
            try:
                run = json.loads((folder / "run.json").read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise DialogueError(f"{folder / 'run.json'}: corrupt run description: {e}") from None
            if problem := _run_description_problem(run, labelled_tasks):
                raise DialogueError(f"{folder / 'run.json'}: corrupt run description: {problem}")
            if task is not None and run_task(run) != task:
                raise DialogueError(f"{checkpoint}: a run of task {run_task(run)!r}, not {task!r}: load it with "
                                    "turnformer.tasks.registry.load_trained, which reads the task from its run.json")
            _check_labels(run, weights / LABEL_MAP_FILE, folder / "run.json")
            return weights, run
    raise DialogueError(f"{checkpoint}: not a turnformer run (no run.json here or one level up)")


@contextmanager
def built_from_run_file(weights: Path):
    """Within the block a model is built from a run description: an error in one of its settings or its vocabulary (a
    damaged or hand-edited run.json) names the run.json. (A missing entry is named by the commands' own message.)"""
    try:
        yield
    except (DialogueError, ValueError, TypeError) as e:
        run_file = next((f / "run.json" for f in (weights, folder_above(weights)) if (f / "run.json").is_file()), weights / "run.json")
        raise DialogueError(f"{run_file}: {e}") from None


def run_results(checkpoint) -> dict | None:
    """What the training of a run scored, from the result.json beside its run.json (the best epoch, the validation and
    test scores there, the training time; the per-epoch history left out); None where the run has none."""
    checkpoint = Path(checkpoint)
    for folder in (checkpoint, folder_above(checkpoint)):
        if (folder / "run.json").is_file():
            try:
                results = json.loads((folder / "result.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return None
            return {k: v for k, v in results.items() if k != "history"} if isinstance(results, dict) else None
    return None


def _run_description_problem(run, labelled_tasks: Collection[str]) -> str | None:
    """What a run.json lacks that loading its model needs (None when nothing): its recipe (with the model id) and,
    for a run of one of `labelled_tasks`, its labels."""
    if not isinstance(run, dict) or not isinstance(run.get("recipe"), dict):
        return "expected a JSON object with a 'recipe' object"
    if not isinstance(run["recipe"].get("model"), str):
        return "recipe.model: missing, or not a model id"
    dataset = run["recipe"].get("dataset", "file")
    if dataset != "file" and (not isinstance(dataset, str) or dataset not in DATASETS):
        return f"recipe.dataset: unknown dataset {dataset!r:.40}; available: {', '.join(DATASETS)}, file"
    labels = run.get("labels")
    if run_task(run) in labelled_tasks and (
            not isinstance(labels, list) or not labels or not all(isinstance(label, str) for label in labels)):
        return f"labels: expected the model's list of label names, got {labels!r:.60}"
    if isinstance(labels, list) and (twice := sorted({label for label in labels if labels.count(label) > 1})):
        return f"labels: {', '.join(map(repr, twice))} named more than once"
    return None


def _check_labels(run: dict, label_map: Path, run_file: Path) -> None:
    """The run description's labels are the ones its checkpoint was trained with (the checkpoint's label_map.json,
    whose checksum the weights' loading verifies): a run.json edited or copied from another run would otherwise put
    other names on the model's outputs."""
    if "labels" not in run or not label_map.is_file():
        return
    try:
        trained = json.loads(label_map.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DialogueError(f"{label_map}: corrupt label map: {e}") from None
    if isinstance(trained, dict) and "labels" in trained and trained["labels"] != run["labels"]:
        raise DialogueError(f"{run_file}: labels {run['labels']!r:.80} differ from the checkpoint's "
                            f"{trained['labels']!r:.80} ({label_map}): the run description does not belong to these weights")


def model_builder(models: Mapping[str, ModelBuilder], model_id: str, title: str) -> ModelBuilder:
    """The builder of `model_id` among a task's `models` (the task's `title` names it in the error)."""
    if model_id not in models:
        raise DialogueError(f"unknown {title} model {model_id!r}; known: {', '.join(models)}")
    return models[model_id]


# --------------------------------------------------------------------------- run descriptions (run.json)

# "run_format" 2: the recipe's model_config holds every setting of the model. Runs written before (no "run_format")
# let some model ids imply settings; `upgrade_run` supplies them.
RUN_FORMAT = 2

# The settings model ids implied before recipes wrote them out, over the recipe's own values (the rules as they were,
# to load runs written then). They are still what each id names: a recipe of the id that sets one otherwise is refused,
# one that leaves it out gets it (`model_id_settings`). Emotion recognition's ids implied none: its recipes always
# named the heads.
SETTINGS_IMPLIED_BY_ID: dict[str, dict[str, dict]] = {
    "dialogue-act": {
        **{context: {"context": context} for context in ("lc-attention", "lstm-attention", "lstm-blstm", "lstm")},
        "minilm-utterance": {"context": "lstm", "utterance_encoder": "pretrained"},
    },
    "response-selection": {
        "plain-encoder": {"channels": "none"}, "mdfn-ua-only": {"channels": "utterance"},
        "mdfn-sa-only": {"channels": "speaker"}, "mdfn-maxpool": {"aggregation": "max"},
        "mdfn-meanpool": {"aggregation": "mean"}, "mdfn-linear-fusion": {"fusion": "linear"},
    },
    "generation": {
        "dialogbert": {"dra": False}, "dialogbert-dra": {"dra": True},
        "phaed-no-speaker-tokens": {"speaker_tokens": False}, "phaed-no-turn-emb": {"turn_embeddings": False},
        "phaed-no-turn-attn": {"turn_attention": False}, "phaed-no-recurrence": {"c_max": 0},
    },
}


def model_id_settings(recipe: dict, source: str) -> dict:
    """`recipe` with the settings its model id names (`SETTINGS_IMPLIED_BY_ID`) in its model_config where it leaves them
    out; one it sets otherwise is refused, naming `source`: the run would train one model and be filed under another's
    name (``--model dialogbert-dra --set model_config.dra=false`` trained DialogBERT without DRA)."""
    implied = SETTINGS_IMPLIED_BY_ID.get(recipe.get("task", "erc"), {}).get(recipe["model"], {})
    config = recipe.setdefault("model_config", {})
    for key, value in implied.items():
        if config.get(key, value) != value:
            raise DialogueError(f"{source}: model_config.{key} = {config[key]!r}: the model {recipe['model']!r} is the one "
                                f"with {key} = {value!r}; leave the setting out, or train the model that has it")
        config.setdefault(key, value)
    return recipe


def run_task(run: dict) -> str:
    """The task of a run description: its recipe's (runs from before recipes named one are emotion recognition)."""
    return run["recipe"].get("task", "erc")


# What the encoders count of inputs the model reads only part of (utterances cut to their start, contexts cut to
# their end), by task: said when training starts, as predict and evaluate say theirs.
CUT_COUNTS = ("truncated_utterances", "cut_utterances", "truncated_sequences", "dropped_turns", "dropped_tokens",
              "truncated_responses", "cut_texts")


def run_description(recipe: dict, seed: int, limits: dict[str, int] | None, labels: list[str], encode_reports: dict,
                    **more) -> dict:
    """What run.json says about a training run: how to rebuild its model and read its data (``limits`` is recorded so
    that no result of a cut run is mistaken for a full one). What the model reads only part of is said here too. A
    run on one's own files records what they held (``file_sha256``, as the commands do before they read them), so that
    a resumed run or `evaluate` can tell a file changed since, whether it was trained from the command line or here."""
    if recipe.get("dataset") == "file" and "file_sha256" not in recipe:
        recipe = {**recipe, "file_sha256": file_digests(recipe)}
    for split, report in encode_reports.items():
        if cut := [f"{key.replace('_', ' ')}: {report[key]}" for key in CUT_COUNTS if report.get(key)]:
            logger.info("note: %s: the model reads only part of some inputs (%s; run.json's encode_reports)",
                        split, ", ".join(cut))
    return {"run_format": RUN_FORMAT, "recipe": recipe, "seed": seed, "limits": limits, "labels": labels,
            "encode_reports": encode_reports, **more}


def upgrade_run(run: dict, known_models: Collection[str]) -> dict:
    """A run description as this version reads it; used only when loading a trained run.

    A run written before recipes named every model setting (no "run_format") gets the settings its model id implied
    then (`SETTINGS_IMPLIED_BY_ID`), over its recipe's, as its model was built then. An emotion-recognition id of
    DialogXL's form (``dialogxl-NAME``) that is not among `known_models` was DialogXL under its recipe's settings."""
    if run.get("run_format", 1) >= RUN_FORMAT:
        return run
    recipe, task = run["recipe"], run_task(run)
    model = recipe["model"]
    if task == "erc" and model not in known_models and model.startswith("dialogxl-"):
        model = "dialogxl"
    implied = SETTINGS_IMPLIED_BY_ID.get(task, {}).get(model, {})
    return {**run, "recipe": {**recipe, "model": model, "model_config": {**recipe.get("model_config", {}), **implied}}}


def scored_run(run: dict, input_file: Path | None) -> dict:
    """A trained run's description as it is scored: its own, or with its recipe's test split replaced by a user's
    labelled file (read with the run's label set, so that an unknown label names the file and line)."""
    if input_file is None:
        return run
    if input_file.is_dir():
        raise DialogueError(f"--input {input_file}: a folder; give a labelled conversation file")
    if not input_file.is_file():
        raise DialogueError(f"--input {input_file}: no such file (a split of the run's own dataset is --split)")
    return {**run, "recipe": {**run["recipe"], "dataset": "file", "test_file": str(input_file.resolve()), "scored_input": True}}


# --------------------------------------------------------------------------- input and output of a trained model

def load_conversations(spec: str, data_dir=None, reader: str | None = None) -> list[Dialogue]:
    """A conversation file (generic JSONL) or a benchmark split written ``NAME:SPLIT`` (of response-selection items:
    their contexts). With `reader`, the model that will read them ("an emotion-recognition (erc) model, which labels
    every utterance of conversations"), response-selection items, whose candidates it would ignore, are refused up
    front."""
    path = Path(spec)
    if path.exists() and not names_benchmark(spec):  # a bare benchmark name wins over a file of that name (./meld)
        dialogues = read_jsonl(path)
        if not dialogues:
            raise DialogueError(f"{spec}: no conversations in the file")
        if reader is not None:
            refuse_selection_items(dialogues, spec, reader)
        return dialogues
    if benchmark := parse_split_spec(spec):
        items = load_split(*benchmark, data_dir).items
        if reader is not None and items and not isinstance(items[0], Dialogue):
            raise DialogueError(f"{spec}: response-selection items (a context and candidate replies); the checkpoint is "
                                f"{reader}: give it a conversation file or a split of a conversation benchmark")
        return [getattr(item, "context", item) for item in items]  # response selection: the context
    raise DialogueError(f"{spec}: no such file, and not a dataset split (NAME:SPLIT with NAME in {', '.join(DATASETS)})")


# predictions are made, and written, this many utterances at a time: what bounds their memory on a file of any length
BLOCK_UTTERANCES = 20_000


class InputBlocks:
    """What a command reads (conversations, response-selection items), a block of about `block_utterances` utterances
    at a time (a longer one alone), each with the name outputs give it (`output_names` over the whole input).
    ``read(first)`` is a fresh pass over the input; it is made twice: first whole (``first`` True: the pass that
    checks it, so that a fault is named before any work is done), keeping only the ids and the counts, then a block at
    a time as the blocks are used. So an input read from a file a line at a time is never held whole. `size` counts
    the utterances of one (`noun`: what one is, plural); `empty` is the error for an input with none."""

    def __init__(self, read: Callable[[bool], Iterable], size: Callable[[Any], int] = len, empty: str = "nothing to read",
                 block_utterances: int | None = None, noun: str = "conversations"):
        self.read, self.size, self.block_utterances = read, size, block_utterances or BLOCK_UTTERANCES
        self.ids: set[str] = set()  # every id given in the input, for the names of those without one
        self.things = self.utterances = self.count = 0  # count: blocks
        self.skipped = 0  # blocks a pass leaves out (made by an interrupted run: `skip`)
        for block in self._blocks(read(True)):
            self.ids.update(x.id for x in block if x.id is not None)
            self.count += 1
            self.things += len(block)
            self.utterances += sum(map(size, block))
        if not self.things:
            raise DialogueError(empty)
        if self.count > 1:
            logger.info("%d %s, %d utterances: read in %d blocks of about %d utterances", self.things, noun,
                        self.utterances, self.count, self.block_utterances)

    def _blocks(self, things: Iterable) -> Iterator[list]:
        """Consecutive things, cut where a block would pass `block_utterances` (a longer one alone)."""
        block, size = [], 0
        for thing in things:
            n = self.size(thing)
            if block and size + n > self.block_utterances:
                yield block
                block, size = [], 0
            block.append(thing)
            size += n
        if block:
            yield block

    def __len__(self) -> int:
        return self.things

    def __iter__(self) -> Iterator[tuple[list[str], list]]:
        taken, start = set(self.ids), 0
        for k, block in enumerate(self._blocks(self.read(False))):
            names = output_names([x.id for x in block], start, taken)  # the names of later blocks depend on these
            if k >= self.skipped:
                yield names, block
            start += len(block)

    def skip(self, blocks: int) -> None:
        """Leave the first `blocks` blocks out of the passes from now on (their names still count)."""
        if not 0 <= blocks <= self.count:
            raise ValueError(f"cannot skip {blocks} of {self.count} blocks")
        self.skipped = blocks

    def desc(self, k: int, work: str = "predict") -> str:
        """The progress bar's name for the `k`-th block of a pass (from 0): "predict", or "predict (block 2 of 7)"."""
        return work if self.count <= 1 else f"{work} (block {self.skipped + k + 1} of {self.count})"


def say_other_labels(source: str, run: dict) -> None:
    """Warn where `source` is a benchmark split (``NAME:SPLIT``) whose labels of the run's kind are not the run's: the
    model labels its conversations with its own set all the same (an emotion model on another corpus's emotions, an
    act model on a corpus without acts)."""
    benchmark = parse_split_spec(source) if isinstance(source, str) else None
    kind = run.get("recipe", {}).get("label_kind")
    if benchmark is None or kind is None or benchmark[0] not in DATASETS:
        return
    info, labels = DATASETS[benchmark[0]], list(run.get("labels") or [])
    if kind not in info.label_sets:
        logger.warning("%s: %s has no %r labels; the model gives its own (%s) all the same", source, info.name, kind,
                       ", ".join(labels))
    elif set(info.label_sets[kind]) != set(labels):
        logger.warning("%s: %s's %r labels (%s) are not the model's (%s): it gives its own", source, info.name, kind,
                       ", ".join(info.label_sets[kind]), ", ".join(labels))


def conversation_blocks(spec: str, data_dir=None, reader: str | None = None, block_utterances: int | None = None) -> InputBlocks:
    """`InputBlocks` of the conversations of a file (generic JSONL, read a line at a time) or a benchmark split
    ``NAME:SPLIT`` (held whole: its size is known); with `reader`, response-selection items are refused as
    `load_conversations` does."""
    path = Path(spec)
    if not path.exists():
        dialogues = load_conversations(spec, data_dir, reader)
        return InputBlocks(lambda first: dialogues, block_utterances=block_utterances)

    def read(first: bool) -> Iterator[Dialogue]:
        for line, dialogue in iter_jsonl(path, summary=first):
            if first and reader is not None:
                refuse_selection_item(dialogue, line, spec, reader)
            yield dialogue

    return InputBlocks(read, empty=f"{spec}: no conversations in the file", block_utterances=block_utterances)


class Tally:
    """How many things, the first few named: what a note on a long input says without keeping every name."""

    def __init__(self, shown: int = 5):
        self.count, self.first, self.shown = 0, [], shown

    def add(self, names: Iterable[str]) -> None:
        for name in names:
            self.count += 1
            if len(self.first) < self.shown:
                self.first.append(name)

    def saved(self) -> dict:
        return {"count": self.count, "first": self.first}

    def restore(self, saved: dict) -> None:
        self.count, self.first = saved["count"], list(saved["first"])

    def __str__(self) -> str:
        """The first few, then how many more: "a, b, c, d, e and 7 more"."""
        more = self.count - len(self.first)
        return ", ".join(self.first) + (f" and {more} more" if more else "")


def shorten(text: str, width: int = 100) -> str:
    """A long utterance on one terminal line or two, or a figure's label: its start, then an ellipsis, in `width`
    columns, a wide character (CJK, emoji) counting two (the JSONL output keeps it whole)."""
    text = " ".join(text.split())
    columns = [2 if unicodedata.east_asian_width(char) in "WF" else 1 for char in text]
    if sum(columns) <= width:
        return text
    used = end = 0
    while used + columns[end] <= width - 1:  # the ellipsis takes the last column
        used, end = used + columns[end], end + 1
    return text[:end] + "…"


def mark_cut(per_turn: Sequence[Sequence[dict]], dialogues: Sequence[Dialogue], tokenizer, max_tokens: int,
             with_specials: bool) -> list[list[dict]]:
    """Predictions (per dialogue, per turn) with ``truncated``: whether the utterance is longer than the model reads
    (its first `max_tokens` word pieces, counted with the special tokens where `with_specials`); and ``no_tokens``
    where the tokenizer keeps nothing of it (a combining mark alone, say): the model read no word of it."""
    texts, cut = texts_to_read((t.text for d in dialogues for t in d.turns), max_tokens)
    lengths = tokenizer(texts, add_special_tokens=with_specials, verbose=False)["input_ids"] if texts else []
    read = iter((len(ids), was_cut) for ids, was_cut in zip(lengths, cut))
    specials = tokenizer.num_special_tokens_to_add() if with_specials else 0
    return [[{**p, "truncated": n > max_tokens or was_cut, **({"no_tokens": True} if n <= specials else {})}
             for p, (n, was_cut) in zip(predictions, read)] for predictions in per_turn]


def label_predictions(blocks: InputBlocks, annotate: Callable[[list[Dialogue], str], list[list[dict]]],
                      label_column: str, max_tokens: int) -> Predictions:
    """One row per utterance: its label, the probabilities of every label and whether the model read only the
    utterance's start, made a block of conversations at a time: ``annotate(dialogues, desc)`` gives per dialogue, per
    turn, {"label", "probabilities", "truncated"} (`mark_cut`); `max_tokens`, the word pieces the model reads of an
    utterance, for the note on those it cut. A conversation without id is named by its place in the input; a turn with
    an id (a table's place column, a JSON turn's ``id``) has it as ``turn_id``, beside its place, ``turn``."""
    cut, empty = Tally(), Tally()

    def blocks_made() -> Iterator[tuple[list[dict], list[tuple[str, ...]]]]:
        for k, (names, dialogues) in enumerate(blocks):
            per_turn = annotate(dialogues, blocks.desc(k))
            rows = [{"dialogue": name, "turn": i, **({"turn_id": turn.id} if turn.id is not None else {}),
                     "speaker": turn.speaker, "text": turn.text, "label": p["label"],
                     "probabilities": {lab: round(float(x), 4) for lab, x in p["probabilities"].items()},
                     **({"truncated": bool(p["truncated"])} if "truncated" in p else {})}
                    for name, dialogue, answers in zip(names, dialogues, per_turn)
                    for i, (turn, p) in enumerate(zip(dialogue.turns, answers))]
            cut.add(f"{name} turn {i}" for name, answers in zip(names, per_turn)
                    for i, p in enumerate(answers) if p.get("truncated"))
            empty.add(f"{name} turn {i}" for name, answers in zip(names, per_turn) for i, p in enumerate(answers) if p.get("no_tokens"))
            yield rows, [(str(r["dialogue"]), str(r["turn"]), r["speaker"], shorten(r["text"]), r["label"],
                          f"{r['probabilities'][r['label']]:.2f}") for r in rows]
        if cut.count:
            predictions.notes.append(f"note: {cut.count} utterance(s) longer than the model's {max_tokens} word pieces "
                                     f"were cut to their start: {cut}")
        if empty.count:
            predictions.notes.append(f"note: the tokenizer keeps nothing of {empty.count} utterance(s) (characters it drops, "
                                     f"such as a combining mark alone): the model read no word of them and labelled them "
                                     f"from their context: {empty}")

    predictions = Predictions(blocks_made(), "predictions", ("dialogue", "turn", "speaker", "text", label_column, "p"),
                              source=blocks, state={"cut": cut, "empty": empty})
    return predictions
