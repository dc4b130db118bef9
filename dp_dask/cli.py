"""``dp-dask``: one subcommand per job (fit, sample, synth, demo, evaluate, report)."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import logging
import os
import resource
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask

import dp_dask
from dp_dask.checks import (
    EPSILON_WARN_HIGH,
    EPSILON_WARN_LOW,
    DpDaskWarning,
    check_cost,
    check_input,
    check_model_output,
    check_output_dir,
    delta_value,
    epsilon_value,
    locate_non_utf8,
    memory_limit,
    non_negative_int,
    positive_float,
    positive_int,
)
from dp_dask.cluster import CLUSTER_KINDS, ClusterError, compute, dask_client
from dp_dask.config import (
    ConfigError,
    check_values,
    config_argv,
    load_config,
    overridden,
)
from dp_dask.copula.sample import SAMPLING_DEVICES, choose_device, resolve_device
from dp_dask.data.counts import count_graph
from dp_dask.data.dtypes import DECODINGS
from dp_dask.data.encode import SHOW_VALUES
from dp_dask.data.io import (
    Location,
    load_schema_from,
    local_only,
    local_path,
    location,
    read_bytes,
    read_table,
    remote,
    write_json,
)
from dp_dask.data.schema import load_schema
from dp_dask.evaluate.queries import (
    DEFAULT_Q3_SAMPLE,
    evaluate_release,
    marginal_distances,
    release_labels,
)
from dp_dask.evaluate.tables import markdown_table, wide_table
from dp_dask.privacy.labels import describe
from dp_dask.privacy.ledger import LEDGER_ENV, Ledger, LedgerError
from dp_dask.privacy.ledger import report as ledger_report
from dp_dask.privacy.ledger_store import database_url
from dp_dask.release import (
    check_target,
    checked_table,
    pinned_table,
    release_lock,
    resolve_target,
)
from dp_dask.synthesizer import DEFAULT_DELTA, Synthesizer, load_model

log = logging.getLogger("dp_dask")


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


def _data_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True,
                        help="Parquet file/directory or CSV: a path or an fsspec URL "
                        "(s3://, gs://, abfs://, file://)")
    parser.add_argument("--schema", required=True,
                        help="schema JSON (path or URL) or built-in name (adult, demo)")
    _storage_options(parser)


def _storage_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--storage-options", type=json_object, default=None, metavar="JSON",
                        help="fsspec options of URL inputs and outputs, e.g. "
                        "'{\"endpoint_url\": ...}' (default: the protocol's own configuration)")


def _cluster_options(parser: argparse.ArgumentParser) -> None:
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


# method parameters that have options of their own
FLAG_PARAMETERS = {"accountant": "--accountant", "mechanism": "--mechanism",
                   "workload": "--workload",
                   "within_attribute": "--within-attribute"}


def _own_options(cls: type[Synthesizer]) -> tuple[str, ...]:
    """A method's parameters that only --method-options gives."""
    return tuple(name for name in cls.options() if name not in FLAG_PARAMETERS)


def check_method_options(method: str, options: dict[str, Any] | None) -> None:
    """Names in --method-options the method does not take, or that have their own flag: an
    error before the cluster starts (the values are checked by the method itself)."""
    own = _own_options(Synthesizer.methods[method])
    for name in options or {}:
        if name in FLAG_PARAMETERS:
            raise ValueError(f"--method-options: give {name} with {FLAG_PARAMETERS[name]}")
        if name not in own:
            raise ValueError(f"--method-options: method {method!r} has no option {name!r}; "
                             f"its options: {', '.join(own) or 'none'}")


def _privacy_options(parser: argparse.ArgumentParser) -> None:
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
                       help="marginals only: the column groups (1-3 columns, * any other) "
                       "whose marginals matter, e.g. 'income,*,*;age,sex': adaptive rounds "
                       "favour them and 'dp-dask evaluate --workload' reports them apart")
    group.add_argument("--mechanism", choices=["gaussian", "laplace"], default="gaussian",
                       help="copula only: one Gaussian mechanism (default) or the paper's Laplace")
    group.add_argument("--within-attribute", choices=["zero", "pairwise"], default="pairwise",
                       help="copula only: latent correlation of an attribute's own dummies")
    group.add_argument("--method-options", type=json_object, default=None, metavar="JSON",
                       help="the method's own parameters, e.g. '{\"k\": 4}'; by method: "
                       + "; ".join(f"{name}: {', '.join(_own_options(cls))}"
                                   for name, cls in sorted(Synthesizer.methods.items())
                                   if _own_options(cls))
                       + " (default: none)")
    group.add_argument("--noise-sampler", choices=["opendp", "numpy"], default="opendp",
                       help="opendp (secure, default) or numpy (seeded; testing only)")
    group.add_argument("--noise-seed", type=non_negative_int, default=None,
                       help="seed of the numpy noise sampler: never for a real release")


LEDGER_HELP = (f"privacy ledger: a SQLite file (a path or sqlite:///PATH) or a team's "
               f"postgresql://user@host:port/db (default: ${LEDGER_ENV}, else "
               "$XDG_CONFIG_HOME/dp_dask/ledger.sqlite)")


def _ledger_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "ledger", "every fit is checked against the dataset's budget and recorded, before any "
        "data is read")
    group.add_argument("--ledger", default=None, metavar="PATH|URL", help=LEDGER_HELP)
    group.add_argument("--dataset-name", default=None, metavar="NAME",
                       help="the dataset's name in the ledger (default: the input's file stem)")
    group.add_argument("--run-id", default=None,
                       help="id of this run: a retry with the same id reuses the saved model "
                       "instead of spending again (default: a fresh id)")
    group.add_argument("--budget-epsilon", type=positive_float, default=None, metavar="E",
                       help="refuse if the dataset's composed total would exceed ε=E "
                       "(besides the budget stored with 'dp-dask ledger set-budget')")
    group.add_argument("--force", action="store_true",
                       help="fit past the budget, or again for a recorded run id whose model "
                       "is missing (recorded all the same)")


def _sampling_options(parser: argparse.ArgumentParser, out_default: Path | None = None,
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


def _progress(args: argparse.Namespace) -> bool:
    """Progress bars on a terminal only: in a log file a bar's redraws are one endless line, and
    the stage log lines (one per stage, dp_dask.timing) say the same."""
    return not args.quiet and sys.stdout.isatty()


def _synthesizer(args: argparse.Namespace, schema: str) -> Synthesizer:
    common = {"epsilon": args.epsilon, "delta": args.delta,
              "noise_sampler": args.noise_sampler, "noise_seed": args.noise_seed,
              "show_progress": _progress(args),
              "ledger": False if getattr(args, "no_ledger", False) else getattr(args, "ledger",
                                                                                None),
              "dataset_name": getattr(args, "dataset_name", None),
              "run_id": getattr(args, "run_id", None),
              "budget_epsilon": getattr(args, "budget_epsilon", None),
              "force": getattr(args, "force", False)}
    if args.method in ("marginals", "copula") and args.accountant is not None:
        common["accountant"] = args.accountant  # Gaussian accounting; dpcopula is pure DP
    if getattr(args, "workload", None) is not None:
        if args.method != "marginals":
            raise ValueError(f"--workload: method {args.method!r} takes no workload "
                             "(marginals only)")
        common["workload"] = args.workload
    if args.method == "copula":
        common |= {"mechanism": args.mechanism, "within_attribute": args.within_attribute}
    return Synthesizer.create(args.method,
                              load_schema_from(schema, getattr(args, "storage_options", None)),
                              **common, **(args.method_options or {}))


def _report(synthesizer: Synthesizer, paths: dict[str, Path]) -> None:
    print(describe(synthesizer.model.metadata["privacy"]) + f"; method {synthesizer.name}")
    entry = synthesizer.ledger_entry_
    if synthesizer.ledger is not None and entry is not None:
        if synthesizer.reused_:
            print(f"   ledger: run {entry.run_id!r} of {entry.dataset_id} was recorded at "
                  f"{entry.created}: reused its model {entry.model_path}, nothing spent again")
        else:
            total = synthesizer.ledger.total(entry.dataset_name)
            counted = "counted" if entry.counted else "recorded, not counted (not DP)"
            print(f"   ledger: run {entry.run_id!r} of {entry.dataset_id} {counted}"
                  f"{' (forced)' if entry.forced else ''}; dataset total ε={total.epsilon:.6g} "
                  f"at δ={total.delta:.3g} ({synthesizer.ledger.path})")
    if synthesizer.timings_:
        print("stage timings: "
              + ", ".join(f"{k} {v:.2f}s" for k, v in synthesizer.timings_.items()))
    for kind, path in paths.items():
        print(f"{kind:>9}: {path}")


SUMMARY_FORMAT = 1


SUMMARY_PRIVACY = ("epsilon", "delta", "mechanism", "accountant", "rho", "noise_sampler",
                   "differentially_private", "label")


def run_summary(args: argparse.Namespace, synthesizer: Synthesizer, paths: dict[str, Path],
                started: float, started_at: dt.datetime) -> dict[str, Any]:
    """:func:`job_summary` of a fit, sample or synth."""
    entry = synthesizer.ledger_entry_
    return job_summary(
        args, synthesizer.name, synthesizer.timings_, synthesizer.model.metadata.get("privacy", {}),
        None if entry is None else {
            "path": str(synthesizer.ledger.path), "dataset_name": entry.dataset_name,
            "run_id": entry.run_id, "reused": synthesizer.reused_, "forced": entry.forced},
        paths, started, started_at)


def job_summary(args: argparse.Namespace, method: str, stages: dict[str, float],
                privacy: dict[str, Any], ledger: dict[str, Any] | None, paths: dict[str, Path],
                started: float, started_at: dt.datetime) -> dict[str, Any]:
    """The machine-readable record of a finished job (``run.json``): stages, times, the driver's
    peak memory, paths, privacy. Parameters and public facts only: the release's row count and
    partitions come from its completion record, nothing from the input's rows. A release under
    another notion than DP (stats' Tabular-DDP) keeps its notion and statement."""
    # ru_maxrss is in KiB on Linux (bytes on macOS): the process's peak resident set so far
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin"
                                                                 else 1024)
    summary: dict[str, Any] = {
        "format": SUMMARY_FORMAT, "command": args.command, "status": "ok",
        "config": str(args.config) if getattr(args, "config", None) else None,
        "dp_dask": dp_dask.__version__, "method": method,
        "started": started_at.isoformat(timespec="seconds"),
        "finished": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "seconds": round(time.perf_counter() - started, 3),
        "stages": {stage: round(seconds, 3) for stage, seconds in stages.items()},
        "peak_memory_bytes": {"driver": peak},
        "paths": {"data": str(args.data) if getattr(args, "data", None) else None,
                  "schema": str(args.schema) if getattr(args, "schema", None) else None,
                  **{kind: str(path) for kind, path in paths.items()}},
        "privacy": {key: privacy.get(key) for key in SUMMARY_PRIVACY}
                   | {key: privacy[key] for key in ("notion", "statement") if key in privacy},
        "ledger": ledger,
        "cluster": {"kind": args.cluster_kind, "scheduler": args.scheduler,
                    "workers": args.workers},
    }
    if "record" in paths:
        record = json.loads(read_bytes(paths["record"], getattr(args, "storage_options", None)))
        summary["release"] = {key: record.get(key) for key in (
            "rows", "partitions", "partition_rows", "seed", "plan_key")}
    return summary


def write_summary(args: argparse.Namespace, beside: Location,
                  summary: dict[str, Any]) -> Location | None:
    """``--summary``, else for a job config ``<beside>.run.json``: outside the release, whose
    completion record lists its files, so the summary can hold the time the whole job took.
    Plain commands write none unless asked: nothing appears beside an output unannounced."""
    if args.summary:
        path = location(args.summary)
    elif getattr(args, "config", None):
        path = location(f"{beside}.run.json")
    else:
        return None
    write_json(path, summary, getattr(args, "storage_options", None))
    print(f"{'summary':>9}: {path}")
    return path


def _started() -> tuple[float, dt.datetime]:
    return time.perf_counter(), dt.datetime.now(dt.UTC)


def run_fit(args: argparse.Namespace) -> None:
    started = _started()
    synthesizer = _synthesizer(args, args.schema).fit(args.data,
                                                      storage_options=args.storage_options)
    path = synthesizer.save(args.model, args.storage_options)
    _report(synthesizer, {"model": path})
    write_summary(args, path, run_summary(args, synthesizer, {"model": path}, *started))


def run_sample(args: argparse.Namespace) -> None:
    started = _started()
    # before any work: a second job on this target fails at once
    with release_lock(args.out, args.storage_options):
        synthesizer = Synthesizer.from_model(args.model, show_progress=_progress(args))
        paths = synthesizer.write(args.out, args.rows, seed=args.seed,
                                  partition_rows=args.partition_rows,
                                  device=args.sampling_device,
                                  storage_options=args.storage_options,
                                  decode=args.decode, with_binary=args.zarr)
    _report(synthesizer, paths)
    write_summary(args, args.out, run_summary(args, synthesizer, paths, *started))


def run_synth(args: argparse.Namespace) -> None:
    started = _started()
    # before the fit spends any budget; in a store, the lock's PUT is the write probe
    with release_lock(args.out, args.storage_options):
        synthesizer = _synthesizer(args, args.schema).fit(args.data,
                                                          storage_options=args.storage_options)
        paths = synthesizer.write(args.out, args.rows, seed=args.seed,
                                  partition_rows=args.partition_rows, with_model=True,
                                  device=args.sampling_device,
                                  storage_options=args.storage_options,
                                  decode=args.decode, with_binary=args.zarr)
    _report(synthesizer, paths)
    write_summary(args, args.out, run_summary(args, synthesizer, paths, *started))


def run_demo(args: argparse.Namespace) -> None:
    from dp_dask.data.demo import write_census

    started = time.perf_counter()
    data = write_census(args.out / "census.parquet", n_rows=args.demo_rows, seed=args.seed,
                        overwrite=True)
    print(f"wrote {args.demo_rows:,} census-like rows to {data} "
          f"in {time.perf_counter() - started:.1f}s")
    args.no_ledger = True  # the demo data is generated here and public: nothing to account for
    synthesizer = _synthesizer(args, "demo").fit(data)
    paths = {"model": synthesizer.save(args.out / "model")}
    paths |= synthesizer.write(args.out / "release", args.rows, seed=args.seed,
                               partition_rows=args.partition_rows, device=args.sampling_device,
                               decode=args.decode, with_binary=args.zarr)
    _report(synthesizer, paths)
    # The demo data is itself synthetic and public, so comparing with it reveals nothing.
    schema = synthesizer.schema
    real, synthetic = compute(count_graph(read_table(data, schema), schema),
                              count_graph(release_labels(paths["parquet"], schema),
                                          schema.as_labels()))
    print("utility (total variation distance, 0 = identical):")
    print(json.dumps(marginal_distances(real, synthetic, schema), indent=2))
    from dp_dask.evaluate.values import compare_values  # scipy.stats: ~1 s to import

    values = compare_values(data, paths["parquet"], schema, seed=args.seed)
    if values is not None:
        print("values (KS, 0 = identical; W1 in the column's unit): " + "; ".join(
            f"{row['column']} KS {row['KS']:.4f} W1 {row['W1']:.3g}"
            for row in values.metrics.to_dict(orient="records")))


def run_evaluate(args: argparse.Namespace) -> None:
    from dp_dask.evaluate.html import write_evaluation  # scipy.stats: ~1 s to import
    from dp_dask.evaluate.values import compare_values, summary_markdown

    schema = load_schema(args.schema)
    options, data, synthetic = args.storage_options, args.data, args.synthetic
    if remote(data):
        data = read_table(data, schema, storage_options=options)
    if remote(synthetic):  # a release in a store: its pointer resolved, its record checked
        synthetic = read_table(checked_table(synthetic, options), schema,
                               storage_options=options)
    paths = {}
    if args.out:
        comparison, paths = write_evaluation(data, synthetic, schema, args.out,
                                             q3_sample=args.q3_sample, seed=args.seed,
                                             force=args.force)
        records, workload, values = comparison.records, comparison.workload, comparison.values
    else:
        synthetic = pinned_table(synthetic)  # both reads see one version of a release
        records, workload = evaluate_release(data, synthetic, schema,
                                             q3_sample=args.q3_sample, seed=args.seed)
        values = compare_values(data, synthetic, schema, seed=args.seed)
    print(f"Q3: {workload.describe()}")
    print(markdown_table(wide_table(records, ["workload", "queries"])))
    if values is not None:
        print(f"\nvalues ({values.sample}):")
        print(summary_markdown(values), end="")
    if args.workload is not None:
        from dp_dask.evaluate.workload import workload_errors

        errors = workload_errors(data, synthetic, schema, args.workload)
        print(f"\nworkload ({len(errors)} marginals, mean TVD {errors['tvd'].mean():.4g}):")
        print(markdown_table(errors))
    for kind, path in paths.items():
        print(f"{kind:>11}: {path}")


def run_report(args: argparse.Namespace) -> None:
    from dp_dask.evaluate.sweep import write_report

    started = time.perf_counter()
    path = write_report(args.data, load_schema(args.schema), args.out,
                        epsilons=tuple(args.epsilons), seeds=args.seeds, delta=args.delta,
                        q3_sample=args.q3_sample, table_epsilon=args.table_epsilon,
                        calibration_draws=args.calibration_draws, test_data=args.test_data,
                        target=args.target, force=args.force)
    print(f"report: {path} ({time.perf_counter() - started:.0f} s)")


def run_plan(args: argparse.Namespace) -> None:
    from dp_dask.estimate import estimate

    result = estimate(load_schema_from(args.schema), args.rows, method=args.method,
                      sample_rows=args.sample_rows, workers=args.workers or os.cpu_count() or 1,
                      partition_rows=args.partition_rows)
    print(json.dumps(result.to_json(), indent=2) if args.json else result.describe())


def run_stats(args: argparse.Namespace) -> None:
    from dp_dask.stats import release_stats

    started = _started()
    ledger = Ledger(args.ledger)
    release = release_stats(
        args.data, args.schema, epsilon=args.epsilon, mechanism=args.mechanism, k=args.k,
        network=args.network, public_sample=args.public_sample,
        network_share=args.network_from_noisy_tables, smoothing=args.smoothing,
        noise_sampler=args.noise_sampler, noise_seed=args.noise_seed, ledger=ledger,
        dataset_name=args.dataset_name, run_id=args.run_id,
        budget_epsilon=args.budget_epsilon, force=args.force, show_progress=not args.quiet)
    privacy = release.metadata["privacy"]
    print(f"{privacy['label']}: {privacy['statement']} (ε={privacy['epsilon']:g})")
    if args.mechanism == "tabular-ddp":
        plain = privacy["dp_without_assumption"]["epsilon"]
        print(f"   fallback to plain DP: {privacy['fallback']}; as plain DP (no network "
              f"assumption) the same noise gives ε={plain:.6g}")
    print("stage timings: " + ", ".join(f"{k} {v:.2f}s" for k, v in release.timings.items()))
    paths = release.write(args.out)
    for kind, path in paths.items():
        print(f"{kind:>9}: {path}")
    entries = release.metadata.get("ledger")
    write_summary(args, args.out, job_summary(
        args, args.mechanism, release.timings, privacy,
        None if entries is None else {"path": str(ledger.path), **entries}, paths, *started))


def run_ledger_list(args: argparse.Namespace) -> None:
    print(ledger_report(Ledger(args.ledger), args.dataset))


def run_ledger_set_budget(args: argparse.Namespace) -> None:
    ledger = Ledger(args.ledger)
    budget = ledger.set_budget(args.name, args.epsilon, args.delta)
    total = ledger.total(budget.dataset_name)
    print(f"budget of {budget.dataset_name!r}: ε={budget.epsilon:g} at δ={budget.delta:.3g} "
          f"({ledger.path}); spent so far: ε={total.epsilon:.6g} over {total.releases} DP "
          "release(s)")


def run_ledger_export(args: argparse.Namespace) -> None:
    ledger = Ledger(args.ledger)
    document = ledger.export()
    write_json(args.file, document)
    print(f"exported {len(document['entries'])} entries and {len(document['budgets'])} "
          f"budgets of {ledger.path} to {args.file}")


def run_ledger_import(args: argparse.Namespace) -> None:
    ledger = Ledger(args.ledger)
    try:
        document = json.loads(args.file.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{args.file}: not JSON ({exc})") from exc
    added = ledger.import_(document)
    print(f"imported {added['entries']} entries and {added['budgets']} budgets into "
          f"{ledger.path} ({added['unchanged']} already there)")


def run_schema_draft(args: argparse.Namespace) -> None:
    from dp_dask.data.draft import draft_schema, parse_range, write_draft

    private = args.dp_epsilon is not None  # else public information only: no value is read
    if private and args.out.exists() and not args.force:  # refused before anything is spent
        raise ValueError(f"{args.out} exists; pass --force to overwrite it")
    with (dask_client(args.scheduler, n_workers=args.workers, memory_limit=args.memory_limit,
                      quiet=True) if private else contextlib.nullcontext()):
        draft = draft_schema(
            args.data, public=args.public, ranges=dict(parse_range(r) for r in args.range),
            max_categories=args.max_categories, name=args.name, dp_epsilon=args.dp_epsilon,
            dp_delta=args.dp_delta, dp_columns=args.dp_columns,
            dp_grids=dict(parse_range(g, "--dp-grid") for g in args.dp_grid) or None,
            dp_bins=args.dp_bins, ledger=args.ledger, dataset_name=args.dataset_name,
            noise_sampler=args.noise_sampler, noise_seed=args.noise_seed,
            public_types=args.public_types)
    path = write_draft(draft, args.out, force=args.force)
    print(draft.summary())
    print(f"schema draft: {path}")


def run_schema_check(args: argparse.Namespace) -> None:
    from dp_dask.data.draft import NOT_PRIVATE, check_schema

    table = check_schema(args.data, args.schema, show_progress=_progress(args))
    print(NOT_PRIVATE)
    print(markdown_table(table))
    stops = table.loc[table["fit"] != "ok", "column"].tolist()
    print(f"a fit would stop at column(s) {stops}: add the values to the schema (from public "
          "sources) or map them to a public bin" if stops else "every value has a bin: ok")


def _schema_commands(commands: argparse._SubParsersAction) -> None:
    schema = commands.add_parser("schema", help="draft a schema from public information, or "
                                 "check the data against one (data owner only)")
    actions = schema.add_subparsers(dest="action", required=True)
    draft = actions.add_parser(
        "draft", help="a schema from column names and storage types, public ranges and a "
        "public codebook or sample; never from the private values")
    draft.add_argument("data", help="the input (Parquet/CSV): only its header/metadata is read")
    draft.add_argument("--out", type=Path, required=True, help="schema JSON to write")
    draft.add_argument("--public", default=None, metavar="FILE",
                       help="public codebook (JSON) or public sample file (CSV/Parquet)")
    draft.add_argument("--range", action="append", default=[], metavar="NAME=START:STOP:STEP",
                       help="public bounds of a numeric column, or public years of a datetime "
                       "column (calendar features released as one timestamp; repeatable)")
    draft.add_argument("--max-categories", type=int, default=50, metavar="K",
                       help="from a public sample: past K levels keep the top K and 'other'")
    draft.add_argument("--public-types", action="store_true",
                       help="the input's storage types (Parquet schema) are public, fixed by the "
                       "pipeline that wrote it: draft output dtypes from them (default: they are "
                       "data, as one null turns pandas' int64 into float64; marked so)")
    draft.add_argument("--name", default=None, help="schema name (default: the input's stem)")
    draft.add_argument("--force", action="store_true", help="overwrite --out")
    dp = draft.add_argument_group(
        "drafting under DP (opt-in)", "with --dp-epsilon, placeholder columns are drafted from "
        "the data under (ε, δ)-DP: categories by thresholded noisy counts, numeric bins at DP "
        "quantiles; the spend is recorded in the ledger and in the schema")
    dp.add_argument("--dp-epsilon", type=epsilon_value, default=None, metavar="E",
                    help="ε spent on drafting (split equally over the DP columns)")
    dp.add_argument("--dp-delta", type=delta_value, default=None, metavar="D",
                    help="δ spent on drafting (thresholding the values present needs δ > 0)")
    dp.add_argument("--dp-columns", nargs="+", default=None, metavar="NAME",
                    help="columns to draft under DP (default: every placeholder)")
    dp.add_argument("--dp-grid", action="append", default=[], metavar="NAME=START:STOP:STEP",
                    help="public grid of a numeric column's DP quantiles (default for integer/"
                    "float columns: 0, ±{1,2,3,5,7}·10^j; a CSV column without one is text)")
    dp.add_argument("--dp-bins", type=positive_int, default=10, metavar="K",
                    help="numeric columns: edges at the DP i/K quantiles (default 10)")
    dp.add_argument("--ledger", default=None, metavar="PATH|URL", help=LEDGER_HELP)
    dp.add_argument("--dataset-name", default=None, metavar="NAME",
                    help="the dataset's name in the ledger (default: the input's file stem)")
    dp.add_argument("--noise-sampler", choices=["opendp", "numpy"], default="opendp",
                    help="opendp (secure, default) or numpy (seeded; testing only)")
    dp.add_argument("--noise-seed", type=non_negative_int, default=None,
                    help="seed of the numpy noise sampler: never for a real draft")
    _cluster_options(draft)
    draft.set_defaults(run=run_schema_draft, cluster=False, quiet=True)
    check = actions.add_parser(
        "check", help="NOT PRIVATE: per column, how many raw values are missing or outside the "
        "schema (printed for the data owner, never written)")
    check.add_argument("data", help="the private input (Parquet/CSV)")
    check.add_argument("schema", help="schema JSON or built-in name")
    _cluster_options(check)
    check.set_defaults(run=run_schema_check)


def _evaluation_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True,
                        help="the raw data (Parquet/CSV): the data owner's evaluation only")
    parser.add_argument("--schema", required=True, help="schema JSON or built-in name")
    parser.add_argument("--q3-sample", type=positive_int, default=DEFAULT_Q3_SAMPLE,
                        help="3-way queries: all if at most this many, else a uniform sample "
                        f"of this size (default {DEFAULT_Q3_SAMPLE:,})")
    parser.add_argument("--force", action="store_true",
                        help="write --out even inside a release directory (its outputs are "
                        "exact functions of the raw data, not differentially private)")


def _synth_arguments() -> argparse.ArgumentParser:
    """The options of ``synth``, which a job config gives (``dp-dask run``)."""
    parser = argparse.ArgumentParser(add_help=False)
    _data_options(parser)
    _privacy_options(parser)
    _ledger_options(parser)
    _sampling_options(parser)
    _cluster_options(parser)
    return parser


def _stats_arguments() -> argparse.ArgumentParser:
    """The options of ``stats``, which a job config with ``job: stats`` gives."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--data", required=True, help="Parquet file/directory or CSV")
    parser.add_argument("--schema", required=True, help="schema JSON or built-in name")
    parser.add_argument("--out", type=Path, required=True,
                        help="directory for histograms.{json,csv} and metadata.json")
    parser.add_argument("--summary", default=None, metavar="PATH",
                        help="write a run summary JSON here (default: none; 'dp-dask run': "
                        "<out>.run.json)")
    parser.add_argument("--epsilon", type=epsilon_value, default=1.0, help="ε (default 1)")
    parser.add_argument("--mechanism", choices=["laplace", "tabular-ddp"], default="laplace",
                        help="laplace (ε-DP, default) or tabular-ddp (ε-dependent DP: holds "
                        "only if the network describes the population)")
    parser.add_argument("--k", type=positive_int, default=10,
                        help="tabular-ddp: columns per chunk (default 10)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--network", default=None, metavar="FILE",
                        help="tabular-ddp: public Bayesian network (JSON edges + CPTs)")
    source.add_argument("--public-sample", default=None, metavar="FILE",
                        help="tabular-ddp: public sample (CSV/Parquet) to learn the network from")
    source.add_argument("--network-from-noisy-tables", type=positive_float, default=None,
                        metavar="SHARE", help="tabular-ddp: spend this share of ε (0-1) on "
                        "DP noisy 2-way tables and learn the network from them")
    parser.add_argument("--smoothing", type=float, default=0.01, metavar="LAMBDA",
                        help="tabular-ddp: mix each edge's pair table with uniform at λ "
                        "(public; default 0.01)")
    parser.add_argument("--noise-sampler", choices=["opendp", "numpy"], default="opendp",
                        help="opendp (secure, default) or numpy (seeded; testing only)")
    parser.add_argument("--noise-seed", type=non_negative_int, default=None,
                        help="seed of the numpy noise sampler: never for a real release")
    _ledger_options(parser)
    _cluster_options(parser)
    return parser


# a job config's ``job`` (dp_dask.config.JOBS) -> the options and the run of its command
JOB_COMMANDS = {"synth": (_synth_arguments, run_synth), "stats": (_stats_arguments, run_stats)}


def job_arguments(config: Path, overrides: list[str]) -> argparse.Namespace:
    """The arguments of the command a job config names (synth, stats) that the config gives,
    overridden by ``overrides``."""
    command, values = load_config(config)
    arguments, run = JOB_COMMANDS[command]
    parser = Parser(prog=f"dp-dask run {config}", parents=[arguments()])
    parser.set_defaults(run=run, command=command, config=config)
    check_values(values, parser, config)  # errors naming the config's key, not the option
    values = overridden(values, parser, overrides)
    return parser.parse_args([*config_argv(values), *overrides])


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


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="dp-dask", description="Differentially private synthetic data (Gaussian copula) "
        "on Dask. Run 'dp-dask demo' for an end-to-end example.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {dp_dask.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    fit = commands.add_parser("fit", help="fit a DP model to private data and save it")
    _data_options(fit)
    fit.add_argument("--model", required=True,
                     help="directory or object-store URL (s3://...) to save the model in")
    fit.add_argument("--summary", default=None, metavar="PATH",
                     help="write a run summary JSON here (default: none)")
    _privacy_options(fit)
    _ledger_options(fit)
    _cluster_options(fit)
    fit.set_defaults(run=run_fit)

    sample = commands.add_parser("sample", help="sample a release from a saved model")
    sample.add_argument("--model", required=True,
                        help="model directory or object-store URL (from fit)")
    _storage_options(sample)
    _sampling_options(sample)
    _cluster_options(sample)
    sample.set_defaults(run=run_sample)

    synth = commands.add_parser("synth", help="fit and sample in one job",
                                parents=[_synth_arguments()])
    synth.set_defaults(run=run_synth)

    run = commands.add_parser(
        "run", help="run a job config (YAML): synth (fit and sample), or stats with 'job: "
        "stats'; options of that command given after the file override it",
        description="Run a job config: see docs/config.md.")
    run.add_argument("config", type=Path, help="the job config (YAML)")
    run.add_argument("overrides", nargs=argparse.REMAINDER, metavar="OPTIONS",
                     help="options of the job's command (synth, stats) overriding the config, "
                     "e.g. --epsilon 2")
    run.set_defaults(run=None, cluster=False, quiet=True)

    demo = commands.add_parser("demo", help="generate census-like data and release it")
    demo.add_argument("--demo-rows", type=positive_int, default=1_000_000, help="rows of demo data")
    _privacy_options(demo)
    _sampling_options(demo, out_default=Path("dp-dask-demo"), summary=False)
    _cluster_options(demo)
    demo.set_defaults(run=run_demo)

    evaluate = commands.add_parser(
        "evaluate", help="(α, β) errors of a release's 1-/2-/3-way counting queries, and "
        "its values' distances (KS, W1, quantiles, Spearman) to the real columns")
    _evaluation_options(evaluate)
    evaluate.add_argument("--synthetic", required=True,
                          help="decoded synthetic table (typed values or schema labels) or "
                          "a release directory or object-store prefix, e.g. from synth (a release "
                          "is read only if complete)")
    _storage_options(evaluate)
    evaluate.add_argument("--out", type=Path, default=None,
                          help="directory for alpha-beta.{md,csv,json}, values.{md,csv,json} "
                          "(typed releases) and report.html, the data owner's HTML report "
                          "(default: print only)")
    evaluate.add_argument("--workload", type=workload_groups, default=None, metavar="GROUPS",
                          help="also report these column groups' marginals apart (as synth's "
                          "--workload, e.g. 'income,*,*')")
    evaluate.add_argument("--seed", type=non_negative_int, default=0,
                          help="seed of the Q3 sample and of the value metrics' row sample")
    _cluster_options(evaluate)
    evaluate.set_defaults(run=run_evaluate)

    report = commands.add_parser(
        "report", help="ε sweep of the copula and reference releases: tables, plots, report.md")
    _evaluation_options(report)
    report.add_argument("--out", type=Path, required=True, help="output directory")
    report.add_argument("--epsilons", type=epsilon_value, nargs="+", default=[0.25, 0.5, 1, 2, 5],
                        help="ε values to sweep (default 0.25 0.5 1 2 5)")
    report.add_argument("--seeds", type=positive_int, default=3,
                        help="seeds per ε, 0..N-1, for noise and sampling (default 3)")
    report.add_argument("--table-epsilon", type=epsilon_value, default=1.0,
                        help="ε of the (α, β) table and the classifier (default 1)")
    report.add_argument("--delta", type=delta_value, default=DEFAULT_DELTA,
                        help="δ in (0, 1) (default 2^-30)")
    report.add_argument("--calibration-draws", type=positive_int, default=200_000,
                        help="draws per attribute to calibrate decoding (default 200,000)")
    report.add_argument("--test-data", default=None,
                        help="held-out real rows for the classifier test (needs --target)")
    report.add_argument("--target", default=None, help="attribute the classifier predicts")
    _cluster_options(report)
    report.set_defaults(run=run_report)

    plan = commands.add_parser(
        "plan", help="sizes, memory and time of a run, from the schema and the row count "
        "(reads no data)")
    plan.add_argument("--schema", required=True, help="schema JSON or built-in name")
    plan.add_argument("--rows", type=positive_int, required=True, help="rows of the input")
    plan.add_argument("--sample-rows", type=positive_int, default=None,
                      help="synthetic rows (default: as many as --rows)")
    plan.add_argument("--method", choices=sorted(Synthesizer.methods), default="marginals",
                      help="the method to fit")
    plan.add_argument("--workers", type=positive_int, default=None,
                      help="workers (default: one per core of this machine)")
    plan.add_argument("--partition-rows", type=positive_int, default=None,
                      help="rows per output partition (default: as sample/synth choose)")
    plan.add_argument("--json", action="store_true", help="print JSON")
    plan.set_defaults(run=run_plan, cluster=False, quiet=True)

    stats = commands.add_parser(
        "stats", help="per-column noisy histograms: plain DP (laplace) or Tabular-DDP "
        "(dependent DP: weaker, opt-in)", parents=[_stats_arguments()])
    stats.set_defaults(run=run_stats)

    from dp_dask.audit import command as audit_command  # dp_dask/audit/command.py

    audit_command.add_arguments(commands)
    _schema_commands(commands)

    ledger = commands.add_parser("ledger", help="the privacy ledger: what each dataset has spent")
    actions = ledger.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="entries and each dataset's composed total")
    listing.add_argument("--dataset", default=None, metavar="NAME", help="one dataset only")
    budget = actions.add_parser("set-budget", help="store a dataset's total (ε, δ) budget")
    budget.add_argument("name", help="dataset name (as given by --dataset-name, or the stem)")
    budget.add_argument("--epsilon", type=positive_float, required=True, help="total ε")
    budget.add_argument("--delta", type=delta_value, default=DEFAULT_DELTA,
                        help="total δ (default 2^-30)")
    export = actions.add_parser("export", help="write every entry and budget to a JSON file")
    load = actions.add_parser("import", help="add an export's entries and budgets (ids kept; "
                              "rows already here are skipped, differing ones refused)")
    for action, verb in ((export, "write"), (load, "read")):
        action.add_argument("file", type=Path, metavar="PATH.json", help=f"the JSON to {verb}")
    for action, run in ((listing, run_ledger_list), (budget, run_ledger_set_budget),
                        (export, run_ledger_export), (load, run_ledger_import)):
        action.add_argument("--ledger", default=None, metavar="PATH|URL", help=LEDGER_HELP)
        action.set_defaults(run=run, cluster=False, quiet=True)
    return parser


def preflight(args: argparse.Namespace) -> None:
    """Everything the job can check before the cluster starts and any data is read: outputs
    writable (made absolute, so remote workers write where the driver means), schema sane and
    affordable, inputs complete, a saved model intact."""
    options = getattr(args, "storage_options", None)
    if args.command == "fit":
        args.model = check_model_output(location(args.model), options)
    if args.command == "sample":
        # Loaded once: checked here, sampled from in run_sample (a wide model is ~100 MB).
        args.model = load_model(args.model, options)
        resolve_device(args.model, args.sampling_device)
    if args.command in ("fit", "synth", "demo"):
        check_method_options(args.method, args.method_options)
    if args.command in ("synth", "demo"):  # before the fit spends any budget
        choose_device(args.sampling_device, Synthesizer.methods[args.method].gpu_sampling,
                      f"method {args.method!r}")
    if args.command == "demo":
        args.out = local_only(args.out, "--out")  # the demo writes its input data there too
    if args.command in ("sample", "synth", "demo"):
        args.out = resolve_target(args.out)
        if isinstance(args.out, str):
            check_target(args.out, options)  # reach the store, the bucket, no foreign data
    if isinstance(getattr(args, "out", None), str | Path) and not remote(args.out):
        args.out = check_output_dir(args.out, "--out")
    if getattr(args, "ledger", None) is not None and database_url(args.ledger) is not None:
        Ledger(args.ledger).check()  # an unreachable server fails now, before any data is read
    elif getattr(args, "ledger", None) is not None:
        args.ledger = local_only(args.ledger, "--ledger")  # SQLite needs a local file
    if getattr(args, "schema", None) is None:
        return
    schema = load_schema_from(args.schema, getattr(args, "storage_options", None))
    if args.command in ("fit", "synth"):
        check_cost(schema, args.method)
    check_input(local_path(args.data), schema)


def _undecodable(args: argparse.Namespace, exc: UnicodeDecodeError) -> str:
    """A decoding failure (raised on a worker, so without its file) located in the input."""
    data = getattr(args, "data", None)
    if data is not None and str(data).lower().endswith((".csv", ".csv.gz")):
        return f"input {data}: {locate_non_utf8(data)} is not UTF-8 text; save it as UTF-8"
    return f"input is not UTF-8 text ({exc})"


class JsonFormatter(logging.Formatter):
    """One JSON object per log line (``--log-format json``), for log collectors."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                     timespec="milliseconds"),
                 "level": record.levelname, "logger": record.name,
                 "message": record.getMessage()}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


_json_logs = False  # set by main: warnings and the error line as JSON log lines too


@contextlib.contextmanager
def _logging(args: argparse.Namespace) -> Iterator[None]:
    """dp_dask's stage logs (and with JSON, distributed's) on stderr in the chosen format, for
    the job only: the loggers are restored after it (main may run many times in a process)."""
    global _json_logs
    _json_logs = getattr(args, "log_format", "text") == "json"
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if _json_logs else
                         logging.Formatter("%(asctime)s %(name)s %(message)s"))
    loggers = [log] + ([logging.getLogger("distributed")] if _json_logs else [])
    saved = [(logger, logger.handlers[:], logger.propagate, logger.level) for logger in loggers]
    for logger in loggers:
        logger.handlers, logger.propagate = [handler], False
    log.setLevel(logging.WARNING if args.quiet else logging.INFO)
    try:
        yield
    finally:
        for logger, handlers, propagate, level in saved:
            logger.handlers, logger.propagate = handlers, propagate
            logger.setLevel(level)
        _json_logs = False


def _say(kind: str, message: str) -> None:
    """A warning or the error line: ``dp-dask: error: ...``, or a JSON log line."""
    if _json_logs:
        log.log(logging.ERROR if kind == "error" else logging.WARNING, message)
    else:
        print(f"dp-dask: {kind}: {message}", file=sys.stderr)


def _show_warning(message: Warning | str, category: type[Warning], *args: Any,
                  **kwargs: Any) -> None:
    if issubclass(category, DpDaskWarning):
        _say("warning", str(message))
    else:
        SHOW_WARNING(message, category, *args, **kwargs)


SHOW_WARNING = warnings.showwarning
# Errors of the input, the options or the cluster: a one-line message and exit code 2. ValueError
# covers EncodingError, SchemaError, EmptyInputError and dp_dask.checks' errors; OSError covers
# missing, unreadable and unwritable paths.
USER_ERRORS = (ValueError, OSError, LedgerError, ClusterError)


def main(argv: list[str] | None = None) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("default", DpDaskWarning)  # once each, though checked twice
        warnings.showwarning = _show_warning
        args = build_parser().parse_args(argv)
        if args.command == "run":
            try:
                args = job_arguments(args.config, args.overrides)
            except ConfigError as exc:
                _say("error", str(exc))
                return 2
        with _logging(args):
            try:
                if not getattr(args, "cluster", True):
                    args.run(args)
                    return 0
                preflight(args)
                with (dask.config.set({SHOW_VALUES: getattr(args, "show_values", False)}),
                      dask_client(args.scheduler, n_workers=args.workers,
                                  memory_limit=args.memory_limit, quiet=args.quiet,
                                  kind=args.cluster_kind, options=args.cluster_options)):
                    args.run(args)
            except UnicodeDecodeError as exc:
                _say("error", _undecodable(args, exc))
                return 2
            except USER_ERRORS as exc:
                _say("error", str(exc) or type(exc).__name__)
                return 2
    return 0

if __name__ == "__main__":
    sys.exit(main())
