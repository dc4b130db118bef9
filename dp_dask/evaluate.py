"""Utility of a release: how far synthetic 1-way and 2-way marginals are from the data's.

This compares with the raw data, so it is for the data owner's own evaluation, never part of a
release.
"""

from __future__ import annotations

import numpy as np

from dp_dask.counts import attribute_pairs
from dp_dask.schema import Schema


def marginal_distances(real: np.ndarray, synthetic: np.ndarray, schema: Schema) -> dict[str, float]:
    """Average and max total-variation distance of the 1-way and 2-way marginals.

    ``real`` and ``synthetic`` are d×d count matrices (see dp_dask.counts) of any row totals.
    """
    def tvd(a: np.ndarray, b: np.ndarray) -> float:
        return 0.5 * float(np.abs(a / a.sum() - b / b.sum()).sum())

    one_way = [
        tvd(np.diagonal(real)[o : o + s], np.diagonal(synthetic)[o : o + s])
        for o, s in zip(schema.offsets, schema.sizes)
    ]
    two_way = [tvd(real[a, b], synthetic[a, b]) for _, _, a, b in attribute_pairs(schema)]
    return {
        "one_way_tvd_mean": float(np.mean(one_way)),
        "one_way_tvd_max": float(np.max(one_way)),
        "two_way_tvd_mean": float(np.mean(two_way)) if two_way else 0.0,
        "two_way_tvd_max": float(np.max(two_way)) if two_way else 0.0,
    }
