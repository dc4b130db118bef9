"""The exact (Gaussian DP) and zCDP accountants, and the discrete Gaussian under the exact one."""

from __future__ import annotations

import math

import numpy as np
import opendp.prelude as dp
import pytest
from dp_accounting import gaussian_mechanism
from dp_accounting.pld import privacy_loss_distribution as pld
from scipy import integrate
from scipy.signal import fftconvolve

from dp_dask.privacy import (
    ACCOUNTANTS,
    accounting,
    epsilon_spent,
    gaussian_rho,
    gaussian_sigma,
    gdp_delta,
    gdp_epsilon,
    gdp_mu_for,
    plan_noise,
    query_count,
    rho_budget,
    sigma_table,
    zcdp_rho_for,
)
from dp_dask.privacy.split import render_split

dp.enable_features("contrib")

DELTA = 2.0**-30
GRID = [(1.0, DELTA), (0.5, DELTA), (5.0, DELTA), (0.1, 1e-6), (1.0, 1e-9), (10.0, 1e-12),
        (0.01, 1e-5), (100.0, DELTA)]


def test_brief_example_sigma_exact_vs_zcdp() -> None:
    # m = 15 attributes, k = 120 queries, ε = 1, δ = 2^-30: 85.3 (exact) instead of 89.7 (zCDP).
    assert query_count(15) == 120
    exact = plan_noise("gaussian", 1.0, DELTA, 15)
    zcdp = plan_noise("gaussian", 1.0, DELTA, 15, accountant="zcdp")
    assert exact.accountant == "exact" and zcdp.accountant == "zcdp"
    assert round(exact.scale, 1) == 85.3
    assert round(zcdp.scale, 1) == 89.7
    # The continuous Gaussian would need 85.316; the discrete one is charged at σ² − 4.
    continuous = exact.sensitivity / gdp_mu_for(1.0, DELTA)
    assert continuous == pytest.approx(85.3155, abs=1e-4)
    assert exact.scale == pytest.approx(math.sqrt(continuous**2 + 4), rel=1e-8)
    assert "GDP" in render_split(exact.split()) and "zCDP" in render_split(zcdp.split())
    assert exact.to_json()["accountant"] == "exact"


@pytest.mark.parametrize(("epsilon", "delta"), GRID)
def test_gdp_matches_dp_accounting(epsilon: float, delta: float) -> None:
    # Google's dp-accounting: analytic Gaussian (Balle-Wang 2018), sensitivity 1, σ = 1/μ.
    sigma = gaussian_mechanism.get_sigma_gaussian(epsilon, delta, tol=1e-14)
    mu = gdp_mu_for(epsilon, delta)
    assert 1 / mu == pytest.approx(sigma, rel=1e-8)
    assert mu * sigma <= 1 + 1e-8  # ours is never the less private one
    assert gdp_epsilon(mu, delta) == pytest.approx(
        gaussian_mechanism.get_epsilon_gaussian(1 / mu, delta, tol=1e-14), rel=1e-8, abs=1e-12)


def test_gdp_published_values() -> None:
    # Balle & Wang 2018, Thm. 8 (= Dong-Roth-Su 2022, Cor. 2.13): δ(ε) = Φ(−ε/μ + μ/2) −
    # e^ε Φ(−ε/μ − μ/2). At ε = 0 it is the total variation 2Φ(μ/2) − 1; δ(1) of 1-GDP is
    # 0.1269367375066 (the same formula in dp-accounting's gaussian_mechanism and PLD).
    assert gdp_delta(1.0, 0.0) == pytest.approx(math.erf(0.5 / math.sqrt(2)), rel=1e-12)
    assert gdp_delta(1.0, 1.0) == pytest.approx(0.126936737506644, rel=1e-9)
    # dp-accounting's PLD accountant (a different algorithm: discretised privacy loss) agrees.
    gauss = pld.from_gaussian_mechanism(1.0, value_discretization_interval=1e-4)
    for epsilon in (0.0, 0.5, 1.0, 2.0, 4.0):
        theirs = gauss.get_delta_for_epsilon(epsilon)
        assert gdp_delta(1.0, epsilon) == pytest.approx(theirs, rel=1e-6)
        assert gdp_delta(1.0, epsilon) <= theirs * (1 + 1e-9)  # theirs is pessimistic


@pytest.mark.parametrize("accountant", ACCOUNTANTS)
@pytest.mark.parametrize(("epsilon", "delta"), GRID)
def test_rho_budget_plug_back(accountant: str, epsilon: float, delta: float) -> None:
    rho = rho_budget(epsilon, delta, accountant)
    spent = epsilon_spent(rho, delta, accountant)
    assert spent <= epsilon  # never above the true root
    assert spent == pytest.approx(epsilon, rel=1e-6)  # and no budget wasted
    if accountant == "exact":
        # Plugged into the closed form directly, with the discreteness slack kept.
        inner = math.exp(math.log(delta) - accounting._EXACT_LOG_DELTA_SLACK)
        assert gdp_delta(math.sqrt(2 * rho), epsilon - accounting._EXACT_EPSILON_SLACK) <= inner
    else:
        assert rho == zcdp_rho_for(epsilon, delta)
    # Round trip the other way: a budget of ε_spent(ρ) is ρ again.
    assert rho_budget(spent, delta, accountant) == pytest.approx(rho, rel=1e-6)


@pytest.mark.parametrize(("rho", "delta"), [(1e-4, 1e-5), (0.01, 1e-9), (0.3, 1e-12), (2.0, 1e-5)])
def test_epsilon_spent_zcdp_matches_opendp(rho: float, delta: float) -> None:
    gauss = dp.m.make_gaussian(
        dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float), scale=1.0
    )
    fixed = dp.c.make_fix_delta(dp.c.make_zCDP_to_approxDP(gauss), delta)
    theirs, _ = fixed.map(math.sqrt(2 * rho))  # scale 1: ρ = d_in²/2
    ours = epsilon_spent(rho, delta, "zcdp")
    assert ours == pytest.approx(theirs, rel=1e-6)
    assert ours >= theirs * (1 - 1e-12)  # OpenDP rounds outward; we must not claim less


def test_monotonicity() -> None:
    epsilons = [0.05, 0.1, 0.5, 1.0, 2.0, 8.0]
    deltas = [1e-12, 1e-9, 1e-6, 1e-3]
    for accountant in ACCOUNTANTS:
        by_eps = [rho_budget(e, 1e-9, accountant) for e in epsilons]
        by_delta = [rho_budget(1.0, d, accountant) for d in deltas]
        assert all(a < b for a, b in zip(by_eps, by_eps[1:]))
        assert all(a < b for a, b in zip(by_delta, by_delta[1:]))
        spent_by_rho = [epsilon_spent(r, 1e-9, accountant) for r in (1e-3, 0.01, 0.1, 1.0)]
        spent_by_delta = [epsilon_spent(0.05, d, accountant) for d in deltas]
        assert all(a < b for a, b in zip(spent_by_rho, spent_by_rho[1:]))
        assert all(a > b for a, b in zip(spent_by_delta, spent_by_delta[1:]))
        assert epsilon_spent(0.0, 1e-9, accountant) == 0.0
    by_mu = [gdp_delta(mu, 1.0) for mu in (0.1, 0.5, 1.0, 3.0)]
    assert all(a < b for a, b in zip(by_mu, by_mu[1:]))
    # The exact curve allows more ρ than the zCDP conversion everywhere on the grid.
    for epsilon, delta in GRID:
        assert rho_budget(epsilon, delta, "exact") > rho_budget(epsilon, delta, "zcdp")


def test_charges_add_up_and_invert() -> None:
    # Two measurements sharing a budget: charges are additive, σ from a share pays that share.
    budget = rho_budget(1.0, DELTA)
    shares = [0.3 * budget, 0.7 * budget]
    sigmas = [gaussian_sigma(share, math.sqrt(2), "exact") for share in shares]
    charges = [gaussian_rho(s, math.sqrt(2), "exact") for s in sigmas]
    assert all(c <= s for c, s in zip(charges, shares))
    assert sum(charges) == pytest.approx(budget, rel=1e-12)
    assert epsilon_spent(sum(charges), DELTA) <= 1.0
    assert gaussian_rho(10.0, 2.0, "zcdp") == 4 / 200
    assert gaussian_rho(10.0, 2.0, "exact") == 4 / (2 * 96)
    for epsilon in (1e3, 1e9, 1e15):  # almost no noise: σ just above 2 under the exact charge
        plan = plan_noise("gaussian", epsilon, DELTA, 4)
        assert 2 < plan.scale < 2.01
        assert gaussian_rho(plan.scale, plan.sensitivity) <= plan.rho
    with pytest.raises(ValueError, match="sigma > 2"):
        gaussian_rho(2.0, 1.0, "exact")
    with pytest.raises(ValueError, match="unknown accountant"):
        rho_budget(1.0, DELTA, "rdp")


def test_sigma_table_and_cli(capsys: pytest.CaptureFixture[str]) -> None:
    rows = sigma_table(ms=(15,), epsilons=(1.0,))
    assert rows[0]["sigma_exact"] == plan_noise("gaussian", 1.0, DELTA, 15).scale
    assert rows[0]["sigma_zcdp"] == plan_noise("gaussian", 1.0, DELTA, 15,
                                                 accountant="zcdp").scale
    assert rows[0]["laplace_std"] == pytest.approx(
        plan_noise("laplace", 1.0, DELTA, 15).cell_std, rel=1e-12)
    accounting.main(["--table", "--m", "15", "--epsilon", "1"])
    out = capsys.readouterr().out
    assert "| 15 | 120 | 1 | 85.34 | 89.70 |" in out and "2^-30" in out


# --- the discrete Gaussian ---------------------------------------------------------------------


def _discrete_gaussian_pmf(sigma: float) -> np.ndarray:
    x = np.arange(-int(40 * sigma) - 1, int(40 * sigma) + 2)
    p = np.exp(-(x**2) / (2 * sigma**2))
    return p / p.sum()


def _discrete_delta(sigma: float, shifted: int, epsilon: float) -> float:
    """δ(ε) of N_Z(0, σ²)^d against the worst shift: ``shifted`` coordinates moved by 1.

    The privacy loss is (j + 2S)/(2σ²) with S a sum of j = ``shifted`` discrete Gaussians (their
    pmf convolved on the integers, no discretisation of the loss). FFT error is ~1e-14 absolute.
    """
    pmf = _discrete_gaussian_pmf(sigma)
    total, power, j = np.array([1.0]), pmf, shifted
    while j:
        if j & 1:
            total = np.clip(fftconvolve(total, power), 0, None)
        j >>= 1
        if j:
            power = np.clip(fftconvolve(power, power), 0, None)
    s = np.arange(total.size) - (total.size - 1) // 2
    loss = (shifted + 2 * s) / (2 * sigma**2)
    above = loss > epsilon
    return float(np.sum(total[above] * -np.expm1(epsilon - loss[above])))


def test_continuous_curve_is_not_valid_for_the_discrete_gaussian_as_is() -> None:
    # The reason for the σ² − 4 charge: at σ = 5, sensitivity 1, ε = 1 the discrete Gaussian's δ
    # is 4 % above the continuous Gaussian's (its privacy loss lives on a lattice of step 1/σ²).
    discrete = _discrete_delta(5.0, 1, 1.0)
    assert discrete > 1.03 * gdp_delta(1 / 5.0, 1.0)
    # dp-accounting's PLD of the discrete Gaussian (pessimistic) confirms the value.
    theirs = pld.from_discrete_gaussian_mechanism(5.0, value_discretization_interval=1e-6)
    assert theirs.get_delta_for_epsilon(1.0) == pytest.approx(discrete, rel=2e-3)
    # The charged curve (variance σ² − 4) covers it.
    assert discrete <= gdp_delta(math.sqrt(2 * gaussian_rho(5.0, 1.0)), 1.0)


@pytest.mark.parametrize("sigma", [2.2, 3.0, 5.0, 10.0])
@pytest.mark.parametrize("shifted", [1, 2, 7])
def test_discrete_curve_below_the_charged_curve(sigma: float, shifted: int) -> None:
    mu = math.sqrt(2 * gaussian_rho(sigma, math.sqrt(shifted), "exact"))
    for epsilon in np.linspace(0.0, 4.0, 41):
        charged = gdp_delta(mu, float(epsilon))
        if charged > 1e-12:  # above the FFT's error floor
            assert _discrete_delta(sigma, shifted, float(epsilon)) <= charged


def test_planned_release_within_budget_on_the_discrete_curve() -> None:
    # The real mechanism of plan_noise for m = 15, ε = 1: 240 cells move by 1 (worst case).
    plan = plan_noise("gaussian", 1.0, DELTA, 15)
    assert _discrete_delta(plan.scale, 2 * plan.k, 1.0) <= DELTA


def test_discrete_gaussian_is_close_to_a_rounded_continuous_one() -> None:
    # The lemma behind the exact accountant, checked numerically at a small s where Λ is visible:
    # N_Z(0, σ²) is within a pointwise factor Λ of R(N(0, σ² − s²)), R rounding n with
    # probability φ_s(z − n)/Θ_s(z − n), Θ_s(u) = Σ_m φ_s(u − m).
    sigma, s = 2.0, 0.6
    tau = math.sqrt(sigma**2 - s**2)
    q = math.exp(-2 * math.pi**2 * s**2)
    big_q = q / (1 - q)
    lam = (1 + 2 * big_q) / (1 - 2 * big_q)

    def phi(x: float, scale: float) -> float:
        return math.exp(-x * x / (2 * scale * scale)) / (scale * math.sqrt(2 * math.pi))

    def theta(u: float) -> float:
        return sum(phi(u - m, s) for m in range(-30, 31))

    ns = range(-12, 13)
    rounded = np.array([
        integrate.quad(lambda z, n=n: phi(z, tau) * phi(z - n, s) / theta(z - n),
                       n * tau**2 / sigma**2 - 12, n * tau**2 / sigma**2 + 12,
                       epsabs=0, epsrel=1e-12, limit=200)[0]
        for n in ns
    ])
    discrete = _discrete_gaussian_pmf(sigma)
    centre = (discrete.size - 1) // 2
    discrete = discrete[centre - 12:centre + 13]
    ratio = discrete / rounded
    assert np.all(ratio <= lam * (1 + 1e-9)) and np.all(ratio >= (1 - 1e-9) / lam)
    # Genuinely different distributions (the Gaussian smoothing makes the ripple far below Λ).
    assert ratio.max() - ratio.min() > 1e-6
    assert rounded.sum() == pytest.approx(1.0, abs=1e-6)
    # With s = 2, as used, Λ − 1 ~ 4e-34.
    assert accounting._LOG_LAMBDA < 1e-33
