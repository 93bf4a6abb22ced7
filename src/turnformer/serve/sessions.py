"""Conversations the server holds between requests. A session keeps, per model it runs, that model's streaming
session (DialogXL's memory, a dialogue-act model's last P utterance vectors) and the annotated history. Memory stays
bounded: at most `max_sessions` live at once (the least recently used is evicted to make room), a session idle for
`idle_seconds` expires, and one session takes at most `max_turns` utterances. A request for a session that is gone
is told why, not just that the id is unknown.

Sessions live in the process that made them: several server processes need a router that sends each session's
requests to its own process (session ids start with the process's ``prefix`` for that)."""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

from turnformer.dialogue import Turn


class SessionGone(Exception):
    """A session id that is not live: ``reason`` is "evicted", "expired", "deleted" or "unknown"."""

    def __init__(self, session_id: str, reason: str, message: str):
        super().__init__(message)
        self.session_id, self.reason = session_id, reason


class SessionFull(Exception):
    """A session that has taken its `max_turns` utterances."""


@dataclass(eq=False)
class Session:
    id: str
    streams: dict[str, Any]  # model name -> that model's streaming session
    max_turns: int
    turns: list[dict] = field(default_factory=list)  # {"turn", "speaker", "text", "annotations": {model: answer}}
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, turn: Turn, answer: Callable[[str, Any], dict]) -> dict:
        """The next utterance, annotated by every model of the session (``answer(model name, its stream)``) and kept
        in the history. Utterances of one session are answered one at a time, in the order they arrive. All or none:
        where one model fails on it, every stream is taken back to where it was (``snapshot()``, ``restore()``), so the
        models go on with one history, the one the session shows."""
        with self.lock:
            if len(self.turns) >= self.max_turns:
                raise SessionFull(f"session {self.id!r} holds {self.max_turns} utterances, as many as one session takes: "
                                  "start a new one")
            saved = {name: stream.snapshot() for name, stream in self.streams.items()}
            try:
                annotations = {name: answer(name, stream) for name, stream in self.streams.items()}
            except BaseException:
                for name, stream in self.streams.items():
                    stream.restore(saved[name])
                raise
            entry = {"turn": len(self.turns), "speaker": turn.speaker, "text": turn.text, "annotations": annotations}
            self.turns.append(entry)
            return entry

    def history(self) -> list[dict]:
        with self.lock:
            return list(self.turns)


class SessionStore:
    """Live sessions, least recently used first, and why recent ones are gone (the newest ``10 * max_sessions``)."""

    def __init__(self, max_sessions: int, idle_seconds: float, max_turns: int, prefix: str = "",
                 clock: Callable[[], float] = time.monotonic):
        self.max_sessions, self.idle_seconds, self.max_turns, self.prefix = max_sessions, idle_seconds, max_turns, prefix
        self.clock = clock
        self._live: OrderedDict[str, tuple[Session, float]] = OrderedDict()  # id -> (session, last used)
        self._gone: OrderedDict[str, str] = OrderedDict()  # id -> "evicted", "expired" or "deleted"
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            self._expire()
            return len(self._live)

    def create(self, streams: dict[str, Any]) -> tuple[Session, int]:
        """A new session over `streams`, and how many sessions were evicted to make room for it."""
        session = Session(self.prefix + secrets.token_urlsafe(12), streams, self.max_turns)
        with self._lock:
            self._expire()
            evicted = 0
            while len(self._live) >= self.max_sessions:
                self._forget(next(iter(self._live)), "evicted")
                evicted += 1
            self._live[session.id] = (session, self.clock())
        return session, evicted

    def get(self, session_id: str) -> Session:
        """A live session, now its most recently used; `SessionGone` saying why where it is not live."""
        with self._lock:
            self._expire()
            if session_id not in self._live:
                raise self._gone_error(session_id)
            session, _ = self._live.pop(session_id)
            self._live[session_id] = (session, self.clock())
            return session

    def delete(self, session_id: str) -> None:
        with self._lock:
            self._expire()
            if session_id not in self._live:
                raise self._gone_error(session_id)
            self._forget(session_id, "deleted")

    def _expire(self) -> None:
        """Forget the sessions idle for `idle_seconds` (the least recently used come first)."""
        now = self.clock()
        while self._live:
            session_id, (_, used) = next(iter(self._live.items()))
            if now - used < self.idle_seconds:
                break
            self._forget(session_id, "expired")

    def _forget(self, session_id: str, reason: str) -> None:
        del self._live[session_id]
        self._gone[session_id] = reason
        while len(self._gone) > 10 * self.max_sessions:
            self._gone.popitem(last=False)

    def _gone_error(self, session_id: str) -> SessionGone:
        reason = self._gone.get(session_id, "unknown")
        shown = repr(session_id[:64])
        why = {
            "evicted": f"evicted to make room: the server holds at most {self.max_sessions} sessions and this was the "
                       "least recently used",
            "expired": f"expired after {self.idle_seconds:g} s without a request",
            "deleted": "deleted",
            "unknown": "not known here (a session lives in the server process that created it, until it is deleted, "
                       "expires or is evicted)",
        }[reason]
        gone = "" if reason == "unknown" else "; start a new one"
        return SessionGone(session_id, reason, f"session {shown}: {why}{gone}")
