"""Two ERC baselines on the same backbone as DialogXL (the DialogXL paper's Table 2 baselines),
with DialogXL's interface (`loss`, `predict`, `probabilities`, `config_dict`) so that the same
training loop, `turnformer.tasks.erc.evaluate` and CLI can drive them, and the same classifier head
(Linear(hidden, 300) -> ReLU -> Dropout -> Linear(300, labels)).

`ConcatContext` (model id ``concat-context``, the paper's BERT baseline)
    To classify utterance t, the history and the query go in one sequence, in conversation order:
    ``[CLS] u_0 [SEP] u_1 [SEP] ... u_t [SEP]``, truncated oldest-first (tokens right after [CLS]
    are dropped) to ``max_length``; the classifier reads the final [CLS] state. Token type ids
    are 0 for [CLS] and the history, 1 for the query utterance and its [SEP] (BERT's two-segment
    convention), or all 0 on a backbone with a single token type. Every (conversation, t) pair
    whose utterance exists is one row; rows are sorted by length and encoded in chunks of at most
    ``max_rows_per_forward`` rows and ``max_tokens_per_forward`` padded tokens (rows x the chunk's
    longest row; a row longer than that goes alone). This bounds one attention call and the padding per
    chunk. In training with ``checkpoint`` (the default) a chunk keeps only its inputs and [CLS]
    states for the backward pass and its encoder forward runs again there, one chunk at a time: a
    step's activation memory is one chunk's, whatever the conversations' length, for about a quarter
    more time (without it, every chunk's graph is kept until ``backward``: on MELD's largest batch,
    95 rows of up to 512 tokens, 13 GB on all-MiniLM-L6-v2 in chunks of 32 rows). Dropped tokens are
    counted in ``truncation``. ``frozen_layers`` freezes the embeddings and the lowest layers: the
    rows re-encode every history, and a frozen lower half trains on them in about three quarters of the time.

`SegmentRecurrence` (model id ``segment-recurrence``, XLNet / Transformer-XL style)
    A conversation becomes one token stream ``u_0 [SEP] u_1 [SEP] ...`` (no [CLS]), cut into
    segments of ``segment_len`` tokens. The conversations of a batch are processed in parallel,
    segment by segment; every segment of a batch has the same length, so a conversation's last
    segment is padded, and a conversation that has run out of segments is all padding while the
    others go on. Each layer attends to [memory ; current segment], the memory being the newest
    ``mem_len`` token states that entered that layer in earlier segments (detached), padding
    included: padding is stored in memory (masked out of attention, so it costs space and compute,
    not accuracy). Positions restart at 0 in every segment (the backbone has absolute positions;
    memory states keep the positions they were computed with, as in DialogXL here). In training with
    ``checkpoint`` (the default) a segment keeps only its inputs (its tokens and the detached memory)
    for the backward pass and runs again there: a step's activation memory is one segment's, not the
    whole stream's. The memories kept are views of one block of the stream's layer inputs (a copy
    each was about seven times the stream), and only the final states of the [SEP]s are kept, so
    a step grows with the stream by a few states a token (`training_memory_bytes`, which training
    checks before it starts).
    Utterance t is classified from the final state of the [SEP] that ends it: there is no
    per-utterance [CLS] in the stream, and the closing [SEP] is the first token that has seen the
    whole utterance whichever segment it falls in. Attention inside a segment is bidirectional, as
    in XLNet's segment recurrence, so that state may also draw on later utterances of the same
    segment (never on later segments).

Memory waste (`WasteStats`): at every step whose memory is non-empty, the share of the memory
tensor's slots ([batch, memory length]) that hold padding. ``rate`` averages that share over the
steps (what averaging DialogXL's ``Memory.waste_rate()`` over steps gives); ``slot_rate`` pools the
slots of all steps. The memory counted is the one a step reads (before it is updated).
`utterance_recurrence_waste` measures DialogXL's utterance recurrence the same way, and
`segment_recurrence_waste_counts` / `utterance_recurrence_waste_counts` compute both from token
counts alone, mirroring exactly what the models store (for the benchmark on whole datasets).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Iterable, Iterator, Sequence

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from turnformer.backbones import StructuredEncoder, freeze_lower_layers, load_backbone
from turnformer.models.config_checks import ModelConfig, check_config
from turnformer.models.dialogxl import ConversationBatch, DialogXL, UtteranceClassifier, batch_extent
from turnformer.structure import SpecialTokens, pack_token_ids

__all__ = [
    "BASELINES", "ConcatContext", "ConcatContextConfig", "ConcatInputs", "SegmentRecurrence",
    "SegmentRecurrenceConfig", "WasteStats", "batch_words", "build_baseline", "segment_recurrence_waste_counts",
    "strip_special", "utterance_recurrence_waste", "utterance_recurrence_waste_counts",
]


# --------------------------------------------------------------------------------------------
# Shared pieces


def classifier_head(hidden: int, classifier_hidden: int, dropout: float, num_labels: int) -> nn.Sequential:
    """DialogXL's head: Linear(hidden, 300) -> ReLU -> Dropout -> Linear(300, labels)."""
    return nn.Sequential(
        nn.Linear(hidden, classifier_hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(classifier_hidden, num_labels),
    )


def strip_special(ids: Sequence[int], cls_id: int, sep_id: int, pad_id: int) -> list[int]:
    """The word ids of one turn given as ``[CLS] tokens [SEP] pad...`` (trailing padding, then a
    leading [CLS] and a trailing [SEP], are removed)."""
    ids = list(ids)
    while ids and ids[-1] == pad_id:
        ids.pop()
    if ids and ids[0] == cls_id:
        ids = ids[1:]
    if ids and ids[-1] == sep_id:
        ids = ids[:-1]
    return ids


def batch_words(batch: ConversationBatch, cls_id: int, sep_id: int, pad_id: int) -> list[list[list[int]]]:
    """Word ids of every existing turn: ``words[b][t]`` for t < ``batch.lengths[b]``."""
    steps = [s.tolist() for s in batch.steps]
    return [[strip_special(steps[t][b], cls_id, sep_id, pad_id) for t in range(n)] for b, n in enumerate(batch.lengths)]


class _Config(ModelConfig):
    """What the baseline configurations share: their checks, and the settings that change cost only."""

    runtime_keys: tuple[str, ...] = ()  # settings that change cost, not results: left out of config_dict

    def __post_init__(self) -> None:  # mem_len and frozen_layers may be 0; every other size must be 1 or more
        check_config(self, positive=[f.name for f in fields(self) if f.name not in ("mem_len", "frozen_layers")])

    def architecture_dict(self) -> dict:
        return {k: v for k, v in self.to_dict().items() if k not in self.runtime_keys}


class _ERCModel(UtteranceClassifier):
    """A baseline: `UtteranceClassifier` with its config and device."""

    def config_dict(self) -> dict:
        return self.config.architecture_dict()

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device


# --------------------------------------------------------------------------------------------
# ConcatContext


@dataclass
class ConcatContextConfig(_Config):
    num_labels: int
    backbone: str = "all-MiniLM-L6-v2"
    max_length: int = 512
    max_utterance_tokens: int = 128
    max_rows_per_forward: int = 32
    max_tokens_per_forward: int = 4096  # padded tokens of one chunk (rows x its longest row)
    checkpoint: bool = True  # training: recompute each chunk's encoder forward in backward (memory of one chunk)
    classifier_hidden: int = 300
    dropout: float = 0.1
    frozen_layers: int = 0  # freeze the embeddings and the lowest N encoder layers (0: fine-tune all)

    runtime_keys = ("max_rows_per_forward", "max_tokens_per_forward", "checkpoint")


@dataclass
class ConcatInputs:
    """Packed rows of one chunk: ``rows[i] = (b, t)`` is the utterance that row i classifies."""

    input_ids: torch.Tensor  # [R, L]
    token_type_ids: torch.Tensor  # [R, L]
    attention_mask: torch.Tensor  # [R, L] bool
    rows: list[tuple[int, int]]
    truncated: list[int]  # tokens dropped per row (oldest-first)


class ConcatContext(_ERCModel):
    model_id = "concat-context"

    def __init__(self, config: ConcatContextConfig, encoder: StructuredEncoder, cls_id: int, sep_id: int, pad_id: int):
        super().__init__()
        if config.max_length < 3:
            raise ValueError(f"max_length must be at least 3 ([CLS] token [SEP]), got {config.max_length}")
        limit = encoder.max_positions
        if limit is not None and config.max_length > limit:
            raise ValueError(f"model_config.max_length = {config.max_length}: over the backbone's {limit} positions")
        if config.max_rows_per_forward < 1 or config.max_tokens_per_forward < 1:
            raise ValueError("max_rows_per_forward and max_tokens_per_forward must be at least 1")
        self.config = config
        self.encoder = encoder
        freeze_lower_layers(encoder, config.frozen_layers)
        self.cls_id, self.sep_id, self.pad_id = cls_id, sep_id, pad_id
        self.special = SpecialTokens(pad=pad_id, bos=cls_id, suffix=sep_id)
        self.use_token_types = getattr(encoder.config, "type_vocab_size", 1) >= 2
        self.classifier = classifier_head(encoder.config.hidden_size, config.classifier_hidden, config.dropout, config.num_labels)
        self.reset_truncation()

    def reset_truncation(self) -> None:
        """Counters over every row encoded since the last reset (rows, rows cut, tokens dropped)."""
        self.truncation = {"rows": 0, "truncated_rows": 0, "truncated_tokens": 0}

    def build_inputs(self, batch: ConversationBatch) -> list[ConcatInputs]:
        """Every chunk of `iter_inputs`, as a list."""
        return list(self.iter_inputs(batch))

    def iter_inputs(self, batch: ConversationBatch) -> Iterator[ConcatInputs]:
        """Pack every (conversation, t) row of a batch, shortest first, in chunks of at most
        ``max_rows_per_forward`` rows and ``max_tokens_per_forward`` padded tokens (CPU tensors), one chunk at a time:
        a long conversation's rows are never all held at once."""
        words = batch_words(batch, self.cls_id, self.sep_id, self.pad_id)
        speakers = batch.speakers.tolist()
        rows = [(b, t) for b, n in enumerate(batch.lengths) for t in range(n)]
        # Untruncated length 1 + sum(len + 1): sort so that a chunk holds rows of similar length.
        prefix = [[0] for _ in words]
        for b, turns in enumerate(words):
            for w in turns:
                prefix[b].append(prefix[b][-1] + len(w) + 1)
        length = {r: min(1 + prefix[r[0]][r[1] + 1], self.config.max_length) for r in rows}
        rows.sort(key=length.__getitem__)
        for chunk in self._chunks(rows, length):
            # a row's history from the newest turns that can fit (each takes its [SEP] at least), not from the first:
            # the packing drops the older ones whole anyway, and copying them made a long conversation cost its square
            first = [max(0, t + 1 - self.config.max_length) for _, t in chunk]
            packed = pack_token_ids(
                [words[b][f: t + 1] for (b, t), f in zip(chunk, first)],
                [speakers[b][f: t + 1] for (b, t), f in zip(chunk, first)], self.special, max_length=self.config.max_length,
            )
            real = packed.meta.is_real
            if self.use_token_types:
                query = packed.meta.utterance == torch.tensor([t - f for (_, t), f in zip(chunk, first)]).unsqueeze(1)
                query[:, 0] = False  # [CLS] is segment A even when truncation reached the query
                types = (query & real).long()
            else:
                types = torch.zeros_like(packed.input_ids)
            dropped = [n + prefix[b][f] for n, (b, _), f in zip(packed.truncated, chunk, first)]  # the turns left out too
            yield ConcatInputs(packed.input_ids, types, real, chunk, dropped)

    def _chunks(self, rows: list[tuple[int, int]], length: dict) -> list[list[tuple[int, int]]]:
        """Rows (sorted by length) cut into runs of at most max_rows_per_forward rows whose padded size (rows x the
        last, longest row) stays within max_tokens_per_forward; a row over it on its own goes alone."""
        chunks: list[list[tuple[int, int]]] = []
        for row in rows:
            last = chunks[-1] if chunks else None
            if (last is None or len(last) == self.config.max_rows_per_forward
                    or (len(last) + 1) * length[row] > self.config.max_tokens_per_forward):
                chunks.append([row])
            else:
                last.append(row)
        return chunks

    def _encode_cls(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """[R, hidden] final [CLS] states of one chunk."""
        out = self.encoder(input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask)
        return out.last_hidden_state[:, 0].clone()  # a copy: a view would keep every token's states [R, L, hidden] alive

    def cls_states(self, batch: ConversationBatch) -> torch.Tensor:
        """[B, N, hidden] final [CLS] states (zeros where a conversation has no utterance t)."""
        n_turns = len(batch.steps)
        hidden = self.encoder.config.hidden_size
        states, index = [], []
        recompute = self.config.checkpoint and self.training and torch.is_grad_enabled()
        for chunk in self.iter_inputs(batch):
            inputs = (chunk.input_ids.to(self.device), chunk.token_type_ids.to(self.device),
                      chunk.attention_mask.to(self.device))
            # with recompute, the chunk's activations are freed now and rebuilt (same dropout masks) in backward
            states.append(checkpoint(self._encode_cls, *inputs, use_reentrant=False) if recompute
                          else self._encode_cls(*inputs))
            index += [b * n_turns + t for b, t in chunk.rows]
            self.truncation["rows"] += len(chunk.rows)
            self.truncation["truncated_rows"] += sum(1 for n in chunk.truncated if n)
            self.truncation["truncated_tokens"] += sum(chunk.truncated)
        full = torch.zeros(len(batch.lengths) * n_turns, hidden, device=self.device)
        if states:
            full = full.index_copy(0, torch.tensor(index, device=self.device), torch.cat(states).to(full.dtype))
        return full.view(len(batch.lengths), n_turns, hidden)

    def logits(self, batch: ConversationBatch) -> torch.Tensor:
        return self.classifier(self.cls_states(batch))


# --------------------------------------------------------------------------------------------
# SegmentRecurrence


@dataclass
class SegmentRecurrenceConfig(_Config):
    num_labels: int
    backbone: str = "all-MiniLM-L6-v2"
    segment_len: int = 64
    mem_len: int = 400
    max_utterance_tokens: int = 128
    checkpoint: bool = True  # training: recompute each segment's encoder forward in backward (memory of one segment)
    classifier_hidden: int = 300
    dropout: float = 0.1

    runtime_keys = ("checkpoint",)


@dataclass
class WasteStats:
    """Padding in memory, counted at every step whose memory is non-empty."""

    steps: int = 0
    padding_slots: int = 0
    total_slots: int = 0
    rate_sum: float = 0.0  # sum over steps of that step's padding share

    def add(self, padding: int, total: int) -> None:
        if total:
            self.steps += 1
            self.padding_slots += int(padding)
            self.total_slots += int(total)
            self.rate_sum += padding / total

    def merge(self, other: "WasteStats") -> "WasteStats":
        return WasteStats(self.steps + other.steps, self.padding_slots + other.padding_slots,
                          self.total_slots + other.total_slots, self.rate_sum + other.rate_sum)

    @property
    def rate(self) -> float:
        """Mean over steps of the share of memory slots holding padding (0 with no step)."""
        return self.rate_sum / self.steps if self.steps else 0.0

    @property
    def slot_rate(self) -> float:
        """Padding slots / all slots, pooled over steps."""
        return self.padding_slots / self.total_slots if self.total_slots else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "rate": self.rate, "slot_rate": self.slot_rate}


FIXED_STEP_BYTES = 192 * 2**20  # a segment-recurrence step's fixed part (measured: 20-87 MB)


class SegmentRecurrence(_ERCModel):
    model_id = "segment-recurrence"

    def __init__(self, config: SegmentRecurrenceConfig, encoder: StructuredEncoder, cls_id: int, sep_id: int, pad_id: int):
        super().__init__()
        if config.segment_len < 1 or config.mem_len < 0:
            raise ValueError(f"model_config.segment_len = {config.segment_len}, mem_len = {config.mem_len}: segment_len must "
                             "be positive and mem_len not negative")
        limit = encoder.max_positions
        if limit is not None and config.segment_len > limit:
            raise ValueError(f"model_config.segment_len = {config.segment_len}: over the backbone's {limit} positions")
        self.config = config
        self.encoder = encoder
        self.cls_id, self.sep_id, self.pad_id = cls_id, sep_id, pad_id
        self.classifier = classifier_head(encoder.config.hidden_size, config.classifier_hidden, config.dropout, config.num_labels)
        self.waste = WasteStats()

    def reset_waste(self) -> None:
        self.waste = WasteStats()

    def memory_waste_rate(self) -> float:
        """Mean share of memory slots holding padding over the steps run since `reset_waste`."""
        return self.waste.rate

    def streams(self, batch: ConversationBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Token streams ``u_0 [SEP] u_1 [SEP] ...`` padded to whole segments: ids [B, S * segment_len],
        real-token flags [B, S * segment_len] and the stream position of each utterance's [SEP]
        [B, N] (-1 where the utterance does not exist)."""
        words = batch_words(batch, self.cls_id, self.sep_id, self.pad_id)
        rows, ends = [], []
        for turns in words:
            row, end = [], []
            for w in turns:
                row += w + [self.sep_id]
                end.append(len(row) - 1)
            rows.append(row)
            ends.append(end + [-1] * (len(batch.steps) - len(end)))
        sl = self.config.segment_len
        n_segments = max(1, max(-(-len(r) // sl) for r in rows))
        ids = torch.full((len(rows), n_segments * sl), self.pad_id, dtype=torch.long)
        real = torch.zeros_like(ids, dtype=torch.bool)
        for b, r in enumerate(rows):
            ids[b, : len(r)] = torch.tensor(r, dtype=torch.long)
            real[b, : len(r)] = True
        return ids, real, torch.tensor(ends, dtype=torch.long).view(len(rows), len(batch.steps))

    def _segment(self, ids: torch.Tensor, positions: torch.Tensor, real: torch.Tensor, memory_real: torch.Tensor,
                 *pieces: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """One segment through the encoder over the memory: its final states [B, segment_len, hidden], then the states
        entering each layer (for the next segments' memory) when mem_len > 0. The memory comes as the earlier segments'
        layer inputs that it covers, segment by segment (a layer each), joined here: a recomputed segment keeps those
        pieces, which every segment shares, not a copy of its own memory."""
        layers, width = self.encoder.num_layers, memory_real.shape[1]
        memory = [torch.cat(pieces[layer::layers], dim=1)[:, -width:] for layer in range(layers)] if pieces else None
        out = self.encoder(ids, position_ids=positions, attention_mask=real, memory=memory,
                           memory_mask=memory_real if pieces else None, output_hidden_states=self.config.mem_len > 0)
        return (out.last_hidden_state, *(out.hidden_states[:-1] if self.config.mem_len > 0 else ()))

    def encode_stream(self, ids: torch.Tensor, real: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
        """The final states [B, N, hidden] at the stream positions ``ends`` [B, N] (zeros where -1) of padded streams,
        encoded segment by segment with memory. A segment's states are dropped once the ends within it are taken, so
        that in training what each segment leaves until backward is small or in one block (`training_memory_bytes`)."""
        batch = ids.shape[0]
        sl, mem_len = self.config.segment_len, self.config.mem_len
        positions = torch.arange(sl, device=ids.device).expand(batch, sl)
        kept: list[list[torch.Tensor]] = []  # the detached layer inputs of the segments the next memory covers
        memory_real = real.new_zeros(batch, 0)
        segment_of = torch.where(ends >= 0, ends // sl, -1)  # [B, N]
        rows, turns, picked = [], [], []  # the (row, utterance) pairs whose end each segment holds, and their states
        recompute = self.config.checkpoint and self.training and torch.is_grad_enabled()
        history: torch.Tensor | None = None  # with recompute: the layer inputs [layers, B, S * segment_len, hidden]
        for start in range(0, ids.shape[1], sl):
            seg_ids, seg_real = ids[:, start : start + sl], real[:, start : start + sl]
            if memory_real.shape[1]:
                self.waste.add(int((~memory_real).sum()), memory_real.numel())
            inputs = (seg_ids, positions, seg_real, memory_real, *(piece for layers in kept for piece in layers))
            # with recompute, the segment's activations are freed now and rebuilt (same dropout masks) in backward
            last, *layer_inputs = (checkpoint(self._segment, *inputs, use_reentrant=False) if recompute
                                   else self._segment(*inputs))
            row, turn = (segment_of == start // sl).nonzero(as_tuple=True)
            rows.append(row)
            turns.append(turn)
            picked.append(last[row, ends[row, turn] - start])  # [k, hidden]
            if mem_len > 0:
                states = [h.detach() for h in layer_inputs]
                if recompute:  # kept until backward: one block, not a small one a segment between freed ones
                    if history is None:
                        history = states[0].new_empty(len(states), batch, ids.shape[1], states[0].shape[-1])
                    for layer, h in enumerate(states):
                        # each slot is written once, before any saved view covers it: `.data` leaves the version alone
                        history.data[layer, :, start : start + sl] = h
                    states = list(history[:, :, start : start + sl].unbind(0))
                covering = -(-mem_len // sl)  # segments the newest mem_len states lie in
                kept = (kept + [states])[-covering:]
                memory_real = torch.cat([memory_real, seg_real], dim=1)[:, -mem_len:]
        picked = torch.cat(picked)
        return picked.new_zeros(*ends.shape, picked.shape[-1]).index_put((torch.cat(rows), torch.cat(turns)), picked)

    def training_memory_bytes(self, batch_size: int, longest_tokens: int, precision: str = "no") -> int:
        """About how much memory one training step takes beyond the model and optimizer, for batches of `batch_size`
        conversations whose longest stream has `longest_tokens` tokens, under accelerate's mixed `precision` ("no",
        "bf16", "fp16"). With ``checkpoint``, one segment's graph is live at a time (its attention [B, H, segment,
        memory + segment], token states, and keys and values over memory and segment every layer), and what every
        segment leaves until backward grows with the stream: its layer inputs (one float32 state a token, row and
        layer, kept for the recomputation), its graph's nodes and the heap they pin between segments; and a fixed part
        (the backward's own buffers). Measured with `benchmarks/erc_step_memory.py --model segment-recurrence`: a
        stream token took 7 to 15 bytes a row, layer and hidden unit in float32 (16 here), and under bf16 autocast 7
        at two rows and 22 to 24 at one (24 here, for either mixed precision); what the steps took beyond that and the
        estimated segment graph, 20-87 MB (192 MiB here). The estimate covers every case measured."""
        sl, config, layers = self.config.segment_len, self.encoder.config, self.encoder.num_layers
        tokens = -(-max(longest_tokens, 1) // sl) * sl  # the stream padded to whole segments
        memory = min(self.config.mem_len, tokens - sl)
        per_pair = 20 if precision == "no" else 11
        keys = memory + sl  # a segment's queries read its memory and itself: keys and values (and their gradients) that long
        segment = batch_size * (config.num_attention_heads * sl * keys * per_pair + (sl * 48 + keys * 16) * config.hidden_size) * layers
        if not self.config.checkpoint:  # every segment's graph is kept until backward
            segment *= tokens // sl
        per_token = 16 if precision == "no" else 24
        return FIXED_STEP_BYTES + segment + batch_size * tokens * config.hidden_size * layers * per_token

    def training_memory(self, batches: Sequence[ConversationBatch], precision: str) -> tuple[int, str, str]:
        """What one training step over the largest of `batches` takes (bytes), the settings that bound it and what
        lowers it (`turnformer.tasks.erc.check_training_memory` words its refusal with them)."""
        batch_size, longest = batch_extent(batches)
        setting = (f"batches of {batch_size} conversations, the longest {longest} tokens, in segments of "
                   f"{self.config.segment_len} against a memory of {self.config.mem_len}")
        advice = ("lower train.batch_size, or cut the longest conversations into parts: every segment's layer inputs "
                  "are kept for backward, so the step grows with the conversation")
        return self.training_memory_bytes(batch_size, longest, precision), setting, advice

    def sep_states(self, batch: ConversationBatch) -> torch.Tensor:
        """[B, N, hidden] final states of the [SEP] ending each utterance (zeros where none)."""
        ids, real, ends = self.streams(batch)
        device = self.device
        return self.encode_stream(ids.to(device), real.to(device), ends.to(device))

    def logits(self, batch: ConversationBatch) -> torch.Tensor:
        return self.classifier(self.sep_states(batch))


# --------------------------------------------------------------------------------------------
# Building from a recipe


BASELINES = {
    ConcatContext.model_id: (ConcatContext, ConcatContextConfig),
    SegmentRecurrence.model_id: (SegmentRecurrence, SegmentRecurrenceConfig),
}


def build_baseline(model_id: str, model_config: dict, labels: Sequence[str], backbone: str):
    """A baseline on a pretrained backbone (`turnformer.tasks.erc.build_erc_model` calls it)
    and its tokenizer."""
    if model_id not in BASELINES:
        raise ValueError(f"unknown baseline {model_id!r}; known: {', '.join(BASELINES)}")
    model_class, config_class = BASELINES[model_id]
    encoder, tokenizer = load_backbone(backbone)
    config = config_class.from_recipe(model_config, num_labels=len(labels), backbone=backbone)
    return model_class(config, encoder, tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id), tokenizer


# --------------------------------------------------------------------------------------------
# Memory waste: measured on the models, and counted from token counts alone


@torch.no_grad()
def utterance_recurrence_waste(model: DialogXL, batches: Iterable[ConversationBatch]) -> WasteStats:
    """Run DialogXL's steps over ``batches`` and count padding in the memory each step reads
    (``Memory.waste_rate()`` of that memory, averaged over steps with a non-empty memory)."""
    stats = WasteStats()
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    for batch in batches:
        batch = batch.to(device)
        memory = model.empty_memory(len(batch.lengths))
        for t, input_ids in enumerate(batch.steps):
            if memory.length:
                stats.add(int(memory.meta.is_padding.sum()), memory.meta.is_padding.numel())
            _, memory, _ = model.step(input_ids, t, batch.speakers[:, t], memory)
    model.train(was_training)
    return stats


def segment_recurrence_waste_counts(
    batches: Iterable[Sequence[Sequence[Sequence[int]]]], segment_len: int, mem_len: int, cls_id: int, sep_id: int, pad_id: int
) -> WasteStats:
    """`SegmentRecurrence`'s memory waste from token counts: ``batches`` are lists of conversations,
    each a list of turn ids (``[CLS] tokens [SEP]``, as `EncodedConversation.turn_ids`).

    A conversation's stream has L = sum(words + 1) tokens; a batch runs S = max ceil(L / segment_len)
    segments; the memory read by segment s covers stream slots [s*sl - M, s*sl) with
    M = min(s*sl, mem_len), and a slot is padding where it lies at or beyond the row's L.
    """
    stats = WasteStats()
    for conversations in batches:
        lengths = [sum(len(strip_special(ids, cls_id, sep_id, pad_id)) + 1 for ids in turns) for turns in conversations]
        n_segments = max(1, max(-(-n // segment_len) for n in lengths))
        for s in range(1, n_segments):
            end = s * segment_len
            size = min(end, mem_len)
            if size <= 0:
                continue
            padding = sum(end - max(n, end - size) for n in lengths if n < end)
            stats.add(padding, size * len(lengths))
    return stats


def utterance_recurrence_waste_counts(
    batches: Iterable[Sequence[Sequence[Sequence[int]]]], mem_len: int, cls_id: int, sep_id: int
) -> WasteStats:
    """DialogXL's memory waste from token counts (see `turnformer.models.dialogxl.update_memory`):
    a row keeps its newest min(mem_len, tokens so far) non-special tokens, the memory is as wide as
    the fullest row, and the other rows are padded to that width."""
    stats = WasteStats()
    for conversations in batches:
        counts = [[sum(1 for x in ids if x != cls_id and x != sep_id) for ids in turns] for turns in conversations]
        kept = [0] * len(counts)
        totals = [0] * len(counts)
        for t in range(max(len(c) for c in counts)):
            width = max(kept)
            if width:
                stats.add(sum(width - k for k in kept), width * len(kept))
            for b, c in enumerate(counts):
                if t < len(c):
                    totals[b] += c[t]
                    kept[b] = min(mem_len, totals[b])
    return stats
