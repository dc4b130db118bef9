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
from dp_dask.config import FitSpec
from dp_dask.data.io import location


def arguments() -> argparse.ArgumentParser:
    """The options of ``fit``, which a job config with ``job: fit`` gives."""
    parser = argparse.ArgumentParser(add_help=False)
    data_options(parser)
    parser.add_argument("--model", required=True,
                        help="directory or object-store URL (s3://...) to save the model in")
    parser.add_argument("--summary", default=None, metavar="PATH",
                        help="write a run summary JSON here (default: none; 'dp-dask run': "
                        "<model>.run.json)")
    privacy_options(parser)
    ledger_options(parser)
    cluster_options(parser)
    return parser


def add_arguments(commands: argparse._SubParsersAction) -> None:
    fit = commands.add_parser("fit", help="fit a DP model to private data and save it",
                              parents=[arguments()])
    fit.set_defaults(run=run, preflight=preflight)


def preflight(spec: FitSpec) -> None:
    spec.model = check_model_output(location(spec.model), spec.storage_options)
    check_method_options(spec.method, spec.method_options)
    check_ledger(spec)
    check_data(spec, spec.method)


def run(spec: FitSpec) -> None:
    started = started_now()
    synthesizer = new_synthesizer(spec, spec.schema).fit(spec.data,
                                                         storage_options=spec.storage_options)
    path = synthesizer.save(spec.model, spec.storage_options)
    report(synthesizer, {"model": path})
    write_summary(spec, path, run_summary(spec, synthesizer, {"model": path}, *started))
