"""Customers and their orders, of a known structure, for the parent–child release's tests and
its benchmark (benchmarks/relational.py loads this file: the tests never import benchmarks/).

A customer's segment sets how many orders it places (retail: 0-3, often none; business: 2-8)
and what they are: business orders are large and mostly shipped by freight, retail ones small
and by post; region is independent of both."""

from __future__ import annotations

import numpy as np
import pandas as pd

CUSTOMERS_SCHEMA = {"name": "customers", "attributes": [
    {"name": "segment", "type": "categorical", "categories": ["retail", "business"]},
    {"name": "region", "type": "categorical", "categories": ["north", "south", "east", "west"]},
]}
ORDERS_SCHEMA = {"name": "orders", "attributes": [
    {"name": "amount", "type": "numeric", "edges": [0, 10, 30, 100, 300, 1000, 100000]},
    {"name": "shipping", "type": "categorical", "categories": ["post", "courier", "freight"]},
]}


def customers_orders(customers: int = 4_000, seed: int = 0) -> tuple[pd.DataFrame,
                                                                   pd.DataFrame]:
    """The customers table (customer_id, segment, region) and the orders table (order_id,
    customer_id, amount, shipping)."""
    rng = np.random.default_rng(seed)
    business = rng.random(customers) < 0.3
    region = rng.choice(["north", "south", "east", "west"], customers)
    orders_of = np.where(business, rng.integers(2, 9, customers),
                         np.minimum(rng.geometric(0.6, customers) - 1, 3))
    owner = np.repeat(np.arange(customers), orders_of)
    large = business[owner]
    amount = np.exp(np.where(large, 5.5, 2.8) + rng.normal(0, 0.6, len(owner)))
    shipping = np.where(large, rng.choice(["freight", "courier", "post"], len(owner),
                                          p=[0.7, 0.2, 0.1]),
                        rng.choice(["post", "courier", "freight"], len(owner),
                                   p=[0.75, 0.2, 0.05]))
    ids = np.array([f"c{i:06d}" for i in range(customers)])
    customer_table = pd.DataFrame({"customer_id": ids,
                                   "segment": np.where(business, "business", "retail"),
                                   "region": region})
    order_table = pd.DataFrame({"order_id": np.arange(len(owner)), "customer_id": ids[owner],
                                "amount": amount, "shipping": shipping})
    return customer_table, order_table


def released_alone(customers: pd.DataFrame, orders: pd.DataFrame, epsilon: float,
                   max_children: int, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The baseline: each table released alone by the marginals method at half of
    ``epsilon`` (the same total) under the same unit, a customer (the orders bounded to
    ``max_children`` per customer), the orders' customer ids drawn at random among the released
    customers' (independent tables joined at random)."""
    from dp_dask.synthesizer import Synthesizer  # the helper's generator needs no dp_dask

    tables = []
    for frame, schema, unit in ((customers, CUSTOMERS_SCHEMA, None),
                                (orders, ORDERS_SCHEMA,
                                 {"column": "customer_id", "max_rows": max_children})):
        synthesizer = Synthesizer.create("marginals", schema, epsilon=epsilon / 2,
                                         noise_sampler="numpy", noise_seed=seed * 10 + len(tables),
                                         ledger=False, privacy_unit=unit).fit(frame)
        tables.append(synthesizer.sample(seed=seed).compute().reset_index(drop=True))
    parents, children = tables
    parents["customer_id"] = [f"s{i:06d}" for i in range(len(parents))]
    rng = np.random.default_rng(seed)
    children["customer_id"] = parents["customer_id"].to_numpy()[
        rng.integers(0, len(parents), len(children))]
    return parents, children
