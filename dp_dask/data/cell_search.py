"""Compiled per-row passes of a row's cell within its bin, for counting fine histograms
(:func:`dp_dask.data.encode.fine_cells`) and decoding values (:mod:`dp_dask.data.values`).

Each returns, row for row, what NumPy's vectorised form returns (the docstrings give it), so a
release is the same: a global ``np.searchsorted`` of every row into a table of a hundred cells,
then a clip to the row's bin, and a gather of each row's cell bounds into temporaries, were
most of a typed partition's decoding and half of counting a partition (the roofline,
docs/benchmarks.md). Here each row searches its own bin's few cells, and reads the bounds it
needs, in one pass.
"""

from __future__ import annotations

import numpy as np

from dp_dask.compiled import compiled


@compiled
def _at_or_below(bounds: np.ndarray, start: int, stop: int, x: float) -> int:
    """How many of the sorted ``bounds[start:stop]`` are at or below ``x``: a bin's few cells
    counted without a branch per cell (a binary search's mispredicted branches cost more, 25 ns
    a row)."""
    count = 0
    for i in range(start, stop):
        count += bounds[i] <= x
    return count


@compiled
def cells_of_values(edges: np.ndarray, first: np.ndarray, bins: np.ndarray,
                    numbers: np.ndarray) -> np.ndarray:
    """Per row, ``np.clip(np.searchsorted(edges, numbers, "right") - 1, first[bins],
    first[bins + 1] - 1)``: the cell of ``edges`` (increasing) holding the row's number,
    clipped to its bin's cells ``first[b]:first[b + 1]`` (NaN: the bin's last cell, as NumPy
    sorts NaN last)."""
    cells = np.empty(bins.size, dtype=np.int64)
    for row in range(bins.size):
        bin_ = bins[row]
        low, last = first[bin_], first[bin_ + 1] - 1
        x = numbers[row]
        if x != x:
            cells[row] = last
            continue
        # low plus the bin's upper edges edges[c + 1] (c < last) at or below x
        cells[row] = low + _at_or_below(edges, low + 1, last + 1, x)
    return cells


@compiled
def draw_cells(cdf: np.ndarray, first: np.ndarray, bins: np.ndarray,
               uniforms: np.ndarray) -> np.ndarray:
    """Per row, ``np.clip(np.searchsorted(cdf, bins + uniforms, "right"), first[bins],
    first[bins + 1] - 1)``: the cell a uniform draws by the within-bin CDFs ``cdf``
    (non-decreasing, bin b's cells ``first[b]:first[b + 1]`` in (b, b + 1])."""
    cells = np.empty(bins.size, dtype=np.int64)
    for row in range(bins.size):
        bin_ = bins[row]
        low, last = first[bin_], first[bin_ + 1] - 1
        x = bin_ + uniforms[row]  # float64, as NumPy adds them
        # low plus the bin's CDF values (but its last) at or below x
        cells[row] = low + _at_or_below(cdf, low, last, x)
    return cells


@compiled
def draw_integers(codes: np.ndarray, low: np.ndarray, high: np.ndarray,
                  uniforms: np.ndarray) -> np.ndarray:
    """Per row of cell ``codes``, ``np.minimum(low[codes] + np.floor(uniforms *
    (high[codes] - low[codes] + 1).astype(np.float64)).astype(np.int64), high[codes])``:
    an integer of the cell's [low, high], both included, by its uniform."""
    values = np.empty(codes.size, dtype=np.int64)
    for row in range(codes.size):
        first, last = low[codes[row]], high[codes[row]]
        value = first + np.int64(np.floor(uniforms[row] * np.float64(last - first + 1)))
        values[row] = min(value, last)
    return values
