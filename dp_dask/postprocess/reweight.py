"""Candidate rows weighted to fit the noisy measurements themselves, as a graphical model would.

The consistent tables fit each noisy table on its own (shrunk towards a tree's prior), so a
precise measurement of one table never corrects another. private-pgm (McKenna et al. 2019)
estimates one distribution from all measurements at once, minimising
Σ_t ‖A_t p − y_t‖² / σ_t² by entropic mirror descent on a graphical model. Here the
distribution is the candidate rows' weights (particles instead of a junction tree, so any set of
tables fits, on any domain): the same objective and the same exponentiated-gradient steps with
backtracking (Armijo), started from the raked weights and stopped after a fixed number of
iterations — stopping early is what regularises it, as the full minimiser fits the noise. Reads
only noisy counts and their public noise scales: post-processing.

Hand-written: mbi (private-pgm) is not on the package index, and its estimator needs a
junction tree, which every-pair measurements make as large as the whole domain.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from dp_dask.compiled import compiled
from dp_dask.data.cells import KEY_CHUNK, add_weights, chunk_keys
from dp_dask.data.tables import Domain
from dp_dask.postprocess.config import ReweightConfig
from dp_dask.postprocess.consistency import Measurement

# The tuned numbers (iterations, backtracking): ReweightConfig, docs/tuning.md.


def check_iterations(iterations: object) -> int | None:
    """``iterations`` if it is an integer ≥ 0 or None (by the noise: :func:`iterations_for`),
    else ValueError (checked before any work)."""
    if iterations is None:
        return None
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 0:
        raise ValueError(f"fit_iterations must be an integer ≥ 0 or None, not {iterations!r}")
    return iterations


def iterations_for(sigmas: Iterable[float], config: ReweightConfig = ReweightConfig()) -> int:
    """Mirror-descent steps for measurements of these noise scales: ``config.fit_iterations``
    at ``config.reference_precision``, times the square root of their precision's ratio to it
    where that is above 1, at most ``config.max_fit_iterations``."""
    precision = sum(1.0 / sigma**2 for sigma in sigmas)
    scaled = round(config.fit_iterations * math.sqrt(precision / config.reference_precision))
    return min(max(scaled, config.fit_iterations), config.max_fit_iterations)


class _Tables(NamedTuple):
    """The measurements flattened for the compiled passes: table t's cells are
    ``values[offsets[t]:offsets[t + 1]]`` and row i's cell in it is
    ``codes[i, first[t]] * stride[t] + codes[i, last[t]]`` (a 1-way table: first = last,
    stride 0)."""

    first: np.ndarray
    last: np.ndarray
    stride: np.ndarray
    offsets: np.ndarray
    values: np.ndarray
    precision: np.ndarray


def as_pairs(codes: np.ndarray, measurements: list[Measurement],
             sizes: np.ndarray) -> tuple[np.ndarray, list[Measurement], np.ndarray]:
    """k-way measurements (a, …, y, z), k ≥ 3, as 2-way ones of a derived column, the
    row-major cell of (a, …, y), and z (the same cells, row-major), so the compiled passes,
    which read two columns a table, fit them: the codes with those columns appended, the
    measurements, the sizes. Unchanged without."""
    if all(len(m.attributes) <= 2 for m in measurements):
        return codes, measurements, sizes
    domain = Domain(sizes)
    derived: dict[tuple[int, ...], int] = {}
    columns, pairs = [], []
    for m in measurements:
        if len(m.attributes) <= 2:
            pairs.append(m)
            continue
        *head, last = m.attributes
        if tuple(head) not in derived:
            derived[tuple(head)] = len(sizes) + len(columns)
            columns.append(domain.index(codes, head))
        pairs.append(Measurement((derived[tuple(head)], last), m.values, m.sigma))
    sizes = np.concatenate([sizes, [domain.cells(head) for head in derived]])
    dtype = np.min_scalar_type(int(sizes.max()) - 1)
    return (np.column_stack([codes.astype(dtype), *(c.astype(dtype) for c in columns)]),
            pairs, sizes)


def _flatten(measurements: list[Measurement], sizes: np.ndarray) -> _Tables:
    """``measurements`` (1-way histograms and 2-way tables) as one :class:`_Tables`."""
    if any(len(m.attributes) > 2 for m in measurements):
        raise ValueError("the weight fit reads 1-way and 2-way measurements only")
    return _Tables(np.array([m.attributes[0] for m in measurements], dtype=np.intp),
                   np.array([m.attributes[-1] for m in measurements], dtype=np.intp),
                   np.array([sizes[m.attributes[1]] if len(m.attributes) == 2 else 0
                             for m in measurements], dtype=np.uint32),
                   np.cumsum([0] + [m.values.size for m in measurements], dtype=np.intp),
                   np.concatenate([m.values for m in measurements], dtype=np.float64),
                   np.array([1.0 / m.sigma**2 for m in measurements]))


# Hand-written loops, compiled: numpy needs each table's cell keys as an array, a bincount of
# them and a gather, four passes over the rows per table where these take one each, and a
# rejected step's loss needs no gather. Each pass first writes a chunk of rows' cell keys to a
# small buffer, a loop the compiler vectorises (8 rows an instruction), then adds or gathers
# through it. The keys are unsigned (uint32: a table of 2³² cells would not fit in memory), so
# numba adds no negative-index fix to each access. The gradient takes GRADIENT_GROUP tables a
# pass, each row's sum held in a register across them (summed in the same order). On the DSS
# shape's 378 tables and 100 k rows: the loss 36 → 26 ms (numpy: 133), the gradient 31 → 17 ms
# (a key beside each add: 36 and 24; keys but one table a pass: 26 and 22), the fit 4.6 → 3.1 s,
# every result the same to the bit. Tried and slower there: two accumulators per table for
# alternate rows (loss 30 ms: only the tables of a few cells, whose adds wait on the last add to
# the same cell, gain), blocks of rows visiting every table (41 ms: the 214 k cells do not stay
# in cache), the loss's adds in groups of tables too (2: 1 % faster, 4: 5 % slower), the
# gradient in groups of 8 (22 ms). Cached beside this file, so a process (a Dask worker) loads
# them instead of compiling (~2.5 s); nogil, as numpy's loops release the GIL too.
GRADIENT_GROUP = 4


@compiled
def _loss_and_cells(codes: np.ndarray, weights: np.ndarray,
                    tables: _Tables) -> tuple[float, np.ndarray]:
    """Σ_t ‖A_t w − y_t‖² / σ_t² and its gradient in each cell, 2 (A_t w − y_t) / σ_t²
    (flattened as ``tables.values``). ``codes`` column-major: a table reads two columns."""
    cells = np.zeros(tables.values.size)
    keys = np.empty(KEY_CHUNK, dtype=np.uint32)
    loss = 0.0
    for t in range(tables.first.size):
        start, stop = tables.offsets[t], tables.offsets[t + 1]
        table = cells[start:stop]
        add_weights(table, codes[:, tables.first[t]], codes[:, tables.last[t]],
                    tables.stride[t], weights, keys)
        squares = 0.0
        for j in range(table.size):
            table[j] -= tables.values[start + j]
            squares += table[j] * table[j]
        loss += tables.precision[t] * squares
        table *= 2.0 * tables.precision[t]
    return loss, cells


@compiled
def _add_cells(sums: np.ndarray, codes: np.ndarray, cells: np.ndarray, tables: _Tables,
               begin: int, count: int, keys: np.ndarray) -> None:
    """Adds to each row's sum its cells of ``cells`` in tables ``begin`` … ``begin + count − 1``
    (``count`` ≤ the rows of the buffer ``keys``), in that order."""
    for start in range(0, codes.shape[0], keys.shape[1]):
        stop = min(start + keys.shape[1], codes.shape[0])
        for k in range(count):
            t = begin + k
            chunk_keys(codes[start:stop, tables.first[t]], codes[start:stop, tables.last[t]],
                        tables.stride[t], np.uint32(tables.offsets[t]), keys[k])
        chunk = sums[start:stop]
        for i in range(chunk.size):
            total = chunk[i]
            for k in range(count):
                total += cells[keys[k, i]]
            chunk[i] = total


@compiled
def _row_gradient(codes: np.ndarray, cells: np.ndarray, tables: _Tables) -> np.ndarray:
    """The loss's gradient in the weights: each row's sum of its cells' gradients ``cells``."""
    gradient = np.zeros(codes.shape[0])
    keys = np.empty((GRADIENT_GROUP, KEY_CHUNK), dtype=np.uint32)
    whole = tables.first.size - tables.first.size % GRADIENT_GROUP
    # The constant group lets the compiler unroll the loop over it; then the rest, fewer.
    for t in range(0, whole, GRADIENT_GROUP):
        _add_cells(gradient, codes, cells, tables, t, GRADIENT_GROUP, keys)
    _add_cells(gradient, codes, cells, tables, whole, tables.first.size - whole, keys)
    return gradient


def fit_weights(codes: np.ndarray, measurements: list[Measurement], sizes: np.ndarray,
                weights: np.ndarray, *, iterations: int | None = None,
                config: ReweightConfig = ReweightConfig()) -> np.ndarray:
    """The weights of the rows ``codes`` after ``iterations`` (None: ``config.fit_iterations``)
    steps of entropic mirror descent on Σ_t ‖A_t w − y_t‖² / σ_t², from ``weights``; their
    total stays that of ``weights``. Each measurement's values are a flattened (row-major)
    table of its attributes (any number: :func:`as_pairs`)."""
    total = float(weights.sum())
    iterations = config.fit_iterations if iterations is None else iterations
    if iterations == 0 or total <= 0 or not measurements:
        return weights
    codes, measurements, sizes = as_pairs(codes, measurements, sizes)
    tables = _flatten(measurements, sizes)
    codes = np.asfortranarray(codes)  # each table reads two columns
    loss, cells = _loss_and_cells(codes, weights, tables)
    gradient = _row_gradient(codes, cells, tables)
    step = 1.0 / max(float(np.abs(gradient).max()), 1e-300)
    for _ in range(iterations):
        while True:
            # Exponentiated gradient, shifted by its minimum so the exponent never overflows.
            trial = weights * np.exp(-step * (gradient - gradient.min()))
            trial *= total / trial.sum()
            promised = float(gradient @ (weights - trial))
            if promised <= config.converged * max(loss, 1.0):
                return weights  # no step gains more than rounding: at the minimum
            trial_loss, cells = _loss_and_cells(codes, trial, tables)
            if trial_loss <= loss - config.sufficient_decrease * promised:
                break
            step /= 2  # a rejected step needs only its loss: no gradient
        weights, loss = trial, trial_loss
        gradient = _row_gradient(codes, cells, tables)
        step *= config.step_growth
    return weights
