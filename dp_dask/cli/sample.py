"""``dp-dask sample``: sample a release from a saved model."""

from __future__ import annotations

import argparse

from dp_dask.cli.common import check_release_out, progress, report
from dp_dask.cli.options import (
    cluster_options,
    condition_options,
    sampling_options,
    storage_options,
)
from dp_dask.cli.summary import run_summary, started_now, write_summary
from dp_dask.config import SampleSpec
from dp_dask.copula.sample import resolve_device
from dp_dask.release import release_lock
from dp_dask.synthesizer import Synthesizer, load_model


def arguments() -> argparse.ArgumentParser:
    """The options of ``sample``, which a job config with ``job: sample`` gives."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--model", required=True,
                        help="model directory or object-store URL (from fit)")
    condition_options(parser)
    storage_options(parser)
    sampling_options(parser)
    cluster_options(parser)
    return parser


def add_arguments(commands: argparse._SubParsersAction) -> None:
    sample = commands.add_parser("sample", help="sample a release from a saved model",
                                 parents=[arguments()])
    sample.set_defaults(run=run, preflight=preflight)


def preflight(spec: SampleSpec) -> None:
    # Loaded once: checked here, sampled from in run (a wide model is ~100 MB).
    spec.loaded_model = load_model(spec.model, spec.storage_options)
    resolve_device(spec.loaded_model, spec.sampling_device)
    # an unknown name, a bad value or a condition of probability 0 stop here (exit 2)
    Synthesizer.from_model(spec.loaded_model).sampler(spec.sampling_device, spec.where,
                                                      spec.balance, spec.decode)
    check_release_out(spec)


def run(spec: SampleSpec) -> None:
    started = started_now()
    # before any work: a second job on this target fails at once
    with release_lock(spec.out, spec.storage_options):
        synthesizer = Synthesizer.from_model(spec.loaded_model, show_progress=progress(spec))
        paths = synthesizer.write(spec.out, spec.rows, seed=spec.seed,
                                  partition_rows=spec.partition_rows,
                                  device=spec.sampling_device,
                                  storage_options=spec.storage_options,
                                  decode=spec.decode, with_binary=spec.zarr,
                                  where=spec.where, balance=spec.balance)
    report(synthesizer, paths)
    write_summary(spec, spec.out, run_summary(spec, synthesizer, paths, *started))
