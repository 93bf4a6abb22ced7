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
the logits it gives alone. Decoding reruns the whole sequence at every step (no key/value cache: the
sequences are short, and it keeps the model one forward pass).

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

    def decode_states(self, state, response_in: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        ids, turns, start = self.pack(state, response_in)
        x = self.embed_tokens(ids, torch.arange(ids.shape[1], device=ids.device), turns)
        sequence = sequence_meta(ids.eq(self.pad_id))
        causal = CAUSAL(sequence, sequence)  # [B, L, L]
        for layer in self.layers.layers:
            x, _ = layer(x, causal)
        hidden = self.layers.norm(x)
        steps = torch.arange(response_in.shape[1], device=ids.device)
        steps = steps[-1:] if last_only else steps
        rows = hidden.gather(1, (start[:, None] + steps)[:, :, None].expand(-1, -1, hidden.shape[-1]))  # the response's positions
        return rows[:, 0] if last_only else rows


__all__ = ["IGNORE", "GPT2Generator", "GenerationBatch", "GeneratorConfig"]
