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
    storage_options(sample)
    sampling_options(sample)
    cluster_options(sample)
    sample.set_defaults(run=run, preflight=preflight)


def preflight(args: argparse.Namespace) -> None:
    # Loaded once: checked here, sampled from in run (a wide model is ~100 MB).
    args.model = load_model(args.model, args.storage_options)
    resolve_device(args.model, args.sampling_device)
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
                                  decode=args.decode, with_binary=args.zarr)
    report(synthesizer, paths)
    write_summary(args, args.out, run_summary(args, synthesizer, paths, *started))
