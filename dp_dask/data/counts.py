"""Exact 1-way and 2-way counts, reduced on Dask as chunk → combine → aggregate.

The d×d count matrix C holds, for dummy columns a and b, the number of rows where both are 1:
the diagonal holds the 1-way histograms, the off-diagonal block (i, j) the 2-way contingency
table of attributes i and j, and the off-diagonal entries of a diagonal block are structurally 0.
Per partition the work is integer arithmetic on codes (bincount), never an n×d 0/1 matrix; each
task holds O(d² + partition) memory and the driver O(d²), independent of n.

With fine grids (marginals method) the same pass also sums each attribute's exact fine
histogram (:func:`fine_count_graph`). Only these exact counts leave the reduction, and only the
driver sees them: the caller adds noise before anything is returned, logged or written.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
from dask.delayed import Delayed

from dp_dask.data.cells import KEY_CHUNK, add_weights
from dp_dask.data.encode import check_columns, encode_partition, fine_cells
from dp_dask.data.schema import Schema
from dp_dask.data.tables import Domain


def attribute_pairs(schema: Schema) -> Iterator[tuple[int, int, slice, slice]]:
    """Each attribute pair i < j with the dummy-column slices of i and j, in query order."""
    slices = [slice(o, o + s) for o, s in zip(schema.offsets, schema.sizes)]
    for i in range(schema.m):
        for j in range(i + 1, schema.m):
            yield i, j, slices[i], slices[j]


def counts_from_codes(codes: np.ndarray, schema: Schema) -> np.ndarray:
    """Chunk step: the symmetric d×d int64 count matrix of one partition's codes (m, rows).

    Each table is counted by the weight fit's compiled pass (:func:`add_weights`, every weight
    1: exact below 2⁵³ rows), not ``np.bincount``, which needs each pair's cell keys as a new
    array of the partition's rows: on the DSS shape (351 pairs, 250 k rows) 0.26 → 0.08 CPU s,
    and 0.82 → 0.11 where the worker maps each new array afresh (benchmarks/SESSIONS.md, "The
    workers' malloc")."""
    domain = Domain(schema.sizes)
    counts = np.zeros((schema.d, schema.d), dtype=np.int64)
    ones = np.ones(codes.shape[1])
    keys = np.empty(KEY_CHUNK, dtype=np.uint32)

    # Specialised, not Domain.table: the compiled pass, no key array per table (above).
    def table(first: int, last: int) -> np.ndarray:
        clique = (first,) if first == last else (first, last)
        stride = domain.strides(clique)[0] if first != last else 0
        sums = np.zeros(domain.cells(clique))
        add_weights(sums, codes[first], codes[last], np.uint32(stride), ones, keys)
        return sums.astype(np.int64).reshape(domain.shape(clique))

    counts[np.diag_indices(schema.d)] = np.concatenate([table(i, i) for i in range(schema.m)])
    for i, j, rows, cols in attribute_pairs(schema):
        pair = table(i, j)
        counts[rows, cols] = pair
        counts[cols, rows] = pair.T
    return counts


def partition_counts(frame: pd.DataFrame, schema: Schema) -> np.ndarray:
    """Chunk step on a raw partition."""
    return counts_from_codes(encode_partition(frame, schema), schema)


def partition_fine_counts(frame: pd.DataFrame, schema: Schema) -> tuple[np.ndarray, np.ndarray]:
    """Chunk step on a raw partition, coarse and fine: its count matrix and its exact fine
    histograms (:func:`fine_counts`), from one encoding of the partition."""
    codes = encode_partition(frame, schema)
    return counts_from_codes(codes, schema), fine_counts(frame, codes, schema)


def fine_counts(frame: pd.DataFrame, codes: np.ndarray, schema: Schema) -> np.ndarray:
    """The fine histograms of the attributes with a fine grid (schema.fine_grids), one int64
    vector of their cells in turn; rows without a fine cell (extra bins) are in none."""
    tables = [np.zeros(0, dtype=np.int64)]
    for i in schema.fine_grids:
        attribute = schema.attributes[i]
        cells = fine_cells(frame[attribute.column], codes[i], attribute)
        tables.append(np.bincount(cells[cells >= 0], minlength=len(attribute.fine) - 1))
    return np.concatenate(tables).astype(np.int64)


def split_fine(vector: np.ndarray, schema: Schema) -> dict[int, np.ndarray]:
    """The vector of :func:`fine_counts` as attribute → its fine histogram."""
    sizes = [len(schema.attributes[i].fine) - 1 for i in schema.fine_grids]
    if len(vector) != sum(sizes):
        raise ValueError(f"fine counts have {len(vector)} cells, the schema's grids {sum(sizes)}")
    return dict(zip(schema.fine_grids, np.split(vector, np.cumsum(sizes)[:-1])))


def combine_counts(blocks: list[Any]) -> Any:
    """Combine/aggregate step: the sum of some partitions' count matrices (or of tuples of
    arrays, output by output)."""
    if isinstance(blocks[0], tuple):
        return tuple(combine_counts(list(parts)) for parts in zip(*blocks))
    return functools.reduce(np.add, blocks)


def partition_reduction(ddf: dd.DataFrame, chunk: Callable[..., Any], *args: Any,
                        combine: Callable[[list[Any]], Any] = combine_counts,
                        split_every: int = 8) -> Delayed:
    """Lazy one-pass count: ``chunk(partition, *args)`` on each partition of ``ddf``, the partial
    results reduced ``split_every`` at a time by ``combine`` (a list of them → one; by default
    summed, output by output). Every one-pass count of the package is this reduction: the exact
    counts reach the driver once, summed on the workers, never as one task holding every
    partition's result.

    A plain delayed tree rather than dask.array: array graph optimisation drops the keys of
    some dask-expr inputs (e.g. ``dd.from_delayed`` frames) when they are wrapped as arrays.
    """
    return tree_sum([dask.delayed(chunk)(part, *args) for part in ddf.to_delayed()],
                    split_every=split_every, combine=combine)


def reduction_graph(ddf: dd.DataFrame, schema: Schema, chunk: Callable[..., Any], *args: Any,
                    combine: Callable[[list[Any]], Any] = combine_counts,
                    split_every: int = 8) -> Delayed:
    """:func:`partition_reduction` over the schema's columns of ``ddf`` (an error naming a
    missing one)."""
    check_columns(ddf.columns, schema)
    return partition_reduction(ddf[schema.columns], chunk, *args, combine=combine,
                               split_every=split_every)


def tree_sum(level: list[Delayed], *, split_every: int = 8,
             combine: Callable[[list[Any]], Any] = combine_counts) -> Delayed:
    """Lazy sum of delayed arrays, ``split_every`` at a time (the combine/aggregate steps);
    another ``combine`` (a list of partial results → one) reduces other partial results."""
    while len(level) > 1:
        level = [dask.delayed(combine)(level[i : i + split_every])
                 for i in range(0, len(level), split_every)]
    return level[0]


def count_graph(ddf: dd.DataFrame, schema: Schema, *, split_every: int = 8) -> Delayed:
    """Lazy d×d exact counts: per-partition chunks summed by a tree reduction."""
    return reduction_graph(ddf, schema, partition_counts, schema, split_every=split_every)


def fine_count_graph(ddf: dd.DataFrame, schema: Schema, *, split_every: int = 8) -> Delayed:
    """Lazy (d×d exact counts, exact fine histograms): one pass, one reduction of both."""
    return reduction_graph(ddf, schema, partition_fine_counts, schema, split_every=split_every)


def view_counts_from_codes(codes: np.ndarray, schema: Schema,
                           views: Sequence[tuple[int, ...]]) -> np.ndarray:
    """Chunk step for views (attribute tuples, e.g. DPView's): each view's contingency table of
    one partition's codes (m, rows), flattened in C order over the view's attributes, all views
    concatenated into one int64 vector."""
    return Domain(schema.sizes).tables(codes.T, views)


def partition_view_counts(frame: pd.DataFrame, schema: Schema,
                          views: Sequence[tuple[int, ...]]) -> np.ndarray:
    """Chunk step for views on a raw partition."""
    return view_counts_from_codes(encode_partition(frame, schema), schema, views)


def view_count_graph(ddf: dd.DataFrame, schema: Schema, views: Sequence[tuple[int, ...]], *,
                     split_every: int = 8) -> Delayed:
    """Lazy exact view tables (:func:`view_counts_from_codes`), in one pass over the data."""
    return reduction_graph(ddf, schema, partition_view_counts, schema,
                           tuple(tuple(int(a) for a in view) for view in views),
                           split_every=split_every)


def rows_counted(counts: np.ndarray, schema: Schema) -> int:
    """n: every row falls in exactly one bin of the first attribute."""
    size = schema.sizes[0]
    return int(np.trace(counts[:size, :size]))


def query_vector(counts: np.ndarray, schema: Schema) -> np.ndarray:
    """The k = m + C(m,2) released queries, flattened: the d 1-way cells, then each 2-way table.

    Noise is added to this vector, so each query answer gets exactly one noise draw.
    """
    parts = [np.diagonal(counts)]
    parts += [counts[rows, cols].ravel() for _, _, rows, cols in attribute_pairs(schema)]
    return np.concatenate(parts)


def counts_from_queries(vector: np.ndarray, schema: Schema) -> np.ndarray:
    """Inverse of :func:`query_vector`: the symmetric d×d matrix, structural zeros restored."""
    sizes = schema.sizes
    counts = np.zeros((schema.d, schema.d), dtype=vector.dtype)
    counts[np.diag_indices(schema.d)] = vector[: schema.d]
    position = schema.d
    for i, j, rows, cols in attribute_pairs(schema):
        cells = sizes[i] * sizes[j]
        block = vector[position : position + cells].reshape(sizes[i], sizes[j])
        position += cells
        counts[rows, cols] = block
        counts[cols, rows] = block.T
    if position != len(vector):
        raise ValueError(f"query vector has {len(vector)} cells, schema expects {position}")
    return counts


def exact_answer(counts: np.ndarray, schema: Schema, query: tuple[int, ...]) -> np.ndarray:
    """One query's exact cells, flattened, from the d×d count matrix."""
    slices = [slice(schema.offsets[a], schema.offsets[a] + schema.sizes[a]) for a in query]
    if len(query) == 1:
        return np.diagonal(counts)[slices[0]].copy()
    return counts[slices[0], slices[1]].ravel()
