"""Tiny trained runs of every task, made with `turnformer train` on small conversation files (a randomly initialised
2-layer backbone, one epoch), for the server's tests: what a user would serve, at a size that trains in seconds."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from turnformer.cli import app

HAPPY = ["great news , I passed !", "that is wonderful", "I love this"]
SAD = ["my dog died", "I failed the exam", "it is raining again"]


def conversations(n: int = 10) -> list[dict]:
    """Conversations whose turns carry an emotion and an act, alternating between two speakers."""
    rows = []
    for i in range(n):
        turns = []
        for j in range(3 + i % 3):
            text, emotion = (HAPPY[j % 3], "joy") if (i + j) % 2 else (SAD[j % 3], "sadness")
            act = "question" if j % 2 else "inform"
            turns.append({"speaker": "Ann" if j % 2 else "Bob", "text": text, "labels": {"emotion": emotion, "act": act}})
        rows.append({"id": f"d{i}", "turns": turns})
    return rows


def ranking_items(n: int = 8) -> list[dict]:
    """Response-selection items: a context, two candidate replies, the right one named."""
    return [{"id": f"r{i}", "turns": [{"speaker": "m", "text": "where are you going ?"}, {"speaker": "f", "text": "to the bank ."}],
             "meta": {"candidates": ["why the bank ?", "I like green tea ."], "answer": 0}} for i in range(n)]


def write_jsonl(rows: list[dict], path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def train(task: str, model: str, data: Path, out: Path, *settings: str) -> Path:
    files = [arg for split in ("train", "validation", "test") for arg in (f"--{split}-file", str(data))]
    options = [arg for setting in ("train.epochs=1", *settings) for arg in ("--set", setting)]
    result = CliRunner().invoke(app, ["-q", "train", "--task", task, "--model", model, "--dataset", "file", *files,
                                      "--out", str(out), *options])
    assert result.exit_code == 0, result.output
    return out


def tiny_runs(backbone: Path, folder: Path, tasks=("erc", "dialogue-act", "response-selection", "generation")) -> dict[str, Path]:
    """Run folders, by task, of tiny models trained on small files in `folder`."""
    labelled = write_jsonl(conversations(), folder / "conversations.jsonl")
    backbone_setting = f'backbone="{backbone}"'
    recipes = {
        "erc": ("dialogxl", labelled, backbone_setting, "model_config.heads=[1,1,1,1]", "model_config.mem_len=64",
                "train.lr=1e-3", "train.batch_size=4"),
        "dialogue-act": ("lc-attention", labelled, backbone_setting, 'label_kind="act"', "window=2", "context_padding=1",
                         "model_config.hidden=16", "model_config.heads=2", "model_config.classifier_hidden=16",
                         "train.batch_size=8"),
        "response-selection": ("mdfn", write_jsonl(ranking_items(), folder / "items.jsonl"), backbone_setting,
                               "model_config.max_length=64", "model_config.dropout=0.0", "train.batch_size=4",
                               "train.warmup_steps=1"),
        "generation": ("transformer", labelled, "model_config.d_model=16", "model_config.heads=2", "model_config.ff=32",
                       "model_config.layers=1", "train.warmup_steps=1", "data.min_count=1"),
    }
    return {task: train(task, recipes[task][0], recipes[task][1], folder / task, *recipes[task][2:]) for task in tasks}
