"""``dp-dask synth``: fit and sample in one job (also a job config's default job)."""

from __future__ import annotations

import argparse

from dp_dask.cli.common import check_data, check_ledger, check_release_out, new_synthesizer, report
from dp_dask.cli.options import (
    check_method_options,
    cluster_options,
    condition_options,
    conditional_methods,
    data_options,
    ledger_options,
    privacy_options,
    sampling_options,
)
from dp_dask.cli.summary import run_summary, started_now, write_summary
from dp_dask.conditions import ConditionError, balanced_attribute, compile_where
from dp_dask.config import SynthSpec
from dp_dask.copula.sample import choose_device
from dp_dask.data.io import load_schema_from
from dp_dask.release import release_lock
from dp_dask.synthesizer import Synthesizer


def arguments() -> argparse.ArgumentParser:
    """The options of ``synth``, which a job config gives (``dp-dask run``)."""
    parser = argparse.ArgumentParser(add_help=False)
    data_options(parser)
    privacy_options(parser)
    ledger_options(parser)
    sampling_options(parser)
    condition_options(parser)
    cluster_options(parser)
    return parser


def add_arguments(commands: argparse._SubParsersAction) -> None:
    synth = commands.add_parser("synth", help="fit and sample in one job", parents=[arguments()])
    synth.set_defaults(run=run, preflight=preflight)


def preflight(spec: SynthSpec) -> None:
    check_method_options(spec.method, spec.method_options)
    # before the fit spends any budget
    choose_device(spec.sampling_device, Synthesizer.methods[spec.method].gpu_sampling,
                  f"method {spec.method!r}")
    check_condition(spec)
    check_release_out(spec)
    check_ledger(spec)
    check_data(spec, spec.method)


def check_condition(spec: SynthSpec) -> None:
    """--where and --balance, before the fit spends anything: a method whose model can be
    conditioned, and a condition on the schema's attributes and values (whether the fitted
    model gives it any probability is known after the fit only: checked when sampling)."""
    if spec.where is None and spec.balance is None:
        return
    if not Synthesizer.methods[spec.method].conditional:
        raise ConditionError(f"--where/--balance: method {spec.method!r} cannot sample "
                             f"conditionally; methods that can: {conditional_methods()}")
    schema = load_schema_from(spec.schema, spec.storage_options)
    if spec.where is not None:
        compile_where(spec.where, schema, spec.decode)
    if spec.balance is not None:
        balanced_attribute(spec.balance, schema)


def run(spec: SynthSpec) -> None:
    started = started_now()
    # before the fit spends any budget; in a store, the lock's PUT is the write probe
    with release_lock(spec.out, spec.storage_options):
        synthesizer = new_synthesizer(spec, spec.schema).fit(
            spec.data, storage_options=spec.storage_options)
        paths = synthesizer.write(spec.out, spec.rows, seed=spec.seed,
                                  partition_rows=spec.partition_rows, with_model=True,
                                  device=spec.sampling_device,
                                  storage_options=spec.storage_options,
                                  decode=spec.decode, with_binary=spec.zarr,
                                  where=spec.where, balance=spec.balance)
    report(synthesizer, paths)
    write_summary(spec, spec.out, run_summary(spec, synthesizer, paths, *started))
