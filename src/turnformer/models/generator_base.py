"""What every response generator shares: its settings, its batch, and the teacher-forced loss,
perplexity and greedy decoding written once on top of two methods a model defines:

- ``encode(batch) -> state``: whatever the decoder needs from the context (encoder states, padding,
  cached memories...);
- ``decode(state, response_in, last_only=False) -> logits``: next-token logits (B, Lr, V) of every
  prefix of ``response_in``, or with ``last_only`` (B, V) of the whole of it (what greedy decoding needs).

A model's settings are a `GeneratorConfig`, or a subclass adding its own fields.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import torch
from torch import nn

IGNORE = -100  # target id left out of the loss and of perplexity


@dataclass
class GeneratorConfig:
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
    max_response_words: int = 50

    def __post_init__(self) -> None:
        if self.d_model % self.heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by heads ({self.heads})")
        if min(self.vocab_size, self.d_model, self.heads, self.layers, self.ff, self.max_positions, self.max_turns) < 1:
            raise ValueError(f"every size must be >= 1: {self}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "GeneratorConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown {cls.__name__} settings {sorted(unknown)}; known: {sorted(known)}")
        return cls(**data)


@dataclass
class GenerationBatch:
    """Padded with 0 ([PAD]). `context_turn`: 1 = newest context utterance, 0 on padding.
    `response_in` starts with [SOU] (and the speaker token); `response_out` is it shifted by one, ending
    with [EOU], with IGNORE where nothing is to be predicted (padding, the given speaker token).
    `context_role`: 1 on the tokens of a query (an utterance of another speaker than the response's),
    2 on those of an earlier response of the same speaker, 0 on padding (PHAED's Q / R).
    `context_head` (only for models that read dependency parses): the column of each context token's
    syntactic governor in the same row, -1 for roots, special tokens and padding."""

    context: torch.Tensor  # (B, Lc)
    context_turn: torch.Tensor  # (B, Lc)
    response_in: torch.Tensor  # (B, Lr)
    response_out: torch.Tensor  # (B, Lr)
    context_role: torch.Tensor | None = None  # (B, Lc)
    context_head: torch.Tensor | None = None  # (B, Lc)

    def to(self, device) -> "GenerationBatch":
        return GenerationBatch(*(None if t is None else t.to(device) for t in (
            self.context, self.context_turn, self.response_in, self.response_out, self.context_role, self.context_head)))

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
        output at small logits. Called once the layers are built, so their seeded initialisation is unchanged."""
        nn.init.normal_(self.embed.weight, std=self.config.d_model ** -0.5)
        with torch.no_grad():
            self.embed.weight[self.pad_id].zero_()

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

    def encode(self, batch: GenerationBatch):
        raise NotImplementedError

    def decode(self, state, response_in: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, batch: GenerationBatch) -> torch.Tensor:
        return self.decode(self.encode(batch), batch.response_in)

    def loss(self, batch: GenerationBatch) -> torch.Tensor:
        logits = self(batch)
        return nn.functional.cross_entropy(logits.flatten(0, 1), batch.response_out.flatten(), ignore_index=IGNORE)

    def negative_log_likelihood(self, batch: GenerationBatch) -> tuple[float, int]:
        """Summed NLL of the response tokens (speaker tokens and padding left out) and their count."""
        logits = self(batch)
        nll = nn.functional.cross_entropy(logits.flatten(0, 1), batch.response_out.flatten(), ignore_index=IGNORE, reduction="sum")
        return float(nll.detach()), int(batch.response_out.ne(IGNORE).sum())

    @torch.no_grad()
    def generate(self, batch: GenerationBatch, max_words: int | None = None) -> list[list[int]]:
        """Greedy responses (ids without the [SOU] / speaker prefix and without [EOU]), one per example.
        The prefix is `batch.response_in`'s first one or two tokens, as training gave them."""
        max_words = max_words or self.config.max_response_words
        state = self.encode(batch)
        prefix = 2 if self.config.speaker_tokens else 1
        ids = batch.response_in[:, :prefix]
        done = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
        for _ in range(max_words + 1):
            step = self.decode(state, ids, last_only=True)
            step[:, self.pad_id] = float("-inf")
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

    def predict(self, batch: GenerationBatch) -> tuple[list[list[int]], list[list[int]]]:
        """(reference ids, greedy ids) of every example of the batch."""
        references = [[t for t in row if t not in (IGNORE, self.eou_id)] for row in batch.response_out.tolist()]
        return references, self.generate(batch)


def causal_mask(length: int, device) -> torch.Tensor:
    """(L, L) bool, True above the diagonal: the future a decoder position may not see (nn.Transformer's convention)."""
    return torch.triu(torch.ones(length, length, dtype=torch.bool, device=device), 1)


__all__ = ["IGNORE", "GenerationBatch", "GeneratorBase", "GeneratorConfig", "causal_mask"]
