"""Consistent marginals (driver math) and row updates (per-partition sampling), without Dask."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dp_dask.postprocess.config import RowUpdateConfig
from dp_dask.postprocess.consistency import (
    DEFAULTS,
    IPF_SEED_ROWS,
    Marginals,
    Measurement,
    consistent_marginals,
    fit_to_margins,
    ratio_or_zero,
    shrink_towards,
    weigh_empty_cells,
)
from dp_dask.postprocess.rowupdate import (
    match_one_way,
    possible_cells,
    round_to_total,
    sample_tree,
    update_rows,
)
from dp_dask.postprocess.tree import implied_tables, spanning_tree

SIZES = np.array([3, 4, 2, 6])


def dependent_codes(n: int, seed: int = 0) -> np.ndarray:
    """Codes (n, 4): attribute 1 follows 0, attribute 3 copies 0 for most rows, 2 is free."""
    rng = np.random.default_rng(seed)
    a = rng.choice(3, n, p=[0.5, 0.3, 0.2])
    b = np.where(rng.random(n) < 0.7, a, rng.integers(0, 4, n))
    c = rng.integers(0, 2, n)
    d = np.where(rng.random(n) < 0.99, a, rng.integers(0, 6, n))  # near-deterministic pair
    return np.stack([a, b, c, d], axis=1)


def table(codes: np.ndarray, clique: tuple[int, ...], sizes: np.ndarray = SIZES) -> np.ndarray:
    keys = np.zeros(len(codes), dtype=np.int64)
    for a in clique:
        keys = keys * sizes[a] + codes[:, a]
    return np.bincount(keys, minlength=int(np.prod(sizes[list(clique)]))).astype(float)


def measurements(codes: np.ndarray, sigma: float, seed: int = 1) -> list[Measurement]:
    rng = np.random.default_rng(seed)
    cliques = [(a,) for a in range(len(SIZES))] + list(itertools.combinations(range(4), 2))
    return [Measurement(c, table(codes, c) + rng.normal(0, sigma, int(np.prod(SIZES[list(c)]))),
                        sigma) for c in cliques]


@pytest.mark.parametrize("empty_cells", [False, True])
@pytest.mark.parametrize("sigma", [0.01, 30.0, 300.0])
def test_consistent_marginals_agree_everywhere(sigma, empty_cells):
    n = 5_000
    marginals = consistent_marginals(measurements(dependent_codes(n), sigma), SIZES, n,
                                     empty_cells=empty_cells)
    for histogram in marginals.one_way:
        assert histogram.sum() == pytest.approx(n)
        assert (histogram >= 0).all()
    for (a, b), joint in marginals.two_way.items():
        assert (joint >= 0).all()
        np.testing.assert_allclose(joint.sum(axis=1), marginals.one_way[a], atol=1e-6 * n)
        np.testing.assert_allclose(joint.sum(axis=0), marginals.one_way[b], atol=1e-6 * n)


@pytest.mark.parametrize("empty_cells", [False, True])
def test_tiny_noise_changes_nothing(empty_cells):
    n = 5_000
    codes = dependent_codes(n)
    marginals = consistent_marginals(measurements(codes, 0.01), SIZES, n, empty_cells=empty_cells)
    for a, histogram in enumerate(marginals.one_way):
        np.testing.assert_allclose(histogram, table(codes, (a,)), atol=0.1)
    for (a, b), joint in marginals.two_way.items():
        np.testing.assert_allclose(joint.ravel(), table(codes, (a, b)), atol=0.5)


def test_likely_empty_cells_are_pulled_to_zero_and_large_ones_kept():
    # Husband/Wife × Male/Female: two cells are empty, and noise put 1.8 σ and 1 σ into them.
    sigma = 73.0
    truth = np.array([[13_000.0, 0.0], [0.0, 1_500.0]])
    noisy = truth + np.array([[-40.0, 130.0], [73.0, 25.0]])
    independent = np.outer(truth.sum(axis=1), truth.sum(axis=0)) / truth.sum()
    weighed = weigh_empty_cells(noisy, noisy, independent, sigma)
    assert weighed[0, 1] < 0.6 * noisy[0, 1] and weighed[1, 0] < 0.6 * noisy[1, 0]
    np.testing.assert_allclose(weighed[[0, 1], [0, 1]], noisy[[0, 1], [0, 1]], rtol=1e-6)
    # Where independence expects few rows, a small noisy count is no evidence of emptiness.
    flat = np.full((2, 2), 3_625.0)
    np.testing.assert_allclose(weigh_empty_cells(flat + 20, flat + 20, flat, sigma), flat + 20)


def test_empty_cells_cut_the_error_of_a_near_deterministic_pair():
    # Attribute 3 copies attribute 0 for 99 % of rows: most off-diagonal cells are empty.
    n, sigma = 20_000, 60.0
    codes = dependent_codes(n)
    error = {}
    for empty_cells in (False, True):
        errors = []
        for seed in range(5):
            marginals = consistent_marginals(measurements(codes, sigma, seed), SIZES, n,
                                             empty_cells=empty_cells)
            errors.append(np.abs(marginals.two_way[(0, 3)].ravel() - table(codes, (0, 3))).sum())
        error[empty_cells] = np.mean(errors)
    assert error[True] < 0.9 * error[False]


def test_combined_histogram_beats_the_direct_one():
    # 1 + 3 tables estimate each histogram: the combination must err less than the 1-way alone.
    n, sigma = 20_000, 40.0
    codes = dependent_codes(n)
    combined, direct = [], []
    for seed in range(20):
        noisy = measurements(codes, sigma, seed)
        marginals = consistent_marginals(noisy, SIZES, n)
        combined.append(np.abs(marginals.one_way[0] - table(codes, (0,))).mean())
        direct.append(np.abs(noisy[0].values - table(codes, (0,))).mean())
    assert np.mean(combined) < 0.7 * np.mean(direct)


def test_shrinkage_removes_noise_and_keeps_strong_dependence():
    rng = np.random.default_rng(0)
    independent = np.outer([600.0, 400.0], [300.0, 300.0, 400.0]) / 1_000
    sigma = 10.0
    noise_only = shrink_towards(independent + rng.normal(0, sigma, (2, 3)),
                                        independent, sigma)
    np.testing.assert_allclose(noise_only, independent)
    strong = independent + np.array([[150.0, -75, -75], [-150, 75, 75]])
    kept = shrink_towards(strong + rng.normal(0, sigma, (2, 3)), independent, sigma)
    assert np.abs(kept - strong).max() < 4 * sigma



def test_shrinkage_keeps_more_of_a_large_cells_departure_than_a_small_ones():
    target = np.array([[5_000.0, 50.0], [50.0, 5.0]])
    departure = np.array([[400.0, 40.0], [-40.0, 4.0]])
    shrunk = shrink_towards(target + departure, target, sigma=20.0)
    kept = (shrunk - target) / departure
    assert 0.9 < kept[0, 0] <= 1.0
    assert kept[1, 1] < kept[0, 1] < kept[0, 0]
    assert kept[1, 1] < 0.5

def test_fit_to_margins_is_nonnegative_exact_and_keeps_a_feasible_table():
    rng = np.random.default_rng(2)
    feasible = rng.integers(1, 50, (4, 5)).astype(float)
    # unchanged up to the thousandth of a row that seeds IPF
    np.testing.assert_allclose(fit_to_margins(feasible, feasible.sum(1), feasible.sum(0)),
                               feasible, atol=IPF_SEED_ROWS)
    noisy = feasible + rng.normal(0, 30, feasible.shape)
    fitted = fit_to_margins(noisy, feasible.sum(1), feasible.sum(0))
    assert (fitted >= 0).all()
    np.testing.assert_allclose(fitted.sum(1), feasible.sum(1), rtol=1e-9)
    np.testing.assert_allclose(fitted.sum(0), feasible.sum(0), rtol=1e-9)



def numpy_fit_to_margins(table, rows, cols):
    """The fit as NumPy wrote it before it was compiled: the reference."""
    n_rows, n_cols = table.shape
    total = rows.sum()
    x = table.astype(np.float64)
    affine_fix, orthant_fix = np.zeros_like(x), np.zeros_like(x)
    for _ in range(DEFAULTS.dykstra_sweeps):
        z = x + affine_fix
        projected = (z + (rows - z.sum(axis=1))[:, None] / n_cols
                     + (cols - z.sum(axis=0))[None, :] / n_rows
                     - (total - z.sum()) / (n_rows * n_cols))
        affine_fix = z - projected
        w = projected + orthant_fix
        x = np.maximum(w, 0.0)
        orthant_fix = w - x
    x += IPF_SEED_ROWS * np.outer(rows, cols) / max(total, 1.0) ** 2
    for _ in range(DEFAULTS.ipf_sweeps):
        x *= ratio_or_zero(rows, x.sum(axis=1))[:, None]
        x *= ratio_or_zero(cols, x.sum(axis=0))[None, :]
    return x


@pytest.mark.parametrize("shape", [(2, 2), (7, 30), (41, 16)])
def test_the_compiled_fit_to_margins_is_numpys_up_to_rounding(shape):
    """Noisy tables (negative cells, a zero margin) far from their margins: the compiled sweeps
    give NumPy's cells to 1e-9 of the table's total; the input is left as it was."""
    rng = np.random.default_rng(sum(shape))
    truth = rng.integers(0, 200, shape).astype(float)
    truth[0] = 0.0  # a row the margins empty
    noisy = truth + rng.normal(0, 40, shape)
    given = noisy.copy()
    rows, cols = truth.sum(1), truth.sum(0)
    fitted = fit_to_margins(noisy, rows, cols)
    np.testing.assert_array_equal(noisy, given)
    np.testing.assert_allclose(fitted, numpy_fit_to_margins(noisy, rows, cols),
                               rtol=0, atol=1e-9 * truth.sum())


def test_tree_implies_its_edges_and_the_pairs_it_separates():
    # 1 and 3 each depend on 0 only, so a tree through 0 implies their table from two edges.
    n = 50_000
    codes = dependent_codes(n)
    marginals = consistent_marginals(measurements(codes, 0.01), SIZES, n)
    order, parents = spanning_tree(marginals, len(SIZES))
    assert parents[1] == 0 or parents[0] == 1
    assert parents[3] == 0 or parents[0] == 3
    implied = implied_tables(marginals, order, parents)
    for child, parent in enumerate(parents):
        if parent >= 0:
            pair = (min(child, parent), max(child, parent))
            np.testing.assert_allclose(implied[pair], marginals.two_way[pair], atol=1e-6)
    # Sampling error alone: cells of n·p counts differ by a few sqrt(n·p).
    truth = table(codes, (1, 3)).reshape(4, 6)
    assert np.abs(implied[(1, 3)] - truth).max() < 5 * np.sqrt(truth.max())
    independent = np.outer(truth.sum(1), truth.sum(0)) / n
    assert np.abs(independent - truth).max() > 50 * np.sqrt(truth.max())
    for pair, total in ((pair, t.sum()) for pair, t in implied.items()):
        assert total == pytest.approx(n), pair


def test_round_to_total():
    counts = round_to_total(np.array([0.2, 0.5, 0.3]), 7)
    assert counts.sum() == 7 and (counts >= 0).all()
    np.testing.assert_array_equal(round_to_total(np.array([2.0, 0.0, 5.0]), 7), [2, 0, 5])


def rows_for(marginals, rows: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    order, parents = spanning_tree(marginals, len(SIZES))
    codes = sample_tree(marginals, order, parents, rows, rng)
    targets = {p: round_to_total(t.ravel(), rows) for p, t in marginals.two_way.items()}
    update_rows(codes, targets, SIZES, rng)
    match_one_way(codes, [round_to_total(v, rows) for v in marginals.one_way], SIZES, rng)
    return codes


def test_row_updates_keep_rows_and_hit_one_way_targets():
    n = 8_000
    marginals = consistent_marginals(measurements(dependent_codes(n), 20.0), SIZES, n)
    for rows in (n, 1_234):
        codes = rows_for(marginals, rows, seed=3)
        assert codes.shape == (rows, len(SIZES))
        for a, histogram in enumerate(marginals.one_way):
            np.testing.assert_array_equal(table(codes, (a,)), round_to_total(histogram, rows))


def total_excess(codes: np.ndarray, targets: dict, sizes: np.ndarray = SIZES) -> int:
    return int(sum(np.maximum(table(codes, c, sizes) - t, 0).sum() for c, t in targets.items()))


def test_sweeps_go_on_while_the_excess_falls_and_stop_when_settled():
    n = 20_000
    codes = dependent_codes(n)
    targets = {c: table(codes, c).astype(np.int64) for c in itertools.combinations(range(4), 2)}
    settled = codes.copy()
    assert update_rows(settled, targets, SIZES, np.random.default_rng(0)) == 1
    np.testing.assert_array_equal(settled, codes)
    # Columns shuffled apart: five sweeps leave excess that more sweeps still remove.
    rng = np.random.default_rng(1)
    start = np.stack([rng.permutation(codes[:, a]) for a in range(len(SIZES))], axis=1)
    fixed, adaptive = start.copy(), start.copy()
    update_rows(fixed, targets, SIZES, np.random.default_rng(2),
                config=RowUpdateConfig(max_sweeps=5))
    made = update_rows(adaptive, targets, SIZES, np.random.default_rng(2))
    assert made > 5
    assert total_excess(adaptive, targets) < 0.9 * total_excess(fixed, targets)


def test_rows_already_near_noisy_targets_are_not_made_worse():
    # Twelve attributes sharing one base column, targets = their pair counts plus noise: the
    # true rows are as close as rows get, and moving rows for one table undoes the others' fit
    # (the first sweep raised this excess 3,973 → 4,904 before sweeps were kept only if they help).
    m, n, sigma = 12, 5_000, 10.0
    sizes = np.full(m, 4)
    rng = np.random.default_rng(0)
    base = rng.integers(0, 4, n)
    codes = np.stack([np.where(rng.random(n) < 0.5, base, rng.integers(0, 4, n))
                      for _ in range(m)], axis=1).astype(np.uint8)
    targets = {pair: round_to_total(
                   np.maximum(table(codes, pair, sizes) + rng.normal(0, sigma, 16), 0), n)
               for pair in itertools.combinations(range(m), 2)}
    updated = codes.copy()
    update_rows(updated, targets, sizes, np.random.default_rng(4))
    assert total_excess(updated, targets, sizes) <= total_excess(codes, targets, sizes)


def test_same_seed_same_rows():
    n = 3_000
    marginals = consistent_marginals(measurements(dependent_codes(n), 20.0), SIZES, n)
    np.testing.assert_array_equal(rows_for(marginals, n, 9), rows_for(marginals, n, 9))
    assert (rows_for(marginals, n, 9) != rows_for(marginals, n, 10)).any()


def test_near_deterministic_pair_is_reproduced_within_the_noise():
    # Attribute 3 copies attribute 0 for 99 % of rows: off-diagonal cells hold ~1 % of n.
    n, sigma = 20_000, 25.0
    codes = dependent_codes(n)
    marginals = consistent_marginals(measurements(codes, sigma), SIZES, n)
    synthetic = rows_for(marginals, n, seed=4)
    error = np.abs(table(synthetic, (0, 3)) - table(codes, (0, 3)))
    assert error.max() < 4 * sigma
    # An independent sample would put ~half the rows off the diagonal.
    rng = np.random.default_rng(5)
    independent = np.stack([rng.permutation(codes[:, a]) for a in range(len(SIZES))], axis=1)
    assert np.abs(table(independent, (0, 3)) - table(codes, (0, 3))).max() > 50 * sigma


def test_rows_move_to_deficient_cells_changing_one_attribute_where_possible():
    from dp_dask.postprocess.rowupdate import _nearby_cells

    deficit = np.zeros((3, 4), dtype=np.int64)
    deficit[0, 3] = 5  # row 0 and column 3 have deficit
    deficit[2, 1] = 2  # row 2 and column 1 too
    sources = np.array([0 * 4 + 0, 1 * 4 + 3, 1 * 4 + 2] * 200)  # (0,0), (1,3), (1,2)
    cells = _nearby_cells(sources, deficit, np.uint64(0))
    assert (deficit.ravel()[cells] > 0).all()
    # (0,0): its row has deficit at (0,3), its column none: stays in row 0
    assert (cells[0::3] == 3).all()
    # (1,3): row 1 has none, column 3 has (0,3): stays in column 3
    assert (cells[1::3] == 3).all()
    # (1,2): neither line has deficit: any deficient cell, in proportion (5 : 2)
    anywhere = cells[2::3]
    assert set(anywhere) == {3, 9} and 0.55 < np.mean(anywhere == 3) < 0.85


def test_row_updates_never_fill_a_cell_another_table_rules_out():
    # b is a function of a for a < 2 (a=0 ⇒ b=0, a=1 ⇒ b=1), a=2 ⇒ b ≥ 2: 8 of the 12 (a, b)
    # cells are empty. Three attributes follow b in the targets but not in the start, so rows
    # must change b; a move that ignores a creates impossible (a, b) rows, a guarded one not.
    rng = np.random.default_rng(0)
    n, sizes = 6_000, np.array([3, 4, 3, 3, 3])

    def rows(p_three, follows):
        a = rng.choice(3, n, p=[0.4, 0.3, 0.3])
        b = np.where(a < 2, a, np.where(rng.random(n) < p_three, 3, 2))
        others = [np.where(rng.random(n) < follows, (b + k) % 3, rng.integers(0, 3, n))
                  for k in range(3)]
        return np.stack([a, b, *others], axis=1)

    def counts(codes, pair):
        keys = codes[:, pair[0]] * sizes[pair[1]] + codes[:, pair[1]]
        return np.bincount(keys, minlength=sizes[pair[0]] * sizes[pair[1]])

    start, truth = rows(0.2, 0.0), rows(0.8, 0.8)
    targets = {pair: counts(truth, pair) for pair in itertools.combinations(range(5), 2)}
    one_way = [np.bincount(truth[:, a], minlength=size) for a, size in enumerate(sizes)]
    zero = targets[(0, 1)] == 0
    assert zero.sum() == 8
    impossible = {}
    for guarded in (False, True):
        codes = start.copy()
        possible = possible_cells(targets, sizes) if guarded else None
        # The guard is under test, not the schedule: the five sweeps these counts were set for.
        update_rows(codes, targets, sizes, np.random.default_rng(1), possible=possible,
                    config=RowUpdateConfig(max_sweeps=5))
        after_updates = int(counts(codes, (0, 1))[zero].sum())
        match_one_way(codes, one_way, sizes, np.random.default_rng(2), possible)
        impossible[guarded] = (after_updates, int(counts(codes, (0, 1))[zero].sum()))
    assert impossible[True][0] == 0 and impossible[False][0] >= 20
    # Exact 1-way counts can force a few (rounding, or targets a row can't reach otherwise).
    assert impossible[True][1] * 3 < impossible[False][1]


def test_shrinkage_keeps_a_departure_noise_cannot_explain_whole():
    target = np.array([[5_000.0, 50.0], [50.0, 5.0]])
    departure = np.array([[0.0, 10.0], [-10.0, (DEFAULTS.signal_sigmas + 1) * 20.0]])
    shrunk = shrink_towards(target + departure, target, sigma=20.0)
    assert shrunk[1, 1] == target[1, 1] + departure[1, 1]
    assert abs(shrunk[0, 1] - target[0, 1]) < abs(departure[0, 1])


def test_tree_start_is_the_per_group_rounding_and_shuffle():
    """sample_tree rounds all groups of a parent at once: the same rows, bit for bit, as rounding
    and permuting each parent value's group on its own (wide parent, wide child, empty rows)."""
    sizes = [300, 4, 700]
    rng = np.random.default_rng(5)
    one_way = tuple(rng.random(s) * 100 for s in sizes)
    two_way = {(0, 1): rng.random((300, 4)) * (rng.random((300, 1)) > 0.1),
               (1, 2): rng.random((4, 700)) * 9}
    two_way[(0, 2)] = rng.random((300, 700))
    marginals = Marginals(one_way, two_way)
    order, parents = np.array([0, 1, 2]), np.array([-1, 0, 0])
    rows = 5_000
    got = sample_tree(marginals, order, parents, rows, np.random.default_rng(9))
    reference_rng = np.random.default_rng(9)
    expected = np.empty((rows, 3), dtype=np.int64)
    expected[:, 0] = reference_rng.permutation(
        np.repeat(np.arange(300), round_to_total(one_way[0], rows)))
    for child in (1, 2):
        table_ = marginals.table(0, child)
        by_parent = np.argsort(expected[:, 0], kind="stable")
        values = []
        for value, size in enumerate(np.bincount(expected[:, 0], minlength=300)):
            if size:
                row = table_[value] if table_[value].sum() > 0 else one_way[child]
                counts = round_to_total(row, size)
                values.append(reference_rng.permutation(np.repeat(np.arange(len(row)), counts)))
        expected[by_parent, child] = np.concatenate(values)
    np.testing.assert_array_equal(got, expected)
