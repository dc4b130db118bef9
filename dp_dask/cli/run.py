"""``dp-dask run``: a job config (YAML) read into the job spec of the command it names."""

from __future__ import annotations

import argparse
from pathlib import Path

from dp_dask.cli import demo, fit, sample, stats, synth, tables
from dp_dask.cli.options import Parser
from dp_dask.config import SPECS, JobSpec, config_spec, load_config

# a job config's ``job`` (dp_dask.config.SPECS) -> the command whose options and run it takes
JOB_COMMANDS = {"synth": synth, "stats": stats, "fit": fit, "sample": sample, "demo": demo,
                "tables": tables}


def add_arguments(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser(
        "run", help="run a job config (YAML) of any job kind: synth (the default), or with "
        f"'job: KIND' one of {', '.join(SPECS)}; options of that command given after the file "
        "override it",
        description="Run a job config: see docs/config.md.")
    run.add_argument("config", type=Path, help="the job config (YAML)")
    run.add_argument("overrides", nargs=argparse.REMAINDER, metavar="OPTIONS",
                     help="options of the job's command (synth, fit, ...) overriding the "
                     "config, e.g. --epsilon 2")
    # main runs job_spec's command instead, before anything runs
    run.set_defaults(run=None, cluster=False, quiet=True)


def job_spec(config: Path, overrides: list[str]) -> JobSpec:
    """The spec of the job a config names, overridden by ``overrides``."""
    command, values = load_config(config)
    parser = Parser(prog=f"dp-dask run {config}", parents=[JOB_COMMANDS[command].arguments()])
    return config_spec(command, values, parser, overrides, config)
