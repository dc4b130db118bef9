"""Numeric point masses drafted under DP (issue 65): exact values that hold a large share of a
column (zeros of rainfall, a visibility capped at 10.0, round prices), released as exact values.

A searched numeric column's exact counts per value (:func:`value_counts`, reduced on Dask with
its cells) get noise of one scale, on the values written canonically (:func:`point_key`,
``repr`` of the float, -0.0 as 0.0), in two parts of one histogram:

* **public candidates** (:func:`round_points`): 0 and the numbers of one significant digit,
  ±d·10ʲ (a rainfall's zeros, a visibility capped at 10, round prices), a list fixed by this
  module alone (an integer column's: its integers), counted whether present or not. A plain
  count: no δ is needed, as no value's presence is revealed by its key. A candidate becomes a
  point where its noisy count passes what an empty candidate's noise passes with probability
  β/m (m candidates, β = :data:`PUBLIC_MISS`): b·ln(m/2β) for Laplace, σ·Φ⁻¹(1 − β/m) for
  Gaussian noise, so that an empty candidate passes with probability at most β in all;
* **the other values present** (data-dependent keys), thresholded as text categories are
  (OpenDP's Laplace or Gaussian threshold, with δ: a value held by one row is released with
  probability about δ).

A replaced row leaves one value and enters another, in either part: the whole histogram moves
by (L0, L1, L∞) = (2, 2, 1), L2 √2, and by (2K, 2K, K), L2 √2·K, under a privacy unit bounded
to K rows (``bound``), so the two parts together are one threshold measurement whose public
keys are always present (a key present in both neighbours costs ε, or ρ, by its noise; δ
covers only keys present in one). Of the values that pass, those whose noisy count is at
least :data:`POINT_FLOOR` of the noisy row count n̂ become points (post-processing of the noisy
counts): at most 1/POINT_FLOOR of them; of an integer column, only those neither of whose
neighbours p ± 1 is one too. A run of consecutive codes (years 2000-2015 of 6 % each, months)
is the column itself, which its search releases one bin per value: taken out as points, they
left the rest's search too few rows (a table's years clamped, KS 0.020 → 0.056), while a heap
(capital gains of 0, 40 hours a week) stands alone. Each row holds one value per column.

The points take :data:`POINT_SHARE` of the column's budget and the column's share of δ (of the
draft's δ the point masses get :data:`POINT_DELTA` where text columns may be drafted too, all
otherwise). The noise is Laplace at that share of the column's ε where the column is searched
alone; where the draft measures the numeric searches together
(:func:`~dp_dask.data.draft_numeric.joint_searches`), the points are in that one zCDP budget
too, Gaussian at that share of the column's ρ: the budget's ε, the columns' whole shares
summed, is converted once, and ρ grows as ε² does, so that the points of weather's 13 numeric
columns at total ε 1 see σ ≈ 360 where their Laplace counts at each column's own ε had a
deviation of 1,350 (the public candidates' threshold about 1,600 rows, not 11,000). The type
step decides the column's kind first, on all its values; a fractional point released for a
column decided integer makes it a float (post-processing,
:func:`~dp_dask.data.draft_types.with_points_places`). The domain search
(:mod:`dp_dask.data.draft_numeric`) then runs on the rest of
the column: the points' exact rows are taken out of its exact cell counts before they are noised
(:func:`without_points`), so the points don't distort the bins (given the released points, the
rest's histogram moves by L1 2K as any histogram does). Where no octave of the rest passes alone,
the points' noisy counts are added to their octaves (:func:`points_octaves`, post-processing), so
the range is found around them, if the noisy rows beside the points are at least the floor
(:func:`rest_is_searched`); else the range is the points'. The search first drops a public
point that n̂ leaves no room for beside the rest's noisy octaves (a candidate passed by noise
alone: :func:`~dp_dask.data.draft_numeric.search_numeric`, post-processing). The
attribute declares them as ``"points"`` (:mod:`dp_dask.data.attribute`): each its own bin,
decoded as exactly that value.

Where the released points of a float column are all multiples k·s of one step s, at least
:data:`LATTICE_POINTS` of them consecutive (s their smallest gap: wind speeds in knots converted to
mph), the
attribute also declares ``"lattice": s`` (:func:`lattice_of`, post-processing of the released
points, no further budget), and values between the points are decoded on it too, unless the
draft found the column's decimal places (which then decide).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import norm

from dp_dask.privacy.noise import gaussian_noise, laplace_noise
from dp_dask.privacy.selection import (
    GaussianThreshold,
    Threshold,
    calibrate_gaussian_threshold,
    calibrate_threshold,
    gaussian_threshold_counts,
    threshold_counts,
)

# of a searched numeric column's ε; the search takes the rest. Measured: at 0.3 a public
# candidate holding 20 % of 25 k rows passes on the weather table (15 columns), but the searches
# lose tails and octaves (carats released 0.65 % outside their range, 600 uniform ages no octave);
# at 0.1 the public candidates' threshold there is 17 k rows (65 %, PUBLIC_MISS; the δ
# threshold's 39 k found no point), rain's zeros (93 %) and visibility's 10.0 (84 %) pass: those
# were Laplace counts at each column's own ε; in the searches' one zCDP budget the same share is
# Gaussian at σ 357 there, the public threshold 1,570 rows (6 %), the δ one 2,490
POINT_SHARE = 0.1
POINT_FLOOR = 0.02  # a point holds at least this share of the noisy rows n̂
# of the draft's δ where text columns may be drafted too: the floor, not δ, decides most
# points, while a text column's smallest levels are released by δ's threshold
POINT_DELTA = 0.1
# chance that any empty public candidate passes its threshold: a false point widens the
# column's range to it (an age column's maximum at 4·10⁷ in 1 of 20 unseeded drafts at 0.05),
# so rare; at 0.001 the threshold is 11.7 b (17,000 of the weather table's 26,115 rows at its
# share of ε): rain's zeros (93 %) and visibility's 10.0 (84 %) still pass. Per column, so
# about one 13-column release in 200 still got one (a pressure's 4,000,000): the search of the
# rest drops a public point that the noisy rows n̂ leave no room for (draft_numeric's
# _consistent_points), which a false point's count (11.7 b) exceeds by more than noise
PUBLIC_MISS = 0.001
ROUND_DECADES = range(-3, 10)  # the public candidates ±d·10ʲ, d 1..9: from 0.001 to 9·10⁹
# released points a lattice is read from, consecutive multiples of its step (heaps at a few
# round values of a continuous column are not a lattice)
LATTICE_POINTS = 5
LATTICE_DIGITS = 12  # a step written with this many significant digits (1.15078, not 1.1507799…)


def point_key(value: float) -> str:
    """A value's canonical text: ``repr`` of the float (read back exactly by ``float``)."""
    return repr(float(value))


def round_points(integer: bool) -> list[float]:
    """The public candidates (module docstring): 0 and ±d·10ʲ, d = 1..9, j in
    :data:`ROUND_DECADES` (j ≥ 0 only for an ``integer`` column), each the float its decimal
    text reads as (a value written 0.003 is that float)."""
    decades = [j for j in ROUND_DECADES if j >= 0 or not integer]
    rounds = [float(f"{sign}{d}e{j}") for sign in "+-" for d in range(1, 10) for j in decades]
    return [0.0, *sorted(rounds)]


def value_counts(numbers: np.ndarray) -> pd.Series:
    """Exact counts of one partition's finite numbers by value (-0.0 counted as 0.0)."""
    finite = numbers[np.isfinite(numbers)] + 0.0
    values, counts = np.unique(finite, return_counts=True)
    return pd.Series(counts.astype(np.int64), index=pd.Index(values, dtype=np.float64))


def check_points_budget(epsilon: float, delta: float, bound: int = 1) -> None:
    """Fail on a budget the threshold can't be calibrated with, before any data is read."""
    calibrate_threshold(POINT_SHARE * epsilon, delta, bound)


def gaussian_distance(bound: int) -> tuple[int, int, int]:
    """The (L0, L2, L∞) distance of one column's value counts when a unit of at most ``bound``
    rows is replaced: its K rows leave up to K values and enter as many, at most K each, and
    their L2 distance is at most √2·K (all K leaving one value and entering one other)."""
    return 2 * bound, math.ceil(math.sqrt(2) * bound), bound


def find_points(values: pd.Series, rows: float, *, epsilon: float, delta: float, bound: int,
                integer: bool, sampler: str, rng: np.random.Generator | None,
                rho: float | None = None) -> tuple[list[float], dict[str, Any]]:
    """The points of one column from its exact ``values`` (:func:`value_counts`, summed), under
    (``epsilon``, ``delta``)-DP, ``epsilon`` being the column's whole share (the points spend
    :data:`POINT_SHARE` of it), with Laplace noise; or, where ``rho`` is given (the points'
    share of the draft's one zCDP budget, :func:`~.draft_numeric.joint_searches`), Gaussian
    noise of that ρ, the other values thresholded by OpenDP's Gaussian threshold at ``delta``
    (approximate zCDP). ``rows``: the noisy row count n̂; ``integer``: the column's kind (public
    or decided under DP), which picks its public candidates. The points, and the step's
    record."""
    exact = {point_key(v): int(c) for v, c in values.items()}
    public = [point_key(v) for v in round_points(integer)]
    others = {k: c for k, c in exact.items() if k not in set(public)}
    counts = np.array([exact.get(k, 0) for k in public], dtype=np.int64)
    # one histogram: the public candidates at the threshold's own noise (module docstring)
    if rho is None:
        calibration: Threshold | GaussianThreshold = calibrate_threshold(
            POINT_SHARE * epsilon, delta, bound)
        noisy = threshold_counts(others, calibration, sampler=sampler, rng=rng)
        noisy_public = laplace_noise(counts, calibration.scale,
                                     sensitivity=calibration.distance[1], sampler=sampler,
                                     rng=rng)
        public_threshold = calibration.scale * math.log(len(public) / (2.0 * PUBLIC_MISS))
        public_noise = ("make_laplace over vector_domain(atom_domain(i64)), l1_distance(i64), "
                        "at the threshold's scale")
    else:
        calibration = calibrate_gaussian_threshold(rho, delta, gaussian_distance(bound))
        noisy = gaussian_threshold_counts(others, calibration, sampler=sampler, rng=rng)
        noisy_public = gaussian_noise(counts, calibration.scale,
                                      sensitivity=calibration.sensitivity, sampler=sampler,
                                      rng=rng)
        public_threshold = calibration.scale * float(norm.isf(PUBLIC_MISS / len(public)))
        public_noise = ("make_gaussian over vector_domain(atom_domain(i64)), l2_distance(i64), "
                        "at the threshold's scale")
    floor = POINT_FLOOR * rows
    passed = {float(k): c for k, c in zip(public, noisy_public)
              if c >= max(floor, public_threshold)}
    found = {float(k): c for k, c in noisy.items() if c >= floor} | passed
    if integer:  # heaps only: a run of consecutive codes is the column, not its points
        found = {p: c for p, c in found.items() if p - 1 not in found and p + 1 not in found}
        passed = {p: c for p, c in passed.items() if p in found}
    points = sorted(found)
    noise = "Laplace" if rho is None else "Gaussian"
    return points, {"step": "point masses", **calibration.to_json(),
                    **({} if rho is None else {"epsilon": POINT_SHARE * epsilon}),
                    "floor": floor,
                    "noisy": {point_key(p): round(float(found[p]), 1) for p in points},
                    "public_points": [point_key(p) for p in sorted(passed)],
                    "public": {"candidates": len(public), "threshold": public_threshold,
                               "miss": PUBLIC_MISS,
                               "values": "0 and ±d·10^j, d 1..9, j "
                                         f"{0 if integer else ROUND_DECADES.start}.."
                                         f"{ROUND_DECADES.stop - 1}",
                               "opendp": public_noise},
                    "points": len(points),
                    "rule": f"one {noise} histogram of the values: the public candidates "
                            "counted whether present or not, a point where the noisy count "
                            "passes their threshold (no δ); the other values present "
                            "thresholded with δ; either a point only if its noisy count is "
                            f"at least {POINT_FLOOR:g} x the noisy rows n̂"
                            + ("; of an integer column, only those whose neighbours p ± 1 "
                               "are no such value" if integer else "")
                            + "; on their canonical text (repr of the float)"}


def rest_is_searched(rows: float, found: dict[str, Any], points: list[float]) -> bool:
    """Whether the rows beside the ``points`` are many enough for the range to be found around
    them (:func:`points_octaves`): the noisy rows n̂ less the points' noisy counts (``found``,
    :func:`find_points`' record) at least :data:`POINT_FLOOR` of n̂, post-processing. Else the
    column is about its points alone (counts 0..19, every one a point), and the range is
    theirs."""
    mass = sum(found["noisy"][point_key(p)] for p in points)
    return rows - mass >= POINT_FLOOR * rows


def points_octaves(edges: np.ndarray, found: dict[str, Any], points: list[float],
                   clamp: bool = True) -> np.ndarray:
    """The released ``points``' noisy counts (``found``) per cell of ``edges``, post-processing
    of released counts: per octave (``clamp``: a point beyond them counts in the end one, the
    plausible range), what the search adds to the rest's noisy octaves where none of those
    passes alone (a rest of a few thousand rows spread over several octaves, visibilities below
    a heap at 10); per search cell (not clamped: a point outside them counts in none), what it
    adds to the cells its range's ends are found from."""
    beside = np.zeros(len(edges) - 1)
    for point in points:
        cell = _point_cell(edges, point, clamp)
        if cell is not None:
            beside[cell] += found["noisy"][point_key(point)]
    return beside


def _point_cell(edges: np.ndarray, point: float, clamp: bool) -> int | None:
    """The cell of ``edges`` that holds ``point``; beyond them, the end cell (``clamp``: the
    octaves' plausible range, the fine cells') or none (the unit cells, a search's cells)."""
    cell = int(np.searchsorted(edges, point, side="right")) - 1
    if clamp:
        return min(max(cell, 0), len(edges) - 2)
    return cell if 0 <= cell < len(edges) - 1 else None


def without_points(counts: dict[str, np.ndarray], values: pd.Series, cells: Any,
                   points: list[float]) -> dict[str, np.ndarray]:
    """The exact cell counts of :func:`~.draft_numeric.numeric_counts` over ``cells`` (its
    :class:`~.draft_numeric.Cells`, not imported: that module is in drafting's import cycle)
    less the points' rows: the rest of the column, before any noise (octave and fine cells
    clamp, unit cells don't)."""
    rest = {key: counts[key].copy() for key in counts}
    for key, edges, clamp in (("octaves", cells.octaves, True), ("fine", cells.fine, True),
                              ("units", cells.units, False)):
        if key not in rest:
            continue
        for point in points:
            cell = _point_cell(edges, point, clamp)
            if cell is not None:
                rest[key][cell] -= int(values.get(point, 0))
    return rest


def _exact(value: float) -> float | int:
    """A point for the JSON, exactly (integral ones as ints): never rounded."""
    return int(value) if float(value).is_integer() else float(value)


def lattice_of(points: list[float]) -> float | None:
    """The step s of which every one of the released ``points`` is an integer multiple, s their
    smallest gap, each point k·s exactly as the float product gives it, and at least
    :data:`LATTICE_POINTS` of them consecutive multiples; None where they lie on no such
    lattice. The assumption that the values between the points lie on it too is the
    draft's, said in its notes: no count of them is taken."""
    values = np.array(sorted(points), dtype=np.float64)
    if len(values) < LATTICE_POINTS:
        return None
    step = float(f"{np.diff(values).min():.{LATTICE_DIGITS}g}")
    multiples = np.rint(values / step)
    # the data's own products (6 · 1.15078 = 6.904679999999999), as the decoder draws them
    if not np.array_equal(multiples * step, values):
        return None
    runs = np.split(multiples, np.flatnonzero(np.diff(multiples) != 1) + 1)
    return step if max(len(run) for run in runs) >= LATTICE_POINTS else None


def with_points(spec: dict[str, Any] | None, points: list[float],
                integer: bool) -> dict[str, Any] | None:
    """The searched spec (edges, min, max, fine) of the rest of a column with its ``points``.
    A point beyond the rest's range [min, max] becomes the new bound, the old one an edge (of
    the fine grid too), so the rest keeps its range; no rest (the column all points): bins
    between the outer points. A float column declares them as ``"points"`` (the attribute
    inserts each one's bin [p, next float)), and their lattice where they lie on one
    (:func:`lattice_of`); an integer column's point p is the bin [p, p + 1),
    which its integer decoding already draws as p alone (and a bin between two points then
    holds integers too)."""
    if not points:
        return spec
    if spec is None:
        spec = {"edges": ["-inf", "inf"], "min": points[0], "max": points[-1]}
    low, high = spec["min"], spec["max"]
    edges = {float(e) for e in spec["edges"][1:-1]}  # the finite ones, between open ends
    fine = {float(e) for e in spec.get("fine", [])}
    added = {low} if points[0] < low else set()
    if points[-1] > high:  # above the rest's greatest value (an integer's: the next one)
        added.add(high + 1 if integer else high)
    low, high = min(low, points[0]), max(high, points[-1])
    if integer:  # never an edge at min (nor above max): the open outer bins close there
        added |= {p for p in points if p > low} | {p + 1 for p in points if p < high}
    edges |= added
    fine |= added if fine else set()
    lattice = None if integer else lattice_of(points)
    spec = {**{k: v for k, v in spec.items() if k != "fine"},
            "edges": ["-inf", *(_exact(e) for e in sorted(edges)), "inf"],
            "min": _exact(low), "max": _exact(high),
            **({} if integer else {"points": [_exact(p) for p in points]}),
            **({} if lattice is None else {"lattice": lattice})}
    # a fine grid whose every inner edge is a bin edge or a point (a float's point is a bin of
    # its own) splits no bin (a column all of whose values are points): the attribute then has
    # none
    bin_edges = edges | set(points)
    splits = any(e not in bin_edges for e in sorted(fine)[1:-1])
    return {**spec, "fine": [_exact(e) for e in sorted(fine)]} if fine and splits else spec
