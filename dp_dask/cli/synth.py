"""``dp-dask synth``: fit and sample in one job (also a job config's default job)."""

from __future__ import annotations

import argparse

from dp_dask.cli.common import check_data, check_ledger, check_release_out, new_synthesizer, report
from dp_dask.cli.options import (
    check_method_options,
    cluster_options,
    data_options,
    ledger_options,
    privacy_options,
    sampling_options,
)
from dp_dask.cli.summary import run_summary, started_now, write_summary
from dp_dask.copula.sample import choose_device
from dp_dask.release import release_lock
from dp_dask.synthesizer import Synthesizer


def arguments() -> argparse.ArgumentParser:
    """The options of ``synth``, which a job config gives (``dp-dask run``)."""
    parser = argparse.ArgumentParser(add_help=False)
    data_options(parser)
    privacy_options(parser)
    ledger_options(parser)
    sampling_options(parser)
    cluster_options(parser)
    return parser


def add_arguments(commands: argparse._SubParsersAction) -> None:
    synth = commands.add_parser("synth", help="fit and sample in one job", parents=[arguments()])
    synth.set_defaults(run=run, preflight=preflight)


def preflight(args: argparse.Namespace) -> None:
    check_method_options(args.method, args.method_options)
    # before the fit spends any budget
    choose_device(args.sampling_device, Synthesizer.methods[args.method].gpu_sampling,
                  f"method {args.method!r}")
    check_release_out(args)
    check_ledger(args)
    check_data(args, args.method)


def run(args: argparse.Namespace) -> None:
    started = started_now()
    # before the fit spends any budget; in a store, the lock's PUT is the write probe
    with release_lock(args.out, args.storage_options):
        synthesizer = new_synthesizer(args, args.schema).fit(
            args.data, storage_options=args.storage_options)
        paths = synthesizer.write(args.out, args.rows, seed=args.seed,
                                  partition_rows=args.partition_rows, with_model=True,
                                  device=args.sampling_device,
                                  storage_options=args.storage_options,
                                  decode=args.decode, with_binary=args.zarr)
    report(synthesizer, paths)
    write_summary(args, args.out, run_summary(args, synthesizer, paths, *started))
