"""The DialogXL paper's experiments (and the dialogue-act table) as `turnformer train` runs, several at a time, each experiment
collected into a results file (benchmarks/results/EXPERIMENT.json) by `collect_erc.collect`.

    python benchmarks/erc_experiments.py --plan table2 [--plan table3 ...] [--workers 8] [--runs-dir runs/erc]
                                         [--seeds 1,2,3] [--deadline SECONDS] [--prune]

Plans (recipes TASK-DATASET-MODEL in src/turnformer/recipe_files/, named by their model ids):

- ``lr-sweep``: DialogXL and the concatenated-context baseline on MELD and EmoryNLP, one seed, at
  learning rates 2e-5, 5e-5 and 1e-4; writes ``erc-lr-sweep-MODEL.json`` with every validation score and the
  rate chosen per model (best mean validation score over both datasets), one file per model.
- ``table2``: DialogXL, concat-context and segment-recurrence on MELD, EmoryNLP and DailyDialog. With
  the first baseline seed only: segment recurrence (far below the others), and the baselines on
  DailyDialog (nine times MELD's size).
- ``erc-longer``: is DialogXL under-trained at the recipes' 4 epochs? DialogXL and concat-context on MELD and
  EmoryNLP for 10 epochs (the schedule is constant: ``collect_erc.py --max-epoch 4`` scores their first 4 as the
  recipes' runs), and DialogXL for 4 epochs with its classifier at ``train.head_lr`` 1e-3 (the backbone at the
  recipe's rate). A GPU job.
- ``memory-bias``: not in the paper: DialogXL with a learned logit per layer and head on memory keys, starting at -4
  (``model_config.memory_bias``), so that all-MiniLM-L6-v2, never pretrained with memory, starts near its
  single-utterance behaviour; on MELD, EmoryNLP and DailyDialog (recipes erc-DATASET-dialogxl-memory-bias.toml).
  Beside it, with the first seed, DialogXL without memory (each utterance alone, ``erc-DATASET-dialogxl-no-memory``).
- ``one-pass``: the MELD and EmoryNLP rows of DialogXL (Table 2) and of its memory-bias variant again, trained with the
  one-pass path (``erc-DATASET-MODEL-one-pass``), and the memory-bias variant with ``memory_grad``
  (``erc-DATASET-dialogxl-memory-grad``: gradients flow into earlier utterances within a chunk), same seeds.
- ``table3``: the five ablations of DialogXL on MELD.
- ``table4``: DialogXL-emb (speaker-role embeddings instead of speaker/listener heads) on MELD and DailyDialog.
- ``positions``: DialogXL on MELD with positions restarting in every utterance (the BERT-type
  backbone's alternative to numbering tokens through the conversation).
- ``acts``: the dialogue-act models (LC Attention, its three LSTM baselines, the fine-tuned MiniLM) on SwDA and DailyDialog
  acts (the LC Attention paper's Tables 4 and 6; recipes dialogue-act-DATASET-MODEL).
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
- ``selection``: response selection (recipes response-selection-DATASET-MODEL): the plain encoder and MDFN
  on MuTual and MuTual-plus over ``--seeds``, and MDFN's five ablations on MuTual with the first seed.
- ``selection-head-lr``: the plain encoder and MDFN on MuTual over ``--seeds``, the layers above the encoder
  (MDFN's channels, gates, BiGRUs and scorer; the plain encoder's scorer) at ``train.head_lr`` 5e-4, the encoder at
  the recipe's rate.
- ``selection-cpu``: the plain encoder and MDFN on MuTual at a scale the 2-core CPU trains (``SELECTION_CPU``: 4 of
  MiniLM's 6 layers frozen, max length 128, the first 1,500 training items, 2 epochs), over ``--seeds``.
- ``selection-cpu-head-lr``: the same, the layers above the encoder at ``train.head_lr`` 5e-4; ``selection-cpu-lr``:
  the same with everything at ``train.lr`` 1e-4.
- ``generation``: the response generators on DailyDialog (recipes generation-dailydialog-MODEL): Transformer,
  Transformer+DRA, DialogBERT-style with and without DRA, PHAED and the GPT-2-style decoder over ``--seeds``; PHAED's
  four ablations and its c_max sweep (1..5, 10 context turns) with the first seed. Test perplexity at the best
  validation perplexity, with BLEU and Distinct of greedy responses. A GPU job at these sizes.
- ``generation-cpu``: the same main rows and ablations at the size in ``GENERATION_CPU`` (first 1,000 training and
  100 validation / test conversations, width 128, 2 layers), which trains on the 2-core CPU, and PHAED's c_max
  sweep at that size (0..5, 10 context turns, the first seed).
- ``figure4``: DialogXL on SwDA acts, memory length 100..1000, on a documented subset of the
  training conversations (``--swda-train``, whole validation and test sets), one seed.
- ``figure4-cpu``: the same sweep at what the 2-core CPU trains (``FIGURE4_CPU``: memory 100, 300, 500, 700 and 1000, and 0, each
  utterance alone; the first 30 training conversations and the first 8 of validation and test, 2 epochs, one
  conversation a batch), with the memory-bias variant (recipe erc-swda-dialogxl-memory-bias), one seed.

A run whose folder already holds result.json is not run again, and an interrupted one continues
(``--resume``), so the command can be repeated until everything is done. A seed whose run folder is gone but which
the experiment's results file holds, collected from a whole run of the recipe as it is now, is not trained again: the
file keeps it beside the seeds collected later (``--seeds 2,3`` adds to a file of seed 1), and its command says so.
A seed whose run was cut short is trained again (or continued, where its folder is here); the file's whole seeds stay.
``--deadline`` gives every run a time budget ending that many seconds after the start: runs cut by it are recorded as partial,
and continue from their checkpoint when the command is repeated.
With ``--workers`` above 1 every run gets one CPU thread (the runs share the machine, or one GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collect_erc import collect, run_config  # noqa: E402

from turnformer.recipes import find_recipe, load_recipe  # noqa: E402
from turnformer.results import RESULTS_DIR, make_result, mean_std, write_result  # noqa: E402

LEARNING_RATES = ("2e-5", "5e-5", "1e-4")
ABLATIONS = ("no-speaker", "no-listener", "no-speaker-listener", "no-local", "no-global")
MEMORY_LENGTHS = tuple(range(100, 1001, 100))
# figure4-cpu: what the 2-core CPU trains in about two hours, two runs at a time
FIGURE4_CPU = {"memory_lengths": (0, 100, 300, 500, 700, 1000), "train": 30, "eval": 8, "epochs": 2}  # 0: each utterance alone
PREDICTED_PER_BATCH = 320  # the dialogue-act recipes' batch: sub-dialogues per batch x window
GRID_EPOCHS = 3  # of every W x P cell
ACT_BATCHES = (80, 160)  # predicted utterances per batch in the act-batch plan (sub-dialogues x W)
# act-setup: each variant changes one of the settings the LC Attention paper leaves open, from the recipes' choice
ACT_SETUP = {"recipe": {},  # the recipe's settings: the sweep's own baseline, run with the same code as its variants
             "lr5e-4": {"train.lr": "5e-4"},  # half the recipes' 1e-3
             "dropout0.5": {"model_config.dropout": "0.5"},  # against the recipes' 0.2: the paper calls attention prone to overfit
             "hidden512": {"model_config.hidden": "512", "model_config.classifier_hidden": "512"},  # twice the width
             "heads1": {"model_config.heads": "1"}}  # equations 4-7 as written: one head (attention models only)
GENERATION_MAIN = ("transformer", "transformer-dra", "dialogbert", "dialogbert-dra", "phaed", "gpt2-scratch")
PHAED_ABLATIONS = ("phaed-no-speaker-tokens", "phaed-no-turn-emb", "phaed-no-turn-attn", "phaed-no-recurrence")
# MuTual on the 2-core CPU (an epoch: 12 to 19 minutes for MDFN, 5 to 10 for the plain encoder, one thread each, two runs
# at a time; then 2.5 to 5.5 minutes of evaluation): 4 of MiniLM's 6 layers frozen, 128 tokens, the first 1,500 training items, 2 epochs
SELECTION_CPU = {"train": 1500, "settings": {"model_config.frozen_layers": 4, "model_config.max_length": 128, "train.epochs": 2}}
# plan -> (experiment suffix, learning rates): the recipes' (3e-5 everywhere); the layers above the encoder at 5e-4;
# everything at 1e-4 (is the plain encoder's deficit at this scale its learning rate?)
SELECTION_CPU_VARIANTS = {"selection-cpu": ("", {}), "selection-cpu-head-lr": ("-head-lr", {"train.head_lr": "5e-4"}),
                          "selection-cpu-lr": ("-lr1e-4", {"train.lr": "1e-4"})}
# What trains on the 2-core CPU in about 5 minutes a run: the first 1,000 training conversations, the first 100
# of validation and test, width 128 and 2 layers (the GPT-2-style decoder 4, as deep as encoder + decoder).
GENERATION_CPU = {"train": 1000, "eval": 100, "settings": {
    "model_config.d_model": 128, "model_config.heads": 4, "model_config.layers": 2, "model_config.ff": 512,
    "train.epochs": 2, "train.warmup_steps": 50, "train.lr": "1e-3", "train.batch_size": 32}}


@dataclass(frozen=True)
class Experiment:
    id: str
    model: str
    dataset: str
    seeds: tuple[int, ...]
    overrides: tuple[str, ...] = ()
    limit_train: int | None = None
    limit_eval: int | None = None
    extra: dict = field(default_factory=dict, hash=False)
    task: str = "erc"
    max_epoch: int | None = None  # scored on its first epochs only (collect_erc --max-epoch)
    # a grid cell at its model's recipe cell: that experiment's runs (the same training over its first epochs) count
    recipe_runs: str | None = None


@lru_cache(maxsize=None)
def act_recipe_cell(dataset: str, model: str) -> tuple[int, int]:
    """The window W and context padding P of a dialogue-act recipe (its model's best cell in the paper)."""
    recipe = load_recipe(find_recipe("dialogue-act", model, dataset))
    return recipe["window"], recipe["context_padding"]


def plan(name: str, seeds: tuple[int, ...], baseline_seeds: tuple[int, ...], swda_train: int,
         grid_seeds: tuple[int, ...] = (1,)) -> list[Experiment]:
    if name == "lr-sweep":
        return [
            Experiment(f"lr-{dataset}-{model}-{lr}", model, dataset, seeds[:1], (f"train.lr={lr}",), extra={"lr": lr})
            for model in ("dialogxl", "concat-context") for dataset in ("meld", "emorynlp") for lr in LEARNING_RATES
        ]
    if name == "table2":
        return [
            Experiment(f"erc-{dataset}-{model}", model, dataset,
                       seeds if model == "dialogxl" else baseline_seeds if model == "concat-context" and dataset != "dailydialog"
                       else baseline_seeds[:1],
                       # the concatenated context re-encodes every history: 2 epochs on DailyDialog fit the time here
                       ("train.epochs=2",) if (dataset, model) == ("dailydialog", "concat-context") else ())
            for dataset in ("meld", "emorynlp", "dailydialog") for model in ("dialogxl", "concat-context", "segment-recurrence")
        ]
    if name == "positions":  # BERT-type backbone: positions numbered per utterance instead of through the conversation
        return [Experiment("erc-meld-dialogxl-utterance-positions", "dialogxl", "meld", seeds[:1],
                           ('model_config.positions="utterance"',), extra={"positions": "utterance"})]
    if name == "erc-longer":
        longer = [Experiment(f"erc-{dataset}-{model}-e10", model, dataset, seeds, ("train.epochs=10",), extra={"epochs": 10})
                  for dataset in ("meld", "emorynlp") for model in ("dialogxl", "concat-context")]
        return longer + [Experiment(f"erc-{dataset}-dialogxl-head-lr", "dialogxl", dataset, seeds, ("train.head_lr=1e-3",),
                                    extra={"head_lr": 1e-3}) for dataset in ("meld", "emorynlp")]
    if name == "memory-bias":  # not in the paper: DialogXL with a learned memory bias (recipes erc-*-dialogxl-memory-bias.toml)
        # beside it, each utterance alone (no memory; the new layers at the same head_lr): what the context adds
        return [Experiment(f"erc-{dataset}-dialogxl-{variant}", "dialogxl" if variant == "no-memory" else "dialogxl-memory-bias",
                           dataset, seeds if variant == "memory-bias" else seeds[:1],
                           ("model_config.mem_len=0", "train.head_lr=1e-3") if variant == "no-memory" else (),
                           extra={"mem_len": 0, "head_lr": 1e-3} if variant == "no-memory" else {})
                for dataset in ("meld", "emorynlp", "dailydialog") for variant in ("memory-bias", "no-memory")]
    if name == "one-pass":  # DialogXL's Table 2 and memory-bias rows again, trained and scored with the one-pass path,
        # and memory_grad (gradients into the history within a chunk; recipes erc-DATASET-dialogxl-memory-grad.toml)
        return [Experiment(f"erc-{dataset}-{model}" + ("" if model.endswith("memory-grad") else "-one-pass"), model, dataset, seeds)
                for dataset in ("meld", "emorynlp") for model in ("dialogxl", "dialogxl-memory-bias", "dialogxl-memory-grad")]
    if name == "table3":
        return [Experiment(f"erc-meld-dialogxl-{a}", f"dialogxl-{a}", "meld", seeds) for a in ABLATIONS]
    if name == "table4":
        return [Experiment(f"erc-{d}-dialogxl-speaker-emb", "dialogxl-speaker-emb", d, seeds) for d in ("meld", "dailydialog")]
    if name == "figure4":
        return [
            # batches of 2 conversations: SwDA's ~170-utterance conversations keep a long graph in memory
            Experiment(f"erc-swda-dialogxl-mem{m}", "dialogxl", "swda", seeds[:1], (f"model_config.mem_len={m}", "train.batch_size=2"),
                       limit_train=swda_train, extra={"mem_len": m})
            for m in MEMORY_LENGTHS
        ]
    if name == "figure4-cpu":  # the memory-bias variant (the DialogXL that learns on this backbone), a smaller subset
        # one conversation a batch: ~170 utterances a step, and 30 steps an epoch rather than 8
        return [
            Experiment(f"erc-swda-first{FIGURE4_CPU['train']}-dialogxl-memory-bias-mem{m}", "dialogxl-memory-bias", "swda", seeds[:1],
                       (f"model_config.mem_len={m}", "train.batch_size=1", f"train.epochs={FIGURE4_CPU['epochs']}"),
                       limit_train=FIGURE4_CPU["train"], limit_eval=FIGURE4_CPU["eval"], extra={"mem_len": m})
            for m in sorted(FIGURE4_CPU["memory_lengths"], reverse=True)  # the longest first: the pool ends evenly
        ]
    if name == "acts":  # the LC Attention paper's Tables 4 and 6: every model on SwDA and DailyDialog acts
        # DailyDialog: the recipes' 5 epochs (about 40 minutes a run on one CPU thread); SwDA: 3, what fits the 2-core
        # CPU machine (the BLSTM takes about 16 minutes an epoch). The schedule is constant, so a 3-epoch run resumed
        # with 5 epochs is the same as a 5-epoch run.
        return [Experiment(f"dialogue-act-{dataset}-{model}", model, dataset, seeds,
                           ("train.epochs=3",) if dataset == "swda" else (), task="dialogue-act")
                for dataset in ("swda", "dailydialog") for model in ("lc-attention", "lstm-attention", "lstm-blstm", "lstm")] + [
            # the fine-tuned all-MiniLM-L6-v2 row keeps its recipe's 2 epochs (about 20 times slower per utterance than the LSTMs)
            Experiment(f"dialogue-act-{dataset}-minilm-utterance", "minilm-utterance", dataset, seeds, task="dialogue-act")
            for dataset in ("swda", "dailydialog")]
    if name == "act-grid":  # the LC Attention paper's Tables 5 and 6: window W x context padding P, --grid-seeds, 3 epochs
        grids = {"dailydialog": ((1, 5, 10), range(4)), "swda": ((1, 5, 10, 20), range(6))}

        # every cell keeps the recipes' ~320 predicted utterances per batch (W x sub-dialogues), so that a cell differs
        # from another in its windowing only, not in its number of updates
        return [Experiment(f"dialogue-act-{dataset}-{model}-w{w}-p{p}", model, dataset, grid_seeds,
                           (f"train.epochs={GRID_EPOCHS}", f"window={w}", f"context_padding={p}",
                            f"train.batch_size={PREDICTED_PER_BATCH // w}"),
                           task="dialogue-act", extra={"window": w, "padding": p, "batch_size": PREDICTED_PER_BATCH // w},
                           max_epoch=GRID_EPOCHS,
                           recipe_runs=f"dialogue-act-{dataset}-{model}" if (w, p) == act_recipe_cell(dataset, model) else None)
                for dataset, (windows, paddings) in grids.items() for model in ("lc-attention", "lstm-attention", "lstm-blstm")
                for w in windows for p in paddings]
    if name == "act-batch":  # fewer predicted utterances per batch: more, noisier updates at the recipe's windowing
        cells = []
        for dataset in ("dailydialog", "swda"):
            for model in ("lc-attention", "lstm-attention", "lstm-blstm"):
                w, p = act_recipe_cell(dataset, model)
                cells += [Experiment(f"dialogue-act-{dataset}-{model}-w{w}-p{p}-u{u}", model, dataset, grid_seeds,
                                     (f"train.epochs={GRID_EPOCHS}", f"train.batch_size={u // w}"), task="dialogue-act",
                                     extra={"window": w, "padding": p, "batch_size": u // w, "predicted_per_batch": u},
                                     max_epoch=GRID_EPOCHS)
                          for u in ACT_BATCHES]
        return cells
    if name == "act-setup":  # one open setting changed at a time, at the recipe's windowing and batch, 3 epochs
        cells = []
        for dataset in ("dailydialog", "swda"):
            for model in ("lc-attention", "lstm-blstm"):
                w, p = act_recipe_cell(dataset, model)
                cells += [Experiment(f"dialogue-act-{dataset}-{model}-w{w}-p{p}-{variant}", model, dataset, grid_seeds,
                                     (f"train.epochs={GRID_EPOCHS}", *(f"{k}={v}" for k, v in settings.items())),
                                     task="dialogue-act", extra={"window": w, "padding": p, "setup": variant, "settings": settings},
                                     max_epoch=GRID_EPOCHS)
                          for variant, settings in ACT_SETUP.items() if not (variant == "heads1" and model == "lstm-blstm")]
        return cells
    if name == "selection":  # MDFN's Tables 4, 7 and 9: the plain encoder and MDFN on MuTual and MuTual-plus, the ablations on MuTual
        main_rows = [Experiment(f"response-selection-{dataset}-{model}", model, dataset, seeds, task="response-selection")
                     for dataset in ("mutual", "mutual-plus") for model in ("mdfn", "plain-encoder")]
        ablations = [Experiment(f"response-selection-mutual-{model}", model, "mutual", seeds[:1], task="response-selection")
                     for model in ("mdfn-ua-only", "mdfn-sa-only", "mdfn-maxpool", "mdfn-meanpool", "mdfn-linear-fusion")]
        return main_rows + ablations
    if name == "selection-head-lr":  # the plain encoder and MDFN on MuTual, their new layers at train.head_lr = 5e-4
        return [Experiment(f"response-selection-mutual-{model}-head-lr", model, "mutual", seeds, ("train.head_lr=5e-4",),
                           task="response-selection", extra={"head_lr": 5e-4}) for model in ("plain-encoder", "mdfn")]
    if name == "generation":  # DRA's Table 1 and PHAED's Tables 2 and 4 rows on DailyDialog, at the recipes' sizes (a GPU job)
        return [Experiment(f"generation-dailydialog-{model}", model, "dailydialog", seeds if model in GENERATION_MAIN else seeds[:1],
                           task="generation") for model in (*GENERATION_MAIN, *PHAED_ABLATIONS)] + [
            # PHAED's Figure 6: c_max previous responses; 10 context turns hold up to 5 of the responder's own
            Experiment(f"generation-dailydialog-phaed-cmax{c}", "phaed", "dailydialog", seeds[:1],
                       (f"model_config.c_max={c}", "data.max_context_turns=10"), task="generation", extra={"c_max": c})
            for c in range(1, 6)]
    if name == "generation-cpu":  # the same rows at a size that trains on the 2-core CPU (see GENERATION_CPU)
        def overrides(model):
            settings = {**GENERATION_CPU["settings"]}
            if model == "gpt2-scratch":  # decoder-only: as many layers as encoder and decoder together
                settings["model_config.layers"] *= 2
            return tuple(f"{k}={v}" for k, v in settings.items())

        return [Experiment(f"generation-dailydialog-{model}-cpu", model, "dailydialog", seeds if model in GENERATION_MAIN else seeds[:1],
                           overrides(model), limit_train=GENERATION_CPU["train"], limit_eval=GENERATION_CPU["eval"], task="generation",
                           extra={"scale": GENERATION_CPU}) for model in (*GENERATION_MAIN, *PHAED_ABLATIONS)] + [
            # PHAED's Figure 6 at this size: c_max 0 (no recurrence) to 5, 10 context turns as in the GPU plan
            Experiment(f"generation-dailydialog-phaed-cmax{c}-cpu", "phaed", "dailydialog", seeds[:1],
                       (*overrides("phaed"), f"model_config.c_max={c}", "data.max_context_turns=10"),
                       limit_train=GENERATION_CPU["train"], limit_eval=GENERATION_CPU["eval"], task="generation",
                       extra={"scale": GENERATION_CPU, "c_max": c, "max_context_turns": 10}) for c in range(6)]
    if name in SELECTION_CPU_VARIANTS:  # what fits the 2-core CPU (SELECTION_CPU), at the recipes' rates or another
        suffix, rates = SELECTION_CPU_VARIANTS[name]
        return [Experiment(f"response-selection-mutual-{model}-cpu{suffix}", model, "mutual", seeds,
                           tuple(f"{k}={v}" for k, v in {**SELECTION_CPU["settings"], **rates}.items()),
                           limit_train=SELECTION_CPU["train"], task="response-selection", extra={"scale": SELECTION_CPU, **rates})
                for model in ("plain-encoder", "mdfn")]
    raise SystemExit(f"unknown plan {name!r}; known: lr-sweep, table2, erc-longer, memory-bias, positions, table3, table4, figure4, figure4-cpu, acts, act-grid, act-batch, act-setup, selection, selection-head-lr, selection-cpu, selection-cpu-head-lr, selection-cpu-lr, generation, generation-cpu")


# The LC Attention paper's Tables 5 (SwDA) and 6 (DailyDialog): accuracy per (dataset, model, W, P). A grid cell
# the paper did not run (LC Attention with W = 1) has no number; the recipe's (its best cell's) would mislead.
PAPER_ACT_GRID = {
    ("swda", "lstm-blstm", 1, 1): 78.60, ("swda", "lstm-attention", 1, 1): 78.74,
    ("swda", "lstm-blstm", 1, 3): 79.36, ("swda", "lstm-attention", 1, 3): 79.98,
    ("swda", "lstm-blstm", 1, 5): 80.00, ("swda", "lstm-attention", 1, 5): 80.12,
    ("swda", "lstm-blstm", 5, 5): 78.50, ("swda", "lstm-attention", 5, 5): 79.43, ("swda", "lc-attention", 5, 5): 80.27,
    ("swda", "lstm-blstm", 10, 5): 78.31, ("swda", "lstm-attention", 10, 5): 79.00, ("swda", "lc-attention", 10, 5): 80.34,
    ("swda", "lstm-blstm", 20, 5): 78.55, ("swda", "lstm-attention", 20, 5): 78.57, ("swda", "lc-attention", 20, 5): 80.17,
    ("dailydialog", "lstm-blstm", 1, 1): 84.88, ("dailydialog", "lstm-attention", 1, 1): 85.10,
    ("dailydialog", "lstm-blstm", 1, 2): 85.06, ("dailydialog", "lstm-attention", 1, 2): 85.36,
    ("dailydialog", "lstm-blstm", 1, 3): 84.97, ("dailydialog", "lstm-attention", 1, 3): 85.05,
    ("dailydialog", "lstm-blstm", 5, 2): 85.01, ("dailydialog", "lstm-attention", 5, 2): 85.26, ("dailydialog", "lc-attention", 5, 2): 85.81,
    ("dailydialog", "lstm-blstm", 10, 2): 84.97, ("dailydialog", "lstm-attention", 10, 2): 85.13, ("dailydialog", "lc-attention", 10, 2): 85.72,
}


def finished(out: Path) -> bool:
    """A run with its result, unless a time budget (--deadline) cut it and its checkpoint is there to go on from."""
    if not (out / "result.json").exists():
        return False
    reason = json.loads((out / "result.json").read_text()).get("stop_reason") or ""
    return not (reason.startswith("time budget") and (out / "last").is_dir())


def finished_epochs(out: Path) -> int:
    if not (out / "result.json").exists():
        return 0
    return sum(1 for h in json.loads((out / "result.json").read_text())["history"] if h.get("complete"))


def run_dir(experiment: Experiment, seed: int, runs_dir: Path) -> Path:
    """Where the experiment's run of `seed` is: a grid cell at its model's recipe cell reads the recipe's run when that
    has finished the cell's epochs (the schedules are constant, so those epochs are the cell's training), else its own."""
    if experiment.recipe_runs:
        recipe_run = runs_dir / experiment.recipe_runs / f"seed{seed}"
        if finished_epochs(recipe_run) >= experiment.max_epoch:
            return recipe_run
    return runs_dir / experiment.id / f"seed{seed}"


def recipe_record(experiment: Experiment, runs_dir: Path, results_dir: Path = RESULTS_DIR) -> dict | None:
    """A grid cell at its model's recipe cell whose recipe runs are not all here: its record taken from the recipe's
    results file, if those runs trained exactly the cell's epochs, windowing and batch, whole, over the cell's seeds
    (the test score at their best validation epoch is then the cell's). None where the cell must be trained."""
    path = results_dir / f"{experiment.recipe_runs}.json"
    if (not experiment.recipe_runs or not path.exists()
            or all(run_dir(experiment, s, runs_dir).parent.name == experiment.recipe_runs for s in experiment.seeds)):
        return None
    recipe = json.loads(path.read_text())
    config, extra = recipe["config"], experiment.extra
    same_training = (config["train"]["epochs"] == experiment.max_epoch and config["train"]["batch_size"] == extra["batch_size"]
                     and (config["window"], config["context_padding"]) == (extra["window"], extra["padding"]))
    if not same_training or recipe["extra"].get("partial") or not set(experiment.seeds) <= set(recipe["seeds"]):
        return None
    index = [recipe["seeds"].index(s) for s in experiment.seeds]
    per_seed = {k: [v[i] for i in index] for k, v in recipe["extra"].items() if isinstance(v, list) and len(v) == len(recipe["seeds"])}
    commands = recipe["command"].removesuffix(" (recipe values as in config)").split("; ")
    return make_result(
        experiment.id, task=recipe["task"], dataset=recipe["dataset"], split=recipe["split"], model=recipe["model"],
        backbone=recipe["backbone"], config=config, metric=recipe["metric"], scores=[recipe["scores"][i] for i in index],
        seeds=experiment.seeds, paper=PAPER_ACT_GRID.get((experiment.dataset, experiment.model, extra["window"], extra["padding"])),
        extra={**per_seed, "partial": False, "max_epoch": experiment.max_epoch, **extra},
        command="; ".join(commands[i] for i in index) + f" (recipe values as in config; read from {path.name}, commit {recipe['commit']})")


def scored_epochs(config: dict, max_epoch: int | None) -> int | None:
    epochs = config["train"].get("epochs")
    return min(epochs, max_epoch) if epochs and max_epoch else max_epoch or epochs


def earlier_record(experiment: Experiment, results_dir: Path = RESULTS_DIR) -> dict | None:
    """The experiment's results file from an earlier collection, if it trained the recipe as it is now, scored over the
    same epochs, with the seeds of its whole runs only: those are not trained again when their run folders are gone,
    and stay in the file when other seeds are collected. None otherwise."""
    path = results_dir / f"{experiment.id}.json"
    if not path.exists() or experiment.limit_train or experiment.limit_eval:
        return None
    try:
        earlier = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise SystemExit(f"{path}: not a results file ({e}); move it away to collect the experiment afresh")
    recipe = load_recipe(find_recipe(experiment.task, experiment.model, experiment.dataset), list(experiment.overrides))
    same = (earlier.get("config") == run_config(recipe)
            and scored_epochs(earlier["config"], earlier["extra"].get("max_epoch")) == scored_epochs(earlier["config"], experiment.max_epoch))
    return whole_seeds_only(earlier) if same else None


def cut_run_seed(cut: dict) -> int | None:
    """The seed of a cut run listed in a results file's "partial"; files from before it was listed there: the folder's seedN."""
    if "seed" in cut:
        return cut["seed"]
    match = re.fullmatch(r"seed(\d+)", Path(cut.get("run", "")).name)  # no run named: the seed cannot be told
    return int(match[1]) if match else None


def whole_seeds_only(earlier: dict) -> dict | None:
    """`earlier` without the seeds of its cut runs (its "partial" list), which are trained again; None where no seed
    is whole, or where a cut run's seed cannot be told or it trained on a subset (then none of the file is the recipe's)."""
    cut_seeds = set()
    for cut in earlier["extra"].get("partial") or []:
        seed = cut_run_seed(cut)
        if seed is None or cut.get("limits"):
            return None
        cut_seeds.add(seed)
    if not cut_seeds:
        return earlier
    keep = [i for i, s in enumerate(earlier["seeds"]) if s not in cut_seeds]
    if not keep:
        return None
    count = len(earlier["seeds"])
    extra = {k: [v[i] for i in keep] if isinstance(v, list) and len(v) == count and k != "partial" else v
             for k, v in earlier["extra"].items()}
    scores = [earlier["scores"][i] for i in keep]
    mean, std = mean_std(scores)
    return {**earlier, "seeds": [earlier["seeds"][i] for i in keep], "scores": scores, "mean": mean, "std": std,
            "extra": {**extra, "partial": False}}


def seeds_to_run(experiment: Experiment, earlier: dict | None, runs_dir: Path) -> list[int]:
    """The experiment's seeds that its runs give: all but those an earlier collection holds whose run folders are gone."""
    return [s for s in experiment.seeds
            if not (earlier and s in earlier["seeds"] and not (run_dir(experiment, s, runs_dir) / "result.json").exists())]


def with_earlier_seeds(record: dict, earlier: dict) -> dict:
    """`record` (the runs on disk) joined with the seeds of an earlier collection of the same training that it lacks,
    in seed order; a seed in both is the runs' own. `earlier` must come from `earlier_record`."""
    if record["config"] != earlier["config"]:  # the runs on disk trained something else: the earlier seeds cannot join
        return record
    kept = [i for i, s in enumerate(earlier["seeds"]) if s not in record["seeds"]]
    if not kept:
        return record

    def per_seed(r: dict) -> dict:  # "partial" lists the cut runs, not one entry a seed, whatever its length
        return {k: v for k, v in r["extra"].items() if k != "partial" and isinstance(v, list) and len(v) == len(r["seeds"])}

    new, old = per_seed(record), per_seed(earlier)
    rows = [(s, record["scores"][i], {k: v[i] for k, v in new.items()}) for i, s in enumerate(record["seeds"])]
    rows += [(earlier["seeds"][i], earlier["scores"][i], {k: v[i] for k, v in old.items()}) for i in kept]
    rows.sort(key=lambda row: row[0])
    keys = [k for k in new if k in old]  # a measure the earlier runs did not record is dropped rather than left uneven
    seeds_read = ", ".join(str(earlier["seeds"][i]) for i in kept)
    return make_result(
        record["experiment"], task=record["task"], dataset=record["dataset"], split=record["split"], model=record["model"],
        backbone=record["backbone"], config=record["config"], metric=record["metric"], paper=record["paper"],
        seeds=[row[0] for row in rows], scores=[row[1] for row in rows],
        extra={**{k: v for k, v in record["extra"].items() if k not in new}, **{k: [row[2][k] for row in rows] for k in keys}},
        command=f"{record['command']}; seed(s) {seeds_read} read from {record['experiment']}.json as collected at commit {earlier['commit']}")


def run_one(experiment: Experiment, seed: int, runs_dir: Path, deadline: float | None, single_thread: bool, prune: bool) -> Path:
    out = run_dir(experiment, seed, runs_dir)
    if out.parent.name != experiment.id or finished(out):  # a recipe's run that a grid cell reads is not run again
        return out
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "turnformer.cli", "train", "--task", experiment.task, "--model", experiment.model,
               "--dataset", experiment.dataset, "--seed", str(seed), "--out", str(out)]
    command += [arg for o in experiment.overrides for arg in ("--set", o)]
    if experiment.limit_train:
        command += ["--limit-train", str(experiment.limit_train)]
    if experiment.limit_eval:
        command += ["--limit-eval", str(experiment.limit_eval)]
    if (out / "last").exists():
        command.append("--resume")
    if deadline is not None:
        command += ["--time-budget", str(max(60.0, deadline - time.time()))]
    env = dict(os.environ)
    if single_thread:
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    with open(out / "train.log", "a") as log:
        log.write(" ".join(command) + "\n")
        log.flush()
        code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
    status = "done" if code == 0 else f"FAILED ({code}): " + " | ".join((out / "train.log").read_text().strip().splitlines()[-3:])
    print(f"{experiment.id} seed {seed}: {status}", flush=True)
    if prune:  # finished or failed: its records stay, its checkpoints go
        for name in ("last", "best"):
            shutil.rmtree(out / name, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plan", action="append", required=True)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/erc"))
    parser.add_argument("--seeds", default="1,2,3", help="Seeds of DialogXL and its variants.")
    parser.add_argument("--baseline-seeds", default=None, help="Seeds of the baselines (default: --seeds).")
    parser.add_argument("--grid-seeds", default="1", help="Seeds of the act-grid cells (fewer than the main rows').")
    parser.add_argument("--swda-train", type=int, default=120, help="Training conversations of SwDA for figure4.")
    parser.add_argument("--deadline", type=float, default=None, help="Seconds from now by which every run stops.")
    parser.add_argument("--prune", action="store_true", help="Delete a run's checkpoints when it ends (keep its records).")
    parser.add_argument("--datasets", default=None, help="Keep only the experiments on these datasets (comma-separated).")
    parser.add_argument("--models", default=None, help="Keep only the experiments of these models (comma-separated).")
    parser.add_argument("--experiments", default=None, help="Keep only these experiment ids (comma-separated), "
                        "e.g. one cell of a grid: dialogue-act-dailydialog-lc-attention-w1-p2.")
    parser.add_argument("--seed-major", action="store_true",
                        help="Run every experiment's first seed before any second one, one-seed experiments last "
                             "(a cut run then still has every main row).")
    args = parser.parse_args()

    def seed_list(text: str) -> tuple[int, ...]:
        return tuple(int(s) for s in text.split(","))

    seeds = seed_list(args.seeds)
    baseline_seeds = seed_list(args.baseline_seeds) if args.baseline_seeds else seeds
    deadline = time.time() + args.deadline if args.deadline else None
    experiments = [e for name in args.plan
                   for e in plan(name, seeds, baseline_seeds, args.swda_train, seed_list(args.grid_seeds))]
    if args.datasets:
        experiments = [e for e in experiments if e.dataset in args.datasets.split(",")]
    if args.models:
        experiments = [e for e in experiments if e.model in args.models.split(",")]
    if args.experiments:
        wanted = args.experiments.split(",")
        unknown = sorted(set(wanted) - {e.id for e in experiments})
        if unknown:
            raise SystemExit(f"--experiments: not in the plans: {', '.join(unknown)}")
        experiments = [e for e in experiments if e.id in wanted]
    from_recipe_files = {e.id: record for e in experiments if (record := recipe_record(e, args.runs_dir))}
    earlier = {e.id: record for e in experiments if e.id not in from_recipe_files and (record := earlier_record(e))}
    jobs = [(e, s) for e in experiments if e.id not in from_recipe_files for s in seeds_to_run(e, earlier.get(e.id), args.runs_dir)]
    # Longest first (DailyDialog, SwDA), so that the pool does not end waiting on one long run.
    weight = {"dailydialog": 3, "swda": 2}
    # --seed-major: every experiment's first seed before any second one, experiments of one seed (ablations) last
    jobs.sort(key=lambda job: ((len(job[0].seeds) == 1, job[0].seeds.index(job[1])) if args.seed_major else (0, 0),
                               -weight.get(job[0].dataset, 1), job[0].model != "concat-context"))
    print(f"{len(jobs)} runs, {args.workers} at a time", flush=True)
    with ThreadPoolExecutor(args.workers) as pool:
        list(pool.map(lambda job: run_one(*job, args.runs_dir, deadline, args.workers > 1, args.prune), jobs))

    sweep = {}
    for e in experiments:
        if e.id in from_recipe_files:
            record = from_recipe_files[e.id]
            print(f"{e.id}: {record['mean']:.2f} ± {record['std']:.2f} over seeds {record['seeds']}, from the recipe's results"
                  f" -> {write_result(record)}", flush=True)
            continue
        runs = [run_dir(e, s, args.runs_dir) for s in seeds_to_run(e, earlier.get(e.id), args.runs_dir)]
        # a run without result.json, or cut before its first epoch ended, holds no score: the others are still collected
        missing = [str(r) for r in runs if finished_epochs(r) == 0]
        if missing:
            print(f"{e.id}: not collected, runs without a finished epoch: {', '.join(missing)}", flush=True)
            continue
        if not runs:
            print(f"{e.id}: seeds {list(e.seeds)} already collected in {RESULTS_DIR / e.id}.json", flush=True)
            continue
        record = collect(e.id, runs, allow_partial=True, extra=e.extra, max_epoch=e.max_epoch)
        if e.id in earlier:
            record = with_earlier_seeds(record, earlier[e.id])
        if "window" in e.extra:  # a cell of the W x P grid: the paper's number for that cell, if it ran it
            record["paper"] = PAPER_ACT_GRID.get((e.dataset, e.model, e.extra["window"], e.extra["padding"]))
        if e.extra.get("mem_len") == 0:  # DialogXL without memory (each utterance alone) is not the paper's model
            record["paper"] = None
        if e.id.startswith("lr-"):
            sweep.setdefault(e.model, {}).setdefault(e.extra["lr"], {})[e.dataset] = record["extra"]["validation"][0]
            continue
        print(f"{e.id}: {record['mean']:.2f} ± {record['std']:.2f} over seeds {record['seeds']} -> {write_result(record)}", flush=True)
    if sweep:
        write_sweep(sweep)


def write_sweep(sweep: dict) -> None:
    """erc-lr-sweep-MODEL.json: validation score of every (rate, dataset); the rate with the best mean."""
    for model, rates in sweep.items():
        mean = {lr: sum(scores.values()) / len(scores) for lr, scores in rates.items()}
        chosen = max(mean, key=mean.get)
        record = make_result(
            f"erc-lr-sweep-{model}", task="erc", dataset="meld+emorynlp", split="validation", model=model,
            metric="weighted_f1_at_chosen_lr", scores=list(rates[chosen].values()), seeds=[1] * len(rates[chosen]),
            backbone="all-MiniLM-L6-v2",
            extra={"chosen_lr": chosen, "validation": rates, "mean_by_lr": mean,
                   "selection": "best mean validation weighted F1 over MELD and EmoryNLP (one seed each)"},
        )
        print(f"{model}: learning rate {chosen} chosen on validation -> {write_result(record)}", flush=True)


if __name__ == "__main__":
    main()
