"""Every model's attention is the structure layer's `MultiHeadAttention`, under structure-layer masks: the
models compute, initialise, save and load what their former code (`_former_models`) did, and no model file
builds a mask or an attention by hand."""

from __future__ import annotations

import copy
import io
import math
import pickle
import re
import tokenize
from itertools import accumulate
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import _former_models as former
from turnformer.models.dialogxl import DialogXL, Memory, update_memory
from turnformer.models.dra import MaskedEncoderLayer, context_meta
from turnformer.models.lc_attention import LCConfig, LocalContextAttention
from turnformer.models.mdfn import MaskedAttentionBlock
from turnformer.structure import GLOBAL, SAME_UTTERANCE, SPEAKER, MultiHeadAttention, RelativeTerms, TokenMeta
from turnformer.structure.attention import TORCH_MULTIHEAD_NAMES, keep_checkpoint_names
from turnformer.tasks.erc import EncodedConversation, make_batch
from turnformer.tasks.generation import Vocabulary, build_generator, encode_instances, make_generation_batches, make_instances

from test_phaed import DIALOGUES, SMALL

MODELS = Path(__file__).resolve().parents[1] / "src" / "turnformer" / "models"
CLOSE = {"atol": 1e-6, "rtol": 1e-5}  # outputs and gradients of the same computation, in another order


class ChainParser:
    """Stands in for spaCy: each word governed by the one before it."""

    def parse_many(self, texts):
        pass

    def __call__(self, words):
        return [i - 1 for i in range(len(words))]


@pytest.fixture(scope="module")
def vocab():
    return Vocabulary.build(DIALOGUES, min_count=1)


def seeded(build, seed=0):
    torch.manual_seed(seed)
    return build()


def grad_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The gradients under the module's state-dict names (old and new models compare name by name)."""
    values = {p: p.data for p in module.parameters()}
    for p in module.parameters():
        p.data = p.grad if p.grad is not None else torch.zeros_like(p)
    state = {name: value.clone() for name, value in module.state_dict().items()}
    for p, value in values.items():
        p.data = value
    return state


def assert_same_state(a: dict, b: dict, **tolerance) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        torch.testing.assert_close(a[name], b[name], msg=name, **(tolerance or {"atol": 0, "rtol": 0}))


def perturbed(module: torch.nn.Module) -> torch.nn.Module:
    """Weights away from their initialisation (zero biases would hide a bias loaded in the wrong place)."""
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return module


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


# -- the models against their former code -----------------------------------------------------------------------


def test_mdfn_channels_equal_their_former_code():
    block = seeded(lambda: MaskedAttentionBlock(16, 4, 0.0))
    old = seeded(lambda: former.MDFNBlock(16, 4, 0.0))
    assert_same_state(block.state_dict(), old.state_dict())  # same names, same initial weights
    block.load_state_dict(perturbed(old).state_dict())
    meta = TokenMeta.from_lists([[0, 0, 1, 1, 1, 2], [0, 1, 1]], [[0, 0, 1, 1, 1, 0], [1, 0, 0]])
    x = torch.randn(2, 6, 16)
    for mask in (SAME_UTTERANCE & ~SPEAKER, SPEAKER, GLOBAL):
        visible = mask(meta, meta)
        real = meta.is_real
        new_out, old_out = block(x, visible), old(x, visible)
        torch.testing.assert_close(new_out[real], old_out[real], **CLOSE)
        for model, out in ((block, new_out), (old, old_out)):
            model.zero_grad()
            out[real].square().sum().backward()
        assert_same_state(grad_state(block), grad_state(old), **CLOSE)


def test_dra_layers_equal_their_former_code():
    layer = seeded(lambda: MaskedEncoderLayer(16, 2, 32, 0.0))
    old = seeded(lambda: former.DRALayer(16, 2, 32, 0.0))
    assert_same_state(layer.state_dict(), old.state_dict())
    layer.load_state_dict(perturbed(old).state_dict())
    x, mask = torch.randn(3, 7, 16), torch.rand(3, 7, 7) > 0.4
    (new_out, new_probs), (old_out, old_probs) = layer(x, mask, True), old(x, mask, True)
    torch.testing.assert_close(new_out, old_out, **CLOSE)
    torch.testing.assert_close(new_probs, old_probs, **CLOSE)
    for model, out in ((layer, new_out), (old, old_out)):
        out.square().sum().backward()
    assert_same_state(grad_state(layer), grad_state(old), **CLOSE)


@pytest.mark.parametrize("gaussian", [True, False])
def test_lc_attention_equals_its_former_code(gaussian):
    config = LCConfig(num_labels=3, hidden=16, heads=2, max_positions=8)
    attention = seeded(lambda: LocalContextAttention(config, gaussian))
    old = seeded(lambda: former.LCAttention(16, 2, 8, gaussian))
    assert_same_state(attention.state_dict(), old.state_dict())
    attention.load_state_dict(perturbed(old).state_dict())
    x = torch.randn(2, 6, 16)
    real = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])  # empty slots after a short sub-dialogue
    (new_out, new_probs), (old_out, old_probs) = attention(x, real, True), old(x, real, True)
    torch.testing.assert_close(new_out[real], old_out[real], **CLOSE)  # an empty slot now attends to nothing
    torch.testing.assert_close(new_probs.transpose(1, 2)[real], old_probs.transpose(1, 2)[real], **CLOSE)
    positions = torch.tensor([[5], [3]])
    torch.testing.assert_close(attention(x, real, query_positions=positions)[0], old(x, real, query_positions=positions)[0],
                               **CLOSE)
    for model, out in ((attention, new_out), (old, old_out)):
        out[real].square().sum().backward()
    assert_same_state(grad_state(attention), grad_state(old), **CLOSE)


FORMER_GENERATORS = {
    "transformer": former.TransformerGenerator,
    "gpt2-scratch": former.GPT2Generator,
    "transformer-dra": former.TransformerDRA,
    "dialogbert": former.DialogBERT,
    "dialogbert-dra": former.DialogBERT,
    "phaed": former.PHAED,
    "phaed-no-turn-attn": former.PHAED,
    "phaed-no-recurrence": former.PHAED,
}


def assert_generate_the_same(model, old, batch) -> None:
    """The same logits on every real response token, the same loss gradients and the same greedy responses."""
    real = batch.response_in.ne(model.pad_id)
    torch.testing.assert_close(model(batch)[real], old(batch)[real], **CLOSE)
    for m in (model, old):
        m.zero_grad()
        m.loss(batch).backward()
    assert_same_state(grad_state(model), grad_state(old), **CLOSE)
    assert model.generate(batch) == old.generate(batch)


@pytest.mark.parametrize("model_id", list(FORMER_GENERATORS))
def test_generators_equal_their_former_code(vocab, model_id):
    """Same seed, same weights under the same names; an old state dict loads and gives the same logits on every real
    response token, the same loss gradients and the same greedy responses."""
    settings = {**SMALL, "max_response_words": 4}
    model = seeded(lambda: build_generator(model_id, settings, vocab)).eval()
    config, pad, eou = model.config, model.pad_id, model.eou_id
    old = seeded(lambda: FORMER_GENERATORS[model_id](config, pad, eou)).eval()
    assert_same_state(model.state_dict(), old.state_dict())
    model.load_state_dict(perturbed(old).state_dict())
    batch = generation_batch(model, vocab)
    assert_generate_the_same(model, old, batch)
    if model_id == "transformer":
        rows = ~batch.context.eq(pad)
        for new, former_probs in zip(model.encoder_attention(batch), old.encoder_attention(batch)):
            torch.testing.assert_close(new.transpose(1, 2)[rows], former_probs.transpose(1, 2)[rows], **CLOSE)


@pytest.mark.parametrize("model_id", ["dialogbert", "dialogbert-dra"])
def test_dialogbert_encoding_the_utterances_packed_into_rows_equals_the_flat_context(vocab, model_id):
    """DialogBERT's utterance encoder runs over the utterances packed into rows of their own (memory and time grow with
    the utterances, not with the square of the context), where its former code ran over the flat context under a
    same-utterance mask: with the token memory too (the decoder reads every token's state), the same logits,
    gradients and greedy responses."""
    from turnformer.models.dialogbert import utterance_rows

    settings = {**SMALL, "max_response_words": 4, "token_memory": True}
    model = seeded(lambda: build_generator(model_id, settings, vocab)).eval()
    old = seeded(lambda: former.DialogBERT(model.config, model.pad_id, model.eou_id)).eval()
    model.load_state_dict(perturbed(old).state_dict())
    batch = generation_batch(model, vocab)
    rows = utterance_rows(batch, model.pad_id)
    assert rows.batch.context.shape[1] < batch.context.shape[1]  # rows as long as the longest utterance
    utterances = int(sum(len(set(t for t, i in zip(turns, ids) if i != model.pad_id))
                         for turns, ids in zip(batch.context_turn.tolist(), batch.context.tolist())))
    assert len(rows.batch.context) < utterances  # packed: short utterances share a row
    assert rows.batch.context.ne(model.pad_id).sum() == batch.context.ne(model.pad_id).sum()  # every token once
    assert_generate_the_same(model, old, batch)


def test_best_fit_packs_lengths_into_rows_without_overlap():
    """Each length lies inside its row at its offset, no two overlap, places number a row's lengths 0, 1, ... in the
    order they were placed, and best-fit decreasing needs no more rows than the lengths' sum over the width, rounded
    up, here."""
    from turnformer.models.dialogbert import best_fit

    lengths = [5, 9, 2, 7, 3, 3, 1, 9, 4]
    row, offset, place = best_fit(lengths, 9)
    assert max(row) + 1 == -(-sum(lengths) // 9) == 5
    for r in set(row):
        spans = sorted((offset[i], offset[i] + lengths[i], place[i]) for i in range(len(lengths)) if row[i] == r)
        assert spans[-1][1] <= 9 and all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
        assert [p for *_, p in spans] == list(range(len(spans)))
    assert best_fit([], 0) == ([], [], [])


@pytest.mark.parametrize("c_max", [1, 3])
def test_phaed_computing_only_the_tokens_it_reads_equals_its_former_code(vocab, c_max):
    """PHAED's encoder computes the queries' tokens alone and its memory's pass the remembered responses' alone
    (`kept_columns`; the FFNs not even the padding this leaves where rows keep different numbers), where its former code
    computed every context token: with fewer (c_max = 1: the newer of two earlier responses) and more responses
    remembered than a context holds, the same logits, gradients, greedy and beam responses."""
    model = seeded(lambda: build_generator("phaed", {**SMALL, "max_response_words": 4, "c_max": c_max}, vocab)).eval()
    old = seeded(lambda: former.PHAED(model.config, model.pad_id, model.eou_id)).eval()
    model.load_state_dict(perturbed(old).state_dict())
    batch = generation_batch(model, vocab)
    real = batch.response_in.ne(model.pad_id)
    widths = {}  # the tokens each stack's first call computes: the encoder's, then the memory's pass

    def first_width(name):
        def hook(module, args):
            widths.setdefault(name, args[0].shape[1])
        return hook

    def first_rows(name):  # the FFN's tokens: those of the width that are real, every row's laid end to end
        def hook(module, args):
            widths.setdefault(name, args[0].shape[0])
        return hook

    for name in ("inner", "decoder"):
        getattr(model, name)[0].register_forward_pre_hook(first_width(name))
        getattr(model, name)[0].ff.register_forward_pre_hook(first_rows(f"{name} ffn"))
    torch.testing.assert_close(model(batch)[real], old(batch)[real], **CLOSE)
    role, turn = batch.context_role.tolist(), batch.context_turn.tolist()
    newest = [sorted({t for t, r in zip(turns, roles) if r == 2})[:c_max] for turns, roles in zip(turn, role)]  # 1 = newest
    remembered = [sum(r == 2 and t in kept for t, r in zip(*row)) for row, kept in zip(zip(turn, role), newest)]
    assert widths == {"inner": max(roles.count(1) for roles in role), "decoder": max(remembered),
                      "inner ffn": sum(roles.count(1) for roles in role), "decoder ffn": sum(remembered)}
    assert widths["inner ffn"] < len(role) * widths["inner"]  # the batch's rows hold queries of different lengths
    assert (max(remembered) < max(roles.count(2) for roles in role)) == (c_max == 1)  # c_max = 1 leaves an older one out
    for m in (model, old):
        m.zero_grad()
        m.loss(batch).backward()
    assert_same_state(grad_state(model), grad_state(old), **CLOSE)
    assert model.generate(batch) == old.generate(batch)
    assert model.beam_search(batch, 3, 4) == old.beam_search(batch, 3, 4)


# -- no model builds a mask or an attention of its own -----------------------------------------------------------

FORBIDDEN = {
    r"\b(tril|triu)\b": "a triangular mask: use CAUSAL",
    r"\bnn\.(Transformer|TransformerEncoder|TransformerDecoder|TransformerEncoderLayer|TransformerDecoderLayer|"
    r"MultiheadAttention)\b": "PyTorch's attention bypasses masked_attention: use MultiHeadAttention",
    r"\b(scaled_dot_product_attention|multi_head_attention_forward)\b": "attention by hand: use MultiHeadAttention",
    r"\bmasked_attention\b": "attention by hand: use MultiHeadAttention",
    r"@\s*[\w.\[\]()]+\.(transpose\(\s*-[12]\s*,\s*-[12]\s*\)|mT\b)": "attention scores by hand: use MultiHeadAttention",
    r"\.masked_fill\(\s*~\s*\w*mask": "a mask applied by hand: pass it to MultiHeadAttention",
}


def code_without_strings_or_comments(path: Path) -> str:
    """The file with its comments, strings and docstrings blanked out (they may name what the code must not use)."""
    source = path.read_text(encoding="utf-8")
    line_starts = [0, *accumulate(len(line) for line in source.splitlines(keepends=True))]
    text = list(source)
    prose = {tokenize.COMMENT, tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in prose:
            start, end = (line_starts[row - 1] + column for row, column in (token.start, token.end))
            text[start:end] = " " * (end - start)
    return "".join(text)


def test_no_model_builds_a_mask_or_an_attention_by_hand():
    assert len(list(MODELS.glob("*.py"))) > 5, f"no model files found in {MODELS}"
    problems = [f"{path.name}: {why} ({match.group(0)!r})" for path in sorted(MODELS.glob("*.py"))
                for pattern, why in FORBIDDEN.items() for match in re.finditer(pattern, code_without_strings_or_comments(path))]
    assert not problems, "\n".join(problems)


def test_the_check_finds_what_it_forbids(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("mask = torch.triu(x, 1)\nlayer = nn.TransformerEncoder(x)\nscores = q @ k.transpose(-1, -2)\n"
                   "scores = scores.masked_fill(~mask, 0)\n'masked_attention'  # masked_attention\n")
    found = [why for pattern, why in FORBIDDEN.items() if re.search(pattern, code_without_strings_or_comments(bad))]
    assert len(found) == 4 and "attention by hand: use MultiHeadAttention" not in found  # not in a string or comment
