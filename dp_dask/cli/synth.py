"""``dp-dask synth``: fit and sample in one job (also a job config's default job). Without
``--schema`` the schema is drafted from the data under DP first, with a share of the budget
(:mod:`dp_dask.one_command`), and written beside the release (``schema.json``)."""

from __future__ import annotations

import argparse
import warnings
from dataclasses import replace
from pathlib import Path

from dp_dask.cli.common import (
    check_data,
    check_ledger,
    check_release_out,
    flag_parameters,
    new_synthesizer,
    privacy_unit,
    progress,
    report,
)
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
from dp_dask.data.draft import write_draft
from dp_dask.data.io import join, load_schema_from, local_path, location
from dp_dask.exceptions import DpDaskWarning
from dp_dask.keywords import as_flags
from dp_dask.one_command import OneCommand, draft_and_fit
from dp_dask.release import release_lock
from dp_dask.synthesizer import Synthesizer


def arguments() -> argparse.ArgumentParser:
    """The options of ``synth``, which a job config gives (``dp-dask run``)."""
    parser = argparse.ArgumentParser(add_help=False)
    data_options(parser, schema_required=False)
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
    if spec.schema is not None:
        check_data(spec, spec.method)
    elif not Path(local_path(spec.data)).exists():  # drafted from the data: nothing to check
        raise FileNotFoundError(f"input {spec.data} does not exist")


def check_condition(spec: SynthSpec) -> None:
    """--where and --balance, before the fit spends anything: a method whose model can be
    conditioned, and a condition on the schema's attributes and values (whether the fitted
    model gives it any probability is known after the fit only: checked when sampling)."""
    if spec.where is None and spec.balance is None:
        return
    if (spec.method_options or {}).get("unit_shape"):
        raise ConditionError("--where/--balance: a unit-shaped release (unit_shape) draws its "
                             "units whole and cannot be sampled conditionally")
    if not Synthesizer.methods[spec.method].conditional:
        raise ConditionError(f"--where/--balance: method {spec.method!r} cannot sample "
                             f"conditionally; methods that can: {conditional_methods()}")
    if spec.schema is None:  # a drafted schema's values are known only once drafted (spent)
        raise ConditionError("--where/--balance: give the release's --schema (draft it first "
                             "with 'dp-dask schema draft'); without one the values a condition "
                             "names are not known before the draft spends its budget")
    schema = load_schema_from(spec.schema, spec.storage_options)
    if spec.where is not None:
        compile_where(spec.where, schema, spec.decode)
    if spec.balance is not None:
        balanced_attribute(spec.balance, schema)


def rows_when_conditioned(spec: SynthSpec) -> SynthSpec:
    """A conditioned release (--where/--balance) of a method that releases units by default
    under a privacy unit (the marginals method's ``unit_shape``) releases rows: units are drawn
    whole and cannot be conditioned. ``unit_shape`` given is kept (true is refused by
    :func:`check_condition`, before anything is spent)."""
    options = spec.method_options or {}
    if ((spec.where is None and spec.balance is None) or "unit_shape" in options
            or "unit_shape" not in Synthesizer.methods[spec.method].options()):
        return spec
    unit = privacy_unit(spec) or (None if spec.schema is None else load_schema_from(
        spec.schema, spec.storage_options).privacy_unit)
    if unit is None:  # rows anyway: the options stay as given
        return spec
    warnings.warn(f"privacy unit {unit['column']!r}: releasing rows, not units: "
                  "--where/--balance condition rows, and units are drawn whole "
                  "(--method-options '{\"unit_shape\": false}' silences this)",
                  DpDaskWarning, stacklevel=2)
    return replace(spec, method_options={**options, "unit_shape": False})


def run(spec: SynthSpec) -> None:
    started = started_now()
    spec = rows_when_conditioned(spec)
    # before the fit spends any budget; in a store, the lock's PUT is the write probe
    with release_lock(spec.out, spec.storage_options):
        drafted = None
        if spec.schema is None:  # one command, one ε: the draft's share, then the release
            drafted = _draft_and_fit(spec)
            synthesizer = drafted.synthesizer
        else:
            synthesizer = new_synthesizer(spec, spec.schema).fit(
                spec.data, storage_options=spec.storage_options)
        try:
            paths = synthesizer.write(spec.out, spec.rows, seed=spec.seed,
                                      partition_rows=spec.partition_rows, with_model=True,
                                      device=spec.sampling_device,
                                      storage_options=spec.storage_options,
                                      decode=spec.decode, with_binary=spec.zarr,
                                      where=spec.where, balance=spec.balance)
        except ConditionError as refused:
            raise ConditionError(_model_kept(spec, synthesizer, refused)) from refused
    if drafted is not None:
        # beside the release's metadata (a local release; a store's keeps it in metadata.json)
        if not isinstance(paths["metadata"], str):
            paths["schema"] = write_draft(drafted.draft, Path(paths["metadata"]).parent
                                          / "schema.json", force=True)
        print(as_flags(drafted.draft.summary()))
    report(synthesizer, paths)
    write_summary(spec, spec.out, run_summary(spec, synthesizer, paths, *started))


def _model_kept(spec: SynthSpec, synthesizer: Synthesizer, refused: ConditionError) -> str:
    """The noisy model a condition it gives no probability stopped, saved in the release's
    place (the fit's charge stands: noise was drawn), and how to draw from it at no cost."""
    saved = synthesizer.save(join(location(spec.out), "model"), spec.storage_options)
    return (f"{refused}. The fit's budget is spent (noise was drawn) and its noisy model is "
            f"saved at {saved}: draw rows from it at no further cost with 'dp-dask sample "
            f"--model {saved} --out ... --rows N' and another --where/--balance")


def _draft_and_fit(spec: SynthSpec) -> OneCommand:
    """The one command's draft and fit, with the job's privacy, ledger and method options."""
    return draft_and_fit(
        spec.data, epsilon=spec.epsilon, delta=spec.delta, method=spec.method,
        privacy_unit=privacy_unit(spec), ledger=spec.ledger, dataset_name=spec.dataset_name,
        run_id=spec.run_id,
        budget_epsilon=spec.budget_epsilon, force=spec.force, noise_sampler=spec.noise_sampler,
        noise_seed=spec.noise_seed, show_progress=progress(spec),
        storage_options=spec.storage_options, **flag_parameters(spec),
        **(spec.method_options or {}))
