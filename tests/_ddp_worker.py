"""Worker for the two-process test in test_training.py (run under `accelerate launch`).

    python _ddp_worker.py OUT

Each process trains a tiny classifier three ways (uninterrupted; stopped by max_steps; resumed) on
CPU with the gloo backend and writes its final flattened parameters to OUT/params_rank{R}.pt.
It also holds the tiny model and data that test_training.py uses.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from turnformer.training import TrainConfig, predict_all, set_seed, train


class TinyClassifier(nn.Module):
    """A two-layer classifier on feature vectors; batches are dicts {"x": [B, n_in], "y": [B]}."""

    def __init__(self, n_in: int = 8, hidden: int = 16, n_classes: int = 3, tie: bool = False) -> None:
        super().__init__()
        self.hparams = {"n_in": n_in, "hidden": hidden, "n_classes": n_classes, "tie": tie}
        self.inp = nn.Linear(n_in, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.out = nn.Linear(hidden, n_classes)
        if tie:   # a second name for the same parameter, as with tied embeddings
            self.out_alias = self.out
        self.interrupt_at: int | None = None   # raise KeyboardInterrupt on this loss() call (tests)
        self.calls = 0

    def config_dict(self) -> dict:
        return dict(self.hparams)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.norm(self.inp(x))))

    def loss(self, batch: dict) -> torch.Tensor:
        self.calls += 1
        if self.interrupt_at is not None and self.calls == self.interrupt_at:
            raise KeyboardInterrupt
        return F.cross_entropy(self(batch["x"]), batch["y"])

    def predict(self, batch: dict) -> tuple[list, list]:
        return batch["y"].tolist(), self(batch["x"]).argmax(-1).tolist()


def make_batches(n_batches: int, batch_size: int = 8, n_in: int = 8, n_classes: int = 3, seed: int = 0) -> list[dict]:
    """Random features (drawn with `seed`) labelled by one fixed random linear teacher (learnable)."""
    teacher = torch.randn(n_in, n_classes, generator=torch.Generator().manual_seed(12345))
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n_batches):
        x = torch.randn(batch_size, n_in, generator=g)
        batches.append({"x": x, "y": (x @ teacher).argmax(-1)})
    return batches


def accuracy_eval(splits: dict[str, list[dict]]):
    def eval_fn(model: nn.Module, split: str) -> dict:
        gold, predicted = predict_all(model, splits[split])
        accuracy = sum(g == p for g, p in zip(gold, predicted)) / len(gold)
        return {"primary": accuracy, "accuracy": accuracy}

    return eval_fn


def flat_params(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])


def main(out: Path) -> None:
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    rank = accelerator.process_index
    (out / f"ready_rank{rank}").write_text(str(accelerator.num_processes))
    batches = make_batches(11, seed=1)   # 11 batches, 2 processes: 5 each, one dropped per epoch
    splits = {"validation": make_batches(2, seed=2), "test": make_batches(2, seed=3)}

    def run(out_dir: Path, **overrides) -> tuple[nn.Module, object]:
        set_seed(0)
        model = TinyClassifier()
        config = TrainConfig(epochs=2, lr=0.05, seed=3, out_dir=out_dir, weight_decay=0.01, scheduler="linear",
                             warmup_steps=1, gradient_accumulation_steps=2, **overrides)
        return model, train(model, batches, accuracy_eval(splits), config, accelerator=accelerator)

    set_seed(0)
    initial = flat_params(TinyClassifier())
    model_a, result_a = run(out / "a")
    _, stopped = run(out / "b", max_steps=2)
    model_b, result_b = run(out / "b", resume=True)
    torch.save({
        "world": accelerator.num_processes, "initial": initial, "a": flat_params(model_a), "b": flat_params(model_b),
        "steps_a": result_a.steps, "steps_b": result_b.steps, "stopped": stopped.stopped_early,
        "losses_a": [h["train_loss"] for h in result_a.history],
        "losses_b": [h["train_loss"] for h in result_b.history],
    }, out / f"params_rank{rank}.pt")
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
