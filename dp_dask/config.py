"""Job configs: one YAML file naming data, schema, method, privacy, output, cluster and ledger.

``dp-dask run job.yaml [options of dp-dask synth]`` runs the fit and the sampling of ``synth``
from it; options given after the file override it. The config is turned into ``synth``'s own
command line, so every value is checked by the same rules as the option it stands for
(``dp_dask.checks``) and there is one set of defaults: a key left out takes the option's default.
pydantic checks the structure: unknown keys, wrong types and missing required keys are errors
naming the key (docs/config.md).

In string values, ``${VAR}`` is replaced by the environment variable VAR (an error if it is
unset) and ``${VAR:-fallback}`` by VAR or, if unset or empty, the fallback. Relative local paths
(data, a schema file, out, summary, the ledger) are relative to the config file's directory, so
a config works from any working directory.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dp_dask.io import is_url
from dp_dask.schema import BUILTIN_SCHEMAS


class ConfigError(ValueError):
    """A job config that cannot be run; the message names the file and the key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Privacy(_Section):
    epsilon: float  # required: a scheduled release states its budget
    delta: float | None = None
    accountant: str | None = None
    mechanism: str | None = None
    within_attribute: str | None = None
    noise_sampler: str | None = None
    noise_seed: int | None = None


class Output(_Section):
    out: str
    rows: int | None = None
    seed: int | None = None
    partition_rows: int | None = None
    summary: str | None = None


class Cluster(_Section):
    kind: str | None = None
    address: str | None = None
    workers: int | None = None
    memory_limit: str | int | float | None = None  # "4GiB", bytes, or a fraction of RAM
    options: dict[str, Any] | None = None  # keyword arguments of the backend's cluster class


class LedgerSection(_Section):
    path: str | None = None
    dataset_name: str | None = None
    run_id: str | None = None
    budget_epsilon: float | None = None
    force: bool = False


class JobConfig(_Section):
    version: Literal[1] = 1
    data: str
    schema_: str = Field(alias="schema")
    method: str | None = None
    storage_options: dict[str, Any] | None = None  # fsspec options of URL inputs
    privacy: Privacy
    output: Output
    cluster: Cluster = Cluster()
    ledger: LedgerSection = LedgerSection()


# config key -> option of dp-dask synth
OPTIONS = {
    "data": "--data", "schema": "--schema", "method": "--method",
    "storage_options": "--storage-options",
    **{f"privacy.{key}": f"--{key.replace('_', '-')}" for key in Privacy.model_fields},
    **{f"output.{key}": f"--{key.replace('_', '-')}" for key in Output.model_fields},
    "cluster.kind": "--cluster", "cluster.address": "--scheduler",
    "cluster.workers": "--workers", "cluster.memory_limit": "--memory-limit",
    "cluster.options": "--cluster-options",
    "ledger.path": "--ledger", "ledger.dataset_name": "--dataset-name",
    "ledger.run_id": "--run-id", "ledger.budget_epsilon": "--budget-epsilon",
    "ledger.force": "--force",
}
PATH_KEYS = ("data", "schema", "output.out", "output.summary", "ledger.path")
_VARIABLE = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def _expand(value: Any, key: str) -> Any:
    """``${VAR}`` and ``${VAR:-fallback}`` in every string; os.path.expandvars would keep an
    unset variable as literal text, and a job would then read or write a wrong path."""
    if isinstance(value, dict):
        return {k: _expand(v, f"{key}.{k}" if key else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, f"{key}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def variable(match: re.Match[str]) -> str:
        name, fallback = match.group(1), match.group(2)
        found = os.environ.get(name)
        if found is None or (found == "" and fallback is not None):
            if fallback is None:
                raise ConfigError(f"{key}: environment variable {name} is not set")
            return fallback
        return found

    return _VARIABLE.sub(variable, value)


def _flat(config: JobConfig) -> dict[str, Any]:
    """The values given in the file (not the defaults), by dotted key."""
    document = config.model_dump(by_alias=True, exclude_unset=True)
    flat: dict[str, Any] = {}
    for key, value in document.items():
        if key in ("privacy", "output", "cluster", "ledger"):
            flat |= {f"{key}.{k}": v for k, v in value.items()}
        elif key != "version":
            flat[key] = value
    return flat


def _resolve(key: str, value: str, base: Path) -> str:
    if key == "schema" and value in BUILTIN_SCHEMAS:
        return value
    if is_url(value):
        return value
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else base / path)


def _error_text(path: Path, error: ValidationError) -> str:
    problems = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"])
        if item["type"] == "extra_forbidden":
            problems.append(f"unknown key {key!r}")
        elif item["type"] == "missing":
            problems.append(f"{key}: required")
        else:
            problems.append(f"{key}: {item['msg']} (got {item.get('input')!r})")
    return f"config {path}: " + "; ".join(problems)


def load_config(path: str | Path) -> dict[str, Any]:
    """The values a job config gives, by dotted key, paths resolved (raises ConfigError)."""
    path = Path(path)
    try:
        document = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config {path} is unreadable: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config {path} is not valid YAML: "
                          f"{' '.join(str(exc).split())}") from None
    if not isinstance(document, dict):
        raise ConfigError(f"config {path}: expected a mapping of keys (data, schema, privacy, "
                          "output, ...), got " + type(document).__name__)
    try:
        config = JobConfig.model_validate(_expand(document, ""))
    except ConfigError as exc:
        raise ConfigError(f"config {path}: {exc}") from None
    except ValidationError as exc:
        raise ConfigError(_error_text(path, exc)) from None
    values = _flat(config)
    base = path.resolve().parent
    for key in PATH_KEYS:
        if values.get(key) is not None:
            values[key] = _resolve(key, values[key], base)
    data = values["data"]
    if not is_url(data) and not Path(data).exists():
        raise ConfigError(f"config {path}: data: {data} does not exist (relative paths are "
                          "relative to the config file)")
    return values


def _argument(value: Any) -> str:
    return json.dumps(value) if isinstance(value, dict) else str(value)


def config_argv(values: dict[str, Any]) -> list[str]:
    """``values`` (from :func:`load_config`) as options of ``dp-dask synth``."""
    argv: list[str] = []
    for key, value in values.items():
        if value is None or value is False:
            continue
        argv += [OPTIONS[key]] if value is True else [OPTIONS[key], _argument(value)]
    return argv


def check_values(values: dict[str, Any], parser: argparse.ArgumentParser,
                 path: str | Path) -> None:
    """Each value by the rule of its option (type and choices), the error naming the key."""
    actions = {option: action for action in parser._actions for option in action.option_strings}
    for key, value in values.items():
        action = actions[OPTIONS[key]]
        if value is None or isinstance(action, argparse._StoreTrueAction):
            continue
        text = _argument(value)
        try:
            converted = action.type(text) if action.type else text
        except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
            raise ConfigError(f"config {path}: {key}: {exc}") from None
        if action.choices is not None and converted not in action.choices:
            raise ConfigError(f"config {path}: {key}: {value!r} is not one of "
                              f"{', '.join(map(str, action.choices))}")
