"""Is a release's noise comparable to its counts? One figure, from its noisy tables alone.

Each measured table t (the marginals method's 2-way tables; the dense joint's 3-way tables) has
Gaussian noise of scale σ_t on each of its cells; its mean noisy cell count is n̂ / cells_t, n̂
the noisy row count (:func:`~.consistency.estimated_rows`, the inverse-variance mean of the
measurements' totals). The figure is the median over the tables of

    σ_t / (n̂ / cells_t)  =  σ_t · cells_t / n̂,

the noise of one cell against the rows an average cell holds; √(2/π) times it is the expected
sum of |noise| over the table's cells as a share of its rows. At ``WARN_RATIO`` or more, a cell
holds on average no more rows than its noise's scale: the fit records the figure in the
release's metadata (``quality.noise``) and warns, naming what would lower it. A 40-row table at
ε = 1 is at ~60; Adult (32,561 rows, 15 columns) at ε = 1 at ~0.26, every 16th of its rows at ~4.

The mean cell, not the median: a table of many levels is mostly empty cells (Adult's
native-country: the median 2-way cell at ε = 5 is ~17 rows against σ ≈ 18), so a median over
cells calls a good release noise wherever a table is sparse, whereas the rows sit in the full
cells that the mean weighs.

PRIVACY: post-processing. The figure reads the noisy tables' totals (through n̂), their sizes
and their public σ, never an exact count; the warning, its decision and the recorded figure are
functions of those alone, so they tell nothing the release's noisy measurements did not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dp_dask.postprocess.consistency import Measurement

WARN_RATIO = 1.0


def noise_level(tables: Sequence[Measurement], rows: int) -> dict[str, Any]:
    """The figure (module docstring) of the measured ``tables`` given the noisy row count
    ``rows``, with the median table's σ, cells and mean cell count."""
    ratios = np.array([m.sigma * m.values.size / rows for m in tables])
    median = tables[int(np.argsort(ratios, kind="stable")[len(ratios) // 2])]
    ways = sorted({len(m.attributes) for m in tables})
    return {"tables": f"{'/'.join(map(str, ways))}-way", "measured": len(tables),
            "sigma": float(median.sigma), "cells": int(median.values.size),
            "rows_estimate": int(rows), "mean_cell": rows / median.values.size,
            "ratio": float(median.sigma * median.values.size / rows), "warn_at": WARN_RATIO}


def noise_record(tables: Sequence[Measurement], rows: int) -> dict[str, Any]:
    """``{"quality": {"noise": ...}}``, the figure and its warning, for the release metadata
    where the figure reaches ``WARN_RATIO``; else empty: such releases stay as they were."""
    if not tables:
        return {}
    level = noise_level(tables, rows)
    if level["ratio"] < WARN_RATIO:
        return {}
    warning = (
        f"the noise is comparable to the counts: the {level['tables']} tables' noise "
        f"σ = {level['sigma']:.3g} against a mean noisy cell count of {level['mean_cell']:.3g} "
        f"(≈{level['rows_estimate']:,} rows over {level['cells']:,} cells), σ / mean cell = "
        f"{level['ratio']:.3g} (the median of {level['measured']} tables; warned from "
        f"{WARN_RATIO:g}): the release is mostly noise. Spend more ε, release fewer or coarser "
        "columns (fewer cells), fit a larger table, or (with a privacy unit) lower its "
        "max_rows")
    return {"quality": {"noise": level | {"warning": warning}}}
