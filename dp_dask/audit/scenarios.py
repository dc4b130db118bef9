"""The audited releases: per scenario a method and its options, its neighbours
(:mod:`dp_dask.audit.canaries`) and the release each trial repeats.

Each scenario's release is the product's own code, by ``method``:

* a Synthesizer method: ``_count_graph`` once per neighbour (Dask's synchronous scheduler) and
  ``_fit_counts`` per trial with a fresh seeded noise, or the whole count graph per trial where
  the method draws randomness inside it (DPCopula-MLE's row order, DPCopula-Hybrid's first-pass
  counts, DPView's noisy n under add/remove). A privacy unit's bounding runs in the count graph's
  read, as in ``fit`` (:func:`~dp_dask.data.units.bound_contributions`);
* ``"stats"``: one call of :func:`~dp_dask.stats.release_stats` per trial;
* ``"schema-draft"``: one call of :func:`~dp_dask.data.draft.draft_schema` under DP per trial
  (its octave and cell search, text thresholds, identifier rule, years, or ``--dp-grid``
  quantiles: whatever the frame's columns call for; ``draft-unit``: under a privacy unit, its
  neighbours all rows of one unit);
* ``"unit-choice"``: max_rows "auto"'s choice (:func:`~dp_dask.data.units.choose_max_rows`) at
  the share of ρ a release at the scenario's (ε, δ) gives it, on the rows per unit
  (:func:`~dp_dask.data.units.rows_per_unit_graph`, once per neighbour).

Planted bugs (:mod:`dp_dask.audit.plants`) are fields of the scenario, never patched code:
``noise_divisor`` (the release drawn with its noise scales divided by it, by running it at the
budget that buys that much less noise), ``options`` and ``frames`` (what the release is asked,
on which neighbours), ``steps`` (the method with one step swapped on its instance) and
``public_sample`` (a draft from the public-sample path fed each neighbour's own data). The claim
an audit compares with is always the correct scenario's.
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import MethodType
from typing import Any

import dask
import numpy as np
import pandas as pd

from dp_dask.audit.canaries import (
    AUDIT_SCHEMA,
    DELTA,
    DRAFT_GRID,
    DRAFT_UNIT_K,
    EPSILON,
    FINE_SCHEMA,
    MLE_BLOCK_PAIRS,
    UNIT,
    UNIT_LAG,
    UNIT_ORDER,
    UNIT_SHAPED_SCHEMA,
    canary_pair,
    draft_pair,
    draft_unit_pair,
    identifier_pair,
    joint_text_pair,
    octave_pair,
    searches_pair,
    sorted_pair,
    text_pair,
    together_pair,
    unit_pair,
    unit_sizes_pair,
    wide_pair,
    wide_schema,
    years_pair,
)
from dp_dask.cluster import compute
from dp_dask.data import units
from dp_dask.data.draft import draft_schema
from dp_dask.data.io import read_table
from dp_dask.data.schema import Schema, load_schema
from dp_dask.privacy.accounting import epsilon_spent, rho_budget
from dp_dask.privacy.record import PrivacyRecord
from dp_dask.relational import CHILD_SHARE, PARENT_SHARE
from dp_dask.stats import release_stats
from dp_dask.synthesizer import Synthesizer

Release = Callable[[int, int], Any]  # release(side, seed): side 0 is D, 1 is D'


@dataclass(frozen=True)
class DraftRelease:
    """What a schema draft publishes: its JSON, and its claim as a release's record. The draft
    was asked for (ε, δ)-DP: that is its claim, whatever its record says."""

    schema: dict[str, Any]
    metadata: dict[str, Any]


@dataclass(frozen=True)
class UnitChoice:
    """max_rows "auto"'s choice and its record (the selection's ρ and accountant)."""

    max_rows: int
    metadata: dict[str, Any]


@dataclass
class Scenario:
    """One audited release: a method and its options, its notion of neighbours, the pair."""

    name: str
    method: str  # a Synthesizer method, "stats", "schema-draft" or "unit-choice"
    notion: str  # "replace" or "add_remove": the neighbours built and the claim audited
    schema: Schema | None  # None: a draft's (it is the release)
    frames: tuple[pd.DataFrame, pd.DataFrame]
    options: dict[str, Any] = field(default_factory=dict)
    epsilon: float = EPSILON
    delta: float = DELTA
    counts_per_trial: bool = False  # the method's randomness lives inside its count graph
    # the fields a planted bug changes (dp_dask.audit.plants); the defaults are the product's
    noise_divisor: float = 1.0
    steps: dict[str, Callable[..., Any]] = field(default_factory=dict)  # on the method's instance
    public_sample: bool = False

    def prepare(self) -> Release:
        """``release(side, seed)``: the release on neighbour ``side`` (0: D, 1: D') with the
        noise of ``seed``."""
        kinds = {"schema-draft": self._drafts, "stats": self._stats,
                 "unit-choice": self._unit_choices}
        return kinds.get(self.method, self._fits)()

    def claim(self, release: Any, delta: float) -> float:
        """The ε the (correct) release claims at the audit's δ under this scenario's neighbours:
        from its recorded ρ and accountant, the Gaussian methods' curve (``epsilon_spent``);
        else from its (ε, δ₀), the curve every (ε, δ₀)-DP mechanism lies below
        (:func:`~dp_dask.privacy.audit.epsilon_at_delta`: 1.942 for a pure ε = 2 at δ = 0.05).
        Replace-one neighbours of an add/remove release are held to its recorded replace-one
        charge."""
        record = PrivacyRecord.from_metadata(release.metadata["privacy"])
        return record.cost_under(self.notion).epsilon_at(delta)

    def _create(self, seed: int, epsilon: float) -> Synthesizer:
        made = Synthesizer.create(self.method, self.schema, epsilon=epsilon, delta=self.delta,
                                  noise_sampler="numpy", noise_seed=seed, ledger=False,
                                  **self.options)
        made._load_params()  # what fit does first: its schema's parameters (rounds, layout)
        for name, step in self.steps.items():  # bound to the instance, as the method's is
            setattr(made, name, MethodType(step, made))
        return made

    def synthesizer(self, seed: int) -> Synthesizer:
        """The method at the scenario's budget, or (``noise_divisor``) at the budget whose
        noise is that many times smaller: ρ·d² for a Gaussian plan, ε·d for a Laplace one."""
        made = self._create(seed, self.epsilon)
        if self.noise_divisor == 1:
            return made
        plan = made._privacy_plan()
        d = self.noise_divisor
        epsilon = (epsilon_spent(plan["rho"] * d**2, self.delta, plan["accountant"])
                   if plan.get("rho") else self.epsilon * d)
        return self._create(seed, epsilon)

    def _fits(self) -> Release:
        # the method's state from its count graph (DPView's layout) is kept with the counts
        fitted = [] if self.counts_per_trial else [
            (synthesizer, self._counts(synthesizer, frame))
            for synthesizer, frame in ((self.synthesizer(0), f) for f in self.frames)]

        def release(side: int, seed: int) -> Any:
            if fitted:
                synthesizer, counts = fitted[side]
                synthesizer.noise_seed = seed
            else:
                synthesizer = self.synthesizer(seed)
                counts = self._counts(synthesizer, self.frames[side])
            n_rows = synthesizer._rows_counted(counts)
            metadata = {"n_rows": n_rows} if synthesizer.rows_public else {}
            with warnings.catch_warnings():  # tiny data: the methods' small-n warnings
                warnings.simplefilter("ignore")
                return synthesizer._fit_counts(counts, n_rows, metadata)
        return release

    def _counts(self, synthesizer: Synthesizer, frame: pd.DataFrame) -> Any:
        """The exact counts of ``frame``, through the method's read and count graph. With a
        privacy unit its rows are bounded first, with the seed ``fit`` derives from
        ``noise_seed`` (a unit-shaped release's unit column copied first, as ``fit`` does,
        for its unit table): the pairs' units of several rows hold copies of one row, so which
        ``max_rows`` a unit keeps does not move a count."""
        with dask.config.set(scheduler="synchronous"):
            ddf = synthesizer._read(frame, None)
            if synthesizer.privacy_unit is not None:
                ddf = units.bound_contributions(synthesizer._with_unit_key(ddf), self.schema,
                                                synthesizer.privacy_unit,
                                                units.unit_seed(synthesizer.noise_seed))
            (counts,) = compute(synthesizer._count_graph(ddf))
        return counts

    def _stats(self) -> Release:
        def stats(side: int, seed: int) -> Any:
            with dask.config.set(scheduler="synchronous"):
                return release_stats(self.frames[side], self.schema,
                                     epsilon=self.epsilon * self.noise_divisor,
                                     noise_sampler="numpy", noise_seed=seed, ledger=False,
                                     **self.options)
        return stats

    def _drafts(self) -> Release:
        # the public-sample path reads a file: each neighbour's own data, written once (the
        # folder lives as long as the release function)
        folder = tempfile.TemporaryDirectory(prefix="dp-dask-audit-") if self.public_sample \
            else None
        if folder is not None:
            for side, frame in enumerate(self.frames):
                frame.to_parquet(Path(folder.name) / f"neighbour-{side}.parquet")

        def drafted(side: int, seed: int) -> DraftRelease:
            asked = ({"public": Path(folder.name) / f"neighbour-{side}.parquet"}
                     if folder is not None else
                     {"dp_epsilon": self.epsilon * self.noise_divisor, "dp_delta": self.delta,
                      **self.options})
            with dask.config.set(scheduler="synchronous"):
                draft = draft_schema(self.frames[side], ledger=False, noise_sampler="numpy",
                                     noise_seed=seed, **asked)
            return DraftRelease(draft.schema, {"privacy": {"epsilon": self.epsilon,
                                                           "delta": self.delta}})
        return drafted

    def _unit_choices(self) -> Release:
        rho = rho_budget(self.epsilon, self.delta) * units.UNIT_DEFAULTS.auto_share
        with dask.config.set(scheduler="synchronous"):
            sizes = [compute(units.rows_per_unit_graph(read_table(f, load_schema(
                {"attributes": [{"name": UNIT, "categories": ["_"]}]})), UNIT))[0]
                for f in self.frames]

        def chosen(side: int, seed: int) -> UnitChoice:
            k, record = units.choose_max_rows(sizes[side], rho * self.noise_divisor**2,
                                              "exact", sampler="numpy",
                                              rng=np.random.default_rng(seed))
            return UnitChoice(k, {"privacy": {"rho": rho, "accountant": "exact",
                                              "epsilon": self.epsilon, "delta": self.delta,
                                              "choice": record}})
        return chosen


ALL = {"tables": "all"}  # every 2-way table (this tiny n would get the tree plan by default)
# the dense joint (cliques "joint": the public rule picks pairs on this tiny n), and one fitting
# step (post-processing) keeps trials fast
DENSE = {"config": {"cliques": "joint", "joint_iterations": 1}}
UNIT_K = 2  # the marginals' privacy unit's max_rows
STATS_UNIT_K = 8  # the stats' (its pair's unit of twice as many rows)
# the row-shaped release under a unit (its row model's tables at K rows' sensitivity)
MARGINALS_UNIT = {"privacy_unit": {"column": UNIT, "max_rows": UNIT_K},
                  "unit_shape": False}
# the unit-shaped default under a unit: the unit model (the declared unit-level city and the
# rows per unit, a row's sensitivity), the lag-1 table (each unit's pairs weighing LAG_WEIGHT
# in all) and the row model (K rows'). K rows hold K − 1 pairs: enough that a lag table
# counting each pair whole would move K − 1 times its calibration (plant lag-pairs-unweighted)
UNIT_SHAPED_K = 8
# and the own tables (a parent–child release's: the city's again on the unit table, the colour
# and size's on the rows, at relational.PARENT_SHARE and CHILD_SHARE)
MARGINALS_UNIT_SHAPED = {"privacy_unit": {"column": UNIT, "max_rows": UNIT_SHAPED_K},
                         "unit_order": UNIT_ORDER, "unit_lag": UNIT_LAG,
                         "own_tables": {"units": {"attributes": ["city"],
                                                  "share": PARENT_SHARE},
                                        "rows": {"attributes": ["colour", "size"],
                                                 "share": CHILD_SHARE}}}


def scenarios() -> dict[str, Scenario]:
    """Every audited method and notion, by name."""
    schema = load_schema(AUDIT_SCHEMA)
    replace, add_remove = canary_pair("replace"), canary_pair("add_remove")
    sorted_schema, *sorted_frames = sorted_pair()
    out = [
        Scenario("marginals", "marginals", "replace", schema, replace, ALL),
        Scenario("marginals-add-remove", "marginals", "add_remove", schema, add_remove,
                 {**ALL, "neighbours": "add_remove"}),
        Scenario("marginals-add-remove-as-replace", "marginals", "replace", schema, replace,
                 {**ALL, "neighbours": "add_remove"}),
        Scenario("marginals-tree", "marginals", "replace", schema, replace, {"tables": "tree"}),
        Scenario("marginals-tables-auto", "marginals", "replace", wide_schema(), wide_pair()),
        Scenario("marginals-adaptive", "marginals", "replace", schema, replace,
                 {**ALL, "rounds": 1}),
        Scenario("marginals-fine", "marginals", "replace", load_schema(FINE_SCHEMA), replace,
                 ALL),
        Scenario("marginals-joint", "marginals", "replace", schema, replace, DENSE),
        Scenario("marginals-unit", "marginals", "replace", schema, unit_pair(),
                 {**ALL, **MARGINALS_UNIT}),
        Scenario("marginals-unit-shaped", "marginals", "replace",
                 load_schema(UNIT_SHAPED_SCHEMA), unit_pair(2 * UNIT_SHAPED_K),
                 {**ALL, **MARGINALS_UNIT_SHAPED}),
        Scenario("unit-auto-k", "unit-choice", "replace", None, unit_sizes_pair()),
        Scenario("copula", "copula", "replace", schema, replace,
                 {"calibration_draws": 500}),
        Scenario("dpcopula-kendall", "dpcopula-kendall", "replace", schema, replace),
        Scenario("dpcopula-mle", "dpcopula-mle", "replace", sorted_schema,
                 tuple(sorted_frames), {"blocks": MLE_BLOCK_PAIRS}, counts_per_trial=True),
        Scenario("dpcopula-hybrid", "dpcopula-hybrid", "replace", schema, replace,
                 {"small_domain": 4}, counts_per_trial=True),
        Scenario("dpview", "dpview", "replace", schema, replace),
        Scenario("dpview-add-remove", "dpview", "add_remove", schema, add_remove,
                 {"neighbours": "add_remove"}, counts_per_trial=True),  # its noisy n
        Scenario("stats", "stats", "replace", schema, replace),
        Scenario("stats-unit", "stats", "replace", schema, unit_pair(2 * STATS_UNIT_K),
                 {"privacy_unit": {"column": UNIT, "max_rows": STATS_UNIT_K}}),
        Scenario("schema-draft", "schema-draft", "replace", None, draft_pair(),
                 {"dp_grids": {"size": DRAFT_GRID}, "dp_bins": 4}),
        Scenario("draft-octaves", "schema-draft", "replace", None, octave_pair()),
        Scenario("draft-searches-joint", "schema-draft", "replace", None, searches_pair()),
        Scenario("draft-years", "schema-draft", "replace", None, years_pair()),
        Scenario("draft-text", "schema-draft", "replace", None, text_pair()),
        Scenario("draft-text-joint", "schema-draft", "replace", None, joint_text_pair()),
        Scenario("draft-gaussian-together", "schema-draft", "replace", None, together_pair()),
        Scenario("draft-identifier", "schema-draft", "replace", None, identifier_pair()),
        Scenario("draft-unit", "schema-draft", "add_remove", None, draft_unit_pair(),
                 {"privacy_unit": {"column": UNIT, "max_rows": DRAFT_UNIT_K}}),
    ]
    return {s.name: s for s in out}
