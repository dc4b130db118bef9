"""``dp-dask run``: a job config (YAML) filled into the options of the command it names."""

from __future__ import annotations

import argparse
from pathlib import Path

from dp_dask.cli import stats, synth
from dp_dask.cli.options import Parser
from dp_dask.config import check_values, config_argv, load_config, overridden

# a job config's ``job`` (dp_dask.config.JOBS) -> the command whose options and run it takes
JOB_COMMANDS = {"synth": synth, "stats": stats}


def add_arguments(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser(
        "run", help="run a job config (YAML): synth (fit and sample), or stats with 'job: "
        "stats'; options of that command given after the file override it",
        description="Run a job config: see docs/config.md.")
    run.add_argument("config", type=Path, help="the job config (YAML)")
    run.add_argument("overrides", nargs=argparse.REMAINDER, metavar="OPTIONS",
                     help="options of the job's command (synth, stats) overriding the config, "
                     "e.g. --epsilon 2")
    # main replaces these arguments by job_arguments' before anything runs
    run.set_defaults(run=None, cluster=False, quiet=True)


def job_arguments(config: Path, overrides: list[str]) -> argparse.Namespace:
    """The arguments of the command a job config names (synth, stats) that the config gives,
    overridden by ``overrides``."""
    command, values = load_config(config)
    module = JOB_COMMANDS[command]
    parser = Parser(prog=f"dp-dask run {config}", parents=[module.arguments()])
    parser.set_defaults(run=module.run, preflight=module.preflight, command=command,
                        config=config)
    check_values(values, parser, config)  # errors naming the config's key, not the option
    values = overridden(values, parser, overrides)
    return parser.parse_args([*config_argv(values), *overrides])
