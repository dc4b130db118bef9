from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dp_dask.copula.model import fit_model
from dp_dask.copula.normals import CHUNK, fill_standard_normal
from dp_dask.data.schema import load_schema

SMALL_SCHEMA = Path(__file__).parent / "small_schema.json"
DRAWS = 4 * CHUNK * 61  # whole chunks and pairs across many chunks


def _normals(size: int, seed: int = 0) -> np.ndarray:
    return fill_standard_normal(np.random.PCG64(seed), np.empty(size, np.float32))


def test_draws_are_standard_normal():
    z = _normals(DRAWS + 3)  # an odd tail: the last chunk's pairs are cut
    assert np.isfinite(z).all()
    assert stats.kstest(z, "norm").pvalue > 1e-3
    # Tails out to the 1e-6 probability floor of the thresholds: counts within 4 sd.
    for t in (2.0, 3.0, 4.0):
        expected = 2 * stats.norm.sf(t) * z.size
        assert abs(np.count_nonzero(np.abs(z) > t) - expected) < 4 * np.sqrt(expected) + 1


def test_paired_draws_are_independent():
    """Each chunk's cosine and sine halves come from one (radius, angle) pair: their squares sum
    to a χ²(2), and they are uncorrelated, only if the pairing is right."""
    chunks = _normals(DRAWS).reshape(-1, CHUNK)
    cosine, sine = chunks[:, : CHUNK // 2].ravel(), chunks[:, CHUNK // 2 :].ravel()
    assert abs(np.corrcoef(cosine, sine)[0, 1]) < 4 / np.sqrt(cosine.size)
    assert stats.kstest(cosine.astype(np.float64) ** 2 + sine.astype(np.float64) ** 2,
                        "chi2", args=(2,)).pvalue > 1e-3
    # Neighbours within a half are independent draws too.
    assert abs(np.corrcoef(cosine[:-1], cosine[1:])[0, 1]) < 4 / np.sqrt(cosine.size)


def test_a_seed_gives_the_same_draws_and_others_differ():
    np.testing.assert_array_equal(_normals(10_001, 3), _normals(10_001, 3))
    assert not np.array_equal(_normals(10_001, 3), _normals(10_001, 4))
    # Filling a 2-d array is filling its flat view.
    np.testing.assert_array_equal(
        fill_standard_normal(np.random.PCG64(3), np.empty((7, 1_000), np.float32)).ravel(),
        _normals(7_000, 3))


def test_wrong_arrays_are_refused():
    with pytest.raises(ValueError, match="float32"):
        fill_standard_normal(np.random.PCG64(0), np.empty(10))
    with pytest.raises(ValueError, match="C-ordered"):
        fill_standard_normal(np.random.PCG64(0), np.empty((10, 10), np.float32).T)


def test_sampler_codes_alone_are_draws_codes():
    """A release without Zarr reads draw_codes; it must be draw's codes, dummies unbuilt."""
    schema = load_schema(SMALL_SCHEMA)
    codes = np.random.default_rng(0).integers(0, schema.sizes, size=(1_000, schema.m))
    dummies = np.zeros((1_000, schema.d))
    for i, offset in enumerate(schema.offsets):
        dummies[np.arange(1_000), offset + codes[:, i]] = 1
    sampler = fit_model(dummies.T @ dummies, schema, 1_000, calibration_draws=20_000).sampler()
    seed = np.random.SeedSequence(7)
    binary, codes = sampler.draw(2_000, seed)
    np.testing.assert_array_equal(sampler.draw_codes(2_000, seed), codes)
    # The dummies are the latent thresholds: one code's dummy is set in most rows.
    assert binary.shape == (2_000, schema.d) and set(np.unique(binary)) <= {0, 1}
    assert len(np.unique(codes[:, 0])) == schema.sizes[0]
