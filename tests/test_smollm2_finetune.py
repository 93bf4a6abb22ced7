"""SmolLM2 fine-tuned as a response generator, plain and with PHAED's speaker tokens and turn-relative attention: a
tiny random Llama with the real SmolLM2 tokenizer (the 135M weights are too slow to load in a test)."""

import copy
import logging

import pytest
import torch
from torch.nn import functional as F

from turnformer.dialogue import Dialogue, DialogueError
from turnformer.tasks.generation import (SPEAKER_Q, SPEAKER_R, ResponseGenerator, Vocabulary, evaluate_generation,
                                         instance_batches, make_instances)
from turnformer.training import TrainConfig, load_checkpoint, train
from test_generation_models import DIALOGUES

pytest.importorskip("gguf")
smollm2 = pytest.importorskip("turnformer.models.smollm2")
try:
    smollm2.smollm2_gguf_path()
except FileNotFoundError as error:
    pytest.skip(str(error), allow_module_level=True)

from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from turnformer.models.smollm2 import SYSTEM_PROMPT, PretrainedLMGenerator, SmolLM2Config, SmolLM2Generator  # noqa: E402

LONGER = DIALOGUES + [Dialogue.from_turns([("A", "do you like it ?"), ("B", "yes ."), ("A", "why ?"), ("B", "it is cheap ."),
                                           ("A", "and good ?"), ("B", "very good , i think .")], id="d3")]


@pytest.fixture(scope="module")
def tokenizer():
    return smollm2.load_smollm2_tokenizer()


def tiny_llama(tokenizer, seed=0):
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=True)
    return LlamaForCausalLM(config)


def generator(tokenizer, vocab, **settings) -> SmolLM2Generator:
    tok = copy.deepcopy(tokenizer)  # speaker tokens are added to the tokenizer
    return SmolLM2Generator(SmolLM2Config(**{"max_new_tokens": 6, **settings}), vocab, tiny_llama(tok), tok)


def perturbed(model: SmolLM2Generator) -> SmolLM2Generator:
    """Weights (and turn biases) away from the initialisation, whose near-uniform outputs hide what attention does."""
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.lm.parameters():
            p.add_(torch.randn_like(p) * 0.5)
        if model.turn_bias is not None:
            model.turn_bias.normal_()
    return model


@pytest.fixture(scope="module")
def vocab():
    return Vocabulary.build(LONGER, min_count=1)


def test_the_plain_prompt_is_the_chat_template_of_the_zero_shot_generator(tokenizer, vocab):
    model = generator(tokenizer, vocab)
    zero_shot = PretrainedLMGenerator(tiny_llama(tokenizer), tokenizer)
    for instance in make_instances(LONGER):
        prompt, message, target = model.encode(instance)
        assert prompt == zero_shot.prompt(instance) and target == zero_shot.target(instance)
        # messages numbered in order: the system message 0, the context 1..n, the response's header n + 1
        assert message[0] == 0 and message[-1] == len(instance.context) + 1 and message == sorted(message)
    instance = make_instances(LONGER)[1]
    text = tokenizer.decode(model.encode(instance)[0])
    assert text.startswith(f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>assistant\nHi, how are you?")


def test_speaker_tokens_replace_the_roles_and_start_from_their_embeddings(tokenizer, vocab):
    model = generator(tokenizer, vocab, speaker_tokens=True)
    q, r = (model.tokenizer.convert_tokens_to_ids(t) for t in (SPEAKER_Q, SPEAKER_R))
    assert {q, r} == {len(tokenizer), len(tokenizer) + 1}  # two new tokens
    table = model.lm.get_input_embeddings().weight
    assert model.lm.get_output_embeddings().weight.shape[0] == len(tokenizer) + 2
    user = tokenizer("user", add_special_tokens=False)["input_ids"]
    assert torch.allclose(table[q], table[user].mean(0))
    prompt, _, _ = model.encode(make_instances(LONGER)[1])  # context: R (A) then Q (B); the response is A's
    assert prompt.count(q) == 1 and prompt.count(r) == 2 and prompt[-2] == r  # ... <|im_start|> [SPEAKER-R] \n


def reference_nll(lm, model, instances):
    """transformers' own forward (its sdpa attention and causal mask), one unpadded instance at a time: the summed
    NLL of each target."""
    out = []
    for x in instances:
        prompt, _, target = model.encode(x)
        logits = lm(torch.tensor([prompt + target])).logits[0, len(prompt) - 1 : -1]
        out.append(F.cross_entropy(logits, torch.tensor(target), reduction="sum"))
    return torch.stack(out)


def test_structure_attention_on_left_padded_batches_equals_transformers_own_forward(tokenizer, vocab):
    """Outputs and gradients: the structure layer's CAUSAL mask over left-padded rows (positions counted from each
    row's first token) computes what transformers' attention does on each instance alone."""
    model = perturbed(generator(tokenizer, vocab))
    reference = copy.deepcopy(model.lm)
    reference.set_attn_implementation("sdpa")
    instances = make_instances(LONGER)
    (batch,) = model.make_batches(instances, 32)
    assert batch.real.sum(1).unique().numel() > 1  # rows of several lengths: there is left padding
    expected = reference_nll(reference, model, [instances[i] for i in _batch_order(model, instances)])
    nll, words = model.negative_log_likelihood(batch)
    assert nll == pytest.approx(float(expected.sum().detach()), rel=1e-5) and words == sum(len(x.response.words) + 1 for x in instances)
    targets = sum(len(model.encode(x)[2]) for x in instances)
    (expected.sum() / targets).backward()
    model.loss(batch).backward()
    for (name, p), q in zip(model.lm.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5 * float(q.grad.abs().max()), msg=name)


def _batch_order(model, instances):
    encoded = [model.encode(x) for x in instances]
    return sorted(range(len(encoded)), key=lambda i: len(encoded[i][0]) + len(encoded[i][2]))


def test_turn_attention_adds_a_bias_per_layer_head_and_turn_distance(tokenizer, vocab):
    plain, phaed = perturbed(generator(tokenizer, vocab)), generator(tokenizer, vocab, turn_attention=True, r_max=2)
    phaed.lm.load_state_dict(plain.lm.state_dict())
    instances = make_instances(LONGER)
    (batch,) = plain.make_batches(instances, 32)
    assert phaed.turn_bias.shape == (2, 4, 3)
    assert plain.loss(batch).item() == pytest.approx(phaed.loss(batch).item(), rel=1e-6)  # zero biases: the plain model
    # the distance buckets: the response (last message) sees the system message (0) at min(n + 1, r_max)
    structure = phaed.structure(batch.real, batch.message)
    last = batch.message[:, -1]  # every row ends in its response
    first = batch.real.float().argmax(1)  # the first real column: the system message
    rows = torch.arange(len(batch))
    assert structure["bucket"][rows, -1, first].tolist() == last.clamp(max=2).tolist()
    assert not structure["visible"][:, 0, 1:].any()  # causal
    phaed.loss(batch).backward()
    assert phaed.turn_bias.grad.abs().sum() > 0
    with torch.no_grad():
        phaed.turn_bias[:, :, 2] = -1e4  # hide everything two turns back or more: the scores change
    assert phaed.loss(batch).item() != pytest.approx(plain.loss(batch).item(), rel=1e-3)


@pytest.mark.parametrize("settings", [{}, {"speaker_tokens": True, "turn_attention": True}])
def test_cached_greedy_decoding_equals_decoding_from_scratch_and_padding_changes_nothing(tokenizer, vocab, settings):
    model = perturbed(generator(tokenizer, vocab, **settings)).eval()
    instances = make_instances(LONGER)
    together = model.generate_words(model.make_batches(instances, 32, sort_by_length=False)[0])
    assert any(together), "every reply is empty: nothing is compared"
    assert together == [model.generate_words(model.make_batches([x], 1)[0])[0] for x in instances]
    # from scratch: the whole sequence again at every step, no cache
    for x, words in zip(instances[:3], together):
        prompt, _, _ = model.encode(x)
        ids = list(prompt)
        for _ in range(model.config.max_new_tokens):
            real = torch.ones(1, len(ids), dtype=torch.bool)
            message = torch.tensor([model.encode(x)[1] + [model.encode(x)[1][-1]] * (len(ids) - len(prompt))])
            hidden = model.states(torch.tensor([ids]), real, model.structure(real, message))[0, -1]
            ids.append(int(model.lm.lm_head(hidden).argmax()))
            if ids[-1] in model.stop_ids.tolist():
                ids.pop()
                break
        assert smollm2.words(tokenizer.decode(ids[len(prompt):], skip_special_tokens=True)) == words


def test_a_tiny_smollm2_trains_scores_saves_and_serves(tokenizer, vocab, tmp_path):
    model = generator(tokenizer, vocab, speaker_tokens=True, turn_attention=True)
    batches = instance_batches(model, make_instances(LONGER), vocab, 32)
    first = model.loss(batches[0]).item()
    evaluate = lambda m, split: evaluate_generation(m, batches, vocab, decode=split == "test")  # noqa: E731
    result = train(model, batches, evaluate, TrainConfig(epochs=30, lr=1e-2, seed=0, out_dir=tmp_path / "run"),
                   label_map={"task": "generation"})
    assert model.loss(batches[0]).item() < first / 2 and result.best_epoch is not None
    metrics = evaluate_generation(model, batches, vocab)
    nll, words = model.negative_log_likelihood(batches[0])
    assert metrics["perplexity"] == pytest.approx(torch.tensor(nll / words).exp().item(), rel=1e-5)
    assert {"bleu_1", "distinct_1", "sample"} <= set(metrics)
    again = generator(tokenizer, vocab, speaker_tokens=True, turn_attention=True)  # the checkpoint of the last epoch
    load_checkpoint(tmp_path / "run" / "last", again)
    assert again.loss(batches[0]).item() == pytest.approx(model.loss(batches[0]).item(), rel=1e-5)
    assert torch.equal(again.turn_bias, model.turn_bias)
    reply = ResponseGenerator(again.eval(), vocab).respond([("A", "hi , how are you ?"), ("B", "fine , thanks . and you ?")])
    assert isinstance(reply, str)


def test_bad_settings_and_over_long_instances_are_refused(tokenizer, vocab):
    with pytest.raises(ValueError, match="unknown SmolLM2Config settings"):
        SmolLM2Config.from_dict({"heads": 2})
    model = generator(tokenizer, vocab, max_tokens=20)  # the system message alone is longer
    with pytest.raises(DialogueError, match=r"dialogue 'd1' turn 1: its response alone takes \d+ tokens, \d+ more with "
                                            r"the system message and its header: over max_tokens = 20"):
        model.make_batches(make_instances(LONGER), 8)
    with pytest.raises(ValueError, match="replies greedily"):
        ResponseGenerator(model, vocab, beam_size=3)
    # a server's request (`Task.respond`) with a beam: a user's error naming the field (it was a 500), not a fault
    from turnformer.tasks.generation import TASK

    run = {"recipe": {"data": {}}}
    with pytest.raises(DialogueError, match=r"^beam: 2; this model \(SmolLM2Generator\) replies greedily"):
        TASK.respond(model, vocab, run, [("A", "hi")], beam=2)
    with pytest.raises(DialogueError, match="replies greedily"):
        ResponseGenerator(model, vocab, beam_size=3)
    with pytest.raises(ValueError, match="greedy"):
        generator(tokenizer, vocab).predict(generator(tokenizer, vocab).make_batches(make_instances(DIALOGUES), 8)[0], beam_size=2)


def test_a_context_over_max_tokens_keeps_its_newest_sub_words(tokenizer, vocab, caplog):
    """The prompt of an instance over max_tokens: the system message, the newest context messages that fit whole, the
    newest one that does not as its role header and its last sub-words (where a text token fits), the reply's header."""
    full = generator(tokenizer, vocab)
    instance = next(x for x in make_instances(LONGER) if x.dialogue_id == "d3" and len(x.context) == 4)
    system, context, header, target, room = full._parts(instance)
    assert full.encode(instance)[0] == system + [i for m in context for i in m] + header and full.unread(instance) is None
    for budget in range(len(system) + len(header) + len(target), full.config.max_tokens - room + 1):
        model = generator(tokenizer, vocab, max_tokens=budget)
        prompt, message, got_target = model.encode(instance)
        assert got_target == target and len(prompt) + len(target) <= budget
        assert prompt[: len(system)] == system and prompt[len(prompt) - len(header) :] == header
        read = prompt[len(system) : len(prompt) - len(header)]
        left = budget - len(system) - len(header) - len(target)
        whole = max(w for w in range(len(context) + 1) if sum(map(len, context[len(context) - w :])) <= left)
        newest = [i for m in context[len(context) - whole :] for i in m]
        assert read[len(read) - len(newest) :] == newest
        partial, rest = read[: len(read) - len(newest)], left - len(newest)
        if whole < len(context):
            role = model._message(model.roles[instance.context[len(context) - 1 - whole].role])
            cut = context[len(context) - 1 - whole]
            assert partial == (role + cut[len(cut) - (rest - len(role)) :] if rest > len(role) + 2 else [])
        assert message == sorted(message) and message[0] == 0 and len(set(message)) == 3 + whole - (not partial) - (not system)
        assert model.unread(instance) == (None if whole == len(context) else
                                          f"{whole} of the 4 turns it reads whole, to fit its {budget} sub-words")
    model = generator(tokenizer, vocab, max_tokens=50)  # training batches: the instances cut are counted, and said
    with caplog.at_level(logging.INFO, logger="turnformer.models.smollm2"):
        batches = model.make_batches(make_instances(LONGER), 8)
    cut = sum(model.unread(x) is not None for x in make_instances(LONGER))
    assert cut and model.cut_contexts == cut and len(batches[0]) and (batches[0].ids.shape[1] <= 50)
    assert f"{cut} of {len(make_instances(LONGER))} instances: the context cut to its newest sub-words" in caplog.text
    # a conversation ending in a pasted blob (one word of thousands of characters): a reply, and a note saying so
    blob = "".join("qxzjvk"[i * 7 % 6] + "aeiou"[i % 5] for i in range(2000))
    chat = ResponseGenerator(generator(tokenizer, vocab, max_tokens=100).eval(), vocab)
    dialogue = [("A", "hi , how are you ?"), ("B", blob)]
    assert isinstance(chat.respond(dialogue), str)
    assert chat.unread(dialogue) == "0 of the 2 turns it reads whole, to fit its 100 sub-words"


def test_what_smollm2_cannot_do_is_said_before_the_work_and_names_the_split(tokenizer, vocab, caplog, monkeypatch):
    """evaluate --beam 2 on a SmolLM2 run was refused after the whole perplexity pass; a response too long for
    max_tokens named neither its file nor the setting; max_tokens past the model's positions was taken silently."""
    from turnformer.tasks import generation

    model = generator(tokenizer, vocab, max_tokens=20)
    batches = generator(tokenizer, vocab).make_batches(make_instances(DIALOGUES), 8)
    monkeypatch.setattr(generation, "evaluate_perplexity", lambda *a: pytest.fail("the perplexity pass ran first"))
    with pytest.raises(DialogueError, match="--beam 2: SmolLM2Generator replies greedily"):
        generation.evaluate_generation(model, batches, vocab, beam_size=2)
    monkeypatch.undo()
    with pytest.raises(DialogueError, match=r"^conversations.jsonl: test split: dialogue 'd1' turn 1: its response alone .*"
                                            r"over max_tokens = 20 \(model_config.max_tokens; data.max_words"):
        generation.split_named(lambda: model.make_batches(make_instances(LONGER), 8), "test",
                               {"dataset": "file", "test_file": "conversations.jsonl"})
    caplog.clear()
    generator(tokenizer, vocab, max_tokens=500, max_new_tokens=13)  # the tiny model's 512 positions: 513
    assert "max_tokens = 500 and max_new_tokens = 13: a prompt and its reply take up to their sum, over the 512" in caplog.text


def test_a_reply_cut_part_way_through_a_character_keeps_its_whole_characters(tokenizer):
    """A byte-level tokenizer gives a CJK character several tokens: a reply cut at max_new_tokens between them decoded
    to a replacement character at its end."""
    ids = tokenizer("美鮨 美", add_special_tokens=False)["input_ids"]
    cut = tokenizer.decode(ids[:-1])
    assert cut.endswith("\ufffd") and smollm2.whole_characters(cut) == "美鮨 "
    assert smollm2.whole_characters(tokenizer.decode(ids)) == "美鮨 美"
