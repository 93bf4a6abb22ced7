"""The project's XLNet encoder: parity with transformers' XLNetModel (with and without mems),
per-pair relative positions, per-head masks, loading, and DialogXL on it (recurrence = one pass)."""

from __future__ import annotations

import json
import os

import pytest
import torch
from _encoder_checks import assert_per_head_masks_honoured, one_pass_visibility
from safetensors.torch import save_file

from turnformer.backbones import (
    BackboneLoadError,
    UnsupportedBackboneError,
    XLNetStructuredEncoder,
    load_backbone,
    load_weights,
    random_backbone,
    tiny_config,
)
from turnformer.models.dialogxl import DialogXL, DialogXLConfig
from turnformer.tasks.erc import EncodedConversation, make_batch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach the Hub

TOL = 1e-5
VOCAB = 60
# Special ids for the tests, in XLNet's layout: words <sep> <cls>.
PAD, CLS, SEP = 0, 1, 2


def xlnet_config(clamp_len: int = -1, initializer_range: float = 0.02):
    config = tiny_config(vocab_size=VOCAB, hidden=32, layers=2, heads=4, model_type="xlnet")
    config.clamp_len = clamp_len
    config.initializer_range = initializer_range
    return config


# Weights drawn 15x larger than XLNet's 0.02: the position term then moves outputs by ~1, so a
# wrong distance cannot hide under the 1e-5 tolerance.
STRONG = 0.3


@pytest.fixture
def tiny() -> XLNetStructuredEncoder:
    return random_backbone(xlnet_config(initializer_range=STRONG), seed=0)


def _ids(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, length), generator=g)


def reference_pair(clamp_len: int = -1):
    """transformers' XLNetModel and ours with the same random weights."""
    from transformers import XLNetModel

    config = xlnet_config(clamp_len)
    torch.manual_seed(0)
    reference = XLNetModel(config).eval()
    ours = XLNetStructuredEncoder(config).eval()
    load_weights(ours, reference.state_dict())
    return reference, ours


# --- parity with transformers ---------------------------------------------------------------


@pytest.mark.parametrize(
    "segments, output_attentions, clamp_len",
    [(False, False, -1), (True, True, -1), (True, False, 3), (False, True, 3)],
    ids=["sdpa", "segments-explicit", "segments-clamped", "explicit-clamped"],
)
def test_parity_with_xlnet_model(segments, output_attentions, clamp_len):
    reference, ours = reference_pair(clamp_len)
    ids = _ids(3, 9)
    real = torch.ones(3, 9, dtype=torch.bool)
    real[1, 6:] = False
    real[2, 3:] = False
    ids[~real] = PAD
    types = None
    if segments:
        types = torch.zeros_like(ids)
        types[:, 4:] = 1
    with torch.no_grad():
        theirs = reference(input_ids=ids, token_type_ids=types, attention_mask=real.float()).last_hidden_state
        mine = ours(ids, token_type_ids=types, attention_mask=real, output_attentions=output_attentions)
    assert (mine.last_hidden_state - theirs).abs()[real].max() < TOL
    if output_attentions:
        assert [a.shape for a in mine.attentions] == [(3, 4, 9, 9)] * 2


def test_parity_with_xlnet_model_mems_of_a_previous_segment():
    reference, ours = reference_pair()
    first, second = _ids(2, 7, seed=1), _ids(2, 5, seed=2)
    real = torch.ones(2, 5, dtype=torch.bool)
    real[1, 3:] = False
    second[~real] = PAD
    with torch.no_grad():
        previous = reference(input_ids=first, use_mems=True)
        theirs = reference(input_ids=second, mems=previous.mems, use_mems=True, attention_mask=real.float())
        mine_first = ours(first, output_hidden_states=True)
        memory = mine_first.hidden_states[:-1]  # the states that entered each layer = XLNet's mems
        mine = ours(second, memory=memory, attention_mask=real)
    for ours_mem, their_mem in zip(memory, previous.mems):  # theirs are [M, B, d]
        assert (ours_mem - their_mem.transpose(0, 1)).abs().max() < TOL
    assert (mine.last_hidden_state - theirs.last_hidden_state).abs()[real].max() < TOL


# --- relative positions ---------------------------------------------------------------------


def test_positions_of_the_standard_layout_and_shifted_ones_change_nothing(tiny):
    memory_length, length = 6, 4
    memory = [torch.randn(2, memory_length, 32, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    ids = _ids(2, length)
    keys = torch.arange(memory_length + length).expand(2, -1)
    queries = keys[:, memory_length:]
    shift = torch.tensor([[0], [37]])  # a different running position per row: only differences matter
    with torch.no_grad():
        standard = tiny(ids, memory=memory).last_hidden_state
        explicit = tiny(ids, memory=memory, query_positions=queries, key_positions=keys).last_hidden_state
        shifted = tiny(ids, memory=memory, query_positions=queries + shift, key_positions=keys + shift).last_hidden_state
        reversed_keys = tiny(ids, memory=memory, query_positions=queries, key_positions=keys.flip(1)).last_hidden_state
    torch.testing.assert_close(explicit, standard, rtol=0, atol=TOL)
    torch.testing.assert_close(shifted, standard, rtol=0, atol=TOL)
    assert (reversed_keys - standard).abs().max() > 0.1  # positions are used


def test_per_row_positions_equal_each_row_alone_with_its_own_memory(tiny):
    """DialogXL's case: memory rows of different lengths, padded at the end of the row. Per-pair
    distances make each row equal to that row encoded alone with its unpadded memory."""
    lengths, length = [5, 3], 4
    g = torch.Generator().manual_seed(4)
    memory = [torch.randn(2, 5, 32, generator=g) for _ in range(2)]
    memory_mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    ids = _ids(2, length)
    key_positions = torch.stack([torch.cat([torch.arange(5), n + torch.arange(length)]) for n in lengths])
    key_positions[1, 3:5] = 0  # padding slots: any ordinary value
    query_positions = key_positions[:, 5:]
    with torch.no_grad():
        batched = tiny(ids, memory=memory, memory_mask=memory_mask,
                       query_positions=query_positions, key_positions=key_positions).last_hidden_state
        for b, n in enumerate(lengths):
            alone = tiny(ids[b : b + 1], memory=[m[b : b + 1, :n] for m in memory]).last_hidden_state
            torch.testing.assert_close(batched[b : b + 1], alone, rtol=0, atol=TOL)


def test_positions_are_checked(tiny):
    ids = _ids(1, 3)
    with pytest.raises(ValueError, match="both query_positions and key_positions"):
        tiny(ids, query_positions=torch.arange(3)[None])
    with pytest.raises(ValueError, match=r"key_positions must be integer \[batch, 3\]"):
        tiny(ids, query_positions=torch.arange(3)[None], key_positions=torch.arange(4)[None])
    with pytest.raises(ValueError, match="need 1 rows"):
        tiny(ids, query_positions=torch.arange(3).expand(2, 3), key_positions=torch.arange(3).expand(2, 3))


# --- per-head masks -------------------------------------------------------------------------


def test_per_head_masks_are_honoured(tiny):
    memory_length, length, hidden_key = 4, 3, 1
    g = torch.Generator().manual_seed(5)
    memory = [torch.randn(2, memory_length, 32, generator=g) for _ in range(2)]
    changed = [m.clone() for m in memory]
    for m in changed:
        m[:, hidden_key] = 10 * torch.randn(2, 32, generator=g)  # that key's state, arbitrarily changed
    ids = _ids(2, length)
    assert_per_head_masks_honoured(tiny, ids, memory, changed, hidden_key)


# --- loading --------------------------------------------------------------------------------


def _write_folder(folder, config, state=None):
    folder.mkdir(parents=True, exist_ok=True)
    config.to_json_file(str(folder / "config.json"))
    if state is not None:
        save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    return folder


def test_lm_head_checkpoint_loads_by_model_type(tmp_path, tiny):
    # XLNetLMHeadModel's layout: the encoder under `transformer.`, plus its LM head.
    state = {f"transformer.{k}": v for k, v in tiny.state_dict().items()}
    state["lm_loss.bias"] = torch.zeros(VOCAB)
    folder = _write_folder(tmp_path / "xlnet", tiny.config, state)
    model, tokenizer = load_backbone(str(folder), with_tokenizer=False)
    assert isinstance(model, XLNetStructuredEncoder) and tokenizer is None and not model.training
    assert model.config.num_attention_heads == 4 and model.config.hidden_size == 32
    ids = _ids(2, 5)
    with torch.no_grad():
        torch.testing.assert_close(model(ids).last_hidden_state, tiny(ids).last_hidden_state, rtol=0, atol=0)


def test_mismatched_xlnet_weights_and_unsupported_configs_are_clear_errors(tmp_path, tiny):
    state = {k: v for k, v in tiny.state_dict().items() if not k.startswith("layer.1.")}
    state["layer.7.extra"] = torch.zeros(1)
    folder = _write_folder(tmp_path / "partial", tiny.config, state)
    with pytest.raises(BackboneLoadError, match=r"XLNet encoder; missing \d+ keys: layer\.1\..*unexpected 1 keys"):
        load_backbone(str(folder), with_tokenizer=False)
    for key, value in (("attn_type", "uni"), ("bi_data", True)):
        other = tmp_path / key
        other.mkdir()
        (other / "config.json").write_text(json.dumps({**tiny.config.to_dict(), key: value}))
        with pytest.raises(UnsupportedBackboneError, match=key):
            load_backbone(str(other), with_tokenizer=False)


def test_backbone_check_and_tokenizer_on_a_tiny_xlnet_folder(tmp_path):
    """The whole path a user with internet takes for xlnet-base-cased, on a tiny folder: the fast
    XLNet tokenizer (no sentencepiece needed), loading by model_type, and `check_backbone` against
    transformers' XLNetModel (left padding, <sep> <cls> at the end)."""
    from transformers import XLNetModel, XLNetTokenizer

    from turnformer.backbones import check_backbone

    specials = ["<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>"]
    pieces = ["\u2581hey", "\u2581you", "\u2581coming", "\u2581yes", "!", "?", ",", "."] + list("abcdefghijklmnopqrstuvwxyz\u2581")
    tokenizer = XLNetTokenizer(vocab=[(t, 0.0) for t in specials] + [(p, -1.0 - i) for i, p in enumerate(pieces)])
    config = tiny_config(vocab_size=len(specials) + len(pieces), model_type="xlnet")
    config.pad_token_id = tokenizer.pad_token_id
    torch.manual_seed(0)
    XLNetModel(config).save_pretrained(str(tmp_path))
    tokenizer.save_pretrained(str(tmp_path))

    model, loaded = load_backbone(str(tmp_path))
    assert isinstance(model, XLNetStructuredEncoder)
    assert loaded("hey you?")["input_ids"][-2:] == [loaded.sep_token_id, loaded.cls_token_id]
    result = check_backbone(str(tmp_path), ["hey, you coming?", "yes!"])
    assert result["ok"] and result["max_abs_diff"] < TOL


# --- DialogXL on XLNet ------------------------------------------------------------------------


def tiny_dialogxl(mem_len: int = 1000) -> DialogXL:
    encoder = random_backbone(xlnet_config(initializer_range=STRONG), seed=0)
    torch.manual_seed(0)
    config = DialogXLConfig(num_labels=3, heads=(1, 1, 1, 1), window=1, mem_len=mem_len, dropout=0.0)
    return DialogXL(config, encoder, CLS, SEP, PAD).eval()


def xlnet_conversation(g: torch.Generator, n_turns: int) -> EncodedConversation:
    """Utterances as XLNet's tokenizer lays them out: words <sep> <cls>."""
    turns = [torch.randint(3, VOCAB, (int(torch.randint(1, 6, (1,), generator=g)),), generator=g).tolist() + [SEP, CLS]
             for _ in range(n_turns)]
    speakers = torch.randint(0, 2, (n_turns,), generator=g).tolist()
    labels = torch.randint(0, 3, (n_turns,), generator=g).tolist()
    return EncodedConversation(None, turns, speakers, labels)


def full_pass_cls_states(model: DialogXL, conv: EncodedConversation) -> torch.Tensor:
    """One pass over the whole conversation: each utterance sees its own tokens and the words of
    earlier ones under the head masks; a token's position counts the earlier utterances' words
    (their special tokens are never stored) plus its place in its own utterance."""
    ids, _, visible = one_pass_visibility(model, conv, (CLS, SEP))
    words_before, positions = 0, []
    for turn in conv.turn_ids:
        positions += [words_before + i for i in range(len(turn))]
        words_before += sum(tok not in (CLS, SEP) for tok in turn)
    positions = torch.tensor([positions])
    hidden = model.encoder(ids, attention_mask=visible, query_positions=positions, key_positions=positions)
    ends = torch.tensor([len(t) for t in conv.turn_ids]).cumsum(0) - 1  # <cls> closes each utterance
    return hidden.last_hidden_state[0, ends]


def test_dialogxl_recurrence_on_xlnet_equals_one_pass():
    g = torch.Generator().manual_seed(3)
    model = tiny_dialogxl()
    assert model.takes_positions
    conversations = [xlnet_conversation(g, n) for n in (3, 2, 3)]
    batch = make_batch(conversations, PAD)
    memory = model.empty_memory(len(conversations))
    stepwise = []
    with torch.no_grad():
        for t, ids in enumerate(batch.steps):
            cls, memory, _ = model.step(ids, t, batch.speakers[:, t], memory)
            stepwise.append(cls)
        assert memory.waste_rate() > 0  # rows differ: the case per-pair positions exist for
        for b, conv in enumerate(conversations):
            got = torch.stack([stepwise[t][b] for t in range(len(conv.turn_ids))])
            torch.testing.assert_close(got, full_pass_cls_states(model, conv), rtol=0, atol=TOL)


def test_dialogxl_on_xlnet_trains_through_memory():
    g = torch.Generator().manual_seed(1)
    model = tiny_dialogxl(mem_len=6).train()
    batch = make_batch([xlnet_conversation(g, 3), xlnet_conversation(g, 2)], PAD)
    loss = model.loss(batch)
    loss.backward()
    assert torch.isfinite(loss)
    grads = {name: p.grad for name, p in model.named_parameters()}
    # Unused here: the query stream's mask_emb, and the segment term (DialogXL gives no segments).
    unused = {name for name, grad in grads.items() if grad is None}
    assert {name.rsplit(".", 1)[-1] for name in unused} == {"mask_emb", "seg_embed", "r_s_bias"}
    assert all(torch.isfinite(grad).all() for grad in grads.values() if grad is not None)
    for name in ("encoder.layer.0.rel_attn.r_r_bias", "encoder.layer.0.rel_attn.r_w_bias", "encoder.layer.1.ff.layer_1.weight"):
        assert grads[name].abs().sum() > 0, name


def test_dialogxl_memory_bias_is_refused_on_xlnet(tiny):
    """XLNet was pretrained with memory; its encoder takes no extra attention bias, and DialogXL says so."""
    config = DialogXLConfig(num_labels=3, heads=(1, 1, 1, 1), mem_len=10, memory_bias=-4.0)
    with pytest.raises(ValueError, match="memory_bias needs an encoder that takes attention_bias; XLNetStructuredEncoder"):
        DialogXL(config, tiny, CLS, SEP, PAD)
