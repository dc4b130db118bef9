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
3. Several: their levels are released together, by Gaussian thresholds over the counts of all
   the text columns at once (keys: a column and a value text), in two rounds whose zCDP
   charges add (adaptive composition), converted once to (ε, δ) (OpenDP's optimal conversion,
   :func:`~dp_dask.privacy.selection.zcdp_epsilon`): a row adds 1 to one level in each of m
   columns, so the counts' L2 distance is √(2m) for a replaced row (it grows as √m where m
   Laplace counts' L1 grows as m). The first round (:data:`FIRST_RHO` of ρ) releases the large
   levels. The second counts each row, in each column whose value the first round did not
   release, with the weight 1/√u (u: how many such columns the row has; in units of
   1/:data:`WEIGHT_SCALE` row, rounded down), so that every row's weights have L2 norm at most 1
   whatever the data: a replaced row moves them by at most √2. That is the budget by expected
   gain, row by row: a row whose values are all released already spends nothing, one with a
   single small level puts its whole weight there, and a column whose levels all passed the
   first round takes nothing from the others. :data:`THRESHOLD_DELTA` of δ goes to the two
   thresholds (half each; OpenDP's map), the rest to the conversion. The weights read only the
   released levels (public) and the row's own values; the second round's noisy counts are in
   weighted rows (at most the rows). Where the draft also measures numeric searches together, the
   rounds' conversion is shared with theirs: one zCDP budget of both parts' ε, each part's ρ
   times the factor that gives (:func:`~dp_dask.data.draft_split.gaussian_together`).
4. Levels are released in noisy order (largest noisy count first, from the round that released
   each), never alphabetical. Levels whose noisy counts leave fewer than the column's lowest
   threshold of the noisy rows n̂ outside them cover the column (``covered``): drafted without
   an ``other`` bin, whose noisy share would otherwise put a value into every release that no
   input row holds (an ordered categorical's dictionary gained an unused ``other``); the
   column's noisy count of missing values (step 5), where counted, is taken off n̂ too, as its
   nulls are in no level (a column of three levels and 8 % nulls kept an ``other`` bin). The
   few rows the released levels may miss (fewer than a level needs to pass) count in the
   largest level. One level covering its column is a constant (``constants``).
5. A column whose nullability is decided under DP counts its missing values as one more level,
   the public key "missing", counted whether present or not (as the point masses' public
   candidates, :mod:`.draft_points`): with one column a Laplace count at the threshold's scale,
   with several a Gaussian count at the first round's σ. A row holds one key per column either
   way (a value or missing), so the distances above hold for the longer histogram, and a key
   present in both neighbours needs no δ. The noisy count is in the column's mechanism record
   (``"missing"``); the draft decides nullability from it and the type step's
   (:func:`~dp_dask.data.draft_types.decide_nullable`). It is never a category.

Every choice is made from DP outputs (noisy counts, released sets, n̂) and public facts; the
distinct counts and the levels compose (basic composition) within ε_T and δ. Thresholds are
OpenDP's Laplace threshold (one column) or Gaussian threshold (several,
:func:`dp_dask.privacy.selection.gaussian_threshold_counts`); :func:`text_plan` calibrates them
from public facts alone.

Under a privacy unit of at most K rows (the draft bounded each unit to K rows first) every
sensitivity above is K times a row's: the Laplace threshold is calibrated to (L0, L1, L∞) =
(2K, 2K, K), the Gaussian rounds to (L0, L2, L∞) = (2mK, ⌈K√(2m)⌉, K) and (2mK,
⌈√2·K·S⌉, K·S) (S = :data:`WEIGHT_SCALE`; a unit's rows' weights are non-negative, so a replaced
unit moves them by at most √2 times a unit's K·S): ``bound`` = K throughout, 1 for a row.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from dp_dask.privacy.noise import gaussian_noise, laplace_noise
from dp_dask.privacy.selection import (
    GaussianThreshold,
    Threshold,
    calibrate_gaussian_threshold,
    calibrate_threshold,
    gaussian_threshold_counts,
    threshold_counts,
    zcdp_epsilon,
    zcdp_rho,
)

DISTINCT_SHARE = 0.05
ID_DISTINCT = 0.5
ID_MARGIN = 5
# Of the Gaussian rounds' ρ, the first's: it only needs the large levels, whose rows would
# otherwise dilute the second round's weights; measured on Adult's nine text columns and a
# table of nine columns of 1.2 % levels (0.1–0.3 keep the same levels, 0.2 the most)
FIRST_RHO = 0.2
THRESHOLD_DELTA = 0.5  # of the text columns' δ: the two Gaussian thresholds', half each
# The second round's weights 1/√u as integers in 1/WEIGHT_SCALE of a row (rounded down: a row's
# weights keep an L2 norm of at most 1): a thousandth of a row, far below any noise scale
WEIGHT_SCALE = 1000

# The second round's counts, given the levels the first released per column: per column, the
# weighted rows (integers, in 1/WEIGHT_SCALE of a row) of each value text not released
WeightedCounts = Callable[[dict[str, set[str]]], dict[str, pd.Series]]


@dataclass(frozen=True)
class TextPlan:
    """The text step's calibration, from public facts alone (ε_T, δ, the text columns' number m
    and the bound K): the distinct counts' ε; with one column its Laplace threshold
    (``single``), with several the two Gaussian rounds (``first``, ``second``), their total zCDP
    charge ``rho`` and the δ of its conversion to ε (``conversion_delta``)."""

    columns: int
    epsilon: float
    delta: float
    distinct_epsilon: float
    single: Threshold | None = None
    first: GaussianThreshold | None = None
    second: GaussianThreshold | None = None
    rho: float = 0.0
    conversion_delta: float = 0.0
    together: float = 1.0

    @property
    def rounds_epsilon(self) -> float:
        """The levels' share of ε_T: all but the distinct counts'."""
        return self.epsilon - self.distinct_epsilon

    @property
    def levels_epsilon(self) -> float:
        """The levels' ε: the Laplace threshold's, or the Gaussian rounds' ρ converted; their
        share of the draft's one Gaussian budget where they are measured with the numeric
        searches (``together`` > 1: that budget's conversion is recorded there)."""
        if self.single is not None:
            return self.single.epsilon
        if self.together > 1:
            return self.rounds_epsilon
        return zcdp_epsilon(self.rho, self.conversion_delta)

    def smallest_level(self, margin: float) -> float:
        """The rows (weighted, at weight 1) a level needs to pass the round that releases the
        small levels by ``margin`` noise scales."""
        if self.single is not None:
            return self.single.threshold + margin * self.single.scale
        second = self.second
        return (second.threshold + margin * second.scale) / WEIGHT_SCALE


def text_plan(epsilon: float, delta: float, columns: int, bound: int = 1,
              together: float = 1.0) -> TextPlan:
    """The text step's calibration for ``columns`` text columns at (``epsilon``, ``delta``) and
    the contribution bound ``bound`` (module docstring); ``together``: the factor on the
    Gaussian rounds' ρ where they are measured with the numeric searches, in one zCDP budget
    converted once (:func:`~dp_dask.data.draft_split.gaussian_together`)."""
    distinct = DISTINCT_SHARE * epsilon
    rest = epsilon - distinct
    if columns <= 1:
        return TextPlan(columns, epsilon, delta, distinct,
                        single=calibrate_threshold(rest, delta, bound))
    conversion_delta = (1 - THRESHOLD_DELTA) * delta
    rho = together * zcdp_rho(rest, conversion_delta)
    keys = 2 * columns * bound  # a replaced unit's rows leave K keys and enter K per column
    first = calibrate_gaussian_threshold(
        FIRST_RHO * rho, THRESHOLD_DELTA * delta / 2,
        (keys, math.ceil(bound * math.sqrt(2 * columns)), bound))
    second = calibrate_gaussian_threshold(
        (1 - FIRST_RHO) * rho, THRESHOLD_DELTA * delta / 2,
        (keys, math.ceil(math.sqrt(2) * bound * WEIGHT_SCALE), bound * WEIGHT_SCALE))
    return TextPlan(columns, epsilon, delta, distinct, first=first, second=second,
                    rho=first.rho + second.rho, conversion_delta=conversion_delta,
                    together=together)


def row_weights(unreleased: np.ndarray) -> np.ndarray:
    """Each row's weight in the second round, per column whose value the first round did not
    release (``unreleased``: rows × columns, True there): ⌊S/√u⌋, u the row's such columns
    (its weights' L2 norm at most S = :data:`WEIGHT_SCALE`)."""
    u = unreleased.sum(axis=1)
    weights = np.zeros(len(u), dtype=np.int64)
    held = u > 0
    weights[held] = np.floor(WEIGHT_SCALE / np.sqrt(u[held])).astype(np.int64)
    return weights


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
    text_plan(epsilon, delta, columns, bound)


def _noisy(values: list[int], epsilon: float, sampler: str, rng: np.random.Generator | None,
           bound: int) -> np.ndarray:
    """One count per column plus Laplace noise; a row moves each by at most 1, a unit by at
    most ``bound`` (L1 = columns · bound)."""
    scale = len(values) * bound / epsilon
    return laplace_noise(np.array(values, dtype=np.int64), scale,
                         sensitivity=len(values) * bound, sampler=sampler, rng=rng)


def _joint_round(counts: dict[str, pd.Series], calibration: GaussianThreshold, sampler: str,
                 rng: np.random.Generator | None) -> dict[str, dict[str, float]]:
    """One Gaussian threshold over every column's counts at once (keys ``"i:value"``, i the
    column's place), its released levels per column with their noisy counts."""
    columns = list(counts)
    joint = {f"{i}:{value}": count for i, column in enumerate(columns)
             for value, count in counts[column].items()}
    passed = gaussian_threshold_counts(joint, calibration, sampler=sampler, rng=rng)
    released: dict[str, dict[str, float]] = {column: {} for column in columns}
    for key, noisy in passed.items():
        place, value = key.split(":", 1)
        released[columns[int(place)]][value] = noisy
    return released


def _covered(released: dict[str, float], rows: float, threshold: float) -> bool:
    """Levels released, and the noisy rows n̂ leave fewer than a level's threshold outside
    their noisy counts: the column is drafted without an ``other`` bin (post-processing)."""
    return bool(released) and rows - sum(released.values()) < threshold


def draft_texts(counts: dict[str, pd.Series], rows: float, epsilon: float, delta: float, *,
                rows_scale: float, sampler: str, rng: np.random.Generator | None,
                bound: int = 1, weighted: WeightedCounts | None = None,
                missing: dict[str, int] | None = None, together: float = 1.0) -> TextDraft:
    """Identifiers and categories of the text columns (``counts``: exact rows per value text,
    missing excluded) under (``epsilon``, ``delta``)-DP in all, as the module docstring says;
    ``rows``: the noisy number of rows n̂, of Laplace scale ``rows_scale``; ``bound``: the rows
    one unit contributes at most; ``weighted``: the second round's counts (read from the data
    again, given the first round's levels), needed with several text columns; ``missing``: the
    exact count of missing values of the columns whose nullability is decided under DP,
    counted as one more level of each (step 5 of the module docstring); ``together``: the
    factor on the Gaussian rounds' ρ where they are measured with the numeric searches
    (:func:`text_plan`). Noise is drawn here, once per measurement."""
    columns = list(counts)
    missing = missing or {}
    result = TextDraft()
    plan = text_plan(epsilon, delta, len(columns), bound, together)
    distinct_epsilon = plan.distinct_epsilon
    distinct = _noisy([len(counts[c]) for c in columns], distinct_epsilon, sampler, rng, bound)
    scale = len(columns) * bound / distinct_epsilon
    margin = ID_MARGIN * (scale + ID_DISTINCT * rows_scale)
    result.identifiers = [c for c, d in zip(columns, distinct)
                          if d >= ID_DISTINCT * rows + margin]
    left = [c for c in columns if c not in result.identifiers]
    record: dict[str, Any] = {
        "epsilon": epsilon, "delta": delta, "columns": columns,
        "distinct_values": {"mechanism": "laplace", "epsilon": distinct_epsilon,
                            "sensitivity": len(columns) * bound, "scale": scale,
                            "noisy": {c: float(d) for c, d in zip(columns, distinct)}},
        "identifiers": {"columns": result.identifiers, "rows": rows, "margin": margin,
                        "rule": f"noisy distinct values >= {ID_DISTINCT} x the noisy rows n̂ "
                                f"+ {ID_MARGIN} x (their noise scale + {ID_DISTINCT} x n̂'s)"}}
    noisy: dict[str, dict[str, float]] = {}
    smallest = plan.smallest_level(0)  # the rows a level needed to pass: its threshold
    if plan.single is not None and left:
        (column,) = left
        noisy[column] = threshold_counts(counts[column].to_dict(), plan.single,
                                         sampler=sampler, rng=rng)
        result.mechanisms[column] = {**plan.single.to_json(), "released": len(noisy[column])}
        record["levels"] = {**result.mechanisms[column], "columns": left}
        if column in missing:  # the public key "missing": a plain Laplace count, no δ
            nulls = laplace_noise(np.array([missing[column]], dtype=np.int64),
                                  plan.single.scale, sensitivity=plan.single.distance[1],
                                  sampler=sampler, rng=rng)[0]
            result.mechanisms[column]["missing"] = {"noisy": float(nulls), "noise": "laplace",
                                                    "scale": plan.single.scale, "by": "levels"}
    elif left:
        if weighted is None:
            raise ValueError("several text columns: their second round's weighted counts "
                             "(weighted=) are needed")
        noisy = _joint_round({c: counts[c] for c in left}, plan.first, sampler, rng)
        # the public keys "missing", in the first round's histogram at its scale (no δ)
        public = [c for c in left if c in missing]
        nulls = gaussian_noise(np.array([missing[c] for c in public], dtype=np.int64),
                               plan.first.scale, sensitivity=plan.first.sensitivity,
                               sampler=sampler, rng=rng) if public else []
        first = {c: set(noisy[c]) for c in left}
        found = _joint_round(weighted(first), plan.second, sampler, rng)
        for column in left:  # in rows: the second round counts in 1/WEIGHT_SCALE of a row
            noisy[column].update({k: v / WEIGHT_SCALE for k, v in found[column].items()
                                  if k not in noisy[column]})
        levels = {
            "mechanism": "two rounds of gaussian-threshold over all text columns' counts at "
                         "once (approximate zCDP, adaptive composition), converted to (ε, δ)",
            "epsilon": plan.levels_epsilon,
            "rho": plan.rho, "conversion_delta": plan.conversion_delta,
            "threshold_delta": plan.first.delta + plan.second.delta,
            "conversion": "OpenDP's make_zCDP_to_approxDP (optimal, Canonne, Kamath & "
                          "Steinke 2020) of the rounds' summed rho" if plan.together == 1 else
                          "their rho is a share of the draft's one Gaussian budget, measured "
                          "with the numeric searches and converted once: "
                          "drafted_under_dp.gaussian",
            "columns": left,
            "rounds": [
                {**plan.first.to_json(), "counts": "rows per (column, value text)",
                 "released": {c: len(first[c]) for c in left}},
                {**plan.second.to_json(), "counts": (
                    "per (column, value text) the first round did not release, each row "
                    f"weighted floor({WEIGHT_SCALE}/sqrt(u)), u its columns of such values: "
                    f"in 1/{WEIGHT_SCALE} of a row"),
                 "released": {c: len(found[c].keys() - first[c]) for c in left}}]}
        levels["delta"] = plan.conversion_delta + levels["threshold_delta"]
        record["levels"] = levels
        for column in left:
            result.mechanisms[column] = {
                "mechanism": "gaussian-threshold over all text columns at once (two rounds): "
                             "drafted_under_dp.text.levels",
                "epsilon": plan.levels_epsilon, "delta": levels["delta"],
                "shared_by": len(left), "released": len(noisy[column]),
                "threshold": smallest}  # in rows, at weight 1: what a level needs to pass
        for column, count in zip(public, nulls):
            result.mechanisms[column]["missing"] = {"noisy": float(count), "noise": "gaussian",
                                                    "scale": plan.first.scale, "by": "levels"}
    for column, released in noisy.items():  # in noisy order, largest first
        result.categories[column] = sorted(released, key=lambda k: (-released[k], k))
        # the rows its missing values hold, where counted, are outside its levels too
        outside = rows - result.mechanisms[column].get("missing", {}).get("noisy", 0.0)
        if _covered(released, outside, smallest):
            result.covered.append(column)
            if len(released) == 1:
                result.constants.append(column)
    record["covered"] = {"columns": result.covered, "threshold": smallest, "rule": (
        "levels released, and the noisy rows n̂ minus their noisy counts (and the column's "
        "noisy count of missing values, where counted) below the threshold of the round that "
        "releases the small levels (in rows): no 'other' bin, the rest (if any) in the largest "
        "level")}
    record["constants"] = {"columns": result.constants, "rule": "covered by one level"}
    record["order"] = ("each column's levels by their noisy counts, largest first (the second "
                       "round's in weighted rows)")
    record["split"] = {"rule": (
        "one column: the rest of the text budget in one Laplace threshold" if plan.single else
        f"{DISTINCT_SHARE:g} of the text budget to count distinct values; the rest in two "
        f"Gaussian rounds over all text columns at once ({FIRST_RHO:g} of their rho in the "
        "first), the second weighted row by row towards the values still unreleased (the "
        f"budget by expected gain); {THRESHOLD_DELTA:g} of δ to the thresholds")}
    result.record = record
    return result
