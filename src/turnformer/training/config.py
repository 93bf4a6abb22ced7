"""What `train` is given and what it gives back: the training settings, the model it can train, the result."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import torch


MIXED_PRECISIONS = ("no", "bf16", "fp16")


@runtime_checkable
class TrainableModel(Protocol):
    """What `train` needs from a model.

    The model is an `nn.Module` with:

    - `loss(batch) -> torch.Tensor`: the scalar loss of a training batch (called in `train()` mode,
      with gradients; under `accelerate` mixed precision it runs inside autocast);
    - `predict(batch) -> (gold, predicted)`: two lists of labels for an evaluation batch, called by
      `eval_fn` (and `predict_all`) under `torch.no_grad()` with the model in `eval()` mode;
    - optionally `config_dict() -> dict`: a JSON-serialisable description of the architecture (what
      is needed to rebuild it). It is saved in every checkpoint's `config.json`, and resuming or
      loading into a model whose `config_dict()` differs is refused.

    Batches are whatever the model understands; the loop never looks inside them. It only moves
    them to the device with `accelerate.utils.send_to_device`, which handles tensors, (nested)
    lists/tuples/dicts of tensors and objects with a `.to(device)` method, and passes anything else
    through unchanged.
    """

    def loss(self, batch: Any) -> torch.Tensor: ...

    def predict(self, batch: Any) -> tuple[list, list]: ...


@dataclass(kw_only=True)
class TrainConfig:
    """How to train.

    `seed` drives the initial RNG state (`set_seed`) and the per-epoch shuffle. `grad_clip` is the
    max global L2 norm of the gradients (None or 0: no clipping). `scheduler="linear"` warms up over
    `warmup_steps` updates and decays linearly to 0 at the end of `epochs` (the schedule's length
    comes from `epochs` only, so `max_steps` and `time_budget_s` cut a run short without changing
    its schedule); `"constant"` warms up and then stays at `lr`. `max_steps` counts updates over the
    whole run (across resumes); `time_budget_s` counts wall-clock seconds of this call of `train`.
    Either one stops the run at the next update boundary: `last/` is saved, the history gets an entry
    for the unfinished epoch (`"complete": False`, not evaluated) and the result says
    `stopped_early=True` with the reason; run again with `resume=True` to continue. `mixed_precision` ("no", "bf16",
    "fp16") is accelerate's: the loss under autocast in that type, the weights and optimizer in float32 (bf16 also
    speeds a CPU with bfloat16 instructions); None leaves it to accelerate (``ACCELERATE_MIXED_PRECISION``, else "no").
    """

    epochs: int
    lr: float
    seed: int
    out_dir: Path
    weight_decay: float = 0.0
    grad_clip: float | None = 5.0
    resume: bool = False
    save_every_steps: int | None = None
    max_steps: int | None = None
    time_budget_s: float | None = None
    scheduler: Literal["constant", "linear"] = "constant"
    warmup_steps: int = 0
    gradient_accumulation_steps: int = 1
    log_every: int = 50
    # learning rate of the layers a model adds on top of its pretrained encoder (the model says which
    # parameters are pretrained with `pretrained_parameters()`); None: `lr` for every parameter
    head_lr: float | None = None
    mixed_precision: Literal["no", "bf16", "fp16"] | None = None

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir)
        problems = []
        if self.epochs < 1:
            problems.append(f"epochs must be >= 1 (got {self.epochs})")
        if not self.lr > 0:
            problems.append(f"lr must be > 0 (got {self.lr})")
        if self.seed < 0:
            problems.append(f"seed must be >= 0 (got {self.seed})")
        if self.head_lr is not None and not self.head_lr > 0:
            problems.append(f"head_lr must be > 0 (got {self.head_lr})")
        if self.weight_decay < 0:
            problems.append(f"weight_decay must be >= 0 (got {self.weight_decay})")
        if self.grad_clip is not None and self.grad_clip < 0:
            problems.append(f"grad_clip must be >= 0 or None (got {self.grad_clip})")
        for name in ("save_every_steps", "max_steps"):
            value = getattr(self, name)
            if value is not None and value < 1:
                problems.append(f"{name} must be >= 1 or None (got {value})")
        if self.time_budget_s is not None and not self.time_budget_s > 0:
            problems.append(f"time_budget_s must be > 0 or None (got {self.time_budget_s})")
        if self.scheduler not in ("constant", "linear"):
            problems.append(f"scheduler must be 'constant' or 'linear' (got {self.scheduler!r})")
        if self.mixed_precision not in (None, *MIXED_PRECISIONS):
            problems.append(f"mixed_precision must be one of {', '.join(MIXED_PRECISIONS)} or None (got {self.mixed_precision!r})")
        if self.warmup_steps < 0:
            problems.append(f"warmup_steps must be >= 0 (got {self.warmup_steps})")
        if self.gradient_accumulation_steps < 1:
            problems.append(f"gradient_accumulation_steps must be >= 1 (got {self.gradient_accumulation_steps})")
        if self.log_every < 1:
            problems.append(f"log_every must be >= 1 (got {self.log_every})")
        if problems:
            raise ValueError("invalid TrainConfig: " + "; ".join(problems))

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "out_dir": str(self.out_dir)}


@dataclass
class TrainResult:
    """What a run did.

    `history` has one dict per epoch: `epoch` (from 1), `complete`, `train_loss` (mean over the
    epoch's batches, all processes), `seconds` (training time of the epoch), `eval_seconds`, `steps`
    (updates so far), `validation` and `test` (the metric dicts; None for an epoch cut short, which
    also has `batches_done`, `batches_total` and `stopped`). `best_epoch` is the epoch with the
    highest validation `"primary"` (the first one on ties), `test_at_best` its test metrics.
    `train_seconds` is the wall-clock time of all sessions of the run (resumes included), `steps` the
    number of updates. `trained` is False when the call had nothing left to train (a finished run resumed): its
    result is the one the run finished with.
    """

    history: list[dict[str, Any]]
    best_epoch: int | None
    best_validation: dict[str, Any] | None
    test_at_best: dict[str, Any] | None
    train_seconds: float
    steps: int
    stopped_early: bool
    stop_reason: str | None = None
    trained: bool = True
