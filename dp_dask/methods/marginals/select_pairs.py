"""Which 2-way tables the marginals method measures: all of them, or a DP spanning tree.

Measuring all m(m−1)/2 tables spreads the tables' share of ρ so thinly on a wide schema that
each table's noise swamps its signal, and the release falls behind noise-free independent
marginals (issue 45 §3). Above a public threshold the method measures, like MST (McKenna,
Miklau & Sheldon 2021), only m − 1 tables: a spanning tree chosen with the exponential
mechanism over how far each pair's exact table lies from the independence of the noisy 1-way
histograms (L1), one edge per round among those joining two components (Kruskal), then measured
with the tables' share. The threshold is a function of public quantities only: the schema's
domain sizes, ρ, the sensitivity and n (public under replace-one neighbours; under add/remove
the estimate from the noisy 1-way histograms, measured first). After the tree, a refinement
(:func:`refine`) measures a few more tables, chosen as AIM chooses: the pairs the tree's model
gets most wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.cluster.hierarchy import DisjointSet

from dp_dask.data.counts import attribute_pairs, exact_answer
from dp_dask.data.schema import Schema
from dp_dask.methods.marginals.config import DEFAULTS, MarginalsConfig
from dp_dask.postprocess.consistency import Measurement, consistent_marginals
from dp_dask.postprocess.tree import implied_tables, spanning_tree
from dp_dask.privacy.accounting import gaussian_sigma
from dp_dask.privacy.noise import gaussian_measurements
from dp_dask.privacy.selection import (
    Selection,
    calibrate_selection,
    noisy_max_index,
    selection_scores,
)


def all_pairs_noise(schema: Schema, rows: float, rho_tables: float, sensitivity: float,
                    accountant: str, exponent: float) -> float:
    """Mean over the 2-way tables of cells·σ/n when all of them share ``rho_tables`` ∝
    cells^``exponent`` (the all-pairs plan): public quantities only."""
    sizes = schema.sizes.astype(np.float64)
    i, j = np.triu_indices(schema.m, 1)
    cells = sizes[i] * sizes[j]
    weights = cells**exponent
    sigmas = np.array([gaussian_sigma(rho_tables * w / weights.sum(), sensitivity, accountant)
                       for w in weights])
    return float(np.mean(cells * sigmas) / max(rows, 1.0))


@dataclass(frozen=True)
class TreeChoice:
    """What the spanning-tree selection chose and spent: the pairs (i < j), per round its
    selection, and the noise level that sent the schema to a tree."""

    pairs: list[tuple[int, int]]
    selection: Selection
    rounds: int
    noise: float
    refinement: Refinement | None = None
    tree_above: float = DEFAULTS.tree_above  # the threshold the noise level was over

    @property
    def rho(self) -> float:
        """What the selections spent: the tree's rounds and the refinement's (its measurements
        are charged as the tables are)."""
        return self.rounds * self.selection.rho + (self.refinement.rho_select
                                                   if self.refinement else 0.0)

    def to_json(self, schema: Schema) -> dict[str, Any]:
        return {"tables": "spanning tree", "all_pairs_noise": self.noise,
                "tree_above": self.tree_above,
                "mechanism": "exponential (report-noisy-max, Gumbel; OpenDP make_noisy_max)",
                "rounds": self.rounds, "rho_per_round": self.selection.rho,
                "epsilon_per_round": self.selection.epsilon, "rho": self.rho,
                "score": "L1 distance of the exact table from the noisy 1-way histograms' "
                         f"independence table, sensitivity {self.selection.sensitivity:g}",
                "pairs": [[schema.names[a], schema.names[b]] for a, b in self.pairs],
                **({"refinement": self.refinement.to_json(schema)} if self.refinement else {})}


@dataclass(frozen=True)
class Refinement:
    """The rounds after the tree: the pairs they chose, in order, and per round the selection
    and the measurement's σ and ρ."""

    pairs: list[tuple[int, int]]
    selection: Selection
    sigma: float
    rho_measure: float

    @property
    def rho_select(self) -> float:
        return len(self.pairs) * self.selection.rho

    def to_json(self, schema: Schema) -> dict[str, Any]:
        return {"rounds": len(self.pairs),
                "mechanism": "exponential (report-noisy-max, Gumbel; OpenDP make_noisy_max)",
                "rho_select_per_round": self.selection.rho,
                "epsilon_per_round": self.selection.epsilon,
                "rho_measure_per_round": self.rho_measure, "sigma": self.sigma,
                "score": "L1 error of the tree the measurements so far imply, less "
                         "sqrt(2/pi)*sigma*cells (AIM's), sensitivity "
                         f"{self.selection.sensitivity:g}",
                "pairs": [[schema.names[a], schema.names[b]] for a, b in self.pairs]}


def pair_scores(counts: np.ndarray, schema: Schema, one_way: list[np.ndarray],
                rows: float) -> dict[tuple[int, int], float]:
    """Each pair's L1 distance between its exact table (from the d×d count matrix) and the
    independence table of the noisy 1-way histograms ``one_way`` (clipped at 0, scaled to
    ``rows``), computed exactly (:func:`~dp_dask.privacy.selection.selection_scores`).
    Replacing a row moves it by at most 2, adding or removing one by 1."""
    probabilities = [np.clip(v, 0, None) / max(np.clip(v, 0, None).sum(), 1e-300)
                     for v in one_way]
    pairs = [(a, b) for a, b, _, _ in attribute_pairs(schema)]
    scores = selection_scores(
        [exact_answer(counts, schema, p) for p in pairs],
        [rows * np.outer(probabilities[a], probabilities[b]).ravel() for a, b in pairs])
    return dict(zip(pairs, scores.tolist()))


def tree_selection(schema: Schema, rho: float, l1_sensitivity: float,
                   accountant: str) -> Selection:
    """The selection of each of :func:`select_tree`'s m − 1 rounds: ``rho`` shared equally."""
    return calibrate_selection(rho / (schema.m - 1), l1_sensitivity, accountant)


def refine_selection(rho: float, rounds: int, l1_sensitivity: float, accountant: str,
                     select_share: float) -> tuple[Selection, float]:
    """The selection of each of :func:`refine`'s ``rounds`` (``select_share`` of its share of
    ``rho``) and the ρ left to its measurement. Its score, a table's L1 error against a model
    and a bias fixed between neighbours, moves by at most the table's own L1 change:
    ``l1_sensitivity``, as the tree's (2 for a replaced row, 2K for a unit of K rows; not the
    squared L2 sensitivity, 2K²)."""
    selection = calibrate_selection(rho / rounds * select_share, l1_sensitivity, accountant)
    return selection, rho / rounds - selection.rho


def tree_plan_selections(schema: Schema, rho: float, l1_sensitivity: float, accountant: str,
                         config: MarginalsConfig = DEFAULTS) -> list[tuple[Selection, int]]:
    """The exponential-mechanism steps of a tree plan whose tables share ``rho``
    (:func:`~dp_dask.methods.marginals.measure_all`), from public inputs alone: the tree's
    selection and its rounds, the refinement's (``refine_rounds``, fewer where fewer pairs lie
    outside the tree); both score a table's L1 error, of sensitivity ``l1_sensitivity``."""
    rounds = min(config.refine_rounds, (schema.m - 1) * (schema.m - 2) // 2)
    return [(tree_selection(schema, rho * config.selection_share, l1_sensitivity, accountant),
             schema.m - 1),
            (refine_selection(rho * config.refine_share, rounds, l1_sensitivity, accountant,
                              config.select_share)[0], rounds)]


def select_tree(counts: np.ndarray, schema: Schema, one_way: list[np.ndarray], rows: float,
                rho: float, l1_sensitivity: float, accountant: str, *, noise: float,
                sampler: str = "opendp", rng: np.random.Generator | None = None,
                tree_above: float = DEFAULTS.tree_above) -> TreeChoice:
    """A spanning tree of m − 1 pairs chosen under DP, ``rho`` shared equally by its rounds:
    each round picks, by the exponential mechanism, one pair joining two components. Reads the
    exact counts; returns only the chosen pairs."""
    rounds = schema.m - 1
    selection = tree_selection(schema, rho, l1_sensitivity, accountant)
    scores = pair_scores(counts, schema, one_way, rows)
    components = DisjointSet(range(schema.m))
    chosen: list[tuple[int, int]] = []
    for _ in range(rounds):
        candidates = [pair for pair in scores if not components.connected(*pair)]
        pick = candidates[noisy_max_index(np.array([scores[p] for p in candidates]), selection,
                                          sampler=sampler, rng=rng)]
        components.merge(*pick)
        chosen.append(pick)
    return TreeChoice(sorted(chosen), selection, rounds, noise, tree_above=tree_above)


def refine(counts: np.ndarray, schema: Schema, measurements: list[Measurement], rows: float,
           rho: float, sensitivity: float, accountant: str, *, l1_sensitivity: float,
           sampler: str = "opendp", rng: np.random.Generator | None = None,
           config: MarginalsConfig = DEFAULTS) -> tuple[list[Measurement], Refinement]:
    """Up to ``refine_rounds`` more tables, ``rho`` shared equally by the rounds: each round
    picks, by the exponential mechanism (``select_share`` of its ρ, as AIM; scores of
    ``l1_sensitivity``, a table's L1 change: :func:`refine_selection`), the unmeasured pair
    whose exact table lies furthest from what the measurements so far imply (their consistent
    tables' maximum-information tree: post-processing, fixed given them), less the noise its own
    measurement would leave, and measures it with the rest (L2 ``sensitivity``).

    The tree's selection scores pairs against independence; a pair whose attributes the tree
    already links through others (workclass and occupation, through their copies) is never a
    candidate there, however badly the path between them models it. Returns the measurements
    with the rounds' appended."""
    measured_pairs = {m.attributes for m in measurements}
    pairs = [(a, b) for a, b, _, _ in attribute_pairs(schema) if (a, b) not in measured_pairs]
    rounds = min(config.refine_rounds, len(pairs))
    selection, rho_measure = refine_selection(rho, rounds, l1_sensitivity, accountant,
                                              config.select_share)
    sigma = gaussian_sigma(rho_measure, sensitivity, accountant)
    measured, chosen = list(measurements), []
    for _ in range(rounds):
        marginals = consistent_marginals(measured, schema.sizes, rows,
                                         config=config.consistency)
        model = implied_tables(marginals, *spanning_tree(marginals, schema.m), pairs)
        scores = selection_scores(
            [exact_answer(counts, schema, p) for p in pairs], [model[p].ravel() for p in pairs],
            [math.sqrt(2 / math.pi) * sigma * model[p].size for p in pairs])
        pick = pairs.pop(noisy_max_index(scores, selection, sampler=sampler, rng=rng))
        (noisy,) = gaussian_measurements([(exact_answer(counts, schema, pick), sigma,
                                           sensitivity)], sampler=sampler, rng=rng)
        measured.append(Measurement(pick, noisy, sigma))
        chosen.append(pick)
    return measured, Refinement(chosen, selection, sigma, rho_measure)


# "auto": by the threshold; "all" or "tree": forced (for comparisons: benchmarks/wide.py).
TABLES = ("auto", "all", "tree")


def check_tables(tables: object) -> str:
    """``tables`` if it is one of :data:`TABLES`, else ValueError."""
    if tables not in TABLES:
        raise ValueError(f"tables must be one of {TABLES}, not {tables!r}")
    return str(tables)


def tree_wanted(noise: float, tree_above: float = DEFAULTS.tree_above) -> bool:
    """Whether the all-pairs plan's noise level (:func:`all_pairs_noise`) calls for a tree."""
    return noise > tree_above and math.isfinite(noise)
