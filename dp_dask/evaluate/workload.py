"""A declared workload's marginals, real against synthetic (``dp-dask evaluate --workload``).

The marginals method's rounds favour the column groups a user declares
(:mod:`dp_dask.methods.marginals.adaptive`); this reports those marginals apart from Q1–Q3: per
group its total variation distance and its largest cell error in rows. The real table's counts
are reduced on Dask as every evaluation's; an evaluation reads the real data, so it is not a
release.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dp_dask.cluster import compute
from dp_dask.data.counts import reduction_graph
from dp_dask.data.encode import encode_partition
from dp_dask.data.io import TableSource, read_table
from dp_dask.data.schema import Schema
from dp_dask.evaluate.queries import release_labels
from dp_dask.methods.marginals.adaptive import cells, check_workload, group_counts


def _partition_tables(frame: pd.DataFrame, schema: Schema,
                      groups: tuple[tuple[int, ...], ...]) -> np.ndarray:
    return group_counts(encode_partition(frame, schema).T, schema, groups)


def workload_errors(data: TableSource, synthetic: TableSource, schema: Schema,
                    workload: Any) -> pd.DataFrame:
    """One row per marginal of ``workload`` (checked and expanded as the method's): its columns,
    cells, total variation distance of the shares and largest cell error scaled to the real
    rows."""
    groups = check_workload(schema, workload) or ()
    labels = schema.as_labels()
    real, fake = compute(
        reduction_graph(read_table(data, schema), schema, _partition_tables, schema, groups),
        reduction_graph(release_labels(synthetic, schema), labels, _partition_tables, labels,
                        groups))
    bounds = np.cumsum([0] + [cells(schema, g) for g in groups])
    rows = []
    for g, lo, hi in zip(groups, bounds[:-1], bounds[1:]):
        r, s = real[lo:hi].astype(float), fake[lo:hi].astype(float)
        scaled = s * r.sum() / max(s.sum(), 1.0)
        rows.append({"marginal": ", ".join(schema.names[a] for a in g), "cells": hi - lo,
                     "tvd": 0.5 * float(np.abs(r / max(r.sum(), 1.0)
                                              - s / max(s.sum(), 1.0)).sum()),
                     "max_cell_error": float(np.abs(scaled - r).max())})
    return pd.DataFrame(rows)
