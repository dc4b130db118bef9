"""The marginals method's measurements: the only steps that read exact counts.

One fit's measurements share a :class:`Measurer` (the exact counts, ρ, the sensitivity, the
accountant and the noise sampler); :func:`~.synthesizer.fit_pairs` calls the steps in order
(:func:`measure_tables` all but the first), and the noise is drawn in that order:

    measure_one_way   the 1-way histograms
    choose_pairs      all pairs, or (a schema too wide for them) the histograms measured again
                      and a spanning tree of pairs chosen under DP
    measure_pairs     the chosen pairs' 2-way tables and the fine histograms
    refine_tree       (a tree) a few more tables, chosen against the tree's model
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dp_dask.data.counts import (
    exact_answer,
    rows_counted,
)
from dp_dask.data.schema import Schema
from dp_dask.methods.marginals import adaptive
from dp_dask.methods.marginals.config import DEFAULTS, MarginalsConfig
from dp_dask.methods.marginals.plan import (
    FINE_SHARE,
    BudgetPlan,
    budget_shares,
    check_fine_share,
    check_neighbours,
    measured_queries,
)
from dp_dask.methods.marginals.select_pairs import (
    TreeChoice,
    all_pairs_noise,
    check_tables,
    refine,
    select_tree,
    tree_wanted,
)
from dp_dask.postprocess.consistency import (
    Measurement,
    estimated_rows,
)
from dp_dask.privacy.accounting import gaussian_sigma, table_sensitivity
from dp_dask.privacy.noise import gaussian_measurements


@dataclass(frozen=True)
class ExactCounts:
    """The exact counts one pass collects for a fit
    (:meth:`~.synthesizer.MarginalSynthesizer._count_graph`): the d×d count matrix and the fine
    histograms (concatenated) always; with adaptive rounds the candidate triples' counts
    (:func:`.adaptive.count_graph`); where the dense joint may run, the sparse joint (its keys
    and counts, :func:`.cliques.count_graph`) its triples are summed from."""

    matrix: np.ndarray
    fine: np.ndarray
    triples: np.ndarray | None = None
    joint: tuple[np.ndarray, np.ndarray] | None = None


class Measurer:
    """What one fit's Gaussian measurements share: the exact counts (the d×d matrix
    ``counts``; ``fine``: attribute → its exact fine histogram), ``rho`` (their charges sum to
    at most it: :func:`budget_shares`), the neighbouring notion's L2 sensitivity, the
    accountant, the noise sampler (``rng`` for numpy's) and the tuned numbers.

    A fine histogram has a table's L2 sensitivity: replacing a row moves at most two cells by 1
    (a row of an extra bin is in no cell), adding or removing one moves one. With a privacy unit
    of at most ``max_rows`` rows (None: a row) every sensitivity is ``max_rows`` times a row's
    (:func:`~dp_dask.privacy.accounting.table_sensitivity`) and n is private under both notions.
    """

    def __init__(self, counts: np.ndarray, fine: dict[int, np.ndarray], schema: Schema,
                 rho: float, *, accountant: str, sampler: str = "opendp",
                 rng: np.random.Generator | None = None, neighbours: str = "replace",
                 fine_share: float = FINE_SHARE, config: MarginalsConfig = DEFAULTS,
                 max_rows: int | None = None) -> None:
        self.counts, self.fine, self.schema, self.rho = counts, fine, schema, rho
        self.accountant, self.sampler, self.rng = accountant, sampler, rng
        self.neighbours, self.config = neighbours, config
        self.max_rows = max_rows
        self.sensitivity = table_sensitivity(check_neighbours(neighbours), "l2", max_rows)
        # The L1 change of one table, which every selection's score (the tree's, the
        # refinement's) moves by at most: a row's as calibrated before units (√2², equal to 2
        # but for rounding: the same releases), a unit's exact (2K, not the squared L2 2K²).
        self.l1_sensitivity = (self.sensitivity**2 if max_rows is None
                               else table_sensitivity(neighbours, "l1", max_rows))
        self.grids = tuple(sorted(fine))
        self.fine_share = check_fine_share(fine_share)
        self.all_pairs = measured_queries(schema)
        # the all-pairs plan's shares: its 1-way histograms are measured with them either way
        self.shares = budget_shares(schema, self.all_pairs, self.grids, self.fine_share,
                                    config=config)
        # all of rho to the one-shot measurements: the adaptive rounds' share is spent apart
        self.plan = BudgetPlan(rho, adaptive.RoundPlan(0, 0.0, rho, config),
                               self.fine_share if self.grids else 0.0, config)

    def answer(self, key: tuple[Any, ...]) -> np.ndarray:
        """A query's exact cells, or a fine grid's."""
        if key[0] == "fine":
            return np.asarray(self.fine[key[1]])
        return exact_answer(self.counts, self.schema, key)

    def draw(self, keys: list[tuple[Any, ...]], shares: np.ndarray) -> list[Measurement]:
        """One measurement per key at its share of ρ. Measurements of one noise scale (same
        share) are drawn as one measurement of their concatenation, L2 sensitivity √k times one
        query's for k queries: the same charge as k separate ones, and one OpenDP call instead
        of k; the scales' draws run side by side (privacy.noise.gaussian_measurements)."""
        sigmas = [gaussian_sigma(self.rho * share, self.sensitivity, self.accountant)
                  for share in shares]
        scales = list(dict.fromkeys(sigmas))
        groups = [[key for key, s in zip(keys, sigmas) if s == sigma] for sigma in scales]
        answers = [[self.answer(key) for key in group] for group in groups]
        drawn = gaussian_measurements(
            [(np.concatenate(parts), sigma, self.sensitivity * math.sqrt(len(parts)))
             for sigma, parts in zip(scales, answers)], sampler=self.sampler, rng=self.rng)
        noisy: dict[tuple[Any, ...], np.ndarray] = {}
        for group, parts, values in zip(groups, answers, drawn):
            noisy |= zip(group, np.split(values, np.cumsum([len(p) for p in parts])[:-1]))
        return [Measurement(key, noisy[key], s) for key, s in zip(keys, sigmas)]


@dataclass(frozen=True)
class Pairs:
    """The pairs whose 2-way tables are measured (:func:`choose_pairs`)."""

    one_way: list[Measurement]  # the 1-way measurements (a tree's: both draws, merged)
    queries: list[tuple[int, ...]]  # the 1-way queries, then the chosen pairs
    shares: np.ndarray  # the queries' shares of ρ, then the fine histograms'
    rows: float  # n for the selection: exact under replace, else the 1-way's noisy estimate
    tree: TreeChoice | None  # the tree's record; None: every pair


def measure_one_way(measurer: Measurer) -> list[Measurement]:
    """The 1-way histograms, at the all-pairs plan's shares."""
    return measurer.draw(measurer.all_pairs[:measurer.schema.m],
                         measurer.shares[:measurer.schema.m])


def choose_pairs(measurer: Measurer, one_way: list[Measurement], tables: str = "auto"
                 ) -> Pairs:
    """Every pair, unless the schema is too wide for them (from the 1-way histograms and public
    quantities: :mod:`.select_pairs`): then the histograms are measured again up to
    ``tree_one_way_share`` of ρ (the two averaged by inverse variance) and a spanning tree of
    pairs is selected under DP with ``selection_share`` of ρ. ``tables`` "all" or "tree"
    overrides the choice (:data:`~.select_pairs.TABLES`)."""
    schema, config, m = measurer.schema, measurer.config, measurer.schema.m
    rows = (rows_counted(measurer.counts, schema)
            if measurer.neighbours == "replace" and measurer.max_rows is None
            else estimated_rows(one_way))  # n private (add/remove, or a unit): its noisy estimate
    if m <= 2 or check_tables(tables) == "all":  # every pair, or none: nothing to choose
        return Pairs(one_way, measurer.all_pairs, measurer.shares, rows, None)
    noise = all_pairs_noise(schema, rows, measurer.plan.coarse * (1 - config.one_way_share),
                            measurer.sensitivity, measurer.accountant, config.cells_exponent)
    if tables != "tree" and not tree_wanted(noise, config.tree_above):
        return Pairs(one_way, measurer.all_pairs, measurer.shares, rows, None)
    top_up = measurer.draw(measurer.all_pairs[:m], measurer.shares[:m] * (
        config.tree_one_way_share / config.one_way_share - 1))
    one_way = adaptive.merged(one_way + top_up)
    tree = select_tree(measurer.counts, schema, [h.values for h in one_way], rows,
                       measurer.plan.tree_selection, measurer.l1_sensitivity,
                       measurer.accountant, noise=noise, sampler=measurer.sampler,
                       rng=measurer.rng, tree_above=config.tree_above)
    queries = measured_queries(schema, tree.pairs)
    shares = budget_shares(schema, queries, measurer.grids, measurer.fine_share,
                           table_share=1 - config.tree_one_way_share - config.selection_share
                           - config.refine_share, config=config)
    return Pairs(one_way, queries, shares, rows, tree)


def measure_pairs(measurer: Measurer, pairs: Pairs
                  ) -> tuple[list[Measurement], dict[int, Measurement]]:
    """The chosen pairs' 2-way tables and the fine histograms, in one draw: the 1-way and 2-way
    measurements in query order, and the fine histograms' by attribute."""
    m, grids = measurer.schema.m, measurer.grids
    rest = measurer.draw([*pairs.queries[m:], *(("fine", a) for a in grids)], pairs.shares[m:])
    tables = len(pairs.queries) - m
    return pairs.one_way + rest[:tables], {a: Measurement((a,), h.values, h.sigma)
                                           for a, h in zip(grids, rest[tables:])}


def refine_tree(measurer: Measurer, measured: list[Measurement], pairs: Pairs
                ) -> tuple[list[Measurement], TreeChoice | None]:
    """A tree's few more tables, chosen against the tree's model and measured with
    ``refine_share`` of ρ (:func:`~.select_pairs.refine`), and the tree's record with them;
    all pairs: ``measured`` as it is."""
    if pairs.tree is None:
        return measured, None
    measured, refinement = refine(measurer.counts, measurer.schema, measured, pairs.rows,
                                  measurer.plan.refinement, measurer.sensitivity,
                                  measurer.accountant, l1_sensitivity=measurer.l1_sensitivity,
                                  sampler=measurer.sampler, rng=measurer.rng,
                                  config=measurer.config)
    return measured, replace(pairs.tree, refinement=refinement)


def measure_tables(measurer: Measurer, one_way: list[Measurement], tables: str = "auto"
                   ) -> tuple[list[Measurement], dict[int, Measurement], TreeChoice | None]:
    """After the 1-way histograms ``one_way``: the pairs chosen (:func:`choose_pairs`), their
    tables and the fine histograms measured, a tree's more tables (:func:`refine_tree`). The
    1-way and 2-way measurements, the fine histograms' by attribute and the tree's record (None:
    all pairs)."""
    pairs = choose_pairs(measurer, one_way, tables)
    measured, fine = measure_pairs(measurer, pairs)
    measured, tree = refine_tree(measurer, measured, pairs)
    return measured, fine, tree


def measure_all(counts: np.ndarray, fine: dict[int, np.ndarray], schema: Schema, rho: float, *,
                tables: str = "auto", **options: Any
                ) -> tuple[list[Measurement], dict[int, Measurement], TreeChoice | None]:
    """The one-shot steps of :func:`~.synthesizer.fit_pairs` in one call (tests, studies): the
    1-way and 2-way measurements, the fine histograms' and the tree's record (None: all
    pairs); ``options`` are :class:`Measurer`'s."""
    measurer = Measurer(counts, fine, schema, rho, **options)
    return measure_tables(measurer, measure_one_way(measurer), tables)


def measure(counts: np.ndarray, schema: Schema, rho: float, **options: Any
            ) -> list[Measurement]:
    """The 1-way and 2-way measurements of :func:`measure_all`, no fine histogram: all of
    ``rho`` to them."""
    return measure_all(counts, {}, schema, rho, **options)[0]
