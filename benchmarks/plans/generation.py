"""Response generation: the DRA and PHAED papers' experiments (recipes generation-dailydialog-MODEL).

- ``generation``: the response generators on DailyDialog: Transformer, Transformer+DRA, DialogBERT-style with and
  without DRA, PHAED and the GPT-2-style decoder over ``--seeds``; PHAED's four ablations and its c_max sweep
  (1..5, 10 context turns) with the first seed. Test perplexity at the best validation perplexity, with BLEU and
  Distinct of greedy responses; and PHAED with every part but its structure built as the Transformer's
  (``BUILT_AS_TRANSFORMER``), the first seed. A GPU job at these sizes.
- ``generation-cpu``: the same main rows and ablations at the size in ``GENERATION_CPU`` (first 1,000 training and
  100 validation / test conversations, width 128, 2 layers), which trains on the 2-core CPU, and PHAED's c_max
  sweep at that size (0..5, 10 context turns, the first seed); over ``--seeds``, PHAED with its turn embeddings
  counted from the conversation's start (``PHAED_CONVERSATION_TURNS``), and PHAED, the Transformer and the first
  again with turn embeddings started at zero (``TURNS_ZERO``), beside the Transformer and PHAED trained again.
- ``generation-smollm2``: SmolLM2-135M-Instruct fine-tuned, plain and with PHAED's speaker tokens and turn-relative
  attention (recipes generation-dailydialog-smollm2[-phaed]) over ``--seeds``: a GPU job (an epoch is 76K instances).
- ``generation-smollm2-cpu``: the same two fine-tuned on the ``generation-cpu`` rows' data (``GENERATION_CPU``'s first
  1,000 training and 100 validation / test conversations), one epoch, seed 1 (``SMOLLM2_CPU``): what the 2-core CPU
  fine-tunes (scoring the test instances alone takes about half an hour a run on two threads).
- ``generation-full-cpu``: the main rows at the recipes' size (width 256, 3 + 3 layers) on all of DailyDialog,
  trained for one epoch (``GENERATION_FULL_CPU``): the papers' claims measured on full data on the 2-core CPU, where
  an epoch takes 45-75 minutes of one core; over ``--grid-seeds`` (default: seed 1); and PHAED with its turn
  embeddings counted from the conversation's start and started at zero, together and each alone; PHAED with its
  attention layers as the Transformer's (``model_config.transformer_attention``); PHAED without a turn embedding on
  its response (``NO_RESPONSE_TURN``), that with its layers started as copies of one (``COPIED_LAYERS``), and that
  with its attention as the Transformer's too (``BUILT_AS_TRANSFORMER``), then without its memory (``c_max = 0``) or
  without its inter-query layer (``inter_layers = 0``), and without its memory with its decoder reading every query
  (``cross_attention = "queries"``); PHAED without its memory (``phaed-no-recurrence``), with its
  turn embeddings at unit scale, from zero, and none; the paper's other ablations (without speaker tokens, turn
  embeddings, turn-level attention); the Transformer and PHAED with one utterance of context for every
  response (``CONTEXT_ONE``), and PHAED there without its inter-query layer and memory, its attention drawn as the
  Transformer's (``AS_TRANSFORMER``), and that again without a turn embedding on the response, with its layers
  started as copies of one, and both (``AS_TRANSFORMER_REST``).
- ``generation-full-cpu-2epochs``: the main rows as in ``generation-full-cpu``, trained for two epochs (the schedule
  decays to zero over both): whether PHAED's distance to the Transformer and the GPT-2-style decoder, and DRA's to
  its two encoders, change with more training; over ``--grid-seeds``. And PHAED with its attention layers as the
  Transformer's (``model_config.transformer_attention``).
- ``generation-full-cpu-10epochs``: the main rows as in ``generation-full-cpu``, trained for the recipes' own ten
  epochs: the recipes themselves, on the 2-core CPU (seven to fifteen hours of one core a run, so a run goes on over
  several calls of the command with ``--deadline``), for the papers' directions at the recipes' size where no GPU is
  at hand; over ``--grid-seeds``.
"""

from __future__ import annotations

from .experiment import FIRST_SEED, GRID_SEEDS, SEEDS, Experiment, Option

TASK = "generation"
GENERATION_MAIN = ("transformer", "transformer-dra", "dialogbert", "dialogbert-dra", "phaed", "gpt2-scratch")
PHAED_ABLATIONS = ("phaed-no-speaker-tokens", "phaed-no-turn-emb", "phaed-no-turn-attn", "phaed-no-recurrence")
# PHAED's Figure 6: c_max previous responses; 10 context turns hold up to 5 of the responder's own
CMAX_OVERRIDES = ("data.max_context_turns=10",)
# What trains on the 2-core CPU in about 5 minutes a run: the first 1,000 training conversations, the first 100
# of validation and test, width 128 and 2 layers (the GPT-2-style decoder 4, as deep as encoder + decoder).
GENERATION_CPU = {"train": 1000, "eval": 100, "settings": {
    "model_config.d_model": 128, "model_config.heads": 4, "model_config.layers": 2, "model_config.ff": 512,
    "train.epochs": 2, "train.warmup_steps": 50, "train.lr": "1e-3", "train.batch_size": 32}}

# PHAED's aligned turns counted from the conversation's start (the paper's TE(t)); DailyDialog's longest conversation
# has 35 utterances, so a speaker's count stays under 20
PHAED_CONVERSATION_TURNS = ("model_config.turn_count=conversation", "model_config.max_turns=20")
# turn embeddings drawn at zero instead of the inputs' unit scale: the model starts as without them
TURNS_ZERO = ("model_config.turn_init_std=0.0",)
# PHAED's attention layers drawn and regularised as the Transformer's (Xavier-uniform input projections, zero biases,
# dropout on the attention probabilities): whether those differences, not the paper's, are part of its distance
TRANSFORMER_ATTENTION = ("model_config.transformer_attention=true",)
# one utterance of context for every response: no earlier query and no earlier response, so PHAED's hierarchy, its
# query-only cross-attention and its memory have nothing to do; whether it is still behind the Transformer there
CONTEXT_ONE = ("data.max_context_turns=1",)
# PHAED built as the Transformer is where one utterance is the context: no inter-query layer, no memory, attention drawn
# as the Transformer's; what is left of PHAED is its response's turn embedding and its layers drawn one by one (the
# Transformer's start as copies of one)
AS_TRANSFORMER = ("model_config.inter_layers=0", "model_config.c_max=0", *TRANSFORMER_ATTENTION)
# no turn embedding on the response's tokens (the Transformer's decoder input has none; the context's tokens keep theirs)
NO_RESPONSE_TURN = ("model_config.response_turn_embedding=false",)
# each stack's layers started as copies of its first (as the Transformer's are)
COPIED_LAYERS = ("model_config.copied_layers=true",)
# PHAED's structure at work and every other part built as the Transformer's: attention drawn and regularised as its, no
# turn embedding on the response, layers started as copies of one
BUILT_AS_TRANSFORMER = (*TRANSFORMER_ATTENTION, *NO_RESPONSE_TURN, *COPIED_LAYERS)
# what is left between AS_TRANSFORMER and the Transformer, each alone and both
AS_TRANSFORMER_REST = {"no-response-turn": NO_RESPONSE_TURN, "copied-layers": COPIED_LAYERS,
                       "no-response-turn-copied-layers": (*NO_RESPONSE_TURN, *COPIED_LAYERS)}

# SmolLM2 on the CPU: GENERATION_CPU's conversations, the recipes' optimiser (AdamW at 5e-5, batches of 32), one epoch
# of 200 updates (so 20 warm-up steps, not the recipes' 200)
SMOLLM2_CPU = {"train": GENERATION_CPU["train"], "eval": GENERATION_CPU["eval"],
               "settings": {"train.epochs": 1, "train.warmup_steps": 20}}

# The recipes' sizes and all the data, one epoch (the linear schedule decays to zero over it): what trains on the
# 2-core CPU, two runs at a time, in one to two hours each
GENERATION_FULL_CPU = {"train.epochs": 1}
# the same, two epochs: two to four hours of one core a run
GENERATION_FULL_CPU_2EPOCHS = {"train.epochs": 2}
# the recipes' own ten epochs, written out so that the results files say it
GENERATION_FULL_CPU_10EPOCHS = {"train.epochs": 10}
FULL_CPU_MODELS = ("transformer", "phaed", "gpt2-scratch", "transformer-dra", "dialogbert", "dialogbert-dra")


def cpu_overrides(model: str) -> tuple[str, ...]:
    """GENERATION_CPU's settings; the decoder-only model gets as many layers as encoder and decoder together."""
    settings = {**GENERATION_CPU["settings"]}
    if model == "gpt2-scratch":
        settings["model_config.layers"] *= 2
    return tuple(f"{k}={v}" for k, v in settings.items())


def main_rows_seeds(model: str) -> Option:
    """The main rows over --seeds, the ablations with the first seed."""
    return SEEDS if model in GENERATION_MAIN else FIRST_SEED


PLANS: dict[str, list[Experiment]] = {
    # DRA's Table 1 and PHAED's Tables 2 and 4 rows on DailyDialog, at the recipes' sizes (a GPU job)
    "generation": [
        *(Experiment(f"{TASK}-dailydialog-{model}", model, "dailydialog", main_rows_seeds(model), task=TASK)
          for model in (*GENERATION_MAIN, *PHAED_ABLATIONS)),
        *(Experiment(f"{TASK}-dailydialog-phaed-cmax{c}", "phaed", "dailydialog", FIRST_SEED,
                     (f"model_config.c_max={c}", *CMAX_OVERRIDES), task=TASK, extra={"c_max": c})
          for c in range(1, 6)),
        # PHAED with every difference from the Transformer that is not the paper's structure taken out (its attention's
        # draw, the response's turn embedding, its layers drawn one by one: docs/generation.md, one utterance of context)
        Experiment(f"{TASK}-dailydialog-phaed-built-as-transformer", "phaed", "dailydialog", FIRST_SEED,
                   BUILT_AS_TRANSFORMER, task=TASK)],
    # the same rows at a size that trains on the 2-core CPU; c_max 0 (no recurrence) to 5
    "generation-cpu": [
        *(Experiment(f"{TASK}-dailydialog-{model}-cpu", model, "dailydialog", main_rows_seeds(model), cpu_overrides(model),
                     limit_train=GENERATION_CPU["train"], limit_eval=GENERATION_CPU["eval"], task=TASK,
                     extra={"scale": GENERATION_CPU})
          for model in (*GENERATION_MAIN, *PHAED_ABLATIONS)),
        # PHAED with its turn embeddings counted from the conversation's start, as the paper's TE(t) (the recipe counts
        # back from the response; `turnformer.models.phaed`), and turn embeddings started at zero (`turn_init_std`),
        # for PHAED both ways and for the Transformer alike
        *(Experiment(f"{TASK}-dailydialog-{name}-cpu", model, "dailydialog", SEEDS, (*cpu_overrides(model), *settings),
                     limit_train=GENERATION_CPU["train"], limit_eval=GENERATION_CPU["eval"], task=TASK,
                     extra={"scale": GENERATION_CPU})
          for name, model, settings in (
              ("phaed-conversation-turns", "phaed", PHAED_CONVERSATION_TURNS),
              ("phaed-turns-zero", "phaed", TURNS_ZERO),
              ("transformer-turns-zero", "transformer", TURNS_ZERO),
              ("phaed-conversation-turns-zero", "phaed", (*PHAED_CONVERSATION_TURNS, *TURNS_ZERO)),
              # the two recipes as they are, trained again beside these (the main rows above come from older code, which
              # scored them lower: docs/generation.md)
              ("transformer-rerun", "transformer", ()), ("phaed-rerun", "phaed", ()))),
        *(Experiment(f"{TASK}-dailydialog-phaed-cmax{c}-cpu", "phaed", "dailydialog", FIRST_SEED,
                     (*cpu_overrides("phaed"), f"model_config.c_max={c}", *CMAX_OVERRIDES),
                     limit_train=GENERATION_CPU["train"], limit_eval=GENERATION_CPU["eval"], task=TASK,
                     extra={"scale": GENERATION_CPU, "c_max": c, "max_context_turns": 10})
          for c in range(6))],
    # the pretrained decoder fine-tuned, plain and with PHAED's two ideas (a GPU job)
    "generation-smollm2": [Experiment(f"{TASK}-dailydialog-{model}", model, "dailydialog", SEEDS, task=TASK)
                           for model in ("smollm2", "smollm2-phaed")],
    # the pretrained decoder fine-tuned on the CPU size's conversations
    "generation-smollm2-cpu": [
        Experiment(f"{TASK}-dailydialog-{model}-cpu", model, "dailydialog", FIRST_SEED,
                   tuple(f"{k}={v}" for k, v in SMOLLM2_CPU["settings"].items()), limit_train=SMOLLM2_CPU["train"],
                   limit_eval=SMOLLM2_CPU["eval"], task=TASK, extra={"scale": SMOLLM2_CPU})
        for model in ("smollm2", "smollm2-phaed")],
    # the main rows at the recipes' size on all the data, one epoch: the papers' directions on full data on the CPU
    "generation-full-cpu": [
        Experiment(f"{TASK}-dailydialog-{model}-full-cpu", model, "dailydialog", GRID_SEEDS,
                   tuple(f"{k}={v}" for k, v in GENERATION_FULL_CPU.items()), task=TASK, extra={"scale": GENERATION_FULL_CPU})
        for model in FULL_CPU_MODELS] + [
        # PHAED with its turn embeddings counted from the conversation's start and started at zero (the best PHAED at
        # the CPU size), and each of the two changes alone
        Experiment(f"{TASK}-dailydialog-{name}-full-cpu", "phaed", "dailydialog", GRID_SEEDS,
                   (*(f"{k}={v}" for k, v in GENERATION_FULL_CPU.items()), *settings),
                   task=TASK, extra={"scale": GENERATION_FULL_CPU})
        for name, settings in (("phaed-conversation-turns-zero", (*PHAED_CONVERSATION_TURNS, *TURNS_ZERO)),
                               ("phaed-conversation-turns", PHAED_CONVERSATION_TURNS),
                               ("phaed-turns-zero", TURNS_ZERO),
                               ("phaed-transformer-attention", TRANSFORMER_ATTENTION),
                               ("phaed-no-response-turn", NO_RESPONSE_TURN),
                               ("phaed-no-response-turn-copied-layers", (*NO_RESPONSE_TURN, *COPIED_LAYERS)),
                               ("phaed-built-as-transformer", BUILT_AS_TRANSFORMER),
                               # and each of its two structures alone: which of them keeps it behind on the whole context
                               ("phaed-built-as-transformer-no-recurrence", (*BUILT_AS_TRANSFORMER, "model_config.c_max=0")),
                               ("phaed-built-as-transformer-no-inter", (*BUILT_AS_TRANSFORMER, "model_config.inter_layers=0")),
                               # without its memory, its decoder reading every query, as the Transformer's reads every
                               # context token: whether the query-only reading is what keeps it behind
                               ("phaed-built-as-transformer-no-recurrence-queries",
                                (*BUILT_AS_TRANSFORMER, "model_config.c_max=0", "model_config.cross_attention=queries")))] + [
        # without the memory of earlier responses (c_max = 0, the paper's ablation), with the turn embeddings at unit
        # scale, from zero, and none: whether what the zero-started turn embeddings, and the ablation without them,
        # cost is the memory (docs/generation.md)
        Experiment(f"{TASK}-dailydialog-{name}-full-cpu", "phaed-no-recurrence", "dailydialog", GRID_SEEDS,
                   (*(f"{k}={v}" for k, v in GENERATION_FULL_CPU.items()), *settings),
                   task=TASK, extra={"scale": GENERATION_FULL_CPU})
        for name, settings in (("phaed-no-recurrence", ()), ("phaed-no-recurrence-turns-zero", TURNS_ZERO),
                               ("phaed-no-recurrence-no-turn-emb", ("model_config.turn_embeddings=false",)))] + [
        # the paper's other ablations (its Table 4): without the speaker tokens, the turn embeddings, the turn-level
        # relative attention
        Experiment(f"{TASK}-dailydialog-{model}-full-cpu", model, "dailydialog", GRID_SEEDS,
                   tuple(f"{k}={v}" for k, v in GENERATION_FULL_CPU.items()), task=TASK, extra={"scale": GENERATION_FULL_CPU})
        for model in ("phaed-no-speaker-tokens", "phaed-no-turn-emb", "phaed-no-turn-attn")] + [
        # every response with one utterance of context, the Transformer and PHAED: PHAED's distance where its structure
        # has nothing to do
        Experiment(f"{TASK}-dailydialog-{model}-context1-full-cpu", model, "dailydialog", GRID_SEEDS,
                   (*(f"{k}={v}" for k, v in GENERATION_FULL_CPU.items()), *CONTEXT_ONE),
                   task=TASK, extra={"scale": GENERATION_FULL_CPU, "max_context_turns": 1})
        for model in ("transformer", "phaed")] + [
        Experiment(f"{TASK}-dailydialog-phaed-as-transformer{name}-context1-full-cpu", "phaed", "dailydialog", GRID_SEEDS,
                   (*(f"{k}={v}" for k, v in GENERATION_FULL_CPU.items()), *CONTEXT_ONE, *AS_TRANSFORMER, *settings),
                   task=TASK, extra={"scale": GENERATION_FULL_CPU, "max_context_turns": 1})
        for name, settings in (("", ()), *((f"-{rest}", more) for rest, more in AS_TRANSFORMER_REST.items()))],
    # the same, two epochs: whether the papers' directions change with more training
    "generation-full-cpu-2epochs": [
        Experiment(f"{TASK}-dailydialog-{model}-full-cpu-2epochs", model, "dailydialog", GRID_SEEDS,
                   tuple(f"{k}={v}" for k, v in GENERATION_FULL_CPU_2EPOCHS.items()), task=TASK,
                   extra={"scale": GENERATION_FULL_CPU_2EPOCHS})
        for model in FULL_CPU_MODELS] + [
        Experiment(f"{TASK}-dailydialog-phaed-transformer-attention-full-cpu-2epochs", "phaed", "dailydialog", GRID_SEEDS,
                   (*(f"{k}={v}" for k, v in GENERATION_FULL_CPU_2EPOCHS.items()), *TRANSFORMER_ATTENTION),
                   task=TASK, extra={"scale": GENERATION_FULL_CPU_2EPOCHS})],
    # the recipes themselves (ten epochs) on all the data: the papers' directions at the recipes' size on the CPU
    "generation-full-cpu-10epochs": [
        Experiment(f"{TASK}-dailydialog-{model}-full-cpu-10epochs", model, "dailydialog", GRID_SEEDS,
                   tuple(f"{k}={v}" for k, v in GENERATION_FULL_CPU_10EPOCHS.items()), task=TASK,
                   extra={"scale": GENERATION_FULL_CPU_10EPOCHS})
        for model in FULL_CPU_MODELS],
}
