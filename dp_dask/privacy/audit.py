"""Statistical audit of a noise mechanism on one neighbouring pair: a lower bound on its ε.

Draw many outputs of the mechanism on each of two neighbouring inputs (for one released count,
``c`` and ``c + 1``). For a threshold t, the likelihood-ratio test of an additive, log-concave noise
(Gaussian, Laplace, and their discrete versions) rejects for ``y >= t``; (ε, δ)-DP requires

    P[M(c + 1) >= t] <= e^ε · P[M(c) >= t] + δ   and   P[M(c) < t] <= e^ε · P[M(c + 1) < t] + δ.

With one-sided Clopper-Pearson bounds (exact binomial, via the beta quantiles, as statsmodels'
``proportion_confint(method="beta")``) holding simultaneously for every threshold and direction
(Bonferroni), ``ε_lb(δ) = max_t ln((p_hi_side_lower − δ) / p_other_upper)`` is a lower bound on the
ε of the mechanism at that δ with probability at least ``1 − alpha``. A claimed privacy curve ε(δ)
is refuted when ``ε_lb(δ) > ε(δ)`` for some δ. See docs/privacy.md.

A claim stated as (ε, δ₀)-DP (pure DP: δ₀ = 0) has its own curve, :func:`epsilon_at_delta`: the
ε it implies at a larger δ, which is below ε.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.stats import beta


def clopper_pearson(successes: np.ndarray, trials: int, alpha: np.ndarray | float
                    ) -> tuple[np.ndarray, np.ndarray]:
    """One-sided (1 − alpha) Clopper-Pearson lower and upper bounds on a binomial proportion."""
    k = np.asarray(successes, dtype=np.float64)
    lower = np.where(k > 0, beta.ppf(alpha, np.maximum(k, 1), trials - k + 1), 0.0)
    upper = np.where(k < trials, beta.ppf(1 - alpha, k + 1, np.maximum(trials - k, 1)), 1.0)
    return lower, upper


def epsilon_lower_bounds(samples_0: np.ndarray, samples_1: np.ndarray, deltas: Sequence[float],
                         *, alpha: float = 1e-6, thresholds: np.ndarray | None = None
                         ) -> dict[float, float]:
    """Lower confidence bounds on ε(δ) from outputs on the inputs c (``samples_0``) and c + 1.

    Every threshold between observed values is tried in both directions (or only
    ``thresholds``, chosen beforehand, e.g. on other draws); all the confidence bounds hold
    together with probability >= 1 − alpha, so the returned ε_lb(δ) (−inf where no threshold
    gives evidence) are lower bounds simultaneously for every δ.
    """
    return {delta: float(np.max(threshold_epsilons(samples_0, samples_1, delta, alpha=alpha,
                                                   thresholds=thresholds), initial=-math.inf))
            for delta in deltas}


def threshold_epsilons(samples_0: np.ndarray, samples_1: np.ndarray, delta: float, *,
                       alpha: float, thresholds: np.ndarray | None = None) -> np.ndarray:
    """Per test, the lower bound ln((p_num_lower − δ) / p_den_upper) (−inf without evidence):
    first the events {y >= t}, then {y < t}, for t in ``thresholds`` (default: every observed
    value), Bonferroni over all of them at level ``alpha``."""
    if thresholds is None:
        thresholds = np.unique(np.concatenate([samples_0, samples_1]))
    thresholds = np.asarray(thresholds, dtype=np.float64)
    # Two one-sided bounds per threshold serve both directions.
    per_test = alpha / (2 * max(thresholds.size, 1))
    return count_epsilons(tail_counts(samples_0, thresholds), len(samples_0),
                          tail_counts(samples_1, thresholds), len(samples_1), delta, per_test)


def tail_counts(samples: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """How many of ``samples`` are >= each threshold."""
    ordered = np.sort(np.asarray(samples, dtype=np.float64))
    return ordered.size - np.searchsorted(ordered, thresholds, side="left")


def count_epsilons(up0: np.ndarray, n0: int, up1: np.ndarray, n1: int, delta: float,
                   per_test: float) -> np.ndarray:
    """:func:`threshold_epsilons` from the counts of y >= t under each input (``up0`` of ``n0``
    draws on c, ``up1`` of ``n1`` on c + 1), each one-sided bound at level ``per_test``."""
    lo1, _ = clopper_pearson(up1, n1, per_test)  # a lower bound on P[M(c + 1) >= t]
    _, hi0 = clopper_pearson(up0, n0, per_test)  # an upper one on P[M(c) >= t]
    # Direction 1: event {y >= t}, numerator from c + 1. Direction 2: {y < t}, numerator from c.
    numer = np.concatenate([lo1, 1 - hi0])
    denom = np.concatenate([hi0, 1 - lo1])
    ok = (numer > delta) & (denom > 0)
    out = np.full(numer.shape, -math.inf)
    out[ok] = np.log((numer[ok] - delta) / denom[ok])
    return out


def epsilon_at_delta(epsilon: float, delta: float, at: float) -> float:
    """The least ε' such that every (``epsilon``, ``delta``)-DP mechanism is (ε', ``at``)-DP,
    for ``at`` >= ``delta`` (pure ε-DP: ``delta`` = 0).

    Every (ε, δ)-DP mechanism is a post-processing of one mechanism (Kairouz, Oh & Viswanath
    2015, Thm. 2.1: four outputs with probabilities (δ, (1−δ)e^ε/(1+e^ε), (1−δ)/(1+e^ε), 0) on
    one input and the reverse on the other; randomized response when δ = 0), so its privacy
    curve lies below that mechanism's, whose hockey-stick divergence at e^ε' is

        δ(ε') = δ + (1 − δ)(e^ε − e^ε')/(1 + e^ε),   0 <= ε' <= ε,

    and is tight: that mechanism attains it. Solved for ε' at δ(ε') = ``at``:
    ε' = ln(e^ε − (at − δ)(1 + e^ε)/(1 − δ)), 0 where that is below 0. A pure ε = 2 claim is
    1.942 at δ = 0.05, not 2: "ε-DP holds at every δ" is true, and looser than the claim's curve.
    """
    if not 0 <= delta <= at < 1:
        raise ValueError(f"the claim's delta {delta!r} must lie in [0, {at!r}] (the delta it "
                         "is read at), below 1")
    room = math.exp(epsilon) - (at - delta) * (1 + math.exp(epsilon)) / (1 - delta)
    return math.log(room) if room > 1 else 0.0
