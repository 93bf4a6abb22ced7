"""Beam search of every response generator (tiny models): a beam of 1 is greedy decoding, a wide beam
finds the best response by exhaustive enumeration, a beam of 4 does no worse than greedy, batching does
not change a result, and `turnformer generate / evaluate --beam` work."""

import itertools
import json

import pytest
import torch
from typer.testing import CliRunner

from turnformer.cli import app
from turnformer.models.generator_base import repeat_state
from turnformer.tasks.generation import (WORD_GENERATORS, SPECIALS, ResponseGenerator, Vocabulary, build_generator,
                                         encode_instances, make_generation_batches, make_instances)

from _generation_checks import fit, id_settings, train_on_files_from_the_command_line
from test_phaed import DIALOGUES, SMALL  # contexts with and without queries and earlier responses

MAX_WORDS = 5


class ChainParser:
    """Stands in for spaCy: each word governed by the one before it. Beam search does not care where arcs come from."""

    def parse_many(self, texts):
        pass

    def __call__(self, words):
        return [i - 1 for i in range(len(words))]


def encoded_instances(model, vocab):
    return encode_instances(make_instances(DIALOGUES), vocab, model, parser=ChainParser())


def tiny(model_id, vocab):
    torch.manual_seed(0)
    return build_generator(model_id, {**SMALL, **id_settings(model_id)}, vocab).eval()


def trained(model_id, vocab):
    """A tiny model fitted a little to the dialogues, so that [EOU] comes at various lengths."""
    model = tiny(model_id, vocab)
    (batch,) = make_generation_batches(encoded_instances(model, vocab), 32)
    fit(model, batch, steps=15)
    return model


@pytest.fixture(scope="module")
def vocab():
    return Vocabulary.build(DIALOGUES, min_count=1)


@pytest.fixture(scope="module")
def models(vocab):
    """model id -> its `trained` model, fitted once for every test of the module."""
    cache = {}

    def get(model_id):
        if model_id not in cache:
            cache[model_id] = trained(model_id, vocab)
        return cache[model_id]

    return get


def score(model, encoded, responses, length_penalty=1.0):
    """Each response's sum of log-probabilities / length ** length_penalty, computed with `decode`
    directly, one example at a time. A response is a `generate`-style list: finished with [EOU]
    (counted in its length) unless it has MAX_WORDS + 1 words."""
    scores = []
    for row, response in zip(encoded, responses):
        (batch,) = make_generation_batches([row], 1)
        tokens = response if len(response) == MAX_WORDS + 1 else [*response, model.eou_id]
        scores.append(float(sequence_scores(model, batch, [tokens], length_penalty)[0]))
    return scores


def sequence_scores(model, batch, sequences, length_penalty):
    """Scores of equally long token `sequences` after the response prefix of a one-example `batch`."""
    prefix = model._response_prefix(batch)
    tokens = torch.tensor(sequences)
    state = repeat_state(model.encode(batch), 1, len(sequences))
    response_in = torch.cat([prefix.expand(len(sequences), -1), tokens[:, :-1]], 1)
    with torch.no_grad():
        log_probs = model.decode(state, response_in).double().log_softmax(-1)[:, prefix.shape[1] - 1:]
    return log_probs.gather(-1, tokens[..., None])[..., 0].sum(1) / tokens.shape[1] ** length_penalty


@pytest.mark.parametrize("model_id", WORD_GENERATORS)
def test_a_beam_of_one_is_greedy_decoding(models, vocab, model_id):
    model = models(model_id)
    (batch,) = make_generation_batches(encoded_instances(model, vocab), 32)
    greedy = model.generate(batch, MAX_WORDS)
    assert model.beam_search(batch, 1, MAX_WORDS) == greedy == model.generate(batch, MAX_WORDS, beam_size=1)
    assert len({len(g) for g in greedy}) > 1  # [EOU] at various steps: the comparison covers finishing


@pytest.mark.parametrize("length_penalty", [0.0, 0.6, 1.0])
def test_a_beam_wider_than_every_sequence_finds_the_best_one(length_penalty):
    vocab = Vocabulary.build(DIALOGUES, min_count=3)  # [UNK] and 4 words a reply may hold, and [EOU]
    assert len(vocab.index) == len(SPECIALS) + 4
    model = trained("transformer", vocab)  # fitted a little: its replies end at various lengths
    encoded = encoded_instances(model, vocab)
    max_words = 2
    words = [t for t in range(len(vocab)) if t not in (model.eou_id, *model.unsaid_ids())]  # never [SOU], speakers
    # every response: up to max_words words then [EOU], or max_words + 1 words never finished
    candidates = [[*w, model.eou_id] for n in range(max_words + 1) for w in itertools.product(words, repeat=n)]
    candidates += [list(w) for w in itertools.product(words, repeat=max_words + 1)]
    (batch,) = make_generation_batches(encoded, 32, sort_by_length=False)
    found = model.beam_search(batch, len(candidates), max_words, length_penalty)
    greedy = model.generate(batch, max_words)
    for row, response in zip(encoded, found):
        (alone,) = make_generation_batches([row], 1)
        scores = torch.cat([sequence_scores(model, alone, [c for c in candidates if len(c) == n], length_penalty)
                            for n in range(1, max_words + 2)])
        by_length = sorted(candidates, key=len)  # the order the scores were computed in
        best = by_length[int(scores.argmax())]
        assert response == (best[:-1] if best[-1] == model.eou_id else best)
    assert found != greedy  # the search beat greedy somewhere, so the test has teeth


@pytest.mark.parametrize("model_id", WORD_GENERATORS)
def test_a_beam_of_four_scores_no_worse_than_greedy(models, vocab, model_id):
    model = models(model_id)
    encoded = encoded_instances(model, vocab)
    (batch,) = make_generation_batches(encoded, 32, sort_by_length=False)
    greedy = score(model, encoded, model.generate(batch, MAX_WORDS))
    beam = score(model, encoded, model.beam_search(batch, 4, MAX_WORDS))
    assert all(b >= g - 1e-9 for b, g in zip(beam, greedy))
    assert any(b > g + 1e-6 for b, g in zip(beam, greedy))


@pytest.mark.parametrize("model_id", WORD_GENERATORS)
def test_an_example_gets_the_same_response_alone_and_in_a_padded_batch(models, vocab, model_id):
    model = models(model_id)
    encoded = encoded_instances(model, vocab)
    (together,) = make_generation_batches(encoded, 32, sort_by_length=False)  # padded to the longest context
    assert len({len(row[0]) for row in encoded}) > 1
    alone = [model.beam_search(make_generation_batches([row], 1)[0], 4, MAX_WORDS)[0] for row in encoded]
    assert model.beam_search(together, 4, MAX_WORDS) == alone


def test_the_state_must_have_the_batch_on_dim_0_and_beams_at_least_one(vocab, models):
    state = {"memory": [torch.zeros(2, 3)], "none": None, "pair": (torch.ones(2), 7)}
    repeated = repeat_state(state, 2, 3)
    assert repeated["memory"][0].shape == (6, 3) and repeated["none"] is None and repeated["pair"][1] == 7
    assert repeated["pair"][0].tolist() == [1.0] * 6
    with pytest.raises(ValueError, match="dim 0"):
        repeat_state((torch.zeros(3, 2),), 2, 3)
    model = models("transformer")
    (batch,) = make_generation_batches(encoded_instances(model, vocab), 32)
    with pytest.raises(ValueError, match="beam_size"):
        model.beam_search(batch, 0)


def test_generate_and_evaluate_with_a_beam_from_the_command_line(tmp_path):
    runner = CliRunner()
    conversations, out = train_on_files_from_the_command_line("transformer", DIALOGUES, tmp_path, "model_config.max_response_words=8")

    replies = tmp_path / "replies.jsonl"
    generate = ["generate", "--checkpoint", str(out), "--input", str(conversations)]
    generated = runner.invoke(app, [*generate, "--out", str(replies), "--beam", "3"])
    assert generated.exit_code == 0, generated.output
    rows = [json.loads(line) for line in replies.read_text().splitlines()]
    bot = ResponseGenerator.from_checkpoint(out, beam_size=3)
    assert [r["response"] for r in rows] == bot.respond_all(DIALOGUES, [None] * len(DIALOGUES))

    scored = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--split", "test", "--beam", "3"])
    assert scored.exit_code == 0, scored.output
    assert {"perplexity", "bleu_1", "distinct_1"} <= set(json.loads(scored.stdout))
    refused = runner.invoke(app, [*generate, "--beam", "0"])
    assert refused.exit_code == 2 and "--beam" in refused.output and "greater than or equal to 1" in refused.output
