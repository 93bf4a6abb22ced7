"""One training loop for every model of the project.

The loop knows nothing about tasks: a model says how to compute its loss on a batch and how to
predict on one (`TrainableModel`), an `eval_fn` turns the model into metric dicts for a split, and
`train` does the rest the same way for everybody:

- per epoch, the batches are shuffled by a generator seeded with (seed, epoch), so the order is
  reproducible and a run can resume at the exact next batch;
- AdamW (no weight decay on biases and normalisation layers), gradient clipping, gradient
  accumulation, a constant or linear learning-rate schedule with warm-up;
- `accelerate` places the model and batches on the device, runs `backward` (mixed precision) and
  distributed data parallel: `accelerate launch --multi_gpu --num_processes N script.py ...` runs the
  same script on N processes, each taking its shard `batches[rank::N]` of every epoch;
- after each epoch the validation and test metrics are computed; the history keeps both, and the
  result reports the test metrics *at the best validation epoch* (the papers' protocol);
- checkpoints (`out_dir/last/`, `out_dir/best/`) are written atomically and hold everything needed to
  continue: with `resume=True`, an interrupted run (Ctrl-C, `max_steps`, a time budget, a crash after
  a mid-epoch checkpoint) continues from the next batch and ends with the same weights as a run that
  was never interrupted.

Steps are optimizer updates (one update = `gradient_accumulation_steps` batches per process);
`max_steps`, `save_every_steps`, `log_every` and `warmup_steps` count them. Epoch numbers in the
history and in `best_epoch` start at 1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import random
import shutil
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Protocol, Sequence, runtime_checkable

import numpy as np
import torch
from torch import nn

from turnformer.errors import CheckpointError

__all__ = [
    "CHECKPOINT_FILES", "CheckpointError", "TrainConfig", "TrainResult", "TrainableModel", "build_optimizer",
    "build_scheduler", "epoch_order", "load_checkpoint", "predict_all", "read_checkpoint_config", "set_seed",
    "Terminated", "train",
]

logger = logging.getLogger(__name__)

MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
LABEL_MAP_FILE = "label_map.json"
OPTIMIZER_FILE = "optimizer.pt"
STATE_FILE = "trainer_state.json"
RNG_FILE = "rng.pt"
CHECKPOINT_FILES = (MODEL_FILE, CONFIG_FILE, LABEL_MAP_FILE, OPTIMIZER_FILE, STATE_FILE, RNG_FILE)
# SHA-256 of every other file, written with them (the directory is renamed into place whole) and verified on reading;
# a checkpoint from before it was written loads unverified
CHECKSUM_FILE = "checksums.json"
_STATE_FORMAT = 1
_ALIASES_KEY = "turnformer_aliases"

# Parameters of these modules (and of any module whose class name contains "Norm") get no weight decay.
_NORM_TYPES: tuple[type, ...] = (
    nn.LayerNorm, nn.GroupNorm, nn.LocalResponseNorm, nn.modules.batchnorm._NormBase, nn.RMSNorm,
)


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
    `stopped_early=True` with the reason; run again with `resume=True` to continue.
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
    number of updates.
    """

    history: list[dict[str, Any]]
    best_epoch: int | None
    best_validation: dict[str, Any] | None
    test_at_best: dict[str, Any] | None
    train_seconds: float
    steps: int
    stopped_early: bool
    stop_reason: str | None = None


def set_seed(seed: int, deterministic: bool = False) -> None:
    """Seed python's `random`, numpy and torch (every device); `deterministic` also asks torch for
    deterministic algorithms (slower; some operations then raise)."""
    from accelerate.utils import set_seed as _accelerate_set_seed

    _accelerate_set_seed(seed, deterministic=deterministic)


def epoch_order(n_batches: int, seed: int, epoch: int) -> list[int]:
    """The shuffled order of the batch indices for `epoch` (0-based): depends on (seed, epoch) only."""
    return np.random.default_rng([seed, epoch]).permutation(n_batches).tolist()


def build_optimizer(model: nn.Module, lr: float, weight_decay: float, head_lr: float | None = None) -> torch.optim.AdamW:
    """AdamW: weight decay for every parameter but biases and those of normalisation layers (LayerNorm,
    RMSNorm, GroupNorm, BatchNorm, any `*Norm*`). With `head_lr`, the parameters outside the model's
    `pretrained_parameters()` (its new, randomly initialised layers) learn at `head_lr`, the rest at `lr`."""
    pretrained: set[int] | None = None
    if head_lr is not None:
        if not hasattr(model, "pretrained_parameters"):
            raise ValueError(f"head_lr is set but {type(model).__name__} does not say which parameters are pretrained "
                             "(no pretrained_parameters() method)")
        pretrained = {id(p) for p in model.pretrained_parameters()}
    groups: dict[tuple[bool, bool], list[nn.Parameter]] = {}  # (decayed, head) -> parameters
    seen: set[int] = set()
    for module in model.modules():
        is_norm = isinstance(module, _NORM_TYPES) or "norm" in type(module).__name__.lower()
        for name, param in module.named_parameters(recurse=False):
            if not param.requires_grad or id(param) in seen:
                continue
            seen.add(id(param))
            head = pretrained is not None and id(param) not in pretrained
            groups.setdefault((not (is_norm or name.endswith("bias")), head), []).append(param)
    if not seen:
        raise ValueError(f"{type(model).__name__} has no trainable parameters")
    return torch.optim.AdamW(
        [{"params": params, "weight_decay": weight_decay if decayed else 0.0, "lr": head_lr if head else lr}
         # decayed before not decayed, pretrained before new: the order of checkpoints written before head_lr
         for head in (False, True) for decayed in (True, False) if (params := groups.get((decayed, head)))],
        lr=lr,
    )


def build_scheduler(
    optimizer: torch.optim.Optimizer, kind: str, warmup_steps: int, total_steps: int,
) -> torch.optim.lr_scheduler.LambdaLR:
    """Learning-rate factor for update k (0-based): (k+1)/warmup during warm-up (no update at lr 0),
    then 1 ("constant") or (total-k)/(total-warmup) ("linear": the last update still moves)."""
    if kind not in ("constant", "linear"):
        raise ValueError(f"unknown scheduler {kind!r}: use 'constant' or 'linear'")

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        if kind == "constant":
            return 1.0
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def metric_text(metrics: dict[str, Any] | None) -> str:
    """The primary metric of an evaluation, named, on one scale for every task: rates in percent (a task that reports
    fractions says ``"unit": "fraction"``), perplexity as itself (its ``primary`` is its negative, higher is better)."""
    if not metrics:
        return "-"
    primary = metrics.get("primary", float("nan"))
    if "perplexity" in metrics and primary == -metrics["perplexity"]:
        return f"perplexity {metrics['perplexity']:.2f}"
    name = next((k for k, v in metrics.items() if k != "primary" and isinstance(v, int | float) and v == primary), "score")
    value = primary * 100 if metrics.get("unit") == "fraction" else primary
    return f"{name} {value:.2f}%"


def progress(items, desc: str, unit: str = "batch", sizes: Sequence[int] | None = None, every_s: float = 30.0):
    """Yield `items` (evaluation, prediction: long on a big file), showing how far it got: a bar on a terminal's
    stderr, gone when done; where stderr is a file or a pipe, a log line every `every_s` seconds instead. `sizes`
    counts `unit`s inside each item (the utterances of conversations), so that one long item moves the count too.
    Only the first process shows it where several evaluate at once (`accelerate launch` sets LOCAL_RANK)."""
    from tqdm.auto import tqdm

    items = list(items)
    sizes = [1] * len(items) if sizes is None else list(sizes)
    total = sum(sizes)
    first_process = os.environ.get("LOCAL_RANK", "0") == "0"
    bar = tqdm(total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True, disable=None if first_process else True)
    lines = first_process and bar.disable  # no bar where stderr is no terminal: lines
    done, start = 0, time.monotonic()
    shown = start
    try:
        for item, size in zip(items, sizes):
            yield item
            done += size
            bar.update(size)
            if lines and time.monotonic() - shown >= every_s:
                shown = time.monotonic()
                logger.info("%s: %d/%d %ss, %.0f s", desc, done, total, unit, shown - start)
    finally:
        bar.close()


def predict_all(model: nn.Module, batches: Sequence[Any], device: torch.device | str | None = None) -> tuple[list, list]:
    """`model.predict` over all batches (eval mode, no gradients), gold and predicted labels concatenated.
    A building block for `eval_fn`s; batches go to `device` (default: the model's)."""
    from accelerate.utils import send_to_device

    if device is None:
        device = next(iter(model.parameters())).device
    gold: list = []
    predicted: list = []
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for batch in progress(batches, "evaluate"):
                g, p = model.predict(send_to_device(batch, device))
                gold.extend(g)
                predicted.extend(p)
    finally:
        model.train(was_training)
    return gold, predicted


# ----------------------------------------------------------------------------------------------------
# The loop


def train(
    model: nn.Module,
    train_batches: Sequence[Any],
    eval_fn: Callable[[nn.Module, str], dict[str, Any]],
    config: TrainConfig,
    label_map: dict | None = None,
    accelerator: Any | None = None,
    run_info: dict | None = None,
) -> TrainResult:
    """Train `model` (a `TrainableModel`) on `train_batches`; see the module docstring.

    `run_info`, the run's description, is written to ``out_dir/run.json`` once the checkpoint that a resumed run
    continues is known to fit: a refused resume (another model, other sizes or labels) leaves the run as it was.

    `eval_fn(model, split)` is called after every epoch for "validation" and "test", with the plain
    (unwrapped) model in eval mode under `torch.no_grad()`; it returns a JSON-serialisable dict with
    a numeric `"primary"` metric, higher is better. With several processes it runs on each of them
    (it may shard the work itself); the main process's result is the one kept. `label_map` (any
    JSON-serialisable dict, e.g. label -> id) is saved with every checkpoint and must match on resume.

    `train` seeds everything with `config.seed` when it starts, after the model was built: call
    `set_seed(seed)` before building the model too, for a reproducible initialisation. Epoch
    summaries go to the `turnformer.training` logger (INFO), and so do periodic loss lines where no progress bar is
    drawn (stderr not a terminal: a log file).

    With N processes each takes `len(train_batches) // N` batches of every epoch (`order[rank::N]`);
    the last `len(train_batches) % N` batches of each epoch's shuffled order are dropped (a warning
    says how many), so every process makes the same number of updates.

    Ctrl-C (KeyboardInterrupt) or SIGTERM (`Terminated`, a KeyboardInterrupt) saves `last/` at the last
    completed update and re-raises.
    """
    if not isinstance(model, nn.Module) or not callable(getattr(model, "loss", None)):
        raise TypeError(f"train() needs an nn.Module with a loss(batch) method, got {type(model).__name__}")
    if accelerator is None:
        from accelerate import Accelerator

        accelerator = Accelerator()
    if accelerator.gradient_accumulation_steps != 1:
        raise ValueError(
            "pass gradient accumulation through TrainConfig.gradient_accumulation_steps, not through the "
            f"Accelerator (it has gradient_accumulation_steps={accelerator.gradient_accumulation_steps})"
        )
    trainer = _Trainer(model, train_batches, eval_fn, config, label_map, accelerator)  # checks last/ on resume
    if run_info is not None and accelerator.is_main_process:
        config.out_dir.mkdir(parents=True, exist_ok=True)
        (config.out_dir / "run.json").write_text(json.dumps(run_info, indent=2, default=str) + "\n")
    return trainer.run()


@dataclass
class _State:
    """The serialisable position and record of a run (`trainer_state.json`)."""

    epoch: int = 0                 # 0-based epoch in progress (== epochs when the run is finished)
    batch_in_epoch: int = 0        # batches of that epoch done by each process (an update boundary)
    global_step: int = 0           # updates so far
    num_train_batches: int = 0
    world_size: int = 1
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
    def from_dict(cls, data: Any, source: Path) -> _State:
        names = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(data, dict) or not {"epoch", "batch_in_epoch", "global_step", "history"} <= set(data):
            raise CheckpointError(f"{source}: not a trainer state (missing epoch/batch_in_epoch/global_step/history)")
        if data.get("format") != _STATE_FORMAT:
            raise CheckpointError(f"{source}: unsupported trainer state format {data.get('format')!r}")
        return cls(**{k: v for k, v in data.items() if k in names})


class _LossForward(nn.Module):
    """Routes `forward` to `model.loss`, so that DDP's gradient hooks and accelerate's autocast (both
    attached to `forward`) apply to the loss computation."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, batch: Any) -> torch.Tensor:
        return self.model.loss(batch)


class _Trainer:
    def __init__(self, model, batches, eval_fn, config: TrainConfig, label_map, accelerator) -> None:
        self.model, self.batches, self.eval_fn, self.config, self.acc = model, batches, eval_fn, config, accelerator
        self.label_map = _json_normalise(label_map, "label_map")
        self.model_config = _model_config(model)
        self.world, self.rank = accelerator.num_processes, accelerator.process_index
        self.n_batches = len(batches)
        self.per_process = self.n_batches // self.world
        if self.per_process == 0:
            raise ValueError(f"{self.n_batches} training batches cannot be shared by {self.world} processes")
        dropped = self.n_batches - self.per_process * self.world
        if dropped and accelerator.is_main_process:
            logger.warning(
                "%d of %d batches are dropped from every epoch (the tail of its shuffled order) so that each of the "
                "%d processes gets %d", dropped, self.n_batches, self.world, self.per_process,
            )
        accumulate = config.gradient_accumulation_steps
        self.updates_per_epoch = math.ceil(self.per_process / accumulate)

        set_seed(config.seed)
        self.optimizer = build_optimizer(model, config.lr, config.weight_decay, config.head_lr)
        self.scheduler = build_scheduler(
            self.optimizer, config.scheduler, config.warmup_steps, self.updates_per_epoch * config.epochs,
        )
        self.state = _State(num_train_batches=self.n_batches, world_size=self.world)
        self.replaced: Path | None = None  # an earlier run in out_dir, set aside until this run's first checkpoint
        checkpoint = self._load_for_resume()
        self.wrapped, self.optimizer = accelerator.prepare(_LossForward(model), self.optimizer)
        if checkpoint is not None:
            self.optimizer.load_state_dict(checkpoint["optimizer"]["optimizer"])
            self.scheduler.load_state_dict(checkpoint["optimizer"]["scheduler"])
            _set_rng_state(checkpoint["rng"])
        self.state.stopped_early, self.state.stop_reason = False, None
        self.local_loss = torch.zeros((), device=accelerator.device)   # this process's losses not yet folded
        self.local_count = 0
        self.saved_at: tuple[int, int, int] | None = None
        # the random state at the last whole update, while a next one is under way: a Ctrl-C saves this one, so
        # the resumed run draws again the dropout masks that the unfinished update's first batches drew
        self.rng_at_last_update: dict[str, Any] | None = None

    # -- resume --------------------------------------------------------------------------------------

    def _load_for_resume(self) -> dict[str, Any] | None:
        config, out_dir = self.config, self.config.out_dir
        if self.acc.is_main_process:
            _recover_swap(out_dir, "last")
        self.acc.wait_for_everyone()
        last = out_dir / "last"
        if not config.resume:
            if self.acc.is_main_process:
                self.replaced = _set_aside_earlier_run(out_dir)
            return None
        if not last.exists():
            if self.acc.is_main_process:
                logger.info("resume: no checkpoint at %s, starting afresh", last)
                if replaced_run_folder(out_dir).exists():  # a replacement that never checkpointed: it goes on replacing
                    self.replaced = replaced_run_folder(out_dir)
            return None
        checkpoint = _read_checkpoint(last, full=True)
        saved = checkpoint["config"]
        problems = _model_mismatch(saved, self.model, self.model_config)
        if problems:
            raise CheckpointError(f"cannot resume from {last}: {problems}; use another out_dir or resume=False")
        if checkpoint["label_map"] != self.label_map:
            raise CheckpointError(f"cannot resume from {last}: its label map differs from this run's")
        state: _State = checkpoint["state"]
        mid_epoch = state.batch_in_epoch > 0
        saved_train = saved.get("train") or {}
        if mid_epoch:
            for what, before, now in (
                ("number of processes", state.world_size, self.world),
                ("number of training batches", state.num_train_batches, self.n_batches),
                ("seed", saved_train.get("seed"), config.seed),
            ):
                if before != now:
                    raise CheckpointError(
                        f"cannot resume from {last} in the middle of epoch {state.epoch + 1}: the {what} changed "
                        f"({before} -> {now}), so the epoch's batch order is not the same; resume with the same one"
                    )
        changed = [
            f"{k}: {saved_train.get(k)!r} -> {getattr(config, k)!r}"
            for k in ("lr", "head_lr", "weight_decay", "grad_clip", "scheduler", "warmup_steps", "gradient_accumulation_steps", "seed")
            if k in saved_train and saved_train[k] != getattr(config, k)
        ]
        if changed and self.acc.is_main_process:
            logger.warning("resuming with a changed training config (%s): the optimizer and schedule state come from "
                           "the checkpoint, the result will differ from an uninterrupted run", "; ".join(changed))
        _load_weights(self.model, checkpoint["tensors"], last / MODEL_FILE)
        state.num_train_batches, state.world_size = self.n_batches, self.world
        self.state = state
        if self.acc.is_main_process:
            logger.info("resuming from %s: epoch %d, batch %d, step %d", last, state.epoch + 1, state.batch_in_epoch,
                        state.global_step)
        return checkpoint

    # -- main loop -----------------------------------------------------------------------------------

    def run(self) -> TrainResult:
        self.session_start = time.monotonic()
        self.seconds_before = self.state.train_seconds
        try:
            with _handlers({signal.SIGTERM: _raise_terminated}):
                for epoch in range(self.state.epoch, self.config.epochs):
                    if not self._train_epoch(epoch):
                        break
                    self._end_epoch(epoch)
        except KeyboardInterrupt as interruption:   # Ctrl-C, or SIGTERM (Terminated)
            try:
                self._save_on_interrupt(type(interruption).__name__)
            except Exception:
                logger.exception("could not save %s/last after the interruption", self.config.out_dir)
            raise
        finally:
            self._release()
        self.acc.wait_for_everyone()
        st = self.state
        return TrainResult(
            history=[dict(h) for h in st.history], best_epoch=st.best_epoch, best_validation=st.best_validation,
            test_at_best=st.test_at_best, train_seconds=self._seconds(), steps=st.global_step,
            stopped_early=st.stopped_early, stop_reason=st.stop_reason,
        )

    def _release(self) -> None:
        """Drop this run's model and optimizer from the accelerator's lists, so that an accelerator
        reused for several runs (seeds, folds) does not keep every past model alive."""
        for attribute, prepared in (("_models", self.wrapped), ("_optimizers", self.optimizer)):
            items = getattr(self.acc, attribute, None)
            if isinstance(items, list):
                items[:] = [item for item in items if item is not prepared]

    def _train_epoch(self, epoch: int) -> bool:
        """Train the rest of `epoch`; False when the run stops early."""
        from accelerate.utils import send_to_device
        from tqdm.auto import tqdm

        acc, config, st = self.acc, self.config, self.state
        local = epoch_order(self.n_batches, config.seed, epoch)[self.rank: self.per_process * self.world: self.world]
        accumulate = config.gradient_accumulation_steps
        i = st.batch_in_epoch
        window_loss, window_batches, window_start = torch.zeros((), device=acc.device), 0, time.monotonic()
        # a bar on a terminal only: a log file gets the periodic loss lines below instead of a bar's redraws
        bar = tqdm(total=self.per_process, initial=i, desc=f"epoch {epoch + 1}/{config.epochs}", unit="batch",
                   disable=None if acc.is_local_main_process else True, dynamic_ncols=True, leave=False)
        mark = time.monotonic()
        # from_pretrained hands encoders over in eval mode: without this, the first epoch (and an epoch resumed in
        # its middle) would train with their dropout off, unlike the epochs after an evaluation
        self.model.train()
        try:
            while i < self.per_process:
                reason = self._stop_reason()
                if reason is not None:
                    self._stop(epoch, reason)
                    return False
                group = local[i: i + accumulate]
                group_loss = torch.zeros((), device=acc.device)
                self.rng_at_last_update = _get_rng_state()
                for j, index in enumerate(group):
                    batch = send_to_device(self.batches[index], acc.device)
                    sync = j == len(group) - 1     # DDP all-reduces the gradients on the group's last batch only
                    with contextlib.nullcontext() if sync else acc.no_sync(self.wrapped):
                        loss = self.wrapped(batch)
                        if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
                            raise ValueError(f"{type(self.model).__name__}.loss(batch) must return a scalar tensor, "
                                             f"got {getattr(loss, 'shape', type(loss))}")
                        acc.backward(loss / len(group))
                    group_loss += loss.detach().float()
                with _interrupts_deferred():   # an update and its bookkeeping happen entirely or not at all
                    if config.grad_clip:
                        acc.clip_grad_norm_(self.wrapped.parameters(), config.grad_clip)
                    self.optimizer.step()
                    if not acc.optimizer_step_was_skipped:
                        self.scheduler.step()
                    self.optimizer.zero_grad(set_to_none=True)
                    i += len(group)
                    st.batch_in_epoch, st.global_step = i, st.global_step + 1
                    self.rng_at_last_update = None   # the current state is the last whole update's again
                    self.local_loss += group_loss
                    self.local_count += len(group)
                    now = time.monotonic()
                    st.epoch_seconds, mark = st.epoch_seconds + now - mark, now
                bar.update(len(group))
                window_loss += group_loss
                window_batches += len(group)
                if st.global_step % config.log_every == 0 or i == self.per_process:
                    mean, lr = window_loss.item() / window_batches, self.scheduler.get_last_lr()[0]
                    bar.set_postfix(loss=f"{mean:.4f}", lr=f"{lr:.2e}", refresh=False)
                    if acc.is_main_process and bar.disable:   # the bar, where drawn, shows them already
                        logger.info("epoch %d/%d, batch %d/%d (step %d): loss %.4f, lr %.3g, %.1f batches/s", epoch + 1,
                                    config.epochs, i, self.per_process, st.global_step, mean, lr,
                                    window_batches / max(time.monotonic() - window_start, 1e-9))
                    window_loss.zero_()
                    window_batches, window_start = 0, time.monotonic()
                if config.save_every_steps and st.global_step % config.save_every_steps == 0 and i < self.per_process:
                    self._save("last")
                    mark = time.monotonic()
        finally:
            bar.close()
        return True

    def _end_epoch(self, epoch: int) -> None:
        st = self.state
        self._fold_loss(collective=True)
        train_loss = st.epoch_loss_sum / max(st.epoch_loss_count, 1)
        started = time.monotonic()
        validation = self._evaluate("validation")
        test = self._evaluate("test")
        entry = {
            "epoch": epoch + 1, "complete": True, "train_loss": train_loss, "seconds": st.epoch_seconds,
            "eval_seconds": time.monotonic() - started, "steps": st.global_step, "validation": validation, "test": test,
        }
        with _interrupts_deferred():   # the record, best/ and last/ agree even under Ctrl-C
            _record(st.history, entry)
            improved = _better(validation["primary"], st.best_validation)
            if improved:
                st.best_epoch, st.best_validation, st.test_at_best = epoch + 1, validation, test
            st.epoch, st.batch_in_epoch = epoch + 1, 0
            st.epoch_loss_sum, st.epoch_loss_count, st.epoch_seconds = 0.0, 0, 0.0
            if improved:
                self._save("best")
            self._save("last", link_from="best" if improved else None)
        if self.acc.is_main_process:
            logger.info(
                "epoch %d/%d: train loss %.4f, validation %s, test %s%s (best validation %s at epoch %d), %.1f s",
                epoch + 1, self.config.epochs, train_loss, metric_text(validation), metric_text(test),
                " *" if improved else "", metric_text(st.best_validation), st.best_epoch, entry["seconds"],
            )

    def _evaluate(self, split: str) -> dict[str, Any]:
        from accelerate.utils import broadcast_object_list

        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                metrics = self.eval_fn(self.model, split)
        finally:
            self.model.train(was_training)
        if not isinstance(metrics, dict) or "primary" not in metrics:
            raise ValueError(f"eval_fn(model, {split!r}) must return a dict with a 'primary' metric, got {metrics!r}")
        metrics = _json_normalise(metrics, f"eval_fn(model, {split!r})")
        if not isinstance(metrics["primary"], (int, float)) or isinstance(metrics["primary"], bool):
            raise ValueError(f"eval_fn(model, {split!r})['primary'] must be a number, got {metrics['primary']!r}")
        if self.world > 1:
            metrics = broadcast_object_list([metrics], from_process=0)[0]
        return metrics

    # -- stopping ------------------------------------------------------------------------------------

    def _stop_reason(self) -> str | None:
        config, st = self.config, self.state
        if config.max_steps is not None and st.global_step >= config.max_steps:
            return f"max_steps={config.max_steps} reached"
        if config.time_budget_s is not None:
            over = time.monotonic() - self.session_start >= config.time_budget_s
            if self.world > 1:   # every process must stop at the same update
                flag = torch.tensor([float(over)], device=self.acc.device)
                over = bool(self.acc.reduce(flag, reduction="sum").item() > 0)
            if over:
                return f"time budget of {config.time_budget_s:g} s used up"
        return None

    def _stop(self, epoch: int, reason: str) -> None:
        st = self.state
        self._fold_loss(collective=True)
        st.stopped_early = True
        st.stop_reason = (f"{reason} at step {st.global_step} (epoch {epoch + 1}, batch "
                          f"{st.batch_in_epoch}/{self.per_process})")
        _record(st.history, self._partial_entry(epoch))
        self._save("last")
        if self.acc.is_main_process:
            logger.warning("stopped early: %s; %s/last holds the position (resume=True, or --resume, continues)", st.stop_reason,
                           self.config.out_dir)

    def _partial_entry(self, epoch: int) -> dict[str, Any]:
        st = self.state
        return {
            "epoch": epoch + 1, "complete": False, "batches_done": st.batch_in_epoch, "batches_total": self.per_process,
            "train_loss": st.epoch_loss_sum / st.epoch_loss_count if st.epoch_loss_count else None,
            "seconds": st.epoch_seconds, "steps": st.global_step, "validation": None, "test": None,
            "stopped": st.stop_reason,
        }

    def _save_on_interrupt(self, what: str = "KeyboardInterrupt") -> None:
        """Ctrl-C: the main process saves `last/` at the last completed update (no collective calls:
        the other processes may be anywhere), unless it is already there."""
        if not self.acc.is_main_process:
            return
        st = self.state
        self._fold_loss(collective=False)
        if self.saved_at == (st.epoch, st.batch_in_epoch, st.global_step):
            return
        if st.epoch < self.config.epochs:
            st.stopped_early = True
            st.stop_reason = (f"interrupted ({what}) at step {st.global_step} (epoch {st.epoch + 1}, "
                              f"batch {st.batch_in_epoch}/{self.per_process})")
            _record(st.history, self._partial_entry(st.epoch))
        logger.warning("interrupted: saving %s/last at step %d before exiting", self.config.out_dir, st.global_step)
        self._save("last", collective=False, rng=self.rng_at_last_update)

    # -- bookkeeping ---------------------------------------------------------------------------------

    def _fold_loss(self, collective: bool) -> None:
        """Move the local loss sums into the state; collectively, every process gets the all-process sums."""
        st = self.state
        if collective and self.world > 1:
            both = torch.tensor([self.local_loss.item(), float(self.local_count)], dtype=torch.float64,
                                device=self.acc.device)
            both = self.acc.reduce(both, reduction="sum")
            total, count = both[0].item(), int(round(both[1].item()))
        else:
            total, count = self.local_loss.item(), self.local_count
        st.epoch_loss_sum += total
        st.epoch_loss_count += count
        self.local_loss.zero_()
        self.local_count = 0

    def _seconds(self) -> float:
        return self.seconds_before + time.monotonic() - self.session_start

    def _save(self, name: str, *, collective: bool = True, link_from: str | None = None,
              rng: dict[str, Any] | None = None) -> None:
        """Write checkpoint `out_dir/name` (main process only; with `collective`, the others wait), with the random
        state `rng` (default: the current one)."""
        st = self.state
        if collective:
            self._fold_loss(collective=True)
        st.train_seconds = self._seconds()
        if self.acc.is_main_process:
            out_dir = self.config.out_dir
            source = out_dir / link_from if link_from else None
            with _atomic_directory(out_dir, name) as tmp:
                if source is not None:
                    for file in CHECKPOINT_FILES + ((CHECKSUM_FILE,) if (source / CHECKSUM_FILE).is_file() else ()):
                        _link_or_copy(source / file, tmp / file)
                else:
                    self._write_files(tmp, rng)
            if name == "last":
                self.saved_at = (st.epoch, st.batch_in_epoch, st.global_step)
            if self.replaced is not None:  # this run can now be continued: the one it replaces goes
                shutil.rmtree(self.replaced, ignore_errors=True)
                logger.info("deleted %s, the run that %s replaces, now that the new run has a checkpoint", self.replaced, out_dir)
                self.replaced = None
        if collective:
            self.acc.wait_for_everyone()

    def _write_files(self, directory: Path, rng: dict[str, Any] | None = None) -> None:
        config = {
            "model_class": _class_name(self.model), "model": self.model_config, "train": self.config.to_dict(),
        }
        _save_weights(self.model.state_dict(), directory / MODEL_FILE)
        _write_json(directory / CONFIG_FILE, config)
        _write_json(directory / LABEL_MAP_FILE, self.label_map)
        _write_json(directory / STATE_FILE, dataclasses.asdict(self.state))
        torch.save({"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()},
                   directory / OPTIMIZER_FILE)
        torch.save(rng if rng is not None else _get_rng_state(), directory / RNG_FILE)
        for file in (OPTIMIZER_FILE, RNG_FILE, MODEL_FILE):
            _fsync(directory / file)
        _write_json(directory / CHECKSUM_FILE, {file: _sha256(directory / file) for file in CHECKPOINT_FILES})


def _record(history: list[dict[str, Any]], entry: dict[str, Any]) -> None:
    """Append `entry`, replacing an earlier (unfinished) entry of the same epoch."""
    history[:] = [h for h in history if h.get("epoch") != entry["epoch"]]
    history.append(entry)


def _better(score: float, best: dict[str, Any] | None) -> bool:
    if best is None:
        return True
    if math.isnan(best["primary"]):
        return not math.isnan(score)
    return score > best["primary"]


# ----------------------------------------------------------------------------------------------------
# Checkpoints


def read_checkpoint_config(path: str | Path) -> dict[str, Any]:
    """The `config.json` of a checkpoint directory (`model_class`, `model` = config_dict(), `train`),
    to rebuild the model before `load_checkpoint`."""
    path = _checkpoint_dir(Path(path))
    return _read_json(path / CONFIG_FILE)


def load_checkpoint(path: str | Path, model: nn.Module) -> dict[str, Any]:
    """Load the weights of checkpoint directory `path` (e.g. `out_dir/best`) into `model`.

    The state-dict keys and shapes must match exactly and, when the model has `config_dict()`, so
    must its config: otherwise CheckpointError says what differs. A missing, truncated or corrupt
    file raises CheckpointError naming it. Returns {"config": config.json, "label_map": ... (as JSON:
    its keys are strings), "state": trainer_state.json as a dict}.
    """
    path = _checkpoint_dir(Path(path))
    checkpoint = _read_checkpoint(path, full=False)
    problems = _model_mismatch(checkpoint["config"], model, _model_config(model))
    if problems:
        raise CheckpointError(f"{path} does not fit the model: {problems}")
    _load_weights(model, checkpoint["tensors"], path / MODEL_FILE)
    return {"config": checkpoint["config"], "label_map": checkpoint["label_map"],
            "state": dataclasses.asdict(checkpoint["state"])}


def _checkpoint_dir(path: Path) -> Path:
    if not path.is_dir():
        raise CheckpointError(f"checkpoint directory {path} does not exist")
    if not (path / MODEL_FILE).exists() and ((path / "best").is_dir() or (path / "last").is_dir()):
        raise CheckpointError(f"{path} is a training output directory; pass its best/ or last/ checkpoint")
    return path


def _read_checkpoint(path: Path, *, full: bool) -> dict[str, Any]:
    """Read and validate a checkpoint directory; `full` also reads the optimizer and RNG states."""
    needed = CHECKPOINT_FILES if full else (MODEL_FILE, CONFIG_FILE, LABEL_MAP_FILE, STATE_FILE)
    missing = [f for f in needed if not (path / f).is_file()]
    if missing:
        raise CheckpointError(f"checkpoint {path} is incomplete: missing {', '.join(missing)}")
    config = _read_json(path / CONFIG_FILE)
    if not isinstance(config, dict) or "model" not in config:
        raise CheckpointError(f"{path / CONFIG_FILE}: not a checkpoint config (no 'model' entry)")
    out = {
        "config": config,
        "label_map": _read_json(path / LABEL_MAP_FILE),
        "state": _State.from_dict(_read_json(path / STATE_FILE), path / STATE_FILE),
        "tensors": _read_weights(path / MODEL_FILE),
    }
    if full:
        optimizer = _torch_load(path / OPTIMIZER_FILE)
        if not isinstance(optimizer, dict) or not {"optimizer", "scheduler"} <= set(optimizer):
            raise CheckpointError(f"{path / OPTIMIZER_FILE}: expected optimizer and scheduler states")
        out["optimizer"] = optimizer
        out["rng"] = _torch_load(path / RNG_FILE)
    _verify_checksums(path, needed)  # after reading: a file that does not even parse gets its own error first
    return out


def _sha256(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _verify_checksums(path: Path, files: Sequence[str]) -> None:
    """Compare `files` with the checkpoint's checksums (none written: a checkpoint from an earlier version)."""
    if not (path / CHECKSUM_FILE).is_file():
        return
    recorded = _read_json(path / CHECKSUM_FILE)
    if not isinstance(recorded, dict):
        raise CheckpointError(f"{path / CHECKSUM_FILE}: corrupt checksum list")
    for file in files:
        if file in recorded and _sha256(path / file) != recorded[file]:
            raise CheckpointError(f"{path / file}: damaged: its contents differ from the checksum written with the checkpoint "
                                  f"({CHECKSUM_FILE}); restore it, or use another checkpoint (last/ or best/); a file changed on purpose: "
                                  f"delete {CHECKSUM_FILE}")


def _model_mismatch(saved_config: dict[str, Any], model: nn.Module, model_config: Any) -> str | None:
    problems = []
    if saved_config.get("model_class") not in (None, _class_name(model)):
        problems.append(f"model class {saved_config['model_class']} in the checkpoint, {_class_name(model)} here")
    saved = saved_config.get("model")
    if isinstance(saved, dict) and isinstance(model_config, dict):
        # A setting added to the model after the checkpoint was written, at its default here, is the behaviour the
        # checkpoint was trained with: not a mismatch.
        defaults = _config_defaults(model)
        saved = {**{k: v for k, v in model_config.items() if k not in saved and k in defaults and defaults[k] == v}, **saved}
    if saved != model_config:
        if isinstance(saved, dict) and isinstance(model_config, dict):
            keys = sorted(set(saved) | set(model_config), key=str)
            diffs = [f"{k}: {saved.get(k, '<absent>')!r} in the checkpoint, {model_config.get(k, '<absent>')!r} here"
                     for k in keys if saved.get(k, "<absent>") != model_config.get(k, "<absent>")]
            problems.append("the model config differs (" + "; ".join(diffs[:10]) + (" ..." if len(diffs) > 10 else "") + ")")
        else:
            problems.append(f"the model config differs ({saved!r} in the checkpoint, {model_config!r} here)")
    return "; ".join(problems) or None


def _save_weights(state_dict: dict[str, torch.Tensor], path: Path) -> None:
    """safetensors `save_file` of a state dict. Tensors that are the same view of one storage (tied
    weights) are stored once, the other names recorded as aliases in the file's metadata; partly
    overlapping views are copied."""
    from safetensors.torch import save_file

    tensors: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    first_name: dict[tuple, str] = {}
    for name, tensor in state_dict.items():
        tensor = tensor.detach()
        key = (tensor.device, tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape),
               tuple(tensor.stride()), tensor.dtype)
        if tensor.numel() and key in first_name:
            aliases[name] = first_name[key]
            continue
        first_name[key] = name
        tensors[name] = tensor
    storages: dict[tuple, int] = {}
    for tensor in tensors.values():
        storage = (tensor.device, tensor.untyped_storage().data_ptr())
        storages[storage] = storages.get(storage, 0) + 1
    ready = {}
    for name, tensor in tensors.items():
        shared = storages[(tensor.device, tensor.untyped_storage().data_ptr())] > 1
        tensor = tensor.to("cpu").contiguous()
        ready[name] = tensor.clone() if shared else tensor
    save_file(ready, str(path), metadata={"format": "pt", _ALIASES_KEY: json.dumps(aliases, sort_keys=True)})


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            metadata = f.metadata() or {}
            tensors = {name: f.get_tensor(name) for name in f.keys()}
        aliases = json.loads(metadata.get(_ALIASES_KEY, "{}"))
    except Exception as error:  # safetensors raises its own error types for truncated/corrupt files
        raise CheckpointError(f"{path}: cannot read the weights (truncated or corrupt safetensors file?): {error}") from error
    for alias, name in aliases.items():
        if name not in tensors:
            raise CheckpointError(f"{path}: alias {alias!r} points to {name!r}, which the file does not hold")
        tensors[alias] = tensors[name]
    return tensors


def _load_weights(model: nn.Module, tensors: dict[str, torch.Tensor], source: Path) -> None:
    """Strict load: the same keys and shapes, or a CheckpointError listing the differences."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    shapes = [f"{k} {tuple(tensors[k].shape)} in the file, {tuple(expected[k].shape)} in the model"
              for k in expected if k in tensors and tensors[k].shape != expected[k].shape]
    if missing or unexpected or shapes:
        parts = []
        for label, items in (("missing keys", missing), ("unexpected keys", unexpected), ("shape mismatches", shapes)):
            if items:
                parts.append(f"{label} ({len(items)}): " + ", ".join(items[:8]) + (", ..." if len(items) > 8 else ""))
        raise CheckpointError(f"{source} does not match {type(model).__name__}: " + "; ".join(parts))
    model.load_state_dict(tensors, strict=True)


RUN_ENTRIES = ("last", "best", "run.json", "result.json")  # what makes a folder a run's


def replaced_run_folder(out_dir: Path) -> Path:
    """Where a fresh run into `out_dir` keeps the run it replaces until its own first checkpoint."""
    return out_dir.with_name(out_dir.name + ".replaced")


def _set_aside_earlier_run(out_dir: Path) -> Path | None:
    """Move an earlier run's entries out of `out_dir` (a fresh run starts there), so that the folder never mixes two
    runs; they are deleted once the new run has a checkpoint, so that an interrupted start loses nothing. Entries
    left by an earlier replacement that never reached its first checkpoint are deleted: the run they replaced is
    still set aside."""
    present = [out_dir / name for name in RUN_ENTRIES if (out_dir / name).exists()]
    aside = replaced_run_folder(out_dir)
    if aside.exists():
        for path in present:
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
        return aside
    if not present:
        return None
    aside.mkdir()
    for path in present:
        os.replace(path, aside / path.name)
    logger.warning("%s held a run: set aside in %s until this run's first checkpoint, then deleted", out_dir, aside)
    return aside


@contextlib.contextmanager
def _atomic_directory(out_dir: Path, name: str):
    """Yield a temporary sibling directory to fill; on success it replaces `out_dir/name`: the old
    one is renamed away, the new one renamed in, the old one deleted. A crash leaves either the old
    or the new checkpoint (or, between the two renames, the old one under `.name.old`, which
    `_recover_swap` puts back), never a half-written one."""
    out_dir.mkdir(parents=True, exist_ok=True)
    final, tmp, old = out_dir / name, out_dir / f".{name}.tmp", out_dir / f".{name}.old"
    _recover_swap(out_dir, name)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        _fsync(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    _fsync(out_dir)
    shutil.rmtree(old, ignore_errors=True)


def _recover_swap(out_dir: Path, name: str) -> None:
    """After a crash between the two renames of `_atomic_directory`, put the old checkpoint back."""
    final, old = out_dir / name, out_dir / f".{name}.old"
    if not final.exists() and old.is_dir():
        os.replace(old, final)


def _link_or_copy(source: Path, target: Path) -> None:
    """Checkpoint files are never modified once written, so best/ and last/ may share them."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _fsync(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_json(path: Path, data: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=False)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as error:
        raise CheckpointError(f"{path} is missing") from error
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path}: not valid JSON (truncated or corrupt checkpoint?): {error}") from error


def _torch_load(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # truncated zip, bad pickle, ...
        raise CheckpointError(f"{path}: cannot load (truncated or corrupt?): {error}") from error


def _json_normalise(value: Any, what: str) -> Any:
    """`value` as plain JSON types (tuples -> lists, numpy/torch scalars -> numbers), or a TypeError."""

    def default(obj: Any) -> Any:
        if isinstance(obj, (np.generic, torch.Tensor)) and getattr(obj, "ndim", 0) == 0:
            return obj.item()
        if isinstance(obj, (np.ndarray, torch.Tensor)):
            return obj.tolist()
        if isinstance(obj, Path):
            return str(obj)
        raise TypeError(f"{type(obj).__name__} is not JSON-serialisable")

    try:
        return json.loads(json.dumps(value, default=default))
    except (TypeError, ValueError) as error:
        raise TypeError(f"{what} must be JSON-serialisable: {error}") from error


def _model_config(model: nn.Module) -> Any:
    config_dict = getattr(model, "config_dict", None)
    return _json_normalise(config_dict(), f"{type(model).__name__}.config_dict()") if callable(config_dict) else None


def _config_defaults(model: nn.Module) -> dict[str, Any]:
    """The defaults of the model's dataclass config (`model.config`), JSON-normalised; {} when it has none."""
    config = getattr(model, "config", None)
    if not dataclasses.is_dataclass(config):
        return {}
    defaults = {f.name: f.default for f in dataclasses.fields(config) if f.default is not dataclasses.MISSING}
    try:
        return _json_normalise(defaults, f"{type(config).__name__} defaults")
    except TypeError:  # a default that is not JSON: compare nothing by default
        return {}


def _class_name(model: nn.Module) -> str:
    return f"{type(model).__module__}.{type(model).__qualname__}"


# ----------------------------------------------------------------------------------------------------
# RNG states and Ctrl-C


def _get_rng_state() -> dict[str, Any]:
    name, keys, position, has_gauss, cached = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (name, torch.from_numpy(keys.astype(np.int64)), int(position), int(has_gauss), float(cached)),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, position, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), position, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


class Terminated(KeyboardInterrupt):
    """SIGTERM during training (``kill``, or a job scheduler's notice before it stops the job): handled as Ctrl-C
    is, ``last/`` saved at the last whole update first."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated(f"signal {signal.Signals(signum).name}")


@contextlib.contextmanager
def _handlers(handlers: dict[int, Any]):
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
def _interrupts_deferred():
    """Hold a Ctrl-C or SIGTERM that arrives inside the block until the block is done, then deliver it."""
    received: list[tuple[int, Any]] = []
    with _handlers({signum: lambda s, frame: received.append((s, frame)) for signum in (signal.SIGINT, signal.SIGTERM)}) as previous:
        yield
    if received:
        signum, frame = received[0]
        handler = previous.get(signum)
        if callable(handler):
            handler(signum, frame)
        elif handler != signal.SIG_IGN:
            signal.raise_signal(signum)
