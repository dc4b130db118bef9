"""``dp-dask``: one subcommand per job (fit, sample, synth, demo, evaluate, report)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from dp_dask.checks import (
    EPSILON_WARN_HIGH,
    EPSILON_WARN_LOW,
    DpDaskWarning,
    check_cost,
    check_input,
    check_output_dir,
    delta_value,
    epsilon_value,
    locate_non_utf8,
    memory_limit,
    non_negative_int,
    positive_float,
    positive_int,
)
from dp_dask.cluster import ClusterError, compute, dask_client
from dp_dask.counts import count_graph
from dp_dask.evaluate import (
    DEFAULT_Q3_SAMPLE,
    evaluate_release,
    marginal_distances,
    markdown_table,
    wide_table,
)
from dp_dask.io import read_table
from dp_dask.privacy.labels import describe
from dp_dask.privacy.ledger import LEDGER_ENV, Ledger, LedgerError
from dp_dask.privacy.ledger import report as ledger_report
from dp_dask.release import release_lock
from dp_dask.schema import load_schema
from dp_dask.synthesizer import DEFAULT_DELTA, Synthesizer, load_model

log = logging.getLogger("dp_dask")


def _cluster_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cluster")
    group.add_argument("--scheduler", metavar="ADDRESS",
                       help="address of a running Dask scheduler (default: start local workers)")
    group.add_argument("--workers", type=positive_int, default=None,
                       help="local workers to start (default: one per core)")
    group.add_argument("--memory-limit", type=memory_limit, default="auto",
                       help="memory limit per local worker: auto, a size (4GiB; 0 for none) or "
                       "a fraction of RAM")
    parser.add_argument("--quiet", action="store_true", help="no progress bars or stage logs")


def _privacy_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("privacy and method")
    group.add_argument("--method", choices=sorted(Synthesizer.methods), default="marginals",
                       help="marginals (default: consistent noisy marginals + row updates) or "
                       "copula (the paper's binary Gaussian copula)")
    group.add_argument("--epsilon", type=epsilon_value, default=1.0,
                       help="ε of the release (default 1; a warning outside "
                       f"[{EPSILON_WARN_LOW:g}, {EPSILON_WARN_HIGH:g}])")
    group.add_argument("--delta", type=delta_value, default=DEFAULT_DELTA,
                       help="δ in (0, 1) (default 2^-30)")
    group.add_argument("--accountant", choices=["exact", "zcdp"], default="exact",
                       help="Gaussian accounting: exact privacy curve (default) or zCDP")
    group.add_argument("--mechanism", choices=["gaussian", "laplace"], default="gaussian",
                       help="copula only: one Gaussian mechanism (default) or the paper's Laplace")
    group.add_argument("--within-attribute", choices=["zero", "pairwise"], default="pairwise",
                       help="copula only: latent correlation of an attribute's own dummies")
    group.add_argument("--noise-sampler", choices=["opendp", "numpy"], default="opendp",
                       help="opendp (secure, default) or numpy (seeded; testing only)")
    group.add_argument("--noise-seed", type=non_negative_int, default=None,
                       help="seed of the numpy noise sampler: never for a real release")


def _ledger_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "ledger", "every fit is checked against the dataset's budget and recorded, before any "
        "data is read")
    group.add_argument("--ledger", type=Path, default=None, metavar="PATH",
                       help=f"privacy ledger (default: ${LEDGER_ENV}, else "
                       "$XDG_CONFIG_HOME/dp_dask/ledger.sqlite)")
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


def _sampling_options(parser: argparse.ArgumentParser, out_default: Path | None = None) -> None:
    group = parser.add_argument_group("sampling")
    group.add_argument("--rows", type=positive_int, default=None,
                       help="synthetic rows (default: as many as the input)")
    group.add_argument("--seed", type=non_negative_int, default=0,
                       help="seed of the synthetic sample")
    group.add_argument("--partition-rows", type=positive_int, default=None,
                       help="rows per output partition / Zarr chunk")
    group.add_argument("--out", type=Path, default=out_default, required=out_default is None,
                       help=f"output directory (default: {out_default})")


def _synthesizer(args: argparse.Namespace, schema: str) -> Synthesizer:
    common = {"epsilon": args.epsilon, "delta": args.delta, "accountant": args.accountant,
              "noise_sampler": args.noise_sampler, "noise_seed": args.noise_seed,
              "show_progress": not args.quiet,
              "ledger": False if getattr(args, "no_ledger", False) else getattr(args, "ledger",
                                                                                None),
              "dataset_name": getattr(args, "dataset_name", None),
              "run_id": getattr(args, "run_id", None),
              "budget_epsilon": getattr(args, "budget_epsilon", None),
              "force": getattr(args, "force", False)}
    if args.method == "copula":
        common |= {"mechanism": args.mechanism, "within_attribute": args.within_attribute}
    return Synthesizer.create(args.method, schema, **common)


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


def run_fit(args: argparse.Namespace) -> None:
    synthesizer = _synthesizer(args, args.schema).fit(args.data)
    path = synthesizer.save(args.model)
    _report(synthesizer, {"model": path})


def run_sample(args: argparse.Namespace) -> None:
    with release_lock(args.out):  # before any work: a second job on this target fails at once
        synthesizer = Synthesizer.from_model(args.model, show_progress=not args.quiet)
        paths = synthesizer.write(args.out, args.rows, seed=args.seed,
                                  partition_rows=args.partition_rows)
    _report(synthesizer, paths)


def run_synth(args: argparse.Namespace) -> None:
    with release_lock(args.out):  # before the fit spends any budget
        synthesizer = _synthesizer(args, args.schema).fit(args.data)
        paths = synthesizer.write(args.out, args.rows, seed=args.seed,
                                  partition_rows=args.partition_rows, with_model=True)
    _report(synthesizer, paths)


def run_demo(args: argparse.Namespace) -> None:
    from dp_dask.demo import write_census

    started = time.perf_counter()
    data = write_census(args.out / "census.parquet", n_rows=args.demo_rows, seed=args.seed,
                        overwrite=True)
    print(f"wrote {args.demo_rows:,} census-like rows to {data} "
          f"in {time.perf_counter() - started:.1f}s")
    args.no_ledger = True  # the demo data is generated here and public: nothing to account for
    synthesizer = _synthesizer(args, "demo").fit(data)
    paths = {"model": synthesizer.save(args.out / "model")}
    paths |= synthesizer.write(args.out / "release", args.rows, seed=args.seed,
                               partition_rows=args.partition_rows)
    _report(synthesizer, paths)
    # The demo data is itself synthetic and public, so comparing with it reveals nothing.
    schema = synthesizer.schema
    real, synthetic = compute(
        count_graph(read_table(data, schema), schema),
        count_graph(read_table(paths["parquet"], schema.as_labels()), schema.as_labels()))
    print("utility (total variation distance, 0 = identical):")
    print(json.dumps(marginal_distances(real, synthetic, schema), indent=2))


def run_evaluate(args: argparse.Namespace) -> None:
    from dp_dask.html_report import write_evaluation  # scipy.stats: ~1 s to import

    schema = load_schema(args.schema)
    paths = {}
    if args.out:
        comparison, paths = write_evaluation(args.data, args.synthetic, schema, args.out,
                                             q3_sample=args.q3_sample, seed=args.seed,
                                             force=args.force)
        records, workload = comparison.records, comparison.workload
    else:
        records, workload = evaluate_release(args.data, args.synthetic, schema,
                                             q3_sample=args.q3_sample, seed=args.seed)
    print(f"Q3: {workload.describe()}")
    print(markdown_table(wide_table(records, ["workload", "queries"])))
    for kind, path in paths.items():
        print(f"{kind:>4}: {path}")


def run_report(args: argparse.Namespace) -> None:
    from dp_dask.report import write_report

    started = time.perf_counter()
    path = write_report(args.data, load_schema(args.schema), args.out,
                        epsilons=tuple(args.epsilons), seeds=args.seeds, delta=args.delta,
                        q3_sample=args.q3_sample, table_epsilon=args.table_epsilon,
                        calibration_draws=args.calibration_draws, test_data=args.test_data,
                        target=args.target, force=args.force)
    print(f"report: {path} ({time.perf_counter() - started:.0f} s)")


def run_ledger_list(args: argparse.Namespace) -> None:
    print(ledger_report(Ledger(args.ledger), args.dataset))


def run_ledger_set_budget(args: argparse.Namespace) -> None:
    ledger = Ledger(args.ledger)
    budget = ledger.set_budget(args.name, args.epsilon, args.delta)
    total = ledger.total(budget.dataset_name)
    print(f"budget of {budget.dataset_name!r}: ε={budget.epsilon:g} at δ={budget.delta:.3g} "
          f"({ledger.path}); spent so far: ε={total.epsilon:.6g} over {total.releases} DP "
          "release(s)")


def run_schema_draft(args: argparse.Namespace) -> None:
    from dp_dask.draft import draft_schema, parse_range, write_draft

    draft = draft_schema(args.data, public=args.public,
                         ranges=dict(parse_range(r) for r in args.range),
                         max_categories=args.max_categories, name=args.name)
    path = write_draft(draft, args.out, force=args.force)
    print(draft.summary())
    print(f"schema draft: {path}")


def run_schema_check(args: argparse.Namespace) -> None:
    from dp_dask.draft import NOT_PRIVATE, check_schema

    table = check_schema(args.data, args.schema, show_progress=not args.quiet)
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
                       help="public bounds of a numeric column (repeatable)")
    draft.add_argument("--max-categories", type=int, default=50, metavar="K",
                       help="from a public sample: past K levels keep the top K and 'other'")
    draft.add_argument("--name", default=None, help="schema name (default: the input's stem)")
    draft.add_argument("--force", action="store_true", help="overwrite --out")
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dp-dask", description="Differentially private synthetic data (Gaussian copula) "
        "on Dask. Run 'dp-dask demo' for an end-to-end example.")
    commands = parser.add_subparsers(dest="command", required=True)

    fit = commands.add_parser("fit", help="fit a DP model to private data and save it")
    fit.add_argument("--data", required=True, help="Parquet file/directory or CSV")
    fit.add_argument("--schema", required=True, help="schema JSON or built-in name (adult, demo)")
    fit.add_argument("--model", type=Path, required=True, help="directory to save the model in")
    _privacy_options(fit)
    _ledger_options(fit)
    _cluster_options(fit)
    fit.set_defaults(run=run_fit)

    sample = commands.add_parser("sample", help="sample a release from a saved model")
    sample.add_argument("--model", type=Path, required=True, help="model directory (from fit)")
    _sampling_options(sample)
    _cluster_options(sample)
    sample.set_defaults(run=run_sample)

    synth = commands.add_parser("synth", help="fit and sample in one job")
    synth.add_argument("--data", required=True, help="Parquet file/directory or CSV")
    synth.add_argument("--schema", required=True, help="schema JSON or built-in name")
    _privacy_options(synth)
    _ledger_options(synth)
    _sampling_options(synth)
    _cluster_options(synth)
    synth.set_defaults(run=run_synth)

    demo = commands.add_parser("demo", help="generate census-like data and release it")
    demo.add_argument("--demo-rows", type=positive_int, default=1_000_000, help="rows of demo data")
    _privacy_options(demo)
    _sampling_options(demo, out_default=Path("dp-dask-demo"))
    _cluster_options(demo)
    demo.set_defaults(run=run_demo)

    evaluate = commands.add_parser(
        "evaluate", help="(α, β) errors of a release's 1-/2-/3-way counting queries")
    _evaluation_options(evaluate)
    evaluate.add_argument("--synthetic", required=True,
                          help="decoded synthetic Parquet (schema labels) or a release "
                          "directory, e.g. from synth (a release is read only if complete)")
    evaluate.add_argument("--out", type=Path, default=None,
                          help="directory for alpha-beta.{md,csv,json} and report.html, the data "
                          "owner's HTML report (default: print only)")
    evaluate.add_argument("--seed", type=non_negative_int, default=0, help="seed of the Q3 sample")
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
    for action, run in ((listing, run_ledger_list), (budget, run_ledger_set_budget)):
        action.add_argument("--ledger", type=Path, default=None, metavar="PATH",
                            help=f"privacy ledger (default: ${LEDGER_ENV}, else "
                            "$XDG_CONFIG_HOME/dp_dask/ledger.sqlite)")
        action.set_defaults(run=run, cluster=False, quiet=True)
    return parser


def preflight(args: argparse.Namespace) -> None:
    """Everything the job can check before the cluster starts and any data is read: outputs
    writable (made absolute, so remote workers write where the driver means), schema sane and
    affordable, inputs complete, a saved model intact."""
    if args.command == "fit":
        args.model = check_output_dir(args.model, "--model")
    if args.command == "sample":
        load_model(args.model)
    if getattr(args, "out", None) is not None:
        args.out = check_output_dir(args.out, "--out")
    if getattr(args, "schema", None) is None:
        return
    schema = load_schema(args.schema)
    if args.command in ("fit", "synth"):
        check_cost(schema, args.method)
    check_input(args.data, schema)


def _undecodable(args: argparse.Namespace, exc: UnicodeDecodeError) -> str:
    """A decoding failure (raised on a worker, so without its file) located in the input."""
    data = getattr(args, "data", None)
    if data is not None and str(data).lower().endswith((".csv", ".csv.gz")):
        return f"input {data}: {locate_non_utf8(data)} is not UTF-8 text; save it as UTF-8"
    return f"input is not UTF-8 text ({exc})"


def _show_warning(message: Warning | str, category: type[Warning], *args: Any,
                  **kwargs: Any) -> None:
    if issubclass(category, DpDaskWarning):
        print(f"dp-dask: warning: {message}", file=sys.stderr)
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
        logging.basicConfig(format="%(asctime)s %(name)s %(message)s")
        log.setLevel(logging.WARNING if args.quiet else logging.INFO)
        try:
            if not getattr(args, "cluster", True):
                args.run(args)
                return 0
            preflight(args)
            with dask_client(args.scheduler, n_workers=args.workers,
                             memory_limit=args.memory_limit, quiet=args.quiet):
                args.run(args)
        except UnicodeDecodeError as exc:
            print(f"dp-dask: error: {_undecodable(args, exc)}", file=sys.stderr)
            return 2
        except USER_ERRORS as exc:
            print(f"dp-dask: error: {exc or type(exc).__name__}", file=sys.stderr)
            return 2
    return 0

if __name__ == "__main__":
    sys.exit(main())
