"""Per-column histograms of survey data: plain DP (Laplace) or Tabular-DDP (dependent DP, opt-in).

A survey team releases one histogram per question. Both mechanisms read the data once on Dask
(exact counts to the driver only), then add Laplace noise once per count.

``mechanism="laplace"``: ε-differential privacy. Replacing one row moves one count of every
column's histogram down by 1 and one up by 1: the m histograms together have L1 sensitivity 2m
under replace-one (n public), so each count gets Laplace noise of scale **b = 2m/ε** (sequential
composition over the m columns; the paper's m/ε is the add/remove version, sensitivity 1 each).

``mechanism="tabular-ddp"`` (Maughan & Near, Algorithm 1): ε-*dependent* differential privacy,
a Pufferfish variant that holds only if a Bayesian network describes the population's dependence
between columns; it is weaker than differential privacy. The columns are split into consecutive
chunks of at most k; chunk c (k_c columns) gets the budget ε_c = ε·k_c/m, so Σ ε_c = ε exactly
(the paper's ε·k/m per chunk over ⌈m/k⌉ chunks would overspend when k does not divide m). Its
dependent sensitivity DS_c = Σ ρᵢⱼ over the network's edges inside the chunk (dp_dask.network).

Derivation of the scale. Under add/remove, the paper replaces the chunk's L1 sensitivity k_c
(one count per column) by DS_c and draws Laplace(DS_c/ε_c) = Laplace(m·DS_c/(k_c·ε)), which is
m·DS/(k·ε) for a full chunk. A replace-one neighbour is a removal followed by an addition, so the
sensitivity, and with it the scale at the same ε_c, doubles:

    b_c = 2·m·DS_c / (k_c·ε),   against plain DP's  2·k_c/ε_c = 2m/ε  for the same chunk.

So Tabular-DDP adds less noise exactly when DS_c < k_c. When DS_c ≥ k_c (or DS_c is infinite,
a zero probability without smoothing), the chunk uses the plain-DP scale 2m/ε instead: never more
noise than plain DP, and the metadata names every chunk that fell back. The sum over edges is 0
for a chunk without edges, which would release exact counts; we floor DS_c at 1, the column's
own term (ρᵢᵢ = 1 in Liu et al.'s dependent sensitivity): never less noise than one histogram
under plain DP at the chunk's budget.

Without the network assumption the release is still differentially private, with the ε that
its noise buys as plain Laplace: Σ_c 2·k_c/b_c (recorded as ``dp_without_assumption``).

Network sources (dp_dask.network): a public network file, a public sample, or our own DP noisy
2-way tables. The last spends ``network_share``·ε (pure DP, Laplace) on every within-chunk 2-way
table and each column's histogram, and the rest on the histograms under dependent DP; the ledger
counts the first part in the dataset's DP total and lists the second apart, never summed.

The ledger still counts a Tabular-DDP release against the dataset's DP budget, at its ε without
the assumption (a DP entry of its own, refused past the budget unless forced): checked before
the data is read, exactly for a public network, and for a network learnt from noisy tables at the
most any network could give (Σ_c k_c²·ε/m), lowered to its own once the network is known.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dp_dask.cluster import compute
from dp_dask.data.counts import view_count_graph
from dp_dask.data.io import TableSource, read_table, write_json
from dp_dask.data.schema import Schema, load_schema
from dp_dask.data.units import (
    PrivacyUnit,
    bound_contributions,
    check_drafted_unit,
    drafted_record,
    neighbouring,
    unit_record,
    unit_seed,
)
from dp_dask.exceptions import DpDaskWarning
from dp_dask.network import (
    DEFAULT_SMOOTHING,
    Network,
    chunks,
    dependent_sensitivity,
    network_from_json,
    network_from_sample,
    network_from_tables,
)
from dp_dask.postprocess.consistency import Measurement
from dp_dask.privacy import BASIC_COMPOSITION, laplace_noise
from dp_dask.privacy.accounting import table_sensitivity
from dp_dask.privacy.labels import PRIVATE_SAMPLERS
from dp_dask.privacy.ledger import (
    APPROX_DP,
    DEPENDENT_DP,
    Entry,
    Ledger,
    dataset_name_for,
    new_run_id,
    reserving,
)
from dp_dask.privacy.record import Cost, PrivacyRecord
from dp_dask.privacy.split import BudgetPart, BudgetSplit
from dp_dask.synthesizer import EmptyInputError
from dp_dask.timing import timed
from dp_dask.tuning import changed

MECHANISMS = ("laplace", "tabular-ddp")
DEFAULT_K = 10  # the paper's default chunk size
# Replace-one: one count of a histogram down by 1, one up by 1.
HISTOGRAM_L1_SENSITIVITY = 2
DP_PREFIX = ("ε-differential privacy (pure DP): Laplace noise, sequential composition over the "
             "column histograms; neighbouring datasets ")
DP_STATEMENT = DP_PREFIX + "differ in one row (replaced), n public"  # a row's (as released)
DDP_STATEMENT = ("ε-dependent differential privacy (Pufferfish variant): holds only if the "
                 "network describes the population's dependence; weaker than differential "
                 "privacy")
DDP_ACCOUNTANT = "dependent sensitivity per chunk (Maughan & Near), sequential composition"


class DependentPrivacyWarning(DpDaskWarning):
    """A release under dependent DP: weaker than DP, and only as good as its network."""


@dataclass(frozen=True)
class ChunkNoise:
    """The noise of one chunk of columns: all counts of its histograms get Laplace(scale)."""

    columns: tuple[int, ...]
    epsilon: float  # the chunk's share of the histograms' ε
    scale: float
    dependent_sensitivity: float | None = None  # None under plain DP
    rho: dict[str, float] = field(default_factory=dict)
    fallback: bool = False  # DS ≥ k_c: the plain-DP scale instead
    max_rows: int | None = None  # a privacy unit's bound (None: a row)

    @property
    def sensitivity(self) -> int:
        """L1 sensitivity of the chunk's histograms under replace-one (plain DP)."""
        return int(table_sensitivity("replace", "l1", self.max_rows)) * len(self.columns)

    @property
    def dp_epsilon(self) -> float:
        """The ε this noise gives as plain DP, without the network assumption."""
        return self.sensitivity / self.scale


def laplace_scale(m: int, epsilon: float, max_rows: int | None = None) -> float:
    """Plain DP: Laplace scale of every count of m histograms at total ε (replace one row, or
    one unit of at most ``max_rows`` rows)."""
    return table_sensitivity("replace", "l1", max_rows) * m / epsilon


def tabular_ddp_scale(m: int, chunk_size: int, ds: float, epsilon: float) -> tuple[float, bool]:
    """Tabular-DDP: 2·m·DS/(k_c·ε) for a chunk of k_c columns (DS floored at 1), or the plain
    scale 2m/ε, and True, when DS ≥ k_c (see the module docstring for the derivation)."""
    if not ds < chunk_size:
        return laplace_scale(m, epsilon), True
    return HISTOGRAM_L1_SENSITIVITY * m * max(ds, 1.0) / (chunk_size * epsilon), False


def plan_chunks(schema: Schema, epsilon: float, mechanism: str, *, k: int = DEFAULT_K,
                network: Network | None = None,
                smoothing: float = DEFAULT_SMOOTHING,
                max_rows: int | None = None) -> list[ChunkNoise]:
    """The noise of every count: one chunk of all m columns (laplace) or one per chunk of k;
    ``max_rows``: a privacy unit's bound (laplace only)."""
    m = schema.m
    if mechanism == "laplace":
        return [ChunkNoise(tuple(range(m)), epsilon, laplace_scale(m, epsilon, max_rows),
                           max_rows=max_rows)]
    if network is None:
        raise ValueError("tabular-ddp needs a network")
    plan = []
    for chunk in chunks(m, k):
        ds, rho = dependent_sensitivity(network, chunk, smoothing)
        scale, fallback = tabular_ddp_scale(m, len(chunk), ds, epsilon)
        plan.append(ChunkNoise(tuple(chunk), epsilon * len(chunk) / m, scale, ds,
                               {_edge_name(schema, e): r for e, r in rho.items()}, fallback))
    return plan


def _edge_name(schema: Schema, edge: str) -> str:
    parent, child = (int(a) for a in edge.split("->"))
    return f"{schema.names[parent]} -> {schema.names[child]}"


def add_noise(histograms: Sequence[np.ndarray], plan: Sequence[ChunkNoise], *,
              sampler: str = "opendp",
              rng: np.random.Generator | None = None) -> list[np.ndarray]:
    """The noisy histograms: one Laplace measurement per chunk, one draw per count."""
    noisy: list[np.ndarray] = [np.empty(0)] * len(histograms)
    for chunk in plan:
        exact = [histograms[a] for a in chunk.columns]
        drawn = laplace_noise(np.concatenate(exact), chunk.scale, sensitivity=chunk.sensitivity,
                              sampler=sampler, rng=rng)
        for a, values in zip(chunk.columns, np.split(drawn, np.cumsum([len(e) for e in exact])
                                                     [:-1])):
            noisy[a] = values
    return noisy


def table_views(schema: Schema, column_chunks: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    """Each column alone, then every pair inside a chunk (what the noisy-table source measures)."""
    pairs = [(a, b) for chunk in column_chunks for i, a in enumerate(chunk) for b in chunk[i + 1:]]
    return [(a,) for a in range(schema.m)] + pairs


def measure_tables(exact: Sequence[np.ndarray], views: Sequence[tuple[int, ...]],
                   epsilon: float, *, sampler: str = "opendp",
                   rng: np.random.Generator | None = None) -> list[Measurement]:
    """Every view (histograms and within-chunk tables) with Laplace noise, one ε-DP measurement:
    L1 sensitivity 2 per view under replace-one, so scale 2·views/ε; std √2·scale."""
    sensitivity = HISTOGRAM_L1_SENSITIVITY * len(views)
    scale = sensitivity / epsilon
    drawn = laplace_noise(np.concatenate(exact), scale, sensitivity=sensitivity,
                          sampler=sampler, rng=rng)
    parts = np.split(drawn, np.cumsum([len(e) for e in exact])[:-1])
    return [Measurement(view, values, math.sqrt(2.0) * scale)
            for view, values in zip(views, parts)]


@dataclass
class StatsRelease:
    """Noisy per-column histograms and the metadata that says what they guarantee."""

    schema: Schema
    histograms: list[np.ndarray]
    metadata: dict[str, Any]
    timings: dict[str, float] = field(default_factory=dict)

    def table(self) -> list[tuple[str, str, float]]:
        return [(a.name, label, float(v)) for a, hist in zip(self.schema.attributes,
                                                            self.histograms)
                for label, v in zip(a.labels, hist)]

    def write(self, out: str | Path) -> dict[str, Path]:
        """``histograms.json``, ``histograms.csv`` and ``metadata.json`` in ``out``; each
        written beside its target and renamed onto it, so no file is ever half-written."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        paths = {"json": out / "histograms.json", "csv": out / "histograms.csv",
                 "metadata": out / "metadata.json"}
        write_json(paths["json"], {
            "notion": self.metadata["privacy"]["statement"],
            "columns": {a.name: dict(zip(a.labels, hist.tolist()))
                        for a, hist in zip(self.schema.attributes, self.histograms)}})
        partial = paths["csv"].with_name(f".{paths['csv'].name}.partial")
        with partial.open("w", newline="") as stream:
            writer = csv.writer(stream)
            writer.writerow(["column", "label", "noisy_count"])
            writer.writerows(self.table())
        partial.replace(paths["csv"])
        write_json(paths["metadata"], self.metadata)
        return paths


def _check_options(epsilon: float, mechanism: str, k: int, sources: dict[str, Any],
                   network_share: float | None, smoothing: float) -> None:
    if not (isinstance(epsilon, int | float) and math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"--epsilon must be a finite number > 0, got {epsilon!r}")
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown --mechanism {mechanism!r}; expected one of {MECHANISMS}")
    chunks(1, k)  # validates k
    given = [name for name, value in sources.items() if value is not None]
    if mechanism == "laplace" and given:
        raise ValueError(f"{given[0]} applies to --mechanism tabular-ddp only")
    if mechanism == "tabular-ddp" and len(given) != 1:
        raise ValueError("--mechanism tabular-ddp needs exactly one network source: "
                         f"{', '.join(sources)}" + (f" (got {', '.join(given)})" if given else ""))
    if network_share is not None and not 0 < network_share < 1:
        raise ValueError("--network-from-noisy-tables: the share of ε must lie in (0, 1), got "
                         f"{network_share!r}")
    if not 0 <= smoothing < 1:
        raise ValueError(f"--smoothing must lie in [0, 1), got {smoothing!r}")


def release_stats(data: TableSource, schema: Schema | str | Path, *, epsilon: float,
                  mechanism: str = "laplace", k: int = DEFAULT_K,
                  network: str | Path | None = None, public_sample: str | Path | None = None,
                  network_share: float | None = None, smoothing: float = DEFAULT_SMOOTHING,
                  noise_sampler: str = "opendp", noise_seed: int | None = None,
                  ledger: Ledger | str | Path | bool | None = None,
                  dataset_name: str | None = None, run_id: str | None = None,
                  budget_epsilon: float | None = None, force: bool = False,
                  show_progress: bool = False,
                  privacy_unit: PrivacyUnit | dict[str, Any] | None = None,
                  accept_row_level_draft: bool = False) -> StatsRelease:
    """Per-column noisy histograms of ``data`` under ``mechanism`` ("laplace" or
    "tabular-ddp"); see the module docstring. Tabular-DDP needs one network source: ``network``
    (public JSON), ``public_sample`` (a public file) or ``network_share`` (that share of ε on
    noisy 2-way tables). It warns (:class:`DependentPrivacyWarning`): the notion is weaker.

    Options, the network file or sample and the ledger's budget are checked before the private
    data is read. The ledger (as for ``Synthesizer``: None = default, False = none) counts DP
    spending, lists the dependent-DP release apart, and counts it at its plain-DP ε too
    (:func:`_reserve`): past the budget it is refused unless ``force``.

    ``privacy_unit`` (default: the schema's; laplace only): each unit's rows bounded to its
    ``max_rows`` (:mod:`dp_dask.data.units`), the noise scaled to them, n not recorded. A schema
    drafted under DP at another unit (a row) is refused under a unit unless
    ``accept_row_level_draft`` (as for ``Synthesizer``); the metadata records the draft
    (``schema_drafted_under_dp``) as a synthesizer's release does.
    """
    schema = load_schema(schema)
    sources = {"--network": network, "--public-sample": public_sample,
               "--network-from-noisy-tables": network_share}
    _check_options(epsilon, mechanism, k, sources, network_share, smoothing)
    unit = PrivacyUnit.of(privacy_unit if privacy_unit is not None else schema.privacy_unit)
    source = data
    if unit is not None:  # before any budget is spent
        if unit.max_rows == "auto":
            raise ValueError(f"privacy unit {unit.column!r}: stats takes an integer "
                             "max_rows, not 'auto'")
        if unit.unit_level_auto:
            raise ValueError(f"privacy unit {unit.column!r}: unit_level 'auto' finds the "
                             "attributes constant within a unit for a unit-shaped release; "
                             "stats releases statistics, not units")
        if changed(unit.config):
            raise ValueError(f"privacy unit {unit.column!r}: config {changed(unit.config)} "
                             "tunes the searches of a fit (max_rows 'auto', unit_level "
                             "'auto'), which stats never runs: leave it out")
        if mechanism != "laplace":
            raise ValueError(f"privacy unit {unit.column!r}: --mechanism {mechanism} does not "
                             "support a privacy unit (its dependent sensitivity is a row's); "
                             "use --mechanism laplace")
        unit.check(schema)
        check_drafted_unit(schema, unit, accept_row_level_draft)
        source = read_table(data, schema, extra=(unit.column,))
    rng = np.random.default_rng(noise_seed) if noise_sampler == "numpy" else None
    timings: dict[str, float] = {}
    column_chunks = chunks(schema.m, k)
    public_network = None
    with timed(timings, "network"):  # public sources: before the private data is read
        if network is not None:
            public_network = network_from_json(network, schema)
        elif public_sample is not None:
            public_network = network_from_sample(public_sample, schema, column_chunks)
    tables_epsilon = epsilon * network_share if network_share is not None else 0.0
    hist_epsilon = epsilon - tables_epsilon
    if mechanism == "tabular-ddp":
        warnings.warn(f"tabular-ddp releases under {DDP_STATEMENT}; use --mechanism laplace "
                      "for differential privacy", DependentPrivacyWarning, stacklevel=2)

    book = None if ledger is False else ledger if isinstance(ledger, Ledger) else Ledger(
        None if ledger in (None, True) else ledger)
    plain_epsilon = (None if mechanism == "laplace" else
                     plain_dp_epsilon(schema, hist_epsilon, k, public_network, smoothing))
    requests = _requests(data, schema, mechanism, hist_epsilon, tables_epsilon, plain_epsilon,
                         noise_sampler, dataset_name, run_id or new_run_id(), unit)
    with reserving(book, requests, budget_epsilon=budget_epsilon, force=force) as booking:
        release = _release(source, schema, epsilon, mechanism, k, column_chunks,
                           public_network, tables_epsilon, hist_epsilon, smoothing,
                           noise_sampler, rng, timings, show_progress, unit,
                           unit_seed(noise_seed))
        entries = booking.entries
        for entry in entries:  # a network learnt from the data: its own plain-DP ε, not the bound
            if entry.mechanism == "tabular-ddp" and entry.notion == APPROX_DP:
                booking.charge.settle(entry, release.metadata["privacy"]
                                      ["dp_without_assumption"]["epsilon"] - tables_epsilon)
    if entries:
        release.metadata["ledger"] = {"dataset_name": entries[0].dataset_name,
                                      "run_ids": [e.run_id for e in entries]}
    return release


def plain_dp_epsilon(schema: Schema, epsilon: float, k: int, network: Network | None,
                     smoothing: float) -> float:
    """The ε-DP of Tabular-DDP's histograms at ``epsilon`` without the network assumption
    (Σ_c 2·k_c/b_c): exact for a known network; for one still to be learnt from the data, the
    most any network can give (DS_c = 0, floored at 1, in every chunk: Σ_c k_c²·ε/m)."""
    if network is not None:
        return math.fsum(c.dp_epsilon for c in plan_chunks(
            schema, epsilon, "tabular-ddp", k=k, network=network, smoothing=smoothing))
    return math.fsum(
        HISTOGRAM_L1_SENSITIVITY * len(chunk) / tabular_ddp_scale(schema.m, len(chunk), 0.0,
                                                                  epsilon)[0]
        for chunk in chunks(schema.m, k))


def _requests(data: TableSource, schema: Schema, mechanism: str, hist_epsilon: float,
              tables_epsilon: float, plain_epsilon: float | None, sampler: str,
              dataset_name: str | None, run_id: str,
              unit: PrivacyUnit | None = None) -> list[Entry]:
    """The ledger entries a stats release reserves before any private data is read
    (:func:`~dp_dask.privacy.ledger.reserving`): the DP part (laplace, or the noisy tables)
    counted and budget-checked; the dependent-DP part under its own notion, and counted and
    checked at its plain-DP ε (``plain_epsilon``, :func:`plain_dp_epsilon`) as a DP entry of
    its own, run id ``<run id>-dp``: what it costs if the network is wrong."""
    common = {"dataset_name": dataset_name_for(data, dataset_name),
              "schema_sha256": schema.sha256(), "delta": 0.0, "rho": None,
              "private": sampler in PRIVATE_SAMPLERS, "sampler": sampler,
              "unit_column": getattr(unit, "column", None),
              "unit_max_rows": getattr(unit, "max_rows", None)}
    requests = []
    if mechanism == "laplace":
        requests.append(Entry(run_id=run_id, epsilon=hist_epsilon, mechanism="laplace",
                              accountant=BASIC_COMPOSITION, notion=APPROX_DP, **common))
    else:
        if tables_epsilon > 0:
            requests.append(Entry(run_id=f"{run_id}-tables", epsilon=tables_epsilon,
                                  mechanism="laplace", accountant=BASIC_COMPOSITION,
                                  notion=APPROX_DP, **common))
        requests.append(Entry(run_id=f"{run_id}-dp", epsilon=plain_epsilon,
                              mechanism="tabular-ddp", accountant=BASIC_COMPOSITION,
                              notion=APPROX_DP, **common))
        requests.append(Entry(run_id=run_id, epsilon=hist_epsilon, mechanism="tabular-ddp",
                              accountant=DDP_ACCOUNTANT, notion=DEPENDENT_DP, **common))
    return requests


def _release(data: TableSource, schema: Schema, epsilon: float, mechanism: str, k: int,
             column_chunks: list[list[int]], network: Network | None, tables_epsilon: float,
             hist_epsilon: float, smoothing: float, sampler: str,
             rng: np.random.Generator | None, timings: dict[str, float],
             show_progress: bool, unit: PrivacyUnit | None = None,
             bounding_seed: int = 0) -> StatsRelease:
    views = (table_views(schema, column_chunks) if tables_epsilon > 0
             else [(a,) for a in range(schema.m)])
    with timed(timings, "read_count"):
        ddf = read_table(data, schema, extra=() if unit is None else (unit.column,))
        if unit is not None:
            ddf = bound_contributions(ddf, schema, unit, bounding_seed)
        (flat,) = compute(view_count_graph(ddf, schema, views), show_progress=show_progress)
    sizes = [int(np.prod(schema.sizes[list(v)])) for v in views]
    exact = np.split(flat, np.cumsum(sizes)[:-1])  # exact counts end in this function
    n_rows = int(exact[0].sum())
    if n_rows == 0 and unit is None:  # with a unit n is private: never refused, nor recorded
        raise EmptyInputError("the input has no rows; nothing to release")
    if tables_epsilon > 0:
        with timed(timings, "network"):
            measurements = measure_tables(exact, views, tables_epsilon, sampler=sampler, rng=rng)
            network = network_from_tables(measurements, schema, n_rows, column_chunks)
    with timed(timings, "sensitivity"):
        plan = plan_chunks(schema, hist_epsilon, mechanism, k=k, network=network,
                           smoothing=smoothing, max_rows=None if unit is None else unit.max_rows)
    with timed(timings, "noise"):
        noisy = add_noise(exact[: schema.m], plan, sampler=sampler, rng=rng)
    metadata = stats_metadata(schema, n_rows, epsilon, mechanism, k, plan, network,
                              tables_epsilon, smoothing, sampler, rng is not None, unit)
    return StatsRelease(schema, noisy, metadata, timings)


def dp_statement(unit: PrivacyUnit | None) -> str:
    """The laplace release's statement: under a privacy unit its neighbours in the words of the
    record's ``neighbouring`` (:func:`~dp_dask.data.units.neighbouring`, their one source), a
    row's as released before (:data:`DP_STATEMENT`)."""
    return DP_STATEMENT if unit is None else DP_PREFIX + neighbouring("replace", unit)


def stats_metadata(schema: Schema, n_rows: int, epsilon: float, mechanism: str, k: int,
                   plan: Sequence[ChunkNoise], network: Network | None, tables_epsilon: float,
                   smoothing: float, sampler: str, seeded: bool,
                   unit: PrivacyUnit | None = None) -> dict[str, Any]:
    """What a reviewer needs: the notion in words, ε and its split, every chunk's noise (its
    privacy record rendered: dp_dask.privacy.record)."""
    private = sampler in PRIVATE_SAMPLERS
    hist_epsilon = epsilon - tables_epsilon
    if mechanism == "laplace":
        accountant, notion = BASIC_COMPOSITION, "differential privacy"
        details: dict[str, Any] = {
            "notion": notion, "ledger_notion": APPROX_DP, "statement": dp_statement(unit),
            "differentially_private": private}
        split = BudgetSplit((BudgetPart(
            "histograms", count=schema.m, epsilon=epsilon, mechanism="Laplace",
            scale=plan[0].scale,
            scale_rule="2m/ε" if unit is None else f"2·{unit.max_rows}·m/ε"),), accountant)
    else:
        accountant, notion = DDP_ACCOUNTANT, "dependent differential privacy"
        fallen = [[schema.names[a] for a in c.columns] for c in plan if c.fallback]
        details = {
            "notion": notion, "ledger_notion": DEPENDENT_DP,
            "statement": DDP_STATEMENT, "differentially_private": False,
            "scale_formula": "b = 2·m·DS/(k_c·ε) per chunk (replace-one: twice the paper's "
                             "add/remove m·DS/(k·ε)); the plain-DP 2m/ε when DS ≥ k_c",
            "dp_without_assumption": {
                "epsilon": tables_epsilon + math.fsum(c.dp_epsilon for c in plan),
                "meaning": "the ε-differential privacy the same noise gives if the network "
                           "does not describe the population (Σ 2·k_c/b_c over the chunks"
                           + (", plus the noisy tables' ε)" if tables_epsilon else ")")},
            "fallback": (f"{len(fallen)} of {len(plan)} chunk(s) use the plain-DP Laplace "
                         f"scale because DS ≥ k: {fallen}" if fallen else "none"),
            "network": {"source": network.source if network else None,
                        "edges": network.describe(schema) if network else [],
                        "smoothing": f"each edge's pair table mixed with the uniform table at "
                                     f"λ={smoothing:g} (public)"},
            "k": k,
            "chunks": [{"columns": [schema.names[a] for a in c.columns], "epsilon": c.epsilon,
                        "dependent_sensitivity": c.dependent_sensitivity, "rho": c.rho,
                        "laplace_scale": c.scale, "fallback": c.fallback} for c in plan],
        }
        network_part = (BudgetPart("noisy histograms and within-chunk 2-way tables to learn "
                                   "the network", epsilon=tables_epsilon,
                                   mechanism="Laplace, pure DP"),) if tables_epsilon else ()
        split = BudgetSplit((*network_part, BudgetPart(
            "histograms", epsilon=hist_epsilon, rule="ε·k_c/m per chunk")), accountant)
    record = PrivacyRecord(
        Cost(epsilon, 0.0, mechanism, accountant), neighbouring("replace", unit),
        unit_record(unit, seeded), sampler, seeded, details=details, split=split,
        # Tabular-DDP is no DP notion: never summed with the draft
        draft=drafted_record(schema.drafted_under_dp, epsilon=epsilon, delta=0.0, unit=unit,
                             notion="replace" if mechanism == "laplace" else "dependent")
        if schema.drafted_under_dp else None,
        label=notion + " release", with_rho=False)
    return {"created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "kind": "per-column noisy histograms (dp-dask stats)",
            **({"n_rows": n_rows} if unit is None else {}),
            "schema": {"name": schema.name, "sha256": schema.sha256(), "attributes": schema.m},
            "privacy": record.to_metadata()}
