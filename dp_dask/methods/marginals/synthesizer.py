"""The marginals method's Synthesizer: its options, privacy plan and ledger charge, and its fit,
one line per step in :func:`fit_model` (compare private-pgm's ``MST()``).

    measure_one_way  the 1-way histograms
    dense            (cliques="auto" where the public rule picks it, or "joint"; no rounds) every
                     triple instead of what follows, the dense joint fitted to them:
                     :func:`dense_model` (:mod:`.joint`)
    choose_pairs     from them and public quantities, all pairs or (a schema too wide for them)
                     the histograms measured again and a spanning tree of pairs chosen under DP
    measure_pairs    the chosen pairs' 2-way tables, with the fine histograms
    refine_tree      (a tree) a few more tables, chosen against the tree's model
    n                the noisy n (under add/remove neighbours it replaces the exact one from
                     here on) and the noise against it, the tables' σ against their mean noisy
                     cell count, recorded and warned where comparable
                     (:mod:`dp_dask.postprocess.noise_level`)
    rounds           (with a workload) adaptive rounds: select the marginal the estimate gets
                     most wrong, measure it, refit
    record           the metadata's privacy record, from the :class:`~.plan.BudgetPlan`
    consistent       consistent marginals and their spanning tree: the
                     :class:`~.model.MarginalModel`

The first four are :mod:`.measurements`' (the steps that read exact counts, with
:func:`adaptive_rounds`), drawing their noise in this order; the candidate rows' estimate runs
at sampling time (:meth:`~.sampler.MarginalSampler.for_release`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import dask.dataframe as dd
import numpy as np
from dask.delayed import Delayed

from dp_dask.data.constraints import CONSTRAINT_KINDS
from dp_dask.data.counts import fine_count_graph, rows_counted, split_fine
from dp_dask.data.io import Location
from dp_dask.data.schema import Schema
from dp_dask.data.units import neighbouring
from dp_dask.methods.marginals import adaptive, cliques
from dp_dask.methods.marginals.choice import ModelChoice
from dp_dask.methods.marginals.config import MarginalsConfig
from dp_dask.methods.marginals.joint import (
    DENSE_POST_PROCESSING,
    dense_measurements,
    dense_record,
    fit_joint,
    forbidden_joint,
    joint_marginals,
    joint_steps,
    measure_dense,
    model_choice,
    triples_rho,
)
from dp_dask.methods.marginals.measurements import (
    Measurer,
    choose_pairs,
    measure_one_way,
    measure_pairs,
    refine_tree,
)
from dp_dask.methods.marginals.model import MarginalModel, fit_marginals, project_fine
from dp_dask.methods.marginals.plan import (
    FINE_SHARE,
    BudgetPlan,
    check_fine_share,
    check_neighbours,
)
from dp_dask.methods.marginals.select_pairs import TreeChoice, check_tables
from dp_dask.postprocess.consistency import Measurement, estimated_rows
from dp_dask.postprocess.noise_level import noise_record
from dp_dask.postprocess.reweight import check_iterations
from dp_dask.postprocess.tree import spanning_tree
from dp_dask.privacy import rho_budget
from dp_dask.privacy.accounting import epsilon_spent, table_sensitivity
from dp_dask.privacy.selection import replace_one_rho
from dp_dask.synthesizer import Synthesizer
from dp_dask.timing import timed
from dp_dask.tuning import as_config, changed


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
        self.workload = workload  # as given: each fit checks it against the schema
        self.adaptive_share = adaptive.check_share(adaptive_share)
        self.rounds = adaptive.check_rounds(rounds)
        # rounds None takes some with a workload (how many, from the schema, at the fit)
        with_rounds = self.rounds if self.rounds is not None else workload is not None
        if with_rounds and accountant == "exact":
            raise ValueError("the adaptive rounds' selection is accounted in zCDP: use "
                             "accountant='zcdp', or rounds=0 for the exact accountant")
        self.accountant = accountant or ("zcdp" if with_rounds else "exact")
        # learned by each fit from these and the schema (_prepare)
        self.workload_: tuple[tuple[int, ...], ...] | None = None
        self.rounds_: int | None = None
        self.candidates_: dict[tuple[int, ...], float] = {}

    def _prepare(self) -> None:
        """The workload as attribute tuples, the rounds (``rounds``, else
        ``adaptive.rounds_for`` the schema with a workload, none without) and their candidates:
        a bad workload fails here, before any data is read."""
        self.workload_ = adaptive.check_workload(self.schema, self.workload)
        self.rounds_ = (self.rounds if self.rounds is not None else
                        adaptive.rounds_for(self.schema, self.config) if self.workload_ else 0)
        self.candidates_ = (adaptive.candidates(self.schema, self.workload_, self.config)
                            if self.rounds_ else {})

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
        if self.rounds_:
            return adaptive.count_graph(ddf, self.schema, adaptive.triples_of(self.candidates_))
        return fine_count_graph(ddf, self.schema)

    def _rows_counted(self, exact: tuple[np.ndarray, np.ndarray]) -> int:
        return rows_counted(exact[0], self.schema)

    def budget_plan(self) -> BudgetPlan:
        """This release's ρ by step (:class:`~.plan.BudgetPlan`), less what a choice of the
        privacy unit's max_rows spends."""
        rho = self._privacy_plan()["rho"] - self.unit_rho
        return BudgetPlan(rho, adaptive.RoundPlan(self.rounds_, self.adaptive_share, rho,
                                                  self.config),
                          self.fine_share if self.schema.fine_grids else 0.0, self.config,
                          # the dense path: with rounds cliques="auto" releases as "pairs"
                          cliques.cliques_possible(self.schema, self.config) and not self.rounds_)

    def _fit_counts(self, exact: tuple[np.ndarray, ...], n_rows: int,
                    metadata: dict[str, Any]) -> MarginalModel:
        return fit_model(self, exact, n_rows, metadata)

    @staticmethod
    def load_model(path: Location, document: dict[str, Any],
                   storage_options: dict[str, Any] | None = None) -> MarginalModel:
        return MarginalModel.from_files(path, document, storage_options)


def fit_model(method: MarginalSynthesizer, exact: tuple[np.ndarray, ...], n_rows: int,
              metadata: dict[str, Any]) -> MarginalModel:
    """The model of the exact counts ``exact`` (the d×d matrix, the fine histograms, with
    rounds the candidate triples' counts, or where the dense path may run the sparse joint)
    under ``method``'s options; ``metadata`` gains the privacy record (and, under add/remove,
    the noisy n)."""
    schema, plan = method.schema, method.budget_plan()
    rng = None if method.noise_seed is None else np.random.default_rng(method.noise_seed)
    measurer = measurer_for(method, exact, plan, rng)
    with timed(method.timings_, "noise"):
        one_way = measure_one_way(measurer)  # the same draws on either path
        rho = triples_rho(measurer)
        # the public rule, where the joint fits: from sizes, ρ, the notion and n̂ (choice.py)
        choice = model_choice(measurer, n_rows if method.rows_public
                              else estimated_rows(one_way)) if plan.with_cliques else None
        if choice is not None and choice.dense:  # every triple, with the rest of the ρ
            one_way, triples, fine = measure_dense(measurer, one_way, exact[2], rho,
                                                   choice.one_way_share)
        else:  # as under cliques="pairs", byte for byte
            pairs = choose_pairs(measurer, one_way, method.tables)
            measured, fine = measure_pairs(measurer, pairs)
            measured, tree = refine_tree(measurer, measured, pairs)
    if choice is not None and choice.dense:
        return dense_model(method, plan, choice, [*one_way, *triples], fine, rho,
                           measurer.sensitivity, n_rows, metadata)
    # the one-shot measurements (a tree plan's histograms were drawn twice, then merged)
    k = len(measured) + (schema.m if tree is not None else 0)
    noisy_rows = estimated_rows(measured)
    if not method.rows_public:  # the exact n stops here: only its noisy estimate goes on
        n_rows = metadata["n_rows"] = noisy_rows
    rounds: dict[str, Any] = {}
    if plan.rounds.rounds:
        with timed(method.timings_, "adaptive_rounds"):
            measured, rounds = adaptive_rounds(method, measured, exact, plan.rounds, n_rows, rng)
    # cliques="auto" with rounds releases as "pairs" (the rounds select the workload's marginals)
    cliques = ({"selection": f"none: with adaptive rounds cliques={method.config.cliques!r} "
                             "releases as 'pairs'"}
               if rounds and method.config.cliques != "pairs" else {})
    metadata |= release_record(method, plan, k, tree, fine, rounds, cliques, choice)
    metadata |= noise_record([m for m in measured if len(m.attributes) > 1], noisy_rows)
    with timed(method.timings_, "consistency"):
        return fit_marginals(measured, schema, n_rows, metadata,
                             fit_iterations=method.fit_iterations, fine=fine,
                             fine_share=method.fine_share, config=method.config)


def dense_model(method: MarginalSynthesizer, plan: BudgetPlan, choice: ModelChoice,
                measured: list[Measurement], fine: dict[int, Measurement], rho: float,
                sensitivity: float, n_rows: int, metadata: dict[str, Any]) -> MarginalModel:
    """The dense-joint release's model (:mod:`.joint`), as the rule's ``choice`` picked it: the
    1-way histograms and the triples (these with ``rho``, L2 ``sensitivity`` each) ``measured``
    under ``plan``, the joint fitted to them, its tables and their tree;
    each ``fine`` histogram made consistent with the joint's histogram of its attribute."""
    schema, config = method.schema, method.config
    noisy_rows = estimated_rows(measured)
    if not method.rows_public:  # the exact n stops here: only its noisy estimate goes on
        n_rows = metadata["n_rows"] = noisy_rows
    metadata |= release_record(
        method, plan, dense_measurements(measured, {}, schema.m, choice.one_way_share), None,
        fine, {}, dense_record(schema, measured, fine, plan, rho, sensitivity,
                               choice.one_way_share), choice)
    metadata |= noise_record(measured[schema.m:], noisy_rows)
    with timed(method.timings_, "consistency"):
        steps = joint_steps(int(np.prod(schema.sizes)), len(measured), config)
        joint = fit_joint(schema.sizes, measured, n_rows, forbidden=forbidden_joint(schema),
                          iterations=steps)
    marginals = joint_marginals(joint)
    order, parents = spanning_tree(marginals, schema.m)
    details = {"method": "marginals",
               "budget_shares": f"{config.one_way_share:g} of rho to the histograms, the rest "
               + (f"{choice.one_way_share:g} to the histograms again, the rest "
                  if choice.one_way_share else "")
               + f"to every triple, each in proportion to cells^{config.cells_exponent:.4g}",
               "noise_sigma": {"one_way": [m.sigma for m in measured[:schema.m]],
                               "three_way": [m.sigma for m in measured[schema.m:]]}
               | ({"fine": {schema.names[a]: m.sigma for a, m in fine.items()}} if fine else {}),
               "joint": {"cells": int(joint.size), "iterations": steps},
               "fit_iterations": 0,
               "tree_parents": {schema.names[a]: (schema.names[p] if p >= 0 else None)
                                for a, p in enumerate(parents.tolist())}}
    return MarginalModel(schema, n_rows, marginals, order, parents, tuple(measured),
                         {**metadata, "model": details}, project_fine(schema, fine, marginals),
                         joint)


def measurer_for(method: MarginalSynthesizer, exact: tuple[np.ndarray, ...], plan: BudgetPlan,
                 rng: np.random.Generator | None) -> Measurer:
    """The one-shot measurements' :class:`Measurer` under ``plan``: ρ
    :attr:`~.plan.BudgetPlan.one_shot`."""
    return Measurer(exact[0], split_fine(exact[1], method.schema), method.schema, plan.one_shot,
                    accountant=method.accountant, sampler=method.noise_sampler, rng=rng,
                    neighbours=method.neighbours,
                    fine_share=plan.fine_share or method.fine_share,  # 0: no grids
                    config=plan.config, max_rows=method.max_rows)


def adaptive_rounds(method: MarginalSynthesizer, measurements: list[Measurement],
                    exact: tuple[np.ndarray, ...], plan: adaptive.RoundPlan, n_rows: int,
                    rng: np.random.Generator | None
                    ) -> tuple[list[Measurement], dict[str, Any]]:
    """The adaptive rounds (:mod:`.adaptive`) on the estimate the one-shot measurements give:
    the measurements to fit, repeats merged, and the rounds' record."""
    schema, config = method.schema, method.config
    first = fit_marginals(measurements, schema, n_rows, fit_iterations=method.fit_iterations,
                          config=config)
    rows = min(n_rows, config.estimate_rows)
    # the estimate's draws are post-processing: seeded with the noise, else OS entropy
    sampler = replace(first.sampler(), config=config)
    codes, weights = sampler.weighted_candidates(rows, np.random.default_rng(
        None if method.noise_seed is None else [method.noise_seed, 45]))
    answers = adaptive.exact_answers(exact[0], exact[2], schema, method.candidates_)
    measured, record = adaptive.run_rounds(
        codes, weights * (n_rows / rows), measurements, answers, method.candidates_, plan,
        schema, neighbours=method.neighbours, sampler=method.noise_sampler, rng=rng,
        max_rows=method.max_rows)
    return adaptive.merged(measured), {
        "rounds": plan.rounds, "share": plan.share, "rho": plan.rho_rounds,
        "rho_one_shot": plan.rho_one_shot,
        "workload": ([[schema.names[a] for a in g] for g in method.workload_]
                     if method.workload_ else "default: every triple of at most "
                     f"{config.max_cells} cells (every pair past "
                     f"{config.max_triples} triples)"),
        "candidates": len(method.candidates_),
        "selection": "exponential mechanism (OpenDP make_noisy_max, Gumbel, zCDP "
                     "eps^2/8); score w*(L1 error of the current estimate - "
                     "sqrt(2/pi)*sigma*cells), L-inf sensitivity "
                     f"{table_sensitivity(method.neighbours, 'l1', method.max_rows):g}*max w",
        "measured": record}


def release_record(method: MarginalSynthesizer, plan: BudgetPlan, k: int,
                   tree: TreeChoice | None, fine: dict[int, Measurement],
                   rounds: dict[str, Any], cliques: dict[str, Any],
                   choice: ModelChoice | None = None) -> dict[str, Any]:
    """The release metadata's method and privacy record: ``k`` one-shot measurements, the
    ``tree`` chosen (None: all pairs), the ``fine`` histograms, the ``rounds``' and the
    ``cliques``' records (empty: none) and the public rule's ``choice`` (None: the joint could
    not be chosen, by the schema's sizes, the config or adaptive rounds)."""
    schema: Schema = method.schema
    dense = cliques.pop("budget_split", None)  # the dense-joint path's (joint.dense_record)
    as_replace_one = {}
    if method.neighbours != "replace":
        ledger = method._ledger_plan()
        as_replace_one = {"replace_one_row": {"epsilon": ledger["epsilon"], "rho": ledger["rho"]}}
    split = plan.budget_split(
        schema, k=k, sensitivity=table_sensitivity(method.neighbours, "l2", method.max_rows),
        tree=tree, fine=fine,
        replace_one_rho=as_replace_one["replace_one_row"]["rho"] if as_replace_one else None,
        tree_possible=method.tree_possible, dense=dense)
    fine_record = {"fine_share": method.fine_share, "fine_histograms": {
        schema.names[a]: {"cells": len(m.values), "sigma": m.sigma}
        for a, m in sorted(fine.items())}} if fine else {}
    tuned = changed(method.config)  # none by default: such releases stay as they were
    if method.unit_auto:  # the choice of K spent its share before any measurement
        split = (f"rho {method.unit_rho:.6g} to choosing max_rows (privacy_unit.auto), then "
                 f"rho {plan.rho:.6g} to the measurements: {split}")
    return {
        "method": "marginals: " + ("a dense joint fitted to noisy 1-/3-way marginals" if dense
                                   else "consistent noisy 1-/2-way marginals + row updates"),
        "privacy": method._privacy_record(
            mechanism="gaussian", accountant=method.accountant, **method.rho_record(plan.rho),
            k=k, neighbouring=neighbouring(method.neighbours, method.bound_unit),
            **as_replace_one,
            **({"tables": tree.to_json(schema)} if tree is not None else {}),
            budget_split=f"{split}; the {method.accountant} accountant gives "
            f"({method.epsilon:g}, {method.delta:g})-DP", **fine_record,
            **({"adaptive": rounds} if rounds else {}),
            **({"cliques": cliques} if cliques else {}),
            **({"model_choice": choice.record(method.config)} if choice is not None else {}),
            post_processing=DENSE_POST_PROCESSING if dense else
            "consistent marginals (inverse-variance 1-way estimates, "
            "tables shrunk towards independence and fitted to them); rows sampled from a "
            "spanning tree, weighted to fit the noisy measurements and updated towards the "
            "tables" + ("; each fine histogram projected, bin by bin, onto the "
                        "consistent 1-way marginal's count" if fine else "")),
        **({"config": tuned} if tuned else {}),
    }
