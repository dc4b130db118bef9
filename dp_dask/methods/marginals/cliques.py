"""The exact joint the dense-joint path reads (issue 59; ``MarginalsConfig.cliques``).

Pairs alone cannot carry a table's 3- and 4-way structure: the release's 3-way error then stays
a constant share of n (the model's bias). Under ``cliques="auto"``, where the joint has at most
``max_clique_cells`` cells (public sizes: else the release is cliques="pairs"'s from the start)
and no adaptive rounds run, the one pass also counts the exact joint, sparse (each distinct
row's mixed-radix key and count): at most min(n, cells) keys, exact counts to the driver only.
The dense-joint path (:mod:`.joint`) decides from n̂ whether it runs and sums its triples from
this joint (:func:`exact_clique`).

Before it, the full joint was measured beside the 1-/2-way tables (its implied pairs merged into
theirs, copies of the candidate rows drawn from it): planted table, ε = 1, seeds 0–2, Q3 95 %
replace-one 25.4, add/remove 19.5, against 18.4 / 13.2 on the dense path and 34.5 / 34.0 with
pairs (docs/tuning.md); cliques grown greedily from the most dependent noisy pairs did worse
still (docs/results-adult.md, "Cliques beyond pairs").
"""

from __future__ import annotations

import math
from typing import Any

import dask.dataframe as dd
import numpy as np
import pandas as pd
from dask.delayed import Delayed

from dp_dask.data.counts import (
    combine_counts,
    counts_from_codes,
    fine_counts,
    reduction_graph,
)
from dp_dask.data.encode import encode_partition
from dp_dask.data.schema import Schema
from dp_dask.data.tables import Domain
from dp_dask.methods.marginals.config import DEFAULTS, MarginalsConfig

# The joint's keys are int64: a schema of this many cells or more has no clique (public).
MAX_JOINT_CELLS = 2**62


def cliques_possible(schema: Schema, config: MarginalsConfig = DEFAULTS) -> bool:
    """Whether a release may take the dense-joint path (:func:`~.joint.model_choice` decides
    after n̂): ``config.cliques`` "auto" or "joint", 3+ attributes and a joint of at most
    ``max_clique_cells`` cells (and fewer than MAX_JOINT_CELLS). The schema's and config's
    alone; the synthesizer adds "no adaptive rounds" (:attr:`~.plan.BudgetPlan.with_cliques`)."""
    cells = math.prod(int(s) for s in schema.sizes)
    return (config.cliques != "pairs" and schema.m >= 3
            and cells <= config.max_clique_cells and cells < MAX_JOINT_CELLS)


def clique_memory(schema: Schema, rows: int,
                  config: MarginalsConfig = DEFAULTS) -> dict[str, int] | None:
    """For ``dp-dask plan``: the cap on a clique's cells, the sparse joint's bytes on the driver
    (an int64 key and count per distinct row: at most min(rows, cells)) and the joint's dense
    arrays' (the dense-joint fit's log-probabilities, counts, gradient and a trial step's three:
    six float64 per cell, joint.estimate_joint). None where no clique is measured
    (:func:`cliques_possible`)."""
    if not cliques_possible(schema, config):
        return None
    cells = math.prod(int(s) for s in schema.sizes)
    return {"max_clique_cells": config.max_clique_cells, "joint_bytes": 16 * min(rows, cells),
            "clique_bytes": 6 * 8 * cells}


def joint_keys(codes: np.ndarray, schema: Schema) -> tuple[np.ndarray, np.ndarray]:
    """The distinct mixed-radix keys of the rows ``codes`` (rows, m) over every attribute,
    sorted, and their counts (int64)."""
    keys = Domain(schema.sizes).index(codes, range(schema.m)).astype(np.int64)
    distinct, counts = np.unique(keys, return_counts=True)
    return distinct, counts.astype(np.int64)


def partition_counts(frame: pd.DataFrame, schema: Schema) -> tuple[Any, ...]:
    """Chunk step on a raw partition: the d×d counts, the fine histograms and the sparse joint
    (:func:`joint_keys`), from one encoding of the partition."""
    codes = encode_partition(frame, schema)
    return counts_from_codes(codes, schema), fine_counts(frame, codes, schema), joint_keys(
        codes.T, schema)


def combine(blocks: list[tuple[Any, ...]]) -> tuple[Any, ...]:
    """Combine step: the dense outputs summed, the sparse joints merged (keys summed)."""
    keys = np.concatenate([b[2][0] for b in blocks])
    counts = np.concatenate([b[2][1] for b in blocks])
    distinct, where = np.unique(keys, return_inverse=True)
    return (*combine_counts([b[:2] for b in blocks]),
            (distinct, np.bincount(where, counts, len(distinct)).astype(np.int64)))


def count_graph(ddf: dd.DataFrame, schema: Schema, *, split_every: int = 8) -> Delayed:
    """Lazy (d×d counts, fine histograms, sparse joint): one pass."""
    return reduction_graph(ddf, schema, partition_counts, schema, combine=combine,
                           split_every=split_every)


def exact_clique(joint: tuple[np.ndarray, np.ndarray], schema: Schema,
                 clique: tuple[int, ...]) -> np.ndarray:
    """The clique's exact table (flattened row-major, int64) from the sparse joint."""
    keys, counts = joint
    domain = Domain(schema.sizes)
    strides = domain.strides(range(schema.m))
    cell = np.zeros(len(keys), dtype=np.int64)
    for a in clique:
        cell = cell * int(schema.sizes[a]) + keys // strides[a] % int(schema.sizes[a])
    return np.bincount(cell, counts, domain.cells(clique)).round().astype(np.int64)
