"""Parent–child tables released together against each table released alone and joined by
random keys (issue 67; docs/results-units.md, "Parent–child tables").

``python -m benchmarks.relational --epsilons 0.5 1 2 --seeds 3``: the customers/orders
generator of tests/customers_orders.py (segment sets orders per customer, their amount and
shipping), written as Parquet, released by :func:`dp_dask.release_tables` (K children per
customer) and by the baseline (``released_alone``: each table by the marginals method at half
of ε, orders' customers drawn at random), both in the same run, per ε and seed; the relation
checks of dp_dask/evaluate/relations.py (bounded to K and unbounded), each table's own 1-/2-way
TVD (binned by its schema), wall time. ``--own-shares PARENT,CHILD``: the joint release's own
tables at those shares (``0,0``: none; several: one joint release per pair) against its default
(:func:`dp_dask.relational.own_tables`)."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pandas as pd

from benchmarks.paths import load_test_helper
from benchmarks.units_shape import marginal_tvd
from dp_dask.data.schema import load_schema
from dp_dask.evaluate.relations import relation_checks
from dp_dask.evaluate.tables import markdown_table
from dp_dask.methods.marginals.config import MarginalsConfig
from dp_dask.relational import own_tables, relation, release_tables

customers_orders = load_test_helper("customers_orders")


def run(customers: pd.DataFrame, orders: pd.DataFrame, folder: Path, epsilon: float,
        seed: int, max_children: int, unit_share: float | None = None,
        own_shares: tuple[float, float] | None = None) -> list[dict]:
    schemas = {"parent_schema": load_schema(customers_orders.CUSTOMERS_SCHEMA),
               "child_schema": load_schema(customers_orders.ORDERS_SCHEMA)}
    tables = {"customers": {"data": str(folder / "customers.parquet"),
                            "schema": customers_orders.CUSTOMERS_SCHEMA, "key": "customer_id"},
              "orders": {"data": str(folder / "orders.parquet"),
                         "schema": customers_orders.ORDERS_SCHEMA, "parent": "customers",
                         "foreign_key": "customer_id"}}
    rows = []
    for release in ("joint (tables)", "alone + random keys"):
        started = time.perf_counter()
        if release == "joint (tables)":
            out = folder / f"out-{epsilon}-{seed}"
            released = release_tables(tables, out, epsilon=epsilon, max_children=max_children,
                                      ledger=False, noise_sampler="numpy", noise_seed=seed,
                                      seed=seed, **({} if unit_share is None else {
                                          "config": MarginalsConfig(unit_share=unit_share)}),
                                      **({} if own_shares is None else {
                                          "own_tables": own_tables_at(tables, own_shares)}))
            parents = pd.read_parquet(released.paths["customers"])
            children = pd.read_parquet(released.paths["orders"])
        else:
            parents, children = customers_orders.released_alone(customers, orders, epsilon,
                                                                max_children, seed)
        wall = time.perf_counter() - started
        row = {"epsilon": epsilon, "seed": seed, "release": release, "wall s": wall}
        for bound, name in ((max_children, "bounded"), (None, "unbounded")):
            checks = relation_checks(customers, orders, parents, children, key="customer_id",
                                     foreign_key="customer_id", max_children=bound, **schemas)
            row |= {f"P×C TVD {name}": checks["parent_child_tvd"],
                    f"children/parent TVD {name}": checks["children_per_parent_tvd"]}
        row["FK integrity"] = checks["foreign_key_integrity"]
        for table, real, synthetic, schema in (
                ("customers", customers, parents, schemas["parent_schema"]),
                ("orders", orders, children, schemas["child_schema"])):
            one, two = marginal_tvd(real, synthetic, schema)
            row |= {f"{table} 1-way": one, f"{table} 2-way": two}
        rows.append(row)
    return rows


def own_tables_at(tables: dict, shares: tuple[float, float]) -> dict | None:
    """The relation's own tables at the (parent, child) ``shares`` (0, 0: none)."""
    if not any(shares):
        return None
    return own_tables(relation(tables), *shares)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--customers", type=int, default=4_000)
    parser.add_argument("--max-children", type=int, default=8)
    parser.add_argument("--unit-share", type=float, nargs="+", default=[None],
                        help="MarginalsConfig.unit_share of the joint release (default: its "
                             "default); several: one joint release per share")
    parser.add_argument("--own-shares", nargs="+", default=[None],
                        help="PARENT,CHILD: the own tables' shares of the joint release "
                             "(default: release_tables' rule; 0,0: none); several: one joint "
                             "release per pair")
    args = parser.parse_args()
    own = [None if given is None else tuple(float(x) for x in given.split(","))
           for given in args.own_shares]
    customers, orders = customers_orders.customers_orders(args.customers)
    with tempfile.TemporaryDirectory() as folder:
        customers.to_parquet(Path(folder) / "customers.parquet")
        orders.to_parquet(Path(folder) / "orders.parquet")
        results = pd.DataFrame([
            row | {"unit share": "default" if share is None else share,
                   "own shares": "default" if shares is None else shares}
            for share in args.unit_share for shares in own for epsilon in args.epsilons
            for seed in range(args.seeds)
            for row in run(customers, orders, Path(folder), epsilon, seed, args.max_children,
                           share, shares)])
    summary = results.groupby(["unit share", "own shares", "epsilon", "release"],
                              sort=False).mean(
        numeric_only=True).drop(columns=["seed"])
    print(markdown_table(summary.reset_index(), "{:.3f}"))


if __name__ == "__main__":
    main()
