"""PHAED (Personalized Hierarchical Attentive Encoder-Decoder) response generator, mapped onto our instances.

Each instance is one response with its context (at most 4 utterances, flat in ``batch.context``;
``batch.context_role`` tells queries (role Q, another speaker) from earlier responses of the responder
(role R)). There is no state across instances: the turn-level recurrence memory is recomputed per instance.

- Input (eq. 2): B(x) = E(x) sqrt(d) + TE(turn) + PE(i), i = the token's position *within its utterance*.
  TE is the *aligned* turn (capped at ``max_turns``; none with ``turn_embeddings=False``). ``turn_count =
  "back"`` counts it back from the response, as the Transformer baseline counts its turns, since the
  instances see a window of the conversation: the newest query and the response share TE(1), the next older
  query and the newest earlier response TE(2), ... So the response is always TE(1), and the memory below
  decodes each earlier response under TE(2) or more, inputs the decoder never learns to generate from.
  ``turn_count = "conversation"`` counts from the conversation's start, as the paper's TE(t) does: Q_t and
  R_t share TE(t), t = the responder's utterances so far (`GenerationBatch.response_turn`), so an earlier
  response's memory is the decoder's own states of it when it was the target (tested).
  ``response_turn_embedding=False`` (a diagnostic) leaves TE off the response's tokens, as the Transformer
  baseline's decoder input has none.
- Inner-query encoding (sec. 3.3.1): ``layers`` pre-norm Transformer layers over the flat context whose
  self-attention is restricted to the same query utterance; R utterances are never read by the encoder.
- Inter-query encoding (eq. 3-5): ``inter_layers`` pre-norm layers of turn-level relative attention: a
  query token attends to the tokens of every query at or before its own (t >= p, turns counted in
  queries), with learnable B^K_r, B^V_r added to keys and values, r = min(t - p, r_max); r_max + 1
  vectors (r = 0 included; the paper's d x r_max is one short). Computed as in Shaw et al.: a score bias
  q . B^K_r and, after the softmax, the attention mass on each r times B^V_r, so no (Q, K, d) tensor.
  ``turn_attention=False`` (ablation) keeps the same layer, mask (queries at or before) and FFN, but
  plain attention: no relative vectors.
- Decoder with turn-level recurrence (eq. 6-8): ``layers`` pre-norm layers; each layer's self-attention
  keys / values are [SG(memory) ; response states] (causal on the response), then cross-attention to
  the encoded query the response answers (S^_t: the newest query of the context; it has seen the older
  ones by eq. 3-5), then FFN; the output projection is tied to the word embeddings (eq. 8). The memory
  of layer n is the layer-(n-1) states of the newest ``c_max`` earlier responses (context R utterances),
  computed by the same decoder under ``torch.no_grad()`` (stop-gradient) in `encode`, each earlier
  response with causal self-attention on itself and cross-attention to the query it answered (the
  newest query before it). ``c_max=0`` (ablation): no memory. ``cross_attention = "queries"`` (a diagnostic) lets
  the decoder read every query before the response (and an earlier response every query before it), as the
  Transformer baseline's decoder reads every context token, where the paper's reads the one it answers.

Only what is read is computed: the encoder runs over the queries' tokens alone (no query reads an earlier response,
and the decoder reads the encoder at queries only), the memory's pass over the newest ``c_max`` earlier responses alone
(`kept_columns`), and there the FFNs skip the padding left where rows keep different numbers of tokens (a third of the
queries' columns and half the memory's on DailyDialog); equal in outputs and gradients to computing every context token,
as the former code did (tested).

Simplifications: the recurrence is one level deep (earlier responses are decoded without a memory of
their own), so exactly ``c_max`` earlier responses are visible, where Transformer-XL's would reach
N * c_max back; the memory is recomputed per instance; no dropout on attention probabilities (only on
sub-layer outputs and in the FFN; ``transformer_attention`` adds it, with the Transformer baseline's initialisation of
the attention projections); a query with no visible key (no query in the context, an earlier
response answering no query) outputs zero by the project's empty-row policy (`masked_attention`).

Every mask is a predicate of the structure layer over the tokens' metadata, whose speakers are the
queries' (another speaker, `OTHER`) and the responder's (`RESPONDER`), and whose utterances are numbered
in conversation order (the response comes after the newest context utterance): `INNER`, `INTER`,
`EARLIER_RESPONSE` and `DECODER_SELF` below, `REPLY_TO` for cross-attention (a response reads the query it
answers: the latest utterance of another speaker before it; `CROSS_ATTENTION`) and `own_turns` for the memory.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from turnformer.models.generator_base import IGNORE, GenerationBatch, GeneratorBase, GeneratorConfig
from turnformer.structure.attention import (SEPARATE_PROJECTION_NAMES, MultiHeadAttention, RelativeTerms, keep_checkpoint_names,
                                            stacked_linear)
from turnformer.structure.biases import turn_relative_distance
from turnformer.structure.masks import CAUSAL, HISTORY, LISTENER, REPLY_TO, SAME_UTTERANCE, SPEAKER, own_turns, spoken_by
from turnformer.structure.packing import TokenMeta, kept_columns, token_meta

OTHER, RESPONDER = 0, 1  # the speakers of the token metadata: a query's (context_role 1), the responder's (role 2)

INNER = SAME_UTTERANCE & spoken_by(OTHER)  # sec. 3.3.1: a query token sees its own query
INTER = SPEAKER & spoken_by(OTHER) & HISTORY  # eq. 3-5: a query token sees the queries at or before its own
EARLIER_RESPONSE = SAME_UTTERANCE & CAUSAL & spoken_by(RESPONDER)  # an earlier response, decoded on its own
DECODER_SELF = SAME_UTTERANCE & CAUSAL  # the response's own past (the memory keys are `own_turns(c_max)`)
TURN_COUNTS = ("back", "conversation")  # PHAEDConfig.turn_count
# PHAEDConfig.cross_attention: what a response's decoder reads of the encoded context (an earlier response's too): the
# query it answers (eq. 6-8), or every query before it (the other speaker's utterances at or before its own)
CROSS_ATTENTION = {"reply": REPLY_TO, "queries": LISTENER & HISTORY}


@dataclass
class PHAEDConfig(GeneratorConfig):
    r_max: int = 4  # largest turn-level relative distance between queries (eq. 4)
    c_max: int = 2  # earlier responses in the decoder's memory (eq. 6); 0 = no recurrence
    turn_attention: bool = True  # False: plain attention in the inter-query encoder (ablation)
    inter_layers: int = 1  # turn-level relative attention layers (eq. 3); 0: none (an ablation: no query sees another)
    turn_count: str = "back"  # TE counted back from the response, or from the conversation's start ("conversation")
    # the attention layers drawn and regularised as the Transformer baseline's (Xavier-uniform input projections, zero
    # biases, dropout on the attention probabilities but those of the turn-level relative attention); False: nn.Linear's
    # draw and no dropout there
    transformer_attention: bool = False
    # False: the response's tokens carry no turn embedding, as the Transformer baseline's decoder input (a diagnostic;
    # the context's tokens, earlier responses in the memory included, keep theirs)
    response_turn_embedding: bool = True
    # True: the layers of each stack (inner-query, inter-query, decoder) start as copies of its first, as
    # nn.TransformerEncoder's and nn.TransformerDecoder's (the Transformer baseline's) do; False: each drawn on its own
    copied_layers: bool = False
    # "reply": the decoder cross-attends to the query the response answers (the paper's); "queries": to every query before
    # it, as the Transformer baseline's decoder reads every context token (a diagnostic)
    cross_attention: str = "reply"

    def __post_init__(self) -> None:
        super().__post_init__()  # whole numbers, none below 0 (r_max, c_max, inter_layers)
        if self.turn_count not in TURN_COUNTS:
            raise ValueError(f"model_config.turn_count = {self.turn_count!r}: expected one of {', '.join(TURN_COUNTS)}")
        if self.cross_attention not in CROSS_ATTENTION:
            raise ValueError(f"model_config.cross_attention = {self.cross_attention!r}: expected one of "
                             f"{', '.join(CROSS_ATTENTION)}")


class PHAEDState(NamedTuple):
    """What the decoder reads of a batch's context (`PHAED.encode`). Only the queries' tokens go through the encoder and
    only the remembered responses' through the memory's pass (`kept_columns`); their states are laid out at their
    context columns (zero at the others), and the decoder reads those columns back."""

    encoded: torch.Tensor  # [B, Lc, d] the encoded queries
    context: TokenMeta  # the context's metadata [B, Lc]
    memory: list[torch.Tensor] | None  # per decoder layer, the states entering it [B, Lc, d]; None: no memory
    response_turn: torch.Tensor  # [B, 1] the response's aligned turn
    queries: tuple[torch.Tensor, torch.Tensor]  # the queries' columns [B, Tq] and which are real [B, Tq]
    remembered: tuple[torch.Tensor, torch.Tensor] | None  # the newest c_max earlier responses' columns [B, Tm], real

    def rows(self, index: torch.Tensor) -> "PHAEDState":
        """Rows ``index`` of every tensor (the hypotheses a beam search keeps)."""
        def taken(value):
            if value is None:
                return None
            if isinstance(value, (torch.Tensor, TokenMeta)):
                return value[index] if isinstance(value, torch.Tensor) else value.rows(index)
            return type(value)(taken(v) for v in value)  # the memory's layers, a (columns, valid) pair

        return PHAEDState(*(taken(value) for value in self))


def _at_columns(states: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """states [B, L, d] at columns [B, T] -> [B, T, d]."""
    return states.gather(1, columns.unsqueeze(-1).expand(-1, -1, states.shape[-1]))


def _laid_out(states: torch.Tensor, kept: tuple[torch.Tensor, torch.Tensor], length: int) -> torch.Tensor:
    """states [B, T, d] of the kept (columns, valid) at their columns of a [B, length, d] tensor, zero elsewhere."""
    columns, valid = kept
    out = states.new_zeros(states.shape[0], length, states.shape[-1])
    return out.scatter(1, columns.unsqueeze(-1).expand_as(states), states * valid.unsqueeze(-1))


class Attention(MultiHeadAttention):
    """The structure layer's attention; with ``relative`` > 0 buckets, PHAED's turn-level relative attention
    (eq. 4-5): the relation vectors B^K_r added to the keys and B^V_r to the values (`RelativeTerms`). With
    `like_transformer`, drawn and regularised as the Transformer baseline's attention (`draw_as_torch`; its `dropout`
    on the attention probabilities, where no relation vectors are read: they read the probabilities before it)."""

    def __init__(self, d: int, heads: int, relative: int = 0, like_transformer: bool = False, dropout: float = 0.0):
        # the query, key, value and output projections drawn one after the other, as separate layers were
        super().__init__(d, heads, dropout if like_transformer and not relative else 0.0,
                         qkv=stacked_linear(*(nn.Linear(d, d) for _ in range(3))), out=nn.Linear(d, d))
        if like_transformer:
            self.draw_as_torch()
        self.rel_key = nn.Parameter(torch.randn(relative, d) * 0.02) if relative else None  # B^K (one row per r)
        self.rel_value = nn.Parameter(torch.randn(relative, d) * 0.02) if relative else None  # B^V
        keep_checkpoint_names(self, SEPARATE_PROJECTION_NAMES)  # checkpoints hold query, key and value apart

    def forward(self, x, keys, mask, relative=None):
        """x [B, Lq, d], keys [B, Lk, d], mask [B, Lq, Lk] (True = visible), relative [B, Lq, Lk] long r -> [B, Lq, d]."""
        terms = None if self.rel_key is None or relative is None else RelativeTerms(relative, self.rel_key, self.rel_value)
        return super().forward(x, keys, mask, relative=terms)[0]


class Layer(nn.Module):
    """Pre-norm layer: self-attention (keys [memory ; x]), optional cross-attention, FFN; each sub-layer
    adds dropout(f(LayerNorm(x))) to x."""

    def __init__(self, config: PHAEDConfig, cross: bool = False, relative: int = 0):
        super().__init__()
        d = config.d_model
        like = {"like_transformer": config.transformer_attention, "dropout": config.dropout}
        self.self_norm, self.self_attention = nn.LayerNorm(d), Attention(d, config.heads, relative, **like)
        self.cross_norm = nn.LayerNorm(d) if cross else None
        self.cross_attention = Attention(d, config.heads, **like) if cross else None
        self.ff_norm = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, config.ff), nn.ReLU(), nn.Dropout(config.dropout), nn.Linear(config.ff, d))
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x, mask, memory=None, relative=None, cross=None, cross_mask=None, real=None):
        """x [B, T, d]; ``real`` [B, T]: the tokens that are read (None: all), the only ones the FFN computes."""
        h = self.self_norm(x)
        keys = h if memory is None else torch.cat([self.self_norm(memory), h], 1)
        x = x + self.dropout(self.self_attention(h, keys, mask, relative))
        if self.cross_attention is not None:
            x = x + self.dropout(self.cross_attention(self.cross_norm(x), cross, cross_mask))
        return self._feed_forward(x, real)

    def _feed_forward(self, x, real=None):
        """x + dropout(FFN(LayerNorm(x))) at the ``real`` tokens [B, T] (None: all); x as it is at the others."""
        if real is None:
            return x + self.dropout(self.ff(self.ff_norm(x)))
        flat, rows = x.flatten(0, 1), real.flatten().nonzero().squeeze(1)  # [B * T, d], [N]
        return flat.index_add(0, rows, self.dropout(self.ff(self.ff_norm(flat.index_select(0, rows))))).view_as(x)

    def step(self, x, mask, past=None, cross=None, cross_mask=None):
        """`forward` (without relative terms) for the newest positions x [B, Q, d], the keys and values of what they
        attend to before them kept in `past` ([B, P, d] each: the memory's, then the earlier positions'; None: none)
        and the cross-attention's in `cross` (projected once: ``cross_attention.project_keys``); mask [B, Q, P + Q].
        Returns (x [B, Q, d], the self-attention keys and values of all P + Q positions)."""
        attended, kept = self.self_attention.step(self.self_norm(x), mask, past)
        x = x + self.dropout(attended)
        if self.cross_attention is not None:
            query = self.cross_attention.project_queries(self.cross_norm(x))
            x = x + self.dropout(self.cross_attention.attend(query, *cross, cross_mask)[0])
        return x + self.dropout(self.ff(self.ff_norm(x))), kept


class PHAED(GeneratorBase):
    """Hierarchical (inner- then inter-query) encoder of the queries, and a decoder that also attends
    to the stop-gradient states of the responder's earlier responses (see the module docstring)."""

    config_class = PHAEDConfig

    def __init__(self, config: PHAEDConfig, pad_id: int = 0, eou_id: int = 3):
        super().__init__()
        self._add_embeddings(config, pad_id, eou_id)  # PE(i): position within the utterance; TE: aligned turn
        d = config.d_model
        relative = config.r_max + 1 if config.turn_attention else 0
        self.inner = self._stack(lambda: Layer(config), config.layers)
        self.inter = self._stack(lambda: Layer(config, relative=relative), config.inter_layers)
        self.encoder_norm = nn.LayerNorm(d)
        self.decoder = self._stack(lambda: Layer(config, cross=True), config.layers)
        self.decoder_norm = nn.LayerNorm(d)
        self.reads = CROSS_ATTENTION[config.cross_attention]  # the decoder's cross-attention mask
        self._init_word_embeddings()

    def _stack(self, make, count: int) -> nn.ModuleList:
        """`count` layers from `make`: each drawn on its own, or (``copied_layers``) copies of the first."""
        if not self.config.copied_layers or count == 0:
            return nn.ModuleList(make() for _ in range(count))
        first = make()
        return nn.ModuleList([first, *(copy.deepcopy(first) for _ in range(count - 1))])

    def _embed(self, ids: torch.Tensor, position: torch.Tensor, turn: torch.Tensor) -> torch.Tensor:
        """Eq. 2: E(x) sqrt(d) + TE(turn) + PE(position)."""
        longest = int(position.max()) + 1
        if longest > self.config.max_positions:
            raise ValueError(f"an utterance of {longest} tokens is over max_positions = {self.config.max_positions}")
        return self.embed_tokens(ids, position, turn)

    @staticmethod
    def _context_meta(batch: GenerationBatch) -> TokenMeta:
        """The context's `TokenMeta`: utterances in conversation order (0 = the oldest in the row), speakers
        `OTHER` (queries) and `RESPONDER` (earlier responses)."""
        if batch.context_role is None:
            raise ValueError("PHAED needs batch.context_role (1 = query, 2 = earlier response, 0 = padding)")
        turn = batch.context_turn  # 1 = the newest utterance, 0 on padding
        return token_meta(turn.amax(1, keepdim=True) - turn, batch.context_role - 1, turn.eq(0))  # roles 1, 2: speakers 0, 1

    @staticmethod
    def _ranks(context: TokenMeta, turn: torch.Tensor) -> torch.Tensor:
        """[B, Lc]: each token's utterance's rank among its speaker's context utterances, 1 = the newest (the
        queries' and the earlier responses' turn counts, from the response back); 0 on padding."""
        # per utterance u = 1..T (how many back): its speaker; cumulative counts give ranks from the newest
        speaker = context.speaker.new_full((turn.shape[0], int(turn.max()) + 1), -1)
        speaker = speaker.scatter_reduce(1, turn, context.speaker, "amax")
        return torch.where(context.speaker.eq(OTHER), speaker.eq(OTHER).cumsum(1).gather(1, turn),
                           speaker.eq(RESPONDER).cumsum(1).gather(1, turn))

    @staticmethod
    def _response_meta(context: TokenMeta, is_padding: torch.Tensor) -> TokenMeta:
        """The response's `TokenMeta` [B, Lr] (`is_padding` [B, Lr]): the responder's utterance after the context's
        newest."""
        after_context = (context.utterance.amax(1, keepdim=True) + 1).expand_as(is_padding)
        return token_meta(after_context, torch.full_like(after_context, RESPONDER), is_padding)

    def highest_turn(self, instance) -> int:
        """The largest aligned turn of `instance` (`encode`'s): its response's turn from the conversation's start, or
        counted back, its queries' count or its earlier responses' count + 1, whichever is more."""
        if self.config.turn_count == "conversation":
            return instance.response_turn
        roles = [u.role for u in instance.context]
        return max(roles.count("Q"), roles.count("R") + 1)

    def _response_turn(self, batch: GenerationBatch) -> torch.Tensor:
        """[B, 1]: the response's aligned turn, 1 counted back; from the conversation's start, the batch's."""
        if self.config.turn_count == "back":
            return batch.context.new_ones(len(batch), 1)
        if batch.response_turn is None or not batch.response_turn.ge(1).all():
            raise ValueError('PHAED with turn_count = "conversation" needs each response\'s turn from the conversation\'s '
                             "start (GenerationBatch.response_turn, from make_instances)")
        return batch.response_turn.unsqueeze(1)

    def encode(self, batch: GenerationBatch) -> PHAEDState:
        """Encoded queries, the context's metadata, the decoder memory (one state per layer, or None) and the response's
        aligned turn [B, 1] (`PHAEDState`)."""
        context = self._context_meta(batch)
        rank = self._ranks(context, batch.context_turn)
        is_response = context.speaker.eq(RESPONDER)
        back = torch.where(is_response, rank + 1, rank)  # aligned turn counted back; the response's is 1
        response_turn = self._response_turn(batch)
        aligned = back if self.config.turn_count == "back" else torch.where(
            context.is_padding, 0, (response_turn + 1 - back).clamp(min=1))  # counted from the conversation's start
        embedded = self._embed(batch.context, context.position, aligned)  # [B, Lc, d]
        # the encoder reads and is read at the queries' tokens alone: only those are computed
        queries = kept_columns(context.speaker.eq(OTHER))
        query_meta, query_rank = context.take(*queries), rank.gather(1, queries[0])
        x = _at_columns(embedded, queries[0])  # [B, Tq, d]
        inner = INNER(query_meta, query_meta)
        for layer in self.inner:
            x = layer(x, inner, real=queries[1])
        # the query count back: t - p = rank(p) - rank(t) for a query token t and a key p at or before it
        relative = turn_relative_distance(-query_rank, -query_rank, self.config.r_max).clamp(min=0)
        inter = INTER(query_meta, query_meta)
        for layer in self.inter:
            x = layer(x, inter, relative=relative, real=queries[1])
        encoded = self.encoder_norm(x)  # [B, Tq, d]

        memory = remembered = None
        if self.config.c_max > 0:
            # the earlier responses the decoder remembers (`own_turns`), each decoded on its own; SG(M) of eq. 7
            probe = self._response_meta(context, context.is_padding.new_zeros(len(batch), 1))
            remembered = kept_columns(own_turns(self.config.c_max)(probe, context)[:, 0])
            remembered_meta = context.take(*remembered)
            with torch.no_grad():
                h, memory = _at_columns(embedded.detach(), remembered[0]), []
                own_past, answered = EARLIER_RESPONSE(remembered_meta, remembered_meta), self.reads(remembered_meta, query_meta)
                for layer in self.decoder:
                    memory.append(_laid_out(h, remembered, context.shape[1]))  # layer n's memory: the states entering it (eq. 6)
                    h = layer(h, own_past, cross=encoded, cross_mask=answered, real=remembered[1])
        return PHAEDState(_laid_out(encoded, queries, context.shape[1]), context, memory, response_turn, queries, remembered)

    @staticmethod
    def _decoder_keys(state: PHAEDState) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        """What the decoder attends to, at the columns it reads: the encoded queries [B, Tq, d] and the memory's states
        per layer [B, Tm, d] (None without memory)."""
        encoded = _at_columns(state.encoded, state.queries[0])
        return encoded, None if state.memory is None else [_at_columns(m, state.remembered[0]) for m in state.memory]

    @staticmethod
    def _at_kept_keys(state: PHAEDState, mask: torch.Tensor, cross_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`_decoder_masks`' masks over the context's columns (mask [B, Q, (Lc +) Lr], cross_mask [B, Q, Lc]) at the
        columns `_decoder_keys` reads: [B, Q, (Tm +) Lr] and [B, Q, Tq]."""
        def kept(over_context, columns, valid):  # [B, Q, Lc] -> [B, Q, T]
            return over_context.gather(2, columns.unsqueeze(1).expand(-1, over_context.shape[1], -1)) & valid.unsqueeze(1)

        cross_mask = kept(cross_mask, *state.queries)
        if state.memory is not None:
            length = state.context.shape[1]
            mask = torch.cat([kept(mask[..., :length], *state.remembered), mask[..., length:]], 2)
        return mask, cross_mask

    def decode_states(self, state: PHAEDState, response_in: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        encoded, memory = self._decoder_keys(state)
        x = self._embed_response(response_in, state.response_turn, 0)
        mask, cross_mask = self._at_kept_keys(state, *self._decoder_masks(state.context, memory is not None, response_in))
        for n, layer in enumerate(self.decoder):
            x = layer(x, mask, memory=None if memory is None else memory[n], cross=encoded, cross_mask=cross_mask)
        return self.decoder_norm(x[:, -1] if last_only else x)  # eq. 8's input (the output is tied to the embeddings)

    def _embed_response(self, response_in: torch.Tensor, response_turn: torch.Tensor, start: int) -> torch.Tensor:
        """The response's tokens from `start` on, embedded at their positions and the response's aligned turn [B, 1]
        (no turn without ``response_turn_embedding``)."""
        new = response_in[:, start:]
        position = torch.arange(start, response_in.shape[1], device=response_in.device).expand_as(new)
        return self._embed(new, position, response_turn.expand_as(new) if self.config.response_turn_embedding else None)

    def _decoder_masks(self, context: TokenMeta, with_memory: bool, response_in: torch.Tensor,
                       first: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """The decoder's self-attention mask [B, Lr - first, (Lc +) Lr] (keys [memory ; response], the memory
        `with_memory`) and its cross-attention mask [B, Lr - first, Lc] (the response answers the newest query): the
        rows of the response's tokens from `first` on (a cached step's new ones)."""
        response = self._response_meta(context, response_in.eq(self.pad_id))
        keys = TokenMeta.concat([context, response]) if with_memory else response
        rows = response.select(slice(first, None))
        return (DECODER_SELF | own_turns(self.config.c_max))(rows, keys), self.reads(rows, context)

    def stepper(self, state) -> "CachedSteps":
        return CachedSteps(self, state)


class CachedSteps:
    """Decoding's next-token logits with the decoder's keys and values kept: each layer's memory of the earlier
    responses and the encoded queries projected once, the response's own keys and values added a token at a time; the
    first call reads the response prefix as `decode` does, every later call only the token added since. The masks are
    `decode`'s rows for the new tokens, and only those are built. The logits equal
    ``decode(state, response_in, last_only=True)`` (tested)."""

    def __init__(self, model: PHAED, state: PHAEDState):
        self.model, self.state, self.read = model, state, 0
        encoded, memory = model._decoder_keys(state)
        self.cross = [layer.cross_attention.project_keys(encoded) for layer in model.decoder]
        self.past = [None if memory is None else layer.self_attention.project_keys(layer.self_norm(memory[n]))
                     for n, layer in enumerate(model.decoder)]  # per layer: keys and values [B, (Tm +) T, d]

    def __call__(self, response_in: torch.Tensor) -> torch.Tensor:
        m = self.model
        if self.read and response_in.shape[1] != self.read + 1:
            raise ValueError(f"a cached decoding step takes the response one token longer ({self.read + 1}), "
                             f"got {response_in.shape[1]}")
        x = m._embed_response(response_in, self.state.response_turn, self.read)
        masks = m._decoder_masks(self.state.context, self.state.memory is not None, response_in, first=self.read)
        mask, cross_mask = m._at_kept_keys(self.state, *masks)
        for n, layer in enumerate(m.decoder):
            x, self.past[n] = layer.step(x, mask, self.past[n], self.cross[n], cross_mask)
        self.read = response_in.shape[1]
        return m.decoder_norm(x[:, -1]) @ m.embed.weight.T

    def reorder(self, rows: torch.Tensor) -> None:
        """Row i of the next step continues row ``rows[i]`` of this one (beam search keeps some hypotheses twice)."""
        self.past = [(key[rows], value[rows]) for key, value in self.past]
        self.cross = [(key[rows], value[rows]) for key, value in self.cross]
        self.state = self.state.rows(rows)


__all__ = ["IGNORE", "CachedSteps", "PHAED", "PHAEDConfig", "PHAEDState"]
