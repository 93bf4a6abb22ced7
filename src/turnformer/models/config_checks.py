"""One check for every model config: sizes, lengths and counts are whole numbers, none negative, switches true or
false, and dropout a probability. Each config names the settings that cannot be 0 either. The error names the setting as a recipe
writes it (``model_config.mem_len``), so that a bad ``--set`` is caught where the model is built."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import ClassVar, Iterable


class ModelConfig:
    """`to_dict` and `from_dict` of a model's config dataclass; `from_dict` refuses a setting the config has not.
    `COMPUTE_ONLY` names the settings that change how the model computes (memory, speed) and not what: a checkpoint
    written under another value of them fits the model (a run can resume with a smaller chunk, say)."""

    COMPUTE_ONLY: ClassVar[frozenset[str]] = frozenset()

    def to_dict(self) -> dict:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: dict):
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"{', '.join('model_config.' + k for k in sorted(unknown))}: unknown {cls.__name__} settings; "
                             f"known: {', '.join(sorted(known))}")
        return cls(**data)

    @classmethod
    def from_recipe(cls, settings: dict, **derived):
        """The config of a recipe's [model_config] `settings` and of the settings the model takes from the data, the
        tokenizer or the backbone (`derived`, e.g. ``num_labels``): a recipe that sets one of those to another value is
        refused, naming it, where it would be ignored."""
        known = {f.name for f in fields(cls)} - set(derived)  # type: ignore[arg-type]
        unknown = sorted(set(settings) - known - set(derived))
        if unknown:
            raise ValueError(f"{', '.join('model_config.' + k for k in unknown)}: unknown {cls.__name__} settings; "
                             f"known: {', '.join(sorted(known))}")
        for key, value in derived.items():
            if key in settings and settings[key] != value:
                raise ValueError(f"model_config.{key} = {settings[key]!r}: the model takes it from its data, tokenizer or "
                                 f"backbone ({value!r} here); a recipe does not set it")
        return cls.from_dict({**settings, **derived})

    @classmethod
    def check_recipe(cls, settings: dict, **stand_ins):
        """`from_recipe` before the data, tokenizer or backbone that give the derived settings are read, with
        `stand_ins` for those (a recipe's own value of one is kept: it is checked against the real one when the model is
        built), so that a wrong setting is refused at once, not after the data is read; returns that config."""
        return cls.from_recipe(settings, **{key: settings.get(key, value) for key, value in stand_ins.items()})


def check_config(config, positive: Iterable[str] = ()) -> None:
    """Raise ValueError naming the first whole-number setting that is not one or is below 0 (below 1 for `positive`),
    a true-or-false setting that is neither, or a dropout outside [0, 1)."""
    positive = set(positive)
    for f in fields(config):
        value = getattr(config, f.name)
        if f.type in ("int", int) and (not isinstance(value, int) or isinstance(value, bool)):
            raise ValueError(f"model_config.{f.name} = {value!r}: expected a whole number")
        if f.type in ("bool", bool) and not isinstance(value, bool):
            raise ValueError(f"model_config.{f.name} = {value!r}: expected true or false")
        parts = value if isinstance(value, tuple | list) else (value,)
        whole = [v for v in parts if isinstance(v, int) and not isinstance(v, bool)]
        least = 1 if f.name in positive else 0
        if whole and min(whole) < least:
            raise ValueError(f"model_config.{f.name} = {value!r}: must be {least} or more")
    dropout = getattr(config, "dropout", 0.0)
    if not isinstance(dropout, int | float) or isinstance(dropout, bool) or not 0 <= dropout < 1:
        raise ValueError(f"model_config.dropout = {dropout!r}: must be at least 0 and below 1")
