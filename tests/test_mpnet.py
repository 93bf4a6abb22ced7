"""The project's MPNet encoder: parity with transformers' MPNetModel, per-head masks, memory with
relative positions over [memory ; current] (recurrence = one pass), loading, the split-zip weights,
and DialogXL on it. Tiny random configurations only, no downloads."""

from __future__ import annotations

import io
import json
import os
import zipfile

import pytest
import torch
from _encoder_checks import assert_per_head_masks_honoured, one_pass_visibility, stepwise_cls_states
from safetensors.torch import save_file

from turnformer.backbones import BackboneLoadError, load_backbone, load_config, load_weights, random_backbone, tiny_config
from turnformer.backbones import loading
from turnformer.backbones.mpnet import MPNetConfig, MPNetStructuredEncoder, relative_position_bucket
from turnformer.models.dialogxl import DialogXL, DialogXLConfig
from turnformer.tasks.erc import EncodedConversation, make_batch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach the Hub

TOL = 1e-5
VOCAB = 60
# MPNet's special ids: <s> (CLS) 0, <pad> 1, </s> (SEP) 2.
CLS, PAD, SEP = 0, 1, 2
# Weights drawn 15x larger than MPNet's 0.02, so the relative bias moves outputs by ~1 and a wrong
# distance cannot hide under the tolerance.
STRONG = 0.3


def mpnet_config(initializer_range: float = STRONG, dropout: float = 0.0) -> MPNetConfig:
    config = tiny_config(vocab_size=VOCAB, hidden=32, layers=2, heads=4, dropout=dropout, model_type="mpnet")
    config.initializer_range = initializer_range
    return config


@pytest.fixture
def tiny() -> MPNetStructuredEncoder:
    return random_backbone(mpnet_config(), seed=0)


def _ids(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, length), generator=g)


def _memory(batch: int, length: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, length, 32, generator=g) for _ in range(2)]


def reference_pair():
    """transformers' MPNetModel and ours with the same random weights."""
    from transformers import MPNetModel

    config = mpnet_config()
    torch.manual_seed(0)
    reference = MPNetModel(config).eval()
    ours = MPNetStructuredEncoder(config).eval()
    load_weights(ours, reference.state_dict())
    return reference, ours


# --- parity with transformers ---------------------------------------------------------------


@pytest.mark.parametrize("output_attentions", [False, True], ids=["sdpa", "explicit"])
def test_parity_with_mpnet_model(output_attentions):
    reference, ours = reference_pair()
    ids = _ids(3, 40)  # distances up to 39: exact and logarithmic buckets both used
    real = torch.ones(3, 40, dtype=torch.bool)
    real[1, 30:] = False
    real[2, 5:] = False
    ids[~real] = PAD
    with torch.no_grad():
        theirs = reference(input_ids=ids, attention_mask=real.long(), output_hidden_states=True)
        mine = ours(ids, attention_mask=real, output_hidden_states=True, output_attentions=output_attentions)
    assert (mine.last_hidden_state - theirs.last_hidden_state).abs()[real].max() < TOL
    assert len(mine.hidden_states) == len(theirs.hidden_states) == 3
    for a, b in zip(mine.hidden_states, theirs.hidden_states):
        assert (a - b).abs()[real].max() < TOL
    assert (mine.pooler_output - theirs.pooler_output).abs().max() < TOL
    assert theirs.last_hidden_state.abs().mean() > 0.1  # not a degenerate comparison
    if output_attentions:
        assert [a.shape for a in mine.attentions] == [(3, 4, 40, 40)] * 2


def test_parity_with_explicit_position_ids():
    """Our position ids are 0-based; MPNetModel's index its table directly (offset by padding_idx + 1)."""
    reference, ours = reference_pair()
    ids = _ids(2, 12, seed=1)
    positions = torch.arange(12).unsqueeze(0)
    with torch.no_grad():
        theirs = reference(input_ids=ids, position_ids=positions + 2).last_hidden_state
        mine = ours(ids, position_ids=positions).last_hidden_state
        default = ours(ids).last_hidden_state
    torch.testing.assert_close(mine, theirs, rtol=0, atol=TOL)
    torch.testing.assert_close(default, mine, rtol=0, atol=0)


def test_relative_position_bucket_is_mpnets():
    from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

    relative = torch.arange(-300, 301).view(1, -1)
    assert torch.equal(relative_position_bucket(relative), MPNetEncoder.relative_position_bucket(relative))


# --- per-head masks -------------------------------------------------------------------------


def test_per_head_masks_are_honoured(tiny):
    memory_length, length, hidden_key = 4, 3, 1
    memory = _memory(2, memory_length, seed=5)
    changed = [m.clone() for m in memory]
    g = torch.Generator().manual_seed(6)
    for m in changed:
        m[:, hidden_key] = 10 * torch.randn(2, 32, generator=g)  # that key's state, arbitrarily changed
    ids = _ids(2, length)
    assert_per_head_masks_honoured(tiny, ids, memory, changed, hidden_key)


def test_a_head_that_sees_nothing_attends_to_nothing(tiny):
    ids = _ids(1, 4)
    mask = torch.ones(1, 4, 4, 4, dtype=torch.bool)
    mask[:, 3, 1] = False  # head 3, query 1: no visible key
    open_mask = torch.ones(1, 4, 4, dtype=torch.bool)
    with torch.no_grad():
        out = tiny(ids, attention_mask=mask, output_attentions=True)
        sdpa = tiny(ids, attention_mask=mask).last_hidden_state
        full = tiny(ids, attention_mask=open_mask).last_hidden_state
    assert bool(torch.isfinite(out.last_hidden_state).all())
    assert bool((out.attentions[0][0, 3, 1] == 0).all())
    torch.testing.assert_close(sdpa, out.last_hidden_state, rtol=0, atol=TOL)
    assert (sdpa[0, 1] - full[0, 1]).abs().max() > 1e-4


# --- memory and relative positions ---------------------------------------------------------


@pytest.mark.parametrize("padded", [False, True])
def test_one_pass_equals_recurrence_with_memory(tiny, padded):
    """[A ; B] in one pass, A seeing only A and B seeing both, equals A alone then B with A's
    layer inputs as memory: by default memory keys are 0..M-1 and B continues at M."""
    first, second = _ids(2, 7, seed=1), _ids(2, 5, seed=2)
    joined = torch.cat([first, second], dim=1)
    segment = torch.tensor([0] * 7 + [1] * 5)
    causal = (segment[None, :, None] >= segment[None, None, :]).expand(2, 12, 12).clone()
    real = torch.ones(2, 5, dtype=torch.bool)
    if padded:  # B's second row ends early: padding keys hidden, padding queries ignored
        real[1, 3:] = False
        second[~real] = PAD
        joined[:, 7:][~real] = PAD
        causal[:, :, 7:] &= real[:, None, :]
    with torch.no_grad():
        one_pass = tiny(joined, attention_mask=causal).last_hidden_state
        a = tiny(first, output_hidden_states=True)
        b = tiny(second, memory=a.hidden_states[:-1], attention_mask=causal[:, 7:]).last_hidden_state
    torch.testing.assert_close(a.last_hidden_state, one_pass[:, :7], rtol=0, atol=TOL)
    assert (b - one_pass[:, 7:]).abs()[real].max() < TOL


def test_default_memory_positions_precede_the_current_tokens(tiny):
    memory = _memory(2, 6)
    ids = _ids(2, 4)
    with torch.no_grad():
        standard = tiny(ids, memory=memory).last_hidden_state
        explicit = tiny(ids, memory=memory, position_ids=torch.arange(6, 10)[None],
                        key_position_ids=torch.arange(6)[None]).last_hidden_state
        # Given position_ids alone, memory keys are the M positions right before them.
        continued = tiny(ids, memory=memory, position_ids=torch.arange(6, 10)[None]).last_hidden_state
        reversed_keys = tiny(ids, memory=memory, key_position_ids=torch.arange(6).flip(0)[None]).last_hidden_state
        far = tiny(ids, memory=memory, key_position_ids=torch.arange(6)[None] - 50).last_hidden_state
    torch.testing.assert_close(explicit, standard, rtol=0, atol=0)
    torch.testing.assert_close(continued, standard, rtol=0, atol=0)
    assert (reversed_keys - standard).abs().max() > 0.1  # key positions are used
    assert (far - standard).abs().max() > 0.1


def test_per_row_key_positions_equal_each_row_alone_with_its_own_memory(tiny):
    """DialogXL's case: memory rows of different lengths, padded at the end of the row. Per-row key
    positions make each row equal to that row encoded alone with its unpadded memory."""
    lengths, length = [5, 3], 4
    memory = _memory(2, 5, seed=4)
    memory_mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    ids = _ids(2, length)
    key_positions = torch.stack([torch.arange(5), torch.tensor([0, 1, 2, 0, 0])])  # padding slots: any value
    position_ids = torch.stack([n + torch.arange(length) for n in lengths])
    with torch.no_grad():
        batched = tiny(ids, memory=memory, memory_mask=memory_mask,
                       position_ids=position_ids, key_position_ids=key_positions).last_hidden_state
        for b, n in enumerate(lengths):
            alone = tiny(ids[b : b + 1], memory=[m[b : b + 1, :n] for m in memory]).last_hidden_state
            torch.testing.assert_close(batched[b : b + 1], alone, rtol=0, atol=TOL)


def test_positions_are_checked(tiny):
    ids = _ids(1, 3)
    with pytest.raises(ValueError, match=r"position id 128 is out of range: MPNet has positions 0\.\.127"):
        tiny(ids, position_ids=torch.tensor([[126, 127, 128]]))
    with pytest.raises(ValueError, match="position id -1 is out of range"):
        tiny(ids, position_ids=torch.tensor([[-1, 0, 1]]))
    with pytest.raises(ValueError, match="out of range"):  # the default positions continue after the memory
        tiny(ids, memory=_memory(1, 126))
    with pytest.raises(ValueError, match=r"position_ids must be integer \[batch or 1, 3\]"):
        tiny(ids, position_ids=torch.arange(4)[None])
    with pytest.raises(ValueError, match=r"key_position_ids must be integer \[batch or 1, 2\]"):
        tiny(ids, memory=_memory(1, 2), key_position_ids=torch.arange(3)[None])
    # Memory keys need no embedding row: any integers are fine for them.
    tiny(ids, memory=_memory(1, 2), key_position_ids=torch.tensor([[-500, 9000]]))


# --- loading --------------------------------------------------------------------------------


def test_loading_a_folder_and_task_checkpoints(tmp_path):
    reference, ours = reference_pair()
    folder = tmp_path / "mpnet"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(reference.config.to_dict()))
    state = {k: v.contiguous() for k, v in reference.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"))
    assert isinstance(load_config(folder), MPNetConfig)
    loaded, tokenizer = load_backbone(str(folder), with_tokenizer=False)
    assert isinstance(loaded, MPNetStructuredEncoder) and tokenizer is None and loaded.pooler is not None
    ids = _ids(2, 6)
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).last_hidden_state, ours(ids).last_hidden_state, rtol=0, atol=0)

    # MPNetForMaskedLM-style keys: the `mpnet.` prefix is stripped, the head left out, no pooler.
    masked_lm = {f"mpnet.{k}": v for k, v in state.items() if not k.startswith("pooler.")}
    masked_lm["lm_head.bias"] = torch.zeros(VOCAB)
    model = random_backbone(mpnet_config(), seed=1)
    load_weights(model, masked_lm)
    assert model.pooler is None

    broken = dict(state)
    del broken["encoder.relative_attention_bias.weight"]
    with pytest.raises(BackboneLoadError, match="relative_attention_bias"):
        load_weights(random_backbone(mpnet_config(), seed=1), broken)


def test_tiny_config_and_random_backbone():
    config = tiny_config(max_positions=64, model_type="mpnet")
    assert isinstance(config, MPNetConfig) and config.max_position_embeddings == 66 and config.pad_token_id == PAD
    a, b = random_backbone(config, seed=3), random_backbone(config, seed=3)
    assert isinstance(a, MPNetStructuredEncoder) and a.max_positions == 64 and not a.training
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert bool((a.embeddings.position_embeddings.weight[PAD] == 0).all())
    no_positions = random_backbone(config, seed=3, use_position_embeddings=False)
    with torch.no_grad():
        no_positions(_ids(1, 3), position_ids=torch.tensor([[500, 501, 502]]))  # unused: not range-checked


# --- the split-zip weights -------------------------------------------------------------------


def _split_zip(folder, files: dict[str, bytes], n_parts: int = 3, name: str = "model.zip") -> list:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    data = buffer.getvalue()
    size = -(-len(data) // n_parts)
    parts = []
    for i in range(n_parts):
        part = folder / f"{name}.{i + 1:03d}"
        part.write_bytes(data[i * size : (i + 1) * size])
        parts.append(part)
    return parts


FILES = {"model/config.json": b'{"model_type": "mpnet"}', "model/sub/vocab.txt": b"a\nb\n" * 500}


def test_unpack_split_zip_joins_strips_the_top_folder_and_runs_once(tmp_path):
    parts = _split_zip(tmp_path, FILES)
    target = tmp_path / "cache" / "model"
    assert loading.unpack_split_zip(parts, target) == target
    assert (target / "config.json").read_bytes() == FILES["model/config.json"]
    assert (target / "sub" / "vocab.txt").read_bytes() == FILES["model/sub/vocab.txt"]
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["model"]  # no temporary folder left
    for part in parts:
        part.unlink()
    assert loading.unpack_split_zip(parts, target) == target  # already unpacked: parts not needed


def test_unpack_split_zip_errors_name_the_part(tmp_path):
    parts = _split_zip(tmp_path, FILES)
    target = tmp_path / "cache" / "model"
    with pytest.raises(BackboneLoadError, match=r"model\.zip\.004: archive part not found"):
        loading.unpack_split_zip(parts + [tmp_path / "model.zip.004"], target)
    with pytest.raises(BackboneLoadError, match="not a valid zip archive"):
        loading.unpack_split_zip([parts[1], parts[0], parts[2]], target)
    assert not target.exists() and list((tmp_path / "cache").iterdir()) == []
    evil = _split_zip(tmp_path, {"../evil.txt": b"x"}, n_parts=2, name="evil.zip")
    with pytest.raises(BackboneLoadError, match="outside"):
        loading.unpack_split_zip(evil, target)


def test_mpnet_name_resolves_to_the_unpacked_parts(tmp_path, monkeypatch):
    monkeypatch.setattr(loading, "BACKBONE_CACHE", tmp_path / "cache")
    monkeypatch.setattr(loading, "_MPNET_PARTS", ("turnformer-test-absent-part-001", "turnformer-test-absent-part-002"))
    with pytest.raises(BackboneLoadError, match="turnformer-test-absent-part-001, turnformer-test-absent-part-002.*make mpnet"):
        loading.resolve_backbone("sentence-transformers/all-mpnet-base-v2")

    parts = dict(zip(loading._MPNET_PARTS, _split_zip(tmp_path, FILES, n_parts=2)))
    monkeypatch.setattr(loading, "_split_part_file", parts.__getitem__)
    for name in ("all-mpnet-base-v2", "MPNet"):
        folder = loading.resolve_backbone(name)
        assert folder == tmp_path / "cache" / "all-mpnet-base-v2" and (folder / "config.json").is_file()


# --- DialogXL on MPNet ----------------------------------------------------------------------


def tiny_dialogxl(positions="conversation", heads=(1, 1, 1, 1), window=1, mem_len=1000, memory_bias=None) -> DialogXL:
    encoder = random_backbone(mpnet_config(), seed=0)
    torch.manual_seed(0)
    config = DialogXLConfig(
        num_labels=3, heads=heads, window=window, mem_len=mem_len, dropout=0.0, positions=positions, memory_bias=memory_bias
    )
    return DialogXL(config, encoder, CLS, SEP, PAD).eval()


def random_conversation(generator: torch.Generator, n_turns: int, n_speakers: int) -> EncodedConversation:
    turns = []
    for _ in range(n_turns):
        length = int(torch.randint(1, 6, (1,), generator=generator))
        turns.append([CLS] + torch.randint(5, VOCAB, (length,), generator=generator).tolist() + [SEP])
    speakers = torch.randint(0, n_speakers, (n_turns,), generator=generator).tolist()
    labels = torch.randint(0, 3, (n_turns,), generator=generator).tolist()
    return EncodedConversation(None, turns, speakers, labels)


def full_pass_cls_states(model: DialogXL, conv: EncodedConversation) -> torch.Tensor:
    """The same computation in one pass over the whole conversation (as in test_dialogxl), with
    running positions: a turn's closing </s> is not in memory, the next <s> takes its place."""
    ids, _, visible = one_pass_visibility(model, conv, (CLS, SEP))
    starts = torch.tensor([0] + [len(turn) - 1 for turn in conv.turn_ids[:-1]]).cumsum(0)
    positions = torch.cat([start + torch.arange(len(turn)) for start, turn in zip(starts, conv.turn_ids)]).unsqueeze(0)
    hidden = model.encoder(ids, position_ids=positions, attention_mask=visible).last_hidden_state[0]
    firsts = torch.tensor([0] + torch.tensor([len(t) for t in conv.turn_ids]).cumsum(0)[:-1].tolist())
    return hidden[firsts]


@pytest.mark.parametrize("heads, window", [((1, 1, 1, 1), 1), ((2, 0, 1, 1), 2)])
def test_dialogxl_recurrence_equals_one_pass(heads, window):
    """Memory keys get their running positions (key_position_ids), so the relative bias of every
    pair is the one-pass bias, although memory rows are padded differently per conversation."""
    g = torch.Generator().manual_seed(3)
    model = tiny_dialogxl(heads=heads, window=window)
    conversations = [random_conversation(g, n, 3) for n in (5, 2, 7)]
    stepwise = stepwise_cls_states(model, conversations, PAD)
    with torch.no_grad():
        for b, conv in enumerate(conversations):
            expected = full_pass_cls_states(model, conv)
            got = stepwise[b]
            torch.testing.assert_close(got, expected, rtol=0, atol=TOL)


def test_dialogxl_memory_bias_on_mpnet():
    """The learned memory bias adds to MPNet's relative-position bias: zero changes nothing, a very negative
    one shuts memory out (each utterance as if alone)."""
    g = torch.Generator().manual_seed(4)
    conversations = [random_conversation(g, n, 2) for n in (4, 6)]
    plain = stepwise_cls_states(tiny_dialogxl("utterance"), conversations, PAD)
    zero = stepwise_cls_states(tiny_dialogxl("utterance", memory_bias=0.0), conversations, PAD)
    closed = stepwise_cls_states(tiny_dialogxl("utterance", memory_bias=-1e4), conversations, PAD)
    alone = stepwise_cls_states(tiny_dialogxl("utterance", mem_len=0), conversations, PAD)
    for b in range(len(conversations)):
        torch.testing.assert_close(zero[b], plain[b], rtol=0, atol=TOL)
        torch.testing.assert_close(closed[b], alone[b], rtol=0, atol=TOL)
        assert not torch.allclose(plain[b][1:], alone[b][1:], atol=1e-3)


@pytest.mark.parametrize("positions", ["conversation", "utterance"])
def test_dialogxl_trains_on_mpnet(positions):
    model = tiny_dialogxl(positions).train()
    assert model.takes_key_positions and not model.takes_positions
    g = torch.Generator().manual_seed(1)
    batch = make_batch([random_conversation(g, 4, 2) for _ in range(3)], PAD)
    loss = model.loss(batch)
    loss.backward()
    assert torch.isfinite(loss)
    bias = model.encoder.encoder.relative_attention_bias.weight.grad
    assert bias is not None and bias.abs().sum() > 0
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_dialogxl_positions_stay_in_mpnets_range():
    model = tiny_dialogxl(mem_len=12)  # 128 usable positions (a table of 130 rows)
    order = torch.tensor([[5, 6, 7, 8], [200, 201, 202, 203]])
    positions = model.conversation_positions(order, torch.zeros_like(order, dtype=torch.bool))
    assert positions[0].tolist() == [5, 6, 7, 8]
    assert positions[1].tolist() == [124, 125, 126, 127]  # the last usable position is 127, not 129
    g = torch.Generator().manual_seed(0)
    batch = make_batch([random_conversation(g, 40, 2)], PAD)  # well past 128 running positions
    memory = model.empty_memory(1)
    with torch.no_grad():
        for t, ids in enumerate(batch.steps):
            _, memory, _ = model.step(ids, t, batch.speakers[:, t], memory)
    assert int(memory.meta.order.max()) > 128 and memory.length == 12
