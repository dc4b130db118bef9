"""Raking the tree start towards every 2-way table, and the systematic resample (no Dask)."""

from __future__ import annotations

import itertools

import numpy as np

from dp_dask.data.tables import Domain
from dp_dask.postprocess.config import RakingConfig
from dp_dask.postprocess.consistency import Marginals, Measurement, ratio_or_zero
from dp_dask.postprocess.raking import DEFAULTS, rake, systematic_resample
from dp_dask.postprocess.reweight import fit_weights
from dp_dask.postprocess.rowupdate import sample_tree
from dp_dask.postprocess.tree import spanning_tree

SIZES = np.array([4, 4, 4, 4])


def latent_copies(n: int, seed: int = 0) -> np.ndarray:
    """Four attributes, each a copy of one hidden value with a quarter of it replaced by noise:
    every pair is equally dependent, which no spanning tree holds (a chain through a third
    attribute halves the dependence of the pairs it implies)."""
    rng = np.random.default_rng(seed)
    hidden = rng.integers(0, 4, n)
    return np.stack([np.where(rng.random(n) < 0.75, hidden, rng.integers(0, 4, n))
                     for _ in SIZES], axis=1)


def tables_of(codes: np.ndarray, weights: np.ndarray | None = None) -> dict:
    return {pair: np.bincount(Domain(SIZES).index(codes, pair), weights=weights,
                              minlength=int(np.prod(SIZES[list(pair)])))
            for pair in itertools.combinations(range(len(SIZES)), 2)}


def gap(tables: dict, targets: dict) -> float:
    return sum(float(np.abs(tables[pair] - targets[pair]).sum()) for pair in targets)


def test_raking_holds_the_tables_a_tree_start_misses():
    n = 20_000
    targets = tables_of(latent_copies(n))
    marginals = Marginals(tuple(np.bincount(c, minlength=4).astype(float)
                                for c in latent_copies(n).T),
                          {pair: t.reshape(4, 4).astype(float) for pair, t in targets.items()})
    rng = np.random.default_rng(1)
    candidates = sample_tree(marginals, *spanning_tree(marginals, len(SIZES)), n, rng)
    weights, passes = rake(candidates, targets, SIZES, rng)
    tree_gap = gap(tables_of(candidates), targets)
    assert gap(tables_of(candidates, weights), targets) < 0.01 * tree_gap
    assert passes <= DEFAULTS.max_passes
    resampled = candidates[systematic_resample(weights, n, rng)]
    assert len(resampled) == n
    # Resampling keeps the fit up to rounding each candidate's weight.
    assert gap(tables_of(resampled), targets) < 0.1 * tree_gap


def test_the_compiled_steps_give_numpys_weights_to_the_bit():
    codes = latent_copies(5_000).astype(np.uint8)  # the narrowest dtype, as candidates come
    targets = {pair: 1.1 * t + 0.5 for pair, t in tables_of(latent_copies(5_000, 1)).items()}
    weights, passes = rake(codes, targets, SIZES, np.random.default_rng(2),
                           config=RakingConfig(max_passes=3))
    rng, expected, pairs = np.random.default_rng(2), np.ones(len(codes)), list(targets)
    for _ in range(passes):
        for index in rng.permutation(len(pairs)):
            keys = Domain(SIZES).index(codes, pairs[index])
            current = np.bincount(keys, weights=expected, minlength=16)
            expected *= ratio_or_zero(targets[pairs[index]], current)[keys]
    assert passes == 3
    np.testing.assert_array_equal(weights, expected)


def test_rows_already_at_their_targets_keep_their_weights():
    codes = latent_copies(5_000)
    weights, passes = rake(codes, tables_of(codes), SIZES, np.random.default_rng(0))
    np.testing.assert_allclose(weights, 1.0)
    assert passes == 2  # the gap does not fall: stop after the first pass that cannot cut it


def test_raking_stops_early_where_its_gap_falls_slower_than_the_window_asks():
    """A gap that falls at less than keep_raking per window passes from the first (targets
    that disagree with each other) stops before window + 1 passes; one that falls fast goes on."""
    codes = latent_copies(5_000)
    rng = np.random.default_rng(8)
    disagreeing = {pair: t * rng.uniform(0.5, 1.5, t.size)
                   for pair, t in tables_of(latent_copies(5_000, 1)).items()}
    _, passes = rake(codes, disagreeing, SIZES, np.random.default_rng(0))
    assert 2 <= passes <= DEFAULTS.window
    tree_like = np.stack([latent_copies(5_000, 2)[:, 0]] * 2 + [latent_copies(5_000, 3)[:, 0]] * 2,
                         axis=1)
    _, passes = rake(tree_like, tables_of(latent_copies(5_000)), SIZES, np.random.default_rng(0))
    assert passes > DEFAULTS.window


def test_systematic_resample_rounds_each_weight_to_a_neighbouring_integer():
    rng = np.random.default_rng(3)
    weights = rng.random(1_000) ** 4  # skewed, some near zero
    rows = 2_500
    picked = systematic_resample(weights, rows, np.random.default_rng(7))
    expected = weights * rows / weights.sum()
    counts = np.bincount(picked, minlength=len(weights))
    assert counts.sum() == rows
    assert np.all(counts >= np.floor(expected) - 1e-9) and np.all(counts <= np.ceil(expected))
    np.testing.assert_array_equal(picked, systematic_resample(weights, rows,
                                                              np.random.default_rng(7)))
    assert len(systematic_resample(weights, 0, rng)) == 0


def test_equal_rows_are_raked_and_fitted_alike():
    """k equal candidates of weight w and one of weight k·w give the same estimate: what lets
    an estimate keep only the distinct rows of many draws (marginals.distinct_draws)."""
    n = 4_000
    rows = latent_copies(n, seed=3)
    draws = rows[np.random.default_rng(4).integers(0, 300, 3 * n)]  # many repeats
    targets = tables_of(rows)
    whole = np.ascontiguousarray(draws).view(np.dtype((np.void, draws.shape[1] * draws.itemsize)))
    _, first, inverse, counts = np.unique(whole.ravel(), return_index=True, return_inverse=True,
                                          return_counts=True)
    distinct = draws[first]
    weights, passes = rake(draws, targets, SIZES, np.random.default_rng(5))
    merged, passes_merged = rake(distinct, targets, SIZES, np.random.default_rng(5),
                                 start=counts.astype(float))
    assert passes == passes_merged
    np.testing.assert_allclose(np.bincount(inverse.ravel(), weights=weights), merged, rtol=1e-9)
    noisy = [Measurement(pair, table + np.random.default_rng(6).normal(0, 20, table.size), 20.0)
             for pair, table in targets.items()]
    fitted = fit_weights(draws, noisy, SIZES, weights, iterations=30)
    fitted_merged = fit_weights(distinct, noisy, SIZES, merged, iterations=30)
    assert not np.allclose(fitted_merged, merged)  # the fit moved the weights
    np.testing.assert_allclose(np.bincount(inverse.ravel(), weights=fitted), fitted_merged,
                               rtol=1e-6)
