"""The marginals method's budget: each measurement's share of ρ, from the public schema."""

from __future__ import annotations

from dataclasses import dataclass, replace
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
from dp_dask.privacy.split import BudgetPart

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
                     dense: tuple[BudgetPart, ...] | None = None) -> tuple[BudgetPart, ...]:
        """The split's parts (:mod:`dp_dask.privacy.split`): ``k`` one-shot 1-/2-way
        measurements of L2 ``sensitivity``, the ``tree`` chosen (None: all pairs), the ``fine``
        histograms by attribute; ``dense``: the one-shot measurements' parts instead, on the
        dense-joint path (joint.dense_budget_split); then the adaptive rounds'. The ledger's
        replace-one charge and the guarantee close it (synthesizer.release_record)."""
        config = self.config
        rule = f"each in proportion to cells^{config.cells_exponent:.4g}"
        one_shot = dense or (self._one_shot(schema, k, sensitivity, tree, fine, rule),)
        rounds = self.rounds
        if not rounds.rounds:
            return one_shot
        return (*one_shot, BudgetPart(
            "adaptive rounds (privacy.adaptive)", count=rounds.rounds, rho=self.adaptive,
            share=rounds.share, parts=(
                BudgetPart("selection of a marginal", rho_each=rounds.rho_select,
                           mechanism="exponential mechanism"),
                BudgetPart("measurement of the marginal selected", rho_each=rounds.rho_measure,
                           mechanism="Gaussian"))))

    def _one_shot(self, schema: Schema, k: int, sensitivity: float, tree: TreeChoice | None,
                  fine: dict[int, Any], rule: str) -> BudgetPart:
        """The one-shot measurements' part: the histograms', the tables' (a tree's selection
        and refinement included) and the fine histograms'."""
        config = self.config
        if tree is None:
            measures = "1-way histograms and 2-way tables (every one)"
            histograms = BudgetPart("histograms", share=config.one_way_share)
            tables = (BudgetPart("tables", share=1 - config.one_way_share),)
        else:
            refined = tree.refinement
            measures = (f"1-way histograms (each twice) and 2-way tables ({len(tree.pairs)} of "
                        f"a tree, {len(refined.pairs)} more chosen against it)")
            histograms = BudgetPart(
                "histograms", share=config.tree_one_way_share,
                note=f"{config.one_way_share:g} of it before the plan was chosen, the rest "
                     "after; the two averaged by inverse variance")
            tables = (BudgetPart("tree's selection rounds", count=tree.rounds,
                                 share=config.selection_share, rho_each=tree.selection.rho,
                                 mechanism="exponential mechanism"),
                      BudgetPart("refinement rounds", count=len(refined.pairs),
                                 share=config.refine_share, parts=(
                                     BudgetPart("selection", rho_each=refined.selection.rho,
                                                mechanism="exponential mechanism"),
                                     BudgetPart("table measured",
                                                rho_each=refined.rho_measure))),
                      BudgetPart("tree's tables", share=1 - config.tree_one_way_share
                                 - config.selection_share - config.refine_share))
        coarse = BudgetPart(measures, count=k, mechanism="Gaussian", norm="L2",
                            sensitivity=sensitivity, rule=rule, parts=(histograms, *tables))
        if not fine:
            return replace(coarse, rho=self.one_shot)
        names = ", ".join(schema.names[a] for a in sorted(fine))
        return BudgetPart(
            "Gaussian measurements", count=k + len(fine), rho=self.one_shot, parts=(
                BudgetPart(f"fine histograms of {names}", share=self.fine_share, norm="L2",
                           sensitivity=sensitivity, rule=rule),
                replace(coarse, share=1 - self.fine_share)))


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
