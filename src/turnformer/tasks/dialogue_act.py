"""Dialogue act recognition: sub-dialogues, batches, offline and online prediction, training, streaming, and the
task as the command line and a server reach it (`TASK`).

Sub-dialogues (the paper's section 3.3): a conversation of n utterances is cut into ceil(n / W)
windows of W utterances; each window gets up to P utterances of context padding on each side (fewer
at the ends of the conversation: nothing is invented there). Only the W window utterances are
predicted and carry the loss (equation 8), so offline every utterance is predicted exactly once.
Online (section 3.2), utterance t is predicted from the sub-dialogue u_{t-P} .. u_t: only the past.

A recipe names ``window`` (W), ``context_padding`` (P) and ``setting`` ("offline" or "online": the
windows trained on and the primary metric); evaluation reports both settings' accuracy.
Batches hold ``batch_size`` consecutive sub-dialogues (so overlapping context utterances are encoded
once per batch); the training loop shuffles the batch order each epoch.

A model with a frozen utterance encoder (``utterance_encoder = "frozen"``) reads no tokens: its utterances are the
vectors of the sentence encoder its model config names (`turnformer.backbones.sentence_vectors`), computed once per
split and cached on disk, and for new conversations computed by the same encoder. Wherever a model's "tokenizer"
appears below, such a model has that `SentenceEncoder` instead.
"""

from __future__ import annotations

import logging
from collections import deque
from itertools import accumulate
from pathlib import Path
from typing import Sequence

import torch

from turnformer.backbones.sentence_vectors import SentenceEncoder, sentence_vectors
from turnformer.backbones.word_vectors import Word2VecSettings, word2vec_table
from turnformer.dialogue import Dialogue, DialogueError, as_dialogue, as_turn, is_blank, label_names, texts_to_read
from turnformer.models.lc_attention import (CONTEXTS, LCAttentionModel, LCConfig, LocalContextAttention, WindowBatch, build_frozen_lc_model,
                                            build_lc_model)
from turnformer.recipes import recipe_train_config
from turnformer.structure.packing import conversations
from turnformer.tasks.base import ANNOTATE, STREAM, ModelBuilder, Predictions
from turnformer.tasks.common import (SPLITS, apply_limits, check_split, checkpoint_paths, conversation_blocks, label_predictions,
                                     built_from_run_file, load_labelled_data, mark_cut, model_builder,
                                     resumed_labels, run_description, say_other_labels, scored_run, upgrade_run,
                                     utterance_counts)
from turnformer.tasks.metrics import accuracy
from turnformer.training import load_checkpoint, predict_all, progress, set_seed, train

logger = logging.getLogger(__name__)

TITLE = "dialogue-act"
DEFAULT_BACKBONE = "all-MiniLM-L6-v2"


def build_act_model(model_config: dict, labels: list[str], backbone: str = DEFAULT_BACKBONE, pretrained: bool = True):
    """A dialogue-act model as its model config describes it, and its tokenizer: utterances encoded by the backbone
    itself, fine-tuned (``utterance_encoder = "pretrained"``, under the ``lstm`` context layer), by an LSTM over the
    backbone's word embeddings (copied where ``pretrained``) under the ``context`` layer, or by the backbone frozen,
    its sentence vectors projected under the ``context`` layer (``utterance_encoder = "frozen"``; instead of a
    tokenizer, the `SentenceEncoder` that computes those vectors)."""
    if model_config.get("utterance_encoder") == "frozen":
        name = model_config.get("sentence_encoder", "")
        if name != backbone:
            raise DialogueError(f"model_config.sentence_encoder = {name!r} but backbone = {backbone!r}: a frozen utterance "
                                "encoder is the recipe's backbone, named in both")
        encoder = SentenceEncoder(name)
        return build_frozen_lc_model(model_config, labels, encoder.dim), encoder
    if model_config.get("utterance_encoder") == "pretrained":
        if model_config.get("context", "lstm") != "lstm":
            raise DialogueError(f"model_config.context = {model_config['context']!r}: a pretrained utterance encoder is "
                                "followed by the lstm context layer")
        return build_lc_model("minilm-utterance", model_config, labels, backbone, pretrained)
    context = model_config.get("context", LCConfig.context)
    if context not in CONTEXTS:  # a setting, not a model id, to the user
        raise DialogueError(f"model_config.context = {context!r}; known: {', '.join(CONTEXTS)}")
    return build_lc_model(context, model_config, labels, backbone, pretrained)


# model id -> builder: (model config, labels, backbone name, pretrained) -> (model, tokenizer). The ``-frozen-mpnet``
# ids: the context encoders over all-mpnet-base-v2's frozen sentence vectors, and those vectors alone.
MODELS: dict[str, ModelBuilder] = dict.fromkeys(("lc-attention", "lstm", "lstm-blstm", "lstm-attention", "minilm-utterance",
                                                 "lc-attention-frozen-mpnet", "lstm-blstm-frozen-mpnet",
                                                 "lstm-attention-frozen-mpnet", "frozen-mpnet-utterance"), build_act_model)
DIALOGUE_ACT_MODELS = tuple(MODELS)


def build_dialogue_act_model(recipe: dict, labels: list[str], pretrained: bool = True):
    """The model a dialogue-act recipe names, and its tokenizer."""
    build = model_builder(MODELS, recipe["model"], TITLE)
    return build(recipe.get("model_config", {}), labels, recipe.get("backbone", DEFAULT_BACKBONE), pretrained)


def make_windows(n: int, window: int, padding: int, online: bool = False) -> list[tuple[int, int, int, int]]:
    """Sub-dialogues of a conversation of ``n`` utterances as (start, end, target_start, target_end),
    half-open: utterances start..end-1 are in it, target_start..target_end-1 are predicted.
    Offline: windows of ``window`` targets with ``padding`` utterances each side; online: one target
    per utterance t with the ``padding`` utterances before it."""
    if window < 1 or padding < 0:
        raise ValueError(f"need window >= 1 and padding >= 0, got W={window}, P={padding}")
    if online:
        return [(max(0, t - padding), t + 1, t, t + 1) for t in range(n)]
    return [(max(0, s - padding), min(n, s + window + padding), s, min(n, s + window)) for s in range(0, n, window)]


def encode_dialogues(dialogues: Sequence[Dialogue], tokenizer, labels: Sequence[str], max_tokens: int,
                     label_kind: str = "act") -> tuple[list[list[list[int]]], list[list[int]], dict]:
    """Per dialogue: WordPiece ids per turn (`word_pieces`) and label ids per turn (-100 where unlabelled); plus a
    report."""
    ids, report = word_pieces([t.text for d in dialogues for t in d.turns], tokenizer, max_tokens)
    return per_dialogue(ids, dialogues), encode_labels(dialogues, labels, label_kind, report), report


def encode_for(model: LCAttentionModel, tokenizer, dialogues: Sequence[Dialogue], labels: Sequence[str],
               label_kind: str = "act", cache_as: tuple[str, str] | None = None) -> tuple[list, list[list[int]], dict]:
    """Per dialogue, what the model's utterance encoder reads of each turn (`utterance_inputs`: WordPiece ids, or
    sentence vectors [turns, D]); label ids per turn; a report."""
    inputs, report = utterance_inputs(model, tokenizer, [t.text for d in dialogues for t in d.turns], cache_as)
    return per_dialogue(inputs, dialogues), encode_labels(dialogues, labels, label_kind, report), report


def utterance_reader(model: LCAttentionModel, tokenizer) -> tuple[object, int, bool]:
    """How much of an utterance the model's utterance encoder reads: (its tokenizer, the most word pieces it reads,
    whether they count the special tokens), for `mark_cut`."""
    if model.config.utterance_encoder == "frozen":
        return tokenizer.tokenizer, tokenizer.pooling.max_length, True
    return tokenizer, model.config.max_utterance_tokens, False


def utterance_inputs(model: LCAttentionModel, tokenizer, texts: Sequence[str], cache_as: tuple[str, str] | None = None):
    """What the model's utterance encoder reads of each text: its WordPiece ids (`word_pieces`), or with a frozen
    sentence encoder (``tokenizer`` is then its `SentenceEncoder`) the vectors [N, D], read from or written to the
    cache where ``cache_as`` names the (dataset, split) the texts are; and a report (truncated: longer than read)."""
    if model.config.utterance_encoder != "frozen":
        return word_pieces(texts, tokenizer, model.config.max_utterance_tokens)
    if cache_as is not None:
        vectors, truncated = sentence_vectors(tokenizer, texts, *cache_as)
    else:
        vectors, truncated = tokenizer.encode(texts), tokenizer.truncated(texts)
    return vectors, {"truncated_utterances": truncated, "unlabelled_utterances": 0, "empty_utterances": sum(map(is_blank, texts))}


def word_pieces(texts: Sequence[str], tokenizer, max_tokens: int) -> tuple[list[list[int]], dict]:
    """WordPiece ids of each text (no special tokens, at most ``max_tokens``; a huge text cut before it is tokenised,
    `text_to_read`; a text with no word piece becomes [UNK]), and a report that counts both cases."""
    report = {"truncated_utterances": 0, "unlabelled_utterances": 0, "empty_utterances": 0}
    token_ids = []
    read, cut = texts_to_read(texts, max_tokens)
    for ids, was_cut in zip(tokenizer(read, add_special_tokens=False, verbose=False)["input_ids"] if read else [], cut):
        if not ids:
            report["empty_utterances"] += 1
            ids = [tokenizer.pad_token_id if tokenizer.unk_token_id is None else tokenizer.unk_token_id]  # byte-level BPE: no unknown
        if len(ids) > max_tokens or was_cut:
            report["truncated_utterances"] += 1
            ids = ids[:max_tokens]
        token_ids.append(ids)
    return token_ids, report


def per_dialogue(inputs: Sequence, dialogues: Sequence[Dialogue]) -> list:
    """The dialogues' turns' inputs, in one sequence (a list, or a tensor [turns, D]), cut into one part per dialogue."""
    ends = list(accumulate(len(d.turns) for d in dialogues))
    return [inputs[end - len(d.turns) : end] for d, end in zip(dialogues, ends)]


def encode_labels(dialogues: Sequence[Dialogue], labels: Sequence[str], label_kind: str, report: dict) -> list[list[int]]:
    """Per dialogue, per turn: its label's id, -100 where unlabelled (counted in ``report``); an unknown label is an error."""
    label_to_id = {label: i for i, label in enumerate(labels)}
    ids = []
    for d in dialogues:
        ys = []
        for turn in d.turns:
            label = turn.labels.get(label_kind)
            if label is None:
                report["unlabelled_utterances"] += 1
            elif label not in label_to_id:
                raise DialogueError(f"dialogue {d.id!r}: unknown {label_kind} label {label!r}; known: {', '.join(labels)}")
            ys.append(-100 if label is None else label_to_id[label])
        ids.append(ys)
    return ids


def make_batches(token_ids: Sequence[Sequence], label_ids: list[list[int]], window: int, padding: int,
                 batch_size: int, pad_id: int, online: bool = False, labelled_only: bool = False) -> list[WindowBatch]:
    """All sub-dialogues of the dialogues, in order, ``batch_size`` per batch. ``token_ids``: per dialogue, per turn
    its WordPiece ids, or its sentence vector [D] (what `encode_for` gives). With `labelled_only` (training), a
    sub-dialogue none of whose targets has a label is left out: it teaches nothing, and a batch of such alone would
    give a NaN loss."""
    spans = [(d, span) for d, turns in enumerate(token_ids) for span in make_windows(len(turns), window, padding, online)]
    if labelled_only:
        kept = [(d, span) for d, span in spans if any(y != -100 for y in label_ids[d][span[2] : span[3]])]
        if len(kept) < len(spans):
            logger.warning("%d of %d training sub-dialogues predict only unlabelled utterances: left out, nothing to "
                           "learn from them", len(spans) - len(kept), len(spans))
        spans = kept
    return [_batch(spans[i : i + batch_size], token_ids, label_ids, pad_id) for i in range(0, len(spans), batch_size)]


def _batch(spans, token_ids, label_ids, pad_id) -> WindowBatch:
    rows: dict[tuple[int, int], int] = {}
    length = max(end - start for _, (start, end, _, _) in spans)
    slots = torch.full((len(spans), length), -1, dtype=torch.long)
    target = torch.zeros((len(spans), length), dtype=torch.bool)
    labels = torch.full((len(spans), length), -100, dtype=torch.long)
    where = []
    for b, (d, (start, end, t_start, t_end)) in enumerate(spans):
        for j, t in enumerate(range(start, end)):
            slots[b, j] = rows.setdefault((d, t), len(rows))
            if t_start <= t < t_end:
                target[b, j] = True
                labels[b, j] = label_ids[d][t]
                where.append((d, t))
    return WindowBatch(stack_utterances([token_ids[d][t] for d, t in rows], pad_id), slots, target, labels, where)


def stack_utterances(utterances: Sequence, pad_id: int) -> torch.Tensor:
    """Utterances as one tensor: WordPiece id lists padded after their words [U, T], or sentence vectors [U, D]."""
    if isinstance(utterances, torch.Tensor):
        return utterances
    if isinstance(utterances[0], torch.Tensor):
        return torch.stack(list(utterances))
    tokens = torch.full((len(utterances), max(map(len, utterances))), pad_id, dtype=torch.long)
    for i, ids in enumerate(utterances):
        tokens[i, : len(ids)] = torch.tensor(ids)
    return tokens


def evaluate(model: LCAttentionModel, batches: Sequence[WindowBatch]) -> float:
    """Accuracy (percent) over the labelled target utterances of the batches."""
    gold, pred = predict_all(model, batches)
    return accuracy(gold, pred) if gold else float("nan")


def _windows(recipe: dict) -> tuple[int, int, bool]:
    setting = recipe.get("setting", "offline")
    if setting not in ("offline", "online"):
        raise DialogueError(f"recipe setting must be 'offline' or 'online', got {setting!r}")
    return int(recipe.get("window", 1)), int(recipe.get("context_padding", 0)), setting == "online"


def check_model_config(recipe: dict) -> tuple[int, int, bool]:
    """The recipe's model, [model_config] and windows checked before any data is read (the labels' count stood in
    for); returns its (W, P, online)."""
    model_builder(MODELS, recipe["model"], TITLE)
    config = LCConfig.check_recipe(recipe.get("model_config", {}), num_labels=2)
    window, padding, online = _windows(recipe)
    if window + 2 * padding > config.max_positions:
        raise DialogueError(f"W + 2P = {window + 2 * padding} is over model_config.max_positions = {config.max_positions}")
    return window, padding, online


def prepare_dialogue_act(recipe: dict, data_dir=None, limits: dict[str, int] | None = None, pretrained: bool = True,
                         labels: Sequence[str] | None = None):
    """Model, tokenizer, labels, and per split its batches by setting: ``batches[split] = {"offline": [...],
    "online": [...]}`` (for "train", only the recipe's setting). ``labels``: a user's files' label set (a resumed
    run's), instead of the one read from the training file."""
    recipe = {**recipe, "label_kind": recipe.get("label_kind", "act")}
    window, padding, online = check_model_config(recipe)
    splits, labels = load_labelled_data(recipe, recipe["label_kind"], data_dir, labels=labels)
    apply_limits(splits, limits, recipe["label_kind"])
    model, tokenizer = build_dialogue_act_model(recipe, labels, pretrained)
    batch_size = int(recipe.get("train", {}).get("batch_size", 32))
    batches, reports = {}, {}
    for split, dialogues in splits.items():
        ids, ys, reports[split] = encode_for(model, tokenizer, dialogues, labels, recipe["label_kind"], (recipe["dataset"], split))
        if split == "train" and pretrained and model.config.word_vectors == "word2vec":
            start_from_word2vec(model, ids, f"{recipe.get('backbone', DEFAULT_BACKBONE)}-{recipe['dataset']}-train")
        settings = [("online" if online else "offline")] if split == "train" else ["offline", "online"]
        batches[split] = {s: make_batches(ids, ys, window, padding, batch_size, model.config.pad_id, online=s == "online",
                                          labelled_only=split == "train") for s in settings}
    return model, tokenizer, labels, batches, reports


def start_from_word2vec(model: LCAttentionModel, ids: Sequence[Sequence[Sequence[int]]], key: str) -> None:
    """The word embeddings start from word2vec vectors trained on the training split's word pieces (`ids`: per
    dialogue, per utterance; cached under `key`), at the table's width."""
    sentences = [utterance for dialogue in ids for utterance in dialogue]
    settings = Word2VecSettings(dim=model.config.embedding_dim)
    with torch.no_grad():
        model.embed.weight.copy_(word2vec_table(sentences, model.config.vocab_size, settings, key))
        model.embed.weight[model.config.pad_id].zero_()


def train_dialogue_act(recipe: dict, out_dir, seed: int, data_dir=None, resume: bool = False,
                       time_budget_s: float | None = None, limits: dict[str, int] | None = None):
    """Train a dialogue-act recipe; returns the `TrainResult` (test accuracy at the best validation epoch).
    Checkpoints, run.json and resume work as for every other task."""
    set_seed(seed)
    model, _, labels, batches, reports = prepare_dialogue_act(recipe, data_dir, limits, labels=resumed_labels(out_dir, resume))
    _, padding, online = _windows(recipe)
    setting = "online" if online else "offline"
    settings = recipe.get("train", {})
    config = recipe_train_config(settings, {"epochs": 5, "lr": 1e-3, "save_every_steps": 200}, seed=seed,
                                 out_dir=out_dir, resume=resume, time_budget_s=time_budget_s)
    run_info = run_description(recipe, seed, limits, labels, reports)
    eval_online = bool(recipe.get("eval_online", True))

    def eval_fn(m, split):
        scores = {setting: evaluate(m, batches[split][setting])}
        if eval_online and not online and padding > 0:  # with P = 0 both settings are the same
            scores["online"] = evaluate(m, batches[split]["online"])
        return {"primary": scores[setting], "accuracy": scores[setting], **{f"{k}_accuracy": v for k, v in scores.items()}}

    return train(model, batches["train"][setting], eval_fn, config,
                 label_map={"label_kind": recipe.get("label_kind", "act"), "labels": labels}, run_info=run_info)


def load_trained(checkpoint):
    """A trained dialogue-act model from a run folder (its best/ checkpoint) or a checkpoint folder:
    (model in eval mode, tokenizer, run description with the recipe and labels)."""
    weights, run = checkpoint_paths(Path(checkpoint), (TASK.name,), TASK.name)
    run = upgrade_run(run, MODELS)
    with built_from_run_file(weights):
        model, tokenizer = build_dialogue_act_model(run["recipe"], run["labels"], pretrained=False)
    load_checkpoint(weights, model)
    return model.eval(), tokenizer, run


def evaluate_split(model: LCAttentionModel, tokenizer, run: dict, split: str, data_dir=None, limit: int | None = None,
                   input_file: Path | None = None) -> dict:
    """Accuracy of a trained model on a split of its recipe's dataset (its first `limit` conversations) or on a user's
    labelled `input_file`, offline and (P > 0) online."""
    run = scored_run(run, input_file)
    recipe = {**run["recipe"], "label_kind": run["recipe"].get("label_kind", "act")}
    check_split(split, recipe)
    splits, _ = load_labelled_data(recipe, recipe["label_kind"], data_dir, only=[split], labels=run["labels"])
    window, padding, _ = _windows(recipe)
    apply_limits(splits, {split: limit} if limit else None, recipe["label_kind"], "--limit-dialogues")
    scored = splits[split]
    ids, ys, report = encode_for(model, tokenizer, scored, run["labels"], recipe["label_kind"], (recipe["dataset"], split))
    settings = ("offline", "online") if padding > 0 else ("offline",)
    accuracy = {f"{s}_accuracy": evaluate(model, make_batches(ids, ys, window, padding, 32, model.config.pad_id, online=s == "online"))
                for s in settings}
    return {"conversations": len(scored), **utterance_counts(scored, recipe["label_kind"]),
            "truncated_utterances": report["truncated_utterances"], **accuracy,
            "trained_setting": "online" if _windows(recipe)[2] else "offline"}


@torch.no_grad()
def predict_dialogues(model: LCAttentionModel, tokenizer, dialogues: Sequence[Dialogue], labels: Sequence[str],
                      window: int, padding: int, online: bool = False, batch_size: int = 32,
                      desc: str = "predict") -> list[list[dict]]:
    """Per dialogue, per turn: {"label", "probabilities"} (offline: whole sub-dialogues; online: the
    P preceding utterances only). Gold labels are not needed. `dialogues`: `Dialogue`s or lists of turns."""
    dialogues = conversations(dialogues)
    model.eval()
    ids, ys, _ = encode_for(model, tokenizer, dialogues, labels, label_kind="\0none")
    out: list[list[dict | None]] = [[None] * len(turns) for turns in ids]
    device = next(model.parameters()).device
    for batch in progress(make_batches(ids, ys, window, padding, batch_size, model.config.pad_id, online), desc):
        probs = model.target_probabilities(batch.to(device)).cpu()
        for (d, t), p in zip(batch.where, probs):
            out[d][t] = {"label": labels[int(p.argmax())], "probabilities": dict(zip(labels, p.tolist()))}
    return out


class DialogueActSession:
    """Online prediction, one utterance at a time: each utterance is encoded once, and its act is
    predicted from it and the ``padding`` utterance vectors before it (the same sub-dialogue as
    online prediction, so the same answer). The cost per utterance does not grow with the conversation."""

    def __init__(self, model: LCAttentionModel, tokenizer, labels: Sequence[str], padding: int):
        labels = label_names(labels, model.config.num_labels)
        if not isinstance(padding, int) or not 0 <= padding < model.config.max_positions:
            raise ValueError(f"padding {padding!r}: expected a whole number of preceding utterances, 0 to "
                             f"{model.config.max_positions - 1} (the model's max_positions - 1)")
        self.model, self.tokenizer, self.labels, self.padding = model.eval(), tokenizer, labels, padding
        self.reset()

    def reset(self) -> None:
        self.vectors: deque[torch.Tensor] = deque(maxlen=self.padding + 1)
        self.added = 0  # utterances so far, to name one in an error

    def snapshot(self) -> tuple:
        """What `restore` needs to take the session back to this point."""
        return list(self.vectors), self.added

    def restore(self, state: tuple) -> None:
        vectors, self.added = state
        self.vectors = deque(vectors, maxlen=self.padding + 1)

    @torch.no_grad()
    def add(self, speaker: str, text: str) -> dict:
        """The act of the next utterance (the speaker is echoed back; the model does not use it, but a turn has one)."""
        if not isinstance(text, str) or is_blank(text):
            raise DialogueError(f"utterance {self.added}: text: expected a non-empty string, got {text!r:.40}")
        speaker = as_turn((speaker, text), f"utterance {self.added}").speaker  # a DialogueError naming the field
        inputs, _ = utterance_inputs(self.model, self.tokenizer, [text])
        device = next(self.model.parameters()).device
        self.vectors.append(self.model.encode_utterances(stack_utterances(inputs, self.model.config.pad_id).to(device))[0])
        self.added += 1
        vectors = torch.stack(list(self.vectors)).unsqueeze(0)
        mask = torch.ones(vectors.shape[:2], dtype=torch.bool, device=device)
        logits = self.model.contextualise_at(vectors, mask, torch.tensor([vectors.shape[1] - 1], device=device))
        probs = logits[0].softmax(-1).tolist()
        best = max(range(len(probs)), key=probs.__getitem__)
        answer = {"speaker": speaker, "text": text, "label": self.labels[best], "probabilities": dict(zip(self.labels, probs))}
        # ``truncated``: cut to its start, as in training; ``no_tokens``: no word read of it; both as `annotate` marks them
        [[answer]] = mark_cut([[answer]], [as_dialogue([(speaker, text)])], *utterance_reader(self.model, self.tokenizer))
        return answer


def attention_length(model, dialogue: Dialogue, start: int, length: int) -> int:
    """How many of utterances start..start+length-1 `utterance_attention` shows: those the dialogue holds and the
    model reads (its positions); a model without attention over utterances, or a start outside the dialogue, refused."""
    if not isinstance(model.context, LocalContextAttention):
        raise ValueError(f"a {model.config.context} model has no attention over utterances (use lc-attention or lstm-attention)")
    if not 0 <= start < len(dialogue) or length < 1:
        raise ValueError(f"utterances {start}..{start + length - 1}: dialogue {dialogue.id!r} has {len(dialogue)} (0..{len(dialogue) - 1})")
    return min(length, len(dialogue) - start, model.config.max_positions)


@torch.no_grad()
def utterance_attention(model, tokenizer, dialogue: Dialogue, start: int, length: int) -> torch.Tensor:
    """[length, length] attention between utterances start..start+length-1 of a dialogue-act model's
    context layer (mean over heads; each row sums to 1): the LC Attention paper's Figure 2."""
    dialogue = as_dialogue(dialogue)
    length = attention_length(model, dialogue, start, length)
    inputs, _ = utterance_inputs(model, tokenizer, [turn.text for turn in dialogue.turns[start : start + length]])
    model.eval()
    vectors = model.encode_utterances(stack_utterances(inputs, model.config.pad_id)).unsqueeze(0)
    _, probs = model.contextualise(vectors, torch.ones(1, length, dtype=torch.bool), return_probs=True)
    return probs[0].mean(0)


class DialogueActs:
    """Dialogue act recognition as a `turnformer.tasks.base.Task`: every utterance of a conversation gets an act, from
    its sub-dialogue (offline) or from the utterances before it only (online). Beside the interface,
    `utterance_attention`: the attention between the utterances of a sub-dialogue (the ``plot act-attention`` figure), of
    `attention_length` of them."""

    name = "dialogue-act"
    title = TITLE
    labelled = True
    models = MODELS
    options = frozenset({"online"})
    command = "predict"
    session_class = DialogueActSession
    reader = "a dialogue-act model, which labels every utterance of conversations"

    train = staticmethod(train_dialogue_act)
    load_trained = staticmethod(load_trained)
    evaluate = staticmethod(evaluate_split)
    utterance_attention = staticmethod(utterance_attention)
    attention_length = staticmethod(attention_length)

    def load_data(self, recipe: dict, data_dir=None, only: Sequence[str] = SPLITS) -> dict[str, list[Dialogue]]:
        return load_labelled_data(recipe, recipe.get("label_kind", "act"), data_dir, only)[0]

    def predict(self, model, tokenizer, run: dict, source: str, data_dir=None, online: bool | None = None) -> Predictions:
        say_other_labels(source, run)
        return label_predictions(conversation_blocks(source, data_dir, self.reader),
                                 lambda dialogues, desc: self.annotate(model, tokenizer, run, dialogues, desc, online),
                                 run["recipe"].get("label_kind", "label"), utterance_reader(model, tokenizer)[1])

    def session(self, model, tokenizer, run: dict) -> DialogueActSession:
        return DialogueActSession(model, tokenizer, run["labels"], int(run["recipe"].get("context_padding", 0)))

    def serves(self, model) -> frozenset[str]:
        return frozenset({STREAM, ANNOTATE})

    def annotate(self, model, tokenizer, run: dict, dialogues: Sequence[Dialogue], desc: str = "predict",
                 online: bool | None = None) -> list[list[dict]]:
        """Every utterance's act: offline, from its sub-dialogue with the recipe's W and P (the context on both sides);
        `online`, from the P utterances before it, as a session answers (None: as the model was trained: a model trained
        online has never read the utterances after the one it labels); and whether the model read only its start
        (``truncated``)."""
        recipe, dialogues = run["recipe"], conversations(dialogues)
        online = _windows(recipe)[2] if online is None else online
        return mark_cut(predict_dialogues(model, tokenizer, dialogues, run["labels"], int(recipe.get("window", 1)),
                                          int(recipe.get("context_padding", 0)), online=online, desc=desc),
                        dialogues, *utterance_reader(model, tokenizer))


TASK = DialogueActs()

__all__ = ["DIALOGUE_ACT_MODELS", "MODELS", "SPLITS", "TASK", "DialogueActSession", "build_act_model", "encode_dialogues",
           "evaluate", "evaluate_split", "load_trained", "make_batches", "make_windows", "predict_dialogues", "prepare_dialogue_act",
           "train_dialogue_act", "attention_length", "utterance_attention"]
