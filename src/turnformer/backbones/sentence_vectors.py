"""Frozen sentence encoders (all-mpnet-base-v2, all-MiniLM-L6-v2...) run as sentence-transformers runs them, and the
vectors they give a dataset's utterances, cached on disk.

A sentence-transformers model folder says how its token states become one vector: ``modules.json`` lists the
modules (Transformer, then Pooling, then Normalize for these two models), ``1_Pooling/config.json`` the pooling
(mean over the tokens the attention mask keeps, [CLS] included, for both), ``sentence_bert_config.json`` the
longest input (384 tokens for all-mpnet-base-v2, 256 for all-MiniLM-L6-v2). A plain encoder folder without them
is mean-pooled, unnormalised, as sentence-transformers treats one.

The encoder is frozen, so a split's vectors never change: `sentence_vectors` computes them once and keeps them in
``~/.cache/turnformer/sentence-vectors/ENCODER/DATASET-SPLIT-CHECKSUM.safetensors`` (under ``$TURNFORMER_CACHE``
instead of ``~/.cache/turnformer`` where it is set), the checksum over the split's texts and how they are encoded:
a changed text is a new file, and a later run reads the vectors back in a second, without loading the encoder.
An encoding cut short (SwDA's training split took 69 minutes on one CPU thread) goes on where it stopped: what it
had done is in ``DATASET-SPLIT-CHECKSUM.partial.safetensors`` beside, written every two minutes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from safetensors import SafetensorError, safe_open

from turnformer.backbones.loading import BackboneLoadError, load_auto_encoder, resolve_backbone
from turnformer.cache import cache_root, write_safetensors
from turnformer.dialogue import texts_to_read

logger = logging.getLogger(__name__)

CACHE_FOLDER = "sentence-vectors"
PROGRESS_SECONDS = 120  # how often a long encoding writes what it has done (see `SentenceEncoder.encode`)


def default_cache_dir() -> Path:
    """Where `sentence_vectors` keeps vectors: beside the other caches of turnformer."""
    return cache_root(CACHE_FOLDER)


@dataclass(frozen=True)
class Pooling:
    """How token states become a sentence vector: the folder's sentence-transformers settings."""

    mode: str  # "mean" (over the tokens the attention mask keeps) or "cls" (the first token's state)
    normalize: bool  # L2-normalised afterwards
    max_length: int  # tokens per sentence, special tokens included; longer ones are cut to their start


def read_pooling(folder: Path) -> Pooling:
    """The pooling of a sentence-transformers folder; a plain encoder folder: mean, unnormalised, its positions."""
    modules = _json(folder / "modules.json", default=[])
    types = [m.get("type", "").rsplit(".", 1)[-1] for m in modules]
    pooling_path = next((m.get("path", "") for m in modules if m.get("type", "").endswith(".Pooling")), None)
    settings = _json(folder / pooling_path / "config.json", default={}) if pooling_path else {}
    modes = [mode for mode in ("mean", "cls", "max", "mean_sqrt_len") if settings.get(f"pooling_mode_{mode}_tokens")
             or settings.get(f"pooling_mode_{mode}_token")]
    if len(modes) > 1 or modes and modes[0] not in ("mean", "cls"):
        raise BackboneLoadError(f"{folder}: pooling {'+'.join(modes)} is not supported (mean or cls)")
    max_length = _json(folder / "sentence_bert_config.json", default={}).get("max_seq_length")
    if max_length is None:
        max_length = _json(folder / "config.json", default={}).get("max_position_embeddings", 512)
    return Pooling(modes[0] if modes else "mean", "Normalize" in types, int(max_length))


def _json(path: Path, default: Any) -> Any:
    if not path.is_file():
        return default
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise BackboneLoadError(f"{path}: unreadable ({err})") from err


def pool(states: torch.Tensor, mask: torch.Tensor, pooling: Pooling) -> torch.Tensor:
    """states [B, T, D], mask [B, T] (True = a real token) -> sentence vectors [B, D]."""
    if pooling.mode == "cls":
        vectors = states[:, 0]
    else:
        keep = mask.unsqueeze(-1).to(states.dtype)
        vectors = (states * keep).sum(1) / keep.sum(1).clamp_min(1e-9)
    return F.normalize(vectors, p=2, dim=-1) if pooling.normalize else vectors


class SentenceEncoder:
    """A frozen sentence encoder: texts -> vectors [N, dim]. Its weights and tokenizer load on the first `encode`, so
    a run whose vectors are all cached never loads them."""

    def __init__(self, name: str, batch_size: int = 64, device: str | torch.device | None = None):
        self.name = name
        self.folder = resolve_backbone(name)
        self.pooling = read_pooling(self.folder)
        self.dim = int(_json(self.folder / "config.json", default={}).get("hidden_size", 0))
        if self.dim <= 0:
            raise BackboneLoadError(f"{self.folder / 'config.json'}: no hidden_size")
        self.batch_size = batch_size
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self._encoder: torch.nn.Module | None = None
        self._tokenizer = None

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            self._load()
        return self._tokenizer

    def _load(self) -> None:
        encoder, self._tokenizer = load_auto_encoder(self.name)
        self._encoder = encoder.to(self.device).eval().requires_grad_(False)

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """The encoder's input ids of each text, special tokens included, cut to `Pooling.max_length` (a huge text cut
        before it is tokenised, `text_to_read`)."""
        read, _ = texts_to_read(texts, self.pooling.max_length)
        return self.tokenizer(read, truncation=True, max_length=self.pooling.max_length, verbose=False)["input_ids"]

    def truncated(self, texts: Sequence[str]) -> int:
        """How many of the texts are longer than the encoder reads."""
        if not texts:
            return 0
        read, cut = texts_to_read(texts, self.pooling.max_length)
        lengths = self.tokenizer(read, verbose=False)["input_ids"]
        return sum(len(ids) > self.pooling.max_length or was_cut for ids, was_cut in zip(lengths, cut))

    @torch.no_grad()
    def encode(self, texts: Sequence[str], desc: str = "sentence vectors", progress: Path | None = None) -> torch.Tensor:
        """texts -> float32 vectors [N, dim] on the CPU, in the texts' order. A text that occurs more than once is
        encoded once (a dialogue corpus repeats its backchannels: a third of SwDA's utterances); the distinct texts
        run in batches of similar length (longest first, each batch cut to its longest), so little work goes to
        padding; a log line every 30 s. With ``progress`` (a file path), the vectors done so far are written there
        every `PROGRESS_SECONDS` and an interrupted call with the same texts goes on from them; the file is removed
        at the end."""
        if not texts:
            return torch.empty(0, self.dim)
        distinct = list(dict.fromkeys(texts))  # in first-occurrence order
        where = {text: i for i, text in enumerate(distinct)}
        ids = self.token_ids(distinct)
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        out, done = self._resume(progress, len(ids))
        start = shown = saved = time.monotonic()
        for first in range(done, len(order), self.batch_size):
            rows = order[first : first + self.batch_size]
            out[rows] = self._encode_batch([ids[i] for i in rows]).float().cpu()
            now = time.monotonic()
            if progress is not None and now - saved >= PROGRESS_SECONDS:
                saved = now
                write_safetensors(progress, {"vectors": out}, {"done": str(first + len(rows))})
            if now - shown >= 30:
                shown = now
                logger.info("%s (%s): %d/%d distinct texts, %.0f s", desc, self.name, first + len(rows), len(ids),
                            now - start)
        logger.info("%s (%s): %d texts (%d distinct, %d of them done before) in %.0f s", desc, self.name, len(texts),
                    len(ids), done, time.monotonic() - start)
        if progress is not None:
            progress.unlink(missing_ok=True)
        return out[[where[text] for text in texts]]

    def _resume(self, progress: Path | None, count: int) -> tuple[torch.Tensor, int]:
        """The vectors [count, dim] an interrupted `encode` left in ``progress``, and how many of its batches' texts
        they hold; a fresh start where there is none (or an unreadable one, or one of another shape)."""
        if progress is not None and progress.is_file():
            try:
                with safe_open(str(progress), framework="pt") as f:
                    vectors, done = f.get_tensor("vectors"), int(f.metadata()["done"])
                if vectors.shape == (count, self.dim) and 0 <= done <= count:
                    logger.info("%s: going on from %d of %d distinct texts", progress, done, count)
                    return vectors, done
                logger.warning("%s: holds %s vectors, expected (%d, %d); starting again", progress, tuple(vectors.shape),
                               count, self.dim)
            except (OSError, KeyError, ValueError, TypeError, SafetensorError) as err:
                logger.warning("%s: unreadable, starting again (%s)", progress, err)
        return torch.empty(count, self.dim), 0

    def _encode_batch(self, batch: list[list[int]]) -> torch.Tensor:
        """Input ids of similar length -> pooled vectors [B, dim]."""
        width = max(map(len, batch))
        pad = self.tokenizer.pad_token_id
        input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.bool)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            mask[row, : len(ids)] = True
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        states = self._encoder(input_ids=input_ids, attention_mask=mask.long()).last_hidden_state  # [B, T, dim]
        return pool(states, mask, self.pooling)

    def cache_name(self) -> str:
        """The encoder's folder in the cache: its name, or for a local folder its folder name and a hash of its path."""
        if Path(self.name).expanduser().exists():
            path = str(Path(self.name).expanduser().resolve())
            return f"{Path(path).name}-{hashlib.sha256(path.encode()).hexdigest()[:8]}"
        return self.name.replace("/", "--")


def texts_checksum(texts: Sequence[str], encoder: SentenceEncoder) -> str:
    """A checksum of the texts and of how the encoder turns them into vectors (a change in either: another file)."""
    digest = hashlib.sha256(json.dumps([encoder.name, asdict(encoder.pooling)]).encode())
    for text in texts:
        digest.update(json.dumps(text).encode())
        digest.update(b"\n")
    return digest.hexdigest()[:16]


def sentence_vectors(encoder: SentenceEncoder, texts: Sequence[str], dataset: str, split: str,
                     cache_dir: Path | None = None) -> tuple[torch.Tensor, int]:
    """The encoder's vectors [N, dim] of a split's texts, and how many texts were cut to its longest input: from the
    cache where a file for this encoder, dataset, split and checksum exists, else encoded and written there."""
    checksum = texts_checksum(texts, encoder)
    path = (cache_dir or default_cache_dir()) / encoder.cache_name() / f"{dataset}-{split}-{checksum}.safetensors"
    if path.is_file():
        cached = _read(path, len(texts), encoder.dim)
        if cached is not None:
            logger.info("sentence vectors of %s %s (%s): read from %s", dataset, split, encoder.name, path)
            return cached
    vectors = encoder.encode(texts, desc=f"sentence vectors of {dataset} {split}",
                             progress=path.with_name(f"{path.stem}.partial.safetensors"))
    truncated = encoder.truncated(texts)
    write_safetensors(path, {"vectors": vectors},
                      {"encoder": encoder.name, "dataset": dataset, "split": split, "texts": str(len(texts)),
                       "truncated": str(truncated), "pooling": json.dumps(asdict(encoder.pooling))})
    return vectors, truncated


def _read(path: Path, count: int, dim: int) -> tuple[torch.Tensor, int] | None:
    """A cache file's (vectors, truncated); None where it is unreadable or of another shape (then written again)."""
    try:
        with safe_open(str(path), framework="pt") as f:
            vectors, truncated = f.get_tensor("vectors"), int(f.metadata()["truncated"])
    except (OSError, KeyError, ValueError, TypeError, SafetensorError) as err:
        logger.warning("%s: unreadable cache file, encoding again (%s)", path, err)
        return None
    if vectors.shape != (count, dim):
        logger.warning("%s: holds %s vectors, expected (%d, %d); encoding again", path, tuple(vectors.shape), count, dim)
        return None
    return vectors, truncated


__all__ = ["Pooling", "SentenceEncoder", "default_cache_dir", "pool", "read_pooling", "sentence_vectors", "texts_checksum"]
