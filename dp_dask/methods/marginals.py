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
    estimate  once per release, in one to four tasks: candidate rows drawn down the tree (4 per
              measured row up to MIN_CANDIDATES, the distinct rows of more draws), raked
              towards every consistent table, their weights then fitted to the noisy
              measurements themselves (private-pgm's objective)
    sample    per output partition: the candidates resampled and balanced on their weighted
              triples, row updates towards their weighted tables kept while they gain, the
              consistent 1-way counts exactly (dp_dask.postprocess.raking, .reweight, .balance,
              .rowupdate)

Like PrivSyn (Zhang et al. 2021) it synthesises by row updates rather than from a fitted
density; unlike it, every 2-way table is measured (on Adult, spending budget on a selected subset
measured worse: docs/results-adult.md) unless the schema is too wide for that by a public
threshold: then a DP spanning tree of them (dp_dask.methods.selection, docs/method.md). Only
``measure`` touches exact counts.

Size: measurement, model, the candidate rows' estimate, the per-partition sampler and the
synthesizer in one module; to be split in issue 55 (methods/marginals as a package).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import dask.dataframe as dd
import numpy as np
from dask.delayed import Delayed

from dp_dask.checks import ModelError, model_schema, read_model_arrays, write_model_files
from dp_dask.copula.sample import single_threaded_blas
from dp_dask.data.cells import table_sums
from dp_dask.data.counts import (
    attribute_pairs,
    exact_answer,
    fine_count_graph,
    rows_counted,
    split_fine,
)
from dp_dask.data.dtypes import fine_layout
from dp_dask.data.io import Location
from dp_dask.data.schema import Schema
from dp_dask.methods import adaptive
from dp_dask.methods.selection import (
    REFINE_SHARE,
    SELECTION_SHARE,
    TreeChoice,
    all_pairs_noise,
    check_tables,
    refine,
    select_tree,
    tree_plan_selections,
    tree_wanted,
)
from dp_dask.postprocess.balance import balanced_resample, weighted_tables
from dp_dask.postprocess.consistency import (
    Marginals,
    Measurement,
    consistent_fine,
    consistent_marginals,
    estimated_rows,
    fine_bin_sums,
)
from dp_dask.postprocess.raking import rake
from dp_dask.postprocess.reweight import (
    FIT_ITERATIONS,
    check_iterations,
    fit_weights,
    iterations_for,
)
from dp_dask.postprocess.rowupdate import (
    match_one_way,
    possible_cells,
    round_to_total,
    sample_tree,
    update_rows,
)
from dp_dask.postprocess.tree import implied_tables, spanning_tree
from dp_dask.privacy import rho_budget
from dp_dask.privacy.accounting import TABLE_L2_SENSITIVITY, epsilon_spent, gaussian_sigma
from dp_dask.privacy.labels import NEIGHBOURING
from dp_dask.privacy.noise import gaussian_measurements
from dp_dask.privacy.selection import Selection, replace_one_rho
from dp_dask.synthesizer import Synthesizer
from dp_dask.timing import timed

# 2: the noisy measurements themselves are saved, for the sampler's weight fit.
MODEL_FORMAT = 2
METHOD = "marginals"
# Within the histograms and within the tables, ρ_t ∝ cells^(1/3): between equal shares and the
# minimiser of the raw tables' summed L1 error Σ cells_t·σ_t (ρ_t ∝ cells^(2/3)); shrinkage
# flattens the difference. On Adult (public, 15 attributes, ε = 1) exponents 0 / ⅓ / ½ / ⅔ gave
# consistent tables' 2-way error 10.96 / 10.87 / 10.89 / 10.96 and 1-way 27.5 / 26.4 / 26.4 / 26.5.
CELLS_EXPONENT = 1.0 / 3.0
# The histograms' share of ρ. Every table re-measures two of them, so a small share suffices;
# on Adult (public), 11 % → 27 % moved the 1-way error 20.7 → 18.1 and the 2-way 9.3 → 9.5
# (MST gives its 1-way marginals a third). Fixed, so it does not shrink as tables grow as m².
ONE_WAY_SHARE = 0.25
# The histograms' share of ρ in the tree plan (dp_dask.methods.selection): with m − 1 tables, most
# pairs' 2-way estimates are products of 1-way ones, so the histograms carry Q2 as well as Q1.
# Reached by a second measurement of each histogram after the plan is chosen (the first, at
# ONE_WAY_SHARE, decides it), averaged with the first by inverse variance. Tree plan, ε = 1,
# add/remove, seeds 0–3, Q1 / Q2 / Q3 (95 %) at 0.25 → 0.4: 45-column wide Adult 36.1 / 10.38 /
# 1.87 → 32.0 / 10.10 / 1.83, generated m = 50 39.0 / 21.37 / 7.09 → 35.1 / 21.46 / 7.22; 0.5
# (seeds 0–1) a little more Q1 but Q2/Q3 worse on generated m = 30, 50 (benchmarks/wide.py;
# docs/method.md "Wide schemas").
TREE_ONE_WAY_SHARE = 0.4
# The fine histograms' share of ρ, when the schema declares fine grids (split between them ∝
# cells^(1/3)); the 1-way and 2-way measurements share the rest as above. Chosen on Adult (public,
# ε = 1, seeds 0-2, benchmarks/values.py, each histogram's bin sums also in its attribute's 1-way
# estimate): 0.02 / 0.03 / 0.05 gave KS age 0.0113 / 0.0092 / 0.0075 (seed 2 at 0.02: 0.0144,
# over the 0.012 goal), hours 0.0097 / 0.0086 / 0.0072, coarse Q1 24.28 / 24.58 / 24.71,
# Q2 10.39 / 10.40 / 10.50, Q3 1.316 / 1.305 / 1.321 (no grid: 24.27, 10.35, 1.313);
# docs/results-adult.md "Numeric values".
FINE_SHARE = 0.03
# Row updates move no row into a cell whose consistent estimate is within this many noise σ of
# zero: such a cell may be empty in the data (never-married husbands). On Adult (public, ε = 1)
# 0 / 1 / 2 σ left 28–237 / 52–207 / 6–102 never-married husbands for 9 attributes at equal Q2.
EMPTY_WITHIN_SIGMAS = 2.0
# Value moves (postprocess.balance.settle_values) only in releases of at most this many
# partitions: a partition's moves cost more than the rest of it (Adult shape, 14 attributes,
# 100 k rows: 6.0 of 6.3 CPU s, against 0.6 without them), so a 1 M-row release of that shape
# took 40.4 s with every partition's moves against 12.2 s before them (write 72.7 vs 19.1 CPU
# s), and sharing 4 partitions' moves among 10 still 24.6-26.1 s. Adult-sized releases (up to
# 400 k rows at the default partitions, 4 here) keep every move; larger ones sample as before
# them, their own sampling error already small against the measured rows' (benchmarks.run
# --shape adult --rows 1000000, 2 workers, quiet machine).
MOVE_PARTITIONS = 4
# A release's partitions share up to MAX_ESTIMATES independent estimates (candidates drawn and
# fitted), so that together they hold about as many candidates as the measured rows: one
# partition-sized estimate resampled into n rows repeats its candidates' sampling error in the
# 3-way structure. nycflights13 (336,776 rows, 4 partitions, ε = 1, seeds 0–2): Q3 95 % 15.3 /
# 13.5 / 12.4 with 1 / 2 / 4 estimates, Q2 unchanged. Each estimate costs about two partitions'
# draws (docs/benchmarks.md), hence the cap.
MAX_ESTIMATES = 4
# An estimate draws CANDIDATES_PER_ROW candidate rows per measured row, up to MIN_CANDIDATES (or
# its partitions' rows, if more): the candidates' coverage of the joint, not the output's size,
# limits its 3-way structure. On Adult (9 attributes, 32,561 rows, ε = 1, add/remove, seed 0)
# the fitted weights' 3-way error (95 %, unrounded) was 1.23 / 1.16 / 1.12 / 1.10 / 1.08 with
# 1 / 2 / 4 / 10 / 30 candidates per row; the bound keeps the fit's cost at a few partitions'.
CANDIDATES_PER_ROW = 4
MIN_CANDIDATES = 2**17
# The tree's draws behind those candidates: up to this many per candidate, while their distinct
# rows number no more than the candidates (distinct_draws). Adult's 9 attributes (add/remove,
# seeds 0–2), up to 1 / 4 / 8 / 32 draws per candidate: ε = 1 Q1 11.16 / 11.17 / 11.31 / 11.23,
# Q2 6.47 / 6.52 / 6.51 / 6.53, Q3 95 % 1.159 / 1.140 / 1.135 / 1.138; ε = 0.5 (1 / 4 / 8) Q2
# 9.46 / 9.53 / 9.56, Q3 1.399 / 1.388 / 1.387 (130,244 draws hold 26,845 distinct rows, 1 M
# draws 99,289). On its 15 attributes the draws are nearly all distinct: the candidates stay.
# Once the value moves (postprocess.balance.settle_values) carry the estimate's triples into the
# rows, more draws pay: 4 / 16 per candidate, ε = 1, Q3 95 % of the weighted counts 1.108 /
# 1.098 and of the rows 1.105 / 1.095 (Q2 6.43 / 6.40, Q2 max 99.0 / 96.7); the fit then takes
# 3.3 instead of 1.2 CPU s (about 100 k distinct candidates instead of 66 k).
MAX_DRAWS_PER_ROW = 16
# Up to this many draws per candidate where the partitions make no value moves (releases of more
# than MOVE_PARTITIONS partitions): the sampler's choice before the moves (above). With 16 a
# 1 M-row release of Adult's 9 attributes took 10.6 s (18.0 CPU s) against 7.2 s (11.2) before
# (benchmarks.peers --data adult-1M.csv, quiet machine): four estimates' larger fits.
UNSETTLED_DRAWS_PER_ROW = 4
# Candidates per partition row where the resample is not balanced (balance_groups: wide
# schemas), up to MIN_CANDIDATES. Tables measured beyond the tree (a tree plan's refinement,
# every pair of an all-pairs plan) close cycles the tree's draws do not hold, so raking to them
# concentrates the weights: 45-column wide Adult, ε = 1, seed 0, raked / fitted effective rows
# 11,888 / 9,120 of 12,000 for the tree alone, 7,444 / 5,941 with 2 refined tables. Generated
# tables (benchmarks/wide.py, ε = 1, add/remove, seeds 0–2), 1 → 2 per row: m = 30 (all pairs)
# Q2 / Q3 95 % 26.65 / 11.31 → 25.99 / 10.83; 4 per row lost on wide Adult (Q2 95 % 9.61 →
# 10.15, Q3 1.71 → 1.86; docs/method.md).
UNBALANCED_CANDIDATES_PER_ROW = 2


def measured_queries(schema: Schema,
                     pairs: list[tuple[int, int]] | None = None) -> list[tuple[int, ...]]:
    """Every attribute alone, then every pair (or the ``pairs`` given, i < j, sorted), in the
    order of dp_dask.data.counts.query_vector."""
    if pairs is None:
        pairs = [(i, j) for i, j, _, _ in attribute_pairs(schema)]
    return [(a,) for a in range(schema.m)] + sorted(pairs)


def budget_shares(schema: Schema, queries: list[tuple[int, ...]], fine: tuple[int, ...] = (),
                  fine_share: float = FINE_SHARE, table_share: float | None = None
                  ) -> np.ndarray:
    """Each query's share of ρ, then each fine histogram's (of the attributes ``fine``):
    ``fine_share`` to the fine histograms when there are any, ∝ cells^(1/3); of the rest
    ONE_WAY_SHARE to the histograms (all of it when there is no table), ``table_share`` to the
    tables (default: the rest; less when a selection spends some), each ∝ cells^(1/3). A
    function of the public schema only."""
    weights = np.array([np.prod(schema.sizes[list(q)]) for q in queries],
                       dtype=np.float64) ** CELLS_EXPONENT
    one_way = np.array([len(q) == 1 for q in queries])
    share = ONE_WAY_SHARE if (~one_way).any() else 1.0
    tables = 1 - share if table_share is None else table_share
    coarse = 1.0 - fine_share if fine else 1.0
    fine_weights = np.array([len(schema.attributes[a].fine) - 1 for a in fine],
                            dtype=np.float64) ** CELLS_EXPONENT
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
                tables: str = "auto"
                ) -> tuple[list[Measurement], dict[int, Measurement], TreeChoice | None]:
    """One Gaussian measurement per query, and per fine histogram (``fine``: attribute → its
    exact fine histogram), charges summing to at most ``rho`` (:func:`budget_shares`).

    The 1-way histograms are measured first; then, from them and public quantities, whether the
    schema is too wide for all pairs (:mod:`dp_dask.methods.selection`): if so, the histograms
    are measured again up to TREE_ONE_WAY_SHARE of ρ (the two averaged by inverse variance), a
    spanning tree of pairs is selected under DP with SELECTION_SHARE of ρ and only its tables
    measured, then a few more tables chosen against the tree's model and measured with
    REFINE_SHARE (:func:`~dp_dask.methods.selection.refine`), else every pair; ``tables``
    "all" or "tree" overrides the choice (:data:`TABLES`). The third value is the tree's record
    (None: all pairs).

    A fine histogram has a table's L2 sensitivity: replacing a row moves at most two cells by 1
    (a row of an extra bin is in no cell), adding or removing one moves one.

    Measurements of one noise scale (same share of ρ) are drawn as one measurement of their
    concatenation, L2 sensitivity √k times one query's for k queries: the same charge as k
    separate ones, and one OpenDP call instead of k; the scales' draws run side by side
    (privacy.noise.gaussian_measurements). The only step that reads exact counts; it returns
    noisy ones: the queries' in query order, the fine histograms' by attribute.
    """
    sensitivity = TABLE_L2_SENSITIVITY[check_neighbours(neighbours)]
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

    shares = budget_shares(schema, all_pairs, grids, share_of_fine)
    first = draw(one_way, shares[:schema.m])
    rows = (rows_counted(counts, schema) if neighbours == "replace"
            else estimated_rows(first))  # under add/remove n is private: its noisy estimate
    coarse = 1.0 - share_of_fine if grids else 1.0
    noise = all_pairs_noise(schema, rows, rho * coarse * (1 - ONE_WAY_SHARE), sensitivity,
                            accountant, CELLS_EXPONENT)
    tree = None
    if schema.m > 2 and check_tables(tables) != "all" and (tables == "tree"
                                                         or tree_wanted(noise)):
        top_up = draw(one_way, shares[:schema.m] * (TREE_ONE_WAY_SHARE / ONE_WAY_SHARE - 1))
        first = adaptive.merged(first + top_up)
        tree = select_tree(counts, schema, [m.values for m in first], rows,
                           rho * coarse * SELECTION_SHARE, sensitivity**2, accountant,
                           noise=noise, sampler=sampler, rng=rng)
        queries = measured_queries(schema, tree.pairs)
        shares = budget_shares(schema, queries, grids, share_of_fine,
                               table_share=1 - TREE_ONE_WAY_SHARE - SELECTION_SHARE - REFINE_SHARE)
    else:
        queries = all_pairs
    rest = draw([*queries[schema.m:], *(("fine", a) for a in grids)], shares[schema.m:])
    measured = first + rest[:len(queries) - schema.m]
    if tree is not None:
        measured, refinement = refine(counts, schema, measured, rows, rho * coarse * REFINE_SHARE,
                                      sensitivity, accountant, sampler=sampler, rng=rng)
        tree = replace(tree, refinement=refinement)
    return measured, {a: Measurement((a,), m.values, m.sigma)
                      for a, m in zip(grids, rest[len(queries) - schema.m:])}, tree


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
    method: ClassVar[str] = "marginals"

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
        queries = [tuple(q["attributes"]) for q in document["measurements"]]
        rest = queries[schema.m:]  # the one-shot pairs, then the adaptive rounds' marginals
        pairs = [q for q in rest if len(q) == 2]
        if queries[:schema.m] != measured_queries(schema, []) or len(set(rest)) != len(rest) or any(
                len(q) not in (2, 3) or list(q) != sorted(set(q)) or q[0] < 0 or q[-1] >= schema.m
                for q in rest):
            raise ModelError(f"model {path}/model.json: its measurements are not those of its "
                             "schema: fit again")
        shapes = {f"one_way_{a}": (s,) for a, s in enumerate(sizes)}
        shapes |= {f"two_way_{i}_{j}": (sizes[i], sizes[j]) for i, j in pairs}
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
        two_way = {(i, j): arrays[f"two_way_{i}_{j}"] for i, j in pairs}
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


def raked_start(model: MarginalModel, rows: int, rng: np.random.Generator,
                draws_per_row: int = MAX_DRAWS_PER_ROW) -> tuple[np.ndarray, np.ndarray]:
    """The default start: the tree's rows (up to ``draws_per_row`` draws per candidate,
    :func:`distinct_draws`), weighted towards every consistent 2-way table by raking
    (dp_dask.postprocess.raking). benchmarks/starts.py measures it against others."""
    candidates, counts, draws = distinct_draws(model, rows, rng, draws_per_row)
    scale = rows / model.n_rows
    weights, _ = rake(candidates, {pair: table * scale
                                   for pair, table in model.marginals.two_way.items()},
                      model.schema.sizes, rng, start=counts * (rows / draws))
    return candidates, weights


def distinct_draws(model: MarginalModel, rows: int, rng: np.random.Generator,
                   draws_per_row: int = MAX_DRAWS_PER_ROW) -> tuple[np.ndarray, np.ndarray, int]:
    """The tree's draws as distinct rows (sorted) and their counts, and the draws made: the
    most draws, ``rows`` doubled up to ``draws_per_row`` times, whose distinct rows number at
    most ``rows``. Raking and the weight fit treat equal rows alike (a row's step depends on
    its cells only), so k equal candidates of weight w and one of weight k·w give the same
    estimate: more draws cover more of the joint at the fit's cost of ``rows`` candidates."""
    draws = rows
    candidates, counts = _distinct(tree_start(model, rows, rng)[0])
    # every draw distinct (wide schemas): twice the draws would almost surely hold more than
    # ``rows`` distinct rows: not drawn and sorted only to be thrown away
    while draws < draws_per_row * rows and len(candidates) < rows:
        more, more_counts = _distinct(tree_start(model, 2 * draws, rng)[0])
        if len(more) > rows:
            break
        candidates, counts, draws = more, more_counts, 2 * draws
    return candidates, counts, draws


def _distinct(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of ``codes`` (C order, sorted) and how often each occurs."""
    whole = np.ascontiguousarray(codes).view(np.dtype((np.void, codes.shape[1] * codes.itemsize)))
    _, first, counts = np.unique(whole.ravel(), return_index=True, return_counts=True)
    return np.ascontiguousarray(codes[first]), counts.astype(np.float64)


# (model, rows, rng) -> candidate codes (k, m), row-major, in the narrowest unsigned dtype of the
# schema, and a weight per candidate, summing to about ``rows``.
Start = Callable[[MarginalModel, int, np.random.Generator], tuple[np.ndarray, np.ndarray]]


def balance_groups(schema: Schema) -> tuple[tuple[int, ...], ...]:
    """The tables a partition's resample is balanced on: every triple while
    ``adaptive.default_workload`` holds them, else none (a plain resample). Balancing on pairs
    bought nothing measurable (Adult 9, ε = 1, seed 0: 3-way error 1.170 against the plain
    resample's 1.174) and cost the DSS shape's 351 pairs more than the rest of a partition
    (sampling + write 24 → 101 s)."""
    groups = adaptive.default_workload(schema)
    return groups if groups and len(groups[0]) == 3 else ()


@dataclass(frozen=True)
class WeightedRows:
    """The estimate of the joint distribution a release's partitions share: candidate rows
    (k, m), their fitted weights, the weighted 1-way and 2-way counts the row updates aim at
    (unrounded; each partition rounds them to its rows), and the weighted tables of the groups
    a partition's resample is balanced on (``balanced``: :func:`balance_groups`),
    concatenated."""

    codes: np.ndarray
    weights: np.ndarray
    one_way: tuple[np.ndarray, ...]
    two_way: dict[tuple[int, int], np.ndarray]
    balanced: tuple[tuple[int, ...], ...]
    balanced_tables: np.ndarray

    @classmethod
    def of(cls, codes: np.ndarray, weights: np.ndarray, model: MarginalModel) -> WeightedRows:
        sizes, m = model.schema.sizes, model.schema.m
        groups = balance_groups(model.schema)
        pairs = list(model.marginals.two_way)
        tables = table_sums(codes, [(a,) for a in range(m)] + pairs, sizes, weights)
        return cls(codes, weights, tuple(tables[:m]), dict(zip(pairs, tables[m:])),
                   groups, weighted_tables(codes, weights, groups, sizes))

    @property
    def pair_tables(self) -> np.ndarray:
        """The weighted 2-way tables of ``two_way``, concatenated in its order: the pairs a
        partition's value moves keep near (postprocess.balance.PAIR_SLACK)."""
        return np.concatenate([np.zeros(0), *self.two_way.values()])


def one_way_targets(consistent: tuple[np.ndarray, ...], fitted: tuple[np.ndarray, ...],
                    rows: int) -> list[np.ndarray]:
    """The 1-way counts a partition's rows end on: the mean of the consistent estimates' and the
    fitted weights' distributions. The consistent estimates are better on large domains, where
    the fit's candidate rows cover rare values poorly (Q1 17.0 vs 24.0 on the stand-in of
    benchmarks/one_way.py); the fitted margins on Adult, where non-negative 2-way tables inform
    them (Q1 15.3 vs 16.5, replace-one, 3 seeds). The mean: 18.3 and 15.6 (docs/method.md)."""
    return [round_to_total(c / c.sum() + f / f.sum(), rows) for c, f in zip(consistent, fitted)]


@dataclass(frozen=True)
class Aims:
    """What a partition of ``rows`` rows aims at: the 2-way targets of its row updates (None
    where it makes none), its 1-way counts and the cells moved rows may enter. Functions of the
    model, the estimate and ``rows`` alone, so a release computes them once per estimate for its
    partitions' size instead of once per partition (DSS: 351 tables rounded twice, 0.035 CPU s
    of a partition's 0.085 s of draws)."""

    rows: int
    two_way: dict[tuple[int, int], np.ndarray] | None
    one_way: list[np.ndarray]
    possible: dict[tuple[int, int], np.ndarray]


@dataclass(frozen=True)
class MarginalSampler:
    """Draws one output partition: weighted candidates (the raked tree), their weights fitted
    to the measurements, a resample balanced and settled on their weighted triples
    (postprocess.balance), row updates towards the weighted tables, exact 1-way counts unless
    the settled rows are kept as they are (:meth:`_draw`). With ``fit_iterations`` 0 the
    updates aim at the consistent marginals instead: the sampler before the fit, faster on wide
    schemas (docs/benchmarks.md).

    ``shared``: the weighted candidates of :meth:`for_release`, drawn and fitted once for the
    partitions of a release that read them; without them each :meth:`draw` makes its own.
    """

    model: MarginalModel
    start: Start = raked_start
    fit_iterations: int = FIT_ITERATIONS
    shared: WeightedRows | None = None
    # False where the release's trial partition kept no row-update sweep (:meth:`for_release`)
    updates: bool = True
    # the aims of the release's partitions, computed once per estimate (:meth:`for_release`)
    aims: Aims | None = None
    # whether partitions make value moves (postprocess.balance.settle_values): not in releases
    # of more than MOVE_PARTITIONS partitions (:meth:`for_release`)
    value_moves: bool = True

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

    def candidate_rows(self, rows: int) -> int:
        """Candidates an estimate for partitions of up to ``rows`` rows draws: CANDIDATES_PER_ROW
        per measured row up to MIN_CANDIDATES, or ``rows`` if more; ``rows`` where the resample
        is not balanced (:func:`balance_groups`: wide schemas), as the extra candidates serve the
        triples the balance rounds — without it they cost the 45-column wide table Q2 95 % 10.1
        → 10.7 and Q3 1.8 → 2.0 (ε = 1, add/remove, seeds 0–2; docs/results-adult.md), but
        UNBALANCED_CANDIDATES_PER_ROW per row pay there, up to half MIN_CANDIDATES: larger
        partitions keep one per row (the DSS shape's 100 k-row partitions took 22.2 s end to end
        with 2 per row up to MIN_CANDIDATES, against 19.0 s; their errors were not measured)."""
        if not balance_groups(self.schema):
            return max(rows, min(UNBALANCED_CANDIDATES_PER_ROW * rows, MIN_CANDIDATES // 2))
        return max(rows, min(CANDIDATES_PER_ROW * self.model.n_rows, MIN_CANDIDATES))

    def estimates(self, sizes: list[int]) -> int:
        """Independent estimates for a release of partitions ``sizes``: enough candidates to
        stand for the measured rows, one estimate per partition at most, MAX_ESTIMATES."""
        return max(1, min(len(sizes), MAX_ESTIMATES,
                          math.ceil(self.model.n_rows / self.candidate_rows(max(sizes)))))

    def for_release(self, rows: int, seed: np.random.SeedSequence,
                    release_rows: int | None = None) -> MarginalSampler:
        """This sampler with weighted candidates for partitions of up to ``rows`` rows, drawn
        once from ``seed``: the start and the fit are the same estimate of the joint for every
        partition, so one release makes them once instead of once per partition (on the DSS
        shape they were two thirds of a partition's time: docs/benchmarks.md).

        A trial partition drawn from them (the same generator, after the candidates) decides
        whether the partitions make row updates at all: where the trial kept no sweep (each
        raised the rows' excess over their targets, as on Adult and the DSS shape), every
        partition, a resample of the same candidates, would throw its sweeps away too.

        A release of ``release_rows`` rows makes value moves only where it is at most
        MOVE_PARTITIONS partitions of ``rows``; otherwise its estimates draw fewer candidates
        (:meth:`_start_for`)."""
        moves = release_rows is None or release_rows <= MOVE_PARTITIONS * rows
        sampler = replace(self, start=self._start_for(moves))
        rng = np.random.default_rng(seed)
        candidates, weights = sampler.weighted_candidates(sampler.candidate_rows(rows), rng)
        shared = replace(sampler, shared=WeightedRows.of(candidates, weights, self.model))
        shared = replace(shared, aims=shared._aims(rows, shared.shared))
        updates = shared._draw(rows, rng, value_moves=False)[1]
        # without updates the partitions need no 2-way targets: not sent to their tasks
        return replace(shared, updates=updates, value_moves=moves,
                       aims=shared.aims if updates else replace(shared.aims, two_way=None))

    def _start_for(self, moves: bool) -> Start:
        """A release's start: the default one draws up to UNSETTLED_DRAWS_PER_ROW per candidate
        where the partitions make no value moves."""
        if moves or self.start is not raked_start:
            return self.start
        return functools.partial(raked_start, draws_per_row=UNSETTLED_DRAWS_PER_ROW)

    def draw(self, rows: int, seed: np.random.SeedSequence) -> tuple[np.ndarray, np.ndarray]:
        """Binary dummies (rows, d) uint8 and codes (rows, m) int16 of one partition, its
        1-way and 2-way counts close to those of the weighted candidates."""
        codes = self.draw_codes(rows, seed)
        return one_hot(codes, self.schema), codes.astype(np.int16)

    def draw_codes(self, rows: int, seed: np.random.SeedSequence,
                   cpu: dict[str, float] | None = None) -> np.ndarray:
        """The codes (rows, m) of :meth:`draw`, in the narrowest unsigned dtype; ``cpu``
        collects each step's CPU seconds (benchmarks/stages.py)."""
        return self._draw(rows, np.random.default_rng(seed), cpu)[0]

    def _draw(self, rows: int, rng: np.random.Generator, cpu: dict[str, float] | None = None,
              value_moves: bool = True) -> tuple[np.ndarray, bool]:
        """A partition's codes, and whether its row updates kept a sweep. The trial partition
        of :meth:`for_release` makes no value moves (``value_moves``): they cost as much as the
        rest of a partition, and its rows only decide whether row updates are kept."""
        model, sizes = self.model, self.schema.sizes
        with timed(None, "estimate", cpu):
            fitted = self.shared if self.shared is not None else WeightedRows.of(
                *self.weighted_candidates(self.candidate_rows(rows), rng), model)
        moves = value_moves and self.value_moves
        with timed(None, "resample", cpu):
            # the pairs' tables only where they are read: every table of a wide schema otherwise
            codes = balanced_resample(fitted.codes, fitted.weights, rows, fitted.balanced, sizes,
                                      rng, estimate=fitted.balanced_tables,
                                      pairs=list(fitted.two_way) if moves else (),
                                      pair_estimate=fitted.pair_tables if moves else None,
                                      value_moves=moves)
        with timed(None, "targets", cpu):
            cached = self.aims is not None and self.aims.rows == rows and (
                self.aims.two_way is not None or not self.updates)
            aims = self.aims if cached else self._aims(rows, fitted)
        kept = False
        if self.updates:
            with timed(None, "row_updates", cpu):
                start = codes.copy()
                sweeps = update_rows(codes, aims.two_way, sizes, rng, possible=aims.possible)
                kept = not np.array_equal(start, codes)
            if cpu is not None:
                cpu["sweeps"] = sweeps
        # Rows settled on the fit's triples (value moves, no update kept) keep their own 1-way
        # counts, close to the fit's: matching them to the targets moved values that undid the
        # settling (Adult 9, add/remove, ε = 1, seeds 0–2: Q3 95 % 1.095 → 1.101, Q1 10.91 →
        # 11.18, Q2 6.40 → 6.44).
        settled = moves and bool(fitted.balanced) and self.fit_iterations > 0
        if kept or not settled:
            with timed(None, "match_one_way", cpu):
                match_one_way(codes, aims.one_way, sizes, rng, aims.possible)
        return codes, kept

    def _aims(self, rows: int, fitted: WeightedRows) -> Aims:
        """A partition's :class:`Aims`: the 2-way targets only where it makes row updates."""
        model, sizes = self.model, self.schema.sizes
        consistent = {pair: round_to_total(table.ravel(), rows)
                      for pair, table in model.marginals.two_way.items()}
        if self.fit_iterations:
            targets = ({pair: round_to_total(counts, rows)
                        for pair, counts in fitted.two_way.items()} if self.updates else None)
            one_way = one_way_targets(model.marginals.one_way, fitted.one_way, rows)
        else:
            targets = consistent
            one_way = [round_to_total(v, rows) for v in model.marginals.one_way]
        # The guard reads the consistent tables: their likely empty cells are pulled to zero.
        scale = rows / model.n_rows
        floors = {m.attributes: EMPTY_WITHIN_SIGMAS * m.sigma * scale
                  for m in model.measurements if len(m.attributes) == 2}
        return Aims(rows, targets, one_way, possible_cells(consistent, sizes, floors))


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
    fine = fine or {}
    layouts = {a: fine_layout(schema.attributes[a]) for a in fine}
    # A fine histogram's bin sums measure its attribute's histogram too.
    sums = {a: fine_bin_sums(measured, layouts[a].first, layouts[a].measured.start,
                             schema.sizes[a]) for a, measured in fine.items()}
    first = consistent_marginals(measurements, schema.sizes, n_rows, extra=sums)
    prior = implied_tables(first, *spanning_tree(first, schema.m))
    marginals = consistent_marginals(measurements, schema.sizes, n_rows, prior, empty_cells=True,
                                     extra=sums)
    order, parents = spanning_tree(marginals, schema.m)
    sigmas = {"one_way": [m.sigma for m in measurements if len(m.attributes) == 1],
              "two_way": [m.sigma for m in measurements if len(m.attributes) == 2]}
    if any(len(m.attributes) == 3 for m in measurements):  # the adaptive rounds'
        sigmas["three_way"] = [m.sigma for m in measurements if len(m.attributes) == 3]
    consistent = {a: consistent_fine(measured.values, layouts[a].first, layouts[a].measured.start,
                                     marginals.one_way[a]) for a, measured in fine.items()}
    tree = "tables" in (metadata or {}).get("privacy", {})  # the tree plan's shares
    shares = (f"{TREE_ONE_WAY_SHARE if tree else ONE_WAY_SHARE:g} of rho to the histograms, "
              + (f"{SELECTION_SHARE:.6g} to the tree's selection, {REFINE_SHARE:.6g} to "
                 "tables chosen against the tree, " if tree else "")
              + f"the rest to the tables, each in proportion to cells^{CELLS_EXPONENT:.4g}")
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


class MarginalSynthesizer(Synthesizer):
    """Consistent noisy 1- and 2-way marginals, then rows updated to match them (the default).

    See dp_dask/methods/marginals.py. Extra parameters: ``accountant``, "exact" (the Gaussian
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
    spending ``adaptive_share`` of ρ (dp_dask/methods/adaptive.py); ``workload``, the column
    groups (1 to 3 columns, ``"*"`` for any other column) whose marginals matter, which the
    rounds' selection favours (default: every triple). With rounds the release is accounted in
    zCDP (the default ``accountant`` None: "zcdp" with rounds, "exact" without).
    """

    name = "marginals"
    fine_grids = True

    def __init__(self, schema: Schema | str | Path, *, accountant: str | None = None,
                 fit_iterations: int | None = None, neighbours: str = "replace",
                 fine_share: float = FINE_SHARE, tables: str = "auto",
                 rounds: int | None = None, adaptive_share: float = adaptive.ADAPTIVE_SHARE,
                 workload: list[Any] | None = None, **common: Any) -> None:
        super().__init__(schema, **common)
        self.tables = check_tables(tables)
        self.fine_share = check_fine_share(fine_share)
        self.fit_iterations = check_iterations(fit_iterations)
        self.neighbours = check_neighbours(neighbours)
        self.workload = adaptive.check_workload(self.schema, workload)
        self.adaptive_share = adaptive.check_share(adaptive_share)
        rounds = adaptive.check_rounds(rounds)
        self.rounds = (rounds if rounds is not None else
                       adaptive.rounds_for(self.schema) if self.workload else 0)
        if self.rounds and accountant == "exact":
            raise ValueError("the adaptive rounds' selection is accounted in zCDP: use "
                             "accountant='zcdp', or rounds=0 for the exact accountant")
        self.accountant = accountant or ("zcdp" if self.rounds else "exact")
        self.candidates = adaptive.candidates(self.schema, self.workload) if self.rounds else {}

    @property
    def rows_public(self) -> bool:
        return self.neighbours == "replace"

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
        if self.rows_public:
            return plan
        rho = replace_one_rho(plan["rho"], self._selections(plan["rho"]))
        return {**plan, "rho": rho, "epsilon": epsilon_spent(rho, self.delta, self.accountant)}

    @property
    def _tree_possible(self) -> bool:
        return self.schema.m > 2 and self.tables != "all"

    def _selections(self, rho: float) -> list[tuple[Selection, int]]:
        """The exponential-mechanism steps the release may take, calibrated to add/remove
        scores, from public inputs: a tree plan's unless ``tables`` is "all" (or m ≤ 2); under
        "auto" the tree is chosen after the noisy n, so its steps are counted whichever plan
        the noise picks (the charge must hold for both); then the adaptive rounds'."""
        rounds = adaptive.RoundPlan(self.rounds, self.adaptive_share, rho)
        steps = []
        if self._tree_possible:
            coarse = 1.0 - self.fine_share if self.schema.fine_grids else 1.0
            steps += tree_plan_selections(self.schema, rounds.rho_one_shot * coarse,
                                          TABLE_L2_SENSITIVITY["add_remove"], self.accountant)
        if rounds.rounds:
            steps.append((rounds.selection(adaptive.SCORE_L1_SENSITIVITY["add_remove"]),
                          rounds.rounds))
        return steps

    def _count_graph(self, ddf: dd.DataFrame) -> Delayed:
        """The d×d count matrix and the exact fine histograms (and, with rounds, the exact
        counts of the candidate triples), in one pass."""
        if self.rounds:
            return adaptive.count_graph(ddf, self.schema, adaptive.triples_of(self.candidates))
        return fine_count_graph(ddf, self.schema)

    def _rows_counted(self, exact: tuple[np.ndarray, np.ndarray]) -> int:
        return rows_counted(exact[0], self.schema)

    def _fit_counts(self, exact: tuple[np.ndarray, ...], n_rows: int,
                    metadata: dict[str, Any]) -> MarginalModel:
        rho = self._privacy_plan()["rho"]
        rng = None if self.noise_seed is None else np.random.default_rng(self.noise_seed)
        counts, fine_counts = exact[:2]
        rounds = adaptive.RoundPlan(self.rounds, self.adaptive_share, rho)
        with timed(self.timings_, "noise"):
            measurements, fine, tree = measure_all(
                counts, split_fine(fine_counts, self.schema), self.schema, rounds.rho_one_shot,
                accountant=self.accountant, sampler=self.noise_sampler, rng=rng,
                neighbours=self.neighbours, fine_share=self.fine_share, tables=self.tables)
        as_replace_one = {}
        if not self.rows_public:  # the exact n stops here: only its noisy estimate goes on
            n_rows = metadata["n_rows"] = estimated_rows(measurements)
            plan = self._ledger_plan()
            as_replace_one = {"replace_one_row": {"epsilon": plan["epsilon"], "rho": plan["rho"]}}
        # the one-shot measurements (a tree plan's histograms were drawn twice, then merged)
        k = len(measurements) + (self.schema.m if tree is not None else 0)
        adaptive_record = {}
        if rounds.rounds:
            with timed(self.timings_, "adaptive_rounds"):
                measurements, adaptive_record = self._rounds(
                    measurements, exact, rounds, n_rows, rng)
        sensitivity = TABLE_L2_SENSITIVITY[self.neighbours]
        which = "every 1-way histogram and 2-way table"
        histograms = f"{ONE_WAY_SHARE:g} to the histograms"
        tables = "the rest to the tables"
        if tree is not None:
            refined = tree.refinement
            which = (f"every 1-way histogram twice, the {len(tree.pairs)} 2-way tables of a "
                     f"tree and {len(refined.pairs)} more chosen against it")
            histograms = (f"{TREE_ONE_WAY_SHARE:g} to the histograms ({ONE_WAY_SHARE:g} before "
                          "the plan was chosen, the rest after; the two averaged by inverse "
                          "variance)")
            tables = (f"{SELECTION_SHARE:.6g} to the tree's selection ({tree.rounds} "
                      f"exponential-mechanism rounds of rho {tree.selection.rho:.6g}), "
                      f"{REFINE_SHARE:.6g} to {len(refined.pairs)} refinement rounds (each an "
                      f"exponential-mechanism selection of rho {refined.selection.rho:.6g} and "
                      f"a table measured with rho {refined.rho_measure:.6g}), the rest to the "
                      "tree's tables")
        split = (f"{k} Gaussian measurements ({which}, L2 "
                 f"sensitivity {sensitivity:.6g} each) sharing rho = {rounds.rho_one_shot:.6g}: "
                 f"{histograms}, {tables}, each in "
                 f"proportion to cells^(1/3)")
        fine_record = {}
        if fine:
            names = [self.schema.names[a] for a in sorted(fine)]
            split = (f"{k + len(fine)} Gaussian measurements sharing rho = "
                     f"{rounds.rho_one_shot:.6g}: "
                     f"{self.fine_share:g} of it to the fine histograms of {', '.join(names)} "
                     f"(L2 sensitivity {sensitivity:.6g} each), in proportion to cells^(1/3); "
                     f"the rest to {k} measurements ({which}, "
                     f"L2 sensitivity {sensitivity:.6g} each), of it {histograms}, {tables}, "
                     "each in proportion to cells^(1/3)")
            fine_record = {"fine_share": self.fine_share, "fine_histograms": {
                self.schema.names[a]: {"cells": len(m.values), "sigma": m.sigma}
                for a, m in sorted(fine.items())}}
        if rounds.rounds:
            split += (f"; then {rounds.rounds} adaptive rounds sharing rho = "
                      f"{rounds.rho_rounds:.6g} ({rounds.share:g} of the budget), each "
                      f"{rounds.rho_select:.6g} to an exponential-mechanism selection and "
                      f"{rounds.rho_measure:.6g} to a Gaussian measurement of the marginal "
                      "selected (privacy.adaptive)")
        if as_replace_one:
            charged = as_replace_one["replace_one_row"]["rho"]
            split += (f"; rho {charged:.6g} as replace one row (the ledger's notion): the "
                      "Gaussian measurements at twice their rho, each exponential-mechanism "
                      "selection at twice its score sensitivity (4 times its rho in zCDP)"
                      + ("; a tree's selections included, which tables='auto' may choose after "
                         "the noisy n" if tree is None and self._tree_possible else ""))
        metadata |= {
            "method": "marginals: consistent noisy 1-/2-way marginals + row updates",
            "privacy": self._privacy_record(
                mechanism="gaussian", accountant=self.accountant, rho=rho, k=k,
                neighbouring=NEIGHBOURING[self.neighbours], **as_replace_one,
                **({"tables": tree.to_json(self.schema)} if tree is not None else {}),
                budget_split=f"{split}; the {self.accountant} accountant gives "
                f"({self.epsilon:g}, {self.delta:g})-DP", **fine_record,
                **({"adaptive": adaptive_record} if adaptive_record else {}),
                post_processing="consistent marginals (inverse-variance 1-way estimates, "
                "tables shrunk towards independence and fitted to them); rows sampled from a "
                "spanning tree, weighted to fit the noisy measurements and updated towards the "
                "tables" + ("; each fine histogram projected, bin by bin, onto the "
                            "consistent 1-way marginal's count" if fine else "")),
        }
        with timed(self.timings_, "consistency"):
            return fit_marginals(measurements, self.schema, n_rows, metadata,
                                 fit_iterations=self.fit_iterations, fine=fine,
                                 fine_share=self.fine_share)

    def _rounds(self, measurements: list[Measurement], exact: tuple[np.ndarray, ...],
                plan: adaptive.RoundPlan, n_rows: int, rng: np.random.Generator | None
                ) -> tuple[list[Measurement], dict[str, Any]]:
        """The adaptive rounds (methods.adaptive) on the estimate the one-shot measurements
        give: the measurements to fit, repeats merged, and the rounds' record."""
        first = fit_marginals(measurements, self.schema, n_rows,
                              fit_iterations=self.fit_iterations)
        rows = min(n_rows, adaptive.ESTIMATE_ROWS)
        # the estimate's draws are post-processing: seeded with the noise, else OS entropy
        codes, weights = first.sampler().weighted_candidates(rows, np.random.default_rng(
            None if self.noise_seed is None else [self.noise_seed, 45]))
        answers = adaptive.exact_answers(exact[0], exact[2], self.schema, self.candidates)
        measured, record = adaptive.run_rounds(
            codes, weights * (n_rows / rows), measurements, answers, self.candidates, plan,
            self.schema, neighbours=self.neighbours, sampler=self.noise_sampler, rng=rng)
        return adaptive.merged(measured), {
            "rounds": plan.rounds, "share": plan.share, "rho": plan.rho_rounds,
            "rho_one_shot": plan.rho_one_shot,
            "workload": ([[self.schema.names[a] for a in g] for g in self.workload]
                         if self.workload else "default: every triple of at most "
                         f"{adaptive.MAX_CELLS} cells (every pair past "
                         f"{adaptive.MAX_TRIPLES} triples)"),
            "candidates": len(self.candidates),
            "selection": "exponential mechanism (OpenDP make_noisy_max, Gumbel, zCDP "
                         "eps^2/8); score w*(L1 error of the current estimate - "
                         "sqrt(2/pi)*sigma*cells), L-inf sensitivity "
                         f"{adaptive.SCORE_L1_SENSITIVITY[self.neighbours]:g}*max w",
            "measured": record}

    @staticmethod
    def load_model(path: Location, document: dict[str, Any],
                   storage_options: dict[str, Any] | None = None) -> MarginalModel:
        return MarginalModel.from_files(path, document, storage_options)
