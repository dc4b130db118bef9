"""Cliques of 3+ attributes under a noise budget (issue 59; ``MarginalsConfig.cliques``).

Pairs alone cannot carry a table's 3- and 4-way structure: the release's 3-way error then stays
a constant share of n (the model's bias). Under ``cliques="auto"`` ``clique_share`` of the ρ
the 2-way tables would get (:attr:`~.plan.BudgetPlan.cliques`; the histograms keep theirs)
measures cliques of 3 or more attributes with the Gaussian mechanism, beside the 1-/2-way
tables:

    count     the one pass also counts the exact joint, sparse (each distinct row's mixed-radix
              key and count): at most min(n, cells) keys, exact counts to the driver only; where
              the schema's joint has 2^62 cells or more no clique is possible (public)
    select    post-processing of the noisy 1-/2-way measurements, no charge: each pair's
              dependence (the L1 distance of its noisy table from its margins' independence, less
              the noise's expected share), then cliques grown greedily from the most dependent
              pairs, the most dependent attribute first, while every clique's cells·σ/n̂ stays at
              most ``clique_noise`` and its cells at most ``max_clique_cells`` (σ from
              ρ_cliques split ∝ cells^(1/3), as the tables')
    measure   each clique once, L2 sensitivity a table's (√2 replace-one, 1 add/remove: a row
              is in one cell of each clique); where no clique of 3+ fits, the selection is
              refused and ρ_cliques measures the pairs again (merged by inverse variance)

On a tall narrow table the clique can be the full joint. The weight fit reads the cliques (any
order, :func:`~dp_dask.postprocess.reweight.as_pairs`) and the candidate rows include copies
carrying the largest clique's noisy table (:func:`clique_draws`), raked with the tree's, so that
they cover its cells and start near its structure. The
partitions' resample (postprocess.balance) takes groups of any order, but balancing it on the
cliques too changed nothing measurable (Adult 9 and the planted table of benchmarks/cliques.py,
ε = 1, seed 0: Q1 20.2 / 14.3, Q2 8.17 / 24.3, Q3 1.26 / 27.3 without, 20.4 / 15.0, 8.17 / 24.2,
1.26 / 27.3 with) and cost time, so it stays on the default triples.
"""

from __future__ import annotations

import itertools
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
from dp_dask.methods.marginals.adaptive import group_counts, merged
from dp_dask.methods.marginals.config import DEFAULTS, MarginalsConfig
from dp_dask.postprocess.consistency import Measurement
from dp_dask.privacy.accounting import gaussian_sigma
from dp_dask.privacy.noise import gaussian_measurements

if TYPE_CHECKING:
    from dp_dask.methods.marginals.model import MarginalModel

# The joint's keys are int64: a schema of this many cells or more has no clique (public).
MAX_JOINT_CELLS = 2**62
# The expected |N(0, σ²)| per cell, σ·√(2/π): a noisy table's L1 distance that is noise alone.
NOISE_L1 = math.sqrt(2 / math.pi)
# The start's weight on the copies of the candidates drawn from the largest clique
# (:func:`clique_draws`), raked with them (sampler.raked_start). Planted table of
# benchmarks/cliques.py, ε = 1, seeds 0–2, clique_share 0.5, before the release kept the
# consistent 1-way counts, replace-one Q1 / Q2 / worst 2-way / Q3 95 % at 0.5
# and 0.9: 15.7 / 20.4 / 79 / 21.9 and 16.4 / 20.7 / 87 / 24.0 (docs/tuning.md, clique_share).
DRAWN_SHARE = 0.5


def cliques_possible(schema: Schema, config: MarginalsConfig = DEFAULTS) -> bool:
    """Whether a release measures cliques: ``config.cliques`` "auto", 3+ attributes and a joint
    of fewer than MAX_JOINT_CELLS cells. The schema's and config's alone."""
    return (config.cliques == "auto" and schema.m >= 3
            and math.prod(int(s) for s in schema.sizes) < MAX_JOINT_CELLS)


def clique_memory(schema: Schema, rows: int,
                  config: MarginalsConfig = DEFAULTS) -> dict[str, int] | None:
    """For ``dp-dask plan``: the cap on a clique's cells, the sparse joint's bytes on the driver
    (an int64 key and count per distinct row: at most min(rows, cells)) and the cliques' dense
    tables' at most (exact, noisy, σ-scaled and a work copy per cell, m cliques at the cap).
    None where no clique is measured (:func:`cliques_possible`)."""
    if not cliques_possible(schema, config):
        return None
    cells = math.prod(int(s) for s in schema.sizes)
    cap = config.max_clique_cells
    return {"max_clique_cells": cap, "joint_bytes": 16 * min(rows, cells),
            "clique_bytes": 4 * 8 * min(cap, cells) * schema.m}


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


def clique_sigmas(schema: Schema, cliques: list[tuple[int, ...]], rho: float, sensitivity: float,
                  accountant: str, config: MarginalsConfig = DEFAULTS) -> list[float]:
    """Each clique's σ when the cliques share ``rho`` ∝ cells^``cells_exponent``."""
    weights = np.array([Domain(schema.sizes).cells(c) for c in cliques],
                       dtype=np.float64) ** config.cells_exponent
    return [gaussian_sigma(rho * w / weights.sum(), sensitivity, accountant) for w in weights]


def pair_scores(measured: list[Measurement], schema: Schema, rows: int) -> np.ndarray:
    """Each measured pair's dependence (m × m, symmetric, 0 where unmeasured): the L1 distance
    of its noisy table (clipped at 0) from its margins' product, less the noise's expected L1,
    over n̂. Post-processing of the noisy tables."""
    scores = np.zeros((schema.m, schema.m))
    for m in measured:
        if len(m.attributes) != 2:
            continue
        a, b = m.attributes
        table = np.maximum(m.values, 0).reshape(schema.sizes[a], schema.sizes[b])
        total = max(float(table.sum()), 1.0)
        independent = np.outer(table.sum(1), table.sum(0)) / total
        scores[a, b] = scores[b, a] = (np.abs(table - independent).sum()
                                       - NOISE_L1 * m.sigma * table.size) / max(rows, 1)
    return scores


def select_cliques(measured: list[Measurement], schema: Schema, rows: int, rho: float,
                   sensitivity: float, accountant: str,
                   config: MarginalsConfig = DEFAULTS) -> list[tuple[int, ...]]:
    """Cliques of 3+ attributes (sorted tuples, none inside another), each grown from a pair
    not yet in one clique, the most dependent first (:func:`pair_scores`), by the attribute of
    largest summed dependence with it, as long as every clique chosen keeps cells·σ/n̂ ≤
    ``clique_noise`` and cells ≤ ``max_clique_cells`` with ``rho`` shared among them: as large
    as the noise allows, whatever the pairs show (a 3-way structure may hide from every pair).
    Empty: the selection refused. Post-processing of the noisy 1-/2-way measurements and n̂."""
    scores = pair_scores(measured, schema, rows)
    domain = Domain(schema.sizes)

    def fits(cliques: list[tuple[int, ...]]) -> bool:
        cells = [domain.cells(c) for c in cliques]
        if max(cells) > config.max_clique_cells:
            return False
        sigmas = clique_sigmas(schema, cliques, rho, sensitivity, accountant, config)
        return all(c * s / max(rows, 1) <= config.clique_noise for c, s in zip(cells, sigmas))

    chosen: list[tuple[int, ...]] = []
    seeds = sorted(((scores[a, b], a, b) for a, b in itertools.combinations(range(schema.m), 2)),
                   reverse=True)
    for _, a, b in seeds:
        if any(a in c and b in c for c in chosen):
            continue
        clique = [a, b]
        while True:
            gains = [(scores[x, clique].sum(), x) for x in range(schema.m) if x not in clique]
            if not gains:
                break
            trial = tuple(sorted([*clique, max(gains)[1]]))
            kept = [c for c in chosen if not set(c) <= set(trial)]
            if not fits([*kept, trial]):
                break
            clique = list(trial)
        if len(clique) >= 3:
            chosen = [c for c in chosen if not set(c) <= set(clique)] + [tuple(sorted(clique))]
    return chosen


def measure_cliques(joint: tuple[np.ndarray, np.ndarray], measured: list[Measurement],
                    schema: Schema, rows: int, rho: float, *, sensitivity: float,
                    accountant: str, sampler: str, rng: np.random.Generator | None,
                    config: MarginalsConfig = DEFAULTS
                    ) -> tuple[list[Measurement], dict[str, Any]]:
    """The cliques :func:`select_cliques` chooses, each measured once with its σ, and the
    record; where it chooses none, ``rho`` measures the pairs of ``measured`` again instead
    (shares ∝ cells^(1/3), merged with the first measurement by inverse variance). The only
    step here that reads exact counts (``joint``); ``rho`` is spent exactly once either way."""
    cliques = select_cliques(measured, schema, rows, rho, sensitivity, accountant, config)
    refused = not cliques
    if refused:
        pairs = [m.attributes for m in measured if len(m.attributes) == 2]
        if not pairs:  # nothing to measure again: the share measures the histograms
            pairs = [(a,) for a in range(schema.m)]
        cliques = pairs
    sigmas = clique_sigmas(schema, cliques, rho, sensitivity, accountant, config)
    noisy = gaussian_measurements([(exact_clique(joint, schema, c), s, sensitivity)
                                   for c, s in zip(cliques, sigmas)], sampler=sampler, rng=rng)
    new = [Measurement(c, v, s) for c, v, s in zip(cliques, noisy, sigmas)]
    domain = Domain(schema.sizes)
    record: dict[str, Any] = {
        "selection": "post-processing of the noisy 1-/2-way tables: cliques grown from the "
                     "most dependent pairs while cells*sigma/n <= "
                     f"{config.clique_noise:g} and cells <= {config.max_clique_cells}",
        "rho": rho, "sensitivity": sensitivity, "measurements": len(new)}
    if refused:
        return merged(measured + new), record | {
            "refused": "no clique of 3 or more attributes within the noise threshold: its "
                       "rho measured the pairs again"}
    return measured + new, record | {"cliques": [
        {"attributes": [schema.names[a] for a in c], "cells": domain.cells(c), "sigma": s}
        for c, s in zip(cliques, sigmas)]}


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
