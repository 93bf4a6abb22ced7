"""The dialogue-structure layer: packing with metadata, masks, biases, head layouts and attention.

Masks, biases and packing are pure functions on tensors; `MultiHeadAttention` is the one attention module
of the models, which say which structure each of its calls uses.
"""

from turnformer.structure.attention import (MultiHeadAttention, RelativeTerms, dropout_mask, keep_checkpoint_names,
                                            masked_attention, pretrained_layer_attention)
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
    kept_columns,
    memory_counts,
    pack_dialogues,
    pack_token_ids,
    sequence_meta,
    token_meta,
)

__all__ = [
    "CAUSAL", "DEPENDENCY", "GLOBAL", "HISTORY", "LISTENER", "MASK_NAMES", "MEMORY", "OTHER_UTTERANCE", "REPLY_TO",
    "SAME_UTTERANCE", "SPEAKER",
    "DIALOGXL_HEADS", "HeadLayout", "Mask", "MultiHeadAttention", "PackedBatch", "RelativeTerms", "SpecialTokens", "TokenMeta",
    "dialogxl_layout", "dialogxl_layout_for", "dropout_mask", "empty_rows", "gaussian_local_bias", "keep_checkpoint_names",
    "kept_columns",
    "lc_attention_bias", "lc_centers_and_widths",
    "local", "mask_from_name", "masked_attention", "memory_counts", "own_turns", "pack_dialogues", "pack_token_ids",
    "pretrained_layer_attention",
    "real_pairs", "recent", "sequence_meta", "spoken_by", "token_meta", "turn_relative_distance",
]
