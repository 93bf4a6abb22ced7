"""DialogXL: utterance recurrence is exact, memory is bounded and padding-free, training learns."""

from __future__ import annotations

import unicodedata

import pytest
import torch
from _encoder_checks import one_pass_visibility, stepwise_cls_states

from turnformer.backbones import random_backbone, tiny_config
from turnformer.models.dialogxl import DialogXL, DialogXLConfig, Memory, update_memory
from turnformer.structure import TokenMeta
from turnformer.tasks.erc import EncodedConversation, make_batch

CLS, SEP, PAD = 1, 2, 0


def tiny_dialogxl(heads=(1, 1, 1, 1), window=1, mem_len=1000, seed=0, positions="conversation", memory_bias=None) -> DialogXL:
    encoder = random_backbone(tiny_config(vocab_size=60, hidden=32, layers=2, heads=4), seed=seed)
    torch.manual_seed(seed)
    config = DialogXLConfig(
        num_labels=3, heads=heads, window=window, mem_len=mem_len, dropout=0.0, positions=positions, memory_bias=memory_bias
    )
    model = DialogXL(config, encoder, CLS, SEP, PAD)
    return model.eval()


def random_conversation(generator: torch.Generator, n_turns: int, n_speakers: int) -> EncodedConversation:
    turns = []
    for _ in range(n_turns):
        length = int(torch.randint(1, 6, (1,), generator=generator))
        turns.append([CLS] + torch.randint(5, 60, (length,), generator=generator).tolist() + [SEP])
    speakers = torch.randint(0, n_speakers, (n_turns,), generator=generator).tolist()
    labels = torch.randint(0, 3, (n_turns,), generator=generator).tolist()
    return EncodedConversation(None, turns, speakers, labels)


def full_pass_cls_states(model: DialogXL, conv: EncodedConversation) -> torch.Tensor:
    """The same computation in one pass over the whole conversation: each utterance sees its own
    tokens and the non-special tokens of earlier utterances, under the DialogXL head masks."""
    ids, meta, visible = one_pass_visibility(model, conv, (CLS, SEP))
    if model.config.positions == "utterance":
        positions = meta.position  # every utterance encoded from position 0
    else:  # numbered through the conversation; a turn's closing [SEP] is not in memory, the next [CLS] takes its place
        starts = torch.tensor([0] + [len(turn) - 1 for turn in conv.turn_ids[:-1]]).cumsum(0)
        positions = torch.cat([start + torch.arange(len(turn)) for start, turn in zip(starts, conv.turn_ids)]).unsqueeze(0)
    hidden = model.encoder(ids, position_ids=positions, attention_mask=visible).last_hidden_state[0]
    starts = torch.tensor([0] + torch.tensor([len(t) for t in conv.turn_ids]).cumsum(0)[:-1].tolist())
    return hidden[starts]


@pytest.mark.parametrize("positions", ["conversation", "utterance"])
@pytest.mark.parametrize("heads, window", [((1, 1, 1, 1), 1), ((2, 0, 1, 1), 2), ((0, 4, 0, 0), 0)])
def test_recurrence_equals_one_pass(heads, window, positions):
    g = torch.Generator().manual_seed(3)
    model = tiny_dialogxl(heads, window, positions=positions)
    conversations = [random_conversation(g, n, 3) for n in (5, 2, 7)]
    stepwise = stepwise_cls_states(model, conversations, PAD)
    with torch.no_grad():
        for b, conv in enumerate(conversations):
            expected = full_pass_cls_states(model, conv)
            got = stepwise[b]
            assert torch.allclose(got, expected, atol=1e-5), (heads, b)


def test_memory_keeps_newest_tokens_without_padding():
    hidden, layers = 4, 2
    memory = Memory.empty(2, layers, hidden)
    mem_len = 5
    lengths = [(3, 1), (2, 4), (4, 0)]  # real tokens per step for conversation 0 and 1
    seen = [[], []]
    for step, row_lengths in enumerate(lengths):
        width = max(row_lengths)
        utt = [[step] * n for n in row_lengths]
        current = TokenMeta.from_lists(utt, [[0] * n for n in row_lengths])
        current = TokenMeta(**{**current.__dict__, "order": current.order + 10 * step})
        if width == 0:
            continue
        states = [torch.arange(2 * width * hidden, dtype=torch.float).view(2, width, hidden) + 100 * step] * layers
        memory = update_memory(memory, states, current, mem_len)
        for b, n in enumerate(row_lengths):
            seen[b] += [(step, i) for i in range(n)]
    for b in range(2):
        expected = seen[b][-mem_len:]
        real = memory.meta.is_real[b]
        got = list(zip(memory.meta.utterance[b][real].tolist(), (memory.meta.order[b][real] % 10).tolist()))
        assert got == expected
        assert bool(real[: len(expected)].all()) and not bool(real[len(expected):].any())  # padding only at the end
    assert memory.length == mem_len
    assert not memory.states[0].requires_grad


def test_memory_is_bounded_in_a_long_conversation():
    model = tiny_dialogxl(mem_len=12)
    g = torch.Generator().manual_seed(0)
    batch = make_batch([random_conversation(g, 30, 2)], PAD)
    memory = model.empty_memory(1)
    with torch.no_grad():
        for t, ids in enumerate(batch.steps):
            _, memory, _ = model.step(ids, t, batch.speakers[:, t], memory)
            assert memory.length <= 12
    assert memory.length == 12 and memory.waste_rate() == 0.0


def test_memory_bias_interpolates_between_full_memory_and_none():
    """A zero memory bias is the paper's attention; a very negative one shuts memory out (each utterance as if
    alone); a learned one moves per layer and head and receives a gradient."""
    g = torch.Generator().manual_seed(4)
    conversations = [random_conversation(g, n, 2) for n in (4, 6)]
    plain = stepwise_cls_states(tiny_dialogxl(positions="utterance"), conversations, PAD)
    zero = stepwise_cls_states(tiny_dialogxl(positions="utterance", memory_bias=0.0), conversations, PAD)
    closed = stepwise_cls_states(tiny_dialogxl(positions="utterance", memory_bias=-1e4), conversations, PAD)
    alone = stepwise_cls_states(tiny_dialogxl(positions="utterance", mem_len=0), conversations, PAD)
    for b in range(len(conversations)):
        assert torch.allclose(zero[b], plain[b], atol=1e-6)
        assert torch.allclose(closed[b], alone[b], atol=1e-5)
        assert not torch.allclose(plain[b][1:], alone[b][1:], atol=1e-3)  # memory does matter here
    model = tiny_dialogxl(memory_bias=-2.0).train()
    assert model.memory_bias.shape == (2, 4)  # layers x heads
    model.loss(make_batch(conversations, PAD)).backward()
    assert model.memory_bias.grad is not None and model.memory_bias.grad.abs().sum() > 0
    assert not any(p is model.memory_bias for p in model.pretrained_parameters())  # learns at train.head_lr


def test_training_reduces_loss():
    torch.manual_seed(0)
    model = tiny_dialogxl().train()
    g = torch.Generator().manual_seed(1)
    batch = make_batch([random_conversation(g, 4, 2) for _ in range(3)], PAD)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = model.loss(batch).item()
    for _ in range(30):
        optimizer.zero_grad()
        loss = model.loss(batch)
        loss.backward()
        optimizer.step()
    assert loss.item() < first * 0.5
    gold, pred = model.eval().predict(batch)
    assert len(gold) == len(pred) == 12


def test_head_counts_must_match_backbone():
    encoder = random_backbone(tiny_config(vocab_size=60, hidden=32, layers=1, heads=4), seed=0)
    with pytest.raises(ValueError, match="sum to 12, but the backbone has 4 heads"):
        DialogXL(DialogXLConfig(num_labels=2), encoder, CLS, SEP, PAD)


class _CharTokenizer:
    """Characters as token ids, [CLS] ... [SEP]: enough to drive a session without weights."""

    def __call__(self, text, add_special_tokens=True, verbose=True):  # a combining mark is dropped, as WordPiece does
        return {"input_ids": [CLS] + [5 + ord(c) % 50 for c in text if not unicodedata.combining(c)] + [SEP]}


def test_streaming_session_matches_batch_and_stays_bounded():
    from turnformer.models.dialogxl import DialogXLSession

    model = tiny_dialogxl(mem_len=20)
    session = DialogXLSession(model, _CharTokenizer(), ["a", "b", "c"])
    turns = [("Ross", "we were on a break"), ("Rachel", "oh my god"), ("Ross", "fine"), ("Joey", "guys?")] * 4
    outputs = [session.add(s, t) for s, t in turns]
    assert all(set(o["probabilities"]) == {"a", "b", "c"} for o in outputs)
    assert session.memory.length <= 20
    tok = _CharTokenizer()
    speakers = {"Ross": 0, "Rachel": 1, "Joey": 2}
    conv = EncodedConversation(None, [tok(t)["input_ids"] for _, t in turns], [speakers[s] for s, _ in turns], [0] * len(turns))
    probs = model.probabilities(make_batch([conv], PAD))[0]
    streamed = torch.tensor([[o["probabilities"][k] for k in "abc"] for o in outputs])
    assert torch.allclose(probs, streamed, atol=1e-5)
    with pytest.raises(ValueError, match="empty utterance"):
        session.add("Ross", "  ")
    # an utterance the tokenizer keeps nothing of is answered from its context and marked, as `annotate` marks it
    assert session.add("Ross", "\u0301")["no_tokens"] is True and "no_tokens" not in session.add("Ross", "fine")


def test_a_streaming_session_taken_back_answers_as_if_the_utterance_was_never_sent():
    from turnformer.models.dialogxl import DialogXLSession

    model = tiny_dialogxl(mem_len=20)
    turns = [("Ross", "we were on a break"), ("Rachel", "oh my god"), ("Ross", "fine"), ("Joey", "guys?")] * 2
    plain, taken_back = (DialogXLSession(model, _CharTokenizer(), ["a", "b", "c"]) for _ in range(2))
    for i, (speaker, text) in enumerate(turns):
        if i in (2, 5):
            state = taken_back.snapshot()
            stray = taken_back.add("Stranger", "a stray utterance") if i == 2 else taken_back.add("Joey", "again")
            assert taken_back.turn == i + 1 and stray["probabilities"]
            taken_back.restore(state)
        assert taken_back.add(speaker, text)["probabilities"] == pytest.approx(plain.add(speaker, text)["probabilities"], abs=1e-6)
    assert taken_back.speakers == plain.speakers == {"Ross": 0, "Rachel": 1, "Joey": 2}  # the stray speaker is gone too


def test_conversation_positions_continue_and_stay_in_the_backbone_range():
    model = tiny_dialogxl(mem_len=12)  # max_position_embeddings 128
    order = torch.tensor([[5, 6, 7, 8], [120, 121, 122, 123], [200, 201, 202, 203], [125, 126, 127, 128]])
    padding = torch.tensor([[False] * 4] * 3 + [[False, False, True, True]])
    positions = model.conversation_positions(order, padding)
    assert positions[0].tolist() == [5, 6, 7, 8]  # inside the range: the running position itself
    assert positions[1].tolist() == [120, 121, 122, 123]
    assert positions[2].tolist() == [124, 125, 126, 127]  # past it: the utterance takes the last positions
    # the real tokens decide, not the batch's padding (the same utterance alone has no padding); padding is clamped
    assert positions[3].tolist() == [125, 126, 127, 127]


def test_streaming_session_checks_its_input():
    from turnformer.dialogue import DialogueError
    from turnformer.models.dialogxl import DialogXLSession

    with pytest.raises(ValueError, match="1 labels for a model of 3 classes"):
        DialogXLSession(tiny_dialogxl(), _CharTokenizer(), ["a"])
    # two outputs under one name scrambled the probabilities (one class vanished); no list was a TypeError
    for labels, message in ((["a", "a", "b"], "labels: 'a' named more than once"), (None, "labels: expected a list"),
                            (["a", "", "b"], "labels: '' is not a label name")):
        with pytest.raises(ValueError, match=message):
            DialogXLSession(tiny_dialogxl(), _CharTokenizer(), labels)
    session = DialogXLSession(tiny_dialogxl(), _CharTokenizer(), ["a", "b", "c"])
    session.add("Ross", "hi")
    with pytest.raises(DialogueError, match="utterance 1: text: text must be a string, got int"):
        session.add("Ross", 42)
    with pytest.raises(DialogueError, match="utterance 1: speaker: missing or empty speaker"):
        session.add(None, "hello")
    with pytest.raises(DialogueError, match="utterance 1: speaker: speaker must be a string, got float 1.5"):
        session.add(1.5, "hello")
    assert session.add(7, "hello")["speaker"] == "7" and session.speakers == {"Ross": 0, "7": 1}  # a numeric id, as in files
    # a huge utterance is cut before it is tokenised, and said to be cut; its text comes back whole
    given = []

    class Recording(_CharTokenizer):
        all_special_ids = [CLS, SEP]

        def __call__(self, text, **kwargs):
            given.append(len(text))
            return super().__call__(text, **kwargs)

    huge = "la " * 100_000
    out = DialogXLSession(tiny_dialogxl(), Recording(), ["a", "b", "c"]).add("Ross", huge)
    # (the session tokenises an empty text once, at the start, to count an utterance's special tokens)
    assert out["truncated"] and out["text"] == huge and given == [0, 64 * (tiny_dialogxl().config.max_utterance_tokens + 2)]


def test_memory_attention_benchmark_measures_the_share_on_memory():
    """benchmarks/erc_memory_attention.py: shares lie in [0, 1], vanish when the bias shuts memory out, and the
    [CLS] share of one step is what its attention probabilities say."""
    from _benchmark_scripts import load_benchmark_script

    bench = load_benchmark_script("erc_memory_attention")
    g = torch.Generator().manual_seed(5)
    batch = make_batch([random_conversation(g, n, 2) for n in (5, 4)], PAD)
    open_ = bench.attention_on_memory(tiny_dialogxl(memory_bias=0.0), [batch], CLS, PAD)
    closed = bench.attention_on_memory(tiny_dialogxl(memory_bias=-1e4), [batch], CLS, PAD)
    assert open_["steps"] == closed["steps"] == 2  # utterances 3 and 4 (the shorter conversation has 4)
    assert all(0 < x <= 1 for x in open_["cls"] + open_["tokens"])
    assert all(x < 1e-6 for x in closed["cls"] + closed["tokens"])
    # by hand: the last step alone, the first conversation only (the second has ended)
    one = make_batch([random_conversation(torch.Generator().manual_seed(6), 5, 2)], PAD)
    model = tiny_dialogxl()
    with torch.no_grad():
        memory = model.empty_memory(1)
        for t in range(4):
            _, memory, _ = model.step(one.steps[t], t, one.speakers[:, t], memory)
        _, _, out = model.step(one.steps[4], 4, one.speakers[:, 4], memory, output_attentions=True)
    expected = [float(p[0, :, 0, : memory.length].sum(-1).mean()) for p in out.attentions]
    got = bench.attention_on_memory(model, [one], CLS, PAD, skip_first=4)["cls"]
    assert got == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("bad", ["-4", float("nan"), float("inf"), True])
def test_memory_bias_setting_is_checked(bad):
    with pytest.raises(ValueError, match="model_config.memory_bias"):
        DialogXLConfig.from_dict({"num_labels": 3, "memory_bias": bad})
