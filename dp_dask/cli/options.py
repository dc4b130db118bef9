"""The option groups commands share (data, storage, cluster, privacy, ledger, sampling,
conditional sampling, evaluation), their argparse types, and the parser class that shows
defaults in help."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from dp_dask.checks import (
    EPSILON_WARN_HIGH,
    EPSILON_WARN_LOW,
    delta_value,
    epsilon_value,
    memory_limit,
    non_negative_int,
    positive_float,
    positive_int,
)
from dp_dask.cluster import CLUSTER_KINDS
from dp_dask.copula.sample import SAMPLING_DEVICES
from dp_dask.data.dtypes import DECODINGS
from dp_dask.data.units import UNIT_DEFAULTS, UnitConfig
from dp_dask.evaluate.queries import DEFAULT_Q3_SAMPLE
from dp_dask.privacy.ledger import LEDGER_ENV
from dp_dask.synthesizer import DEFAULT_DELTA, Synthesizer


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's help ends with its default, unless its text already says it (None:
    "none"; flags and required options have none to show)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (not action.option_strings or action.required or "default" in text
                or action.default is False or action.default == argparse.SUPPRESS
                or action.nargs == 0):
            return text
        if action.default is None:
            return f"{text} (default: none)"
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """Our parsers and their subparsers (they inherit the class) show defaults in help."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def _default(config_class: type, name: str) -> str:
    """A config field's default as --help shows it: a number in %g, a choice as is, a nested
    config by its class (its fields: docs/tuning.md)."""
    value = getattr(config_class(), name)
    if dataclasses.is_dataclass(value):
        return f"{{{type(value).__name__}}}"
    return value if isinstance(value, str) else f"{value:g}"


def json_object(text: str) -> dict[str, Any]:
    """argparse ``type=``: a JSON object (fsspec storage options, cluster options)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {text!r} ({exc})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object ({{...}}), got {text!r}")
    return value


def workload_groups(text: str) -> list[Any]:
    """argparse ``type=``: column groups, as JSON (``[["income", "*", "*"]]``) or as text,
    groups split by ';' and columns by ',' (``income,*,*;age,sex``); the names are checked
    against the schema by the method."""
    if text.lstrip().startswith("["):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise argparse.ArgumentTypeError(f"must be a JSON list of column groups, got "
                                             f"{text!r} ({exc})") from None
    return [group.split(",") for group in text.split(";") if group.strip()]


def data_options(parser: argparse.ArgumentParser, schema_required: bool = True) -> None:
    parser.add_argument("--data", required=True,
                        help="Parquet file/directory or CSV: a path or an fsspec URL "
                        "(s3://, gs://, abfs://, file://)")
    parser.add_argument("--schema", required=schema_required, default=None,
                        help="schema JSON (path or URL) or built-in name (adult, demo)" + (
                            "" if schema_required else "; without one, the schema is drafted "
                            "from the data under DP with a share of --epsilon and --delta "
                            "(docs/from-raw.md), then the rest releases"))
    storage_options(parser)


def storage_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--storage-options", type=json_object, default=None, metavar="JSON",
                        help="fsspec options of URL inputs and outputs, e.g. "
                        "'{\"endpoint_url\": ...}' (default: the protocol's own configuration)")


def cluster_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cluster")
    group.add_argument("--cluster", dest="cluster_kind", choices=CLUSTER_KINDS, default=None,
                       help="where the work runs (default: address with --scheduler, else "
                       "local)")
    group.add_argument("--scheduler", metavar="ADDRESS",
                       help="address of a running Dask scheduler (default: start local workers)")
    group.add_argument("--cluster-options", type=json_object, default=None, metavar="JSON",
                       help="keyword arguments of the jobqueue/kubernetes/gateway cluster "
                       "(default: none)")
    group.add_argument("--workers", type=positive_int, default=None,
                       help="local workers to start (default: one per core)")
    group.add_argument("--memory-limit", type=memory_limit, default="auto",
                       help="memory limit per local worker: auto, a size (4GiB; 0 for none) or "
                       "a fraction of RAM")
    parser.add_argument("--quiet", action="store_true", help="no progress bars or stage logs")
    parser.add_argument("--show-values", action="store_true",
                        help="errors show the first raw value outside the schema (default: the "
                        "column, count and rule only); for your own machine: it reaches the "
                        "local workers this command starts, whose logs then hold the value")
    parser.add_argument("--log-format", choices=["text", "json"], default="text",
                        help="stage logs as text, or one JSON object per line")


# method parameters that have options of their own: each given to the methods that take it
FLAG_PARAMETERS = {"accountant": "--accountant", "mechanism": "--mechanism",
                   "workload": "--workload",
                   "within_attribute": "--within-attribute"}
# of those, the ones refused for a method that does not take them (the others have defaults,
# or are meaningless there: dpcopula is pure DP, with no Gaussian accounting)
REFUSED_ELSEWHERE = ("workload",)


def taking(parameter: str) -> str:
    """The methods that take a parameter, for help and errors: ``marginals``."""
    return ", ".join(name for name, cls in sorted(Synthesizer.methods.items())
                     if parameter in cls.options())


def own_options(cls: type[Synthesizer]) -> tuple[str, ...]:
    """A method's parameters that only --method-options gives."""
    return tuple(name for name in cls.options() if name not in FLAG_PARAMETERS)


def check_method_options(method: str, options: dict[str, Any] | None) -> None:
    """Names in --method-options the method does not take, or that have their own flag: an
    error before the cluster starts (the values are checked by the method itself)."""
    own = own_options(Synthesizer.methods[method])
    for name in options or {}:
        if name in FLAG_PARAMETERS:
            raise ValueError(f"--method-options: give {name} with {FLAG_PARAMETERS[name]}")
        if name not in own:
            raise ValueError(f"--method-options: method {method!r} has no option {name!r}; "
                             f"its options: {', '.join(own) or 'none'}")


def privacy_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("privacy and method")
    group.add_argument("--method", choices=sorted(Synthesizer.methods), default="marginals",
                       help="marginals (default: consistent noisy marginals + row updates), "
                       "copula (the paper's binary Gaussian copula), or a peer method "
                       "(dpcopula-*, dpview*: docs/dpcopula.md, docs/results-adult.md)")
    group.add_argument("--epsilon", type=epsilon_value, default=1.0,
                       help="ε of the release (default 1; a warning outside "
                       f"[{EPSILON_WARN_LOW:g}, {EPSILON_WARN_HIGH:g}])")
    group.add_argument("--delta", type=delta_value, default=DEFAULT_DELTA,
                       help="δ in (0, 1) (default 2^-30)")
    group.add_argument("--accountant", choices=["exact", "zcdp"], default=None,
                       help="Gaussian accounting: exact privacy curve (default) or zCDP "
                       "(marginals with adaptive rounds: zCDP, the default there)")
    group.add_argument("--workload", type=workload_groups, default=None, metavar="GROUPS",
                       help=f"{taking('workload')} only: the column groups (1-3 columns, * any "
                       "other) whose marginals matter, e.g. 'income,*,*;age,sex': adaptive rounds "
                       "favour them and 'dp-dask evaluate --workload' reports them apart")
    group.add_argument("--mechanism", choices=["gaussian", "laplace"], default="gaussian",
                       help=f"{taking('mechanism')} only: one Gaussian mechanism (default) or "
                       "the paper's Laplace")
    group.add_argument("--within-attribute", choices=["zero", "pairwise"], default="pairwise",
                       help=f"{taking('within_attribute')} only: latent correlation of an "
                       "attribute's own dummies")
    group.add_argument("--method-options", type=json_object, default=None, metavar="JSON",
                       help="the method's own parameters, e.g. '{\"k\": 4}'; by method: "
                       + "; ".join(f"{name}: {', '.join(own_options(cls))}"
                                   for name, cls in sorted(Synthesizer.methods.items())
                                   if own_options(cls))
                       + "".join(f"; the {name} config's fields (docs/tuning.md): "
                                 + ", ".join(f"{f.name}={_default(cls.config_class, f.name)}"
                                             for f in dataclasses.fields(cls.config_class))
                                 for name, cls in sorted(Synthesizer.methods.items())
                                 if cls.config_class is not None)
                       + " (default: none)")
    noise_options(group)
    unit_options(group)


def noise_options(group: argparse._ActionsContainer) -> None:
    """The noise sampler: OpenDP's vetted one, or numpy's seeded one for tests."""
    group.add_argument("--noise-sampler", choices=["opendp", "numpy"], default="opendp",
                       help="opendp (secure, default) or numpy (seeded; testing only)")
    group.add_argument("--noise-seed", type=non_negative_int, default=None,
                       help="seed of the numpy noise sampler: never for a real release")


def unit_options(group: argparse._ActionsContainer, release: bool = True) -> None:
    """--privacy-unit, --max-rows-per-unit and --unit-config (read together by
    :func:`privacy_unit`), and for a ``release`` (not a schema draft) --unit-level and
    --accept-row-level-draft."""
    group.add_argument("--privacy-unit", default=None, metavar="COLUMN",
                       help="protect all rows of one value of COLUMN together (a person), not "
                       "one row; needs --max-rows-per-unit (default: the schema's "
                       + ("" if release else "or public codebook's ") + "privacy_unit, else a row)")
    group.add_argument("--max-rows-per-unit", default=None, metavar="K",
                       help="keep at most K rows of each unit (chosen per unit by a keyed "
                       "hash); the noise grows with K. 'auto': the smallest candidate K "
                       "covering the 0.9 quantile of rows per unit, chosen under DP with "
                       "auto_share (--unit-config, default 5%%) of the budget (the default "
                       "method; stats takes an integer K)")
    group.add_argument("--unit-config", type=json_object, default=None, metavar="JSON",
                       help="with a privacy unit, its tuned numbers (docs/tuning.md, "
                       "UnitConfig): some of "
                       + ", ".join(f"{f.name}={getattr(UNIT_DEFAULTS, f.name):g}"
                                   for f in dataclasses.fields(UnitConfig))
                       + ", e.g. '{\"auto_share\": 0.1}' (default: none)")
    if release:
        group.add_argument("--unit-level", choices=["declared", "auto"], default=None,
                           help="with a privacy unit, the unit-level attributes (constant "
                           "within each synthetic unit) of a unit-shaped release: those the "
                           "schema declares (default), or 'auto': also those found under DP "
                           "from a noisy count of units in which each varies "
                           "(unit_level_share of the budget, default 5%%, Laplace)")
        group.add_argument("--accept-row-level-draft", action="store_true",
                           help="with a privacy unit, use a schema drafted under DP at row "
                           "level (refused otherwise, exit 2): its guarantee covers one row, "
                           "not a unit, so the release states each part under its own unit "
                           "and no combined total")


def privacy_unit(args: argparse.Namespace) -> dict[str, Any] | None:
    """The unit the options give (None: none given); ValueError naming the column where one of
    the two is missing (K itself is checked by dp_dask.data.units.PrivacyUnit)."""
    column, k = getattr(args, "privacy_unit", None), getattr(args, "max_rows_per_unit", None)
    level, config = getattr(args, "unit_level", None), getattr(args, "unit_config", None)
    if column is None and k is None:
        for flag, given in (("--unit-level", level), ("--unit-config", config)):
            if given is not None:
                raise ValueError(f"{flag} {given!r} needs a privacy unit (--privacy-unit "
                                 "COLUMN --max-rows-per-unit K)")
        return None
    if column is None or k is None:
        raise ValueError(f"--privacy-unit {column!r} and --max-rows-per-unit {k!r} go together")
    return {"column": column, "max_rows": int(k) if str(k).strip().lstrip("-").isdigit() else k,
            **({"unit_level": level} if level is not None else {}),
            **({"config": config} if config is not None else {})}


LEDGER_HELP = (f"privacy ledger: a SQLite file (a path or sqlite:///PATH) or a team's "
               f"postgresql://user@host:port/db (default: ${LEDGER_ENV}, else "
               "$XDG_CONFIG_HOME/dp_dask/ledger.sqlite)")


def ledger_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "ledger", "every fit is checked against the dataset's budget and recorded, before any "
        "data is read")
    group.add_argument("--ledger", default=None, metavar="PATH|URL", help=LEDGER_HELP)
    group.add_argument("--dataset-name", default=None, metavar="NAME",
                       help="the dataset's name in the ledger, which its budget belongs to "
                       "(default: the input's file stem, with a warning)")
    group.add_argument("--run-id", default=None,
                       help="id of this run: a retry with the same id reuses the saved model "
                       "instead of spending again (default: a fresh id)")
    group.add_argument("--budget-epsilon", type=positive_float, default=None, metavar="E",
                       help="refuse if the dataset's composed total would exceed ε=E "
                       "(besides the budget stored with 'dp-dask ledger set-budget')")
    group.add_argument("--force", action="store_true",
                       help="fit past the budget, or again for a recorded run id whose model "
                       "is missing (recorded all the same)")


def sampling_options(parser: argparse.ArgumentParser, out_default: Path | None = None,
                      summary: bool = True) -> None:
    group = parser.add_argument_group("sampling")
    group.add_argument("--rows", type=positive_int, default=None,
                       help="synthetic rows (default: as many as the input)")
    group.add_argument("--seed", type=non_negative_int, default=0,
                       help="seed of the synthetic sample")
    group.add_argument("--partition-rows", type=positive_int, default=None,
                       help="rows per output partition / Zarr chunk (default: 100,000, fewer "
                       "for wide schemas: about 256 MiB a partition)")
    group.add_argument("--sampling-device", choices=SAMPLING_DEVICES, default="cpu",
                       help="where the copula draws rows: cpu (default), gpu (CuPy and a CUDA "
                       "GPU on the workers; same distribution, other rows for a seed) or auto")
    group.add_argument("--decode", choices=DECODINGS, default="uniform",
                       help="how bins become the Parquet's values, for attributes whose schema "
                       "names no 'decode': uniform (default: a seeded draw within the bin, in "
                       "the schema's dtype), midpoint, or label (the bin labels)")
    group.add_argument("--zarr", action="store_true",
                       help="also write the dummy-coded rows, uint8 (rows, d), as "
                       "synthetic.zarr (d bytes a row: off by default)")
    group.add_argument("--out", default=out_default, required=out_default is None,
                       help="output directory: a local path or an object-store URL (s3://, "
                       "gs://, abfs://; published through a pointer object)" +
                       (f" (default: {out_default})" if out_default else ""))
    if summary:
        group.add_argument("--summary", default=None, metavar="PATH",
                           help="write a run summary JSON here: stages, times, peak memory, "
                           "paths, privacy (default: none; 'dp-dask run': <out>.run.json)")


def condition_options(parser: argparse.ArgumentParser) -> None:
    """Conditional sampling (sample, synth): passed to the sampler, which conditions the model
    where its method allows it (``Synthesizer.conditional``)."""
    group = parser.add_argument_group("conditional sampling (methods whose model can be "
                                      f"conditioned: {conditional_methods()})")
    group.add_argument("--where", default=None, metavar="CONDITION",
                       help="rows that hold a condition, e.g. \"sex == 'Female' and age >= 30\" "
                       "(==, !=, <, <=, >, >=, in, and, or, not; `name` for other names): "
                       "drawn from the model conditioned on it")
    group.add_argument("--balance", default=None, metavar="ATTRIBUTE",
                       help="equal rows for each class of this attribute (those the condition "
                       "leaves possible), up to one row per partition")


def conditional_methods() -> str:
    """The methods that sample conditionally, for help and errors: ``marginals``."""
    return ", ".join(name for name, cls in sorted(Synthesizer.methods.items())
                     if cls.conditional)


def evaluation_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True,
                        help="the raw data (Parquet/CSV): the data owner's evaluation only")
    parser.add_argument("--schema", required=True, help="schema JSON or built-in name")
    parser.add_argument("--q3-sample", type=positive_int, default=DEFAULT_Q3_SAMPLE,
                        help="3-way queries: all if at most this many, else a uniform sample "
                        f"of this size (default {DEFAULT_Q3_SAMPLE:,})")
    parser.add_argument("--force", action="store_true",
                        help="write --out even inside a release directory (its outputs are "
                        "exact functions of the raw data, not differentially private)")

