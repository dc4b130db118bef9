"""Decoding: from latent normals back to one category per attribute, labelled by the schema.

The paper's binary output can have several 1s, or none, among an attribute's dummies. We pick
the category whose latent value plus a per-category offset is largest (argmax). The offsets are
calibrated on draws from the model itself so each attribute's decoded frequencies equal its noisy
marginals; this is post-processing of noisy statistics and costs no budget.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.special import ndtri

from dp_dask.copula import psd_correlation_factor
from dp_dask.schema import Schema

# Bounded steps keep the calibration stable for a category that no draw picks yet (whose log
# ratio would otherwise be unbounded); the frequency floor does the same for log(0). A full
# log-ratio step (exact for logit choice) overshoots and oscillates for normal latents; half a
# step, halved again whenever the error grows, converged in 3-5 iterations for 6-411 categories
# (200k draws), where a fixed half step oscillated above tolerance for 200 iterations at 42+.
MAX_STEP = 1.0
STEP_GAIN = 0.5
MIN_STEP_GAIN = 0.05
FREQUENCY_FLOOR = 0.1


def calibrate_offsets(correlation: np.ndarray, marginals: np.ndarray, schema: Schema, *,
                      draws: int = 200_000, iterations: int = 200, tolerance: float = 2e-4,
                      seed: int = 0) -> np.ndarray:
    """Offsets c such that argmax over each attribute of (Y + c) has frequencies ≈ marginals.

    An attribute's decoding depends only on its own block of the correlation matrix, so each is
    calibrated on its own draws (common random numbers across iterations).
    """
    rng = np.random.default_rng(seed)
    offsets = np.zeros(schema.d)
    for o, s in zip(schema.offsets, schema.sizes):
        target = marginals[o : o + s]
        if s == 1:
            continue
        factor = psd_correlation_factor(correlation[o : o + s, o : o + s])
        latent = rng.standard_normal((draws, s), dtype=np.float32) @ factor.T.astype(np.float32)
        c = ndtri(target)  # start at the binary thresholds: Y_a > Φ⁻¹(1 - p_a)
        gain, previous = STEP_GAIN, np.inf
        for _ in range(iterations):
            picked = np.bincount(np.argmax(latent + c.astype(np.float32), axis=1),
                                 minlength=s) / draws
            error = np.abs(picked - target).max()
            if error < tolerance:
                break
            if error > previous:
                gain = max(gain / 2, MIN_STEP_GAIN)
            previous = error
            ratio = np.log(target) - np.log(np.maximum(picked, FREQUENCY_FLOOR / draws))
            c = c + np.clip(gain * ratio, -MAX_STEP, MAX_STEP)
        offsets[o : o + s] = c
    return offsets


def decode_latent(latent: np.ndarray, offsets: np.ndarray, schema: Schema) -> np.ndarray:
    """Codes (rows, m): per attribute the argmax of latent + offsets over its dummy columns."""
    codes = np.empty((latent.shape[0], schema.m), dtype=np.int16)
    for i, (o, s) in enumerate(zip(schema.offsets, schema.sizes)):
        codes[:, i] = np.argmax(latent[:, o : o + s] + offsets[o : o + s], axis=1)
    return codes


def codes_to_frame(codes: np.ndarray, schema: Schema) -> pd.DataFrame:
    """A frame in the original schema: one categorical column per attribute, schema labels."""
    return pd.DataFrame({
        attribute.name: pd.Categorical.from_codes(codes[:, i], categories=list(attribute.labels))
        for i, attribute in enumerate(schema.attributes)
    })
