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
   set); the rest of ε_T goes to a second round by expected gain: equal over the columns that
   can gain a level there (:func:`_second_round_columns`: a column whose noisy rows outside,
   plus :data:`COVERED_MARGIN` noise scales, stay below the threshold of that split is covered
   and gets no second round). Equal over those is what keeps the smallest levels in every
   column (a 1 % grade is not starved for a column of many levels). Each column's categories
   are the union of its two rounds.
4. Levels are released in noisy order (largest noisy count first, from the round that released
   each), never alphabetical. Levels whose noisy counts leave fewer than the column's lowest
   threshold of the noisy rows n̂ outside them cover the column (``covered``): drafted without
   an ``other`` bin, whose noisy share would otherwise put a value into every release that no
   input row holds (an ordered categorical's dictionary gained an unused ``other``). The few
   rows the released levels may miss (fewer than a level needs to pass) count in the largest
   level. One level covering its column is a constant (``constants``).

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
from dp_dask.privacy.selection import Threshold, calibrate_threshold, threshold_counts

DISTINCT_SHARE = 0.05
FIRST_SHARE = 0.1
MASS_SHARE = 0.1
ID_DISTINCT = 0.5
ID_MARGIN = 5
# A column is covered by the first round when its noisy rows outside it, plus this many of their
# noise scales, stay below the second round's threshold. That scale, c/(MASS_SHARE·ε_T), is a
# quarter of the threshold's ~39c/ε_T rows (δ = 1e-6), whatever ε_T: no rows outside are found
# covered, a level 1.5 times the threshold is mistaken for covered with probability ~2.6 %.
COVERED_MARGIN = 1


@dataclass
class TextDraft:
    """What the text step released: categories per column, identifiers, and its record."""

    categories: dict[str, list[str]] = field(default_factory=dict)
    mechanisms: dict[str, dict[str, Any]] = field(default_factory=dict)
    identifiers: list[str] = field(default_factory=list)
    covered: list[str] = field(default_factory=list)  # no 'other' bin: the levels hold the rows
    constants: list[str] = field(default_factory=list)  # covered by one level
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
           rng: np.random.Generator | None) -> tuple[dict[str, float], dict[str, Any]]:
    released = threshold_counts(counts.to_dict(), calibration, sampler=sampler, rng=rng)
    return released, {**calibration.to_json(), "released": len(released)}


def _second_round_columns(mass: np.ndarray, mass_scale: float, epsilon: float, delta: float,
                          bound: int) -> np.ndarray:
    """Which columns the second round thresholds (expected gain): a level is released only if
    it holds about the threshold's rows, so a column whose rows outside the first round's levels
    (noisy, plus twice their noise scale: covered only when clearly so) are fewer than the
    threshold an equal split of ``epsilon`` over the columns still in would set can gain no
    level; it leaves its share to the others, until every column left can."""
    active = np.ones(len(mass), dtype=bool)
    while active.any():
        threshold = calibrate_threshold(epsilon / active.sum(), delta, bound).threshold
        covered = active & (mass + COVERED_MARGIN * mass_scale < threshold)
        if not covered.any():
            break
        active &= ~covered
    return active


def _covered(released: dict[str, float], rows: float, threshold: int) -> bool:
    """Levels released, and the noisy rows n̂ leave fewer than a level's threshold outside
    their noisy counts: the column is drafted without an ``other`` bin (post-processing)."""
    return bool(released) and rows - sum(released.values()) < threshold


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
    lowest: dict[str, int] = {}  # each column's lowest threshold: what a level needed
    noisy: dict[str, dict[str, float]] = {}
    if len(left) == 1:
        (column,) = left
        calibration = calibrate_threshold(rest, delta, bound)
        noisy[column], result.mechanisms[column] = _round(counts[column], calibration, sampler,
                                                          rng)
        split[column], lowest[column] = rest, calibration.threshold
    elif left:
        first_epsilon, mass_epsilon = FIRST_SHARE * epsilon, MASS_SHARE * epsilon
        each_delta = delta / (2 * len(left))
        first = calibrate_threshold(first_epsilon / len(left), each_delta, bound)
        rounds = {c: _round(counts[c], first, sampler, rng) for c in left}
        outside = [int(counts[c].drop(list(rounds[c][0])).sum()) for c in left]
        mass = _noisy(outside, mass_epsilon, sampler, rng, bound)
        mass_scale = len(left) * bound / mass_epsilon
        second_epsilon = rest - first_epsilon - mass_epsilon
        active = _second_round_columns(mass, mass_scale, second_epsilon, each_delta, bound)
        for column, gains in zip(left, active):
            share = second_epsilon / active.sum() if gains else 0.0
            steps, released = [rounds[column][1]], dict(rounds[column][0])
            lowest[column] = first.threshold
            if gains:
                second = calibrate_threshold(share, each_delta, bound)
                found, step = _round(counts[column], second, sampler, rng)
                # a level's noisy count from the first round that released it
                released.update({k: v for k, v in found.items() if k not in released})
                steps.append(step)
                lowest[column] = second.threshold
            noisy[column] = released
            result.mechanisms[column] = {
                "mechanism": f"{len(steps)} round(s) of laplace-threshold",
                "epsilon": first.epsilon + share, "delta": each_delta * len(steps),
                "rounds": steps, "released": len(released)}
            split[column] = first.epsilon + share
        record["rows_outside_first_round"] = {
            "mechanism": "laplace", "epsilon": mass_epsilon, "sensitivity": len(left) * bound,
            "scale": mass_scale, "noisy": {c: float(m) for c, m in zip(left, mass)},
            "second_round": [c for c, gains in zip(left, active) if gains]}
    for column, released in noisy.items():  # in noisy order, largest first
        result.categories[column] = sorted(released, key=lambda k: (-released[k], k))
        if _covered(released, rows, lowest[column]):
            result.covered.append(column)
            if len(released) == 1:
                result.constants.append(column)
    record["covered"] = {"columns": result.covered, "rule": (
        "levels released, and the noisy rows n̂ minus their noisy counts below the column's "
        "lowest threshold: no 'other' bin, the rest (if any) in the largest level")}
    record["constants"] = {"columns": result.constants, "rule": "covered by one level"}
    record["order"] = "each column's levels by their noisy counts, largest first"
    record["split"] = {"epsilon": split, "rule": (
        "one column: the rest of the text budget" if len(left) == 1 else
        f"{FIRST_SHARE:g} of the text budget in a first round, equal over the columns; "
        f"{MASS_SHARE:g} to count the rows outside its levels; the rest in a second round, "
        "equal over the columns that can gain a level (whose noisy rows outside, plus twice "
        "their noise scale, reach the threshold such a split sets)")}
    result.record = record
    return result
