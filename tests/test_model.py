"""Post-processing of noisy counts into the copula model."""

from __future__ import annotations

import numpy as np
import pytest

from dp_dask.copula.model import marginals_from_counts, project_to_total, shrink_dependence
from dp_dask.data.decode import calibrate_offsets, decode_latent
from dp_dask.data.schema import load_schema


@pytest.mark.parametrize("seed", range(5))
def test_projection_to_total_satisfies_the_optimality_conditions(seed):
    rng = np.random.default_rng(seed)
    cells = rng.normal(50, 80, size=40)
    total = 1_000.0
    projected = project_to_total(cells, total)
    assert projected.sum() == pytest.approx(total)
    assert projected.min() >= 0
    # KKT of min ||x - c||² s.t. x ≥ 0, Σx = total: one shift θ, x = max(c - θ, 0).
    shift = (cells - projected)[projected > 0]
    assert np.ptp(shift) < 1e-9
    assert np.all(cells[projected == 0] <= shift[0] + 1e-9)


def test_projection_keeps_an_exact_histogram():
    cells = np.array([3.0, 0.0, 7.0])
    np.testing.assert_allclose(project_to_total(cells, 10.0), cells)


def test_marginals_sum_to_one_per_attribute_and_stay_positive():
    schema = load_schema({"attributes": [{"name": "a", "categories": ["x", "y", "z"]},
                                         {"name": "b", "categories": ["p", "q"]}]})
    noisy = np.diag([600.0, -40.0, 420.0, 1010.0, 30.0])
    marginals = marginals_from_counts(noisy, schema, n_rows=1_000)
    assert marginals[:3].sum() == pytest.approx(1) and marginals[3:].sum() == pytest.approx(1)
    assert marginals.min() > 0
    # The common shift is 10 for a: 590/1000, floor for the negative cell, 410/1000.
    assert marginals[0] == pytest.approx(0.59, abs=1e-5)
    assert marginals[2] == pytest.approx(0.41, abs=1e-5)


def test_shrinkage_moves_small_departures_to_independence_only():
    p_a = np.array([0.01, 0.5, 0.3])
    p_b = np.array([0.02, 0.4, 0.3])
    p_ab = np.array([0.0030, 0.35, 0.0])  # noise-sized, strong positive, strong negative
    shrunk = shrink_dependence(p_ab, p_a, p_b, threshold=0.005)
    np.testing.assert_allclose(shrunk, [0.0002, 0.345, 0.005])


def test_decoding_calibration_reproduces_marginals_of_a_large_attribute():
    sizes = [3, 150]
    schema = load_schema({"attributes": [
        {"name": f"a{i}", "categories": [str(c) for c in range(s)]} for i, s in enumerate(sizes)]})
    rng = np.random.default_rng(1)
    marginals = np.concatenate([rng.dirichlet(np.full(s, 0.7)) for s in sizes])
    marginals = np.maximum(marginals, 1e-4)
    for o, s in zip(schema.offsets, schema.sizes):
        marginals[o : o + s] /= marginals[o : o + s].sum()
    correlation = np.eye(schema.d)
    offsets = calibrate_offsets(correlation, marginals, schema, draws=100_000, seed=0)
    # Fresh draws, not the calibration's: frequencies within 5 Monte-Carlo standard errors.
    draws = 100_000
    latent = np.random.default_rng(7).standard_normal((draws, schema.d))
    codes = decode_latent(latent, offsets, schema)
    for i, (o, s) in enumerate(zip(schema.offsets, schema.sizes)):
        frequency = np.bincount(codes[:, i], minlength=s) / draws
        target = marginals[o : o + s]
        standard_error = np.sqrt(target * (1 - target) / draws) + np.sqrt(target / 100_000)
        assert np.all(np.abs(frequency - target) < 5 * standard_error)
