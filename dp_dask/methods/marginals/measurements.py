"""The marginals method's measurements: the only step that reads exact counts."""

from __future__ import annotations

import math
from dataclasses import replace
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


def measure(counts: np.ndarray, schema: Schema, rho: float, *, accountant: str,
            sampler: str = "opendp", rng: np.random.Generator | None = None,
            neighbours: str = "replace") -> list[Measurement]:
    """The 1-way and 2-way measurements of :func:`measure_all`, no fine histogram: all of
    ``rho`` to them."""
    return measure_all(counts, {}, schema, rho, accountant=accountant, sampler=sampler, rng=rng,
                       neighbours=neighbours)[0]


def measure_all(counts: np.ndarray, fine: dict[int, np.ndarray], schema: Schema, rho: float, *,
                accountant: str, sampler: str = "opendp", rng: np.random.Generator | None = None,
                neighbours: str = "replace", fine_share: float = FINE_SHARE,
                tables: str = "auto", config: MarginalsConfig = DEFAULTS,
                max_rows: int | None = None
                ) -> tuple[list[Measurement], dict[int, Measurement], TreeChoice | None]:
    """One Gaussian measurement per query, and per fine histogram (``fine``: attribute → its
    exact fine histogram), charges summing to at most ``rho`` (:func:`budget_shares`).

    The 1-way histograms are measured first; then, from them and public quantities, whether the
    schema is too wide for all pairs (:mod:`.select_pairs`): if so, the histograms
    are measured again up to ``tree_one_way_share`` of ρ (the two averaged by inverse variance),
    a spanning tree of pairs is selected under DP with ``selection_share`` of ρ and only its
    tables measured, then a few more tables chosen against the tree's model and measured with
    ``refine_share`` (:func:`~.select_pairs.refine`; the shares are ``config``'s), else every
    pair; ``tables``
    "all" or "tree" overrides the choice (:data:`TABLES`). The third value is the tree's record
    (None: all pairs).

    A fine histogram has a table's L2 sensitivity: replacing a row moves at most two cells by 1
    (a row of an extra bin is in no cell), adding or removing one moves one. With a privacy unit
    of at most ``max_rows`` rows (None: a row) every sensitivity is ``max_rows`` times a row's
    (:func:`~dp_dask.privacy.accounting.table_sensitivity`) and n is private under both notions.

    Measurements of one noise scale (same share of ρ) are drawn as one measurement of their
    concatenation, L2 sensitivity √k times one query's for k queries: the same charge as k
    separate ones, and one OpenDP call instead of k; the scales' draws run side by side
    (privacy.noise.gaussian_measurements). The only step that reads exact counts; it returns
    noisy ones: the queries' in query order, the fine histograms' by attribute.
    """
    sensitivity = table_sensitivity(check_neighbours(neighbours), "l2", max_rows)
    # a row's selection as calibrated before units (√2², the same releases); a unit's exact L1
    l1_sensitivity = (sensitivity**2 if max_rows is None
                      else table_sensitivity(neighbours, "l1", max_rows))
    grids = tuple(sorted(fine))
    share_of_fine = check_fine_share(fine_share)
    all_pairs = measured_queries(schema)
    one_way = all_pairs[:schema.m]

    def answer(key: tuple[Any, ...]) -> np.ndarray:  # a query's exact cells, or a fine grid's
        return np.asarray(fine[key[1]]) if key[0] == "fine" else exact_answer(counts, schema, key)

    def draw(keys: list[tuple[Any, ...]], shares: np.ndarray) -> list[Measurement]:
        sigmas = [gaussian_sigma(rho * share, sensitivity, accountant) for share in shares]
        scales = list(dict.fromkeys(sigmas))
        groups = [[key for key, s in zip(keys, sigmas) if s == sigma] for sigma in scales]
        answers = [[answer(key) for key in group] for group in groups]
        drawn = gaussian_measurements(
            [(np.concatenate(parts), sigma, sensitivity * math.sqrt(len(parts)))
             for sigma, parts in zip(scales, answers)], sampler=sampler, rng=rng)
        noisy: dict[tuple[Any, ...], np.ndarray] = {}
        for group, parts, values in zip(groups, answers, drawn):
            noisy |= zip(group, np.split(values, np.cumsum([len(p) for p in parts])[:-1]))
        return [Measurement(key, noisy[key], s) for key, s in zip(keys, sigmas)]

    shares = budget_shares(schema, all_pairs, grids, share_of_fine, config=config)
    first = draw(one_way, shares[:schema.m])
    rows = (rows_counted(counts, schema) if neighbours == "replace" and max_rows is None
            else estimated_rows(first))  # n private (add/remove, or a unit): its noisy estimate
    # all of rho to this one-shot measurement: the adaptive rounds' share is spent apart
    plan = BudgetPlan(rho, adaptive.RoundPlan(0, 0.0, rho, config),
                      share_of_fine if grids else 0.0, config)
    noise = all_pairs_noise(schema, rows, plan.coarse * (1 - config.one_way_share),
                            sensitivity, accountant, config.cells_exponent)
    tree = None
    if schema.m > 2 and check_tables(tables) != "all" and (tables == "tree"
                                                         or tree_wanted(noise, config.tree_above)):
        top_up = draw(one_way, shares[:schema.m] * (config.tree_one_way_share
                                                    / config.one_way_share - 1))
        first = adaptive.merged(first + top_up)
        tree = select_tree(counts, schema, [m.values for m in first], rows,
                           plan.tree_selection, l1_sensitivity, accountant,
                           noise=noise, sampler=sampler, rng=rng, tree_above=config.tree_above)
        queries = measured_queries(schema, tree.pairs)
        shares = budget_shares(schema, queries, grids, share_of_fine,
                               table_share=1 - config.tree_one_way_share
                               - config.selection_share - config.refine_share, config=config)
    else:
        queries = all_pairs
    rest = draw([*queries[schema.m:], *(("fine", a) for a in grids)], shares[schema.m:])
    measured = first + rest[:len(queries) - schema.m]
    if tree is not None:
        measured, refinement = refine(counts, schema, measured, rows,
                                      plan.refinement, sensitivity, accountant,
                                      sampler=sampler, rng=rng, config=config)
        tree = replace(tree, refinement=refinement)
    return measured, {a: Measurement((a,), m.values, m.sigma)
                      for a, m in zip(grids, rest[len(queries) - schema.m:])}, tree
