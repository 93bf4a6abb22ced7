"""Emotion recognition in conversation: labels, tokenised conversations, batches, evaluation, prediction, and the
task as the command line and a server reach it (`TASK`).

Batching: conversations are grouped by length in tokens (then in turns) before being cut into batches (the
training loop then shuffles the batch order each epoch). The paper batches conversations as they
come; grouping by length means that a batch's rows are about equally long, so little of a step is spent on
padding, at no cost to what the model sees. (Grouped by number of turns, as they were until 2026-11-30, DailyDialog's
training batches of 16 held 1.82 padded token slots for every real token; grouped by tokens, 1.01:
`benchmarks/erc_batch_padding.py`.)
"""

from __future__ import annotations

import logging
import numbers
import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Sequence

import torch

from turnformer.backbones import load_backbone
from turnformer.dialogue import Dialogue, DialogueError, as_dialogue, texts_to_read
from turnformer.models.baselines import BASELINES, build_baseline
from turnformer.models.dialogxl import ConversationBatch, DialogXL, DialogXLConfig, DialogXLSession
from turnformer.plots import HEAD_TYPES, AttentionView
from turnformer.recipes import recipe_train_config
from turnformer.structure.packing import closing_special_ids, conversations, truncate_keeping_end_specials
from turnformer.tasks.base import ANNOTATE, ATTENTION, STREAM, ModelBuilder, Predictions
from turnformer.tasks.common import (SPLITS, apply_limits, check_split, checkpoint_paths, conversation_blocks, label_predictions,
                                     built_from_run_file, load_labelled_data, mark_cut, model_builder,
                                     resumed_labels, run_description, say_other_labels, scored_run, upgrade_run,
                                     utterance_counts)
from turnformer.tasks.metrics import PRIMARY_METRIC, confusion_matrix_plot, erc_metrics
from turnformer.training import load_checkpoint, predict_all, progress, set_seed, train

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


def encode_conversations(
    dialogues: Sequence[Dialogue], tokenizer, label_kind: str, labels: Sequence[str], max_utterance_tokens: int
) -> tuple[list[EncodedConversation], EncodeReport]:
    """Tokenise every turn once ([CLS] text [SEP], cut at ``max_utterance_tokens``, counted; a huge text is cut
    before it is tokenised, `text_to_read`)."""
    label_to_id = {label: i for i, label in enumerate(labels)}
    special = closing_special_ids(tokenizer)
    texts, cut = texts_to_read((t.text for d in dialogues for t in d.turns), max_utterance_tokens)
    full = tokenizer(texts, add_special_tokens=True, verbose=False)["input_ids"] if texts else []
    report = EncodeReport()
    encoded, k = [], 0
    for d in dialogues:
        turn_ids, label_ids = [], []
        for turn in d.turns:
            ids, was_cut = full[k], cut[k]
            k += 1
            if len(ids) > max_utterance_tokens or was_cut:
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


def batch_order(conversation: EncodedConversation) -> tuple[int, int]:
    """The key `make_batches` groups conversations by: tokens, then turns."""
    return sum(map(len, conversation.turn_ids)), len(conversation.turn_ids)


def make_batches(conversations: Sequence[EncodedConversation], batch_size: int, pad_id: int) -> list[ConversationBatch]:
    """Batches of `batch_size` conversations of about the same length (the module docstring), in that order."""
    ordered = sorted(conversations, key=batch_order)
    return [make_batch(ordered[i : i + batch_size], pad_id) for i in range(0, len(ordered), batch_size)]


def evaluate(model, batches: Sequence[ConversationBatch], labels: Sequence[str], dataset: str) -> dict:
    """The dataset's metrics (weighted F1, or micro F1 without neutral for DailyDialog) on batches."""
    gold, pred = predict_all(model, batches)
    names = list(labels)
    neutral = NEUTRAL.get(dataset)
    return erc_metrics(
        [names[i] for i in gold], [names[i] for i in pred], names,
        primary=PRIMARY_METRIC.get(dataset, "weighted_f1"), neutral_label=neutral if neutral in names else None,
    )


def load_erc_data(recipe: dict, data_dir=None, only: Sequence[str] = SPLITS,
                  labels: Sequence[str] | None = None) -> tuple[dict[str, list[Dialogue]], list[str] | None]:
    """`load_labelled_data` of the recipe's ``label_kind``, emotions unless it names another."""
    return load_labelled_data(recipe, recipe.get("label_kind", "emotion"), data_dir, only, labels)


def build_dialogxl(model_config: dict, labels: list[str], backbone: str):
    """DialogXL on a pretrained backbone (weights from its package or folder), and its tokenizer. Its variants
    (``dialogxl-no-speaker``, ``dialogxl-memory-bias``, ...) are the settings of their recipes' model config."""
    encoder, tokenizer = load_backbone(backbone)
    config = DialogXLConfig.from_recipe(model_config, num_labels=len(labels), backbone=backbone)
    positions = getattr(encoder.config, "max_position_embeddings", None)  # None: relative positions (XLNet)
    if positions is not None and config.max_utterance_tokens > positions:
        raise DialogueError(f"model_config.max_utterance_tokens = {config.max_utterance_tokens} is over the backbone's {positions} positions")
    least = tokenizer.num_special_tokens_to_add() + 1  # an utterance's special tokens and one word
    if config.max_utterance_tokens < least:
        raise DialogueError(f"model_config.max_utterance_tokens = {config.max_utterance_tokens}: at least {least} (the "
                            f"{least - 1} special token(s) of an utterance and a word)")
    model = DialogXL(config, encoder, tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id)
    return model, tokenizer


# model id -> builder: (model config, labels, backbone name) -> (model, tokenizer).
MODELS: dict[str, ModelBuilder] = {
    **dict.fromkeys(("dialogxl", "dialogxl-memory-bias", "dialogxl-memory-grad", "dialogxl-no-global", "dialogxl-no-listener",
                     "dialogxl-no-local", "dialogxl-no-speaker", "dialogxl-no-speaker-listener", "dialogxl-speaker-emb"),
                    build_dialogxl),
    "concat-context": partial(build_baseline, "concat-context"),
    "segment-recurrence": partial(build_baseline, "segment-recurrence"),
}
ERC_MODELS = ("dialogxl", "concat-context", "segment-recurrence")  # the three models; the other ids are DialogXL's variants
TITLE = "emotion-recognition (erc)"


def check_model_config(recipe: dict) -> None:
    """The recipe's model and [model_config] checked before any data is read (the labels' count stood in for)."""
    model_builder(MODELS, recipe["model"], TITLE)
    config_class = BASELINES[recipe["model"]][1] if recipe["model"] in BASELINES else DialogXLConfig
    config_class.check_recipe(recipe["model_config"], num_labels=2, backbone=recipe["backbone"])


def build_erc_model(model_id: str, model_config: dict, labels: list[str], backbone: str):
    """The model `model_id` names (DialogXL, one of its variants, or a baseline) and its tokenizer."""
    return model_builder(MODELS, model_id, TITLE)(model_config, labels, backbone)


def prepare_erc(recipe: dict, data_dir=None, limits: dict[str, int] | None = None, labels: Sequence[str] | None = None):
    """Model, tokenizer, labels and batches of every split for an ERC recipe.

    ``limits`` keeps the first N dialogues of the named splits (quick runs, the demo, tests); it is
    recorded in the run's description so no result is mistaken for a full one. ``labels``: a user's files' label set
    (a resumed run's), instead of the one read from the training file.
    """
    check_model_config(recipe)
    kind = recipe.get("label_kind", "emotion")
    splits, labels = load_erc_data(recipe, data_dir, labels=labels)
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
    set_seed(seed)  # before the classifier is initialised
    model, _, labels, batches, reports = prepare_erc(recipe, data_dir, limits, resumed_labels(out_dir, resume))
    settings = recipe["train"]
    check_training_memory(model, batches["train"], settings.get("mixed_precision"))
    warn_few_updates(batches["train"])
    config = recipe_train_config(settings, {"epochs": 4, "lr": 2e-5, "save_every_steps": 50}, seed=seed,
                                 out_dir=out_dir, resume=resume, time_budget_s=time_budget_s)
    run_info = run_description(recipe, seed, limits, labels, {s: vars(r) for s, r in reports.items()})
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


FEW_UPDATES, LONG_CONVERSATION = 10, 100  # an epoch of fewer updates, with a conversation this long, is said


def warn_few_updates(batches: Sequence[ConversationBatch]) -> None:
    """Say, before training, that an epoch makes only a few updates where a conversation is long: a conversation is one
    example however long it is, so a file of a few long conversations (one transcript of thousands of utterances, say)
    trained a step an epoch without a word. (A few short conversations make few updates too, and look it.)"""
    if 0 < len(batches) < FEW_UPDATES and max(max(b.lengths) for b in batches) >= LONG_CONVERSATION:
        conversations = sum(len(b.lengths) for b in batches)
        utterances = sum(int((b.turn_lengths > 0).sum()) for b in batches)
        logger.warning("training makes %d update(s) an epoch: %d conversation(s) of %d utterances in batches of up to %d "
                       "(a conversation is one example, however long); for more, cut long conversations into parts "
                       "(each a conversation of its own), lower train.batch_size or train more epochs",
                       len(batches), conversations, utterances, max(len(b.lengths) for b in batches))


def check_training_memory(model, batches: Sequence[ConversationBatch], precision: str | None = None) -> None:
    """Refuse, before any training, a setting whose step would not fit the memory available (the kernel would kill
    the run without a word), naming the settings that bound it (the model's `training_memory`). `precision`: the run's
    mixed precision (None: accelerate's, ``ACCELERATE_MIXED_PRECISION``, else "no")."""
    estimate = getattr(model, "training_memory", None)
    if estimate is None or not batches:
        return
    precision = precision or os.environ.get("ACCELERATE_MIXED_PRECISION") or "no"
    (need, setting, advice), (free, where) = estimate(batches, precision), available_memory()
    if free is not None and need > free:
        raise DialogueError(f"one training step would take about {need / 2**30:.1f} GB ({setting}, mixed precision "
                            f"{precision}), and {where} has {free / 2**30:.1f} GB available: {advice}")


def load_trained(checkpoint):
    """A trained ERC model from a run folder (its best/ checkpoint) or a checkpoint folder:
    (model in eval mode, tokenizer, run description with the recipe and labels)."""
    weights, run = checkpoint_paths(Path(checkpoint), (TASK.name,), TASK.name)
    run = upgrade_run(run, MODELS)
    recipe = run["recipe"]
    with built_from_run_file(weights):
        model, tokenizer = build_erc_model(recipe["model"], recipe["model_config"], run["labels"], recipe["backbone"])
    load_checkpoint(weights, model)
    return model.eval(), tokenizer, run


def evaluate_split(model, tokenizer, run: dict, split: str, data_dir=None, limit: int | None = None,
                   input_file: Path | None = None, confusion: Path | None = None) -> dict:
    """The metrics of a trained model on a split of its recipe's data (its first `limit` conversations) or on a user's
    labelled `input_file`, and with `confusion` its confusion matrix drawn there. The primary metric stays the one of
    the dataset it was trained on (DailyDialog's micro F1 without neutral, on a file too)."""
    trained_on = run["recipe"]["dataset"]
    run = scored_run(run, input_file)
    recipe, labels = run["recipe"], run["labels"]
    check_split(split, recipe)
    kind = recipe.get("label_kind", "emotion")
    splits, _ = load_erc_data(recipe, data_dir, only=[split], labels=labels)
    apply_limits(splits, {split: limit} if limit else None, kind, "--limit-dialogues")
    scored = splits[split]
    encoded, report = encode_conversations(scored, tokenizer, kind, labels, model.config.max_utterance_tokens)
    batches = make_batches(encoded, 8, tokenizer.pad_token_id)
    metrics = evaluate(model, batches, labels, trained_on)
    if confusion is not None:
        gold, pred = predict_all(model, batches)
        confusion_matrix_plot([labels[i] for i in gold], [labels[i] for i in pred], labels, confusion)
    return {"conversations": len(scored), **utterance_counts(scored, kind), "truncated_utterances": report.truncated_utterances,
            **{k: v for k, v in metrics.items() if k != "per_class"}}


def predict_dialogues(model, tokenizer, dialogues: Sequence[Dialogue], labels: Sequence[str], max_conversations: int = 16,
                      max_utterances: int = 256, desc: str = "predict") -> list[list[dict]]:
    """Per dialogue, per turn: {"label", "probabilities"}. Gold labels are not needed. Consecutive conversations are
    read together, at most `max_conversations` of at most `max_utterances` utterances in all (a longer one alone):
    a conversation's answers do not depend on the others of its batch (tested), and a file of many short ones is
    not read one forward each. `dialogues`: `Dialogue`s or lists of turns (`conversations`)."""
    dialogues = conversations(dialogues)
    groups = prediction_groups([len(d) for d in dialogues], max_conversations, max_utterances)
    per_turn = []
    for group in progress(groups, desc, unit="utterance", sizes=[sum(len(dialogues[i]) for i in g) for g in groups]):
        encoded, _ = encode_conversations([dialogues[i] for i in group], tokenizer, "", labels, model.config.max_utterance_tokens)
        probs = model.probabilities(make_batch(encoded, tokenizer.pad_token_id))
        for row, i in zip(probs, group):
            per_turn.append([{"label": labels[int(p.argmax())], "probabilities": dict(zip(labels, p.tolist()))}
                             for p in row[: len(dialogues[i])]])
    return per_turn


def prediction_groups(lengths: Sequence[int], max_conversations: int, max_utterances: int) -> list[list[int]]:
    """Consecutive indices of conversations of `lengths` utterances, cut into groups of at most `max_conversations`
    and `max_utterances` utterances in all; a conversation longer than that alone."""
    groups: list[list[int]] = []
    total = 0
    for i, n in enumerate(lengths):
        if not groups or len(groups[-1]) == max_conversations or total + n > max_utterances:
            groups.append([])
            total = 0
        groups[-1].append(i)
        total += n
    return groups


@torch.no_grad()
def attention_view(model, tokenizer, dialogue: Dialogue, utterance: int) -> AttentionView:
    """Run DialogXL (`turnformer.models.dialogxl.DialogXL`) over ``dialogue`` up to ``utterance``
    and read the last layer's attention of that utterance's [CLS] token (the DialogXL paper's Figure 5)."""
    dialogue = as_dialogue(dialogue)
    if isinstance(utterance, bool) or not isinstance(utterance, numbers.Integral):
        raise ValueError(f"utterance: expected an utterance's index (a whole number), got {utterance!r}")
    if not 0 <= utterance < len(dialogue):
        raise ValueError(f"utterance {utterance} out of range: dialogue {dialogue.id!r} has {len(dialogue)} utterances (0..{len(dialogue) - 1})")
    was_training = model.training
    model.eval()
    (encoded,), _ = encode_conversations([dialogue], tokenizer, "", [], model.config.max_utterance_tokens)
    batch = make_batch([encoded], tokenizer.pad_token_id).to(next(model.parameters()).device)
    memory = model.memory_after(batch, utterance)  # the utterances before, a chunk at a time (as `step` would leave it)
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


class EmotionRecognition:
    """Emotion recognition as a `turnformer.tasks.base.Task`: every utterance of a conversation gets an emotion.
    Beside the interface, `attention_view`: what DialogXL's head types attend to (the ``plot attention`` figure)."""

    name = "erc"
    title = TITLE
    labelled = True
    models = MODELS
    options = frozenset({"confusion"})
    command = "predict"
    session_class = DialogXLSession
    reader = "an emotion-recognition (erc) model, which labels every utterance of conversations"

    train = staticmethod(train_erc)
    load_trained = staticmethod(load_trained)
    evaluate = staticmethod(evaluate_split)
    attention_view = staticmethod(attention_view)

    def load_data(self, recipe: dict, data_dir=None, only: Sequence[str] = SPLITS) -> dict[str, list[Dialogue]]:
        return load_erc_data(recipe, data_dir, only)[0]

    def predict(self, model, tokenizer, run: dict, source: str, data_dir=None) -> Predictions:
        say_other_labels(source, run)
        return label_predictions(conversation_blocks(source, data_dir, self.reader),
                                 lambda dialogues, desc: self.annotate(model, tokenizer, run, dialogues, desc),
                                 run["recipe"].get("label_kind", "label"), model.config.max_utterance_tokens)

    def session(self, model, tokenizer, run: dict) -> DialogXLSession:
        """Streaming: one utterance at a time, each read with the memory of the ones before (DialogXL models only)."""
        if not isinstance(model, DialogXL):
            raise DialogueError(f"a {type(model).__name__} model reads whole conversations; streaming needs a DialogXL model")
        return DialogXLSession(model, tokenizer, run["labels"])

    def serves(self, model) -> frozenset[str]:
        """DialogXL streams and shows what its head types attend to; the baselines read whole conversations only."""
        return frozenset({STREAM, ANNOTATE, ATTENTION}) if isinstance(model, DialogXL) else frozenset({ANNOTATE})

    def annotate(self, model, tokenizer, run: dict, dialogues: Sequence[Dialogue], desc: str = "predict") -> list[list[dict]]:
        """Every utterance's emotion, each conversation in one pass (`predict_dialogues`), and whether the model read
        only its start (``truncated``)."""
        dialogues = conversations(dialogues)
        return mark_cut(predict_dialogues(model, tokenizer, dialogues, run["labels"], desc=desc), dialogues, tokenizer,
                        model.config.max_utterance_tokens, with_specials=True)

    def attention(self, model, tokenizer, run: dict, dialogue, utterance: int) -> dict:
        return attention_view(model, tokenizer, dialogue, utterance).to_json()


TASK = EmotionRecognition()
