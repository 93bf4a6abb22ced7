"""The loop: `train` runs the updates of each epoch over its shuffled batches, evaluates the epoch, keeps `best/` and
`last/` up to date, stops at a step or time budget, and saves `last/` on Ctrl-C or SIGTERM before it exits."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import send_to_device
from torch import nn
from tqdm.auto import tqdm

from turnformer.errors import CheckpointError
from turnformer.results import machine
from turnformer.training.checkpoint import (
    MODEL_FILE, compute_only_changes, config_of, link_checkpoint, load_weights, model_mismatch, read_checkpoint,
    write_checkpoint,
)
from turnformer.training.config import TrainConfig, TrainResult
from turnformer.training.evaluation import evaluate, metric_text
from turnformer.training.files import atomic_directory, json_normalise, recover_swap
from turnformer.training.optim import build_optimizer, build_scheduler
from turnformer.training.randomness import epoch_order, get_rng_state, set_rng_state, set_seed
from turnformer.training.runs import (delete_replaced_run, holds_set_aside_run, only_run_in, replaced_run_folder,
                                      set_aside_earlier_run)
from turnformer.training.signals import interrupts_deferred, raise_terminated, signal_handlers
from turnformer.training.state import TrainState

logger = logging.getLogger(__name__)


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bfloat16 itself (oneDNN's bf16 kernels: AVX-512 or AMX). Without it, bfloat16 autocast
    emulates the type and trains many times slower than in float32 (measured in docs/dialogxl.md)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch without the query: say nothing rather than warn wrongly
        return True


def train(
    model: nn.Module,
    train_batches: Sequence[Any],
    eval_fn: Callable[[nn.Module, str], dict[str, Any]],
    config: TrainConfig,
    label_map: dict | None = None,
    accelerator: Any | None = None,
    run_info: dict | None = None,
) -> TrainResult:
    """Train `model` (a `TrainableModel`) on `train_batches`; see the package docstring.

    `run_info`, the run's description, is written to ``out_dir/run.json`` once the checkpoint that a resumed run
    continues is known to fit: a refused resume (another model, other sizes or labels) leaves the run as it was, and a
    finished run resumed (nothing left to train) keeps its own.

    `eval_fn(model, split)` is called after every epoch for "validation" and "test", with the plain
    (unwrapped) model in eval mode under `torch.no_grad()`; it returns a JSON-serialisable dict with
    a numeric `"primary"` metric, higher is better. With several processes it runs on each of them
    (it may shard the work itself); the main process's result is the one kept. `label_map` (any
    JSON-serialisable dict, e.g. label -> id) is saved with every checkpoint and must match on resume.

    `train` seeds everything with `config.seed` when it starts, after the model was built: call
    `set_seed(seed)` before building the model too, for a reproducible initialisation. Epoch
    summaries go to the loggers under `turnformer.training` (INFO), and so do periodic loss lines where no progress
    bar is drawn (stderr not a terminal: a log file).

    With N processes each takes `len(train_batches) // N` batches of every epoch (`order[rank::N]`);
    the last `len(train_batches) % N` batches of each epoch's shuffled order are dropped (a warning
    says how many), so every process makes the same number of updates.

    Ctrl-C (KeyboardInterrupt) or SIGTERM (`Terminated`, a KeyboardInterrupt) saves `last/` at the last
    completed update and re-raises.
    """
    if not isinstance(model, nn.Module) or not callable(getattr(model, "loss", None)):
        raise TypeError(f"train() needs an nn.Module with a loss(batch) method, got {type(model).__name__}")
    if accelerator is None:
        state = AcceleratorState._shared_state  # one per process: an earlier run's here may hold another precision
        # no setting: accelerate's own default (its environment variable, else "no"), not the earlier run's
        wanted = config.mixed_precision or os.environ.get("ACCELERATE_MIXED_PRECISION", "no").lower()
        if state and state.get("_mixed_precision") != wanted:
            AcceleratorState._reset_state()
        accelerator = Accelerator(mixed_precision=config.mixed_precision)
    elif config.mixed_precision is not None and config.mixed_precision != accelerator.mixed_precision:
        raise ValueError(f"TrainConfig.mixed_precision={config.mixed_precision!r} but the Accelerator given runs "
                         f"{accelerator.mixed_precision!r}: set it in one place")
    if accelerator.mixed_precision == "fp16" and accelerator.device.type == "cpu":  # accelerate would run fp32 there
        raise ValueError("mixed precision 'fp16' (train.mixed_precision, or ACCELERATE_MIXED_PRECISION) needs a GPU: on "
                         "a CPU the run would train in fp32 and be recorded as fp16; use 'bf16' or 'no'")
    if accelerator.mixed_precision == "bf16" and accelerator.device.type == "cpu" and not cpu_has_bf16():
        logger.warning("mixed precision 'bf16' on a CPU without bfloat16 instructions: autocast emulates the type, and "
                       "a step runs many times slower than in float32 (train.mixed_precision = \"no\" trains in float32)")
    if accelerator.gradient_accumulation_steps != 1:
        raise ValueError(
            "pass gradient accumulation through TrainConfig.gradient_accumulation_steps, not through the "
            f"Accelerator (it has gradient_accumulation_steps={accelerator.gradient_accumulation_steps})"
        )
    made = [folder for folder in (*reversed(config.out_dir.parents), config.out_dir) if not folder.exists()]
    with only_run_in(config.out_dir, accelerator.is_main_process):
        trainer = _Trainer(model, train_batches, eval_fn, config, label_map, accelerator)  # checks last/ on resume
        finished = trainer.state.epoch >= trainer.config.epochs and (config.out_dir / "run.json").exists()
        if run_info is not None and accelerator.is_main_process and not finished:  # a finished run's record stays
            if not (config.out_dir / "run.json").exists():
                made.append(config.out_dir / "run.json")
            config.out_dir.mkdir(parents=True, exist_ok=True)
            # what trained it, however it was set, and where (a results file collected elsewhere names this machine)
            run_info = {**run_info, "mixed_precision": accelerator.mixed_precision, "machine": machine()}
            if trainer.kept and isinstance((run_info.get("recipe") or {}).get("train"), dict):  # as trained, not as given
                run_info["recipe"] = {**run_info["recipe"], "train": {**run_info["recipe"]["train"], **trainer.kept}}
            if changes := earlier_changes(config.out_dir) + trainer.changed:  # the run is not one training of its recipe
                run_info["resumed_with_changes"] = changes
            (config.out_dir / "run.json").write_text(json.dumps(run_info, indent=2, default=str) + "\n")
        try:
            return trainer.run()
        except Exception:  # refused before its first checkpoint (a batch the model cannot read...): leave nothing behind
            if accelerator.is_main_process and not any((config.out_dir / kept).exists() for kept in ("last", "best")):
                remove_made(made)
            raise


def earlier_changes(out_dir: Path) -> list[str]:
    """The changed settings earlier resumptions of the run in `out_dir` recorded in its run.json."""
    try:
        changes = json.loads((out_dir / "run.json").read_text()).get("resumed_with_changes")
    except (OSError, ValueError, AttributeError):
        return []
    return changes if isinstance(changes, list) else []


def unwritten(checkpoint: Path, error: BaseException) -> str:
    """What a checkpoint that could not be written says: the error (its first line) and the disk's free space."""
    reason = error.strerror if isinstance(error, OSError) and error.strerror else (str(error).splitlines() or [""])[0]
    try:
        free = f"; {shutil.disk_usage(checkpoint.parent).free / 2**20:,.0f} MiB free on its disk"
    except OSError:
        free = ""
    kept = f"the previous {checkpoint.name}/ is kept" if checkpoint.exists() else f"no {checkpoint.name}/ was written"
    return f"{checkpoint}: the checkpoint could not be written ({reason}{free}); {kept}"


def remove_made(made: list[Path]) -> None:
    """Remove what a run made (its run.json, its folder and those above it that it made), newest first, a folder only
    if empty."""
    for path in reversed(made):
        if path.is_dir():
            if not any(path.iterdir()):
                path.rmdir()
        else:
            path.unlink(missing_ok=True)


class _LossForward(nn.Module):
    """Routes `forward` to `model.loss`, so that DDP's gradient hooks and accelerate's autocast (both
    attached to `forward`) apply to the loss computation."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, batch: Any) -> torch.Tensor:
        return self.model.loss(batch)


class _LossWindow:
    """The summed loss of the batches since the last loss line, how many they are, and since when."""

    def __init__(self, device: torch.device) -> None:
        self.loss = torch.zeros((), device=device)
        self.batches, self.start = 0, time.monotonic()

    def add(self, loss: torch.Tensor, batches: int) -> None:
        self.loss += loss
        self.batches += batches

    def restart(self) -> None:
        self.loss.zero_()
        self.batches, self.start = 0, time.monotonic()


def batches_digest(batches: Sequence[Any]) -> str | None:
    """A digest of which examples each training batch holds, in order, where every batch names them (an ``ids``
    attribute or key, none of them None: ERC's conversations); None where they do not. A run resumed in the middle of
    an epoch must find the same batches, or the rest of the epoch would repeat some examples and skip others."""
    digest = hashlib.sha1()
    for batch in batches:
        ids = batch.get("ids") if isinstance(batch, dict) else getattr(batch, "ids", None)
        if not isinstance(ids, list | tuple) or not ids or any(i is None for i in ids):
            return None
        digest.update(json.dumps([str(i) for i in ids]).encode() + b"\n")
    return digest.hexdigest()


def _batches_per_process(n_batches: int, world: int, is_main_process: bool) -> int:
    """Each process's share of an epoch's batches; the tail of the shuffled order that the processes cannot share
    evenly is dropped, and the main process says so."""
    per_process = n_batches // world
    if per_process == 0:
        raise ValueError(f"{n_batches} training batches cannot be shared by {world} processes")
    dropped = n_batches - per_process * world
    if dropped and is_main_process:
        logger.warning(
            "%d of %d batches are dropped from every epoch (the tail of its shuffled order) so that each of the "
            "%d processes gets %d", dropped, n_batches, world, per_process,
        )
    return per_process


class _Trainer:
    """One call of `train`: the model, optimizer, schedule and state of the run, and the loop over them."""

    def __init__(self, model, batches, eval_fn, config: TrainConfig, label_map, accelerator) -> None:
        self.model, self.batches, self.eval_fn, self.config, self.acc = model, batches, eval_fn, config, accelerator
        self.label_map = json_normalise(label_map, "label_map")
        self.model_config = config_of(model)
        self.world, self.rank = accelerator.num_processes, accelerator.process_index
        self.n_batches = len(batches)
        self.per_process = _batches_per_process(self.n_batches, self.world, accelerator.is_main_process)
        self.updates_per_epoch = math.ceil(self.per_process / config.gradient_accumulation_steps)

        set_seed(config.seed)
        self.optimizer = build_optimizer(model, config.lr, config.weight_decay, config.head_lr)
        schedule_steps = self.updates_per_epoch * config.epochs
        if config.warmup_steps > schedule_steps and accelerator.is_main_process:
            logger.warning(
                "train.warmup_steps = %d is more than the run's %d updates (%d epoch(s) of %d): the learning rate rises "
                "to %.0f%% of lr = %g and never reaches it; lower warmup_steps", config.warmup_steps, schedule_steps,
                config.epochs, self.updates_per_epoch, 100 * schedule_steps / config.warmup_steps, config.lr)
        self.scheduler = build_scheduler(self.optimizer, config.scheduler, config.warmup_steps, schedule_steps)
        self.digest = batches_digest(batches)
        self.state = TrainState(num_train_batches=self.n_batches, world_size=self.world, schedule_steps=schedule_steps,
                                batches_digest=self.digest)
        self.replaced: Path | None = None  # an earlier run in out_dir, set aside until this run's first checkpoint
        self.kept: dict[str, Any] = {}  # training settings a resumed run keeps from its checkpoint, not those given
        self.changed: list[str] = []  # training settings a resumed run changed ("grad_clip: 5.0 -> 0.5")
        checkpoint = self._load_for_resume()
        self.wrapped, self.optimizer = accelerator.prepare(_LossForward(model), self.optimizer)
        if checkpoint is not None:
            self.optimizer.load_state_dict(checkpoint["optimizer"]["optimizer"])
            self.scheduler.load_state_dict(checkpoint["optimizer"]["scheduler"])
            set_rng_state(checkpoint["rng"])
        self.state.stopped_early, self.state.stop_reason = False, None
        # this process's losses not yet folded; in float64, where a sum of float32 losses is exact, so that where the
        # sums are folded (a save, a resume) does not change the epoch's train loss (MPS has no float64)
        self.local_loss = torch.zeros((), dtype=torch.float32 if accelerator.device.type == "mps" else torch.float64,
                                      device=accelerator.device)
        self.local_count = 0
        self.saved_at: tuple[int, int, int] | None = None
        # the random state at the last whole update, while a next one is under way: a Ctrl-C saves this one, so
        # the resumed run draws again the dropout masks that the unfinished update's first batches drew
        self.rng_at_last_update: dict[str, Any] | None = None
        self.counted_until = 0.0  # the epoch's training time (epoch_seconds) is counted up to this moment

    # -- resume --------------------------------------------------------------------------------------

    def _load_for_resume(self) -> dict[str, Any] | None:
        """With `resume`, the checkpoint `last/` to continue, its weights loaded and its state taken over; None for a
        fresh start, which sets an earlier run in out_dir aside."""
        config, out_dir = self.config, self.config.out_dir
        if self.acc.is_main_process:
            recover_swap(out_dir, "last")
        self.acc.wait_for_everyone()
        last = out_dir / "last"
        if not config.resume:
            if self.acc.is_main_process:
                self.replaced = set_aside_earlier_run(out_dir)
            return None
        if not last.exists():
            if (out_dir / "best").exists():  # a run whose last/ is gone: starting afresh would mix two runs in one folder
                raise CheckpointError(f"cannot resume {out_dir}: it holds a run's best/ but no last/ to continue; "
                                      "evaluate best/ as it is, or start over with --overwrite (the old run is kept "
                                      "until the new one's first checkpoint)")
            if self.acc.is_main_process:
                logger.info("resume: %s holds no checkpoint yet; starting from the beginning", out_dir)
                if holds_set_aside_run(replaced_run_folder(out_dir)):  # a replacement that never checkpointed: it goes on replacing
                    self.replaced = replaced_run_folder(out_dir)
            return None
        checkpoint = read_checkpoint(last, full=True)
        self._check_resume(last, checkpoint)
        load_weights(self.model, checkpoint["tensors"], last / MODEL_FILE)
        state: TrainState = checkpoint["state"]
        if not state.schedule_steps:  # a checkpoint from before it was kept: the schedule as the run began, from its config
            saved = (checkpoint["config"].get("train") or {}).get("epochs") or self.config.epochs
            per_process = (state.num_train_batches or self.n_batches) // max(1, state.world_size)
            state.schedule_steps = math.ceil(max(1, per_process) / self.config.gradient_accumulation_steps) * saved
        if state.schedule_steps != self.state.schedule_steps:  # the schedule stays laid out as the run began
            self.scheduler = build_scheduler(self.optimizer, self.config.scheduler, self.config.warmup_steps,
                                             state.schedule_steps)
        state.num_train_batches, state.world_size, state.batches_digest = self.n_batches, self.world, self.digest
        self.state = state
        if state.epoch > self.config.epochs:  # fewer epochs than the run has trained: it has trained them, and says so
            self.kept["epochs"] = state.epoch
            self.config = dataclasses.replace(self.config, epochs=state.epoch)
        if self.acc.is_main_process and state.epoch >= self.config.epochs:
            logger.info("resuming from %s: the run has finished its %d epochs (step %d); nothing left to train",
                        last, state.epoch, state.global_step)
        elif self.acc.is_main_process:
            logger.info("resuming from %s: epoch %d, batch %d, step %d", last, state.epoch + 1, state.batch_in_epoch,
                        state.global_step)
        return checkpoint

    def _check_resume(self, last: Path, checkpoint: dict[str, Any]) -> None:
        """Refuse a checkpoint this run cannot continue: another model or label map, or, in the middle of an epoch,
        another batch order. Changed training settings only get a warning."""
        config, saved, state = self.config, checkpoint["config"], checkpoint["state"]
        problems = model_mismatch(saved, self.model, self.model_config)
        if problems:
            raise CheckpointError(f"cannot resume from {last}: {problems}; start a new run instead (in another folder, or over this one: --overwrite)")
        if checkpoint["label_map"] != self.label_map:
            raise CheckpointError(f"cannot resume from {last}: its label map differs from this run's")
        changed = compute_only_changes(saved, self.model, self.model_config)
        if changed and self.acc.is_main_process:
            logger.warning("resuming from %s with %s: changes how the model computes (memory, speed), not what",
                           last, ", ".join(changed))
        saved_train = saved.get("train") or {}
        if state.batch_in_epoch > 0:
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
            if state.batches_digest and self.digest and state.batches_digest != self.digest:
                raise CheckpointError(
                    f"cannot resume from {last} in the middle of epoch {state.epoch + 1}: the training batches hold other "
                    "examples than when it was saved (another grouping of the data into batches, or other data), so the "
                    "rest of the epoch would repeat some and skip others; resume with the same data and code, or start "
                    "a new run (in another folder, or over this one: --overwrite)"
                )
        if config.scheduler == "linear" and self.acc.is_main_process:  # laid out over epochs x batches when the run began
            for what, before, now in (("train.epochs", saved_train.get("epochs"), config.epochs),
                                      ("number of training batches an epoch", state.num_train_batches, self.n_batches)):
                if before and before != now:  # 0: a checkpoint from before the count was kept
                    logger.warning("resuming with the %s changed (%s -> %s): the linear learning-rate schedule comes from "
                                   "the checkpoint, laid out for the run as it began, and reaches 0 where that run would "
                                   "have ended (training past it changes nothing); for another length, train a new run",
                                   what, before, now)
        # the optimizer's state holds the rates and weight decay: a resumed run trains on with the checkpoint's, and records those
        kept = {k: saved_train[k] for k in ("lr", "head_lr", "weight_decay")
                if k in saved_train and saved_train[k] != getattr(config, k)}
        if kept:
            if self.acc.is_main_process:
                given = "; ".join(f"{k}: {getattr(config, k)!r} given, {v!r} kept" for k, v in kept.items())
                logger.warning("resuming keeps the checkpoint's optimizer settings, not those given (%s): for others, "
                               "start a new run", given)
            self.config = config = dataclasses.replace(config, **kept)
            self.kept.update(kept)
        changed = [
            f"{k}: {saved_train.get(k)!r} -> {getattr(config, k)!r}"
            for k in ("grad_clip", "scheduler", "warmup_steps", "gradient_accumulation_steps", "seed", "mixed_precision")
            if k in saved_train and saved_train[k] != getattr(config, k)
        ]
        if config.scheduler != "linear" and state.num_train_batches and state.num_train_batches != self.n_batches:
            changed.append(f"training batches an epoch: {state.num_train_batches} -> {self.n_batches}")
        self.changed = changed
        if changed and self.acc.is_main_process:
            logger.warning("resuming with a changed training config (%s): the optimizer and schedule state come from "
                           "the checkpoint, the result will differ from an uninterrupted run", "; ".join(changed))

    # -- main loop -----------------------------------------------------------------------------------

    def run(self) -> TrainResult:
        self.session_start = time.monotonic()
        self.seconds_before = self.state.train_seconds
        trained = self.state.epoch < self.config.epochs
        try:
            with signal_handlers({signal.SIGTERM: raise_terminated}):
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
            stopped_early=st.stopped_early, stop_reason=st.stop_reason, trained=trained,
        )

    def _release(self) -> None:
        """Drop this run's model and optimizer from the accelerator's lists, so that an accelerator
        reused for several runs (seeds, folds) does not keep every past model alive."""
        for attribute, prepared in (("_models", self.wrapped), ("_optimizers", self.optimizer)):
            items = getattr(self.acc, attribute, None)
            if isinstance(items, list):
                items[:] = [item for item in items if item is not prepared]

    def _train_epoch(self, epoch: int) -> bool:
        """Train the rest of `epoch` (0-based, the state's epoch); False when the run stops early."""
        config, st = self.config, self.state
        local = epoch_order(self.n_batches, config.seed, epoch)[self.rank: self.per_process * self.world: self.world]
        window = _LossWindow(self.acc.device)
        # a bar on a terminal only: a log file gets the periodic loss lines of `_show_loss` instead of a bar's redraws
        bar = tqdm(total=self.per_process, initial=st.batch_in_epoch, desc=f"epoch {epoch + 1}/{config.epochs}",
                   unit="batch", disable=None if self.acc.is_local_main_process else True, dynamic_ncols=True, leave=False)
        self.counted_until = time.monotonic()
        # from_pretrained hands encoders over in eval mode: without this, the first epoch (and an epoch resumed in
        # its middle) would train with their dropout off, unlike the epochs after an evaluation
        self.model.train()
        try:
            while st.batch_in_epoch < self.per_process:
                reason = self._stop_reason()
                if reason is not None:
                    self._stop(reason)
                    return False
                group = local[st.batch_in_epoch: st.batch_in_epoch + config.gradient_accumulation_steps]
                group_loss = self._update(group)
                bar.update(len(group))
                window.add(group_loss, len(group))
                if st.global_step % config.log_every == 0 or st.batch_in_epoch == self.per_process:
                    self._show_loss(window, bar, epoch)
                if config.save_every_steps and st.global_step % config.save_every_steps == 0 and st.batch_in_epoch < self.per_process:
                    self._save("last")
                    self.counted_until = time.monotonic()   # the save is no training time
        finally:
            bar.close()
        return True

    def _update(self, group: list[int]) -> torch.Tensor:
        """One optimizer update from the batches `group` (indices into the training batches); returns the sum of their
        losses."""
        self.rng_at_last_update = get_rng_state()
        group_loss = self._accumulate_gradients(group)
        with interrupts_deferred():   # an update and its bookkeeping happen entirely or not at all
            self._step(len(group), group_loss)
        return group_loss

    def _accumulate_gradients(self, group: list[int]) -> torch.Tensor:
        """Forward and backward over the batches of `group`, each loss scaled by 1/len(group); the summed loss."""
        acc = self.acc
        group_loss = torch.zeros((), device=acc.device)
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
        return group_loss

    def _step(self, n_batches: int, group_loss: torch.Tensor) -> None:
        """Clip, step the optimizer and the schedule, and count the update of `n_batches` batches in the state."""
        acc, config, st = self.acc, self.config, self.state
        if config.grad_clip:
            acc.clip_grad_norm_(self.wrapped.parameters(), config.grad_clip)
        self.optimizer.step()
        if not acc.optimizer_step_was_skipped:
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        st.batch_in_epoch, st.global_step = st.batch_in_epoch + n_batches, st.global_step + 1
        self.rng_at_last_update = None   # the current state is the last whole update's again
        self.local_loss += group_loss
        self.local_count += n_batches
        now = time.monotonic()
        st.epoch_seconds, self.counted_until = st.epoch_seconds + now - self.counted_until, now

    def _end_epoch(self, epoch: int) -> None:
        """Evaluate the epoch just trained, record it, and save `best/` (when it is the best so far) and `last/`."""
        st = self.state
        self._fold_loss(collective=True)
        train_loss = st.epoch_loss_sum / max(st.epoch_loss_count, 1)
        started = time.monotonic()
        validation = evaluate(self.model, self.eval_fn, "validation", self.world)
        test = evaluate(self.model, self.eval_fn, "test", self.world)
        entry = {
            "epoch": epoch + 1, "complete": True, "train_loss": train_loss, "seconds": st.epoch_seconds,
            "eval_seconds": time.monotonic() - started, "steps": st.global_step, "validation": validation, "test": test,
        }
        with interrupts_deferred():   # the record, best/ and last/ agree even under Ctrl-C
            improved = st.finish_epoch(entry)
            if improved:
                self._save("best")
            self._save("last", link_from="best" if improved else None)
        if self.acc.is_main_process:
            self._log_epoch(entry, improved)

    # -- what the run shows --------------------------------------------------------------------------

    def _show_loss(self, window: _LossWindow, bar: Any, epoch: int) -> None:
        """The window's mean loss and the learning rate on the epoch's bar or, where no bar is drawn, in a log line;
        the window starts again."""
        st = self.state
        mean, lr = window.loss.item() / window.batches, self.scheduler.get_last_lr()[0]
        bar.set_postfix(loss=f"{mean:.4f}", lr=f"{lr:.2e}", refresh=False)
        if self.acc.is_main_process and bar.disable:   # the bar, where drawn, shows them already
            logger.info("epoch %d/%d, batch %d/%d (step %d): loss %.4f, lr %.3g, %.3g batches/s", epoch + 1,
                        self.config.epochs, st.batch_in_epoch, self.per_process, st.global_step, mean, lr,
                        window.batches / max(time.monotonic() - window.start, 1e-9))
        window.restart()

    def _log_epoch(self, entry: dict[str, Any], improved: bool) -> None:
        st = self.state
        logger.info(
            "epoch %d/%d: train loss %.4f, validation %s, test %s%s (best validation %s at epoch %d), %.1f s",
            entry["epoch"], self.config.epochs, entry["train_loss"], metric_text(entry["validation"]),
            metric_text(entry["test"]), " *" if improved else "", metric_text(st.best_validation), st.best_epoch,
            entry["seconds"],
        )

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

    def _stop(self, reason: str) -> None:
        self._fold_loss(collective=True)
        self.state.stop_early(reason, self.per_process)
        self._save("last")
        if self.acc.is_main_process:
            logger.warning("stopped early: %s; %s/last holds the position (resume=True, or --resume, continues)",
                           self.state.stop_reason, self.config.out_dir)

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
            st.stop_early(f"interrupted ({what})", self.per_process)
        logger.warning("interrupted: saving %s/last at step %d before exiting", self.config.out_dir, st.global_step)
        try:
            self._save("last", collective=False, rng=self.rng_at_last_update)
        except KeyboardInterrupt:  # a second Ctrl-C: it stops the save, as it is asked to
            logger.warning("a second interruption stopped the save: %s/last is not at step %d", self.config.out_dir,
                           st.global_step)
            raise

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
        if collective:
            self._fold_loss(collective=True)
        self.state.train_seconds = self._seconds()
        if self.acc.is_main_process:
            self._write_checkpoint(name, link_from, rng)
        if collective:
            self.acc.wait_for_everyone()

    def _write_checkpoint(self, name: str, link_from: str | None, rng: dict[str, Any] | None) -> None:
        """Replace `out_dir/name` whole: written afresh, or `out_dir/link_from`'s files; the first checkpoint of a run
        deletes the run it replaced."""
        st, out_dir = self.state, self.config.out_dir
        try:
            with atomic_directory(out_dir, name) as tmp:
                if link_from:
                    link_checkpoint(out_dir / link_from, tmp)
                else:
                    write_checkpoint(tmp, model=self.model, model_config=self.model_config, train_config=self.config,
                                     label_map=self.label_map, state=st, optimizer=self.optimizer, scheduler=self.scheduler,
                                     rng=rng)
        except (OSError, RuntimeError) as error:  # a full disk: OSError, or torch.save's RuntimeError of a short write
            raise CheckpointError(unwritten(out_dir / name, error)) from error
        if name == "last":
            self.saved_at = (st.epoch, st.batch_in_epoch, st.global_step)
        if self.replaced is not None:  # this run can now be continued: the one it replaces goes
            delete_replaced_run(self.replaced, out_dir)
            self.replaced = None
