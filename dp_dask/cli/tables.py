"""``dp-dask tables``: a parent table and its child table released together, under one budget
(:mod:`dp_dask.relational`); a job config with ``tables:`` runs it (``dp-dask run``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

from dp_dask.checks import delta_value, epsilon_value, non_negative_int
from dp_dask.cli.common import check_ledger, check_out
from dp_dask.cli.options import cluster_options, ledger_options, noise_options, storage_options
from dp_dask.config import TablesSpec
from dp_dask.evaluate.relations import relation_checks
from dp_dask.privacy.labels import describe
from dp_dask.relational import check_max_children, relation, release_tables
from dp_dask.synthesizer import DEFAULT_DELTA


def tables_value(text: str) -> dict[str, Any]:
    """argparse ``type=``: the tables as a JSON object, or a YAML/JSON file of them (its
    relative data and schema paths made relative to the file's directory)."""
    path = Path(text).expanduser()
    if not text.lstrip().startswith("{") and path.is_file():
        given = yaml.safe_load(path.read_text())
        base = path.resolve().parent
        if isinstance(given, dict):
            for entry in given.values():
                for name in ("data", "schema"):
                    value = entry.get(name) if isinstance(entry, dict) else None
                    if isinstance(value, str) and "://" not in value \
                            and not Path(value).expanduser().is_absolute():
                        entry[name] = str(base / value)
    else:
        try:
            given = json.loads(text)
        except json.JSONDecodeError as exc:
            raise argparse.ArgumentTypeError(f"must be a JSON object or a YAML file of the "
                                             f"tables, got {text!r} ({exc})") from None
    if not isinstance(given, dict):
        raise argparse.ArgumentTypeError("must map table names to {data, schema, key} (the "
                                         "parent) and {data, schema, parent, foreign_key} "
                                         "(the child)")
    return given


def arguments() -> argparse.ArgumentParser:
    """The options of ``tables``, which a job config with ``tables:`` gives."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--tables", type=tables_value, required=True, metavar="JSON|FILE",
                        help="the tables: {parent: {data, schema, key}, child: {data, schema, "
                        "parent, foreign_key[, key]}}, as JSON or a YAML/JSON file")
    parser.add_argument("--out", required=True,
                        help="directory of the release: <parent>.parquet, <child>.parquet, "
                        "metadata.json")
    parser.add_argument("--max-children", type=int, required=True, metavar="K",
                        help="the children kept per parent (the privacy unit is the parent's "
                        "key: a parent and its children)")
    group = parser.add_argument_group("privacy")
    group.add_argument("--epsilon", type=epsilon_value, default=1.0)
    group.add_argument("--delta", type=delta_value, default=DEFAULT_DELTA)
    noise_options(group)
    parser.add_argument("--seed", type=non_negative_int, default=0,
                        help="seed of the synthetic draws")
    storage_options(parser)
    ledger_options(parser)
    cluster_options(parser)
    return parser


def add_arguments(commands: argparse._SubParsersAction) -> None:
    tables = commands.add_parser(
        "tables", help="release a parent table and its child table together (one budget, "
        "every foreign key pointing at a released parent)", parents=[arguments()])
    tables.set_defaults(run=run, preflight=preflight)
    checks = commands.add_parser(
        "evaluate-tables", help="a parent–child release against the real tables: foreign-key "
        "integrity, parent × child 2-way TVD, children per parent (bounded with "
        "--max-children, and unbounded)")
    checks.add_argument("--tables", type=tables_value, required=True, metavar="JSON|FILE",
                        help="the real tables, as given to 'dp-dask tables'")
    checks.add_argument("--synthetic", type=Path, required=True,
                        help="the release directory 'dp-dask tables' wrote")
    checks.add_argument("--max-children", type=int, default=None, metavar="K",
                        help="also against the real tables bounded to K children per parent")
    checks.add_argument("--out", type=Path, default=None,
                        help="write relations.json here (a directory)")
    checks.set_defaults(run=run_evaluate, cluster=False, quiet=True)


def _base(spec: TablesSpec) -> Path | None:
    """A job config's directory: its tables' relative paths are relative to it."""
    return None if spec.config is None else Path(spec.config).resolve().parent


def preflight(spec: TablesSpec) -> None:
    """The relation, K, the output and the ledger, before the cluster starts and anything is
    spent."""
    check_max_children(spec.max_children, relation(spec.tables, base=_base(spec),
                                                   storage_options=spec.storage_options))
    check_out(spec)
    check_ledger(spec)


def run(spec: TablesSpec) -> None:
    released = release_tables(
        spec.tables, spec.out, epsilon=spec.epsilon, delta=spec.delta,
        max_children=spec.max_children, seed=spec.seed, base=_base(spec), ledger=spec.ledger,
        dataset_name=spec.dataset_name, run_id=spec.run_id,
        budget_epsilon=spec.budget_epsilon, force=spec.force, noise_sampler=spec.noise_sampler,
        noise_seed=spec.noise_seed, storage_options=spec.storage_options)
    print(describe(released.synthesizer.model.metadata["privacy"])
          + f"; tables {released.relation.parent} and {released.relation.child}")
    for kind, path in released.paths.items():
        print(f"{kind:>9}: {path}")


def run_evaluate(args: argparse.Namespace) -> None:
    """The relation checks, unbounded and (with --max-children) bounded, printed and written
    to relations.json with --out."""
    found = relation(args.tables)
    if args.max_children is not None:
        check_max_children(args.max_children, found)
    synthetic = (args.synthetic / f"{found.parent}.parquet",
                 args.synthetic / f"{found.child}.parquet")
    for path in synthetic:
        if not path.exists():
            raise FileNotFoundError(f"--synthetic: {path} does not exist (a release of "
                                    f"'dp-dask tables' holds one Parquet per table)")
    record = {}
    for bound in dict.fromkeys([None, args.max_children]):
        record["bounded" if bound else "unbounded"] = relation_checks(
            found.parent_data, found.child_data, *map(str, synthetic), key=found.key,
            foreign_key=found.foreign_key, parent_schema=found.parent_schema,
            child_schema=found.child_schema, max_children=bound)
    for name, checks in record.items():
        print(f"{name} (tables {found.parent} and {found.child}):")
        for key in ("foreign_key_integrity", "parents_unique_share", "parent_child_tvd",
                    "children_per_parent_tvd", "parent_child_pairs", "parents", "children"):
            print(f"  {key}: {checks[key]}")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "relations.json").write_text(json.dumps(record, indent=2))
        print(f"relations: {args.out / 'relations.json'}")
