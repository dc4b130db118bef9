"""Tables of codes: the one place a clique's cells, a row's cell, a table, the one-hot dummies
and a table rounded to a total are computed (counting, evaluation, samplers, post-processing).

Layout: the functions here read codes (rows, m), a row's codes together, as the samplers and
post-processing hold them. The counting pass encodes a partition as (m, rows) (an attribute's
codes contiguous, :func:`dp_dask.data.encode.encode_partition`) and passes ``codes.T``: a view,
no copy, whose columns are those contiguous rows.

Tables are flattened row-major (C order) over the clique's attributes. The compiled passes of
:mod:`dp_dask.data.cells` (counting and weight fits of 1- and 2-way tables) and the row updates'
kernels stay specialised for speed and take their cell counts and strides from :class:`Domain`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dp_dask.data.schema import Schema


class Domain:
    """The attributes' sizes (public): what a clique's table looks like."""

    def __init__(self, sizes: Sequence[int] | np.ndarray) -> None:
        self.sizes = np.asarray(sizes)

    def shape(self, clique: Sequence[int]) -> tuple[int, ...]:
        """The table's shape: the clique's sizes."""
        return tuple(int(self.sizes[a]) for a in clique)

    def cells(self, clique: Sequence[int]) -> int:
        """The number of cells of the clique's table."""
        return math.prod(self.shape(clique))

    def strides(self, clique: Sequence[int]) -> tuple[int, ...]:
        """How far a step of each attribute's code moves in the flattened (row-major) table."""
        shape = self.shape(clique)
        return tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))

    def index(self, codes: np.ndarray, clique: Sequence[int]) -> np.ndarray:
        """Each row's cell of the clique's table (codes (rows, m)), as intp: bincount and take
        would convert. No attributes: every row in the one cell 0."""
        if len(clique) == 0:
            return np.zeros(len(codes), dtype=np.intp)
        keys = codes[:, clique[0]].astype(np.intp)
        for a in clique[1:]:
            keys *= self.sizes[a]
            keys += codes[:, a]
        return keys

    def table(self, codes: np.ndarray, clique: Sequence[int],
              weights: np.ndarray | None = None) -> np.ndarray:
        """The clique's table of codes (rows, m), flattened: each cell's rows (int64), or the
        sum of their ``weights`` (float64), from one bincount."""
        return np.bincount(self.index(codes, clique), weights=weights,
                           minlength=self.cells(clique))

    def tables(self, codes: np.ndarray, cliques: Sequence[Sequence[int]],
               weights: np.ndarray | None = None) -> np.ndarray:
        """Each clique's :meth:`table`, concatenated (int64, or float64 with ``weights``; empty
        without cliques)."""
        empty = np.zeros(0, dtype=np.int64 if weights is None else np.float64)
        return np.concatenate([empty, *(self.table(codes, c, weights) for c in cliques)])


def one_hot(codes: np.ndarray, schema: Schema) -> np.ndarray:
    """The (rows, d) uint8 dummies of codes (rows, m): a one at each attribute's value."""
    binary = np.zeros((len(codes), schema.d), dtype=np.uint8)
    binary[np.arange(len(codes))[:, None], schema.offsets + codes] = 1
    return binary


def round_to_total(values: np.ndarray, total: int) -> np.ndarray:
    """Integers ≥ 0 summing to ``total``, proportional to ``values`` (largest remainder)."""
    values = np.asarray(values, dtype=np.float64)
    mass = values.sum()
    scaled = values * (total / mass) if mass > 0 else np.full(values.shape, total / values.size)
    counts = np.floor(scaled).astype(np.int64)
    short = int(total - counts.sum())
    if short > 0:
        counts[np.argsort(counts - scaled, kind="stable")[:short]] += 1
    return counts
