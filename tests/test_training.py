"""The shared training loop: learning, best-epoch bookkeeping, checkpoints, exact resume, two processes."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch.optim.optimizer import register_optimizer_step_post_hook

from turnformer.results import machine
from turnformer.training import loop
from turnformer.training import (
    CHECKPOINT_FILES, CheckpointError, TrainConfig, build_optimizer, build_scheduler, epoch_order, load_checkpoint,
    read_checkpoint_config, set_seed, train,
)
from turnformer.training.files import atomic_directory

WORKER = Path(__file__).with_name("_ddp_worker.py")
_spec = importlib.util.spec_from_file_location("_ddp_worker", WORKER)
_worker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_worker)
TinyClassifier, make_batches, accuracy_eval, flat_params = (
    _worker.TinyClassifier, _worker.make_batches, _worker.accuracy_eval, _worker.flat_params,
)

TRAIN = make_batches(10, seed=1)
SPLITS = {"validation": make_batches(3, seed=2), "test": make_batches(3, seed=3)}
LABELS = {"a": 0, "b": 1, "c": 2}


def new_model(**kwargs) -> TinyClassifier:
    set_seed(0)
    return TinyClassifier(**kwargs)


def config(out_dir: Path, **overrides) -> TrainConfig:
    base = dict(epochs=3, lr=0.05, seed=7, out_dir=out_dir, weight_decay=0.01, scheduler="linear", warmup_steps=2,
                gradient_accumulation_steps=3, log_every=2)
    return TrainConfig(**{**base, **overrides})


def run(out_dir: Path, model: TinyClassifier | None = None, **overrides):
    model = model if model is not None else new_model()
    return model, train(model, TRAIN, accuracy_eval(SPLITS), config(out_dir, **overrides), label_map=LABELS)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The reference run: 3 epochs of 10 batches, accumulation 3 (updates of 3, 3, 3, 1 batches)."""
    out = tmp_path_factory.mktemp("reference")
    model, result = run(out)
    return out, flat_params(model), result


def test_loss_goes_down_and_bookkeeping(tmp_path):
    model, result = run(tmp_path, epochs=6, gradient_accumulation_steps=1, scheduler="constant", warmup_steps=0)
    losses = [h["train_loss"] for h in result.history]
    assert len(losses) == 6 and all(h["complete"] for h in result.history)
    assert losses[-1] < 0.6 * losses[0]
    assert result.steps == 6 * len(TRAIN) and not result.stopped_early and result.stop_reason is None
    validation = [h["validation"]["primary"] for h in result.history]
    assert result.best_epoch == validation.index(max(validation)) + 1
    assert result.test_at_best == result.history[result.best_epoch - 1]["test"]
    assert result.best_validation["primary"] == max(validation)
    assert result.test_at_best["primary"] > 0.5   # it learned the teacher (chance is 1/3)


def test_test_at_best_is_the_test_score_of_the_best_validation_epoch(tmp_path):
    validation = [0.50, 0.80, 0.80, 0.70]   # the tie at epoch 3 keeps epoch 2
    test = [0.90, 0.20, 0.95, 0.99]
    snapshots = []

    def scripted(model, split):
        if split == "validation":
            snapshots.append(flat_params(model))
        return {"primary": (validation if split == "validation" else test)[len(snapshots) - 1], "split": split}

    model = new_model()
    result = train(model, TRAIN, scripted, config(tmp_path, epochs=4))
    assert result.best_epoch == 2
    assert result.best_validation == {"primary": 0.80, "split": "validation"}
    assert result.test_at_best == {"primary": 0.20, "split": "test"}
    assert [h["test"]["primary"] for h in result.history] == test
    # best/ holds the weights of epoch 2, last/ those of the end
    best = new_model()
    load_checkpoint(tmp_path / "best", best)
    assert torch.equal(flat_params(best), snapshots[1])
    last = new_model()
    state = load_checkpoint(tmp_path / "last", last)["state"]
    assert torch.equal(flat_params(last), flat_params(model))
    assert state["best_epoch"] == 2 and state["test_at_best"]["primary"] == 0.20


@pytest.mark.parametrize("stop", [{"max_steps": 6}, {"max_steps": 1, "save_every_steps": 1}, {"time_budget_s": 1e-9}])
def test_stop_then_resume_ends_with_the_same_weights(tmp_path, uninterrupted, stop):
    _, reference, expected = uninterrupted
    _, stopped = run(tmp_path, **stop)
    assert stopped.stopped_early and stopped.stop_reason
    assert ("max_steps" in stopped.stop_reason) == ("max_steps" in stop)
    partial = stopped.history[-1]
    assert partial["complete"] is False and partial["validation"] is None and partial["stopped"] == stopped.stop_reason
    state = json.loads((tmp_path / "last" / "trainer_state.json").read_text())
    assert state["global_step"] == stopped.steps == stop.get("max_steps", 0)
    # max_steps=6: epoch 2 cut after its 2nd update (6 batches); max_steps=1: epoch 1 after its 1st
    assert state["batch_in_epoch"] == {6: 6, 1: 3}.get(stop.get("max_steps"), 0)

    model, resumed = run(tmp_path, resume=True, model=TinyClassifier())   # any weights: they are loaded
    assert torch.equal(flat_params(model), reference)
    assert resumed.steps == expected.steps and not resumed.stopped_early
    assert [h["epoch"] for h in resumed.history] == [1, 2, 3] and all(h["complete"] for h in resumed.history)
    # exactly: the loss sums are float64, where folding them at a save did not round them the same
    assert [h["train_loss"] for h in resumed.history] == [h["train_loss"] for h in expected.history]
    assert resumed.best_epoch == expected.best_epoch and resumed.test_at_best == expected.test_at_best


def test_ctrl_c_saves_last_and_resume_continues(tmp_path, uninterrupted):
    _, reference, expected = uninterrupted
    model = new_model()
    model.interrupt_at = 15   # epoch 2, its 5th batch: inside the 2nd update (batches 4-6) of the epoch
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, model=model)
    state = json.loads((tmp_path / "last" / "trainer_state.json").read_text())
    assert (state["epoch"], state["batch_in_epoch"], state["global_step"]) == (1, 3, 5)   # the last whole update
    assert state["stopped_early"] and "KeyboardInterrupt" in state["stop_reason"]
    assert state["history"][-1]["complete"] is False
    model, resumed = run(tmp_path, resume=True, model=TinyClassifier())
    assert torch.equal(flat_params(model), reference)
    assert resumed.steps == expected.steps and len(resumed.history) == 3


def test_a_second_ctrl_c_stops_the_save_and_says_so(tmp_path, monkeypatch, caplog):
    """The first Ctrl-C saves last/; a second one during that save stops it (as asked), and the log says last/ is not
    at the interrupted step, where the command would otherwise say nothing of the save it was waiting for."""
    model = new_model()
    model.interrupt_at = 15
    saves, save = [], loop._Trainer._save

    def second_ctrl_c(self, name, **kwargs):  # the save on interrupt (the run has stopped) meets a second Ctrl-C
        if not self.state.stopped_early:
            return save(self, name, **kwargs)
        saves.append(name)
        raise KeyboardInterrupt

    monkeypatch.setattr(loop._Trainer, "_save", second_ctrl_c)
    with pytest.raises(KeyboardInterrupt), caplog.at_level("WARNING"):
        run(tmp_path, model=model)
    assert saves == ["last"]
    assert f"a second interruption stopped the save: {tmp_path}/last is not at step 5" in caplog.text
    state = json.loads((tmp_path / "last" / "trainer_state.json").read_text())
    assert state["global_step"] < 5 and not state["stopped_early"]  # the first epoch's save, as it was


class DropoutClassifier(TinyClassifier):
    """Draws random numbers in every training batch (dropout), as the real models do."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.nn.functional.dropout(torch.tanh(self.norm(self.inp(x))), 0.3, self.training))


def test_ctrl_c_inside_an_update_of_a_model_with_dropout_resumes_exactly(tmp_path):
    """The dropout masks that the interrupted update's first batches drew are not kept: the checkpoint holds the
    random state of the last whole update, so the resumed run draws the same masks as an uninterrupted one."""
    set_seed(0)
    reference, _ = run(tmp_path / "reference", model=DropoutClassifier())
    set_seed(0)
    model = DropoutClassifier()
    model.interrupt_at = 15   # epoch 2, its 5th batch: the 4th has drawn its masks inside the unfinished update
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "run", model=model)
    resumed, _ = run(tmp_path / "run", resume=True, model=DropoutClassifier())
    assert torch.equal(flat_params(resumed), flat_params(reference))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigint_or_sigterm_inside_an_update_takes_effect_after_it(tmp_path, uninterrupted, signum):
    """A real Ctrl-C, or SIGTERM (kill, a job scheduler), arriving during optimizer.step() is held until the update
    is recorded; then `last/` is saved there."""
    from turnformer.training import Terminated

    _, reference, _ = uninterrupted
    steps = []

    def hook(optimizer, args, kwargs):
        steps.append(1)
        if len(steps) == 5:
            signal.raise_signal(signum)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)   # pytest-xdist workers may ignore SIGINT
    before = signal.getsignal(signal.SIGTERM)
    handle = register_optimizer_step_post_hook(hook)
    try:
        with pytest.raises(Terminated if signum == signal.SIGTERM else KeyboardInterrupt):
            run(tmp_path)
    finally:
        handle.remove()
        signal.signal(signal.SIGINT, previous)
    assert signal.getsignal(signal.SIGTERM) == before   # training's handler is gone with it
    state = json.loads((tmp_path / "last" / "trainer_state.json").read_text())
    assert (state["epoch"], state["batch_in_epoch"], state["global_step"]) == (1, 3, 5)
    assert ("Terminated" in state["stop_reason"]) == (signum == signal.SIGTERM)
    model, _ = run(tmp_path, resume=True, model=TinyClassifier())
    assert torch.equal(flat_params(model), reference)


class ModeRecorder(TinyClassifier):
    """Records, at each training batch, whether every submodule is in training mode (dropout on)."""

    def __init__(self) -> None:
        super().__init__()
        self.modes: list[bool] = []

    def loss(self, batch: dict) -> torch.Tensor:
        self.modes.append(all(module.training for module in self.modules()))
        return super().loss(batch)


def test_every_batch_trains_in_training_mode_even_from_a_model_handed_over_in_eval_mode(tmp_path):
    """`from_pretrained` returns encoders in eval mode: the first epoch, and an epoch resumed in its middle, must
    still train with dropout on, like the epochs that follow an evaluation."""
    seen_in_evaluation = []

    def eval_fn(model, split):
        seen_in_evaluation.append(model.training)
        return accuracy_eval(SPLITS)(model, split)

    set_seed(0)
    model = ModeRecorder().eval()
    train(model, TRAIN, eval_fn, config(tmp_path, epochs=2, max_steps=5, save_every_steps=1), label_map=LABELS)
    resumed = ModeRecorder().eval()     # stopped in epoch 2's middle: resumed before any evaluation
    train(resumed, TRAIN, eval_fn, config(tmp_path, epochs=2, resume=True), label_map=LABELS)
    assert len(model.modes) == 13 and len(resumed.modes) == 7   # epoch 1 and 3 batches of epoch 2, then the other 7
    assert all(model.modes) and all(resumed.modes)
    assert seen_in_evaluation and not any(seen_in_evaluation)


class AutocastRecorder(TinyClassifier):
    """Records, at each training batch, the autocast type its loss ran under (None: none)."""

    def __init__(self) -> None:
        super().__init__()
        self.autocast: list[torch.dtype | None] = []

    def loss(self, batch: dict) -> torch.Tensor:
        self.autocast.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None)
        return super().loss(batch)


def test_mixed_precision_runs_the_loss_under_autocast_and_is_recorded(tmp_path, monkeypatch):
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    for setting, expected, recorded in (("no", None, "no"), ("bf16", torch.bfloat16, "bf16")):
        set_seed(0)
        model, out = AutocastRecorder(), tmp_path / str(setting)
        result = train(model, TRAIN, accuracy_eval(SPLITS), config(out, epochs=1, mixed_precision=setting),
                       label_map=LABELS, run_info={"what": "a run"})
        assert model.autocast == [expected] * len(TRAIN)
        assert json.loads((out / "run.json").read_text()) == {"what": "a run", "mixed_precision": recorded, "machine": machine()}
        assert result.history[0]["complete"] and all(p.dtype == torch.float32 for p in model.parameters())
    model = AutocastRecorder()   # back to float32 in the same process (accelerate keeps one state a process)
    train(model, TRAIN, accuracy_eval(SPLITS), config(tmp_path / "no", epochs=1, mixed_precision="no"), label_map=LABELS)
    assert model.autocast == [None] * len(TRAIN)
    with pytest.raises(ValueError, match="mixed_precision must be one of no, bf16, fp16"):
        config(tmp_path, mixed_precision="fp8")


def test_fp16_without_a_gpu_is_refused_before_the_run_starts(tmp_path, monkeypatch):
    """accelerate runs fp16 on a CPU as fp32 (no autocast), and the run's run.json said fp16."""
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    if torch.cuda.is_available():
        pytest.skip("fp16 runs on a GPU")
    for settings in ({"mixed_precision": "fp16"}, {}):
        if not settings:
            monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp16")
        with pytest.raises(ValueError, match="mixed precision 'fp16' .* needs a GPU"):
            train(AutocastRecorder(), TRAIN, accuracy_eval(SPLITS), config(tmp_path / "run", epochs=1, **settings),
                  label_map=LABELS, run_info={"what": "a run"})
        assert not (tmp_path / "run").exists()
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION")
    model = AutocastRecorder()  # the next run in the process is as it would be
    train(model, TRAIN, accuracy_eval(SPLITS), config(tmp_path / "no", epochs=1, mixed_precision="no"), label_map=LABELS)
    assert model.autocast == [None] * len(TRAIN)


def test_bf16_on_a_cpu_without_bfloat16_instructions_is_warned_of_and_still_trains(tmp_path, monkeypatch, caplog):
    """Autocast emulates bfloat16 there, many times slower than float32: the run says so, and trains as asked."""
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    if torch.cuda.is_available():
        pytest.skip("the warning is for CPU runs")
    assert isinstance(loop.cpu_has_bf16(), bool)  # this machine's answer, whichever it is
    for has_bf16 in (True, False):
        monkeypatch.setattr(loop, "cpu_has_bf16", lambda: has_bf16)
        caplog.clear()
        model, out = AutocastRecorder(), tmp_path / str(has_bf16)
        with caplog.at_level("WARNING", logger="turnformer.training"):
            train(model, TRAIN, accuracy_eval(SPLITS), config(out, epochs=1, mixed_precision="bf16"), label_map=LABELS)
        warned = [r.getMessage() for r in caplog.records if "without bfloat16 instructions" in r.getMessage()]
        assert len(warned) == (0 if has_bf16 else 1)
        assert model.autocast == [torch.bfloat16] * len(TRAIN)
    assert "train.mixed_precision = \"no\"" in warned[0]
    model = AutocastRecorder()  # the next run in the process, given no precision, trains in float32, not in the last's bf16
    train(model, TRAIN, accuracy_eval(SPLITS), config(tmp_path / "none", epochs=1), label_map=LABELS)
    assert model.autocast == [None] * len(TRAIN)


class RefusesItsFirstBatch(TinyClassifier):
    def loss(self, batch: dict) -> torch.Tensor:
        raise ValueError("a batch this model cannot read")


def test_a_run_refused_before_its_first_checkpoint_leaves_nothing_behind(tmp_path):
    """Its run.json (and the folder it made) would make --out look like a run's, to be resumed or refused as taken."""
    for out in (tmp_path / "new" / "run", tmp_path / "there"):
        if out.name == "there":
            out.mkdir()
            (out / "notes.txt").write_text("mine")
        set_seed(0)
        with pytest.raises(ValueError, match="a batch this model cannot read"):
            train(RefusesItsFirstBatch(), TRAIN, accuracy_eval(SPLITS), config(out, epochs=1), label_map=LABELS,
                  run_info={"what": "a run"})
        assert not (out / "run.json").exists()
        assert (out.is_dir() and [p.name for p in out.iterdir()] == ["notes.txt"]) if out.name == "there" else \
            not (tmp_path / "new").exists()


def test_resume_of_a_finished_run_trains_no_more(tmp_path, uninterrupted):
    out, reference, expected = uninterrupted
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    model, result = run(copy, resume=True, model=TinyClassifier())
    assert torch.equal(flat_params(model), reference)
    assert result.steps == expected.steps and result.history == expected.history


def test_checkpoints_are_complete_and_reload(tmp_path):
    model, result = run(tmp_path, epochs=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best", "last"]   # no temporary leftovers
    for name in ("best", "last"):
        assert sorted(p.name for p in (tmp_path / name).iterdir()) == sorted([*CHECKPOINT_FILES, "checksums.json"])
    mask = os.umask(0)
    os.umask(mask)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "last").iterdir()}  # safetensors wrote 0600
    assert set(modes.values()) == {0o666 & ~mask}, modes
    fresh = TinyClassifier()
    loaded = load_checkpoint(tmp_path / "last", fresh)
    assert torch.equal(flat_params(fresh), flat_params(model))
    assert loaded["config"]["model"] == model.config_dict()
    assert loaded["config"]["train"]["epochs"] == 2 and loaded["label_map"] == LABELS
    assert loaded["state"]["global_step"] == result.steps and loaded["state"]["epoch"] == 2
    assert read_checkpoint_config(tmp_path / "best")["model"] == model.config_dict()
    with pytest.raises(CheckpointError, match="best/ or last/"):
        load_checkpoint(tmp_path, fresh)


def test_tied_weights_are_stored_once_and_restored(tmp_path):
    model, _ = run(tmp_path, epochs=1, model=new_model(tie=True))
    path = tmp_path / "last" / "model.safetensors"
    with safe_open(str(path), framework="pt") as f:
        keys = set(f.keys())
    assert "out.weight" in keys and "out_alias.weight" not in keys
    fresh = TinyClassifier(tie=True)
    load_checkpoint(tmp_path / "last", fresh)
    assert torch.equal(flat_params(fresh), flat_params(model)) and fresh.out_alias is fresh.out


@pytest.fixture()
def checkpoint(tmp_path, uninterrupted):
    out = tmp_path / "run"
    shutil.copytree(uninterrupted[0], out)
    return out


def test_truncated_weights_raise_an_error_naming_the_file(checkpoint):
    path = checkpoint / "last" / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match=r"last/model\.safetensors.*truncated or corrupt"):
        load_checkpoint(checkpoint / "last", TinyClassifier())
    with pytest.raises(CheckpointError, match=r"model\.safetensors"):
        run(checkpoint, resume=True)


@pytest.mark.parametrize("file", ["trainer_state.json", "config.json", "label_map.json"])
def test_bad_json_raises_an_error_naming_the_file(checkpoint, file):
    path = checkpoint / "last" / file
    path.write_text(path.read_text()[:20])
    with pytest.raises(CheckpointError, match=rf"last/{file}: not valid JSON"):
        run(checkpoint, resume=True)


def test_corrupt_or_missing_optimizer_state(checkpoint):
    path = checkpoint / "last" / "optimizer.pt"
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(CheckpointError, match=r"last/optimizer\.pt: cannot load"):
        run(checkpoint, resume=True)
    path.unlink()
    with pytest.raises(CheckpointError, match=r"incomplete: missing optimizer\.pt"):
        run(checkpoint, resume=True)


def test_resume_with_another_model_config_is_refused(checkpoint):
    with pytest.raises(CheckpointError, match=r"cannot resume.*hidden: 16 in the checkpoint, 32 here"):
        run(checkpoint, resume=True, model=TinyClassifier(hidden=32))
    with pytest.raises(CheckpointError, match=r"hidden: 16 in the checkpoint, 32 here"):
        load_checkpoint(checkpoint / "best", TinyClassifier(hidden=32))


@dataclass
class _TinySettings:
    hidden: int = 16
    new_setting: int = 4   # a setting added after the checkpoint was written


def _tiny_with_defaults(new_setting: int = 4) -> TinyClassifier:
    """A TinyClassifier whose config is a dataclass with one setting the checkpoints of `uninterrupted` lack."""
    model = TinyClassifier()
    model.config = _TinySettings(new_setting=new_setting)
    model.hparams["new_setting"] = new_setting
    return model


def test_a_checkpoint_older_than_a_setting_resumes_only_at_its_default(checkpoint):
    with pytest.raises(CheckpointError, match=r"new_setting: '<absent>' in the checkpoint, 5 here"):
        run(checkpoint, resume=True, model=_tiny_with_defaults(new_setting=5), epochs=4)
    set_seed(0)
    _, result = run(checkpoint, resume=True, model=_tiny_with_defaults(), epochs=4)
    assert [h["epoch"] for h in result.history] == [1, 2, 3, 4]


def test_resume_in_mid_epoch_needs_the_same_batches(tmp_path):
    run(tmp_path, max_steps=1)
    with pytest.raises(CheckpointError, match=r"middle of epoch 1: the number of training batches changed \(10 -> 9\)"):
        train(TinyClassifier(), TRAIN[:9], accuracy_eval(SPLITS), config(tmp_path, resume=True), label_map=LABELS)


def test_resume_in_mid_epoch_needs_batches_of_the_same_examples(tmp_path):
    """Batches that name their examples (``ids``, as ERC's do): as many batches, grouped otherwise, are refused in the
    middle of an epoch, and the same ones go on; at an epoch's end another grouping is no harm."""
    def named(batches, shift=0):
        return [{**b, "ids": [f"example-{(8 * i + j + shift) % 80}" for j in range(len(b["y"]))]} for i, b in enumerate(batches)]

    train(new_model(), named(TRAIN), accuracy_eval(SPLITS), config(tmp_path, max_steps=1), label_map=LABELS)
    with pytest.raises(CheckpointError, match=r"middle of epoch 1: the training batches hold other examples"):
        train(new_model(), named(TRAIN, shift=1), accuracy_eval(SPLITS), config(tmp_path, resume=True), label_map=LABELS)
    result = train(new_model(), named(TRAIN), accuracy_eval(SPLITS), config(tmp_path, resume=True), label_map=LABELS)
    assert [h["epoch"] for h in result.history] == [1, 2, 3]
    at_epoch_end = tmp_path / "epoch-end"  # 10 batches in updates of 3, 3, 3, 1: step 4 ends epoch 1
    train(new_model(), named(TRAIN), accuracy_eval(SPLITS), config(at_epoch_end, max_steps=4), label_map=LABELS)
    result = train(new_model(), named(TRAIN, shift=1), accuracy_eval(SPLITS), config(at_epoch_end, resume=True), label_map=LABELS)
    assert [h["epoch"] for h in result.history] == [1, 2, 3]
    # ids that do not name every example (None) give no digest: nothing to compare, nothing refused
    unnamed = [{**b, "ids": [None] * len(b["y"])} for b in TRAIN]
    run_dir = tmp_path / "unnamed"
    train(new_model(), unnamed, accuracy_eval(SPLITS), config(run_dir, max_steps=1), label_map=LABELS)
    result = train(new_model(), named(TRAIN, shift=1), accuracy_eval(SPLITS), config(run_dir, resume=True), label_map=LABELS)
    assert [h["epoch"] for h in result.history] == [1, 2, 3]


def test_load_checkpoint_checks_keys_strictly(checkpoint):
    path = checkpoint / "best" / "model.safetensors"
    tensors = load_file(str(path))
    del tensors["out.bias"]
    tensors["extra.weight"] = torch.zeros(2)
    save_file(tensors, str(path))
    (path.parent / "checksums.json").unlink()  # edited on purpose: its checksums go with the edit
    with pytest.raises(CheckpointError, match=r"missing keys \(1\): out\.bias; unexpected keys \(1\): extra\.weight"):
        load_checkpoint(checkpoint / "best", TinyClassifier())


def test_atomic_directory_keeps_the_old_checkpoint_on_failure(tmp_path):
    with atomic_directory(tmp_path, "last") as tmp:
        (tmp / "a").write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_directory(tmp_path, "last") as tmp:
            (tmp / "a").write_text("half")
            raise RuntimeError("crash while writing")
    assert (tmp_path / "last" / "a").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last"]
    # a crash between the two renames leaves the old checkpoint aside; the next write puts it back first
    os.replace(tmp_path / "last", tmp_path / ".last.old")
    with atomic_directory(tmp_path, "best") as tmp:
        (tmp / "a").write_text("best")
    with atomic_directory(tmp_path, "last") as tmp:
        assert (tmp_path / "last" / "a").read_text() == "old"
        (tmp / "a").write_text("new")
    assert (tmp_path / "last" / "a").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best", "last"]


def test_optimizer_groups_and_schedules():
    model = TinyClassifier()
    optimizer = build_optimizer(model, lr=1.0, weight_decay=0.1)
    decay, no_decay = optimizer.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert {id(p) for p in decay["params"]} == {id(model.inp.weight), id(model.out.weight)}
    assert {id(p) for p in no_decay["params"]} == {id(model.inp.bias), id(model.norm.weight), id(model.norm.bias),
                                                  id(model.out.bias)}
    linear = build_scheduler(optimizer, "linear", warmup_steps=2, total_steps=6)
    factors = [linear.lr_lambdas[0](k) for k in range(6)]
    assert factors == pytest.approx([0.5, 1.0, 1.0, 0.75, 0.5, 0.25])
    constant = build_scheduler(optimizer, "constant", warmup_steps=0, total_steps=6)
    assert [constant.lr_lambdas[0](k) for k in range(3)] == [1.0, 1.0, 1.0]


def test_head_lr_gives_the_new_layers_their_own_rate():
    model = TinyClassifier()
    model.pretrained_parameters = lambda: model.inp.parameters()  # as if `inp` came pretrained
    optimizer = build_optimizer(model, lr=1e-5, weight_decay=0.1, head_lr=1e-3)
    rates = {id(p): (g["lr"], g["weight_decay"]) for g in optimizer.param_groups for p in g["params"]}
    assert rates[id(model.inp.weight)] == (1e-5, 0.1) and rates[id(model.inp.bias)] == (1e-5, 0.0)
    assert rates[id(model.out.weight)] == (1e-3, 0.1) and rates[id(model.norm.bias)] == (1e-3, 0.0)
    assert len(rates) == len(list(model.parameters()))
    # the schedule scales every group from its own rate
    scheduler = build_scheduler(optimizer, "linear", warmup_steps=0, total_steps=4)
    optimizer.step(), scheduler.step()
    assert sorted({g["lr"] for g in optimizer.param_groups}) == pytest.approx([0.75e-5, 0.75e-3])
    with pytest.raises(ValueError, match="does not say which parameters are pretrained"):
        build_optimizer(TinyClassifier(), lr=1e-5, weight_decay=0.0, head_lr=1e-3)


def test_every_task_reads_the_same_train_settings(tmp_path):
    from turnformer.recipes import recipe_train_config

    defaults = {"epochs": 4, "lr": 2e-5, "save_every_steps": 50}
    plain = recipe_train_config({"lr": 5e-5}, defaults, seed=3, out_dir=tmp_path)
    assert (plain.epochs, plain.lr, plain.seed, plain.scheduler, plain.warmup_steps, plain.head_lr) == (4, 5e-5, 3, "constant", 0, None)
    assert (plain.weight_decay, plain.grad_clip, plain.save_every_steps) == (0.0, 5.0, 50)
    settings = {"epochs": 2, "lr": 1e-4, "scheduler": "linear", "warmup_steps": 10, "head_lr": 1e-3, "batch_size": 4,
                "official_lr": 1e-5}  # batch sizes and the paper's rate are read elsewhere, or not at all
    tuned = recipe_train_config(settings, defaults, seed=1, out_dir=tmp_path, resume=True, time_budget_s=60.0)
    assert (tuned.epochs, tuned.scheduler, tuned.warmup_steps, tuned.head_lr, tuned.resume, tuned.time_budget_s) == (
        2, "linear", 10, 1e-3, True, 60.0)
    assert plain.mixed_precision is None   # left to accelerate
    assert recipe_train_config({"mixed_precision": "bf16"}, defaults, seed=1, out_dir=tmp_path).mixed_precision == "bf16"


def test_dialogxl_and_the_baselines_name_their_pretrained_parameters(tiny_backbone_dir):
    from turnformer.tasks.erc import build_erc_model

    settings = {"dialogxl": {"heads": [1, 1, 1, 1]}, "concat-context": {"max_length": 64}, "segment-recurrence": {"segment_len": 32}}
    for model_id, model_config in settings.items():  # sizes within the tiny backbone's positions
        model, _ = build_erc_model(model_id, model_config, ["a", "b"], str(tiny_backbone_dir))
        optimizer = build_optimizer(model, lr=1e-5, weight_decay=0.0, head_lr=1e-3)
        rates = {id(p): g["lr"] for g in optimizer.param_groups for p in g["params"]}
        assert {rates[id(p)] for p in model.encoder.parameters()} == {1e-5}
        assert {rates[id(p)] for p in model.classifier.parameters()} == {1e-3}

    from turnformer.models.lc_attention import build_lc_model

    act_model, _ = build_lc_model("lc-attention", {"hidden": 16, "heads": 2}, ["a", "b"], str(tiny_backbone_dir))
    optimizer = build_optimizer(act_model, lr=1e-5, weight_decay=0.0, head_lr=1e-3)
    rates = {id(p): g["lr"] for g in optimizer.param_groups for p in g["params"]}
    assert rates[id(act_model.embed.weight)] == 1e-5   # the embeddings taken from the backbone
    assert {rates[id(p)] for p in [*act_model.word_lstm.parameters(), *act_model.classifier.parameters()]} == {1e-3}


def test_epoch_order_depends_on_seed_and_epoch_only():
    first = epoch_order(10, 7, 0)
    random.random(), torch.rand(3), np.random.rand(2)  # the global generators move: the order does not
    assert epoch_order(10, 7, 0) == first
    assert sorted(epoch_order(10, 7, 1)) == list(range(10))
    assert epoch_order(10, 7, 0) != epoch_order(10, 7, 1) != epoch_order(10, 8, 1)


def test_invalid_config_is_refused(tmp_path):
    with pytest.raises(ValueError, match="scheduler must be.*gradient_accumulation_steps must be >= 1"):
        TrainConfig(epochs=1, lr=0.1, seed=0, out_dir=tmp_path, gradient_accumulation_steps=0, scheduler="cosine")


def test_eval_fn_must_return_a_primary_metric(tmp_path):
    with pytest.raises(ValueError, match="'primary'"):
        train(new_model(), TRAIN, lambda model, split: {"accuracy": 1.0}, config(tmp_path, epochs=1))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_stay_in_sync_and_resume_exactly(tmp_path):
    """`accelerate launch` with 2 CPU processes (gloo): each trains on its own shard, and both end with
    the same parameters; a run stopped by max_steps and resumed ends where the uninterrupted one did."""
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_free_port()),
        str(WORKER), str(tmp_path),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    output = (done.stdout + done.stderr)[-4000:]
    if done.returncode != 0:
        if not list(tmp_path.glob("ready_rank*")):   # the process group never came up: the environment
            print(output)
            pytest.skip(f"could not start 2 processes with accelerate launch (exit {done.returncode}): {output[-500:]}")
        pytest.fail(f"the two-process run failed (exit {done.returncode}):\n{output}")
    ranks = [torch.load(tmp_path / f"params_rank{r}.pt") for r in (0, 1)]
    assert [r["world"] for r in ranks] == [2, 2]
    assert torch.equal(ranks[0]["a"], ranks[1]["a"])             # in sync although they saw different batches
    assert not torch.allclose(ranks[0]["a"], ranks[0]["initial"])   # and they did train
    assert all(r["steps_a"] == 6 and r["stopped"] for r in ranks)   # 5 batches each per epoch, updates of 2: 3 an epoch
    for r in ranks:
        assert torch.equal(r["b"], r["a"])                          # stopped + resumed == uninterrupted
        assert r["losses_b"] == pytest.approx(r["losses_a"])
    assert ranks[0]["losses_a"] == ranks[1]["losses_a"]             # the epoch loss covers both processes


def test_progress_bars_show_on_a_terminal_and_stay_out_of_pipes_and_logs():
    """Evaluation and prediction loops show a bar on a terminal's stderr; output captured in a file or a pipe (a log,
    `predict --out -`) gets none of it."""
    import fcntl
    import pty
    import struct
    import termios

    code = "from turnformer.training import progress\nassert list(progress(range(3), 'predict')) == [0, 1, 2]\n"

    def on_terminal(env: dict) -> tuple[int, bytes]:
        primary, secondary = pty.openpty()
        fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
        process = subprocess.Popen([sys.executable, "-c", code], stderr=secondary, stdout=secondary, env=env)
        os.close(secondary)
        shown = b""
        while True:
            try:
                chunk = os.read(primary, 4096)
            except OSError:  # the other end closed
                break
            if not chunk:
                break
            shown += chunk
        return process.wait(), shown

    environment = {k: v for k, v in os.environ.items() if k != "LOCAL_RANK"}
    code_run, shown = on_terminal(environment)
    assert code_run == 0 and b"predict:" in shown and b"/3 [" in shown
    piped = subprocess.run([sys.executable, "-c", code], capture_output=True)
    assert piped.returncode == 0 and piped.stderr == b"" and piped.stdout == b""
    # the second process of a multi-process run (accelerate launch) stays quiet, so that the bars do not interleave
    code_run, shown = on_terminal({**environment, "LOCAL_RANK": "1"})
    assert code_run == 0 and b"predict:" not in shown


def test_damage_inside_the_weights_is_detected(tmp_path):
    """Zeros written over the middle of model.safetensors still parse; the checksum written with the checkpoint
    catches them, on loading and on resuming."""
    out = tmp_path / "run"
    run(out, epochs=1)
    assert json.loads((out / "best" / "checksums.json").read_text()).keys() == set(CHECKPOINT_FILES)
    load_checkpoint(out / "best", new_model())  # intact: loads
    weights = out / "last" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    middle = len(data) // 2
    data[middle: middle + 64] = bytes(64) if any(data[middle: middle + 64]) else b"\x01" * 64
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"last/model\.safetensors: damaged"):
        load_checkpoint(out / "last", new_model())
    with pytest.raises(CheckpointError, match=r"last/model\.safetensors: damaged"):
        run(out, resume=True, epochs=2)


def test_a_fresh_run_never_mixes_with_the_run_it_replaces(tmp_path):
    from turnformer.training.runs import replaced_run_folder, set_aside_earlier_run

    out = tmp_path / "run"
    run(out, epochs=1)
    (out / "result.json").write_text("{}")
    (out / "notes.txt").write_text("mine")  # not a run's: left alone
    first_best = (out / "best" / "model.safetensors").read_bytes()
    aside = set_aside_earlier_run(out)  # a new run starts: the old one moves out whole
    assert aside == replaced_run_folder(out) and sorted(p.name for p in aside.iterdir()) == ["best", "last", "result.json"]
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    (out / "run.json").write_text("{}")  # the new run is interrupted before its first checkpoint, then started again
    assert set_aside_earlier_run(out) == aside and not (out / "run.json").exists()
    assert (aside / "best" / "model.safetensors").read_bytes() == first_best  # nothing of the old run lost
    run(out, epochs=1, resume=True)  # resumed with no checkpoint yet, it still replaces: at its first checkpoint, the old run goes
    assert not aside.exists() and (out / "best").is_dir() and not (out / "result.json").exists()


def test_a_folder_in_the_place_of_the_set_aside_run_that_is_not_one_is_never_deleted(tmp_path):
    """A fresh run sets the run it replaces aside in OUT.replaced; a folder of that name holding anything but a run's
    entries is someone else's: the new run is refused before it moves or deletes anything."""
    from turnformer.training.runs import replaced_run_folder

    out = tmp_path / "run"
    run(out, epochs=1)
    aside = replaced_run_folder(out)
    aside.mkdir()
    (aside / "notes.txt").write_text("mine")
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(CheckpointError, match=r"run\.replaced: in the way of the run that .*run holds"):
        run(out, epochs=1)
    assert (aside / "notes.txt").read_text() == "mine" and sorted(p.name for p in out.iterdir()) == before


def test_a_resumed_run_keeps_its_optimizers_rates_and_records_them(tmp_path, caplog):
    """The optimizer's state holds the learning rate and weight decay: resumed with others, the run trains on with the
    checkpoint's, says so, and records those it used."""
    out = tmp_path / "run"
    run(out, epochs=1, scheduler="constant", warmup_steps=0)
    with caplog.at_level("WARNING", logger="turnformer"):
        run(out, resume=True, epochs=2, lr=0.5, weight_decay=0.3, scheduler="constant", warmup_steps=0)
    assert "lr: 0.5 given, 0.05 kept; weight_decay: 0.3 given, 0.01 kept" in caplog.text
    saved = json.loads((out / "last" / "config.json").read_text())["train"]
    assert (saved["lr"], saved["weight_decay"]) == (0.05, 0.01)


def test_a_warm_up_longer_than_the_run_is_warned(tmp_path, caplog):
    """A warm-up of more updates than the run has keeps the learning rate below lr all along: said, with how far it
    gets."""
    with caplog.at_level("WARNING", logger="turnformer"):
        run(tmp_path / "run", epochs=1, warmup_steps=1000)
    assert "train.warmup_steps = 1000 is more than the run's" in caplog.text and "never reaches it" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="turnformer"):
        run(tmp_path / "other", epochs=1, warmup_steps=1)
    assert "warmup_steps" not in caplog.text


def test_a_linear_schedule_stays_laid_out_as_the_run_began(tmp_path):
    """Resumed with more epochs, the linear schedule is the checkpoint's: it has reached 0, so the epoch past it
    changes no weight."""
    out = tmp_path / "run"
    model, _ = run(out, epochs=2, scheduler="linear")
    ended = flat_params(model)
    longer, _ = run(out, model=new_model(), resume=True, epochs=3, scheduler="linear")
    assert torch.equal(flat_params(longer), ended)


def test_epoch_lines_name_their_metric_on_one_scale():
    from turnformer.training import metric_text

    assert metric_text({"primary": 53.77, "weighted_f1": 53.77, "accuracy": 60.1}) == "weighted_f1 53.77%"
    assert metric_text({"primary": 0.6132, "R4@1": 0.6132, "MRR": 0.77, "unit": "fraction"}) == "R4@1 61.32%"
    assert metric_text({"primary": -90.85, "perplexity": 90.85}) == "perplexity 90.85"
    from turnformer.training import reported_score

    assert reported_score({"primary": -90.85, "perplexity": 90.85}) == ("perplexity", 90.85)
    assert reported_score({"primary": 0.6132, "R4@1": 0.6132, "unit": "fraction"}) == ("R4@1", pytest.approx(61.32))
    # a count equal to the score is not named as the metric (a model that ranks nothing right, no item skipped)
    assert metric_text({"primary": 0.0, "skipped": 0, "groups": 4, "R4@1": 0.0, "unit": "fraction"}) == "R4@1 0.00%"


def test_progress_counts_units_and_logs_where_no_bar_is_drawn(caplog):
    import logging

    from turnformer.training import progress

    with caplog.at_level(logging.INFO, logger="turnformer.training"):
        assert list(progress(["a", "b"], "predict", unit="utterance", sizes=[3, 400], every_s=0.0)) == ["a", "b"]
    assert "predict: 3/403 utterances" in caplog.text and "predict: 403/403 utterances" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="turnformer.training"):
        assert list(progress(["a"], "perplexity", every_s=0.0)) == ["a"]
    assert "perplexity: 1/1 batches" in caplog.text


def test_a_changed_length_of_a_linear_schedule_is_warned_about(tmp_path, uninterrupted, caplog):
    """A linear schedule comes from the checkpoint, laid out for the run as it began: resumed with more epochs or
    other batches an epoch, a warning says so; a constant rate takes more epochs; a finished run says it is
    finished."""
    linear = tmp_path / "linear"
    run(linear, scheduler="linear", epochs=2)
    for overrides, data, what in (({"epochs": 3}, TRAIN, "train.epochs changed (2 -> 3)"),
                                  ({}, TRAIN[:9], "number of training batches an epoch changed (10 -> 9)")):
        copy = tmp_path / f"linear-{len(data)}-{overrides.get('epochs', 2)}"
        shutil.copytree(linear, copy)
        caplog.clear()
        with caplog.at_level("WARNING", logger="turnformer"):
            train(TinyClassifier(), data, accuracy_eval(SPLITS), config(copy, resume=True, scheduler="linear", **{"epochs": 2, **overrides}),
                  label_map=LABELS)
        assert f"resuming with the {what}: the linear learning-rate schedule comes from the checkpoint" in caplog.text
    constant = tmp_path / "constant"  # a constant rate: one more epoch trains on, without a warning
    run(constant, scheduler="constant", epochs=2)
    caplog.clear()
    with caplog.at_level("WARNING", logger="turnformer"):
        _, result = run(constant, resume=True, model=TinyClassifier(), scheduler="constant", epochs=3)
    assert [h["epoch"] for h in result.history] == [1, 2, 3] and "schedule" not in caplog.text
    finished = tmp_path / "finished"
    shutil.copytree(uninterrupted[0], finished)
    with caplog.at_level("INFO", logger="turnformer"):
        run(finished, resume=True, model=TinyClassifier())
    assert "the run has finished its 3 epochs" in caplog.text and "nothing left to train" in caplog.text


def test_a_second_training_into_a_folder_in_use_is_refused_before_it_touches_it(tmp_path, uninterrupted):
    from turnformer.training.runs import only_run_in

    out = tmp_path / "run"
    shutil.copytree(uninterrupted[0], out)
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    with only_run_in(out):  # a training writing there now
        with pytest.raises(CheckpointError, match="another training is writing into this folder now"):
            run(out)
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before  # nothing set aside, nothing written
    run(out, epochs=1)  # once it has ended, the folder is free


def test_a_checkpoint_that_cannot_be_written_is_one_error_naming_it(tmp_path, monkeypatch):
    """A full disk ended a run in torch.save's traceback ("unexpected pos ..."): now one error naming the checkpoint
    and the disk's free space; the previous checkpoint stays."""
    import turnformer.training.checkpoint as checkpoint_module

    out = tmp_path / "run"
    run(out, epochs=1)

    def full_disk(*args, **kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 3916928 vs 3916816\nmore")

    monkeypatch.setattr(checkpoint_module.torch, "save", full_disk)
    with pytest.raises(CheckpointError, match=r"run/last: the checkpoint could not be written \(\[enforce fail.*vs 3916816; "
                                              r"[\d,]+ MiB free on its disk\); the previous last/ is kept"):
        run(out, resume=True, epochs=2)
    assert json.loads((out / "last" / "trainer_state.json").read_text())["epoch"] == 1  # as it was

    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint_module.torch, "save", no_space)
    with pytest.raises(CheckpointError, match=r"fresh/(best|last): the checkpoint could not be written \(No space left on "
                                              r"device; .*\); no (best|last)/ was written"):
        run(tmp_path / "fresh", epochs=1)
    assert not (tmp_path / "fresh").exists()  # a run refused before its first checkpoint leaves nothing behind


@pytest.mark.parametrize("file", ["optimizer.pt", "rng.pt"])
def test_a_damaged_torch_file_is_said_in_one_line_without_torchs_advice(checkpoint, file):
    """torch's text for a file it cannot read advises loading it with weights_only=False: not for a damaged file."""
    path = checkpoint / "last" / file
    path.write_bytes(os.urandom(path.stat().st_size))
    with pytest.raises(CheckpointError) as caught:
        run(checkpoint, resume=True)
    assert f"last/{file}: cannot load (truncated or corrupt; " in str(caught.value)
    assert "weights_only" not in str(caught.value) and len(str(caught.value).splitlines()) == 1


def test_resume_of_a_run_without_last_but_with_best_is_refused(checkpoint):
    """--resume over a run whose last/ is gone trained afresh beside its best/: one folder, two runs."""
    shutil.rmtree(checkpoint / "last")
    best = (checkpoint / "best" / "model.safetensors").read_bytes()
    with pytest.raises(CheckpointError, match=r"cannot resume .*run: it holds a run's best/ but no last/ to continue"):
        run(checkpoint, resume=True)
    assert (checkpoint / "best" / "model.safetensors").read_bytes() == best and not (checkpoint / "last").exists()


def test_run_json_records_the_settings_a_resumed_run_kept(tmp_path):
    """Resumed with another rate, or fewer epochs than it has trained, the run trains on with the checkpoint's: run.json
    said the ones given."""
    out = tmp_path / "run"
    info = {"recipe": {"train": {"lr": 0.05, "epochs": 2}}}
    train(new_model(), TRAIN, accuracy_eval(SPLITS), config(out, epochs=2), label_map=LABELS, run_info=info)
    given = {"recipe": {"train": {"lr": 0.5, "epochs": 1}}}
    result = train(new_model(), TRAIN, accuracy_eval(SPLITS), config(out, epochs=1, lr=0.5, resume=True), label_map=LABELS,
                   run_info=given)
    assert json.loads((out / "run.json").read_text())["recipe"]["train"] == {"lr": 0.05, "epochs": 2}
    assert len(result.history) == 2


def test_a_run_resumed_with_changed_settings_says_so_in_run_json(tmp_path):
    """Resumed with another gradient clip, the run was recorded as one training of the new settings."""
    out = tmp_path / "run"
    info = {"recipe": {"train": {"grad_clip": 1.0}}}
    train(new_model(), TRAIN, accuracy_eval(SPLITS), config(out, epochs=1, grad_clip=1.0), label_map=LABELS, run_info=info)
    assert "resumed_with_changes" not in json.loads((out / "run.json").read_text())
    train(new_model(), TRAIN, accuracy_eval(SPLITS), config(out, epochs=2, grad_clip=0.5, resume=True), label_map=LABELS,
          run_info={"recipe": {"train": {"grad_clip": 0.5}}})
    assert json.loads((out / "run.json").read_text())["resumed_with_changes"] == ["grad_clip: 1.0 -> 0.5"]
    train(new_model(), TRAIN, accuracy_eval(SPLITS), config(out, epochs=3, grad_clip=0.5, resume=True), label_map=LABELS,
          run_info={"recipe": {"train": {"grad_clip": 0.5}}})  # a later resumption keeps what the earlier one changed
    assert json.loads((out / "run.json").read_text())["resumed_with_changes"] == ["grad_clip: 1.0 -> 0.5"]
