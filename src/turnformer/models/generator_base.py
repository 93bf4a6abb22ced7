"""What every response generator shares: its settings, its batch, and the teacher-forced loss,
perplexity, greedy decoding and beam search written once on top of two methods a model defines:

- ``encode(batch) -> state``: whatever the decoder needs from the context (encoder states, padding,
  cached memories...);
- ``decode_states(state, response_in, last_only=False) -> states``: the decoder's final states (B, Lr, d) of
  every prefix of ``response_in``, or with ``last_only`` (B, d) of the whole of it (what decoding needs).
  The output projection is tied to the word embeddings: `decode` gives the logits (B, Lr | -, V); the loss
  projects only the rows that have a target (`target_logits`), which is the same loss for less work.

Every tensor of the state has the batch on dim 0 (`repeat_state` relies on it to give each beam its copy).

A model's settings are a `GeneratorConfig`, or a subclass adding its own fields.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, is_dataclass, replace

import torch
from torch import nn

from turnformer.data.generation_vocab import EOU, SPECIALS, UNK, GenerationInstance, Utterance
from turnformer.models.config_checks import ModelConfig, check_config

IGNORE = -100  # target id left out of the loss and of perplexity


@dataclass
class GeneratorConfig(ModelConfig):
    vocab_size: int
    d_model: int = 256
    heads: int = 4
    layers: int = 3  # encoder layers; the decoder has as many
    ff: int = 1024
    dropout: float = 0.1
    max_positions: int = 512
    max_turns: int = 8
    speaker_tokens: bool = True
    turn_embeddings: bool = True
    # the turn embeddings' initial scale: normal with this std; 1.0 (nn.Embedding's draw, unchanged) puts them at the
    # inputs' unit scale, 0 starts them at zero (the model starts as without them)
    turn_init_std: float = 1.0
    max_response_words: int = 50

    def __post_init__(self) -> None:
        check_config(self, positive=("vocab_size", "d_model", "heads", "layers", "ff", "max_positions", "max_turns",
                                     "max_response_words"))
        std = self.turn_init_std
        if isinstance(std, bool) or not isinstance(std, int | float) or not 0 <= std < float("inf"):
            raise ValueError(f"model_config.turn_init_std = {std!r}: expected a number, 0 or more")
        if self.d_model % self.heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by heads ({self.heads})")


@dataclass
class GenerationBatch:
    """Padded with 0 ([PAD]). `context_turn`: 1 = newest context utterance, 0 on padding.
    `response_in` starts with [SOU] (and the speaker token); `response_out` is it shifted by one, ending
    with [EOU], with IGNORE where nothing is to be predicted (padding, the given speaker token).
    `context_role`: 1 on the tokens of a query (an utterance of another speaker than the response's),
    2 on those of an earlier response of the same speaker, 0 on padding (PHAED's Q / R).
    `context_head` (only for models that read dependency parses): the column of each context token's
    syntactic governor in the same row, -1 for roots, special tokens and padding.
    `response_turn`: the response's aligned turn from the conversation's start (its speaker's utterances up to and
    including it; 0 = not known), for PHAED's turn embeddings counted from the start."""

    context: torch.Tensor  # (B, Lc)
    context_turn: torch.Tensor  # (B, Lc)
    response_in: torch.Tensor  # (B, Lr)
    response_out: torch.Tensor  # (B, Lr)
    context_role: torch.Tensor | None = None  # (B, Lc)
    context_head: torch.Tensor | None = None  # (B, Lc)
    response_turn: torch.Tensor | None = None  # (B,)

    def to(self, device) -> "GenerationBatch":
        return GenerationBatch(*(None if t is None else t.to(device) for t in (
            self.context, self.context_turn, self.response_in, self.response_out, self.context_role, self.context_head,
            self.response_turn)))

    def __len__(self) -> int:
        return self.context.shape[0]


class GeneratorBase(nn.Module):
    """Loss, perplexity and greedy decoding of an encode / decode model (see the module docstring).
    Subclasses set ``self.config``, ``self.pad_id`` and ``self.eou_id``."""

    config: GeneratorConfig
    pad_id: int
    eou_id: int
    needs_parses = False  # True: batches must carry `context_head`

    def _add_embeddings(self, config: GeneratorConfig, pad_id: int, eou_id: int) -> None:
        """The settings and the input embeddings every generator has: words (the output projection is
        tied to them), positions, and turns (none with ``turn_embeddings = False``)."""
        self.config, self.pad_id, self.eou_id = config, pad_id, eou_id
        d = config.d_model
        self.embed = nn.Embedding(config.vocab_size, d, padding_idx=pad_id)
        self.position = nn.Embedding(config.max_positions, d)
        self.turn = nn.Embedding(config.max_turns + 1, d, padding_idx=0) if config.turn_embeddings else None
        self.dropout = nn.Dropout(config.dropout)

    def _init_word_embeddings(self) -> None:
        """N(0, 1/d) with [PAD] at zero: scaled by sqrt(d) the inputs start at unit scale, and the tied
        output at small logits; the turn embeddings drawn again at ``turn_init_std`` where it is not 1. Called once
        the layers are built, so their seeded initialisation is unchanged."""
        nn.init.normal_(self.embed.weight, std=self.config.d_model ** -0.5)
        with torch.no_grad():
            self.embed.weight[self.pad_id].zero_()
            if self.turn is not None and self.config.turn_init_std != 1.0:
                self.turn.weight.normal_(std=self.config.turn_init_std)
                self.turn.weight[0].zero_()  # padding

    def embed_tokens(self, ids: torch.Tensor, positions: torch.Tensor | None = None,
                     turns: torch.Tensor | None = None) -> torch.Tensor:
        """dropout(E(ids) sqrt(d) + PE(positions) + TE(turns)); a term is left out when not given (or, for
        turns, when the model has no turn embeddings). Each model checks its own positions' range."""
        x = self.embed(ids) * math.sqrt(self.config.d_model)
        if positions is not None:
            x = x + self.position(positions)
        if self.turn is not None and turns is not None:
            x = x + self.turn(turns.clamp(max=self.config.max_turns))
        return self.dropout(x)

    def config_dict(self) -> dict:
        return {"generator": self.config.to_dict(), "pad_id": self.pad_id, "eou_id": self.eou_id}

    def unsaid_ids(self) -> list[int]:
        """The tokens a reply never holds, kept from every decoding step: [PAD], [SOU] and the speaker tokens (every
        special token of the vocabulary, which comes first in it, but [EOU], which ends a reply, and [UNK], which stands
        for a word). A small model could say a speaker token fifty times, decoded as an empty reply."""
        return sorted({self.pad_id, *(i for i, token in enumerate(SPECIALS) if token not in (EOU, UNK))})

    def context_window(self, response_words: int) -> int | None:
        """The most context tokens the model reads beside a response of `response_words` words (its position table
        counts them); None: no such limit (a model whose positions count within an utterance)."""
        return None

    def fit_context(self, instance: GenerationInstance) -> GenerationInstance:
        """`instance` with the oldest utterances of its context left out until the rest fit `context_window`
        (beside its response or the longest the model makes); the newest alone over it keeps its first words that fit.
        The same instance where it fits."""
        window = self.context_window(max(len(instance.response.words), self.config.max_response_words))
        if window is None or not instance.context:
            return instance
        extra = 2 + int(self.config.speaker_tokens)  # [SOU] (speaker) ... [EOU]
        kept, room = [], window
        for utterance in reversed(instance.context):
            if len(utterance.words) + extra > room:
                break
            kept.append(utterance)
            room -= len(utterance.words) + extra
        if len(kept) == len(instance.context):
            return instance
        if not kept:
            if window <= extra:
                raise ValueError(f"model_config.max_positions = {self.config.max_positions} leaves no room for the context "
                                 f"beside a response of {max(len(instance.response.words), self.config.max_response_words)} words")
            newest = instance.context[-1]
            kept = [Utterance(newest.words[: window - extra], newest.role)]
        return replace(instance, context=tuple(reversed(kept)))

    def highest_turn(self, instance: GenerationInstance) -> int:
        """The largest turn `instance` asks of the turn embeddings: here turns count back from the response, so its
        context's length."""
        return len(instance.context)

    def turns_capped(self, instance: GenerationInstance) -> bool:
        """Whether turns of `instance` go past ``max_turns``, where the turn embeddings stop (those share the last)."""
        return self.turn is not None and self.highest_turn(instance) > self.config.max_turns

    def unread(self, instance: GenerationInstance) -> str | None:
        """What of `instance`'s context the model does not read as given, in words (None: nothing): what `fit_context`
        leaves out, and turns past ``max_turns``."""
        fitted, parts = self.fit_context(instance), []
        if fitted is not instance:
            newest = len(fitted.context[-1].words) < len(instance.context[-1].words)
            read = f"the first {len(fitted.context[-1].words)} words of its newest turn" if newest else \
                f"{len(fitted.context)} of the {len(instance.context)} turns it reads"
            parts.append(f"{read}, to fit model_config.max_positions = {self.config.max_positions}")
        if self.turns_capped(fitted):
            parts.append(f"its turns past the {self.config.max_turns}th as the {self.config.max_turns}th (model_config.max_turns: "
                         "the turn embeddings stop there)")
        return "; ".join(parts) or None

    def encode(self, batch: GenerationBatch):
        raise NotImplementedError

    def decode_states(self, state, response_in: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        raise NotImplementedError

    def decode(self, state, response_in: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        """Next-token logits (B, Lr, V), or with ``last_only`` (B, V): the states times the tied embeddings."""
        return self.decode_states(state, response_in, last_only) @ self.embed.weight.T

    def stepper(self, state) -> "WholeSteps":
        """What decoding calls at each step: the response so far [B, T] (one token longer at each call) -> the next
        token's logits [B, V]; here `decode` over the whole response, which a model may do faster (keeping what it
        read: `reorder` then tells it which rows a beam search kept)."""
        return WholeSteps(self, state)

    def forward(self, batch: GenerationBatch) -> torch.Tensor:
        return self.decode(self.encode(batch), batch.response_in)

    def target_logits(self, batch: GenerationBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits (N, V), targets (N,)) of the N response positions that have a target: padding and the
        given speaker token are never projected onto the vocabulary (most of a padded batch's rows)."""
        states = self.decode_states(self.encode(batch), batch.response_in)  # [B, Lr, d]
        kept = batch.response_out.ne(IGNORE)  # [B, Lr]
        return states[kept] @ self.embed.weight.T, batch.response_out[kept]

    def loss(self, batch: GenerationBatch) -> torch.Tensor:
        """Mean cross-entropy of the response tokens (speaker tokens and padding left out)."""
        return nn.functional.cross_entropy(*self.target_logits(batch))

    def negative_log_likelihood(self, batch: GenerationBatch) -> tuple[float, int]:
        """Summed NLL of the response tokens (speaker tokens and padding left out) and their count."""
        logits, targets = self.target_logits(batch)
        return float(nn.functional.cross_entropy(logits, targets, reduction="sum").detach()), len(targets)

    def _response_prefix(self, batch: GenerationBatch) -> torch.Tensor:
        """[SOU] (and the speaker token): `batch.response_in`'s first one or two tokens, as training gave them."""
        return batch.response_in[:, : 2 if self.config.speaker_tokens else 1]

    @torch.no_grad()
    def generate(self, batch: GenerationBatch, max_words: int | None = None, beam_size: int = 1) -> list[list[int]]:
        """Greedy responses (ids without the [SOU] / speaker prefix and without [EOU]), one per example;
        `beam_search` with ``beam_size > 1``."""
        if beam_size > 1:
            return self.beam_search(batch, beam_size, max_words)
        max_words = max_words or self.config.max_response_words
        state = self.encode(batch)
        ids = self._response_prefix(batch)
        prefix = ids.shape[1]
        done = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
        next_logits = self.stepper(state)
        unsaid = self.unsaid_ids()
        for _ in range(max_words + 1):
            step = next_logits(ids)
            step[:, unsaid] = float("-inf")
            token = step.argmax(-1).masked_fill(done, self.pad_id)
            ids = torch.cat([ids, token[:, None]], 1)
            done |= token.eq(self.eou_id)
            if bool(done.all()):
                break
        out = []
        for row in ids[:, prefix:].tolist():
            words = []
            for t in row:
                if t in (self.eou_id, self.pad_id):
                    break
                words.append(t)
            out.append(words)
        return out

    @torch.no_grad()
    def beam_search(self, batch: GenerationBatch, beam_size: int, max_words: int | None = None,
                    length_penalty: float = 1.0) -> list[list[int]]:
        """The best response of a beam search, one per example, in `generate`'s format.

        A hypothesis scores sum(log p) / length ** length_penalty, its length counting the [EOU]
        (0: the raw sum). At each of at most ``max_words + 1`` steps the `beam_size` best continuations
        (by summed log-probability) of the live hypotheses are kept; those ending in [EOU] leave the beam
        as finished, so a beam of 1 is greedy decoding. An example is done when no live hypothesis can
        still beat its best finished one; hypotheses still live after the last step compete as they are."""
        if beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {beam_size}")
        max_steps = (max_words or self.config.max_response_words) + 1
        prefix = self._response_prefix(batch)
        examples, device = prefix.shape[0], prefix.device
        state = repeat_state(self.encode(batch), examples, beam_size)  # row b * beam_size + j: beam j of example b
        ids = prefix.repeat_interleave(beam_size, 0)
        # float64 scores: adding a long sum does not round distinct log-probabilities into ties (beam 1 = greedy)
        scores = torch.full((examples, beam_size), float("-inf"), dtype=torch.float64, device=device)
        scores[:, 0] = 0.0  # the beams start as copies of the prefix: one live, or step 1 would pick each word beam_size times
        best_score = torch.full((examples,), float("-inf"), dtype=torch.float64, device=device)
        best_tokens = torch.full((examples, max_steps), self.pad_id, dtype=torch.long, device=device)
        best_length = torch.zeros(examples, dtype=torch.long, device=device)
        rows = torch.arange(examples, device=device)[:, None]

        def keep_better(candidate_scores, tokens, length):
            """Replace each example's best by its best candidate [B, beam] where strictly better (ties: the first found)."""
            value, beam = candidate_scores.max(1)
            better = value > best_score
            best_score[better], best_length[better] = value[better], length
            best_tokens[better, :length] = tokens[rows[:, 0], beam][better]

        next_logits = self.stepper(state)
        unsaid = self.unsaid_ids()
        for step in range(1, max_steps + 1):
            log_probs = next_logits(ids).double().log_softmax(-1)
            log_probs[:, unsaid] = float("-inf")
            vocab_size = log_probs.shape[-1]
            total = scores[:, :, None] + log_probs.view(examples, beam_size, vocab_size)
            total = total.masked_fill(~scores.isfinite()[:, :, None], float("-inf"))  # dead beams stay dead
            scores, flat = total.flatten(1).topk(beam_size, 1)
            parent, token = flat // vocab_size, flat % vocab_size
            next_logits.reorder((rows * beam_size + parent).flatten())  # each kept hypothesis continues its parent
            ids = torch.cat([ids.view(examples, beam_size, -1)[rows, parent], token[..., None]], -1)  # [B, beam, prefix + step]
            tokens, ids = ids[..., prefix.shape[1]:], ids.flatten(0, 1)
            ended = token.eq(self.eou_id) & scores.isfinite()
            keep_better(torch.where(ended, scores / step ** length_penalty, float("-inf")), tokens[..., :-1], step - 1)
            scores = scores.masked_fill(ended, float("-inf"))
            if step == max_steps:  # out of steps: the live hypotheses compete unfinished
                keep_better(scores / step ** length_penalty, tokens, step)
                break
            # log-probabilities only lower a sum S <= 0, so S / L ** penalty is at best at the shortest or longest length left
            bound = torch.maximum(scores / (step + 1) ** length_penalty, scores / max_steps ** length_penalty).amax(1)
            done = bound <= best_score  # also when no hypothesis is live (bound -inf)
            scores = scores.masked_fill(done[:, None], float("-inf"))  # a done example is settled, whatever the others do
            if bool(done.all()):
                break
        return [row[:n] for row, n in zip(best_tokens.tolist(), best_length.tolist())]

    def predict(self, batch: GenerationBatch, beam_size: int = 1) -> tuple[list[list[int]], list[list[int]]]:
        """(reference ids, generated ids: greedy, or beam search with ``beam_size > 1``) of every example of the batch."""
        references = [[t for t in row if t not in (IGNORE, self.eou_id)] for row in batch.response_out.tolist()]
        return references, self.generate(batch, beam_size=beam_size)


class WholeSteps:
    """`GeneratorBase.stepper`: every step decodes the whole response again, so nothing is kept to reorder."""

    def __init__(self, model: GeneratorBase, state):
        self.model, self.state = model, state

    def __call__(self, response_in: torch.Tensor) -> torch.Tensor:
        return self.model.decode(self.state, response_in, last_only=True)

    def reorder(self, rows: torch.Tensor) -> None:
        """The rows the next step continues, each from the row it names (beam search); nothing kept here."""


def repeat_state(state, batch_size: int, times: int):
    """`state` with every tensor's row repeated `times` times in place (row b -> rows b * times ...
    b * times + times - 1), through tuples, lists, dicts and dataclasses; anything else (None, numbers) as is.
    A tensor without the batch on dim 0 is an error: repeating it would silently pair rows with the wrong example."""
    if isinstance(state, torch.Tensor):
        if state.dim() == 0 or state.shape[0] != batch_size:
            raise ValueError(f"a decoder state tensor of shape {tuple(state.shape)} does not have the batch ({batch_size}) on dim 0")
        return state.repeat_interleave(times, 0)
    again = lambda value: repeat_state(value, batch_size, times)  # noqa: E731
    if is_dataclass(state) and not isinstance(state, type):
        return replace(state, **{f.name: again(getattr(state, f.name)) for f in fields(state) if f.init})
    if isinstance(state, tuple):
        items = [again(value) for value in state]
        return type(state)(*items) if hasattr(state, "_fields") else tuple(items)  # a namedtuple keeps its type
    if isinstance(state, list):
        return [again(value) for value in state]
    if isinstance(state, dict):
        return {key: again(value) for key, value in state.items()}
    return state


__all__ = ["IGNORE", "GenerationBatch", "GeneratorBase", "GeneratorConfig", "repeat_state"]
