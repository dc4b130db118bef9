"""The balanced resample: swaps that bring a resample's marginals to the estimate's (no Dask)."""

from __future__ import annotations

import itertools

import numpy as np

from dp_dask.postprocess.balance import balanced_resample, weighted_tables
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
    # every output row is a candidate row
    known = {row.tobytes() for row in codes}
    assert all(row.tobytes() in known for row in balanced)
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
