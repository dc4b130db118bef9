"""One drafter per column kind, as the draft under DP (:mod:`.draft_dp`) runs them: each kind's
counts of a partition (:func:`partition_counts`, summed over the partitions by
:func:`merge_counts` on Dask) and its release from noisy counts, which draws the noise once, after
the reduction, and returns the attribute's spec keys, the record of its mechanisms and a note:

* text (:func:`release_text`): the levels :mod:`.draft_text` released for all text columns at
  once, in noisy order (an ordered dictionary's order among them), with ``other`` and missing
  bins;
* searched numbers (:func:`release_searched`): point masses (:mod:`.draft_points`), then the
  rest's domain search (:mod:`.draft_numeric`);
* timestamps (:func:`release_years`): their years;
* numbers on a public grid (:func:`release_quantiles`): bins at noisy-max quantiles.

Which kind a column is, and each one's share of ε, are :mod:`.draft_dp`'s to decide (public facts
and the types decided under DP); :class:`Noise` carries what every release shares: the sampler,
its generator and the contribution bound K of a privacy unit (1 for a row).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from dp_dask.cluster import compute
from dp_dask.data.counts import partition_reduction
from dp_dask.data.draft_numeric import (
    Cells,
    PointMasses,
    numeric_counts,
    search_numeric,
    search_years,
    year_counts,
)
from dp_dask.data.draft_points import (
    find_points,
    point_key,
    value_counts,
    with_points,
    without_points,
)
from dp_dask.data.draft_specs import MISSING, OTHER, free_label, round_value, with_missing_bin
from dp_dask.data.draft_text import TextDraft, row_weights
from dp_dask.data.draft_types import TEXT, YEARS, Undecided, timestamp_forms, value_forms
from dp_dask.data.text import category_text
from dp_dask.privacy.selection import noisy_min_index, noisy_min_scale, quantile_scores

ROWS = "__rows__"  # the reduction's row count: private, read only as its noisy count n̂
FORM_COUNTS = "__forms__"  # the reduction's counts of each typed column's value forms
VALUE_COUNTS = "__values__"  # the reduction's counts per value of each searchable column

# What a release returns: the attribute's spec (None: nothing found), its mechanisms' record and
# the draft's note on it.
Released = tuple[dict[str, Any] | None, dict[str, Any], str]


@dataclass(frozen=True)
class Noise:
    """What every drafter's noise shares: the ``sampler``, its generator ``rng`` (seeded only for
    tests) and ``bound``, the rows K one privacy unit contributes at most (1: a row)."""

    sampler: str
    rng: np.random.Generator | None
    bound: int


def _missing_mask(values: pd.Series, missing_values: tuple[str, ...],
                  texts: Any, inverse: np.ndarray | None) -> np.ndarray:
    """Per row whether the value is missing: a null, or its text (``category_text``) listed."""
    missing = values.isna().to_numpy(dtype=bool)
    if missing_values:
        listed = pd.Index(missing_values, dtype=object).get_indexer(
            np.asarray(texts, dtype=object)) >= 0
        missing = missing | (listed if inverse is None else np.append(listed, False)[inverse])
    return missing


def _text_counts(texts: Any, inverse: np.ndarray | None, missing: np.ndarray) -> pd.Series:
    """Rows per value text (``category_text``'s ``texts``, ``inverse``), missing ones left out."""
    if inverse is None:
        per_value = pd.Series(texts)[~missing].value_counts()
    else:
        kept = inverse[~missing & (inverse >= 0)]
        per_value = pd.Series(np.bincount(kept, minlength=len(texts)),
                              index=pd.Index(texts, dtype=object))
    # Distinct values of different types can share a text (1 and "1"): summed by text.
    return per_value[per_value > 0].groupby(level=0).sum()


def column_numbers(values: pd.Series, texts: Any, inverse: np.ndarray | None) -> np.ndarray:
    """Each value as ``pd.to_numeric(errors="coerce")`` reads it, as float64 (NaN: none). A
    column of a string dtype is parsed once per distinct string (``category_text``'s ``texts``,
    in the column's dtype) and taken by ``inverse``: the same numbers, where parsing every row
    was 60 % of a draft's CPU on the demo table (2.0 of 3.3 s on 200,000 rows)."""
    dtype = values.dtype
    if inverse is not None and isinstance(dtype, pd.StringDtype):  # Arrow or Python strings
        distinct = pd.to_numeric(pd.Series(texts, dtype=dtype), errors="coerce").to_numpy(
            dtype=np.float64, na_value=np.nan)
        return np.append(distinct, np.nan)[inverse]  # inverse -1 (missing): NaN
    return pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def partition_counts(frame: pd.DataFrame, grids: dict[str, Any],
                      missing_values: tuple[str, ...],
                      typed: tuple[str, ...] = ()) -> dict[str, Any]:
    """Exact counts of one partition: per text column, rows per value text (category_text);
    per numeric column given a grid, values below and above each candidate (shape (2,
    candidates)); per searched numeric column its cells' counts, per timestamp its years'
    (:mod:`dp_dask.data.draft_numeric`; ``typed``, its forms too: missing or not, by
    :func:`~dp_dask.data.draft_types.timestamp_forms`); per column whose type is decided under DP
    (:class:`~dp_dask.data.draft_types.Undecided`) the cells of both numeric kinds and, stored as
    text, its texts' counts; per ``typed`` column the counts of its values' forms
    (:func:`~dp_dask.data.draft_types.value_forms`) under :data:`FORM_COUNTS`; per column that
    may be searched, its counts per value (:func:`~.draft_points.value_counts`) under
    :data:`VALUE_COUNTS`; the rows under :data:`ROWS`."""
    counts: dict[str, Any] = {ROWS: len(frame), FORM_COUNTS: {}, VALUE_COUNTS: {}}
    for column, grid in grids.items():
        values = frame[column]
        if isinstance(grid, str) and grid == YEARS:
            counts[column] = year_counts(values)
            if column in typed:  # a null only: a timestamp column holds no text to list
                counts[FORM_COUNTS][column] = timestamp_forms(values.isna().to_numpy(bool))
            continue
        texts, inverse = (category_text(values) if missing_values or grid is None or (
            isinstance(grid, Undecided) and grid.text) else (None, None))
        missing = _missing_mask(values, missing_values, texts, inverse)
        if grid is not None or column in typed:
            # a listed numeric text ("-9") is missing, not a number
            numbers = np.where(missing, np.nan, column_numbers(values, texts, inverse))
        if column in typed:
            counts[FORM_COUNTS][column] = value_forms(numbers, missing)
        if isinstance(grid, Cells | Undecided):  # its point masses' candidates
            counts[VALUE_COUNTS][column] = value_counts(numbers)
        if grid is None:
            counts[column] = _text_counts(texts, inverse, missing)
        elif isinstance(grid, Undecided):
            counts[column] = {kind: numeric_counts(numbers, cells)
                              for kind, cells in grid.cells.items()}
            if grid.text:
                counts[column][TEXT] = _text_counts(texts, inverse, missing)
        elif isinstance(grid, Cells):
            counts[column] = numeric_counts(numbers, grid)
        else:
            numbers = np.sort(numbers[~np.isnan(numbers)])
            counts[column] = np.stack([
                np.searchsorted(numbers, grid, side="left"),
                len(numbers) - np.searchsorted(numbers, grid, side="right")]).astype(np.int64)
    return counts


def partition_weighted(frame: pd.DataFrame, released: dict[str, set[str]],
                       missing_values: tuple[str, ...]) -> dict[str, pd.Series]:
    """The second text round's counts of one partition (:mod:`.draft_text`): per text column of
    ``released`` (the first round's levels, public), the weights
    (:func:`~.draft_text.row_weights`) of the rows per value text not released, missing ones
    left out."""
    columns = list(released)
    distincts: list[np.ndarray] = []
    codes: list[np.ndarray] = []
    unreleased = np.zeros((len(frame), len(columns)), dtype=bool)
    for j, column in enumerate(columns):
        values = frame[column]
        distinct, inverse = category_text(values)
        missing = _missing_mask(values, missing_values, distinct, inverse)
        if inverse is None:  # an object column of strings: each distinct one once
            inverse, distinct = pd.factorize(np.asarray(distinct, dtype=object))
        distinct = np.asarray(distinct, dtype=object)
        # membership per distinct value, taken by row (a missing value's -1: excluded)
        listed = np.append(pd.Index(distinct, dtype=object).isin(released[column]), True)
        unreleased[:, j] = ~missing & ~listed[inverse]
        distincts.append(distinct)
        codes.append(inverse)
    weights = row_weights(unreleased)
    found = {}
    for j, column in enumerate(columns):  # summed per distinct value, then by its text
        held = codes[j][unreleased[:, j]]
        rows = np.bincount(held, minlength=len(distincts[j]))
        sums = np.bincount(held, weights=weights[unreleased[:, j]].astype(np.float64),
                           minlength=len(distincts[j]))  # integers below 2⁵³: exact
        present = rows > 0
        found[column] = pd.Series(np.rint(sums[present]).astype(np.int64)).groupby(
            distincts[j][present]).sum()
    return found


def weighted_text_counts(frame: Any, missing_values: tuple[str, ...], show_progress: bool,
                         released: dict[str, set[str]]) -> dict[str, pd.Series]:
    """The second text round's counts of the Dask ``frame`` (:func:`partition_weighted`, summed
    over its partitions): the data read again, once the first round's ``released`` levels are
    drawn: those columns only (a Parquet source's other columns are not read again)."""
    (found,) = compute(partition_reduction(frame[list(released)], partition_weighted, released,
                                           missing_values, combine=merge_counts),
                       show_progress=show_progress)
    return found


def merge_counts(blocks: list[Any]) -> Any:
    """The partitions' counts summed: per key of a dict (a searched column's cells, the forms),
    per text of a Series, elementwise for arrays and row counts."""
    first = blocks[0]
    if isinstance(first, dict):
        return {key: merge_counts([block[key] for block in blocks]) for key in first}
    if isinstance(first, pd.Series):
        return pd.concat(blocks).groupby(level=0).sum()
    return np.sum(blocks, axis=0)


def release_text(column: str, text: TextDraft, stored: str | None, order: list[str] | None,
                 dtype_source: str) -> Released:
    """A text column's categorical spec from the levels ``text`` released (noise drawn there, for
    all text columns at once): in noisy order, or an ordered dictionary's ``order`` among them;
    ``stored``: its stored text type, kept as the output ``dtype``."""
    released = text.categories[column]
    if order:  # an ordered dictionary: its order among the levels released
        released = sorted(released, key=lambda level: order.index(level)
                          if level in order else len(order))
    # a covered column's other values (fewer than a level's threshold) count in its largest
    # level: no 'other' bin for noise to fill
    covered = column in text.covered
    other = text.categories[column][0] if covered else free_label(OTHER, released)
    missing = free_label(MISSING, released + [other])
    spec = {"name": column, "type": "categorical", "categories": released,
            "extra": [*([] if other in released else [other]), missing],
            "on_missing": missing, "on_unknown": other,
            **({"dtype": stored} if stored else {}), "dtype_source": dtype_source}
    mechanism = {**text.mechanisms[column],
                 "rest": f"values below the threshold go to {other!r}"}
    shared = mechanism.get("shared_by")  # one mechanism over several text columns
    note = (f"{column}: {len(released)} categories released under DP "
            f"(ε {mechanism['epsilon']:.3g}"
            + (f", one mechanism over {shared} text columns" if shared else "")
            + "), in noisy order; "
            + (f"a constant: any other value counts as {other!r}"
               if column in text.constants else
               f"no 'other' bin (its levels hold about all rows): any other value counts as "
               f"{other!r}" if covered else f"the rest in {other!r}")
            + ("" if released else "; if it is numeric, give it a public grid (dp_grids=) for "
               "DP quantile bins"))
    return spec, mechanism, note


def release_searched(column: str, counts: dict[str, np.ndarray], values: pd.Series,
                     cells: Cells, noise: Noise, *, rows: float, rows_scale: float,
                     epsilon: float, search_epsilon: float, delta: float, bins: int,
                     coarse: bool, found: tuple[list[float], dict[str, Any]] | None = None,
                     points: bool = True, missing: int | None = None,
                     rho: float | None = None) -> Released:
    """A numeric column's point masses (``epsilon`` less ``search_epsilon``, and ``delta``: its
    exact ``values``' counts thresholded; ``found``: those found before its type was decided,
    with their record, of which an integer column keeps its integers), then the rest's domain
    search at ``search_epsilon`` over its ``cells``' ``counts`` (``coarse``: the octaves only,
    a small table by n̂; no ``points``: a table too small for both, the search takes it all);
    ``rows``: the noisy row count n̂, of Laplace scale ``rows_scale``; ``missing``: its exact
    count of missing values, counted in each search step's histogram, None: not counted;
    ``rho``: its search's share of the numeric searches' one zCDP budget, Gaussian steps,
    :func:`~.draft_numeric.joint_searches`; None: Laplace steps at ``search_epsilon``)."""
    if not points:
        points, found = [], {"step": "point masses", "epsilon": 0.0, "points": 0,
                             "rule": "not searched: the noisy rows n̂ hold the full search only "
                                     "at the column's whole share"}
    elif found is None:
        points, found = find_points(values, rows, epsilon=epsilon, delta=delta,
                                    bound=noise.bound, integer=cells.integer,
                                    sampler=noise.sampler, rng=noise.rng)
    else:  # post-processing of the released points
        points = [p for p in found[0] if not cells.integer or float(p).is_integer()]
        found = {**found[1], "points": len(points)}
    spec, mechanism, note = search_numeric(
        column, without_points(counts, values, cells, points), cells, epsilon=search_epsilon,
        bins=bins, sampler=noise.sampler, rng=noise.rng, bound=noise.bound, coarse=coarse,
        points=PointMasses(points, found, rows, rows_scale), missing=missing, rho=rho)
    dropped = set(mechanism["steps"][0].get("points_check", {}).get("dropped", []))
    if dropped:  # more rows than n̂ holds: a public candidate passed by noise alone
        points = [p for p in points if point_key(p) not in dropped]
        found = {**found, "points": len(points)}
    spec = with_points(spec, points, cells.integer)
    mechanism |= {"epsilon": epsilon, "delta": delta, "steps": [found, *mechanism["steps"]]}
    return spec, mechanism, note + (f"; {len(points)} point mass(es) released as exact values "
                                    "under DP" if points else "") + (
        f"; the points lie on the lattice k x {spec['lattice']:g}: the values between them are "
        "drawn on it too, unless decimal places are found" if spec and "lattice" in spec else "")


def release_years(column: str, counts: np.ndarray, noise: Noise, *,
                  epsilon: float, missing: int | None = None) -> Released:
    """A timestamp's years (:func:`~.draft_numeric.search_years`) at ``epsilon``, its
    ``missing`` values counted in one more cell where given."""
    return search_years(column, counts, epsilon=epsilon, sampler=noise.sampler, rng=noise.rng,
                        bound=noise.bound, missing=missing)


def release_quantiles(column: str, counts: np.ndarray, grid: np.ndarray,
                      public: dict[str, float], noise: Noise, *, epsilon: float,
                      bins: int) -> Released:
    """Bins of a numeric column given a ``public`` grid (its candidates ``grid``) at its noisy
    quantiles i/``bins``: a report-noisy-min per quantile over the counts below and above each
    candidate (``counts``), ``epsilon`` split equally over them."""
    levels = list(range(1, bins))
    below, above = counts
    scale = noisy_min_scale(epsilon / len(levels), bins * noise.bound)
    chosen = [grid[noisy_min_index(quantile_scores(below, above, i, bins), scale,
                                   sampler=noise.sampler, rng=noise.rng)] for i in levels]
    edges = sorted({round_value(float(v)) for v in chosen})
    bounds = {"min": round_value(float(grid[0]))} if grid[0] < edges[0] else {}
    spec = with_missing_bin({"name": column, "type": "numeric",
                             "edges": ["-inf", *edges, "inf"], **bounds,
                             "max": round_value(float(grid[-1]))})
    mechanism = {
        "mechanism": "noisy-max quantiles", "epsilon": epsilon,
        "quantiles": [f"{i}/{bins}" for i in levels],
        "epsilon_each": epsilon / len(levels), "sensitivity": bins * noise.bound,
        "scale": scale, "grid": public, "candidates": len(grid),
        "opendp": "make_noisy_max(negate=True) over LInfDistance(u64, monotonic=False) of "
                  "make_quantile_score_candidates' score with alpha = i/bins, computed from "
                  "counts below/above each candidate"}
    return spec, mechanism, (f"{column}: {len(edges) + 1} bins at DP quantiles (edges {edges}), "
                             "open at both ends, closed by the grid's ends")
