"""Candidate weights fitted to the noisy measurements by mirror descent (no Dask)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dp_dask.data.tables import Domain
from dp_dask.postprocess import reweight
from dp_dask.postprocess.config import BalanceConfig, ReweightConfig, RowUpdateConfig
from dp_dask.postprocess.consistency import Measurement
from dp_dask.postprocess.reweight import fit_weights

SIZES = np.array([3, 4, 5])
PAIRS = list(itertools.combinations(range(len(SIZES)), 2))


def dependent_rows(n: int, seed: int = 0) -> np.ndarray:
    """Attribute 1 mostly follows 0 and attribute 2 mostly follows 1."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, n)
    b = np.where(rng.random(n) < 0.8, a, rng.integers(0, 4, n))
    c = np.where(rng.random(n) < 0.8, b, rng.integers(0, 5, n))
    return np.stack([a, b, c], axis=1)


def table(codes: np.ndarray, clique: tuple[int, ...], weights: np.ndarray | None = None):
    return np.bincount(Domain(SIZES).index(codes, clique), weights=weights,
                       minlength=int(np.prod(SIZES[list(clique)])))


def measured(codes: np.ndarray, sigma: float, seed: int = 1) -> list[Measurement]:
    rng = np.random.default_rng(seed)
    cliques = [(a,) for a in range(len(SIZES))] + PAIRS
    return [Measurement(c, table(codes, c) + rng.normal(0, sigma, int(np.prod(SIZES[list(c)]))),
                        sigma) for c in cliques]


def gap(codes: np.ndarray, weights: np.ndarray, truth: np.ndarray) -> float:
    return sum(float(np.abs(table(codes, p, weights) - table(truth, p)).sum()) for p in PAIRS)


def independent_rows(codes: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(column) for column in codes.T], axis=1)


def objective(codes: np.ndarray, weights: np.ndarray, measurements: list[Measurement]) -> float:
    """Σ_t ‖A_t w − y_t‖² / σ_t², from the weighted tables."""
    return sum(float(((table(codes, m.attributes, weights) - m.values) ** 2).sum()) / m.sigma**2
               for m in measurements)


def test_the_compiled_passes_give_the_objective_and_its_gradient():
    truth = dependent_rows(2_000)
    candidates = independent_rows(truth, 7)
    measurements = measured(truth, 30.0)
    rng = np.random.default_rng(8)
    weights = rng.random(len(candidates))
    codes = np.asfortranarray(candidates)
    tables = reweight._flatten(measurements, SIZES)
    loss, cells = reweight._loss_and_cells(codes, weights, tables)
    gradient = reweight._row_gradient(codes, cells, tables)
    assert loss == pytest.approx(objective(candidates, weights, measurements), rel=1e-12)
    # The same sums in the same order as numpy's bincounts and gathers, table after table (6
    # tables: a group of the gradient's and a rest of 2; 2 000 rows: chunks of keys and a rest).
    expected = np.zeros(len(candidates))
    for m, start in zip(measurements, tables.offsets):
        keys = Domain(SIZES).index(candidates, m.attributes)
        counts = np.bincount(keys, weights=weights, minlength=m.values.size)
        table_cells = cells[start:start + m.values.size]
        np.testing.assert_array_equal(table_cells, (counts - m.values) * (2.0 / m.sigma**2))
        expected += table_cells[keys]
    np.testing.assert_array_equal(gradient, expected)
    # The objective is quadratic: its difference across ±d is exactly twice the slope along d.
    d = rng.normal(0, 0.1, len(candidates))
    assert objective(candidates, weights + d, measurements) - objective(
        candidates, weights - d, measurements) == pytest.approx(2 * gradient @ d, rel=1e-9)


def test_a_three_way_measurement_is_fitted_through_a_derived_column():
    codes = dependent_rows(3_000)
    truth = table(codes, (0, 1, 2))
    start = independent_rows(codes, seed=3)
    weights = np.ones(len(start))
    three_way = Measurement((0, 1, 2), truth, 1.0)
    fitted = fit_weights(start, [three_way], SIZES, weights, iterations=50)
    before = np.abs(table(start, (0, 1, 2), weights) - truth).sum()
    after = np.abs(table(start, (0, 1, 2), fitted) - truth).sum()
    assert after < 0.2 * before and fitted.sum() == pytest.approx(weights.sum())
    # the derived column's cells are the triple's, row-major
    pairs_codes, pairs, sizes = reweight.as_pairs(start, [three_way], SIZES)
    np.testing.assert_array_equal(Domain(sizes).index(pairs_codes, pairs[0].attributes),
                                  Domain(SIZES).index(start, (0, 1, 2)))


def test_the_fit_moves_weight_to_the_candidates_the_measurements_support():
    n = 10_000
    truth = dependent_rows(n)
    # Half the candidates are real rows, half independent ones: the fit must find which.
    candidates = np.concatenate([dependent_rows(n, seed=2), independent_rows(truth, 3)])
    start = np.full(2 * n, 0.5)
    fitted = fit_weights(candidates, measured(truth, 10.0), SIZES, start)
    assert fitted.sum() == pytest.approx(n)
    assert gap(candidates, fitted, truth) < 0.3 * gap(candidates, start, truth)
    assert fitted[:n].sum() > 0.75 * n


def test_each_iteration_lowers_the_objective():
    truth = dependent_rows(5_000)
    candidates = independent_rows(truth, 4)
    measurements = measured(truth, 30.0)
    losses = []
    weights = np.ones(len(candidates))
    for _ in range(6):
        weights = fit_weights(candidates, measurements, SIZES, weights, iterations=1)
        losses.append(objective(candidates, weights, measurements))
    assert all(later < earlier for earlier, later in zip(losses, losses[1:]))


def test_a_precise_measurement_outweighs_a_noisy_one_of_the_same_table():
    truth = dependent_rows(5_000)
    candidates = np.concatenate([truth, independent_rows(truth, 5)])
    exact = table(truth, (0, 1))
    independent = table(independent_rows(truth, 6), (0, 1))
    fitted = fit_weights(candidates, [Measurement((0, 1), exact, 5.0),
                                      Measurement((0, 1), independent, 500.0)],
                         SIZES, np.full(len(candidates), 0.5), iterations=200)
    got = table(candidates, (0, 1), fitted)
    assert np.abs(got - exact).sum() < 0.1 * np.abs(got - independent).sum()


def test_rows_that_already_fit_keep_their_weights():
    truth = dependent_rows(3_000)
    exact = [Measurement(c, table(truth, c).astype(float), 1.0)
             for c in [(0,), (1,), (2,)] + PAIRS]
    np.testing.assert_allclose(fit_weights(truth, exact, SIZES, np.ones(3_000)), 1.0)
    start = np.random.default_rng(0).random(3_000)
    assert fit_weights(truth, exact, SIZES, start, iterations=0) is start


def test_the_fit_stops_later_the_less_noise_there_is():
    shipped = ReweightConfig()
    steps = shipped.fit_iterations
    reference = 1 / np.sqrt(shipped.reference_precision)  # one measurement of that precision
    assert reweight.iterations_for([reference]) == steps
    # Precision adds over measurements; the count grows with its square root.
    assert reweight.iterations_for([reference / 2]) == 2 * steps
    assert reweight.iterations_for([reference * np.sqrt(2)] * 8) == 2 * steps
    # More noise than the reference: no fewer steps. Little noise: no more than the cap.
    assert reweight.iterations_for([reference * 2]) == steps
    assert reweight.iterations_for([1e-6]) == shipped.max_fit_iterations
    assert reweight.iterations_for([1e-6], ReweightConfig(max_fit_iterations=70)) == 70


@pytest.mark.parametrize(("config", "bad", "match"), [
    (RowUpdateConfig, {"max_sweeps": -1}, "RowUpdateConfig.max_sweeps must be an integer >= 0"),
    (BalanceConfig, {"max_reads": 1.5}, "BalanceConfig.max_reads must be an integer"),
    (BalanceConfig, {"pair_slack": True}, "pair_slack must be a number"),
    (ReweightConfig, {"reference_precision": 0.0}, "reference_precision must be a number > 0"),
])
def test_post_processing_configs_refuse_bad_values_naming_the_field(config, bad, match):
    with pytest.raises(ValueError, match=match):
        config(**bad)
