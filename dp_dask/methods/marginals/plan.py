"""The marginals method's budget: each measurement's share of ρ, from the public schema."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dp_dask.data.counts import (
    attribute_pairs,
)
from dp_dask.data.schema import Schema
from dp_dask.methods.marginals import adaptive
from dp_dask.methods.marginals.config import DEFAULTS, MarginalsConfig
from dp_dask.methods.marginals.select_pairs import (
    TreeChoice,
    tree_plan_selections,
)
from dp_dask.privacy.accounting import TABLE_L1_SENSITIVITY, TABLE_L2_SENSITIVITY
from dp_dask.privacy.selection import Selection

# The ``fine_share`` option's default: the fine histograms' share of ρ (docs/tuning.md).
FINE_SHARE = 0.03


def measured_queries(schema: Schema,
                     pairs: list[tuple[int, int]] | None = None) -> list[tuple[int, ...]]:
    """Every attribute alone, then every pair (or the ``pairs`` given, i < j, sorted), in the
    order of dp_dask.data.counts.query_vector."""
    if pairs is None:
        pairs = [(i, j) for i, j, _, _ in attribute_pairs(schema)]
    return [(a,) for a in range(schema.m)] + sorted(pairs)


def budget_shares(schema: Schema, queries: list[tuple[int, ...]], fine: tuple[int, ...] = (),
                  fine_share: float = FINE_SHARE, table_share: float | None = None,
                  config: MarginalsConfig = DEFAULTS) -> np.ndarray:
    """Each query's share of ρ, then each fine histogram's (of the attributes ``fine``):
    ``fine_share`` to the fine histograms when there are any, ∝ cells^(1/3); of the rest
    ``one_way_share`` to the histograms (all of it when there is no table), ``table_share`` to the
    tables (default: the rest; less when a selection spends some), each ∝ cells^(1/3). A
    function of the public schema only."""
    weights = np.array([np.prod(schema.sizes[list(q)]) for q in queries],
                       dtype=np.float64) ** config.cells_exponent
    one_way = np.array([len(q) == 1 for q in queries])
    share = config.one_way_share if (~one_way).any() else 1.0
    tables = 1 - share if table_share is None else table_share
    coarse = 1.0 - fine_share if fine else 1.0
    fine_weights = np.array([len(schema.attributes[a].fine) - 1 for a in fine],
                            dtype=np.float64) ** config.cells_exponent
    return np.concatenate([
        coarse * np.where(one_way, share * weights / weights[one_way].sum(),
                          tables * weights / max(weights[~one_way].sum(), 1e-300)),
        fine_share * fine_weights / max(fine_weights.sum(), 1e-300)])


def check_fine_share(share: object) -> float:
    """``share`` if it is a fraction of ρ strictly between 0 and 1, else ValueError."""
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share < 1:
        raise ValueError(f"fine_share must be a number between 0 and 1 (exclusive), not {share!r}")
    return float(share)


def check_neighbours(neighbours: object) -> str:
    """``neighbours`` if it names a notion of :data:`TABLE_L2_SENSITIVITY`, else ValueError."""
    if neighbours not in TABLE_L2_SENSITIVITY:
        raise ValueError(f"neighbours must be one of {sorted(TABLE_L2_SENSITIVITY)}, "
                         f"not {neighbours!r}")
    return str(neighbours)


@dataclass(frozen=True)
class BudgetPlan:
    """A release's ρ by step, from public inputs alone: the adaptive rounds' (``rounds``), and
    of the one-shot measurement's rest ``fine_share`` to the fine histograms (0 without fine
    grids), then of the coarse rest the 1-way histograms', a tree plan's selection and
    refinement, and the tables' (:func:`budget_shares` splits each among its measurements)."""

    rho: float  # the whole release's, less a choice of max_rows "auto" (its measurements')
    rounds: adaptive.RoundPlan
    fine_share: float
    config: MarginalsConfig = DEFAULTS
    with_cliques: bool = False  # the dense joint may be fitted (cliques_possible, no rounds)

    @property
    def one_shot(self) -> float:
        """The one-shot measurements' (and selections'), fine histograms included."""
        return self.rounds.rho_one_shot

    @property
    def coarse(self) -> float:
        """The 1-/2-way measurements' and a tree plan's selections'."""
        return self.one_shot * (1.0 - self.fine_share)

    @property
    def tree_selection(self) -> float:
        return self.coarse * self.config.selection_share

    @property
    def refinement(self) -> float:
        return self.coarse * self.config.refine_share

    @property
    def adaptive(self) -> float:
        return self.rounds.rho_rounds

    def selections(self, schema: Schema, tree_possible: bool,
                   accountant: str) -> list[tuple[Selection, int]]:
        """The exponential-mechanism steps the release may take, calibrated to add/remove
        scores, from public inputs: a tree plan's where ``tree_possible`` (under tables="auto"
        the tree is chosen after the noisy n, so its steps are counted whichever plan the noise
        picks: the charge must hold for both); then the adaptive rounds'."""
        steps = []
        if tree_possible:  # on the dense path too: under add/remove it is chosen after n̂
            steps += tree_plan_selections(schema, self.coarse, TABLE_L1_SENSITIVITY["add_remove"],
                                          accountant, self.config)
        if self.rounds.rounds:
            steps.append((self.rounds.selection(adaptive.SCORE_L1_SENSITIVITY["add_remove"]),
                          self.rounds.rounds))
        return steps

    def budget_split(self, schema: Schema, *, k: int, sensitivity: float,
                     tree: TreeChoice | None, fine: dict[int, Any],
                     dense: str | None = None) -> str:
        """The metadata's account of the split: ``k`` one-shot 1-/2-way measurements of L2
        ``sensitivity``, the ``tree`` chosen (None: all pairs), the ``fine`` histograms by
        attribute; ``dense``: the one-shot measurements' account instead, on the dense-joint
        path (joint.py). The ledger's replace-one charge, where the notion is another, is
        :func:`replace_one_text`'s."""
        config = self.config
        which = "every 1-way histogram and 2-way table"
        histograms = f"{config.one_way_share:g} to the histograms"
        tables = "the rest to the tables"
        if tree is not None:
            refined = tree.refinement
            which = (f"every 1-way histogram twice, the {len(tree.pairs)} 2-way tables of a "
                     f"tree and {len(refined.pairs)} more chosen against it")
            histograms = (f"{config.tree_one_way_share:g} to the histograms "
                          f"({config.one_way_share:g} before the plan was chosen, the rest "
                          "after; the two averaged by inverse variance)")
            tables = (f"{config.selection_share:.6g} to the tree's selection ({tree.rounds} "
                      f"exponential-mechanism rounds of rho {tree.selection.rho:.6g}), "
                      f"{config.refine_share:.6g} to {len(refined.pairs)} refinement rounds "
                      "(each an exponential-mechanism selection of rho "
                      f"{refined.selection.rho:.6g} and a table measured with rho "
                      f"{refined.rho_measure:.6g}), the rest to the "
                      "tree's tables")
        split = (f"{k} Gaussian measurements ({which}, L2 "
                 f"sensitivity {sensitivity:.6g} each) sharing rho = {self.one_shot:.6g}: "
                 f"{histograms}, {tables}, each in "
                 f"proportion to cells^(1/3)")
        if fine:
            names = [schema.names[a] for a in sorted(fine)]
            split = (f"{k + len(fine)} Gaussian measurements sharing rho = "
                     f"{self.one_shot:.6g}: "
                     f"{self.fine_share:g} of it to the fine histograms of {', '.join(names)} "
                     f"(L2 sensitivity {sensitivity:.6g} each), in proportion to cells^(1/3); "
                     f"the rest to {k} measurements ({which}, "
                     f"L2 sensitivity {sensitivity:.6g} each), of it {histograms}, {tables}, "
                     "each in proportion to cells^(1/3)")
        if dense is not None:
            split = dense
        rounds = self.rounds
        if rounds.rounds:
            split += (f"; then {rounds.rounds} adaptive rounds sharing rho = "
                      f"{self.adaptive:.6g} ({rounds.share:g} of the budget), each "
                      f"{rounds.rho_select:.6g} to an exponential-mechanism selection and "
                      f"{rounds.rho_measure:.6g} to a Gaussian measurement of the marginal "
                      "selected (privacy.adaptive)")
        return split


def replace_one_text(replace_one_rho: float, replaced: str, tree: TreeChoice | None,
                     tree_possible: bool) -> str:
    """An add/remove release's charge as the ledger counts it, ``replace_one_rho`` under
    replace-``replaced`` neighbours ("one row", or a privacy unit's rows), in words: what the
    release's account of its split closes with, beside its guarantee."""
    return (f"rho {replace_one_rho:.6g} as replace {replaced} (the ledger's notion): the "
            "Gaussian measurements at twice their rho, each exponential-mechanism "
            "selection at twice its score sensitivity (4 times its rho in zCDP)"
            + ("; a tree's selections included, which tables='auto' may choose after "
               "the noisy n" if tree is None and tree_possible else ""))


def shares_text(tree: bool, fine_share: float | None, config: MarginalsConfig = DEFAULTS) -> str:
    """The model record's summary of the split (``fine_share``: None without fine grids)."""
    histograms = config.tree_one_way_share if tree else config.one_way_share
    shares = (f"{histograms:g} of rho to the histograms, "
              + (f"{config.selection_share:.6g} to the tree's selection, "
                 f"{config.refine_share:.6g} to tables chosen against the tree, " if tree else "")
              + f"the rest to the tables, each in proportion to cells^{config.cells_exponent:.4g}")
    if fine_share is not None:
        shares = (f"{fine_share:g} of rho to the fine histograms in proportion to "
                  f"cells^{config.cells_exponent:.4g}; of the rest, " + shares)
    return shares
