"""Where a run stands and what it did so far (`trainer_state.json`): the position to resume from, the history of
epochs, and the best epoch chosen on validation."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from turnformer.errors import CheckpointError

_STATE_FORMAT = 1


@dataclass
class TrainState:
    """The serialisable position and record of a run (`trainer_state.json`)."""

    epoch: int = 0                 # 0-based epoch in progress (== epochs when the run is finished)
    batch_in_epoch: int = 0        # batches of that epoch done by each process (an update boundary)
    global_step: int = 0           # updates so far
    num_train_batches: int = 0
    world_size: int = 1
    batches_digest: str | None = None  # which examples each training batch holds (`batches_digest`; None: not known)
    schedule_steps: int = 0        # the updates the learning-rate schedule is laid out over, from the run's start (0: not kept)
    epoch_loss_sum: float = 0.0    # sum of the batch losses of the epoch in progress, all processes
    epoch_loss_count: int = 0
    epoch_seconds: float = 0.0
    train_seconds: float = 0.0
    history: list[dict[str, Any]] = field(default_factory=list)
    best_epoch: int | None = None
    best_validation: dict[str, Any] | None = None
    test_at_best: dict[str, Any] | None = None
    stopped_early: bool = False
    stop_reason: str | None = None
    format: int = _STATE_FORMAT

    @classmethod
    def from_dict(cls, data: Any, source: Path) -> TrainState:
        names = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(data, dict) or not {"epoch", "batch_in_epoch", "global_step", "history"} <= set(data):
            raise CheckpointError(f"{source}: not a trainer state (missing epoch/batch_in_epoch/global_step/history)")
        if data.get("format") != _STATE_FORMAT:
            raise CheckpointError(f"{source}: unsupported trainer state format {data.get('format')!r}")
        return cls(**{k: v for k, v in data.items() if k in names})

    def finish_epoch(self, entry: dict[str, Any]) -> bool:
        """Record the evaluated epoch `entry` and move on to the next epoch; True when its validation score is the
        best so far (the first epoch wins a tie), which makes it the best epoch."""
        self.record(entry)
        improved = _better(entry["validation"]["primary"], self.best_validation)
        if improved:
            self.best_epoch, self.best_validation, self.test_at_best = entry["epoch"], entry["validation"], entry["test"]
        self.epoch, self.batch_in_epoch = entry["epoch"], 0
        self.epoch_loss_sum, self.epoch_loss_count, self.epoch_seconds = 0.0, 0, 0.0
        return improved

    def stop_early(self, reason: str, batches_total: int) -> None:
        """The run stops before its end: say why and where, and record the unfinished epoch (not evaluated)."""
        self.stopped_early = True
        self.stop_reason = (f"{reason} at step {self.global_step} (epoch {self.epoch + 1}, batch "
                            f"{self.batch_in_epoch}/{batches_total})")
        self.record({
            "epoch": self.epoch + 1, "complete": False, "batches_done": self.batch_in_epoch, "batches_total": batches_total,
            "train_loss": self.epoch_loss_sum / self.epoch_loss_count if self.epoch_loss_count else None,
            "seconds": self.epoch_seconds, "steps": self.global_step, "validation": None, "test": None,
            "stopped": self.stop_reason,
        })

    def record(self, entry: dict[str, Any]) -> None:
        """Append `entry` to the history, replacing an earlier (unfinished) entry of the same epoch."""
        self.history[:] = [h for h in self.history if h.get("epoch") != entry["epoch"]]
        self.history.append(entry)


def _better(score: float, best: dict[str, Any] | None) -> bool:
    if best is None:
        return True
    if math.isnan(best["primary"]):
        return not math.isnan(score)
    return score > best["primary"]
