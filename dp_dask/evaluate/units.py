"""Unit checks of a release against the real data (``dp-dask evaluate --unit COLUMN``).

A release under a privacy unit is judged on units, not rows (issue 67): per unit, what a unit-
shaped release (:mod:`dp_dask.methods.marginals.unit_shape`) keeps.

* ``rows_per_unit_tvd``: total variation distance between the real units' numbers of rows, each
  clipped to K (what any release bounded to K can hold), and the synthetic units';
* ``unit_constant_share``: the share of synthetic units whose unit-level attributes each hold one
  value (the real data's share beside it);
* ``lag1_error`` (with an order column and an attribute): |ρ_synthetic − ρ_real| of the lag-1
  Pearson correlation of the attribute within units (each row's value against the previous row's
  by the order column), NaN where a side has no unit of two rows. A schema attribute is
  correlated by its bin codes (released values are drawn within their bins: one value of a
  wide open bin would otherwise sway the correlation), another column by its numbers.

The real table's unit column is read as it is: an evaluation reads the raw data, it is no
release. Units are grouped on the driver from the few columns the checks read (the unit, the
unit-level attributes, the order and lag columns): one row per real unit in memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from dp_dask.data.encode import encode_column
from dp_dask.data.io import TableSource, read_table
from dp_dask.data.schema import Schema
from dp_dask.evaluate.queries import shares_tvd
from dp_dask.release import checked_table


def _columns(source: TableSource, schema: Schema, wanted: Sequence[str]) -> pd.DataFrame:
    ddf = read_table(source, schema, extra=[c for c in wanted if c not in schema.columns])
    missing = [c for c in wanted if c not in ddf.columns]
    if missing:
        raise ValueError(f"unit checks: the table has no column(s) {missing}")
    return ddf[list(wanted)].compute()


def rows_per_unit(frame: pd.DataFrame, column: str, max_rows: int | None = None) -> pd.Series:
    """The share of units holding each number of rows (clipped to ``max_rows``), nulls one
    unit."""
    sizes = frame.groupby(frame[column].astype(object).fillna("\0null"), sort=False).size()
    if max_rows is not None:
        sizes = sizes.clip(upper=max_rows)
    return sizes.value_counts(normalize=True).sort_index()


def constant_share(frame: pd.DataFrame, column: str, unit_level: Sequence[str]) -> float:
    """The share of units whose every ``unit_level`` column holds one value (a null counts as
    one)."""
    if not unit_level:
        return 1.0
    distinct = frame.groupby(frame[column].astype(object).fillna("\0null"))[
        list(unit_level)].nunique(dropna=False)
    return float((distinct <= 1).all(axis=1).mean())


def lag1_correlation(frame: pd.DataFrame, column: str, order: str, attribute: str) -> float:
    """Pearson correlation of ``attribute`` (as numbers) with its previous value in the same
    unit, rows ordered by ``order``; NaN without two units' worth of pairs."""
    ordered = frame.assign(_unit=frame[column].astype(object).fillna("\0null")).sort_values(
        ["_unit", order], kind="stable")
    values = pd.to_numeric(ordered[attribute], errors="coerce")
    previous = values.groupby(ordered["_unit"].to_numpy()).shift(1)
    pairs = pd.DataFrame({"now": values.to_numpy(), "before": previous.to_numpy()}).dropna()
    if len(pairs) < 3:
        return float("nan")
    return float(pairs["now"].corr(pairs["before"]))


def unit_checks(real: TableSource, synthetic: TableSource, schema: Schema, column: str, *,
                max_rows: int | None = None, unit_level: Sequence[str] | None = None,
                order: str | None = None, lag: str | None = None) -> dict[str, Any]:
    """The unit checks (module docstring) of ``synthetic`` against ``real`` by the unit
    ``column``: ``unit_level`` defaults to the attributes the schema declares so; ``max_rows``
    (K) clips the real units' rows."""
    if unit_level is None:
        unit_level = [a.name for a in schema.attributes if a.unit_level]
    wanted = [column, *unit_level, *([order, lag] if order and lag else [])]
    wanted = list(dict.fromkeys(wanted))
    if isinstance(synthetic, str | Path):  # a release: read only if complete
        synthetic = checked_table(synthetic)
    frames = {side: _columns(source, schema, wanted)
              for side, source in (("real", real), ("synthetic", synthetic))}
    if lag in schema.names:  # its bins' codes: released values decode within their bin
        attribute = schema[lag]
        for frame in frames.values():
            frame[lag] = encode_column(frame[attribute.column], attribute)
    real_sizes = rows_per_unit(frames["real"], column, max_rows)
    synthetic_sizes = rows_per_unit(frames["synthetic"], column)
    record: dict[str, Any] = {
        "unit": column, "max_rows": max_rows, "unit_level": list(unit_level),
        "units": {side: int(frame[column].astype(object).fillna("\0null").nunique())
                  for side, frame in frames.items()},
        "rows_per_unit_tvd": shares_tvd(real_sizes, synthetic_sizes),
        "mean_rows_per_unit": {"real": float((real_sizes * real_sizes.index).sum()),
                               "synthetic": float((synthetic_sizes
                                                   * synthetic_sizes.index).sum())},
        "unit_constant_share": constant_share(frames["synthetic"], column, unit_level),
        "real_unit_constant_share": constant_share(frames["real"], column, unit_level)}
    if order and lag:
        correlations = {side: lag1_correlation(frame, column, order, lag)
                        for side, frame in frames.items()}
        record |= {"lag1": {"order": order, "attribute": lag, **correlations},
                   "lag1_error": abs(correlations["synthetic"] - correlations["real"])}
    return record
