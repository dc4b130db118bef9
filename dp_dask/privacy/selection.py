"""DP selection on the driver, over exact counts reduced on Dask: which values, which quantiles.

Used to draft a schema under DP (:mod:`dp_dask.data.draft`). Both measurements take exact
counts that reached the driver (never the raw rows) and return only what they select.

* :func:`threshold_keys` (:func:`threshold_counts`, with their noisy counts): the values whose
  noisy count passes a threshold (OpenDP's
  ``make_laplace_threshold``, propose-test-release over a hashmap of counts; Rogers 2023). The
  set of values present is data-dependent, hence δ > 0: a value held by one row is released with
  probability about δ.
* :func:`noisy_min_index`: the candidate of smallest noisy score (OpenDP's ``make_noisy_max``
  with ``negate``, report-noisy-max with Gumbel noise = the exponential mechanism).
* :func:`noisy_max_index` with :func:`calibrate_selection`: the exponential mechanism over
  float scores (e.g. which 2-way tables to measure, :mod:`dp_dask.methods.marginals.select_pairs`),
  charged to a Gaussian budget ρ under either accountant. The scores must move by at most the
  sensitivity as computed: :func:`selection_scores` computes L1 errors exactly.
  :func:`replace_one_rho` charges such a release, calibrated to add/remove neighbours, as
  replace-one.
* :func:`quantile_scores`: the score of OpenDP's ``make_quantile_score_candidates`` computed from
  counts rather than from the raw vector (which ``make_private_quantile`` would need on the
  driver, and which never leaves the workers here).

Neighbouring datasets: replace one row (n public), as for every release of dp_dask. OpenDP's
``make_count_by`` states the distance of a hashmap of counts for add/remove neighbours only; a
replaced row is one removal and one addition of *different* rows, so it changes two keys by 1
each: (L0, L1, L∞) = (2, 2, 1), which is the distance given to the threshold's privacy map (the
add/remove-twice bound (2, 2, 2) would be looser). Each row contributes one value per column.
Under a privacy unit of at most K rows (a draft bounded to K rows per unit) the distance is
(2K, 2K, K) (:func:`contribution_distance`), which covers adding or removing the unit, (K, K, K).

``sampler="numpy"`` replaces OpenDP's draws by seeded numpy Laplace/Gumbel noise with the same
calibration: reproducible, for tests only, not private (see :mod:`dp_dask.privacy.noise`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.special import erf, erfinv

from dp_dask.privacy.noise import _check_map, _check_sampler, _check_scale, _opendp

# (L0, L1, L∞) distance of the counts per value when one row is replaced by another.
REPLACE_ONE_ROW = (2, 2, 1)


def contribution_distance(bound: int) -> tuple[int, int, int]:
    """(L0, L1, L∞) distance of the counts per value when a unit of at most ``bound`` rows is
    replaced: its rows leave at most ``bound`` keys and enter at most ``bound`` others, a key
    moving by at most ``bound`` (``bound`` 1: :data:`REPLACE_ONE_ROW`). Adding or removing the
    unit moves them by (bound, bound, bound), within it."""
    if isinstance(bound, bool) or int(bound) != bound or bound < 1:
        raise ValueError(f"the contribution bound must be an integer >= 1, got {bound!r}")
    return (2 * int(bound), 2 * int(bound), int(bound))


@dataclass(frozen=True)
class Threshold:
    """A calibrated thresholded-count measurement: Laplace ``scale`` and integer ``threshold``."""

    epsilon: float
    delta: float
    scale: float
    threshold: int
    distance: tuple[int, int, int] = REPLACE_ONE_ROW  # the (L0, L1, L∞) it is calibrated to

    def to_json(self) -> dict[str, Any]:
        rows = self.distance[2]
        return {"mechanism": "laplace-threshold", "epsilon": self.epsilon, "delta": self.delta,
                "scale": self.scale, "threshold": self.threshold,
                "opendp": "make_laplace_threshold over L01InfDistance, d_in (L0, L1, Linf) = "
                          f"{self.distance} (replace one " + (
                              "row" if rows == 1 else f"unit of at most {rows} rows")
                          + "; covers adding or removing it)"}


def _threshold_measurement(scale: float, threshold: int, gaussian: bool = False) -> Any:
    """OpenDP's thresholded counts: Laplace noise over (L0, L1, L∞) distances, or Gaussian
    noise over (L0, L2, L∞) ones (approximate zCDP)."""
    dp = _opendp()
    domain = dp.map_domain(dp.atom_domain(T=str), dp.atom_domain(T=dp.i64))
    distance = dp.l02inf_distance if gaussian else dp.l01inf_distance
    make = dp.m.make_gaussian_threshold if gaussian else dp.m.make_laplace_threshold
    return make(domain, distance(dp.absolute_distance(T=dp.i64)), scale=scale,
                threshold=threshold)


@functools.lru_cache(maxsize=256)
def calibrate_threshold(epsilon: float, delta: float, bound: int = 1) -> Threshold:
    """The scale giving ``epsilon`` and the least threshold whose δ (OpenDP's map) ≤ ``delta``
    when a unit of at most ``bound`` rows is replaced (:func:`contribution_distance`). A function
    of its arguments alone, remembered: OpenDP's search takes tens of milliseconds and a draft
    (or the audit's thousands of drafts) asks for the same few again."""
    _check_scale("epsilon", epsilon)
    if not 0 < delta < 1:
        raise ValueError(f"thresholding needs a delta in (0, 1), got {delta!r}")
    distance = contribution_distance(bound)
    scale = distance[1] / epsilon  # ε = L1 / b
    lowest = distance[2]  # OpenDP: a threshold at least the L∞ distance

    def meets(threshold: int) -> bool:
        return _threshold_measurement(scale, threshold).map(distance)[1] <= delta

    # where the lowest threshold already meets δ (a large ε or δ), OpenDP's search refuses
    # (its predicate never changes above the bound): the least threshold is that lowest one
    threshold = lowest if meets(lowest) else _opendp().binary_search(
        meets, bounds=(lowest, None), T=int)
    loss = _threshold_measurement(scale, threshold).map(distance)
    _check_map(loss[0], epsilon, "epsilon")
    if loss[1] > delta:
        raise RuntimeError(f"OpenDP's map gives delta {loss[1]!r} > {delta!r}; refusing")
    return Threshold(float(epsilon), float(delta), scale, int(threshold), distance)


def threshold_counts(counts: Mapping[str, int], calibration: Threshold, *,
                     sampler: str = "opendp", rng: np.random.Generator | None = None
                     ) -> dict[str, float]:
    """The keys whose noisy count is at least the threshold, with those noisy counts (the
    measurement's own output), largest first (ties by key); the exact counts are dropped."""
    _check_sampler(sampler, rng)
    if sampler == "numpy":
        return _passed(counts, calibration.threshold, lambda size: rng.laplace(
            0.0, calibration.scale, size=size))
    meas = _threshold_measurement(calibration.scale, calibration.threshold)
    _check_map(meas.map(calibration.distance)[0], calibration.epsilon, "epsilon")
    return _passed(counts, calibration.threshold, measurement=meas)


def _passed(counts: Mapping[str, int], threshold: float,
            numpy_noise: Callable[[int], np.ndarray] | None = None,
            measurement: Any = None) -> dict[str, float]:
    """The keys of the positive ``counts`` whose noisy count (``numpy_noise``'s seeded draws,
    in key order so that they don't depend on dict order; else OpenDP's ``measurement``) is at
    least ``threshold``, with those noisy counts, largest first (ties by key)."""
    counts = {str(k): int(v) for k, v in counts.items() if int(v) > 0}
    if numpy_noise is not None:
        keys = sorted(counts)
        noisy = np.array([counts[k] for k in keys], dtype=np.float64) + numpy_noise(len(keys))
        passed = {k: float(v) for k, v in zip(keys, noisy) if v >= threshold}
    else:
        passed = {k: float(v) for k, v in measurement(counts).items()} if counts else {}
    return dict(sorted(passed.items(), key=lambda item: (-item[1], item[0])))


def threshold_keys(counts: Mapping[str, int], calibration: Threshold, *,
                   sampler: str = "opendp", rng: np.random.Generator | None = None) -> list[str]:
    """The keys whose noisy count is at least the threshold, sorted; their counts are dropped."""
    return sorted(threshold_counts(counts, calibration, sampler=sampler, rng=rng))


# --- one Gaussian threshold over the counts of several columns (the draft's text levels) -----


@dataclass(frozen=True)
class GaussianThreshold:
    """A calibrated Gaussian thresholded-count measurement (OpenDP's ``make_gaussian_threshold``,
    approximate zCDP): noise of standard deviation ``scale``, integer ``threshold``, its zCDP
    charge ``rho`` and the threshold's ``delta`` at ``distance``, the (L0, L2, L∞) distance of
    the counts between neighbours it is calibrated to."""

    rho: float
    delta: float
    scale: float
    threshold: int
    distance: tuple[int, int, int]

    @property
    def sensitivity(self) -> float:
        """The L2 distance the noise is calibrated to (:func:`l2_distance` of ``distance``)."""
        return l2_distance(self.distance)

    def to_json(self) -> dict[str, Any]:
        return {"mechanism": "gaussian-threshold", "rho": self.rho, "delta": self.delta,
                "scale": self.scale, "threshold": self.threshold,
                "opendp": "make_gaussian_threshold over L02InfDistance, d_in (L0, L2, Linf) = "
                          f"{self.distance}: approximate zCDP (rho, delta)"}


def l2_distance(distance: tuple[int, int, int]) -> float:
    """The L2 distance of counts at an (L0, L2, L∞) ``distance``, as OpenDP reads it: at most
    √L0 · L∞."""
    l0, l2, linf = distance
    return min(float(l2), math.sqrt(l0) * linf)


@functools.lru_cache(maxsize=256)
def calibrate_gaussian_threshold(rho: float, delta: float,
                                 distance: tuple[int, int, int]) -> GaussianThreshold:
    """The noise scale whose zCDP charge at ``distance`` (L0, L2, L∞; OpenDP reads the L2
    distance as at most √L0 · L∞) is ``rho``, and the least threshold whose δ (the chance that a
    count only one neighbour holds passes, OpenDP's map) is at most ``delta``."""
    _check_scale("rho", rho)
    if not 0 < delta < 1:
        raise ValueError(f"thresholding needs a delta in (0, 1), got {delta!r}")
    linf = distance[2]
    # ρ = Δ₂² / (2σ²), towards more noise
    scale = l2_distance(distance) / math.sqrt(2 * rho) * (1 + 1e-12)

    def meets(threshold: int) -> bool:
        return _threshold_measurement(scale, threshold, gaussian=True).map(distance)[1] <= delta

    threshold = linf if meets(linf) else _opendp().binary_search(meets, bounds=(linf, None),
                                                                   T=int)
    charge, loss = _threshold_measurement(scale, threshold, gaussian=True).map(distance)
    if charge > rho * (1 + 1e-9) or loss > delta:
        raise RuntimeError(f"OpenDP's map gives (rho, delta) = ({charge!r}, {loss!r}) above "
                           f"({rho!r}, {delta!r}); refusing")
    return GaussianThreshold(float(rho), float(delta), scale, int(threshold), distance)


def gaussian_threshold_counts(counts: Mapping[str, int], calibration: GaussianThreshold, *,
                              sampler: str = "opendp", rng: np.random.Generator | None = None
                              ) -> dict[str, float]:
    """The keys whose noisy count is at least the threshold, with those noisy counts, largest
    first (ties by key); the exact counts are dropped. ``sampler="numpy"``: seeded normal noise
    of the same scale (tests only, not private)."""
    _check_sampler(sampler, rng)
    if sampler == "numpy":
        return _passed(counts, calibration.threshold, lambda size: rng.normal(
            0.0, calibration.scale, size=size))
    meas = _threshold_measurement(calibration.scale, calibration.threshold,
                                  gaussian=True)
    charge, loss = meas.map(calibration.distance)
    if charge > calibration.rho * (1 + 1e-9) or loss > calibration.delta:
        raise RuntimeError("OpenDP's map of the Gaussian threshold exceeds its calibration; "
                           "refusing to release")
    return _passed(counts, calibration.threshold, measurement=meas)


@functools.lru_cache(maxsize=1)
def _unit_gaussian_to_approx() -> Any:
    dp = _opendp()
    gaussian = dp.m.make_gaussian(dp.atom_domain(T=float, nan=False),
                                  dp.absolute_distance(T=float), scale=1.0)
    return dp.c.make_zCDP_to_approxDP(gaussian)


def zcdp_epsilon(rho: float, delta: float) -> float:
    """The ε of (ε, ``delta``)-DP that ρ-zCDP implies (OpenDP's ``make_zCDP_to_approxDP``, the
    optimal conversion of Canonne, Kamath & Steinke 2020), read off a Gaussian of that ρ."""
    curve = _unit_gaussian_to_approx().map(math.sqrt(2 * rho))  # ρ = d² / (2 · 1²)
    return float(curve.epsilon(delta))


@functools.lru_cache(maxsize=256)
def zcdp_rho(epsilon: float, delta: float) -> float:
    """The largest ρ (to a relative 1e-6, rounded down) whose ρ-zCDP implies (``epsilon``,
    ``delta``)-DP by :func:`zcdp_epsilon`."""
    _check_scale("epsilon", epsilon)
    # ε = ρ + 2√(ρ ln(1/δ)) is a looser conversion (Bun & Steinke 2016): its ρ is a lower bound
    root = math.sqrt(math.log(1 / delta))
    low = (math.sqrt(root**2 + epsilon) - root) ** 2
    high = epsilon  # ρ ≤ ε: the conversion's ε is at least ρ
    while high - low > 1e-6 * low:
        middle = (low + high) / 2
        low, high = (middle, high) if zcdp_epsilon(middle, delta) <= epsilon else (low, middle)
    return low


def quantile_scores(below: np.ndarray, above: np.ndarray, level: int, levels: int) -> np.ndarray:
    """OpenDP's quantile score of each candidate c for the quantile ``level / levels``.

    ``below[j]``/``above[j]``: how many values are < / > candidate j. With α = i/k the score is
    |(k − i)·#(x < c) − i·#(x > c)| (0 at an exact α-quantile): the integer score of
    ``make_quantile_score_candidates`` with α = i/k. A row adds k − i, 0 or −i to the inner term,
    so replacing one row moves every score by at most k: the L∞ sensitivity is ``levels``.
    """
    if not 0 < level < levels:
        raise ValueError(f"quantile level {level}/{levels} must lie strictly inside (0, 1)")
    below, above = np.asarray(below, dtype=np.int64), np.asarray(above, dtype=np.int64)
    return np.abs((levels - level) * below - level * above).astype(np.uint64)


def _noisy_min_measurement(scale: float) -> Any:
    dp = _opendp()
    space = (dp.vector_domain(dp.atom_domain(T=dp.u64)),
             dp.linf_distance(T=dp.u64, monotonic=False))  # quantile scores move both ways
    return dp.m.make_noisy_max(*space, dp.max_divergence(), scale=scale, negate=True)


def noisy_min_scale(epsilon: float, sensitivity: int) -> float:
    """Gumbel scale of report-noisy-min with ε for scores of L∞ ``sensitivity``: 2Δ/ε (scores
    that are not monotone in the data pay twice), checked against OpenDP's map."""
    _check_scale("epsilon", epsilon)
    scale = 2 * sensitivity / epsilon
    _check_map(_noisy_min_measurement(scale).map(sensitivity), epsilon, "epsilon")
    return scale


def noisy_min_index(scores: np.ndarray, scale: float, *, sampler: str = "opendp",
                    rng: np.random.Generator | None = None) -> int:
    """The index of the smallest score after Gumbel noise of ``scale`` (one selection)."""
    _check_sampler(sampler, rng)
    scores = np.asarray(scores, dtype=np.uint64)
    if scores.ndim != 1 or scores.size == 0:
        raise ValueError("scores must be a non-empty 1-D vector")
    if sampler == "numpy":
        return int(np.argmax(-scores.astype(np.float64) + rng.gumbel(0.0, scale, scores.size)))
    return int(_noisy_min_measurement(scale)(scores.tolist()))



# --- the exponential mechanism under the Gaussian measurements' accountants --------------------


def _gdp_charge(epsilon: float) -> float:
    """ρ = μ²/2 of the μ-GDP that an ε-DP mechanism satisfies: μ = 2Φ⁻¹(e^ε / (1 + e^ε))
    (the ε-DP trade-off curve is the chord through (α*, α*), α* = 1/(1 + e^ε), which lies above
    the convex Gaussian curve G_μ meeting it there; Dong, Roth & Su 2022, §2). Written as
    Φ⁻¹(½ + t) = √2·erfinv(2t), 2t = tanh(ε/2), which keeps its digits at tiny ε."""
    mu = 2.0 * math.sqrt(2.0) * float(erfinv(math.tanh(epsilon / 2.0)))
    return mu * mu / 2.0


def pure_epsilon(rho: float, accountant: str) -> float:
    """The largest ε whose ε-DP mechanism (Laplace, the exponential mechanism) a Gaussian budget
    charges at most ``rho``: zcdp, ε²/2 = ρ; exact (GDP), the inverse of :func:`_gdp_charge`,
    ε = logit Φ(μ/2) = 2·atanh(erf(μ/(2√2))), μ = √(2ρ)."""
    if accountant == "zcdp":
        return math.sqrt(2.0 * rho)
    if accountant == "exact":
        return 2.0 * math.atanh(float(erf(math.sqrt(2.0 * rho) / (2.0 * math.sqrt(2.0)))))
    raise ValueError(f"unknown accountant {accountant!r}")


def pure_charge(epsilon: float, accountant: str) -> float:
    """The ρ an ε-DP mechanism is charged under ``accountant``: zcdp ε²/2, exact (GDP)
    :func:`_gdp_charge`."""
    return epsilon**2 / 2.0 if accountant == "zcdp" else _gdp_charge(epsilon)


@dataclass(frozen=True)
class Selection:
    """One exponential-mechanism selection calibrated to a charge ``rho`` of a Gaussian budget:
    Gumbel ``scale`` over scores of L∞ ``sensitivity``, pure ``epsilon``-DP, charged ``rho``."""

    rho: float
    epsilon: float
    scale: float
    sensitivity: float
    accountant: str

    def measure(self) -> Any:
        """OpenDP's report-noisy-max (Gumbel) over float scores that may move both ways: its
        map is ε = 2Δ/scale (pure DP) or (2Δ/scale)²/8 (zCDP: bounded range, Cesar & Rogers
        2021)."""
        dp = _opendp()
        space = (dp.vector_domain(dp.atom_domain(T=float, nan=False)),
                 dp.linf_distance(T=float, monotonic=False))
        output = (dp.zero_concentrated_divergence() if self.accountant == "zcdp"
                  else dp.max_divergence())
        return dp.m.make_noisy_max(*space, output, scale=self.scale)

    @property
    def doubled_rho(self) -> float:
        """The charge when the scores move by twice the calibrated sensitivity, as scores of
        sensitivity Δ under add/remove neighbours do when a row is replaced (one removal and
        one addition): OpenDP's map at 2Δ, zCDP (2ε)²/8 = 4ρ, exact the GDP bound of 2ε."""
        loss = float(self.measure().map(2.0 * self.sensitivity))
        return loss if self.accountant == "zcdp" else _gdp_charge(loss)


def calibrate_selection(rho: float, sensitivity: float, accountant: str) -> Selection:
    """The selection whose charge under ``accountant`` is at most ``rho`` (checked against
    OpenDP's map): zcdp, ε²/8 = ρ; exact (GDP), the μ of :func:`_gdp_charge` with μ²/2 ≤ ρ,
    a looser bound than zCDP's for the same ε (no GDP bound uses the bounded range)."""
    _check_scale("rho", rho)
    _check_scale("sensitivity", sensitivity)
    if accountant == "zcdp":
        epsilon = math.sqrt(8.0 * rho)
    elif accountant == "exact":
        epsilon = pure_epsilon(rho, accountant)  # the inverse of _gdp_charge
    else:
        raise ValueError(f"unknown accountant {accountant!r}")
    scale = 2.0 * sensitivity / epsilon * (1 + 1e-12)  # rounded towards more noise
    # Rounding may still leave the map's charge a hair above ρ: widen the scale until OpenDP's
    # map confirms it (the charge falls as 1/scale²).
    for _ in range(8):
        selection = Selection(rho, epsilon, scale, float(sensitivity), accountant)
        loss = float(selection.measure().map(float(sensitivity)))
        charge = loss if accountant == "zcdp" else _gdp_charge(loss)
        if charge <= rho:
            return replace(selection, rho=charge, epsilon=loss if accountant == "exact"
                           else math.sqrt(8.0 * loss))
        scale *= math.sqrt(charge / rho) * (1 + 1e-9)
    raise RuntimeError(f"OpenDP's map gives a charge {charge!r} > {rho!r}; refusing")


def noisy_max_index(scores: np.ndarray, selection: Selection, *, sampler: str = "opendp",
                    rng: np.random.Generator | None = None) -> int:
    """The index of the largest score after Gumbel noise of the selection's scale."""
    _check_sampler(sampler, rng)
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 1 or scores.size == 0 or not np.isfinite(scores).all():
        raise ValueError("scores must be a non-empty 1-D vector of finite numbers")
    if sampler == "numpy":
        return int(np.argmax(scores + rng.gumbel(0.0, selection.scale, scores.size)))
    return int(selection.measure()(scores.tolist()))


def replace_one_rho(rho: float, selections: Sequence[tuple[Selection, int]]) -> float:
    """The replace-one-row charge of a release spending ``rho`` under add/remove neighbours
    on Gaussian measurements and ``selections`` ((selection, how many), calibrated to add/remove
    scores): a replaced row moves each table's two cells by 1 (L2 √2 for 1), twice each
    measurement's charge, and each score by twice its sensitivity (:attr:`Selection.doubled_rho`;
    4× ρ in zCDP, not 2×). Its actual selections' ρ leave the rest of ``rho`` to the
    measurements, at most what they spend."""
    selected = sum(count * selection.rho for selection, count in selections)
    return 2.0 * (rho - selected) + sum(count * selection.doubled_rho
                                        for selection, count in selections)


# Scores are computed in fixed point, in units of 1/SCORE_UNITS, then held exactly by float64.
SCORE_UNITS = 2**10
_EXACT_FLOAT = 2**53


def selection_scores(exact: Sequence[np.ndarray], model: Sequence[np.ndarray],
                     bias: Sequence[float] | None = None,
                     weight: Sequence[int] | None = None) -> np.ndarray:
    """w·(‖exact − model‖₁ − bias) per candidate, exactly as its sensitivity says: w times the
    change in the exact counts' L1 (1 for a row added or removed, 2 for one replaced), with
    ``model``, ``bias`` and the integer weights ``weight`` fixed between neighbours (noisy
    outputs, public values).

    In floats, each |count − model| and the sum would round, and neighbours' scores could differ
    by a few ulp more than the sensitivity the selection is calibrated to (issue 54). So the
    model and bias are rounded to multiples of 1/SCORE_UNITS (a change of at most cells/2048 in
    a score), the rest is integer arithmetic in those units, each cell clipped so that the
    int64 sum cannot overflow and the score clipped to ±2⁵³ units, which a float64 holds
    exactly; clipping is 1-Lipschitz, so no step widens a neighbour's difference."""
    scores = []
    for k, (counts, estimate) in enumerate(zip(exact, model)):
        counts, estimate = np.asarray(counts), np.asarray(estimate, dtype=np.float64)
        bound = 2**61 // max(counts.size, 1)  # Σ|a − b| ≤ cells·2·bound ≤ 2⁶²
        a = np.clip(counts.astype(np.int64), -bound // SCORE_UNITS, bound // SCORE_UNITS)
        b = np.rint(np.clip(estimate * SCORE_UNITS, -bound, bound)).astype(np.int64)
        error = int(np.abs(a * SCORE_UNITS - b).sum())
        offset = 0 if bias is None else round(float(bias[k]) * SCORE_UNITS)
        w = 1 if weight is None else weight[k]
        if w != int(w):
            raise ValueError(f"selection weights must be integers, not {w!r}")
        score = int(w) * (error - offset)
        scores.append(min(max(score, -_EXACT_FLOAT), _EXACT_FLOAT))
    return np.array(scores, dtype=np.float64) / SCORE_UNITS
