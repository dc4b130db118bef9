"""Exact counts reduced on a real LocalCluster equal pandas crosstabs, for any partitioning."""

from __future__ import annotations

import tracemalloc

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from conftest import correlated_frame

from dp_dask.data.cells import table_sums
from dp_dask.data.counts import (
    attribute_pairs,
    count_graph,
    counts_from_codes,
    counts_from_queries,
    query_vector,
    rows_counted,
)
from dp_dask.data.encode import encode_partition
from dp_dask.data.schema import load_schema


def crosstab_counts(frame: pd.DataFrame, schema) -> np.ndarray:
    """The d×d count matrix computed directly with pandas, from the encoded columns."""
    codes = pd.DataFrame(encode_partition(frame, schema).T, columns=schema.names)
    expected = np.zeros((schema.d, schema.d), dtype=np.int64)
    for o, s, name in zip(schema.offsets, schema.sizes, schema.names):
        hist = codes[name].value_counts().reindex(range(s), fill_value=0)
        expected[o + np.arange(s), o + np.arange(s)] = hist.to_numpy()
    for i, j, a, b in attribute_pairs(schema):
        table = pd.crosstab(codes[schema.names[i]], codes[schema.names[j]])
        table = table.reindex(index=range(schema.sizes[i]), columns=range(schema.sizes[j]),
                              fill_value=0)
        expected[a, b] = table.to_numpy()
        expected[b, a] = table.to_numpy().T
    return expected


@pytest.mark.parametrize("npartitions", [1, 3, 17])
def test_cluster_counts_equal_crosstab(client, small_schema, npartitions):
    frame = correlated_frame(5_000, seed=npartitions)
    ddf = dd.from_pandas(frame, npartitions=npartitions)
    counts = client.compute(count_graph(ddf, small_schema, split_every=2)).result()
    expected = crosstab_counts(frame, small_schema)
    np.testing.assert_array_equal(counts, expected)
    assert rows_counted(counts, small_schema) == len(frame)
    # Two-way tables sum to n; the exclusive dummies of one attribute never co-occur.
    for _, _, a, b in attribute_pairs(small_schema):
        assert counts[a, b].sum() == len(frame)
    assert counts[0, 1] == 0


def test_adult_csv_counts_match_pandas(client, adult_csv, adult_schema):
    from dp_dask.data.io import read_table

    ddf = read_table(adult_csv, adult_schema, csv_blocksize="1MB")
    assert ddf.npartitions > 2
    counts = client.compute(count_graph(ddf, adult_schema)).result()
    frame = pd.read_csv(adult_csv, dtype=str)
    np.testing.assert_array_equal(counts, crosstab_counts(frame, adult_schema))


def test_query_vector_round_trip(small_schema):
    counts = counts_from_codes(encode_partition(correlated_frame(500), small_schema),
                               small_schema)
    vector = query_vector(counts, small_schema)
    sizes = small_schema.sizes
    k_cells = sizes.sum() + sum(sizes[i] * sizes[j] for i, j, _, _ in
                                attribute_pairs(small_schema))
    assert vector.shape == (k_cells,)
    np.testing.assert_array_equal(counts_from_queries(vector, small_schema), counts)


def test_partition_memory_is_far_below_the_dummy_matrix():
    """The chunk step works on codes: its peak memory is a fraction of the n×d 0/1 matrix."""
    schema = load_schema({"attributes": [
        {"name": f"a{i}", "categories": [str(c) for c in range(20)]} for i in range(10)]})
    rows = 400_000
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 20, size=(schema.m, rows), dtype=np.int8)
    tracemalloc.start()
    counts = counts_from_codes(codes, schema)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    dummy_matrix_bytes = rows * schema.d  # even as uint8
    assert counts.sum() == rows * schema.m**2
    # a float64 weight of 1 per row, the d×d matrix and one table at a time: no array of keys
    assert peak < 8 * rows * 2 < dummy_matrix_bytes


@pytest.mark.parametrize("dtype", [np.int8, np.int16])
def test_counts_from_codes_equal_a_count_of_each_pair(dtype):
    """Codes of either width (int16 beyond 127 values), tables of 2 to 450 cells each."""
    sizes = [2, 3, 150 if dtype == np.int16 else 100]
    schema = load_schema({"attributes": [
        {"name": f"a{i}", "categories": [str(c) for c in range(s)]} for i, s in enumerate(sizes)]})
    rng = np.random.default_rng(1)
    codes = np.stack([rng.integers(0, s, size=3_001) for s in sizes]).astype(dtype)
    counts = counts_from_codes(codes, schema)
    offsets = schema.offsets
    for i in range(3):
        for j in range(3):
            expected = np.zeros((sizes[i], sizes[j]), dtype=np.int64)
            if i == j:
                expected[np.diag_indices(sizes[i])] = np.bincount(codes[i], minlength=sizes[i])
            else:
                np.add.at(expected, (codes[i], codes[j]), 1)
            np.testing.assert_array_equal(
                counts[offsets[i]:offsets[i] + sizes[i], offsets[j]:offsets[j] + sizes[j]],
                expected)


def test_table_sums_are_bincounts_weighted_sums_to_the_bit():
    """1- and 2-attribute tables of C-order uint8 codes: the weights summed in each cell in row
    order, as np.bincount sums them; a 3-attribute table is refused."""
    sizes = np.array([3, 7, 250])
    rng = np.random.default_rng(4)
    codes = np.stack([rng.integers(0, s, 5_003) for s in sizes], axis=1).astype(np.uint8)
    weights = rng.exponential(size=len(codes))
    cliques = [(0,), (2,), (0, 1), (1, 2), (0, 2)]
    for clique, table in zip(cliques, table_sums(codes, cliques, sizes, weights)):
        keys = codes[:, clique[0]].astype(np.int64)
        if len(clique) == 2:
            keys = keys * int(sizes[clique[1]]) + codes[:, clique[1]]
        expected = np.bincount(keys, weights=weights, minlength=int(np.prod(sizes[list(clique)])))
        assert table.tobytes() == expected.tobytes(), clique
    with pytest.raises(ValueError, match="1- and 2-attribute"):
        table_sums(codes, [(0, 1, 2)], sizes, weights)
