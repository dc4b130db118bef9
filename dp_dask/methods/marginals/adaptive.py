"""Adaptive measurement rounds of the marginals method, and the declared workload (issue 45).

After the one-shot 1-/2-way measurement, a stated share of ρ goes to rounds, as in AIM (McKenna
et al., VLDB 2022): each round selects, by the exponential mechanism (report-noisy-max with
Gumbel noise, OpenDP's ``make_noisy_max`` into zCDP: ε²/8 for ε = √(8ρ_select)), the 2- or
3-way marginal that the current estimate gets most wrong, measures it with Gaussian noise and
refits the estimate's weights to every measurement so far.

    candidates  the workload's marginals and their 2- and 3-way subsets (AIM's downward closure),
                each weighted by its overlap with the workload (AIM's ``compile_workload``), up
                to ``max_cells`` cells (MarginalsConfig); the default workload is every triple
                (every pair where the triples would be too many to count in the one pass)
    score       w·(‖M(D) − M(p̂)‖₁ − √(2/π)·σ·cells): the current estimate's ℓ1 error on the
                exact marginal less the noise error the new measurement would leave (AIM's
                quality); L∞ sensitivity max w times 1 (add/remove) or 2 (replace one row)
    estimate    the candidate rows of the method's sampler (its raked tree start) and their
                weights fitted to the measurements: the estimate is a weighted sample, so a
                candidate's score is one weighted bincount

The exact marginals of every candidate come from the one Dask pass that also counts the 1-/2-way
tables (:func:`count_graph`); on the driver they feed only the selection's scores and the
measurements. Everything is a function of the public schema, the workload and ρ: the rounds, the
share, each round's ρ for selection and for measurement; the selected marginals are outputs of
the mechanism. The selection's charge is a zCDP one, so a release with rounds is accounted in
zCDP (the exact Gaussian curve would not cover the exponential mechanism).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dask.dataframe as dd
import numpy as np
import pandas as pd
from dask.delayed import Delayed

from dp_dask.data.counts import counts_from_codes, exact_answer, fine_counts, reduction_graph
from dp_dask.data.encode import encode_partition
from dp_dask.data.schema import Schema
from dp_dask.data.tables import Domain
from dp_dask.methods.marginals.config import DEFAULTS, MarginalsConfig
from dp_dask.postprocess.consistency import Measurement
from dp_dask.postprocess.reweight import fit_weights
from dp_dask.privacy.accounting import TABLE_L1_SENSITIVITY, gaussian_sigma, table_sensitivity
from dp_dask.privacy.noise import gaussian_measurements
from dp_dask.privacy.selection import (
    Selection,
    calibrate_selection,
    noisy_max_index,
    selection_scores,
)

# The share of ρ the rounds spend (the ``adaptive_share`` option's default); the other tuned
# numbers are MarginalsConfig's.
ADAPTIVE_SHARE = 0.3
# The score's sensitivity per unit weight: an ℓ1 distance to the exact counts moves by as much
# as one table's L1 sensitivity.
SCORE_L1_SENSITIVITY = TABLE_L1_SENSITIVITY
WILDCARD = "*"


def check_workload(schema: Schema, workload: object) -> tuple[tuple[int, ...], ...] | None:
    """The declared workload as sorted attribute tuples (None: none declared), else ValueError.

    ``workload``: column groups of 1 to 3 names each, a group a list of names or one
    comma-separated string; ``"*"`` stands for every other column (``["income", "*", "*"]``:
    every triple with income). Unknown names, repeated names and groups of more than 3 are
    refused, before any data is read."""
    if workload is None:
        return None
    if isinstance(workload, str) or not isinstance(workload, Sequence) or not workload:
        raise ValueError(f"workload must be a non-empty list of column groups, not {workload!r}")
    index = {name: a for a, name in enumerate(schema.names)}
    cliques: dict[tuple[int, ...], None] = {}
    for group in workload:
        names = group.split(",") if isinstance(group, str) else group
        if isinstance(names, str) or not isinstance(names, Sequence):
            raise ValueError(f"workload group {group!r} is not a list of column names")
        names = [str(name).strip() for name in names]
        if not 1 <= len(names) <= 3:
            raise ValueError(f"workload group {group!r} has {len(names)} columns: "
                             "groups of 1 to 3 columns are measured")
        unknown = [name for name in names if name != WILDCARD and name not in index]
        if unknown:
            raise ValueError(f"workload group {group!r}: unknown column {unknown[0]!r}; the "
                             f"schema's columns: {', '.join(schema.names)}")
        fixed = [index[name] for name in names if name != WILDCARD]
        if len(set(fixed)) != len(fixed):
            raise ValueError(f"workload group {group!r} names a column twice")
        others = [a for a in range(schema.m) if a not in fixed]
        for extra in itertools.combinations(others, len(names) - len(fixed)):
            cliques[tuple(sorted([*fixed, *extra]))] = None
    return tuple(cliques)


def cells(schema: Schema, clique: tuple[int, ...]) -> int:
    return Domain(schema.sizes).cells(clique)


def default_workload(schema: Schema,
                     config: MarginalsConfig = DEFAULTS) -> tuple[tuple[int, ...], ...]:
    """Every triple of at most ``max_cells`` cells while they are few enough to count in the one
    pass (``max_triples``, ``max_triple_cells``), else every pair: a function of the schema
    alone."""
    pairs = tuple(itertools.combinations(range(schema.m), 2))
    sizes = [int(size) for size in schema.sizes]
    triples, total = [], 0
    # stops at the first triple past the bounds: every release's sampler asks (marginals'
    # balance_groups), and enumerating all C(m, 3) took 48 s at m = 200
    for t in itertools.combinations(range(schema.m), 3):
        size = sizes[t[0]] * sizes[t[1]] * sizes[t[2]]
        if size <= config.max_cells:
            triples.append(t)
            total += size
            if len(triples) > config.max_triples or total > config.max_triple_cells:
                return pairs
    return tuple(triples) or pairs


def candidates(schema: Schema, workload: tuple[tuple[int, ...], ...] | None,
               config: MarginalsConfig = DEFAULTS) -> dict[tuple[int, ...], float]:
    """The rounds' candidates and their weights: the workload's 2- and 3-way marginals and
    their 2-way subsets, of at most ``max_cells`` cells, each weighted by Σ_W |C ∩ W| over the
    workload's groups W (AIM's ``compile_workload``; 1-way groups weigh but are not candidates:
    every histogram is measured already)."""
    groups = workload or default_workload(schema, config)
    closure = {sub for group in groups for k in (2, 3)
               for sub in itertools.combinations(group, k)}
    return {c: float(sum(len(set(c) & set(g)) for g in groups))
            for c in sorted(closure, key=lambda c: (len(c), c))
            if cells(schema, c) <= config.max_cells}


def triples_of(candidates: dict[tuple[int, ...], float]) -> tuple[tuple[int, ...], ...]:
    """The candidates whose exact counts the d×d matrix does not hold."""
    return tuple(c for c in candidates if len(c) == 3)


def rounds_for(schema: Schema, config: MarginalsConfig = DEFAULTS) -> int:
    """The default number of rounds: ``rounds_per_attribute`` per attribute, at least 1."""
    return max(1, round(config.rounds_per_attribute * schema.m))


def check_rounds(rounds: object) -> int | None:
    """``rounds`` if it is an integer ≥ 0 or None (by the schema: :func:`rounds_for`)."""
    if rounds is None:
        return None
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
        raise ValueError(f"rounds must be an integer ≥ 0 or None, not {rounds!r}")
    return rounds


def check_share(share: object) -> float:
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share < 1:
        raise ValueError(f"adaptive_share must be a number between 0 and 1 (exclusive), "
                         f"not {share!r}")
    return float(share)


@dataclass(frozen=True)
class RoundPlan:
    """How the rounds spend their share of ρ: equal rounds, each ``select_share`` of its ρ to
    the selection and the rest to the measurement."""

    rounds: int
    share: float
    rho: float  # the whole release's
    config: MarginalsConfig = DEFAULTS

    @property
    def rho_rounds(self) -> float:
        return self.rho * self.share if self.rounds else 0.0

    @property
    def rho_one_shot(self) -> float:
        return self.rho - self.rho_rounds

    @property
    def rho_select(self) -> float:
        return self.rho_rounds / self.rounds * self.config.select_share

    @property
    def rho_measure(self) -> float:
        return self.rho_rounds / self.rounds - self.rho_select

    def selection(self, sensitivity: float) -> Selection:
        """Each round's selection, over scores of L∞ ``sensitivity`` (zCDP)."""
        return calibrate_selection(self.rho_select, sensitivity, "zcdp")


def partition_counts(frame: pd.DataFrame, schema: Schema,
                     triples: tuple[tuple[int, ...], ...]) -> tuple[np.ndarray, ...]:
    """Chunk step on a raw partition: its count matrix, fine histograms and the exact counts of
    ``triples`` (flattened row-major, concatenated), from one encoding of the partition."""
    codes = encode_partition(frame, schema)
    return (counts_from_codes(codes, schema), fine_counts(frame, codes, schema),
            group_counts(codes.T, schema, triples))


def group_counts(codes: np.ndarray, schema: Schema,
                 groups: tuple[tuple[int, ...], ...]) -> np.ndarray:
    """The counts of each group of attributes in ``codes`` (rows, m), flattened row-major and
    concatenated (int64, empty without groups)."""
    return Domain(schema.sizes).tables(codes, groups)


def count_graph(ddf: dd.DataFrame, schema: Schema, triples: tuple[tuple[int, ...], ...], *,
                split_every: int = 8) -> Delayed:
    """Lazy (d×d exact counts, exact fine histograms, exact triples): one pass, one reduction."""
    return reduction_graph(ddf, schema, partition_counts, schema, triples,
                           split_every=split_every)


def exact_answers(counts: np.ndarray, triple_counts: np.ndarray, schema: Schema,
                  candidates: dict[tuple[int, ...], float]) -> dict[tuple[int, ...], np.ndarray]:
    """Each candidate's exact cells (flattened row-major), pairs from the d×d matrix."""
    triples = triples_of(candidates)
    split = np.split(triple_counts, np.cumsum([cells(schema, t) for t in triples])[:-1])
    return {c: exact_answer(counts, schema, c) for c in candidates if len(c) == 2} | dict(
        zip(triples, split))


def merged(measurements: list[Measurement]) -> list[Measurement]:
    """One measurement per set of attributes: repeats averaged by inverse variance (the same
    weight-fit objective up to a constant, and one table for the consistency step), in the
    order the attributes were first measured."""
    groups: dict[tuple[int, ...], list[Measurement]] = {}
    for m in measurements:
        groups.setdefault(m.attributes, []).append(m)
    out = []
    for attributes, group in groups.items():
        precision = np.array([1.0 / m.sigma**2 for m in group])
        values = sum(p * m.values for p, m in zip(precision, group)) / precision.sum()
        out.append(group[0] if len(group) == 1 else
                   Measurement(attributes, values, float(1.0 / math.sqrt(precision.sum()))))
    return out


def run_rounds(codes: np.ndarray, weights: np.ndarray, measurements: list[Measurement],
               answers: dict[tuple[int, ...], np.ndarray],
               candidates: dict[tuple[int, ...], float], plan: RoundPlan, schema: Schema, *,
               neighbours: str, sampler: str, rng: np.random.Generator | None,
               max_rows: int | None = None) -> tuple[list[Measurement], list[dict[str, Any]]]:
    """The rounds on the estimate ``codes``/``weights`` (rows summing to the release's n):
    select, measure, refit. Returns the measurements with the rounds' appended, and each
    round's record (selected marginal, its cells, ρ of selection and measurement, σ).
    ``max_rows``: a privacy unit's bound (None: a row), which scales both sensitivities."""
    sizes = schema.sizes
    keys = list(candidates)
    weight = np.array([candidates[c] for c in keys])
    candidate_cells = np.array([cells(schema, c) for c in keys], dtype=np.float64)
    domain = Domain(sizes)
    row_cells = [domain.index(codes, c) for c in keys]  # the candidate rows never change
    l2 = table_sensitivity(neighbours, "l2", max_rows)
    sigma = gaussian_sigma(plan.rho_measure, l2, "zcdp")
    bias = math.sqrt(2 / math.pi) * sigma * candidate_cells
    sensitivity = table_sensitivity(neighbours, "l1", max_rows) * float(weight.max())
    selection = plan.selection(sensitivity)
    measurements, record = list(measurements), []
    for r in range(plan.rounds):
        scores = selection_scores([answers[c] for c in keys],
                                  [np.bincount(k, weights, int(n))
                                   for k, n in zip(row_cells, candidate_cells)], bias, weight)
        chosen = keys[noisy_max_index(scores, selection, sampler=sampler, rng=rng)]
        (noisy,) = gaussian_measurements(
            [(answers[chosen], sigma, l2)], sampler=sampler,
            rng=rng)
        measurements.append(Measurement(chosen, noisy, sigma))
        weights = fit_weights(codes, merged(measurements), sizes, weights,
                              iterations=plan.config.refit_iterations,
                              config=plan.config.reweight)
        record.append({"round": r + 1, "marginal": [schema.names[a] for a in chosen],
                       "cells": cells(schema, chosen), "rho_select": plan.rho_select,
                       "rho_measure": plan.rho_measure, "sigma": sigma})
    return measurements, record


def rounds_record(plan: RoundPlan, schema: Schema, workload: tuple[tuple[int, ...], ...] | None,
                  candidates: dict[tuple[int, ...], float], neighbours: str,
                  max_rows: int | None, measured: list[dict[str, Any]]) -> dict[str, Any]:
    """The privacy record's ``adaptive``: the rounds' plan, the ``workload`` (None: the
    default), the candidates, the selection and each round's record (:func:`run_rounds`)."""
    config = plan.config
    return {
        "rounds": plan.rounds, "share": plan.share, "rho": plan.rho_rounds,
        "rho_one_shot": plan.rho_one_shot,
        "workload": ([[schema.names[a] for a in g] for g in workload]
                     if workload else "default: every triple of at most "
                     f"{config.max_cells} cells (every pair past "
                     f"{config.max_triples} triples)"),
        "candidates": len(candidates),
        "selection": "exponential mechanism (OpenDP make_noisy_max, Gumbel, zCDP "
                     "eps^2/8); score w*(L1 error of the current estimate - "
                     "sqrt(2/pi)*sigma*cells), L-inf sensitivity "
                     f"{table_sensitivity(neighbours, 'l1', max_rows):g}*max w",
        "measured": measured}
