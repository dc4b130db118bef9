"""Text columns drafted under DP (``schema draft --dp-epsilon``): identifiers found, categories
released by thresholded noisy counts, with the text columns' budget split towards the columns of
many levels.

The text columns' share ε_T of the draft (and its whole δ) is spent, over the exact counts per
value text that :func:`dp_dask.data.draft_dp.draft_under_dp` reduced to the driver, in steps:

1. :data:`DISTINCT_SHARE` of ε_T: each column's number of distinct values plus Laplace noise (a
   replaced row moves each count by at most 1: L1 sensitivity = the number of text columns). A
   column whose noisy count is at least :data:`ID_DISTINCT` of the noisy rows n̂, by a margin of
   :data:`ID_MARGIN` times both noises' scales (the distinct count's and ID_DISTINCT · n̂'s, so
   that noise alone, on a small table or budget, makes an identifier with probability below
   e⁻⁵ ≈ 0.7 %), is an identifier, released as synthetic ids (:mod:`dp_dask.data.ids`) or
   dropped, never thresholded. n̂ is the draft's noisy row count
   (:func:`dp_dask.data.draft_dp.draft_under_dp`), never the exact n: neighbours may add or
   remove a row, so n is private.
2. One text column left: its categories are thresholded with the rest of ε_T.
3. Several: a first, coarse round (:data:`FIRST_SHARE` of ε_T, equal over the columns) releases
   each column's large levels; :data:`MASS_SHARE` measures, per column, the rows left outside
   them (Laplace, L1 sensitivity = the columns: a row is in or out of each column's released
   set); the rest of ε_T is split in proportion to these noisy counts (plus :data:`FLOOR` · n̂,
   so a column the first round covers keeps a sliver) for a second round. A column of few large
   levels is covered by the first round and needs little more; a column of many small levels
   leaves most rows outside and gets most of the second round, whose lower threshold releases
   its smaller levels. Each column's categories are the union of its two rounds.

Every choice is made from DP outputs (noisy counts, released sets, n̂): the split is
post-processing, its rounds compose (basic composition) within ε_T and δ. Thresholds are
OpenDP's Laplace threshold (:func:`dp_dask.privacy.selection.threshold_keys`).

Under a privacy unit of at most K rows (the draft bounded each unit to K rows first) every
sensitivity above is K times a row's, and the thresholds are calibrated to (L0, L1, L∞) =
(2K, 2K, K): ``bound`` = K throughout, 1 for a row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from dp_dask.privacy.noise import laplace_noise
from dp_dask.privacy.selection import Threshold, calibrate_threshold, threshold_keys

DISTINCT_SHARE = 0.05
FIRST_SHARE = 0.2
MASS_SHARE = 0.05
ID_DISTINCT = 0.5
ID_MARGIN = 5
FLOOR = 0.01


@dataclass
class TextDraft:
    """What the text step released: categories per column, identifiers, and its record."""

    categories: dict[str, list[str]] = field(default_factory=dict)
    mechanisms: dict[str, dict[str, Any]] = field(default_factory=dict)
    identifiers: list[str] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict)


def check_text_budget(epsilon: float, delta: float, columns: int, bound: int = 1) -> None:
    """Fail on a budget the thresholds can't be calibrated with, before any data is read."""
    calibrate_threshold(epsilon * FIRST_SHARE / columns, delta / (2 * columns), bound)


def _noisy(values: list[int], epsilon: float, sampler: str, rng: np.random.Generator | None,
           bound: int) -> np.ndarray:
    """One count per column plus Laplace noise; a row moves each by at most 1, a unit by at
    most ``bound`` (L1 = columns · bound)."""
    scale = len(values) * bound / epsilon
    return laplace_noise(np.array(values, dtype=np.int64), scale,
                         sensitivity=len(values) * bound, sampler=sampler, rng=rng)


def _round(counts: pd.Series, calibration: Threshold, sampler: str,
           rng: np.random.Generator | None) -> tuple[list[str], dict[str, Any]]:
    released = threshold_keys(counts.to_dict(), calibration, sampler=sampler, rng=rng)
    return released, {**calibration.to_json(), "released": len(released)}


def draft_texts(counts: dict[str, pd.Series], rows: float, epsilon: float, delta: float, *,
                rows_scale: float, sampler: str, rng: np.random.Generator | None,
                bound: int = 1) -> TextDraft:
    """Identifiers and categories of the text columns (``counts``: exact rows per value text,
    missing excluded) under (``epsilon``, ``delta``)-DP in all, as the module docstring says;
    ``rows``: the noisy number of rows n̂, of Laplace scale ``rows_scale``; ``bound``: the rows
    one unit contributes at most. Noise is drawn here, once per measurement."""
    columns = list(counts)
    result = TextDraft()
    distinct_epsilon = DISTINCT_SHARE * epsilon
    distinct = _noisy([len(counts[c]) for c in columns], distinct_epsilon, sampler, rng, bound)
    scale = len(columns) * bound / distinct_epsilon
    margin = ID_MARGIN * (scale + ID_DISTINCT * rows_scale)
    result.identifiers = [c for c, d in zip(columns, distinct)
                          if d >= ID_DISTINCT * rows + margin]
    left = [c for c in columns if c not in result.identifiers]
    split: dict[str, float] = {}
    record: dict[str, Any] = {
        "epsilon": epsilon, "delta": delta, "columns": columns,
        "distinct_values": {"mechanism": "laplace", "epsilon": distinct_epsilon,
                            "sensitivity": len(columns) * bound, "scale": scale,
                            "noisy": {c: float(d) for c, d in zip(columns, distinct)}},
        "identifiers": {"columns": result.identifiers, "rows": rows, "margin": margin,
                        "rule": f"noisy distinct values >= {ID_DISTINCT} x the noisy rows n̂ "
                                f"+ {ID_MARGIN} x (their noise scale + {ID_DISTINCT} x n̂'s)"}}
    rest = epsilon - distinct_epsilon
    if len(left) == 1:
        (column,) = left
        result.categories[column], result.mechanisms[column] = _round(
            counts[column], calibrate_threshold(rest, delta, bound), sampler, rng)
        split[column] = rest
    elif left:
        first_epsilon, mass_epsilon = FIRST_SHARE * epsilon, MASS_SHARE * epsilon
        first = calibrate_threshold(first_epsilon / len(left), delta / (2 * len(left)), bound)
        rounds = {c: _round(counts[c], first, sampler, rng) for c in left}
        outside = [int(counts[c].drop(rounds[c][0]).sum()) for c in left]
        mass = _noisy(outside, mass_epsilon, sampler, rng, bound)
        weights = np.maximum(mass, 0.0) + FLOOR * rows
        second_epsilon = rest - first_epsilon - mass_epsilon
        for column, weight in zip(left, weights):
            share = second_epsilon * weight / weights.sum()
            second = _round(counts[column], calibrate_threshold(
                share, delta / (2 * len(left)), bound), sampler, rng)
            result.categories[column] = sorted({*rounds[column][0], *second[0]})
            result.mechanisms[column] = {
                "mechanism": "two rounds of laplace-threshold",
                "epsilon": first.epsilon + share, "delta": delta / len(left),
                "rounds": [rounds[column][1], second[1]],
                "released": len(result.categories[column])}
            split[column] = first.epsilon + share
        record["rows_outside_first_round"] = {
            "mechanism": "laplace", "epsilon": mass_epsilon, "sensitivity": len(left) * bound,
            "scale": len(left) * bound / mass_epsilon,
            "noisy": {c: float(m) for c, m in zip(left, mass)}}
    record["split"] = {"epsilon": split, "rule": (
        "one column: the rest of the text budget" if len(left) == 1 else
        f"{FIRST_SHARE:g} of the text budget in a first round, equal over the columns; "
        f"{MASS_SHARE:g} to count the rows outside its levels; the rest in a second round, in "
        f"proportion to those noisy counts (+ {FLOOR:g} x n̂)")}
    result.record = record
    return result
