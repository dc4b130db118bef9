"""Parent–child tables released together (issue 67, dp_dask.relational): customers and their
orders as one release under the customer's key, and its relation checks (evaluate)."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from customers_orders import CUSTOMERS_SCHEMA, ORDERS_SCHEMA, customers_orders, released_alone

from dp_dask.cli import main
from dp_dask.data.schema import load_schema
from dp_dask.evaluate.relations import foreign_key_integrity, relation_checks
from dp_dask.methods.marginals.plan import budget_shares, measured_queries
from dp_dask.privacy import rho_budget
from dp_dask.privacy.accounting import gaussian_sigma, table_sensitivity
from dp_dask.privacy.ledger import Ledger
from dp_dask.relational import release_tables
from dp_dask.synthesizer import DEFAULT_DELTA

K = 8


def tables_spec(tmp_path, customers: pd.DataFrame, orders: pd.DataFrame) -> dict:
    """The customers and orders as real Parquet files, with their schemas beside them."""
    customers.to_parquet(tmp_path / "customers.parquet")
    orders.to_parquet(tmp_path / "orders.parquet")
    (tmp_path / "customers.json").write_text(json.dumps(CUSTOMERS_SCHEMA))
    (tmp_path / "orders.json").write_text(json.dumps(ORDERS_SCHEMA))
    return {"customers": {"data": str(tmp_path / "customers.parquet"),
                          "schema": str(tmp_path / "customers.json"), "key": "customer_id"},
            "orders": {"data": str(tmp_path / "orders.parquet"),
                       "schema": str(tmp_path / "orders.json"), "parent": "customers",
                       "foreign_key": "customer_id", "key": "order_id"}}


def test_item2_two_tables_released_together(client, tmp_path):
    """Every customer once, every order pointing at a released customer (100 %), at most K
    orders each, one ledger entry under the customer's key; the customer × order 2-way TVD
    at least 2× better than the two tables released alone (half of ε each, under the same
    unit) and joined at random."""
    customers, orders = customers_orders(4_000)
    ledger = tmp_path / "ledger.sqlite"
    released = release_tables(tables_spec(tmp_path, customers, orders), tmp_path / "out",
                              epsilon=1.0, max_children=K, ledger=ledger,
                              noise_sampler="numpy", noise_seed=5)
    parents = pd.read_parquet(released.paths["customers"])
    children = pd.read_parquet(released.paths["orders"])
    assert list(parents.columns) == ["customer_id", "segment", "region"]
    assert list(children.columns) == ["order_id", "customer_id", "amount", "shipping"]
    assert parents["customer_id"].is_unique and children["order_id"].is_unique
    assert children["customer_id"].isin(set(parents["customer_id"])).all()
    assert children.groupby("customer_id").size().max() <= K
    # about as many customers as the data's 4,000 (units drawn to fill the rows: ±10 %)
    assert 3_600 <= len(parents) <= 4_400
    (entry,) = Ledger(ledger).entries()
    assert (entry.unit_column, entry.unit_max_rows, entry.epsilon) == ("customer_id", K, 1.0)
    assert entry.dataset_name == "customers+orders"
    record = json.loads((tmp_path / "out" / "metadata.json").read_text())
    assert set(record["tables"]) == {"customers", "orders"}
    assert record["privacy"]["epsilon"] == 1.0
    schemas = {"parent_schema": load_schema(CUSTOMERS_SCHEMA),
               "child_schema": load_schema(ORDERS_SCHEMA)}
    checks = relation_checks(customers, orders, parents, children, key="customer_id",
                             foreign_key="customer_id", max_children=K, **schemas)
    assert checks["foreign_key_integrity"] == 1.0 and checks["parents_unique_share"] == 1.0
    alone = relation_checks(customers, orders, *released_alone(customers, orders, 1.0, K),
                            key="customer_id", foreign_key="customer_id", max_children=K,
                            **schemas)
    assert checks["parent_child_tvd"] <= alone["parent_child_tvd"] / 2
    assert checks["children_per_parent_tvd"] <= alone["children_per_parent_tvd"] / 2


def test_item2_job_config_runs_the_release(client, tmp_path, capsys):
    """`dp-dask run` of a config with `tables:` (relative paths from the config's directory)."""
    customers, orders = customers_orders(600, seed=1)
    tables_spec(tmp_path, customers, orders)
    (tmp_path / "job.yaml").write_text(
        "tables:\n"
        "  customers: {data: customers.parquet, schema: customers.json, key: customer_id}\n"
        "  orders: {data: orders.parquet, schema: orders.json, parent: customers,\n"
        "           foreign_key: customer_id}\n"
        "privacy: {epsilon: 2.0, max_children: 6, noise_sampler: numpy, noise_seed: 1}\n"
        "output: {out: release}\n"
        "ledger: {path: ledger.sqlite}\n"
        f"cluster: {{address: {client.scheduler.address}}}\n")
    assert main(["run", str(tmp_path / "job.yaml")]) == 0
    assert "tables customers and orders" in capsys.readouterr().out
    parents = pd.read_parquet(tmp_path / "release" / "customers.parquet")
    children = pd.read_parquet(tmp_path / "release" / "orders.parquet")
    assert children["customer_id"].isin(set(parents["customer_id"])).all()
    assert "orders_id" in children.columns  # the child id's default name
    assert len(Ledger(tmp_path / "ledger.sqlite").entries()) == 1
    (tmp_path / "tables.yaml").write_text(
        "customers: {data: customers.parquet, schema: customers.json, key: customer_id}\n"
        "orders: {data: orders.parquet, schema: orders.json, parent: customers,\n"
        "         foreign_key: customer_id}\n")
    assert main(["evaluate-tables", "--tables", str(tmp_path / "tables.yaml"), "--synthetic",
                 str(tmp_path / "release"), "--max-children", "6",
                 "--out", str(tmp_path / "checks")]) == 0
    assert "foreign_key_integrity: 1.0" in capsys.readouterr().out
    record = json.loads((tmp_path / "checks" / "relations.json").read_text())
    assert record["bounded"]["max_children"] == 6 and not record["unbounded"]["bounded"]


def _bad(spec: dict, change: str) -> dict:
    if change == "parent nowhere":
        spec["orders"]["parent"] = "clients"
    elif change == "cycle":
        spec["customers"]["parent"] = "orders"
        spec["customers"]["foreign_key"] = "order_id"
    elif change == "foreign key column missing":
        spec["orders"]["foreign_key"] = "client_id"
    elif change == "child id clash":
        spec["orders"]["key"] = "shipping"
    return spec


@pytest.mark.parametrize(("change", "max_children", "says"), [
    ("parent nowhere", "4", "table 'orders': foreign_key 'customer_id' points nowhere"),
    ("cycle", "4", "a cycle of parents"),
    ("foreign key column missing", "4", "table 'orders': its foreign_key column 'client_id'"),
    ("", "0", "table 'orders' kept per value of its foreign_key 'customer_id'"),
    ("child id clash", "4", "table 'orders': its released id column 'shipping'"),
])
def test_item2_bad_input_exit_2_nothing_spent(client, tmp_path, capsys, change, max_children,
                                              says):
    customers, orders = customers_orders(100)
    spec = _bad(tables_spec(tmp_path, customers, orders), change)
    ledger = tmp_path / "ledger.sqlite"
    code = main(["tables", "--tables", json.dumps(spec), "--out", str(tmp_path / "out"),
                 "--max-children", max_children, "--ledger", str(ledger),
                 "--scheduler", client.scheduler.address, "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and says in err and ("--tables:" in err or "--max-children" in err)
    assert not ledger.exists() or Ledger(ledger).entries() == []
    with pytest.raises(ValueError, match="tables=|max_children="):  # from Python, keywords
        release_tables(spec, tmp_path / "out", epsilon=1.0, max_children=int(max_children),
                       ledger=ledger)
    assert not ledger.exists() or Ledger(ledger).entries() == []


def test_item4_relation_checks_on_known_tables():
    """Exact figures: integrity, unique parents, a pair's TVD, children per parent."""
    parents = pd.DataFrame({"customer_id": ["a", "b", "b", "c"],
                            "segment": ["retail", "business", "business", "retail"],
                            "region": ["north"] * 4})
    children = pd.DataFrame({"customer_id": ["a", "b", "z", "z"], "amount": [5.0] * 4,
                             "shipping": ["post"] * 4})
    assert foreign_key_integrity(parents, children, "customer_id", "customer_id") == {
        "foreign_key_integrity": 0.5, "parents_unique_share": 0.75}
    real = parents.drop_duplicates("customer_id")
    real_children = pd.DataFrame({"customer_id": ["a", "a", "b"], "amount": [5.0] * 3,
                                  "shipping": ["post", "post", "freight"]})
    synthetic_children = pd.DataFrame({"customer_id": ["a", "b"], "amount": [5.0] * 2,
                                       "shipping": ["post", "post"]})
    checks = relation_checks(real, real_children, real, synthetic_children,
                             key="customer_id", foreign_key="customer_id",
                             parent_schema=load_schema(CUSTOMERS_SCHEMA),
                             child_schema=load_schema(ORDERS_SCHEMA))
    # segment × shipping: real (retail, post) 2/3, (business, freight) 1/3; synthetic
    # (retail, post) 1/2, (business, post) 1/2: TVD ½ (1/6 + 1/3 + 1/2) = 1/2
    assert checks["parent_child_pairs"]["segment x shipping"] == pytest.approx(0.5)
    # children per parent: real {2, 1, 0} each 1/3; synthetic {1, 1, 0}: TVD 1/3
    assert checks["children_per_parent_tvd"] == pytest.approx(1 / 3)
    assert np.isclose(checks["foreign_key_integrity"], 1.0)


def _two_way_tvd(real: pd.DataFrame, synthetic: pd.DataFrame, a: str, b: str) -> float:
    """The TVD of two categorical columns' joint shares."""
    shares = [frame.groupby([a, b]).size() / len(frame) for frame in (real, synthetic)]
    return float(shares[0].sub(shares[1], fill_value=0).abs().sum() / 2)


def test_issue67_parent_keeps_its_own_quality(client, tmp_path):
    """The customers' own segment × region table in a joint release (seeds 0-2, ε = 1) is within
    1.2× the error the baseline's noise gives it (the customers released alone at ε/2: its
    2-way table's Gaussian σ, from the same budget rule, spread over the table's cells: TVD
    ≈ cells · σ · √(2/π) / (2n)), and the customer × order relation stays 2× better than
    random: the parent's own tables are measured again on the unit table (a row's
    sensitivity) beside the unit model's."""
    customers, orders = customers_orders(4_000)
    spec = tables_spec(tmp_path, customers, orders)
    schema = load_schema(CUSTOMERS_SCHEMA)
    queries = measured_queries(schema)
    shares = budget_shares(schema, queries)
    sigma = gaussian_sigma(rho_budget(0.5, DEFAULT_DELTA, "exact") * shares[-1],
                           table_sensitivity("replace", "l2"), "exact")
    cells = int(np.prod(schema.sizes))
    baseline_noise_tvd = cells * sigma * np.sqrt(2 / np.pi) / (2 * len(customers))
    errors, relation = [], []
    for seed in range(3):
        released = release_tables(spec, tmp_path / f"out{seed}", epsilon=1.0, max_children=K,
                                  ledger=False, noise_sampler="numpy", noise_seed=seed,
                                  seed=seed)
        parents = pd.read_parquet(released.paths["customers"])
        children = pd.read_parquet(released.paths["orders"])
        errors.append(_two_way_tvd(customers, parents, "segment", "region"))
        relation.append(relation_checks(
            customers, orders, parents, children, key="customer_id",
            foreign_key="customer_id", max_children=K, parent_schema=schema,
            child_schema=load_schema(ORDERS_SCHEMA))["parent_child_tvd"])
    assert np.mean(errors) <= 1.2 * baseline_noise_tvd, (errors, baseline_noise_tvd)
    alone = relation_checks(customers, orders, *released_alone(customers, orders, 1.0, K),
                            key="customer_id", foreign_key="customer_id", max_children=K,
                            parent_schema=schema, child_schema=load_schema(ORDERS_SCHEMA))
    assert np.mean(relation) <= alone["parent_child_tvd"] / 2
    record = released.synthesizer.model.metadata
    assert set(record["unit_shape"]["own_tables"]) >= {"units", "rows"}
    assert {"own_tables_units", "own_tables_rows"} <= set(record["privacy"]["rho_split"])


@pytest.mark.parametrize(("own", "says"), [
    ({"units": {"attributes": ["amount"], "share": 0.1}},
     "own_tables: units: attribute 'amount' is not unit-level"),
    ({"rows": {"attributes": ["colour"], "share": 0.1}},
     "own_tables: rows: schema 'customers+orders' has no attribute 'colour'"),
    ({"rows": {"attributes": ["amount"], "share": 1.5}}, "own_tables: rows: share must be"),
])
def test_issue67_bad_own_tables_nothing_spent(client, tmp_path, own, says):
    customers, orders = customers_orders(100)
    ledger = tmp_path / "ledger.sqlite"
    with pytest.raises(ValueError, match=re.escape(says)):
        release_tables(tables_spec(tmp_path, customers, orders), tmp_path / "out", epsilon=1.0,
                       max_children=K, ledger=ledger, own_tables=own)
    assert not ledger.exists() or Ledger(ledger).entries() == []
