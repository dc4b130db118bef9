"""The marginals method's sampler: one output partition from the model."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from dp_dask.copula.sample import single_threaded_blas
from dp_dask.data.cells import table_sums
from dp_dask.data.constraints import satisfied
from dp_dask.data.schema import Schema
from dp_dask.data.tables import one_hot, round_to_total
from dp_dask.methods.marginals import adaptive
from dp_dask.methods.marginals.config import DEFAULTS, MarginalsConfig
from dp_dask.methods.marginals.fitted import FittedMarginals
from dp_dask.postprocess.balance import balanced_resample, weighted_tables
from dp_dask.postprocess.config import RakingConfig, ReweightConfig
from dp_dask.postprocess.consistency import (
    Measurement,
)
from dp_dask.postprocess.raking import rake
from dp_dask.postprocess.reweight import fit_weights
from dp_dask.postprocess.rowupdate import (
    match_one_way,
    possible_cells,
    sample_tree,
    update_rows,
)
from dp_dask.timing import timed


def tree_start(model: FittedMarginals, rows: int,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Codes drawn down the spanning tree, its root and parent→child counts equal to their
    targets up to rounding; every row of weight 1."""
    return sample_tree(model.marginals, model.order, model.parents, rows, rng), np.ones(rows)


def raked_start(model: FittedMarginals, rows: int, rng: np.random.Generator,
                draws_per_row: int = DEFAULTS.max_draws_per_row,
                raking: RakingConfig = DEFAULTS.raking) -> tuple[np.ndarray, np.ndarray]:
    """The default start: the tree's rows (up to ``draws_per_row`` draws per candidate,
    :func:`distinct_draws`), weighted towards every consistent 2-way table by raking
    (dp_dask.postprocess.raking, stopped by ``raking``). benchmarks/starts.py measures it
    against others."""
    candidates, counts, draws = distinct_draws(model, rows, rng, draws_per_row)
    scale = rows / model.n_rows
    weights, _ = rake(candidates, {pair: table * scale
                                   for pair, table in model.marginals.two_way.items()},
                      model.schema.sizes, rng, start=counts * (rows / draws), config=raking)
    return candidates, weights


def distinct_draws(model: FittedMarginals, rows: int, rng: np.random.Generator,
                   draws_per_row: int = DEFAULTS.max_draws_per_row
                   ) -> tuple[np.ndarray, np.ndarray, int]:
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
Start = Callable[[FittedMarginals, int, np.random.Generator], tuple[np.ndarray, np.ndarray]]


def balance_groups(schema: Schema,
                   config: MarginalsConfig = DEFAULTS) -> tuple[tuple[int, ...], ...]:
    """The tables a partition's resample is balanced on: every triple while
    ``adaptive.default_workload`` holds them, else none (a plain resample). Balancing on pairs
    bought nothing measurable (Adult 9, ε = 1, seed 0: 3-way error 1.170 against the plain
    resample's 1.174) and cost the DSS shape's 351 pairs more than the rest of a partition
    (sampling + write 24 → 101 s)."""
    groups = adaptive.default_workload(schema, config)
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
    def of(cls, codes: np.ndarray, weights: np.ndarray, model: FittedMarginals,
           config: MarginalsConfig = DEFAULTS) -> WeightedRows:
        sizes, m = model.schema.sizes, model.schema.m
        groups = balance_groups(model.schema, config)
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


def _redraw_violations(codes: np.ndarray, fitted: WeightedRows, schema: Schema,
                       rng: np.random.Generator) -> None:
    """Rows the resample's moves left breaking a constraint, redrawn in place from the
    candidates (each satisfies every constraint) by their weights: every row released
    satisfies every constraint."""
    broken = np.flatnonzero(~satisfied(schema.constraints, codes))
    if len(broken):
        weights = np.maximum(fitted.weights, 0.0)
        codes[broken] = fitted.codes[rng.choice(len(weights), len(broken),
                                                p=weights / weights.sum())]


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
    ``config``: the tuned numbers (the model's, :meth:`~.model.MarginalModel.sampler`).
    """

    model: FittedMarginals
    start: Start = raked_start
    fit_iterations: int = ReweightConfig.fit_iterations
    shared: WeightedRows | None = None
    # False where the release's trial partition kept no row-update sweep (:meth:`for_release`)
    updates: bool = True
    # the aims of the release's partitions, computed once per estimate (:meth:`for_release`)
    aims: Aims | None = None
    # whether partitions make value moves (postprocess.balance.settle_values): not in releases
    # of more than ``move_partitions`` partitions (:meth:`for_release`)
    value_moves: bool = True
    config: MarginalsConfig = DEFAULTS

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
        candidates, weights = self._start_for(True)(self.model, rows, rng)
        if self.schema.constraints:  # only rows satisfying every constraint are candidates
            keep = satisfied(self.schema.constraints, candidates)
            if not keep.any():
                raise ValueError("the model drew no row satisfying the schema's constraints")
            candidates, weights = candidates[keep], weights[keep]
        scale = rows / self.model.n_rows
        scaled = [Measurement(m.attributes, m.values * scale, m.sigma * scale)
                  for m in self.model.measurements]
        with single_threaded_blas():  # the fit's dot products: rows independent of BLAS threads
            return candidates, fit_weights(candidates, scaled, self.schema.sizes, weights,
                                           iterations=self.fit_iterations,
                                           config=self.config.reweight)

    def candidate_rows(self, rows: int) -> int:
        """Candidates an estimate for partitions of up to ``rows`` rows draws:
        ``candidates_per_row`` per measured row up to ``min_candidates``, or ``rows`` if more;
        ``rows`` where the resample is not balanced (:func:`balance_groups`: wide schemas), as
        the extra candidates serve the triples the balance rounds — without it they cost the
        45-column wide table Q2 95 % 10.1 → 10.7 and Q3 1.8 → 2.0 (ε = 1, add/remove, seeds 0–2;
        docs/results-adult.md), but ``unbalanced_candidates_per_row`` per row pay there, up to
        half ``min_candidates``: larger partitions keep one per row (the DSS shape's 100 k-row
        partitions took 22.2 s end to end with 2 per row up to ``min_candidates``, against
        19.0 s; their errors were not measured)."""
        config = self.config
        if not balance_groups(self.schema, config):
            return max(rows, min(config.unbalanced_candidates_per_row * rows,
                                 config.min_candidates // 2))
        return max(rows, min(config.candidates_per_row * self.model.n_rows,
                             config.min_candidates))

    def estimates(self, sizes: list[int]) -> int:
        """Independent estimates for a release of partitions ``sizes``: enough candidates to
        stand for the measured rows, one estimate per partition at most, ``max_estimates``."""
        return max(1, min(len(sizes), self.config.max_estimates,
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
        ``move_partitions`` partitions of ``rows``; otherwise its estimates draw fewer candidates
        (:meth:`_start_for`)."""
        moves = release_rows is None or release_rows <= self.config.move_partitions * rows
        sampler = replace(self, start=self._start_for(moves))
        rng = np.random.default_rng(seed)
        candidates, weights = sampler.weighted_candidates(sampler.candidate_rows(rows), rng)
        shared = replace(sampler, shared=WeightedRows.of(candidates, weights, self.model,
                                                         self.config))
        shared = replace(shared, aims=shared._aims(rows, shared.shared))
        updates = shared._draw(rows, rng, value_moves=False)[1]
        # without updates the partitions need no 2-way targets: not sent to their tasks
        return replace(shared, updates=updates, value_moves=moves,
                       aims=shared.aims if updates else replace(shared.aims, two_way=None))

    def _start_for(self, moves: bool) -> Start:
        """A release's start: the default one draws up to ``max_draws_per_row`` per candidate,
        ``unsettled_draws_per_row`` where the partitions make no value moves."""
        if self.start is not raked_start:
            return self.start
        return functools.partial(raked_start, draws_per_row=(
            self.config.max_draws_per_row if moves else self.config.unsettled_draws_per_row),
            raking=self.config.raking)

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
                *self.weighted_candidates(self.candidate_rows(rows), rng), model, self.config)
        moves = value_moves and self.value_moves
        with timed(None, "resample", cpu):
            # the pairs' tables only where they are read: every table of a wide schema otherwise
            codes = balanced_resample(fitted.codes, fitted.weights, rows, fitted.balanced, sizes,
                                      rng, estimate=fitted.balanced_tables,
                                      pairs=list(fitted.two_way) if moves else (),
                                      pair_estimate=fitted.pair_tables if moves else None,
                                      value_moves=moves, config=self.config.balance)
        with timed(None, "targets", cpu):
            cached = self.aims is not None and self.aims.rows == rows and (
                self.aims.two_way is not None or not self.updates)
            aims = self.aims if cached else self._aims(rows, fitted)
        kept = False
        if self.updates:
            with timed(None, "row_updates", cpu):
                start = codes.copy()
                sweeps = update_rows(codes, aims.two_way, sizes, rng, possible=aims.possible,
                                     config=self.config.row_updates)
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
                match_one_way(codes, aims.one_way, sizes, rng, aims.possible,
                              config=self.config.row_updates)
        if self.schema.constraints:
            _redraw_violations(codes, fitted, self.schema, rng)
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
        floors = {m.attributes: self.config.empty_within_sigmas * m.sigma * scale
                  for m in model.measurements if len(m.attributes) == 2}
        return Aims(rows, targets, one_way, possible_cells(consistent, sizes, floors))
