"""The marginals method's Synthesizer: its options, privacy plan and ledger charge; the fit
itself is :func:`~dp_dask.methods.marginals.algorithm.fit_model`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask.dataframe as dd
import numpy as np
from dask.delayed import Delayed

from dp_dask.data.constraints import CONSTRAINT_KINDS
from dp_dask.data.counts import fine_count_graph, rows_counted
from dp_dask.data.io import Location
from dp_dask.data.schema import Schema
from dp_dask.methods.marginals import adaptive, cliques
from dp_dask.methods.marginals.algorithm import fit_model
from dp_dask.methods.marginals.config import MarginalsConfig
from dp_dask.methods.marginals.model import MarginalModel
from dp_dask.methods.marginals.plan import (
    FINE_SHARE,
    BudgetPlan,
    check_fine_share,
    check_neighbours,
)
from dp_dask.methods.marginals.select_pairs import check_tables
from dp_dask.postprocess.reweight import check_iterations
from dp_dask.privacy import rho_budget
from dp_dask.privacy.accounting import epsilon_spent
from dp_dask.privacy.selection import replace_one_rho
from dp_dask.synthesizer import Synthesizer
from dp_dask.tuning import as_config


class MarginalSynthesizer(Synthesizer):
    """Consistent noisy 1- and 2-way marginals, then rows updated to match them (the default).

    See dp_dask/methods/marginals/. Extra parameters: ``accountant``, "exact" (the Gaussian
    mechanism's exact privacy curve, default) or "zcdp" (zCDP with the CKS conversion);
    ``fit_iterations``, the mirror-descent steps fitting the candidate rows (once per estimate)
    to the noisy measurements (default None: 50 up to ε = 1 replace-one, more the less noise
    there is, at most 400, ``reweight.iterations_for``; 0 skips the fit: faster sampling on wide
    schemas, 2-way error a few per cent higher, docs/method.md); ``neighbours``, "replace" (one
    row replaced, n public: dp_dask's notion, default) or "add_remove" (one row added or
    removed, n private and estimated from the noisy counts: MST's and AIM's notion, half the
    noise variance at the same ε; the ledger counts it at its replace-one ε, docs/privacy.md);
    ``fine_share``, the fraction of ρ measuring the schema's fine grids, when it declares any
    (default ``FINE_SHARE``, docs/method.md); ``tables``, which 2-way tables to measure: "auto"
    (default: every pair, or a DP spanning tree on schemas too wide for that, by a public
    threshold, docs/method.md "Wide schemas"), "all" or "tree"; ``rounds``, the adaptive rounds
    after the one-shot measurement (default None: ``adaptive.rounds_for`` the schema with a
    workload, none without: on Adult they cost more than they gain, docs/results-adult.md),
    spending ``adaptive_share`` of ρ (methods/marginals/adaptive.py); ``workload``, the column
    groups (1 to 3 columns, ``"*"`` for any other column) whose marginals matter, which the
    rounds' selection favours (default: every triple). With rounds the release is accounted in
    zCDP (the default ``accountant`` None: "zcdp" with rounds, "exact" without); ``config``,
    the tuned numbers (a :class:`~.config.MarginalsConfig` or a dict of its fields, default
    None: the defaults; docs/tuning.md).
    """

    name = "marginals"
    fine_grids = True
    conditional = True  # its model conditioned: dp_dask.methods.marginals.conditioned
    config_class = MarginalsConfig
    dense_tables = True  # its estimate, fit_cost, is the default: dense 2-way tables
    constraint_kinds = frozenset(CONSTRAINT_KINDS)  # structural zeros, exact sampling
    supports_privacy_unit = True  # every measurement and selection through table_sensitivity

    def __init__(self, schema: Schema | str | Path, *, accountant: str | None = None,
                 fit_iterations: int | None = None, neighbours: str = "replace",
                 fine_share: float = FINE_SHARE, tables: str = "auto",
                 rounds: int | None = None, adaptive_share: float = adaptive.ADAPTIVE_SHARE,
                 workload: list[Any] | None = None,
                 config: MarginalsConfig | dict[str, Any] | None = None, **common: Any) -> None:
        super().__init__(schema, **common)
        self.config = as_config(MarginalsConfig, config)
        self.tables = check_tables(tables)
        self.fine_share = check_fine_share(fine_share)
        self.fit_iterations = check_iterations(fit_iterations)
        self.neighbours = check_neighbours(neighbours)
        self.workload = adaptive.check_workload(self.schema, workload)
        self.adaptive_share = adaptive.check_share(adaptive_share)
        rounds = adaptive.check_rounds(rounds)
        self.rounds = (rounds if rounds is not None else
                       adaptive.rounds_for(self.schema, self.config) if self.workload else 0)
        if self.rounds and accountant == "exact":
            raise ValueError("the adaptive rounds' selection is accounted in zCDP: use "
                             "accountant='zcdp', or rounds=0 for the exact accountant")
        self.accountant = accountant or ("zcdp" if self.rounds else "exact")
        self.candidates = (adaptive.candidates(self.schema, self.workload, self.config)
                           if self.rounds else {})

    @property
    def rows_public(self) -> bool:
        return self.neighbours == "replace" and super().rows_public

    def _privacy_plan(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon, "delta": self.delta, "mechanism": "gaussian",
                "accountant": self.accountant,
                "rho": rho_budget(self.epsilon, self.delta, self.accountant)}

    def _ledger_plan(self) -> dict[str, Any]:
        """The plan as replace-one-row DP, mechanism by mechanism: under add/remove the same
        noise meets a replacement moving two cells per table, twice a measurement's squared
        sensitivity, hence twice its charge, and twice each selection's score sensitivity
        (privacy.selection.replace_one_rho)."""
        plan = self._privacy_plan()
        if self.neighbours == "replace":  # a unit's plan is already replace-one-unit
            return plan
        rho = replace_one_rho(plan["rho"], self.budget_plan().selections(
            self.schema, self.tree_possible, self.accountant))
        return {**plan, "rho": rho, "epsilon": epsilon_spent(rho, self.delta, self.accountant)}

    @property
    def tree_possible(self) -> bool:
        """Whether a tree plan may be chosen: unless ``tables`` is "all" (or m ≤ 2)."""
        return self.schema.m > 2 and self.tables != "all"

    @classmethod
    def config_memory(cls, schema: Schema, rows: int,
                      config: dict[str, Any] | None) -> dict[str, int] | None:
        """Under ``cliques="auto"``: :func:`~.cliques.clique_memory`."""
        return cliques.clique_memory(schema, rows, as_config(MarginalsConfig, config))

    def _count_graph(self, ddf: dd.DataFrame) -> Delayed:
        """The d×d count matrix and the exact fine histograms (and, with rounds, the exact
        counts of the candidate triples; where the dense path may run, the sparse joint), in
        one pass."""
        if self.budget_plan().with_cliques:  # the sparse joint the triples are read from
            return cliques.count_graph(ddf, self.schema)
        if self.rounds:
            return adaptive.count_graph(ddf, self.schema, adaptive.triples_of(self.candidates))
        return fine_count_graph(ddf, self.schema)

    def _rows_counted(self, exact: tuple[np.ndarray, np.ndarray]) -> int:
        return rows_counted(exact[0], self.schema)

    def budget_plan(self) -> BudgetPlan:
        """This release's ρ by step (:class:`~.plan.BudgetPlan`), less what a choice of the
        privacy unit's max_rows spends."""
        rho = self._privacy_plan()["rho"] - self.unit_rho
        return BudgetPlan(rho, adaptive.RoundPlan(self.rounds, self.adaptive_share, rho,
                                                  self.config),
                          self.fine_share if self.schema.fine_grids else 0.0, self.config,
                          # the dense path: with rounds cliques="auto" releases as "pairs"
                          cliques.cliques_possible(self.schema, self.config) and not self.rounds)

    def _fit_counts(self, exact: tuple[np.ndarray, ...], n_rows: int,
                    metadata: dict[str, Any]) -> MarginalModel:
        return fit_model(self, exact, n_rows, metadata)

    @staticmethod
    def load_model(path: Location, document: dict[str, Any],
                   storage_options: dict[str, Any] | None = None) -> MarginalModel:
        return MarginalModel.from_files(path, document, storage_options)
