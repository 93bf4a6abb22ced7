"""Transformer encoder-decoder response generator: the DRA and PHAED papers' Transformer baseline.

The context (at most 4 utterances, oldest first, each ``[SOU] [SPEAKER-Q|R]? words [EOU]``; see
`turnformer.tasks.generation`) is one flat sequence for the encoder; every token gets its word
embedding (scaled by sqrt(d)), a position embedding (position in the flat context) and, as in PHAED,
a turn embedding: how many utterances back from the response its utterance is (1 = the newest,
capped at ``max_turns``). The decoder reads the response, causally masked, and cross-attends to the
encoded context; the output projection is tied to the word embeddings. Greedy decoding by `generate`.
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
            raise ValueError(f"unknown generator settings {sorted(unknown)}; known: {sorted(known)}")
        return cls(**data)


@dataclass
class GenerationBatch:
    """Padded with 0 ([PAD]). `context_turn`: 1 = newest context utterance, 0 on padding.
    `response_in` starts with [SOU] (and the speaker token); `response_out` is it shifted by one, ending
    with [EOU], with IGNORE where nothing is to be predicted (padding, the given speaker token)."""

    context: torch.Tensor  # (B, Lc)
    context_turn: torch.Tensor  # (B, Lc)
    response_in: torch.Tensor  # (B, Lr)
    response_out: torch.Tensor  # (B, Lr)

    def to(self, device) -> "GenerationBatch":
        return GenerationBatch(*(t.to(device) for t in (self.context, self.context_turn, self.response_in, self.response_out)))

    def __len__(self) -> int:
        return self.context.shape[0]


class TransformerGenerator(nn.Module):
    def __init__(self, config: GeneratorConfig, pad_id: int = 0, eou_id: int = 3):
        super().__init__()
        self.config, self.pad_id, self.eou_id = config, pad_id, eou_id
        d = config.d_model
        self.embed = nn.Embedding(config.vocab_size, d, padding_idx=pad_id)
        self.position = nn.Embedding(config.max_positions, d)
        self.turn = nn.Embedding(config.max_turns + 1, d, padding_idx=0) if config.turn_embeddings else None
        self.dropout = nn.Dropout(config.dropout)

        def layer(kind):
            return kind(d, config.heads, config.ff, config.dropout, batch_first=True, norm_first=True)

        self.encoder = nn.TransformerEncoder(layer(nn.TransformerEncoderLayer), config.layers, norm=nn.LayerNorm(d),
                                             enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(layer(nn.TransformerDecoderLayer), config.layers, norm=nn.LayerNorm(d))
        nn.init.normal_(self.embed.weight, std=d ** -0.5)
        with torch.no_grad():
            self.embed.weight[pad_id].zero_()

    def config_dict(self) -> dict:
        return {"generator": self.config.to_dict(), "pad_id": self.pad_id, "eou_id": self.eou_id}

    def _embed(self, ids: torch.Tensor, turn: torch.Tensor | None = None) -> torch.Tensor:
        if ids.shape[1] > self.config.max_positions:
            raise ValueError(f"a sequence of {ids.shape[1]} tokens is over max_positions = {self.config.max_positions}")
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.embed(ids) * math.sqrt(self.config.d_model) + self.position(positions)
        if self.turn is not None and turn is not None:
            x = x + self.turn(turn.clamp(max=self.config.max_turns))
        return self.dropout(x)

    def encode(self, batch: GenerationBatch) -> tuple[torch.Tensor, torch.Tensor]:
        padding = batch.context.eq(self.pad_id)
        return self.encoder(self._embed(batch.context, batch.context_turn), src_key_padding_mask=padding), padding

    def decode(self, memory: torch.Tensor, memory_padding: torch.Tensor, response_in: torch.Tensor,
               last_only: bool = False) -> torch.Tensor:
        """Next-token logits (B, Lr, V) of every response prefix; with `last_only`, (B, V) of the whole one."""
        length = response_in.shape[1]
        causal = torch.triu(torch.ones(length, length, dtype=torch.bool, device=response_in.device), 1)
        hidden = self.decoder(self._embed(response_in), memory, tgt_mask=causal,
                              tgt_key_padding_mask=response_in.eq(self.pad_id), memory_key_padding_mask=memory_padding)
        return (hidden[:, -1] if last_only else hidden) @ self.embed.weight.T  # decoding needs only the last row

    def forward(self, batch: GenerationBatch) -> torch.Tensor:
        memory, padding = self.encode(batch)
        return self.decode(memory, padding, batch.response_in)

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
        memory, padding = self.encode(batch)
        prefix = 2 if self.config.speaker_tokens else 1
        ids = batch.response_in[:, :prefix]
        done = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
        for _ in range(max_words + 1):
            step = self.decode(memory, padding, ids, last_only=True)
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


__all__ = ["IGNORE", "GenerationBatch", "GeneratorConfig", "TransformerGenerator"]
