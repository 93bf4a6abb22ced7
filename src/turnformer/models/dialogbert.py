"""DialogBERT (Gu et al. 2021), trained from scratch as in the DRA paper, with or without DRA.

Hierarchical encoder, then the `TransformerGenerator` decoder (same embeddings, causal decoder with
position embeddings, tied output):

1. utterance encoder: ``layers`` pre-norm layers over the flat context whose attention never leaves a
   token's utterance (`SAME_UTTERANCE`), the same as encoding each utterance on its own without
   reshaping; input = word embedding + position within the utterance. With ``dra`` the mask is DRA's
   `DEPENDENCY` instead (which also stays inside the utterance) and, as the paper does, there is no
   position embedding.
2. an utterance's vector is its [SOU] token's state (DialogBERT's [CLS]);
3. context encoder: ``context_layers`` layers (default ``layers``) over the utterance vectors plus their
   turn embedding (how many utterances back; DialogBERT's utterance-position embedding; off with
   ``turn_embeddings = False``, an order-blind ablation).
4. the decoder cross-attends to the context encoder's utterance states, as DialogBERT's decoder
   does; ``token_memory = True`` also lets it see the utterance encoder's token states.

DialogBERT's pre-training objectives (masked utterance regression, utterance order ranking) are left
out: the DRA paper compares the models on generation alone. Utterance slots in the context encoder
are newest first (slot 0 = the latest utterance).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from turnformer.models.dra import MaskedEncoderLayer, context_meta
from turnformer.models.generator_base import IGNORE, GenerationBatch, GeneratorConfig
from turnformer.models.transformer_generator import TransformerGenerator
from turnformer.structure.masks import DEPENDENCY, GLOBAL, SAME_UTTERANCE
from turnformer.structure.packing import sequence_meta


@dataclass
class DialogBERTConfig(GeneratorConfig):
    dra: bool = False  # the utterance encoder under the dependency mask, without position embeddings
    context_layers: int | None = None  # None: as many as `layers`
    token_memory: bool = False  # the decoder also attends to every context token's state

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.context_layers is not None and self.context_layers < 1:
            raise ValueError(f"context_layers must be >= 1, got {self.context_layers}")


class DialogBERTGenerator(TransformerGenerator):
    config_class = DialogBERTConfig

    def __init__(self, config: DialogBERTConfig, pad_id: int = 0, eou_id: int = 3):
        super().__init__(config, pad_id, eou_id)
        d = config.d_model

        def layers(n):
            return nn.ModuleList(MaskedEncoderLayer(d, config.heads, config.ff, config.dropout) for _ in range(n))

        self.encoder, self.encoder_norm = layers(config.layers), nn.LayerNorm(d)  # the utterance encoder
        self.context_encoder, self.context_norm = layers(config.context_layers or config.layers), nn.LayerNorm(d)

    @property
    def needs_parses(self) -> bool:
        return self.config.dra

    def context_window(self, response_words: int) -> None:
        """No limit: positions count within an utterance, the context encoder reads one vector per utterance."""
        return None

    def _encode(self, batch: GenerationBatch, return_attention: bool = False) -> dict:
        if self.config.dra and batch.context_head is None:
            raise ValueError("dialogbert-dra reads dependency parses: build batches with encode_instances (no context_head)")
        meta = context_meta(batch, self.pad_id)
        # positions within the utterance (none with DRA); turns enter at the context encoder
        x = self.embed_tokens(batch.context, None if self.config.dra else meta.position.clamp(max=self.config.max_positions - 1))
        mask = (DEPENDENCY if self.config.dra else SAME_UTTERANCE)(meta, meta)
        token_attention = []
        for layer in self.encoder:
            x, probs = layer(x, mask, return_attention)
            token_attention.append(probs)
        tokens = self.encoder_norm(x)

        # [B, U, L]: which column holds utterance slot u's [SOU] (slot u = turn distance u + 1)
        turns = torch.arange(1, int(batch.context_turn.max()) + 1, device=x.device)
        opens = meta.is_special & meta.position.eq(0)
        select = opens[:, None, :] & batch.context_turn[:, None, :].eq(turns[None, :, None])
        present = select.any(-1)  # [B, U]
        y = select.to(tokens.dtype) @ tokens
        if self.turn is not None:
            y = y + self.turn(turns.clamp(max=self.config.max_turns) * present)
        y = self.dropout(y)
        slots = sequence_meta(~present, utterance_per_token=True)
        every_slot, context_attention = GLOBAL(slots, slots), []  # [B, U, U]
        for layer in self.context_encoder:
            y, probs = layer(y, every_slot, return_attention)
            context_attention.append(probs)
        memory, padding = self.context_norm(y), ~present
        if self.config.token_memory:
            memory, padding = torch.cat([memory, tokens], 1), torch.cat([padding, meta.is_padding], 1)
        return {"memory": memory, "padding": padding, "tokens": token_attention, "utterances": context_attention}

    def encode(self, batch: GenerationBatch) -> tuple[torch.Tensor, torch.Tensor]:
        state = self._encode(batch)
        return state["memory"], state["padding"]

    @torch.no_grad()
    def encoder_attention(self, batch: GenerationBatch, level: str = "tokens") -> list[torch.Tensor]:
        """Each layer's attention probabilities: the utterance encoder's over tokens [B, H, L, L]
        (``level = "tokens"``) or the context encoder's over utterance slots [B, H, U, U] (``"utterances"``)."""
        if level not in ("tokens", "utterances"):
            raise ValueError(f"level is 'tokens' or 'utterances', got {level!r}")
        return self._encode(batch, return_attention=True)[level]


__all__ = ["IGNORE", "DialogBERTConfig", "DialogBERTGenerator"]
