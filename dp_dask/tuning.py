"""Tuned numbers as frozen config dataclasses (issue 55): a method or a pass takes its config as
an argument whose defaults are the shipped values; docs/tuning.md holds the measurements behind
each default, under the field's name."""

from __future__ import annotations

import math
from dataclasses import fields, is_dataclass
from typing import Any, TypeVar

Config = TypeVar("Config")


def check_fields(config: object, positive: tuple[str, ...] = ()) -> None:
    """Every field a number ≥ 0 (> 0 if named in ``positive``) of its default's kind (an int
    field takes only integers), else ValueError naming the field: called by each config's
    ``__post_init__``. A field of a string default is a choice its config checks."""
    for f in fields(config):
        value, default = getattr(config, f.name), f.default
        if isinstance(default, str) or is_dataclass(value):  # a choice; a nested config
            continue
        kind = int if isinstance(default, int) else (int, float)
        least = "> 0" if f.name in positive else ">= 0"
        if (isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value)
                or value < 0 or value == 0 and f.name in positive):
            raise ValueError(f"{type(config).__name__}.{f.name} must be a"
                             f"{'n integer' if kind is int else ' number'} {least}, not "
                             f"{value!r}")


def as_config(cls: type[Config], value: Config | dict[str, Any] | None) -> Config:
    """``value`` as a ``cls``: None for the defaults, a ``cls`` as is, or a dict of some of its
    fields (an unknown name is a ValueError naming the valid ones)."""
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    names = [f.name for f in fields(cls)]
    if not isinstance(value, dict):
        raise ValueError(f"config must be a {cls.__name__} or a dict of its fields "
                         f"({', '.join(names)}), not {value!r}")
    unknown = sorted(set(value) - set(names))
    if unknown:
        raise ValueError(f"{cls.__name__} has no field {unknown[0]!r}; its fields: "
                         f"{', '.join(names)}")
    return cls(**value)


def changed(config: object) -> dict[str, Any]:
    """The fields that differ from their defaults, for a release's record (empty: none); a
    nested config's as a dict of its own changed fields."""
    found: dict[str, Any] = {}
    for f in fields(config):
        value = getattr(config, f.name)
        if is_dataclass(value):
            if nested := changed(value):
                found[f.name] = nested
        elif value != f.default:
            found[f.name] = value
    return found
