"""DPView's measurement: the budget split over the views and their Laplace tables, the only
step that reads exact counts."""

from __future__ import annotations

import math

import numpy as np

from dp_dask.methods.dpview.config import SHARE_EXPONENT, View
from dp_dask.privacy.noise import laplace_noise


def budget_shares(domains: np.ndarray) -> np.ndarray:
    """Pᵢ = sᵢ^(1/3) / Σⱼ sⱼ^(1/3): minimises Σ sᵢ·2bᵢ² with bᵢ ∝ 1/Pᵢ and ΣPᵢ = 1 (Lagrange)."""
    weights = np.asarray(domains, dtype=np.float64) ** SHARE_EXPONENT
    return weights / weights.sum()


def laplace_scales(epsilon: float, shares: np.ndarray, sensitivity: int = 2) -> np.ndarray:
    """bᵢ = Δ/(ε·Pᵢ): view i's measurement is (ε·Pᵢ)-DP."""
    return sensitivity / (epsilon * np.asarray(shares))


def split_views(vector: np.ndarray, views: tuple[View, ...], sizes: np.ndarray
                ) -> list[np.ndarray]:
    """The concatenated view vector of dp_dask.data.counts.view_counts_from_codes as view tables."""
    shapes = [tuple(int(sizes[a]) for a in v) for v in views]
    bounds = np.cumsum([math.prod(s) for s in shapes])[:-1]
    return [part.reshape(shape) for part, shape in zip(np.split(vector, bounds), shapes)]


def measure_views(exact: list[np.ndarray], scales: np.ndarray, *, sensitivity: int = 2,
                  sampler: str = "opendp", rng: np.random.Generator | None = None
                  ) -> list[np.ndarray]:
    """Each exact view table + Laplace of its scale: one measurement per view."""
    return [laplace_noise(table.ravel(), float(scale), sensitivity=sensitivity,
                          sampler=sampler, rng=rng).reshape(table.shape)
            for table, scale in zip(exact, scales)]
