"""``dp-dask``: one subcommand per job, one module per command (or family of commands).

A command module has ``add_arguments(commands)``, which adds its parser(s) and sets their
defaults: ``run`` (the job), ``preflight`` (its checks before the cluster starts and any data
is read, if it has any) and ``cluster=False`` for a command that starts no Dask cluster. Adding
a command is one module and one line in :data:`COMMANDS` (docs/architecture.md). A job command
(``dp_dask.config.SPECS``: synth, fit, sample, stats, demo, tables) runs with its job spec,
built from its options or, through ``dp-dask run``, from a job config; the others (evaluate,
plan, schema, ledger, audit) with their parsed options.
"""

from __future__ import annotations

import argparse
import warnings
from typing import Any

import dask

import dp_dask
from dp_dask.audit import command as audit
from dp_dask.checks import locate_non_utf8
from dp_dask.cli import (
    demo,
    evaluate,
    fit,
    ledger,
    plan,
    run,
    sample,
    schema,
    stats,
    synth,
    tables,
)
from dp_dask.cli.logs import Messages
from dp_dask.cli.options import Parser
from dp_dask.cli.run import JOB_COMMANDS, job_spec
from dp_dask.cluster import ClusterError, dask_client
from dp_dask.config import SPECS, ConfigError, JobSpec, Options
from dp_dask.data.encode import SHOW_VALUES
from dp_dask.exceptions import DpDaskWarning
from dp_dask.keywords import as_flags
from dp_dask.privacy.ledger import LedgerError
from dp_dask.synthesizer import Synthesizer

__all__ = ["COMMANDS", "build_parser", "job", "job_spec", "main", "preflight"]

# the commands, in the order of ``dp-dask --help``
COMMANDS = (fit, sample, synth, tables, run, demo, evaluate, plan, stats, audit, schema, ledger)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="dp-dask", description="Differentially private synthetic tables on Dask. The "
        "default method, marginals, measures noisy 1- and 2-way marginals and synthesises rows "
        "that match them; --method picks another (the Gaussian copula and its peers; one of "
        f"{', '.join(sorted(Synthesizer.methods))}). Every job ({', '.join(SPECS)}) also runs "
        "from a YAML job config: 'dp-dask run'. Run 'dp-dask demo' for an end-to-end example.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {dp_dask.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_arguments(commands)
    return parser


def job(args: argparse.Namespace) -> Options:
    """What the command runs with: a job command's spec (for ``run``, the config's), else the
    parsed options."""
    if args.command == "run":
        return job_spec(args.config, args.overrides)
    spec = SPECS.get(args.command)
    return args if spec is None else spec.of(args)


def preflight(command: Any, args: Options) -> None:
    """Everything the job can check before the cluster starts and any data is read (the
    command's ``preflight``): outputs writable (made absolute, so remote workers write where
    the driver means), schema sane and affordable, inputs complete, a saved model intact."""
    check = getattr(command, "preflight", None)
    if check is not None:
        check(args)


def _undecodable(args: Options, exc: UnicodeDecodeError) -> str:
    """A decoding failure (raised on a worker, so without its file) located in the input."""
    data = getattr(args, "data", None)
    if data is not None and str(data).lower().endswith((".csv", ".csv.gz")):
        return f"input {data}: {locate_non_utf8(data)} is not UTF-8 text; save it as UTF-8"
    return f"input is not UTF-8 text ({exc})"


# Errors of the input, the options or the cluster: a one-line message and exit code 2. ValueError
# covers EncodingError, SchemaError, EmptyInputError and dp_dask.checks' errors; OSError covers
# missing, unreadable and unwritable paths.
USER_ERRORS = (ValueError, OSError, LedgerError, ClusterError)


def main(argv: list[str] | None = None) -> int:
    messages = Messages()
    with warnings.catch_warnings():
        warnings.simplefilter("default", DpDaskWarning)  # once each, though checked twice
        warnings.showwarning = messages.show_warning
        try:
            args = job(build_parser().parse_args(argv))
        except ConfigError as exc:
            messages.say("error", str(exc))
            return 2
        # the command's run and preflight: a spec's command module's, else the parsed options'
        command = JOB_COMMANDS[args.command] if isinstance(args, JobSpec) else args
        with messages.logging(args):
            try:
                if not getattr(args, "cluster", True):
                    command.run(args)
                    return 0
                preflight(command, args)
                with (dask.config.set({SHOW_VALUES: getattr(args, "show_values", False)}),
                      dask_client(args.scheduler, n_workers=args.workers,
                                  memory_limit=args.memory_limit, quiet=args.quiet,
                                  kind=args.cluster_kind, options=args.cluster_options)):
                    command.run(args)
            except UnicodeDecodeError as exc:
                messages.say("error", _undecodable(args, exc))
                return 2
            except USER_ERRORS as exc:
                # the library names keyword arguments; the CLI user gave flags
                messages.say("error", as_flags(str(exc)) or type(exc).__name__)
                return 2
    return 0
