"""GPT-2-style decoder-only response generator trained from scratch: the PHAED paper's DialoGPT row
(Zhang et al., 2020, retrained on the same data with speaker tokens).

Each example is one sequence ``context ; response_in``: the context's tokens without its padding
(``[SOU] [SPEAKER-Q|R]? words [EOU]`` per utterance, oldest first), then the response's input
(``[SOU] [SPEAKER-R]? words``). Every token gets its word embedding (scaled by sqrt(d), as in the
encoder-decoder baseline), a learned absolute position (its place in the packed sequence) and, with
``turn_embeddings``, its utterance's turn distance (1 = the newest context utterance; the response
gets none, like the baseline's decoder). Pre-norm layers with causal self-attention read the whole
sequence; the output projection is tied to the word embeddings. Logits are returned for the response
positions only, so the inherited loss, perplexity and greedy decoding score the response alone.

Padding: each row is re-packed as ``[context without its padding ; response_in]`` and right-padded to
the batch's longest; with causal attention no real token sees a later pad, so a padded example gives
the logits it gives alone. Decoding keeps every layer's keys and values (`CachedSteps`, reordered as a beam search
keeps its hypotheses): each step reads the newest token alone, where `decode` reruns the whole sequence (equal
logits and replies, tested).

Size: ``layers`` counts decoder layers. The encoder-decoder `TransformerGenerator` with ``layers = N``
has N encoder and N decoder layers (with cross-attention), so a recipe comparing "at equal size"
gives this model ``layers = 2N``: as many layers, about 14% fewer layer parameters when ``ff = 4 d``
(no cross-attention). PHAED instead widened DialoGPT (d = 768, 12 heads) to match its parameter count.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from turnformer.models.generator_base import IGNORE, GenerationBatch, GeneratorBase, GeneratorConfig
from turnformer.models.transformer_generator import EncoderLayer, LayerStack
from turnformer.structure.masks import CAUSAL
from turnformer.structure.packing import sequence_meta


class GPT2Generator(GeneratorBase):
    config_class = GeneratorConfig

    def __init__(self, config: GeneratorConfig, pad_id: int = 0, eou_id: int = 3):
        super().__init__()
        self._add_embeddings(config, pad_id, eou_id)
        d = config.d_model
        # `layers.layers` and `layers.norm`: nn.TransformerEncoder's parameter names, which checkpoints use
        self.layers = LayerStack(EncoderLayer(d, config.heads, config.ff, config.dropout, activation=F.gelu), config.layers, d)
        self._init_word_embeddings()

    def encode(self, batch: GenerationBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The context as it is (decoder-only: nothing to encode yet): ids, turn distances, lengths."""
        return batch.context, batch.context_turn, batch.context.ne(self.pad_id).sum(1)

    def context_window(self, response_words: int) -> int:
        """The positions left beside a response of `response_words` words ([SOU] (speaker) words: what decoding reads)."""
        return self.config.max_positions - response_words - 2

    def pack(self, state, response_in: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each row as ``[its context tokens ; response_in]``, right-padded: (ids, turns, response start)."""
        context, turns, lengths = state
        length = int(lengths.max()) + response_in.shape[1]
        if length > self.config.max_positions:
            raise ValueError(f"a context + response of {length} tokens is over max_positions = {self.config.max_positions}")
        column = torch.arange(length, device=response_in.device)[None]
        start = lengths[:, None]
        in_context, in_response = column < start, (column - start) < response_in.shape[1]
        from_context = lambda t: t.gather(1, column.clamp(max=t.shape[1] - 1).expand(len(t), -1))  # noqa: E731
        from_response = response_in.gather(1, (column - start).clamp(0, response_in.shape[1] - 1))
        ids = torch.where(in_context, from_context(context), torch.where(in_response, from_response, self.pad_id))
        return ids, torch.where(in_context, from_context(turns), 0), lengths

    def embed_packed(self, state, response_in: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The rows of `pack` embedded [B, L, d], their causal mask [B, L, L], their ids [B, L] and response starts [B]."""
        ids, turns, start = self.pack(state, response_in)
        x = self.embed_tokens(ids, torch.arange(ids.shape[1], device=ids.device), turns)
        sequence = sequence_meta(ids.eq(self.pad_id))
        return x, CAUSAL(sequence, sequence), ids, start

    def decode_states(self, state, response_in: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        x, causal, ids, start = self.embed_packed(state, response_in)
        for layer in self.layers.layers:
            x, _ = layer(x, causal)
        hidden = self.layers.norm(x)
        steps = torch.arange(response_in.shape[1], device=ids.device)
        steps = steps[-1:] if last_only else steps
        rows = hidden.gather(1, (start[:, None] + steps)[:, :, None].expand(-1, -1, hidden.shape[-1]))  # the response's positions
        return rows[:, 0] if last_only else rows

    def stepper(self, state) -> "CachedSteps":
        return CachedSteps(self, state)


class CachedSteps:
    """Decoding's next-token logits with a key/value cache: the first call reads the context and the response
    prefix as `decode` does, keeping each layer's keys and values; every later call reads only the token added since,
    at its own position, attending to the kept keys (the pads between a shorter row's tokens and the new ones are
    masked, as a pad always is). The logits equal ``decode(state, response_in, last_only=True)`` (tested)."""

    def __init__(self, model: GPT2Generator, state):
        self.model, self.state = model, state
        self.past: list[tuple[torch.Tensor, torch.Tensor]] = []  # per layer: keys and values [B, K, d]
        self.visible = self.position = None  # [B, K]: keys that are not padding; [B]: the next token's position
        self.read = 0  # response tokens read

    def __call__(self, response_in: torch.Tensor) -> torch.Tensor:
        m = self.model
        if not self.past:
            x, mask, ids, start = m.embed_packed(self.state, response_in)
            self.visible, self.position = ids.ne(m.pad_id), start + response_in.shape[1]
            last = (self.position - 1)[:, None, None].expand(-1, 1, x.shape[-1])
        else:
            if response_in.shape[1] != self.read + 1:
                raise ValueError(f"a cached decoding step takes the response one token longer ({self.read + 1}), "
                                 f"got {response_in.shape[1]}")
            if int(self.position.max()) >= m.config.max_positions:
                raise ValueError(f"a context + response of {int(self.position.max()) + 1} tokens is over "
                                 f"max_positions = {m.config.max_positions}")
            token = response_in[:, -1:]  # [B, 1]
            x = m.embed_tokens(token, self.position[:, None], torch.zeros_like(token))
            self.visible = torch.cat([self.visible, token.ne(m.pad_id)], 1)
            mask, last = self.visible[:, None, :], None  # the new token sees every earlier real token and itself
            self.position = self.position + 1
        for i, layer in enumerate(m.layers.layers):
            x, kept = layer.step(x, mask, self.past[i] if i < len(self.past) else None)
            self.past[i:i + 1] = [kept]
        self.read = response_in.shape[1]
        hidden = m.layers.norm(x if last is None else x.gather(1, last))[:, 0]  # [B, d]
        return hidden @ m.embed.weight.T

    def reorder(self, rows: torch.Tensor) -> None:
        """Row i of the next step continues row ``rows[i]`` of this one (beam search keeps some hypotheses twice)."""
        self.past = [(key[rows], value[rows]) for key, value in self.past]
        self.visible, self.position = self.visible[rows], self.position[rows]


__all__ = ["IGNORE", "CachedSteps", "GPT2Generator", "GenerationBatch", "GeneratorConfig"]
