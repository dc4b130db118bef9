"""``dp-dask ledger``: the privacy ledger, what each dataset has spent (list, set-budget,
export, import)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dp_dask.checks import delta_value, positive_float
from dp_dask.cli.options import LEDGER_HELP
from dp_dask.data.io import write_json
from dp_dask.privacy.ledger import Ledger
from dp_dask.privacy.ledger import report as ledger_report
from dp_dask.synthesizer import DEFAULT_DELTA


def add_arguments(commands: argparse._SubParsersAction) -> None:
    ledger = commands.add_parser("ledger", help="the privacy ledger: what each dataset has spent")
    actions = ledger.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="entries and each dataset's composed total")
    listing.add_argument("--dataset", default=None, metavar="NAME", help="one dataset only")
    budget = actions.add_parser("set-budget", help="store a dataset's total (ε, δ) budget")
    budget.add_argument("name", help="dataset name (as given by --dataset-name, or the stem)")
    budget.add_argument("--epsilon", type=positive_float, required=True, help="total ε")
    budget.add_argument("--delta", type=delta_value, default=DEFAULT_DELTA,
                        help="total δ (default 2^-30)")
    export = actions.add_parser("export", help="write every entry and budget to a JSON file")
    load = actions.add_parser("import", help="add an export's entries and budgets (ids kept; "
                              "rows already here are skipped, differing ones refused)")
    for action, verb in ((export, "write"), (load, "read")):
        action.add_argument("file", type=Path, metavar="PATH.json", help=f"the JSON to {verb}")
    for action, run in ((listing, run_list), (budget, run_set_budget),
                        (export, run_export), (load, run_import)):
        action.add_argument("--ledger", default=None, metavar="PATH|URL", help=LEDGER_HELP)
        action.set_defaults(run=run, cluster=False, quiet=True)


def run_list(args: argparse.Namespace) -> None:
    print(ledger_report(Ledger(args.ledger), args.dataset))


def run_set_budget(args: argparse.Namespace) -> None:
    ledger = Ledger(args.ledger)
    budget = ledger.set_budget(args.name, args.epsilon, args.delta)
    total = ledger.total(budget.dataset_name)
    print(f"budget of {budget.dataset_name!r}: ε={budget.epsilon:g} at δ={budget.delta:.3g} "
          f"({ledger.path}); spent so far: ε={total.epsilon:.6g} over {total.releases} DP "
          "release(s)")


def run_export(args: argparse.Namespace) -> None:
    ledger = Ledger(args.ledger)
    document = ledger.export()
    write_json(args.file, document)
    print(f"exported {len(document['entries'])} entries and {len(document['budgets'])} "
          f"budgets of {ledger.path} to {args.file}")


def run_import(args: argparse.Namespace) -> None:
    ledger = Ledger(args.ledger)
    try:
        document = json.loads(args.file.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{args.file}: not JSON ({exc})") from exc
    added = ledger.import_(document)
    print(f"imported {added['entries']} entries and {added['budgets']} budgets into "
          f"{ledger.path} ({added['unchanged']} already there)")

