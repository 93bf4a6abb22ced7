"""Encoder backbones: BERT-, XLNet- and MPNet-compatible encoders whose attention takes conversation
structure (per-head masks, per-layer memory; per-pair relative positions for XLNet and MPNet), plus
loading and parity checks against `transformers`."""

import importlib

# name -> submodule. The submodules load torch and transformers, so they are imported when one of their names is
# first used, not with the package: the command line starts without them.
_WHERE = {
    **dict.fromkeys(("BertConfig", "EncoderOutput", "StructuredEncoder", "build_attention_mask"), "bert"),
    **dict.fromkeys(("DEFAULT_SENTENCES", "check_backbone"), "check"),
    **dict.fromkeys(("MINILM", "BackboneLoadError", "UnsupportedBackboneError", "build_encoder", "freeze_lower_layers", "load_backbone",
                     "load_config", "load_state_dict_file", "load_tokenizer", "load_weights", "random_backbone",
                     "resolve_backbone", "tiny_config"), "loading"),
    **dict.fromkeys(("MPNetConfig", "MPNetStructuredEncoder"), "mpnet"),
    **dict.fromkeys(("XLNetConfig", "XLNetStructuredEncoder"), "xlnet"),
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value
