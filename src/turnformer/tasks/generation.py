"""Response generation: data shared by every generator (DRA, PHAED and their baselines), training, evaluation,
replies for users, and the task as the command line and a server reach it (`TASK`).

Instances (DRA's setup): in each conversation every turn after the first is a target response; its
context is the turns before it, at most ``max_context_turns`` (4), newest kept. Text becomes words by
`words` (lower-cased; DailyDialog is already tokenised, so this mostly splits on spaces), cut at
``max_words`` (50) words per utterance; the cuts are counted in the report.

Speaker roles (PHAED): the response's speaker is ``R``; every other speaker of the context is ``Q``
(in DailyDialog's two-party conversations, the partner). A speaker-aware utterance is
``[SOU] [SPEAKER-Q|R] w_1 ... w_n [EOU]`` (PHAED section 3.2); without speaker tokens (an ablation, and
the plain baselines) ``[SOU] w_1 ... w_n [EOU]``. A decoder reads the response's utterance minus its
last token and predicts it shifted by one; the speaker token's prediction is left out of perplexity
(PHAED does so: it is almost certain and would flatter the score).

The vocabulary (DRA): the words of the training conversations seen at least ``min_count`` (3) times;
the rest become ``[UNK]``. It is saved with every checkpoint (`Vocabulary.to_dict`). Words, special tokens,
instances and the vocabulary are `turnformer.data.generation_vocab`'s, which the generators read too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import torch

from turnformer.data import load_split
from turnformer.data.generation_vocab import (EOU, PAD, SOU, SPEAKER_Q, SPEAKER_R, SPECIALS, UNK, GenerationInstance,
                                              Utterance, Vocabulary, detokenize, words)
from turnformer.dialogue import Dialogue, DialogueError, as_dialogue, is_blank, next_speaker, output_names, speaker_name
from turnformer.models.dialogbert import DialogBERTGenerator
from turnformer.models.dra import TransformerDRA
from turnformer.models.generator_base import IGNORE, GenerationBatch
from turnformer.models.gpt2_generator import GPT2Generator
from turnformer.models.phaed import PHAED
from turnformer.models.smollm2 import PRETRAINED, SmolLM2Config, SmolLM2Generator
from turnformer.models.transformer_generator import TransformerGenerator
from turnformer.parsing import DependencyParser
from turnformer.recipes import recipe_train_config
from turnformer.tasks.base import GENERATE, ModelBuilder, Predictions
from turnformer.tasks.common import (SPLITS, Tally, check_split, checkpoint_paths, conversation_blocks, model_builder,
                                     built_from_run_file, read_split_files, run_description, scored_run, shorten, upgrade_run)
from turnformer.tasks.generation_metrics import available_word_vectors, generation_metrics, perplexity
from turnformer.training import load_checkpoint, progress, set_seed, train

logger = logging.getLogger(__name__)
# a scored split whose responses have more unknown words than this says little: [UNK] is one cheap word to predict
UNKNOWN_RATE_WARNING = 0.2

TITLE = "generation"


@dataclass
class GenerationReport:
    instances: int = 0
    cut_utterances: int = 0  # longer than max_words
    empty_utterances: int = 0  # no word at all (e.g. only symbols the word pattern skips)
    one_turn_dialogues: int = 0  # a conversation of one turn: no (context, response) pair
    unknown_rate: float = 0.0  # of the response words, those not in the training vocabulary (where it is known)
    messages: list[str] = field(default_factory=list)

    def said(self, split: str) -> str | None:
        """What a user should hear of `split`'s conversations that the model reads as less than they hold, or None."""
        parts = []
        if self.one_turn_dialogues:
            parts.append(f"{self.one_turn_dialogues} conversation(s) of one turn give no (context, response) pair")
        if self.empty_utterances:
            parts.append(f"{self.empty_utterances} utterance(s) have no words and are read as [UNK]")
        if not parts:
            return None
        shown = "; ".join(self.messages[:3]) + ("; ..." if len(self.messages) > 3 else "")
        return f"{split} split: " + ", ".join(parts) + (f" ({shown})" if shown else "")


def make_instances(dialogues: Iterable[Dialogue], max_context_turns: int = 4, max_words: int = 50,
                   report: GenerationReport | None = None) -> list[GenerationInstance]:
    """Every (context, response) pair of the conversations (see the module docstring)."""
    check_cuts(max_context_turns, max_words)
    report = report if report is not None else GenerationReport()
    out: list[GenerationInstance] = []
    for d_index, dialogue in enumerate(dialogues):
        name = dialogue.id if dialogue.id is not None else str(d_index)
        if len(dialogue.turns) == 1:
            report.one_turn_dialogues += 1
            report.messages.append(f"dialogue {name!r}: one turn")
        cut = [cut_words(turn.text, max_words, report, f"dialogue {name!r} turn {t}") for t, turn in enumerate(dialogue.turns)]
        spoken: dict = {}  # speaker -> utterances so far
        for t, turn in enumerate(dialogue.turns):
            spoken[turn.speaker] = spoken.get(turn.speaker, 0) + 1
            if t == 0:
                continue
            first = max(0, t - max_context_turns)
            context = tuple(Utterance(cut[i], "R" if dialogue.turns[i].speaker == turn.speaker else "Q") for i in range(first, t))
            out.append(GenerationInstance(context, Utterance(cut[t], "R"), name, t, spoken[turn.speaker]))
    report.instances += len(out)
    return out


def reply_instance(dialogue: Dialogue, speaker: str, max_context_turns: int = 4, max_words: int = 50) -> GenerationInstance:
    """The instance of a reply by `speaker` to the end of `dialogue`, as `make_instances` builds it for a turn
    appended there (its response a placeholder "."), reading only the turns the context keeps: a reply to a long
    conversation costs what a reply to a short one does."""
    check_cuts(max_context_turns, max_words)
    name, report = dialogue.id if dialogue.id is not None else "0", GenerationReport()  # a reply's cuts: `unread` says them
    turns, first = dialogue.turns, max(0, len(dialogue.turns) - max_context_turns)
    context = tuple(Utterance(cut_words(turns[i].text, max_words, report, f"dialogue {name!r} turn {i}"),
                              "R" if turns[i].speaker == speaker else "Q") for i in range(first, len(turns)))
    spoken = 1 + sum(turn.speaker == speaker for turn in turns)
    return GenerationInstance(context, Utterance((".",), "R"), name, len(turns), spoken)


def replier(dialogue: Dialogue, speaker: str | None) -> str:
    """Who replies: `speaker` as a turn's speaker is read (`speaker_name`: without the spaces around it, composed); none
    given, `next_speaker`. A whole number is a speaker id, as in a turn; anything else not a string is refused."""
    if isinstance(speaker, int) and not isinstance(speaker, bool):
        speaker = str(speaker)
    if speaker is not None and not isinstance(speaker, str):
        raise DialogueError(f"speaker: expected a speaker's name (a string), got {type(speaker).__name__} {speaker!r}")
    name = speaker_name(speaker or "")
    return name if not is_blank(name) else next_speaker(dialogue)


def check_cuts(max_context_turns: int, max_words: int) -> None:
    if max_context_turns < 1 or max_words < 1:
        raise ValueError(f"need max_context_turns >= 1 and max_words >= 1, got {max_context_turns}, {max_words}")


def cut_words(text: str, max_words: int, report: GenerationReport, where: str) -> tuple[str, ...]:
    """An utterance's words, its first `max_words` (a cut counted in `report`); one without words is [UNK]."""
    w = words(text, max_words + 1)  # one more than kept: a cut shows
    if not w:
        report.empty_utterances += 1
        report.messages.append(f"{where}: no words in {text[:40]!r}; kept as [UNK]")
        w = [UNK]
    if len(w) > max_words:
        report.cut_utterances += 1
        w = w[:max_words]
    return tuple(w)


# --------------------------------------------------------------------------- batches, training, evaluation

def build_word_generator(cls, model_config: dict, vocab: Vocabulary):
    """A generator of class `cls` as its model config describes it (each class names its settings dataclass as
    ``config_class``; an ablation is a setting, e.g. ``turn_attention = false``) over the word vocabulary."""
    config = cls.config_class.from_recipe(model_config, vocab_size=len(vocab))
    return cls(config, pad_id=vocab.index[PAD], eou_id=vocab.index[EOU])


# The word generators (over our vocabulary, with beam search): model id -> class
WORD_GENERATOR_CLASSES: dict[str, type] = {
    "transformer": TransformerGenerator,
    "transformer-dra": TransformerDRA,
    **dict.fromkeys(("dialogbert", "dialogbert-dra"), DialogBERTGenerator),
    **dict.fromkeys(("phaed", "phaed-no-speaker-tokens", "phaed-no-turn-emb", "phaed-no-turn-attn", "phaed-no-recurrence"),
                    PHAED),
    "gpt2-scratch": GPT2Generator,
}
# model id -> builder: (model config, vocabulary) -> model
WORD_GENERATORS: dict[str, ModelBuilder] = {model_id: partial(build_word_generator, cls)
                                            for model_id, cls in WORD_GENERATOR_CLASSES.items()}
MODELS: dict[str, ModelBuilder] = {
    **WORD_GENERATORS,
    # SmolLM2-135M-Instruct fine-tuned over its sub-words; -phaed: its recipe adds PHAED's speaker tokens and turn-relative
    # attention
    **dict.fromkeys(("smollm2", "smollm2-phaed"), lambda config, vocab: SmolLM2Generator(SmolLM2Config.from_dict(config), vocab)),
}
GENERATION_MODELS = MODELS


def pretrained_start(model_id: str) -> str:
    """What the generator `model_id` starts from, as results files name a backbone: the word generators are trained
    from scratch."""
    return PRETRAINED if model_id.startswith("smollm2") else "none (trained from scratch)"


def build_generator(model_id: str, model_config: dict, vocab: Vocabulary):
    """The generator `model_id` names, built from `model_config` over `vocab`."""
    return model_builder(MODELS, model_id, TITLE)(model_config, vocab)


def encode_instance(instance: GenerationInstance, vocab: Vocabulary, speaker_tokens: bool = True, parse=None):
    """(context ids, turn distance of each context token (1 = newest utterance), response input ids,
    response target ids, role of each context token (1 = Q, 2 = R), dependency heads) of one instance;
    see `GenerationBatch`. The heads are None without `parse` (words -> each word's governor index in the
    utterance, -1 for the root); with it, each context token's governor column in the flat context, -1
    for roots and special tokens."""
    context, turns, roles, heads = [], [], [], []
    for back, utterance in zip(range(len(instance.context), 0, -1), instance.context):
        ids = vocab.utterance_ids(utterance, speaker_tokens)
        if parse is not None:
            first_word = len(context) + len(ids) - len(utterance.words) - 1  # after [SOU] (and the speaker token)
            heads += [-1] * (first_word - len(context))
            heads += [first_word + h if h >= 0 else -1 for h in parse(utterance.words)]
            heads.append(-1)  # [EOU]
        context += ids
        turns += [back] * len(ids)
        roles += [2 if utterance.role == "R" else 1] * len(ids)
    response = vocab.utterance_ids(instance.response, speaker_tokens)
    target = response[1:]
    if speaker_tokens:  # the response's speaker is given, not predicted
        target[0] = IGNORE
    return context, turns, response[:-1], target, roles, (heads if parse is not None else None)


def encode_instances(instances: Sequence[GenerationInstance], vocab: Vocabulary, model, parser=None) -> list[tuple]:
    """`encode_instance` of each instance as `model` reads it (with or without speaker tokens, and with
    dependency heads when the model needs parses: spaCy, cached on disk by `turnformer.parsing`), followed by the
    instance's `response_turn`."""
    parse = None
    if getattr(model, "needs_parses", False):
        parse = parser or DependencyParser()
        parse.parse_many(sorted({u.words for x in instances for u in x.context}))  # batched, once per text
    return [(*encode_instance(x, vocab, model.config.speaker_tokens, parse), x.response_turn) for x in instances]


# Batches sort instances by context length in steps of this many tokens, then by response length: on DailyDialog
# this pads contexts 3% more than an exact sort by context but responses 2.6 times less (their padded tokens go
# from 2.9 to 1.1 times the real ones), so that the decoder and the output projection do far less work.
CONTEXT_LENGTH_STEP = 4


def instance_batches(model, instances: Sequence[GenerationInstance], vocab: Vocabulary, batch_size: int,
                     sort_by_length: bool = True, parser=None) -> list:
    """Batches of `instances` as `model` reads them: a model with batches of its own (a pretrained decoder over
    its sub-words) makes them; the word generators read `GenerationBatch`es of our vocabulary."""
    if hasattr(model, "make_batches"):
        return model.make_batches(instances, batch_size, sort_by_length)
    fitted = [model.fit_context(x) for x in instances]
    cut, capped = sum(x is not y for x, y in zip(fitted, instances)), sum(map(model.turns_capped, fitted))
    if cut:
        logger.info("%d of %d instances: the context cut to its newest turns, to fit model_config.max_positions = %d",
                    cut, len(instances), model.config.max_positions)
    if capped:
        logger.info("%d of %d instances: turns past the %dth share one turn embedding (model_config.max_turns)",
                    capped, len(instances), model.config.max_turns)
    instances = fitted
    return make_generation_batches(encode_instances(instances, vocab, model, parser), batch_size, sort_by_length)


def make_generation_batches(encoded: Sequence[tuple], batch_size: int, sort_by_length: bool = True):
    """`GenerationBatch`es of `encoded` instances (`encode_instance`'s rows, each followed by its response's
    aligned turn as `encode_instances` gives them, or without it: 0, not known); sorted by context, then response
    length (less padding; see `CONTEXT_LENGTH_STEP`) unless told not to."""
    def length(i: int) -> tuple[int, int]:
        return len(encoded[i][0]) // CONTEXT_LENGTH_STEP, len(encoded[i][2])

    order = sorted(range(len(encoded)), key=length) if sort_by_length else list(range(len(encoded)))

    def pad(rows, value):
        out = torch.full((len(rows), max(len(r) for r in rows)), value, dtype=torch.long)
        for i, r in enumerate(rows):
            out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        return out

    batches = []
    for start in range(0, len(order), batch_size):
        rows = [encoded[i] for i in order[start : start + batch_size]]
        heads = pad([r[5] for r in rows], -1) if rows[0][5] is not None else None
        batches.append(GenerationBatch(pad([r[0] for r in rows], 0), pad([r[1] for r in rows], 0), pad([r[2] for r in rows], 0),
                                       pad([r[3] for r in rows], IGNORE), pad([r[4] for r in rows], 0), heads,
                                       torch.tensor([r[6] if len(r) > 6 else 0 for r in rows], dtype=torch.long)))
    return batches


def evaluate_perplexity(model, batches) -> dict:
    """Perplexity of the reference responses (speaker tokens left out); ``primary`` is its negative,
    so that the epoch with the lowest validation perplexity is the best one."""
    device = next(model.parameters()).device
    total, tokens = 0.0, 0
    with torch.no_grad():
        for batch in progress(batches, "perplexity"):
            nll, n = model.negative_log_likelihood(batch.to(device))
            total, tokens = total + nll, tokens + n
    ppl = perplexity(total, tokens)
    return {"primary": -ppl, "perplexity": ppl, "tokens": tokens}


def evaluate_generation(model, batches, vocab: Vocabulary, decode: bool = True, word_vectors=None, beam_size: int = 1) -> dict:
    """Perplexity, and with `decode` the BLEU-1..4 and Distinct-1/2 of the responses (greedy, or beam search
    with ``beam_size > 1``; and the embedding metrics with `word_vectors`); ``primary`` is minus the perplexity."""
    if decode and beam_size > 1 and hasattr(model, "generate_words"):  # refused before the perplexity pass, not after it
        raise DialogueError(f"--beam {beam_size}: {type(model).__name__} replies greedily; beam search is for the word "
                            "generators")
    metrics = evaluate_perplexity(model, batches)
    if decode:
        references, hypotheses = generate_responses(model, batches, vocab, beam_size)
        metrics.update(generation_metrics(hypotheses, references, word_vectors))
        metrics["sample"] = [" ".join(h) for h in hypotheses[:3]]
    return metrics


def generate_responses(model, batches, vocab: Vocabulary, beam_size: int = 1) -> tuple[list[list[str]], list[list[str]]]:
    """(references, hypotheses: greedy, or beam search with ``beam_size > 1``) as word lists, in the batches' order."""
    device = next(model.parameters()).device
    references, hypotheses = [], []
    with torch.no_grad():
        for batch in progress(batches, "generate"):
            gold, predicted = model.predict(batch.to(device), beam_size)
            references += [vocab.decode(g) for g in gold]
            hypotheses += [vocab.decode(h) for h in predicted]
    return references, hypotheses


def load_generation_data(recipe: dict, data_dir=None, only: Sequence[str] = SPLITS) -> dict[str, list[Dialogue]]:
    """The conversations of each split (or of those in ``only``): a benchmark (``dataset = "dailydialog"``, ``"empathetic-dialogues"``,
    ``"personachat"``...; only the turns' speakers and texts are read, no labels) or the user's JSONL
    files (``dataset = "file"`` with ``train_file``, ``validation_file``, ``test_file``)."""
    if recipe["dataset"] == "file":
        return read_split_files(recipe, only)
    return {split: list(load_split(recipe["dataset"], split, data_dir).dialogues) for split in only}


def split_where(split: str, recipe: dict) -> str:
    """A split as an error names it: after its file, or its benchmark, where the recipe gives one."""
    where = recipe.get(f"{split}_file") if recipe.get("dataset") == "file" else recipe.get("dataset")
    return f"{where + ': ' if where else ''}{split} split"


def require_pairs(instances: Sequence, split: str, recipe: dict) -> None:
    """A split that gives no instance is refused, named by its file where it comes from one."""
    if not instances:
        raise DialogueError(f"{split_where(split, recipe)}: no (context, response) pairs: a conversation needs two "
                            "turns or more")


def check_positions(config, max_words: int) -> None:
    """Refuse, before any training, the settings under which an utterance ([SOU], its speaker, its words, [EOU]) can
    be longer than the model's position table: the longest read (``data.max_words``) or made
    (``model_config.max_response_words``). A sub-word decoder (no ``max_positions``) counts its window its own way."""
    if not hasattr(config, "max_positions"):
        return
    longest = max(max_words, config.max_response_words) + 2 + int(config.speaker_tokens)
    if longest > config.max_positions:
        raise DialogueError(f"data.max_words = {max_words} and model_config.max_response_words = {config.max_response_words}"
                            f" make utterances of up to {longest} tokens, over model_config.max_positions = "
                            f"{config.max_positions}: raise max_positions or lower the words")


def check_model_config(recipe: dict) -> None:
    """The recipe's model and [model_config] checked before any data is read (the vocabulary's size stood in for),
    and the utterances its [data] makes against the model's positions (`check_positions`)."""
    model_id, settings = recipe["model"], recipe.get("model_config", {})
    model_builder(MODELS, model_id, TITLE)
    if model_id in WORD_GENERATOR_CLASSES:
        config = WORD_GENERATOR_CLASSES[model_id].config_class.check_recipe(settings, vocab_size=len(SPECIALS))
    else:
        config = SmolLM2Config.from_dict(settings)
    check_positions(config, int(recipe.get("data", {}).get("max_words", 50)))


def prepare_generation(recipe: dict, data_dir=None, limits: dict[str, int] | None = None):
    """Model, vocabulary, batches per split and the data reports of a generation recipe."""
    check_model_config(recipe)
    dialogues = load_generation_data(recipe, data_dir)
    for split, n in (limits or {}).items():
        dialogues[split] = dialogues[split][:n]
    data = recipe.get("data", {})
    vocab = Vocabulary.build(dialogues["train"], int(data.get("min_count", 3)))
    model = build_generator(recipe["model"], recipe.get("model_config", {}), vocab)
    settings = recipe.get("train", {})
    batches, reports = {}, {}
    for split, convs in dialogues.items():
        report = GenerationReport()
        instances = make_instances(convs, int(data.get("max_context_turns", 4)), int(data.get("max_words", 50)), report)
        require_pairs(instances, split, recipe)
        size = int(settings.get("batch_size", 64)) if split == "train" else int(settings.get("eval_batch_size", 128))
        batches[split] = split_named(lambda: instance_batches(model, instances, vocab, size), split, recipe)
        reports[split] = {"dialogues": len(convs), "instances": report.instances, "cut_utterances": report.cut_utterances,
                          "empty_utterances": report.empty_utterances, "one_turn_dialogues": report.one_turn_dialogues,
                          "unknown_rate": vocab.unknown_rate(instances)}
        if said := report.said(split):
            logger.warning("%s", said)
        if split != "train":
            warn_unknown(reports[split]["unknown_rate"], split, vocab, recipe)
    return model, vocab, batches, reports


def warn_unknown(rate: float, split: str, vocab: Vocabulary, recipe: dict) -> None:
    """Warn where over `UNKNOWN_RATE_WARNING` of a scored split's response words (`rate`) are not in the vocabulary."""
    if rate > UNKNOWN_RATE_WARNING:
        file = recipe.get(f"{split}_file") if recipe.get("dataset") == "file" else None
        logger.warning("%s split: %.0f%% of its response words are not in the training vocabulary (%d words, "
                       "data.min_count %s): each counts as [UNK], one cheap word, so its perplexity says little%s",
                       split, 100 * rate, len(vocab), recipe.get("data", {}).get("min_count", 3), f" ({file})" if file else "")


def train_generation(recipe: dict, out_dir, seed: int, data_dir=None, resume: bool = False,
                     time_budget_s: float | None = None, limits: dict[str, int] | None = None):
    """Train a generation recipe (teacher forcing); the epoch is chosen by validation perplexity.
    The vocabulary is saved in run.json. Checkpoints and resume work as for every other task."""
    set_seed(seed)
    model, vocab, batches, reports = prepare_generation(recipe, data_dir, limits)
    settings = recipe.get("train", {})
    config = recipe_train_config(settings, {"epochs": 10, "lr": 5e-4, "weight_decay": 0.01, "grad_clip": 1.0,
                                            "save_every_steps": 500, "scheduler": "linear"},
                                 seed=seed, out_dir=out_dir, resume=resume, time_budget_s=time_budget_s)
    run_info = run_description(recipe, seed, limits, [], reports, vocabulary=vocab.to_dict())
    # every epoch: validation perplexity (the epoch choice), test perplexity and greedy-decoding metrics (the
    # embedding ones where MiniLM's word vectors are installed)
    vectors = available_word_vectors()
    return train(model, batches["train"],
                 lambda m, split: evaluate_generation(m, batches[split], vocab, decode=split == "test", word_vectors=vectors),
                 config, label_map={"task": "generation"}, run_info=run_info)


def load_trained(checkpoint):
    """(model in eval mode, vocabulary, run description) of a trained generator: a run folder (its
    best/) or a checkpoint folder."""
    weights, run = checkpoint_paths(Path(checkpoint), task=TASK.name)
    if "vocabulary" not in run:
        raise DialogueError(f"{checkpoint}: not a generation run (its run.json has no vocabulary)")
    run = upgrade_run(run, MODELS)
    with built_from_run_file(weights):
        vocab = Vocabulary.from_dict(run["vocabulary"])
        model = build_generator(run["recipe"]["model"], run["recipe"].get("model_config", {}), vocab)
    load_checkpoint(weights, model)
    return model.eval(), vocab, run


def split_instances(run: dict, split: str, data_dir=None, limit: int | None = None,
                    report: GenerationReport | None = None) -> list[GenerationInstance]:
    """The (context, response) instances of a split of the run's data (its first `limit` conversations), made as the
    run made them; what they leave out is said, and counted in `report` where one is given."""
    recipe = run["recipe"]
    check_split(split, recipe)
    convs = load_generation_data(recipe, data_dir, [split])[split][:limit]
    data, report = recipe.get("data", {}), report if report is not None else GenerationReport()
    max_words = int(data.get("max_words", 50))
    instances = make_instances(convs, int(data.get("max_context_turns", 4)), max_words, report)
    require_pairs(instances, split, recipe)
    if said := report.said(split):
        logger.warning("%s", said)
    if report.cut_utterances:  # in contexts and references alike: the scores are of their first words
        logger.warning("%s split: %d utterance(s) longer than data.max_words = %d words are read as their first %d, "
                       "references included", split, report.cut_utterances, max_words, max_words)
    return instances


def split_batches(model, vocab: Vocabulary, run: dict, split: str, data_dir=None, limit: int | None = None,
                  report: GenerationReport | None = None) -> tuple[list, int]:
    """(evaluation batches, number of instances) of a split of the run's data (`split_instances`), batched as the
    run batched them."""
    report = report if report is not None else GenerationReport()
    instances = split_instances(run, split, data_dir, limit, report)
    report.unknown_rate = vocab.unknown_rate(instances)
    warn_unknown(report.unknown_rate, split, vocab, run["recipe"])
    return split_named(lambda: instance_batches(model, instances, vocab, eval_batch_size(run)), split, run["recipe"]), len(instances)


def split_named(make, split: str, recipe: dict):
    """``make()``, a DialogueError from it naming the split and, where it comes from one, its file (an instance is
    named by its conversation's id and turn alone)."""
    try:
        return make()
    except DialogueError as e:
        raise DialogueError(f"{split_where(split, recipe)}: {e}") from None


def eval_batch_size(run: dict) -> int:
    return int(run["recipe"].get("train", {}).get("eval_batch_size", 128))


def evaluate_split(model, vocab: Vocabulary, run: dict, split: str, data_dir=None, limit: int | None = None,
                   word_vectors=None, beam_size: int = 1) -> dict:
    """Perplexity, BLEU-1..4, Distinct-1/2 (and the embedding metrics with `word_vectors`) of the responses
    (greedy, or beam search with ``beam_size > 1``) on a split of the run's data (its first `limit` conversations)."""
    report = GenerationReport()
    batches, instances = split_batches(model, vocab, run, split, data_dir, limit, report)
    metrics = evaluate_generation(model, batches, vocab, True, word_vectors, beam_size)
    del metrics["primary"]
    return {**metrics, "instances": instances, "truncated_utterances": report.cut_utterances, "unknown_rate": report.unknown_rate}


class ResponseGenerator:
    """Continue conversations with a trained generator::

        bot = ResponseGenerator.from_checkpoint("runs/transformer")
        bot.respond([("A", "hi , how are you ?"), ("B", "fine , thanks . and you ?")], speaker="A")

    The dialogue is a `Dialogue` or a list of (speaker, text); the reply is spoken by `speaker`
    (default: the speaker before the last one, or a new one in a monologue). Replies are greedy, or the
    best of a beam search with ``beam_size > 1``.
    """

    def __init__(self, model, vocab: Vocabulary, max_context_turns: int = 4, max_words: int = 50, beam_size: int = 1):
        if beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {beam_size}")
        if beam_size > 1 and hasattr(model, "generate_words"):
            raise DialogueError(f"{type(model).__name__} replies greedily: beam search (beam_size {beam_size}) is for the word generators")
        self.model, self.vocab = model.eval(), vocab
        self.max_context_turns, self.max_words, self.beam_size = max_context_turns, max_words, beam_size

    @classmethod
    def from_checkpoint(cls, checkpoint, beam_size: int = 1) -> "ResponseGenerator":
        return cls.from_run(*load_trained(checkpoint), beam_size)

    @classmethod
    def from_run(cls, model, vocab: Vocabulary, run: dict, beam_size: int = 1) -> "ResponseGenerator":
        """A trained model reading contexts as its run's recipe cut them in training."""
        data = run["recipe"].get("data", {})
        return cls(model, vocab, int(data.get("max_context_turns", 4)), int(data.get("max_words", 50)), beam_size)

    def respond(self, dialogue, speaker: str | None = None) -> str:
        return self.respond_all([dialogue], [speaker])[0]

    def unread(self, dialogue, speaker: str | None = None) -> str | None:
        """What of `dialogue` the model does not read, in words ("its last 4 of 9 turns; 1 of them cut to its first
        50 words"); None: it reads all of it. The model reads the last `max_context_turns` turns, each its first
        `max_words` words, as in training; a sub-word decoder, what of them fits its window (a reply by `speaker`,
        None: `next_speaker`)."""
        dialogue = as_dialogue(dialogue)
        turns = dialogue.turns
        read = min(len(turns), self.max_context_turns)
        cut = sum(len(words(t.text, self.max_words + 1)) > self.max_words for t in turns[-self.max_context_turns:])
        parts = [f"its last {read} of {len(turns)} turns"] if len(turns) > read else []
        if cut:
            parts.append(f"{cut} of {'them' if parts else 'its turns'} cut to {'its' if cut == 1 else 'their'} first "
                         f"{self.max_words} words")
        if hasattr(self.model, "unread") and turns:
            instance = reply_instance(dialogue, replier(dialogue, speaker), self.max_context_turns, self.max_words)
            parts.append(self.model.unread(instance))
        return "; ".join(p for p in parts if p) or None

    def respond_all(self, dialogues, speakers=None, unfinished: list[bool] | None = None) -> list[str]:
        """One reply per dialogue (a Dialogue or a list of turns), spoken by ``speakers[i]`` (None: `next_speaker`), as
        ordinary text: the model's lower-cased words with punctuation glued back and sentences capitalised. `unfinished`,
        if given, is extended with whether each reply reached the decoder's last step without ending (`unfinished`)."""
        replies = self.replies(dialogues, speakers)
        if unfinished is not None:
            unfinished.extend(cut for _, cut in replies)
        return [detokenize(reply) for reply, _ in replies]

    def reply_words(self, dialogues, speakers=None) -> list[list[str]]:
        """`respond_all`'s replies as the model's words (what the metrics score)."""
        return [reply for reply, _ in self.replies(dialogues, speakers)]

    def replies(self, dialogues, speakers=None) -> list[tuple[list[str], bool]]:
        """(the model's words, whether it reached a word decoder's last step without ending: cut there) of every
        reply. The steps are counted in the decoder's tokens, not in the words decoded from them, which leave out
        the special ones it may have said. (A sub-word decoder's replies end at its `max_new_tokens` and are not told
        apart.)"""
        dialogues = [as_dialogue(d) for d in dialogues]
        speakers = [None] * len(dialogues) if speakers is None else speakers
        if isinstance(speakers, str) or len(speakers) != len(dialogues):
            raise DialogueError(f"speakers: expected a list of {len(dialogues)} speakers (or None), one per dialogue")
        instances = []
        for dialogue, speaker in zip(dialogues, speakers):
            instances.append(reply_instance(dialogue, replier(dialogue, speaker), self.max_context_turns, self.max_words))
        batches = instance_batches(self.model, instances, self.vocab, 64, sort_by_length=False)
        device = next(self.model.parameters()).device
        if hasattr(self.model, "generate_words"):  # a sub-word decoder's replies keep their rare words
            return [(list(h), False) for batch in batches for h in self.model.generate_words(batch.to(device))]
        steps = self.model.config.max_response_words + 1
        with torch.no_grad():
            return [(self.vocab.decode(ids), len(ids) >= steps) for batch in progress(batches, "generate")
                    for ids in self.model.generate(batch.to(device), beam_size=self.beam_size)]


def generate_replies(model, vocab: Vocabulary, run: dict, source: str, data_dir=None, speaker: str | None = None,
                     beam: int = 1) -> Predictions:
    """One reply to every conversation of `source`, spoken by `speaker` (None: the speaker before the last one), made
    a block of conversations at a time (`conversation_blocks`)."""
    blocks = conversation_blocks(source, data_dir)
    generator = ResponseGenerator.from_run(model, vocab, run, beam)
    cut, unfinished, empty = Tally(), Tally(), Tally()

    def blocks_made() -> Iterator[tuple[list[dict], list[tuple[str, ...]]]]:
        for names, dialogues in blocks:
            at_last_step = []
            replies = generator.respond_all(dialogues, [speaker] * len(dialogues), unfinished=at_last_step)
            unfinished.add(str(name) for name, last in zip(names, at_last_step) if last)
            unread = [generator.unread(d, speaker) for d in dialogues]
            rows = [{"id": name, "speaker": replier(d, speaker), "response": r, "truncated": u is not None, "unfinished": last}
                    for name, d, r, u, last in zip(names, dialogues, replies, unread, at_last_step)]
            cut.add(f"{name} ({u})" for name, u in zip(names, unread) if u is not None)
            empty.add(str(name) for name, r, last in zip(names, replies, at_last_step) if not r and not last)
            yield rows, [(r["id"], shorten(f"{d.turns[-1].speaker}: {d.turns[-1].text}"), f"{r['speaker']}: {r['response']}")
                         for d, r in zip(dialogues, rows)]
        if cut.count:
            predictions.notes.append(f"note: the model read only part of {cut.count} conversation(s): {cut}")
        if unfinished.count:
            predictions.notes.append(f"note: {unfinished.count} reply(ies) reached the model's last step "
                                     f"({model.config.max_response_words} words and one) without ending, cut there: {unfinished}")
        if empty.count:
            predictions.notes.append(f"note: {empty.count} reply(ies) are empty: the model ended them at once: {empty}")

    predictions = Predictions(blocks_made(), "replies", ("conversation", "last turn", "reply"), source=blocks,
                              state={"cut": cut, "unfinished": unfinished, "empty": empty})
    return predictions


class Generation:
    """Response generation as a `turnformer.tasks.base.Task`: a conversation continued with one reply."""

    name = "generation"
    title = TITLE
    labelled = False
    models = MODELS
    options = frozenset({"beam"})
    command = "generate"
    session_class = ResponseGenerator

    load_data = staticmethod(load_generation_data)
    train = staticmethod(train_generation)
    load_trained = staticmethod(load_trained)
    predict = staticmethod(generate_replies)

    def evaluate(self, model, vocab: Vocabulary, run: dict, split: str, data_dir=None, limit: int | None = None,
                 input_file: Path | None = None, beam: int = 1) -> dict:
        """`evaluate_split`, with the embedding metrics where MiniLM's word vectors are installed."""
        return evaluate_split(model, vocab, scored_run(run, input_file), split, data_dir, limit, available_word_vectors(), beam)

    def session(self, model, vocab: Vocabulary, run: dict, beam: int = 1) -> ResponseGenerator:
        return ResponseGenerator.from_run(model, vocab, run, beam)

    def serves(self, model) -> frozenset[str]:
        return frozenset({GENERATE})

    def respond(self, model, vocab: Vocabulary, run: dict, dialogue, speaker: str | None = None, beam: int = 1,
                truncation: dict | None = None) -> str:
        if beam > 1 and hasattr(model, "generate_words"):  # a request's field, named as a server names one
            raise DialogueError(f"beam: {beam}; this model ({type(model).__name__}) replies greedily, beam search is for "
                                "the word generators: give beam 1")
        generator = self.session(model, vocab, run, beam)
        if truncation is not None and (unread := generator.unread(dialogue, speaker)) is not None:
            truncation["note"] = f"the model read {unread}"
        at_last_step: list[bool] = []
        reply = generator.respond_all([dialogue], [speaker], unfinished=at_last_step)[0]
        if truncation is not None and at_last_step[0]:
            truncation["unfinished"] = (f"the reply reached the model's last step ({model.config.max_response_words} "
                                        "words and one) without ending: cut there")
        return reply


TASK = Generation()

__all__ = ["EOU", "GENERATION_MODELS", "MODELS", "PAD", "SOU", "SPEAKER_Q", "SPEAKER_R", "SPECIALS", "TASK", "UNK",
           "GenerationInstance", "GenerationReport", "ResponseGenerator", "Utterance", "Vocabulary", "build_generator",
           "build_word_generator", "encode_instance", "encode_instances", "evaluate_generation", "evaluate_perplexity",
           "evaluate_split", "generate_replies", "generate_responses", "instance_batches", "load_generation_data", "load_trained", "split_batches",
           "split_instances", "eval_batch_size",
           "make_generation_batches", "make_instances", "prepare_generation", "pretrained_start", "reply_instance", "train_generation",
           "WORD_GENERATORS", "words"]
