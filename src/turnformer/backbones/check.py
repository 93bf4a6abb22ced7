"""Check our encoder against `transformers` on the same weights: same sentences, same outputs."""

from __future__ import annotations

from typing import Sequence

import torch
from transformers import AutoModel, MPNetModel
from transformers.utils import logging as hf_logging

from turnformer.backbones.loading import BackboneLoadError, load_backbone, resolve_backbone
from turnformer.backbones.mpnet import MPNetStructuredEncoder

__all__ = ["DEFAULT_SENTENCES", "DEFAULT_TOLERANCE", "check_backbone"]

DEFAULT_TOLERANCE = 1e-5

# Lines of an everyday conversation, of different lengths, so the batch needs padding.
DEFAULT_SENTENCES = (
    "Hey, are you still coming to dinner tonight?",
    "Yes!",
    "Great. Can you pick up some bread on the way? The bakery on the corner closes at seven.",
    "Sure, no problem. Anything else?",
    "Maybe a bottle of wine, if you don't mind.",
)


def _quiet_load(auto_class, folder) -> torch.nn.Module:
    """transformers' model in eval mode, fp32, without its progress bar on the user's terminal."""
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        return auto_class.from_pretrained(str(folder), dtype=torch.float32).eval()
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def check_backbone(
    name: str, sentences: Sequence[str] | None = None, tolerance: float = DEFAULT_TOLERANCE
) -> dict:
    """Run our encoder and transformers' own model (eval, fp32) on one padded batch: `MPNetModel`
    for our MPNet encoder, `transformers.AutoModel` otherwise (BertModel, XLNetModel).

    Returns ``{"backbone", "max_abs_diff", "tokens", "sentences", "tolerance", "ok"}``, where the
    difference is over the real (non-padding) tokens of ``last_hidden_state``.
    """
    sentences = list(DEFAULT_SENTENCES if sentences is None else sentences)
    if not sentences:
        raise ValueError("check_backbone needs at least one sentence")
    folder = resolve_backbone(name)
    ours, tokenizer = load_backbone(str(folder))
    try:
        reference = _quiet_load(MPNetModel if isinstance(ours, MPNetStructuredEncoder) else AutoModel, folder)
    except Exception as err:  # transformers' own failures are of every kind (KeyError, ValueError, OSError...)
        raise BackboneLoadError(f"{folder}: transformers cannot load it ({type(err).__name__}: {err})") from err

    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    real = batch["attention_mask"].bool()
    try:
        with torch.no_grad():
            mine = ours(
                batch["input_ids"], token_type_ids=batch.get("token_type_ids"), attention_mask=real
            ).last_hidden_state
            theirs = reference(**batch).last_hidden_state
    except (ValueError, IndexError, RuntimeError) as err:  # a config too small for the sentences (positions)
        raise BackboneLoadError(f"{folder}: the check's {len(sentences)} sentences ({real.shape[1]} tokens the longest) "
                                f"do not run through it: {err}") from err
    diff = float((mine - theirs).abs()[real].max())
    return {
        "backbone": name,
        "max_abs_diff": diff,
        "tokens": int(real.sum()),
        "sentences": len(sentences),
        "tolerance": tolerance,
        "ok": diff < tolerance,
    }
