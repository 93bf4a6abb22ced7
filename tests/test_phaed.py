"""PHAED: shapes, learning, decoding, padding, turn-level relative attention, the stop-gradient memory,
c_max and the ablations (tiny sizes)."""

import math

import pytest
import torch

from turnformer.dialogue import Dialogue
from turnformer.models.generator_base import IGNORE
from turnformer.models.phaed import PHAED, Attention, PHAEDConfig
from turnformer.tasks.generation import (EOU, GENERATION_MODELS, Vocabulary, build_generator, encode_instances,
                                         make_generation_batches, make_instances)

from _generation_checks import fit, id_settings

DIALOGUES = [
    Dialogue.from_turns([("A", "hi , how are you ?"), ("B", "fine , thanks . and you ?"), ("A", "fine too , thanks .")], id="d1"),
    Dialogue.from_turns([("A", "hello"), ("A", "anyone there ?"), ("B", "yes , i am here .")], id="d2"),  # first reply: no query
    # turns A B A B A B: the reply at turn 4 (A) has the context R Q R Q, "zebra" only in its newer R, "owl" only in its older one
    Dialogue.from_turns([("A", "the owl sleeps"), ("B", "where is the giraffe ?"), ("A", "near the zebra ."),
                         ("B", "can we see it ?"), ("A", "yes , let us go ."), ("B", "great !")], id="d3"),
]
SMALL = {"d_model": 16, "heads": 2, "layers": 2, "ff": 32, "dropout": 0.0}


@pytest.fixture(scope="module")
def vocab():
    return Vocabulary.build(DIALOGUES, min_count=1)


def tiny(vocab, **settings) -> PHAED:
    torch.manual_seed(0)
    return PHAED(PHAEDConfig(vocab_size=len(vocab), **{**SMALL, **settings}), pad_id=0, eou_id=vocab.index[EOU]).eval()


def batches(model, vocab, instances, size=16, sort=True):
    return make_generation_batches(encode_instances(instances, vocab, model), size, sort)


def the_reply(turn: int, dialogue: str = "d3"):
    return [x for x in make_instances(DIALOGUES) if x.dialogue_id == dialogue and x.turn == turn]


def replaced(batch, vocab, word: str, by: str = "fine"):
    context = batch.context.masked_fill(batch.context.eq(vocab.index[word]), vocab.index[by])
    return type(batch)(context, batch.context_turn, batch.response_in, batch.response_out, batch.context_role)


def test_forward_shapes_and_a_context_without_queries(vocab):
    model = tiny(vocab)
    (batch,) = batches(model, vocab, make_instances(DIALOGUES))
    logits = model(batch)
    assert logits.shape == (*batch.response_in.shape, len(vocab)) and torch.isfinite(logits).all()
    assert torch.isfinite(model.loss(batch))
    (lonely,) = batches(model, vocab, the_reply(1, "d2"))  # its context is one utterance of the responder: no query
    assert not lonely.context_role.eq(1).any() and torch.isfinite(model(lonely)).all()
    with pytest.raises(ValueError, match="context_role"):
        model(type(batch)(batch.context, batch.context_turn, batch.response_in, batch.response_out))
    with pytest.raises(ValueError, match="r_max"):
        PHAEDConfig(vocab_size=10, r_max=-1)


def test_without_inter_query_layers_the_reply_reads_its_query_alone(vocab):
    """inter_layers = 0 (an ablation): no query sees another, so without the memory (c_max = 0) an older query's words
    do not reach the reply; with the inter-query layer they do."""
    (batch,) = batches(tiny(vocab), vocab, the_reply(4))  # context R Q R Q; "giraffe" only in the older query
    older = replaced(batch, vocab, "giraffe")
    alone = tiny(vocab, inter_layers=0, c_max=0)
    assert len(alone.inter) == 0 and torch.allclose(alone(batch), alone(older), atol=1e-6)
    inter = tiny(vocab, c_max=0)
    assert not torch.allclose(inter(batch), inter(older), atol=1e-4)
    with pytest.raises(ValueError, match="inter_layers = -1: must be 0 or more"):
        PHAEDConfig(vocab_size=10, inter_layers=-1)


def test_reading_every_query_the_reply_reads_an_older_query_directly(vocab):
    """cross_attention = "queries" (a diagnostic): the decoder reads every query before the response, not only the one
    it answers: without inter-query layers and memory an older query's words reach the reply (they do not with
    "reply"); a responder's utterance is still read by nothing; with one query in the context the two are one model."""
    (batch,) = batches(tiny(vocab), vocab, the_reply(4))  # context R Q R Q; "giraffe" only in the older query
    every = tiny(vocab, inter_layers=0, c_max=0, cross_attention="queries")
    answered = tiny(vocab, inter_layers=0, c_max=0)
    answered.load_state_dict(every.state_dict())
    assert not torch.allclose(every(batch), every(replaced(batch, vocab, "giraffe")), atol=1e-4)
    assert torch.allclose(answered(batch), answered(replaced(batch, vocab, "giraffe")), atol=1e-6)
    assert torch.allclose(every(batch), every(replaced(batch, vocab, "zebra")), atol=1e-6)  # in the newer R
    (one,) = batches(every, vocab, the_reply(2))  # context R Q: one query
    assert set(one.context_turn[one.context_role == 1].tolist()) == {1} and torch.allclose(every(one), answered(one), atol=1e-6)
    # the masks: a response's tokens see the query tokens before it, every one of them
    context = every._context_meta(batch)
    _, cross = every._decoder_masks(context, False, batch.response_in)
    queries = (batch.context_role == 1) & batch.context.ne(0)
    assert torch.equal(cross, queries[:, None, :].expand_as(cross) & batch.response_in.ne(0)[:, :, None])
    with pytest.raises(ValueError, match="model_config.cross_attention = 'all': expected one of reply, queries"):
        PHAEDConfig(vocab_size=10, cross_attention="all")


def test_a_tiny_phaed_learns_its_training_responses(vocab):
    model = tiny(vocab)
    (batch,) = batches(model, vocab, make_instances(DIALOGUES))
    first = fit(model, batch, steps=80)
    with torch.no_grad():
        assert float(model.eval().loss(batch)) < first / 5


def test_greedy_decoding_reuses_the_encoded_state_and_matches_the_forward_pass(vocab):
    model = tiny(vocab, max_response_words=5)
    (batch,) = batches(model, vocab, make_instances(DIALOGUES))
    out = model.generate(batch)
    assert len(out) == len(batch) and all(len(o) <= 6 and vocab.index[EOU] not in o and 0 not in o for o in out)
    state = model.encode(batch)
    assert state[2] is not None and len(state[2]) == model.config.layers  # the memory: computed once, in the state
    ids = batch.response_in[:, :2]
    row = next((i for i, reply in enumerate(out) if reply), None)
    assert row is not None, "every reply is empty: no step to compare"
    for step in range(len(out[row])):
        scores = model.decode(state, ids, last_only=True)
        assert torch.allclose(scores, model.decode(state, ids)[:, -1], atol=1e-5)
        scores[:, 0] = float("-inf")
        assert int(scores[row].argmax()) == out[row][step]
        ids = torch.cat([ids, scores.argmax(-1, keepdim=True)], 1)


def test_padding_does_not_change_an_example(vocab):
    model = tiny(vocab)
    instances = make_instances(DIALOGUES)
    longest = max(range(len(instances)), key=lambda i: len(instances[i].context))
    instances = [instances[longest]] + instances[:longest] + instances[longest + 1:]
    alone = batches(model, vocab, instances[1:2], 1)[0]
    together = batches(model, vocab, instances, 16, sort=False)[0]  # padded to the longest context and response
    assert together.context.shape[1] > alone.context.shape[1]
    length = alone.response_in.shape[1]
    assert torch.allclose(model(alone)[0], model(together)[1, :length], atol=1e-5)


def test_turn_relative_attention_is_eq_4_5_and_plain_attention_with_zero_vectors(vocab):
    torch.manual_seed(0)
    heads, d, r_max = 2, 8, 2
    attention = Attention(d, heads, relative=r_max + 1)
    x = torch.randn(2, 5, d)
    relative = torch.randint(0, r_max + 1, (2, 5, 5))
    mask = torch.rand(2, 5, 5) > 0.4
    mask[0, 0] = False  # a query that sees nothing outputs zero (before the output projection)
    out = attention(x, x, mask, relative)
    # eq. 4-5 written out: K^_p = K_p + B^K_r, V^_p = V_p + B^V_r for every (query, key) pair
    split = attention._split
    q, k, v = (split(t) for t in attention.project(x, x))
    bk = split(attention.rel_key)[:, relative].permute(1, 0, 2, 3, 4)  # [B, H, Lq, Lk, D]
    bv = split(attention.rel_value)[:, relative].permute(1, 0, 2, 3, 4)
    scores = (q.unsqueeze(-2) * (k.unsqueeze(2) + bk)).sum(-1) / math.sqrt(d // heads)
    scores = scores.masked_fill(~mask[:, None], float("-inf"))
    probs = scores.softmax(-1).nan_to_num(0.0)
    manual = attention.out(((probs.unsqueeze(-1) * (v.unsqueeze(2) + bv)).sum(-2)).transpose(1, 2).flatten(2))
    assert torch.allclose(out, manual, atol=1e-5)
    assert torch.allclose(out[0, 0], attention.out.bias)

    # r_max = 0 (every past query in one bucket) still hides later queries: the older query does not see the newer one
    zero = tiny(vocab, r_max=0)
    (reply,) = batches(zero, vocab, the_reply(4))
    encoded = zero.encode(reply)[0]
    older = reply.context_turn.eq(3)  # the older of the two queries
    changed = reply.context.masked_fill(reply.context_turn.eq(1) & reply.context.eq(vocab.index["see"]), vocab.index["fine"])
    moved = zero.encode(type(reply)(changed, reply.context_turn, reply.response_in, reply.response_out, reply.context_role))[0]
    assert not torch.equal(changed, reply.context) and torch.allclose(encoded[older], moved[older], atol=1e-6)

    model = tiny(vocab, r_max=1)
    plain = tiny(vocab, turn_attention=False)
    unknown = plain.load_state_dict(model.state_dict(), strict=False)
    assert not unknown.missing_keys and all("rel_" in key for key in unknown.unexpected_keys)
    (batch,) = batches(model, vocab, make_instances(DIALOGUES))
    assert not torch.allclose(model(batch), plain(batch), atol=1e-4)
    with torch.no_grad():
        for layer in model.inter:
            layer.self_attention.rel_key.zero_()
            layer.self_attention.rel_value.zero_()
    assert torch.allclose(model(batch), plain(batch), atol=1e-6)


def test_response_turns_count_each_speakers_utterances_from_the_start():
    turns = {(x.dialogue_id, x.turn): x.response_turn for x in make_instances(DIALOGUES)}
    assert turns[("d3", 4)] == 3 and turns[("d3", 5)] == 3 and turns[("d3", 1)] == 1  # A B A B A B
    assert turns[("d2", 1)] == 2 and turns[("d2", 2)] == 1  # A A B: the second A is A's second utterance
    (batch,) = make_generation_batches(encode_instances(make_instances(DIALOGUES[2:]), Vocabulary.build(DIALOGUES, 1),
                                                        tiny(Vocabulary.build(DIALOGUES, 1))), 16, False)
    assert batch.response_turn.tolist() == [1, 2, 2, 3, 3]


def decoder_inputs(model, batch) -> list[torch.Tensor]:
    """The states entering each decoder layer when `batch`'s responses are decoded (teacher-forced)."""
    seen = []
    hooks = [layer.register_forward_pre_hook(lambda module, args: seen.append(args[0])) for layer in model.decoder]
    model(batch)
    for hook in hooks:
        hook.remove()
    return seen[-len(model.decoder):]  # after the memory's pass over the context


@pytest.mark.parametrize("turn_count", ["conversation", "back"])
def test_counted_from_the_start_an_earlier_responses_memory_is_the_decoders_own_states_of_it(turn_count):
    """The paper's turn-level recurrence reuses the states the decoder had when it generated an earlier response
    (sec. 3.4): with TE counted from the conversation's start they are exactly those states; counted back from the
    response, the memory decodes the earlier response under another turn embedding than the one it was trained with."""
    dialogue = Dialogue.from_turns([("B", "where is the owl ?"), ("A", "near the zebra ."), ("B", "can we go ?"),
                                    ("A", "yes , let us go .")], id="q")
    vocab = Vocabulary.build([dialogue], min_count=1)
    model = tiny(vocab, turn_count=turn_count, max_turns=4)
    first, _, later = make_instances([dialogue])  # A's first reply, B's, A's second: its context is Q R Q
    (alone,) = batches(model, vocab, [first])
    (reply,) = batches(model, vocab, [later])
    memory = model.encode(reply)[2]
    earlier = reply.context_role.eq(2)[0]  # the context's R utterance: A's first reply
    states = decoder_inputs(model, alone)  # A's first reply as the target: [SOU] [SPEAKER-R] words (no [EOU])
    same = all(torch.allclose(m[0, earlier][:-1], s[0], atol=1e-5) for m, s in zip(memory, states))
    assert same == (turn_count == "conversation")
    if turn_count == "conversation":
        assert reply.response_turn.tolist() == [2] and model.generate(reply) and model.beam_search(reply, 2, 4)
        with pytest.raises(ValueError, match="response_turn"):
            model(type(reply)(reply.context, reply.context_turn, reply.response_in, reply.response_out, reply.context_role))
    with pytest.raises(ValueError, match="turn_count"):
        tiny(vocab, turn_count="forward")


@pytest.mark.parametrize("turn_count", ["back", "conversation"])
def test_turn_embeddings_started_at_zero_start_phaed_as_without_them(vocab, turn_count):
    zero = tiny(vocab, turn_init_std=0.0, turn_count=turn_count)
    assert zero.turn.weight.abs().sum() == 0 and tiny(vocab).turn.weight.std() > 0.5  # the default: unit scale
    small = tiny(vocab, turn_init_std=0.02)
    assert 0.01 < small.turn.weight[1:].std() < 0.03 and small.turn.weight[0].abs().sum() == 0  # padding stays zero
    without = tiny(vocab, turn_embeddings=False)
    unknown = without.load_state_dict(zero.state_dict(), strict=False)
    assert unknown.unexpected_keys == ["turn.weight"] and not unknown.missing_keys
    (batch,) = batches(zero, vocab, make_instances(DIALOGUES))
    assert torch.allclose(zero(batch), without(batch), atol=1e-6)
    for bad in (-0.1, float("nan"), "small", True):
        with pytest.raises(ValueError, match="turn_init_std"):
            tiny(vocab, turn_init_std=bad)


def test_transformer_attention_draws_and_regularises_phaeds_attention_as_the_transformers(vocab):
    """`transformer_attention`: every attention layer of PHAED as the Transformer baseline's (nn.MultiheadAttention's
    draw: Xavier-uniform input projections, zero biases; dropout on the probabilities); the default keeps nn.Linear's
    draw and no dropout there. Only the draw and the dropout change: the same weights give the same outputs."""
    from turnformer.models.transformer_generator import torch_initialised_attention

    d, dropout = SMALL["d_model"], 0.25
    like = tiny(vocab, transformer_attention=True, dropout=dropout)
    plain = tiny(vocab, dropout=dropout)
    reference = torch_initialised_attention(d, SMALL["heads"], dropout)
    bound = math.sqrt(6 / (d + 3 * d))  # Xavier-uniform over the [3d, d] input projection
    attentions = [m for m in like.modules() if isinstance(m, Attention)]
    assert len(attentions) == 2 * SMALL["layers"] + 1 + SMALL["layers"]  # inner, inter, decoder self and cross
    for attention in attentions:  # dropout but where relation vectors are read (they read the probabilities before it)
        assert attention.dropout == (0 if attention.rel_key is not None else reference.dropout)
        assert attention.qkv.bias.abs().sum() == 0 and attention.out.bias.abs().sum() == 0
        assert attention.qkv.weight.abs().max() <= bound and attention.qkv.weight.abs().max() > 0.9 * bound
        assert reference.qkv.weight.abs().max() <= bound
    for attention in (m for m in plain.modules() if isinstance(m, Attention)):
        assert attention.dropout == 0 and attention.qkv.bias.abs().sum() > 0
        assert attention.qkv.weight.abs().max() <= 1 / math.sqrt(d)  # nn.Linear's draw
    plain.load_state_dict(like.state_dict())
    (batch,) = batches(like, vocab, make_instances(DIALOGUES))
    assert torch.equal(like.eval()(batch), plain.eval()(batch))
    torch.manual_seed(1)
    trained = like.train()(batch)
    torch.manual_seed(1)
    assert not torch.allclose(trained, plain.train()(batch))  # the attention probabilities dropped too


def test_without_the_response_turn_embedding_only_the_responses_input_changes(vocab):
    """`response_turn_embedding = False`: the response's tokens carry no turn embedding; the same weights then differ
    from the default only by TE(1) on the response (with TE(1) zero the two are one model)."""
    for c_max in (0, 1):
        without = tiny(vocab, response_turn_embedding=False, c_max=c_max)
        default = tiny(vocab, c_max=c_max)
        default.load_state_dict(without.state_dict())
        (batch,) = batches(without, vocab, make_instances(DIALOGUES))
        response = batch.response_in
        state = without.encode(batch)
        expected = without.embed_tokens(response, torch.arange(response.shape[1]).expand_as(response))
        assert torch.equal(without._embed_response(response, state[3], 0), expected)
        assert not torch.allclose(without(batch), default(batch), atol=1e-4)
        for model in (without, default):
            with torch.no_grad():
                model.turn.weight[1].zero_()  # TE(1): the response's (counted back), and the newest context utterance's
        assert torch.allclose(without(batch), default(batch), atol=1e-6)


def test_copied_layers_start_each_stack_as_copies_of_its_first(vocab):
    """`copied_layers`: each stack's layers start equal (as nn.TransformerEncoder's copies do) but are apart, each
    trained on its own; by default they are drawn one by one."""
    copied, drawn = tiny(vocab, copied_layers=True, inter_layers=2), tiny(vocab, inter_layers=2)
    for stack in ("inner", "inter", "decoder"):
        first, *rest = getattr(copied, stack)
        assert len(rest) == 1
        for layer in rest:
            assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), layer.state_dict().values()))
            assert all(a is not b for a, b in zip(first.parameters(), layer.parameters()))
        first, second = getattr(drawn, stack)
        assert not torch.equal(first.ff[0].weight, second.ff[0].weight)
    (batch,) = batches(copied, vocab, make_instances(DIALOGUES))
    copied.train().loss(batch).backward()
    torch.optim.SGD(copied.parameters(), lr=0.1).step()
    first, second = copied.decoder
    assert not torch.equal(first.ff[0].weight, second.ff[0].weight)  # trained apart
    assert len(tiny(vocab, copied_layers=True, inter_layers=0).inter) == 0


def test_the_memory_is_stop_gradient(vocab):
    model = tiny(vocab, c_max=2)
    (batch,) = batches(model, vocab, the_reply(4))
    zebra, giraffe = vocab.index["zebra"], vocab.index["giraffe"]  # in the newer earlier response / in a query only
    assert zebra not in batch.response_in.tolist()[0] and giraffe not in batch.response_in.tolist()[0]
    logits = model(batch)
    assert not torch.allclose(logits, model(replaced(batch, vocab, "zebra")), atol=1e-4)  # the memory is read...
    logits[..., vocab.index["yes"]].sum().backward()  # (a word other than zebra: the tied output adds nothing to its row)
    assert torch.equal(model.embed.weight.grad[zebra], torch.zeros(model.config.d_model))  # ...but passes no gradient
    assert model.embed.weight.grad[giraffe].abs().sum() > 0  # the encoder path does


def test_c_max_limits_the_earlier_responses_in_memory(vocab):
    for c_max, sees_zebra, sees_owl in ((0, False, False), (1, True, False), (2, True, True)):
        model = tiny(vocab, c_max=c_max)
        (batch,) = batches(model, vocab, the_reply(4))
        assert batch.context_role[batch.context.eq(vocab.index["owl"])].eq(2).all()
        logits = model(batch)
        assert torch.allclose(logits, model(replaced(batch, vocab, "zebra")), atol=1e-6) != sees_zebra, c_max
        assert torch.allclose(logits, model(replaced(batch, vocab, "owl")), atol=1e-6) != sees_owl, c_max


@pytest.mark.parametrize("model_id", [m for m in GENERATION_MODELS if m.startswith("phaed")])
def test_every_phaed_variant_builds_trains_and_generates(vocab, model_id):
    torch.manual_seed(0)
    fixed = id_settings(model_id)
    model = build_generator(model_id, {**SMALL, "layers": 1, "max_response_words": 4, **fixed}, vocab)
    (batch,) = batches(model, vocab, make_instances(DIALOGUES))
    assert all(getattr(model.config, key) == value for key, value in fixed.items())
    assert batch.response_out[:, 0].eq(IGNORE).all() == model.config.speaker_tokens
    loss = model.loss(batch)
    loss.backward()
    assert torch.isfinite(loss) and len(model.eval().generate(batch)) == len(batch)


def test_the_turn_embedding_measure_reads_a_trained_model(tmp_path):
    """benchmarks/phaed_turn_embeddings.py: each turn-embedding row's norm (TE(1) on; row 0 is padding) and the inputs'
    mean norm, a word embedding times sqrt(d); a folder without a checkpoint or a model without turn embeddings is named."""
    from safetensors.torch import save_file

    from _benchmark_scripts import load_benchmark_script

    measure = load_benchmark_script("phaed_turn_embeddings")
    model = PHAED(PHAEDConfig(vocab_size=12, d_model=16, heads=2, layers=1, ff=32, max_turns=3))
    with torch.no_grad():
        model.turn.weight.copy_(torch.tensor([0.0, 1.0, 2.0, 0.5]).unsqueeze(1) * torch.ones(4, 16))
    (tmp_path / "run" / "best").mkdir(parents=True)
    save_file({name: model.state_dict()[name].contiguous() for name in ("turn.weight", "embed.weight")},
              str(tmp_path / "run" / "best" / "model.safetensors"))
    measured = measure.turn_embedding_norms(tmp_path / "run")
    assert measured["row_norms"] == [4.0, 8.0, 2.0]  # sqrt(16) times 1, 2, 0.5
    expected = float(model.embed.weight.detach().norm(dim=1).mean()) * 4
    assert measured["input_norm_mean"] == pytest.approx(expected, abs=1e-3)
    with pytest.raises(SystemExit, match="no best/model.safetensors"):
        measure.turn_embedding_norms(tmp_path)


def test_a_checkpoint_older_than_a_generator_setting_fits_only_at_its_default(vocab):
    """A generator's settings sit under "generator" in its checkpoint's config: one written before `turn_count` and
    `turn_init_std` existed fits a model at their defaults, and is named as differing from one that is not."""
    from turnformer.training.checkpoint import config_of, model_mismatch

    model = tiny(vocab)
    config = config_of(model)
    older = {**config, "generator": {k: v for k, v in config["generator"].items() if k not in ("turn_count", "turn_init_std")}}
    assert model_mismatch({"model": older}, model, config) is None
    other = tiny(vocab, turn_count="conversation")
    assert "generator.turn_count: '<absent>' in the checkpoint, 'conversation' here" in model_mismatch({"model": older}, other, config_of(other))


def test_the_memory_turn_measure_changes_only_the_memory(vocab):
    """benchmarks/phaed_memory_turns.py: as trained, the model's own likelihood; without memory, that of the same
    weights built with c_max = 0; the memory's turn embeddings changed, only replies with an earlier response of their
    speaker in context score differently; the model is itself again after the block."""
    from _benchmark_scripts import load_benchmark_script

    measure = load_benchmark_script("phaed_memory_turns")
    model, without = tiny(vocab), tiny(vocab, c_max=0)
    instances = make_instances(DIALOGUES)
    each = [batches(model, vocab, [x])[0] for x in instances]
    with_memory = [x.context_role.eq(2).any() for x in each]
    assert any(with_memory) and not all(with_memory)
    own = [model.negative_log_likelihood(x)[0] for x in each]
    with measure.memory_variant(model, "trained"):
        assert [model.negative_log_likelihood(x)[0] for x in each] == own
    with measure.memory_variant(model, "no-memory"):
        assert [model.negative_log_likelihood(x)[0] for x in each] == pytest.approx(
            [without.negative_log_likelihood(x)[0] for x in each], abs=1e-4)
    for variant in ("response", "none", "farther"):
        with measure.memory_variant(model, variant):
            changed = [abs(model.negative_log_likelihood(x)[0] - nll) > 1e-5 for x, nll in zip(each, own)]
        assert changed == with_memory, variant
    assert "encode" not in vars(model) and [model.negative_log_likelihood(x)[0] for x in each] == own
    with pytest.raises(ValueError, match="unknown variant"):
        with measure.memory_variant(model, "shuffled"):
            pass


def test_the_memory_turn_measure_scores_a_phaed_without_turn_embeddings_with_and_without_its_memory(vocab, monkeypatch):
    """benchmarks/phaed_memory_turns.py on `phaed-no-turn-emb`: its memory has no turn embedding to change, so the
    measure scores it as trained and without its memory only, each the model's own likelihood."""
    from _benchmark_scripts import load_benchmark_script

    measure = load_benchmark_script("phaed_memory_turns")
    model, without = tiny(vocab, turn_embeddings=False), tiny(vocab, turn_embeddings=False, c_max=0)
    each = batches(model, vocab, make_instances(DIALOGUES))
    monkeypatch.setattr(measure, "load_trained", lambda run: (model, vocab, {}))
    monkeypatch.setattr(measure, "split_batches", lambda *args: (each, None))
    scores = measure.memory_perplexities("run")
    assert list(scores) == ["trained", "no-memory"]
    assert scores["trained"] == pytest.approx(measure.evaluate_perplexity(model, each)["perplexity"], abs=1e-3)
    assert scores["no-memory"] == pytest.approx(measure.evaluate_perplexity(without, each)["perplexity"], abs=1e-3)
    assert scores["trained"] != scores["no-memory"]


def test_the_memory_turn_measure_names_a_folder_it_cannot_score(tmp_path, monkeypatch):
    """benchmarks/phaed_memory_turns.py: a folder that is not a run is one line naming it, no traceback."""
    from _benchmark_scripts import load_benchmark_script

    measure = load_benchmark_script("phaed_memory_turns")
    monkeypatch.setattr("sys.argv", ["phaed_memory_turns.py", str(tmp_path / "nothing")])
    with pytest.raises(SystemExit, match="nothing: no such run or checkpoint folder"):
        measure.main()


def test_the_by_context_measure_splits_the_perplexity_by_the_responses_turn(vocab, tmp_path):
    """benchmarks/generation_by_context.py: every response in exactly one group by its turn; the groups' perplexities
    combine to the whole split's, as the training loop scores it."""
    from _benchmark_scripts import load_benchmark_script

    from turnformer.data import write_jsonl
    from turnformer.tasks.generation import evaluate_perplexity

    measure = load_benchmark_script("generation_by_context")
    write_jsonl(DIALOGUES, tmp_path / "test.jsonl")
    run = {"recipe": {"dataset": "file", "test_file": str(tmp_path / "test.jsonl"), "train": {"eval_batch_size": 2}}}
    model = tiny(vocab)
    groups = measure.by_context(model, vocab, run, "test")
    # d1: turns 1, 2; d2: 1, 2; d3: 1 to 5
    assert {g: v["instances"] for g, v in groups.items()} == {"turn 1": 3, "turn 2": 3, "turn 3": 1, "turn 4": 1,
                                                              "turns 5+": 1, "all": 9}
    whole = evaluate_perplexity(model, batches(model, vocab, make_instances(DIALOGUES), size=2))
    assert groups["all"]["tokens"] == whole["tokens"] and groups["all"]["perplexity"] == pytest.approx(whole["perplexity"], rel=1e-5)
    assert len({round(v["perplexity"], 3) for g, v in groups.items() if g != "all"}) > 1
    with pytest.raises(ValueError, match="turn 1 or later"):
        measure.group_of(0)
