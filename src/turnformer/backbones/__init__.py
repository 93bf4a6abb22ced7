"""Encoder backbones: BERT-, XLNet- and MPNet-compatible encoders whose attention takes conversation
structure (per-head masks, per-layer memory; per-pair relative positions for XLNet and MPNet), plus
loading and parity checks against `transformers`."""

from turnformer.backbones.bert import BertConfig, EncoderOutput, StructuredEncoder, build_attention_mask
from turnformer.backbones.check import DEFAULT_SENTENCES, check_backbone
from turnformer.backbones.loading import (
    MINILM,
    BackboneLoadError,
    UnsupportedBackboneError,
    build_encoder,
    load_backbone,
    load_config,
    load_state_dict_file,
    load_tokenizer,
    load_weights,
    random_backbone,
    resolve_backbone,
    tiny_config,
)
from turnformer.backbones.mpnet import MPNetConfig, MPNetStructuredEncoder
from turnformer.backbones.xlnet import XLNetConfig, XLNetStructuredEncoder

__all__ = [
    "MINILM",
    "DEFAULT_SENTENCES",
    "BackboneLoadError",
    "BertConfig",
    "EncoderOutput",
    "MPNetConfig",
    "MPNetStructuredEncoder",
    "StructuredEncoder",
    "UnsupportedBackboneError",
    "XLNetConfig",
    "XLNetStructuredEncoder",
    "build_attention_mask",
    "build_encoder",
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
