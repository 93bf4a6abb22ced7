"""The dialogue-structure layer: packing with metadata, masks, biases and head layouts.

Pure functions on tensors, no `nn.Module`: models say which heads use which structure.
"""

from turnformer.structure.attention import masked_attention
from turnformer.structure.biases import gaussian_local_bias, lc_attention_bias, lc_centers_and_widths, turn_relative_distance
from turnformer.structure.layouts import DIALOGXL_HEADS, HeadLayout, dialogxl_layout, dialogxl_layout_for
from turnformer.structure.masks import (
    CAUSAL,
    DEPENDENCY,
    GLOBAL,
    HISTORY,
    LISTENER,
    MASK_NAMES,
    MEMORY,
    OTHER_UTTERANCE,
    REPLY_TO,
    SAME_UTTERANCE,
    SPEAKER,
    Mask,
    empty_rows,
    local,
    mask_from_name,
    own_turns,
    real_pairs,
    recent,
    spoken_by,
)
from turnformer.structure.packing import (
    PackedBatch,
    SpecialTokens,
    TokenMeta,
    memory_counts,
    pack_dialogues,
    pack_token_ids,
    sequence_meta,
    token_meta,
)

__all__ = [
    "CAUSAL", "DEPENDENCY", "GLOBAL", "HISTORY", "LISTENER", "MASK_NAMES", "MEMORY", "OTHER_UTTERANCE", "REPLY_TO",
    "SAME_UTTERANCE", "SPEAKER",
    "DIALOGXL_HEADS", "HeadLayout", "Mask", "PackedBatch", "SpecialTokens", "TokenMeta",
    "dialogxl_layout", "dialogxl_layout_for", "empty_rows", "gaussian_local_bias", "lc_attention_bias",
    "lc_centers_and_widths",
    "local", "mask_from_name", "masked_attention", "own_turns", "pack_dialogues", "pack_token_ids", "real_pairs", "recent", "memory_counts",
    "sequence_meta", "spoken_by", "token_meta", "turn_relative_distance",
]
