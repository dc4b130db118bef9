"""``dp-dask evaluate`` (a release against the real data) and ``dp-dask report`` (an ε sweep):
the data owner's utility checks, exact functions of the raw data."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from dp_dask.checks import delta_value, epsilon_value, non_negative_int, positive_int
from dp_dask.cli.common import check_data, check_out
from dp_dask.cli.options import (
    cluster_options,
    evaluation_options,
    storage_options,
    workload_groups,
)
from dp_dask.data.io import read_table, remote
from dp_dask.data.schema import Schema, load_schema
from dp_dask.evaluate.constraints import constraint_violations
from dp_dask.evaluate.queries import evaluate_release
from dp_dask.evaluate.tables import markdown_table, wide_table
from dp_dask.release import checked_table, pinned_table
from dp_dask.synthesizer import DEFAULT_DELTA


def add_arguments(commands: argparse._SubParsersAction) -> None:
    evaluate = commands.add_parser(
        "evaluate", help="(α, β) errors of a release's 1-/2-/3-way counting queries, "
        "each raw column against the released one (KS or TVD of the raw values, quantiles, "
        "out-of-range and invented-null shares, lost levels, Arrow types), its values' "
        "distances (KS, W1, quantiles, Spearman) to the real columns, and its rows breaking "
        "each of the schema's constraints")
    evaluation_options(evaluate)
    evaluate.add_argument("--synthetic", required=True,
                          help="decoded synthetic table (typed values or schema labels) or "
                          "a release directory or object-store prefix, e.g. from synth (a release "
                          "is read only if complete)")
    storage_options(evaluate)
    evaluate.add_argument("--out", type=Path, default=None,
                          help="directory for alpha-beta.{md,csv,json}, values.{md,csv,json} "
                          "(typed releases), columns.csv and report.html, the data owner's "
                          "HTML report "
                          "(default: print only)")
    evaluate.add_argument("--workload", type=workload_groups, default=None, metavar="GROUPS",
                          help="also report these column groups' marginals apart (as synth's "
                          "--workload, e.g. 'income,*,*')")
    evaluate.add_argument("--seed", type=non_negative_int, default=0,
                          help="seed of the Q3 sample and of the value metrics' row sample")
    evaluate.add_argument("--target", default=None, metavar="COLUMN",
                          help="also train logistic regression and gradient boosting to predict "
                          "this attribute, on the release and on the real training rows, tested "
                          "on real held-out rows, and score column shapes and pairs "
                          "(tasks.json, the report)")
    evaluate.add_argument("--test-data", default=None,
                          help="held-out real rows for --target (default: a seeded 30 %% split "
                          "of --data by a hash of each row)")
    evaluate.add_argument("--unit", default=None, metavar="COLUMN",
                          help="also check units by this column (a release under a privacy "
                          "unit): rows-per-unit TVD, the share of units whose unit-level "
                          "attributes are constant (units.json)")
    evaluate.add_argument("--max-rows-per-unit", type=positive_int, default=None, metavar="K",
                          help="with --unit: the real units' rows clipped to K (default: the "
                          "schema's privacy_unit max_rows, else unclipped)")
    evaluate.add_argument("--order", default=None, metavar="COLUMN",
                          help="with --unit and --lag: the column ordering a unit's rows")
    evaluate.add_argument("--lag", default=None, metavar="ATTRIBUTE",
                          help="with --unit and --order: report the lag-1 correlation error "
                          "of this numeric attribute within units")
    cluster_options(evaluate)
    evaluate.set_defaults(run=run_evaluate, preflight=preflight)

    report = commands.add_parser(
        "report", help="ε sweep of the copula and reference releases: tables, plots, report.md")
    evaluation_options(report)
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
    cluster_options(report)
    report.set_defaults(run=run_report, preflight=preflight)



def preflight(args: argparse.Namespace) -> None:
    check_out(args)
    check_data(args)


def run_evaluate(args: argparse.Namespace) -> None:
    from dp_dask.evaluate.columns import columns_markdown, compare_columns
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
    tasks = None
    if args.target is not None:
        from dp_dask.evaluate.tasks import evaluate_tasks

        tasks = evaluate_tasks(data, synthetic, schema, target=args.target,
                               test_data=args.test_data, seed=args.seed)
    if args.out:
        comparison, paths = write_evaluation(data, synthetic, schema, args.out,
                                             q3_sample=args.q3_sample, seed=args.seed,
                                             force=args.force, tasks=tasks)
        records, workload, values = comparison.records, comparison.workload, comparison.values
        constraints, columns = comparison.constraints, comparison.columns
    else:
        synthetic = pinned_table(synthetic)  # both reads see one version of a release
        records, workload = evaluate_release(data, synthetic, schema,
                                             q3_sample=args.q3_sample, seed=args.seed)
        values = compare_values(data, synthetic, schema, seed=args.seed)
        columns = compare_columns(data, synthetic, schema, seed=args.seed)
        constraints = (constraint_violations(synthetic, schema) if schema.constraints
                       else None)
    print(f"Q3: {workload.describe()}")
    print(markdown_table(wide_table(records, ["workload", "queries"])))
    print("\ncolumns (each raw column against the released one):")
    print(columns_markdown(columns), end="")
    if values is not None:
        print(f"\nvalues ({values.sample}):")
        print(summary_markdown(values), end="")
    if constraints is not None:
        print("\nconstraints (rows breaking each; 0 expected):")
        print(markdown_table(constraints))
    if args.workload is not None:
        from dp_dask.evaluate.workload import workload_errors

        errors = workload_errors(data, synthetic, schema, args.workload)
        print(f"\nworkload ({len(errors)} marginals, mean TVD {errors['tvd'].mean():.4g}):")
        print(markdown_table(errors))
    if tasks is not None:
        from dp_dask.evaluate.tasks import tasks_tables

        for name, table in tasks_tables(tasks).items():
            print(f"\n{name}:")
            print(markdown_table(table, "{:.3f}"))
    if args.unit is not None:
        paths |= _unit_checks(args, data, synthetic, schema)
    for kind, path in paths.items():
        print(f"{kind:>11}: {path}")


def _unit_checks(args: argparse.Namespace, data: Any, synthetic: Any,
                 schema: Schema) -> dict[str, Path]:
    """--unit's checks, printed and (with --out) written to units.json."""
    from dp_dask.evaluate.units import unit_checks

    declared = schema.privacy_unit or {}
    max_rows = args.max_rows_per_unit or (declared.get("max_rows") if isinstance(
        declared.get("max_rows"), int) else None)
    record = unit_checks(data, synthetic, schema, args.unit, max_rows=max_rows,
                         order=args.order, lag=args.lag)
    print(f"\nunits (by {args.unit!r}):")
    for key in ("units", "rows_per_unit_tvd", "mean_rows_per_unit", "unit_constant_share",
                "real_unit_constant_share", "lag1", "lag1_error"):
        if key in record:
            print(f"  {key}: {record[key]}")
    if not args.out:
        return {}
    path = args.out / "units.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    return {"units": path}


def run_report(args: argparse.Namespace) -> None:
    from dp_dask.evaluate.sweep import write_report

    started = time.perf_counter()
    path = write_report(args.data, load_schema(args.schema), args.out,
                        epsilons=tuple(args.epsilons), seeds=args.seeds, delta=args.delta,
                        q3_sample=args.q3_sample, table_epsilon=args.table_epsilon,
                        calibration_draws=args.calibration_draws, test_data=args.test_data,
                        target=args.target, force=args.force)
    print(f"report: {path} ({time.perf_counter() - started:.0f} s)")

