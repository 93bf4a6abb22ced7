"""The structure layer's metadata builder and `MultiHeadAttention`: the models built on them compute, initialise,
save and load what their former code (`_former_models`) did."""

from __future__ import annotations

import copy
import math
import pickle
from types import SimpleNamespace

import pytest
import torch

import _former_models as former
from turnformer.models.dialogxl import DialogXL, Memory, update_memory
from turnformer.models.dra import context_meta
from turnformer.structure import MultiHeadAttention, RelativeTerms
from turnformer.structure.attention import TORCH_MULTIHEAD_NAMES, keep_checkpoint_names
from turnformer.tasks.erc import EncodedConversation, make_batch
from turnformer.tasks.generation import Vocabulary, build_generator, encode_instances, make_generation_batches, make_instances

from test_phaed import DIALOGUES, SMALL


class ChainParser:
    """Stands in for spaCy: each word governed by the one before it."""

    def parse_many(self, texts):
        pass

    def __call__(self, words):
        return [i - 1 for i in range(len(words))]


@pytest.fixture(scope="module")
def vocab():
    return Vocabulary.build(DIALOGUES, min_count=1)


def assert_same_state(a: dict, b: dict, **tolerance) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        torch.testing.assert_close(a[name], b[name], msg=name, **(tolerance or {"atol": 0, "rtol": 0}))


def generation_batch(model, vocab):
    (batch,) = make_generation_batches(encode_instances(make_instances(DIALOGUES), vocab, model, parser=ChainParser()), 32,
                                       sort_by_length=False)
    return batch


# -- the metadata builders against their former code ----------------------------------------------------------


def test_dra_context_metadata_equals_its_former_builder(vocab):
    model = build_generator("transformer-dra", SMALL, vocab)
    batch = generation_batch(model, vocab)
    new, old = context_meta(batch), former.dra_context_meta(batch)
    real = new.is_real
    for name in new.__dataclass_fields__:
        assert torch.equal(getattr(new, name)[real], getattr(old, name)[real]), name


@pytest.mark.parametrize("mem_len, positions", [(0, "conversation"), (6, "conversation"), (400, "utterance")])
def test_dialogxl_metadata_equals_its_former_builders(mem_len, positions):
    """The one-pass and the recurrent metadata, token by token (padding aside: it is never seen)."""
    torch.manual_seed(0)
    conversations = [EncodedConversation(str(c), [[1, *torch.randint(3, 20, (int(n),)).tolist(), 2]
                                                  for n in torch.randint(0, 5, (int(turns),))],
                                         torch.randint(0, 3, (int(turns),)).tolist(), [0] * int(turns))
                     for c, turns in enumerate(torch.randint(1, 6, (3,)))]
    batch = make_batch(conversations, pad_id=0)
    model = SimpleNamespace(special_ids=(1, 2), pad_id=0, config=SimpleNamespace(mem_len=mem_len, positions=positions),
                            encoder=SimpleNamespace(max_positions=12))
    (new, new_ids), (old, old_ids) = DialogXL.conversation_meta(model, batch), former.dialogxl_conversation_meta(model, batch)
    real = new.is_real
    assert torch.equal(new_ids[real], old_ids[real])
    for name in new.__dataclass_fields__:
        assert torch.equal(getattr(new, name)[real], getattr(old, name)[real]), name
    memory = Memory.empty(len(conversations), 1, 1)
    for t, ids in enumerate(batch.steps):
        new = DialogXL.current_meta(model, ids, t, batch.speakers[:, t], memory)
        old = former.dialogxl_current_meta(model, ids, t, batch.speakers[:, t], memory)
        for name in new.__dataclass_fields__:
            assert torch.equal(getattr(new, name)[new.is_real], getattr(old, name)[new.is_real]), (t, name)
        memory = update_memory(memory, [torch.zeros(*ids.shape, 1)], new, mem_len)


# -- the module -------------------------------------------------------------------------------------------------


def test_the_module_is_masked_attention_between_its_projections():
    torch.manual_seed(0)
    attention = MultiHeadAttention(8, 2)
    x, keys = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    mask = torch.rand(2, 3, 5) > 0.3
    mask[0, 0] = False  # sees nothing: zero before the output projection
    bias = torch.randn(2, 2, 3, 5)
    out, probs = attention(x, keys, mask, bias, return_probs=True)
    w, b = attention.qkv.weight, attention.qkv.bias
    split = lambda t: t.unflatten(-1, (2, 4)).transpose(1, 2)  # noqa: E731
    q, k, v = split(x @ w[:8].T + b[:8]), split(keys @ w[8:16].T + b[8:16]), split(keys @ w[16:].T + b[16:])
    scores = (q @ k.transpose(-1, -2) / 2.0 + bias).masked_fill(~mask[:, None], float("-inf"))
    manual = scores.softmax(-1).nan_to_num(0.0)
    torch.testing.assert_close(probs, manual)
    torch.testing.assert_close(out, attention.out((manual @ v).transpose(1, 2).flatten(2)))
    torch.testing.assert_close(out[0, 0], attention.out.bias)
    self_out, _ = attention(x, mask=mask[..., :3])  # keys None: self-attention, one product for q, k and v
    torch.testing.assert_close(self_out, attention(x, x, mask[..., :3])[0])


def test_relative_terms_add_their_vectors_to_keys_and_values():
    torch.manual_seed(0)
    attention = MultiHeadAttention(8, 2)
    x = torch.randn(2, 4, 8)
    bucket = torch.randint(0, 3, (2, 4, 4))
    terms = RelativeTerms(bucket, torch.randn(3, 8), torch.randn(3, 8))
    mask = torch.rand(2, 4, 4) > 0.3
    out, _ = attention(x, mask=mask, relative=terms)
    q, k, v = (t.unflatten(-1, (2, 4)).transpose(1, 2) for t in attention.project(x))
    bk = terms.key.unflatten(-1, (2, 4))[bucket].permute(0, 3, 1, 2, 4)  # [B, H, Q, K, D]
    bv = terms.value.unflatten(-1, (2, 4))[bucket].permute(0, 3, 1, 2, 4)
    scores = (q.unsqueeze(-2) * (k.unsqueeze(2) + bk)).sum(-1) / math.sqrt(4)
    probs = scores.masked_fill(~mask[:, None], float("-inf")).softmax(-1).nan_to_num(0.0)
    manual = (probs.unsqueeze(-1) * (v.unsqueeze(2) + bv)).sum(-2)
    torch.testing.assert_close(out, attention.out(manual.transpose(1, 2).flatten(2)))
    with pytest.raises(ValueError, match="dropout"):
        MultiHeadAttention(8, 2, dropout=0.1).train()(x, mask=mask, relative=terms)


def test_checkpoints_keep_their_names_copy_and_pickle():
    attention = MultiHeadAttention(8, 2)
    keep_checkpoint_names(attention, TORCH_MULTIHEAD_NAMES)
    state = attention.state_dict()
    assert sorted(state) == ["in_proj_bias", "in_proj_weight", "out_proj.bias", "out_proj.weight"]
    other = MultiHeadAttention(8, 2)
    keep_checkpoint_names(other, TORCH_MULTIHEAD_NAMES)
    other.load_state_dict(state)  # the old names
    assert torch.equal(other.qkv.weight, attention.qkv.weight)
    other.load_state_dict({f"{name}.{p}": t for name, m in (("qkv", attention.qkv), ("out", attention.out))
                           for p, t in m.state_dict().items()})  # the current ones
    for clone in (copy.deepcopy(attention), pickle.loads(pickle.dumps(attention))):
        assert_same_state(clone.state_dict(), state)
