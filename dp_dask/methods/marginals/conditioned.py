"""Conditional sampling from a marginals model (``dp-dask sample --where/--balance``): the model
conditioned, not its release filtered.

The model's estimate of the joint is its weighted candidates (:class:`MarginalSampler`): tree
draws, raked and fitted to the measurements. A conditioned estimate draws the candidates inside
the condition from the spanning tree conditioned on it (exact: messages up the tree, draws down
it, the condition's alternatives drawn as a union), as many as the sampler draws in all, and keeps
the tree's ordinary draws outside it, each group weighted by its share of the tree before the
raking and the fit. Its candidates inside the condition, weighted by the probability that their
values hold it (:meth:`Condition.fraction`), are then the conditioned estimate: a condition
holding for 0.1 % of rows has as many candidates as one holding for all. A partition is a
resample of them balanced on their triples, without row updates or value moves, which aim at
the whole table's counts; values of split bins are drawn within the condition
(:meth:`Condition.draw_values`).

Post-processing of the model's noisy statistics: no privacy cost.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from dp_dask.conditions import (
    Condition,
    ConditionError,
    balanced_attribute,
    compile_where,
    condition_record,
    everything,
)
from dp_dask.data.tables import one_hot
from dp_dask.methods.marginals.fitted import FittedMarginals
from dp_dask.methods.marginals.sampler import (
    MarginalSampler,
    _distinct,
    balance_groups,
    distinct_draws,
)
from dp_dask.postprocess.balance import balanced_resample, weighted_tables
from dp_dask.postprocess.config import RakingConfig
from dp_dask.postprocess.raking import rake


@dataclass(frozen=True)
class Tree:
    """The model's spanning tree as a distribution: the root's probabilities and each child's
    given its parent (a parent value the table leaves empty: the child's own histogram, as
    :func:`~dp_dask.postprocess.rowupdate.sample_tree` draws)."""

    order: np.ndarray
    parents: np.ndarray
    sizes: np.ndarray
    root: np.ndarray
    given: dict[int, np.ndarray]  # child → (|parent|, |child|) rows summing to 1

    @classmethod
    def of(cls, model: FittedMarginals) -> Tree:
        one_way = [_normalised(np.clip(v, 0, None)) for v in model.marginals.one_way]
        given = {}
        for child in model.order[1:]:
            table = np.clip(model.marginals.table(model.parents[child], child), 0, None)
            totals = table.sum(axis=1, keepdims=True)
            given[int(child)] = np.where(totals > 0, table / np.where(totals > 0, totals, 1),
                                         one_way[child])
        return cls(model.order, model.parents, model.schema.sizes, one_way[model.order[0]],
                   given)

    def _upward(self, allowed: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        """Per attribute, its allowed values times the messages of its subtree."""
        up: dict[int, np.ndarray] = {}
        incoming: dict[int, np.ndarray] = {}
        for a in self.order[::-1].tolist():
            local = allowed[a].astype(float) if a in allowed else np.ones(self.sizes[a])
            up[a] = local * incoming.get(a, 1.0)
            parent = int(self.parents[a])
            if parent >= 0:
                incoming[parent] = incoming.get(parent, 1.0) * (self.given[a] @ up[a])
        return up

    def probability(self, allowed: dict[int, np.ndarray]) -> float:
        """The tree's probability that every attribute takes one of its allowed codes."""
        return float(self.root @ self._upward(allowed)[int(self.order[0])])

    def draw(self, allowed: dict[int, np.ndarray], rows: int, rng: np.random.Generator,
             dtype: np.dtype) -> np.ndarray:
        """``rows`` codes from the tree conditioned on the allowed codes."""
        up = self._upward(allowed)
        codes = np.empty((rows, len(self.order)), dtype=dtype)
        root = int(self.order[0])
        codes[:, root] = _choose(_normalised(self.root * up[root])[None, :],
                                 np.zeros(rows, dtype=np.intp), rng)
        for child in self.order[1:].tolist():
            weights = self.given[child] * up[child]
            totals = weights.sum(axis=1, keepdims=True)
            probs = weights / np.where(totals > 0, totals, 1)
            codes[:, child] = _choose(probs, codes[:, self.parents[child]].astype(np.intp), rng)
        return codes


def _normalised(v: np.ndarray) -> np.ndarray:
    total = v.sum()
    return v / total if total > 0 else v


def _choose(probs: np.ndarray, row: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Per entry of ``row``, a column drawn by that row of ``probs`` (rows summing to 1)."""
    width = probs.shape[1]
    shifted = (np.cumsum(probs, axis=1) + np.arange(len(probs))[:, None]).ravel()
    picked = np.searchsorted(shifted, row + rng.random(len(row)), side="right") - row * width
    return np.clip(picked, 0, width - 1)


def _inside(codes: np.ndarray, terms: list[dict[int, np.ndarray]]) -> np.ndarray:
    """Per row, how many of the alternatives it is in."""
    return np.sum([np.logical_and.reduce([mask[codes[:, a].astype(np.intp)]
                                          for a, mask in term.items()] or
                                         [np.ones(len(codes), dtype=bool)])
                   for term in terms], axis=0)


def tree_draws(tree: Tree, terms: list[dict[int, np.ndarray]], rows: int,
               rng: np.random.Generator, dtype: np.dtype) -> tuple[np.ndarray, float]:
    """``rows`` codes from the tree conditioned on the union of ``terms`` and the tree's
    probability of that union. Each alternative is drawn by its probability, a draw kept with
    probability 1 / (alternatives it is in): exact, and at least 1 in len(terms) kept whatever
    the condition's probability (the union's probability estimated from the same draws)."""
    chances = np.array([tree.probability(term) for term in terms])
    total = chances.sum()
    if total <= 0:
        raise ConditionError("the model gives the condition probability 0")
    kept, proposed, inverse = [], 0, 0.0
    while sum(len(k) for k in kept) < rows:
        batch = max(rows - sum(len(k) for k in kept), 64)
        per_term = rng.multinomial(batch, chances / total)
        drawn = np.concatenate([tree.draw(term, count, rng, dtype)
                                for term, count in zip(terms, per_term) if count])
        shared = _inside(drawn, terms)
        kept.append(drawn[rng.random(batch) * shared < 1])
        proposed, inverse = proposed + batch, inverse + float((1.0 / shared).sum())
    return np.concatenate(kept)[:rows], float(total * inverse / proposed)


def conditioned_start(model: FittedMarginals, rows: int, rng: np.random.Generator, *,
                      condition: Condition, draws_per_row: int,
                      raking: RakingConfig) -> tuple[np.ndarray, np.ndarray]:
    """:func:`~dp_dask.methods.marginals.sampler.raked_start` with its candidates inside the
    condition drawn from the conditioned tree: ``rows`` of them besides the ordinary draws
    outside it, each group weighted to its share of the tree, then raked."""
    plain, counts, draws = distinct_draws(model, rows, rng, draws_per_row)
    terms = condition.term_codes()
    drawn, probability = tree_draws(Tree.of(model), terms, rows, rng, plain.dtype)
    extra, extra_counts = _distinct(drawn)
    outside = _inside(plain, terms) == 0
    candidates = np.concatenate([plain[outside], extra])
    start = np.concatenate([counts[outside] * (rows / draws),
                            extra_counts * (probability * rows / len(drawn))])
    scale = rows / model.n_rows
    weights, _ = rake(candidates, {pair: table * scale
                                   for pair, table in model.marginals.two_way.items()},
                      model.schema.sizes, rng, start=start, config=raking)
    return candidates, weights


@dataclass(frozen=True)
class Conditioned:
    """A conditioned estimate: candidates inside the condition, their weights, and the weighted
    tables of the triples a partition's resample is balanced on."""

    codes: np.ndarray
    weights: np.ndarray
    groups: tuple[tuple[int, ...], ...]
    tables: np.ndarray


@dataclass(frozen=True)
class ConditionedSampler:
    """A partition's rows from the model conditioned on ``condition``, or with ``classes``
    (a balance: one condition per class) equal rows of each class up to one per partition."""

    base: MarginalSampler
    condition: Condition
    classes: tuple[Condition, ...]
    balance: int | None = None  # the balanced attribute
    shared: tuple[Conditioned, ...] | None = None

    def record(self, rows: int) -> dict[str, Any]:
        return condition_record(self.condition, self.classes, self.balance, rows)

    @property
    def schema(self):  # noqa: ANN201 - the model's Schema
        return self.base.schema

    @property
    def fine(self) -> dict[int, np.ndarray]:
        return self.base.fine

    def estimates(self, sizes: list[int]) -> int:
        return self.base.estimates(sizes)

    def for_release(self, rows: int, seed: np.random.SeedSequence,
                    release_rows: int | None = None) -> ConditionedSampler:
        """The conditioned estimates, drawn once for the partitions that read them."""
        return replace(self, shared=self._estimates(rows, np.random.default_rng(seed)))

    def _estimates(self, rows: int, rng: np.random.Generator) -> tuple[Conditioned, ...]:
        return tuple(self._estimate(condition, rows, rng) for condition in self.classes)

    def _estimate(self, condition: Condition, rows: int,
                  rng: np.random.Generator) -> Conditioned:
        config = self.base.config
        start = functools.partial(conditioned_start, condition=condition,
                                  draws_per_row=config.max_draws_per_row,
                                  raking=config.raking)
        sampler = replace(self.base, start=start)
        candidates, weights = sampler.weighted_candidates(sampler.candidate_rows(rows), rng)
        weights = weights * condition.fraction(candidates)
        inside = weights > 0
        if not inside.any():
            raise ConditionError(f"the model gives condition {condition.text!r} probability 0")
        codes, weights = candidates[inside], weights[inside]
        groups = balance_groups(self.schema, config)
        return Conditioned(codes, weights, groups,
                           weighted_tables(codes, weights, groups, self.schema.sizes))

    def draw_codes(self, rows: int, seed: np.random.SeedSequence,
                   cpu: dict[str, float] | None = None) -> np.ndarray:
        rng = np.random.default_rng(seed)
        estimates = self.shared if self.shared is not None else self._estimates(rows, rng)
        share, extra = divmod(rows, len(estimates))
        parts = [balanced_resample(e.codes, e.weights, share + (k < extra), e.groups,
                                   self.schema.sizes, rng, estimate=e.tables, value_moves=False,
                                   config=self.base.config.balance)
                 for k, e in enumerate(estimates)]
        codes = np.concatenate(parts)
        return codes[rng.permutation(rows)] if len(parts) > 1 else codes

    def draw(self, rows: int, seed: np.random.SeedSequence) -> tuple[np.ndarray, np.ndarray]:
        codes = self.draw_codes(rows, seed)
        return one_hot(codes, self.schema), codes.astype(np.int16)

    def finish_frame(self, frame: pd.DataFrame, codes: np.ndarray,
                     seed: np.random.SeedSequence) -> pd.DataFrame:
        """The decoded partition with split bins' values drawn within the condition."""
        return self.condition.draw_partition_values(frame, codes, seed)


def condition_classes(model: FittedMarginals, where: str | None, balance: str | None,
                      decode: str) -> tuple[Condition, tuple[Condition, ...], int | None]:
    """``where`` compiled against the model (None: no condition), its classes and the balanced
    attribute: with ``balance``, one class per code of that attribute the condition leaves
    possible, else the condition alone. ConditionError where the model's tree gives the
    condition probability 0."""
    schema = model.schema
    condition = compile_where(where, schema, decode, model.fine) if where else everything(schema)
    tree = Tree.of(model)

    def possible(condition: Condition) -> bool:
        # the alternatives' probabilities sum to 0 exactly where their union has none
        return sum(tree.probability(term) for term in condition.term_codes()) > 0

    if not possible(condition):
        raise ConditionError(f"the model gives condition {where!r} probability 0: no rows "
                             "can be drawn")
    if balance is None:
        return condition, (condition,), None
    index = balanced_attribute(balance, schema)
    classes = tuple(c for c in (condition.restricted(index, code)
                                for code in range(schema.sizes[index])) if possible(c))
    return condition, classes, index
