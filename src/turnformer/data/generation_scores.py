"""Metrics of response generation, as the DRA and PHAED papers report them (all but perplexity in percent), on
word lists: the generation task and the zero-shot language model of `turnformer.models.smollm2` both score with
them, so they sit below both.

* ``BLEU-n`` (n = 1..4): corpus BLEU with n-gram orders 1..n (uniform weights, brevity penalty) from
  sacrebleu, on our own word tokens (``tokenize="none"``), one reference per response.
* ``Distinct-n`` (Li et al., 2016): distinct n-grams over all n-grams of all generated responses.
* Embedding metrics (Serban et al., 2017), each the mean over responses of a cosine similarity:
  ``Average`` (of the mean word vectors), ``Extrema`` (of the vector extrema: per dimension the value
  of largest magnitude), ``Greedy`` (each word matched to its most similar word on the other side,
  averaged, both directions averaged). The papers use GoogleNews word2vec (PHAED) or GloVe (DRA),
  which this project cannot download; `turnformer.tasks.generation_metrics.minilm_word_vectors` gives
  all-MiniLM-L6-v2's input word-piece embeddings (384-d; a word is the mean of its pieces), so the scores
  are comparable between our models, not with the papers'. Words without a vector are skipped; a pair where either side has
  none scores 0 (and is counted).
* ``perplexity``: exp of the mean negative log-likelihood per predicted token (the caller leaves the
  speaker token out, as PHAED does).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Callable, Mapping, Sequence

import numpy as np
from sacrebleu.metrics import BLEU

WordVectors = Callable[[str], "np.ndarray | None"]


def bleu(hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[str]], max_order: int) -> float:
    """Corpus BLEU-``max_order`` (percent) of word-token lists, one reference each."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    # force: the input is our word tokens on purpose; sacrebleu would warn that it looks tokenised
    scorer = BLEU(max_ngram_order=max_order, tokenize="none", force=True)
    return float(scorer.corpus_score([" ".join(h) for h in hypotheses], [[" ".join(r) for r in references]]).score)


def distinct(hypotheses: Sequence[Sequence[str]], n: int) -> float:
    """Distinct-n (percent): distinct n-grams / all n-grams over the generated responses (0 if none)."""
    grams = Counter(tuple(h[i : i + n]) for h in hypotheses for i in range(len(h) - n + 1))
    total = sum(grams.values())
    return 100.0 * len(grams) / total if total else 0.0


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    denominator = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b) / denominator if denominator > 0 else 0.0


def _extrema(matrix: np.ndarray) -> np.ndarray:
    high, low = matrix.max(0), matrix.min(0)
    return np.where(np.abs(low) > np.abs(high), low, high)


def _greedy(a: np.ndarray, b: np.ndarray) -> float:
    unit = lambda m: m / np.clip(np.linalg.norm(m, axis=1, keepdims=True), 1e-12, None)  # noqa: E731
    similarity = unit(a) @ unit(b).T
    return float((similarity.max(1).mean() + similarity.max(0).mean()) / 2)


def embedding_metrics(hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[str]], vectors: WordVectors) -> dict:
    """Average, Extrema and Greedy (percent), and how many pairs had no known word on a side."""
    scores = {"embedding_average": [], "embedding_extrema": [], "embedding_greedy": []}
    empty = 0
    for hyp, ref in zip(hypotheses, references):
        h = [v for v in map(vectors, hyp) if v is not None]
        r = [v for v in map(vectors, ref) if v is not None]
        if not h or not r:
            empty += 1
            for values in scores.values():
                values.append(0.0)
            continue
        h, r = np.stack(h), np.stack(r)
        scores["embedding_average"].append(_cosine(h.mean(0), r.mean(0)))
        scores["embedding_extrema"].append(_cosine(_extrema(h), _extrema(r)))
        scores["embedding_greedy"].append(_greedy(h, r))
    out = {k: 100.0 * float(np.mean(v)) if v else 0.0 for k, v in scores.items()}
    return {**out, "embedding_pairs_without_vectors": empty}


def perplexity(total_negative_log_likelihood: float, tokens: int) -> float:
    return math.exp(total_negative_log_likelihood / tokens) if tokens else float("nan")


def generation_metrics(hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[str]],
                       vectors: WordVectors | Mapping[str, np.ndarray] | None = None) -> dict:
    """BLEU-1..4, Distinct-1/2 and (with word vectors) the embedding metrics of generated responses."""
    out = {f"bleu_{n}": bleu(hypotheses, references, n) for n in (1, 2, 3, 4)}
    out.update({f"distinct_{n}": distinct(hypotheses, n) for n in (1, 2)})
    if vectors is not None:
        lookup = vectors.get if isinstance(vectors, Mapping) else vectors
        out.update(embedding_metrics(hypotheses, references, lookup))
    return out


__all__ = ["WordVectors", "bleu", "distinct", "embedding_metrics", "generation_metrics", "perplexity"]
