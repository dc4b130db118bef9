"""The binary Gaussian copula of Asghar et al. as a method (``--method copula``): the spine's
d×d count matrix, noised once by the plan of dp_dask.privacy.plan, fitted by dp_dask.copula.model
and sampled by dp_dask.copula.sample."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dp_dask.copula.model import CopulaModel, fit_model
from dp_dask.data.io import Location
from dp_dask.data.schema import Schema
from dp_dask.fit_cost import FitCost, FitWork, copula_cost
from dp_dask.privacy import NoisePlan, noisy_count_matrix, plan_noise
from dp_dask.synthesizer import Synthesizer
from dp_dask.timing import timed


class GaussianCopulaSynthesizer(Synthesizer):
    """The binary Gaussian copula of Asghar et al., as in the paper (``--method copula``).

    Extra parameters: ``mechanism`` "gaussian" (one Gaussian mechanism, default) or "laplace"
    (per-query Laplace, advanced composition, as in the paper); ``accountant`` of the Gaussian
    mechanism; ``within_attribute`` "pairwise" (default) or "zero": how an attribute's exclusive
    dummies enter the latent correlation matrix (docs/method.md); ``calibration_draws``.
    """

    name = "copula"
    gpu_sampling = True
    grows_with_d = "the copula's correlation repair grows as d³"

    @classmethod
    def fit_cost(cls, work: FitWork) -> FitCost:
        return copula_cost(work)

    def __init__(self, schema: Schema | str | Path, *, mechanism: str = "gaussian",
                 accountant: str = "exact", within_attribute: str = "pairwise",
                 calibration_draws: int = 200_000, **common: Any) -> None:
        super().__init__(schema, **common)
        self.mechanism = mechanism
        self.accountant = accountant
        self.within_attribute = within_attribute
        self.calibration_draws = calibration_draws

    def _plan(self) -> NoisePlan:
        return plan_noise(self.mechanism, self.epsilon, self.delta, self.schema.m,
                          accountant=self.accountant)

    def _privacy_plan(self) -> dict[str, Any]:
        return self._plan().to_json()

    def _fit_counts(self, exact: np.ndarray, n_rows: int,
                    metadata: dict[str, Any]) -> CopulaModel:
        plan = self._plan()
        with timed(self.timings_, "noise"):
            noisy_counts = noisy_count_matrix(exact, self.schema, plan,
                                              sampler=self.noise_sampler, seed=self.noise_seed)
        metadata |= {
            "method": "dp-gaussian-copula (Asghar et al.)",
            "privacy": self._privacy_record(
                **plan.to_json(), split=plan.split(), negatives="clamped to 0",
                post_processing="histograms and tables projected onto the public total n; "
                                "noise-sized dependence shrunk (see model)"),
        }
        with timed(self.timings_, "copula"):
            return fit_model(noisy_counts, self.schema, n_rows,
                             within_attribute=self.within_attribute, noise_std=plan.cell_std,
                             calibration_draws=self.calibration_draws, metadata=metadata,
                             timings=self.timings_)

    @staticmethod
    def load_model(path: Location, document: dict[str, Any],
                   storage_options: dict[str, Any] | None = None) -> CopulaModel:
        return CopulaModel.load(path, storage_options)
