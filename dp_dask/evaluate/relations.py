"""Relation checks of a parent–child release against the real tables (issue 67;
:mod:`dp_dask.relational`).

* ``foreign_key_integrity``: the share of released children whose foreign key is a released
  parent's id (1.0: every child points at a parent), and the share of parent ids held once;
* ``parent_child_tvd``: the mean, over every (parent attribute, child attribute) pair, of the
  total variation distance between the real and the synthetic 2-way distributions of the
  children joined to their parents (attributes by their bin codes under the public schemas);
  per pair too;
* ``children_per_parent_tvd``: TVD of the number of children per parent (0..K, clipped to K).

With ``max_children`` (K) the real side is bounded as the release's input was (each parent's
children beyond K dropped, a seeded random K kept): "bounded"; without, "unbounded". The real
tables are read as they are, on the driver: an evaluation reads the raw data, it is no release.
"""

from __future__ import annotations

from itertools import product
from typing import Any

import numpy as np
import pandas as pd

from dp_dask.data.encode import encode_column
from dp_dask.data.io import TableSource, read_table
from dp_dask.data.schema import Schema
from dp_dask.evaluate.queries import shares_tvd


def _read(source: TableSource, schema: Schema, keys: list[str]) -> pd.DataFrame:
    return read_table(source, schema, extra=keys).compute()


def foreign_key_integrity(parents: pd.DataFrame, children: pd.DataFrame, key: str,
                          foreign_key: str) -> dict[str, float]:
    """The share of children pointing at a parent, and of parent ids held once."""
    ids = parents[key].astype(str)
    pointing = children[foreign_key].astype(str).isin(set(ids))
    return {"foreign_key_integrity": float(pointing.mean()) if len(children) else 1.0,
            "parents_unique_share": float(1 - ids.duplicated().mean()) if len(ids) else 1.0}


def _bounded(children: pd.DataFrame, foreign_key: str, max_children: int,
             seed: int) -> pd.DataFrame:
    """Each parent's children, at most ``max_children`` of them (a seeded random choice)."""
    order = np.random.default_rng(seed).permutation(len(children))
    shuffled = children.iloc[order]
    rank = shuffled.groupby(shuffled[foreign_key].astype(str), sort=False).cumcount()
    return shuffled[rank.to_numpy() < max_children]


def _joined_codes(parents: pd.DataFrame, children: pd.DataFrame, key: str, foreign_key: str,
                  parent_schema: Schema, child_schema: Schema) -> pd.DataFrame:
    """Children joined to their parents (inner), every attribute as its bin codes."""
    codes = pd.DataFrame({key: parents[key].astype(str).to_numpy()})
    for attribute in parent_schema.attributes:
        codes[attribute.name] = encode_column(parents[attribute.column], attribute)
    child_codes = pd.DataFrame({key: children[foreign_key].astype(str).to_numpy()})
    for attribute in child_schema.attributes:
        child_codes[attribute.name] = encode_column(children[attribute.column], attribute)
    return child_codes.merge(codes.drop_duplicates(subset=[key]), on=key, how="inner")


def relation_checks(real_parents: TableSource, real_children: TableSource,
                    synthetic_parents: TableSource, synthetic_children: TableSource, *,
                    key: str, foreign_key: str, parent_schema: Schema, child_schema: Schema,
                    max_children: int | None = None, seed: int = 0) -> dict[str, Any]:
    """The relation checks (module docstring) of a released parent and child table against
    the real ones; ``key``: the parent's id column (in both parent tables), ``foreign_key``:
    the child's column pointing at it (in both child tables)."""
    frames = {"real": (_read(real_parents, parent_schema, [key]),
                       _read(real_children, child_schema, [foreign_key])),
              "synthetic": (_read(synthetic_parents, parent_schema, [key]),
                            _read(synthetic_children, child_schema, [foreign_key]))}
    if max_children is not None:
        parents, children = frames["real"]
        frames["real"] = (parents, _bounded(children, foreign_key, max_children, seed))
    joined = {side: _joined_codes(*pair, key, foreign_key, parent_schema, child_schema)
              for side, pair in frames.items()}
    pairs = {}
    for parent, child in product(parent_schema.names, child_schema.names):
        shares = {side: frame.groupby([parent, child]).size() / max(len(frame), 1)
                  for side, frame in joined.items()}
        pairs[f"{parent} x {child}"] = shares_tvd(shares["real"], shares["synthetic"])
    counts = {}
    for side, (parents, children) in frames.items():
        per = children[foreign_key].astype(str).value_counts()
        number = per.reindex(parents[key].astype(str).unique(), fill_value=0)
        if max_children is not None:
            number = number.clip(upper=max_children)
        counts[side] = number.value_counts(normalize=True)
    return {**foreign_key_integrity(*frames["synthetic"], key, foreign_key),
            "bounded": max_children is not None, "max_children": max_children,
            "parent_child_tvd": float(np.mean(list(pairs.values()))) if pairs else 0.0,
            "parent_child_pairs": pairs,
            "children_per_parent_tvd": shares_tvd(counts["real"], counts["synthetic"]),
            "parents": {side: len(pair[0]) for side, pair in frames.items()},
            "children": {side: len(pair[1]) for side, pair in frames.items()}}
