"""Numeric domains under DP, adapted to where the data is (issue 56): no fixed public grid.

A numeric column's domain is searched coarse to fine over public cells that depend only on the
storage type, never on the data:

1. **Octaves.** Signed powers of two cover the type's plausible range (±2⁶³ for int64 and
   floats, ±2³¹ for int32; floats down to ±2⁻¹⁰). Noisy counts per octave (Laplace, half the
   column's ε) are thresholded so that an empty octave passes with probability below
   :data:`OCTAVE_MISS` in all. Two zero cells split at 0, [−2⁻¹⁰, 0) and [0, 2⁻¹⁰) for floats,
   [−16, 0) and [0, 16) for integers, keep small codes together without inventing negative
   ones (one cell [−16, 16) drafted months as −16..15). The passing octaves, grown outwards
   through neighbours whose noisy count passes a lower threshold (an empty one joins with
   probability :data:`GROW_MISS`), bound the range [L, H); where no octave passes alone, the
   shortest runs of adjacent octaves whose noisy sum passes bound it (:func:`run_spans`: a
   small table's column spread over a few octaves). No edge can land in an empty far octave,
   and values beyond the range (at most a lower threshold's rows per octave) are clamped into
   the outer bins. A zero cell whose noisy count passes the lower threshold joins
   the range across empty octaves between (zeros beside values far from them: calm hours among
   wind directions). A column's released point masses are checked first against the noisy
   rows n̂ (:func:`_consistent_points`): a public point that n̂ leaves no room for beside the
   rest's octaves passed by noise alone and is dropped.
2. **Cells inside [L, H)**, and one octave more on each side (a tail octave that missed the
   grow threshold). Integer columns whose range lies within ±:data:`UNIT_SPAN` get one cell per
   integer, others :data:`OCTAVE_CELLS` cells per octave. Noisy cell counts (the other half of
   ε) are thresholded the same way (:data:`CELL_MISS`); the passing cells (none passing: the
   fullest, or the shortest runs of cells above their noise spanning a band of at most
   1/:data:`BAND_SHARE` of the octaves' range that holds their mass up to one noise deviation,
   :func:`_band`: years 2000-2015 of a 5,000-row table in [1024, 2048)) grow through
   neighbours above the lower threshold, as the octaves do; each end
   starts at the outermost grown cell, moved out over the cells beyond it as far as a run of
   them sums above what noise alone reaches (:func:`tail_threshold`, :data:`TAIL_MISS`): a
   tail spread thinly over many cells is kept. Where the grown cells hold all but
   :data:`TRIM_SHARE` of the octaves' noisy mass (constants, small integer grids, a compact
   column) those are the ends, within a cell of the data but with probability TAIL_MISS;
   otherwise an end is trimmed there only if the cells it cuts off hold at most half that
   share, noise's bound (:data:`TRIM_MISS`) included, and the octaves wholly outside the
   trimmed range hold no more than the trim share (:func:`_leaves_out`: a few octaves' noises
   against many cells'), else it stays at the octaves' range: at
   a small ε a few empty cells cost a release less than a clamped tail (hours 0..23, 4 noise
   scales a value at the one command's ε = 1 on the weather table, stay 0..31).

Then, by post-processing the noisy cell counts only: an integer range of at most
:data:`MAX_GRID` values becomes one bin per integer (a constant, one open bin with ``min`` =
``max``), from unit cells or, in a small table's coarse search (all of ε on the octaves), from
the octaves; any other range bins at the noisy counts' quantiles with the cells, split by their
noisy rows (:func:`split_cells`; coarse: the octaves split), as the ``fine`` grid. A range of
one search cell (decimal years 2000-2015 in [1984, 2048)) is two bins split at its middle, so
that its fine cells place the rows. The outer bins are always open (values beyond the range
are clamped into them) and closed by ``min``/``max`` at the range's ends, so nothing is drawn
outside the learned range.

A timestamp's years are one step: noisy counts per year over the years the timestamp type holds,
thresholded; one bin per year between the first and last passing one.

Replace-one neighbours: a row moves from one cell to another (or into or out of the missing
values): L1 sensitivity 2 for every histogram, ε = 2/b; adding or removing a row moves one
count by 1, within it. Where the draft decides the column's nullability under DP, each step's
histogram has one more cell counting its missing values (a row in at most one cell still: the
same L1 2, no more ε); its noisy count, in the step's record, is post-processed with the type
step's (:func:`~dp_dask.data.draft_types.decide_nullable`).
Under a privacy unit of at most K rows (the draft bounded each unit to K rows) every
sensitivity is K times a row's: each function takes that contribution ``bound``.
The exact counts are reduced on Dask to the driver (:func:`numeric_counts`), and only noisy
ones are used.

Where the draft searches two or more columns, their steps may instead be measured together
(:func:`joint_searches`): the columns' whole shares summed into one zCDP budget, each column's
point masses (:mod:`.draft_points`) a Gaussian threshold at their share of its ρ, each step a
Gaussian histogram (L2 √2·K) at half the rest. Every threshold above
is then the Gaussian's (:class:`StepNoise`: the same misses, its lighter tail), and the rules
read the noise through it alone.

Size: both steps of the search read the same thresholds and the same run and tail rules (on the
octaves, then on the cells); the range ends' rules (:func:`_range_ends`, :func:`_band`,
:func:`_tail_end`, :func:`run_spans`) are the part to move to a module of their own when the
next rule joins them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import norm

from dp_dask.data.attribute import Attribute
from dp_dask.data.draft_points import POINT_SHARE, point_key, points_octaves, rest_is_searched
from dp_dask.data.draft_specs import round_value as _round
from dp_dask.data.dtypes import _YEARS
from dp_dask.data.encode import _timestamps, _years
from dp_dask.privacy.noise import gaussian_noise, laplace_noise
from dp_dask.privacy.selection import zcdp_rho

SENSITIVITY = 2  # L1 of a histogram when one row is replaced by another
OCTAVE_MISS = 1e-6  # chance that any empty octave passes: a far edge would be absurd
GROW_MISS = 5e-3  # chance that an empty octave next to the range found joins it
CELL_MISS = 1e-3  # chance that any empty cell inside the found range passes
UNIT_SPAN = 2**12  # integers within ±4096 are searched value by value
# ... where their octaves' range is narrow: at most this many values, or within two octaves
# (years 1974-2018 in [1024, 2048)). A wider one spread over more octaves is searched by octave
# cells, as floats are: wind directions by tens over [0, 512) left 95 % of 512 unit cells empty,
# each as noisy as a cell of 16, and a lattice's gaps stopped its ends growing (clamped at 310
# in a third of the drafts, 10 % of the rows above)
UNIT_RANGE = 256
UNIT_OCTAVES = 2
OCTAVE_CELLS = 16  # cells per octave otherwise
# The fine grid a range found gets: each search cell split in 2, 4... 16 (public halvings, no
# further count), a part holding ROWS_PER_FINE_CELL of the cell's noisy rows at least, the grid
# this many cells at most
FINE_TARGET = 256
ROWS_PER_FINE_CELL = 200
MAX_GRID = 100  # integer ranges of at most this many values: one bin per value
TAIL_MISS = 1e-3  # chance that noise alone moves an end out over empty cells beyond the data
TRIM_SHARE = 0.02  # the ends cut off at most this share of the octaves' noisy mass
TRIM_MISS = 0.2  # chance that noise hides more than half of it in the cells an end cuts off
# Where no cell passes, a band of runs (:func:`_band`) is the range only if the octaves' range
# is this many times as wide: a few empty cells beside weeks 30..52 in [32, 64) cost less than
# a band that noise cut short clamps, a thousand empty years in [1024, 2048) far more
BAND_SHARE = 4
FLOAT_LOW = -10  # floats: octaves from 2⁻¹⁰ up; below it, the zero cell [−2⁻¹⁰, 2⁻¹⁰)
INTEGER_LOW = 4  # integers: the zero cells [−16, 0), [0, 16) keep small codes (months) whole
# chance that noise alone makes a column's real point masses, beside its rest, look like more
# rows than the noisy row count n̂ holds (and so may drop a public one). At 1e-3 the slack (the
# points' noise 7.3 scales, the rest's octaves' and n̂'s) let the weather table's false point
# at 4,000,000 (11,439 rows beside 18,397, of n̂ 20,934 with 2,231 missing) through; at 1e-2
# its excess of 8,902 rows is above the slack of 7,076
POINTS_MISS = 1e-2


@dataclass(frozen=True)
class Cells:
    """A numeric column's public search cells, from its storage type alone."""

    integer: bool
    octaves: np.ndarray  # edges of the signed octaves, the zero cell among them
    fine: np.ndarray  # edges of OCTAVE_CELLS cells per octave
    units: np.ndarray | None  # integers: edges of the unit cells within ±UNIT_SPAN


@dataclass(frozen=True)
class PointMasses:
    """A column's released point masses, as the search of the rest of the column reads them:
    their ``values``, :func:`~dp_dask.data.draft_points.find_points`' record ``found`` (their
    noisy counts and Laplace scale, which were public candidates) and the noisy rows n̂
    (``rows``) with its Laplace scale ``rows_scale``."""

    values: list[float]
    found: dict[str, Any]
    rows: float
    rows_scale: float


@dataclass(frozen=True)
class StepNoise:
    """One search step's noise on its histogram: Laplace of scale b, at the step's own ε
    (ε = L1/b, L1 = 2K), or, where the draft measures the numeric searches together
    (``gaussian``: :func:`~dp_dask.data.draft_dp.draft_under_dp`'s joint searches), Gaussian of
    deviation σ at the step's share ρ of their one zCDP budget (ρ = L2²/(2σ²), L2 = √2·K: a
    replaced unit's K rows leave one cell and enter another). The thresholds are the same rules
    for either: what an empty cell's noise exceeds with probability ``miss`` over ``cells``
    cells, and what a sum of ``cells`` noises exceeds with probability ``miss``."""

    scale: float
    gaussian: bool = False

    @classmethod
    def for_step(cls, epsilon: float, rho: float | None, bound: int) -> StepNoise:
        """Laplace at ``epsilon`` where ``rho`` is None, else Gaussian at ``rho``."""
        if rho is None:
            return cls(SENSITIVITY * bound / epsilon)
        return cls(math.sqrt(SENSITIVITY) * bound / math.sqrt(2.0 * rho), gaussian=True)

    @property
    def sensitivity_factor(self) -> float:
        """The histogram's sensitivity for one row: L1 2 (Laplace) or L2 √2 (Gaussian)."""
        return math.sqrt(SENSITIVITY) if self.gaussian else SENSITIVITY

    @property
    def deviation(self) -> float:
        """One noise's standard deviation: σ, or √2·b."""
        return self.scale if self.gaussian else math.sqrt(2.0) * self.scale

    def threshold(self, cells: int, miss: float) -> float:
        """The noisy count an empty cell exceeds with probability ``miss`` over ``cells`` cells
        (:func:`threshold` for Laplace; the Gaussian's upper tail at miss/cells)."""
        if self.gaussian:
            return self.scale * float(norm.isf(miss / max(cells, 1)))
        return threshold(self.scale, cells, miss)

    def sum_threshold(self, cells: int, miss: float) -> float:
        """What a sum of ``cells`` independent noises exceeds with probability at most ``miss``
        (:func:`tail_threshold` for Laplace; exact for Gaussian: σ√cells times its tail)."""
        if self.gaussian:
            return self.scale * math.sqrt(cells) * float(norm.isf(miss))
        return tail_threshold(self.scale, cells, miss)


def search_cells(kind: str, dtype: str | None) -> Cells:
    """The cells of a storage ``kind`` (integer/float/number) and output ``dtype``."""
    integer = kind == "integer"
    top = 30 if dtype == "int32" else 62
    low = INTEGER_LOW if integer else FLOAT_LOW
    powers = 2.0 ** np.arange(low, top + 2)
    octaves = np.concatenate([-powers[::-1], [0.0], powers])
    fine = _split(octaves, np.full(len(octaves) - 1, OCTAVE_CELLS), integer)
    units = np.arange(-UNIT_SPAN, UNIT_SPAN + 1, dtype=np.float64) if integer else None
    return Cells(integer, octaves, fine, units)


def year_cells() -> np.ndarray:
    """Edges of one cell per year a timestamp[ns] holds (the widest span of any unit we read)."""
    return np.arange(_YEARS[0], _YEARS[1] + 2, dtype=np.float64)


def _histogram(numbers: np.ndarray, edges: np.ndarray, clamp: bool) -> np.ndarray:
    """Counts of sorted ``numbers`` in each [edges[j], edges[j+1]); beyond the ends, in the
    outer cells (``clamp``) or nowhere."""
    below = np.searchsorted(numbers, edges, side="left")
    counts = np.diff(below)
    if clamp:
        counts[0] += below[0]
        counts[-1] += len(numbers) - below[-1]
    return counts.astype(np.int64)


def numeric_counts(numbers: np.ndarray, cells: Cells) -> dict[str, np.ndarray]:
    """Exact counts of one partition's non-missing ``numbers`` over the search cells: octaves
    (clamped into the plausible range), octave cells and unit cells (nowhere beyond them)."""
    numbers = np.sort(numbers[~np.isnan(numbers)])
    counts = {"octaves": _histogram(numbers, cells.octaves, True),
              "fine": _histogram(numbers, cells.fine, True)}
    if cells.units is not None:
        counts["units"] = _histogram(numbers, cells.units, False)
    return counts


def year_counts(values: pd.Series) -> np.ndarray:
    """Exact counts per year of one partition's timestamps (UTC for aware ones, as encoded)."""
    stamps = _timestamps(values, Attribute("_", "datetime", ("_",), unit="month",
                                           format="ISO8601"))
    years = _years(stamps)
    return _histogram(np.sort(years[~np.isnan(years)]), year_cells(), False)


def threshold(scale: float, cells: int, miss: float) -> float:
    """The noisy count an empty cell exceeds with probability ``miss`` over ``cells`` cells:
    P(Lap(b) ≥ t) = ½·e^(−t/b) per cell."""
    return scale * math.log(max(cells, 1) / (2.0 * miss))


def smallest_table(epsilon: float, cells: Cells | str, bound: int = 1,
                   coarse: bool = False, rho: float | None = None) -> float:
    """Rows a table needs for its first step to find anything: twice that step's threshold
    (octaves at half of ``epsilon``, or of ``rho`` where the searches are measured together,
    all of it in a ``coarse`` search; a timestamp's years, ``cells`` a str, at all of
    ``epsilon``), each unit contributing at most ``bound`` rows. The draft searches a column
    coarsely where its noisy row count puts the table below the full search's size, and not at
    all below the coarse one's."""
    if isinstance(cells, Cells):
        noise = StepNoise.for_step(*_step_budget(epsilon, rho, coarse), bound)
        return 2.0 * noise.threshold(len(cells.octaves) - 1, OCTAVE_MISS)
    return 2.0 * threshold(SENSITIVITY * bound / epsilon, len(year_cells()) - 1, OCTAVE_MISS)


def _step_budget(epsilon: float, rho: float | None, coarse: bool) -> tuple[float, float | None]:
    """One search step's ε and ρ (None: Laplace steps) of a column's search budget: half each
    of its two steps, all of it in a ``coarse`` search's one."""
    parts = 1.0 if coarse else 2.0
    return epsilon / parts, None if rho is None else rho / parts


def joint_searches(shares: dict[str, float], cells: dict[str, Cells], delta: float,
                   bound: int = 1, kept: dict[str, float] | None = None
                   ) -> dict[str, float] | None:
    """Each searched column's ρ where the draft measures the numeric searches together: their
    ε (the ``shares``, each column's whole share, its point masses' included, summed) as one
    zCDP budget at ``delta`` (:func:`zcdp_rho`: every step a Gaussian histogram, composed
    adaptively in ρ and converted to (ε, δ) once), split in proportion to the shares; of a
    column's ρ its search steps take the fraction ``kept`` of it (1 - the point masses' share
    where its points are measured, :mod:`.draft_points`; all of it by default), its points the
    rest. Taken only where it lowers every column's octave threshold (:func:`smallest_table`, at
    its steps' part) below its Laplace steps' at its own ε: with two or more columns the
    Gaussians' L2 sensitivity grows as the square root of the steps where the Laplace steps' L1
    grows as their number, and the threshold's Gaussian tail is lighter (weather's 13 numeric
    columns at total ε 1: octaves found at about 1,100 rows, not 3,800). None (Laplace steps,
    each column at its own ε) otherwise: one column, or no δ for it. Public facts only (the
    shares, the cells, δ and the bound K)."""
    total = sum(shares.values())
    if len(shares) < 2 or total <= 0 or delta <= 0:
        return None
    kept = {c: 1.0 for c in shares} | dict(kept or {})
    rho = zcdp_rho(total, delta)
    rhos = {column: rho * share / total for column, share in shares.items()}
    lower = all(smallest_table(shares[c] * kept[c], cells[c], bound, rho=rhos[c] * kept[c])
                < smallest_table(shares[c] * kept[c], cells[c], bound) for c in shares)
    return rhos if lower else None


def searches_record(rhos: dict[str, float], shares: dict[str, float], delta: float,
                     numeric: list[str], together: float = 1.0) -> dict[str, Any]:
    """How the numeric searches were measured: together (Gaussian steps, their ε as one zCDP
    budget converted once at ``delta``: :func:`joint_searches`; ``together`` > 1: that budget
    and the text columns' rounds' in one, the ``rhos`` times that factor) or each at its own
    ε (Laplace)."""
    rule = ("measured together where that lowers every searched column's octave threshold "
            "below its Laplace steps' at its own ε (two or more columns, δ for the conversion); "
            "else each column's Laplace steps at its own ε")
    if not rhos:
        return {"mechanism": "laplace histograms, each column at its own ε",
                "columns": numeric, "rule": rule}
    epsilon = sum(shares[c] for c in rhos)
    return {"mechanism": "gaussian histograms, measured together",
            "epsilon": epsilon, "delta": delta, "rho": sum(rhos.values()), "columns": rhos,
            "composition": "every column's point masses a Gaussian threshold (L2 √2·K) at "
                           f"{POINT_SHARE:g} of its ρ where they are measured, every step of "
                           "its search a Gaussian histogram (L2 √2·K) at its share of the "
                           "rest (half each step; all of it in a coarse search), composed "
                           "adaptively in zCDP, converted to (ε, δ) once (OpenDP's optimal "
                           "conversion): ε is the columns' whole shares summed"
                           + ("" if together == 1 else
                              "; with the text columns' Gaussian rounds in one budget, each "
                              "column's ρ the factor drafted_under_dp.gaussian.factor times "
                              "its own"),
            "rule": rule}


def _passing(noisy: np.ndarray, noise: StepNoise, miss: float) -> np.ndarray:
    return np.flatnonzero(noisy >= noise.threshold(len(noisy), miss))


def tail_threshold(scale: float, cells: int, miss: float) -> float:
    """A sum of ``cells`` independent Laplace(``scale``) noises exceeds this with probability at
    most ``miss`` (Chernoff: E e^(λS) = (1 − b²λ²)^(−k) for |λ| < 1/b, minimised over λ)."""
    u = np.linspace(0.01, 0.99, 99)  # λ·b
    return float(scale * np.min((math.log(1.0 / miss) - cells * np.log1p(-u * u)) / u))


def _tail_end(outward: np.ndarray, noise: StepNoise, into_runs: bool = False
              ) -> tuple[int, float]:
    """How many of the ``outward`` noisy cells (beyond the outermost passing one, nearest first)
    the range keeps: up to the farthest cell j at which a run of 1, 2, 4... cells starting there
    sums above what noise alone reaches (:meth:`StepNoise.sum_threshold`, :data:`TAIL_MISS`
    over every run tested), so there are rows at or beyond j; short runs find a tail's last
    dense cells, long ones a tail spread thinly. ``into_runs`` (the octaves, whose range the
    cells refine): on from j into its run through the adjacent cells whose noisy counts are at
    least one noise deviation each (an empty one is with probability 0.16): the rows are
    somewhere in the run, and a tail spread over four octaves (Adult's capital gains beside
    their zeros, 548, 809 and 479 rows at σ 149) was cut after its first."""
    positions = len(outward)
    lengths = [1 << i for i in range(max(positions, 1).bit_length())]
    sums = np.concatenate([[0.0], np.cumsum(outward)])
    miss = TAIL_MISS / max(positions * len(lengths), 1)
    farthest = 0
    for length in lengths:
        limit = noise.sum_threshold(length, miss)
        starts = np.arange(positions - length + 1)
        runs = sums[starts + length] - sums[starts]
        significant = starts[runs >= limit]
        if len(significant):
            last = int(significant[-1])
            run_end = last + length - 1
            while into_runs and last < run_end and outward[last + 1] >= noise.deviation:
                last += 1
            farthest = max(farthest, last + 1)
    return farthest, noise.sum_threshold(1, miss)


def run_spans(noisy: np.ndarray, noise: StepNoise, miss: float) -> Iterator[np.ndarray]:
    """For each run length 2, 4, 8... at which some run of adjacent ``noisy`` counts sums above
    what the sum of their noise reaches (:meth:`StepNoise.sum_threshold`) with probability
    ``miss`` over every run tested, shortest first: the cells from the first to the last such
    run, by post-processing. A small table's column spread over a few octaves (5,000 carats over
    0.25-2: a third of them per octave, each below the octaves' threshold) is found by its runs
    of octaves, not left out; years 2000-2015 of 5,000 rows (312 a year, none above the unit
    cells' threshold) by their runs of unit cells. Shorter runs span fewer empty cells beside
    the rows, longer ones more of the rows (where noise let only one short run through)."""
    sums = np.concatenate([[0.0], np.cumsum(noisy)])
    lengths = [1 << i for i in range(1, len(noisy).bit_length())]
    miss = miss / (len(noisy) * len(lengths))
    for length in lengths:
        starts = np.arange(len(noisy) - length + 1)
        runs = starts[sums[starts + length] - sums[starts] >= noise.sum_threshold(length, miss)]
        if len(runs):
            yield np.arange(int(runs[0]), int(runs[-1]) + length)


def _grown(noisy: np.ndarray, first: int, last: int, grow: float) -> tuple[int, int]:
    """The run of cells first..last grown outwards through neighbours whose ``noisy`` count is
    at least ``grow``: its first and last cell."""
    while first > 0 and noisy[first - 1] >= grow:
        first -= 1
    while last < len(noisy) - 1 and noisy[last + 1] >= grow:
        last += 1
    return first, last


def _leaves_out(low: float, high: float, octaves: tuple[np.ndarray, np.ndarray],
                noise: StepNoise) -> bool:
    """Whether the octaves wholly outside [``low``, ``high``) hold more than
    :data:`TRIM_SHARE` of the octaves' noisy mass and one standard deviation of their noises
    (``octaves``: the passed octaves' edges and noisy counts). Post-processing. A few octave
    counts carry far less noise than the hundreds of cells a range spans: a long tail beyond
    a span (a fifth of a lognormal column's rows over [770, 4096)) shows in its octaves where
    the cells' noisy sum (σ·√755 there) hides it."""
    edges, noisy = octaves
    outside = (edges[1:] <= low) | (edges[:-1] >= high)
    beyond = float(noisy[outside].sum())
    return beyond > TRIM_SHARE * float(noisy.sum()) + noise.deviation * math.sqrt(outside.sum())


def _band(cell: np.ndarray, noise: StepNoise, edges: np.ndarray, inner: tuple[int, int],
          octaves: tuple[np.ndarray, np.ndarray], grow: float) -> tuple[int, int] | None:
    """The first and last cell of the shortest runs' span (:func:`run_spans`), grown, that is
    at most 1/:data:`BAND_SHARE` of the octaves' range ``inner`` (its first and last cell) and
    leaves out of it at most :data:`TRIM_SHARE` of the octaves' noisy mass and one standard
    deviation of the noise in that difference (the span's cells within ``inner`` and the
    ``octaves``' noises), nor more than that in the octaves wholly outside it
    (:func:`_leaves_out`); None where none does. Post-processing. A longer span is tried where
    a shorter one leaves out more (noise let a part of the band through at the shorter
    length)."""
    width = inner[1] - inner[0] + 1
    total = float(octaves[1].sum())
    for runs in run_spans(cell, noise, CELL_MISS):
        first, last = _grown(cell, int(runs[0]), int(runs[-1]), grow)
        if BAND_SHARE * (last - first + 1) > width:
            return None
        within = cell[max(first, inner[0]):min(last, inner[1]) + 1]
        deviation = noise.deviation * math.sqrt(len(within) + len(octaves[1]))
        if (total - float(within.sum()) <= TRIM_SHARE * total + deviation
                and not _leaves_out(edges[first], edges[last + 1], octaves, noise)):
            return first, last
    return None


def _uncut_octaves(cell: np.ndarray, noise: StepNoise, edges: np.ndarray, first: int,
                   last: int, octaves: tuple[np.ndarray, np.ndarray]) -> tuple[int, int]:
    """The first and last cell of the range, each end that cuts a passed octave moved out to
    that octave's edge where the octave's noisy count exceeds the noisy sum of its cells the
    range keeps by more than noise reaches in that difference (:meth:`StepNoise.sum_threshold`
    over the octave's noise and those cells', :data:`GROW_MISS` per end, the chance an empty
    part of an octave joins the range as an empty octave beside it would): the rows beyond
    the end are there, though no run of cells beyond passes alone. Post-processing. Wind speeds
    of 0-19 and a lattice of 200-400 rows a value on 19.6-40 (7.7 % of 20,920 rows, 1,600 in
    the octave [16, 32) beyond 19) were drafted to 19 in half the seeds: the cells kept held
    all but the trim share of the octaves' mass by the noise of their sum."""
    octave_edges, counts = octaves

    def octave_beyond(end: float, kept_from_start: bool) -> tuple[int, int] | None:
        """The cells [start, stop) of the passed octave ``end`` cuts, where its noisy count
        beats the noisy sum of its cells kept (from its start up to ``last``, or from
        ``first`` to its stop) by more than noise reaches; else None."""
        j = int(np.searchsorted(octave_edges, end, side="right")) - 1
        if not (0 <= j < len(counts) and octave_edges[j] < end < octave_edges[j + 1]):
            return None
        start = int(np.searchsorted(edges, octave_edges[j]))
        stop = int(np.searchsorted(edges, octave_edges[j + 1]))
        moved_to, edge = ((stop, octave_edges[j + 1]) if kept_from_start
                          else (start, octave_edges[j]))
        if moved_to >= len(edges) or edges[moved_to] != edge:  # the end moves to a cell's edge
            return None
        kept = cell[start:last + 1] if kept_from_start else cell[first:stop]
        beyond = counts[j] - kept.sum() > noise.sum_threshold(len(kept) + 1, GROW_MISS)
        return (start, stop) if beyond else None

    above = octave_beyond(edges[last + 1], kept_from_start=True)
    below = octave_beyond(edges[first], kept_from_start=False)
    return (first if below is None else below[0]), (last if above is None else above[1] - 1)


def _range_ends(cell: np.ndarray, noise: StepNoise, edges: np.ndarray, low: float, high: float,
                octaves: tuple[np.ndarray, np.ndarray]) -> tuple[int, int, dict[str, Any]]:
    """The first and last cell of the learned range among the noisy ``cell`` counts over
    ``edges`` (the octaves' range [``low``, ``high``) and one octave more on each side), by
    post-processing. The cells passing the cell threshold (:data:`CELL_MISS`), or where none
    does the fullest cell of the octaves' range, are grown outwards through neighbours passing
    the lower threshold (an empty cell joins with probability :data:`GROW_MISS`, as an empty
    octave does: months of 1,740 rows, 8 noise scales, beside a threshold of 10); each end is
    then moved out over the cells beyond as far as their noisy counts hold more than noise
    (:func:`_tail_end`): there are rows at or beyond it. Where the grown cells hold all but
    :data:`TRIM_SHARE` of the octaves' noisy mass (``octaves``: the passed octaves' edges and
    noisy counts) and the octaves wholly outside them no more (:func:`_leaves_out`: constants,
    integer grids, a compact column), those are the ends; otherwise each end is trimmed there
    only if the cells it cuts off (up to the octaves' range), plus what noise may hide in them
    (:meth:`StepNoise.sum_threshold` at :data:`TRIM_MISS`), hold at most half that share, and
    stays at the octaves' range otherwise: a few over-extended cells cost a release less than a
    clamped tail. No cell passing and the fullest one's run not holding all but that share: the
    band of the shortest runs of cells above their noise (:func:`_band`), else the octaves'
    range, its ends moved out likewise."""
    inner = (int(np.searchsorted(edges, low)), int(np.searchsorted(edges, high)) - 1)
    total = float(octaves[1].sum())
    passing = _passing(cell, noise, CELL_MISS)
    fullest = inner[0] + int(np.argmax(cell[inner[0]:inner[1] + 1]))
    grow = noise.threshold(1, GROW_MISS)
    # Where no cell passes: the fullest cell, or the shortest runs spanning a narrow band of
    # the octaves' range (years 2000-2015 of 5,000 rows in [1024, 2048): 312 a year, 100 a
    # noise scale) that holds the octaves' mass up to noise; else the octaves' range.
    first, last = _grown(cell, *((int(passing[0]), int(passing[-1])) if len(passing)
                                 else (fullest, fullest)), grow)
    found = "outermost passing cells" if len(passing) else "no cell passed: the fullest"
    compact = (cell[first:last + 1].sum() >= (1 - TRIM_SHARE) * total
               and not _leaves_out(edges[first], edges[last + 1], octaves, noise))
    if not len(passing) and not compact:
        band = _band(cell, noise, edges, inner, octaves, grow)
        if band is not None:
            first, last, found = *band, ("no cell passed: the first to the last of the shortest "
                                         "runs of cells above their noise spanning a band of "
                                         f"at most 1/{BAND_SHARE} of the octaves' range whose "
                                         "noisy sum is the octaves' within one noise deviation")
            compact = True
    if not len(passing) and not compact:  # the octaves' range, moved out as a run's would be
        below, _ = _tail_end(cell[:inner[0]][::-1], noise)
        above, limit = _tail_end(cell[inner[1] + 1:], noise)
        return inner[0] - below, inner[1] + above, {
            "rule": "no cell passed: the octaves' range, moved out over the runs of cells "
                    f"beyond whose noisy sum is above noise's (miss {TAIL_MISS:g} per end)",
            "tail_cells": [below, above], "tail_threshold": limit}
    below, _ = _tail_end(cell[:first][::-1], noise)
    above, limit = _tail_end(cell[last + 1:], noise)
    first, last = _uncut_octaves(cell, noise, edges, first - below, last + above, octaves)
    if not compact:  # trimmed only where even noise's bound leaves the cut-off mass small,
        # and the octaves wholly outside the trimmed range agree (their few noises against the
        # cut cells' many: a tail of 2,000 rows over 160 fine cells, whose noisy sum was −1,500
        # by noise, left the capital gains beside their zeros as the point alone)
        def kept(low: int, high: int, cut: np.ndarray) -> bool:
            return (cut.sum() + noise.sum_threshold(len(cut), TRIM_MISS) > TRIM_SHARE / 2 * total
                    or _leaves_out(edges[low], edges[high + 1], octaves, noise))

        if first > inner[0] and kept(first, inner[1], cell[inner[0]:first]):
            first = inner[0]
        if last < inner[1] and kept(first, last, cell[last + 1:inner[1] + 1]):
            last = inner[1]
    return first, last, {
        "rule": found + f" grown through neighbours above the grow threshold (miss {GROW_MISS:g}), "
                "moved out over the runs of cells beyond whose noisy sum is above noise's "
                f"(miss {TAIL_MISS:g} per end); "
                + ("the grown cells hold all but the trim share: those ends" if compact else
                   "each end trimmed to them only where the cells cut off hold at most half "
                   f"the trim share of the noisy mass, noise's bound (miss {TRIM_MISS:g}) "
                   "included"),
        "tail_cells": [below, above], "tail_threshold": limit}


def _consistent_points(points: PointMasses, noisy: np.ndarray, noise: StepNoise,
                       octaves: np.ndarray, rest: tuple[int, int] | None,
                       nulls: float | None = None) -> tuple[list[float], dict[str, Any]]:
    """The released points that the noisy rows n̂ leave room for beside the rest of the
    column, by post-processing: the points' noisy counts plus the rest's noisy ``octaves``
    counts (``noisy``, of the step's ``noise``) over the octaves ``rest`` (first, last: those that
    pass alone, grown through neighbours; None where none passes) hold at most n̂ and what the
    three noises may add (one noise's tail, :meth:`StepNoise.sum_threshold` for a sum; a third of
    :data:`POINTS_MISS` each). Where they hold more, the public candidates that passed outside
    the rest's octaves are dropped, least noisy count first, until they fit: an empty candidate
    passes its threshold (11 of the points' noise scales and more) by noise alone, holding rows
    that the table does not have (a pressure's point at 4,000,000 beside 20,920 rows at
    983..1,042 hPa), while real points and the rest add up to n̂ (or less: missing values,
    rows in octaves beyond the rest's). ``nulls``: the noisy count of the column's missing
    values (the octaves' step's missing cell, of the same ``noise``; None: not counted), held
    beside them too, its noise's tail in the slack: the check is then as tight on a column of
    many missing values as on one of none."""
    mass = {p: float(points.found["noisy"][point_key(p)]) for p in points.values}
    cells = 0 if rest is None else rest[1] - rest[0] + 1
    held = 0.0 if rest is None else float(noisy[rest[0]:rest[1] + 1].sum())

    parts = 3 if nulls is None else 4  # the noises, each at its share of POINTS_MISS
    held += 0.0 if nulls is None else nulls

    def bound(step: StepNoise, noises: int) -> float:
        if noises <= 1:  # one noise: its exact tail
            return noises * step.threshold(1, POINTS_MISS / parts)
        return step.sum_threshold(noises, POINTS_MISS / parts)

    # the points' noise: Laplace, or Gaussian where measured in the searches' one budget
    drawn = StepNoise(points.found["scale"],
                      gaussian=points.found.get("mechanism") == "gaussian-threshold")
    slack = (bound(drawn, len(mass)) + bound(noise, cells)
             + bound(StepNoise(points.rows_scale), 1) + (0.0 if nulls is None
                                                        else bound(noise, 1)))
    public = {float(k) for k in points.found.get("public_points", [])}
    low, high = (math.inf, -math.inf) if rest is None else (octaves[rest[0]],
                                                             octaves[rest[1] + 1])
    kept = dict(mass)
    for point in sorted((p for p in mass if p in public and not low <= p < high), key=mass.get):
        if held + sum(kept.values()) <= points.rows + slack:
            break
        del kept[point]
    return sorted(kept), {
        "rule": "the points' noisy counts, the rest's octaves (passing alone, grown) and the "
                "noisy missing values, where counted, hold at most n̂ and the noises' bound "
                f"(miss {POINTS_MISS:g}); else the public points outside the rest's octaves are "
                "dropped, least noisy count first, until they do",
        "points": round(sum(mass.values()), 1), "rest": round(held, 1), "rest_octaves": cells,
        "rows": round(points.rows, 1), "slack": round(slack, 1),
        "dropped": [point_key(p) for p in sorted(set(mass) - set(kept))]}


def split_cells(edges: np.ndarray, noisy: np.ndarray, integer: bool) -> np.ndarray:
    """The fine grid of a range whose search cells are ``edges``: each cell split in k equal
    parts, k a power of two up to OCTAVE_CELLS (256 a octave) with :data:`ROWS_PER_FINE_CELL`
    of the cell's ``noisy`` count a part at least (an integer cell into parts of one value at
    least), all k halved while the grid holds more than :data:`FINE_TARGET` cells. Public
    cells chosen from noisy counts: post-processing. A column heaped within one or two octaves
    (pressures of 980-1040 hPa in [512, 2048)) is drawn from cells of a few units, not of
    32-64 uniformly; a sparse cell (a tail, an empty end) stays whole, so the release's noise
    is not spread over more empty cells."""
    rows = np.clip(np.asarray(noisy, dtype=float), 0.0, None) / ROWS_PER_FINE_CELL
    k = np.ones(len(rows), dtype=np.int64)
    where = rows >= 2
    k[where] = np.minimum(OCTAVE_CELLS, 2 ** np.floor(np.log2(rows[where])).astype(np.int64))
    while k.sum() > FINE_TARGET and k.max() > 1:
        k = np.maximum(k // 2, 1)
    return edges if (k == 1).all() else _split(edges, k, integer)


def _split(edges: np.ndarray, parts: np.ndarray, integer: bool) -> np.ndarray:
    """Each cell of ``edges`` split in its ``parts`` equal cells (an integer cell in parts of
    one value at least)."""
    inner = [np.linspace(a, b, 1 + int(min(n, b - a) if integer else n))[:-1]
             for a, b, n in zip(edges[:-1], edges[1:], parts)]
    return np.concatenate([*inner, edges[-1:]])


def _noisy_cells(counts: np.ndarray, missing: int | None, noise: StepNoise, bound: int,
                 sampler: str, rng: np.random.Generator | None
                 ) -> tuple[np.ndarray, dict[str, Any] | None]:
    """``counts`` plus the step's ``noise``, with one more cell counting the column's
    ``missing`` values where it is given (None: not counted): one histogram, a row in at most
    one cell of it, so a replaced unit of ``bound`` rows still moves it by L1 2K (L2 √2·K). The
    noisy cells, and the missing cell's noisy count as the step records it (None where not
    counted)."""
    histogram = counts if missing is None else np.append(counts, missing)
    draw = gaussian_noise if noise.gaussian else laplace_noise
    noisy = draw(histogram, noise.scale, sensitivity=noise.sensitivity_factor * bound,
                 sampler=sampler, rng=rng)
    if missing is None:
        return noisy, None
    return noisy[:-1], {"noisy": float(noisy[-1]),
                        "noise": "gaussian" if noise.gaussian else "laplace",
                        "scale": noise.scale}


def _step(what: str, epsilon: float, rho: float | None, noise: StepNoise, cells: int,
          miss: float, bound: int, missing: dict[str, Any] | None = None) -> dict[str, Any]:
    replaced = "one row" if bound == 1 else f"one unit of at most {bound} rows"
    more = "" if missing is None else ", one more cell: the missing values"
    if noise.gaussian:
        charge = {"mechanism": "gaussian histogram", "rho": rho,
                  "sensitivity": f"L2 {noise.sensitivity_factor * bound:.6g} (replace {replaced})",
                  "opendp": "make_gaussian over vector_domain(atom_domain(i64)), "
                            "l2_distance(i64)" + more}
    else:
        charge = {"mechanism": "laplace histogram", "epsilon": epsilon,
                  "sensitivity": f"L1 {noise.sensitivity_factor * bound} (replace {replaced})",
                  "opendp": "make_laplace over vector_domain(atom_domain(i64)), "
                            "l1_distance(i64)" + more}
    return {"step": what, **charge, "scale": noise.scale, "cells": cells,
            "threshold": noise.threshold(cells, miss), "miss": miss,
            **({} if missing is None else {"missing": missing})}


def _open(inner: list[float], low: float, high: float) -> dict[str, Any]:
    """Bins open at both ends, closed by the public bounds (min/max) at the learned range."""
    return {"edges": ["-inf", *(_round(e) for e in inner), "inf"],
            "min": _round(low), "max": _round(high)}


def _grid(low: int, high: int) -> dict[str, Any]:
    """One bin per integer low..high; the outer ones open, closed by min/max (clamping)."""
    return _open(list(range(low + 1, high + 1)), low, high)


def search_numeric(column: str, counts: dict[str, np.ndarray], cells: Cells, *, epsilon: float,
                   bins: int, sampler: str, rng: np.random.Generator | None, bound: int = 1,
                   coarse: bool = False, points: PointMasses | None = None,
                   missing: int | None = None, rho: float | None = None
                   ) -> tuple[dict[str, Any] | None, dict[str, Any], str]:
    """The numeric spec keys (edges, min, max, fine) of one column, the record of its
    mechanisms and a note; no spec (None) where no octave passed. ``bound``: the rows one unit
    contributes at most. ``coarse`` (a table too small for both steps, by its noisy n̂): all of
    ``epsilon`` on the octaves, whose noisy counts then place the bins at octave edges (an
    integer range of at most :data:`MAX_GRID` values one bin per value, the fine grid the
    octaves split by their noisy rows); the cells inside are not searched. ``points``: the
    column's released point masses (their rows taken out of ``counts``); those the noisy rows
    n̂ leave room for (:func:`_consistent_points`; the others are listed in the octaves' step
    as ``points_check.dropped``) have their noisy counts added to their octaves where no octave
    of the rest passes alone (post-processing), so the range is found around them, if the rest
    is searched at all (:func:`~dp_dask.data.draft_points.rest_is_searched`); where it is,
    they count in the cells the range's ends are found from and in the mass those are measured
    against (:func:`_range_ends`): a code beside a point grows from the point's cell, a column
    of point codes ends at them, not at its octave's edge.
    ``missing``: the column's exact count of missing values, counted in one more cell of each
    step's histogram (its noisy count in the step's record, ``"missing"``: the draft decides
    nullability from it and the type step's); None: not counted. ``rho``: the column's share
    of the numeric searches' one zCDP budget where the draft measures them together (Gaussian
    steps, :class:`StepNoise`; ``epsilon`` is then the column's part of that budget's ε,
    recorded); None: Laplace steps at ``epsilon``."""
    half, step_rho = _step_budget(epsilon, rho, coarse)
    noise = StepNoise.for_step(half, step_rho, bound)
    noisy, nulls = _noisy_cells(counts["octaves"], missing, noise, bound, sampler, rng)
    record = {"mechanism": "octave range search, then cell counts", "epsilon": epsilon,
              **({} if rho is None else {"rho": rho}),
              "steps": [_step("octaves", half, step_rho, noise, len(noisy), OCTAVE_MISS, bound,
                              nulls)]}
    passed = _passing(noisy, noise, OCTAVE_MISS)
    grow = noise.threshold(1, GROW_MISS)
    beside = None
    if points is not None and points.values:
        kept, record["steps"][0]["points_check"] = _consistent_points(
            points, noisy, noise, cells.octaves,
            _grown(noisy, int(passed[0]), int(passed[-1]), grow) if len(passed) else None,
            None if nulls is None else nulls["noisy"])
        if kept and rest_is_searched(points.rows, points.found, kept):
            beside = points_octaves(cells.octaves, points.found, kept)
    if not len(passed) and beside is not None:
        noisy = noisy + beside
        passed = _passing(noisy, noise, OCTAVE_MISS)
        record["steps"][0]["with_points"] = True
    if not len(passed):  # a column spread over octaves none of which holds enough alone
        passed = next(run_spans(noisy, noise, OCTAVE_MISS), passed)
        if len(passed):
            record["steps"][0]["runs"] = [int(passed[0]), int(passed[-1])]
    if not len(passed):
        return None, record, (f"{column}: no octave held enough rows to be found under DP; "
                              "give its public range (ranges=) or more dp_epsilon=")
    # Grown through neighbours that pass the lower threshold: a far empty octave cannot join.
    record["steps"][0]["grow_threshold"] = grow
    first, last = _grown(noisy, int(passed[0]), int(passed[-1]), grow)
    # The zero cell passing the lower threshold joins across empty octaves between: zeros (or
    # small codes) beside values far from them (calm hours among wind directions of 10..360).
    for zero in (len(cells.octaves) // 2 - 1, len(cells.octaves) // 2):  # [-2^low, 0), [0, 2^low)
        if noisy[zero] >= grow and not first <= zero <= last:
            first, last = min(first, zero), max(last, zero)
            record["steps"][0]["zero_cell_joined"] = True
    # Beyond, runs of 1, 2, 4... octaves whose noisy sum is above what noise alone reaches (the
    # tails' rule, on the octaves, on into each run through its octaves above one deviation):
    # the rest of a column spread thinly over octaves none of which passes alone (the values
    # beside a point mass at 0, a long tail). Post-processing.
    below, _ = _tail_end(noisy[:first][::-1], noise, into_runs=True)
    above, _ = _tail_end(noisy[last + 1:], noise, into_runs=True)
    if below or above:
        first, last = first - below, last + above
        record["steps"][0]["tail_octaves"] = [below, above]
    passed = np.arange(first, last + 1)
    low, high = cells.octaves[first], cells.octaves[last + 1]
    if coarse:  # the octaves' own noisy counts: no second step, no further noise
        edges, key, cell = cells.octaves[first:last + 2], "octave", noisy[passed]
        record["coarse"] = ("a small table (by n̂): all of ε on the octaves; bins at octave "
                            "edges, the cells inside not searched")
    else:
        by_unit = (cells.units is not None and -UNIT_SPAN <= low and high <= UNIT_SPAN
                   and (high - low <= UNIT_RANGE or last - first + 1 <= UNIT_OCTAVES))
        edges, key = (cells.units, "units") if by_unit else (cells.fine, "fine")
        # The cells of one octave more on each side (public cells, the same histogram): a tail
        # octave that missed the grow threshold can still be found by its cells' mass.
        wide_low = cells.octaves[max(first - 1, 0)]
        wide_high = cells.octaves[min(last + 2, len(cells.octaves) - 1)]
        inside = slice(int(np.searchsorted(edges, max(wide_low, edges[0]))),
                       int(np.searchsorted(edges, min(wide_high, edges[-1]))))
        edges = edges[inside.start:inside.stop + 1]
        cell, nulls = _noisy_cells(counts[key][inside], missing, noise, bound, sampler, rng)
        record["steps"].append(_step(f"{key} cells within [{_round(edges[0])}, "
                                     f"{_round(edges[-1])})", half, step_rho, noise, len(cell),
                                     CELL_MISS, bound, nulls))
    if coarse:
        first, last = 0, len(cell) - 1
    else:
        mass, ranged = noisy[passed], cell
        # The released points' noisy counts in their cells too (their rows were taken out of
        # the cells): a code beside a point grows from it, and point codes end the range.
        if beside is not None:
            ranged = cell + points_octaves(edges, points.found, kept, clamp=False)
            if not record["steps"][0].get("with_points"):
                mass = mass + beside[passed]
        first, last, ends = _range_ends(ranged, noise, edges, low, high,
                                        (cells.octaves[passed[0]:passed[-1] + 2], mass))
        record["steps"][-1]["ends"] = ends
    low, high = edges[first], edges[last + 1]
    top = high - 1 if cells.integer else high  # the largest value of the range
    # An integer range of a few values: one bin each, from unit cells or, in a small table's
    # coarse search, from octaves (the flags 0/1 of a 4,000-row table in [0, 16), not one bin)
    if (key == "units" or key == "octave" and cells.integer) and high - low <= MAX_GRID:
        record["result"] = "integer grid"
        if high - low == 1:
            return ({"edges": ["-inf", "inf"], "min": _round(low), "max": _round(low)}, record,
                    f"{column}: a constant under DP ({_round(low)}), one bin, values clamped")
        return (_grid(int(low), int(top)), record,
                f"{column}: integers {_round(low)}..{_round(top)} found under DP, one bin "
                "each; values beyond are clamped into the outer ones")
    # Bins at the noisy counts' quantiles, the cells as the fine grid: post-processing.
    mass = np.cumsum(np.clip(cell[first:last + 1], 0.0, None))
    cuts = edges[first + 1:last + 1]
    inner = sorted({float(cuts[np.argmin(np.abs(mass[:-1] - i / bins * mass[-1]))])
                    for i in range(1, bins)} if len(cuts) and mass[-1] > 0 else set())
    grid = edges[first:last + 2]
    if key != "units":  # octave cells (coarse: the octaves) split by their noisy rows
        grid = split_cells(grid, cell[first:last + 1], cells.integer)
        record["fine_cells"] = len(grid) - 1
    middle = not inner and len(grid) > 3
    if middle:  # a range of one search cell, split: two bins at its middle (a public edge), so
        inner = [float(grid[len(grid) // 2])]  # that the fine cells place the rows within it
    spec = _open(inner, low, top)
    if inner and len(grid) > len(inner) + 2:  # the cells split some bin
        spec["fine"] = [_round(e) for e in grid]
    placed = "two bins split at its one search cell's middle" if middle else (
        f"{len(inner) + 1} bins at noisy quantiles")
    record["result"] = ("two bins at the middle" if middle else "quantile bins") + (
        " and fine grid" if "fine" in spec else "")
    return (spec, record,
            f"{column}: range [{_round(low)}, {_round(top)}] found under DP, {placed}"
            f"{', fine grid of ' + key + ' cells' if 'fine' in spec else ''}"
            "; values beyond are clamped into the outer bins" + (
                "; coarse (a small table): bins at octave edges, the fine grid the octaves "
                "halved by their noisy rows" if coarse else ""))


def search_years(column: str, counts: np.ndarray, *, epsilon: float, sampler: str,
                 rng: np.random.Generator | None, bound: int = 1, missing: int | None = None
                 ) -> tuple[dict[str, Any] | None, dict[str, Any], str]:
    """The year edges (min/max) of a timestamp column: one bin per year found under DP
    (``bound``: the rows one unit contributes at most; ``missing``: its exact count of missing
    values, counted in one more cell as :func:`search_numeric`'s)."""
    noise = StepNoise.for_step(epsilon, None, bound)
    noisy, nulls = _noisy_cells(counts, missing, noise, bound, sampler, rng)
    record = {"mechanism": "year counts", "epsilon": epsilon,
              "steps": [_step("years", epsilon, None, noise, len(noisy), OCTAVE_MISS, bound,
                              nulls)]}
    kept = _passing(noisy, noise, OCTAVE_MISS)
    if not len(kept):
        return None, record, (f"{column}: no year held enough rows to be found under DP; give "
                              f"its public years (ranges= {column}=2015:2025:1)")
    low, high = int(year_cells()[kept[0]]), int(year_cells()[kept[-1]])
    spec = ({"edges": ["-inf", "inf"], "min": low, "max": low} if low == high
            else _grid(low, high))
    return spec, record, (f"{column}: years {low}..{high} found under DP; calendar features "
                          "released as one timestamp, other years clamped into the outer ones")
