"""``dp-dask sample``: sample a release from a saved model."""

from __future__ import annotations

import argparse

from dp_dask.cli.common import check_release_out, progress, report
from dp_dask.cli.options import cluster_options, sampling_options, storage_options
from dp_dask.cli.summary import run_summary, started_now, write_summary
from dp_dask.copula.sample import resolve_device
from dp_dask.release import release_lock
from dp_dask.synthesizer import Synthesizer, load_model


def add_arguments(commands: argparse._SubParsersAction) -> None:
    sample = commands.add_parser("sample", help="sample a release from a saved model")
    sample.add_argument("--model", required=True,
                        help="model directory or object-store URL (from fit)")
    sample.add_argument("--where", default=None, metavar="CONDITION",
                        help="rows that hold a condition, e.g. \"sex == 'Female' and age >= 30\" "
                        "(==, !=, <, <=, >, >=, in, and, or, not; `name` for other names): "
                        "drawn from the model conditioned on it (marginals models)")
    sample.add_argument("--balance", default=None, metavar="ATTRIBUTE",
                        help="equal rows for each class of this attribute (those the condition "
                        "leaves possible), up to one row per partition")
    storage_options(sample)
    sampling_options(sample)
    cluster_options(sample)
    sample.set_defaults(run=run, preflight=preflight)


def preflight(args: argparse.Namespace) -> None:
    # Loaded once: checked here, sampled from in run (a wide model is ~100 MB).
    args.model = load_model(args.model, args.storage_options)
    resolve_device(args.model, args.sampling_device)
    # an unknown name, a bad value or a condition of probability 0 stop here (exit 2)
    Synthesizer.from_model(args.model).sampler(args.sampling_device, args.where, args.balance,
                                               args.decode)
    check_release_out(args)


def run(args: argparse.Namespace) -> None:
    started = started_now()
    # before any work: a second job on this target fails at once
    with release_lock(args.out, args.storage_options):
        synthesizer = Synthesizer.from_model(args.model, show_progress=progress(args))
        paths = synthesizer.write(args.out, args.rows, seed=args.seed,
                                  partition_rows=args.partition_rows,
                                  device=args.sampling_device,
                                  storage_options=args.storage_options,
                                  decode=args.decode, with_binary=args.zarr,
                                  where=args.where, balance=args.balance)
    report(synthesizer, paths)
    write_summary(args, args.out, run_summary(args, synthesizer, paths, *started))
