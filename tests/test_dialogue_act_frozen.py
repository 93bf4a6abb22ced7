"""Dialogue acts over a frozen sentence encoder's vectors: the vectors are the encoder's mean-pooled states, computed
once and cached; the context models over them train, save, load and predict as the token models do."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import torch.nn.functional as F

from turnformer.backbones.sentence_vectors import SentenceEncoder, default_cache_dir, read_pooling, sentence_vectors
from turnformer.dialogue import Dialogue, DialogueError, Turn
from turnformer.models.lc_attention import build_frozen_lc_model
from turnformer.tasks.dialogue_act import DialogueActSession, build_act_model, predict_dialogues

MAX_LENGTH = 12  # the tiny sentence encoder's longest input, special tokens included
TEXTS = ["hello there", "how are you doing today , my friend ?", "fine .", "okay",
         "this one is far longer than the encoder reads , so its end is cut off before it is encoded at all", "bye"]


@pytest.fixture(scope="module")
def sentence_folder(tiny_backbone_dir, tmp_path_factory):
    """The tiny random BERT as a sentence-transformers folder: mean pooling, then L2 normalisation, as the
    all-mpnet-base-v2 and all-MiniLM-L6-v2 folders say."""
    folder = tmp_path_factory.mktemp("tiny-sentence") / "model"
    shutil.copytree(tiny_backbone_dir, folder)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 32, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
         "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False}))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": MAX_LENGTH, "do_lower_case": False}))
    return folder


def test_the_vectors_are_the_encoders_mean_pooled_normalised_states(sentence_folder, tiny_backbone_dir):
    from transformers import AutoTokenizer, BertModel

    encoder = SentenceEncoder(str(sentence_folder), batch_size=4, device="cpu")  # batches of similar length
    assert (encoder.pooling.mode, encoder.pooling.normalize, encoder.pooling.max_length, encoder.dim) == ("mean", True, MAX_LENGTH, 32)
    vectors = encoder.encode(TEXTS)
    # directly: the whole list padded to its longest, as sentence-transformers' model card computes it
    model = BertModel.from_pretrained(sentence_folder).eval()
    batch = AutoTokenizer.from_pretrained(sentence_folder)(TEXTS, padding=True, truncation=True, max_length=MAX_LENGTH,
                                                           return_tensors="pt")
    with torch.no_grad():
        states = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    direct = F.normalize((states * mask).sum(1) / mask.sum(1), dim=-1)
    assert vectors.shape == (len(TEXTS), 32) and torch.allclose(vectors, direct, atol=1e-5)
    assert encoder.truncated(TEXTS) == 1
    # a plain encoder folder: mean pooling, unnormalised, as long as its positions
    plain = read_pooling(tiny_backbone_dir)
    assert (plain.mode, plain.normalize, plain.max_length) == ("mean", False, 128)


def test_a_repeated_text_is_encoded_once_and_every_occurrence_gets_its_vector(sentence_folder, monkeypatch):
    encoder = SentenceEncoder(str(sentence_folder), batch_size=2, device="cpu")
    repeated = [TEXTS[3], *TEXTS, TEXTS[0], TEXTS[3], TEXTS[5]]  # "okay" three times, "hello there" and "bye" twice
    encoded = []
    encode_batch = encoder._encode_batch
    monkeypatch.setattr(encoder, "_encode_batch", lambda batch: encoded.extend(batch) or encode_batch(batch))
    vectors = encoder.encode(repeated)
    assert len(encoded) == len(TEXTS) and sorted(map(tuple, encoded)) == sorted(map(tuple, encoder.token_ids(TEXTS)))
    alone = torch.stack([encoder.encode([text])[0] for text in repeated])
    assert vectors.shape == (len(repeated), 32) and torch.allclose(vectors, alone, atol=1e-5)
    assert torch.equal(vectors[0], vectors[4]) and torch.equal(vectors[0], vectors[8])


def test_an_interrupted_encoding_goes_on_where_it_stopped(sentence_folder, tmp_path, monkeypatch):
    import turnformer.backbones.sentence_vectors as sv

    monkeypatch.setattr(sv, "PROGRESS_SECONDS", 0)  # write the progress file after every batch
    encoder = SentenceEncoder(str(sentence_folder), batch_size=2, device="cpu")
    whole = encoder.encode(TEXTS)
    progress = tmp_path / "toy.partial.safetensors"
    encoded = []
    encode_batch = encoder._encode_batch

    def cut_after_two_batches(batch):
        if len(encoded) == 4:
            raise KeyboardInterrupt
        encoded.extend(batch)
        return encode_batch(batch)

    monkeypatch.setattr(encoder, "_encode_batch", cut_after_two_batches)
    with pytest.raises(KeyboardInterrupt):
        encoder.encode(TEXTS, progress=progress)
    assert progress.is_file() and len(encoded) == 4
    monkeypatch.setattr(encoder, "_encode_batch", lambda batch: encoded.extend(batch) or encode_batch(batch))
    resumed = encoder.encode(TEXTS, progress=progress)
    assert len(encoded) == len(TEXTS) and torch.allclose(resumed, whole, atol=1e-6) and not progress.exists()
    # a progress file of other texts (another shape) is not used
    encoder.encode(TEXTS[:3], progress=progress)
    monkeypatch.setattr(encoder, "_encode_batch", cut_after_two_batches)
    encoded.clear()
    with pytest.raises(KeyboardInterrupt):
        encoder.encode(TEXTS[:5], progress=progress)
    monkeypatch.setattr(encoder, "_encode_batch", encode_batch)
    assert torch.allclose(encoder.encode(TEXTS, progress=progress), whole, atol=1e-6)


def test_the_cache_is_read_the_second_time_and_missed_when_a_text_changes(sentence_folder, tmp_path, monkeypatch):
    encoder = SentenceEncoder(str(sentence_folder), device="cpu")
    calls = []
    encode = encoder.encode
    monkeypatch.setattr(encoder, "encode", lambda texts, desc="", progress=None: calls.append(len(texts)) or encode(texts))
    first, truncated = sentence_vectors(encoder, TEXTS, "toy", "train", cache_dir=tmp_path)
    assert calls == [len(TEXTS)] and truncated == 1 and len(list(tmp_path.rglob("toy-train-*.safetensors"))) == 1
    again, truncated = sentence_vectors(encoder, TEXTS, "toy", "train", cache_dir=tmp_path)
    assert calls == [len(TEXTS)] and truncated == 1 and torch.equal(first, again)
    # another process: the vectors come from the file, the encoder's weights are never loaded
    fresh = SentenceEncoder(str(sentence_folder), device="cpu")
    assert torch.equal(sentence_vectors(fresh, TEXTS, "toy", "train", cache_dir=tmp_path)[0], first) and fresh._encoder is None
    changed = [*TEXTS[:2], "a different third utterance", *TEXTS[3:]]
    vectors, _ = sentence_vectors(encoder, changed, "toy", "train", cache_dir=tmp_path)
    assert calls == [len(TEXTS)] * 2 and len(list(tmp_path.rglob("toy-train-*.safetensors"))) == 2
    assert torch.allclose(vectors[[0, 1, 3, 4, 5]], first[[0, 1, 3, 4, 5]], atol=1e-6) and not torch.allclose(vectors[2], first[2])
    # a damaged file is encoded again, not read
    for path in tmp_path.rglob("*.safetensors"):
        path.write_bytes(b"not safetensors")
    assert torch.equal(sentence_vectors(encoder, TEXTS, "toy", "train", cache_dir=tmp_path)[0], first) and len(calls) == 3
    monkeypatch.setenv("TURNFORMER_CACHE", str(tmp_path / "elsewhere"))
    assert default_cache_dir() == tmp_path / "elsewhere" / "sentence-vectors"


def test_the_frozen_model_trains_saves_loads_and_scores_the_same(sentence_folder, data_dir, tmp_path, monkeypatch):
    from safetensors import safe_open

    from turnformer.tasks.dialogue_act import evaluate_split, load_trained, train_dialogue_act

    monkeypatch.setenv("TURNFORMER_CACHE", str(tmp_path / "cache"))
    folder = str(sentence_folder)
    recipe = {"task": "dialogue-act", "model": "lc-attention-frozen-mpnet", "dataset": "dailydialog", "backbone": folder,
              "window": 5, "context_padding": 2,
              "model_config": {"utterance_encoder": "frozen", "sentence_encoder": folder, "context": "lc-attention",
                               "hidden": 16, "heads": 2, "classifier_hidden": 16},
              "train": {"epochs": 1, "lr": 1e-3, "batch_size": 8}}
    result = train_dialogue_act(recipe, tmp_path / "run", seed=1, data_dir=data_dir, limits={"train": 12, "validation": 6, "test": 6})
    assert len(list((tmp_path / "cache").rglob("dailydialog-*.safetensors"))) == 3  # one file a split
    with safe_open(str(tmp_path / "run" / "best" / "model.safetensors"), framework="pt") as f:
        keys = set(f.keys())
    assert {k.split(".")[0] for k in keys} == {"project", "context", "classifier"}  # not the frozen encoder
    model, encoder, run = load_trained(tmp_path / "run")
    assert isinstance(encoder, SentenceEncoder) and encoder.name == folder and model.config.embedding_dim == 32
    scores = evaluate_split(model, encoder, run, "test", data_dir, limit=6)
    test = result.test_at_best
    assert scores["offline_accuracy"] == pytest.approx(test["offline_accuracy"])
    assert scores["online_accuracy"] == pytest.approx(test["online_accuracy"])


def test_the_sentence_encoder_is_the_recipes_backbone(sentence_folder):
    config = {"utterance_encoder": "frozen", "sentence_encoder": str(sentence_folder), "context": "lstm"}
    with pytest.raises(DialogueError, match="a frozen utterance encoder is the recipe's backbone"):
        build_act_model(config, ["a", "b"], backbone="all-MiniLM-L6-v2")
    with pytest.raises(ValueError, match="sentence_encoder names the frozen utterance encoder"):
        build_frozen_lc_model({**config, "sentence_encoder": ""}, ["a", "b"], 32)


def dialogue(texts):
    return Dialogue(tuple(Turn("AB"[i % 2], text, {"act": "ab"[i % 2]}) for i, text in enumerate(texts)), "d")


@pytest.mark.parametrize("context", ["lc-attention", "lstm-blstm"])
def test_online_prediction_sees_no_future_utterance(context, sentence_folder):
    encoder = SentenceEncoder(str(sentence_folder), device="cpu")
    torch.manual_seed(0)
    model = build_frozen_lc_model({"utterance_encoder": "frozen", "sentence_encoder": str(sentence_folder), "context": context,
                                   "hidden": 16, "heads": 2, "classifier_hidden": 16, "dropout": 0.0}, ["a", "b"], encoder.dim).eval()
    texts = [f"utterance number {i} of the conversation" for i in range(9)]
    future = [*texts[:4], *(f"something else entirely, {i}" for i in range(5))]  # the same first 4 turns
    online, offline = ([predict_dialogues(model, encoder, [dialogue(t)], ["a", "b"], window=2, padding=2, online=o)[0]
                        for t in (texts, future)] for o in (True, False))
    for t in range(4):
        assert online[0][t]["probabilities"] == pytest.approx(online[1][t]["probabilities"], abs=1e-6)
    assert offline[0][3]["probabilities"] != pytest.approx(offline[1][3]["probabilities"], abs=1e-6)  # offline sees them
    session = DialogueActSession(model, encoder, ["a", "b"], padding=2)  # one utterance at a time: the same answers
    for text, expected in zip(texts, online[0]):
        got = session.add("A", text)
        assert got["label"] == expected["label"] and not got["truncated"]
        assert got["probabilities"] == pytest.approx(expected["probabilities"], abs=1e-5)
    # a text the encoder's tokenizer keeps nothing of (a combining mark alone): read as no word, and said, as annotate says
    assert session.add("A", "\u0301")["no_tokens"] is True and "no_tokens" not in session.add("A", "okay")
