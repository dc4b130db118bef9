"""``dp-dask schema``: draft a schema from public information (``draft``), or check the data
against one (``check``, for the data owner only)."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from dp_dask.checks import delta_value, epsilon_value, positive_int
from dp_dask.cli.common import check_data, progress
from dp_dask.cli.options import (
    LEDGER_HELP,
    cluster_options,
    noise_options,
    privacy_unit,
    unit_options,
)
from dp_dask.cluster import dask_client
from dp_dask.data.attribute import TODO
from dp_dask.evaluate.tables import markdown_table
from dp_dask.keywords import as_flags


def add_arguments(commands: argparse._SubParsersAction) -> None:
    schema = commands.add_parser("schema", help="draft a schema from public information, or "
                                 "check the data against one (data owner only)")
    actions = schema.add_subparsers(dest="action", required=True)
    draft = actions.add_parser(
        "draft", help="a schema from column names and storage types, public ranges and a "
        "public codebook or sample; never from the private values")
    draft.add_argument("data", help="the input (Parquet/CSV): only its header/metadata is read")
    draft.add_argument("--out", type=Path, required=True, help="schema JSON to write")
    draft.add_argument("--public", default=None, metavar="FILE",
                       help="public codebook (JSON/YAML: per column categories, a range, a "
                       "format HHMM/currency/percent, units, type id) or public sample file "
                       "(CSV/Parquet)")
    draft.add_argument("--range", action="append", default=[], metavar="NAME=START:STOP:STEP",
                       help="public bounds of a numeric column, or public years of a datetime "
                       "column (calendar features released as one timestamp; repeatable)")
    draft.add_argument("--max-categories", type=int, default=50, metavar="K",
                       help="from a public sample: past K levels keep the top K and 'other'")
    draft.add_argument("--public-types", action=argparse.BooleanOptionalAction, default=False,
                       help="declare the input's storage types (Parquet schema) the data "
                       "owner's public metadata: output dtypes, kinds and never-null columns "
                       "drafted from them. Default (--no-public-types): they follow the values "
                       "(one null turns pandas' int64 into float64), so no dtype is drafted from "
                       "them, and under --dp-epsilon the types are decided from noisy counts")
    draft.add_argument("--on-unknown", choices=["kind", "error", "missing"], default="kind",
                       help="a value outside the drafted domain: a public bin by kind (default: "
                       "numbers clip to the nearest end bin, text 'other', the rest 'missing'), "
                       "'missing' for all, or 'error' (the fit stops, naming no value)")
    draft.add_argument("--ids", choices=["synthetic", "drop"], default="synthetic",
                       help="identifier columns (by codebook, name and storage type, or under DP "
                       "a noisy count of distinct values near the rows): released as synthetic "
                       "ids of a public format (default), or dropped")
    draft.add_argument("--name", default=None, help="schema name (default: the input's stem)")
    draft.add_argument("--force", action="store_true", help="overwrite --out")
    dp = draft.add_argument_group(
        "drafting under DP (opt-in)", "with --dp-epsilon, placeholder columns are drafted from "
        "the data under (ε, δ)-DP: each column's type by noisy counts (unless --public-types), "
        "categories by thresholded noisy counts, numeric ranges and bins by a DP search over "
        "its type's range, a timestamp's years; the spend is recorded in the ledger and in the "
        "schema. With --privacy-unit, each unit's rows are bounded first and the draft protects "
        "a unit, as its releases will")
    dp.add_argument("--dp-epsilon", type=epsilon_value, default=None, metavar="E",
                    help="ε spent on drafting (split equally over the DP columns)")
    dp.add_argument("--dp-delta", type=delta_value, default=None, metavar="D",
                    help="δ spent on drafting (thresholding the values present needs δ > 0)")
    dp.add_argument("--dp-columns", nargs="+", default=None, metavar="NAME",
                    help="columns to draft under DP (default: every placeholder)")
    dp.add_argument("--dp-grid", action="append", default=[], metavar="NAME=START:STOP:STEP",
                    help="public grid of a numeric column's DP quantiles, instead of the DP "
                    "range search of integer/float columns (a CSV column without one is text "
                    "or a number as its noisy counts say)")
    dp.add_argument("--dp-bins", type=positive_int, default=10, metavar="K",
                    help="numeric columns: edges at the DP i/K quantiles (default 10)")
    dp.add_argument("--ledger", default=None, metavar="PATH|URL", help=LEDGER_HELP)
    dp.add_argument("--dataset-name", default=None, metavar="NAME",
                    help="the dataset's name in the ledger, which its budget belongs to "
                    "(default: the input's file stem, with a warning)")
    noise_options(dp)
    unit_options(dp, release=False)  # the schema declares it; under DP its rows are bounded
    cluster_options(draft)
    draft.set_defaults(run=run_draft, cluster=False, quiet=True)
    check = actions.add_parser(
        "check", help="NOT PRIVATE: per column, how many raw values are missing or outside the "
        "schema (printed for the data owner, never written)")
    check.add_argument("data", help="the private input (Parquet/CSV)")
    check.add_argument("schema", help="schema JSON or built-in name")
    cluster_options(check)
    check.set_defaults(run=run_check, preflight=preflight)


def preflight(args: argparse.Namespace) -> None:
    check_data(args)  # schema check only: draft starts its own cluster, if any


def run_draft(args: argparse.Namespace) -> None:
    from dp_dask.data.draft import draft_schema, parse_range, write_draft

    private = args.dp_epsilon is not None  # else public information only: no value is read
    if private and args.out.exists() and not args.force:  # refused before anything is spent
        raise ValueError(f"{args.out} exists; pass --force to overwrite it")
    unit = privacy_unit(args)
    with (dask_client(args.scheduler, n_workers=args.workers, memory_limit=args.memory_limit,
                      quiet=True) if private else contextlib.nullcontext()):
        draft = draft_schema(
            args.data, public=args.public, ranges=dict(parse_range(r) for r in args.range),
            max_categories=args.max_categories, name=args.name, dp_epsilon=args.dp_epsilon,
            dp_delta=args.dp_delta, dp_columns=args.dp_columns,
            dp_grids=dict(parse_range(g, "--dp-grid") for g in args.dp_grid) or None,
            dp_bins=args.dp_bins, ledger=args.ledger, dataset_name=args.dataset_name,
            noise_sampler=args.noise_sampler, noise_seed=args.noise_seed,
            public_types=args.public_types, on_unknown=args.on_unknown,
            ids=args.ids, privacy_unit=unit)
    for spec in draft.schema["attributes"]:  # the file's placeholders name the CLI's flags
        if TODO in spec:
            spec[TODO] = as_flags(spec[TODO])
    path = write_draft(draft, args.out, force=args.force)
    print(as_flags(draft.summary()))
    print(f"schema draft: {path}")


def run_check(args: argparse.Namespace) -> None:
    from dp_dask.data.draft import NOT_PRIVATE, check_schema

    table = check_schema(args.data, args.schema, show_progress=progress(args))
    print(NOT_PRIVATE)
    print(markdown_table(table))
    stops = table.loc[table["fit"] != "ok", "column"].tolist()
    print(f"a fit would stop at column(s) {stops}: add the values to the schema (from public "
          "sources) or map them to a public bin" if stops else "every value has a bin: ok")
