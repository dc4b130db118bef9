"""Privacy: accounting (calibration and budgets), noise samplers, and the plan for a release.

* ``accounting``: (ε, δ) ↔ noise for Laplace (advanced composition) and Gaussian measurements
  (a budget ρ spent in shares, under the "exact" Gaussian-DP or the "zcdp" accountant).
* ``noise``: one measurement over a vector of counts (OpenDP's discrete samplers, or seeded numpy
  for tests).
* ``plan``: the noise plan for the k = m + C(m, 2) released marginals, and applying it.

Everything importable from ``dp_dask.privacy`` before the split still is.
"""

from dp_dask.privacy.accounting import (
    ACCOUNTANTS,
    ADVANCED_COMPOSITION,
    BASIC_COMPOSITION,
    EXACT_GDP,
    QUERY_L1_SENSITIVITY,
    ZCDP_CONVERSION,
    advanced_composition_epsilon,
    epsilon_spent,
    gaussian_rho,
    gaussian_sigma,
    gdp_delta,
    gdp_epsilon,
    gdp_mu_for,
    laplace_per_query_epsilon,
    query_count,
    rho_budget,
    sigma_table,
    zcdp_delta,
    zcdp_epsilon,
    zcdp_rho_for,
)
from dp_dask.privacy.noise import SAMPLERS, gaussian_noise, laplace_noise
from dp_dask.privacy.plan import (
    MECHANISMS,
    NoisePlan,
    add_noise,
    clamp,
    noisy_count_matrix,
    plan_noise,
)

__all__ = [
    "ACCOUNTANTS",
    "ADVANCED_COMPOSITION",
    "BASIC_COMPOSITION",
    "EXACT_GDP",
    "MECHANISMS",
    "QUERY_L1_SENSITIVITY",
    "SAMPLERS",
    "ZCDP_CONVERSION",
    "NoisePlan",
    "add_noise",
    "advanced_composition_epsilon",
    "clamp",
    "epsilon_spent",
    "gaussian_noise",
    "gaussian_rho",
    "gaussian_sigma",
    "gdp_delta",
    "gdp_epsilon",
    "gdp_mu_for",
    "laplace_noise",
    "laplace_per_query_epsilon",
    "noisy_count_matrix",
    "plan_noise",
    "query_count",
    "rho_budget",
    "sigma_table",
    "zcdp_delta",
    "zcdp_epsilon",
    "zcdp_rho_for",
]
