"""Job configs: one YAML file naming a job's data, schema, privacy, output, cluster and ledger.

``dp-dask run job.yaml [options]`` runs the job the config names: ``job: synth`` (the default:
fit and sample, options of ``dp-dask synth``) or ``job: stats`` (per-column noisy histograms,
options of ``dp-dask stats``, its own keys in a ``stats:`` section); options given after the
file override it. The config is turned into that command's own command line, so every value is
checked by the same rules as the option it stands for (``dp_dask.checks``) and there is one set
of defaults: a key left out takes the option's default. pydantic checks the structure: unknown
keys, keys of the other job kind, wrong types and missing required keys are errors naming the
key (docs/config.md).

In string values, ``${VAR}`` is replaced by the environment variable VAR (an error if it is
unset) and ``${VAR:-fallback}`` by VAR or, if unset or empty, the fallback. Relative local paths
(data, a schema file, out, summary, the ledger, a stats network or public sample) are relative
to the config file's directory, so a config works from any working directory.
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

from dp_dask.data.io import is_url
from dp_dask.data.schema import BUILTIN_SCHEMAS


class ConfigError(ValueError):
    """A job config that cannot be run; the message names the file and the key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Privacy(_Section):
    """The privacy keys of every job."""

    epsilon: float  # required: a scheduled release states its budget
    noise_sampler: str | None = None
    noise_seed: int | None = None


class SynthPrivacy(Privacy):
    delta: float | None = None
    accountant: str | None = None
    workload: list[list[str] | str] | None = None  # marginals: the column groups that matter
    mechanism: str | None = None
    within_attribute: str | None = None


class Output(_Section):
    """The output keys of every job."""

    out: str
    summary: str | None = None


class SynthOutput(Output):
    rows: int | None = None
    seed: int | None = None
    partition_rows: int | None = None
    sampling_device: str | None = None
    decode: str | None = None


class Stats(_Section):
    """``dp-dask stats``' own options: the mechanism and Tabular-DDP's network source."""

    mechanism: str | None = None
    k: int | None = None
    network: str | None = None
    public_sample: str | None = None
    network_from_noisy_tables: float | None = None
    smoothing: float | None = None


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


class _Job(_Section):
    """The keys of every job."""

    version: Literal[1] = 1
    data: str
    schema_: str = Field(alias="schema")
    cluster: Cluster = Cluster()
    ledger: LedgerSection = LedgerSection()


class SynthJob(_Job):
    """``dp-dask synth``: fit and sample a synthetic release."""

    job: Literal["synth"] = "synth"
    method: str | None = None
    method_options: dict[str, Any] | None = None  # the method's own parameters
    storage_options: dict[str, Any] | None = None  # fsspec options of URL inputs
    privacy: SynthPrivacy
    output: SynthOutput


class StatsJob(_Job):
    """``dp-dask stats``: per-column noisy histograms (it reads local inputs only, so no
    storage_options)."""

    job: Literal["stats"]
    stats: Stats = Stats()
    privacy: Privacy
    output: Output


# a job config's ``job`` -> its model; the job is the dp-dask command it runs
JOBS: dict[str, type[_Job]] = {"synth": SynthJob, "stats": StatsJob}
SECTIONS = ("privacy", "output", "stats", "cluster", "ledger")


def _option(key: str) -> str:
    return f"--{key.replace('_', '-')}"


# config key -> option of the job's command (the same option wherever two jobs share a key)
OPTIONS = {
    "data": "--data", "schema": "--schema", "method": "--method",
    "method_options": "--method-options",
    "storage_options": "--storage-options",
    **{f"privacy.{key}": _option(key) for key in SynthPrivacy.model_fields},
    **{f"output.{key}": _option(key) for key in SynthOutput.model_fields},
    **{f"stats.{key}": _option(key) for key in Stats.model_fields},
    "cluster.kind": "--cluster", "cluster.address": "--scheduler",
    "cluster.workers": "--workers", "cluster.memory_limit": "--memory-limit",
    "cluster.options": "--cluster-options",
    "ledger.path": "--ledger", "ledger.dataset_name": "--dataset-name",
    "ledger.run_id": "--run-id", "ledger.budget_epsilon": "--budget-epsilon",
    "ledger.force": "--force",
}
PATH_KEYS = ("data", "schema", "output.out", "output.summary", "ledger.path", "stats.network",
             "stats.public_sample")
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


def _flat(config: _Job) -> dict[str, Any]:
    """The values given in the file (not the defaults), by dotted key."""
    document = config.model_dump(by_alias=True, exclude_unset=True)
    flat: dict[str, Any] = {}
    for key, value in document.items():
        if key in SECTIONS:
            flat |= {f"{key}.{k}": v for k, v in value.items()}
        elif key not in ("version", "job"):
            flat[key] = value
    return flat


def _keys(model: type[_Job]) -> set[str]:
    """The dotted keys a job's config may give."""
    keys = set()
    for name, field in model.model_fields.items():
        key = field.alias or name
        keys.add(key)
        if key in SECTIONS:
            keys |= {f"{key}.{k}" for k in field.annotation.model_fields}
    return keys


def _resolve(key: str, value: str, base: Path) -> str:
    if key == "schema" and value in BUILTIN_SCHEMAS:
        return value
    if is_url(value):
        return value
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else base / path)


def _error_text(path: Path, error: ValidationError, kind: str) -> str:
    problems = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"])
        if item["type"] == "extra_forbidden":
            others = [job for job, model in JOBS.items() if key in _keys(model)]
            problems.append(f"key {key!r} applies to {' and '.join(others)} jobs only, not to "
                            f"a {kind} job" if others else f"unknown key {key!r}")
        elif item["type"] == "missing":
            problems.append(f"{key}: required")
        else:
            problems.append(f"{key}: {item['msg']} (got {item.get('input')!r})")
    return f"config {path}: " + "; ".join(problems)


def load_config(path: str | Path) -> tuple[str, dict[str, Any]]:
    """The job a config names (the dp-dask command: synth unless ``job:`` says otherwise) and
    the values it gives, by dotted key, paths resolved (raises ConfigError)."""
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
        document = _expand(document, "")
    except ConfigError as exc:
        raise ConfigError(f"config {path}: {exc}") from None
    kind = document.get("job", "synth")
    if not isinstance(kind, str) or kind not in JOBS:
        raise ConfigError(f"config {path}: job: {kind!r} is not one of {', '.join(JOBS)}")
    try:
        config = JOBS[kind].model_validate(document)
    except ValidationError as exc:
        raise ConfigError(_error_text(path, exc, kind)) from None
    values = _flat(config)
    base = path.resolve().parent
    for key in PATH_KEYS:
        if values.get(key) is not None:
            values[key] = _resolve(key, values[key], base)
    data = values["data"]
    if not is_url(data) and not Path(data).exists():
        raise ConfigError(f"config {path}: data: {data} does not exist (relative paths are "
                          "relative to the config file)")
    return kind, values


def _argument(value: Any) -> str:
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def config_argv(values: dict[str, Any]) -> list[str]:
    """``values`` (from :func:`load_config`) as options of the job's command."""
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
    for options in _alternatives(parser):
        given = [key for key, value in values.items()
                 if value is not None and OPTIONS[key] in options]
        if len(given) > 1:
            raise ConfigError(f"config {path}: {', '.join(given)}: give one of them")


def _alternatives(parser: argparse.ArgumentParser) -> list[set[str]]:
    """The options of each mutually exclusive group (stats: the network sources)."""
    return [{option for action in group._group_actions for option in action.option_strings}
            for group in parser._mutually_exclusive_groups]


def _given(parser: argparse.ArgumentParser, overrides: list[str]) -> set[str]:
    """The options named on the command line, unique prefixes included, as argparse reads them."""
    options = [option for action in parser._actions for option in action.option_strings]
    given = set()
    for token in overrides:
        if token.startswith("--"):
            name = token.split("=", 1)[0]
            matches = [name] if name in options else [o for o in options if o.startswith(name)]
            given |= set(matches) if len(matches) == 1 else set()
    return given


def overridden(values: dict[str, Any], parser: argparse.ArgumentParser,
               overrides: list[str]) -> dict[str, Any]:
    """``values`` less the keys an override replaces: an override of one of a group of
    alternatives (``--public-sample`` against the config's ``stats.network``) wins over the
    config's choice in that group instead of clashing with it."""
    given = _given(parser, overrides)
    replaced = set().union(*(options - given for options in _alternatives(parser)
                             if options & given))
    return {key: value for key, value in values.items() if OPTIONS[key] not in replaced}
