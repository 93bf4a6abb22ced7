"""Response selection: items -> packed (context, candidate) sequences, batches, training, evaluation,
ranking for users, MuTual's submission format, and the task as the command line and a server reach it (`TASK`).

Data (``recipe["dataset"]``):

* ``mutual`` / ``mutual-plus``: the test answers are hidden, so the labelled dev set is what is
  reported. The epoch is chosen on ``holdout`` items taken from the training set (a fixed random
  sample, the same for every seed and model; 500 by default), and the dev score is read at that epoch:
  in the run's history ``validation`` is the held-out sample and ``test`` is MuTual's dev set. (The paper
  picks the epoch on dev itself; ``holdout = 0`` does that too.)
* ``file``: ``train_file``, ``validation_file`` and ``test_file`` in the tab-separated Ubuntu / Douban /
  E-commerce format (`turnformer.data.selection_tsv`), or JSONL conversations with ``meta.candidates``
  and ``meta.answer`` (told apart by their content).

Every candidate of an item becomes one sequence ``[CLS] u_1 [SEP] ... u_n [SEP] response [SEP]``
(`turnformer.structure.pack_token_ids`: at most ``max_turns`` turns, the response included, then
oldest tokens dropped to fit ``max_length``; a response longer than the whole budget is cut at its
end). Batches hold ``batch_size`` items with all their candidates; items are sorted by length before
batching so that a batch carries little padding (the training loop shuffles the batch order).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Mapping, Sequence

import numpy as np
import torch

from turnformer.backbones.loading import load_auto_encoder
from turnformer.data import get_info, load_split, names_benchmark, parse_split_spec
from turnformer.data._io import first_line, write_file
from turnformer.data.jsonl import iter_jsonl
from turnformer.data.report import LoadReport
from turnformer.data.selection_tsv import iter_selection_tsv, read_selection_tsv
from turnformer.dialogue import (Dialogue, DialogueError, ResponseSelectionItem, Turn, as_dialogue, as_turn,
                                 CHARS_PER_TOKEN, is_blank, next_speaker, output_names, text_to_read)
from turnformer.models.mdfn import MDFN, MDFNConfig, SelectionBatch
from turnformer.recipes import recipe_train_config
from turnformer.structure import SpecialTokens, pack_token_ids
from turnformer.tasks.base import RANK, ModelBuilder, Predictions
from turnformer.tasks.common import (SPLITS, InputBlocks, check_split, checkpoint_paths, model_builder, run_description,
                                     built_from_run_file, scored_run, scores_input, shorten, split_file, upgrade_run)
from turnformer.tasks.ranking import rank_candidates, ranking_metrics, shown_scores
from turnformer.training import load_checkpoint, predict_all, progress, set_seed, train

logger = logging.getLogger(__name__)

TITLE = "response-selection"
DEFAULT_BACKBONE = "all-MiniLM-L6-v2"
LETTERS = "ABCDEFGHIJ"


def build_selection_model(model_config: dict, backbone: str = DEFAULT_BACKBONE, pretrained: bool = True):
    """MDFN as its model config describes it (its ablations and the plain encoder are settings: ``channels``,
    ``aggregation``, ``fusion``) on a backbone (its weights where ``pretrained``), and the backbone's tokenizer."""
    config = MDFNConfig.from_dict(model_config)
    encoder, tokenizer = load_auto_encoder(backbone, pretrained)
    return MDFN(config, encoder), tokenizer


# model id -> builder: (model config, backbone name, pretrained) -> (model, tokenizer).
MODELS: dict[str, ModelBuilder] = dict.fromkeys(
    ("mdfn", "plain-encoder", "mdfn-ua-only", "mdfn-sa-only", "mdfn-maxpool", "mdfn-meanpool", "mdfn-linear-fusion"),
    build_selection_model)
RESPONSE_SELECTION_MODELS = tuple(MODELS)


def build_response_selection_model(recipe: dict, pretrained: bool = True):
    """The model a response-selection recipe names, and its tokenizer."""
    build = model_builder(MODELS, recipe["model"], TITLE)
    return build(recipe.get("model_config", {}), recipe.get("backbone", DEFAULT_BACKBONE), pretrained)


@dataclass
class EncodedItem:
    """One item, tokenised: per candidate its turns' token ids and speaker ids (context then response)."""

    id: str
    turns: list[list[list[int]]]
    speakers: list[list[int]]
    relevance: list[int]  # 0/1 per candidate, -1 where hidden
    length: int  # tokens of its longest candidate sequence, before truncation
    dropped_turns: int = 0  # its oldest context turns beyond max_turns, left out of every candidate sequence
    dropped_turn_tokens: int = 0  # their word pieces
    cut_texts: int = 0  # its texts (context turns, candidates) cut before they were tokenised: tokens past the cut uncounted


def dialogue_to_item(dialogue: Dialogue, where: str = "", report: LoadReport | None = None) -> ResponseSelectionItem:
    """The generic JSONL form of an item (its context as a conversation, ``meta.candidates`` a list of
    {"speaker", "text"} or plain texts, ``meta.answer`` an index or null and, optionally, ``meta.relevance`` one 0/1 per
    candidate) back to an item; a candidate's other fields are read past and counted in `report` (``unknown_field``),
    as a turn's are."""
    where = where or f"dialogue {dialogue.id!r}"
    candidates = dialogue.meta.get("candidates")
    if not isinstance(candidates, list) or not candidates:
        raise DialogueError(f"{where}: meta.candidates: expected a non-empty list of {{speaker, text}} candidate responses")
    turns = []
    for i, given in enumerate(candidates):
        c = {"text": given} if isinstance(given, str) else given  # a plain text, as ResponseRanker.rank takes: spoken by the next speaker
        if not isinstance(c, dict) or not isinstance(c.get("text"), str) or is_blank(c["text"]):
            raise DialogueError(f"{where}: meta.candidates[{i}]: expected a non-empty text or {{\"speaker\": ..., \"text\": non-empty}}, "
                                f"got {given!r:.60}")
        for name in sorted(c.keys() - {"speaker", "text"}) if report is not None else ():
            report.ignore_field(where, f"meta.candidates[{i}].{name}", name)
        speaker = c.get("speaker")
        if speaker is None:
            speaker = next_speaker(dialogue)
        elif isinstance(speaker, int) and not isinstance(speaker, bool):  # an integer id, as in the turns (0 included)
            speaker = str(speaker)
        if not isinstance(speaker, str) or is_blank(speaker):
            raise DialogueError(f"{where}: meta.candidates[{i}].speaker: expected a non-empty string (or an integer id), "
                                f"got {speaker!r}")
        turns.append(Turn(speaker=speaker, text=c["text"]))
    answer = dialogue.meta.get("answer")
    if answer is not None and (not isinstance(answer, int) or isinstance(answer, bool)):
        raise DialogueError(f"{where}: meta.answer: expected a candidate index or null, got {answer!r}")
    if answer is not None and not 0 <= answer < len(turns):
        raise DialogueError(f"{where}: meta.answer = {answer}: out of range for {len(turns)} candidates (0..{len(turns) - 1})")
    relevance = dialogue.meta.get("relevance")
    if relevance is not None and (not isinstance(relevance, list) or len(relevance) != len(turns)
                                  or any(type(r) is not int or r not in (0, 1) for r in relevance)):
        raise DialogueError(f"{where}: meta.relevance: expected one 0 or 1 per candidate ({len(turns)}), got {relevance!r:.60}")
    if relevance is not None and answer is not None and relevance[answer] != 1:
        raise DialogueError(f"{where}: meta.answer = {answer}: that candidate is 0 in meta.relevance {relevance!r}")
    return ResponseSelectionItem(context=dialogue, candidates=turns, answer=answer, id=dialogue.id, relevance=relevance)


def load_selection_data(recipe: dict, data_dir=None, only: Sequence[str] = SPLITS) -> dict[str, list[ResponseSelectionItem]]:
    """Train / validation / test items of a recipe's dataset (see the module docstring); of a user's files, only
    those of the splits in ``only``."""
    dataset = recipe["dataset"]
    if dataset == "file":
        splits = {}
        for split in only:
            path = split_file(recipe, split)
            splits[split] = read_selection_file(Path(path))
            if not any(sum(item.gold() or ()) for item in splits[split]):
                right = "meta.answer or meta.relevance" if is_jsonl(Path(path)) else "label 1"
                why = "nothing can be scored" if scores_input(recipe, split) else f"the {split} split cannot be scored"
                raise DialogueError(f"{path}: no item has a right candidate ({right}): {why}")
        return splits
    if dataset not in ("mutual", "mutual-plus"):
        raise DialogueError(f"response selection runs on mutual, mutual-plus or a file (dataset = 'file'), not {dataset!r}")
    holdout = int(recipe.get("holdout", 500))
    dev = list(load_split(dataset, "validation", data_dir).items)
    if "train" not in only and (holdout <= 0 or "validation" not in only):  # the dev set alone (evaluate's test)
        return {split: dev for split in only}
    train = list(load_split(dataset, "train", data_dir).items)
    if holdout <= 0:
        return {"train": train, "validation": dev, "test": dev}
    if holdout >= len(train):
        raise DialogueError(f"holdout = {holdout} leaves no training items (train has {len(train)})")
    held = set(np.random.default_rng(0).choice(len(train), holdout, replace=False).tolist())
    return {"train": [x for i, x in enumerate(train) if i not in held],
            "validation": [x for i, x in enumerate(train) if i in held], "test": dev}


def encode_items(items: Sequence[ResponseSelectionItem], tokenizer, max_turns: int, max_length: int | None = None) -> list[EncodedItem]:
    """Tokenise every turn once; keep the newest ``max_turns - 1`` context turns before each candidate. With
    `max_length` (the tokens a sequence holds), a huge text is cut before it is tokenised (`text_to_read`): a
    candidate to its start, a context turn to its end, the parts a sequence keeps."""
    def read(turn: Turn, keep: str) -> tuple[str, bool]:  # a context turn keeps its end: the oldest tokens are dropped
        return (turn.text, False) if max_length is None else text_to_read(turn.text, max_length, keep)

    def first_kept(item: ResponseSelectionItem) -> int:
        return max(0, len(item.context) - (max_turns - 1))

    read_texts = [[*(read(t, "end") for t in item.context.turns), *(read(t, "start") for t in item.candidates)]
                  for item in items]
    kept_texts = [text for item, item_texts in zip(items, read_texts) for text, _ in item_texts[first_kept(item):]]
    ids = tokenizer(kept_texts, add_special_tokens=False, verbose=False)["input_ids"] if kept_texts else []
    out, k = [], 0
    for item, item_texts in zip(items, read_texts):
        dropped = first_kept(item)
        context_ids = ids[k : k + len(item.context) - dropped]
        k += len(context_ids)
        names = [t.speaker for t in item.context.turns[dropped:]]
        turns, speakers = [], []
        for candidate in item.candidates:
            order = {name: i for i, name in enumerate(dict.fromkeys([*names, candidate.speaker]))}
            turns.append([*context_ids, ids[k] or [tokenizer.unk_token_id]])
            speakers.append([order[n] for n in names] + [order[candidate.speaker]])
            k += 1
        gold = item.gold()
        relevance = list(gold) if gold is not None else [-1] * len(item.candidates)
        length = max(sum(map(len, t)) + len(t) + 1 for t in turns)
        out.append(EncodedItem(str(item.id), turns, speakers, relevance, length, dropped_turns=dropped,
                               dropped_turn_tokens=count_tokens([text for text, _ in item_texts[:dropped]], tokenizer),
                               cut_texts=sum(cut for _, cut in item_texts)))
    return out


def count_tokens(texts: Sequence[str], tokenizer, chunk: int = 256) -> int:
    """The word pieces of ``texts``, tokenised ``chunk`` at a time and only counted: a context of thousands of turns
    beyond ``max_turns`` costs the memory of one chunk's ids, not of all of them."""
    return sum(len(ids) for start in range(0, len(texts), chunk)
               for ids in tokenizer(list(texts[start : start + chunk]), add_special_tokens=False, verbose=False)["input_ids"])


def special_tokens(tokenizer) -> SpecialTokens:
    return SpecialTokens(pad=tokenizer.pad_token_id or 0, bos=tokenizer.cls_token_id, suffix=tokenizer.sep_token_id)


def make_selection_batches(encoded: Sequence[EncodedItem], batch_size: int, special: SpecialTokens, max_length: int,
                           sort_by_length: bool = True) -> tuple[list[SelectionBatch], dict]:
    """Batches of ``batch_size`` items (sorted by length first, unless told not to), and a report of
    the truncation over all candidate sequences: sequences cut, tokens dropped (context turns beyond
    ``max_turns``, oldest tokens beyond ``max_length``, the end of an over-long response), context turns
    left out, responses cut; and texts cut before they were tokenised (`cut_texts`, each text once: a huge utterance),
    whose tokens past the cut `dropped_tokens` cannot count."""
    order = sorted(range(len(encoded)), key=lambda i: encoded[i].length) if sort_by_length else list(range(len(encoded)))
    report = {"sequences": 0, "truncated_sequences": 0, "dropped_tokens": 0, "dropped_turns": 0, "truncated_responses": 0,
              "cut_texts": 0}
    batches = []
    for start in range(0, len(order), batch_size):
        chosen = [encoded[i] for i in order[start : start + batch_size]]
        turns, speakers, dropped_before_packing = [], [], []
        for item in chosen:
            report["cut_texts"] += item.cut_texts
            for candidate_turns, candidate_speakers in zip(item.turns, item.speakers):
                response, dropped = candidate_turns[-1], item.dropped_turn_tokens
                if len(response) > max_length - 2:  # [CLS] response [SEP] must fit
                    report["truncated_responses"] += 1
                    dropped += len(response) - (max_length - 2)
                    candidate_turns = [*candidate_turns[:-1], response[: max_length - 2]]
                turns.append(candidate_turns)
                speakers.append(candidate_speakers)
                dropped_before_packing.append(dropped)
                report["dropped_turns"] += item.dropped_turns
        packed = pack_token_ids(turns, speakers, special, max_length=max_length)
        report["sequences"] += len(turns)
        report["truncated_sequences"] += sum(1 for n, m in zip(packed.truncated, dropped_before_packing) if n or m)
        report["dropped_tokens"] += sum(packed.truncated) + sum(dropped_before_packing)
        width = max(len(item.turns) for item in chosen)
        groups = torch.full((len(chosen), width), -1, dtype=torch.long)
        relevance = torch.full((len(chosen), width), -1, dtype=torch.long)
        row = 0
        for g, item in enumerate(chosen):
            n = len(item.turns)
            groups[g, :n] = torch.arange(row, row + n)
            relevance[g, :n] = torch.tensor(item.relevance)
            row += n
        batches.append(SelectionBatch(packed.input_ids, packed.meta, groups, relevance, [item.id for item in chosen]))
    return batches, report


def evaluate(model: MDFN, batches: Sequence[SelectionBatch]) -> dict:
    """Ranking metrics of the model over the labelled items of `batches` (`ranking_report`)."""
    return ranking_report(*predict_all(model, batches))


def ranking_report(gold: Sequence[Sequence[int]], scores: Sequence[Sequence[float]]) -> dict:
    """Ranking metrics over the labelled items (``primary`` = R@1), from each item's relevance (-1 where unknown) and
    scores; ``{"primary": nan, "labelled": 0}`` when no item has a known answer (MuTual's test set)."""
    labelled = [(g, s) for g, s in zip(gold, scores) if min(g) >= 0]
    if not labelled:
        return {"primary": float("nan"), "labelled": 0}
    alone = sum(1 for g, _ in labelled if len(g) < 2)
    if alone:  # ranking one candidate scores 1 whatever the model (a TSV line that lost a context column is one)
        logger.warning("%d labelled item(s) of one candidate left out of the ranking metrics (one_candidate): one "
                       "candidate ranks first whatever the model", alone)
        labelled = [(g, s) for g, s in labelled if len(g) > 1]
        if not labelled:
            return {"primary": float("nan"), "labelled": 0, "one_candidate": alone}
    metrics = ranking_metrics([s for _, s in labelled], [g for g, _ in labelled]) | ({"one_candidate": alone} if alone else {})
    sizes = sorted({len(g) for g, _ in labelled})
    if len(sizes) > 1:  # R@k of an item of k candidates or fewer is 1 whatever the model
        metrics["candidates_per_item"] = [sizes[0], sizes[-1]]
        logger.warning("the items have %d to %d candidates: R@k counts an item of k candidates or fewer as found at k "
                       "whatever the model, so R@k above R@1 mixes easy and hard items; score items of one size for "
                       "numbers comparable with a benchmark's", sizes[0], sizes[-1])
    if not metrics["groups"]:  # labelled, but no candidate marked right (a TSV with only 0 labels): nothing to rank
        return {"primary": float("nan"), **metrics}
    recall_at_1 = next(v for k, v in metrics.items() if k.endswith("@1") and k.startswith("R"))
    return {"primary": recall_at_1, **metrics, "unit": "fraction"}  # rates as fractions, as the paper prints them


def check_trainable(items: Sequence[ResponseSelectionItem], objective: str, where: str) -> None:
    """Every training item must say which candidates are right: one without an answer gives no loss (a batch of such
    items: no loss at all), and with the ``choice`` objective (a softmax over the candidates) neither does one
    whose candidates are all wrong, nor one of a single candidate (it is chosen whatever the model); with the ``binary``
    objective, items none of which has a wrong candidate teach only "right" to every response. A DialogueError names
    the first such items and how many there are."""
    unknown = [str(item.id) for item in items if item.gold() is None]
    if unknown:
        raise DialogueError(f"{where}: {len(unknown)} training item(s) without an answer (first: {', '.join(unknown[:3])}); "
                            "give each its right candidate (meta.answer, or label 1 in a tab-separated file)")
    if objective == "choice":
        none_right = [str(item.id) for item in items if not any(item.gold())]
        if none_right:
            raise DialogueError(f"{where}: {len(none_right)} training item(s) with no right candidate (first: "
                                f"{', '.join(none_right[:3])}): this model learns to choose the right one among them")
        alone = [str(item.id) for item in items if len(item.gold()) < 2]
        if alone:
            raise DialogueError(f"{where}: {len(alone)} training item(s) of one candidate (first: {', '.join(alone[:3])}): "
                                "it is chosen whatever the model, so it teaches nothing; give each item its wrong "
                                "candidates too (meta.candidates, or label-0 lines in a tab-separated file)")
    elif items and all(all(item.gold()) for item in items):
        raise DialogueError(f"{where}: no training item has a wrong candidate: the model would learn to call every "
                            "response right; give the items their wrong candidates too (meta.candidates, or label-0 "
                            "lines in a tab-separated file)")


def check_scorable(items: Sequence[ResponseSelectionItem], scope: str) -> None:
    """Items to score must hold one with a right candidate and another to rank it against: else every metric is
    undefined (NaN), and a training run would choose its best epoch on NaN. A DialogueError names the `scope`."""
    if not any(any(item.gold() or ()) for item in items):  # no answer, or none right: nothing to score
        raise DialogueError(f"{scope}: none has a right candidate, so nothing can be scored")
    if all(len(item.candidates) < 2 for item in items if any(item.gold() or ())):
        raise DialogueError(f"{scope}: each one with a right candidate has no other, and one candidate "
                            "ranks first whatever the model, so nothing can be scored (in a tab-separated file, "
                            "consecutive lines with the same context make one item)")


def check_model_config(recipe: dict) -> None:
    """The recipe's model and [model_config] checked before any data is read."""
    model_builder(MODELS, recipe["model"], TITLE)
    MDFNConfig.from_dict(recipe.get("model_config", {}))


def prepare_response_selection(recipe: dict, data_dir=None, limits: dict[str, int] | None = None, pretrained: bool = True):
    """Model, tokenizer, batches per split, and the encoding reports."""
    check_model_config(recipe)
    splits = load_selection_data(recipe, data_dir)
    for split, n in (limits or {}).items():
        splits[split] = splits[split][:n]
    model, tokenizer = build_response_selection_model(recipe, pretrained)
    where = recipe.get("train_file") or f"{recipe['dataset']} train"
    if limits and limits.get("train"):
        where = f"the first {limits['train']} items of {where}"
    check_trainable(splits["train"], model.config.objective, where)
    for split in ("validation", "test"):  # the best epoch is chosen on validation, the result read on test
        source = f"{recipe[f'{split}_file']}: " if recipe["dataset"] == "file" else ""
        first = (limits or {}).get(split)
        check_scorable(splits[split], f"{source}" + (f"the first {first} items" if first else "the items") + f" of the {split} split")
    settings = recipe.get("train", {})
    batch_size, eval_batch_size = int(settings.get("batch_size", 8)), int(settings.get("eval_batch_size", 16))
    max_length = model.config.max_length
    positions = getattr(model.encoder.config, "max_position_embeddings", None)
    if positions is not None and max_length > positions:
        raise DialogueError(f"model_config.max_length = {max_length} is over the backbone's {positions} positions")
    batches, reports = {}, {}
    for split, items in splits.items():
        encoded = encode_items(items, tokenizer, model.config.max_turns, model.config.max_length)
        batches[split], reports[split] = make_selection_batches(
            encoded, batch_size if split == "train" else eval_batch_size, special_tokens(tokenizer), max_length)
        reports[split]["items"] = len(items)
    return model, tokenizer, batches, reports


def train_response_selection(recipe: dict, out_dir, seed: int, data_dir=None, resume: bool = False,
                             time_budget_s: float | None = None, limits: dict[str, int] | None = None):
    """Train a response-selection recipe; returns the `TrainResult` (R@1 as the primary metric).
    Checkpoints, run.json and resume work as for every other task."""
    set_seed(seed)
    model, _, batches, reports = prepare_response_selection(recipe, data_dir, limits)
    settings = recipe.get("train", {})
    config = recipe_train_config(settings, {"epochs": 3, "lr": 2e-5, "weight_decay": 0.01, "grad_clip": 1.0,
                                            "save_every_steps": 200, "scheduler": "linear"},
                                 seed=seed, out_dir=out_dir, resume=resume, time_budget_s=time_budget_s)
    run_info = run_description(recipe, seed, limits, [], reports)
    return train(model, batches["train"], lambda m, split: evaluate(m, batches[split]), config,
                 label_map={"task": "response-selection"}, run_info=run_info)


def load_trained(checkpoint):
    """A trained response-selection model from a run folder (its best/) or a checkpoint folder:
    (model in eval mode, tokenizer, run description)."""
    weights, run = checkpoint_paths(Path(checkpoint), task=TASK.name)
    run = upgrade_run(run, MODELS)
    with built_from_run_file(weights):
        model, tokenizer = build_response_selection_model(run["recipe"], pretrained=False)
    load_checkpoint(weights, model)
    return model.eval(), tokenizer, run


def evaluate_split(model: MDFN, tokenizer, run: dict, split: str, data_dir=None, limit: int | None = None,
                   input_file: Path | None = None) -> dict:
    """Ranking metrics of a trained model on a split of its recipe's data (its first `limit` items; for MuTual:
    ``test`` and ``validation`` as in training, i.e. the dev set and the held-out training items), or on a user's
    labelled `input_file`."""
    run = scored_run(run, input_file)
    check_split(split, run["recipe"])
    splits = load_selection_data(run["recipe"], data_dir, only=[split])
    items = splits[split][:limit]
    scope = ((f"{input_file}: " + (f"--limit-dialogues {limit}: its first {limit} items" if limit else "its items"))
             if input_file is not None else
             (f"--limit-dialogues {limit}: the first {limit} items" if limit else "the items") + f" of the {split} split")
    check_scorable(items, scope)
    report: dict = {}
    scores = score_items(model, tokenizer, items, truncation=report, desc="evaluate")  # a chunk of items at a time
    gold = [list(item.gold() or [-1] * len(item.candidates)) for item in items]
    # items without an answer are ranked but not scored: counted apart, so that "groups" adds up
    return {**ranking_report(gold, scores), "unanswered": sum(item.gold() is None for item in items), "truncation": report}


@torch.no_grad()
def score_items(model: MDFN, tokenizer, items: Sequence[ResponseSelectionItem], batch_size: int = 16,
                truncation: dict | None = None, chunk_items: int = 1024, desc: str = "score") -> list[list[float]]:
    """Scores of every item's candidates (higher = better), in the items' order. ``truncation``, if
    given, is filled with the truncation report (see `make_selection_batches`). Items are encoded and batched
    `chunk_items` at a time, by length within a chunk: memory holds one chunk's batches, whatever the file's length."""
    model.eval()
    device = next(model.parameters()).device
    scores: list[list[float]] = []
    report: dict = {}
    starts = range(0, len(items), chunk_items) if items else range(1)  # no items: one empty chunk, a report of zeros
    for start in progress(starts, desc, unit="item", sizes=[min(chunk_items, len(items) - s) for s in starts]):
        encoded = encode_items(items[start : start + chunk_items], tokenizer, model.config.max_turns, model.config.max_length)
        order = sorted(range(len(encoded)), key=lambda i: encoded[i].length)  # like lengths batched: less padding
        batches, counts = make_selection_batches([encoded[i] for i in order], batch_size, special_tokens(tokenizer),
                                                 model.config.max_length, sort_by_length=False)
        report = {key: report.get(key, 0) + n for key, n in counts.items()}
        chunk = [None] * len(order)
        for i, item_scores in zip(order, (s for batch in batches for s in model.predict(batch.to(device))[1])):
            chunk[i] = item_scores
        scores.extend(chunk)
    if truncation is not None:
        truncation.update(report)
    return scores


class ResponseRanker:
    """Rank candidate replies to a conversation with a trained model::

        ranker = ResponseRanker.from_checkpoint("runs/mdfn")
        ranker.rank([("m", "where are you going ?"), ("f", "to the bank .")], ["m : why ?", "m : see you !"])

    The dialogue is a `Dialogue` or a list of (speaker, text); a candidate is a text (spoken by the
    last speaker's partner), a (speaker, text) pair, or a `Turn`. Returns one score per candidate
    (higher = better; with a ``choice`` model, their softmax is the model's probability of each).
    """

    def __init__(self, model: MDFN, tokenizer):
        self.model, self.tokenizer = model.eval(), tokenizer

    @classmethod
    def from_checkpoint(cls, checkpoint) -> "ResponseRanker":
        model, tokenizer, _ = load_trained(checkpoint)
        return cls(model, tokenizer)

    def rank(self, dialogue, candidates, truncation: dict | None = None) -> list[float]:
        """Scores of the candidates (texts, spoken by the next speaker; (speaker, text) pairs; {"speaker", "text"}
        mappings; or Turns) as replies to the dialogue (a Dialogue or a list of turns). ``truncation``, if given, is
        filled with what the model did not read (`make_selection_batches`'s report; `truncation_note` says it)."""
        dialogue = as_dialogue(dialogue)
        if isinstance(candidates, str | bytes | Mapping) or not isinstance(candidates, Iterable):
            raise DialogueError(f"candidates: expected a list of candidate responses, got {type(candidates).__name__}")
        reply = next_speaker(dialogue)
        turns = [as_turn(c, f"candidates[{i}]", default_speaker=reply) for i, c in enumerate(candidates)]
        item = ResponseSelectionItem(context=dialogue, candidates=turns, id=dialogue.id or "input")
        return score_items(self.model, self.tokenizer, [item], truncation=truncation)[0]


def rank(dialogue, candidates, checkpoint) -> list[float]:
    """One-off ranking: `ResponseRanker.from_checkpoint(checkpoint).rank(dialogue, candidates)`."""
    return ResponseRanker.from_checkpoint(checkpoint).rank(dialogue, candidates)


def read_selection_file(path: Path) -> list[ResponseSelectionItem]:
    """Items of a file, told by its content (its name may say .csv or nothing): JSON objects, one a line, with
    ``meta.candidates``, or tab-separated ``label \t context ... \t response`` lines."""
    if is_jsonl(path):
        report = LoadReport(source=str(path))  # the summary logged after the last item's candidates are read too
        items = [dialogue_to_item(d, f"{path}:{line}", report) for line, d in iter_jsonl(path, report=report)]
        if not items:
            raise DialogueError(f"{path}: no items in the file")
        return items
    return read_selection_tsv(path)


def is_jsonl(path: Path) -> bool:
    """Whether a file of items is JSON Lines: its first line is an object, or (a file of nothing, to be named so) its
    name says .jsonl."""
    line = first_line(path).lstrip()
    return line.startswith("{") or not line and path.name.lower().endswith((".jsonl", ".jsonl.gz"))


def load_items(spec: str, data_dir=None) -> list[ResponseSelectionItem]:
    """Items to rank: a benchmark split ``NAME:SPLIT`` (mutual, mutual-plus), a tab-separated file
    (Ubuntu format), or a JSONL file of conversations with ``meta.candidates``."""
    path = Path(spec)
    if path.exists() and not names_benchmark(spec):
        return read_selection_file(path)
    if benchmark := parse_split_spec(spec):
        if get_info(benchmark[0]).task != "response_selection":  # said before its split is read
            raise DialogueError(f"{benchmark[0]} is not a response-selection dataset")
        return list(load_split(*benchmark, data_dir).items)
    raise DialogueError(f"{spec}: no such file, and not a dataset split (NAME:SPLIT, e.g. mutual:test)")


def truncation_note(report: dict, config) -> str | None:
    """One line on what the model did not read, or None when every candidate sequence was read whole."""
    if not report.get("truncated_sequences") and not report.get("cut_texts"):
        return None
    parts = [f"{report['dropped_tokens']} tokens dropped"]
    if report.get("cut_texts"):  # a huge text is cut before it is tokenised: what lay past the cut is not counted
        parts = [f"at least {report['dropped_tokens']} tokens dropped ({report['cut_texts']} texts over "
                 f"{CHARS_PER_TOKEN * (config.max_length + 2)} characters were cut before being read, their tokens past "
                 "the cut not counted)"]
    if report.get("dropped_turns"):
        parts.append(f"{report['dropped_turns']} oldest context turns beyond the {config.max_turns} turns read")
    if report.get("truncated_responses"):
        parts.append(f"{report['truncated_responses']} over-long candidate responses cut at their end")
    return (f"note: {report['truncated_sequences']} of {report['sequences']} candidate sequences were longer than the model reads "
            f"({config.max_length} tokens, {config.max_turns} turns) and were cut oldest-first: " + "; ".join(parts))


def prediction_rows(items: Sequence[ResponseSelectionItem], scores: Sequence[Sequence[float]],
                    names: Sequence[str] | None = None) -> list[dict]:
    """A row per item: its scores, the candidates best first, the best one's text (and the answer, and the candidates'
    0/1 relevance, where known); `names`, the items' names in the output (default: their ids, or, where none, their
    place in `items`)."""
    rows = []
    for item_id, item, s in zip(names or output_names([item.id for item in items]), items, scores):
        shown = shown_scores(s)
        order = rank_candidates(shown)  # the scores shown: equal texts, whose scores differ by rounding noise, tie
        rows.append({"id": item_id, "scores": shown, "ranking": order, "best": order[0],
                     "best_text": item.candidates[order[0]].text, **({"answer": item.answer} if item.answer is not None else {}),
                     **({"relevance": list(item.relevance)} if item.relevance is not None else {})})
    return rows


def write_submission(rows: Sequence[dict], path: Path) -> None:
    """MuTual's submission format: ``id \\t rank-1 letter \\t rank-2 letter ...`` one item a line."""
    write_file(Path(path), "".join(submission_lines(rows)).encode("utf-8"))


def submission_lines(rows: Iterable[dict]) -> list[str]:
    """`write_submission`'s lines (`rows` read once), an id that the format cannot hold refused."""
    return [submission_line(r) for r in rows]


def submission_line(row: dict) -> str:
    """One item's line: its id, then its candidates' letters best first."""
    if any(c in str(row["id"]) for c in "\t\r\n"):  # would shift or split the item's line
        raise DialogueError(f"--submission: item {row['id']!r}: an id with a tab or line break cannot be written in MuTual's "
                            "submission format")
    if len(row["ranking"]) > len(LETTERS):
        raise DialogueError(f"--submission: item {row['id']} has {len(row['ranking'])} candidates; MuTual's submission "
                            f"format names them by the letters A-J, so {len(LETTERS)} at most")
    return "\t".join([str(row["id"]), *(LETTERS[i] for i in row["ranking"])]) + "\n"


def item_blocks(spec: str, data_dir=None, block_utterances: int | None = None) -> InputBlocks:
    """The items of `load_items` as `InputBlocks`: a file (JSON Lines or tab-separated) read a line at a time, never
    whole; a benchmark split held whole."""
    path = Path(spec)
    if not path.exists():
        items = load_items(spec, data_dir)
        return InputBlocks(lambda first: items, item_utterances, block_utterances=block_utterances, noun="items")
    if is_jsonl(path):
        def read(first: bool) -> Iterator[ResponseSelectionItem]:
            report = LoadReport(source=str(path))
            return (dialogue_to_item(d, f"{path}:{line}", report) for line, d in iter_jsonl(path, report=report, summary=first))
        return InputBlocks(read, item_utterances, f"{spec}: no items in the file", block_utterances, "items")
    return InputBlocks(lambda first: iter_selection_tsv(path, summary=first), item_utterances,
                       f"{path}: no (label, context, response) lines", block_utterances, "items")


def item_utterances(item: ResponseSelectionItem) -> int:
    return len(item.context) + len(item.candidates)


def predict_items(model: MDFN, tokenizer, source: str, data_dir=None, submission: Path | None = None) -> Predictions:
    """The candidates of every item of `source` scored and ranked, best first, a block of items at a time
    (`item_blocks`); with `submission`, MuTual's submission file written there too, after the last block (the
    rankings then are not shown as a table)."""
    blocks = item_blocks(source, data_dir)
    truncation: dict = {}
    lines: list[str] = []  # the submission's, one short line an item (on going on, made again from the rows kept)

    def blocks_made() -> Iterator[tuple[list[dict], list[tuple[str, ...]]]]:
        for k, (names, items) in enumerate(blocks):
            part: dict = {}
            rows = prediction_rows(items, score_items(model, tokenizer, items, truncation=part, desc=blocks.desc(k, "score")), names)
            truncation.update({key: truncation.get(key, 0) + n for key, n in part.items()})
            if submission is not None:
                lines.extend(submission_lines(rows))
            yield rows, [(str(r["id"]), str(r["best"]), shorten(r["best_text"]), " ".join(f"{x:.2f}" for x in r["scores"]))
                         for r in rows]
        if submission is not None:
            write_file(Path(submission), "".join(lines).encode("utf-8"))
            predictions.written.append(f"wrote the rankings of {len(lines)} items to {submission}")
        if note := truncation_note(truncation, model.config):
            predictions.notes.append(note)

    predictions = Predictions(blocks_made(), "rankings", ("item", "best", "reply", "scores"), table=submission is None,
                              source=blocks, state={"truncation": truncation},
                              rebuild=(lambda rows: lines.extend(submission_lines(rows))) if submission is not None else None)
    return predictions


class ResponseSelection:
    """Response selection as a `turnformer.tasks.base.Task`: the candidate replies of an item, ranked."""

    name = "response-selection"
    title = TITLE
    labelled = False
    models = MODELS
    options = frozenset({"submission"})
    command = "predict"
    session_class = ResponseRanker

    load_data = staticmethod(load_selection_data)
    train = staticmethod(train_response_selection)
    load_trained = staticmethod(load_trained)
    evaluate = staticmethod(evaluate_split)

    def predict(self, model, tokenizer, run: dict, source: str, data_dir=None, submission: Path | None = None) -> Predictions:
        return predict_items(model, tokenizer, source, data_dir, submission)

    def session(self, model, tokenizer, run: dict) -> ResponseRanker:
        return ResponseRanker(model, tokenizer)

    def serves(self, model) -> frozenset[str]:
        return frozenset({RANK})

    def rank(self, model, tokenizer, run: dict, dialogue, candidates, truncation: dict | None = None) -> list[float]:
        scores = self.session(model, tokenizer, run).rank(dialogue, candidates, truncation)
        if truncation is not None:
            truncation["note"] = truncation_note(truncation, model.config)
        return scores


TASK = ResponseSelection()

__all__ = ["MODELS", "RESPONSE_SELECTION_MODELS", "TASK", "ResponseRanker", "build_selection_model", "dialogue_to_item",
           "encode_items", "evaluate", "evaluate_split", "item_blocks", "load_items", "load_selection_data", "load_trained",
           "make_selection_batches", "predict_items", "prediction_rows", "rank", "score_items", "train_response_selection",
           "truncation_note", "write_submission"]
