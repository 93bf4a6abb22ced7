"""Emotion recognition: the DialogXL paper's experiments, and what we added to them (recipes erc-DATASET-MODEL).

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
- ``concat-cpu``: the concatenated-context baseline on MELD in what a CPU affords (``CONCAT_CPU``): its backbone's
  lower half frozen (3 of all-MiniLM-L6-v2's 6 layers), or its history cut to 128 tokens, or both, over
  ``--baseline-seeds``: what each costs in score against the recipe (512 tokens, every layer trained).
- ``mpnet-cpu``: DialogXL with the paper's attention and with ``memory_grad`` on all-mpnet-base-v2 (``MPNET_CPU``: the rate
  the GPU sweep chose, bf16 mixed precision as on the GPU), MELD and EmoryNLP, over ``--seeds``: the rows of
  ``benchmarks/gpu_mpnet.sh paper-attention memory-grad`` where a 2-core CPU trains them (one-pass DialogXL on this
  backbone: about 20 minutes a MELD epoch on one thread in float32, 1.7 times faster in bf16 on a CPU with bfloat16
  instructions, ``erc-one-pass-speed-mpnet[-bf16].json``, and about 7 times slower in bf16 on one without them,
  ``erc-one-pass-speed-bf16-emulated.json``, where the training warns of it); resumable, a run at a time per core.
- ``mpnet-cpu-dailydialog``: DialogXL with the memory bias on all-mpnet-base-v2, DailyDialog, over ``--seeds``: the rows of
  ``benchmarks/gpu_mpnet.sh dailydialog`` on the CPU (2 epochs, bf16, chunks of 384 tokens). Slow there: on a 2-core CPU (two threads, beside
  a one-thread job) a batch of 16 conversations takes 14 s, about 2.7 hours an epoch of 695 batches (21.8 s while
  batches were grouped by turns).
- ``table3``: the five ablations of DialogXL on MELD.
- ``table4``: DialogXL-emb (speaker-role embeddings instead of speaker/listener heads) on MELD and DailyDialog.
- ``positions``: DialogXL on MELD with positions restarting in every utterance (the BERT-type
  backbone's alternative to numbering tokens through the conversation).
- ``figure4``: DialogXL on SwDA acts, memory length 100..1000, on a documented subset of the
  training conversations (``--swda-train``, whole validation and test sets), one seed.
- ``figure4-cpu``: the same sweep at what the 2-core CPU trains (``FIGURE4_CPU``: memory 100, 300, 500, 700 and 1000, and 0, each
  utterance alone; the first 30 training conversations and the first 8 of validation and test, 2 epochs, one
  conversation a batch), with the memory-bias variant (recipe erc-swda-dialogxl-memory-bias), one seed.
"""

from __future__ import annotations

from .experiment import BASELINE_SEEDS, FIRST_BASELINE_SEED, FIRST_SEED, SEEDS, SWDA_TRAIN, Experiment, Option

DATASETS = ("meld", "emorynlp", "dailydialog")
LEARNING_RATES = ("2e-5", "5e-5", "1e-4")
ABLATIONS = ("no-speaker", "no-listener", "no-speaker-listener", "no-local", "no-global")
MEMORY_LENGTHS = tuple(range(100, 1001, 100))
# figure4-cpu: what the 2-core CPU trains in about two hours, two runs at a time
FIGURE4_CPU = {"memory_lengths": (0, 100, 300, 500, 700, 1000), "train": 30, "eval": 8, "epochs": 2}  # 0: each utterance alone


def table2_seeds(dataset: str, model: str) -> Option:
    """DialogXL over --seeds, the concatenated context over --baseline-seeds; segment recurrence (far below the
    others) and the baselines on DailyDialog (nine times MELD's size) with the first baseline seed only."""
    if model == "dialogxl":
        return SEEDS
    return BASELINE_SEEDS if model == "concat-context" and dataset != "dailydialog" else FIRST_BASELINE_SEED


# the concatenated context re-encodes every history: 2 epochs on DailyDialog fit the time here
TABLE2_OVERRIDES = {("dailydialog", "concat-context"): ("train.epochs=2",)}
# concat-cpu: the settings that make the concatenated context cheaper, against its recipe (MELD, all-MiniLM-L6-v2).
# On MELD's training split the rows hold 925K tokens at 512, 917K at 256 and 770K at 128 (2% of rows cut at 256, 27%
# at 128): a shorter history saves little there; the frozen lower half saves its backward pass.
CONCAT_CPU = {"frozen-half": ("model_config.frozen_layers=3",), "len128": ("model_config.max_length=128",),
              "frozen-half-len128": ("model_config.frozen_layers=3", "model_config.max_length=128")}

# mpnet-cpu: all-mpnet-base-v2 at the rate its sweep chose on the GPU (erc-mpnet-lr-sweep-dialogxl-memory-bias.json), in
# the GPU runs' bf16 mixed precision
MPNET_CPU = ("backbone=all-mpnet-base-v2", "train.lr=2e-5", "train.mixed_precision=bf16")
MPNET_CPU_DAILYDIALOG = (*MPNET_CPU, "train.epochs=2", "train.save_every_steps=100", "model_config.chunk_tokens=384")

PLANS: dict[str, list[Experiment]] = {
    "lr-sweep": [
        Experiment(f"lr-{dataset}-{model}-{lr}", model, dataset, FIRST_SEED, (f"train.lr={lr}",), extra={"lr": lr})
        for model in ("dialogxl", "concat-context") for dataset in ("meld", "emorynlp") for lr in LEARNING_RATES],
    "table2": [
        Experiment(f"erc-{dataset}-{model}", model, dataset, table2_seeds(dataset, model), TABLE2_OVERRIDES.get((dataset, model), ()))
        for dataset in DATASETS for model in ("dialogxl", "concat-context", "segment-recurrence")],
    "erc-longer": [
        *(Experiment(f"erc-{dataset}-{model}-e10", model, dataset, SEEDS, ("train.epochs=10",), extra={"epochs": 10})
          for dataset in ("meld", "emorynlp") for model in ("dialogxl", "concat-context")),
        *(Experiment(f"erc-{dataset}-dialogxl-head-lr", "dialogxl", dataset, SEEDS, ("train.head_lr=1e-3",), extra={"head_lr": 1e-3})
          for dataset in ("meld", "emorynlp"))],
    # beside the memory bias, each utterance alone (no memory; the new layers at the same head_lr): what the context adds
    "memory-bias": [
        experiment for dataset in DATASETS for experiment in (
            Experiment(f"erc-{dataset}-dialogxl-memory-bias", "dialogxl-memory-bias", dataset, SEEDS),
            Experiment(f"erc-{dataset}-dialogxl-no-memory", "dialogxl", dataset, FIRST_SEED,
                       ("model_config.mem_len=0", "train.head_lr=1e-3"), extra={"mem_len": 0, "head_lr": 1e-3}))],
    # DialogXL's Table 2 and memory-bias rows again, trained and scored with the one-pass path, and memory_grad
    # (gradients into the history within a chunk; recipes erc-DATASET-dialogxl-memory-grad.toml)
    "one-pass": [
        Experiment(f"erc-{dataset}-{model}{suffix}", model, dataset, SEEDS) for dataset in ("meld", "emorynlp")
        for model, suffix in (("dialogxl", "-one-pass"), ("dialogxl-memory-bias", "-one-pass"), ("dialogxl-memory-grad", ""))],
    # BERT-type backbone: positions numbered per utterance instead of through the conversation
    "positions": [Experiment("erc-meld-dialogxl-utterance-positions", "dialogxl", "meld", FIRST_SEED,
                             ('model_config.positions="utterance"',), extra={"positions": "utterance"})],
    "concat-cpu": [Experiment(f"erc-meld-concat-context-{name}", "concat-context", "meld", BASELINE_SEEDS, settings,
                              extra={"settings": list(settings)}) for name, settings in CONCAT_CPU.items()],
    "mpnet-cpu": [Experiment(f"erc-{dataset}-{model}-mpnet", model, dataset, SEEDS, MPNET_CPU, extra={"settings": list(MPNET_CPU)})
                  for model in ("dialogxl", "dialogxl-memory-grad") for dataset in ("meld", "emorynlp")],
    # DailyDialog (10.5 times MELD's tokens an epoch on this backbone): the memory bias, 2 epochs as on the GPU
    # (`gpu_mpnet.sh dailydialog`); a checkpoint every 100 batches (a run takes many hours on a CPU), and chunks of
    # 256 tokens, which change no number: 512 would need about 23 GB a step
    "mpnet-cpu-dailydialog": [Experiment("erc-dailydialog-dialogxl-memory-bias-mpnet", "dialogxl-memory-bias", "dailydialog", SEEDS,
                                         MPNET_CPU_DAILYDIALOG, extra={"settings": list(MPNET_CPU_DAILYDIALOG)})],
    "table3": [Experiment(f"erc-meld-dialogxl-{ablation}", f"dialogxl-{ablation}", "meld", SEEDS) for ablation in ABLATIONS],
    "table4": [Experiment(f"erc-{dataset}-dialogxl-speaker-emb", "dialogxl-speaker-emb", dataset, SEEDS)
               for dataset in ("meld", "dailydialog")],
    # batches of 2 conversations: SwDA's ~170-utterance conversations keep a long graph in memory
    "figure4": [
        Experiment(f"erc-swda-dialogxl-mem{m}", "dialogxl", "swda", FIRST_SEED, (f"model_config.mem_len={m}", "train.batch_size=2"),
                   limit_train=SWDA_TRAIN, extra={"mem_len": m})
        for m in MEMORY_LENGTHS],
    # the memory-bias variant (the DialogXL that learns on this backbone), a smaller subset; one conversation a batch:
    # ~170 utterances a step, and 30 steps an epoch rather than 8
    "figure4-cpu": [
        Experiment(f"erc-swda-first{FIGURE4_CPU['train']}-dialogxl-memory-bias-mem{m}", "dialogxl-memory-bias", "swda", FIRST_SEED,
                   (f"model_config.mem_len={m}", "train.batch_size=1", f"train.epochs={FIGURE4_CPU['epochs']}"),
                   limit_train=FIGURE4_CPU["train"], limit_eval=FIGURE4_CPU["eval"], extra={"mem_len": m})
        for m in sorted(FIGURE4_CPU["memory_lengths"], reverse=True)],  # the longest first: the pool ends evenly
}
