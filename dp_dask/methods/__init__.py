"""Release methods, one module (or package) each, built from the shared stages (counts, privacy,
sampling).

``marginals`` (the default): consistent noisy 1-/2-way marginals and row updates. ``copula``:
the paper's binary Gaussian copula (its math in dp_dask.copula). Each method subclasses
dp_dask.synthesizer.Synthesizer, which registers it by name; importing this package imports every
method, so the registry is full wherever dp_dask is imported (dp_dask/__init__.py does).
"""

from dp_dask.methods import copula, dpcopula, dpcopula_hybrid, dpcopula_mle, dpview, marginals

__all__ = ["copula", "dpcopula", "dpcopula_hybrid", "dpcopula_mle", "dpview", "marginals"]
