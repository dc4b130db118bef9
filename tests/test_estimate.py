"""dp-dask plan's cost model for wide schemas (dp_dask.estimate): the terms that grow with d."""

from __future__ import annotations

import pytest

from dp_dask import estimate as plan
from dp_dask import fit_cost
from dp_dask.data.decode import GROUPED_MIN_CATEGORIES
from dp_dask.data.schema import load_schema


def schema_with(sizes: list[int]):
    return load_schema({"name": "wide", "attributes": [
        {"name": f"a{i}", "categories": [str(c) for c in range(s)]}
        for i, s in enumerate(sizes)]})


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_wide_attribute_costs_the_count_matrix_and_the_dummies():
    narrow, wide = schema_with([10] * 10), schema_with([5_000] + [10] * 9)
    rows = 1_000_000
    a, b = (plan.estimate(s, rows, method="marginals", workers=2) for s in (narrow, wide))
    # Same attributes and rows, so the same pair updates: the difference is 4 tasks' d×d
    # matrices and the d dummy columns written per row.
    tasks = rows // plan.INPUT_PARTITION_ROWS
    assert b.seconds["count"] - a.seconds["count"] == pytest.approx(
        tasks * (wide.d**2 - narrow.d**2) * plan.COUNT_SECONDS_PER_MATRIX_CELL / 2, rel=1e-2)
    assert b.seconds["sample_write"] - a.seconds["sample_write"] == pytest.approx(
        rows * (wide.d - narrow.d) * plan.WRITE_SECONDS_PER_DUMMY / 2, rel=1e-2)
    assert "calibration" not in b.seconds


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_copula_calibration_is_planned_per_attribute():
    wide = schema_with([5_000] + [10] * 9)
    estimate = plan.estimate(wide, 1_000_000, method="copula", workers=2)
    assert estimate.seconds["calibration"] == pytest.approx(
        fit_cost.calibration_seconds(wide.sizes.tolist()), rel=1e-3)
    # One attribute's share grows about as s² (the multiply through its factor) ...
    assert fit_cost.calibration_seconds([800]) > 3 * fit_cost.calibration_seconds([400])
    # ... and halves at GROUPED_MIN_CATEGORIES, where the factor is applied as triangular.
    below, at = GROUPED_MIN_CATEGORIES - 1, GROUPED_MIN_CATEGORIES
    assert fit_cost.calibration_seconds([at]) < 0.75 * fit_cost.calibration_seconds([below])
    # The calibration's draws of the largest attribute are part of the driver's memory.
    small = plan.estimate(schema_with([10] * 10), 1_000_000, method="copula")
    assert estimate.driver_bytes - small.driver_bytes > fit_cost.CALIBRATION_DRAWS * 5_000 * 4
    assert estimate.worker_bytes - small.worker_bytes < fit_cost.CALIBRATION_DRAWS * 5_000 * 4
