"""Utility of a release: counting-query errors against the raw data, and (α, β) tables.

Workloads, as in Asghar et al.: Q1, every 1-way marginal count (each category of each attribute);
Q2, every positive 2-way conjunction of categories of two distinct attributes; Q3, positive 3-way
conjunctions of three distinct attributes (all of them, or a seeded uniform sample when there are
too many). A query's error is |true count − released count|, released counts scaled to n rows.

The DPCopula paper's metric, beside them: the relative error of random range-count queries,
|true − released| / max(true, s) with a sanity bound s (:func:`range_query_errors`). The DPView
paper's metrics, on code arrays: the average ℓ1 distance of k-way marginals as fractions of rows
(:func:`marginal_l1_errors`) and random range queries scored as differences of row fractions
(:func:`range_fraction_errors`).

PRIVACY: this module reads the raw data, so it is the data owner's own evaluation and never part
of a release. Its outputs hold errors and summary statistics only, never exact counts, but they are
exact functions of the raw data: every file is marked "not differentially private — for the data
owner only", and none is written inside a release directory unless forced.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
from dask.delayed import Delayed

from dp_dask.cluster import compute
from dp_dask.data.counts import (
    attribute_pairs,
    count_graph,
    query_vector,
    reduction_graph,
    rows_counted,
)
from dp_dask.data.decode import codes_to_frame
from dp_dask.data.encode import encode_partition
from dp_dask.data.io import TableSource, read_table
from dp_dask.data.schema import Schema
from dp_dask.data.tables import Domain
from dp_dask.data.values import labels_of_release
from dp_dask.release import checked_table

if TYPE_CHECKING:  # values.py imports this module
    from dp_dask.evaluate.columns import ColumnComparison
    from dp_dask.evaluate.values import ValueComparison

BETAS = (0.95, 0.99, 1.0)
STRONG_CORRELATION = 0.5  # Q2 is split at |r| >= this (r: Pearson r of the two dummies)
DEFAULT_Q3_SAMPLE = 100_000


def tvd(a: np.ndarray, b: np.ndarray) -> float:
    """Total-variation distance of two count tables (any totals) as distributions."""
    return 0.5 * float(np.abs(a / a.sum() - b / b.sum()).sum())


def shares_tvd(real: pd.Series, synthetic: pd.Series) -> float:
    """Total-variation distance of two distributions given as shares by label (a label on one
    side only has share 0 on the other)."""
    support = real.index.union(synthetic.index)
    return 0.5 * float(np.abs(real.reindex(support, fill_value=0)
                              - synthetic.reindex(support, fill_value=0)).sum())


def marginal_distances(real: np.ndarray, synthetic: np.ndarray, schema: Schema) -> dict[str, float]:
    """Average and max total-variation distance of the 1-way and 2-way marginals.

    ``real`` and ``synthetic`` are d×d count matrices (see dp_dask.data.counts) of any row totals.
    """
    one_way = [
        tvd(np.diagonal(real)[o : o + s], np.diagonal(synthetic)[o : o + s])
        for o, s in zip(schema.offsets, schema.sizes)
    ]
    two_way = [tvd(real[a, b], synthetic[a, b]) for _, _, a, b in attribute_pairs(schema)]
    return {
        "one_way_tvd_mean": float(np.mean(one_way)),
        "one_way_tvd_max": float(np.max(one_way)),
        "two_way_tvd_mean": float(np.mean(two_way)) if two_way else 0.0,
        "two_way_tvd_max": float(np.max(two_way)) if two_way else 0.0,
    }


def workload_sizes(schema: Schema) -> dict[str, int]:
    """|Q1| = d, |Q2| = Σ_{i<j} |A_i||A_j|, |Q3| = Σ_{i<j<k} |A_i||A_j||A_k|."""
    sizes = schema.sizes.tolist()
    return {"Q1": schema.d,
            "Q2": sum(a * b for a, b in combinations(sizes, 2)),
            "Q3": sum(a * b * c for a, b, c in combinations(sizes, 3))}


@dataclass(frozen=True)
class ThreeWayWorkload:
    """Positive 3-way conjunctions, stored grouped by attribute triple so each is one bincount.

    Query q belongs to triple t for ``bounds[t] <= q < bounds[t + 1]``; ``cells[q]`` is its cell
    in the row-major |A_i|×|A_j|×|A_k| table of that triple.
    """

    triples: np.ndarray  # (T, 3) attribute indices i < j < k that hold at least one query
    bounds: np.ndarray  # (T + 1,)
    cells: np.ndarray  # (N,)
    total: int  # |Q3|: all positive 3-way conjunctions of the schema
    seed: int | None  # seed of the sample; None when the workload is all of Q3

    @property
    def sampled(self) -> bool:
        return len(self.cells) < self.total

    def describe(self) -> str:
        if not self.sampled:
            return f"all {self.total:,} queries"
        return (f"uniform sample of {len(self.cells):,} of {self.total:,} queries "
                f"(seed {self.seed})")

    def queries(self, schema: Schema) -> tuple[np.ndarray, np.ndarray]:
        """Attribute indices (N, 3) and category codes (N, 3) of every query, in order."""
        per_triple = np.diff(self.bounds)
        attributes = np.repeat(self.triples, per_triple, axis=0)
        return attributes, _unravel(self.cells, schema.sizes[attributes])


def _unravel(cells: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Row-wise np.unravel_index of ``cells`` in tables of shape ``sizes`` (N, 3)."""
    last = cells % sizes[:, 2]
    rest = cells // sizes[:, 2]
    return np.stack([rest // sizes[:, 1], rest % sizes[:, 1], last], axis=1)


def three_way_workload(schema: Schema, sample: int | None = DEFAULT_Q3_SAMPLE,
                       seed: int = 0) -> ThreeWayWorkload:
    """All of Q3 if it has at most ``sample`` queries (or ``sample`` is None), else a seeded
    uniform sample of ``sample`` distinct queries.
    """
    if schema.m < 3:
        raise ValueError(f"3-way queries need at least 3 attributes; schema has {schema.m}")
    if sample is not None and sample < 1:
        raise ValueError(f"the Q3 sample size must be positive, got {sample}")
    triples = np.array(list(combinations(range(schema.m), 3)), dtype=np.int64)
    table_cells = schema.sizes[triples].prod(axis=1)
    starts = np.concatenate([[0], np.cumsum(table_cells)])
    total = int(starts[-1])
    if sample is None or total <= sample:
        flat, used_seed = np.arange(total), None
    else:
        flat = np.sort(np.random.default_rng(seed).choice(total, size=sample, replace=False))
        used_seed = seed
    # flat is sorted, so each triple's queries are contiguous.
    triple_of = np.searchsorted(starts, flat, side="right") - 1
    present, first = np.unique(triple_of, return_index=True)
    return ThreeWayWorkload(triples[present], np.append(first, len(flat)),
                            flat - starts[triple_of], total, used_seed)


def three_way_counts_from_codes(codes: np.ndarray, workload: ThreeWayWorkload,
                                schema: Schema) -> np.ndarray:
    """Chunk step: the answers (N,) int64 of one partition's codes (m, rows).

    One contingency table per triple, as counts.py does for pairs.
    """
    answers = np.empty(len(workload.cells), dtype=np.int64)
    domain = Domain(schema.sizes)
    for triple, lo, hi in zip(workload.triples, workload.bounds[:-1], workload.bounds[1:]):
        answers[lo:hi] = domain.table(codes.T, triple)[workload.cells[lo:hi]]
    return answers


def partition_three_way_counts(frame: pd.DataFrame, workload: ThreeWayWorkload,
                               schema: Schema) -> np.ndarray:
    """Chunk step on a raw partition."""
    return three_way_counts_from_codes(encode_partition(frame, schema), workload, schema)


def three_way_graph(ddf: dd.DataFrame, schema: Schema, workload: ThreeWayWorkload) -> Delayed:
    """Lazy Q3 answers, reduced over partitions like the d×d counts."""
    shared = dask.delayed(workload, pure=True)  # one copy in the graph, not one per task
    return reduction_graph(ddf, schema, partition_three_way_counts, shared, schema)


DEFAULT_RANGE_QUERIES = 1_000
RANGE_BATCH_CELLS = 1 << 24  # queries × rows of one partition tested at once: ≤ 16 MiB of bools
# Queries on the same attributes share their contingency table up to this many cells (32 MiB of
# int64): Adult's 3-attribute queries then cost one bincount each per partition, not one pass of
# every query over the rows (a 250 k-row partition: 3.5 s → ~0.2 s for 1,000 queries).
RANGE_TABLE_CELLS = 1 << 22


@dataclass(frozen=True)
class RangeQueries:
    """Random range-count queries: query q counts the rows with lo[q, a] ≤ code_a ≤ hi[q, a] for
    every attribute a (codes on the schema's public order: categories in schema order, bins in
    edge order). An attribute a query does not constrain has the full range [0, |A_a| − 1]."""

    lo: np.ndarray  # (Q, m) int64
    hi: np.ndarray  # (Q, m) int64
    attributes: int  # constrained attributes per query
    seed: int
    # how the answers are computed (never what they are): contingency tables up to this many
    # cells, the other queries a batch × rows mask of at most batch_cells at a time
    table_cells: int = RANGE_TABLE_CELLS
    batch_cells: int = RANGE_BATCH_CELLS

    def describe(self) -> str:
        return (f"{len(self.lo):,} random range-count queries on {self.attributes} "
                f"attribute(s) each (seed {self.seed})")


def range_query_workload(schema: Schema, queries: int = DEFAULT_RANGE_QUERIES,
                         attributes: int | None = None, seed: int = 0,
                         among: Sequence[int] | None = None) -> RangeQueries:
    """``queries`` random queries, a function of the public schema and ``seed`` only: each picks
    ``attributes`` distinct attributes uniformly (None: all of them) from ``among`` (attribute
    indices; None: all m), and on each a range between two uniform codes of its domain (both ends
    included, in either order)."""
    pool = np.arange(schema.m) if among is None else np.asarray(among, dtype=np.int64)
    if len(set(pool.tolist())) != len(pool) or not np.all((0 <= pool) & (pool < schema.m)):
        raise ValueError(f"among must hold distinct attribute indices below {schema.m}, "
                         f"got {among!r}")
    attributes = len(pool) if attributes is None else attributes
    if not 1 <= attributes <= len(pool):
        raise ValueError(f"a range query constrains 1 to {len(pool)} attributes, "
                         f"got {attributes!r}")
    if queries < 1:
        raise ValueError(f"the number of range queries must be positive, got {queries!r}")
    rng = np.random.default_rng(seed)
    sizes = schema.sizes.astype(np.int64)
    lo = np.zeros((queries, schema.m), dtype=np.int64)
    hi = np.broadcast_to(sizes - 1, (queries, schema.m)).copy()
    chosen = pool[np.argsort(rng.random((queries, len(pool))), axis=1)[:, :attributes]]
    ends = np.sort(np.floor(rng.random((queries, attributes, 2))
                            * sizes[chosen][..., None]).astype(np.int64), axis=2)
    rows = np.arange(queries)[:, None]
    lo[rows, chosen], hi[rows, chosen] = ends[..., 0], ends[..., 1]
    return RangeQueries(lo, hi, attributes, seed)


def range_counts_from_codes(codes: np.ndarray, workload: RangeQueries,
                            schema: Schema) -> np.ndarray:
    """Chunk step: the answers (Q,) int64 of one partition's codes (m, rows).

    Queries that constrain the same attributes share the contingency table of those attributes
    (up to ``workload.table_cells`` cells), each answered as the sum of its box. The others are
    tested a batch at a time (a batch × rows boolean mask, at most ``workload.batch_cells``),
    never a rows × Q matrix; attributes no query of the batch constrains are skipped.
    """
    answers = np.zeros(len(workload.lo), dtype=np.int64)
    full = (workload.lo == 0) & (workload.hi == schema.sizes - 1)
    groups, group_of = np.unique(~full, axis=0, return_inverse=True)
    by_rows = []
    for g, constrained in enumerate(groups):
        members = np.flatnonzero(group_of.ravel() == g)
        attributes = np.flatnonzero(constrained)
        if math.prod(schema.sizes[attributes].tolist()) > workload.table_cells:
            by_rows.append(members)
            continue
        domain = Domain(schema.sizes)
        table = domain.table(codes.T, attributes).reshape(domain.shape(attributes))
        for q in members:
            answers[q] = table[tuple(slice(workload.lo[q, a], workload.hi[q, a] + 1)
                                     for a in attributes)].sum()
    if by_rows:
        rest = np.concatenate(by_rows)
        answers[rest] = _range_counts_by_rows(codes, workload.lo[rest], workload.hi[rest],
                                              full[rest], workload.batch_cells)
    return answers


def _range_counts_by_rows(codes: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                          full: np.ndarray, batch_cells: int) -> np.ndarray:
    rows = codes.shape[1]
    answers = np.zeros(len(lo), dtype=np.int64)
    batch = max(1, batch_cells // max(rows, 1))
    for start in range(0, len(answers), batch):
        span = slice(start, start + batch)
        inside = np.ones((len(answers[span]), rows), dtype=bool)
        for a in np.flatnonzero(~full[span].all(axis=0)):
            inside &= lo[span, a, None] <= codes[a]
            inside &= codes[a] <= hi[span, a, None]
        answers[span] = inside.sum(axis=1)
    return answers


def partition_range_counts(frame: pd.DataFrame, workload: RangeQueries,
                           schema: Schema) -> np.ndarray:
    """Chunk step on a raw partition: its Q answers, then its row count (Q + 1,)."""
    codes = encode_partition(frame, schema)
    return np.append(range_counts_from_codes(codes, workload, schema), codes.shape[1])


def range_query_graph(ddf: dd.DataFrame, schema: Schema, workload: RangeQueries) -> Delayed:
    """Lazy (Q + 1,) vector: the range-query answers, then n; reduced over partitions like the
    d×d counts, in one read."""
    shared = dask.delayed(workload, pure=True)
    return reduction_graph(ddf, schema, partition_range_counts, shared, schema)


def relative_errors(true: np.ndarray, released: np.ndarray, true_rows: int,
                    released_rows: int, sanity: float = 1.0) -> np.ndarray:
    """|true − released·n/n'| / max(true, s): released answers scaled to the true n rows."""
    if not sanity > 0:
        raise ValueError(f"the sanity bound must be > 0, got {sanity!r}")
    if released_rows < 1:
        raise ValueError("the synthetic table has no rows")
    scaled = np.asarray(released, dtype=np.float64) * (true_rows / released_rows)
    true = np.asarray(true, dtype=np.float64)
    return np.abs(true - scaled) / np.maximum(true, sanity)


def range_query_errors(data: TableSource, synthetic: TableSource, schema: Schema, *,
                       queries: int = DEFAULT_RANGE_QUERIES, attributes: int | None = None,
                       sanity: float = 1.0, seed: int = 0) -> np.ndarray:
    """Relative errors (Q,) of random range-count queries (:func:`range_query_workload`) on a
    decoded synthetic table (typed values or labels) against the raw data, both read through
    Dask."""
    if isinstance(synthetic, str | Path):
        synthetic = checked_table(synthetic)
    workload = range_query_workload(schema, queries, attributes, seed)
    labels = schema.as_labels()
    true, released = compute(range_query_graph(read_table(data, schema), schema, workload),
                             range_query_graph(release_labels(synthetic, schema), labels,
                                               workload))
    return relative_errors(true[:-1], released[:-1], int(true[-1]), int(released[-1]), sanity)


def marginal_l1_errors(real: np.ndarray, synthetic: np.ndarray, sizes: np.ndarray,
                       k: int) -> np.ndarray:
    """The ℓ1 distance between the real and synthetic k-way marginals, each as fractions of its
    table's rows, for every set of k attributes (in ``combinations`` order): DPView's metric.
    ``real`` and ``synthetic`` are codes (m, rows); the tables may differ in rows."""
    sizes = np.asarray(sizes, dtype=np.int64)
    errors = []
    for attrs in map(list, combinations(range(len(sizes)), k)):
        cells = math.prod(int(s) for s in sizes[attrs])
        fractions = [np.bincount(np.ravel_multi_index(codes[attrs], sizes[attrs]),
                                 minlength=cells) / codes.shape[1]
                     for codes in (real, synthetic)]
        errors.append(float(np.abs(fractions[0] - fractions[1]).sum()))
    return np.array(errors)


def range_fraction_errors(real: np.ndarray, synthetic: np.ndarray, schema: Schema, *,
                          queries: int = DEFAULT_RANGE_QUERIES, attributes: int = 3,
                          seed: int = 0) -> np.ndarray:
    """|true − released| of random range queries (:func:`range_query_workload`), each answer
    the fraction of its table's rows that the query counts: DPView's range-query metric.
    ``real`` and ``synthetic`` are codes (m, rows)."""
    workload = range_query_workload(schema, queries, attributes, seed)
    true, released = (range_counts_from_codes(codes, workload, schema) / codes.shape[1]
                      for codes in (real, synthetic))
    return np.abs(true - released)


# The DPCopula paper's sanity bound s: 0.1 % of the table's rows (Li, Xiong & Jiang, EDBT 2014,
# experiments), so queries with tiny true counts do not dominate the mean.
PAPER_SANITY_SHARE = 0.001


def pair_tvds(real: np.ndarray, synthetic: np.ndarray,
              schema: Schema) -> dict[tuple[int, int], float]:
    """Total-variation distance (half the ℓ1 of :func:`marginal_l1_errors`) of every 2-way
    marginal of two code arrays (m, rows), table by table: never the d×d count matrix, which
    large domains make costly (8 attributes × 1,000 values: 512 MiB)."""
    errors = marginal_l1_errors(real, synthetic, schema.sizes, 2)
    return {pair: 0.5 * float(l1)
            for pair, l1 in zip(combinations(range(schema.m), 2), errors)}


@dataclass(frozen=True)
class CodeScorer:
    """Scores many releases of one table held in memory as codes (m, n): the range-query
    workloads' true answers are computed once, then each release is scored on its own codes
    (relative errors with one sanity bound, and 1-/2-way total-variation distances)."""

    schema: Schema
    codes: np.ndarray
    workloads: dict[str, RangeQueries]
    true: dict[str, np.ndarray]
    sanity: float

    @classmethod
    def build(cls, codes: np.ndarray, schema: Schema, workloads: dict[str, RangeQueries],
              sanity: float) -> CodeScorer:
        true = {name: range_counts_from_codes(codes, w, schema) for name, w in workloads.items()}
        return cls(schema, codes, workloads, true, sanity)

    def score(self, synthetic: np.ndarray) -> dict[str, object]:
        """Per workload the mean, median and 90th percentile of the relative errors; the 1-way
        and 2-way TVD (mean, max); and every pair's 2-way TVD, keyed "i,j"."""
        n, released_n = self.codes.shape[1], synthetic.shape[1]
        scores: dict[str, object] = {}
        for name, workload in self.workloads.items():
            errors = relative_errors(self.true[name],
                                     range_counts_from_codes(synthetic, workload, self.schema),
                                     n, released_n, self.sanity)
            scores[name] = {"mean": float(errors.mean()), "median": float(np.median(errors)),
                            "p90": float(np.quantile(errors, 0.9)), "queries": len(errors)}
        one_way = [tvd(np.bincount(self.codes[i], minlength=size),
                       np.bincount(synthetic[i], minlength=size))
                   for i, size in enumerate(self.schema.sizes.tolist())]
        pairs = pair_tvds(self.codes, synthetic, self.schema)
        scores |= {"one_way_tvd_mean": float(np.mean(one_way)),
                   "one_way_tvd_max": float(np.max(one_way)),
                   "two_way_tvd_mean": float(np.mean(list(pairs.values()))) if pairs else 0.0,
                   "two_way_tvd_max": float(np.max(list(pairs.values()))) if pairs else 0.0,
                   "pair_tvd": {f"{i},{j}": value for (i, j), value in pairs.items()}}
        return scores


@dataclass(frozen=True)
class Answers:
    """Answers to Q1, Q2 (and Q3, when the release can answer it) for a table of n_rows."""

    q1: np.ndarray
    q2: np.ndarray
    q3: np.ndarray | None
    n_rows: int

    @classmethod
    def from_counts(cls, counts: np.ndarray, schema: Schema, q3: np.ndarray | None = None,
                    n_rows: int | None = None) -> Answers:
        """Q1 is the diagonal of the d×d counts; Q2 the 2-way tables in query order."""
        n_rows = rows_counted(counts, schema) if n_rows is None else n_rows
        vector = query_vector(counts, schema)
        return cls(vector[: schema.d], vector[schema.d :], q3, n_rows)


def answer_graphs(source: TableSource, schema: Schema,
                  workload: ThreeWayWorkload) -> tuple[Delayed, Delayed]:
    """Lazy d×d counts and Q3 answers of a table, sharing one read."""
    ddf = read_table(source, schema)
    return count_graph(ddf, schema), three_way_graph(ddf, schema, workload)


def pair_correlations(counts: np.ndarray, schema: Schema) -> np.ndarray:
    """Pearson r of the two dummy columns of each Q2 query, from exact counts (0 if constant)."""
    n = rows_counted(counts, schema)
    ones = np.diagonal(counts).astype(np.float64)
    parts = []
    for _, _, rows, cols in attribute_pairs(schema):
        a, b = np.meshgrid(ones[rows], ones[cols], indexing="ij")
        covariance = n * counts[rows, cols] - a * b
        spread = np.sqrt(a * (n - a) * b * (n - b))
        parts.append(np.divide(covariance, spread, out=np.zeros_like(spread),
                               where=spread > 0).ravel())
    return np.concatenate(parts)


def alpha_beta(errors: np.ndarray,
               betas: tuple[float, ...] = BETAS) -> dict[float, tuple[float, float]]:
    """For each β, the average and the maximum error over the best ceil(β·N) queries."""
    ordered = np.sort(np.asarray(errors, dtype=np.float64))
    result = {}
    for beta in betas:
        # round() so that e.g. 0.95·20 = 18.999… still keeps 19 queries
        kept = ordered[: max(1, math.ceil(round(beta * len(ordered), 9)))]
        result[beta] = (float(kept.mean()), float(kept.max()))
    return result


def error_records(method: str, true: Answers, released: Answers, correlations: np.ndarray,
                  betas: tuple[float, ...] = BETAS) -> list[dict[str, object]]:
    """Long-format (α, β) rows of one release: one per workload and β."""
    scale = true.n_rows / released.n_rows
    workloads = {
        "Q1": np.abs(true.q1 - scale * released.q1),
        "Q2": np.abs(true.q2 - scale * released.q2),
    }
    strong = np.abs(correlations) >= STRONG_CORRELATION
    workloads[f"Q2 |r|>={STRONG_CORRELATION:g}"] = workloads["Q2"][strong]
    workloads[f"Q2 |r|<{STRONG_CORRELATION:g}"] = workloads["Q2"][~strong]
    if true.q3 is not None and released.q3 is not None:
        workloads["Q3"] = np.abs(true.q3 - scale * released.q3)
    records = []
    for workload, errors in workloads.items():
        if len(errors) == 0:
            continue
        for beta, (average, maximum) in alpha_beta(errors, betas).items():
            records.append({"method": method, "workload": workload, "queries": len(errors),
                            "beta": beta, "average": average, "maximum": maximum})
    return records


@dataclass(frozen=True)
class Comparison:
    """A synthetic table against the raw data: (α, β) records and both d×d count matrices,
    and the value metrics and per-column comparison where
    :func:`~dp_dask.evaluate.html.write_evaluation` added them.

    The counts stay in memory for the data owner's report (proportions and correlations drawn
    from them); they are never written.
    """

    records: pd.DataFrame
    workload: ThreeWayWorkload
    real_counts: np.ndarray
    synthetic_counts: np.ndarray
    values: ValueComparison | None = None
    columns: ColumnComparison | None = None  # the raw columns against the release's
    # per declared constraint, the release's rows breaking it (dp_dask.evaluate.constraints)
    constraints: pd.DataFrame | None = None


def compare_release(data: TableSource, synthetic: TableSource, schema: Schema, *,
                    q3_sample: int | None = DEFAULT_Q3_SAMPLE, seed: int = 0,
                    method: str = "synthetic") -> Comparison:
    """(α, β) errors of one decoded synthetic table (typed values or schema labels) against the
    raw data: its values are binned back through the schema (:func:`release_labels`).

    A dp_dask release (its directory or its ``synthetic.parquet``) is read only if complete.
    """
    if isinstance(synthetic, str | Path):
        synthetic = checked_table(synthetic)
    workload = three_way_workload(schema, q3_sample, seed)
    labels = schema.as_labels()
    real_counts, real_q3, synthetic_counts, synthetic_q3 = compute(
        *answer_graphs(data, schema, workload),
        *answer_graphs(release_labels(synthetic, schema), labels, workload))
    true = Answers.from_counts(real_counts, schema, real_q3)
    released = Answers.from_counts(synthetic_counts, labels, synthetic_q3)
    if released.n_rows == 0:
        raise ValueError("the synthetic table has no rows")
    records = error_records(method, true, released, pair_correlations(real_counts, schema))
    return Comparison(pd.DataFrame.from_records(records), workload, real_counts,
                      synthetic_counts)


def evaluate_release(data: TableSource, synthetic: TableSource, schema: Schema, *,
                     q3_sample: int | None = DEFAULT_Q3_SAMPLE, seed: int = 0,
                     method: str = "synthetic") -> tuple[pd.DataFrame, ThreeWayWorkload]:
    """The (α, β) records and Q3 workload of :func:`compare_release`."""
    comparison = compare_release(data, synthetic, schema, q3_sample=q3_sample, seed=seed,
                                 method=method)
    return comparison.records, comparison.workload


def labels_frame(source: TableSource, schema: Schema) -> dd.DataFrame:
    """Raw rows mapped to their schema labels (bins), the form a label release takes."""
    return read_table(source, schema).map_partitions(_partition_labels, schema,
                                                     meta=_labels_meta(schema))


def release_labels(synthetic: TableSource, schema: Schema) -> dd.DataFrame:
    """A decoded synthetic table, typed values or labels (:func:`labels_of_release`), as its
    schema labels: read with ``schema.as_labels()``."""
    return read_table(synthetic, schema).map_partitions(labels_of_release, schema,
                                                        meta=_labels_meta(schema))


def _labels_meta(schema: Schema) -> pd.DataFrame:
    return codes_to_frame(np.zeros((0, schema.m), dtype=np.int16), schema)


def _partition_labels(frame: pd.DataFrame, schema: Schema) -> pd.DataFrame:
    return codes_to_frame(encode_partition(frame, schema).T, schema)
