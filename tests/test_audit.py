"""Statistical audit: the real OpenDP noise path on a worst-case neighbouring pair.

One released count, inputs c and c + 1 (a replaced row moves a count by 1; that is the worst case
per cell for both the L1 and the L2 sensitivity). σ = 3 per count is deliberately small (ε of 0.8
to 1.8 per count at δ = 1e-2 .. 1e-5) so that 3·10⁵ draws per input have power. The audit's
confidence bounds hold together with probability 1 − 1e-6, so a valid mechanism fails it at most
once in a million runs; the broken-mechanism check is seeded and deterministic.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from statsmodels.stats.proportion import proportion_confint

from dp_dask.privacy import ACCOUNTANTS, epsilon_spent, gaussian_noise, gaussian_rho
from dp_dask.privacy.audit import clopper_pearson, epsilon_at_delta, epsilon_lower_bounds

SIGMA = 3.0
DRAWS = 300_000
COUNT = 1_000
DELTAS = (1e-1, 3e-2, 1e-2, 1e-3, 1e-4, 1e-5)


def _claims(accountant: str) -> dict[float, float]:
    """The ε(δ) the accountant claims for one count (sensitivity 1) with noise σ = 3."""
    rho = gaussian_rho(SIGMA, 1.0, accountant)
    return {delta: epsilon_spent(rho, delta, accountant) for delta in DELTAS}


def _discrete_gaussian(sigma: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """Exact-pmf discrete Gaussian by inverse CDF (seeded; for the broken-mechanism check)."""
    x = np.arange(-int(40 * sigma) - 1, int(40 * sigma) + 2)
    p = np.exp(-(x**2) / (2 * sigma**2))
    return rng.choice(x, size=size, p=p / p.sum())


def test_clopper_pearson_matches_statsmodels() -> None:
    n = 1000
    k = np.array([0, 1, 17, 500, 999, 1000])
    lower, upper = clopper_pearson(k, n, 0.01)
    # statsmodels' two-sided interval at level 2α has the one-sided α bounds as its ends.
    low, high = proportion_confint(k, n, alpha=0.02, method="beta")
    np.testing.assert_allclose(lower, np.nan_to_num(low), rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(upper, np.nan_to_num(high, nan=1.0), rtol=1e-9, atol=1e-15)


@pytest.fixture(scope="module")
def opendp_draws() -> tuple[np.ndarray, np.ndarray]:
    # The release path: gaussian_noise with the OpenDP sampler (threads, map cross-check).
    counts = np.full(DRAWS, COUNT, dtype=np.int64)
    return (gaussian_noise(counts, SIGMA, sensitivity=1.0),
            gaussian_noise(counts + 1, SIGMA, sensitivity=1.0))


@pytest.mark.parametrize("accountant", ACCOUNTANTS)
def test_audit_of_opendp_discrete_gaussian_stays_below_the_claim(
        opendp_draws: tuple[np.ndarray, np.ndarray], accountant: str) -> None:
    claims = _claims(accountant)
    found = epsilon_lower_bounds(*opendp_draws, DELTAS)
    for delta in DELTAS:
        assert found[delta] <= claims[delta], (delta, found[delta], claims[delta])
    # The audit is not vacuous: it finds a clearly positive ε at the larger δ.
    assert found[1e-3] > 0.4


def test_audit_detects_half_the_noise() -> None:
    # A broken mechanism: the same claim (σ = 3) but noise with σ = 1.5.
    rng = np.random.default_rng(20240617)
    broken = (COUNT + _discrete_gaussian(SIGMA / 2, DRAWS, rng),
              COUNT + 1 + _discrete_gaussian(SIGMA / 2, DRAWS, rng))
    found = epsilon_lower_bounds(*broken, DELTAS)
    for accountant in ACCOUNTANTS:
        claims = _claims(accountant)
        refuted = [d for d in DELTAS if found[d] > claims[d]]
        assert refuted, (accountant, found, claims)


def test_audit_detects_an_understated_sensitivity() -> None:
    # Right noise, but neighbours that move the count by 3 where the claim assumed 1.
    rng = np.random.default_rng(7)
    noise = _discrete_gaussian(SIGMA, 2 * DRAWS, rng)
    found = epsilon_lower_bounds(COUNT + noise[:DRAWS], COUNT + 3 + noise[DRAWS:], DELTAS)
    assert any(found[d] > _claims("exact")[d] for d in DELTAS)
    assert math.isfinite(found[1e-1])


def test_item6_an_epsilon_dp_claim_read_at_a_larger_delta() -> None:
    # Randomized response is ε-DP and lies on the curve every ε-DP mechanism lies below: its
    # hockey-stick divergence at e^ε' is exactly the δ the curve gives ε' for.
    epsilon, at = 2.0, 0.05
    read = epsilon_at_delta(epsilon, 0.0, at)
    p, q = math.exp(epsilon) / (1 + math.exp(epsilon)), 1 / (1 + math.exp(epsilon))
    assert p - math.exp(read) * q == pytest.approx(at, rel=1e-12)
    assert read == pytest.approx(math.log(math.exp(2) - 0.05 * (1 + math.exp(2))))  # 1.942
    # an (ε, δ₀) claim: the same at δ₀, weaker (larger) above it; nothing below δ₀
    assert epsilon_at_delta(epsilon, 1e-6, 1e-6) == epsilon
    assert read < epsilon_at_delta(epsilon, 1e-6, at) < epsilon
    assert epsilon_at_delta(0.05, 0.0, at) == 0.0  # the whole curve below δ = 0.05
    with pytest.raises(ValueError, match="delta"):
        epsilon_at_delta(epsilon, 0.1, at)
