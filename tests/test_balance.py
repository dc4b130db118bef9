"""The balanced resample: swaps and value moves that bring a resample's marginals to the
estimate's (no Dask)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dp_dask.postprocess.balance import (
    balanced_resample,
    settle_values,
    weighted_tables,
)
from dp_dask.postprocess.config import BalanceConfig
from dp_dask.postprocess.raking import systematic_resample

SIZES = np.array([3, 4, 2, 5, 3])
TRIPLES = tuple(itertools.combinations(range(len(SIZES)), 3))


def candidates(k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """k distinct-ish candidate rows with a 3-way interaction and uneven weights."""
    rng = np.random.default_rng(seed)
    codes = np.stack([rng.integers(0, s, k) for s in SIZES], axis=1).astype(np.uint8)
    codes[:, 2] = (codes[:, 0] + codes[:, 1]) % 2
    return codes, rng.gamma(0.5, size=k)


def summed_gap(rows: np.ndarray, codes: np.ndarray, weights: np.ndarray) -> float:
    estimate = weighted_tables(codes, weights * len(rows) / weights.sum(), TRIPLES, SIZES)
    return float(np.abs(weighted_tables(rows, np.ones(len(rows)), TRIPLES, SIZES)
                        - estimate).sum())


def test_swaps_bring_every_triple_close_to_the_weighted_counts():
    codes, weights = candidates(40_000)
    rows = 3_000
    plain = codes[systematic_resample(weights, rows, np.random.default_rng(1))]
    balanced = balanced_resample(codes, weights, rows, TRIPLES, SIZES, np.random.default_rng(1))
    assert balanced.shape == (rows, len(SIZES)) and balanced.flags.c_contiguous
    # the value moves make rows of values the candidates hold
    assert all((balanced[:, a] < size).all() for a, size in enumerate(SIZES))
    # a resample's cells vary like a sample's; the swaps leave about rounding
    cells = sum(int(np.prod(SIZES[list(t)])) for t in TRIPLES)
    assert summed_gap(balanced, codes, weights) < 0.5 * summed_gap(plain, codes, weights)
    assert summed_gap(balanced, codes, weights) < 0.6 * cells  # rounding: under 1 per cell


def test_without_groups_it_is_the_systematic_resample_and_seeded():
    codes, weights = candidates(5_000, seed=2)
    np.testing.assert_array_equal(
        balanced_resample(codes, weights, 700, (), SIZES, np.random.default_rng(3)),
        codes[systematic_resample(weights, 700, np.random.default_rng(3))])
    first = balanced_resample(codes, weights, 700, TRIPLES, SIZES, np.random.default_rng(4))
    again = balanced_resample(codes, weights, 700, TRIPLES, SIZES, np.random.default_rng(4),
                              estimate=weighted_tables(codes, weights, TRIPLES, SIZES))
    np.testing.assert_array_equal(first, again)


def test_value_moves_lower_the_gap_the_swaps_leave():
    codes, weights = candidates(40_000, seed=5)
    rows = 3_000
    swapped = balanced_resample(codes, weights, rows, TRIPLES, SIZES, np.random.default_rng(6),
                                value_moves=False)
    settled = swapped.copy()
    scaled = weighted_tables(codes, weights * rows / weights.sum(), TRIPLES, SIZES)
    settle_values(settled, TRIPLES, scaled, SIZES, np.random.default_rng(7))
    assert summed_gap(settled, codes, weights) < summed_gap(swapped, codes, weights)


def test_absolute_rounds_leave_a_small_cell_empty_where_squares_keep_it():
    """A cell of estimate 0.6 holding one row of ten: the squared deviation keeps it (0.4 < 0.6),
    the Poisson absolute error empties it (its median is 0, P(T = 0) = 0.55)."""
    sizes = np.array([2])
    rows = np.zeros((10, 1), dtype=np.uint8)
    rows[3, 0] = 1
    targets = np.array([9.4, 0.6])
    settle_values(rows, ((0,),), targets, sizes, np.random.default_rng(0))
    np.testing.assert_array_equal(np.bincount(rows[:, 0], minlength=2), [10, 0])
    # a cell of estimate 0.9 keeps its row (its median is 1: P(T = 0) = 0.41)
    rows[3, 0] = 1
    settle_values(rows, ((0,),), np.array([9.1, 0.9]), sizes, np.random.default_rng(0))
    np.testing.assert_array_equal(np.bincount(rows[:, 0], minlength=2), [9, 1])


@pytest.mark.parametrize("slack", [BalanceConfig.pair_slack, 25.0])
def test_the_absolute_rounds_pull_pairs_to_within_their_slack_and_no_further(slack):
    """Attribute 1 sits in no group, only in the pair (0, 1), whose cells are 500 rows off their
    targets: value moves of attribute 1 bring every pair cell to ``pair_slack`` of its target,
    where it costs nothing more."""
    sizes = np.array([2, 2])
    rows = np.zeros((2_000, 2), dtype=np.uint8)
    rows[1_000:, 0] = 1
    settle_values(rows, ((0,),), np.array([1_000.0, 1_000.0]), sizes, np.random.default_rng(0),
                  pairs=((0, 1),), pair_targets=np.full(4, 500.0),
                  config=BalanceConfig(pair_slack=slack))
    gaps = np.abs(np.bincount(rows[:, 0] * 2 + rows[:, 1], minlength=4) - 500)
    assert gaps.max() <= slack
    assert gaps.min() >= slack - 1  # the slack is free: not pulled to the target itself
    np.testing.assert_array_equal(np.bincount(rows[:, 0], minlength=2), [1_000, 1_000])


def test_item2_compiled_count_gives_the_unit_weight_tables_of_every_group_size():
    """Issue 69: the resample's starting tables come from one compiled pass per group (a
    triple's loop unrolled); they are :func:`weighted_tables` of unit weights, for groups of
    one, two, three and four attributes alike."""
    from dp_dask.postprocess.balance import _count_rows, _group_layout

    codes, _ = candidates(2_000, seed=8)
    groups = ((1,), (0, 3), *TRIPLES[:4], (0, 1, 3, 4))
    members, starts, offsets = _group_layout(groups, SIZES)
    counts = np.zeros(sum(int(np.prod(SIZES[list(g)])) for g in groups))
    _count_rows(np.ascontiguousarray(codes.T), members, starts, offsets, SIZES.astype(np.intp),
                counts)
    np.testing.assert_array_equal(counts, weighted_tables(codes, np.ones(len(codes)), groups,
                                                          SIZES))


def _reference_swaps(drawn: np.ndarray, candidates_: np.ndarray, incoming: np.ndarray,
                     slots: np.ndarray, groups: tuple[tuple[int, ...], ...], sizes: np.ndarray,
                     deviation: np.ndarray) -> None:
    """The swaps' rule cell by cell, in Python: every group in order, its two rows' cells from
    their codes, the change of the summed squared deviation where they differ."""
    offsets = np.cumsum([0] + [int(np.prod(sizes[list(g)])) for g in groups])
    for row, candidate in zip(slots, incoming):
        moves, change = [], 0.0
        for g, group in enumerate(groups):
            shape = sizes[list(group)]
            old = offsets[g] + int(np.ravel_multi_index(drawn[row, list(group)], shape))
            new = offsets[g] + int(np.ravel_multi_index(candidates_[candidate, list(group)],
                                                        shape))
            if old != new:
                moves.append((old, new))
                change += 2.0 - 2.0 * deviation[old] + 2.0 * deviation[new]
        if change < 0.0:
            for old, new in moves:
                deviation[old] -= 1.0
                deviation[new] += 1.0
            drawn[row] = candidates_[candidate]


@pytest.mark.parametrize("attributes", [6, 66])
def test_issue69_compiled_swaps_keep_the_rows_the_cell_by_cell_rule_keeps(attributes):
    """Issue 69: the compiled swaps test which groups a proposal moves by the bits of one
    integer (tables of at most MASK_BITS attributes; wider ones member by member) and compute a
    triple's cell unrolled; the rows kept and the deviations are exactly those of the rule
    computed cell by cell in every group, in the same order, for groups of one to four
    attributes, on a narrow table and on one wider than the bits."""
    from dp_dask.postprocess.balance import MASK_BITS, _group_layout, _swap

    assert (attributes > MASK_BITS) == (attributes == 66)
    rng = np.random.default_rng(attributes)
    sizes = rng.integers(2, 5, attributes)
    codes = np.stack([rng.integers(0, s, 600) for s in sizes], axis=1)
    codes[:, 1] = codes[:, 0] % sizes[1]  # dependent columns: some groups never move
    triples = list(itertools.combinations(range(attributes), 3))
    chosen = rng.choice(len(triples), min(60, len(triples)), replace=False)
    groups = ((1,), (0, 2), *[triples[i] for i in sorted(chosen)], (0, 1, 2, 3))
    weights = rng.gamma(0.5, size=len(codes))
    drawn = np.ascontiguousarray(codes[systematic_resample(weights, 300, rng)])
    estimate = weighted_tables(codes, weights * 300 / weights.sum(), groups, sizes)
    deviation = weighted_tables(drawn, np.ones(300), groups, sizes) - estimate
    incoming, slots = systematic_resample(weights, 2_000, rng), rng.integers(0, 300, 2_000)
    expected_rows, expected_deviation = drawn.copy(), deviation.copy()
    started = drawn.copy()
    _reference_swaps(expected_rows, codes, incoming, slots, groups, sizes, expected_deviation)
    members, starts, offsets = _group_layout(groups, sizes)
    _swap(drawn, np.ascontiguousarray(codes), incoming, slots, members, starts, offsets,
          sizes.astype(np.intp), deviation)
    assert 0 < (expected_rows != started).any(axis=1).sum() < 300  # swaps kept, not all
    np.testing.assert_array_equal(drawn, expected_rows)
    np.testing.assert_array_equal(deviation, expected_deviation)


def _reference_moves(codes, rows, attributes, groups, sizes, counts, target, kind, slack):
    """The value moves' rule cell by cell, in Python: each holding group's cell of every value
    from the row's codes, each cell's cost of a row more or fewer from its count now."""
    from dp_dask.postprocess.balance import _increment

    offsets = np.cumsum([0] + [int(np.prod(sizes[list(g)])) for g in groups])

    def cell(row, g, a, value):
        here = codes[row, list(groups[g])].copy()
        here[list(groups[g]).index(a)] = value
        return offsets[g] + int(np.ravel_multi_index(here, sizes[list(groups[g])]))

    for row, a in zip(rows, attributes):
        holding = [g for g, group in enumerate(groups) if a in group]
        now = codes[row, a]
        leaving = 0.0
        for g in holding:
            c = cell(row, g, a, now)
            leaving += _increment(counts[c], target[c], kind[c], -1, slack)
        best, best_value = 0.0, -1
        for value in range(sizes[a]):
            if value == now:
                continue
            change = leaving
            for g in holding:
                c = cell(row, g, a, value)
                change += _increment(counts[c], target[c], kind[c], 1, slack)
            if change < best - 1e-9:
                best, best_value = change, value
        if best_value >= 0:
            for g in holding:
                counts[cell(row, g, a, now)] -= 1.0
                counts[cell(row, g, a, best_value)] += 1.0
            codes[row, a] = best_value


@pytest.mark.parametrize("squared", [True, False])
def test_issue69_compiled_value_moves_choose_the_values_the_cell_by_cell_rule_chooses(squared):
    """Issue 69: the compiled value moves find each holding group's cell as a base plus the
    value times the attribute's stride, and sum every value's cost group by group; the values
    chosen and the tables are exactly those of the rule computed cell by cell, for squared
    rounds and for absolute rounds with pairs within their slack."""
    from dp_dask.postprocess.balance import (
        ABSOLUTE,
        FREE,
        SLACK,
        SQUARED,
        _group_layout,
        _groups_holding,
        _move_values,
    )

    rng = np.random.default_rng(3)
    codes, weights = candidates(400, seed=4)
    codes = codes.astype(np.int64)
    groups = (*TRIPLES, (0, 3), (1, 4), (0, 1, 2, 4))
    target = weighted_tables(codes, weights * 400 / weights.sum(), groups, SIZES)
    counts = weighted_tables(codes, np.ones(400), groups, SIZES)
    in_pairs = np.repeat([len(g) == 2 for g in groups],
                         [int(np.prod(SIZES[list(g)])) for g in groups])
    kind = (np.where(in_pairs, FREE, SQUARED) if squared
            else np.where(in_pairs, SLACK, ABSOLUTE)).astype(np.int8)
    rows, attributes = rng.integers(0, 400, 1_500), rng.integers(0, len(SIZES), 1_500)
    expected_codes, expected_counts = codes.copy(), counts.copy()
    _reference_moves(expected_codes, rows, attributes, groups, SIZES, expected_counts, target,
                     kind, 2.0)
    members, starts, offsets = _group_layout(groups, SIZES)
    held, held_starts = _groups_holding(groups, len(SIZES))
    _move_values(codes, rows, attributes, members, starts, offsets, SIZES.astype(np.intp), held,
                 held_starts, counts, target, kind, 2.0)
    assert (expected_codes != candidates(400, seed=4)[0]).any()  # values moved
    np.testing.assert_array_equal(codes, expected_codes)
    np.testing.assert_array_equal(counts, expected_counts)
