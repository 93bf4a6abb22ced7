"""Word vectors trained here, on a training split's own text: word2vec (gensim's skip-gram) over the word pieces a
model reads, so that its embedding table can start from them instead of a pretrained backbone's input embeddings.

The pieces are the model's tokenizer's (the same ids the model reads), so the table lines up with the vocabulary
row by row; a piece the training text never holds keeps a small random row (a normal draw at the trained rows'
scale). The vectors depend only on the ids and the settings: `word2vec_table` keeps each table in
``~/.cache/turnformer/word-vectors/KEY-CHECKSUM.safetensors`` (under ``$TURNFORMER_CACHE`` where it is set), and a
later run reads it back instead of training again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from turnformer.cache import cache_root, write_safetensors

logger = logging.getLogger(__name__)

CACHE_FOLDER = "word-vectors"


@dataclass(frozen=True)
class Word2VecSettings:
    """gensim's Word2Vec settings (skip-gram); `dim` is the embedding table's width."""

    dim: int
    window: int = 5
    epochs: int = 5
    negative: int = 5
    seed: int = 1


def default_cache_dir() -> Path:
    return cache_root(CACHE_FOLDER)


def checksum(sentences: Sequence[Sequence[int]], vocab_size: int, settings: Word2VecSettings) -> str:
    digest = hashlib.sha256(json.dumps({"vocab_size": vocab_size, **asdict(settings)}, sort_keys=True).encode())
    for ids in sentences:
        digest.update(b"\n" + ",".join(map(str, ids)).encode())
    return digest.hexdigest()[:16]


def train_word2vec(sentences: Sequence[Sequence[int]], vocab_size: int, settings: Word2VecSettings) -> torch.Tensor:
    """A [vocab_size, dim] table: row i is piece i's word2vec vector where the sentences hold it, else a normal draw
    with the trained rows' standard deviation."""
    from gensim.models import Word2Vec  # a training-time dependency: importing gensim costs a second or two

    started = time.monotonic()
    model = Word2Vec([[str(i) for i in ids] for ids in sentences], vector_size=settings.dim, window=settings.window,
                     min_count=1, sg=1, negative=settings.negative, epochs=settings.epochs, seed=settings.seed,
                     workers=max(1, torch.get_num_threads()))
    seen = torch.tensor([int(word) for word in model.wv.index_to_key], dtype=torch.long)
    trained = torch.from_numpy(model.wv.vectors.copy()).float()
    generator = torch.Generator().manual_seed(settings.seed)
    table = torch.randn(vocab_size, settings.dim, generator=generator) * trained.std()
    table[seen] = trained
    logger.info("word2vec: %d of %d word pieces seen in %d sentences, %.0f s", len(seen), vocab_size, len(sentences),
                time.monotonic() - started)
    return table


def word2vec_table(sentences: Sequence[Sequence[int]], vocab_size: int, settings: Word2VecSettings, key: str,
                   cache_dir: Path | None = None) -> torch.Tensor:
    """`train_word2vec`'s table, read from the cache where it was trained before (`key` names the tokenizer and the
    data, e.g. ``all-MiniLM-L6-v2-swda-train``)."""
    folder = cache_dir or default_cache_dir()
    key = key.replace("/", "--")  # a hub name (owner/model) is one file name
    path = folder / f"{key}-{checksum(sentences, vocab_size, settings)}.safetensors"
    if path.is_file():
        try:
            table = load_file(path)["vectors"]
            if table.shape == (vocab_size, settings.dim):
                return table
        except (OSError, KeyError, ValueError, SafetensorError) as err:  # a damaged cache file is trained again
            logger.warning("%s: unreadable (%s); training the word vectors again", path, err)
    table = train_word2vec(sentences, vocab_size, settings)
    write_safetensors(path, {"vectors": table})
    return table
