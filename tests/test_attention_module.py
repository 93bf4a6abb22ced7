"""The models' metadata comes from the structure layer's one builder (`token_meta`): it equals, token by token,
what their former code (`_former_models`) built."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import _former_models as former
from turnformer.models.dialogxl import DialogXL, Memory, update_memory
from turnformer.models.dra import context_meta
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
