"""The noise plan for the released marginals, and the one call that applies it.

We release ``k = m + C(m, 2)`` count queries over ``m`` attributes: every 1-way histogram and every
2-way contingency table. Neighbouring datasets differ by replacing one row (``n`` is public), so a
replaced row moves one count down and one count up in each histogram/table: L1 sensitivity 2 and
L2 sensitivity sqrt(2) per query. Noise is added once, on the driver, to the concatenated counts.

* ``"laplace"``: each query gets a pure ``ε'``-DP (discrete) Laplace mechanism with ``b = 2/ε'``;
  the ``k`` queries compose by advanced composition (Dwork, Rothblum, Vadhan 2010) to ``(ε, δ)``,
  or by basic composition (``ε' = ε/k``, ``δ = 0``) when that gives the larger ``ε'`` (small k).
* ``"gaussian"``: one (discrete) Gaussian mechanism on all counts concatenated, whose L2
  sensitivity is ``sqrt(2k)``, calibrated by an accountant of ``accounting``: ``"exact"`` (the
  Gaussian's exact privacy curve; default) or ``"zcdp"`` (ρ-zCDP and the CKS 2020 conversion).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from dp_dask.data.counts import counts_from_queries, query_vector
from dp_dask.data.schema import Schema
from dp_dask.privacy.accounting import (
    ACCOUNTANTS,
    BASIC_COMPOSITION,
    EXACT_GDP,
    QUERY_L1_SENSITIVITY,
    ZCDP_CONVERSION,
    _check_accountant,
    _check_epsilon_delta,
    gaussian_rho,
    gaussian_sigma,
    laplace_per_query_epsilon,
    query_count,
    rho_budget,
)
from dp_dask.privacy.noise import SAMPLERS, gaussian_noise, laplace_noise
from dp_dask.privacy.split import BudgetPart, BudgetSplit

MECHANISMS = ("laplace", "gaussian")
_PLAN_RTOL = 1e-9
_ACCOUNTANT_TEXT = {"exact": EXACT_GDP, "zcdp": ZCDP_CONVERSION}


@dataclass(frozen=True)
class NoisePlan:
    """How much noise each released cell gets, and the accounting that justifies it.

    For the Gaussian mechanism ``accountant`` is the accountant's name ("exact" or "zcdp") and
    ``rho`` the measurement's charge under it (``accounting.gaussian_rho``); for Laplace it names
    the composition theorem.
    """

    mechanism: str
    epsilon: float
    delta: float
    k: int
    scale: float
    per_query_epsilon: float | None
    rho: float | None
    accountant: str
    sensitivity: float

    def split(self) -> BudgetSplit:
        """How (ε, δ) is spent across the k queries, as a value (rendered by
        :func:`~dp_dask.privacy.split.render_split`)."""
        if self.mechanism == "laplace":
            total_delta = 0.0 if self.accountant == BASIC_COMPOSITION else self.delta
            return BudgetSplit((BudgetPart(
                "queries", count=self.k, epsilon_each=self.per_query_epsilon,
                mechanism="Laplace", norm="L1", sensitivity=self.sensitivity,
                scale=self.scale),), self.accountant, self.epsilon, total_delta)
        zcdp = self.accountant == "zcdp"
        return BudgetSplit(
            (BudgetPart("queries concatenated, one Gaussian mechanism", count=self.k,
                        rho=self.rho, mechanism="Gaussian", norm="L2",
                        sensitivity_rule=f"sqrt(2k) = {self.sensitivity:.6g}",
                        scale=self.scale, scale_rule="sigma",
                        note="rho-zCDP" if zcdp else "sqrt(2 rho)-GDP, rho = mu^2/2"),),
            _ACCOUNTANT_TEXT[self.accountant], self.epsilon, self.delta,
            {} if zcdp else {"mu": math.sqrt(2 * self.rho)})

    @property
    def cell_std(self) -> float:
        """Standard deviation of the noise on one count."""
        return math.sqrt(2.0) * self.scale if self.mechanism == "laplace" else self.scale

    def to_json(self) -> dict[str, Any]:
        """All fields, as JSON-serialisable values (the split: :meth:`split`)."""
        return asdict(self)


def plan_noise(mechanism: str, epsilon: float, delta: float, m: int, *,
               accountant: str = "exact") -> NoisePlan:
    """Calibrate per-cell noise so that releasing all k = m + C(m, 2) queries is (ε, δ)-DP.

    ``accountant`` ("exact" or "zcdp", see ``accounting``) applies to the Gaussian mechanism;
    Laplace always uses advanced (or basic) composition.
    """
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown mechanism {mechanism!r}; expected one of {MECHANISMS}")
    _check_epsilon_delta(epsilon, delta)
    _check_accountant(accountant)
    if isinstance(m, bool) or not isinstance(m, int | np.integer) or m < 1:
        raise ValueError(f"m (number of attributes) must be an integer >= 1, got {m!r}")
    k = query_count(int(m))
    if mechanism == "laplace":
        per_query, composition = laplace_per_query_epsilon(epsilon, delta, k)
        return NoisePlan(
            mechanism="laplace",
            epsilon=float(epsilon),
            delta=float(delta),
            k=k,
            scale=QUERY_L1_SENSITIVITY / per_query,
            per_query_epsilon=per_query,
            rho=None,
            accountant=composition,
            sensitivity=QUERY_L1_SENSITIVITY,
        )
    l2_sensitivity = math.sqrt(k * QUERY_L1_SENSITIVITY)  # sqrt(2) per query, k disjoint queries
    rho = rho_budget(epsilon, delta, accountant)
    return NoisePlan(
        mechanism="gaussian",
        epsilon=float(epsilon),
        delta=float(delta),
        k=k,
        scale=gaussian_sigma(rho, l2_sensitivity, accountant),
        per_query_epsilon=None,
        rho=rho,
        accountant=accountant,
        sensitivity=l2_sensitivity,
    )


def _check_plan(plan: NoisePlan) -> None:
    """Refuse a plan whose noise does not pay for its recorded budget (e.g. edited by hand)."""
    if plan.mechanism == "laplace":
        charged, planned = plan.sensitivity / plan.scale, plan.per_query_epsilon
    elif plan.mechanism == "gaussian" and plan.accountant in ACCOUNTANTS:
        charged, planned = gaussian_rho(plan.scale, plan.sensitivity, plan.accountant), plan.rho
    else:
        raise RuntimeError(f"unknown mechanism/accountant in plan: {plan!r}; refusing to release")
    if planned is None or not math.isclose(charged, planned, rel_tol=_PLAN_RTOL, abs_tol=0.0):
        raise RuntimeError(
            f"this plan's noise costs {charged!r}, but it was calibrated to {planned!r}; "
            f"refusing to release"
        )


def add_noise(
    counts: np.ndarray, plan: NoisePlan, *, sampler: str = "opendp", seed: int | None = None
) -> np.ndarray:
    """Return ``counts`` plus noise calibrated by ``plan``, as float64 (not clamped).

    ``sampler="opendp"`` (the default, and the only one fit for a release) draws discrete Laplace
    or discrete Gaussian noise from OpenDP with OS entropy; it takes no seed, and it cross-checks
    that OpenDP's own privacy map of the mechanism is what the plan's scale implies.

    ``sampler="numpy"`` draws continuous Laplace/normal noise from ``np.random.default_rng(seed)``:
    reproducible, for tests and research only. Seeded noise is NOT private to anyone who knows or
    can guess the seed, and numpy's floating-point samplers are not hardened against
    floating-point attacks.
    """
    if sampler not in SAMPLERS:
        raise ValueError(f"unknown sampler {sampler!r}; expected one of {SAMPLERS}")
    if sampler == "opendp" and seed is not None:
        raise ValueError("the opendp sampler uses OS entropy and cannot be seeded")
    rng = np.random.default_rng(seed) if sampler == "numpy" else None
    _check_plan(plan)
    if plan.mechanism == "laplace":
        return laplace_noise(counts, plan.scale, sensitivity=int(plan.sensitivity),
                             sampler=sampler, rng=rng)
    return gaussian_noise(counts, plan.scale, sensitivity=plan.sensitivity, sampler=sampler,
                          rng=rng)


def clamp(noisy: np.ndarray) -> np.ndarray:
    """Set negative noisy counts to 0 (post-processing, so free of privacy cost)."""
    return np.maximum(np.asarray(noisy, dtype=np.float64), 0.0)


def noisy_count_matrix(exact: np.ndarray, schema: Schema, plan: NoisePlan, *,
                       sampler: str = "opendp", seed: int | None = None) -> np.ndarray:
    """The clamped noisy d×d counts: one draw per released query cell, structural zeros kept."""
    noisy = add_noise(query_vector(exact, schema), plan, sampler=sampler, seed=seed)
    return counts_from_queries(clamp(noisy), schema)
