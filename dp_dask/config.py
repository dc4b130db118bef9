"""Job specs, and the job configs (YAML) that fill them.

A job spec is everything one job runs with, one pydantic dataclass per job kind: ``dp-dask
synth`` (:class:`SynthSpec`), ``fit`` (:class:`FitSpec`), ``sample`` (:class:`SampleSpec`),
``stats`` (:class:`StatsSpec`) and ``demo`` (:class:`DemoSpec`), each :class:`JobSpec` (the
command, the cluster, logging) with the parts its command has (data, storage, noise, method,
ledger, sampling, condition, summary: the ``*Part`` classes, each declared once). The command's
``preflight`` and ``run`` read the spec, nothing else. Two ways fill it: the command line
(:meth:`JobSpec.of`, from argparse's Namespace) and a job config, ``dp-dask run job.yaml
[options]`` (:func:`config_spec`), whose options after the file win over it. There is one set
of rules and defaults, the command's options (``dp_dask.checks``' types, choices, argparse's
defaults that ``--help`` shows): a config's value is checked by the rule of its field's option,
and a key left out takes that option's default.

A field a config gives names its key (:func:`key`); the YAML's shape (top-level keys and the
sections privacy, output, stats, demo, cluster, ledger) and its structural checks follow from
those declarations: unknown keys, keys of another job kind, wrong types and missing required
keys are errors naming the key (docs/config.md).

In string values, ``${VAR}`` is replaced by the environment variable VAR (an error if it is
unset) and ``${VAR:-fallback}`` by VAR or, if unset or empty, the fallback. Relative local paths
(data, a schema file, a model, out, summary, the ledger, a stats network or public sample) are
relative to the config file's directory, so a config works from any working directory.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import typing
from functools import cache
from pathlib import Path
from typing import Any, Literal, NotRequired, Required, Self

import yaml
from pydantic import ConfigDict, TypeAdapter, ValidationError
from pydantic.dataclasses import dataclass
from typing_extensions import TypedDict  # pydantic needs it, not typing's, before Python 3.12

from dp_dask.data.io import Location, is_url
from dp_dask.data.schema import BUILTIN_SCHEMAS


class ConfigError(ValueError):
    """A job config that cannot be run; the message names the file and the key."""


def key(name: str, *, required: bool = False, path: bool = False, exists: bool = False,
        accepts: Any = None) -> Any:
    """A spec field a config gives as ``name`` (``section.key`` inside a section).
    ``required``: a config must give it; ``path``: relative to the config's directory;
    ``exists``: an input, which must exist (a local path: a URL is checked by the job);
    ``accepts``: the YAML's type where it is not the field's (a memory limit as a number)."""
    return dataclasses.field(metadata={"key": name, "required": required, "path": path,
                                       "exists": exists, "accepts": accepts})


# assignments are checked too: preflight makes paths absolute in place
SPEC = ConfigDict(extra="forbid", validate_assignment=True)


@dataclass(config=SPEC)
class JobSpec:
    """The fields of every job: its command, its config, its cluster and logging. A job kind's
    spec adds the parts its command has (``*Part`` below), each declared once."""

    command: str  # the dp-dask command that runs it
    config: Path | None  # the job config it was read from (dp-dask run), else None
    cluster_kind: str | None = key("cluster.kind")
    scheduler: str | None = key("cluster.address")
    workers: int | None = key("cluster.workers")
    memory_limit: str = key("cluster.memory_limit", accepts=str | int | float)  # 4GiB, 0.5
    cluster_options: dict[str, Any] | None = key("cluster.options")
    quiet: bool
    show_values: bool
    log_format: str

    @classmethod
    def of(cls, args: argparse.Namespace, **given: Any) -> Self:
        """The spec of a command's parsed options, ``given`` added (fields the options lack,
        such as ``config``, are None)."""
        return cls(**{field.name: getattr(args, field.name, None)
                      for field in dataclasses.fields(cls)} | given)


@dataclass(config=SPEC)
class DataPart:
    """The private input and its public schema."""

    data: str = key("data", required=True, path=True, exists=True)
    schema: str = key("schema", required=True, path=True)


@dataclass(config=SPEC)
class StoragePart:
    """fsspec's options of URL inputs and outputs."""

    storage_options: dict[str, Any] | None = key("storage_options")


@dataclass(config=SPEC)
class SummaryPart:
    """The run summary's path (default: none; for a job config, beside the job's output)."""

    summary: str | None = key("output.summary", path=True)


@dataclass(config=SPEC)
class NoisePart:
    """The budget and its noise (every job that measures data: fit, synth, stats, demo)."""

    epsilon: float = key("privacy.epsilon", required=True)  # a scheduled job states its budget
    noise_sampler: str = key("privacy.noise_sampler")
    noise_seed: int | None = key("privacy.noise_seed")
    # the rows of one value of this column are protected together, at most K kept (data/units.py)
    privacy_unit: str | None = key("privacy.privacy_unit")
    max_rows_per_unit: str | None = key("privacy.max_rows_per_unit", accepts=int | str)  # K|auto
    # a unit-shaped release's unit-level attributes: "declared" (default) or "auto" (data/units.py)
    unit_level: str | None = key("privacy.unit_level")
    # the privacy unit's tuned numbers, some fields of data.units.UnitConfig (docs/tuning.md)
    unit_config: dict[str, Any] | None = key("privacy.unit_config")
    # with a unit, use a schema drafted under DP at row level (refused otherwise)
    accept_row_level_draft: bool = key("privacy.accept_row_level_draft")


@dataclass(config=SPEC)
class MethodPart(NoisePart):
    """The release method and its privacy parameters (fit, synth, demo)."""

    method: str = key("method")
    method_options: dict[str, Any] | None = key("method_options")  # the method's parameters
    delta: float = key("privacy.delta")
    accountant: str | None = key("privacy.accountant")
    # marginals: the column groups that matter
    workload: list[Any] | None = key("privacy.workload", accepts=list[list[str] | str])
    mechanism: str = key("privacy.mechanism")
    within_attribute: str = key("privacy.within_attribute")


@dataclass(config=SPEC)
class LedgerPart:
    """The privacy ledger a job that reads private data records its spending in."""

    ledger: Location | None = key("ledger.path", path=True)
    dataset_name: str | None = key("ledger.dataset_name")
    run_id: str | None = key("ledger.run_id")
    budget_epsilon: float | None = key("ledger.budget_epsilon")
    force: bool = key("ledger.force")


@dataclass(config=SPEC)
class SamplingPart:
    """A synthetic release: where, how many rows, drawn and decoded how (synth, sample, demo)."""

    out: Location = key("output.out", required=True, path=True)
    rows: int | None = key("output.rows")
    seed: int = key("output.seed")
    partition_rows: int | None = key("output.partition_rows")
    sampling_device: str = key("output.sampling_device")
    decode: str = key("output.decode")
    zarr: bool


@dataclass(config=SPEC)
class ConditionPart:
    """Conditional sampling (synth, sample): rows that hold ``where``, ``balance``'s classes
    equally often; the method's model conditioned, not its release filtered."""

    where: str | None = key("output.where")
    balance: str | None = key("output.balance")


@dataclass(config=SPEC)
class SynthSpec(JobSpec, DataPart, StoragePart, MethodPart, LedgerPart, SamplingPart,
                ConditionPart, SummaryPart):
    """``dp-dask synth``: fit and sample a synthetic release."""

    # optional here: without one, drafted under DP first (dp_dask.one_command)
    schema: str | None = key("schema", path=True)


@dataclass(config=SPEC)
class FitSpec(JobSpec, DataPart, StoragePart, MethodPart, LedgerPart, SummaryPart):
    """``dp-dask fit``: fit a model and save it."""

    model: Location = key("output.model", required=True, path=True)  # where it is saved


@dataclass(config=SPEC)
class SampleSpec(JobSpec, StoragePart, SamplingPart, ConditionPart, SummaryPart):
    """``dp-dask sample``: a release from a saved model (no private data, nothing spent)."""

    model: Location = key("model", required=True, path=True, exists=True)
    # the model read from ``model`` by preflight, which checks it; read once: a wide model is
    # ~100 MB (no option or key: the job's own state)
    loaded_model: Any = dataclasses.field(default=None, kw_only=True, compare=False, repr=False)


@dataclass(config=SPEC)
class DemoSpec(JobSpec, MethodPart, SamplingPart):
    """``dp-dask demo``: census-like public data, generated and released. No ledger part: the
    data is public, nothing to account for."""

    demo_rows: int = key("demo.rows")
    out: Location = key("output.out", path=True)  # the demo's own default; its data goes there


@dataclass(config=SPEC)
class StatsSpec(JobSpec, DataPart, NoisePart, LedgerPart, SummaryPart):
    """``dp-dask stats``: per-column noisy histograms (it reads local inputs only, so no
    storage_options)."""

    out: Path = key("output.out", required=True, path=True, accepts=str)
    mechanism: str = key("stats.mechanism")
    k: int = key("stats.k")
    network: str | None = key("stats.network", path=True)
    public_sample: str | None = key("stats.public_sample", path=True)
    network_from_noisy_tables: float | None = key("stats.network_from_noisy_tables")
    smoothing: float = key("stats.smoothing")


@dataclass(config=SPEC)
class TablesSpec(JobSpec, StoragePart, LedgerPart):
    """``dp-dask tables``: a parent table and its child table released together
    (:mod:`dp_dask.relational`)."""

    tables: dict[str, Any] = key("tables", required=True, accepts=dict[str, dict[str, Any]])
    out: Location = key("output.out", required=True, path=True)
    seed: int = key("output.seed")
    epsilon: float = key("privacy.epsilon", required=True)
    delta: float = key("privacy.delta")
    noise_sampler: str = key("privacy.noise_sampler")
    noise_seed: int | None = key("privacy.noise_seed")
    # K: the children kept per parent (checked by the job, which names the child table)
    max_children: int = key("privacy.max_children", required=True)


# a job config's ``job`` -> its spec; the job is the dp-dask command it runs (synth: the
# default)
SPECS: dict[str, type[JobSpec]] = {"synth": SynthSpec, "stats": StatsSpec, "fit": FitSpec,
                                   "sample": SampleSpec, "demo": DemoSpec, "tables": TablesSpec}
Options = argparse.Namespace | JobSpec  # what a command runs with: its spec, if it has one
# the sections of a job config: the prefixes of the dotted keys
SECTIONS = tuple(dict.fromkeys(
    field.metadata["key"].partition(".")[0] for spec in SPECS.values()
    for field in dataclasses.fields(spec) if "." in field.metadata.get("key", "")))
_VARIABLE = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def _keys(spec: type[JobSpec]) -> dict[str, dataclasses.Field]:
    """A spec's fields a config gives, by their dotted key."""
    return {field.metadata["key"]: field for field in dataclasses.fields(spec)
            if "key" in field.metadata}


@cache
def _document(kind: str) -> TypeAdapter:
    """The structure of a job config of ``kind``, from its spec's keys."""
    spec = SPECS[kind]
    types = typing.get_type_hints(spec)
    sections: dict[str, dict[str, Any]] = {"": {"version": NotRequired[Literal[1]],
                                                "job": NotRequired[Literal[kind]]}}
    for name, field in _keys(spec).items():
        section, _, name = name.rpartition(".")
        given = field.metadata["accepts"] or types[field.name]
        sections.setdefault(section, {})[name] = (
            Required[given] if field.metadata["required"] else NotRequired[given | None])
    document = sections.pop("")
    for section, fields in sections.items():
        required = any(typing.get_origin(value) is Required for value in fields.values())
        shape = _typed(section.title(), fields)
        document[section] = Required[shape] if required else NotRequired[shape]
    return TypeAdapter(_typed(f"{kind.title()}Job", document))


def _typed(name: str, fields: dict[str, Any]) -> type:
    shape = TypedDict(name, fields)  # type: ignore[operator]
    shape.__pydantic_config__ = ConfigDict(extra="forbid")
    return shape


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


def _flat(document: dict[str, Any]) -> dict[str, Any]:
    """The values given in the file, by dotted key."""
    flat: dict[str, Any] = {}
    for key, value in document.items():
        if key in SECTIONS:
            flat |= {f"{key}.{k}": v for k, v in value.items()}
        elif key not in ("version", "job"):
            flat[key] = value
    return flat


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
            others = [job for job, spec in SPECS.items()
                      if any(given == key or given.startswith(f"{key}.") for given in _keys(spec))]
            problems.append(f"key {key!r} applies to {_listed(others)} jobs only, not to a "
                            f"{kind} job" if others else f"unknown key {key!r}")
        elif item["type"] == "missing":
            problems.append(f"{key}: required")
        else:
            problems.append(f"{key}: {item['msg']} (got {item.get('input')!r})")
    return f"config {path}: " + "; ".join(problems)


def _listed(names: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join(filter(None, (", ".join(names[:-1]), names[-1])))


def load_config(path: str | Path) -> tuple[str, dict[str, Any]]:
    """The job a config names (the dp-dask command: synth unless ``job:`` says otherwise, or
    tables where it gives ``tables``) and
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
    kind = document.get("job", "tables" if "tables" in document else "synth")
    if not isinstance(kind, str) or kind not in SPECS:
        raise ConfigError(f"config {path}: job: {kind!r} is not one of {', '.join(SPECS)}")
    try:
        values = _flat(_document(kind).validate_python(document))
    except ValidationError as exc:
        raise ConfigError(_error_text(path, exc, kind)) from None
    base = path.resolve().parent
    for key, field in _keys(SPECS[kind]).items():
        given = values.get(key)
        if field.metadata["path"] and given is not None:
            values[key] = given = _resolve(key, given, base)
        if field.metadata["exists"] and not is_url(given) and not Path(given).exists():
            raise ConfigError(f"config {path}: {key}: {given} does not exist (relative paths "
                              "are relative to the config file)")
    return kind, values


def _argument(value: Any) -> str:
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def _checked(key: str, value: Any, action: argparse.Action, path: Path) -> Any:
    """A config's value by the rule of its option (type and choices), the error naming the
    key; the value as the option gives it."""
    if isinstance(action, argparse._StoreTrueAction):
        return value
    text = _argument(value)
    try:
        converted = action.type(text) if action.type else text
    except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
        raise ConfigError(f"config {path}: {key}: {exc}") from None
    if action.choices is not None and converted not in action.choices:
        raise ConfigError(f"config {path}: {key}: {value!r} is not one of "
                          f"{', '.join(map(str, action.choices))}")
    return converted


def _alternatives(parser: argparse.ArgumentParser) -> list[set[str]]:
    """The fields of each mutually exclusive group (stats: the network sources)."""
    return [{action.dest for action in group._group_actions}
            for group in parser._mutually_exclusive_groups]


def _given(parser: argparse.ArgumentParser, options: list[str]) -> dict[str, Any]:
    """The fields ``options`` give, read by ``parser`` (unique prefixes included; an error
    names the option)."""
    unset = object()
    dests = [action.dest for action in parser._actions if action.dest != argparse.SUPPRESS]
    parsed = parser.parse_args(options, argparse.Namespace(**dict.fromkeys(dests, unset)))
    return {name: value for name, value in vars(parsed).items() if value is not unset}


def config_spec(kind: str, values: dict[str, Any], parser: argparse.ArgumentParser,
                overrides: list[str], path: Path) -> JobSpec:
    """The spec of a job config (``kind`` and ``values`` from :func:`load_config`), checked by
    the rules of the job command's options (``parser``), the options ``overrides`` give
    winning. An override of one of a group of alternatives (``--public-sample`` against the
    config's ``stats.network``) replaces the config's choice in that group instead of clashing
    with it."""
    fields = _keys(SPECS[kind])
    actions = {action.dest: action for action in parser._actions}
    config = {fields[key].name: _checked(key, value, actions[fields[key].name], path)
              for key, value in values.items() if value is not None}
    for alternatives in _alternatives(parser):
        given = [key for key in values if fields[key].name in alternatives
                 and fields[key].name in config]
        if len(given) > 1:
            raise ConfigError(f"config {path}: {', '.join(given)}: give one of them")
    for action in parser._actions:
        action.required = False  # the config gives them (data, schema, out)
    defaults = vars(parser.parse_args([]))
    given = _given(parser, overrides)
    replaced = set().union(*(alternatives - set(given) for alternatives in _alternatives(parser)
                             if alternatives & set(given)))
    config = {name: value for name, value in config.items() if name not in replaced}
    return SPECS[kind].of(argparse.Namespace(**defaults | config | given), command=kind,
                          config=path)
