"""Decoding calibration of wide attributes: exchangeable groups of categories
(dp_dask.data.decode)."""

from __future__ import annotations

import numpy as np
import pytest

from dp_dask.copula.correlation import RHO_MAX, nearest_correlation, psd_correlation_factor
from dp_dask.data.decode import _latent_draws, calibrate_offsets, decode_latent, exchangeable_groups
from dp_dask.data.schema import load_schema

SIZES = (300, 4)
COUPLED = 100  # categories of the wide attribute with their own cross-correlations


@pytest.fixture(scope="module")
def wide_model():
    """A repaired correlation like the pairwise rule's: -RHO_MAX within attributes; the first
    COUPLED categories of the wide attribute correlate with the small one, the rest do not (as
    shrinkage leaves rare categories), so those form one exchangeable group after the repair."""
    rng = np.random.default_rng(0)
    d = sum(SIZES)
    pairwise = np.zeros((d, d))
    pairwise[:300, :300] = pairwise[300:, 300:] = -RHO_MAX
    cross = rng.normal(0, 0.15, size=(COUPLED, 4))
    pairwise[:COUPLED, 300:] = cross
    pairwise[300:, :COUPLED] = cross.T
    np.fill_diagonal(pairwise, 1.0)
    correlation = nearest_correlation(pairwise)
    marginals = np.concatenate([rng.dirichlet(np.full(s, 2.0)) for s in SIZES])
    schema = load_schema({"attributes": [
        {"name": f"a{i}", "categories": [str(c) for c in range(s)]} for i, s in enumerate(SIZES)]})
    return correlation, marginals, schema


def test_groups_of_a_repaired_matrix_and_near_misses(wide_model):
    correlation = wide_model[0]
    block = correlation[:300, :300]
    groups = exchangeable_groups(block)
    assert [sorted(g.tolist()) for g in groups] == [list(range(COUPLED, 300))]
    # One correlation off by 1e-6 (above the tolerance): its two categories leave the group.
    nudged = block.copy()
    nudged[150, 0] += 1e-6
    nudged[0, 150] += 1e-6
    (group,) = exchangeable_groups(nudged)
    assert 150 not in group and len(group) >= 300 - COUPLED - 2
    assert [g.tolist() for g in exchangeable_groups(np.eye(3))] == [[0, 1, 2]]


def test_grouped_draws_have_the_block_correlation(wide_model):
    block = wide_model[0][:300, :300]
    groups = exchangeable_groups(block)
    single = np.setdiff1d(np.arange(300), np.concatenate(groups))
    order = np.concatenate([single, *groups])
    draws = 40_000
    latent = _latent_draws(block, order, groups, draws, np.random.default_rng(1))
    empirical = np.corrcoef(latent.T.astype(np.float64))
    expected = block[np.ix_(order, order)]
    # Sample correlations: standard error about (1 - ρ²)/√draws ≤ 0.005.
    assert np.abs(empirical - expected).max() < 6 / np.sqrt(draws)
    assert np.abs(latent.std(axis=0) - 1).max() < 6 / np.sqrt(2 * draws)
    # No group: the whole block's triangular factor, applied in place.
    plain = _latent_draws(block, np.arange(300), [], draws, np.random.default_rng(2))
    assert np.abs(np.corrcoef(plain.T.astype(np.float64)) - block).max() < 6 / np.sqrt(draws)


def test_grouped_calibration_matches_fresh_draws_and_keeps_other_attributes(wide_model):
    correlation, marginals, schema = wide_model
    draws = 50_000
    plain = calibrate_offsets(correlation, marginals, schema, draws=draws, seed=0)
    grouped = calibrate_offsets(correlation, marginals, schema, draws=draws, seed=0,
                                grouped_from=100)
    # The small attribute draws the same normals either way: bit for bit the same offsets.
    np.testing.assert_array_equal(grouped[300:], plain[300:])
    assert not np.array_equal(grouped[:300], plain[:300])
    # Fresh draws from the whole block's factor: frequencies within 5 Monte-Carlo errors (of
    # the check's draws and of the calibration's).
    factor = psd_correlation_factor(correlation[:300, :300])
    latent = np.random.default_rng(7).standard_normal((draws, 300)) @ factor.T
    codes = decode_latent(np.hstack([latent, np.zeros((draws, 4))]), grouped, schema)
    frequency = np.bincount(codes[:, 0], minlength=300) / draws
    target = marginals[:300]
    assert np.all(np.abs(frequency - target) < 5 * np.sqrt(2 * target * (1 - target) / draws))


def test_an_attribute_that_is_one_group_with_a_constant_mean():
    """The pairwise rule with no dependence: every ρ within the attribute -1, repaired to the
    equicorrelation -1/(s - 1), so the group mean has variance 0 (up to rounding)."""
    s, draws = 1_000, 20_000
    pairwise = np.full((s, s), -RHO_MAX)
    np.fill_diagonal(pairwise, 1.0)
    correlation = nearest_correlation(pairwise)
    assert [len(g) for g in exchangeable_groups(correlation)] == [s]
    marginals = np.random.default_rng(3).dirichlet(np.full(s, 2.0))
    schema = load_schema({"attributes": [{"name": "a", "categories": [str(c) for c in range(s)]}]})
    offsets = calibrate_offsets(correlation, marginals, schema, draws=draws, seed=0)
    assert np.isfinite(offsets).all()
    latent = np.random.default_rng(8).standard_normal((draws, s)) @ psd_correlation_factor(
        correlation).T
    frequency = np.bincount(decode_latent(latent, offsets, schema)[:, 0], minlength=s) / draws
    error = np.sqrt(2 * marginals * (1 - marginals) / draws)
    assert np.all(np.abs(frequency - marginals) < 5 * error + 1 / draws)
