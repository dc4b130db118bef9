"""A resample whose marginals round the estimate's: swaps of rows towards its weighted counts.

A systematic resample (dp_dask.postprocess.raking) rounds each candidate's weight to a
neighbouring integer, but a marginal cell holds many candidates scattered through the draw: its
count then varies about the weighted count like a sample's (on Adult's 9 attributes, the
resample's 3-way error 95 % was 1.17 where its weighted counts, unrounded, had 1.12). Here the
resample is improved by local search in the manner of balanced sampling (Deville & Tillé 2004):
a proposal replaces one drawn row by a candidate drawn ∝ its weight, and is kept where it lowers
Σ_g Σ_c (rows_g,c − estimate_g,c)², summed over the given attribute groups g (their cells c).
Each kept swap moves one unit of count from an over-full cell to an under-full one in every
group where the two rows differ, so the marginals end close to the estimate's, rounded.

The swaps replace whole rows and soon stall (more proposals found nothing more: on Adult's 9
attributes the triples stayed 0.40 rows per cell from the estimate's, where rounding each table
alone leaves 0.12). :func:`settle_values` then changes single values: a row's value of one
attribute is set to the one that lowers a cost summed over the cells of every group holding the
attribute. First the squared deviation, as the swaps; then each triple cell's expected absolute
error if the truth were Poisson about the estimate (its minimum is the posterior median, not the
mean: a cell of estimate 0.6 is best left empty, P(T = 0) = 0.55), while every 2-way cell costs
nothing within ``BalanceConfig.pair_slack`` rows of the estimate's pair count and the square of
the rest beyond.

Post-processing: it reads the candidates, their weights and public sizes only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dp_dask.compiled import compiled
from dp_dask.data.tables import Domain
from dp_dask.postprocess.config import BalanceConfig
from dp_dask.postprocess.raking import systematic_resample

# The tuned numbers (proposals, rounds, slack, read bounds): BalanceConfig, docs/tuning.md.
# How a cell's count is costed (:func:`_increment`).
SQUARED, ABSOLUTE, SLACK, FREE = 0, 1, 2, 3
# Above this estimate a cell's Poisson distribution is taken as normal (the sum's terms underflow).
NORMAL_ABOVE = 30.0
# The swaps test which groups a proposal moves by one int64's bits: tables of at most this many
# attributes (wider ones test each group's members)
MASK_BITS = 63


def _group_layout(groups: Sequence[tuple[int, ...]],
                 sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The groups flattened for the compiled search: their attributes concatenated, where each
    group's attributes start (one more entry: the end), and where each group's cells start in
    the concatenated tables."""
    members = np.array([a for g in groups for a in g], dtype=np.intp)
    starts = np.cumsum([0] + [len(g) for g in groups], dtype=np.intp)
    domain = Domain(sizes)
    cells = [domain.cells(g) for g in groups]
    return members, starts, np.cumsum([0] + cells[:-1], dtype=np.intp)


def weighted_tables(codes: np.ndarray, weights: np.ndarray, groups: Sequence[tuple[int, ...]],
                    sizes: np.ndarray) -> np.ndarray:
    """The weighted counts of each group's table (row-major), concatenated."""
    return Domain(sizes).tables(codes, groups, weights)


def balanced_resample(codes: np.ndarray, weights: np.ndarray, rows: int,
                      groups: Sequence[tuple[int, ...]], sizes: np.ndarray,
                      rng: np.random.Generator, *, estimate: np.ndarray | None = None,
                      pairs: Sequence[tuple[int, int]] = (),
                      pair_estimate: np.ndarray | None = None,
                      value_moves: bool = True,
                      config: BalanceConfig = BalanceConfig()) -> np.ndarray:
    """``rows`` rows (codes, C order) drawn from the candidates ``codes`` ∝ ``weights``, their
    tables of ``groups`` close to the weighted ones scaled to ``rows`` (``estimate``: those
    tables, :func:`weighted_tables`, when already computed). A systematic resample, then
    ``config.proposals_per_row`` swap proposals per row, ``config.max_reads`` at most, then
    (``value_moves``) the value moves of :func:`settle_values`, the 2-way tables of ``pairs``
    (weighted: ``pair_estimate``) kept within ``config.pair_slack`` of the estimate's (module
    docstring)."""
    drawn = np.ascontiguousarray(codes[systematic_resample(weights, rows, rng)])
    if not groups or rows == 0:
        return drawn
    if estimate is None:
        estimate = weighted_tables(codes, weights, groups, sizes)
    members, starts, offsets = _group_layout(groups, sizes)
    scale = rows / max(float(weights.sum()), 1e-300)  # the estimate's tables to ``rows``
    counts = np.zeros(estimate.size)
    _count_rows(np.ascontiguousarray(drawn.T), members, starts, offsets, sizes.astype(np.intp),
                counts)
    deviation = counts - estimate * scale
    proposals = min(int(config.proposals_per_row * rows),
                    config.max_reads // (2 * len(members)))
    incoming = systematic_resample(weights, proposals, rng)
    slots = rng.integers(0, rows, proposals)
    _swap(drawn, np.ascontiguousarray(codes), incoming, slots, members, starts, offsets,
          sizes.astype(np.intp), deviation)
    if not value_moves:
        return drawn
    if pairs and pair_estimate is None:
        pair_estimate = weighted_tables(codes, weights, pairs, sizes)
    settle_values(drawn, groups, estimate * scale, sizes, rng, pairs=pairs,
                  pair_targets=None if pair_estimate is None else pair_estimate * scale,
                  config=config)
    return drawn


def settle_values(codes: np.ndarray, groups: Sequence[tuple[int, ...]], targets: np.ndarray,
                  sizes: np.ndarray, rng: np.random.Generator, *,
                  pairs: Sequence[tuple[int, int]] = (), pair_targets: np.ndarray | None = None,
                  config: BalanceConfig = BalanceConfig()) -> None:
    """Value moves in place (module docstring): rounds of ``config.moves_per_row`` proposals per
    row,
    each setting a random row's random attribute to the value of least cost over the cells of
    ``groups`` (``targets``: their tables, concatenated, unrounded) and of ``pairs`` (tables
    ``pair_targets``). ``config.squared_rounds`` on the squared deviation from the targets, the
    pairs free; then ``config.absolute_rounds`` on the Poisson absolute error, the pairs free
    within ``config.pair_slack`` rows. ``config.max_move_reads`` at most."""
    rows, m = codes.shape
    if rows == 0 or not groups:
        return
    everything = list(groups) + list(pairs)
    members, starts, offsets = _group_layout(everything, sizes)
    held, held_starts = _groups_holding(everything, m)
    target = np.concatenate([targets, np.zeros(0) if pair_targets is None else pair_targets])
    counts = weighted_tables(codes, np.ones(rows), everything, sizes)
    in_pairs = np.arange(target.size) >= targets.size
    # a proposal reads every value's cell in each group holding the attribute
    reads = float(np.mean(sizes * np.diff(held_starts))) * max(len(g) for g in everything)
    rounds = config.squared_rounds + config.absolute_rounds
    moves = min(int(config.moves_per_row * rows),
                int(config.max_move_reads / (reads * max(rounds, 1))))
    for round_ in range(rounds):
        kind = (np.where(in_pairs, FREE, SQUARED) if round_ < config.squared_rounds
                else np.where(in_pairs, SLACK, ABSOLUTE)).astype(np.int8)
        _move_values(codes, rng.integers(0, rows, moves), rng.integers(0, m, moves), members,
                     starts, offsets, sizes.astype(np.intp), held, held_starts, counts, target,
                     kind, float(config.pair_slack))


def _groups_holding(groups: Sequence[tuple[int, ...]], m: int) -> tuple[np.ndarray, np.ndarray]:
    """For each attribute the groups that hold it, concatenated, and where each one's start
    (one more entry: the end)."""
    holding = [[g for g, group in enumerate(groups) if a in group] for a in range(m)]
    return (np.array([g for h in holding for g in h], dtype=np.intp),
            np.cumsum([0] + [len(h) for h in holding], dtype=np.intp))


@compiled
def _strides(members: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """How far a step of each member's code moves in its group's table (row-major)."""
    strides = np.empty(members.size, np.intp)
    for g in range(starts.size - 1):
        step = 1
        for k in range(starts[g + 1] - 1, starts[g] - 1, -1):
            strides[k] = step
            step *= sizes[members[k]]
    return strides


@compiled
def _count_rows(columns: np.ndarray, members: np.ndarray, starts: np.ndarray,
                offsets: np.ndarray, sizes: np.ndarray, counts: np.ndarray) -> None:
    """Adds each row to its cell of every group (``columns``: the codes (m, rows), an
    attribute's codes contiguous; ``counts``: the groups' tables, concatenated): the tables
    :func:`weighted_tables` gives for unit weights (whole numbers, exact either way) without an
    array of cell keys per group, a triple's loop unrolled (the demo's 455 triples over 100 k
    rows: 0.18 → 0.06 CPU s)."""
    strides = _strides(members, starts, sizes)
    rows = columns.shape[1]
    for g in range(starts.size - 1):
        first, last, base = starts[g], starts[g + 1], offsets[g]
        if last - first == 3:
            a, b, c = (columns[members[first]], columns[members[first + 1]],
                       columns[members[first + 2]])
            stride_a, stride_b = strides[first], strides[first + 1]
            for row in range(rows):
                counts[base + a[row] * stride_a + b[row] * stride_b + c[row]] += 1.0
        else:
            for row in range(rows):
                cell = base
                for k in range(first, last):
                    cell += columns[members[k], row] * strides[k]
                counts[cell] += 1.0


@compiled
def _group_masks(members: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Each group's attributes as the bits of one integer (attribute a: bit a), for tables of
    at most :data:`MASK_BITS` attributes."""
    masks = np.zeros(starts.size - 1, np.int64)
    for g in range(starts.size - 1):
        for k in range(starts[g], starts[g + 1]):
            masks[g] |= np.int64(1) << members[k]
    return masks


@compiled
def _triples(members: np.ndarray, starts: np.ndarray, strides: np.ndarray) -> np.ndarray:
    """Per group, one row (its attributes a, b, c and the strides of a and b; c's is 1) where
    it is a triple, -1 in its first entry otherwise: a triple's cell read without going through
    ``starts`` and ``members``."""
    layout = np.full((starts.size - 1, 5), -1, np.intp)
    for g in range(starts.size - 1):
        first = starts[g]
        if starts[g + 1] - first == 3:
            layout[g, 0], layout[g, 1], layout[g, 2] = (members[first], members[first + 1],
                                                        members[first + 2])
            layout[g, 3], layout[g, 4] = strides[first], strides[first + 1]
    return layout


@compiled
def _swap(drawn: np.ndarray, candidates: np.ndarray, incoming: np.ndarray, slots: np.ndarray,
          members: np.ndarray, starts: np.ndarray, offsets: np.ndarray, sizes: np.ndarray,
          deviation: np.ndarray) -> None:
    """Proposal p puts candidate ``incoming[p]`` in place of drawn row ``slots[p]`` where that
    lowers the summed squared ``deviation`` (drawn − estimate, per cell; kept up to date).

    A group's cell changes exactly where the two rows differ in one of its attributes, so only
    those groups' cells are computed (the two rows' codes read once, each member's stride in its
    table precomputed; which attributes differ one integer's bits, tested against each group's;
    a triple's cell from its own row of attributes and strides; every key first, then the
    cells' reads); the change is summed over the same groups in the same order as cell by cell
    in every group, so the rows kept are the same (tests/test_same_releases.py,
    tests/test_balance.py)."""
    groups, m = starts.size - 1, drawn.shape[1]
    strides = _strides(members, starts, sizes)
    narrow = m <= MASK_BITS
    masks = _group_masks(members, starts) if narrow else np.zeros(0, np.int64)
    triples = _triples(members, starts, strides)
    leaving, arriving = np.empty(groups, np.intp), np.empty(groups, np.intp)
    out, into = np.empty(m, np.intp), np.empty(m, np.intp)
    differs = np.empty(m, np.bool_)
    for p in range(incoming.size):
        row, candidate = slots[p], incoming[p]
        bits = np.int64(0)
        for a in range(m):
            out[a], into[a] = drawn[row, a], candidates[candidate, a]
            differs[a] = out[a] != into[a]
            if differs[a] and narrow:
                bits |= np.int64(1) << a
        count = 0
        for g in range(groups):
            if narrow:
                if masks[g] & bits == 0:
                    continue
            else:
                moved = False
                for k in range(starts[g], starts[g + 1]):
                    moved |= differs[members[k]]
                if not moved:
                    continue
            a = triples[g, 0]
            if a >= 0:
                b, c = triples[g, 1], triples[g, 2]
                stride_a, stride_b = triples[g, 3], triples[g, 4]
                old = offsets[g] + out[a] * stride_a + out[b] * stride_b + out[c]
                new = offsets[g] + into[a] * stride_a + into[b] * stride_b + into[c]
            else:
                old, new = offsets[g], offsets[g]
                for k in range(starts[g], starts[g + 1]):
                    old += out[members[k]] * strides[k]
                    new += into[members[k]] * strides[k]
            leaving[count], arriving[count] = old, new
            count += 1
        # the cells' reads apart from their keys' arithmetic: the loads issue back to back
        change = 0.0  # (d − 1)² − d² + (e + 1)² − e² per group whose cell changes
        for c in range(count):
            change += 2.0 - 2.0 * deviation[leaving[c]] + 2.0 * deviation[arriving[c]]
        if change < 0.0:
            for c in range(count):
                deviation[leaving[c]] -= 1.0
                deviation[arriving[c]] += 1.0
            drawn[row, :] = candidates[candidate, :]


@compiled
def _poisson_cdf(x: float, mean: float) -> float:
    """P(T ≤ x) for T ~ Poisson(mean); normal (continuity-corrected) above NORMAL_ABOVE."""
    if x < 0:
        return 0.0
    if mean > NORMAL_ABOVE:
        return 0.5 * (1.0 + math.erf((x + 0.5 - mean) / math.sqrt(2.0 * mean)))
    term = total = math.exp(-mean)
    for k in range(1, int(x) + 1):
        term *= mean / k
        total += term
    return min(total, 1.0)


@compiled
def _increment(count: float, target: float, kind: int, step: int, slack: float) -> float:
    """The change of a cell's cost when its count goes from ``count`` by ``step`` (±1);
    ``slack``: the rows a SLACK cell may stray at no cost."""
    if kind == SQUARED:
        return 1.0 + 2.0 * step * (count - target)
    if kind == ABSOLUTE:  # E|T − x|: its step up is 2 P(T ≤ x) − 1, down 1 − 2 P(T ≤ x − 1)
        if step > 0:
            return 2.0 * _poisson_cdf(count, target) - 1.0
        return 1.0 - 2.0 * _poisson_cdf(count - 1.0, target)
    if kind == SLACK:
        after = max(0.0, abs(count + step - target) - slack)
        before = max(0.0, abs(count - target) - slack)
        return after * after - before * before
    return 0.0


@compiled
def _refresh(cell: int, counts: np.ndarray, target: np.ndarray, kind: np.ndarray,
             up: np.ndarray, down: np.ndarray, slack: float) -> None:
    """A cell's cost of one row more (``up``) and one row fewer (``down``), held per cell so a
    proposal reads them instead of summing a Poisson distribution for every value it tries."""
    up[cell] = _increment(counts[cell], target[cell], kind[cell], 1, slack)
    down[cell] = _increment(counts[cell], target[cell], kind[cell], -1, slack)


@compiled
def _move_values(codes: np.ndarray, rows: np.ndarray, attributes: np.ndarray,
                 members: np.ndarray, starts: np.ndarray, offsets: np.ndarray, sizes: np.ndarray,
                 held: np.ndarray, held_starts: np.ndarray, counts: np.ndarray,
                 target: np.ndarray, kind: np.ndarray, slack: float) -> None:
    """Proposal p sets row ``rows[p]``'s value of ``attributes[p]`` to the value of least cost
    over the groups holding it, where that costs less than its value now (``counts``: the rows'
    tables, kept up to date).

    Each holding group's cell is its base (the row's other codes) plus the value times the
    attribute's stride there, found once a proposal; every value's cost is then summed group by
    group in the groups' order, as cell by cell, so the values chosen are the same
    (tests/test_balance.py)."""
    up, down = np.empty(counts.size), np.empty(counts.size)
    for cell in range(counts.size):
        _refresh(cell, counts, target, kind, up, down, slack)
    strides = _strides(members, starts, sizes)
    most = int(np.max(np.diff(held_starts))) if held_starts.size > 1 else 0
    bases, steps = np.empty(most, np.intp), np.empty(most, np.intp)
    totals = np.empty(int(np.max(sizes)))
    for p in range(rows.size):
        row, a = rows[p], attributes[p]
        now = codes[row, a]
        first, holding = held_starts[a], held_starts[a + 1] - held_starts[a]
        for j in range(holding):
            g = held[first + j]
            base, step = offsets[g], 0
            for k in range(starts[g], starts[g + 1]):
                b = members[k]
                if b == a:
                    step = strides[k]
                else:
                    base += codes[row, b] * strides[k]
            bases[j], steps[j] = base, step
        leaving = 0.0
        for j in range(holding):
            leaving += down[bases[j] + now * steps[j]]
        values = sizes[a]
        for value in range(values):
            totals[value] = leaving
        for j in range(holding):
            for value in range(values):
                totals[value] += up[bases[j] + value * steps[j]]
        best, best_value = 0.0, -1
        for value in range(values):
            if value != now and totals[value] < best - 1e-9:
                best, best_value = totals[value], value
        if best_value >= 0:
            for j in range(holding):
                old, new = bases[j] + now * steps[j], bases[j] + best_value * steps[j]
                counts[old] -= 1.0
                counts[new] += 1.0
                _refresh(old, counts, target, kind, up, down, slack)
                _refresh(new, counts, target, kind, up, down, slack)
            codes[row, a] = best_value
