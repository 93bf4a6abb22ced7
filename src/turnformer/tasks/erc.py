"""Emotion recognition in conversation: labels, tokenised conversations, batches, evaluation.

Batching: conversations are grouped by number of turns before being cut into batches (the
training loop then shuffles the batch order each epoch). The paper batches conversations as they
come; grouping by length means that a batch rarely waits on one long conversation, so far fewer
steps are spent on rows that have already ended, at no cost to what the model sees.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from turnformer.data.jsonl import refuse_selection_items
from turnformer.dialogue import Dialogue, DialogueError
from turnformer.models.dialogxl import ConversationBatch
from turnformer.plots import HEAD_TYPES, AttentionView
from turnformer.structure.packing import truncate_keeping_end_specials
from turnformer.tasks.metrics import PRIMARY_METRIC, erc_metrics

logger = logging.getLogger(__name__)

NEUTRAL = {"meld": "neutral", "dailydialog": "neutral", "emorynlp": "Neutral"}


@dataclass(frozen=True)
class EncodedConversation:
    id: str | None
    turn_ids: list[list[int]]  # [CLS] tokens [SEP] per turn
    speakers: list[int]
    labels: list[int]  # -100 where a turn has no label


@dataclass
class EncodeReport:
    truncated_utterances: int = 0
    unlabelled_utterances: int = 0


def kind_label(kind: str) -> str:
    """'an 'emotion' label', 'an 'act' label', 'a 'sentiment' label': the article of the kind's name."""
    return f"{'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind!r} label"


def label_set_from_data(dialogues: Sequence[Dialogue], kind: str) -> list[str]:
    """The labels of a user's file, most frequent first (ties by name), for files with no fixed set."""
    counts = Counter(label for d in dialogues for label in d.labels(kind) if label is not None)
    if not counts:
        raise DialogueError(f"no turn carries {kind_label(kind)}: nothing to learn")
    return [label for label, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def encode_conversations(
    dialogues: Sequence[Dialogue], tokenizer, label_kind: str, labels: Sequence[str], max_utterance_tokens: int
) -> tuple[list[EncodedConversation], EncodeReport]:
    """Tokenise every turn once ([CLS] text [SEP], cut at ``max_utterance_tokens``, counted)."""
    label_to_id = {label: i for i, label in enumerate(labels)}
    special = set(getattr(tokenizer, "all_special_ids", []))
    texts = [t.text for d in dialogues for t in d.turns]
    full = tokenizer(texts, add_special_tokens=True, verbose=False)["input_ids"] if texts else []
    report = EncodeReport()
    encoded, k = [], 0
    for d in dialogues:
        turn_ids, label_ids = [], []
        for turn in d.turns:
            ids = full[k]
            k += 1
            if len(ids) > max_utterance_tokens:
                report.truncated_utterances += 1
                ids = truncate_keeping_end_specials(ids, max_utterance_tokens, special)
            turn_ids.append(ids)
            label = turn.labels.get(label_kind)
            if label is None:
                report.unlabelled_utterances += 1
                label_ids.append(-100)
            elif label not in label_to_id:
                raise DialogueError(f"dialogue {d.id!r}: unknown {label_kind} label {label!r}; known: {', '.join(labels)}")
            else:
                label_ids.append(label_to_id[label])
        encoded.append(EncodedConversation(d.id, turn_ids, d.speaker_ids(), label_ids))
    return encoded, report


def make_batch(conversations: Sequence[EncodedConversation], pad_id: int) -> ConversationBatch:
    """One batch in both layouts (`ConversationBatch`): packed rows for one pass, one tensor per utterance index
    for the recurrence."""
    batch = len(conversations)
    n_turns = max(len(c.turn_ids) for c in conversations)
    speakers = torch.full((batch, n_turns), -1, dtype=torch.long)
    labels = torch.full((batch, n_turns), -100, dtype=torch.long)
    turn_lengths = torch.zeros((batch, n_turns), dtype=torch.long)
    packed = torch.full((batch, max(sum(map(len, c.turn_ids)) for c in conversations)), pad_id, dtype=torch.long)
    for b, c in enumerate(conversations):
        row = [token for turn in c.turn_ids for token in turn]
        packed[b, : len(row)] = torch.tensor(row, dtype=torch.long)
        turn_lengths[b, : len(c.turn_ids)] = torch.tensor([len(turn) for turn in c.turn_ids])
        speakers[b, : len(c.speakers)] = torch.tensor(c.speakers, dtype=torch.long)
        labels[b, : len(c.labels)] = torch.tensor(c.labels, dtype=torch.long)
    steps = []
    for t in range(n_turns):
        width = max((len(c.turn_ids[t]) for c in conversations if t < len(c.turn_ids)), default=1)
        ids = torch.full((batch, width), pad_id, dtype=torch.long)
        for b, c in enumerate(conversations):
            if t < len(c.turn_ids):
                ids[b, : len(c.turn_ids[t])] = torch.tensor(c.turn_ids[t])
        steps.append(ids)
    return ConversationBatch(steps, speakers, labels, [len(c.turn_ids) for c in conversations], [c.id for c in conversations],
                             packed, turn_lengths)


def make_batches(conversations: Sequence[EncodedConversation], batch_size: int, pad_id: int) -> list[ConversationBatch]:
    ordered = sorted(conversations, key=lambda c: len(c.turn_ids))
    return [make_batch(ordered[i : i + batch_size], pad_id) for i in range(0, len(ordered), batch_size)]


def evaluate(model, batches: Sequence[ConversationBatch], labels: Sequence[str], dataset: str) -> dict:
    """The dataset's metrics (weighted F1, or micro F1 without neutral for DailyDialog) on batches."""
    from turnformer.training import predict_all

    gold, pred = predict_all(model, batches)
    names = list(labels)
    neutral = NEUTRAL.get(dataset)
    return erc_metrics(
        [names[i] for i in gold], [names[i] for i in pred], names,
        primary=PRIMARY_METRIC.get(dataset, "weighted_f1"), neutral_label=neutral if neutral in names else None,
    )


SPLITS = ("train", "validation", "test")


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise DialogueError(f"unknown split {split!r}; known: {', '.join(SPLITS)}")


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
    from turnformer.data import read_jsonl

    splits = {}
    for split in only:
        path = split_file(recipe, split)
        splits[split] = read_jsonl(path, label_sets)  # a list, with the load report kept for error hints
        if not splits[split]:
            raise DialogueError(f"{path}: no conversations in the {split} file")
    return splits


def require_labels(dialogues: Sequence[Dialogue], kind: str, path, split: str) -> None:
    """Fail, naming the file, where no turn of a split carries a label of `kind`: nothing to learn or to score."""
    if not any(kind in turn.labels for d in dialogues for turn in d.turns):
        why = "nothing to learn" if split == "train" else f"the {split} split cannot be scored"
        present = sorted({other for d in dialogues for turn in d.turns for other in turn.labels})
        report = getattr(dialogues, "report", None)  # a file's conversations as read carry their load report
        ignored = list(report.ignored_fields)[:5] if report else []
        if present:
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


def load_erc_data(recipe: dict, data_dir=None, only: Sequence[str] = SPLITS,
                  labels: Sequence[str] | None = None) -> tuple[dict[str, list[Dialogue]], list[str] | None]:
    """The splits of a recipe's dataset (all three, or those in ``only``), and its label set: fixed by the
    benchmark, or, for a user's file, ``labels`` (a trained model's), the recipe's, or those seen in its
    training split (None when that split is not read)."""
    from turnformer.data import load_split

    kind = recipe.get("label_kind", "emotion")
    if recipe["dataset"] == "file":
        labels = list(labels or recipe.get("labels") or [])
        splits = {}
        if not labels and "train" in only:
            splits = read_split_files(recipe, ["train"])
            require_labels(splits["train"], kind, recipe["train_file"], "train")
            labels = label_set_from_data(splits["train"], kind)
        # every other split is checked against the training labels as it is read: an error names its file and line
        rest = [split for split in only if split not in splits]
        splits.update(read_split_files(recipe, rest, {kind: labels} if labels else None))
        for split in rest:  # a split without a label would be read, encoded and trained on before failing to score
            require_labels(splits[split], kind, recipe[f"{split}_file"], split)
        for split in only:
            warn_unlabelled(splits[split], kind, recipe[f"{split}_file"])
            refuse_selection_items(splits[split], recipe[f"{split}_file"], f"a model that labels every utterance with {kind_label(kind)}")
        return {split: splits[split] for split in only}, labels or None
    loaded = {split: load_split(recipe["dataset"], split, data_dir) for split in only}
    return {s: list(ds.dialogues) for s, ds in loaded.items()}, next(iter(loaded.values())).label_set(kind)


ERC_MODELS = ("dialogxl", "concat-context", "segment-recurrence")


def model_family(model_id: str) -> str:
    """The class behind a model id: DialogXL's variants (``dialogxl-no-speaker``, ``dialogxl-speaker-emb``,
    ...) are DialogXL with other head counts or settings in their recipe."""
    if model_id == "dialogxl" or model_id.startswith("dialogxl-"):
        return "dialogxl"
    if model_id in ERC_MODELS:
        return model_id
    raise DialogueError(f"unknown emotion-recognition model {model_id!r}; known: {', '.join(ERC_MODELS)} (and dialogxl-* variants)")


def build_erc_model(model_id: str, model_config: dict, labels: list[str], backbone: str):
    """An ERC model (DialogXL, one of its variants, or a baseline) on a pretrained backbone (weights
    from its package or folder), and its tokenizer."""
    from turnformer.backbones import load_backbone
    from turnformer.models.baselines import build_baseline
    from turnformer.models.dialogxl import DialogXL, DialogXLConfig

    if model_family(model_id) != "dialogxl":
        return build_baseline(model_id, model_config, labels, backbone)
    encoder, tokenizer = load_backbone(backbone)
    config = DialogXLConfig.from_dict({**model_config, "num_labels": len(labels), "backbone": backbone})
    positions = getattr(encoder.config, "max_position_embeddings", None)  # None: relative positions (XLNet)
    if positions is not None and config.max_utterance_tokens > positions:
        raise DialogueError(f"model_config.max_utterance_tokens = {config.max_utterance_tokens} is over the backbone's {positions} positions")
    model = DialogXL(config, encoder, tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id)
    return model, tokenizer


def prepare_erc(recipe: dict, data_dir=None, limits: dict[str, int] | None = None):
    """Model, tokenizer, labels and batches of every split for an ERC recipe.

    ``limits`` keeps the first N dialogues of the named splits (quick runs, the demo, tests); it is
    recorded in the run's description so no result is mistaken for a full one.
    """
    kind = recipe.get("label_kind", "emotion")
    splits, labels = load_erc_data(recipe, data_dir)
    apply_limits(splits, limits, kind)
    model, tokenizer = build_erc_model(recipe["model"], recipe["model_config"], labels, recipe["backbone"])
    batch_size = int(recipe["train"].get("batch_size", 4))
    batches, reports = {}, {}
    for split, dialogues in splits.items():
        encoded, reports[split] = encode_conversations(dialogues, tokenizer, kind, labels, model.config.max_utterance_tokens)
        if split == "train":  # a conversation without a label teaches nothing, and a batch of such would give a NaN loss
            learnable = [c for c in encoded if any(label != -100 for label in c.labels)]
            if len(learnable) < len(encoded):
                logger.warning("%d of %d training conversations carry no %r label: skipped, nothing to learn from them",
                               len(encoded) - len(learnable), len(encoded), kind)
            encoded = learnable
        batches[split] = make_batches(encoded, batch_size, tokenizer.pad_token_id)
    return model, tokenizer, labels, batches, reports


def train_erc(recipe: dict, out_dir, seed: int, data_dir=None, resume: bool = False,
              time_budget_s: float | None = None, limits: dict[str, int] | None = None):
    """Fine-tune an ERC recipe; returns the `TrainResult` (test score at the best validation epoch)."""
    from turnformer.recipes import recipe_train_config
    from turnformer.training import set_seed, train

    set_seed(seed)  # before the classifier is initialised
    model, _, labels, batches, reports = prepare_erc(recipe, data_dir, limits)
    check_training_memory(model, batches["train"])
    settings = recipe["train"]
    config = recipe_train_config(settings, {"epochs": 4, "lr": 2e-5, "save_every_steps": 50}, seed=seed,
                                 out_dir=out_dir, resume=resume, time_budget_s=time_budget_s)
    run_info = {"recipe": recipe, "seed": seed, "limits": limits, "labels": labels,
                "encode_reports": {s: vars(r) for s, r in reports.items()}}
    dataset = recipe["dataset"]
    return train(
        model, batches["train"], lambda m, split: evaluate(m, batches[split], labels, dataset), config,
        label_map={"label_kind": recipe.get("label_kind", "emotion"), "labels": labels}, run_info=run_info,
    )


def available_memory() -> tuple[int | None, str]:
    """(bytes free for training, where): the GPU's free memory where there is one, else the machine's available memory
    (None where it cannot be read)."""
    if torch.cuda.is_available():
        return torch.cuda.mem_get_info()[0], "the GPU"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024, "this machine"
    except OSError:
        pass
    return None, "this machine"


def check_training_memory(model, batches: Sequence[ConversationBatch]) -> None:
    """Refuse, before any training, a setting whose step would not fit the memory available (the kernel would kill
    the run without a word), naming the settings that bound it."""
    estimate = getattr(model, "training_memory_bytes", None)
    if estimate is None or not batches:
        return
    batch_size = max(len(b.lengths) for b in batches)
    longest = max(int(b.turn_lengths.sum(1).max()) if b.turn_lengths is not None else 0 for b in batches)
    need, (free, where) = estimate(batch_size, longest), available_memory()
    if free is not None and need > free:
        raise DialogueError(
            f"one training step would take about {need / 2**30:.1f} GB (batches of {batch_size} conversations, the longest "
            f"{longest} tokens, encoded {model.config.chunk_tokens} tokens at a time against a memory of {model.config.mem_len}), "
            f"and {where} has {free / 2**30:.1f} GB available: lower train.batch_size or model_config.chunk_tokens "
            f"(e.g. --set model_config.chunk_tokens=128), which changes no number")


def checkpoint_paths(checkpoint) -> tuple[Path, dict]:
    """A run folder or one of its checkpoints (best/, last/) -> (weights folder, run.json)."""
    from turnformer.training import MODEL_FILE

    checkpoint = Path(checkpoint)
    if not checkpoint.exists():
        raise DialogueError(f"{checkpoint}: no such run or checkpoint folder")
    if not checkpoint.is_dir():
        raise DialogueError(f"{checkpoint}: a file; give the run folder (or its best/ or last/ checkpoint)")
    weights = checkpoint / "best" if (checkpoint / "best").is_dir() else checkpoint
    if (checkpoint / "run.json").exists() and not (weights / MODEL_FILE).exists():
        latest = " (its latest is in last/: pass that folder to use it)" if (checkpoint / "last").is_dir() else ""
        raise DialogueError(f"{checkpoint}: a run without a best checkpoint yet: training has not finished an epoch{latest}")
    for folder in (checkpoint, checkpoint.parent):
        if (folder / "run.json").exists():
            try:
                run = json.loads((folder / "run.json").read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise DialogueError(f"{folder / 'run.json'}: corrupt run description: {e}") from None
            if problem := _run_description_problem(run):
                raise DialogueError(f"{folder / 'run.json'}: corrupt run description: {problem}")
            return weights, run
    raise DialogueError(f"{checkpoint}: not a turnformer run (no run.json here or one level up)")


def _run_description_problem(run) -> str | None:
    """What a run.json lacks that loading its model needs (None when nothing): its recipe (with the model id) and,
    for a classifier, its labels."""
    if not isinstance(run, dict) or not isinstance(run.get("recipe"), dict):
        return "expected a JSON object with a 'recipe' object"
    if not isinstance(run["recipe"].get("model"), str):
        return "recipe.model: missing, or not a model id"
    labels = run.get("labels")
    if run["recipe"].get("task", "erc") in ("erc", "dialogue-act") and (
            not isinstance(labels, list) or not labels or not all(isinstance(label, str) for label in labels)):
        return f"labels: expected the model's list of label names, got {labels!r:.60}"
    return None


def load_trained(checkpoint):
    """A trained ERC model from a run folder (its best/ checkpoint) or a checkpoint folder:
    (model in eval mode, tokenizer, run description with the recipe and labels)."""
    from turnformer.training import load_checkpoint

    weights, run = checkpoint_paths(Path(checkpoint))
    recipe = run["recipe"]
    model, tokenizer = build_erc_model(recipe["model"], recipe["model_config"], run["labels"], recipe["backbone"])
    load_checkpoint(weights, model)
    return model.eval(), tokenizer, run


@torch.no_grad()
def attention_view(model, tokenizer, dialogue: Dialogue, utterance: int) -> AttentionView:
    """Run DialogXL (`turnformer.models.dialogxl.DialogXL`) over ``dialogue`` up to ``utterance``
    and read the last layer's attention of that utterance's [CLS] token (the DialogXL paper's Figure 5)."""
    if not 0 <= utterance < len(dialogue):
        raise ValueError(f"utterance {utterance} out of range: dialogue {dialogue.id!r} has {len(dialogue)} utterances (0..{len(dialogue) - 1})")
    was_training = model.training
    model.eval()
    (encoded,), _ = encode_conversations([dialogue], tokenizer, "", [], model.config.max_utterance_tokens)
    batch = make_batch([encoded], tokenizer.pad_token_id).to(next(model.parameters()).device)
    memory = model.empty_memory(1)
    for t in range(utterance):
        _, memory, _ = model.step(batch.steps[t], t, batch.speakers[:, t], memory)
    ids = batch.steps[utterance]
    _, _, out = model.step(ids, utterance, batch.speakers[:, utterance], memory, output_attentions=True)
    model.train(was_training)

    query = int((ids[0] == model.special_ids[0]).int().argmax())
    row = out.attentions[-1][0, :, query].cpu()  # [heads, memory + current keys]
    length = ids.shape[1]
    key_utterance = torch.cat([memory.meta.utterance[0].cpu(), torch.full((length,), utterance)])
    key_position = torch.cat([memory.meta.position[0].cpu(), torch.arange(length)])
    real = torch.cat([memory.meta.is_real[0].cpu(), (ids[0] != tokenizer.pad_token_id).cpu()])
    pairs = list(zip(key_utterance[real].tolist(), key_position[real].tolist()))
    tokens = tokenizer.convert_ids_to_tokens([encoded.turn_ids[u][p] for u, p in pairs])
    weights, counts, start = {}, {}, 0
    for kind, n in zip(HEAD_TYPES, model.config.heads):
        counts[kind] = n
        if n:
            weights[kind] = row[start : start + n].mean(0)[real].tolist()
        start += n
    return AttentionView(
        dialogue=dialogue.id, query_utterance=utterance, tokens=tokens, utterance=[u for u, _ in pairs],
        speaker=[dialogue.turns[u].speaker for u, _ in pairs], weights=weights, head_counts=counts,
    )
