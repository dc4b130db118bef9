import warnings

import numpy as np
import pytest
from scipy.special import ndtr, ndtri
from scipy.stats import multivariate_normal
from statsmodels.stats.correlation_tools import corr_nearest
from threadpoolctl import threadpool_limits

from dp_dask.copula.correlation import (
    RHO_MAX,
    Symmetry,
    _GeneralizedHessian,
    bvn_cdf,
    bvn_pdf,
    latent_correlation,
    nearest_correlation,
    psd_correlation_factor,
)

GRID = np.linspace(-3.0, 3.0, 13)  # includes 0
RHOS = [-0.999, -0.9, -0.5, 0.0, 0.3, 0.9, 0.999]


def _scipy_bvn(h: float, k: float, rho: float) -> float:
    return multivariate_normal([0.0, 0.0], [[1.0, rho], [rho, 1.0]]).cdf([h, k])


def _random_correlation(rng: np.random.Generator, d: int) -> np.ndarray:
    factor = rng.standard_normal((d, 3))
    cov = factor @ factor.T + np.diag(rng.uniform(0.2, 1.0, d))
    scale = 1.0 / np.sqrt(np.diag(cov))
    return cov * scale[:, None] * scale[None, :]


def _noisy_symmetric(rng: np.random.Generator, truth: np.ndarray, noise: float) -> np.ndarray:
    """Pairwise-noisy correlations: independent noise on each pair of a valid matrix."""
    a = truth + np.triu(rng.normal(0.0, noise, truth.shape), 1)
    a = np.clip(np.triu(a, 1), -1.0, 1.0)
    return a + a.T + np.eye(len(truth))


@pytest.mark.parametrize("rho", RHOS)
def test_bvn_cdf_matches_scipy(rho):
    # In two dimensions scipy's multivariate_normal.cdf does not integrate by QMC (maxpts,
    # abseps and releps are unused): it calls Genz's deterministic BVNU, accurate to ~1e-15.
    h, k = np.meshgrid(GRID, GRID)
    expected = np.array([_scipy_bvn(a, b, rho) for a, b in zip(h.ravel(), k.ravel())])
    np.testing.assert_allclose(bvn_cdf(h, k, rho).ravel(), expected, rtol=0, atol=1e-10)


def test_bvn_cdf_limits_and_zeros():
    rho = np.linspace(-0.99, 0.99, 9)
    # Φ2(0, 0; ρ) = ¼ + arcsin(ρ)/(2π) exactly.
    np.testing.assert_allclose(bvn_cdf(0.0, 0.0, rho), 0.25 + np.arcsin(rho) / (2 * np.pi),
                               rtol=0, atol=1e-15)
    # h = 0 or k = 0 use limits that must agree with tiny nudges on either side.
    for k in (-1.5, 0.7):
        for r in (-0.8, 0.4):
            at_zero = bvn_cdf(0.0, k, r)
            assert abs(at_zero - bvn_cdf(1e-9, k, r)) < 1e-9
            assert abs(at_zero - bvn_cdf(-1e-9, k, r)) < 1e-9
            assert bvn_cdf(k, 0.0, r) == pytest.approx(at_zero, abs=1e-15)  # symmetric
            assert at_zero == pytest.approx(_scipy_bvn(0.0, k, r), abs=1e-10)
    h, k = np.meshgrid(GRID, GRID)
    phi_h, phi_k = ndtr(h), ndtr(k)
    np.testing.assert_allclose(bvn_cdf(h, k, 1.0), np.minimum(phi_h, phi_k), atol=1e-15)
    np.testing.assert_allclose(bvn_cdf(h, k, -1.0), np.maximum(phi_h + phi_k - 1.0, 0.0),
                               atol=1e-15)
    # Continuity into the limits.
    np.testing.assert_allclose(bvn_cdf(h, k, 1.0 - 1e-12), bvn_cdf(h, k, 1.0), atol=1e-5)


def test_bvn_cdf_broadcasts():
    out = bvn_cdf(GRID[:, None], GRID[None, :], np.array(0.5))
    assert out.shape == (13, 13)
    np.testing.assert_allclose(out, out.T, atol=1e-15)
    assert np.ndim(bvn_cdf(0.3, -0.2, 0.1)) == 0


def test_bvn_pdf_is_density_and_rho_derivative():
    h, k = np.meshgrid(GRID, GRID)
    for rho in (-0.9, 0.0, 0.6):
        dist = multivariate_normal([0.0, 0.0], [[1.0, rho], [rho, 1.0]])
        np.testing.assert_allclose(bvn_pdf(h, k, rho), dist.pdf(np.dstack([h, k])),
                                   rtol=1e-12, atol=1e-300)
        eps = 1e-5
        slope = (bvn_cdf(h, k, rho + eps) - bvn_cdf(h, k, rho - eps)) / (2 * eps)
        np.testing.assert_allclose(bvn_pdf(h, k, rho), slope, rtol=0, atol=1e-8)
    assert bvn_pdf(1.0, 2.0, 1.0) == 0.0
    assert bvn_pdf(1.0, 1.0, 1.0) == np.inf


def test_latent_correlation_recovers_rho():
    p = np.array([0.02, 0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95, 0.98])
    rhos = np.array([-0.999, -0.99, -0.9, -0.5, 0.0, 0.3, 0.9, 0.99, 0.999])
    p_a, p_b, rho = (x.ravel() for x in np.meshgrid(p, p, rhos, indexing="ij"))
    h, k = ndtri(p_a), ndtri(p_b)
    p_ab = bvn_cdf(h, k, rho)
    est = latent_correlation(p_a, p_b, p_ab)
    assert np.all(np.abs(est) <= RHO_MAX)
    # ρ is determined to about (rounding error of Φ2 ≈ 1e-16) / φ2, so where φ2 ≥ 1e-8 an
    # error below 1e-6 is reachable. Elsewhere Φ2 is flat in ρ to double precision (e.g.
    # p_a = p_b = 0.02, ρ = -0.9: Φ2 ≈ 1e-17 for every ρ below it) and only the residual is
    # meaningful.
    conditioned = bvn_pdf(h, k, rho) >= 1e-8
    near_one = np.abs(rho) >= 0.99
    assert (conditioned & near_one).sum() >= 50  # |ρ| near 1 is really exercised
    np.testing.assert_array_less(np.abs(est - rho)[conditioned], 1e-6)
    np.testing.assert_array_less(np.abs(bvn_cdf(h, k, est) - p_ab)[~conditioned], 1e-12)


def test_latent_correlation_closed_form_at_median_split():
    # p_a = p_b = ½ (h = k = 0): Φ2 = ¼ + arcsin(ρ)/(2π), so ρ = sin(2π(p_ab - ¼)).
    rho = np.linspace(-0.999, 0.999, 41)
    p_ab = 0.25 + np.arcsin(rho) / (2 * np.pi)
    est = latent_correlation(np.full(41, 0.5), np.full(41, 0.5), p_ab)
    np.testing.assert_allclose(est, rho, rtol=0, atol=1e-9)


def test_latent_correlation_random_pairs_match_truth():
    rng = np.random.default_rng(7)
    n = 20_000
    p_a, p_b = rng.uniform(0.001, 0.999, n), rng.uniform(0.001, 0.999, n)
    rho = rng.uniform(-0.999, 0.999, n)
    # A case near an inflection of g, where the error estimate curvature·step² vanishes and
    # only the cap on the step length keeps the early acceptance honest.
    p_a, p_b = np.append(p_a, 0.3769292990443504), np.append(p_b, 0.1518864691628555)
    rho = np.append(rho, 0.10329355241383953)
    p_ab = bvn_cdf(ndtri(p_a), ndtri(p_b), rho)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every entry must converge
        est = latent_correlation(p_a, p_b, p_ab)
    pdf = bvn_pdf(ndtri(p_a), ndtri(p_b), rho)
    assert (pdf >= 1e-8).mean() > 0.95
    np.testing.assert_array_less(np.abs(est - rho)[pdf >= 1e-8], 1e-7)
    # Where Φ2 is steep, rounding allows ~1e-13: the default tol = 1e-10 must be met.
    np.testing.assert_array_less(np.abs(est - rho)[pdf >= 1e-3], 1e-9)


def test_latent_correlation_clips_to_frechet_bounds():
    p_ab = np.linspace(-0.2, 0.5, 141)  # bounds for (0.3, 0.6) are [0, 0.3]
    est = latent_correlation(np.full(p_ab.size, 0.3), np.full(p_ab.size, 0.6), p_ab)
    assert np.all(np.isfinite(est))
    assert np.all(np.abs(est) <= 1.0)
    assert np.all(np.diff(est) >= 0)
    assert np.all(np.diff(est[(p_ab > 0) & (p_ab < 0.3)]) > 0)
    assert est[0] == -RHO_MAX and est[-1] == RHO_MAX
    # Upper-left bound: p_a + p_b > 1 moves the lower bound to p_a + p_b - 1.
    est = latent_correlation(0.8, 0.7, np.array([0.4, 0.5, 0.7, 0.75]))
    assert est[0] == est[1] == -RHO_MAX and est[2] == est[3] == RHO_MAX
    # Degenerate marginals are clipped away from 0 and 1.
    est = latent_correlation(np.array([0.0, 1.0, 0.0]), np.array([0.5, 1.0, 0.0]),
                             np.array([0.0, 1.0, 0.0]))
    assert np.all(np.isfinite(est)) and np.all(np.abs(est) <= 1.0)


def test_latent_correlation_shape_and_errors():
    p = np.full((3, 4), 0.4)
    assert latent_correlation(p, p, p * p).shape == (3, 4)
    np.testing.assert_allclose(latent_correlation(p, p, p * p), 0.0, atol=1e-10)
    assert latent_correlation(np.array([]), np.array([]), np.array([])).shape == (0,)
    with pytest.raises(ValueError, match="finite"):
        latent_correlation(np.array([0.5]), np.array([0.5]), np.array([np.nan]))


def _check_correlation(c: np.ndarray) -> None:
    np.testing.assert_array_equal(c, c.T)
    np.testing.assert_allclose(np.diag(c), 1.0, rtol=0, atol=1e-14)
    assert np.linalg.eigvalsh(c)[0] >= -1e-8


def test_nearest_correlation_higham_example():
    # Higham (2002), section 4: the nearest correlation matrix to this matrix has
    # off-diagonals 0.7607 (adjacent) and 0.1573 (corner).
    a = np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.0, 1.0, 1.0]])
    c = nearest_correlation(a)
    _check_correlation(c)
    expected = np.array([[1.0, 0.7607, 0.1573], [0.7607, 1.0, 0.7607], [0.1573, 0.7607, 1.0]])
    np.testing.assert_allclose(c, expected, rtol=0, atol=1e-4)


@pytest.mark.parametrize("d", [5, 12, 25])
def test_nearest_correlation_matches_statsmodels(d):
    rng = np.random.default_rng(d)
    a = rng.uniform(-1.0, 1.0, (d, d))
    a = (a + a.T) / 2
    np.fill_diagonal(a, 1.0)
    assert np.linalg.eigvalsh(a)[0] < -0.05  # really not PSD
    c = nearest_correlation(a)
    _check_correlation(c)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # it stops at its iteration limit, long converged
        reference = corr_nearest(a, n_fact=10)
    assert np.linalg.norm(c - reference) < 1e-4
    # Optimality: no other correlation matrix tried is closer to a.
    assert np.linalg.norm(c - a) <= np.linalg.norm(reference - a) + 1e-6


def test_nearest_correlation_noisy_pairwise_and_identity():
    rng = np.random.default_rng(3)
    truth = _random_correlation(rng, 60)
    a = _noisy_symmetric(rng, truth, 0.2)
    assert np.linalg.eigvalsh(a)[0] < 0
    c = nearest_correlation(a)
    _check_correlation(c)
    # truth is itself a correlation matrix, so the nearest one cannot be farther from a.
    assert np.linalg.norm(c - a) <= np.linalg.norm(truth - a)
    valid = _random_correlation(rng, 40)
    np.testing.assert_allclose(nearest_correlation(valid), valid, rtol=0, atol=1e-12)
    with pytest.warns(RuntimeWarning, match="did not converge"):
        nearest_correlation(a, max_iter=1)
    floored = nearest_correlation(a, eig_floor=1e-3)
    assert np.linalg.eigvalsh(floored)[0] > 5e-4


def _alternating_projections(a: np.ndarray, floor: float, tol: float = 1e-13) -> np.ndarray:
    """Higham's (2002) plain alternating projections with Dykstra's correction: slow, but
    simple enough to serve as the reference."""
    y, correction = a.copy(), np.zeros_like(a)
    for _ in range(20_000):
        r = y - correction
        w, v = np.linalg.eigh(r)
        x = (v * np.maximum(w, floor)) @ v.T
        correction = x - r
        y_new = x.copy()
        np.fill_diagonal(y_new, 1.0)
        if np.linalg.norm(y_new - y) <= tol * np.linalg.norm(y):
            return y_new
        y = y_new
    raise AssertionError("reference alternating projections did not converge")


@pytest.mark.parametrize(("d", "floor"), [(50, 0.0), (120, 0.0), (120, 1e-2)])
def test_nearest_correlation_matches_alternating_projections(d, floor):
    rng = np.random.default_rng(d)
    a = _noisy_symmetric(rng, _random_correlation(rng, d), 0.2)
    assert np.linalg.eigvalsh(a)[0] < -1.0
    # Hundreds of small eigh: two BLAS threads on a loaded 2-core machine made this 30x slower.
    with threadpool_limits(limits=1, user_api="blas"):
        c = nearest_correlation(a, tol=1e-10, eig_floor=floor)
        reference = _alternating_projections(a, floor)
    _check_correlation(c)
    assert np.linalg.eigvalsh(c)[0] >= floor - 1e-10
    assert np.linalg.norm(c - reference) < 1e-6


def test_nearest_correlation_floor_is_a_shift():
    # {X ⪰ δI, diag X = 1} = δI + (1 - δ)·{correlation matrices}, and the Frobenius distance
    # scales with it, so the floored problem is the plain one for (A - δI)/(1 - δ), mapped back.
    rng = np.random.default_rng(8)
    a = _noisy_symmetric(rng, _random_correlation(rng, 40), 0.3)
    floor = 0.05
    shifted = nearest_correlation((a - floor * np.eye(40)) / (1.0 - floor), tol=1e-11)
    expected = floor * np.eye(40) + (1.0 - floor) * shifted
    np.testing.assert_allclose(nearest_correlation(a, tol=1e-11, eig_floor=floor), expected,
                               rtol=0, atol=1e-9)
    with pytest.raises(ValueError, match="eig_floor"):
        nearest_correlation(a, eig_floor=1.0)


@pytest.mark.parametrize("shift", [-0.8, 0.8])  # mostly negative / mostly positive spectrum
def test_generalized_hessian_is_the_derivative(shift):
    # Away from zero eigenvalues y ↦ diag((G + diag y)₊) is differentiable and V its Jacobian:
    # check V h against central differences, for both blocks being the smaller one.
    rng = np.random.default_rng(21)
    d = 30
    g = _noisy_symmetric(rng, _random_correlation(rng, d), 0.3) + shift * np.eye(d)
    w, p = np.linalg.eigh(g)
    positive = int((w > 0).sum())
    assert (positive < d / 2) == (shift < 0)

    def gradient(y: np.ndarray) -> np.ndarray:
        wy, py = np.linalg.eigh(g + np.diag(y))
        return (py**2) @ np.maximum(wy, 0.0)

    hessian = _GeneralizedHessian(w, p)
    for h in rng.standard_normal((3, d)):
        step = 1e-6
        numeric = (gradient(step * h) - gradient(-step * h)) / (2 * step)
        np.testing.assert_allclose(hessian(h), numeric, rtol=0, atol=1e-6)
    dense = np.column_stack([hessian(e) for e in np.eye(d)])
    np.testing.assert_allclose(hessian.diagonal, np.diag(dense), rtol=0, atol=1e-12)


def test_psd_correlation_factor_pd_input_unchanged():
    rng = np.random.default_rng(11)
    c = _random_correlation(rng, 25)
    factor = psd_correlation_factor(c)
    np.testing.assert_array_equal(factor, np.tril(factor))
    np.testing.assert_allclose(factor @ factor.T, c, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["uniform", "rank_one", "pairwise_bounds"])
def test_psd_correlation_factor_repairs_non_psd(kind):
    rng = np.random.default_rng(5)
    d = 50
    if kind == "uniform":
        a = rng.uniform(-1.0, 1.0, (d, d))
        a = (a + a.T) / 2
        np.fill_diagonal(a, 1.0)
    elif kind == "rank_one":
        a = np.ones((d, d))
    else:  # exclusive dummies solved pairwise: all off-diagonals at the lower bound
        a = np.full((d, d), -RHO_MAX)
        np.fill_diagonal(a, 1.0)
    factor = psd_correlation_factor(a)
    c = factor @ factor.T
    np.testing.assert_allclose(np.diag(c), 1.0, rtol=0, atol=1e-12)
    assert np.linalg.eigvalsh(c)[0] > 0
    if kind == "rank_one":  # PSD but singular: only the floored eigenvalues move
        np.testing.assert_allclose(c, a, rtol=0, atol=1e-3)
    with pytest.raises(ValueError, match="eig_floor"):
        psd_correlation_factor(a, eig_floor=0.0)


def _invariant_matrix(rng, ungrouped: int, sizes: list[int]) -> tuple[np.ndarray, list]:
    """A symmetric, indefinite matrix with unit diagonal that treats each group's members alike."""
    d = ungrouped + sum(sizes)
    starts = np.cumsum([ungrouped] + sizes)
    groups = [np.arange(a, b) for a, b in zip(starts[:-1], starts[1:])]
    reduced = rng.uniform(-0.6, 0.6, (ungrouped + len(sizes),) * 2)
    reduced = (reduced + reduced.T) / 2
    owner = np.concatenate([np.arange(ungrouped)] +
                           [np.full(len(g), ungrouped + k) for k, g in enumerate(groups)])
    a = reduced[np.ix_(owner, owner)]
    for g in groups:
        a[np.ix_(g, g)] = rng.uniform(-1.0 / len(g), 0.3)
    np.fill_diagonal(a, 1.0)
    return a[np.ix_(p := rng.permutation(d), p)], [np.sort(np.argsort(p)[g]) for g in groups]


@pytest.mark.parametrize(("ungrouped", "sizes", "floor"),
                         [(30, [40, 7], 0.0), (10, [60, 2, 25], 1e-2), (0, [50], 0.0)])
def test_reduced_nearest_correlation_is_the_full_one(ungrouped, sizes, floor):
    rng = np.random.default_rng(ungrouped + len(sizes))
    a, groups = _invariant_matrix(rng, ungrouped, sizes)
    symmetry = Symmetry.of(a)
    assert sorted(map(list, symmetry.groups)) == sorted(map(list, groups))
    np.testing.assert_allclose(symmetry.eigenvalues(a), np.linalg.eigvalsh(a), atol=1e-12)
    full = nearest_correlation(a, tol=1e-10, eig_floor=floor)
    reduced = nearest_correlation(a, tol=1e-10, eig_floor=floor, symmetry=symmetry)
    _check_correlation(reduced)
    assert np.linalg.eigvalsh(reduced)[0] >= floor - 1e-10
    np.testing.assert_allclose(reduced, full, rtol=0, atol=1e-8)


def test_no_symmetry_is_the_plain_problem():
    rng = np.random.default_rng(3)
    a = _noisy_symmetric(rng, _random_correlation(rng, 30), 0.3)
    assert Symmetry.of(a).groups == ()
    np.testing.assert_array_equal(nearest_correlation(a, symmetry=Symmetry(30)),
                                  nearest_correlation(a))


def test_factor_through_the_symmetry_is_the_full_one():
    rng = np.random.default_rng(5)
    a, _ = _invariant_matrix(rng, 20, [30, 4])
    c = nearest_correlation(a)  # on the PSD boundary: the floor acts
    symmetry = Symmetry.of(c)
    assert sorted(len(g) for g in symmetry.groups) == [4, 30]
    np.testing.assert_allclose(psd_correlation_factor(c, symmetry=symmetry),
                               psd_correlation_factor(c), rtol=0, atol=1e-10)
