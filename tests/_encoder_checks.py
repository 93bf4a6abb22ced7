"""Checks every memory-taking encoder must pass, shared by the tests of each architecture."""

from __future__ import annotations

import torch


def assert_per_head_masks_honoured(encoder, ids: torch.Tensor, memory: list[torch.Tensor], changed: list[torch.Tensor],
                                   hidden_key: int) -> None:
    """``changed`` is ``memory`` with memory key ``hidden_key`` arbitrarily altered (batch 2, 4 heads).

    Head 0 alone hides the key: its attention in layer 0 (queries unchanged there) ignores the key's
    state and gives it probability exactly 0; head 1, which sees it, changes. When every head hides it
    (and the heads differ elsewhere) the outputs ignore it entirely."""
    length, memory_length = ids.shape[1], memory[0].shape[1]
    one_head = torch.ones(2, 4, length, memory_length + length, dtype=torch.bool)
    one_head[:, 0, :, hidden_key] = False
    with torch.no_grad():
        before = encoder(ids, memory=memory, attention_mask=one_head, output_attentions=True).attentions[0]
        after = encoder(ids, memory=changed, attention_mask=one_head, output_attentions=True).attentions[0]
    assert bool((before[:, 0, :, hidden_key] == 0).all()) and bool((before[:, 1:, :, hidden_key] > 0).all())
    torch.testing.assert_close(after[:, 0], before[:, 0], rtol=0, atol=1e-6)
    assert (after[:, 1] - before[:, 1]).abs().max() > 1e-3

    all_heads = torch.ones_like(one_head)
    all_heads[:, :, :, hidden_key] = False
    all_heads[:, 2, :, 0] = False
    with torch.no_grad():
        out = encoder(ids, memory=memory, attention_mask=all_heads).last_hidden_state
        out_changed = encoder(ids, memory=changed, attention_mask=all_heads).last_hidden_state
        out_open = encoder(ids, memory=changed, attention_mask=one_head).last_hidden_state
    torch.testing.assert_close(out_changed, out, rtol=0, atol=1e-6)
    assert (out_open - out).abs().max() > 1e-3


def one_pass_visibility(model, conv, specials: tuple[int, ...]):
    """DialogXL's computation as one pass over a whole conversation: (ids [1, T], meta, visible
    [1, H, T, T]), each utterance seeing its own tokens and the non-special tokens of earlier ones
    under the model's head masks. Positions are left to each architecture's test."""
    from turnformer.structure import SAME_UTTERANCE, TokenMeta

    ids = torch.tensor([[tok for turn in conv.turn_ids for tok in turn]])
    utt = [[t for t, turn in enumerate(conv.turn_ids) for _ in turn]]
    spk = [[conv.speakers[t] for t, turn in enumerate(conv.turn_ids) for _ in turn]]
    special = [[tok in specials for turn in conv.turn_ids for tok in turn]]
    meta = TokenMeta.from_lists(utt, spk, is_special=special)
    past_words = (meta.utterance.unsqueeze(-1) > meta.utterance.unsqueeze(-2)) & ~meta.is_special.unsqueeze(-2)
    visible = model.layout.build(meta, meta) & (past_words | SAME_UTTERANCE(meta, meta)).unsqueeze(1)
    return ids, meta, visible


def stepwise_cls_states(model, conversations, pad: int) -> list[torch.Tensor]:
    """DialogXL's recurrence, utterance by utterance over a batch: per conversation, [turns, hidden]."""
    from turnformer.tasks.erc import make_batch

    batch = make_batch(conversations, pad)
    memory = model.empty_memory(len(conversations))
    steps = []
    with torch.no_grad():
        for t, ids in enumerate(batch.steps):
            cls, memory, _ = model.step(ids, t, batch.speakers[:, t], memory)
            steps.append(cls)
    return [torch.stack([steps[t][b] for t in range(len(conv.turn_ids))]) for b, conv in enumerate(conversations)]
