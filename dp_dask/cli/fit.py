"""``dp-dask fit``: fit a DP model to private data and save it."""

from __future__ import annotations

import argparse

from dp_dask.checks import check_model_output
from dp_dask.cli.common import check_data, check_ledger, new_synthesizer, report
from dp_dask.cli.options import (
    check_method_options,
    cluster_options,
    data_options,
    ledger_options,
    privacy_options,
)
from dp_dask.cli.summary import run_summary, started_now, write_summary
from dp_dask.data.io import location


def add_arguments(commands: argparse._SubParsersAction) -> None:
    fit = commands.add_parser("fit", help="fit a DP model to private data and save it")
    data_options(fit)
    fit.add_argument("--model", required=True,
                     help="directory or object-store URL (s3://...) to save the model in")
    fit.add_argument("--summary", default=None, metavar="PATH",
                     help="write a run summary JSON here (default: none)")
    privacy_options(fit)
    ledger_options(fit)
    cluster_options(fit)
    fit.set_defaults(run=run, preflight=preflight)


def preflight(args: argparse.Namespace) -> None:
    args.model = check_model_output(location(args.model), args.storage_options)
    check_method_options(args.method, args.method_options)
    check_ledger(args)
    check_data(args, args.method)


def run(args: argparse.Namespace) -> None:
    started = started_now()
    synthesizer = new_synthesizer(args, args.schema).fit(args.data,
                                                         storage_options=args.storage_options)
    path = synthesizer.save(args.model, args.storage_options)
    report(synthesizer, {"model": path})
    write_summary(args, path, run_summary(args, synthesizer, {"model": path}, *started))
