"""``dp-dask audit``: the empirical privacy audit's command (arguments and run)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dp_dask.audit.plants import PLANTS
from dp_dask.audit.report import format_table, run_audit, write_report
from dp_dask.audit.runner import ALPHA, AUDIT_DELTA
from dp_dask.audit.scenarios import scenarios
from dp_dask.checks import delta_value, positive_int


def add_arguments(commands: argparse._SubParsersAction) -> None:
    audit = commands.add_parser(
        "audit", help="empirical privacy audit: a lower bound on each method's epsilon from "
        "worst-case neighbours (exit 1 when it exceeds the claim; docs/privacy.md)")
    known = list(scenarios())  # built once: every scenario's neighbours, a probe draft's too
    audit.add_argument("--method", action="append", choices=sorted(known),
                       metavar="SCENARIO", help="a scenario to audit (repeatable; default: "
                       f"all): {', '.join(known)}")
    audit.add_argument("--trials", type=positive_int, default=None,
                       help="releases per neighbour (default: per scenario, a few minutes in all)")
    audit.add_argument("--plant", action="append", choices=[*sorted(PLANTS), "all"],
                       metavar="BUG", help="audit a planted bug on its scenario instead, which "
                       "must fail it (repeatable, or all; default: none): "
                       f"{', '.join(PLANTS)}")
    audit.add_argument("--delta", type=delta_value, default=AUDIT_DELTA,
                       help=f"the delta epsilon is bounded at (default {AUDIT_DELTA:g})")
    audit.add_argument("--alpha", type=delta_value, default=ALPHA,
                       help=f"1 - confidence of the bounds (default {ALPHA:g})")
    audit.add_argument("--seed", type=int, default=0,
                       help="the first noise seed of the trials (default: 0)")
    audit.add_argument("--json", type=Path, default=None, metavar="PATH.json",
                       help="also write the report as JSON (default: none)")
    audit.add_argument("--quiet-progress", action="store_true", help="no progress lines")
    audit.set_defaults(run=run, cluster=False, quiet=True)


def _progress(line: str) -> None:
    print(f"dp-dask: audit: {line}", file=sys.stderr)


def run(args: argparse.Namespace) -> None:
    """Print the table (and write the JSON); exit 1 when some ε̂ exceeds its claimed ε."""
    plants = list(PLANTS) if "all" in (args.plant or ()) else args.plant or ()
    results = run_audit(args.method or None, trials=args.trials, plants=plants,
                        delta=args.delta, alpha=args.alpha, seed=args.seed,
                        progress=None if args.quiet_progress else _progress)
    print(format_table(results))
    if args.json:
        print(f"report: {write_report(results, args.json)}")
    if not all(r.passed for r in results):
        raise SystemExit(1)
