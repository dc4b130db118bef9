"""Which 2-way tables the marginals method measures: all of them, or a DP spanning tree.

Measuring all m(m−1)/2 tables spreads the tables' share of ρ so thinly on a wide schema that
each table's noise swamps its signal, and the release falls behind noise-free independent
marginals (issue 45 §3). Above a public threshold the method measures, like MST (McKenna,
Miklau & Sheldon 2021), only m − 1 tables: a spanning tree chosen with the exponential
mechanism over how far each pair's exact table lies from the independence of the noisy 1-way
histograms (L1), one edge per round among those joining two components (Kruskal), then measured
with the tables' share. The threshold is a function of public quantities only: the schema's
domain sizes, ρ, the sensitivity and n (public under replace-one neighbours; under add/remove
the estimate from the noisy 1-way histograms, measured first).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.cluster.hierarchy import DisjointSet

from dp_dask.data.counts import attribute_pairs, exact_answer
from dp_dask.data.schema import Schema
from dp_dask.privacy.accounting import gaussian_sigma
from dp_dask.privacy.selection import Selection, calibrate_selection, noisy_max_index

# The all-pairs plan's noise level at which a tree measures better: the mean over its 2-way tables
# of cells·σ/n (each table's summed noise as a fraction of n, up to √(2/π)). Generated tables
# (benchmarks/wide.py, n = 10⁴, ε = 1, add/remove, seeds 0–2): all pairs better at 0.135 (m = 10);
# the tree better on Q2/Q3 but worse on Q1 (by 1.6 / 2.7 / 0.9) at 0.296, 0.422 and 0.840
# (m = 20, 30, 50). Adult's 9 and 15 attributes at ε = 1 sit at 0.16 and 0.33 (replace-one), 0.11
# and 0.24 (add/remove), kept on all pairs (docs/method.md "Wide schemas").
TREE_ABOVE = 0.5
# Of ρ in the tree's plan: the selection's share (the 1-way histograms keep theirs, the tables
# get the rest). MST gives its selection a third.
SELECTION_SHARE = 1.0 / 3.0


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

    @property
    def rho(self) -> float:
        return self.rounds * self.selection.rho

    def to_json(self, schema: Schema) -> dict[str, Any]:
        return {"tables": "spanning tree", "all_pairs_noise": self.noise,
                "tree_above": TREE_ABOVE,
                "mechanism": "exponential (report-noisy-max, Gumbel; OpenDP make_noisy_max)",
                "rounds": self.rounds, "rho_per_round": self.selection.rho,
                "epsilon_per_round": self.selection.epsilon, "rho": self.rho,
                "score": "L1 distance of the exact table from the noisy 1-way histograms' "
                         f"independence table, sensitivity {self.selection.sensitivity:g}",
                "pairs": [[schema.names[a], schema.names[b]] for a, b in self.pairs]}


def pair_scores(counts: np.ndarray, schema: Schema, one_way: list[np.ndarray],
                rows: float) -> dict[tuple[int, int], float]:
    """Each pair's L1 distance between its exact table (from the d×d count matrix) and the
    independence table of the noisy 1-way histograms ``one_way`` (clipped at 0, scaled to
    ``rows``). Replacing a row moves it by at most 2, adding or removing one by 1."""
    probabilities = [np.clip(v, 0, None) / max(np.clip(v, 0, None).sum(), 1e-300)
                     for v in one_way]
    return {(a, b): float(np.abs(exact_answer(counts, schema, (a, b))
                                 - rows * np.outer(probabilities[a], probabilities[b]).ravel()
                                 ).sum())
            for a, b, _, _ in attribute_pairs(schema)}


def select_tree(counts: np.ndarray, schema: Schema, one_way: list[np.ndarray], rows: float,
                rho: float, l1_sensitivity: float, accountant: str, *, noise: float,
                sampler: str = "opendp", rng: np.random.Generator | None = None) -> TreeChoice:
    """A spanning tree of m − 1 pairs chosen under DP, ``rho`` shared equally by its rounds:
    each round picks, by the exponential mechanism, one pair joining two components. Reads the
    exact counts; returns only the chosen pairs."""
    rounds = schema.m - 1
    selection = calibrate_selection(rho / rounds, l1_sensitivity, accountant)
    scores = pair_scores(counts, schema, one_way, rows)
    components = DisjointSet(range(schema.m))
    chosen: list[tuple[int, int]] = []
    for _ in range(rounds):
        candidates = [pair for pair in scores if not components.connected(*pair)]
        pick = candidates[noisy_max_index(np.array([scores[p] for p in candidates]), selection,
                                          sampler=sampler, rng=rng)]
        components.merge(*pick)
        chosen.append(pick)
    return TreeChoice(sorted(chosen), selection, rounds, noise)


# "auto": by the threshold; "all" or "tree": forced (for comparisons: benchmarks/wide.py).
TABLES = ("auto", "all", "tree")


def check_tables(tables: object) -> str:
    """``tables`` if it is one of :data:`TABLES`, else ValueError."""
    if tables not in TABLES:
        raise ValueError(f"tables must be one of {TABLES}, not {tables!r}")
    return str(tables)


def tree_wanted(noise: float) -> bool:
    """Whether the all-pairs plan's noise level (:func:`all_pairs_noise`) calls for a tree."""
    return noise > TREE_ABOVE and math.isfinite(noise)
