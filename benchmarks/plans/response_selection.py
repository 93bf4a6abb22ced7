"""Response selection: the MDFN paper's experiments (recipes response-selection-DATASET-MODEL).

- ``selection``: the plain encoder and MDFN on MuTual and MuTual-plus over ``--seeds``, and MDFN's five ablations on
  MuTual with the first seed (MDFN's Tables 4, 7 and 9).
- ``selection-head-lr``: the plain encoder and MDFN on MuTual over ``--seeds``, the layers above the encoder
  (MDFN's channels, gates, BiGRUs and scorer; the plain encoder's scorer) at ``train.head_lr`` 5e-4, the encoder at
  the recipe's rate.
- ``selection-cpu``: the plain encoder and MDFN on MuTual at a scale the 2-core CPU trains (``SELECTION_CPU``: 4 of
  MiniLM's 6 layers frozen, max length 128, the first 1,500 training items, 2 epochs), over ``--seeds``.
- ``selection-cpu-head-lr``: the same, the layers above the encoder at ``train.head_lr`` 5e-4; ``selection-cpu-lr``:
  the same with everything at ``train.lr`` 1e-4.
"""

from __future__ import annotations

from .experiment import FIRST_SEED, SEEDS, Experiment

TASK = "response-selection"
ABLATIONS = ("mdfn-ua-only", "mdfn-sa-only", "mdfn-maxpool", "mdfn-meanpool", "mdfn-linear-fusion")
# MuTual on the 2-core CPU (an epoch: 12 to 19 minutes for MDFN, 5 to 10 for the plain encoder, one thread each, two runs
# at a time; then 2.5 to 5.5 minutes of evaluation): 4 of MiniLM's 6 layers frozen, 128 tokens, the first 1,500 training items, 2 epochs
SELECTION_CPU = {"train": 1500, "settings": {"model_config.frozen_layers": 4, "model_config.max_length": 128, "train.epochs": 2}}
# plan -> (experiment suffix, learning rates): the recipes' (3e-5 everywhere); the layers above the encoder at 5e-4;
# everything at 1e-4 (is the plain encoder's deficit at this scale its learning rate?)
SELECTION_CPU_VARIANTS = {"selection-cpu": ("", {}), "selection-cpu-head-lr": ("-head-lr", {"train.head_lr": "5e-4"}),
                          "selection-cpu-lr": ("-lr1e-4", {"train.lr": "1e-4"})}


def cpu_rows(suffix: str, rates: dict) -> list[Experiment]:
    """The plain encoder and MDFN on MuTual at the scale of SELECTION_CPU, with `rates` on the recipes' ones."""
    return [Experiment(f"{TASK}-mutual-{model}-cpu{suffix}", model, "mutual", SEEDS,
                       tuple(f"{k}={v}" for k, v in {**SELECTION_CPU["settings"], **rates}.items()),
                       limit_train=SELECTION_CPU["train"], task=TASK, extra={"scale": SELECTION_CPU, **rates})
            for model in ("plain-encoder", "mdfn")]


PLANS: dict[str, list[Experiment]] = {
    "selection": [
        *(Experiment(f"{TASK}-{dataset}-{model}", model, dataset, SEEDS, task=TASK)
          for dataset in ("mutual", "mutual-plus") for model in ("mdfn", "plain-encoder")),
        *(Experiment(f"{TASK}-mutual-{model}", model, "mutual", FIRST_SEED, task=TASK) for model in ABLATIONS)],
    "selection-head-lr": [
        Experiment(f"{TASK}-mutual-{model}-head-lr", model, "mutual", SEEDS, ("train.head_lr=5e-4",), task=TASK,
                   extra={"head_lr": 5e-4}) for model in ("plain-encoder", "mdfn")],
    **{name: cpu_rows(suffix, rates) for name, (suffix, rates) in SELECTION_CPU_VARIANTS.items()},
}
