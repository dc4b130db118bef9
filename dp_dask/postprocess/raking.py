"""A start closer to every table: candidate rows reweighted to the 2-way targets, then resampled.

A spanning tree's start holds only its m − 1 tables; where the others disagree with what the
tree implies (nycflights13: distance × air time × origin), row updates must move most rows and
converge slowly — with exact targets, 160 sweeps still left flights' 2-way error at 6 rows per
cell. Raking fixes the rest first, in the weights: iterative proportional fitting over every
2-way table, the weights of the rows in each cell scaled by target / current weighted count
(Deming & Stephan 1940; survey calibration by raking). The candidates then give a sample of
exactly ``rows`` rows by systematic resampling: each row appears ⌊w⌋ or ⌈w⌉ times.

Raking never creates a combination the candidates lack; the row updates that follow do. It is
hand-written because the IPF packages (``ipfn``) fit dense tables or pandas group-bys; on rows,
a table's step is a weighted count and a gather, compiled loops shared with the weight fit
(dp_dask.postprocess.reweight).
"""

from __future__ import annotations

import numpy as np

from dp_dask.data.cells import KEY_CHUNK, add_weights, multiply_weights
from dp_dask.postprocess.config import RakingConfig
from dp_dask.postprocess.consistency import ratio_or_zero

# When raking stops is RakingConfig's (docs/tuning.md, its measurements on flights, Adult and
# the DSS shape): the gap of noisy targets is mostly their disagreement with each other, so it
# falls slowly while the structure still improves.
DEFAULTS = RakingConfig()


def rake(codes: np.ndarray, targets: dict[tuple[int, int], np.ndarray], sizes: np.ndarray,
         rng: np.random.Generator, *, start: np.ndarray | None = None,
         config: RakingConfig = DEFAULTS) -> tuple[np.ndarray, int]:
    """Weights (one per row of ``codes``, summing to about the targets' total) whose weighted
    counts approach every target table (2-way, keyed by their two attributes), and the passes
    made. Each pass visits every table once, in random order; a cell with no row keeps its
    gap. ``start``: the weights raking starts from (default: one per row). It goes on while the
    summed gap to the targets fell by ``config.keep_raking`` over the last ``config.window``
    passes (before that many, by its share of it since the first: the same rate), at most
    ``config.max_passes``."""
    weights = np.ones(len(codes)) if start is None else np.array(start, dtype=np.float64)
    columns = np.asfortranarray(codes)  # each table reads two columns
    tables = [(columns[:, a], columns[:, b], np.uint32(sizes[b]),
               np.asarray(target, dtype=np.float64).ravel()) for (a, b), target in targets.items()]
    keys = np.empty(KEY_CHUNK, dtype=np.uint32)
    gaps: list[float] = []
    for passes in range(1, config.max_passes + 1):
        gap = 0.0
        for index in rng.permutation(len(tables)):
            first, last, stride, target = tables[index]
            current = np.zeros(target.size)
            add_weights(current, first, last, stride, weights, keys)
            gap += float(np.abs(current - target).sum())
            multiply_weights(weights, first, last, stride, ratio_or_zero(target, current), keys)
        gaps.append(gap)
        back = min(passes - 1, config.window)
        if back and gap >= (1 - config.keep_raking * back / config.window) * gaps[-1 - back]:
            break
    return weights, passes


def systematic_resample(weights: np.ndarray, rows: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of ``rows`` draws ∝ ``weights`` with one uniform offset (systematic sampling):
    each index appears ⌊rows·w⌋ or ⌈rows·w⌉ times for its normalised weight w, so the draw adds
    almost no sampling error to the weighted counts. In random order."""
    if rows == 0:
        return np.zeros(0, dtype=np.intp)
    edges = np.cumsum(weights, dtype=np.float64)
    if edges[-1] <= 0:  # no weight anywhere: every candidate alike
        edges = np.arange(1.0, len(weights) + 1)
    points = (rng.random() + np.arange(rows)) * (edges[-1] / rows)
    picked = np.minimum(np.searchsorted(edges, points, side="right"), len(weights) - 1)
    return rng.permutation(picked)
