"""Encoder backbones: a BERT-compatible encoder whose attention takes conversation structure
(per-head masks, per-layer memory), plus loading and parity checks against `transformers`."""

from turnformer.backbones.bert import BertConfig, EncoderOutput, StructuredEncoder, build_attention_mask
from turnformer.backbones.check import DEFAULT_SENTENCES, check_backbone
from turnformer.backbones.loading import (
    MINILM,
    BackboneLoadError,
    UnsupportedBackboneError,
    load_backbone,
    load_config,
    load_state_dict_file,
    load_tokenizer,
    load_weights,
    random_backbone,
    resolve_backbone,
    tiny_config,
)

__all__ = [
    "MINILM",
    "DEFAULT_SENTENCES",
    "BackboneLoadError",
    "BertConfig",
    "EncoderOutput",
    "StructuredEncoder",
    "UnsupportedBackboneError",
    "build_attention_mask",
    "check_backbone",
    "load_backbone",
    "load_config",
    "load_state_dict_file",
    "load_tokenizer",
    "load_weights",
    "random_backbone",
    "resolve_backbone",
    "tiny_config",
]
