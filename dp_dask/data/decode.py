"""Decoding: from latent normals back to one category per attribute, labelled by the schema.

The paper's binary output can have several 1s, or none, among an attribute's dummies. We pick
the category whose latent value plus a per-category offset is largest (argmax). The offsets are
calibrated on draws from the model itself so each attribute's decoded frequencies equal its noisy
marginals; this is post-processing of noisy statistics and costs no budget.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from scipy.special import ndtri

from dp_dask.compiled import compiled
from dp_dask.copula.correlation import (
    Symmetry,
    exchangeable_groups,
    psd_correlation_factor,
    times_lower_factor,
)
from dp_dask.copula.normals import fill_standard_normal
from dp_dask.data.schema import Schema

# Bounded steps keep the calibration stable for a category that no draw picks yet (whose log
# ratio would otherwise be unbounded); the frequency floor does the same for log(0). A full
# log-ratio step (exact for logit choice) overshoots and oscillates for normal latents; half a
# step, halved again whenever the error grows, converged in 3-5 iterations for 6-411 categories
# (200k draws), where a fixed half step oscillated above tolerance for 200 iterations at 42+.
MAX_STEP = 1.0
STEP_GAIN = 0.5
MIN_STEP_GAIN = 0.05
FREQUENCY_FLOOR = 0.1
# Attributes with at least this many categories are drawn through exchangeable groups (below,
# the triangular s × s product per draw costs seconds at most).
GROUPED_MIN_CATEGORIES = 1_000
# Values per chunk of the grouped draws through the factor (32 MB of float32).
_CHUNK_VALUES = 2**23
# Smallest variance of a group mean: a standard deviation of 1e-6 against latents of 1.
_VARIANCE_FLOOR = 1e-12


def calibrate_offsets(correlation: np.ndarray, marginals: np.ndarray, schema: Schema, *,
                      draws: int = 200_000, iterations: int = 200, tolerance: float = 2e-4,
                      seed: int = 0, grouped_from: int = GROUPED_MIN_CATEGORIES) -> np.ndarray:
    """Offsets c such that argmax over each attribute of (Y + c) has frequencies ≈ marginals.

    An attribute's decoding depends only on its own block of the correlation matrix, so each is
    calibrated on its own draws (common random numbers across iterations). An attribute of at
    least ``grouped_from`` categories draws them through :func:`exchangeable_groups`: the
    same distribution for a fraction of the work, other draws than the plain factor's.
    """
    rng = np.random.default_rng(seed)
    offsets = np.zeros(schema.d)
    for o, s in zip(schema.offsets, schema.sizes):
        target = marginals[o : o + s]
        if s == 1:
            continue
        block = correlation[o : o + s, o : o + s]
        groups = exchangeable_groups(block) if s >= grouped_from else None
        # Grouped categories are drawn in contiguous columns: work in that order, map back.
        order = np.concatenate([np.setdiff1d(np.arange(s), np.concatenate(groups)), *groups]
                               ) if groups else np.arange(s)
        latent = _latent_draws(block, order, groups, draws, rng)
        target = target[order]
        c = ndtri(target)  # start at the binary thresholds: Y_a > Φ⁻¹(1 - p_a)
        gain, previous = STEP_GAIN, np.inf
        for _ in range(iterations):
            picked = _decoded_counts(latent, c.astype(np.float32)) / draws
            off = np.abs(picked - target)
            error = off.max()
            if error < tolerance:
                break
            if error > previous:
                gain = max(gain / 2, MIN_STEP_GAIN)
            previous = error
            # Only the categories off by the tolerance move: stepping one met by chance would
            # fit the draws' noise (a rare category's few hits), not its target.
            ratio = np.log(target) - np.log(np.maximum(picked, FREQUENCY_FLOOR / draws))
            c = c + np.where(off >= tolerance, np.clip(gain * ratio, -MAX_STEP, MAX_STEP), 0.0)
        offsets[o + order] = c
    return offsets


def _latent_draws(block: np.ndarray, order: np.ndarray, groups: list[np.ndarray] | None,
                  draws: int, rng: np.random.Generator) -> np.ndarray:
    """(draws, s) float32 normals with correlation ``block``, columns in ``order`` (the
    ungrouped categories, then each group's members, as :func:`calibrate_offsets` builds it).

    Standard normals times the block's factor, applied as the triangular matrix it is, in place
    (half the flops of a GEMM, no second array). With ``groups``, a group G with inner
    correlation r is its mean W plus independent residuals: Y_j = W + √(1 - r)·(Z_j - Z̄_G),
    where Z̄_G·√|G| is a standard normal independent of the Z_j - Z̄_G. So the factor is only
    needed for the ungrouped categories and one mean per group (their covariance is the block
    averaged over each group); the rest costs O(s) per draw. The same draws × s normals are
    taken from ``rng`` either way, so later attributes draw the same.
    """
    s = len(block)
    latent = fill_standard_normal(rng.bit_generator, np.empty((draws, s), dtype=np.float32))
    if not groups:
        return times_lower_factor(latent, psd_correlation_factor(block))
    symmetry = Symmetry(s, tuple(groups))  # its reduced order is ``order``
    reduced, anti, _ = symmetry.reduce(block)
    # The reduced matrix uses group indicators / √n; the group means' covariance is it / √(n·n').
    covariance = reduced / np.sqrt(np.outer(symmetry.multiplicity, symmetry.multiplicity))
    # A group that is the whole attribute at r = -1/(s - 1) (its nearest correlation when the
    # pairwise rule meets no dependence) has a constant mean: variance 0, ±1e-14 in rounding.
    scale = np.sqrt(np.maximum(np.diag(covariance), _VARIANCE_FLOOR))
    factor = psd_correlation_factor(covariance / np.outer(scale, scale)) * scale[:, None]
    n = len(symmetry.ungrouped)
    bounds = np.cumsum([n] + [len(g) for g in groups])
    means = np.empty((draws, len(groups)), dtype=np.float32)  # standardised, then W
    for k, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:])):
        mean = latent[:, start:stop].mean(axis=1, keepdims=True)
        latent[:, start:stop] -= mean
        means[:, k] = mean[:, 0] * np.float32(np.sqrt(stop - start))
    # Through the factor a chunk of rows at a time: no second array of draws × (n + groups).
    chunk = max(1, _CHUNK_VALUES // len(covariance))
    buffer = np.empty((min(chunk, draws), len(covariance)), dtype=np.float32)
    for start in range(0, draws, chunk):
        rows = slice(start, min(start + chunk, draws))
        part = buffer[: rows.stop - start]
        part[:, :n] = latent[rows, :n]
        part[:, n:] = means[rows]
        part = times_lower_factor(part, factor)
        latent[rows, :n] = part[:, :n]
        means[rows] = part[:, n:]
    # A member is its group's mean plus √(1 - r)·residual; 1 - r is the group's zero-sum eigenvalue.
    for k, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:])):
        latent[:, start:stop] *= np.float32(np.sqrt(max(anti[k], 0.0)))
        latent[:, start:stop] += means[:, k, None]
    return latent


def _decoded_counts(latent: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """How often each column is the argmax of latent + offsets (in place: no second
    draws × s array, 4 GB for 5,000 categories)."""
    s = latent.shape[1]
    whole = np.zeros(1, dtype=np.int64), np.full(1, s, dtype=np.int64)
    return np.bincount(_argmax_codes(latent, offsets, *whole)[:, 0], minlength=s)


def decode_latent(latent: np.ndarray, offsets: np.ndarray, schema: Schema,
                  xp: Any = np) -> np.ndarray:
    """Codes (rows, m): per attribute the argmax of latent + offsets over its dummy columns
    (``xp``: the array module of ``latent``, NumPy or CuPy)."""
    if xp is np:
        return _argmax_codes(latent, offsets, np.asarray(schema.offsets, dtype=np.int64),
                             np.asarray(schema.sizes, dtype=np.int64))
    codes = xp.empty((latent.shape[0], schema.m), dtype=xp.int16)
    for i, (o, s) in enumerate(zip(schema.offsets, schema.sizes)):
        codes[:, i] = xp.argmax(latent[:, o : o + s] + offsets[o : o + s], axis=1)
    return codes


@compiled
def _argmax_codes(latent: np.ndarray, offsets: np.ndarray, starts: np.ndarray,
                  sizes: np.ndarray) -> np.ndarray:
    """NumPy's per-attribute argmax, row by row in one pass (the first of equal maxima, in the
    same arithmetic): NumPy's took 6.3 µs a row at d = 2,000, a tenth of a copula draw, in
    temporaries and short rows."""
    codes = np.empty((latent.shape[0], len(starts)), dtype=np.int16)
    for row in range(latent.shape[0]):
        for i in range(len(starts)):
            o = starts[i]
            best = 0
            top = latent[row, o] + offsets[o]
            for j in range(1, sizes[i]):
                value = latent[row, o + j] + offsets[o + j]
                if value > top:
                    best, top = j, value
            codes[row, i] = best
    return codes


def codes_to_frame(codes: np.ndarray, schema: Schema) -> pd.DataFrame:
    """One categorical column per attribute, of the schema's labels: the ``label`` decoding of a
    release (typed values: :func:`dp_dask.data.values.decode_frame`)."""
    return pd.DataFrame({
        attribute.name: pd.Categorical.from_codes(codes[:, i], categories=list(attribute.labels))
        for i, attribute in enumerate(schema.attributes)
    })
