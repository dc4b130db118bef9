"""Release methods, one module each, built from the shared stages (counts, privacy, sampling).

``marginals`` (the default): consistent noisy 1-/2-way marginals and row updates. The paper's
binary Gaussian copula lives in dp_dask.copula (model, correlation, sample) and is
``--method copula``.
"""
