"""Noise samplers: one measurement (a vector of integer counts, one noise draw per count).

``sampler="opendp"`` (the default, and the only one fit for a release) draws OpenDP's discrete
Gaussian or discrete Laplace with OS entropy, after checking that OpenDP's own privacy map of the
measurement is what the caller's σ (or b) and sensitivity imply. ``sampler="numpy"`` draws
continuous normal/Laplace noise from a caller-supplied ``numpy.random.Generator``: reproducible, for
tests and research only. Seeded noise is NOT private to anyone who knows or can guess the seed, and
numpy's floating-point samplers are not hardened against floating-point attacks (Mironov 2012).

OpenDP's samplers are under its ``contrib`` feature flag, which OpenDP uses for components that
have not (yet) completed its own vetting process; see docs/privacy.md.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

SAMPLERS = ("opendp", "numpy")
_MAP_RTOL = 1e-9
# Cells per OpenDP call below which threads cost more than they save (~10-25 µs per cell).
_MIN_NOISE_CHUNK = 50_000


def _check_counts(counts: Any) -> np.ndarray:
    counts = np.asarray(counts)
    if counts.ndim != 1 or not np.issubdtype(counts.dtype, np.integer):
        raise ValueError(
            f"counts must be a 1-D integer array, got shape {counts.shape} {counts.dtype}"
        )
    # i64 rather than Python int (which OpenDP maps to i32): counts can exceed 2**31.
    return np.ascontiguousarray(counts, dtype=np.int64)


class DrawWatch:
    """Whether noise was drawn while this watch was open (see :func:`watch_draws`)."""

    drawn = False


_watches: set[DrawWatch] = set()


@contextlib.contextmanager
def watch_draws() -> Iterator[DrawWatch]:
    """A watch that every noise draw in this process marks, on any thread, until the block ends
    (dp_dask.privacy.ledger.charging: a release that fails after its first draw keeps its
    charge). Two releases watched at once mark each other: only ever keeping a charge."""
    watch = DrawWatch()
    _watches.add(watch)
    try:
        yield watch
    finally:
        _watches.discard(watch)


def _check_sampler(sampler: str, rng: np.random.Generator | None) -> None:
    """Every sampler (here, dp_dask.privacy.selection and .efpa) calls this right before it
    draws: it also marks the open :func:`watch_draws` watches."""
    if sampler not in SAMPLERS:
        raise ValueError(f"unknown sampler {sampler!r}; expected one of {SAMPLERS}")
    if sampler == "opendp" and rng is not None:
        raise ValueError("the opendp sampler uses OS entropy and cannot be seeded")
    if sampler == "numpy" and not isinstance(rng, np.random.Generator):
        raise ValueError("the numpy sampler needs rng=np.random.default_rng(seed)")
    for watch in list(_watches):
        watch.drawn = True


def _check_scale(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def _check_map(loss: float, expected: float, what: str) -> None:
    if not math.isclose(loss, expected, rel_tol=_MAP_RTOL, abs_tol=0.0):
        raise RuntimeError(
            f"OpenDP's privacy map gives {what} = {loss!r} for this measurement, but the noise "
            f"was calibrated to {expected!r}; refusing to release"
        )


def _draw(measurements: list[tuple[Any, np.ndarray]]) -> list[np.ndarray]:
    """Apply each OpenDP measurement to its counts; float64 noisy counts, in order."""
    # OpenDP releases the GIL while sampling (measured: 1.9x on 2 threads), so all draws share
    # one pool: large vectors split into disjoint chunks, small measurements side by side (the
    # DSS shape's 378 tables come in 210 noise scales). Each cell still gets exactly one draw
    # of its own measurement.
    threads = os.cpu_count() or 1
    chunked = [np.array_split(counts, max(1, min(threads, counts.size // _MIN_NOISE_CHUNK)))
               for _, counts in measurements]
    tasks = [(meas, chunk) for (meas, _), chunks in zip(measurements, chunked)
             for chunk in chunks]
    with ThreadPoolExecutor(max(1, min(threads, len(tasks)))) as pool:  # none: a 1-column schema
        drawn = pool.map(lambda task: np.asarray(task[0](task[1]), dtype=np.int64), tasks)
        # pool.map yields in task order, so each measurement's chunks come back together.
        return [np.concatenate([next(drawn) for _ in chunks]).astype(np.float64)
                for chunks in chunked]


def _opendp() -> Any:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    return dp


def gaussian_noise(counts: np.ndarray, sigma: float, *, sensitivity: float,
                   sampler: str = "opendp",
                   rng: np.random.Generator | None = None) -> np.ndarray:
    """``counts`` plus Gaussian noise of std ``sigma`` per cell, as float64 (not clamped).

    One measurement over the whole vector, whose L2 sensitivity (how far the counts can move
    between neighbouring datasets) is ``sensitivity``; it costs ρ = Δ²/(2σ²) in zCDP, which is
    what OpenDP's privacy map of its discrete Gaussian must report before anything is drawn.
    For the charge under the exact accountant see ``accounting.gaussian_rho``.
    """
    return gaussian_measurements([(counts, sigma, sensitivity)], sampler=sampler, rng=rng)[0]


def gaussian_measurements(vectors: list[tuple[np.ndarray, float, float]], *,
                          sampler: str = "opendp",
                          rng: np.random.Generator | None = None) -> list[np.ndarray]:
    """:func:`gaussian_noise` of each (counts, σ, sensitivity): one measurement each, every
    privacy map checked before anything is drawn; OpenDP's draws run on threads together,
    numpy's in order from ``rng``."""
    _check_sampler(sampler, rng)
    checked = []
    for counts, sigma, sensitivity in vectors:
        checked.append(_check_counts(counts))
        _check_scale("sigma", sigma)
        _check_scale("sensitivity", sensitivity)
    if sampler == "numpy":
        return [counts.astype(np.float64) + rng.normal(0.0, sigma, size=counts.shape)
                for counts, (_, sigma, _) in zip(checked, vectors)]
    dp = _opendp()
    measurements = []
    for counts, (_, sigma, sensitivity) in zip(checked, vectors):
        meas = dp.m.make_gaussian(dp.vector_domain(dp.atom_domain(T="i64")),
                                  dp.l2_distance(T="f64"), scale=sigma)
        _check_map(meas.map(sensitivity), sensitivity**2 / (2 * sigma**2), "rho (zCDP)")
        measurements.append((meas, counts))
    return _draw(measurements)


def laplace_noise(counts: np.ndarray, scale: float, *, sensitivity: int,
                  sampler: str = "opendp",
                  rng: np.random.Generator | None = None) -> np.ndarray:
    """``counts`` plus Laplace noise of scale b per cell, as float64 (not clamped).

    One pure-DP measurement with integer L1 sensitivity Δ₁: ε = Δ₁/b, checked against OpenDP's map.
    """
    counts = _check_counts(counts)
    _check_scale("scale", scale)
    if isinstance(sensitivity, bool) or int(sensitivity) != sensitivity or sensitivity < 1:
        raise ValueError(f"the L1 sensitivity must be an integer >= 1, got {sensitivity!r}")
    _check_sampler(sampler, rng)
    if sampler == "numpy":
        return counts.astype(np.float64) + rng.laplace(0.0, scale, size=counts.shape)
    dp = _opendp()
    meas = dp.m.make_laplace(dp.vector_domain(dp.atom_domain(T="i64")),
                             dp.l1_distance(T="i64"), scale=scale)
    _check_map(meas.map(int(sensitivity)), sensitivity / scale, "epsilon")
    return _draw([(meas, counts)])[0]
