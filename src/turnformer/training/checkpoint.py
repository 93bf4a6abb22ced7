"""The checkpoint format: one directory (`out_dir/last`, `out_dir/best`) with the weights, the model's and the run's
configs, the label map, the trainer state, the optimizer and schedule states, the random state and the checksums of
them all; writing one, reading one back (every damage named), and refusing a model it does not fit."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Sequence

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from turnformer.data._io import usual_permissions
from turnformer.errors import CheckpointError
from turnformer.training.config import TrainConfig
from turnformer.training.files import fsync, json_normalise, read_json, write_json
from turnformer.training.randomness import get_rng_state
from turnformer.training.state import TrainState

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
_ALIASES_KEY = "turnformer_aliases"


def read_checkpoint_config(path: str | Path) -> dict[str, Any]:
    """The `config.json` of a checkpoint directory (`model_class`, `model` = config_dict(), `train`),
    to rebuild the model before `load_checkpoint`."""
    path = _checkpoint_dir(Path(path))
    return read_json(path / CONFIG_FILE)


def load_checkpoint(path: str | Path, model: nn.Module) -> dict[str, Any]:
    """Load the weights of checkpoint directory `path` (e.g. `out_dir/best`) into `model`.

    The state-dict keys and shapes must match exactly and, when the model has `config_dict()`, so
    must its config: otherwise CheckpointError says what differs. A missing, truncated or corrupt
    file raises CheckpointError naming it. Returns {"config": config.json, "label_map": ... (as JSON:
    its keys are strings), "state": trainer_state.json as a dict}.
    """
    path = _checkpoint_dir(Path(path))
    checkpoint = read_checkpoint(path, full=False)
    problems = model_mismatch(checkpoint["config"], model, config_of(model))
    if problems:
        raise CheckpointError(f"{path} does not fit the model: {problems}")
    load_weights(model, checkpoint["tensors"], path / MODEL_FILE)
    return {"config": checkpoint["config"], "label_map": checkpoint["label_map"],
            "state": dataclasses.asdict(checkpoint["state"])}


def write_checkpoint(directory: Path, *, model: nn.Module, model_config: Any, train_config: TrainConfig, label_map: Any,
                     state: TrainState, optimizer: torch.optim.Optimizer, scheduler: Any,
                     rng: dict[str, Any] | None = None) -> None:
    """Write every file of a checkpoint into the empty `directory`, with the random state `rng` (default: the
    current one); the checksums come last, from the files as written."""
    config = {"model_class": _class_name(model), "model": model_config, "train": train_config.to_dict()}
    _save_weights(model.state_dict(), directory / MODEL_FILE)
    write_json(directory / CONFIG_FILE, config)
    write_json(directory / LABEL_MAP_FILE, label_map)
    write_json(directory / STATE_FILE, dataclasses.asdict(state))
    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, directory / OPTIMIZER_FILE)
    torch.save(rng if rng is not None else get_rng_state(), directory / RNG_FILE)
    for file in (OPTIMIZER_FILE, RNG_FILE, MODEL_FILE):
        fsync(directory / file)
    write_json(directory / CHECKSUM_FILE, {file: _sha256(directory / file) for file in CHECKPOINT_FILES})


def link_checkpoint(source: Path, directory: Path) -> None:
    """Fill the empty `directory` with the files of checkpoint `source` (`last/` after an epoch that made `best/`)."""
    for file in CHECKPOINT_FILES + ((CHECKSUM_FILE,) if (source / CHECKSUM_FILE).is_file() else ()):
        _link_or_copy(source / file, directory / file)


def read_checkpoint(path: Path, *, full: bool) -> dict[str, Any]:
    """Read and validate a checkpoint directory; `full` also reads the optimizer and RNG states."""
    needed = CHECKPOINT_FILES if full else (MODEL_FILE, CONFIG_FILE, LABEL_MAP_FILE, STATE_FILE)
    missing = [f for f in needed if not (path / f).is_file()]
    if missing:
        raise CheckpointError(f"checkpoint {path} is incomplete: missing {', '.join(missing)}")
    config = read_json(path / CONFIG_FILE)
    if not isinstance(config, dict) or "model" not in config:
        raise CheckpointError(f"{path / CONFIG_FILE}: not a checkpoint config (no 'model' entry)")
    out = {
        "config": config,
        "label_map": read_json(path / LABEL_MAP_FILE),
        "state": TrainState.from_dict(read_json(path / STATE_FILE), path / STATE_FILE),
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


def config_of(model: nn.Module) -> Any:
    """The model's `config_dict()` as plain JSON (None for a model without one)."""
    config_dict = getattr(model, "config_dict", None)
    return json_normalise(config_dict(), f"{type(model).__name__}.config_dict()") if callable(config_dict) else None


def model_mismatch(saved_config: dict[str, Any], model: nn.Module, config: Any) -> str | None:
    """What differs between the model a checkpoint was written from and `model` (`config`: its `config_of`); None
    when it fits."""
    problems = []
    if saved_config.get("model_class") not in (None, _class_name(model)):
        problems.append(f"model class {saved_config['model_class']} in the checkpoint, {_class_name(model)} here")
    saved = saved_config.get("model")
    if isinstance(saved, dict) and isinstance(config, dict):
        # A setting added to the model after the checkpoint was written, at its default here, is the behaviour the
        # checkpoint was trained with: not a mismatch.
        saved = _with_added_settings(saved, config, _config_defaults(model))
        # how the model computes, not what (e.g. DialogXL's chunk_tokens): the checkpoint's value does not bind
        saved = {**saved, **{k: v for k, v in config.items() if k in compute_only_settings(model)}}
    if saved != config:
        if isinstance(saved, dict) and isinstance(config, dict):
            diffs = _differences(saved, config)
            problems.append("the model config differs (" + "; ".join(diffs[:10]) + (" ..." if len(diffs) > 10 else "") + ")")
        else:
            problems.append(f"the model config differs ({saved!r} in the checkpoint, {config!r} here)")
    return "; ".join(problems) or None


def load_weights(model: nn.Module, tensors: dict[str, torch.Tensor], source: Path) -> None:
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


def _checkpoint_dir(path: Path) -> Path:
    if not path.is_dir():
        raise CheckpointError(f"checkpoint directory {path} does not exist")
    if not (path / MODEL_FILE).exists() and ((path / "best").is_dir() or (path / "last").is_dir()):
        raise CheckpointError(f"{path} is a training output directory; pass its best/ or last/ checkpoint")
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _verify_checksums(path: Path, files: Sequence[str]) -> None:
    """Compare `files` with the checkpoint's checksums (none written: a checkpoint from an earlier version)."""
    if not (path / CHECKSUM_FILE).is_file():
        return
    recorded = read_json(path / CHECKSUM_FILE)
    if not isinstance(recorded, dict):
        raise CheckpointError(f"{path / CHECKSUM_FILE}: corrupt checksum list")
    for file in files:
        if file in recorded and _sha256(path / file) != recorded[file]:
            raise CheckpointError(f"{path / file}: damaged: its contents differ from the checksum written with the checkpoint "
                                  f"({CHECKSUM_FILE}); restore it, or use another checkpoint (last/ or best/); a file changed on purpose: "
                                  f"delete {CHECKSUM_FILE}")


def _save_weights(state_dict: dict[str, torch.Tensor], path: Path) -> None:
    """safetensors `save_file` of a state dict. Tensors that are the same view of one storage (tied
    weights) are stored once, the other names recorded as aliases in the file's metadata; partly
    overlapping views are copied."""
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
    usual_permissions(path)  # safetensors writes 0600: a shared run's weights could not be read or served by others


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
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


def _torch_load(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # truncated zip, bad pickle, ...: torch's text advises unsafe loading; not repeated
        raise CheckpointError(f"{path}: cannot load (truncated or corrupt; {type(error).__name__})") from error


def _link_or_copy(source: Path, target: Path) -> None:
    """Checkpoint files are never modified once written, so best/ and last/ may share them."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _differences(saved: dict[str, Any], config: dict[str, Any], prefix: str = "") -> list[str]:
    """Every setting that differs, nested ones named with their path (``generator.turn_count``)."""
    diffs = []
    for k in sorted(set(saved) | set(config), key=str):
        old, new = saved.get(k, "<absent>"), config.get(k, "<absent>")
        if isinstance(old, dict) and isinstance(new, dict):
            diffs += _differences(old, new, f"{prefix}{k}.")
        elif old != new:
            diffs.append(f"{prefix}{k}: {old!r} in the checkpoint, {new!r} here")
    return diffs


def _with_added_settings(saved: dict[str, Any], config: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """`saved` with every setting of `config` it lacks that is at its default in `defaults`, at the top level and in
    the dicts nested in it (a generator's settings sit under ``"generator"``)."""
    nested = {k: _with_added_settings(v, config[k], defaults) for k, v in saved.items()
              if isinstance(v, dict) and isinstance(config.get(k), dict)}
    added = {k: v for k, v in config.items() if k not in saved and k in defaults and defaults[k] == v}
    return {**added, **saved, **nested}


def compute_only_settings(model: nn.Module) -> frozenset[str]:
    """The model config's settings that change how it computes and not what (`ModelConfig.COMPUTE_ONLY`)."""
    return getattr(getattr(model, "config", None), "COMPUTE_ONLY", frozenset())


def compute_only_changes(saved_config: dict[str, Any], model: nn.Module, config: Any) -> list[str]:
    """The compute-only settings whose value differs between a checkpoint's config and `config` (``chunk_tokens
    256 -> 384``), for a resumed run to say so."""
    saved = saved_config.get("model")
    if not isinstance(saved, dict) or not isinstance(config, dict):
        return []
    return [f"{k} {saved[k]!r} -> {config[k]!r}" for k in sorted(compute_only_settings(model))
            if k in saved and k in config and saved[k] != config[k]]


def _config_defaults(model: nn.Module) -> dict[str, Any]:
    """The defaults of the model's dataclass config (`model.config`), JSON-normalised; {} when it has none."""
    config = getattr(model, "config", None)
    if not dataclasses.is_dataclass(config):
        return {}
    defaults = {f.name: f.default for f in dataclasses.fields(config) if f.default is not dataclasses.MISSING}
    try:
        return json_normalise(defaults, f"{type(config).__name__} defaults")
    except TypeError:  # a default that is not JSON: compare nothing by default
        return {}


def _class_name(model: nn.Module) -> str:
    return f"{type(model).__module__}.{type(model).__qualname__}"
