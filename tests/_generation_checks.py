"""Checks every response generator must pass, shared by the tests of each model."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from typer.testing import CliRunner

from turnformer.cli import app
from turnformer.tasks.common import SETTINGS_IMPLIED_BY_ID

TINY_SETTINGS = ("model_config.d_model=16", "model_config.heads=2", "model_config.ff=32", "model_config.layers=1",
                 "train.epochs=1", "train.warmup_steps=1", "data.min_count=1")


def id_settings(model_id: str) -> dict:
    """The settings that make a generation model id the model it names (an ablation's switch), as its recipe writes
    them out: built by id alone, ``phaed-no-turn-attn`` would be PHAED whole."""
    return SETTINGS_IMPLIED_BY_ID["generation"].get(model_id, {})


def fit(model, batch, steps: int, lr: float = 1e-2) -> float:
    """`steps` Adam steps on one batch; returns the loss before them and leaves the model in eval mode."""
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    first = float(model.loss(batch).detach())
    for _ in range(steps):
        optimizer.zero_grad()
        model.loss(batch).backward()
        optimizer.step()
    model.eval()
    return first


def assert_learns_its_training_responses(model, batch, steps: int) -> None:
    """Overfitting one batch divides the loss by 10, and greedy decoding then gives back (all but at most
    one of) the training responses."""
    first = fit(model, batch, steps)
    assert float(model.loss(batch).detach()) < first / 10
    references, hypotheses = model.predict(batch)
    assert sum(r == h for r, h in zip(references, hypotheses)) >= len(batch) - 1


def train_on_files_from_the_command_line(model_id: str, dialogues, tmp_path: Path, *extra_settings: str) -> tuple[Path, Path]:
    """`turnformer train --task generation --dataset file` of a tiny `model_id` on `dialogues` (every split);
    returns (the conversations file, the run folder)."""
    conversations = tmp_path / "c.jsonl"
    conversations.write_text("".join(json.dumps({"id": d.id, "turns": [{"speaker": t.speaker, "text": t.text} for t in d.turns]}) + "\n"
                                     for d in dialogues))
    out = tmp_path / "run"
    files = [arg for split in ("train", "validation", "test") for arg in (f"--{split}-file", str(conversations))]
    trained = CliRunner().invoke(app, ["train", "--task", "generation", "--model", model_id, "--dataset", "file", *files, "--out", str(out),
                                       *[arg for s in (*TINY_SETTINGS, *extra_settings) for arg in ("--set", s)]])
    assert trained.exit_code == 0, trained.output
    return conversations, out


def assert_loss_projects_only_the_targets_as_the_full_logits_would(model, batch) -> None:
    """The loss and the NLL (only rows with a target projected onto the vocabulary) equal the cross-entropy of the
    full logits (every row projected, then IGNORE left out), and so do all the gradients."""
    targets = batch.response_out.flatten()
    reference = torch.nn.functional.cross_entropy(model(batch).flatten(0, 1), targets, ignore_index=-100)
    expected = torch.autograd.grad(reference, list(model.parameters()), allow_unused=True)
    loss = model.loss(batch)
    grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
    assert torch.allclose(loss, reference, atol=1e-6)
    for (name, _), g, e in zip(model.named_parameters(), grads, expected):
        assert (g is None) == (e is None), name
        assert g is None or torch.allclose(g, e, atol=1e-6), name
    nll, count = model.negative_log_likelihood(batch)
    assert count == int(targets.ne(-100).sum()) < targets.numel()  # the batch has padding and speaker tokens to skip
    assert abs(nll - float(reference.detach()) * count) < 1e-4 * count
