"""Privacy calibration and noise for the released marginals.

We release ``k = m + C(m, 2)`` count queries over ``m`` attributes: every 1-way histogram and every
2-way contingency table. Neighbouring datasets differ by replacing one row (``n`` is public), so a
replaced row moves one count down and one count up in each histogram/table: L1 sensitivity 2 and
L2 sensitivity sqrt(2) per query. Noise is added once, on the driver, to the concatenated counts.

Two calibrations are offered:

* ``"laplace"``: each query gets a pure ``ε'``-DP (discrete) Laplace mechanism with ``b = 2/ε'``;
  the ``k`` queries compose by advanced composition (Dwork, Rothblum, Vadhan 2010) to ``(ε, δ)``,
  or by basic composition (``ε' = ε/k``, ``δ = 0``) when that gives the larger ``ε'`` (small k).
* ``"gaussian"``: one (discrete) Gaussian mechanism on all counts concatenated, whose L2
  sensitivity is ``sqrt(2k)``; it is ``ρ``-zCDP with ``ρ = 2k/(2σ²)``, and ``ρ`` is the largest
  value that the conversion of Canonne, Kamath, Steinke 2020 (Cor. 13) maps to ``(ε, δ)``-DP.

The released noise comes from OpenDP's vetted samplers; a seeded numpy sampler exists for tests.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.optimize import brentq

from dp_dask.counts import counts_from_queries, query_vector
from dp_dask.schema import Schema

MECHANISMS = ("laplace", "gaussian")
SAMPLERS = ("opendp", "numpy")
QUERY_L1_SENSITIVITY = 2.0  # one replaced row: one count -1, another +1
ADVANCED_COMPOSITION = "advanced composition (Dwork-Rothblum-Vadhan)"
BASIC_COMPOSITION = "basic composition (sequential, k·ε' = ε)"
ZCDP_CONVERSION = "zCDP, tight conversion (Canonne-Kamath-Steinke 2020)"
# Shaved off the solved ρ so that float rounding in the α search and in exp/log can never make the
# plan less conservative than an exact (or outward-rounded, as OpenDP's) evaluation of the bound.
_RHO_SAFETY = 1e-9
_MAP_RTOL = 1e-9
# Cells per OpenDP call below which threads cost more than they save (~10-25 µs per cell).
_MIN_NOISE_CHUNK = 50_000


@dataclass(frozen=True)
class NoisePlan:
    """How much noise each released cell gets, and the accounting that justifies it."""

    mechanism: str
    epsilon: float
    delta: float
    k: int
    scale: float
    per_query_epsilon: float | None
    rho: float | None
    accountant: str
    sensitivity: float

    def budget_split(self) -> str:
        """One sentence saying how (ε, δ) is spent across the k queries."""
        if self.mechanism == "laplace":
            total_delta = 0.0 if self.accountant == BASIC_COMPOSITION else self.delta
            return (
                f"each of {self.k} queries is {self.per_query_epsilon:.6g}-DP (Laplace b = "
                f"{self.scale:.6g} per cell, L1 sensitivity {self.sensitivity:g}); "
                f"{self.accountant} gives ({self.epsilon:g}, {total_delta:g})-DP overall"
            )
        return (
            f"one Gaussian mechanism on all {self.k} queries concatenated (sigma = "
            f"{self.scale:.6g} per cell, L2 sensitivity sqrt(2k) = {self.sensitivity:.6g}) is "
            f"{self.rho:.6g}-zCDP; the {self.accountant} gives "
            f"({self.epsilon:g}, {self.delta:g})-DP"
        )

    @property
    def cell_std(self) -> float:
        """Standard deviation of the noise on one count."""
        return math.sqrt(2.0) * self.scale if self.mechanism == "laplace" else self.scale

    def to_json(self) -> dict[str, Any]:
        """All fields plus the budget split, as JSON-serialisable values."""
        return {**asdict(self), "budget_split": self.budget_split()}


def query_count(m: int) -> int:
    """Number of released queries for ``m`` attributes: m histograms + C(m, 2) 2-way tables."""
    return m + m * (m - 1) // 2


def _check_epsilon_delta(epsilon: float, delta: float) -> None:
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")


def _advanced_total(per_query: float, delta: float, k: int) -> float:
    return math.sqrt(2 * k * math.log(1 / delta)) * per_query + k * per_query * math.expm1(
        per_query
    )


def _at_or_below_root(f: Callable[[float], float], x: float) -> float:
    """Step a root estimate x of an increasing f down, in growing steps, until f(x) <= 0."""
    step = 4 * np.finfo(float).eps
    while f(x) > 0:
        x *= 1 - step
        step = min(2 * step, 0.5)  # geometric, so bounded even if x was far off
    return x


def advanced_composition_epsilon(epsilon: float, delta: float, k: int) -> float:
    """Per-query ε' such that k-fold composition of ε'-DP mechanisms is (ε, δ)-DP.

    Solves ``ε = sqrt(2k ln(1/δ))·ε' + k·ε'(e^{ε'} − 1)`` (Dwork, Rothblum, Vadhan 2010), rounding
    so that plugging ε' back in never exceeds ε.
    """
    _check_epsilon_delta(epsilon, delta)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")

    def excess(per_query: float) -> float:
        return _advanced_total(per_query, delta, k) - epsilon

    # The linear term alone reaches ε at the first point; at ε' = 700, k·ε'(e^ε' − 1) ~ 1e307
    # exceeds any ε and expm1 still does not overflow. Either way the root lies in [0, hi].
    hi = min(epsilon / math.sqrt(2 * k * math.log(1 / delta)), 700.0)
    per_query = brentq(excess, 0.0, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps)
    return _at_or_below_root(excess, per_query)  # brentq may land a hair above the root


def _log_zcdp_delta(rho: float, epsilon: float) -> float:
    """log of the CKS 2020 Cor. 13 bound, at the minimising α = 1 + e^u."""

    # log δ(α) is convex in α, so the minimiser is the unique root of its increasing derivative.
    # In u = ln(α − 1) the derivative is nearly linear for α near 1 (ρ ≳ ε), where in α it is not.
    def slope(u: float) -> float:
        beta = math.exp(u)
        return (2 * beta + 1) * rho - epsilon + u - math.log1p(beta)

    # slope ~ ρ − ε + u as u → −∞ and ~ 2ρe^u as u → ∞: bracket by stepping out geometrically.
    lo = 0.0
    while slope(lo) >= 0:
        lo = 2 * lo - 1
    hi = math.log(max(1.0, (epsilon + 1 + rho) / (2 * rho) - 1))  # (2β+1)ρ − ε >= 1 > ln 2
    while slope(hi) <= 0:  # only float rounding at huge ε could get here
        hi = 2 * hi + 1
    u = brentq(slope, lo, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps)
    beta = math.exp(u)
    # Any α > 1 gives a valid bound, so an inexact root costs tightness, never validity.
    log_delta = beta * ((1 + beta) * rho - epsilon) - u + (1 + beta) * (u - math.log1p(beta))
    return min(log_delta, 0.0)


def zcdp_delta(rho: float, epsilon: float) -> float:
    """δ such that ρ-zCDP implies (ε, δ)-DP, by Canonne, Kamath, Steinke 2020, Cor. 13.

    ``δ = inf_{α>1} exp((α−1)(αρ−ε)) / (α−1) · (1 − 1/α)^α``.
    """
    if not (math.isfinite(rho) and rho >= 0):
        raise ValueError(f"rho must be a finite number >= 0, got {rho!r}")
    if not (math.isfinite(epsilon) and epsilon >= 0):
        raise ValueError(f"epsilon must be a finite number >= 0, got {epsilon!r}")
    if rho == 0:
        return 0.0
    return math.exp(_log_zcdp_delta(rho, epsilon))


def zcdp_rho_for(epsilon: float, delta: float) -> float:
    """Largest ρ (up to a 1e-9 relative safety margin) whose CKS 2020 conversion is (ε, δ)-DP."""
    _check_epsilon_delta(epsilon, delta)
    log_target = math.log(delta)

    def excess(rho: float) -> float:
        return _log_zcdp_delta(rho, epsilon) - log_target

    # Bun-Steinke 2016 (ε = ρ + 2 sqrt(ρ ln(1/δ))) is looser than CKS, so its ρ is a lower bracket.
    log_inv = math.log(1 / delta)
    lo = (math.sqrt(epsilon + log_inv) - math.sqrt(log_inv)) ** 2
    while excess(lo) > 0:  # only float rounding could get here; keep the bracket honest
        lo /= 2
    hi = 2 * lo
    while excess(hi) < 0:  # δ(ρ) is increasing in ρ
        hi *= 2
    rho = brentq(excess, lo, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps) * (1 - _RHO_SAFETY)
    return _at_or_below_root(excess, rho)


def plan_noise(mechanism: str, epsilon: float, delta: float, m: int) -> NoisePlan:
    """Calibrate per-cell noise so that releasing all k = m + C(m, 2) queries is (ε, δ)-DP."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown mechanism {mechanism!r}; expected one of {MECHANISMS}")
    _check_epsilon_delta(epsilon, delta)
    if isinstance(m, bool) or not isinstance(m, int | np.integer) or m < 1:
        raise ValueError(f"m (number of attributes) must be an integer >= 1, got {m!r}")
    k = query_count(int(m))
    if mechanism == "laplace":
        advanced = advanced_composition_epsilon(epsilon, delta, k)
        # For small k (roughly k < 2 ln(1/δ)) plain ε/k is larger, hence less noise, and pure DP.
        basic = epsilon / k
        per_query, accountant = (
            (advanced, ADVANCED_COMPOSITION) if advanced >= basic else (basic, BASIC_COMPOSITION)
        )
        return NoisePlan(
            mechanism="laplace",
            epsilon=float(epsilon),
            delta=float(delta),
            k=k,
            scale=QUERY_L1_SENSITIVITY / per_query,
            per_query_epsilon=per_query,
            rho=None,
            accountant=accountant,
            sensitivity=QUERY_L1_SENSITIVITY,
        )
    l2_sensitivity = math.sqrt(k * QUERY_L1_SENSITIVITY)  # sqrt(2) per query, k disjoint queries
    rho = zcdp_rho_for(epsilon, delta)
    return NoisePlan(
        mechanism="gaussian",
        epsilon=float(epsilon),
        delta=float(delta),
        k=k,
        scale=l2_sensitivity / math.sqrt(2 * rho),
        per_query_epsilon=None,
        rho=rho,
        accountant=ZCDP_CONVERSION,
        sensitivity=l2_sensitivity,
    )


def _opendp_noise(counts: np.ndarray, plan: NoisePlan) -> np.ndarray:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    # i64 rather than Python int (which OpenDP maps to i32): counts can exceed 2**31.
    domain = dp.vector_domain(dp.atom_domain(T="i64"))
    if plan.mechanism == "laplace":
        meas = dp.m.make_laplace(domain, dp.l1_distance(T="i64"), scale=plan.scale)
        # One query's L1 sensitivity must cost exactly the planned per-query ε'.
        loss, planned = meas.map(int(QUERY_L1_SENSITIVITY)), plan.per_query_epsilon
    else:
        meas = dp.m.make_gaussian(domain, dp.l2_distance(T="f64"), scale=plan.scale)
        loss, planned = meas.map(plan.sensitivity), plan.rho
    if planned is None or not math.isclose(loss, planned, rel_tol=_MAP_RTOL, abs_tol=0.0):
        raise RuntimeError(
            f"OpenDP's privacy map gives {loss!r} for this plan, but it was calibrated to "
            f"{planned!r}; refusing to release"
        )
    # OpenDP releases the GIL while sampling (measured: 1.9x on 2 threads), so disjoint chunks
    # go to threads. Each cell still gets exactly one draw of the same planned mechanism.
    chunks = np.array_split(counts, max(1, min(os.cpu_count() or 1,
                                               counts.size // _MIN_NOISE_CHUNK)))
    with ThreadPoolExecutor(len(chunks)) as pool:
        return np.concatenate([np.asarray(part, dtype=np.int64)
                               for part in pool.map(meas, chunks)])


def add_noise(
    counts: np.ndarray, plan: NoisePlan, *, sampler: str = "opendp", seed: int | None = None
) -> np.ndarray:
    """Return ``counts`` plus noise calibrated by ``plan``, as float64 (not clamped).

    ``sampler="opendp"`` (the default, and the only one fit for a release) draws discrete Laplace
    or discrete Gaussian noise from OpenDP with OS entropy; it takes no seed, and it cross-checks
    that OpenDP's own privacy map of the mechanism equals the plan's ε' (Laplace) or ρ (Gaussian).

    ``sampler="numpy"`` draws continuous Laplace/normal noise from ``np.random.default_rng(seed)``:
    reproducible, for tests and research only. Seeded noise is NOT private to anyone who knows or
    can guess the seed, and numpy's floating-point samplers are not hardened against
    floating-point attacks.
    """
    counts = np.asarray(counts)
    if counts.ndim != 1 or not np.issubdtype(counts.dtype, np.integer):
        raise ValueError(
            f"counts must be a 1-D integer array, got shape {counts.shape} {counts.dtype}"
        )
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    if sampler == "opendp":
        if seed is not None:
            raise ValueError("the opendp sampler uses OS entropy and cannot be seeded")
        return _opendp_noise(counts, plan).astype(np.float64)
    if sampler == "numpy":
        rng = np.random.default_rng(seed)
        if plan.mechanism == "laplace":
            noise = rng.laplace(0.0, plan.scale, size=counts.shape)
        else:
            noise = rng.normal(0.0, plan.scale, size=counts.shape)
        return counts.astype(np.float64) + noise
    raise ValueError(f"unknown sampler {sampler!r}; expected one of {SAMPLERS}")


def clamp(noisy: np.ndarray) -> np.ndarray:
    """Set negative noisy counts to 0 (post-processing, so free of privacy cost)."""
    return np.maximum(np.asarray(noisy, dtype=np.float64), 0.0)


def noisy_count_matrix(exact: np.ndarray, schema: Schema, plan: NoisePlan, *,
                       sampler: str = "opendp", seed: int | None = None) -> np.ndarray:
    """The clamped noisy d×d counts: one draw per released query cell, structural zeros kept."""
    noisy = add_noise(query_vector(exact, schema), plan, sampler=sampler, seed=seed)
    return counts_from_queries(clamp(noisy), schema)
