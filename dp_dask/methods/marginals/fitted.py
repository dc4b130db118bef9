"""What the marginals method's fit makes and its samplers read: the noisy measurements, their
consistent marginals and the spanning tree (or the dense joint). The model
(:class:`~.model.MarginalModel`) is these numbers with their samplers, saved and loaded: the
samplers (:mod:`.sampler`, :mod:`.conditioned`) read this class, and the model, above them,
names them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dp_dask.data.schema import Schema
from dp_dask.methods.marginals.config import MarginalsConfig
from dp_dask.postprocess.consistency import Marginals, Measurement
from dp_dask.tuning import as_config


@dataclass(frozen=True)
class FittedMarginals:
    """The noisy measurements, their consistent marginals and the spanning tree: all that
    sampling needs."""

    schema: Schema
    n_rows: int
    marginals: Marginals
    order: np.ndarray  # breadth-first order of the spanning tree
    parents: np.ndarray  # parent of each attribute, -1 for the root
    measurements: tuple[Measurement, ...]
    metadata: dict[str, Any] = field(default_factory=dict)
    # attribute → its consistent fine histogram (counts over its grid's cells), for decoding
    fine: dict[int, np.ndarray] = field(default_factory=dict)
    # the fitted dense joint (counts, shape the sizes) a dense-joint release samples (joint.py)
    joint: np.ndarray | None = None

    @property
    def config(self) -> MarginalsConfig:
        """The fit's config: its fields that differ from their defaults are recorded."""
        return as_config(MarginalsConfig, self.metadata.get("config"))
