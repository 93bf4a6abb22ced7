"""MDFN: Multi-turn Dialogue Fusion Network for response selection (Liu et al., AAAI 2021), its
plain-encoder baseline and the paper's ablations, as one configurable model.

A context and one candidate response go through a pretrained encoder as one sequence,
``[CLS] u_1 [SEP] u_2 [SEP] ... u_n [SEP] response [SEP]`` (the response is the last turn; at most
``max_turns`` turns, truncated oldest-first to ``max_length`` tokens). On the encoder output E:

1. Decoupling (equation 1): four masked multi-head attention channels, each a full-width attention
   module with its own projections, dropout, residual and LayerNorm (as the official code): M1 same
   utterance, M2 other utterances, M3 same speaker, M4 other speakers. The masks come from the
   structure layer (`SAME_UTTERANCE`, `OTHER_UTTERANCE`, `SPEAKER`, `LISTENER`), built once per
   forward; speakers come from the data (MuTual's ``m`` / ``f``). A token with no visible key (M2 in
   a one-turn sequence) attends to nothing (the project-wide policy): the residual carries E on.
2. Fusing (equation 2): per channel a gate P = sigmoid(FC([ReLU(FC([E, C, E-C, E*C])), ReLU(FC([E, C', E-C', E*C']))]))
   and C_u = P * C1 + (1 - P) * C2 (utterance-aware), C_s likewise from C3, C4 (speaker-aware).
3. Utterance vectors: max-pooling of each channel over the tokens of each turn ([CLS] belongs to the
   first turn, every [SEP] to the turn it closes, as in the official code).
4. Dialogue vectors: a BiGRU per channel over the turn vectors, its output at the last turn
   ([forward; backward] state there), initial state zero (the official code draws it at random,
   which makes scores non-deterministic), then v = tanh(W [v_u; v_s] + b), dropout and a linear score.

Variants (model ids as the recipes name them, set by `MDFN_VARIANTS`): ``plain-encoder`` scores the
[CLS] state alone (dropout, dense + tanh, dropout, linear); ``mdfn-ua-only`` / ``mdfn-sa-only`` keep one
channel; ``mdfn-maxpool`` / ``mdfn-meanpool`` replace the BiGRU by max / mean pooling over the turn
vectors; ``mdfn-linear-fusion`` replaces each gate by a linear layer over [C1; C2] (the paper's
"-Gate" of Table 7).

Training objective: ``choice`` (MuTual: softmax over an item's candidates, cross entropy on the
correct one; with several correct ones the loss averages over them) or ``binary`` (Ubuntu, Douban:
a sigmoid per candidate).
"""

from __future__ import annotations

from dataclasses import dataclass
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from turnformer.backbones.loading import freeze_lower_layers, load_auto_encoder
from turnformer.models.config_checks import ModelConfig, check_config
from turnformer.structure import LISTENER, OTHER_UTTERANCE, SAME_UTTERANCE, SPEAKER, MultiHeadAttention, TokenMeta
from turnformer.structure.attention import inlined_names, keep_checkpoint_names

MDFN_VARIANTS: dict[str, dict] = {
    "mdfn": {},
    "plain-encoder": {"channels": "none"},
    "mdfn-ua-only": {"channels": "utterance"},
    "mdfn-sa-only": {"channels": "speaker"},
    "mdfn-maxpool": {"aggregation": "max"},
    "mdfn-meanpool": {"aggregation": "mean"},
    "mdfn-linear-fusion": {"fusion": "linear"},
}
CHANNEL_MASKS = {"utterance": (SAME_UTTERANCE, OTHER_UTTERANCE), "speaker": (SPEAKER, LISTENER)}
# Sequences `MDFN.predict` scores at a time: a batch of 16 MuTual items (4 candidates each) in one go, and a batch of
# items with many candidates in memory no larger.
SCORING_ROWS = 64
# Sequences whose graph a training step keeps at a time: a batch of 8 MuTual items in one go, and a batch of items with
# many candidates in its parts, each but the last recomputed in backward (the same loss and gradients).
TRAINING_ROWS = 32


@dataclass
class MDFNConfig(ModelConfig):
    channels: str = "both"  # "both", "utterance", "speaker", or "none" (the plain encoder)
    aggregation: str = "bigru"  # turn vectors -> dialogue vector: "bigru", "max", "mean"
    fusion: str = "gate"  # "gate" (equation 2) or "linear"
    objective: str = "choice"  # "choice" (softmax over an item's candidates) or "binary"
    max_length: int = 256
    max_turns: int = 20  # turns kept, the response included, newest first
    dropout: float = 0.1
    frozen_layers: int = 0  # freeze the embeddings and the lowest N encoder layers (0: fine-tune all)

    def __post_init__(self) -> None:
        check_config(self)
        checks = {"channels": ("both", "utterance", "speaker", "none"), "aggregation": ("bigru", "max", "mean"),
                  "fusion": ("gate", "linear"), "objective": ("choice", "binary")}
        for name, allowed in checks.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"model_config.{name} = {getattr(self, name)!r}; allowed: {', '.join(allowed)}")
        for name, least in (("max_length", 8), ("max_turns", 2), ("frozen_layers", 0)):
            if getattr(self, name) < least:
                raise ValueError(f"model_config.{name} = {getattr(self, name)}: at least {least}")

    @property
    def channel_names(self) -> tuple[str, ...]:
        return {"both": ("utterance", "speaker"), "none": ()}.get(self.channels, (self.channels,))


@dataclass
class SelectionBatch:
    """Items with their candidates, one packed sequence per (item, candidate).

    ``input_ids`` / ``meta`` [N, T]: the sequences; ``groups`` [G, C]: for each item, the rows of its
    candidates (-1 after a shorter item's last); ``relevance`` [G, C]: 0/1 per candidate, -1 where
    unknown (hidden answers, padding slots); ``ids``: the items' ids.
    """

    input_ids: torch.Tensor
    meta: TokenMeta
    groups: torch.Tensor
    relevance: torch.Tensor
    ids: list[str]

    def to(self, device) -> "SelectionBatch":
        return SelectionBatch(self.input_ids.to(device), self.meta.to(device), self.groups.to(device),
                              self.relevance.to(device), self.ids)

    def sequences(self, index: slice) -> "SelectionBatch":
        """The sequences ``index`` alone (to be scored; the items' groups do not apply to them)."""
        return SelectionBatch(self.input_ids[index], self.meta.rows(index), self.groups[:0], self.relevance[:0], [])


class MaskedAttentionBlock(nn.Module):
    """One decoupling channel: full-width multi-head attention under a mask, dropout, residual, LayerNorm."""

    def __init__(self, hidden: int, heads: int, dropout: float, eps: float = 1e-12):
        super().__init__()
        self.attention = MultiHeadAttention(hidden, heads, dropout)
        self.dropout = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(hidden, eps=eps)
        keep_checkpoint_names(self, inlined_names("attention"))  # checkpoints name the projections qkv and out

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x [B, T, d], mask [B, T, T] (True = visible) -> [B, T, d]."""
        attended, _ = self.attention(x, mask=mask)
        return self.norm(x + self.dropout(attended))


class GateFusion(nn.Module):
    """Equation 2: how much of each of a channel's two views to keep, judged against the encoder output."""

    def __init__(self, hidden: int):
        super().__init__()
        self.compare_first = nn.Linear(4 * hidden, hidden)
        self.compare_second = nn.Linear(4 * hidden, hidden)
        self.gate = nn.Linear(2 * hidden, hidden)

    def forward(self, original: torch.Tensor, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
        features = lambda c: torch.cat([original, c, original - c, original * c], dim=-1)  # noqa: E731
        a = F.relu(self.compare_first(features(first)))
        b = F.relu(self.compare_second(features(second)))
        keep = torch.sigmoid(self.gate(torch.cat([a, b], dim=-1)))
        return keep * first + (1 - keep) * second


class LinearFusion(nn.Module):
    """The "-Gate" ablation: one linear layer over the two views."""

    def __init__(self, hidden: int):
        super().__init__()
        self.fuse = nn.Linear(2 * hidden, hidden)

    def forward(self, original: torch.Tensor, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
        return self.fuse(torch.cat([first, second], dim=-1))


def turn_slots(meta: TokenMeta) -> tuple[torch.Tensor, torch.Tensor]:
    """Per token, the index of its turn within its sequence (0 = the oldest kept; padding gets the
    extra slot ``max turns``), and the number of turns per sequence."""
    utterance = meta.utterance.masked_fill(meta.is_padding, torch.iinfo(meta.utterance.dtype).max)
    slot = utterance - utterance.min(dim=1, keepdim=True).values
    count = slot.masked_fill(meta.is_padding, -1).max(dim=1).values + 1
    return slot.masked_fill(meta.is_padding, int(count.max())), count


def pool_turns(states: torch.Tensor, slot: torch.Tensor, n_slots: int, how: str) -> torch.Tensor:
    """[N, T, d] token states -> [N, n_slots, d] per-turn max or mean (vectorised scatter; padding,
    in the last slot, is dropped)."""
    n, _, d = states.shape
    index = slot.unsqueeze(-1).expand(-1, -1, d)
    if how == "max":
        out = states.new_full((n, n_slots + 1, d), float("-inf")).scatter_reduce(1, index, states, "amax")
    else:
        out = states.new_zeros((n, n_slots + 1, d)).scatter_reduce(1, index, states, "mean", include_self=False)
    return out[:, :n_slots]


class MDFN(nn.Module):
    def __init__(self, config: MDFNConfig, encoder: nn.Module):
        super().__init__()
        self.config, self.encoder = config, encoder
        hidden, heads = encoder.config.hidden_size, encoder.config.num_attention_heads
        eps = getattr(encoder.config, "layer_norm_eps", 1e-12)
        self.dropout = nn.Dropout(config.dropout)
        names = config.channel_names
        self.channels = nn.ModuleDict({
            f"{name}_{side}": MaskedAttentionBlock(hidden, heads, config.dropout, eps) for name in names for side in ("same", "other")
        })
        fusion = GateFusion if config.fusion == "gate" else LinearFusion
        self.fusions = nn.ModuleDict({name: fusion(hidden) for name in names})
        if config.aggregation == "bigru":
            self.grus = nn.ModuleDict({name: nn.GRU(hidden, hidden, batch_first=True, bidirectional=True) for name in names})
        width = (2 * hidden if config.aggregation == "bigru" else hidden) * len(names) if names else hidden
        self.pooler = nn.Linear(width, hidden)
        self.score = nn.Linear(hidden, 1)
        freeze_lower_layers(self.encoder, config.frozen_layers)

    def pretrained_parameters(self):
        """The encoder's parameters: `train.head_lr` gives the layers above it their own learning rate."""
        return self.encoder.parameters()

    def config_dict(self) -> dict:
        c = self.encoder.config
        return {**self.config.to_dict(), "encoder": {k: getattr(c, k, None) for k in
                                                   ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")}}

    def scores(self, batch: SelectionBatch) -> torch.Tensor:
        """[N] one score per packed (context, candidate) sequence."""
        meta = batch.meta
        encoded = self.encoder(input_ids=batch.input_ids, attention_mask=meta.is_real.long()).last_hidden_state
        if not self.config.channel_names:
            cls = self.dropout(encoded[:, 0])
            return self.score(self.dropout(torch.tanh(self.pooler(cls)))).squeeze(-1)
        slot, count = turn_slots(meta)
        n_slots = int(count.max())
        dialogue_vectors = []
        for name in self.config.channel_names:
            same_mask, other_mask = (m(meta, meta) for m in CHANNEL_MASKS[name])
            same = self.channels[f"{name}_same"](encoded, same_mask)
            other = self.channels[f"{name}_other"](encoded, other_mask)
            fused = self.fusions[name](encoded, same, other)
            turns = pool_turns(fused, slot, n_slots, "max")  # [N, turns, d]
            dialogue_vectors.append(self._aggregate(name, turns, count))
        pooled = torch.tanh(self.pooler(torch.cat(dialogue_vectors, dim=-1)))
        return self.score(self.dropout(pooled)).squeeze(-1)

    def _aggregate(self, name: str, turns: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        real = torch.arange(turns.shape[1], device=turns.device) < count.unsqueeze(1)  # [N, turns]
        if self.config.aggregation == "max":
            return turns.masked_fill(~real.unsqueeze(-1), float("-inf")).amax(dim=1)
        if self.config.aggregation == "mean":
            return turns.masked_fill(~real.unsqueeze(-1), 0.0).sum(1) / count.unsqueeze(-1)
        packed = nn.utils.rnn.pack_padded_sequence(turns.masked_fill(~real.unsqueeze(-1), 0.0), count.cpu(),
                                                   batch_first=True, enforce_sorted=False)
        out, _ = self.grus[name](packed)  # zero initial state: deterministic scores
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=turns.shape[1])
        return out[torch.arange(len(count), device=out.device), count - 1]  # the state at the last turn

    def group_scores(self, batch: SelectionBatch, rows: int | None = None) -> torch.Tensor:
        """[G, C] scores per item and candidate (-inf in empty slots). With `rows`, the sequences are scored that many
        at a time: the same scores, in memory bounded whatever the number of an item's candidates (with gradients,
        every part but the last keeps only its inputs and is scored again in backward, same dropout masks)."""
        n = len(batch.input_ids)
        step = rows or max(n, 1)
        parts = []
        for a in range(0, n, step):
            part = batch.sequences(slice(a, a + step))
            recompute = torch.is_grad_enabled() and a + step < n
            parts.append(checkpoint(self.scores, part, use_reentrant=False) if recompute else self.scores(part))
        scores = torch.cat(parts)  # [N]
        return scores[batch.groups.clamp_min(0)].masked_fill(batch.groups < 0, float("-inf"))

    def loss(self, batch: SelectionBatch) -> torch.Tensor:
        scores = self.group_scores(batch, TRAINING_ROWS)
        known = batch.relevance >= 0
        if self.config.objective == "binary":
            if not known.any():  # the mean over nothing would be NaN and train NaN weights
                raise ValueError(f"a training batch has no item with a known answer (items {batch.ids[:3]}...)")
            return F.binary_cross_entropy_with_logits(scores[known], batch.relevance[known].float())
        target = batch.relevance.clamp_min(0).float()
        trainable = target.sum(-1) > 0  # items with at least one correct candidate
        if not trainable.any():
            raise ValueError(f"a training batch has no item with a known correct candidate (items {batch.ids[:3]}...)")
        log_probs = scores.log_softmax(-1).masked_fill(batch.groups < 0, 0.0)
        per_item = -(target * log_probs).sum(-1) / target.sum(-1).clamp_min(1)
        return per_item[trainable].mean()

    @torch.no_grad()
    def predict(self, batch: SelectionBatch) -> tuple[list[list[int]], list[list[float]]]:
        """(relevance, scores) per item, without the empty slots; the sequences scored `SCORING_ROWS` at a time."""
        scores = self.group_scores(batch, SCORING_ROWS).cpu()
        out_gold, out_scores = [], []
        for g, row in enumerate(batch.groups.cpu()):
            n = int((row >= 0).sum())
            out_gold.append(batch.relevance[g, :n].tolist())
            out_scores.append(scores[g, :n].tolist())
        return out_gold, out_scores


def build_mdfn(model_id: str, model_config: dict, backbone: str = "all-MiniLM-L6-v2", pretrained: bool = True):
    """An MDFN variant (``mdfn``, ``plain-encoder``, ``mdfn-ua-only``...) on a backbone; returns (model, tokenizer).
    ``model_config`` holds the recipe's values; the variant's own settings override them."""
    if model_id not in MDFN_VARIANTS:
        raise ValueError(f"unknown response-selection model {model_id!r}; known: {', '.join(MDFN_VARIANTS)}")
    config = MDFNConfig.from_dict({**model_config, **MDFN_VARIANTS[model_id]})
    encoder, tokenizer = load_auto_encoder(backbone, pretrained)
    return MDFN(config, encoder), tokenizer


__all__ = ["MDFN", "MDFNConfig", "MDFN_VARIANTS", "SelectionBatch", "build_mdfn", "pool_turns", "turn_slots"]
