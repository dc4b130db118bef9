"""What several commands do alike: the synthesizer from the options, its report, and the
checks before the cluster starts."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from dp_dask.checks import check_cost, check_input, check_output_dir
from dp_dask.cli.options import FLAG_PARAMETERS, REFUSED_ELSEWHERE, privacy_unit, taking
from dp_dask.config import Options
from dp_dask.data.io import load_schema_from, local_only, local_path, remote
from dp_dask.privacy.labels import describe
from dp_dask.privacy.ledger import Ledger
from dp_dask.privacy.ledger_store import database_url
from dp_dask.release import check_target, resolve_target
from dp_dask.synthesizer import Synthesizer


def progress(args: Options) -> bool:
    """Progress bars on a terminal only: in a log file a bar's redraws are one endless line, and
    the stage log lines (one per stage, dp_dask.timing) say the same."""
    return not args.quiet and sys.stdout.isatty()


def new_synthesizer(args: Options, schema: str) -> Synthesizer:
    """The method ``--method`` names, with the privacy, ledger and method options given."""
    common = {"epsilon": args.epsilon, "delta": args.delta,
              "noise_sampler": args.noise_sampler, "noise_seed": args.noise_seed,
              "show_progress": progress(args),
              "ledger": False if getattr(args, "no_ledger", False) else getattr(args, "ledger",
                                                                                None),
              "dataset_name": getattr(args, "dataset_name", None),
              "run_id": getattr(args, "run_id", None),
              "budget_epsilon": getattr(args, "budget_epsilon", None),
              "force": getattr(args, "force", False), "privacy_unit": privacy_unit(args),
              "accept_row_level_draft": getattr(args, "accept_row_level_draft", False)}
    common |= flag_parameters(args)
    return Synthesizer.create(args.method,
                              load_schema_from(schema, getattr(args, "storage_options", None)),
                              **common, **(args.method_options or {}))


def flag_parameters(args: Options) -> dict[str, Any]:
    """The method's parameters that have options of their own (``FLAG_PARAMETERS``), given as
    the method declares (``Synthesizer.options``): the CLI knows no method by name."""
    takes = Synthesizer.methods[args.method].options()
    parameters = {}
    for name, flag in FLAG_PARAMETERS.items():
        value = getattr(args, name, None)
        if value is None:
            continue
        if name in takes:
            parameters[name] = value
        elif name in REFUSED_ELSEWHERE:
            raise ValueError(f"{flag}: method {args.method!r} takes no {name} "
                             f"({taking(name)} only)")
    return parameters


def report(synthesizer: Synthesizer, paths: dict[str, Path]) -> None:
    """What a fit or release printed: its privacy, its ledger entry, its stages and paths."""
    metadata = synthesizer.model.metadata
    print(describe(metadata["privacy"]) + f"; method {synthesizer.name}")
    noise = metadata.get("quality", {}).get("noise")
    if noise:  # warned at the fit too; recorded in metadata.json
        print(f"    noise: σ / mean noisy cell count = {noise['ratio']:.3g} over the "
              f"{noise['tables']} tables (σ {noise['sigma']:.3g}, mean cell "
              f"{noise['mean_cell']:.3g}; from {noise['warn_at']:g}: mostly noise)")
    entry = synthesizer.ledger_entry_
    if synthesizer.ledger is not None and entry is not None:
        if synthesizer.reused_:
            print(f"   ledger: run {entry.run_id!r} of {entry.dataset_id} was recorded at "
                  f"{entry.created}: reused its model {entry.model_path}, nothing spent again")
        else:
            total = synthesizer.ledger.total(entry.dataset_name)
            counted = "counted" if entry.counted else "recorded, not counted (not DP)"
            print(f"   ledger: run {entry.run_id!r} of {entry.dataset_id} {counted}"
                  f"{' (forced)' if entry.forced else ''}; dataset total ε={total.epsilon:.6g} "
                  f"at δ={total.delta:.3g} ({synthesizer.ledger.path})")
    if synthesizer.timings_:
        print("stage timings: "
              + ", ".join(f"{k} {v:.2f}s" for k, v in synthesizer.timings_.items()))
    for kind, path in paths.items():
        print(f"{kind:>9}: {path}")


# Checks of preflight (a command's own, before the cluster starts and any data is read), in
# the order each command runs them.

def check_out(args: Options) -> None:
    """A local --out: made absolute (so remote workers write where the driver means) and
    checked writable."""
    if isinstance(args.out, str | Path) and not remote(args.out):
        args.out = check_output_dir(args.out, "--out")


def check_release_out(args: Options) -> None:
    """A release's --out: its pointer resolved; in a store, the store, the bucket and the
    absence of foreign data checked; locally, as :func:`check_out`."""
    args.out = resolve_target(args.out)
    if isinstance(args.out, str):
        check_target(args.out, getattr(args, "storage_options", None))
    check_out(args)


def check_ledger(args: Options) -> None:
    """An unreachable ledger server fails now, before any data is read; SQLite needs a local
    file."""
    if args.ledger is not None and database_url(args.ledger) is not None:
        Ledger(args.ledger).check()
    elif args.ledger is not None:
        args.ledger = local_only(args.ledger, "--ledger")


def check_data(args: Options, method: str | None = None) -> None:
    """The schema sane (and, given the method, affordable) and the input complete."""
    schema = load_schema_from(args.schema, getattr(args, "storage_options", None))
    if method is not None:
        check_cost(schema, Synthesizer.methods[method])
    check_input(local_path(args.data), schema)
