"""Transformer encoder-decoder response generator: the DRA and PHAED papers' Transformer baseline.

The context (at most 4 utterances, oldest first, each ``[SOU] [SPEAKER-Q|R]? words [EOU]``; see
`turnformer.tasks.generation`) is one flat sequence for the encoder; every token gets its word
embedding (scaled by sqrt(d)), a position embedding (position in the flat context) and, as in PHAED,
a turn embedding: how many utterances back from the response its utterance is (1 = the newest,
capped at ``max_turns``). The decoder reads the response, causally masked, and cross-attends to the
encoded context; the output projection is tied to the word embeddings. Greedy decoding by `generate`,
beam search by `beam_search`.
"""

from __future__ import annotations

import torch
from torch import nn

from turnformer.models.generator_base import IGNORE, GenerationBatch, GeneratorBase, GeneratorConfig, causal_mask


class TransformerGenerator(GeneratorBase):
    config_class = GeneratorConfig

    def __init__(self, config: GeneratorConfig, pad_id: int = 0, eou_id: int = 3):
        super().__init__()
        self._add_embeddings(config, pad_id, eou_id)
        d = config.d_model

        def layer(kind):
            return kind(d, config.heads, config.ff, config.dropout, batch_first=True, norm_first=True)

        self.encoder = nn.TransformerEncoder(layer(nn.TransformerEncoderLayer), config.layers, norm=nn.LayerNorm(d),
                                             enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(layer(nn.TransformerDecoderLayer), config.layers, norm=nn.LayerNorm(d))
        self._init_word_embeddings()

    def _embed(self, ids: torch.Tensor, turn: torch.Tensor | None = None) -> torch.Tensor:
        if ids.shape[1] > self.config.max_positions:
            raise ValueError(f"a sequence of {ids.shape[1]} tokens is over max_positions = {self.config.max_positions}")
        return self.embed_tokens(ids, torch.arange(ids.shape[1], device=ids.device), turn)

    def encode(self, batch: GenerationBatch) -> tuple[torch.Tensor, torch.Tensor]:
        padding = batch.context.eq(self.pad_id)
        return self.encoder(self._embed(batch.context, batch.context_turn), src_key_padding_mask=padding), padding

    @torch.no_grad()
    def encoder_attention(self, batch: GenerationBatch) -> list[torch.Tensor]:
        """Each encoder layer's attention probabilities [B, H, L, L] (for plots; the forward pass does not keep them)."""
        padding = batch.context.eq(self.pad_id)
        x, out = self._embed(batch.context, batch.context_turn), []
        for layer in self.encoder.layers:  # pre-norm: the attention reads norm1 of the layer's input
            h = layer.norm1(x)
            out.append(layer.self_attn(h, h, h, key_padding_mask=padding, need_weights=True, average_attn_weights=False)[1])
            x = layer(x, src_key_padding_mask=padding)
        return out

    def decode(self, state, response_in: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        memory, memory_padding = state
        hidden = self.decoder(self._embed(response_in), memory, tgt_mask=causal_mask(response_in.shape[1], response_in.device),
                              tgt_key_padding_mask=response_in.eq(self.pad_id), memory_key_padding_mask=memory_padding)
        return (hidden[:, -1] if last_only else hidden) @ self.embed.weight.T  # decoding needs only the last row


__all__ = ["IGNORE", "GenerationBatch", "GeneratorConfig", "TransformerGenerator"]
