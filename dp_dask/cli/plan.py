"""``dp-dask plan``: sizes, memory and time of a run, from the schema and the row count."""

from __future__ import annotations

import argparse
import json
import os

from dp_dask.checks import positive_int
from dp_dask.cli.options import json_object
from dp_dask.data.io import load_schema_from
from dp_dask.synthesizer import Synthesizer


def add_arguments(commands: argparse._SubParsersAction) -> None:
    plan = commands.add_parser(
        "plan", help="sizes, memory and time of a run, from the schema and the row count "
        "(reads no data)")
    plan.add_argument("--schema", required=True, help="schema JSON or built-in name")
    plan.add_argument("--rows", type=positive_int, required=True, help="rows of the input")
    plan.add_argument("--sample-rows", type=positive_int, default=None,
                      help="synthetic rows (default: as many as --rows)")
    plan.add_argument("--method", choices=sorted(Synthesizer.methods), default="marginals",
                      help="the method to fit")
    plan.add_argument("--workers", type=positive_int, default=None,
                      help="workers (default: one per core of this machine)")
    plan.add_argument("--partition-rows", type=positive_int, default=None,
                      help="rows per output partition (default: as sample/synth choose)")
    plan.add_argument("--method-options", type=json_object, default=None, metavar="JSON",
                      help='the method\'s options as JSON; its "config" is planned for '
                      '(e.g. \'{"config": {"cliques": "auto"}}\': the cliques\' memory cap)')
    plan.add_argument("--json", action="store_true", help="print JSON")
    plan.set_defaults(run=run, cluster=False, quiet=True)


def run(args: argparse.Namespace) -> None:
    from dp_dask.estimate import estimate

    result = estimate(load_schema_from(args.schema), args.rows, method=args.method,
                      sample_rows=args.sample_rows, workers=args.workers or os.cpu_count() or 1,
                      partition_rows=args.partition_rows,
                      config=(args.method_options or {}).get("config"))
    print(json.dumps(result.to_json(), indent=2) if args.json else result.describe())

