"""Consistent marginals from noisy ones: the driver-side post-processing of the release method.

Every attribute's histogram is measured directly and again, summed out, by each noisy 2-way table
that holds it. :func:`consistent_marginals` combines all those estimates by inverse variance,
shrinks each table's departure from independence cell by cell, by how much of it the noise can
explain, and fits every table to the combined marginals, non-negative and summing to n. It reads
only noisy counts, their noise scales, n and the public schema: post-processing, free of privacy
cost.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq, isotonic_regression, minimize_scalar
from scipy.stats import norm

from dp_dask.compiled import compiled
from dp_dask.copula.model import project_to_total
from dp_dask.postprocess.config import ConsistencyConfig

# The sweeps and the signal threshold are ConsistencyConfig's (docs/tuning.md).
DEFAULTS = ConsistencyConfig()
# Lets IPF reach margins whose row or column the projection emptied (an all-zero row cannot be
# scaled): a thousandth of a row spread by independence.
IPF_SEED_ROWS = 1e-3
# The empty-cell share π of a table is fitted in [0, MAX_EMPTY_SHARE]: below 1, so that a table
# all of whose noisy cells sit near zero still keeps the share the model gives them.
MAX_EMPTY_SHARE = 0.999
# An end bin's cell is kept whole (_shrunk_cells) beyond what noise reaches in any of its cells
# but one bin in this many.
TAIL_SIGNAL_MISS = 0.01
_TINY = 1e-300  # keeps log and division finite where both densities underflow


@dataclass(frozen=True)
class Measurement:
    """A noisy 1-way histogram or 2-way table (row-major, flattened), with its noise std."""

    attributes: tuple[int, ...]
    values: np.ndarray
    sigma: float


@dataclass(frozen=True)
class Marginals:
    """Consistent estimates: per-attribute counts and per-pair tables, all summing to n."""

    one_way: tuple[np.ndarray, ...]
    two_way: dict[tuple[int, int], np.ndarray]

    def table(self, a: int, b: int) -> np.ndarray:
        """The |A_a|×|A_b| table of attributes a and b, in either order."""
        return self.two_way[(a, b)] if a < b else self.two_way[(b, a)].T


def combine_one_way(measurements: list[Measurement], sizes: np.ndarray, n_rows: int,
                    extra: dict[int, tuple[np.ndarray, np.ndarray]] | None = None
                    ) -> tuple[np.ndarray, ...]:
    """Each attribute's histogram: inverse-variance mean of every measured estimate of it.

    A table of a with b gives a's histogram as its row sums, each the sum of |A_b| cells of
    variance σ², hence variance |A_b|·σ². ``extra``: more estimates of some histograms, each
    with its own variance per cell (a fine histogram's bin sums, :func:`fine_bin_sums`). The
    mean is projected onto {x ≥ 0, Σx = n}.
    """
    weighted = [np.zeros(size) for size in sizes]
    precision = [np.zeros(size) for size in sizes]
    for measurement in measurements:
        shape = [sizes[a] for a in measurement.attributes]
        values = measurement.values.reshape(shape)
        for axis, attribute in enumerate(measurement.attributes):
            others = tuple(k for k in range(len(shape)) if k != axis)
            variance = measurement.sigma**2 * np.prod([shape[k] for k in others])
            weighted[attribute] += values.sum(axis=others) / variance
            precision[attribute] += 1.0 / variance
    for attribute, (values, variance) in (extra or {}).items():
        weighted[attribute] += values / variance
        precision[attribute] += 1.0 / variance
    unmeasured = [a for a, p in enumerate(precision) if (p == 0).any()]
    if unmeasured:
        raise ValueError(f"attributes {unmeasured} are not measured")
    return tuple(project_to_total(w / p, n_rows) for w, p in zip(weighted, precision))


def fine_bin_sums(measured: Measurement, first: np.ndarray, start: int,
                  size: int) -> tuple[np.ndarray, np.ndarray]:
    """A noisy fine histogram summed within each bin: one more estimate of its attribute's
    histogram (``size`` cells; fine cells laid out as in :func:`consistent_fine`), and each
    bin's variance, k·σ² for a bin of k fine cells. A bin the grid does not cover whole (an
    open bin, an extra bin) has infinite variance: no estimate."""
    sums, variance = np.zeros(size), np.full(size, np.inf)
    for b in range(min(size, len(first) - 1)):
        low, high = first[b] - start, first[b + 1] - start
        if low >= 0 and high <= len(measured.values):
            sums[b] = measured.values[low:high].sum()
            variance[b] = (high - low) * measured.sigma**2
    return sums, variance


def estimated_rows(measurements: list[Measurement]) -> int:
    """n where it is private (add/remove neighbours): the inverse-variance mean of the
    measurements' totals, each the sum of its cells (variance cells·σ²), rounded, at least 1.
    Post-processing: reads only noisy counts and their public σ."""
    return noisy_total([m.values for m in measurements], [m.sigma for m in measurements])


def noisy_total(tables: list[np.ndarray], scales: list[float] | np.ndarray) -> int:
    """The inverse-variance mean of noisy tables' totals, a table's cells having independent
    noise of scale ``scales[i]`` (std, or Laplace b: a common factor cancels), rounded, at
    least 1."""
    totals = np.array([t.sum() for t in tables])
    precision = np.array([1.0 / (t.size * s * s) for t, s in zip(tables, scales)])
    return max(1, round(float(totals @ precision / precision.sum())))


def _departure_variance(table: np.ndarray, target: np.ndarray,
                        sigma: float) -> tuple[np.ndarray, float]:
    """The target's non-negative cells and τ² of the model true = target + departure of
    variance τ²·target, by the method of moments: the departure's energy beyond the noise's
    cells·σ², spread over the target's total."""
    weight = np.maximum(target, 0.0)
    excess = float(np.sum((table - target) ** 2)) - table.size * sigma**2
    total = float(weight.sum())
    return weight, (excess / total if excess > 0 and total > 0 else 0.0)


def shrink_towards(table: np.ndarray, target: np.ndarray, sigma: float,
                   config: ConsistencyConfig = DEFAULTS) -> np.ndarray:
    """Empirical-Bayes shrinkage of a noisy table's departure from a target table, cell by cell.

    Model: the true table departs from the target by independent amounts of variance τ²·target
    (over-dispersed counts: a cell expected to hold more rows can move by more), measured with
    noise of variance σ² (:func:`_departure_variance`). Each cell keeps τ²t/(τ²t + σ²) of its
    departure. Noise-sized departures vanish, large cells keep their measurement, small ones lean
    on the target — except a departure beyond ``config.signal_sigmas``·σ, which noise alone
    almost never makes (a cell the target misses, e.g. rows that are "?" in two attributes): it
    is kept whole.
    On Adult (public, ε = 1) it beat one James–Stein factor per table: 2-way error 9.2 → 8.3
    (9 attributes) and 12.3 → 11.2 (15), the largest error down by a fifth to a third.
    """
    return _shrunk(table, target, sigma,
                   np.abs(table - target) > config.signal_sigmas * sigma)


def _shrunk(table: np.ndarray, target: np.ndarray, sigma: float,
            whole: np.ndarray) -> np.ndarray:
    """``target`` plus each cell's departure from it, kept whole where ``whole`` says, else
    kept τ²t/(τ²t + σ²) of (:func:`_departure_variance`)."""
    weight, tau2 = _departure_variance(table, target, sigma)
    keep = tau2 * weight / (tau2 * weight + sigma**2)
    return target + np.where(whole, 1.0, keep) * (table - target)


def weigh_empty_cells(estimate: np.ndarray, noisy: np.ndarray, independent: np.ndarray,
                      sigma: float) -> np.ndarray:
    """``estimate`` times each cell's posterior probability of not being empty.

    Two-groups empirical Bayes (Efron 2008): a cell is empty with probability π — its noisy
    count then pure noise, N(0, σ²) — or else follows the shrinkage's model around the
    independence table t, N(t, σ² + τ²t); π per table by maximum likelihood. A noisy count of
    a few σ in a cell independence expects to be large is more likely an empty cell's noise
    (female husbands: t ≈ 4,400, noisy 130, σ = 73) and is pulled towards zero; cells far from
    zero are left alone. Post-processing of the noisy counts. On Adult and UCI Bank (ε = 1) it
    left the 2-way error within ±1 % and cut impossible rows by a third (docs/method.md).
    """
    weight, tau2 = _departure_variance(noisy, independent, sigma)
    empty = norm.pdf(noisy, 0.0, sigma)
    occupied = norm.pdf(noisy, independent, np.sqrt(sigma**2 + tau2 * weight))

    def negative_log_likelihood(share: float) -> float:
        return -float(np.sum(np.log(share * empty + (1 - share) * occupied + _TINY)))

    share = minimize_scalar(negative_log_likelihood, bounds=(0.0, MAX_EMPTY_SHARE),
                            method="bounded").x
    posterior_empty = share * empty / (share * empty + (1 - share) * occupied + _TINY)
    return (1 - posterior_empty) * estimate


def fit_to_margins(table: np.ndarray, rows: np.ndarray, cols: np.ndarray,
                   config: ConsistencyConfig = DEFAULTS) -> np.ndarray:
    """The non-negative table nearest ``table`` (least squares) with these row and column sums.

    Dykstra's alternating projections between the affine set of tables with the given sums and
    the non-negative orthant (hand-written: scipy has no such projection for this convex set),
    then iterative proportional fitting to make the sums exact without leaving the orthant.
    """
    x = np.array(table, dtype=np.float64)  # a copy the compiled sweeps update in place
    _fit_to_margins(x, np.asarray(rows, dtype=np.float64), np.asarray(cols, dtype=np.float64),
                    config.dykstra_sweeps, config.ipf_sweeps, IPF_SEED_ROWS)
    return x


# Compiled: NumPy made each of a table's 150 sweeps about ten calls on a few hundred cells, so a
# release spent its time in call overhead — the DSS shape's 351 tables, fitted twice, took 2.1 s
# of the driver's 2.5 s of consistency (py-spy). The same sweeps, row and column sums in one
# fused pass; sums in row order instead of NumPy's pairwise order (DSS: cells within 5e-10
# rows of NumPy's, the same tree; Adult's releases the same byte for byte).
@compiled
def _fit_to_margins(x: np.ndarray, rows: np.ndarray, cols: np.ndarray, dykstra_sweeps: int,
                    ipf_sweeps: int, seed_rows: float) -> None:
    n_rows, n_cols = x.shape
    total = rows.sum()
    affine_fix = np.zeros_like(x)
    orthant_fix = np.zeros_like(x)
    row_sums, col_sums = np.empty(n_rows), np.empty(n_cols)
    for _ in range(dykstra_sweeps):
        row_sums[:] = 0.0
        col_sums[:] = 0.0
        for i in range(n_rows):
            for j in range(n_cols):
                z = x[i, j] + affine_fix[i, j]
                row_sums[i] += z
                col_sums[j] += z
        # the projection onto the tables with sums rows, cols (z's sum is its rows' sum)
        shift = (total - row_sums.sum()) / (n_rows * n_cols)
        for i in range(n_rows):
            row_shift = (rows[i] - row_sums[i]) / n_cols - shift
            for j in range(n_cols):
                z = x[i, j] + affine_fix[i, j]
                projected = z + row_shift + (cols[j] - col_sums[j]) / n_rows
                affine_fix[i, j] = z - projected
                w = projected + orthant_fix[i, j]
                x[i, j] = max(w, 0.0)
                orthant_fix[i, j] = w - x[i, j]
    seed = seed_rows / max(total, 1.0) ** 2
    for i in range(n_rows):
        for j in range(n_cols):
            x[i, j] += seed * rows[i] * cols[j]
    for _ in range(ipf_sweeps):
        for i in range(n_rows):
            current = x[i].sum()
            ratio = rows[i] / current if current > 0 else 0.0
            x[i] *= ratio
        col_sums[:] = 0.0
        for i in range(n_rows):
            for j in range(n_cols):
                col_sums[j] += x[i, j]
        for j in range(n_cols):
            col_sums[j] = cols[j] / col_sums[j] if col_sums[j] > 0 else 0.0
        for i in range(n_rows):
            for j in range(n_cols):
                x[i, j] *= col_sums[j]


def ratio_or_zero(target: np.ndarray, current: np.ndarray) -> np.ndarray:
    """target / current, 0 where current is 0: the scaling step of proportional fitting."""
    return np.divide(target, current, out=np.zeros_like(current, dtype=np.float64),
                     where=current > 0)


def consistent_marginals(measurements: list[Measurement], sizes: np.ndarray, n_rows: int,
                         prior: dict[tuple[int, int], np.ndarray] | None = None, *,
                         empty_cells: bool = False,
                         extra: dict[int, tuple[np.ndarray, np.ndarray]] | None = None,
                         config: ConsistencyConfig = DEFAULTS) -> Marginals:
    """Combined 1-way histograms, and every measured 2-way table shrunk and fitted to them.

    Tables shrink towards ``prior`` where given (e.g. the tables a tree fitted to a first pass
    implies, :func:`dp_dask.postprocess.tree.implied_tables`), else towards independence; with
    ``empty_cells``, likely empty cells are then pulled to zero (:func:`weigh_empty_cells`).
    ``extra``: more estimates of some histograms (:func:`combine_one_way`). ``config``: the
    shrinkage's signal threshold and the fit's sweeps.
    """
    one_way = combine_one_way(measurements, sizes, n_rows, extra)
    two_way = {}
    for measurement in measurements:
        if len(measurement.attributes) != 2:
            continue
        a, b = measurement.attributes
        independent = np.outer(one_way[a], one_way[b]) / n_rows
        target = prior[(a, b)] if prior is not None and (a, b) in prior else independent
        noisy = measurement.values.reshape(sizes[a], sizes[b])
        shrunk = shrink_towards(noisy, target, measurement.sigma, config)
        if empty_cells:
            shrunk = weigh_empty_cells(shrunk, noisy, independent, measurement.sigma)
        two_way[(a, b)] = fit_to_margins(shrunk, one_way[a], one_way[b], config)
    return Marginals(one_way, two_way)


def consistent_fine(noisy: np.ndarray, first: np.ndarray, start: int, coarse: np.ndarray,
                    sigma: float | None = None,
                    cells: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """A noisy fine histogram made consistent with its attribute's consistent 1-way marginal
    ``coarse``: within each bin b (fine cells ``first[b] - start : first[b + 1] - start``, see
    :class:`dp_dask.data.dtypes.FineLayout`) the cells projected onto {x ≥ 0, Σx = coarse[b]};
    a bin the grid does not cover is skipped, an empty one stays zero.

    With the noise's ``sigma`` and the ``cells``' value ranges (each cell's [low, high) of the
    whole layout, open ends closed by the public bounds), an end bin whose cells hold less than
    one σ each on average is first shrunk towards a tail that decays outwards from its inner
    edge (:func:`tail_target`): its cells can not tell where the rows end, and drawing by their
    noise spreads the bin's rows over the whole drafted range (ages up to 127 where the rows end
    at 90). The end bins are the outermost ones holding at least σ rows: bins beyond them hold
    fewer than one cell's noise (clock times drafted to 4,095 whose last bins, past 2,623, are
    empty), so the bin before them is where the rows end. Every other end bin, and any bin
    beyond one, has its cells past its outermost signal cell fitted by one unimodal sequence
    first (:func:`_unimodal_beyond_signal`); the bins between the end bins are shrunk towards
    their counts spread evenly over their cells (:func:`_shrunk_body`)."""
    fine = np.zeros(len(noisy))
    bins = len(first) - 1
    ends = _end_bins(coarse[:bins], sigma) if sigma is not None and cells is not None else None
    body = {} if ends is None else _shrunk_body(noisy, first, start, coarse, sigma, cells, ends)
    for b, total in enumerate(coarse[:bins]):
        low, high = first[b] - start, first[b + 1] - start
        if low >= 0 and high <= len(noisy) and total > 0:
            cells_b = body.get(b, noisy[low:high])
            if ends is not None and b in ends and total < sigma * (high - low):
                neighbour = b - 1 if b == ends[1] else b + 1
                cells_b = _shrunk_cells(cells_b, tail_target(coarse, first, cells, b, neighbour),
                                        sigma)
            elif ends is not None and not ends[0] < b < ends[1]:
                cells_b = _unimodal_beyond_signal(cells_b, sigma, outward_first=b <= ends[0])
            fine[low:high] = project_to_total(cells_b, total)
    return fine


def _shrunk_body(noisy: np.ndarray, first: np.ndarray, start: int, coarse: np.ndarray,
                 sigma: float, cells: tuple[np.ndarray, np.ndarray], ends: tuple[int, int]
                 ) -> dict[int, np.ndarray]:
    """The noisy cells of each bin between the end bins ``ends`` (whose cells are measured
    and span values), shrunk together towards each bin's count spread evenly over its cells'
    widths (:func:`_shrunk_cells`, one departure variance for the whole body: a bin of a few
    cells alone cannot tell its shape from its noise), by bin. Where the cells hold less than
    their noise (weather's gusts, 4,300 non-null rows at 254 a cell) noise alone placed the
    rows within each bin; cells far above their noise (a heap) keep their counts. Reads only
    consistent counts, noisy cells and the public cells: post-processing."""
    spans, targets = {}, []
    for b in range(ends[0] + 1, ends[1]):
        low, high = first[b] - start, first[b + 1] - start
        widths = cells[1][first[b]:first[b + 1]] - cells[0][first[b]:first[b + 1]]
        if low >= 0 and high <= len(noisy) and coarse[b] > 0 and np.all(widths > 0):
            spans[b] = slice(low, high)
            targets.append(coarse[b] * widths / widths.sum())
    if not spans:
        return {}
    measured = np.concatenate([noisy[span] for span in spans.values()])
    shrunk = np.split(_shrunk_cells(measured, np.concatenate(targets), sigma),
                      np.cumsum([span.stop - span.start for span in spans.values()])[:-1])
    return dict(zip(spans, shrunk))


def _unimodal_beyond_signal(cells: np.ndarray, sigma: float, outward_first: bool
                            ) -> np.ndarray:
    """An end bin's noisy ``cells`` (or a bin beyond it) with those past its outermost signal
    cell (above noise's reach in any of the bin's cells but one bin in :data:`TAIL_SIGNAL_MISS`,
    as :func:`_shrunk_cells` keeps whole) replaced by their least-squares unimodal fit: a
    tail rises to one mode and falls off outwards. Projected alone, each cell past the rows'
    last value kept its noise's positive part (0.4 σ on average), so a drafted range reaching
    past the data drew values beyond it (the flights' distances beyond the longest in 0.73 %
    of the rows, 0.16 % with the fit); a unimodal fit pools those noise-only cells, whose sum
    is near zero, and keeps a real tail's shape. The cells at or within a signal cell (a
    heap, a lattice of codes) are left as they are. Post-processing of noisy counts.
    ``outward_first``: the bin is at the low end (its first cells are the outermost)."""
    outward = cells[::-1] if outward_first else cells
    signal = np.flatnonzero(outward > _signal_bound(outward.size, sigma))
    start = int(signal[-1]) + 1 if len(signal) else 0
    if outward.size - start < 3:
        return cells
    fitted = outward.astype(float)
    fitted[start:] = unimodal_regression(outward[start:])
    return fitted[::-1] if outward_first else fitted


def unimodal_regression(values: np.ndarray) -> np.ndarray:
    """The least-squares fit of ``values`` by a sequence that does not decrease up to one
    mode and does not increase after it: the mode whose non-decreasing fit before it and
    non-increasing fit from it err least in all (every mode's errors from one
    pool-adjacent-violators pass each way, :func:`_isotonic_errors`), then those two fits
    (scipy's). Each fit keeps its blocks' sums, so the whole keeps the cells' sum."""
    errors = _isotonic_errors(values) + _isotonic_errors(values[::-1])[::-1]
    mode = int(np.argmin(errors))
    rising = isotonic_regression(values[:mode]).x if mode else values[:0]
    falling = (isotonic_regression(values[mode:], increasing=False).x
               if mode < len(values) else values[:0])
    return np.concatenate([rising, falling])


def _isotonic_errors(values: np.ndarray) -> np.ndarray:
    """For m = 0..k, the squared error of the least-squares non-decreasing fit of the first m
    ``values``, from one pool-adjacent-violators pass that keeps each block's sum and size:
    the error is Σx² less Σ over blocks of (block sum)²/size. Hand-written: scipy's
    ``isotonic_regression`` gives one fit, not every prefix's error, and a fit per prefix is
    O(k²) on a fine grid of up to 100,000 cells."""
    sums: list[float] = []
    sizes: list[int] = []
    explained = 0.0
    squares = np.concatenate([[0.0], np.cumsum(np.square(values, dtype=float))])
    errors = np.empty(len(values) + 1)
    errors[0] = 0.0
    for i, value in enumerate(values.tolist()):
        total, size = value, 1
        while sums and sums[-1] * size > total * sizes[-1]:  # the block before is higher
            explained -= sums[-1] ** 2 / sizes[-1]
            total, size = total + sums.pop(), size + sizes.pop()
        sums.append(total)
        sizes.append(size)
        explained += total * total / size
        errors[i + 1] = squares[i + 1] - explained
    return errors


def _end_bins(coarse: np.ndarray, sigma: float) -> tuple[int, int] | None:
    """The first and the last bin holding at least ``sigma`` rows, if they are two."""
    held = np.flatnonzero(coarse >= sigma)
    return (int(held[0]), int(held[-1])) if len(held) > 1 else None


def tail_target(coarse: np.ndarray, first: np.ndarray, cells: tuple[np.ndarray, np.ndarray],
                end: int, neighbour: int) -> np.ndarray:
    """The expected fine counts of the end bin ``end`` if its rows decay exponentially
    outwards from the edge it shares with ``neighbour`` (the bin before it, inwards), at the
    density there that the neighbour holds on average (rows per unit of value), the bin's count
    ``coarse[end]`` in all: uniform where that density could not hold the bin's count (the bin
    denser than its neighbour), else the rate λ with λ / (1 − e^(−λL)) = density / count, L the
    bin's width. Reads only consistent counts and the public cells: post-processing."""
    low, high = cells
    last = neighbour < end
    span = slice(first[end], first[end + 1])
    width = high[first[end + 1] - 1] - low[first[end]]
    neighbour_width = high[first[neighbour + 1] - 1] - low[first[neighbour]]
    total = float(coarse[end])
    inner = low[first[end]] if last else high[first[end + 1] - 1]
    near, far = ((low[span] - inner, high[span] - inner) if last
                 else (inner - high[span], inner - low[span]))
    if not width > 0:  # a bin of no values of its kind (an integer bin within one unit)
        return np.full(len(near), total / len(near))
    ratio = float(coarse[neighbour]) / max(neighbour_width, _TINY) / total
    if not ratio * width > 1.0:  # no decaying tail holds the bin's count at that density
        return total * (far - near) / width
    rate = brentq(lambda r: r / -np.expm1(-r * width) - ratio, _TINY, ratio + 1.0 / width)
    return total * (np.exp(-rate * near) - np.exp(-rate * far)) / -np.expm1(-rate * width)


def _shrunk_cells(noisy: np.ndarray, target: np.ndarray, sigma: float) -> np.ndarray:
    """Empirical-Bayes shrinkage of a bin's noisy cells (or a body's, together) towards
    ``target``, as :func:`shrink_towards` does, keeping whole only a cell above the target by
    more than noise reaches in any of the cells but one time in a hundred (``TAIL_SIGNAL_MISS``, a
    Bonferroni bound: 3.7 σ over 51 cells, 4.9 σ over 4,096): a heap at the range's end (calm
    winds at 0) stays where it is, while among a long tail's noise-only cells a fixed 4 σ would
    let one take the whole bin."""
    return _shrunk(noisy, target, sigma, noisy - target > _signal_bound(noisy.size, sigma))


def _signal_bound(cells: int, sigma: float) -> float:
    """What noise of scale ``sigma`` reaches in any of ``cells`` cells but one time in
    :data:`TAIL_SIGNAL_MISS` (Bonferroni): a cell beyond it is signal."""
    return float(norm.isf(TAIL_SIGNAL_MISS / cells) * sigma)
