"""The dense-joint path of ``cliques="auto"`` (the default; issues 59, 68): where the public
rule picks it (:mod:`.choice`), every triple is measured beside the 1-way histograms, the dense
joint is fitted to them all and the release samples its rows from it.

    decide    on a joint of at most ``max_clique_cells`` cells (public sizes,
              :func:`~.cliques.cliques_possible`), after the 1-way histograms (drawn the same
              either way), from public sizes, ρ, the notion and n̂ (:func:`model_choice`): the
              model each is expected to give the smaller 1-/2-/3-way error; elsewhere the
              release is ``cliques="pairs"``'s byte for byte. Post-processing, no charge. With
              adaptive rounds ``auto`` releases as ``pairs`` (their selection covers a
              workload; this path measures every triple)
    measure   the 1-way histograms (their usual share: drawn before the rule is decided, the
              same draws as under ``cliques="pairs"``), the fine histograms (theirs), the 1-way
              histograms again with the share of the rest the rule picks (merged with the first
              by inverse variance) and every triple, the rest of the one-shot ρ split ∝
              cells^(1/3), each at a table's L2 sensitivity (√2 replace-one, 1 add/remove, K
              times that under a privacy unit). No 2-way table: measured too (1-/2-/3-way ∝
              cells^(1/3)) the planted table's Q3 was 16.1, 13.6 without (numpy prototype,
              add/remove, 3 seeds; docs/tuning.md)
    fit       :func:`estimate_joint`: the joint on the simplex (times n̂) minimising
              Σ ‖A_c x − y_c‖²/σ_c² over the noisy tables by mirror descent with backtracking
              (private-pgm's estimate with one clique), the schema's structural zeros held at
              0; post-processing
    sample    :class:`JointSampler`: the release's rows laid out once from its seed, a
              systematic sample of the fitted joint whose 1-, 2- and 3-way tables are then
              moved towards the joint's (:func:`balanced_counts`); each partition takes its
              share of them, placed by its index; post-processing

The exact triples are summed from the sparse joint the count pass collects (:mod:`.cliques`).
The joint's dense arrays are ``max_clique_cells`` cells at most (``dp-dask plan``,
:func:`~.cliques.clique_memory`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from dp_dask.conditions import Condition, ConditionError, condition_record
from dp_dask.data.constraints import forbidden_cells
from dp_dask.data.schema import Schema
from dp_dask.data.tables import one_hot
from dp_dask.methods.marginals import adaptive
from dp_dask.methods.marginals.choice import ModelChoice, choose_model
from dp_dask.methods.marginals.cliques import exact_clique
from dp_dask.methods.marginals.config import DEFAULTS, MarginalsConfig
from dp_dask.postprocess.consistency import Marginals, Measurement
from dp_dask.privacy.accounting import gaussian_sigma
from dp_dask.privacy.noise import gaussian_measurements
from dp_dask.privacy.split import BudgetPart

if TYPE_CHECKING:
    import pandas as pd

    from dp_dask.methods.marginals.measurements import Measurer
    from dp_dask.methods.marginals.plan import BudgetPlan


def triples_rho(measurer: Measurer) -> float:
    """The triples' ρ: what the one-shot ρ leaves after the 1-way histograms' and fine
    histograms' shares in the all-pairs plan (``measurer``'s). Public."""
    schema, first = measurer.schema, len(measurer.all_pairs)
    spent = measurer.shares[:schema.m].sum() + measurer.shares[first:].sum()
    return measurer.rho - measurer.rho * float(spent)


def model_choice(measurer: Measurer, n_hat: int) -> ModelChoice:
    """The public rule's choice between ``pairs`` and the dense joint
    (:func:`~.choice.choose_model`) for the one-shot ρ of ``measurer`` (its all-pairs plan's
    shares; on the joint the triples take :func:`triples_rho`) and ``n_hat`` rows."""
    schema, m = measurer.schema, measurer.schema.m
    first = len(measurer.all_pairs)
    return choose_model(schema, rho=measurer.rho, one_way_shares=measurer.shares[:m],
                        pair_shares=measurer.shares[m:first],
                        triple_shares=triple_shares(schema, measurer.config),
                        triples_rho=triples_rho(measurer), sensitivity=measurer.sensitivity,
                        accountant=measurer.accountant, n_hat=n_hat, config=measurer.config)


def measure_dense(measurer: Measurer, one_way: list[Measurement],
                  joint: tuple[np.ndarray, np.ndarray], rho: float, one_way_share: float = 0.0
                  ) -> tuple[list[Measurement], list[Measurement], dict[int, Measurement]]:
    """After the 1-way histograms ``one_way`` (``measurer``'s, at the all-pairs plan's shares):
    the fine histograms at theirs (:func:`~.plan.budget_shares`), the 1-way histograms again
    with ``one_way_share`` of ``rho`` (the rest of the one-shot ρ, :func:`triples_rho`; split
    as the first draws', merged with them by inverse variance) and every triple with the rest
    (:func:`measure_triples`). The 1-way histograms, the triples and the fine histograms by
    attribute."""
    schema, first = measurer.schema, len(measurer.all_pairs)
    fine = (measurer.draw([("fine", a) for a in measurer.grids], measurer.shares[first:])
            if measurer.grids else [])
    if one_way_share > 0:
        histograms = measurer.shares[:schema.m]
        again = measurer.draw([(a,) for a in range(schema.m)], histograms / histograms.sum()
                              * (rho * one_way_share / measurer.rho))
        one_way = adaptive.merged([*one_way, *again])
    return (one_way,
            measure_triples(joint, schema, rho * (1.0 - one_way_share),
                            sensitivity=measurer.sensitivity, accountant=measurer.accountant,
                            sampler=measurer.sampler, rng=measurer.rng, config=measurer.config),
            {a: Measurement((a,), h.values, h.sigma) for a, h in zip(measurer.grids, fine)})


DENSE_POST_PROCESSING = ("the dense joint fitted to every noisy table (weighted 1/sigma^2) by "
                         "mirror descent on the simplex, the schema's structural zeros held "
                         "at 0; the release's rows a systematic sample of it, moved towards "
                         "its 1-, 2- and 3-way tables, shared out to the partitions")


def dense_record(schema: Schema, measured: list[Measurement], fine: dict[int, Measurement],
                 plan: BudgetPlan, rho: float, sensitivity: float) -> dict[str, Any]:
    """The privacy record's ``cliques`` of a dense-joint release (``measured``: the 1-way
    histograms, then the triples, these sharing ``rho`` with the histograms' second draw, if
    any; ``fine``: the fine histograms by attribute)."""
    config = plan.config
    queries = measured[schema.m:]
    return {
        "selection": "every triple and the dense joint fitted to them, as the public rule "
                     "expects it the smaller 1-/2-/3-way error (privacy.model_choice) and the "
                     f"joint's cells <= {config.max_clique_cells}",
        "rho": rho, "sensitivity": sensitivity, "measurements": len(queries),
        "cliques": [{"attributes": [schema.names[a] for a in q.attributes],
                     "cells": len(q.values), "sigma": q.sigma} for q in queries],
        "joint": {"attributes": list(schema.names), "cells": int(np.prod(schema.sizes)),
                  "fit": "mirror descent, "
                         f"{joint_steps(int(np.prod(schema.sizes)), len(measured), config)} steps"}}


def dense_budget_split(schema: Schema, measured: list[Measurement],
                       fine: dict[int, Measurement], plan: BudgetPlan, rho: float,
                       sensitivity: float, one_way_share: float = 0.0) -> tuple[BudgetPart, ...]:
    """A dense-joint release's one-shot measurements as budget parts (as
    :func:`dense_record`'s arguments), for the split of :func:`~.synthesizer.release_record`."""
    config, m = plan.config, schema.m
    queries = measured[m:]
    rule = f"each in proportion to cells^{config.cells_exponent:.4g}"
    again = (BudgetPart("1-way histograms again", share=one_way_share,
                        note="split as their first draws, the two merged by inverse "
                             "variance"),) if one_way_share else ()
    coarse = BudgetPart(
        "1-way histograms and 3-way tables (every one)",
        count=dense_measurements(measured, {}, m, one_way_share), mechanism="Gaussian",
        norm="L2", sensitivity=sensitivity, rule=rule,
        note="no 2-way table, as the public rule picked the dense joint "
             "(privacy.model_choice)",
        parts=(BudgetPart("histograms", share=config.one_way_share),
               BudgetPart("the rest", rho=rho, share=1 - config.one_way_share, parts=(
                   *again, BudgetPart("3-way tables", count=len(queries),
                                      share=1 - one_way_share)))))
    if not fine:
        return (replace(coarse, rho=plan.one_shot),)
    names = ", ".join(schema.names[a] for a in sorted(fine))
    return (BudgetPart("Gaussian measurements", rho=plan.one_shot,
                       count=dense_measurements(measured, fine, m, one_way_share), parts=(
        BudgetPart(f"fine histograms of {names}", share=plan.fine_share, norm="L2",
                   sensitivity=sensitivity, rule=rule),
        replace(coarse, share=1 - plan.fine_share))),)


def dense_measurements(measured: list[Measurement], fine: dict[int, Measurement], m: int,
                       one_way_share: float) -> int:
    """The dense path's Gaussian measurements: ``measured`` (the histograms' draws merged),
    the ``fine`` histograms and, with a second draw (``one_way_share`` > 0), its m."""
    return len(measured) + len(fine) + (m if one_way_share > 0 else 0)


def triples(schema: Schema) -> list[tuple[int, ...]]:
    """Every triple of attributes, in lexicographic order."""
    return list(itertools.combinations(range(schema.m), 3))


def triple_shares(schema: Schema, config: MarginalsConfig = DEFAULTS) -> np.ndarray:
    """Each triple's share of the triples' ρ, ∝ cells^``cells_exponent``: public sizes alone."""
    weights = np.array([np.prod(schema.sizes[list(t)]) for t in triples(schema)],
                       dtype=np.float64) ** config.cells_exponent
    return weights / weights.sum()


def measure_triples(joint: tuple[np.ndarray, np.ndarray], schema: Schema, rho: float, *,
                    sensitivity: float, accountant: str, sampler: str,
                    rng: np.random.Generator | None, config: MarginalsConfig = DEFAULTS
                    ) -> list[Measurement]:
    """Every triple measured once at its share of ``rho`` (:func:`triple_shares`), L2
    ``sensitivity`` each: a row is in one cell of each. The only step here that reads exact
    counts (``joint``, the sparse joint of :func:`~.cliques.count_graph`)."""
    queries = triples(schema)
    sigmas = [gaussian_sigma(rho * share, sensitivity, accountant)
              for share in triple_shares(schema, config)]
    noisy = gaussian_measurements([(exact_clique(joint, schema, q), s, sensitivity)
                                   for q, s in zip(queries, sigmas)], sampler=sampler, rng=rng)
    return [Measurement(q, v, s) for q, v, s in zip(queries, noisy, sigmas)]


def joint_steps(cells: int, tables: int, config: MarginalsConfig = DEFAULTS) -> int:
    """The fit's mirror-descent steps: ``joint_iterations``, fewer where a step's work (each
    table summed from the joint: cells × tables) would pass ``config.joint_work`` in all; at
    least 10."""
    return max(10, min(config.joint_iterations, config.joint_work // max(cells * tables, 1)))


def estimate_joint(sizes: tuple[int, ...] | np.ndarray, measurements: list[Measurement],
              n_hat: float, *, forbidden: np.ndarray | None = None,
              iterations: int = DEFAULTS.joint_iterations) -> np.ndarray:
    """The dense joint (counts summing to ``n_hat``, shape ``sizes``) nearest the noisy tables:
    n̂·p over the simplex minimising Σ_c ‖marginal_c(n̂·p) − y_c‖² / σ_c², by mirror descent on
    log p with a backtracking step (grown ×1.2 on a decrease, halved otherwise), ``iterations``
    steps from the uniform joint: deterministic. ``forbidden`` (flat, bool): structural zeros,
    held at 0."""
    shape = tuple(int(s) for s in sizes)
    m = len(shape)
    allowed = np.ones(shape, dtype=bool) if forbidden is None else ~forbidden.reshape(shape)
    if not allowed.any():
        raise ValueError("the schema's constraints leave the joint no cell")
    # per table: the axes it sums out, its noisy cells in its shape, its precision 1/σ²
    targets = [(tuple(a for a in range(m) if a not in t.attributes),
                t.values.reshape([shape[a] for a in t.attributes]), 1.0 / t.sigma**2)
               for t in measurements]

    def loss_gradient(log_p: np.ndarray) -> tuple[float, np.ndarray]:
        x = n_hat * np.exp(log_p)
        loss, gradient = 0.0, np.zeros(shape)
        for other, y, precision in targets:
            residual = x.sum(axis=other) - y
            loss += precision * float((residual**2).sum())
            gradient += np.expand_dims(2 * precision * residual, other)
        return loss, n_hat * gradient

    log_p = np.where(allowed, -np.log(allowed.sum()), -np.inf)
    loss, gradient = loss_gradient(log_p)
    step = 1.0 / max(float(np.abs(gradient[allowed]).max()), 1e-300)
    for _ in range(iterations):
        trial = np.where(allowed, log_p - step * gradient, -np.inf)
        trial -= np.logaddexp.reduce(trial.ravel())
        trial_loss, trial_gradient = loss_gradient(trial)
        if trial_loss <= loss:
            log_p, loss, gradient = trial, trial_loss, trial_gradient
            step *= 1.2
        else:
            step *= 0.5
    return n_hat * np.exp(log_p)


def joint_marginals(joint: np.ndarray) -> Marginals:
    """The joint's 1-way and 2-way tables: consistent by construction."""
    m = joint.ndim
    return Marginals(
        tuple(joint.sum(axis=tuple(b for b in range(m) if b != a)) for a in range(m)),
        {(a, b): joint.sum(axis=tuple(c for c in range(m) if c not in (a, b)))
         for a, b in itertools.combinations(range(m), 2)})


def systematic_counts(p: np.ndarray, rows: int, offset: float) -> np.ndarray:
    """How often each cell of the flat distribution ``p`` (≥ 0) holds one of the ``rows``
    points (``offset`` + k)/rows, k < rows, of a systematic sample (``offset`` in [0, 1)): each
    cell ⌊rows·p⌋ or ⌈rows·p⌉ times, a cell of p = 0 never. Work of the cells, not the rows."""
    cumulative = np.cumsum(p, dtype=np.float64)
    cumulative /= cumulative[-1]
    # the points below F number ⌈rows·F − offset⌉: cell c holds those in [F_{c−1}, F_c)
    below = np.clip(np.ceil(rows * cumulative - offset), 0, rows).astype(np.int64)
    below[-1] = rows  # F = 1 up to rounding
    return np.diff(below, prepend=0)


# The orders of the tables :func:`balanced_counts` moves the rows' counts to: the workload's
# Q1, Q2 and Q3 (the joint is fitted to the 1-way histograms and every triple).
BALANCED_ORDERS = (1, 2, 3)


def balanced_counts(counts: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """``counts`` (integers, the joint's shape) moved towards ``expected`` (floats of the same
    total) table by table: every 1-way table, then every 2-way and every 3-way one
    (:data:`BALANCED_ORDERS`), each by :func:`balance_table`.

    A systematic sample rounds each cell, but a table's cell holds many cells of the joint
    and their roundings add up. A move on k attributes changes the rows of the 2^k cells that
    take one of two values of each, the other attributes' values fixed, by ±1 alternately:
    every table of fewer of those attributes, and every table lacking one, keeps its counts.
    So one pass leaves each table where its own moves left it: the 1-way counts within 1 of
    expected's, the 2- and 3-way tables as near as single moves bring them."""
    counts = counts.astype(np.int64)
    for order in BALANCED_ORDERS:
        for attributes in itertools.combinations(range(counts.ndim), order):
            balance_table(counts, expected, attributes)
    return counts


def balance_table(counts: np.ndarray, expected: np.ndarray,
                  attributes: tuple[int, ...]) -> None:
    """Moves (:func:`balanced_counts`) on ``attributes`` while they lower the squared error
    of their table, in place. A move's corners are the table's cell of most excess and the
    cells that make the alternating sum G of the corners' excesses largest; it lowers the
    squared error by 2·G − 2^k and G by 2^k, so ⌈(G − 2^(k−1))/2^k⌉ of them are made at
    once, at the other attributes' values where the corners' own excesses add up most. A
    corner losing a row holds one; one gaining a row is expected more than 0 (structural zeros
    stay empty)."""
    k = len(attributes)
    view = np.moveaxis(counts, attributes, range(k))
    held = view.reshape(view.shape[:k] + (-1,))  # a copy where the axes moved: written back
    want = np.moveaxis(expected, attributes, range(k)).reshape(held.shape)
    excess = held.sum(axis=-1) - want.sum(axis=-1)
    while True:  # a move lowers the squared error: it ends
        first = np.unravel_index(int(excess.argmax()), excess.shape)
        gain = excess
        for axis, value in enumerate(first):  # alternating sums, the first corner fixed
            gain = np.take(gain, [value], axis=axis) - gain
        second = np.unravel_index(int(gain.argmax()), gain.shape)
        moves = math.ceil((float(gain[second]) - 2 ** (k - 1)) / 2**k)
        if moves < 1:
            break
        corners = [(tuple(np.where(bits, second, first)), (-1) ** sum(bits))
                   for bits in itertools.product((0, 1), repeat=k)]
        possible = np.logical_and.reduce([held[c] > 0 if sign > 0 else want[c] > 0
                                          for c, sign in corners])
        own = sum(sign * (held[c] - want[c]) for c, sign in corners)
        where = np.argsort(np.where(possible, -own, np.inf), kind="stable")[:moves]
        where = where[possible[where]]
        if not len(where):
            break
        for corner, sign in corners:
            held[corner + (where,)] -= sign
            excess[corner] -= sign * len(where)
    view[...] = held.reshape(view.shape)


# (√5 − 1)/2: the stride whose multiples mod 1 fall most evenly (three-gap theorem)
GOLDEN_STRIDE = (math.sqrt(5) - 1) / 2


def release_positions(start: int, rows: int, total: int) -> np.ndarray:
    """Positions j·g mod ``total``, j in [``start``, ``start`` + ``rows``), in a release of
    ``total`` rows laid out in cell order: g the integer nearest total·(√5 − 1)/2 prime to
    total, so j ↦ j·g mod total is a bijection of [0, total) (partitions of consecutive j never
    share a row and together take every one), and consecutive j fall evenly over the layout
    (the three-gap theorem): each partition holds every cell's rows in proportion."""
    stride = max(1, round(total * GOLDEN_STRIDE))
    while math.gcd(stride, total) != 1:
        stride += 1
    # Python integers: j·g passes int64's range from about 3·10⁹ rows
    return (np.arange(start, start + rows, dtype=object) * stride % max(total, 1)
            ).astype(np.int64)


def class_rows(rows: int, classes: int) -> np.ndarray:
    """Of a release's first ``rows`` rows, dealt to ``classes`` in turn (row t to class
    t mod classes), how many each class holds: a partition's are the difference at its ends,
    equal up to one, and so are the release's."""
    return (rows + classes - 1 - np.arange(classes)) // classes


@dataclass(frozen=True)
class JointSampler:
    """Rows drawn from the fitted joint; with a condition, from the joint restricted to it
    (each cell weighted by the share of its values that holds the condition,
    :meth:`Condition.fraction`), and with classes (a balance) equal rows of each class up to
    one, in each partition and in the release.

    A release lays its rows out once (:meth:`for_release`): per class, every cell's count, a
    systematic sample moved towards the joint's 1-, 2- and 3-way tables, its 1-way counts the
    joint's rounded (:func:`balanced_counts`); its partitions take their rows from that layout
    (:meth:`draw_codes`). Each partition drawing its own systematic sample instead rounded
    every cell once per partition, and those roundings added up over the many cells of one
    attribute value: on the planted tables at ε = 5 the rows' 1-way counts were 2.2–4.8 off
    the joint's, now 0.2–0.3, and their Q1 the fitted joint's (docs/model-choice.md)."""

    schema: Schema
    joint: np.ndarray  # counts, shape the schema's sizes
    fine: dict[int, np.ndarray] = field(default_factory=dict)
    condition: Condition | None = None
    classes: tuple[Condition, ...] = ()
    balance: int | None = None  # the balanced attribute
    distributions: tuple[np.ndarray, ...] = ()  # per class, its weights over the cells
    partition_rows: int = 0  # the release's rows per partition (its last fewer); 0: unbound
    # per class, its cells' rows in the release, cumulated over the flat cells (each partition
    # finds its rows' cells in it: cumulated once per release, not per partition)
    layout: tuple[np.ndarray, ...] = ()

    def conditioned(self, condition: Condition, classes: tuple[Condition, ...],
                    balance: int | None = None) -> JointSampler:
        """This sampler restricted to each of ``classes`` (``condition``, or its classes of the
        attribute ``balance``); ConditionError where the joint gives one probability 0."""
        cells = np.indices(self.joint.shape, dtype=np.int16).reshape(self.schema.m, -1).T
        restricted = []
        for c in classes:
            weights = self.joint.ravel() * c.fraction(cells)
            if not weights.sum() > 0:
                raise ConditionError(f"the model gives condition {c.text!r} probability 0: "
                                     "no rows can be drawn")
            restricted.append(weights)
        return JointSampler(self.schema, self.joint, self.fine, condition, classes, balance,
                            tuple(restricted))

    def record(self, rows: int) -> dict[str, Any] | None:
        """What metadata.json says of the conditioning (None: no condition)."""
        if self.condition is None:
            return None
        return condition_record(self.condition, self.classes, self.balance, rows)

    def estimates(self, sizes: list[int]) -> int:
        """One layout of the release's rows, whatever its partitions."""
        return 1

    def for_release(self, rows: int, seed: np.random.SeedSequence,
                    release_rows: int | None = None) -> JointSampler:
        """This sampler with the rows of a release of ``release_rows`` rows in partitions of
        ``rows`` (the last fewer) laid out from ``seed``: per class, its rows in the release
        (:func:`class_rows`), a systematic sample of them (:func:`systematic_counts`, its own
        offset) with its 1-, 2- and 3-way tables moved towards the class's distribution's
        (:func:`balanced_counts`). ``release_rows`` None: the draws are no one release's rows
        (a unit-shaped release's units, as many as fill each partition), each laid out alone
        (:meth:`draw_codes`)."""
        if release_rows is None:
            return self
        rng = np.random.default_rng(seed)
        distributions = self.distributions or (self.joint.ravel(),)
        shape = self.joint.shape
        layout = tuple(np.cumsum(
            balanced_counts(systematic_counts(p, int(total), rng.random()).reshape(shape),
                            (p * (total / p.sum())).reshape(shape)))
            for p, total in zip(distributions,
                                class_rows(release_rows, len(distributions))))
        return replace(self, partition_rows=rows, layout=layout)

    def draw_codes(self, rows: int, seed: np.random.SeedSequence,
                   cpu: dict[str, float] | None = None) -> np.ndarray:
        """The codes (rows, m) of one partition, in random order: the release's rows from
        p · ``partition_rows`` on, p the partition's index, its seed's first spawn key (the
        release seed's p-th child, :func:`~dp_dask.copula.sample._seeded_partitions`, or a
        child of that: a unit-shaped release's row draws), so a partition retried draws the
        same rows, whatever the workers. Unbound (no :meth:`for_release`): ``rows`` rows laid
        out alone from ``seed``."""
        if not self.layout:
            return self.for_release(rows, seed, rows).rows_from(0, rows, seed)
        index = seed.spawn_key[0] if seed.spawn_key else 0
        return self.rows_from(index * self.partition_rows, rows, seed)

    def rows_from(self, start: int, rows: int, seed: np.random.SeedSequence) -> np.ndarray:
        """The codes of the laid-out release's rows ``start`` to ``start`` + ``rows``, in an
        order drawn from ``seed``: of each class, the positions :func:`release_positions`
        after those of the rows before, in its cells' layout."""
        classes = len(self.layout)
        before, through = class_rows(start, classes), class_rows(start + rows, classes)
        cells = [np.searchsorted(cumulative, side="right",
                                 v=release_positions(int(first), int(last - first),
                                                     int(cumulative[-1])))
                 for cumulative, first, last in zip(self.layout, before, through)]
        drawn = np.concatenate(cells)[np.random.default_rng(seed).permutation(rows)]
        return np.column_stack(np.unravel_index(drawn, self.joint.shape)).astype(np.int16)

    def draw(self, rows: int, seed: np.random.SeedSequence) -> tuple[np.ndarray, np.ndarray]:
        codes = self.draw_codes(rows, seed)
        return one_hot(codes, self.schema), codes

    def finish_frame(self, frame: pd.DataFrame, codes: np.ndarray,
                     seed: np.random.SeedSequence) -> pd.DataFrame:
        """The decoded partition; under a condition, split bins' values drawn within it."""
        if self.condition is None:
            return frame
        return self.condition.draw_partition_values(frame, codes, seed)


def forbidden_joint(schema: Schema) -> np.ndarray | None:
    """The joint's structural zeros (flat): the schema's constraints', None without."""
    return forbidden_cells(schema.constraints, schema.attributes, tuple(range(schema.m)))
