"""The optimiser and its learning-rate schedule."""

from __future__ import annotations

import torch
from torch import nn

# Parameters of these modules (and of any module whose class name contains "Norm") get no weight decay.
_NORM_TYPES: tuple[type, ...] = (
    nn.LayerNorm, nn.GroupNorm, nn.LocalResponseNorm, nn.modules.batchnorm._NormBase, nn.RMSNorm,
)


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
