"""Dialogue acts: the LC Attention paper's experiments (recipes dialogue-act-DATASET-MODEL).

- ``acts``: the dialogue-act models (LC Attention, its three LSTM baselines, the fine-tuned MiniLM) on SwDA and DailyDialog
  acts (the LC Attention paper's Tables 4 and 6).
- ``act-grid``: the W x P grid of the dialogue-act context models (W in 1, 5, 10 and P in 0..3 on DailyDialog;
  W in 1, 5, 10, 20 and P in 0..5 on SwDA), over ``--grid-seeds`` (default: seed 1), 3 epochs. A cell at a model's
  own recipe cell reads that recipe's ``acts`` runs where they have finished 3 epochs (scored on those epochs); where
  those runs are gone, the recipe's results file, if its runs trained exactly the cell's 3 epochs, batch and seeds.
- ``act-batch``: the three dialogue-act context models at their recipe's W and P with fewer predicted utterances
  per batch than the recipes' ~320 (``ACT_BATCHES``: 80 and 160), so more updates an epoch; 3 epochs, ``--grid-seeds``.
  Their 320-utterance cells are the act-grid's cells at the recipe's W and P.
- ``act-setup``: LC Attention and LSTM+BLSTM at their recipe's W and P with one of the settings the paper leaves open
  changed (``ACT_SETUP``: learning rate, dropout, width, heads), 3 epochs, ``--grid-seeds``: does LC Attention's place
  against the BLSTM depend on our choices? Beside them, the recipe's settings unchanged (``-recipe``).
- ``act-split``: LC Attention, LSTM+BLSTM and the single-utterance LSTM on SwDA in Lee and Dernoncourt's split
  (``swda-ld``: the paper's 112 validation conversations held out of training instead of our 21), ``SPLIT_EPOCHS``
  epochs, ``--grid-seeds``; each also scored on its first 3 epochs (``-e3``), the ``acts`` plan's SwDA schedule: the
  split alone, then the longer schedule.
- ``acts-frozen``: the context models over all-mpnet-base-v2's frozen sentence vectors, and those vectors alone
  (recipes ``dialogue-act-DATASET-MODEL-frozen-mpnet``, ``-frozen-mpnet-utterance``), on SwDA and DailyDialog, over
  ``--seeds``. The first run of a dataset computes its vectors (SwDA's: about 70 minutes on one CPU thread) and caches
  them; the others read them.
- ``act-vectors``: LC Attention on SwDA (the ``acts`` plan's 3 epochs) with its word embeddings started elsewhere
  (``ACT_VECTORS``: a random draw, word2vec trained on the training split's word pieces, all-mpnet-base-v2's or
  SmolLM2-135M's input embeddings), ``--grid-seeds``; all-MiniLM-L6-v2's are the ``acts`` plan's row.
"""

from __future__ import annotations

from turnformer.recipes import find_recipe, load_recipe

from .experiment import GRID_SEEDS, SEEDS, Experiment

TASK = "dialogue-act"
CONTEXT_MODELS = ("lc-attention", "lstm-attention", "lstm-blstm")
PREDICTED_PER_BATCH = 320  # the dialogue-act recipes' batch: sub-dialogues per batch x window
GRID_EPOCHS = 3  # of every W x P cell
# the W x P grid per dataset: (windows, context paddings)
GRIDS = {"dailydialog": ((1, 5, 10), range(4)), "swda": ((1, 5, 10, 20), range(6))}
ACT_BATCHES = (80, 160)  # predicted utterances per batch in the act-batch plan (sub-dialogues x W)
# act-setup: each variant changes one of the settings the LC Attention paper leaves open, from the recipes' choice
ACT_SETUP = {"recipe": {},  # the recipe's settings: the sweep's own baseline, run with the same code as its variants
             "lr5e-4": {"train.lr": "5e-4"},  # half the recipes' 1e-3
             "dropout0.5": {"model_config.dropout": "0.5"},  # against the recipes' 0.2: the paper calls attention prone to overfit
             "hidden512": {"model_config.hidden": "512", "model_config.classifier_hidden": "512"},  # twice the width
             "heads1": {"model_config.heads": "1"}}  # equations 4-7 as written: one head (attention models only)
# DailyDialog: the recipes' 5 epochs (about 40 minutes a run on one CPU thread); SwDA: 3, what fits the 2-core CPU
# machine (the BLSTM takes about 16 minutes an epoch). The schedule is constant, so a 3-epoch run resumed with 5
# epochs is the same as a 5-epoch run.
ACTS_OVERRIDES = {"swda": ("train.epochs=3",), "dailydialog": ()}
# act-vectors: where the word embeddings start, against the recipes' all-MiniLM-L6-v2 input embeddings
ACT_VECTORS = {"random": ("model_config.word_vectors=random",), "word2vec": ("model_config.word_vectors=word2vec",),
               "mpnet": ("backbone=all-mpnet-base-v2",), "smollm2": ("backbone=SmolLM2-135M",)}
# acts-frozen: over all-mpnet-base-v2's frozen sentence vectors (every one of these reads the same cached vectors)
FROZEN_MODELS = ("lstm-blstm-frozen-mpnet", "lc-attention-frozen-mpnet", "lstm-attention-frozen-mpnet", "frozen-mpnet-utterance")
SPLIT_MODELS = ("lc-attention", "lstm-blstm", "lstm")  # act-split: the single LSTM probes what every model shares
SPLIT_EPOCHS = 6  # act-split: twice the acts plan's SwDA schedule (the paper trains to convergence)


def recipe_cell(dataset: str, model: str) -> tuple[int, int]:
    """The window W and context padding P of a dialogue-act recipe (its model's best cell in the paper)."""
    recipe = load_recipe(find_recipe(TASK, model, dataset))
    return recipe["window"], recipe["context_padding"]


RECIPE_CELLS = {(dataset, model): recipe_cell(dataset, model) for dataset in GRIDS for model in CONTEXT_MODELS}


def grid_cell(dataset: str, model: str, w: int, p: int) -> Experiment:
    """A W x P cell. Every cell keeps the recipes' ~320 predicted utterances per batch (W x sub-dialogues), so that a
    cell differs from another in its windowing only, not in its number of updates."""
    batch = PREDICTED_PER_BATCH // w
    return Experiment(f"{TASK}-{dataset}-{model}-w{w}-p{p}", model, dataset, GRID_SEEDS,
                      (f"train.epochs={GRID_EPOCHS}", f"window={w}", f"context_padding={p}", f"train.batch_size={batch}"),
                      task=TASK, extra={"window": w, "padding": p, "batch_size": batch}, max_epoch=GRID_EPOCHS,
                      recipe_runs=f"{TASK}-{dataset}-{model}" if (w, p) == RECIPE_CELLS[dataset, model] else None)


def batch_cell(dataset: str, model: str, predicted: int) -> Experiment:
    """The recipe's cell with `predicted` utterances a batch: more, noisier updates at the recipe's windowing."""
    w, p = RECIPE_CELLS[dataset, model]
    return Experiment(f"{TASK}-{dataset}-{model}-w{w}-p{p}-u{predicted}", model, dataset, GRID_SEEDS,
                      (f"train.epochs={GRID_EPOCHS}", f"train.batch_size={predicted // w}"), task=TASK,
                      extra={"window": w, "padding": p, "batch_size": predicted // w, "predicted_per_batch": predicted},
                      max_epoch=GRID_EPOCHS)


def setup_cell(dataset: str, model: str, variant: str) -> Experiment:
    """The recipe's cell (windowing and batch) with one open setting changed (ACT_SETUP[variant])."""
    w, p = RECIPE_CELLS[dataset, model]
    settings = ACT_SETUP[variant]
    return Experiment(f"{TASK}-{dataset}-{model}-w{w}-p{p}-{variant}", model, dataset, GRID_SEEDS,
                      (f"train.epochs={GRID_EPOCHS}", *(f"{k}={v}" for k, v in settings.items())), task=TASK,
                      extra={"window": w, "padding": p, "setup": variant, "settings": settings}, max_epoch=GRID_EPOCHS)


PLANS: dict[str, list[Experiment]] = {
    "acts": [
        *(Experiment(f"{TASK}-{dataset}-{model}", model, dataset, SEEDS, ACTS_OVERRIDES[dataset], task=TASK)
          for dataset in ("swda", "dailydialog") for model in (*CONTEXT_MODELS, "lstm")),
        # the fine-tuned all-MiniLM-L6-v2 row keeps its recipe's 2 epochs (about 20 times slower per utterance than the LSTMs)
        *(Experiment(f"{TASK}-{dataset}-minilm-utterance", "minilm-utterance", dataset, SEEDS, task=TASK)
          for dataset in ("swda", "dailydialog"))],
    "acts-frozen": [Experiment(f"{TASK}-{dataset}-{model}", model, dataset, SEEDS, task=TASK)
                    for dataset in ("swda", "dailydialog") for model in FROZEN_MODELS],
    "act-grid": [grid_cell(dataset, model, w, p) for dataset, (windows, paddings) in GRIDS.items()
                 for model in CONTEXT_MODELS for w in windows for p in paddings],
    "act-batch": [batch_cell(dataset, model, predicted) for dataset in ("dailydialog", "swda")
                  for model in CONTEXT_MODELS for predicted in ACT_BATCHES],
    # the 3-epoch views last: each reads its model's runs once they have finished (they are not trained twice)
    "act-split": [Experiment(f"{TASK}-swda-ld-{model}{suffix}", model, "swda-ld", GRID_SEEDS, (f"train.epochs={SPLIT_EPOCHS}",),
                             task=TASK, max_epoch=epochs, recipe_runs=f"{TASK}-swda-ld-{model}" if epochs else None)
                  for suffix, epochs in (("", None), ("-e3", 3)) for model in SPLIT_MODELS],
    "act-vectors": [Experiment(f"{TASK}-swda-lc-attention-vectors-{name}", "lc-attention", "swda", GRID_SEEDS,
                               (*ACTS_OVERRIDES["swda"], *settings), task=TASK, extra={"word_vectors": name})
                    for name, settings in ACT_VECTORS.items()],
    # the BLSTM has no heads to cut to one
    "act-setup": [setup_cell(dataset, model, variant) for dataset in ("dailydialog", "swda")
                  for model in ("lc-attention", "lstm-blstm") for variant in ACT_SETUP
                  if not (variant == "heads1" and model == "lstm-blstm")],
}
