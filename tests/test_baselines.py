"""ERC baselines: ConcatContext is one BERT pass per utterance over its history, SegmentRecurrence
is Transformer-XL's cached computation, memory waste is measured and counted consistently."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from _benchmark_scripts import load_benchmark_script

from turnformer.backbones import random_backbone, tiny_config
from turnformer.models.baselines import (
    FIXED_STEP_BYTES,
    ConcatContext,
    ConcatContextConfig,
    SegmentRecurrence,
    SegmentRecurrenceConfig,
    segment_recurrence_waste_counts,
    utterance_recurrence_waste,
    utterance_recurrence_waste_counts,
)
from turnformer.models.dialogxl import DialogXL, DialogXLConfig
from turnformer.tasks.erc import EncodedConversation, make_batch, make_batches

CLS, SEP, PAD = 1, 2, 0


def tiny_encoder(seed=0, type_vocab_size=2):
    return random_backbone(tiny_config(vocab_size=60, hidden=32, layers=2, heads=4, type_vocab_size=type_vocab_size), seed=seed)


def concat_model(max_length=128, rows=32, seed=0, type_vocab_size=2, tokens=4096, dropout=0.0, checkpoint=True) -> ConcatContext:
    torch.manual_seed(seed)
    config = ConcatContextConfig(num_labels=3, max_length=max_length, max_rows_per_forward=rows, dropout=dropout,
                                 max_tokens_per_forward=tokens, checkpoint=checkpoint)
    return ConcatContext(config, tiny_encoder(seed, type_vocab_size), CLS, SEP, PAD).eval()


def segment_model(segment_len=8, mem_len=8, seed=0, dropout=0.0, checkpoint=True) -> SegmentRecurrence:
    torch.manual_seed(seed)
    config = SegmentRecurrenceConfig(num_labels=3, segment_len=segment_len, mem_len=mem_len, dropout=dropout,
                                     checkpoint=checkpoint)
    return SegmentRecurrence(config, tiny_encoder(seed), CLS, SEP, PAD).eval()


def random_conversation(g: torch.Generator, n_turns: int, labels=None) -> EncodedConversation:
    turns = []
    for _ in range(n_turns):
        length = int(torch.randint(1, 6, (1,), generator=g))
        turns.append([CLS] + torch.randint(5, 60, (length,), generator=g).tolist() + [SEP])
    speakers = torch.randint(0, 2, (n_turns,), generator=g).tolist()
    labels = labels if labels is not None else torch.randint(0, 3, (n_turns,), generator=g).tolist()
    return EncodedConversation(None, turns, speakers, labels)


def conversations(seed=3, turns=(5, 2, 7)):
    g = torch.Generator().manual_seed(seed)
    return [random_conversation(g, n) for n in turns]


# ---------------------------------------------------------------- ConcatContext


def concat_sequence(conv: EncodedConversation, t: int, max_length: int):
    """[CLS] u_0 [SEP] ... u_t [SEP], oldest tokens after [CLS] dropped; types 1 on u_t [SEP]."""
    ids, types = [], []
    for i, turn in enumerate(conv.turn_ids[: t + 1]):
        piece = turn[1:]  # words and [SEP]
        ids += piece
        types += [int(i == t)] * len(piece)
    cut = max(0, 1 + len(ids) - max_length)
    return [CLS] + ids[cut:], [0] + types[cut:], cut


@pytest.mark.parametrize("max_length, rows, tokens", [(128, 32, 4096), (9, 2, 4096), (128, 32, 30), (9, 32, 1)])
def test_concat_context_equals_direct_encoder_call(max_length, rows, tokens):
    model = concat_model(max_length, rows, tokens=tokens)
    convs = conversations()
    batch = make_batch(convs, PAD)
    with torch.no_grad():
        states = model.cls_states(batch)
    expected_cut = 0
    for b, conv in enumerate(convs):
        for t in range(len(conv.turn_ids)):
            ids, types, cut = concat_sequence(conv, t, max_length)
            expected_cut += cut
            with torch.no_grad():
                direct = model.encoder(torch.tensor([ids]), token_type_ids=torch.tensor([types])).last_hidden_state[0, 0]
            assert torch.allclose(states[b, t], direct, atol=1e-5), (b, t)
        assert not states[b, len(conv.turn_ids):].any()
    assert model.truncation["rows"] == sum(len(c.turn_ids) for c in convs)
    assert model.truncation["truncated_tokens"] == expected_cut
    assert (expected_cut > 0) == (max_length < 128)


@pytest.mark.parametrize("rows, tokens", [(32, 4096), (3, 4096), (32, 40), (32, 1)])
def test_concat_context_chunks_keep_to_their_row_and_token_budgets(rows, tokens):
    """Every row once; a chunk holds at most `rows` rows and `tokens` padded tokens, unless it is one row alone; the
    logits and gradients are those of one unbounded chunk."""
    batch = make_batch(conversations(turns=(5, 2, 7, 9)), PAD)
    model, whole = concat_model(rows=rows, tokens=tokens), concat_model(rows=10**6, tokens=10**9)
    chunks = model.build_inputs(batch)
    assert sorted(r for c in chunks for r in c.rows) == sorted(r for c in whole.build_inputs(batch) for r in c.rows)
    for chunk in chunks:
        rows_in, width = chunk.input_ids.shape
        assert rows_in <= rows and (rows_in * width <= tokens or rows_in == 1)
    assert len(chunks) > 1 or tokens == 4096 and rows == 32
    model.loss(batch).backward()  # in eval mode: no dropout, whose masks would follow the chunks' shapes
    whole.loss(batch).backward()
    for (name, a), b in zip(model.named_parameters(), whole.parameters()):
        assert (a.grad is None) == (b.grad is None) and (a.grad is None or torch.allclose(a.grad, b.grad, atol=1e-6)), name


@pytest.mark.parametrize("build", [lambda on: concat_model(rows=4, dropout=0.3, checkpoint=on),
                                   lambda on: segment_model(segment_len=6, mem_len=8, dropout=0.3, checkpoint=on)],
                         ids=["concat-context", "segment-recurrence"])
def test_checkpoint_keeps_one_chunk_or_segment_and_changes_nothing_else(build):
    """With dropout on: the recomputed chunks (segments) draw the same masks, so loss, gradients and the random state
    after the step are those of keeping every graph; what the step keeps for backward is their inputs only."""
    batch = make_batch(conversations(turns=(5, 2, 7, 9)), PAD)
    saved, grads, losses, states = {}, {}, {}, {}
    for on in (True, False):
        model = build(on).train()
        sizes = []

        def pack(t, sizes=sizes):
            sizes.append(t.numel() * t.element_size())
            return t

        torch.manual_seed(7)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = model.loss(batch)
        loss.backward()
        saved[on], losses[on], states[on] = sum(sizes), loss.detach(), torch.get_rng_state()
        grads[on] = [p.grad for p in model.parameters()]
    assert torch.equal(losses[True], losses[False]) and torch.equal(states[True], states[False])
    for a, b in zip(grads[True], grads[False]):
        assert (a is None) == (b is None) and (a is None or torch.allclose(a, b, atol=1e-6))
    assert saved[True] < saved[False] / 3


def test_concat_context_keeps_only_the_cls_states_of_a_chunk(monkeypatch):
    """The [CLS] states were a view of the chunk's last hidden states [R, L, hidden], which a view keeps alive: every
    chunk's whole output stayed in memory until the batch ended (a conversation of 8,000 turns: 1.2 GB, 0.6 now)."""
    model = concat_model().eval()
    kept = []
    encode = model._encode_cls
    monkeypatch.setattr(model, "_encode_cls", lambda *inputs: kept.append(encode(*inputs)) or kept[-1])
    with torch.no_grad():
        model.cls_states(make_batch(conversations(turns=(5, 2, 7, 9)), PAD))
    assert kept and all(s.untyped_storage().nbytes() == s.numel() * s.element_size() for s in kept)


def test_concat_context_truncation_counts_per_row():
    model = concat_model(max_length=6)
    conv = EncodedConversation(None, [[CLS, 10, 11, SEP], [CLS, 12, SEP], [CLS, 13, 14, 15, SEP]], [0, 1, 0], [0, 1, 2])
    chunks = model.build_inputs(make_batch([conv], PAD))
    by_row = {
        row: (ids, types, cut)
        for chunk in chunks
        for row, ids, types, cut in zip(chunk.rows, chunk.input_ids.tolist(), chunk.token_type_ids.tolist(), chunk.truncated)
    }
    # untruncated lengths 4, 6, 10 tokens: the last row loses its 4 oldest tokens after [CLS]
    assert by_row[(0, 0)] == ([CLS, 10, 11, SEP, PAD, PAD][: len(by_row[(0, 0)][0])], [0, 1, 1, 1, 0, 0][: len(by_row[(0, 0)][0])], 0)
    assert by_row[(0, 1)] == ([CLS, 10, 11, SEP, 12, SEP], [0, 0, 0, 0, 1, 1], 0)
    assert by_row[(0, 2)] == ([CLS, SEP, 13, 14, 15, SEP], [0, 0, 1, 1, 1, 1], 4)


def test_concat_context_rows_of_a_conversation_longer_than_max_length_in_turns():
    """A row is packed from the newest turns that can fit (a long conversation cost the square of its length when
    every row copied its whole history): the same tokens, types and dropped-token counts as the whole history cut."""
    model = concat_model(max_length=6)
    turns = [[CLS, *([20 + t % 7] * (1 + t % 3)), SEP] for t in range(40)]
    conv = EncodedConversation(None, turns, [t % 2 for t in range(40)], [t % 3 for t in range(40)])
    rows = {row: (ids[: len([i for i in ids if i != PAD])], types[: len([i for i in ids if i != PAD])], cut)
            for chunk in model.build_inputs(make_batch([conv], PAD))
            for row, ids, types, cut in zip(chunk.rows, chunk.input_ids.tolist(), chunk.token_type_ids.tolist(), chunk.truncated)}
    for t in range(40):
        assert rows[(0, t)] == concat_sequence(conv, t, 6), t


def test_concat_context_single_token_type_backbone():
    model = concat_model(type_vocab_size=1)
    conv = conversations(turns=(3,))[0]
    chunks = model.build_inputs(make_batch([conv], PAD))
    assert all(not chunk.token_type_ids.any() for chunk in chunks)
    with torch.no_grad():
        states = model.cls_states(make_batch([conv], PAD))
        ids, _, _ = concat_sequence(conv, 2, 128)
        direct = model.encoder(torch.tensor([ids])).last_hidden_state[0, 0]
    assert torch.allclose(states[0, 2], direct, atol=1e-5)


def test_concat_context_frozen_lower_layers_change_nothing_but_what_is_trained():
    """frozen_layers=1: the same logits and loss, the same gradients on the top layer and the classifier, none below
    (the embeddings and the lowest layer keep no gradient and are left alone by the optimizer)."""
    batch = make_batch(conversations(), PAD)
    full = concat_model(max_length=12, rows=4)
    config = dataclasses.replace(full.config, frozen_layers=1)
    frozen = ConcatContext(config, copy.deepcopy(full.encoder), CLS, SEP, PAD).eval()
    frozen.load_state_dict(full.state_dict())
    assert torch.equal(frozen.logits(batch), full.logits(batch))
    full.loss(batch).backward()
    frozen.loss(batch).backward()
    below = [*frozen.encoder.embeddings.parameters(), *frozen.encoder.encoder.layer[0].parameters()]
    assert below and all(not p.requires_grad and p.grad is None for p in below)
    trained = dict(frozen.named_parameters())
    for name, param in full.named_parameters():
        if param.grad is None:  # the unused [CLS] pooler
            assert name.startswith("encoder.pooler.") and trained[name].grad is None
        elif trained[name].requires_grad:
            assert torch.allclose(trained[name].grad, param.grad, atol=1e-6), name
    assert {n for n, p in trained.items() if p.requires_grad} == {n for n in trained if not n.startswith(
        ("encoder.embeddings.", "encoder.encoder.layer.0."))}
    assert any(n.startswith("encoder.encoder.layer.1.") and p.grad is not None for n, p in trained.items())
    before = [p.clone() for p in below]
    torch.optim.AdamW(frozen.parameters(), lr=1e-2, weight_decay=0.1).step()
    assert all(torch.equal(b, p) for b, p in zip(before, below))
    config = ConcatContextConfig(num_labels=3, max_length=64, frozen_layers=3)
    with pytest.raises(ValueError, match="frozen_layers=3 but the encoder has 2 layers"):
        ConcatContext(config, tiny_encoder(), CLS, SEP, PAD)


# ---------------------------------------------------------------- SegmentRecurrence


def stream(conv: EncodedConversation) -> tuple[list[int], list[int]]:
    ids, ends = [], []
    for turn in conv.turn_ids:
        ids += turn[1:]
        ends.append(len(ids) - 1)
    return ids, ends


def test_segment_recurrence_one_segment_equals_plain_pass():
    convs = conversations()
    longest = max(len(stream(c)[0]) for c in convs)
    model = segment_model(segment_len=longest + 3, mem_len=16)
    with torch.no_grad():
        states = model.sep_states(make_batch(convs, PAD))
        for b, conv in enumerate(convs):
            ids, ends = stream(conv)
            plain = model.encoder(torch.tensor([ids])).last_hidden_state[0]
            assert torch.allclose(states[b, : len(ends)], plain[ends], atol=1e-5), b
    assert model.waste.steps == 0  # a single segment: memory never read


@pytest.mark.parametrize("segment_len, mem_len", [(4, 4), (5, 12), (6, 3), (4, 0)])
def test_segment_recurrence_equals_block_masked_full_pass(segment_len, mem_len):
    convs = conversations(turns=(6, 3, 8))
    model = segment_model(segment_len, mem_len)
    with torch.no_grad():
        states = model.sep_states(make_batch(convs, PAD))
        for b, conv in enumerate(convs):
            ids, ends = stream(conv)
            idx = torch.arange(len(ids))
            segment = idx // segment_len
            # query i sees key j in its own segment or within mem_len slots before its segment starts
            visible = (segment.unsqueeze(1) >= segment.unsqueeze(0)) & (idx.unsqueeze(0) >= (segment * segment_len - mem_len).unsqueeze(1))
            full = model.encoder(
                torch.tensor([ids]), position_ids=(idx % segment_len).unsqueeze(0), attention_mask=visible.unsqueeze(0)
            ).last_hidden_state[0]
            assert torch.allclose(states[b, : len(ends)], full[ends], atol=1e-5), b
    assert not states[1, 3:].any()


def test_segment_memory_waste_is_positive_and_matches_counts():
    convs = conversations(turns=(6, 3, 8))
    lengths = [len(stream(c)[0]) for c in convs]
    assert all(n % 4 for n in lengths), lengths
    model = segment_model(segment_len=4, mem_len=6)
    with torch.no_grad():
        model.predict(make_batch(convs, PAD))
    assert model.memory_waste_rate() > 0
    counted = segment_recurrence_waste_counts([[c.turn_ids for c in convs]], 4, 6, CLS, SEP, PAD)
    assert (counted.steps, counted.padding_slots, counted.total_slots) == (model.waste.steps, model.waste.padding_slots, model.waste.total_slots)
    assert counted.rate == pytest.approx(model.memory_waste_rate())
    # one conversation alone: only its last segment is padded, and no later step reads it
    model.reset_waste()
    with torch.no_grad():
        model.predict(make_batch(convs[:1], PAD))
    assert model.waste.steps > 0 and model.memory_waste_rate() == 0.0


# ---------------------------------------------------------------- utterance recurrence waste


def tiny_dialogxl(mem_len=1000) -> DialogXL:
    encoder = random_backbone(tiny_config(vocab_size=60, hidden=32, layers=2, heads=4), seed=0)
    return DialogXL(DialogXLConfig(num_labels=3, heads=(1, 1, 1, 1), window=1, mem_len=mem_len, dropout=0.0), encoder, CLS, SEP, PAD).eval()


@pytest.mark.parametrize("mem_len", [1000, 7])
def test_utterance_recurrence_waste_matches_counts(mem_len):
    convs = conversations(seed=5, turns=(5, 2, 7, 4, 4))
    model = tiny_dialogxl(mem_len)
    one = utterance_recurrence_waste(model, make_batches(convs, 1, PAD))
    assert one.steps > 0 and one.rate == 0.0
    grouped = [convs[:3], convs[3:]]
    measured = utterance_recurrence_waste(model, [make_batch(g, PAD) for g in grouped])
    counted = utterance_recurrence_waste_counts([[c.turn_ids for c in g] for g in grouped], mem_len, CLS, SEP)
    assert (counted.steps, counted.padding_slots, counted.total_slots) == (measured.steps, measured.padding_slots, measured.total_slots)
    assert counted.rate == pytest.approx(measured.rate)
    assert measured.rate > 0


# ---------------------------------------------------------------- training and interface


@pytest.mark.parametrize("make", [lambda: concat_model(max_length=20, rows=5), lambda: segment_model(6, 6)])
def test_training_reduces_loss_and_predicts_labelled_utterances(make):
    torch.manual_seed(0)
    model = make().train()
    g = torch.Generator().manual_seed(1)
    convs = [random_conversation(g, 4) for _ in range(3)]
    convs[1] = EncodedConversation(None, convs[1].turn_ids[:3], convs[1].speakers[:3], [0, -100, 2])
    batch = make_batch(convs, PAD)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = model.loss(batch).item()
    for _ in range(30):
        optimizer.zero_grad()
        loss = model.loss(batch)
        loss.backward()
        optimizer.step()
    assert loss.item() < first * 0.5
    model.eval()
    gold, pred = model.predict(batch)
    assert len(gold) == len(pred) == 10
    probs = model.probabilities(batch)
    assert probs.shape == (3, 4, 3) and torch.allclose(probs.sum(-1), torch.ones(3, 4))
    assert "max_rows_per_forward" not in model.config_dict() and model.config_dict()["num_labels"] == 3


# ---------------------------------------------------------------- benchmarks/memory_waste.py


def test_benchmark_bookkeeping_matches_models():
    bench = load_benchmark_script("memory_waste")
    convs = conversations(seed=7, turns=(5, 2, 7, 4, 4, 9, 1))
    batches = make_batches(convs, 3, PAD)
    grouped = bench.batches_like_training([c.turn_ids for c in convs], 3)
    assert grouped == [
        [[ids[ids != PAD].tolist() for ids in (s[b] for s in batch.steps[: batch.lengths[b]])] for b in range(len(batch.lengths))]
        for batch in batches
    ]
    model = segment_model(segment_len=5, mem_len=7)
    with torch.no_grad():
        for batch in batches:
            model.predict(batch)
    counted = segment_recurrence_waste_counts(grouped, 5, 7, CLS, SEP, PAD)
    assert (counted.padding_slots, counted.total_slots, counted.steps) == (model.waste.padding_slots, model.waste.total_slots, model.waste.steps)
    measured = utterance_recurrence_waste(tiny_dialogxl(mem_len=9), batches)
    counted = utterance_recurrence_waste_counts(grouped, 9, CLS, SEP)
    assert (counted.padding_slots, counted.total_slots, counted.steps) == (measured.padding_slots, measured.total_slots, measured.steps)
    # XLNet memory over utterance steps: the newest mem_len columns of the concatenated step tensors
    padding = total = steps = 0
    for batch in batches:
        for t in range(1, len(batch.steps)):
            past = torch.cat(batch.steps[:t], dim=1)[:, -9:]
            padding, total, steps = padding + int((past == PAD).sum()), total + past.numel(), steps + 1
    counted = bench.utterance_segment_waste_counts(grouped, 9)
    assert (counted.padding_slots, counted.total_slots, counted.steps) == (padding, total, steps)


class _WordTokenizer:
    """Words as token ids, [CLS] ... [SEP]: enough for the benchmark's bookkeeping."""

    cls_token_id, sep_token_id, pad_token_id = CLS, SEP, PAD

    def __call__(self, texts, add_special_tokens=True, verbose=True):
        return {"input_ids": [[CLS] + [5 + len(w) for w in text.split()] + [SEP] for text in texts]}


def test_benchmark_script_runs_on_a_tiny_split(tmp_path, monkeypatch):
    import json
    import sys
    from types import SimpleNamespace

    from turnformer.dialogue import Dialogue, Turn

    bench = load_benchmark_script("memory_waste")
    dialogues = [
        Dialogue([Turn("a", "one two three " * k), Turn("b", "four five"), Turn("a", "six")][: 1 + k % 3], id=str(k))
        for k in range(1, 8)
    ]
    monkeypatch.setattr(bench, "load_split", lambda name, split, data_dir=None: SimpleNamespace(dialogues=dialogues))
    monkeypatch.setattr(bench, "load_tokenizer", lambda name: _WordTokenizer())
    monkeypatch.setattr(sys, "argv", ["memory_waste.py", "--segment-len", "4", "--mem-len", "6", "--results-dir", str(tmp_path)])
    bench.main()
    record = json.loads((tmp_path / "memory-waste-meld.json").read_text())
    assert record["metric"] == "memory_waste_rate_percent" and record["paper"] == 60.0 and record["split"] == "train"
    extra = record["extra"]
    assert extra["utterance_recurrence_percent_batch1"] == 0.0 and extra["segment_len"] == 4
    assert record["scores"][0] > 0 and extra["utterance_recurrence_percent_batch4"] > 0
    assert set(extra["batches_in_data_order"]) == {"segment_recurrence_percent", "utterance_recurrence_percent", "xlnet_utterance_segments_percent"}


# ---------------------------------------------------------------- prediction reads conversations together


def dialogxl_variant(**changes) -> DialogXL:
    encoder = random_backbone(tiny_config(vocab_size=60, hidden=32, layers=2, heads=4), seed=0)
    config = DialogXLConfig(num_labels=3, heads=(1, 1, 1, 1), window=1, dropout=0.0, **changes)
    return DialogXL(config, encoder, CLS, SEP, PAD).eval()


@pytest.mark.parametrize("make", [
    lambda: dialogxl_variant(mem_len=1000), lambda: dialogxl_variant(mem_len=7, chunk_tokens=12),
    lambda: dialogxl_variant(mem_len=9, memory_bias=-4.0, speaker_roles=2), lambda: dialogxl_variant(positions="utterance"),
    lambda: concat_model(max_length=20, rows=5, tokens=40), lambda: segment_model(6, 6),
], ids=["dialogxl", "dialogxl-short-memory", "dialogxl-memory-bias", "dialogxl-utterance-positions", "concat-context",
        "segment-recurrence"])
def test_a_conversations_probabilities_do_not_depend_on_the_others_of_its_batch(make):
    """What `predict` answers for a conversation read with others (padded to the longest) is what it answers for it
    alone, for every emotion model: prediction may read a file's conversations together."""
    model = make()
    convs = conversations(seed=11, turns=(5, 1, 9, 2, 7, 3))
    with torch.no_grad():
        together = model.probabilities(make_batch(convs, PAD))
        for b, conv in enumerate(convs):
            alone = model.probabilities(make_batch([conv], PAD))[0]
            n = len(conv.turn_ids)
            assert torch.allclose(together[b, :n], alone[:n], atol=1e-5), b


def test_prediction_groups_keep_order_and_both_limits():
    from turnformer.tasks.erc import prediction_groups

    assert prediction_groups([3, 3, 3, 10, 1, 1], max_conversations=2, max_utterances=7) == [[0, 1], [2], [3], [4, 5]]
    assert prediction_groups([300, 2, 2], max_conversations=16, max_utterances=256) == [[0], [1, 2]]
    assert prediction_groups([], 16, 256) == []
    groups = prediction_groups([1] * 40, max_conversations=16, max_utterances=256)
    assert [len(g) for g in groups] == [16, 16, 8] and [i for g in groups for i in g] == list(range(40))


# ---------------------------------------------------------------- SegmentRecurrence training memory


def test_recomputed_segments_keep_the_stream_once_not_a_memory_each(monkeypatch):
    """Each recomputed segment keeps its memory for backward: views of one buffer of every layer's inputs over the
    stream, not a copy of its own memory (a 64-token segment copying a memory of 400: about six times the stream)."""
    from turnformer.models import baselines

    model = segment_model(segment_len=4, mem_len=12).train()
    batch = make_batch(conversations(turns=(9, 4, 12)), PAD)
    stored = []
    real_checkpoint = baselines.checkpoint
    monkeypatch.setattr(baselines, "checkpoint", lambda fn, *inputs, **kw: stored.append(inputs) or real_checkpoint(fn, *inputs, **kw))
    model.loss(batch).backward()
    ids, _, _ = model.streams(batch)
    pieces = [t for inputs in stored for t in inputs[4:]]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in pieces}
    layers, hidden = model.encoder.num_layers, model.encoder.config.hidden_size
    assert len(stored) == ids.shape[1] // 4 and len(pieces) > 3 * len(storages)
    assert sum(storages.values()) == layers * ids.numel() * hidden * 4  # the stream once, a buffer a layer
    assert all(p.grad is not None for p in model.classifier.parameters())


def test_segment_recurrence_step_that_cannot_fit_is_refused_before_training(monkeypatch):
    """The estimate grows with the stream (every segment's layer inputs are kept), the batch and float32; a step that
    cannot fit the memory available is refused naming the settings that bound it and what to do."""
    from turnformer.dialogue import DialogueError
    from turnformer.tasks import erc

    model = segment_model(segment_len=8, mem_len=16)
    estimate = model.training_memory_bytes
    assert estimate(2, 100) < estimate(2, 10_000) < estimate(4, 10_000)
    assert estimate(2, 10_000, "bf16") > estimate(2, 10_000)  # a long one: under autocast a token took more (measured)
    grown = estimate(1, 8_000 + 8) - estimate(1, 8_000)  # one more segment: its layer inputs and what it pins
    assert grown == 8 * model.encoder.config.hidden_size * model.encoder.num_layers * 16
    recomputed = estimate(2, 10_000)
    model.config.checkpoint = False  # every segment's graph kept: far more
    assert estimate(2, 10_000) - FIXED_STEP_BYTES > 3 * (recomputed - FIXED_STEP_BYTES)
    model.config.checkpoint = True
    batches = [make_batch(conversations(turns=(9, 4, 12)), PAD)]
    monkeypatch.setattr(erc, "available_memory", lambda: (10**12, "this machine"))
    erc.check_training_memory(model, batches)
    monkeypatch.setattr(erc, "available_memory", lambda: (1000, "this machine"))
    longest = int(batches[0].turn_lengths.sum(1).max())
    with pytest.raises(DialogueError, match=rf"batches of 3 conversations, the longest {longest} tokens, in segments of 8 "
                                            r"against a memory of 16, mixed precision no.*lower train.batch_size, or cut"):
        erc.check_training_memory(model, batches)


def test_an_epoch_of_few_updates_is_said_before_training(caplog):
    """A conversation is one example however long: a file of one long transcript trained one step an epoch unsaid."""
    from turnformer.tasks import erc

    with caplog.at_level("WARNING", logger="turnformer"):
        erc.warn_few_updates(make_batches(conversations(turns=(120, 2, 7)), 2, PAD))
        assert ("training makes 2 update(s) an epoch: 3 conversation(s) of 129 utterances in batches of up to 2"
                in caplog.text and "cut long conversations into parts" in caplog.text)
        caplog.clear()
        erc.warn_few_updates(make_batches(conversations(turns=(120,) + (3,) * 19), 2, PAD))  # ten updates: nothing to say
        erc.warn_few_updates(make_batches(conversations(turns=(5, 2, 7)), 2, PAD))  # a few short ones: it looks it
        erc.warn_few_updates([])
        assert not caplog.text
