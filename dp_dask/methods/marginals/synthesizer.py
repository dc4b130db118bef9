"""The marginals method's Synthesizer: its options, privacy plan and ledger charge, and its fit:
:func:`fit_model` draws the 1-way histograms, then runs one model's top function, each one line
per step (compare private-pgm's ``MST()`` and ``AIM``):

    fit_pairs     all pairs' 2-way tables, or (a schema too wide for them) the histograms
                  again, a spanning tree of pairs chosen under DP and a few more tables chosen
                  against it; the noisy n (under add/remove it replaces the exact one from here
                  on); consistent marginals and their tree, which the rows are updated towards
    fit_joint     (cliques="auto" where the public rule picks it, :mod:`.choice`, or "joint")
                  every triple (and the histograms again, at the rule's share); the noisy n;
                  the dense joint fitted to them (:mod:`.joint`), which the rows are drawn from
    fit_adaptive  (with a workload) pairs' measurements, then adaptive rounds: select the
                  marginal the estimate gets most wrong, measure it, refit (:mod:`.adaptive`)

Each records the privacy record (from the :class:`~.plan.BudgetPlan`) and the tables' noise
level (:mod:`dp_dask.postprocess.noise_level`). Only :mod:`.measurements`, :mod:`.joint` and
:mod:`.adaptive` read exact counts, drawing the noise in this order; the candidate rows'
estimate runs at sampling time (:meth:`~.sampler.MarginalSampler.for_release`).

A unit-shaped release (:mod:`.unit_shape`) fits a unit model and the row model with
:func:`fit_model` (:meth:`MarginalSynthesizer._fit_unit_shaped`); what serves units alone, its
shares, its lag-1 table and its record, is :mod:`.unit_fit`'s.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import dask
import dask.dataframe as dd
import numpy as np
from dask.delayed import Delayed

from dp_dask.data.constraints import CONSTRAINT_KINDS
from dp_dask.data.counts import fine_count_graph, rows_counted, split_fine
from dp_dask.data.io import Location
from dp_dask.data.schema import Schema
from dp_dask.data.units import neighbouring
from dp_dask.exceptions import DpDaskWarning
from dp_dask.methods.marginals import adaptive, cliques
from dp_dask.methods.marginals.choice import ModelChoice
from dp_dask.methods.marginals.config import MarginalsConfig
from dp_dask.methods.marginals.joint import (
    DENSE_POST_PROCESSING,
    dense_budget_split,
    dense_measurements,
    dense_record,
    measure_dense,
    model_choice,
    triples_rho,
)
from dp_dask.methods.marginals.measurements import (
    ExactCounts,
    Measurer,
    measure_one_way,
    measure_tables,
)
from dp_dask.methods.marginals.model import (
    JointModel,
    MarginalModel,
    fit_joint_model,
    fit_marginals,
)
from dp_dask.methods.marginals.plan import (
    FINE_SHARE,
    BudgetPlan,
    check_fine_share,
    check_neighbours,
)
from dp_dask.methods.marginals.select_pairs import TreeChoice, check_tables
from dp_dask.methods.marginals.unit_fit import (
    OwnTables,
    check_own_tables,
    measure_lag,
    measure_own,
    own_queries,
    unit_model_seed,
    unit_shape_share,
    unit_shaped_model,
)
from dp_dask.methods.marginals.unit_shape import (
    UNIT_KEY,
    UnitShapedModel,
    lag_count_graph,
    unit_count_graph,
    unit_schema,
)
from dp_dask.postprocess.consistency import Measurement, estimated_rows
from dp_dask.postprocess.noise_level import noise_record
from dp_dask.postprocess.reweight import check_iterations
from dp_dask.privacy import rho_budget
from dp_dask.privacy.accounting import (
    epsilon_spent,
    table_sensitivity,
)
from dp_dask.privacy.selection import replace_one_rho
from dp_dask.privacy.split import BudgetPart, BudgetSplit, ReplaceOne
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
    zCDP (the default ``accountant`` None, kept as given: :attr:`release_accountant` is "zcdp"
    with rounds, "exact" without); ``config``, the tuned numbers (a
    :class:`~.config.MarginalsConfig` or a dict of its fields, default None: the defaults;
    docs/tuning.md); ``unit_shape``, under a privacy unit, release synthetic
    units rather than rows: a unit model (the unit-level attributes and rows per unit) beside
    the row model, each unit's rows sharing its id and its unit-level values
    (:mod:`.unit_shape`). Default None: units wherever a privacy unit is given, rows without
    one, and rows (with a warning) where the schema declares constraints, which a unit-shaped
    release does not honour; True refuses those, False releases rows as a row release has
    them (``unit_shape_``: the fit's choice). With it ``unit_order`` and ``unit_lag``, two
    attributes: a unit's rows ordered by the first, the lag-1 relation of the second (this
    row's code × the previous row's) measured and drawn from (default None: rows in no order;
    either asks for units as True does); ``own_tables``, in a unit-shaped release, groups of
    unit-level and row-level attributes whose 1-/2-way tables are measured again at shares of
    their own (:class:`.unit_fit.OwnTables`; a parent–child release's parent and child tables).
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
                 config: MarginalsConfig | dict[str, Any] | None = None,
                 unit_shape: bool | None = None, unit_order: str | None = None,
                 unit_lag: str | None = None, own_tables: dict[str, Any] | None = None,
                 **common: Any) -> None:
        super().__init__(schema, **common)
        if unit_shape is not None and not isinstance(unit_shape, bool):
            raise ValueError(f"unit_shape must be true or false, got {unit_shape!r}")
        if (unit_order is None) != (unit_lag is None) or (unit_lag and unit_shape is False):
            raise ValueError("unit_order and unit_lag go together, in a unit-shaped release "
                             "(not unit_shape=False): the attribute ordering a unit's rows and "
                             "the one whose lag-1 relation is measured")
        self.unit_shape, self.unit_order, self.unit_lag = unit_shape, unit_order, unit_lag
        self.own_tables = own_tables
        self.own_tables_: OwnTables | None = None  # checked by each fit (_prepare)
        # a unit-shaped fit's own tables: the queries its model measures again and their ρ
        # (set per model by _fit_unit_shaped), and the record of those drawn
        self.own_queries_: tuple[list[tuple[int, ...]], float] | None = None
        self.own_record_: dict[str, Any] | None = None
        # learned by each fit (_prepare): whether it releases units, and the share of the
        # plan's ρ (less a choice of K's) its measurements spend: a unit-shaped release's row
        # model what the unit model (config.unit_share) and the lag-1 table (lag_share) leave
        self.unit_shape_ = False
        self._rho_share = 1.0
        self.config = as_config(MarginalsConfig, config)
        self.tables = check_tables(tables)
        self.fine_share = check_fine_share(fine_share)
        self.fit_iterations = check_iterations(fit_iterations)
        self.neighbours = check_neighbours(neighbours)
        self.workload = workload  # as given: each fit checks it against the schema
        self.adaptive_share = adaptive.check_share(adaptive_share)
        self.rounds = adaptive.check_rounds(rounds)
        self.accountant = accountant  # as given: None is resolved by release_accountant
        if self._with_rounds and accountant == "exact":
            raise ValueError("the adaptive rounds' selection is accounted in zCDP: use "
                             "accountant='zcdp', or rounds=0 for the exact accountant")
        # learned by each fit from these and the schema (_prepare)
        self.workload_: tuple[tuple[int, ...], ...] | None = None
        self.rounds_: int | None = None
        self.candidates_: dict[tuple[int, ...], float] = {}

    @property
    def release_accountant(self) -> str:
        """The accountant the release is charged by, from the parameters alone: ``accountant``,
        or by default "zcdp" with adaptive rounds (``rounds``, or some with a ``workload``),
        "exact" without."""
        return self.accountant or ("zcdp" if self._with_rounds else "exact")

    @property
    def _with_rounds(self) -> bool:
        """Whether the fit makes adaptive rounds: ``rounds`` > 0, or (None) a ``workload``
        (how many, from the schema, at the fit)."""
        return bool(self.rounds if self.rounds is not None else self.workload is not None)

    def _prepare(self) -> None:
        """The workload as attribute tuples, the rounds (``rounds``, else
        ``adaptive.rounds_for`` the schema with a workload, none without) and their candidates:
        a bad workload fails here, before any data is read."""
        self.workload_ = adaptive.check_workload(self.schema, self.workload)
        self.rounds_ = (self.rounds if self.rounds is not None else
                        adaptive.rounds_for(self.schema, self.config) if self.workload_ else 0)
        self.candidates_ = (adaptive.candidates(self.schema, self.workload_, self.config)
                            if self.rounds_ else {})
        self.unit_shape_ = self._units_released()
        if self.own_tables is not None and not self.unit_shape_:
            raise ValueError("own_tables: measured in a unit-shaped release only (a privacy "
                             "unit, unit_shape not false)")
        self.own_tables_ = check_own_tables(self.own_tables, self.schema)
        own_share = self.own_tables_.share if self.own_tables_ else 0.0
        self._rho_share = 1.0 - unit_shape_share(self.unit_shape_, self.unit_lag is not None,
                                                 self.config) - own_share
        if self._rho_share <= 0:
            raise ValueError(f"own_tables: shares {own_share:g} leave the row model nothing "
                             "beside config.unit_share and lag_share")
        for option, name in (("unit_order", self.unit_order), ("unit_lag", self.unit_lag)):
            if name is not None and name not in self.schema.names:
                raise ValueError(f"{option}: schema {self.schema.name!r} has no attribute "
                                 f"{name!r}")
        if self.unit_lag is not None and self.schema[self.unit_lag].unit_level:
            raise ValueError(f"unit_lag: attribute {self.unit_lag!r} is unit-level, constant "
                             "within a unit: its lag-1 relation is that of one value")

    def _units_released(self) -> bool:
        """Whether this fit releases units (:attr:`unit_shape_`): ``unit_shape`` as given, or
        (None) whether a privacy unit is given, falling back to rows with a warning where the
        schema declares constraints. Asked for (True, or a sequence) where it cannot be: an
        error before any data is read."""
        asked = self.unit_shape or self.unit_lag is not None
        if self.privacy_unit is None:
            if asked:
                raise ValueError("unit_shape releases synthetic units of a privacy unit: give "
                                 "privacy_unit (--privacy-unit COLUMN --max-rows-per-unit K)")
            return False
        if self.unit_shape is False:
            return False
        if self.schema.constraints:  # units' codes overwrite rows' codes
            why = (f"schema {self.schema.name!r} declares constraints "
                   f"({self.schema.constraints[0].name}, ...), which a unit-shaped release does "
                   "not honour yet: its unit-level codes overwrite the rows' drawn ones")
            if asked:
                raise ValueError(f"unit_shape: {why}")
            warnings.warn(f"privacy unit {self.privacy_unit.column!r}: releasing rows, not "
                          f"units: {why} (unit_shape false silences this)", DpDaskWarning,
                          stacklevel=5)
            return False
        return True

    @property
    def sequence(self) -> tuple[int, int] | None:
        """The order and lag attributes' indices of a unit-shaped release (None: no order)."""
        if self.unit_lag is None:
            return None
        return self.schema.names.index(self.unit_order), self.schema.names.index(self.unit_lag)

    def _with_unit_key(self, ddf: dd.DataFrame) -> dd.DataFrame:
        """Unit-shaped: the unit column's copy (UNIT_KEY) carried through bounding, which the
        unit table is counted by (and the row counts never read)."""
        if not self.unit_shape_:
            return ddf
        return ddf.assign(**{UNIT_KEY: ddf[self.privacy_unit.column]})

    @property
    def units_schema(self) -> Schema:
        """A unit-shaped release's unit table schema (:func:`.unit_shape.unit_schema`)."""
        return unit_schema(self.schema, self.privacy_unit.column, self.max_rows)

    @property
    def rows_public(self) -> bool:
        return self.neighbours == "replace" and super().rows_public

    def _privacy_plan(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon, "delta": self.delta, "mechanism": "gaussian",
                "accountant": self.release_accountant,
                "rho": rho_budget(self.epsilon, self.delta, self.release_accountant)}

    def _ledger_plan(self) -> dict[str, Any]:
        """The plan as replace-one-row DP, mechanism by mechanism: under add/remove the same
        noise meets a replacement moving two cells per table, twice a measurement's squared
        sensitivity, hence twice its charge, and twice each selection's score sensitivity
        (privacy.selection.replace_one_rho)."""
        plan = self._privacy_plan()
        if self.neighbours == "replace":  # a unit's plan is already replace-one-unit
            return plan
        rho = replace_one_rho(plan["rho"], self.budget_plan().selections(
            self.schema, self.tree_possible, self.release_accountant))
        return {**plan, "rho": rho,
                "epsilon": epsilon_spent(rho, self.delta, self.release_accountant)}

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
        if self.unit_shape_:  # the rows' counts, and the unit table's (in the same pass)
            lag = ([] if self.sequence is None
                   else [lag_count_graph(ddf, self.schema, *self.sequence)])
            return dask.delayed(tuple)([self._row_count_graph(ddf),
                                        unit_count_graph(ddf, self.schema, self.units_schema),
                                        *lag])
        return self._row_count_graph(ddf)

    def _row_count_graph(self, ddf: dd.DataFrame) -> Delayed:
        if self.budget_plan().with_cliques:  # the sparse joint the triples are read from
            return cliques.count_graph(ddf, self.schema)
        if self.rounds_:
            return adaptive.count_graph(ddf, self.schema, adaptive.triples_of(self.candidates_))
        return fine_count_graph(ddf, self.schema)

    def _rows_counted(self, exact: tuple[np.ndarray, ...]) -> int:
        rows = exact[0] if self.unit_shape_ else exact
        return rows_counted(rows[0], self.schema)

    def budget_plan(self) -> BudgetPlan:
        """This release's ρ by step (:class:`~.plan.BudgetPlan`), less what a choice of the
        privacy unit's max_rows spends."""
        rho = (self._privacy_plan()["rho"] - self.unit_rho) * self._rho_share
        return BudgetPlan(rho, adaptive.RoundPlan(self.rounds_, self.adaptive_share, rho,
                                                  self.config),
                          self.fine_share if self.schema.fine_grids else 0.0, self.config,
                          # the dense path: with rounds cliques="auto" releases as "pairs"
                          cliques.cliques_possible(self.schema, self.config) and not self.rounds_)

    def _fit_counts(self, exact: tuple[Any, ...], n_rows: int,
                    metadata: dict[str, Any]) -> MarginalModel | UnitShapedModel:
        if self.unit_shape_:
            rows, unit_counts, *lag_counts = exact
            return self._fit_unit_shaped(self._exact_counts(rows), unit_counts, lag_counts,
                                         n_rows, metadata)
        return fit_model(self, self._exact_counts(exact), n_rows, metadata)

    def _fit_unit_shaped(self, exact: ExactCounts, unit_counts: np.ndarray,
                         lag_counts: list[np.ndarray], n_rows: int,
                         metadata: dict[str, Any]) -> UnitShapedModel:
        """A unit-shaped release's model (:mod:`.unit_fit`): the unit model fitted to the unit
        table's counts ``unit_counts`` with ``config.unit_share`` of the measurements' ρ (its
        noise drawn first, from its own seed stream), the lag-1 table's counts (``lag_counts``,
        with a sequence) measured with ``config.lag_share``, then the row model to the rows'
        ``exact`` counts with the rest; the privacy record states each and their sum."""
        units_schema = self.units_schema
        inner = MarginalSynthesizer(
            units_schema, epsilon=self.epsilon, delta=self.delta,
            accountant=self.release_accountant, neighbours=self.neighbours, tables="all",
            # the unit table's 1-/2-way counts are all it is given: no joint, no cliques
            fit_iterations=self.fit_iterations, config=replace(self.config, cliques="pairs"),
            noise_sampler=self.noise_sampler, ledger=False,
            noise_seed=unit_model_seed(self.noise_seed))
        inner._load_params()
        plan_rho = self._privacy_plan()["rho"]
        inner._rho_share = self.config.unit_share * (plan_rho - self.unit_rho) / plan_rho
        own, measurements_rho = self.own_tables_, plan_rho - self.unit_rho
        if own is not None:
            inner.own_queries_ = own_queries(units_schema, own.units,
                                             own.units_share * measurements_rho)
            self.own_queries_ = own_queries(self.schema, own.rows,
                                            own.rows_share * measurements_rho)
        units = fit_model(inner, ExactCounts(unit_counts, np.zeros(0, dtype=np.int64)),
                          rows_counted(unit_counts, units_schema),
                          {"schema": {"name": units_schema.name,
                                      "sha256": units_schema.sha256()}})
        lag = (measure_lag(lag_counts[0], self.schema, self.sequence,
                           self.config.lag_share * (plan_rho - self.unit_rho), self.max_rows,
                           neighbours=self.neighbours, accountant=self.release_accountant,
                           sampler=self.noise_sampler, noise_seed=self.noise_seed)
               if lag_counts else None)
        rows = fit_model(self, exact, n_rows, metadata)
        model, self.privacy_record_ = unit_shaped_model(
            rows, units, self.privacy_record_, inner.privacy_record_, self.budget_plan().rho,
            lag, unit_share=self.config.unit_share, neighbours=self.neighbours,
            column=self.privacy_unit.column, max_rows=self.max_rows,
            own={"units": inner.own_record_, "rows": self.own_record_})
        return model

    def _exact_counts(self, counts: tuple[Any, ...]) -> ExactCounts:
        """The rows' pass (:meth:`_row_count_graph`) by name: a third part is the sparse joint
        (the dense path) or the candidate triples' counts (rounds)."""
        matrix, fine, *extra = counts
        if self.budget_plan().with_cliques:
            return ExactCounts(matrix, fine, joint=extra[0])
        return ExactCounts(matrix, fine, triples=extra[0] if self.rounds_ else None)

    @staticmethod
    def load_model(path: Location, document: dict[str, Any],
                   storage_options: dict[str, Any] | None = None
                   ) -> MarginalModel | UnitShapedModel:
        if "unit_shape" in document.get("metadata", {}):
            return UnitShapedModel.from_files(path, document, storage_options)
        return MarginalModel.from_files(path, document, storage_options)


def fit_model(method: MarginalSynthesizer, exact: ExactCounts, n_rows: int,
              metadata: dict[str, Any]) -> MarginalModel:
    """The model of the ``exact`` counts: after the 1-way histograms (the same draws on every
    path), :func:`fit_adaptive` where rounds are planned, else the model the public rule picks
    where the joint may run (:mod:`.choice`), else pairs; ``metadata`` gains the records."""
    plan = method.budget_plan()
    measurer = measurer_for(method, exact, plan)
    with timed(method.timings_, "noise", first_part=True):  # the rest in the model's fit
        one_way = measure_one_way(measurer)
    if plan.rounds.rounds:
        return fit_adaptive(method, measurer, one_way, exact, n_rows, metadata)
    if not plan.with_cliques:
        return fit_pairs(method, measurer, one_way, n_rows, metadata)
    choice = model_choice(measurer, n_rows if method.rows_public else estimated_rows(one_way))
    if choice.dense:
        return fit_joint(method, measurer, one_way, exact, choice, n_rows, metadata)
    return fit_pairs(method, measurer, one_way, n_rows, metadata, choice)


def fit_pairs(method: MarginalSynthesizer, measurer: Measurer, one_way: list[Measurement],
              n_rows: int, metadata: dict[str, Any],
              choice: ModelChoice | None = None) -> MarginalModel:
    """pairs (as MST's and PrivSyn's): after the 1-way histograms ``one_way``, the 2-way tables
    of every pair or of a spanning tree chosen under DP (:func:`~.measurements.measure_tables`),
    the noisy n, then their consistent marginals and tree (:func:`~.model.fit_marginals`), which
    the rows are updated towards; ``choice``: the public rule's, where it ran (recorded)."""
    with timed(method.timings_, "noise", last_part=True):
        measured, fine, tree = measure_tables(measurer, one_way, method.tables)
        measured, method.own_record_ = measure_own(measurer, measured, method.own_queries_)
    n_rows = noisy_n(method, measured, n_rows, metadata)
    return consistent_model(method, measured, measured, fine, tree, n_rows, metadata, {}, choice)


def fit_adaptive(method: MarginalSynthesizer, measurer: Measurer, one_way: list[Measurement],
                 exact: ExactCounts, n_rows: int, metadata: dict[str, Any]) -> MarginalModel:
    """pairs' one-shot measurements, then AIM's adaptive rounds (:mod:`.adaptive`): the 2- or
    3-way marginal of the workload the estimate gets most wrong, selected under DP, measured,
    the estimate refitted; then the consistent marginals of them all, as pairs'."""
    schema, config, plan = method.schema, method.config, method.budget_plan().rounds
    with timed(method.timings_, "noise", last_part=True):
        one_shot, fine, tree = measure_tables(measurer, one_way, method.tables)
        one_shot, method.own_record_ = measure_own(measurer, one_shot, method.own_queries_)
    n_rows = noisy_n(method, one_shot, n_rows, metadata)
    with timed(method.timings_, "adaptive_rounds"):
        first = fit_marginals(one_shot, schema, n_rows, fit_iterations=method.fit_iterations,
                              config=config)
        rows = min(n_rows, config.estimate_rows)
        # the estimate's draws are post-processing: seeded with the noise, else OS entropy
        codes, weights = replace(first.sampler(), config=config).weighted_candidates(
            rows, np.random.default_rng(None if method.noise_seed is None
                                        else [method.noise_seed, 45]))
        answers = adaptive.exact_answers(exact.matrix, exact.triples, schema, method.candidates_)
        measured, record = adaptive.run_rounds(
            codes, weights * (n_rows / rows), one_shot, answers, method.candidates_, plan,
            schema, neighbours=method.neighbours, sampler=method.noise_sampler, rng=measurer.rng,
            max_rows=method.max_rows)
    rounds = adaptive.rounds_record(plan, schema, method.workload_, method.candidates_,
                                    method.neighbours, method.max_rows, record)
    return consistent_model(method, one_shot, adaptive.merged(measured), fine, tree, n_rows,
                            metadata, rounds)


def noisy_n(method: MarginalSynthesizer, measured: list[Measurement], n_rows: int,
            metadata: dict[str, Any]) -> int:
    """The n the model is fitted to: the exact n where public, else the ``measured`` tables'
    noisy estimate, which replaces it in ``metadata``: the exact n stops here."""
    if method.rows_public:
        return n_rows
    metadata["n_rows"] = estimated_rows(measured)
    return metadata["n_rows"]


def consistent_model(method: MarginalSynthesizer, one_shot: list[Measurement],
                     measured: list[Measurement], fine: dict[int, Measurement],
                     tree: TreeChoice | None, n_rows: int, metadata: dict[str, Any],
                     rounds: dict[str, Any], choice: ModelChoice | None = None) -> MarginalModel:
    """The 1-/2-way release's record and model: the ``one_shot`` measurements (a tree plan's
    histograms drawn twice, then merged) and with the ``rounds``' (their record; empty: none)
    all ``measured``, fitted to consistent marginals."""
    schema = method.schema
    k = len(one_shot) + (schema.m if tree is not None else 0)
    # cliques="auto" with rounds releases as "pairs" (the rounds select the workload's marginals)
    cliques = {"selection": f"none: with adaptive rounds cliques={method.config.cliques!r} "
               "releases as 'pairs'"} if rounds and method.config.cliques != "pairs" else {}
    metadata |= release_record(method, method.budget_plan(), k, tree, fine, rounds, cliques,
                               choice=choice)
    metadata |= noise_record([m for m in measured if len(m.attributes) > 1],
                             estimated_rows(one_shot))
    with timed(method.timings_, "consistency"):
        return fit_marginals(measured, schema, n_rows, metadata,
                             fit_iterations=method.fit_iterations, fine=fine,
                             fine_share=method.fine_share, config=method.config)


def fit_joint(method: MarginalSynthesizer, measurer: Measurer, one_way: list[Measurement],
              exact: ExactCounts, choice: ModelChoice, n_rows: int,
              metadata: dict[str, Any]) -> JointModel:
    """The dense joint (:mod:`.joint`; private-pgm's estimate on one clique): after the 1-way
    histograms ``one_way``, the histograms again at the rule's ``choice`` of share and every
    triple, with the rest of the one-shot ρ; the noisy n; the joint fitted to them all
    (:func:`~.model.fit_joint_model`)."""
    schema, config, plan = method.schema, method.config, method.budget_plan()
    rho = triples_rho(measurer)
    with timed(method.timings_, "noise", last_part=True):
        one_way, triples, fine = measure_dense(measurer, one_way, exact.joint, rho,
                                               choice.one_way_share)
        measured, method.own_record_ = measure_own(measurer, [*one_way, *triples],
                                                   method.own_queries_)
    n_rows = noisy_n(method, measured, n_rows, metadata)
    metadata |= release_record(
        method, plan, dense_measurements(measured, {}, schema.m, choice.one_way_share), None,
        fine, {}, dense_record(schema, measured, fine, plan, rho, measurer.sensitivity),
        dense_split=dense_budget_split(schema, measured, fine, plan, rho, measurer.sensitivity,
                                       choice.one_way_share), choice=choice)
    metadata |= noise_record(triples, estimated_rows(measured))
    with timed(method.timings_, "consistency"):
        return fit_joint_model(measured, fine, schema, n_rows, metadata, config=config,
                               one_way_share=choice.one_way_share)


def measurer_for(method: MarginalSynthesizer, exact: ExactCounts, plan: BudgetPlan) -> Measurer:
    """The one-shot measurements' :class:`Measurer`: ρ ``plan.one_shot``, noise_seed's rng."""
    rng = None if method.noise_seed is None else np.random.default_rng(method.noise_seed)
    return Measurer(exact.matrix, split_fine(exact.fine, method.schema), method.schema,
                    plan.one_shot, accountant=method.release_accountant,
                    sampler=method.noise_sampler, rng=rng, neighbours=method.neighbours,
                    fine_share=plan.fine_share or method.fine_share,  # 0: no grids
                    config=plan.config, max_rows=method.max_rows)


def release_record(method: MarginalSynthesizer, plan: BudgetPlan, k: int,
                   tree: TreeChoice | None, fine: dict[int, Measurement],
                   rounds: dict[str, Any], cliques: dict[str, Any],
                   dense_split: tuple[BudgetPart, ...] | None = None,
                   choice: ModelChoice | None = None) -> dict[str, Any]:
    """The release metadata's method and privacy record: ``k`` one-shot measurements, the
    ``tree`` chosen (None: all pairs), the ``fine`` histograms, the ``rounds``' and the
    ``cliques``' records (empty: none); ``dense_split``: a dense-joint release's one-shot
    budget parts (joint.dense_budget_split); the public rule's ``choice`` (None: the joint
    could not be chosen, by the schema's sizes, the config or adaptive rounds)."""
    schema: Schema = method.schema
    as_replace_one = method.neighbours != "replace"
    unit = method.privacy_unit
    # the ledger's charge and the guarantee close the split: the release's, which a part of
    # one (a unit-shaped release's unit model) leaves to the release's record
    replaced = "one row" if unit is None else f"all rows of one {unit.column!r}"
    split = BudgetSplit(
        plan.budget_split(schema, k=k, sensitivity=table_sensitivity(
            method.neighbours, "l2", method.max_rows), tree=tree, fine=fine, dense=dense_split),
        method.release_accountant, method.epsilon, method.delta,
        replace_one=ReplaceOne(method.ledger_cost().rho, replaced,
                               tree is None and method.tree_possible)
        if as_replace_one else None)
    fine_record = {"fine_share": method.fine_share, "fine_histograms": {
        schema.names[a]: {"cells": len(m.values), "sigma": m.sigma}
        for a, m in sorted(fine.items())}} if fine else {}
    tuned = changed(method.config)  # none by default: such releases stay as they were
    return {
        "method": "marginals: " + ("a dense joint fitted to noisy 1-/3-way marginals" if dense_split
                                   else "consistent noisy 1-/2-way marginals + row updates"),
        "privacy": method._privacy_record(
            mechanism="gaussian", accountant=method.release_accountant,
            **method.rho_record(plan.rho),
            k=k, neighbouring=neighbouring(method.neighbours, method.bound_unit),
            as_replace_one=as_replace_one,
            **({"tables": tree.to_json(schema)} if tree is not None else {}),
            split=split, **fine_record,
            **({"adaptive": rounds} if rounds else {}),
            **({"cliques": cliques} if cliques else {}),
            **({"model_choice": choice.record(method.config)} if choice is not None else {}),
            post_processing=DENSE_POST_PROCESSING if dense_split else
            "consistent marginals (inverse-variance 1-way estimates, "
            "tables shrunk towards independence and fitted to them); rows sampled from a "
            "spanning tree, weighted to fit the noisy measurements and updated towards the "
            "tables" + ("; each fine histogram projected, bin by bin, onto the "
                        "consistent 1-way marginal's count" if fine else "")),
        **({"config": tuned} if tuned else {}),
    }
