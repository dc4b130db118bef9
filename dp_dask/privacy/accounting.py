"""Privacy accounting: calibration of noise to (ε, δ) and conversions between budgets.

Three families of guarantees are handled here, each with a conservative root search (a value is
only ever rounded towards more noise, and checked by plugging it back in):

* Laplace: per-query ε' for k queries under advanced composition (Dwork, Rothblum, Vadhan 2010),
  or basic composition when that is better (small k).
* Gaussian measurements, as a budget ``ρ`` that measurements spend in shares. Two accountants:

  - ``"zcdp"``: a measurement with L2 sensitivity Δ and noise σ is ρ-zCDP with ρ = Δ²/(2σ²)
    (Bun-Steinke 2016; for OpenDP's *discrete* Gaussian: Canonne, Kamath, Steinke 2020, §4);
    ρ adds up under (adaptive) composition and is converted to (ε, δ) with CKS 2020, Cor. 13.
  - ``"exact"``: Gaussian differential privacy (Dong, Roth, Su 2022): a continuous Gaussian
    measurement is μ-GDP with μ = Δ/σ, compositions are √(Σμ_i²)-GDP exactly, and μ-GDP is
    (ε, δ)-DP for exactly the δ(ε) of Balle & Wang 2018, Thm. 8. The released noise is OpenDP's
    *discrete* Gaussian, whose privacy curve can lie slightly ABOVE the continuous one at the
    same σ (see docs/privacy.md for numbers). We therefore charge a discrete Gaussian measurement
    as the continuous one with variance σ² − 4: it is, up to a pointwise likelihood factor of
    1 ± 10⁻³³ per noisy cell, a post-processing of that continuous mechanism (argument in
    docs/privacy.md). The budget keeps a slack for that factor (ε: 4·10⁻¹⁵; δ: relative 2·10⁻¹⁵),
    valid for up to 2⁶³ cells whose counts change between neighbours.

  In both cases a measurement's charge is ``gaussian_rho(σ, Δ, accountant)`` (Δ²/(2σ²) for zcdp,
  Δ²/(2(σ² − 4)) = μ²/2 for exact); charges add up exactly, and ``rho_budget`` is the largest
  total whose (ε, δ) guarantee holds. ``epsilon_spent`` is its inverse for a fixed δ.

Run ``python -m dp_dask.privacy --table`` for the σ per cell of the released marginals
under each accountant.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence

import numpy as np
from scipy.optimize import brentq
from scipy.special import log_ndtr

ACCOUNTANTS = ("exact", "zcdp")
ADVANCED_COMPOSITION = "advanced composition (Dwork-Rothblum-Vadhan)"
BASIC_COMPOSITION = "basic composition (sequential, k·ε' = ε)"
ZCDP_CONVERSION = "zCDP, tight conversion (Canonne-Kamath-Steinke 2020)"
EXACT_GDP = ("exact Gaussian privacy curve (Balle-Wang 2018; Gaussian DP, Dong-Roth-Su 2022), "
             "discrete Gaussian charged at variance sigma^2 - 4")
# Shaved off a solved ρ so that float rounding in the root searches and in exp/log can never make
# the plan less conservative than an exact (or outward-rounded, as OpenDP's) evaluation of the
# bound.
_RHO_SAFETY = 1e-9
_EPS = np.finfo(float).eps

# --- the discrete Gaussian under the exact accountant (derivation in docs/privacy.md) ----------
# A discrete Gaussian N_Z(0, σ²) is within a pointwise factor Λ^{±1} of R(N(0, σ² − s²)), where R is
# a shift-equivariant randomised rounding with kernel φ_s(u)/Θ_s(u), Θ_s(u) = Σ_m φ_s(u − m) ∈
# [1 − 2Q, 1 + 2Q] and Q = Σ_{j≥1} exp(−2π²s²j²) <= q/(1 − q), q = exp(−2π²s²).
DISCRETE_VARIANCE_SHIFT = 4.0  # s² with s = 2
_Q = math.exp(-2 * math.pi**2 * DISCRETE_VARIANCE_SHIFT)
_Q = _Q / (1 - _Q)
_LOG_LAMBDA = math.log1p(2 * _Q) - math.log1p(-2 * _Q)  # ln Λ ≈ 2·10⁻³⁴
# Total number of cells, over all measurements, whose counts differ between neighbours: every
# integer coordinate that changes has |change| >= 1, so this is at most Σ Δ_i², and 2⁶³ is more
# cells than any release can hold (they are indexed by int64).
_MAX_CHANGED_CELLS = 2.0**63
# Each changed cell costs ln Λ twice in ε (P vs P', Q vs Q') and once in log δ.
_EXACT_EPSILON_SLACK = 2 * _MAX_CHANGED_CELLS * _LOG_LAMBDA * (1 + 1e-6)
_EXACT_LOG_DELTA_SLACK = _MAX_CHANGED_CELLS * _LOG_LAMBDA * (1 + 1e-6)


def _check_epsilon_delta(epsilon: float, delta: float) -> None:
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")


def _check_accountant(accountant: str) -> None:
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"unknown accountant {accountant!r}; expected one of {ACCOUNTANTS}")


def _check_positive(name: str, value: float, *, zero_ok: bool = False) -> None:
    if not (math.isfinite(value) and (value >= 0 if zero_ok else value > 0)):
        bound = ">= 0" if zero_ok else "> 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")


def _at_or_below_root(f: Callable[[float], float], x: float) -> float:
    """Step a root estimate x of an increasing f down, in growing steps, until f(x) <= 0."""
    step = 4 * _EPS
    while f(x) > 0:
        x *= 1 - step
        step = min(2 * step, 0.5)  # geometric, so bounded even if x was far off
    return x


def _at_or_above_root(f: Callable[[float], float], x: float) -> float:
    """Step a root estimate x > 0 of a decreasing f up, in growing steps, until f(x) <= 0."""
    step = 4 * _EPS
    while f(x) > 0:
        x *= 1 + step
        step = min(2 * step, 1.0)
    return x


# --- Laplace ---------------------------------------------------------------------------------


def _advanced_total(per_query: float, delta: float, k: int) -> float:
    return math.sqrt(2 * k * math.log(1 / delta)) * per_query + k * per_query * math.expm1(
        per_query
    )


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
    per_query = brentq(excess, 0.0, hi, xtol=1e-300, rtol=4 * _EPS)
    return _at_or_below_root(excess, per_query)  # brentq may land a hair above the root


def laplace_per_query_epsilon(epsilon: float, delta: float, k: int) -> tuple[float, str]:
    """The larger of the advanced- and basic-composition per-query ε', and which one it is."""
    advanced = advanced_composition_epsilon(epsilon, delta, k)
    # For small k (roughly k < 2 ln(1/δ)) plain ε/k is larger, hence less noise, and pure DP.
    basic = epsilon / k
    return (advanced, ADVANCED_COMPOSITION) if advanced >= basic else (basic, BASIC_COMPOSITION)


# --- zCDP ------------------------------------------------------------------------------------


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
    u = brentq(slope, lo, hi, xtol=1e-15, rtol=4 * _EPS)
    beta = math.exp(u)
    # Any α > 1 gives a valid bound, so an inexact root costs tightness, never validity.
    log_delta = beta * ((1 + beta) * rho - epsilon) - u + (1 + beta) * (u - math.log1p(beta))
    return min(log_delta, 0.0)


def zcdp_delta(rho: float, epsilon: float) -> float:
    """δ such that ρ-zCDP implies (ε, δ)-DP, by Canonne, Kamath, Steinke 2020, Cor. 13.

    ``δ = inf_{α>1} exp((α−1)(αρ−ε)) / (α−1) · (1 − 1/α)^α``.
    """
    _check_positive("rho", rho, zero_ok=True)
    _check_positive("epsilon", epsilon, zero_ok=True)
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
    rho = brentq(excess, lo, hi, xtol=1e-300, rtol=4 * _EPS) * (1 - _RHO_SAFETY)
    return _at_or_below_root(excess, rho)


def zcdp_epsilon(rho: float, delta: float) -> float:
    """Smallest ε (rounded up) with ``zcdp_delta(rho, ε) <= delta``: ρ-zCDP's ε at this δ."""
    _check_positive("rho", rho, zero_ok=True)
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
    if rho == 0 or _log_zcdp_delta(rho, 0.0) <= math.log(delta):
        return 0.0
    log_target = math.log(delta)

    def excess(epsilon: float) -> float:  # decreasing in ε
        return _log_zcdp_delta(rho, epsilon) - log_target

    # Bun-Steinke's ε = ρ + 2 sqrt(ρ ln(1/δ)) is looser than CKS, so it brackets from above.
    hi = rho + 2 * math.sqrt(rho * math.log(1 / delta))
    while excess(hi) > 0:  # only float rounding could get here
        hi *= 2
    epsilon = brentq(excess, 0.0, hi, xtol=1e-300, rtol=4 * _EPS)
    return float(_at_or_above_root(excess, epsilon))


# --- Gaussian DP (the exact curve) -----------------------------------------------------------
# Hand-written: the closed form is two log-CDF calls, and we need it evaluated at a given point to
# plug roots back in, in both directions (μ from ε and ε from μ), with rounding that never favours
# the release. Google's dp-accounting has the same formula (gaussian_mechanism._get_log_delta) but
# only as a private helper; its public get_sigma_gaussian/get_epsilon_gaussian are root searches
# to an absolute tolerance with no rounding direction. The tests check ours against it.


def _log_gdp_delta(mu: float, epsilon: float) -> float:
    """log δ(ε) of μ-GDP: δ = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Balle-Wang 2018, Thm. 8)."""
    a = float(log_ndtr(-epsilon / mu + mu / 2))
    b = epsilon + float(log_ndtr(-epsilon / mu - mu / 2))
    if b >= a:  # δ > 0 for μ > 0; only underflow of both terms lands here
        return -math.inf
    return a + math.log(-math.expm1(b - a))


def gdp_delta(mu: float, epsilon: float) -> float:
    """δ(ε) of a μ-GDP mechanism (e.g. a continuous Gaussian with μ = Δ₂/σ), exactly."""
    _check_positive("mu", mu, zero_ok=True)
    _check_positive("epsilon", epsilon, zero_ok=True)
    if mu == 0:
        return 0.0
    return math.exp(_log_gdp_delta(mu, epsilon))


def gdp_epsilon(mu: float, delta: float) -> float:
    """Smallest ε (rounded up) at which a μ-GDP mechanism is (ε, δ)-DP."""
    _check_positive("mu", mu, zero_ok=True)
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
    log_target = math.log(delta)
    if mu == 0 or _log_gdp_delta(mu, 0.0) <= log_target:
        return 0.0

    def excess(epsilon: float) -> float:  # decreasing in ε
        return _log_gdp_delta(mu, epsilon) - log_target

    # The privacy loss is N(μ²/2, μ²): beyond μ²/2 + μ·sqrt(2 ln(1/δ)) its tail alone is < δ.
    hi = mu * mu / 2 + mu * math.sqrt(2 * math.log(1 / delta))
    while excess(hi) > 0:
        hi *= 2
    epsilon = brentq(excess, 0.0, hi, xtol=1e-300, rtol=4 * _EPS)
    return float(_at_or_above_root(excess, epsilon))


def gdp_mu_for(epsilon: float, delta: float) -> float:
    """Largest μ (up to a 1e-9 relative safety margin) such that μ-GDP is (ε, δ)-DP."""
    _check_epsilon_delta(epsilon, delta)
    log_target = math.log(delta)

    def excess(mu: float) -> float:  # increasing in μ
        return _log_gdp_delta(mu, epsilon) - log_target

    lo = hi = 1.0
    while excess(lo) > 0:
        lo /= 2
    while excess(hi) < 0:
        hi *= 2
    mu = brentq(excess, lo, hi, xtol=1e-300, rtol=4 * _EPS) * (1 - _RHO_SAFETY)
    return float(_at_or_below_root(excess, mu))


# --- budgets shared by measurements ----------------------------------------------------------


def rho_budget(epsilon: float, delta: float, accountant: str = "exact") -> float:
    """Largest total ρ such that Gaussian measurements whose charges sum to it are (ε, δ)-DP.

    Charges are ``gaussian_rho(σ_i, Δ_i, accountant)`` and add up under composition, adaptive
    included (exact: Dong-Roth-Su 2022, Thm. 3.2 / Cor. 3.3; zcdp: Bun-Steinke 2016).
    The result is rounded down (never above the true root) and checked by plugging it back in.
    """
    _check_epsilon_delta(epsilon, delta)
    _check_accountant(accountant)
    if accountant == "zcdp":
        return zcdp_rho_for(epsilon, delta)
    inner_epsilon = epsilon - _EXACT_EPSILON_SLACK
    inner_log_delta = math.log(delta) - _EXACT_LOG_DELTA_SLACK
    if inner_epsilon <= 0:
        raise ValueError(f"epsilon {epsilon!r} is below the exact accountant's slack")
    mu = gdp_mu_for(inner_epsilon, math.exp(inner_log_delta))

    def excess(rho: float) -> float:  # plug back: ρ → μ = sqrt(2ρ) → log δ
        return _log_gdp_delta(math.sqrt(2 * rho), inner_epsilon) - inner_log_delta

    return float(_at_or_below_root(excess, mu * mu / 2))


def epsilon_spent(rho: float, delta: float, accountant: str = "exact") -> float:
    """Smallest ε (rounded up) such that charges summing to ``rho`` are (ε, δ)-DP.

    The inverse of ``rho_budget`` at fixed δ, for a ledger that composes several releases.
    """
    _check_positive("rho", rho, zero_ok=True)
    _check_accountant(accountant)
    if accountant == "zcdp":
        return zcdp_epsilon(rho, delta)
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
    if rho == 0:
        return 0.0
    inner_delta = math.exp(math.log(delta) - _EXACT_LOG_DELTA_SLACK)
    inner = gdp_epsilon(math.sqrt(2 * rho), inner_delta)
    return math.nextafter(inner + _EXACT_EPSILON_SLACK, math.inf)


def gaussian_rho(sigma: float, sensitivity: float, accountant: str = "exact") -> float:
    """The charge of one Gaussian measurement (noise σ per cell, L2 sensitivity Δ).

    zcdp: Δ²/(2σ²), valid for continuous and discrete Gaussian noise. exact: Δ²/(2(σ² − 4)), the
    continuous Gaussian that OpenDP's discrete Gaussian is (essentially) a post-processing of;
    needs σ > 2 (use zcdp below that).
    """
    _check_positive("sigma", sigma)
    _check_positive("sensitivity", sensitivity)
    _check_accountant(accountant)
    if accountant == "zcdp":
        return sensitivity**2 / (2 * sigma**2)
    if sigma**2 <= DISCRETE_VARIANCE_SHIFT:
        raise ValueError(
            f"the exact accountant needs sigma > {math.sqrt(DISCRETE_VARIANCE_SHIFT):g} for "
            f"discrete Gaussian noise, got {sigma!r}; use accountant='zcdp'"
        )
    return sensitivity**2 / (2 * (sigma**2 - DISCRETE_VARIANCE_SHIFT))


def gaussian_sigma(rho: float, sensitivity: float, accountant: str = "exact") -> float:
    """Smallest σ (rounded up) whose ``gaussian_rho`` charge is at most ``rho``."""
    _check_positive("rho", rho)
    _check_positive("sensitivity", sensitivity)
    _check_accountant(accountant)
    tau = sensitivity / math.sqrt(2 * rho)
    sigma = tau if accountant == "zcdp" else math.sqrt(tau**2 + DISCRETE_VARIANCE_SHIFT)
    if accountant == "exact" and sigma**2 <= DISCRETE_VARIANCE_SHIFT:  # τ² below 4's last digit
        sigma = math.nextafter(math.sqrt(DISCRETE_VARIANCE_SHIFT), math.inf)
    while gaussian_rho(sigma, sensitivity, accountant) > rho:
        sigma = math.nextafter(sigma, math.inf)
    return sigma


# --- the σ table of docs/privacy.md ----------------------------------------------------------


def query_count(m: int) -> int:
    """Number of released queries for ``m`` attributes: m histograms + C(m, 2) 2-way tables."""
    return m + m * (m - 1) // 2


QUERY_L1_SENSITIVITY = 2.0  # one replaced row: one count -1, another +1, in each query
# The L2 sensitivity of one histogram or table under each notion of neighbouring datasets
# (privacy.labels.NEIGHBOURING): replacing one row moves one cell down by 1 and one up by 1;
# adding or removing one moves one cell by 1 (the peers' notion: MST, AIM). Under add/remove, n
# itself is private: it is estimated from the noisy counts (consistency.estimated_rows), never
# read from the data.
TABLE_L2_SENSITIVITY = {"replace": math.sqrt(2.0), "add_remove": 1.0}
TABLE_L1_SENSITIVITY = {"replace": 2.0, "add_remove": 1.0}


def table_sensitivity(neighbours: str, norm: str = "l2", max_rows: int | None = None) -> float:
    """How far one count table (histogram, 2-way table, fine grid) moves in ``norm`` ("l1" or
    "l2") between neighbours: a row (``max_rows`` None) or a privacy unit of at most
    ``max_rows`` rows (dp_dask.data.units) added or removed, or replaced. A unit's rows may all
    fall in one cell: K in one cell (add/remove, L1 = L2 = K), or K out of one cell and K into
    another (replace: L1 2K, L2 √2·K; the removed and added rows' count vectors are >= 0, so
    ‖a − r‖₂² <= ‖a‖₂² + ‖r‖₂² <= 2K²). Every sensitivity of a count and of a score over counts
    is this times the query's own factor; the exponential mechanism's L1 scores use "l1"."""
    table = {"l1": TABLE_L1_SENSITIVITY, "l2": TABLE_L2_SENSITIVITY}[norm]
    if neighbours not in table:
        raise ValueError(f"neighbours must be one of {sorted(table)}, got {neighbours!r}")
    return table[neighbours] * (1 if max_rows is None else max_rows)


def sigma_table(ms: Sequence[int] = (9, 15, 27, 100),
                epsilons: Sequence[float] = (0.5, 1.0, 2.0, 5.0),
                delta: float = 2.0**-30) -> list[dict[str, float]]:
    """Noise std per released cell for every (m, ε): Gaussian per accountant, and Laplace."""
    rows = []
    for m in ms:
        k = query_count(m)
        l2 = math.sqrt(k * QUERY_L1_SENSITIVITY)
        for epsilon in epsilons:
            per_query, _ = laplace_per_query_epsilon(epsilon, delta, k)
            rows.append({
                "m": m, "k": k, "epsilon": epsilon,
                **{f"sigma_{a}": gaussian_sigma(rho_budget(epsilon, delta, a), l2, a)
                   for a in ACCOUNTANTS},
                "laplace_std": math.sqrt(2) * QUERY_L1_SENSITIVITY / per_query,
            })
    return rows


def format_sigma_table(rows: list[dict[str, float]], delta: float) -> str:
    """The table as Markdown."""
    exponent = math.log2(delta)
    shown = f"2^{exponent:.0f}" if exponent == round(exponent) else f"{delta:.3g}"
    lines = [
        f"σ (std) of the noise per released cell, δ = {shown}; k = m + C(m, 2) queries",
        "",
        "| m | k | ε | Gaussian, exact | Gaussian, zCDP | exact/zCDP | Laplace std |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['m']} | {row['k']} | {row['epsilon']:g} | {row['sigma_exact']:.2f} | "
            f"{row['sigma_zcdp']:.2f} | {row['sigma_exact'] / row['sigma_zcdp']:.3f} | "
            f"{row['laplace_std']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dp_dask.privacy",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--table", action="store_true", help="print the σ table (Markdown)")
    parser.add_argument("--delta", type=float, default=2.0**-30)
    parser.add_argument("--m", type=int, nargs="+", default=[9, 15, 27, 100])
    parser.add_argument("--epsilon", type=float, nargs="+", default=[0.5, 1.0, 2.0, 5.0])
    args = parser.parse_args(argv)
    if not args.table:
        parser.print_help()
        return
    print(format_sigma_table(sigma_table(args.m, args.epsilon, args.delta), args.delta))

