"""Every task, by id, and every model id of every task: the one place the command line, the demo and a server look
them up. A task is a `turnformer.tasks.base.Task`; each declares its models as a dict, model id -> builder, beside
the code that builds them (a task's own functions, e.g. `turnformer.tasks.erc.load_trained`, build from it too).
"""

from __future__ import annotations

from pathlib import Path

from turnformer.dialogue import DialogueError
from turnformer.tasks import dialogue_act, erc, generation, response_selection
from turnformer.tasks.base import ModelBuilder, Task
from turnformer.tasks.common import checkpoint_paths, model_builder, run_results, run_task

TASKS: dict[str, Task] = {task.name: task for task in (erc.TASK, dialogue_act.TASK, response_selection.TASK, generation.TASK)}
# task id -> model id -> builder
MODELS: dict[str, dict[str, ModelBuilder]] = {name: dict(task.models) for name, task in TASKS.items()}
# the tasks whose run descriptions must name their labels
LABELLED = tuple(name for name, task in TASKS.items() if task.labelled)


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise DialogueError(f"task {name!r}: unknown task; the tasks: {', '.join(TASKS)}")
    return TASKS[name]


def get_model_builder(task: str, model_id: str) -> ModelBuilder:
    """The builder of `model_id` among the models of `task` (an unknown task or model is a DialogueError)."""
    title = get_task(task).title
    return model_builder(MODELS[task], model_id, title)


def tasks_taking(option: str) -> list[Task]:
    """The tasks whose evaluate or predict take the command-line option `option` ("beam", "online", ...)."""
    return [task for task in TASKS.values() if option in task.options]


def read_run(checkpoint: Path) -> tuple[Task, dict]:
    """The task of a run folder or checkpoint, and its run description, without loading the model."""
    _, run = checkpoint_paths(checkpoint, LABELLED)
    return get_task(run_task(run)), run


def load_trained(checkpoint: Path) -> tuple[Task, object, object, dict]:
    """(task, model in eval mode, its tokenizer or vocabulary, run description) of a run folder or checkpoint."""
    task, _ = read_run(checkpoint)
    return (task, *task.load_trained(checkpoint))


__all__ = ["LABELLED", "MODELS", "TASKS", "get_model_builder", "get_task", "load_trained", "read_run", "run_results",
           "tasks_taking"]
