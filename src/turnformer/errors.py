"""Errors the command line reports as one line, kept apart from the modules that raise them so that the command line
starts without loading torch."""

from __future__ import annotations


class CheckpointError(RuntimeError):
    """A checkpoint is missing, corrupt, or does not fit the model or the run it is loaded into."""
