"""The trained models a server holds: loaded once from the command line's checkpoints (never from a request), each
under a name that requests use, with what it can answer (`Task.serves`) and the lock that keeps two calls from
running on it at once: a torch module keeps state between calls (DialogXL's attention view switches it to eval mode
and back), and two threads in one model would only wait for each other's cores anyway."""

from __future__ import annotations

import math
import os
import re
import threading
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch

from turnformer.dialogue import Dialogue, DialogueError, Turn
from turnformer.tasks.base import ANNOTATE, ATTENTION, GENERATE, RANK, STREAM, Task
from turnformer.tasks.registry import load_trained, run_results

# What each ability lets a client do, as messages say it: "'ranker' cannot <this>".
ABILITIES = {
    STREAM: "annotate a conversation one utterance at a time", ANNOTATE: "label the utterances of a conversation",
    RANK: "rank candidate replies", GENERATE: "generate a reply", ATTENTION: "show what its attention heads read",
}
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class ModelBusy(Exception):
    """A call to a model for which as many calls wait as the server lets wait (503)."""


@dataclass(eq=False)
class LoadedModel:
    """A trained model as the server holds it. Every call into the model goes through one of its methods, under
    ``lock``."""

    name: str
    checkpoint: Path
    task: Task
    model: Any
    tokenizer: Any  # or a generator's word vocabulary
    run: dict
    lock: threading.Lock = field(default_factory=threading.Lock)
    max_waiting: int = 16  # calls that may wait for the lock (`turn`); the server sets its `Limits.max_waiting`
    waiting: int = 0
    counter: threading.Lock = field(default_factory=threading.Lock)  # guards `waiting`

    @property
    def serves(self) -> frozenset[str]:
        return self.task.serves(self.model)

    def info(self) -> dict:
        """What `GET /v1/models` says of it: task, model, labels, backbone, and the scores its training reported."""
        recipe = self.run["recipe"]
        return {
            "name": self.name, "task": self.task.name, "model": recipe["model"],
            "backbone": shown_backbone(recipe.get("backbone")),
            "dataset": recipe.get("dataset"), "label_kind": recipe.get("label_kind") if self.task.labelled else None,
            "labels": list(self.run.get("labels") or []), "serves": sorted(self.serves),
            "results": finite(run_results(self.checkpoint)),
        }

    def session(self) -> Any:
        with self.turn():
            return self.task.session(self.model, self.tokenizer, self.run)

    def add(self, session: Any, turn: Turn) -> dict:
        """The next utterance of a conversation, through its streaming `session` (made by `session()`). It waits its
        turn however many calls wait: refused after another model of the session took the utterance, it would leave the
        session's models with different histories."""
        with self.turn(queued=False):
            return session.add(turn.speaker, turn.text)

    @contextmanager
    def turn(self, queued: bool = True) -> Iterator[None]:
        """Hold the model's lock for one call. A `queued` call that finds `max_waiting` calls waiting already is
        refused (`ModelBusy`, a 503): a burst of calls to one model would otherwise take every worker thread."""
        with self.counter:
            if queued and self.waiting >= self.max_waiting:
                raise ModelBusy(f"model {self.name!r}: {self.waiting} calls wait for it already, the most this server "
                                "lets wait; try again shortly")
            self.waiting += 1
        try:
            self.lock.acquire()
        finally:
            with self.counter:
                self.waiting -= 1
        try:
            yield
        finally:
            self.lock.release()

    def session_bytes(self) -> int:
        """Bytes of the tensors one streaming session of this model holds once full (DialogXL's memory of `mem_len`
        tokens, a dialogue-act model's last P utterance vectors): measured on a session fed long utterances until
        what it holds stops growing."""
        session, held = self.session(), -1
        for turn in range(256):
            now = tensor_bytes(vars(session).values())
            if now == held:
                break
            held = now
            self.add(session, Turn(speaker=f"s{turn % 2}", text=" ".join(["word"] * 1000)))
        return held

    def annotate(self, dialogue: Dialogue) -> list[dict]:
        with self.turn():
            return self.task.annotate(self.model, self.tokenizer, self.run, [dialogue])[0]

    def rank(self, dialogue: Dialogue, candidates: Sequence[Turn | str], truncation: dict | None = None) -> list[float]:
        with self.turn():
            return self.task.rank(self.model, self.tokenizer, self.run, dialogue, candidates, truncation)

    def respond(self, dialogue: Dialogue, speaker: str | None, beam: int, truncation: dict | None = None) -> str:
        with self.turn():
            return self.task.respond(self.model, self.tokenizer, self.run, dialogue, speaker, beam, truncation)

    def attention(self, dialogue: Dialogue, utterance: int) -> dict:
        with self.turn():
            return self.task.attention(self.model, self.tokenizer, self.run, dialogue, utterance)


def tensor_bytes(value: Any, seen: set | None = None) -> int:
    """Bytes of the tensor storages `value` holds (in lists, tuples, deques, dicts and dataclasses; a storage shared
    by several tensors counted once; a module's parameters not counted)."""
    seen = set() if seen is None else seen
    if isinstance(value, torch.Tensor):
        storage = value.untyped_storage()
        if storage.data_ptr() in seen:
            return 0
        seen.add(storage.data_ptr())
        return storage.nbytes()
    if isinstance(value, dict):
        value = value.values()
    elif is_dataclass(value) and not isinstance(value, type):
        value = [getattr(value, f.name) for f in fields(value)]
    elif not isinstance(value, (list, tuple, deque, type({}.values()))):
        return 0
    return sum(tensor_bytes(v, seen) for v in value)


# What a session's history holds a character of text, at most: a Python string of characters beyond U+FFFF (emoji)
# takes 4 bytes each, its UTF-8 form, made once (by the tokenizer, by a JSON answer) and kept beside it, 4 more, and
# what else a turn keeps and the allocator holds up to 4 more: `python benchmarks/session_memory.py` measured 16.7 to
# 28.2 MiB (median 23.0) a session of 1,000 utterances of 2,000 emoji, 3.5 MiB of it the models' state, in a server of
# two streaming models (3.7 to 11.6 MiB, median 4.8, in ASCII), against an estimate of 29.5.
HISTORY_BYTES_PER_CHAR = 12


def session_footprint(models: dict[str, LoadedModel], limits) -> tuple[int, int] | None:
    """(the model state a full live conversation holds, measured; its history's bytes at most, estimated: per turn
    its text and speaker at `HISTORY_BYTES_PER_CHAR`, and about 1 KB of answers a model); None where no model streams."""
    streaming = [m for m in models.values() if STREAM in m.serves]
    if not streaming:
        return None
    state = sum(m.session_bytes() for m in streaming)
    per_turn = HISTORY_BYTES_PER_CHAR * (limits.max_text_chars + limits.max_name_chars) + 1024 * len(streaming)
    return state, limits.max_session_turns * per_turn


def physical_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def sessions_that_fit(models: dict[str, LoadedModel], limits, physical: int | None = None) -> int | None:
    """How many full live conversations fit in half of the machine's memory `physical` (bytes; None: this machine's),
    at least one; None where no model streams."""
    footprint = session_footprint(models, limits)
    if footprint is None:
        return None
    return max(1, int((physical or physical_memory()) / 2 // sum(footprint)))


def session_memory(models: dict[str, LoadedModel], limits, physical: int | None = None) -> tuple[str | None, str | None]:
    """(what a live conversation holds, a warning where `limits.max_sessions` of them could take more than half of
    the machine's memory `physical` (bytes; None: this machine's)); (None, None) where no model streams."""
    footprint = session_footprint(models, limits)
    if footprint is None:
        return None, None
    state, history = footprint
    per_session = state + history
    total = per_session * limits.max_sessions
    said = (f"a live conversation holds up to {per_session / 2**20:.1f} MiB ({state / 2**20:.1f} MiB of model state, "
            f"measured, and at most {history / 2**20:.1f} MiB for {limits.max_session_turns} turns of history): "
            f"{limits.max_sessions} conversations, up to {total / 2**30:.1f} GiB")
    physical = physical or physical_memory()
    if total <= physical / 2:
        return said, None
    fits = sessions_that_fit(models, limits, physical)
    return said, (f"--max-sessions {limits.max_sessions}: the live conversations could take {total / 2**30:.1f} GiB, "
                  f"more than half of this machine's {physical / 2**30:.1f} GiB; --max-sessions {fits} keeps them "
                  "under half")


def shown_backbone(backbone: str | None) -> str | None:
    """A backbone as `GET /v1/models` shows it: a local folder's name alone (its path is the server machine's, not
    the clients'), a hub name or a bundled one as it is."""
    if backbone is None or not Path(backbone).is_absolute():
        return backbone
    return Path(backbone).name


def finite(value: Any) -> Any:
    """`value` with every NaN or infinity (a score a run could not compute) as None: strict JSON has neither."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def parse_spec(spec: str) -> tuple[str | None, Path]:
    """``NAME=DIR`` or ``DIR`` (a folder whose own name has an "=" is taken whole where it exists)."""
    name, sep, path = spec.partition("=")
    if sep and not Path(spec).exists():
        if not NAME.fullmatch(name):
            raise DialogueError(f"--checkpoint {spec}: {name!r} is no model name (letters, digits, '_', '.' and '-', "
                                "starting with a letter or digit), and no folder is named so")
        if not path.strip():
            raise DialogueError(f"--checkpoint {spec}: no folder after {name}=; give NAME=RUN_DIR")
        return name, Path(path)
    return None, Path(spec)


def default_name(path: Path) -> str:
    """The run folder's name (that of the run above a best/ or last/ checkpoint), made fit for a URL; a link's own name,
    not its target's."""
    folder = Path(os.path.abspath(path))  # "." and ".." made names, links not followed
    if folder.name in ("best", "last") and (folder.parent / "run.json").exists():
        folder = folder.parent
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", folder.name).strip("-.") or "model"


def load_models(specs: Sequence[str]) -> dict[str, LoadedModel]:
    """Every checkpoint of the command line, loaded, by name (``NAME=DIR``, or the run folder's name; a name taken
    twice gets -2, -3...)."""
    if not specs:
        raise DialogueError("give at least one --checkpoint RUN_DIR")
    models: dict[str, LoadedModel] = {}
    for spec in specs:
        given, path = parse_spec(spec)
        if given is not None and given in models:
            raise DialogueError(f"--checkpoint {spec}: the name {given!r} is taken by {models[given].checkpoint}")
        name = given or default_name(path)
        base, n = name, 2
        while name in models:
            name, n = f"{base}-{n}", n + 1
        try:
            task, model, tokenizer, run = load_trained(path)
        except DialogueError as e:  # the spec as the user wrote it, NAME= included
            raise DialogueError(f"--checkpoint {spec}: {e}" if given is not None else str(e)) from None
        models[name] = LoadedModel(name, path, task, model, tokenizer, run)
    return models


def pick_models(models: dict[str, LoadedModel], names: Sequence[str] | None, ability: str, field_name: str) -> list[LoadedModel]:
    """The models a request names in `field_name` (None: every loaded model that can do `ability`); a name not
    loaded, or of a model that cannot do it, is a DialogueError naming the field."""
    if names is None:
        able = [m for m in models.values() if ability in m.serves]
        if not able:
            raise DialogueError(f"{field_name}: no loaded model can {ABILITIES[ability]} ({described(models)})")
        return able
    if not names:
        raise DialogueError(f"{field_name}: empty; name at least one model, or leave it out for all that can "
                            f"{ABILITIES[ability]}")
    chosen: list[LoadedModel] = []
    for i, name in enumerate(names):
        model = able_model(models, name, ability, f"{field_name}[{i}]")
        if all(model is not other for other in chosen):
            chosen.append(model)
    return chosen


def pick_model(models: dict[str, LoadedModel], name: str | None, ability: str) -> LoadedModel:
    """The one model a request names in ``model``, or, where it names none, the only one that can do `ability`."""
    if name is not None:
        return able_model(models, name, ability, "model")
    able = pick_models(models, None, ability, "model")
    if len(able) > 1:
        raise DialogueError(f"model: several loaded models can {ABILITIES[ability]} ({', '.join(m.name for m in able)}): "
                            "name one")
    return able[0]


def able_model(models: dict[str, LoadedModel], name: str, ability: str, where: str) -> LoadedModel:
    if name not in models:
        raise DialogueError(f"{where}: no model {name[:64]!r} is loaded ({described(models)})")
    if ability not in models[name].serves:
        able = ", ".join(m.name for m in models.values() if ability in m.serves) or "none"
        raise DialogueError(f"{where}: {name!r} ({models[name].task.name}) cannot {ABILITIES[ability]}; those that can: {able}")
    return models[name]


def described(models: dict[str, LoadedModel]) -> str:
    return "loaded: " + ", ".join(f"{m.name} ({m.task.name})" for m in models.values())
