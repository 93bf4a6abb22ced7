"""One training loop for every model of the project.

The loop knows nothing about tasks: a model says how to compute its loss on a batch and how to
predict on one (`TrainableModel`), an `eval_fn` turns the model into metric dicts for a split, and
`train` does the rest the same way for everybody:

- per epoch, the batches are shuffled by a generator seeded with (seed, epoch), so the order is
  reproducible and a run can resume at the exact next batch;
- AdamW (no weight decay on biases and normalisation layers), gradient clipping, gradient
  accumulation, a constant or linear learning-rate schedule with warm-up;
- `accelerate` places the model and batches on the device, runs `backward` (mixed precision) and
  distributed data parallel: `accelerate launch --multi_gpu --num_processes N script.py ...` runs the
  same script on N processes, each taking its shard `batches[rank::N]` of every epoch;
- after each epoch the validation and test metrics are computed; the history keeps both, and the
  result reports the test metrics *at the best validation epoch* (the papers' protocol);
- checkpoints (`out_dir/last/`, `out_dir/best/`) are written atomically and hold everything needed to
  continue: with `resume=True`, an interrupted run (Ctrl-C, `max_steps`, a time budget, a crash after
  a mid-epoch checkpoint) continues from the next batch and ends with the same weights as a run that
  was never interrupted.

Steps are optimizer updates (one update = `gradient_accumulation_steps` batches per process);
`max_steps`, `save_every_steps`, `log_every` and `warmup_steps` count them. Epoch numbers in the
history and in `best_epoch` start at 1.

The modules, one concern each: `config` (settings, result, what a model offers), `optim` (optimiser and schedule),
`randomness` (seeds, batch order, generator states), `signals` (Ctrl-C and SIGTERM), `files` (crash-safe writes, JSON),
`runs` (a run's folder), `state` (trainer_state.json: position, history, best epoch), `checkpoint` (the checkpoint
format), `evaluation` (predictions, metrics, progress) and `loop` (`train`).
"""

from turnformer.errors import CheckpointError
from turnformer.training.checkpoint import CHECKPOINT_FILES, LABEL_MAP_FILE, MODEL_FILE, load_checkpoint, read_checkpoint_config
from turnformer.training.config import TrainableModel, TrainConfig, TrainResult
from turnformer.training.evaluation import metric_text, predict_all, progress, reported_score
from turnformer.training.loop import train
from turnformer.training.optim import build_optimizer, build_scheduler
from turnformer.training.randomness import epoch_order, set_seed
from turnformer.training.runs import RUN_ENTRIES, replaced_run_folder
from turnformer.training.signals import Terminated

__all__ = [
    "CHECKPOINT_FILES", "CheckpointError", "LABEL_MAP_FILE", "MODEL_FILE", "RUN_ENTRIES", "TrainConfig", "TrainResult", "TrainableModel",
    "build_optimizer", "build_scheduler", "epoch_order", "load_checkpoint", "metric_text", "predict_all", "progress", "reported_score",
    "read_checkpoint_config", "replaced_run_folder", "set_seed", "Terminated", "train",
]
