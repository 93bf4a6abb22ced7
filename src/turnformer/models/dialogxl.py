"""DialogXL (Shen et al., AAAI 2021): emotion recognition with utterance recurrence and
dialog-aware self-attention, on the project's structured encoder.

The paper's model is recurrent: per conversation and per layer, a memory holds the token states of
earlier utterances (the hidden states that entered that layer), without special tokens or padding,
truncated to the newest ``mem_len`` tokens and detached; utterance t is encoded against it. Heads are
split [local | global | speaker | listener]; the structure restricts memory keys only, the current
utterance is visible to every head (official code). The classifier reads the final [CLS] state:
300-d ReLU, then linear.

Two ways to run it, equal in outputs and gradients (tested):

* `DialogXL.step`: one utterance of every conversation against the carried memory: the recurrence
  as written, kept for streaming (`DialogXLSession`) and as the reference;
* `DialogXL.logits` (training, evaluation, prediction): one pass over a chunk of consecutive utterances,
  up to ``chunk_tokens`` tokens a conversation (a whole conversation where it fits). Every token sees
  what the recurrence shows it: its own utterance, and the memory tokens of earlier utterances while they
  are among the newest ``mem_len`` before its own (`turnformer.structure.recent`), under its head type.
  Earlier utterances' states enter the key and value projections detached for later queries
  (``detached_keys``), exactly as the memory does, unless ``memory_grad`` lets gradients flow into the
  history within a chunk (a variant the recurrence cannot afford). Between chunks the memory is carried
  as in the recurrence, and while training every chunk but the last is recomputed in the backward pass
  (activation checkpointing): a training step holds one chunk's activations, and the memory each chunk starts from
  ([layers, B, mem_len, hidden]) for its recomputation, so it grows by that much a chunk (`training_memory_bytes`,
  checked before training); prediction holds one chunk's, whatever the conversation's length.

The backbone is any of the project's encoders. On XLNet (the paper's, `XLNetStructuredEncoder`)
relative distances come from each token's running position in its conversation (``TokenMeta.order``),
per (query, key) pair, so they are right although memory rows differ per conversation. On a BERT-type
encoder (all-MiniLM-L6-v2 offline; a difference from the paper, by necessity) positions are absolute:
by default tokens are numbered through the conversation (``DialogXLConfig.positions``), so memory keys
keep the positions they were computed with and come before the current utterance, as in one
concatenated sequence. MPNet (`MPNetStructuredEncoder`) has those absolute positions plus a relative
bias, which gets every pair's true distance from the running positions of the memory keys
(``key_position_ids``), with either ``positions`` setting. Special tokens ([CLS] u [SEP] for BERT,
u <sep> <cls> for XLNet) stay out of memory, and the classifier reads the [CLS] state wherever the
tokenizer put it.
"""

from __future__ import annotations

import inspect
import math
from functools import partial
from dataclasses import dataclass, field, replace
from typing import Sequence

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from turnformer.backbones import StructuredEncoder, XLNetStructuredEncoder
from turnformer.dialogue import as_turn, label_names, text_to_read
from turnformer.models.config_checks import ModelConfig, check_config
from turnformer.structure import MEMORY, TokenMeta, dialogxl_layout, token_meta
from turnformer.structure.packing import closing_special_ids, truncate_keeping_end_specials


@dataclass
class DialogXLConfig(ModelConfig):
    num_labels: int
    backbone: str = "all-MiniLM-L6-v2"
    heads: tuple[int, int, int, int] = (5, 5, 1, 1)  # local, global, speaker, listener
    window: int = 5
    mem_len: int = 400
    max_utterance_tokens: int = 128
    classifier_hidden: int = 300
    dropout: float = 0.1
    # DialogXL-emb (the paper's Table 4): > 0 adds a trainable embedding per speaker role (speakers in
    # order of first appearance; later ones share the last role) to every token's input embedding.
    speaker_roles: int = 0
    # Absolute-position encoders (BERT type): "conversation" numbers tokens through the conversation,
    # as in one concatenated sequence, so that memory keys sit before the current utterance (XLNet gets
    # the same from relative distances); "utterance" restarts at 0 in every utterance, which puts every
    # memory token at the same positions as the current ones and confuses positional heads.
    positions: str = "conversation"
    # Not in the paper: a learned logit per layer and head, added to the attention scores of every memory
    # key and starting at this value (None: the paper's attention, no bias). A negative start lets a
    # backbone never pretrained with memory (all-MiniLM-L6-v2; XLNet was) begin close to its
    # single-utterance behaviour and learn how much memory to read. It is a new layer: `train.head_lr`
    # sets its rate.
    memory_bias: float | None = None
    # One pass: consecutive utterances are encoded together, up to this many tokens per conversation (at least
    # one utterance a chunk, so 1 is the recurrent computation). Bounds activation memory; changes no number
    # (`COMPUTE_ONLY`: a run may resume under another value).
    chunk_tokens: int = 512
    # Not in the paper: gradients flow from later utterances into earlier ones of the same chunk (the recurrence,
    # and the default, detach them), so the history is trained to be useful as context.
    memory_grad: bool = False

    COMPUTE_ONLY = frozenset({"chunk_tokens"})

    def __post_init__(self) -> None:
        heads = self.heads
        if not isinstance(heads, tuple | list) or len(heads) != 4 or any(isinstance(h, bool) or not isinstance(h, int) for h in heads):
            shown = list(heads) if isinstance(heads, tuple | list) else heads
            raise ValueError(f"model_config.heads = {shown!r}: expected 4 whole numbers (local, global, speaker and "
                             "listener heads, summing to the backbone's)")
        check_config(self, positive=("num_labels", "max_utterance_tokens", "classifier_hidden", "chunk_tokens"))
        bias = self.memory_bias
        if bias is not None and (isinstance(bias, bool) or not isinstance(bias, int | float) or not math.isfinite(bias)):
            raise ValueError(f"model_config.memory_bias = {bias!r}: expected a finite number (the start of the learned logit), or no setting")

    @classmethod
    def from_dict(cls, data: dict) -> "DialogXLConfig":
        data = dict(data)
        if data.get("positions", "conversation") not in ("conversation", "utterance"):
            raise ValueError(f"model_config.positions = {data['positions']!r}: expected 'conversation' or 'utterance'")
        if isinstance(data.get("heads"), list):
            data["heads"] = tuple(data["heads"])
        return super().from_dict(data)


@dataclass
class Memory:
    """Per-conversation memory: per-layer states [B, M, hidden] and their token metadata [B, M]."""

    states: list[torch.Tensor]
    meta: TokenMeta

    @property
    def length(self) -> int:
        return self.meta.shape[1]

    @staticmethod
    def empty(batch: int, num_layers: int, hidden: int, device=None) -> "Memory":
        meta = TokenMeta.from_lists([[] for _ in range(batch)], [[] for _ in range(batch)]).to(device or "cpu")
        return Memory([torch.zeros(batch, 0, hidden, device=device) for _ in range(num_layers)], meta)

    def waste_rate(self) -> float:
        """Share of memory slots that hold padding (utterance recurrence keeps this near zero)."""
        return float(self.meta.is_padding.float().mean()) if self.length else 0.0


def update_memory(memory: Memory, layer_inputs: Sequence[torch.Tensor], current: TokenMeta, mem_len: int) -> Memory:
    """Append the current utterance's real, non-special token states; keep the newest ``mem_len``
    per conversation. Vectorised: one stable sort moves the kept tokens to the front of each row."""
    keep_current = current.is_real & ~current.is_special
    meta = TokenMeta.concat([memory.meta, current])
    valid = torch.cat([memory.meta.is_real, keep_current], dim=1)
    valid_from_end = valid.flip(1).cumsum(1).flip(1)  # valid tokens at or after each position
    keep = valid & (valid_from_end <= mem_len)
    new_length = int(keep.sum(1).max()) if keep.numel() else 0
    order = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)[:, :new_length]
    kept = keep.gather(1, order)

    def take(x: torch.Tensor) -> torch.Tensor:
        return x.gather(1, order)

    new_meta = TokenMeta(
        utterance=take(meta.utterance), speaker=take(meta.speaker), position=take(meta.position),
        order=take(meta.order), is_special=take(meta.is_special), is_padding=~kept, head=take(meta.head),
        memory_index=take(meta.memory_index), memory_before=take(meta.memory_before),
    )
    states = []
    for old, new in zip(memory.states, layer_inputs):
        joined = torch.cat([old, new.detach()], dim=1)
        states.append(joined.gather(1, order.unsqueeze(-1).expand(-1, -1, joined.shape[-1])))
    return Memory(states, new_meta)


def chunk_ranges(lengths: list[list[int]], chunk_tokens: int, end: int | None = None) -> list[tuple[int, int]]:
    """Utterance ranges [a, b) that one pass encodes together, for rows of utterance token counts ``lengths`` [B][N]:
    as many consecutive utterances as fit ``chunk_tokens`` tokens in every row (always at least one), over the first
    ``end`` utterances (default: all; 0: none)."""
    end = len(lengths[0]) if end is None else end
    ranges, start, running = [], 0, [0] * len(lengths)
    for t in range(end):
        running = [used + row[t] for used, row in zip(running, lengths)]
        if t > start and max(running) > chunk_tokens:
            ranges.append((start, t))
            start, running = t, [row[t] for row in lengths]
    return ranges + [(start, end)] if end else []


class PerLayerBias(Sequence):
    """The memory bias of each layer, [B, H, T, K], made when the encoder reaches that layer: one layer's at a time
    rather than every layer's for the whole forward pass (a chunk's attention is the largest thing it holds)."""

    def __init__(self, is_memory: torch.Tensor, weights: torch.Tensor):
        self.is_memory, self.weights = is_memory, weights  # [B, 1, T, K]; [layers, H]

    def __len__(self) -> int:
        return self.weights.shape[0]

    def __getitem__(self, layer: int) -> torch.Tensor:
        return self.is_memory * self.weights[layer][:, None, None]


@dataclass
class ConversationBatch:
    """A batch of conversations, in two layouts of the same token ids.

    ``input_ids`` [B, L]: each conversation's utterances one after another, with their special tokens,
    padded at the end (one pass); ``turn_lengths`` [B, N]: tokens per utterance (0 past a conversation's
    end). ``steps[t]`` holds utterance t of every conversation: token ids [B, T_t] (rows of ended
    conversations are all padding; the recurrence). ``speakers`` and ``labels`` are [B, N] (-1 / -100
    where absent).
    """

    steps: list[torch.Tensor]
    speakers: torch.Tensor
    labels: torch.Tensor
    lengths: list[int]
    ids: list[str | None] = field(default_factory=list)
    input_ids: torch.Tensor | None = None
    turn_lengths: torch.Tensor | None = None

    def to(self, device) -> "ConversationBatch":
        move = lambda x: None if x is None else x.to(device)  # noqa: E731
        return ConversationBatch([s.to(device) for s in self.steps], self.speakers.to(device), self.labels.to(device),
                                 self.lengths, self.ids, move(self.input_ids), move(self.turn_lengths))


def batch_extent(batches: Sequence[ConversationBatch]) -> tuple[int, int]:
    """The most conversations a batch holds and the most tokens a conversation of them holds."""
    longest = max(int(b.turn_lengths.sum(1).max()) if b.turn_lengths is not None else 0 for b in batches)
    return max(len(b.lengths) for b in batches), longest


class UtteranceClassifier(nn.Module):
    """What every emotion-recognition model here shares (DialogXL and the baselines on its backbone): the loss,
    predictions and probabilities of every utterance from its ``logits(batch)`` [B, N, labels], and its backbone
    ``encoder``."""

    def logits(self, batch: ConversationBatch) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def pretrained_parameters(self):
        """The backbone's parameters: `train.head_lr` gives the new layers (classifier, speaker-role embeddings,
        memory bias) their own learning rate."""
        return self.encoder.parameters()

    def loss(self, batch: ConversationBatch) -> torch.Tensor:
        logits = self.logits(batch)  # [B, N, labels]
        return nn.functional.cross_entropy(logits.flatten(0, 1), batch.labels.flatten(), ignore_index=-100)

    @torch.no_grad()
    def predict(self, batch: ConversationBatch) -> tuple[list[int], list[int]]:
        logits = self.logits(batch)
        labelled = batch.labels != -100
        return batch.labels[labelled].tolist(), logits.argmax(-1)[labelled].tolist()

    @torch.no_grad()
    def probabilities(self, batch: ConversationBatch) -> torch.Tensor:
        """[B, N, labels] class probabilities of every utterance (rows past a conversation's end: the classifier
        applied to whatever state the model leaves there)."""
        return self.logits(batch).softmax(-1)


class DialogXL(UtteranceClassifier):
    def __init__(
        self, config: DialogXLConfig, encoder: StructuredEncoder | XLNetStructuredEncoder, cls_id: int, sep_id: int, pad_id: int
    ):
        super().__init__()
        heads = encoder.config.num_attention_heads
        if sum(config.heads) != heads:
            raise ValueError(f"model_config.heads = {list(config.heads)}: the counts sum to {sum(config.heads)}, but the backbone has {heads} heads")
        self.config = config
        self.encoder = encoder
        self.layout = dialogxl_layout(*config.heads, window=config.window, mem_len=config.mem_len)
        self.special_ids = (cls_id, sep_id)
        self.pad_id = pad_id
        # Encoders with relative attention only (XLNet: no absolute limit) take running positions; BERT's absolute
        # ones do not.
        self.takes_positions = encoder.max_positions is None
        # Absolute positions plus a relative bias over [memory ; current] (MPNet): memory keys take theirs too.
        self.takes_key_positions = "key_position_ids" in inspect.signature(encoder.forward).parameters
        hidden = encoder.config.hidden_size
        self.speaker_embedding = None
        if config.speaker_roles > 0:
            # Zero at start: the pretrained encoder's behaviour is unchanged until the roles are learnt.
            self.speaker_embedding = nn.Embedding(config.speaker_roles, hidden)
            nn.init.zeros_(self.speaker_embedding.weight)
        self.memory_bias = None
        if config.memory_bias is not None:
            if "attention_bias" not in inspect.signature(encoder.forward).parameters:
                raise ValueError(f"memory_bias needs an encoder that takes attention_bias; {type(encoder).__name__} does not")
            self.memory_bias = nn.Parameter(torch.full((encoder.num_layers, heads), float(config.memory_bias)))
        self.classifier = nn.Sequential(
            nn.Linear(hidden, config.classifier_hidden), nn.ReLU(), nn.Dropout(config.dropout),
            nn.Linear(config.classifier_hidden, config.num_labels),
        )

    def config_dict(self) -> dict:
        return self.config.to_dict()

    def empty_memory(self, batch: int) -> Memory:
        device = next(self.parameters()).device
        return Memory.empty(batch, self.encoder.num_layers, self.encoder.config.hidden_size, device)

    def current_meta(self, input_ids: torch.Tensor, turn: int, speakers: torch.Tensor, memory: Memory) -> TokenMeta:
        padding = input_ids == self.pad_id
        special = (input_ids == self.special_ids[0]) | (input_ids == self.special_ids[1])
        # Continue after the newest REAL memory token: padding slots carry stale orders, and counting
        # them would make a conversation's positions (XLNet's relative distances) depend on its batch.
        start, counted = (torch.zeros(input_ids.shape[0], 1, dtype=torch.long, device=input_ids.device) for _ in range(2))
        if memory.length:
            start = memory.meta.order.masked_fill(memory.meta.is_padding, -1).amax(1, keepdim=True) + 1
            counted = memory.meta.memory_index.masked_fill(memory.meta.is_padding, -1).amax(1, keepdim=True) + 1
        meta = token_meta(torch.full_like(input_ids, turn), speakers.unsqueeze(1).expand_as(input_ids), padding,
                          is_special=special, memory_offset=counted)
        return replace(meta, order=start + meta.position)

    def step(
        self, input_ids: torch.Tensor, turn: int, speakers: torch.Tensor, memory: Memory, output_attentions: bool = False
    ) -> tuple[torch.Tensor, Memory, object]:
        """Encode utterance ``turn`` of each conversation against its memory.

        Returns the [CLS] states [B, hidden], the updated memory and the encoder output.
        """
        current = self.current_meta(input_ids, turn, speakers, memory)
        keys = TokenMeta.concat([memory.meta, current])
        head_masks = self.layout.build(current, keys)  # built once, shared by every layer
        roles = None
        if self.speaker_embedding is not None:
            role_ids = current.speaker.clamp(0, self.config.speaker_roles - 1)
            roles = self.speaker_embedding(role_ids) * current.is_real.unsqueeze(-1)
        if self.memory_bias is not None and memory.length:
            is_memory_key = (torch.arange(keys.shape[1], device=input_ids.device) < memory.length).to(self.memory_bias.dtype)
            per_layer = self.memory_bias[:, None, :, None, None] * is_memory_key  # [layers, 1, H, 1, M+T]
            memory_bias = {"attention_bias": list(per_layer)}
        else:
            memory_bias = {}
        positions = {"query_positions": current.order, "key_positions": keys.order} if self.takes_positions else {}
        if not self.takes_positions and self.config.positions == "conversation":
            positions = {"position_ids": self.conversation_positions(current.order, current.is_padding)}
        if self.takes_key_positions:  # memory keys at their running positions, shifted as the current tokens were
            position_ids = positions.get("position_ids", current.position)
            shift = (position_ids - current.order)[:, :1]
            positions = {"position_ids": position_ids, "key_position_ids": memory.meta.order + shift}
        out = self.encoder(
            input_ids,
            attention_mask=head_masks,
            extra_embeddings=roles,
            memory=memory.states if memory.length else None,
            output_hidden_states=True,
            output_attentions=output_attentions,
            **positions,
            **memory_bias,
        )
        memory = update_memory(memory, out.hidden_states[:-1], current, self.config.mem_len)
        return self.cls_states(out.last_hidden_state, input_ids), memory, out

    def conversation_positions(self, order: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        """Running positions [B, T] of one utterance a row, for an absolute-position encoder. Past the
        encoder's range, an utterance is shifted back so that it takes the last positions (long conversations
        only: the memory then overlaps it, as with "utterance" positions). Padding is clamped into range."""
        # An encoder whose table starts with offset rows (MPNet's padding offset) says how many it can use.
        limit = self.encoder.max_positions
        last = order.masked_fill(padding, -1).amax(1, keepdim=True)  # the utterance's last real token fits
        return (order - (last + 1 - limit).clamp(min=0)).clamp(max=limit - 1)

    def cls_states(self, hidden: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
        """[B, hidden]: each row's first [CLS] state, wherever it is (first token for BERT, last real
        one for XLNet); a row without [CLS] (an ended conversation's padding) gives its first token."""
        index = (input_ids == self.special_ids[0]).int().argmax(1)
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), index]

    # -- one pass -----------------------------------------------------------------------------------

    def conversation_meta(self, batch: ConversationBatch) -> tuple[TokenMeta, torch.Tensor]:
        """Metadata of the batch's packed rows (``input_ids`` [B, L]) as the recurrence gives it to each token,
        and the absolute position ids [B, L] the encoder embeds (unused by XLNet)."""
        ids, lengths = batch.input_ids, batch.turn_lengths  # [B, L], [B, N]
        columns = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
        ends = lengths.cumsum(1)  # [B, N]
        padding = columns >= ends[:, -1:]
        turn = torch.searchsorted(ends, columns.contiguous(), right=True).clamp(max=lengths.shape[1] - 1)  # [B, L]
        special = (ids == self.special_ids[0]) | (ids == self.special_ids[1])
        meta = token_meta(turn, batch.speakers.gather(1, turn), padding, is_special=special)
        position = meta.position  # 0 on padding
        # Each utterance's running positions start after the newest memory token before it (none: 0), as in `step`.
        newest = torch.full_like(lengths, -1).scatter_reduce(1, turn, position.masked_fill(~meta.is_memory_token, -1), "amax")
        start = (newest + 1).cumsum(1) - (newest + 1) if self.config.mem_len else torch.zeros_like(lengths)
        order = start.gather(1, turn) + position
        meta = replace(meta, order=order)
        if self.config.positions == "utterance":
            return meta, position
        if self.encoder.max_positions is None:
            return meta, order
        shift = (start + lengths - self.encoder.max_positions).clamp(min=0)  # each utterance's last token fits
        return meta, (order - shift.gather(1, turn)).masked_fill(padding, 0)

    def chunks(self, batch: ConversationBatch, end: int | None = None) -> list[tuple[int, int]]:
        """`chunk_ranges` of the batch at ``chunk_tokens``."""
        return chunk_ranges(batch.turn_lengths.tolist(), self.config.chunk_tokens, end)

    def encode_chunk(
        self, input_ids: torch.Tensor, meta: TokenMeta, position_ids: torch.Tensor, memory: Memory,
        output_attentions: bool = False,
    ) -> tuple[object, Memory]:
        """Encode a chunk [B, T] of consecutive utterances against the carried memory in one call; returns the
        encoder output and the memory after the chunk."""
        keys = TokenMeta.concat([memory.meta, meta])
        extra = {"attention_mask": self.layout.build(meta, keys)}  # [B, H, T, M+T], built once for every layer
        if self.speaker_embedding is not None:
            extra["extra_embeddings"] = self.speaker_embedding(meta.speaker.clamp(0, self.config.speaker_roles - 1)) * meta.is_real.unsqueeze(-1)
        reads_memory = MEMORY(meta, keys)  # [B, T, M+T]: pairs whose key is memory to the query
        if self.memory_bias is not None:
            extra["attention_bias"] = PerLayerBias(reads_memory.unsqueeze(1).to(self.memory_bias.dtype), self.memory_bias)
        if torch.is_grad_enabled() and not self.config.memory_grad:  # earlier utterances of the chunk read as memory: detached
            extra["detached_keys"] = reads_memory[..., memory.length:]
        if self.takes_positions:  # XLNet: relative distances between running positions
            extra.update(query_positions=meta.order, key_positions=keys.order)
        else:
            extra["position_ids"] = position_ids
            if self.takes_key_positions:  # MPNet's relative bias: the same running distances as in `step`
                extra.update(query_positions=meta.order, key_positions=keys.order)
        out = self.encoder(input_ids, memory=memory.states if memory.length else None, output_hidden_states=True,
                           output_attentions=output_attentions, **extra)
        return out, update_memory(memory, out.hidden_states[:-1], meta, self.config.mem_len)

    def training_memory_bytes(self, batch_size: int, longest_tokens: int, chunks: int | None = None,
                              precision: str = "no") -> int:
        """About how much memory one training step takes beyond the model and optimizer, for batches of `batch_size`
        conversations whose longest has `longest_tokens` tokens, encoded in `chunks` chunks (None: as many as the
        longest fills), under accelerate's mixed `precision` ("no", "bf16", "fp16"). Every layer keeps its attention
        [B, H, chunk, memory + chunk] (probabilities, dropout, masks) and its token states while a chunk's graph is
        live, and every chunk's memory [layers, B, memory, hidden] is kept for its recomputation in backward, so a
        longer conversation adds that much a chunk. Bytes a pair, a state and a memory element measured with
        `benchmarks/erc_step_memory.py` (all-MiniLM-L6-v2 and all-mpnet-base-v2, chunks of 256 and 512, in float32
        and bf16; a half precision keeps about 0.65-0.9 of float32's), with room to spare."""
        chunk = min(max(self.config.chunk_tokens, self.config.max_utterance_tokens), longest_tokens)
        memory = min(self.config.mem_len, max(longest_tokens - chunk, 0))
        chunks = chunks if chunks is not None else -(-longest_tokens // max(chunk, 1))
        config, layers = self.encoder.config, self.encoder.num_layers
        per_pair = 20 if precision == "no" else 11
        attention = batch_size * config.num_attention_heads * chunk * (memory + chunk) * layers * per_pair
        states = batch_size * chunk * config.hidden_size * layers * 48
        kept = chunks * batch_size * memory * config.hidden_size * layers * 8
        return attention + states + kept

    def training_memory(self, batches: Sequence[ConversationBatch], precision: str) -> tuple[int, str, str]:
        """What one training step over the largest of `batches` takes (bytes), the settings that bound it and what
        lowers it (`turnformer.tasks.erc.check_training_memory` words its refusal with them)."""
        batch_size, longest = batch_extent(batches)
        chunks = max(len(self.chunks(b)) for b in batches)
        setting = (f"batches of {batch_size} conversations, the longest {longest} tokens, encoded "
                   f"{self.config.chunk_tokens} tokens at a time against a memory of {self.config.mem_len}, "
                   f"in up to {chunks} chunks")
        advice = ("lower train.batch_size or model_config.chunk_tokens (e.g. --set model_config.chunk_tokens=128), "
                  "which changes no number")
        return self.training_memory_bytes(batch_size, longest, chunks, precision), setting, advice

    def logits(self, batch: ConversationBatch) -> torch.Tensor:
        """[B, N, labels]: every utterance's logits, in one pass a chunk (`chunks`)."""
        return self.one_pass(batch)[0]

    def memory_after(self, batch: ConversationBatch, end: int) -> Memory:
        """The memory after each row's first ``end`` utterances, encoded a chunk at a time as `logits` does: the memory
        that stepping them one by one (`step`) leaves, for a caller that goes on with `step`."""
        return self.one_pass(batch, end)[1]

    def one_pass(self, batch: ConversationBatch, end: int | None = None) -> tuple[torch.Tensor, Memory]:
        """[B, end, labels] logits of the first ``end`` utterances (default: all) and the memory after them."""
        if end is not None and not 0 <= end <= batch.turn_lengths.shape[1]:
            raise ValueError(f"end {end}: the batch has {batch.turn_lengths.shape[1]} utterance slots (0..{batch.turn_lengths.shape[1]})")
        meta, positions = self.conversation_meta(batch)
        ids, lengths = batch.input_ids, batch.turn_lengths
        starts = lengths.cumsum(1) - lengths  # [B, N] first column of each utterance
        is_cls = (ids == self.special_ids[0]) & ~meta.is_padding
        turn = meta.utterance.clamp(min=0)
        columns = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
        # each utterance's first [CLS] column (none: its first token, as `cls_states` does)
        cls = torch.full_like(lengths, ids.shape[1]).scatter_reduce(1, turn, columns.masked_fill(~is_cls, ids.shape[1]), "amin")
        cls = torch.where(cls < ids.shape[1], cls, starts)
        memory, outputs = self.empty_memory(ids.shape[0]), []
        ranges = self.chunks(batch, end)
        for i, (a, b) in enumerate(ranges):
            first, count = starts[:, a: a + 1], lengths[:, a:b].sum(1, keepdim=True)  # [B, 1] each
            width = int(count.max())
            taken = first + torch.arange(width, device=ids.device)  # [B, T] the chunk's columns
            real = taken < first + count
            taken = taken.clamp(max=ids.shape[1] - 1)
            run = partial(self._chunk_logits, ids.gather(1, taken).masked_fill(~real, self.pad_id), meta.take(taken, real),
                          positions.gather(1, taken), (cls[:, a:b] - first).clamp(0, width - 1))
            if torch.is_grad_enabled() and i < len(ranges) - 1:  # recomputed in backward: one chunk's graph at a time
                logits, memory = checkpoint(run, memory, use_reentrant=False)
            else:
                logits, memory = run(memory)
            outputs.append(logits)
        if not outputs:  # end = 0
            return memory.states[0].new_zeros(ids.shape[0], 0, self.config.num_labels), memory
        return torch.cat(outputs, dim=1), memory

    def _chunk_logits(self, ids, meta, positions, cls_columns, memory) -> tuple[torch.Tensor, Memory]:
        out, memory = self.encode_chunk(ids, meta, positions, memory)
        hidden = out.last_hidden_state.gather(1, cls_columns.unsqueeze(-1).expand(-1, -1, out.last_hidden_state.shape[-1]))
        return self.classifier(hidden), memory

    def logits_per_step(self, batch: ConversationBatch) -> list[torch.Tensor]:
        """The recurrence, one utterance at a time (`step`): [B, labels] per utterance index; the reference
        that `logits` equals."""
        memory = self.empty_memory(len(batch.lengths))
        logits = []
        for t, input_ids in enumerate(batch.steps):
            cls_state, memory, _ = self.step(input_ids, t, batch.speakers[:, t], memory)
            logits.append(self.classifier(cls_state))
        return logits


class DialogXLSession:
    """Streaming prediction: feed a conversation one utterance at a time.

    The memory is capped at ``mem_len`` tokens, so once it is full the cost of a new utterance no
    longer grows with the conversation. Speakers are numbered in order of first appearance.
    """

    def __init__(self, model: DialogXL, tokenizer, labels: Sequence[str]):
        self.labels = label_names(labels, model.config.num_labels)
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.special_tokens = len(tokenizer("", add_special_tokens=True, verbose=False)["input_ids"])  # an utterance's
        self.reset()

    def reset(self) -> None:
        self.memory = self.model.empty_memory(1)
        self.speakers: dict[str, int] = {}
        self.turn = 0

    def snapshot(self) -> tuple:
        """What `restore` needs to take the session back to this point (`step` makes a new memory; it never changes one)."""
        return self.memory, dict(self.speakers), self.turn

    def restore(self, state: tuple) -> None:
        self.memory, speakers, self.turn = state
        self.speakers = dict(speakers)

    @torch.no_grad()
    def add(self, speaker: str, text: str) -> dict:
        turn = as_turn((speaker, text), f"utterance {self.turn}")  # a DialogueError naming the utterance and field
        speaker = turn.speaker  # a numeric id as its string
        limit = self.model.config.max_utterance_tokens
        read, cut = text_to_read(turn.text, limit)  # a huge text: its start, not its length in time and memory
        ids = self.tokenizer(read, add_special_tokens=True, verbose=False)["input_ids"]
        truncated = len(ids) > limit or cut
        no_tokens = len(ids) <= self.special_tokens  # a combining mark alone, say
        if truncated:
            ids = truncate_keeping_end_specials(ids, limit, closing_special_ids(self.tokenizer))
        device = next(self.model.parameters()).device
        speaker_id = self.speakers.setdefault(speaker, len(self.speakers))
        input_ids = torch.tensor([ids], device=device)
        cls_state, self.memory, _ = self.model.step(input_ids, self.turn, torch.tensor([speaker_id], device=device), self.memory)
        self.turn += 1
        probs = self.model.classifier(cls_state).softmax(-1)[0].tolist()
        best = max(range(len(probs)), key=probs.__getitem__)
        return {
            "speaker": speaker, "text": text, "label": self.labels[best],
            "probabilities": dict(zip(self.labels, probs)), "truncated": truncated,
            **({"no_tokens": True} if no_tokens else {}),  # the model read no word of it, as `annotate` marks
        }
