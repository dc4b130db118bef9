"""A release's rows against its schema's declared constraints (dp_dask.data.constraints).

Reads the release alone, no raw data: its counts may go into any report.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dp_dask.cluster import compute
from dp_dask.data.io import TableSource, read_table
from dp_dask.data.schema import Schema
from dp_dask.data.values import release_codes


def _broken(frame: pd.DataFrame, schema: Schema) -> pd.DataFrame:
    """One row: per constraint, the rows of a decoded partition breaking it: their bins, and
    for ``order`` their values too (typed columns; nulls are not compared)."""
    codes = np.column_stack([release_codes(frame[a.read_column(frame.columns)], a)
                             for a in schema.attributes]).reshape(len(frame), schema.m)
    counts = {}
    for constraint in schema.constraints:
        broken = ~constraint.holds(codes)
        if constraint.kind == "order":
            first, second = (frame[schema.attributes[a].name] for a in constraint.order)
            if all(_values(column) for column in (first, second)):  # not labels
                broken |= (first > second).fillna(False).to_numpy(dtype=bool)
        counts[constraint.name] = int(broken.sum())
    return pd.DataFrame([counts], dtype=np.int64)


def _values(column: pd.Series) -> bool:
    return (pd.api.types.is_numeric_dtype(column.dtype)
            or pd.api.types.is_datetime64_any_dtype(column.dtype))


def constraint_violations(synthetic: TableSource, schema: Schema) -> pd.DataFrame:
    """Per constraint of ``schema``: its kind and the rows of the decoded ``synthetic`` table
    (a release, typed values or labels) breaking it; 0 expected of a method that honours it."""
    meta = pd.DataFrame({c.name: pd.Series(dtype=np.int64) for c in schema.constraints})
    (totals,) = compute(read_table(synthetic, schema).map_partitions(_broken, schema,
                                                                     meta=meta).sum())
    return pd.DataFrame({"constraint": [c.name for c in schema.constraints],
                         "kind": [c.kind for c in schema.constraints],
                         "violations": [int(totals[c.name]) for c in schema.constraints]})
