"""Calibration, accounting and noise of dp_dask.privacy."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import opendp.prelude as dp
import pytest
from scipy.optimize import brentq

from dp_dask.privacy import (
    ADVANCED_COMPOSITION,
    BASIC_COMPOSITION,
    ZCDP_CONVERSION,
    NoisePlan,
    add_noise,
    advanced_composition_epsilon,
    clamp,
    gaussian_noise,
    plan_noise,
    query_count,
    zcdp_delta,
    zcdp_rho_for,
)
from dp_dask.privacy.split import render_split

dp.enable_features("contrib")

ADULT_M = 14
ADULT_DELTA = 2.0**-30
# Seeded checks use 5 standard errors. The OpenDP sampler cannot be seeded, so its checks use 6:
# a two-sided normal tail of ~2e-9 per check keeps spurious failures out of reach.
Z_SEEDED = 5.0
Z_UNSEEDED = 6.0


def test_query_count() -> None:
    assert [query_count(m) for m in (1, 2, 3, 14)] == [1, 3, 6, 105]


def test_advanced_composition_adult() -> None:
    k = query_count(ADULT_M)
    per_query = advanced_composition_epsilon(1.0, ADULT_DELTA, k)
    assert per_query == pytest.approx(0.01478, abs=1e-5)
    total = math.sqrt(2 * k * math.log(1 / ADULT_DELTA)) * per_query + k * per_query * math.expm1(
        per_query
    )
    assert total == pytest.approx(1.0, abs=1e-9)
    assert total <= 1.0  # rounding must never overspend the budget


def test_laplace_plan_adult_uses_advanced_composition() -> None:
    plan = plan_noise("laplace", 1.0, ADULT_DELTA, ADULT_M)
    assert plan.k == 105
    assert plan.accountant == ADVANCED_COMPOSITION
    assert plan.per_query_epsilon == advanced_composition_epsilon(1.0, ADULT_DELTA, 105)
    assert plan.scale == pytest.approx(2.0 / plan.per_query_epsilon, rel=1e-15)
    assert plan.sensitivity == 2.0
    assert plan.rho is None


def test_advanced_composition_large_epsilon_does_not_overflow() -> None:
    per_query = advanced_composition_epsilon(1e6, ADULT_DELTA, 105)
    assert 0 < per_query < 1e6 / 66  # below what the linear term alone allows
    assert plan_noise("laplace", 1e6, ADULT_DELTA, 4).accountant == BASIC_COMPOSITION


def test_laplace_plan_small_m_falls_back_to_basic_composition() -> None:
    # k = 3: sqrt(2k ln(1/δ)) ≈ 11 > k, so advanced composition would add more noise than ε/k.
    plan = plan_noise("laplace", 1.0, 1e-9, 2)
    assert advanced_composition_epsilon(1.0, 1e-9, 3) < 1.0 / 3
    assert plan.accountant == BASIC_COMPOSITION
    assert plan.per_query_epsilon == pytest.approx(1.0 / 3, rel=1e-15)
    assert plan.scale == pytest.approx(6.0, rel=1e-15)


def test_zcdp_rho_matches_notes() -> None:
    # The notes quote ρ ≈ 0.01497 (4 significant figures): allow half a unit in the last digit.
    assert abs(zcdp_rho_for(1.0, 1e-9) - 0.01497) <= 5e-6


@pytest.mark.parametrize(
    ("epsilon", "delta"), [(1.0, 1e-9), (0.1, 1e-6), (5.0, 1e-12), (0.01, 1e-5), (1.0, ADULT_DELTA)]
)
def test_zcdp_rho_round_trip(epsilon: float, delta: float) -> None:
    rho = zcdp_rho_for(epsilon, delta)
    achieved = zcdp_delta(rho, epsilon)
    assert achieved <= delta
    assert achieved == pytest.approx(delta, rel=1e-6)


def test_zcdp_delta_is_the_minimum_over_alpha() -> None:
    # Independent brute force: evaluate the CKS bound on a dense grid of α and take the minimum.
    rho, epsilon = 0.02, 1.0
    alpha = 1.0 + np.logspace(-6, 6, 400_001)
    log_delta = (
        (alpha - 1) * (alpha * rho - epsilon) - np.log(alpha - 1) + alpha * np.log1p(-1 / alpha)
    )
    grid_min = float(np.exp(log_delta.min()))
    ours = zcdp_delta(rho, epsilon)
    assert ours <= grid_min * (1 + 1e-12)
    assert ours == pytest.approx(grid_min, rel=1e-6)


def test_zcdp_monotonicity() -> None:
    epsilons = [0.05, 0.1, 0.5, 1.0, 2.0, 8.0]
    deltas = [1e-12, 1e-9, 1e-6, 1e-3]
    rho_by_eps = [zcdp_rho_for(e, 1e-9) for e in epsilons]
    rho_by_delta = [zcdp_rho_for(1.0, d) for d in deltas]
    assert all(a < b for a, b in zip(rho_by_eps, rho_by_eps[1:], strict=False))
    assert all(a < b for a, b in zip(rho_by_delta, rho_by_delta[1:], strict=False))
    delta_by_rho = [zcdp_delta(r, 1.0) for r in (0.001, 0.01, 0.1, 1.0)]
    delta_by_eps = [zcdp_delta(0.05, e) for e in (0.2, 0.5, 1.0, 2.0)]
    assert all(a < b for a, b in zip(delta_by_rho, delta_by_rho[1:], strict=False))
    assert all(a > b for a, b in zip(delta_by_eps, delta_by_eps[1:], strict=False))
    assert zcdp_delta(0.0, 1.0) == 0.0


def _opendp_epsilon(rho: float, delta: float) -> float:
    """OpenDP's ε for a ρ-zCDP Gaussian at fixed δ (its own CKS 2020 conversion)."""
    gauss = dp.m.make_gaussian(
        dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float), scale=1.0
    )
    # With scale 1 the zCDP loss is d_in² / 2, so d_in = sqrt(2ρ) gives a ρ-zCDP mechanism.
    assert gauss.map(1.0) == 0.5
    fixed = dp.c.make_fix_delta(dp.c.make_zCDP_to_approxDP(gauss), delta)
    epsilon, fixed_delta = fixed.map(math.sqrt(2 * rho))
    assert fixed_delta == delta
    return epsilon


@pytest.mark.parametrize("rho", [1e-4, 0.01, 0.3, 2.0])
@pytest.mark.parametrize("delta", [1e-5, 1e-9, 1e-12])
def test_zcdp_conversion_matches_opendp(rho: float, delta: float) -> None:
    # Our ε for (ρ, δ): invert zcdp_delta in ε. Bun-Steinke's ρ + 2 sqrt(ρ ln(1/δ)) is looser,
    # so it brackets from above.
    ours = brentq(
        lambda e: math.log(zcdp_delta(rho, e)) - math.log(delta),
        rho / 2,
        rho + 2 * math.sqrt(rho * math.log(1 / delta)),
        xtol=1e-300,
        rtol=1e-15,
    )
    theirs = _opendp_epsilon(rho, delta)
    assert ours == pytest.approx(theirs, rel=1e-6)
    # Both evaluate the same bound; allow only float rounding (OpenDP rounds outward) below it.
    assert ours >= theirs * (1 - 1e-12)


@pytest.mark.parametrize(("rho", "epsilon"), [(0.02, 1.0), (0.5, 1.0), (5.0, 10.0), (50.0, 100.0)])
def test_zcdp_delta_matches_opendp(rho: float, epsilon: float) -> None:
    # Includes ρ comparable to ε, the regime of large-ε ("almost no noise") runs.
    gauss = dp.m.make_gaussian(
        dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float), scale=1.0
    )
    theirs = dp.c.make_zCDP_to_approxDP(gauss).map(math.sqrt(2 * rho)).delta(epsilon)
    ours = zcdp_delta(rho, epsilon)
    assert ours == pytest.approx(theirs, rel=1e-9)
    assert ours <= theirs * (1 + 1e-12)  # OpenDP rounds outward; we must not exceed it


@pytest.mark.parametrize(
    ("epsilon", "delta"),
    [(1.0, 1e-9), (0.1, 1e-6), (5.0, 1e-12), (10.0, 1e-9), (1000.0, ADULT_DELTA)],
)
def test_gaussian_plan_is_within_budget_per_opendp(epsilon: float, delta: float) -> None:
    plan = plan_noise("gaussian", epsilon, delta, ADULT_M, accountant="zcdp")
    assert plan.accountant == "zcdp"
    assert ZCDP_CONVERSION in render_split(plan.split())
    assert plan.sensitivity == pytest.approx(math.sqrt(2 * 105), rel=1e-15)
    assert plan.scale == pytest.approx(plan.sensitivity / math.sqrt(2 * plan.rho), rel=1e-15)
    gauss = dp.m.make_gaussian(
        dp.vector_domain(dp.atom_domain(T="i64")), dp.l2_distance(T="f64"), scale=plan.scale
    )
    fixed = dp.c.make_fix_delta(dp.c.make_zCDP_to_approxDP(gauss), delta)
    spent, _ = fixed.map(plan.sensitivity)
    assert spent <= epsilon  # a vetted accountant confirms we are not less conservative
    assert spent == pytest.approx(epsilon, rel=1e-6)  # and that we do not waste budget


def _expected_moments(plan: NoisePlan, discrete: bool) -> tuple[float, float]:
    """Variance and 4th central moment of one cell's noise."""
    if plan.mechanism == "laplace":
        b = plan.scale
        if discrete:
            t = math.exp(-1 / b)
            var = 2 * t / (1 - t) ** 2
        else:
            var = 2 * b**2
        # The continuous 4th moment (24 b⁴) is within O(1/b²) of the discrete one: only used for SE.
        return var, 24 * b**4
    # The discrete Gaussian's variance differs from σ² by ~exp(-2π²σ²): nothing at σ ≈ 80.
    return plan.scale**2, 3 * plan.scale**4


def _check_noise(noise: np.ndarray, plan: NoisePlan, discrete: bool, z: float) -> None:
    n = noise.size
    var, mu4 = _expected_moments(plan, discrete)
    sd = math.sqrt(var)
    se_var = math.sqrt((mu4 - var**2) / n)
    se_sd = se_var / (2 * sd)  # delta method
    assert abs(noise.std() - sd) <= z * se_sd, (noise.std(), sd, se_sd)
    assert abs(noise.mean()) <= z * sd / math.sqrt(n), (noise.mean(), sd)


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_numpy_noise_scale(mechanism: str) -> None:
    plan = plan_noise(mechanism, 1.0, ADULT_DELTA, ADULT_M)
    noise = add_noise(np.zeros(200_000, dtype=np.int64), plan, sampler="numpy", seed=20240601)
    _check_noise(noise, plan, discrete=False, z=Z_SEEDED)


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_opendp_noise_scale(mechanism: str) -> None:
    plan = plan_noise(mechanism, 1.0, ADULT_DELTA, ADULT_M)
    noise = add_noise(np.zeros(50_000, dtype=np.int64), plan)
    assert np.array_equal(noise, np.round(noise))  # discrete samplers
    _check_noise(noise, plan, discrete=True, z=Z_UNSEEDED)


def test_opendp_noise_in_threaded_chunks_keeps_order_and_scale() -> None:
    # Large enough to be split across threads: every chunk must be its own independent draw,
    # returned in place (each count keeps its cell).
    plan = plan_noise("gaussian", 1.0, ADULT_DELTA, ADULT_M)
    counts = np.repeat(np.array([0, 10**9], dtype=np.int64), 60_000)
    noise = add_noise(counts, plan) - counts
    assert np.all(np.abs(noise) < 12 * plan.scale)  # a misplaced cell would be off by 1e9
    _check_noise(noise, plan, discrete=True, z=Z_UNSEEDED)
    first, second = noise[:60_000], noise[60_000:]
    assert abs(np.corrcoef(first, second)[0, 1]) < 0.03  # not the same draws reused


@pytest.mark.parametrize("sampler", ["opendp", "numpy"])
def test_add_noise_shape_dtype_and_no_clamping(sampler: str) -> None:
    plan = plan_noise("gaussian", 1.0, 1e-9, 3)
    counts = np.zeros(200, dtype=np.int32)
    counts[::7] = 5
    noisy = add_noise(counts, plan, sampler=sampler, seed=1 if sampler == "numpy" else None)
    assert noisy.shape == counts.shape
    assert noisy.dtype == np.float64
    assert (noisy < 0).any()  # ~170 zero cells, noise symmetric: P(none negative) < 2**-80


def test_opendp_sampler_handles_counts_beyond_int32() -> None:
    plan = plan_noise("laplace", 1.0, 1e-9, 1)  # b = 2
    counts = np.full(1000, 2**40 + 3, dtype=np.int64)
    noisy = add_noise(counts, plan)
    # |noise| > 200 has probability 1000·e^-100: any such offset would mean an overflow or cast.
    assert np.all(np.abs(noisy - counts) < 200)


def test_opendp_sampler_rejects_seed() -> None:
    plan = plan_noise("laplace", 1.0, 1e-9, 3)
    with pytest.raises(ValueError, match="cannot be seeded"):
        add_noise(np.zeros(6, dtype=np.int64), plan, seed=0)


def test_numpy_sampler_reproducible() -> None:
    plan = plan_noise("laplace", 1.0, 1e-9, 3)
    counts = np.arange(6, dtype=np.int64)
    first = add_noise(counts, plan, sampler="numpy", seed=7)
    assert np.array_equal(first, add_noise(counts, plan, sampler="numpy", seed=7))
    assert not np.array_equal(first, add_noise(counts, plan, sampler="numpy", seed=8))


def test_add_noise_rejects_bad_input() -> None:
    plan = plan_noise("laplace", 1.0, 1e-9, 3)
    with pytest.raises(ValueError, match="unknown sampler"):
        add_noise(np.zeros(6, dtype=np.int64), plan, sampler="random")
    with pytest.raises(ValueError, match="1-D integer"):
        add_noise(np.zeros((2, 3), dtype=np.int64), plan, sampler="numpy", seed=0)
    with pytest.raises(ValueError, match="1-D integer"):
        add_noise(np.zeros(6), plan, sampler="numpy", seed=0)


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_opendp_refuses_a_plan_its_map_disagrees_with(mechanism: str) -> None:
    plan = plan_noise(mechanism, 1.0, 1e-9, 3)
    tampered = dataclasses.replace(plan, scale=plan.scale / 2)
    with pytest.raises(RuntimeError, match="refusing to release"):
        add_noise(np.zeros(6, dtype=np.int64), tampered)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mechanism": "exponential"}, "unknown mechanism"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"epsilon": math.nan}, "epsilon"),
        ({"epsilon": math.inf}, "epsilon"),
        ({"delta": 0.0}, "delta"),
        ({"delta": 1.0}, "delta"),
        ({"delta": -1e-9}, "delta"),
        ({"delta": math.nan}, "delta"),
        ({"m": 0}, "m "),
        ({"m": -2}, "m "),
        ({"m": 2.5}, "m "),
        ({"m": True}, "m "),
    ],
)
def test_plan_noise_rejects_bad_arguments(kwargs: dict, message: str) -> None:
    args = {"mechanism": "gaussian", "epsilon": 1.0, "delta": 1e-9, "m": 3} | kwargs
    with pytest.raises(ValueError, match=message):
        plan_noise(**args)


def test_plan_to_json_and_frozen() -> None:
    for mechanism in ("laplace", "gaussian"):
        plan = plan_noise(mechanism, 1.0, 1e-9, ADULT_M)
        record = json.loads(json.dumps(plan.to_json()))
        assert {f.name for f in dataclasses.fields(NoisePlan)} == set(record)
        assert record["scale"] == plan.scale
        assert plan.split().parts[0].count == plan.k
        assert f"{plan.k} queries" in render_split(plan.split())
        with pytest.raises(dataclasses.FrozenInstanceError):
            plan.scale = 1.0  # type: ignore[misc]


def test_clamp() -> None:
    noisy = np.array([-3.5, 0.0, 2.25, -0.0, 10.0])
    clamped = clamp(noisy)
    assert np.array_equal(clamped, [0.0, 0.0, 2.25, 0.0, 10.0])
    assert noisy[0] == -3.5  # input untouched


def test_gaussian_noise_checks_opendp_map(monkeypatch: pytest.MonkeyPatch) -> None:
    counts = np.arange(10, dtype=np.int64)
    noisy = gaussian_noise(counts, 40.0, sensitivity=3.0)  # map: 9/(2·1600), as calibrated
    assert noisy.dtype == np.float64 and noisy.shape == counts.shape
    assert np.array_equal(noisy, np.round(noisy))
    real = dp.m.make_gaussian

    def halved(domain, metric, scale):  # an OpenDP that would draw half the noise asked for
        return real(domain, metric, scale=scale / 2)

    monkeypatch.setattr(dp.m, "make_gaussian", halved)
    with pytest.raises(RuntimeError, match="refusing to release"):
        gaussian_noise(counts, 40.0, sensitivity=3.0)


def test_gaussian_noise_samplers_and_arguments() -> None:
    counts = np.zeros(5, dtype=np.int64)
    with pytest.raises(ValueError, match="needs rng"):
        gaussian_noise(counts, 1.0, sensitivity=1.0, sampler="numpy")
    with pytest.raises(ValueError, match="cannot be seeded"):
        gaussian_noise(counts, 1.0, sensitivity=1.0, rng=np.random.default_rng(0))
    for bad in ({"sigma": 0.0}, {"sigma": math.inf}, {"sensitivity": -1.0}):
        args = {"sigma": 1.0, "sensitivity": 1.0} | bad
        with pytest.raises(ValueError, match="must be a finite number"):
            gaussian_noise(counts, args["sigma"], sensitivity=args["sensitivity"])
    with pytest.raises(ValueError, match="1-D integer"):
        gaussian_noise(np.zeros(3), 1.0, sensitivity=1.0)


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_add_noise_is_the_measurement_api(mechanism: str) -> None:
    # One code path: the plan's noise is gaussian_noise/laplace_noise with the plan's scale.
    from dp_dask.privacy import laplace_noise

    plan = plan_noise(mechanism, 1.0, 1e-9, 4)
    counts = np.arange(50, dtype=np.int64)
    ours = add_noise(counts, plan, sampler="numpy", seed=3)
    draw = gaussian_noise if mechanism == "gaussian" else laplace_noise
    sensitivity = plan.sensitivity if mechanism == "gaussian" else int(plan.sensitivity)
    direct = draw(counts, plan.scale, sensitivity=sensitivity, sampler="numpy",
                  rng=np.random.default_rng(3))
    assert np.array_equal(ours, direct)


def test_heterogeneous_gaussian_measurements_opendp() -> None:
    # Two tables with different σ, as a release that spends a ρ budget in shares would draw.
    small = gaussian_noise(np.zeros(20_000, dtype=np.int64), 2.5, sensitivity=math.sqrt(2))
    large = gaussian_noise(np.zeros(20_000, dtype=np.int64), 50.0, sensitivity=math.sqrt(2))
    for noise, sigma in ((small, 2.5), (large, 50.0)):
        se = sigma / math.sqrt(2 * noise.size)
        assert abs(noise.std() - sigma) <= Z_UNSEEDED * se * 1.05


def test_measurements_drawn_together_keep_their_own_scale_and_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A vector large enough to be split over threads, beside two small ones of other scales,
    # each offset so that a part returned to the wrong vector (or out of order) shows.
    from dp_dask.privacy.noise import gaussian_measurements

    scales = (3.0, 40.0, 7.0)
    vectors = [(1_000_000 * k + np.arange(size, dtype=np.int64), sigma, 1.0)
               for k, (size, sigma) in enumerate(zip((150_000, 20_000, 20_000), scales))]
    drawn = gaussian_measurements(vectors)
    assert [v.shape for v in drawn] == [c.shape for c, _, _ in vectors]
    for noisy, (counts, sigma, _) in zip(drawn, vectors):
        noise = noisy - counts
        se = sigma / math.sqrt(2 * noise.size)
        assert abs(noise.std() - sigma) <= Z_UNSEEDED * se * 1.05
        assert abs(noise.mean()) <= Z_UNSEEDED * sigma / math.sqrt(noise.size)
    # One map that is not what its σ implies refuses the whole call.
    real = dp.m.make_gaussian
    monkeypatch.setattr(dp.m, "make_gaussian", lambda domain, metric, scale: real(
        domain, metric, scale=scale / 2 if scale == 7.0 else scale))
    with pytest.raises(RuntimeError, match="refusing to release"):
        gaussian_measurements(vectors)
