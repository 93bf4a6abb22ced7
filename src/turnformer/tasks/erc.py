"""Emotion recognition in conversation: labels, tokenised conversations, batches, evaluation.

Batching: conversations are grouped by number of turns before being cut into batches (the
training loop then shuffles the batch order each epoch). The paper batches conversations as they
come; grouping by length means that a batch rarely waits on one long conversation, so far fewer
steps are spent on rows that have already ended, at no cost to what the model sees.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import torch

from turnformer.dialogue import Dialogue, DialogueError
from turnformer.models.dialogxl import ConversationBatch
from turnformer.tasks.metrics import PRIMARY_METRIC, erc_metrics

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


def label_set_from_data(dialogues: Sequence[Dialogue], kind: str) -> list[str]:
    """The labels of a user's file, most frequent first (ties by name), for files with no fixed set."""
    counts = Counter(label for d in dialogues for label in d.labels(kind) if label is not None)
    if not counts:
        raise DialogueError(f"no turn carries a {kind!r} label: nothing to learn")
    return [label for label, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def encode_conversations(
    dialogues: Sequence[Dialogue], tokenizer, label_kind: str, labels: Sequence[str], max_utterance_tokens: int
) -> tuple[list[EncodedConversation], EncodeReport]:
    """Tokenise every turn once ([CLS] text [SEP], cut at ``max_utterance_tokens``, counted)."""
    label_to_id = {label: i for i, label in enumerate(labels)}
    texts = [t.text for d in dialogues for t in d.turns]
    full = tokenizer(texts, add_special_tokens=True)["input_ids"] if texts else []
    report = EncodeReport()
    encoded, k = [], 0
    for d in dialogues:
        turn_ids, label_ids = [], []
        for turn in d.turns:
            ids = full[k]
            k += 1
            if len(ids) > max_utterance_tokens:
                report.truncated_utterances += 1
                ids = ids[: max_utterance_tokens - 1] + ids[-1:]  # keep [SEP]
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
    batch = len(conversations)
    n_turns = max(len(c.turn_ids) for c in conversations)
    speakers = torch.full((batch, n_turns), -1, dtype=torch.long)
    labels = torch.full((batch, n_turns), -100, dtype=torch.long)
    steps = []
    for t in range(n_turns):
        width = max((len(c.turn_ids[t]) for c in conversations if t < len(c.turn_ids)), default=1)
        ids = torch.full((batch, width), pad_id, dtype=torch.long)
        for b, c in enumerate(conversations):
            if t < len(c.turn_ids):
                ids[b, : len(c.turn_ids[t])] = torch.tensor(c.turn_ids[t])
                speakers[b, t] = c.speakers[t]
                labels[b, t] = c.labels[t]
        steps.append(ids)
    return ConversationBatch(steps, speakers, labels, [len(c.turn_ids) for c in conversations], [c.id for c in conversations])


def make_batches(conversations: Sequence[EncodedConversation], batch_size: int, pad_id: int) -> list[ConversationBatch]:
    ordered = sorted(conversations, key=lambda c: len(c.turn_ids))
    return [make_batch(ordered[i : i + batch_size], pad_id) for i in range(0, len(ordered), batch_size)]


def evaluate(model, batches: Sequence[ConversationBatch], labels: Sequence[str], dataset: str) -> dict:
    """The dataset's metrics (weighted F1, or micro F1 without neutral for DailyDialog) on batches."""
    was_training = model.training
    model.eval()
    gold, pred = [], []
    device = next(model.parameters()).device
    with torch.no_grad():
        for batch in batches:
            g, p = model.predict(batch.to(device))
            gold += g
            pred += p
    model.train(was_training)
    names = list(labels)
    neutral = NEUTRAL.get(dataset)
    return erc_metrics(
        [names[i] for i in gold], [names[i] for i in pred], names,
        primary=PRIMARY_METRIC.get(dataset, "weighted_f1"), neutral_label=neutral if neutral in names else None,
    )
