"""One-pass DialogXL (`DialogXL.logits`, chunks of consecutive utterances) equals the recurrence (`DialogXL.step`,
one utterance at a time against a detached memory) in outputs and in gradients, on BERT-type, MPNet and XLNet
encoders, for every head layout of the recipes and every setting that changes what a token sees."""

from __future__ import annotations

import tomllib

import pytest
import torch
from _benchmark_scripts import load_benchmark_script

from turnformer.backbones import random_backbone, tiny_config
from turnformer.models.dialogxl import DialogXL, DialogXLConfig, DialogXLSession
from turnformer.recipes import RECIPES_DIR
from turnformer.tasks.erc import EncodedConversation, make_batch, make_batches

TOL = 1e-5
# (cls, sep, pad) per architecture; XLNet puts its specials at the end of an utterance, the others around it
SPECIALS = {"bert": (1, 2, 0), "mpnet": (0, 2, 1), "xlnet": (1, 2, 0)}


def recipe_layouts() -> list[tuple[tuple[int, ...], int, int]]:
    """(heads, window, speaker_roles) of every DialogXL recipe: the layouts trained and reported."""
    found = set()
    for path in sorted(RECIPES_DIR.glob("erc-*-dialogxl*.toml")):
        config = tomllib.loads(path.read_text())["model_config"]
        found.add((tuple(config["heads"]), config["window"], config.get("speaker_roles", 0)))
    return sorted(found)


def build(arch: str, heads=(5, 5, 1, 1), window=2, mem_len=10, positions="conversation", memory_bias=None,
          speaker_roles=0, chunk_tokens=512, memory_grad=False, max_positions=128, seed=0) -> DialogXL:
    config = tiny_config(vocab_size=60, hidden=48, layers=2, heads=12, dropout=0.0, max_positions=max_positions, model_type=arch)
    config.initializer_range = 0.2  # strong weights: a wrong mask or position changes the outputs visibly
    encoder = random_backbone(config, seed=seed)
    torch.manual_seed(seed)
    dialogxl = DialogXLConfig(num_labels=3, heads=heads, window=window, mem_len=mem_len, dropout=0.0, positions=positions,
                              memory_bias=memory_bias, speaker_roles=speaker_roles, chunk_tokens=chunk_tokens,
                              memory_grad=memory_grad)
    cls, sep, pad = SPECIALS[arch]
    model = DialogXL(dialogxl, encoder, cls, sep, pad)
    if memory_bias is not None:  # away from its start, different per layer and head
        with torch.no_grad():
            model.memory_bias.add_(torch.randn(model.memory_bias.shape))
    if speaker_roles:
        with torch.no_grad():
            model.speaker_embedding.weight.normal_()
    return model


def conversation(arch: str, g: torch.Generator, turns: int, speakers: int = 3) -> EncodedConversation:
    cls, sep, _ = SPECIALS[arch]
    ids = []
    for _ in range(turns):
        words = torch.randint(5, 60, (int(torch.randint(1, 7, (1,), generator=g)),), generator=g).tolist()
        ids.append(words + [sep, cls] if arch == "xlnet" else [cls] + words + [sep])
    labels = torch.randint(0, 3, (turns,), generator=g).tolist()
    labels[0] = -100  # an unlabelled turn is context only
    return EncodedConversation(None, ids, torch.randint(0, speakers, (turns,), generator=g).tolist(), labels)


def batch_of(arch: str, turns=(5, 2, 9, 1), seed=0):
    g = torch.Generator().manual_seed(seed)
    return make_batch([conversation(arch, g, n) for n in turns], SPECIALS[arch][2])


def recurrent_logits(model: DialogXL, batch) -> torch.Tensor:
    return torch.stack(model.logits_per_step(batch), dim=1)


def loss_of(logits: torch.Tensor, batch) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.labels.flatten(), ignore_index=-100)


def gradients(model: DialogXL, batch, one_pass: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    logits = model.logits(batch) if one_pass else recurrent_logits(model, batch)
    loss_of(logits, batch).backward()
    # a parameter no gradient reached (the memory bias with no memory) counts as a zero gradient
    return logits.detach(), {n: p.grad.clone() if p.grad is not None else torch.zeros_like(p) for n, p in model.named_parameters()}


def assert_equal_to_recurrence(model: DialogXL, batch, chunk_sizes=(1, 7, 20, 10_000)) -> None:
    """Eval-mode outputs and train-mode outputs and gradients, for every chunk size."""
    lengths = batch.turn_lengths
    real = torch.arange(lengths.shape[1]) < torch.tensor(batch.lengths)[:, None]  # utterances that exist
    model.eval()
    with torch.no_grad():
        expected = recurrent_logits(model, batch)
    model.train()
    expected_train, expected_grads = gradients(model, batch, one_pass=False)
    assert any(float(g.abs().max()) > 0 for g in expected_grads.values()), "no gradient reached the model"
    for chunk in chunk_sizes:
        model.config.chunk_tokens = chunk
        model.eval()
        with torch.no_grad():
            torch.testing.assert_close(model.logits(batch)[real], expected[real], rtol=0, atol=TOL, msg=f"chunk {chunk}")
        model.train()
        logits, grads = gradients(model, batch, one_pass=True)
        torch.testing.assert_close(logits[real], expected_train[real], rtol=0, atol=TOL, msg=f"chunk {chunk} (train)")
        assert grads.keys() == expected_grads.keys()
        for name, grad in grads.items():
            torch.testing.assert_close(grad, expected_grads[name], rtol=1e-4, atol=TOL, msg=f"chunk {chunk}: grad of {name}")


@pytest.mark.parametrize("arch", ["bert", "mpnet", "xlnet"])
@pytest.mark.parametrize("heads, window, speaker_roles", recipe_layouts())
def test_every_recipe_layout_equals_the_recurrence(arch, heads, window, speaker_roles):
    model = build(arch, heads=heads, window=min(window, 3), speaker_roles=speaker_roles, mem_len=12)
    assert_equal_to_recurrence(model, batch_of(arch))


@pytest.mark.parametrize("arch", ["bert", "mpnet", "xlnet"])
@pytest.mark.parametrize("mem_len", [0, 1, 9, 10_000])
@pytest.mark.parametrize("memory_bias, positions", [(None, "conversation"), (-1.0, "utterance"), (0.5, "conversation")])
def test_memory_length_bias_and_positions_equal_the_recurrence(arch, mem_len, memory_bias, positions):
    if arch == "xlnet" and memory_bias is not None:
        pytest.skip("XLNet takes no attention bias: the memory bias is refused on it (tested in test_xlnet)")
    model = build(arch, heads=(3, 3, 3, 3), window=1, mem_len=mem_len, memory_bias=memory_bias, positions=positions,
                  speaker_roles=2 if memory_bias else 0)
    assert_equal_to_recurrence(model, batch_of(arch, seed=mem_len), chunk_sizes=(1, 15, 10_000))


@pytest.mark.parametrize("arch", ["bert", "mpnet"])
def test_conversations_longer_than_the_position_table(arch):
    """Running positions past the backbone's table: each utterance is shifted back to fit, on its own."""
    model = build(arch, max_positions=40, mem_len=25)
    batch = batch_of(arch, turns=(30, 3, 14), seed=5)
    assert int(batch.turn_lengths.sum(1).max()) > 2 * 40
    assert_equal_to_recurrence(model, batch, chunk_sizes=(1, 33, 10_000))


def test_xlnet_long_conversation_and_mixed_batch():
    model = build("xlnet", heads=(2, 2, 4, 4), window=3, mem_len=30)
    assert_equal_to_recurrence(model, batch_of("xlnet", turns=(25, 1, 6), seed=2), chunk_sizes=(1, 40, 10_000))


def test_chunks_respect_the_token_budget_and_cover_every_utterance():
    model = build("bert", chunk_tokens=20)
    batch = batch_of("bert", turns=(12, 3, 7), seed=1)
    ranges = model.chunks(batch)
    assert ranges[0][0] == 0 and ranges[-1][1] == batch.turn_lengths.shape[1]
    assert all(a < b and b == c for (a, b), (c, _) in zip(ranges, ranges[1:]))
    for a, b in ranges:  # within the budget, or a single utterance
        assert b - a == 1 or int(batch.turn_lengths[:, a:b].sum(1).max()) <= 20
    model.config.chunk_tokens = 1
    assert model.chunks(batch) == [(t, t + 1) for t in range(batch.turn_lengths.shape[1])]


def test_training_batches_group_conversations_by_tokens_then_turns():
    """Rows of about the same length in tokens: a batch of few long utterances and one of many short ones are not
    padded to each other's length only because they have as many turns."""
    cls, sep, pad = SPECIALS["bert"]

    def conv(name: str, *turn_tokens: int) -> EncodedConversation:
        return EncodedConversation(name, [[cls] + [7] * (n - 2) + [sep] for n in turn_tokens], [0] * len(turn_tokens),
                                   [1] * len(turn_tokens))

    convs = [conv("long-few", 60, 60), conv("short-many", *[4] * 10), conv("long-many", *[12] * 9), conv("tiny", 3, 3),
             conv("40-in-2", 20, 20)]  # tokens 120, 40, 108, 6, 40
    batches = make_batches(convs, 2, pad)
    assert [b.ids for b in batches] == [["tiny", "40-in-2"], ["short-many", "long-many"], ["long-few"]]
    assert [tuple(b.input_ids.shape) for b in batches] == [(2, 40), (2, 108), (1, 120)]


def test_the_padding_benchmark_counts_what_training_batches_hold():
    """benchmarks/erc_batch_padding.py: its chunks are `DialogXL.chunks`, its padded slots the batches' rows."""
    bench = load_benchmark_script("erc_batch_padding")
    g = torch.Generator().manual_seed(3)
    convs = [conversation("bert", g, n) for n in (12, 3, 7, 1, 9, 4, 4)]
    model = build("bert", chunk_tokens=20)
    counted = bench.count(convs, 3, bench.GROUPINGS["tokens"], 20, 10, 2)
    batches = make_batches(convs, 3, SPECIALS["bert"][2])
    assert counted["padded_slots"] == sum(b.input_ids.numel() for b in batches)
    assert counted["real_tokens"] == sum(int(b.turn_lengths.sum()) for b in batches)
    assert counted["chunks"] == sum(len(model.chunks(b)) for b in batches)
    for b in batches:
        assert bench.chunk_ranges(b.turn_lengths.tolist(), 20) == model.chunks(b)


def test_memory_grad_lets_the_history_learn_within_a_chunk():
    """memory_grad: the same forward values, and gradients that now reach earlier utterances through later ones."""
    batch = batch_of("bert", seed=3)
    exact, free = build("bert", mem_len=50), build("bert", mem_len=50, memory_grad=True)
    free.load_state_dict(exact.state_dict())
    exact.train(), free.train()
    logits_exact, grads_exact = gradients(exact, batch, one_pass=True)
    logits_free, grads_free = gradients(free, batch, one_pass=True)
    torch.testing.assert_close(logits_free, logits_exact, rtol=0, atol=TOL)
    word = "encoder.embeddings.word_embeddings.weight"
    assert (grads_free[word] - grads_exact[word]).abs().max() > 1e-4
    # only the last utterance labelled: with memory_grad its loss reaches the earlier utterances' own tokens
    only_last = make_batch([conversation("bert", torch.Generator().manual_seed(4), 4)], 0)
    only_last.labels[0, :3] = -100
    earlier = [t for turn in only_last.steps[:3] for t in turn[0].tolist() if t > 4]
    last = set(only_last.steps[3][0].tolist())
    unseen = [t for t in earlier if t not in last]
    assert unseen
    _, exact_grads = gradients(exact, only_last, one_pass=True)
    _, free_grads = gradients(free, only_last, one_pass=True)
    assert float(exact_grads[word][unseen].abs().max()) == 0.0  # detached, as in the recurrence
    assert float(free_grads[word][unseen].abs().max()) > 0.0


def test_streaming_session_equals_one_pass_prediction():
    class Tokenizer:
        all_special_ids = [1, 2]

        def __call__(self, text, add_special_tokens=True, verbose=True):
            return {"input_ids": [1] + [5 + ord(c) % 50 for c in text] + [2]}

    model = build("bert", mem_len=15, memory_bias=-1.0, speaker_roles=2).eval()
    session = DialogXLSession(model, Tokenizer(), ["a", "b", "c"])
    turns = [("A", "we were on a break"), ("B", "oh my god"), ("A", "fine"), ("C", "guys?"), ("B", "no")] * 3
    answers = [session.add(s, t) for s, t in turns]
    streamed = torch.tensor([[a["probabilities"][k] for k in "abc"] for a in answers])
    speakers = {"A": 0, "B": 1, "C": 2}
    conv = EncodedConversation(None, [Tokenizer()(t)["input_ids"] for _, t in turns], [speakers[s] for s, _ in turns],
                               [0] * len(turns))
    model.config.chunk_tokens = 30
    torch.testing.assert_close(model.probabilities(make_batch([conv], 0))[0], streamed, rtol=0, atol=TOL)


def test_a_step_that_cannot_fit_is_refused_before_training(monkeypatch):
    """The estimate grows with the chunk and the batch; a longer conversation adds only its chunks' kept memory
    (measured: `benchmarks/erc_step_memory.py`); a half precision needs less. A setting that cannot fit the memory
    available is an error naming the settings that bound it, before any training."""
    from turnformer.dialogue import DialogueError
    from turnformer.tasks import erc

    model = build("bert", chunk_tokens=64, mem_len=100)
    layers, hidden = model.encoder.num_layers, model.encoder.config.hidden_size
    kept = 4 * 100 * hidden * layers * 8  # one more chunk's memory, bytes
    assert model.training_memory_bytes(4, 5_000, 80) - model.training_memory_bytes(4, 5_000, 79) == kept
    assert model.training_memory_bytes(4, 5_000) < model.training_memory_bytes(4, 50_000)
    assert model.training_memory_bytes(4, 40) < model.training_memory_bytes(4, 5_000) < model.training_memory_bytes(8, 5_000)
    assert model.training_memory_bytes(4, 5_000, precision="bf16") < model.training_memory_bytes(4, 5_000)
    batches = [batch_of("bert", turns=(30, 3))]
    monkeypatch.setattr(erc, "available_memory", lambda: (10**12, "this machine"))
    erc.check_training_memory(model, batches)
    monkeypatch.setattr(erc, "available_memory", lambda: (1000, "this machine"))
    with pytest.raises(DialogueError, match=r"batches of 2 conversations.*lower train.batch_size or model_config.chunk_tokens"):
        erc.check_training_memory(model, batches)
    # the check counts the batches' chunks and takes the run's precision
    chunks, longest = len(model.chunks(batches[0])), int(batches[0].turn_lengths.sum(1).max())
    assert chunks > 1
    half, full = model.training_memory_bytes(2, longest, chunks, "bf16"), model.training_memory_bytes(2, longest, chunks)
    between = (half + full) // 2
    assert half < between < full
    monkeypatch.setattr(erc, "available_memory", lambda: (between, "this machine"))
    erc.check_training_memory(model, batches, "bf16")
    with pytest.raises(DialogueError, match=rf"in up to {chunks} chunks, mixed precision no"):
        erc.check_training_memory(model, batches, "no")


def mixed_precision_error(model: DialogXL, batch, one_pass: bool) -> float:
    """Relative distance of all gradients under bfloat16 autocast from the float32 ones."""
    _, reference = gradients(model, batch, one_pass)
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the forward only, as accelerate does: backward runs outside
        loss = loss_of(model.logits(batch) if one_pass else recurrent_logits(model, batch), batch)
    loss.backward()
    mixed = {n: p.grad if p.grad is not None else torch.zeros_like(p) for n, p in model.named_parameters()}
    assert all(grad.dtype == torch.float32 for grad in mixed.values())
    flat = lambda grads: torch.cat([g.flatten() for g in grads.values()])
    return float((flat(mixed) - flat(reference)).norm() / flat(reference).norm())


@pytest.mark.parametrize("memory_grad", [False, True])
def test_one_pass_trains_under_bfloat16_autocast(memory_grad):
    """Mixed precision (accelerate's bf16, as on a GPU): the one-pass path's own autograd functions run their backward
    under the forward's autocast, so float32 weights meet bfloat16 gradients without error, and the gradients are as
    close to float32's as the recurrence's are under the same autocast (torch's own backward: bfloat16 rounding only)."""
    model, batch = build("mpnet", memory_grad=memory_grad), batch_of("mpnet")
    model.train()
    one_pass, recurrence = mixed_precision_error(model, batch, True), mixed_precision_error(model, batch, False)
    assert one_pass < 0.1 and one_pass < 2 * recurrence, (one_pass, recurrence)


@pytest.mark.parametrize("arch, mem_len, memory_bias", [("bert", 10, None), ("bert", 25, -1.0), ("bert", 0, None),
                                                        ("mpnet", 25, -1.0), ("xlnet", 10, None)])
def test_memory_after_a_prefix_equals_stepping_it(arch, mem_len, memory_bias):
    """`memory_after(batch, end)` (the first `end` utterances a chunk at a time) leaves the memory that stepping them
    leaves: the same states and metadata, and `step` goes on from it to the same outputs."""
    model = build(arch, mem_len=mem_len, memory_bias=memory_bias, speaker_roles=2).eval()
    batch = batch_of(arch, turns=(9, 4, 7), seed=4)
    real = torch.arange(batch.turn_lengths.shape[1]) < torch.tensor(batch.lengths)[:, None]
    with torch.no_grad():
        expected = recurrent_logits(model, batch)
        for chunk in (1, 15, 10_000):
            model.config.chunk_tokens = chunk
            for end in range(batch.turn_lengths.shape[1] + 1):
                stepped = model.empty_memory(3)
                for t in range(end):
                    _, stepped, _ = model.step(batch.steps[t], t, batch.speakers[:, t], stepped)
                memory = model.memory_after(batch, end)
                assert memory.length == stepped.length, f"chunk {chunk}, end {end}"
                for ours, theirs in zip(memory.states, stepped.states):
                    torch.testing.assert_close(ours[stepped.meta.is_real], theirs[stepped.meta.is_real], rtol=0, atol=TOL)
                for field in ("utterance", "speaker", "position", "order", "is_padding", "memory_index"):
                    ours, theirs = getattr(memory.meta, field), getattr(stepped.meta, field)
                    assert torch.equal(ours[stepped.meta.is_real], theirs[stepped.meta.is_real]), f"{field}: chunk {chunk}, end {end}"
                for t in range(end, batch.turn_lengths.shape[1]):
                    cls, memory, _ = model.step(batch.steps[t], t, batch.speakers[:, t], memory)
                    torch.testing.assert_close(model.classifier(cls)[real[:, t]], expected[real[:, t], t], rtol=0, atol=TOL)


def test_memory_after_refuses_a_prefix_outside_the_batch():
    model = build("bert").eval()
    batch = batch_of("bert", turns=(3, 2))
    for end in (-1, 4):
        with pytest.raises(ValueError, match=f"end {end}: the batch has 3 utterance slots"):
            model.memory_after(batch, end)
