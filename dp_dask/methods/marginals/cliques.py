"""The full joint as a clique, where the noise allows (issue 59; ``MarginalsConfig.cliques``).

Pairs alone cannot carry a table's 3- and 4-way structure: the release's 3-way error then stays
a constant share of n (the model's bias). Under ``cliques="auto"`` a tall narrow table's full
joint is measured with the Gaussian mechanism, beside the 1-/2-way tables, with ``clique_share``
of the ρ the 2-way tables would get (:attr:`~.plan.BudgetPlan.cliques`; the histograms keep
theirs):

    count     where the joint has at most ``max_clique_cells`` cells (public sizes: else the
              release is cliques="pairs"'s from the start), the one pass also counts the exact
              joint, sparse (each distinct row's mixed-radix key and count): at most
              min(n, cells) keys, exact counts to the driver only
    decide    after the 1-way histograms (drawn the same with or without the joint), from public
              sizes, ρ_cliques and n̂ (:func:`joint_fits`): the joint is measured where its
              cells·σ/n̂ is at most ``clique_noise``; elsewhere no clique, no clique ρ, and the
              release is cliques="pairs"'s byte for byte. Post-processing, no charge
    measure   the joint once, L2 sensitivity a table's (√2 replace-one, 1 add/remove: a row is
              in one cell), :func:`measure_joint`

Cliques grown greedily from the most dependent noisy pairs (the rule before) lost Q1, Q2 and the
worst 2-way query on Adult 9 with no Q3 gain, and chose the full joint on the planted table
anyway (docs/results-adult.md, "Cliques beyond pairs"), so only the joint is left. The
consistent 2-way tables take its implied pairs by inverse variance
(:func:`~dp_dask.postprocess.consistency.with_implied_pairs`), as the 1-way ones its implied
margins. The weight fit reads the joint (any order,
:func:`~dp_dask.postprocess.reweight.as_pairs`) and the candidate rows include copies
carrying the largest clique's noisy table (:func:`clique_draws`), raked with the tree's, so that
they cover its cells and start near its structure. The
partitions' resample (postprocess.balance) takes groups of any order, but balancing it on the
cliques too changed nothing measurable (Adult 9 and the planted table of benchmarks/cliques.py,
ε = 1, seed 0: Q1 20.2 / 14.3, Q2 8.17 / 24.3, Q3 1.26 / 27.3 without, 20.4 / 15.0, 8.17 / 24.2,
1.26 / 27.3 with) and cost time, so it stays on the default triples.

Where the joint fits and no adaptive rounds run, the release takes the dense-joint path instead
(:mod:`.joint`): the 1-way histograms and every triple measured (no 2-way table, no joint
measurement), the dense joint fitted to them and rows drawn from it; this module then only
counts the sparse joint and decides the rule (planted table, ε = 1, seeds 0–2, Q3 95 %:
replace-one 18.4, add/remove 13.2, against 34.5 / 34.0 with pairs, docs/tuning.md).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
from dask.delayed import Delayed

from dp_dask.data.counts import combine_counts, counts_from_codes, fine_counts, tree_sum
from dp_dask.data.encode import check_columns, encode_partition
from dp_dask.data.schema import Schema
from dp_dask.data.tables import Domain
from dp_dask.methods.marginals.adaptive import group_counts
from dp_dask.methods.marginals.config import DEFAULTS, MarginalsConfig
from dp_dask.postprocess.consistency import Measurement
from dp_dask.privacy.accounting import gaussian_sigma
from dp_dask.privacy.noise import gaussian_measurements

if TYPE_CHECKING:
    from dp_dask.methods.marginals.model import MarginalModel

# The joint's keys are int64: a schema of this many cells or more has no clique (public).
MAX_JOINT_CELLS = 2**62
# The start's weight on the copies of the candidates drawn from the largest clique
# (:func:`clique_draws`), raked with them (sampler.raked_start). Planted table of
# benchmarks/cliques.py, ε = 1, seeds 0–2, clique_share 0.5, before the release kept the
# consistent 1-way counts, replace-one Q1 / Q2 / worst 2-way / Q3 95 % at 0.5
# and 0.9: 15.7 / 20.4 / 79 / 21.9 and 16.4 / 20.7 / 87 / 24.0 (docs/tuning.md, clique_share).
DRAWN_SHARE = 0.5


def cliques_possible(schema: Schema, config: MarginalsConfig = DEFAULTS) -> bool:
    """Whether a release may measure the full joint (:func:`joint_fits` decides after n̂):
    ``config.cliques`` "auto", 3+ attributes and a joint of at most ``max_clique_cells`` cells
    (and fewer than MAX_JOINT_CELLS). The schema's and config's alone."""
    cells = math.prod(int(s) for s in schema.sizes)
    return (config.cliques == "auto" and schema.m >= 3
            and cells <= config.max_clique_cells and cells < MAX_JOINT_CELLS)


def clique_memory(schema: Schema, rows: int,
                  config: MarginalsConfig = DEFAULTS) -> dict[str, int] | None:
    """For ``dp-dask plan``: the cap on a clique's cells, the sparse joint's bytes on the driver
    (an int64 key and count per distinct row: at most min(rows, cells)) and the joint's dense
    arrays' (the dense-joint fit's log-probabilities, counts, gradient and a trial step's three:
    six float64 per cell, joint.fit_joint). None where no clique is measured
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


def partition_counts(frame: pd.DataFrame, schema: Schema,
                     triples: tuple[tuple[int, ...], ...]) -> tuple[Any, ...]:
    """Chunk step on a raw partition: adaptive.partition_counts' three outputs and the sparse
    joint (:func:`joint_keys`), from one encoding of the partition."""
    codes = encode_partition(frame, schema)
    return (counts_from_codes(codes, schema), fine_counts(frame, codes, schema),
            group_counts(codes.T, schema, triples), joint_keys(codes.T, schema))


def combine(blocks: list[tuple[Any, ...]]) -> tuple[Any, ...]:
    """Combine step: the dense outputs summed, the sparse joints merged (keys summed)."""
    keys = np.concatenate([b[3][0] for b in blocks])
    counts = np.concatenate([b[3][1] for b in blocks])
    distinct, where = np.unique(keys, return_inverse=True)
    return (*combine_counts([b[:3] for b in blocks]),
            (distinct, np.bincount(where, counts, len(distinct)).astype(np.int64)))


def count_graph(ddf: dd.DataFrame, schema: Schema, triples: tuple[tuple[int, ...], ...], *,
                split_every: int = 8) -> Delayed:
    """Lazy (d×d counts, fine histograms, triples' counts, sparse joint): one pass."""
    check_columns(ddf.columns, schema)
    return tree_sum([dask.delayed(partition_counts)(part, schema, triples)
                     for part in ddf[schema.columns].to_delayed()],
                    split_every=split_every, combine=combine)


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


def joint_noise(schema: Schema, rows: int, rho: float, sensitivity: float,
                accountant: str) -> float:
    """The full joint's cells·σ/n̂ when measured with all of ``rho``: public sizes, ρ and n̂."""
    sigma = gaussian_sigma(rho, sensitivity, accountant)
    return math.prod(int(s) for s in schema.sizes) * sigma / max(rows, 1)


def joint_fits(schema: Schema, rows: int, rho: float, sensitivity: float, accountant: str,
               config: MarginalsConfig = DEFAULTS) -> bool:
    """Whether the release measures the full joint (:func:`cliques_possible`, and its
    :func:`joint_noise` at most ``clique_noise``). Post-processing of n̂ and public inputs."""
    return (cliques_possible(schema, config)
            and joint_noise(schema, rows, rho, sensitivity, accountant) <= config.clique_noise)


def measure_joint(joint: tuple[np.ndarray, np.ndarray], schema: Schema, rho: float, *,
                  sensitivity: float, accountant: str, sampler: str,
                  rng: np.random.Generator | None, config: MarginalsConfig = DEFAULTS
                  ) -> tuple[Measurement, dict[str, Any]]:
    """The full joint measured once with all of ``rho``, and its record. The only step here
    that reads exact counts (``joint``)."""
    clique = tuple(range(schema.m))
    sigma = gaussian_sigma(rho, sensitivity, accountant)
    (noisy,) = gaussian_measurements([(exact_clique(joint, schema, clique), sigma, sensitivity)],
                                     sampler=sampler, rng=rng)
    return Measurement(clique, noisy, sigma), {
        "selection": "the full joint, as its cells*sigma/n <= "
                     f"{config.clique_noise:g} and cells <= {config.max_clique_cells} "
                     "(public sizes, rho and the noisy n): else no clique",
        "rho": rho, "sensitivity": sensitivity, "measurements": 1,
        "cliques": [{"attributes": list(schema.names), "cells": len(noisy), "sigma": sigma}]}


def model_cliques(model: MarginalModel) -> tuple[tuple[int, ...], ...]:
    """The cliques the model's release measured (its privacy record's; none under
    ``cliques="pairs"`` or where the selection was refused)."""
    record = model.metadata.get("privacy", {}).get("cliques", {})
    index = {name: a for a, name in enumerate(model.schema.names)}
    return tuple(tuple(index[name] for name in c["attributes"])
                 for c in record.get("cliques", []))


def clique_draws(model: MarginalModel, codes: np.ndarray, weights: np.ndarray,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Candidates ``codes`` (weights ``weights``) and as many again, copies of them whose
    largest measured clique's values are cells of its noisy table (its cells above
    ``empty_within_sigmas`` σ: :func:`drawn_cells`), weighted so that the copies' table over
    that clique is the noisy one on the cells they hold, in proportion, at ``DRAWN_SHARE`` of
    the weights' total. As they are without cliques (:func:`model_cliques`: every release
    under ``cliques="pairs"``)."""
    cliques = model_cliques(model)
    if not cliques:
        return codes, weights
    domain = Domain(model.schema.sizes)
    clique = max(cliques, key=lambda c: (domain.cells(c), c))
    (largest,) = (m for m in model.measurements if m.attributes == clique)
    # cells within ``empty_within_sigmas`` σ of zero are likely empty: none drawn there
    floor = model.config.empty_within_sigmas * largest.sigma
    p = np.where(largest.values > floor, largest.values, 0.0)
    if p.sum() <= 0:
        return codes, weights
    cells = drawn_cells(p, len(codes), rng)
    copies = codes.copy()
    for a, values in zip(clique, np.unravel_index(cells, domain.shape(clique))):
        copies[:, a] = values
    # each cell's copies share its value: equal weights would add a multinomial sample's noise
    # (planted table, ε = 1, seed 0: the start's 1-way error 15.9 → 44.3, benchmarks/cliques.py)
    drawn = p[cells] / np.bincount(cells, minlength=p.size)[cells]
    return (np.concatenate([codes, copies]),
            np.concatenate([weights * (1 - DRAWN_SHARE),
                            drawn * (weights.sum() * DRAWN_SHARE / drawn.sum())]))


def drawn_cells(p: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """``k`` cells of a table ``p`` (≥ 0, some > 0), in random order: every cell where ``p`` > 0
    and the rest drawn ∝ ``p`` where they are at most ``k``, else ``k`` drawn ∝ ``p``."""
    support = np.flatnonzero(p)
    if len(support) > k:
        return rng.choice(p.size, size=k, p=p / p.sum())
    rest = rng.choice(p.size, size=k - len(support), p=p / p.sum())
    return rng.permutation(np.concatenate([support, rest]))
