"""Compiled passes over rows that add (or multiply by) per-row values in the cells of a table,
without an array of cell keys per table: counting (data.counts), raking and the weight fit
(postprocess) share them. Why hand-written and how they were tuned: postprocess/reweight.py.
Cached beside this file, so a process (a Dask worker) loads them instead of compiling."""

from __future__ import annotations

import numpy as np

from dp_dask.compiled import compiled
from dp_dask.data.tables import Domain

KEY_CHUNK = 1024  # rows a key buffer holds: 4 KiB, in L1 beside the rows it reads


@compiled
def chunk_keys(first: np.ndarray, last: np.ndarray, stride: np.uint32, offset: np.uint32,
                keys: np.ndarray) -> None:
    """``keys[i] = offset + first[i] * stride + last[i]``: a chunk of rows' cells."""
    for i in range(first.size):
        keys[i] = offset + first[i] * stride + last[i]


@compiled
def add_weights(counts: np.ndarray, first: np.ndarray, last: np.ndarray, stride: np.uint32,
                weights: np.ndarray, keys: np.ndarray) -> None:
    """Adds each row's weight to its cell ``first * stride + last`` of ``counts``, rows in
    order (the sums of ``np.bincount``). ``keys``: a uint32 buffer for a chunk's keys."""
    for start in range(0, first.size, keys.size):
        stop = min(start + keys.size, first.size)
        chunk_keys(first[start:stop], last[start:stop], stride, np.uint32(0), keys)
        chunk = weights[start:stop]
        for i in range(chunk.size):
            counts[keys[i]] += chunk[i]


@compiled
def multiply_weights(weights: np.ndarray, first: np.ndarray, last: np.ndarray,
                     stride: np.uint32, ratio: np.ndarray, keys: np.ndarray) -> None:
    """Multiplies each row's weight by its cell ``first * stride + last`` of ``ratio``."""
    for start in range(0, first.size, keys.size):
        stop = min(start + keys.size, first.size)
        chunk_keys(first[start:stop], last[start:stop], stride, np.uint32(0), keys)
        chunk = weights[start:stop]
        for i in range(chunk.size):
            chunk[i] *= ratio[keys[i]]


def table_sums(codes: np.ndarray, cliques: list[tuple[int, ...]], sizes: np.ndarray,
               weights: np.ndarray) -> list[np.ndarray]:
    """Each 1- or 2-attribute table of ``codes`` (rows, m), flattened row-major: the sum of its
    rows' ``weights`` in each cell (:meth:`Domain.table`'s, specialised for speed), by
    :func:`add_weights` — ``np.bincount``'s sums to the bit,
    without a key array and a bincount per table (an estimate's 378 tables on the DSS shape:
    0.17 → 0.03 CPU s per 100 k rows)."""
    columns = np.asfortranarray(codes)  # each table reads two columns
    weights = np.asarray(weights, dtype=np.float64)
    keys = np.empty(KEY_CHUNK, dtype=np.uint32)
    domain = Domain(sizes)
    tables = []
    for clique in cliques:
        if not 1 <= len(clique) <= 2:
            raise ValueError(f"table_sums reads 1- and 2-attribute tables, not {clique}")
        table = np.zeros(domain.cells(clique))
        # a 1-way table reads its column as both first and last: stride 0
        stride = np.uint32(domain.strides(clique)[0] if len(clique) == 2 else 0)
        add_weights(table, columns[:, clique[0]], columns[:, clique[-1]], stride, weights, keys)
        tables.append(table)
    return tables
