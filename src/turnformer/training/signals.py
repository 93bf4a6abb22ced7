"""Ctrl-C and SIGTERM during training: SIGTERM raised as an exception the loop can catch like Ctrl-C, and both held
back while an update and its bookkeeping are under way, so that a checkpoint never records half an update."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any


class Terminated(KeyboardInterrupt):
    """SIGTERM during training (``kill``, or a job scheduler's notice before it stops the job): handled as Ctrl-C
    is, ``last/`` saved at the last whole update first."""


def raise_terminated(signum: int, frame: Any) -> None:
    """The SIGTERM handler of a training run."""
    raise Terminated(f"signal {signal.Signals(signum).name}")


@contextlib.contextmanager
def signal_handlers(handlers: dict[int, Any]):
    """Install signal handlers for the block, restoring the previous ones after it; yields those (main thread only:
    elsewhere nothing is installed and the dict is empty)."""
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum, handler in handlers.items():
            try:
                previous[signum] = signal.signal(signum, handler)
            except (ValueError, OSError, TypeError):
                pass
    try:
        yield previous
    finally:
        for signum, handler in previous.items():
            default = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
            signal.signal(signum, handler if handler is not None else default)


@contextlib.contextmanager
def interrupts_deferred():
    """Hold a Ctrl-C or SIGTERM that arrives inside the block until the block is done, then deliver it."""
    received: list[tuple[int, Any]] = []
    held = {signum: lambda s, frame: received.append((s, frame)) for signum in (signal.SIGINT, signal.SIGTERM)}
    with signal_handlers(held) as previous:
        yield
    if received:
        signum, frame = received[0]
        handler = previous.get(signum)
        if callable(handler):
            handler(signum, frame)
        elif handler != signal.SIG_IGN:
            signal.raise_signal(signum)
