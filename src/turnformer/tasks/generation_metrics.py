"""Metrics of response generation (`turnformer.data.generation_scores`, re-exported here) and the word vectors of
the embedding metrics: all-MiniLM-L6-v2's input word-piece embeddings, read from the installed backbone."""

from __future__ import annotations

import numpy as np

from turnformer.backbones.loading import load_backbone
from turnformer.data.generation_scores import (WordVectors, bleu, distinct, embedding_metrics, generation_metrics,
                                               perplexity)


def minilm_word_vectors(backbone: str = "all-MiniLM-L6-v2") -> WordVectors:
    """Word -> all-MiniLM-L6-v2's input embedding (the mean of the word's WordPiece rows), cached."""
    encoder, tokenizer = load_backbone(backbone)
    table = encoder.embeddings.word_embeddings.weight.detach().numpy()
    cache: dict[str, np.ndarray | None] = {}

    def lookup(word: str):
        if word not in cache:
            ids = tokenizer(word, add_special_tokens=False)["input_ids"]
            ids = [i for i in ids if i != tokenizer.unk_token_id]
            cache[word] = table[ids].mean(0) if ids else None
        return cache[word]

    return lookup


def available_word_vectors() -> WordVectors | None:
    """`minilm_word_vectors` where all-MiniLM-L6-v2 is installed, else None (the embedding metrics are then left out)."""
    try:
        return minilm_word_vectors()
    except (ImportError, OSError):  # not installed, or unreadable (BackboneLoadError is an OSError)
        return None


__all__ = ["WordVectors", "available_word_vectors", "bleu", "distinct", "embedding_metrics", "generation_metrics",
           "minilm_word_vectors", "perplexity"]
