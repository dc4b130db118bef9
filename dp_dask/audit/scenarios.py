"""Worst-case neighbouring data sets per method, and the release each trial repeats.

White-box canaries, on tiny in-memory data (the audit tests the mechanisms' calibration, not
scale): a base of rows that leave one value of every attribute unused, and

* replace one row: D = base + a typical row, D' = base + the canary, which differs from it in
  every attribute (so every measured marginal moves by its full sensitivity): an unused category,
  a size at a bin's edge (50), a city outside the schema (counted in its public "other" bin);
* add/remove one row: D = base, D' = base + the canary;
* DPCopula-MLE: a sorted input where replacing the first row shifts every later row by one
  position (the blocks of consecutive rows of finding 1); blocks of two rows, whose correlation
  flips from 0 to −1 when the rows shift.

Each scenario's release is the method's own code: ``_count_graph`` once per neighbour (Dask's
synchronous scheduler) and ``_fit_counts`` per trial with a fresh seeded noise, or the whole
count graph per trial where the method draws randomness inside it (DPCopula-MLE's row order,
DPCopula-Hybrid's first-pass counts) and for ``stats`` (one call of ``release_stats``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dask
import numpy as np
import pandas as pd

from dp_dask.cluster import compute
from dp_dask.data.draft import Draft, draft_schema
from dp_dask.data.io import read_table
from dp_dask.data.schema import Schema, load_schema
from dp_dask.privacy.accounting import ACCOUNTANTS, epsilon_spent
from dp_dask.stats import release_stats
from dp_dask.synthesizer import Synthesizer

BASE_ROWS = 120
SEED = 20261127  # the base data's seed: the neighbours are fixed, public test inputs
EPSILON = 2.0
DELTA = 1e-6

AUDIT_SCHEMA = {
    "schema_version": 1, "name": "audit",
    "attributes": [
        {"name": "colour", "type": "categorical", "categories": ["red", "green", "blue", "violet"]},
        {"name": "size", "type": "numeric", "edges": [0, 10, 20, 50, "inf"], "max": 1000},
        {"name": "city", "type": "categorical", "categories": ["a", "b", "c", "d"],
         "extra": ["other"], "on_unknown": "other"},
        {"name": "grade", "type": "categorical", "categories": [f"g{i}" for i in range(6)]},
    ]}
# the same with a public fine grid on size (the marginals' fine histograms)
FINE_SCHEMA = {**AUDIT_SCHEMA, "name": "audit-fine", "attributes": [
    AUDIT_SCHEMA["attributes"][0],
    {**AUDIT_SCHEMA["attributes"][1], "fine": {"start": 0, "stop": 50, "step": 5}},
    *AUDIT_SCHEMA["attributes"][2:]]}
TYPICAL = {"colour": "red", "size": 5, "city": "a", "grade": "g0"}
# an unused category, a value on a bin's edge, a value outside the schema ("other")
CANARY = {"colour": "violet", "size": 50, "city": "zz-not-in-schema", "grade": "g5"}

MLE_BLOCK_PAIRS = 60  # blocks of two rows: the noise is small beside the shift
# the schema draft's DP bins: quantiles over a public grid; the canary is the largest value
DRAFT_GRID = {"start": 0, "stop": 200, "step": 10}
DRAFT_CANARY = 190


def base_frame(rows: int = BASE_ROWS, seed: int = SEED) -> pd.DataFrame:
    """Rows that never use the canary's values (nor "other", nor a size >= 50)."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"colour": rng.choice(["red", "green", "blue"], rows),
                         "size": rng.integers(0, 50, rows),
                         "city": rng.choice(["a", "b", "c", "d"], rows),
                         "grade": rng.choice([f"g{i}" for i in range(5)], rows)})


def with_row(frame: pd.DataFrame, row: dict[str, Any]) -> pd.DataFrame:
    return pd.concat([frame, pd.DataFrame([row])], ignore_index=True)


def canary_pair(notion: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    base = base_frame()
    if notion == "replace":
        return with_row(base, TYPICAL), with_row(base, CANARY)
    return base, with_row(base, CANARY)


def sorted_pair() -> tuple[Schema, pd.DataFrame, pd.DataFrame]:
    """DPCopula-MLE's pair: rows (x, lo), (x, hi) for x = 0..K−1 in that order; the neighbour
    replaces the first row by (K, hi), which a sorted file puts last."""
    k = MLE_BLOCK_PAIRS
    schema = load_schema({"schema_version": 1, "name": "audit-sorted", "attributes": [
        {"name": "x", "type": "numeric", "edges": list(range(k + 2))},
        {"name": "y", "type": "categorical", "categories": ["lo", "hi"]}]})
    rows = [(x, y) for x in range(k) for y in ("lo", "hi")]
    d0 = pd.DataFrame(rows, columns=["x", "y"])
    d1 = pd.DataFrame(rows[1:] + [(k, "hi")], columns=["x", "y"])
    return schema, d0, d1


def draft_pair() -> tuple[pd.DataFrame, pd.DataFrame]:
    """A numeric column, and the same with its typical row replaced by the largest value."""
    base = base_frame()[["size"]]
    return (with_row(base, {"size": TYPICAL["size"]}),
            with_row(base, {"size": DRAFT_CANARY}))


@dataclass(frozen=True)
class DraftRelease:
    """What a schema draft publishes: the schema, and its DP record as a release's."""

    schema: Schema
    metadata: dict[str, Any]

    @staticmethod
    def of(draft: Draft, epsilon: float, delta: float) -> DraftRelease:
        """The draft asked for (ε, δ)-DP: that is its claim, whatever its record says."""
        return DraftRelease(load_schema(draft.schema),
                            {"privacy": {"epsilon": epsilon, "delta": delta}})


@dataclass
class Scenario:
    """One audited release: a method and its options, its notion of neighbours, the pair."""

    name: str
    method: str  # a Synthesizer method, or "stats"
    notion: str  # "replace" or "add_remove": the neighbours built and the claim audited
    schema: Schema
    frames: tuple[pd.DataFrame, pd.DataFrame]
    options: dict[str, Any] = field(default_factory=dict)
    epsilon: float = EPSILON
    delta: float = DELTA
    counts_per_trial: bool = False  # the method's randomness lives inside its count graph

    def synthesizer(self, seed: int) -> Synthesizer:
        return Synthesizer.create(self.method, self.schema, epsilon=self.epsilon,
                                  delta=self.delta, noise_sampler="numpy", noise_seed=seed,
                                  ledger=False, **self.options)

    def prepare(self) -> Callable[[int, int], Any]:
        """``release(side, seed)``: the release on neighbour ``side`` (0: D, 1: D') with the
        noise of ``seed``."""
        if self.method == "schema-draft":
            def drafted(side: int, seed: int) -> DraftRelease:
                with dask.config.set(scheduler="synchronous"):
                    return DraftRelease.of(draft_schema(
                        self.frames[side], dp_epsilon=self.epsilon, dp_delta=self.delta,
                        dp_grids={"size": DRAFT_GRID}, ledger=False, noise_sampler="numpy",
                        noise_seed=seed, **self.options), self.epsilon, self.delta)
            return drafted
        if self.method == "stats":
            def stats(side: int, seed: int) -> Any:
                with dask.config.set(scheduler="synchronous"):
                    return release_stats(self.frames[side], self.schema, epsilon=self.epsilon,
                                         noise_sampler="numpy", noise_seed=seed, ledger=False,
                                         **self.options)
            return stats
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
        with dask.config.set(scheduler="synchronous"):
            ddf = read_table(frame, self.schema)
            (counts,) = compute(synthesizer._count_graph(ddf))
        return counts

    def claim(self, release: Any, delta: float) -> float:
        """The ε the release claims at the audit's δ under this scenario's neighbours: from its
        recorded ρ and accountant (the Gaussian methods' curve), else its (ε, δ) (pure or
        approximate DP holds at every larger δ); replace-one neighbours of an add/remove
        release are held to its recorded replace-one charge."""
        privacy = release.metadata["privacy"]
        if self.notion == "replace" and "replace_one_row" in privacy:
            privacy = {**privacy, **privacy["replace_one_row"]}
        if privacy.get("rho") and privacy.get("accountant") in ACCOUNTANTS:
            return epsilon_spent(privacy["rho"], delta, privacy["accountant"])
        if delta < privacy.get("delta", 0.0):
            raise ValueError(f"audit delta {delta:g} below the release's {privacy['delta']:g}")
        return float(privacy["epsilon"])


ALL = {"tables": "all"}  # every 2-way table (this tiny n would get the tree plan by default)


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
        Scenario("marginals-adaptive", "marginals", "replace", schema, replace,
                 {**ALL, "rounds": 1}),
        Scenario("marginals-fine", "marginals", "replace", load_schema(FINE_SCHEMA), replace,
                 ALL),
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
        Scenario("schema-draft", "schema-draft", "replace", schema, draft_pair(),
                 {"dp_bins": 4}),
    ]
    return {s.name: s for s in out}
