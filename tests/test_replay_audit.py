"""Replay audit: run the real read → encode → count → noise path on neighbouring datasets.

In the spirit of dp-recorder: every step before the noise is recorded (partitions, shapes, dtypes,
exact counts) for a dataset and for its neighbour with one row replaced by a worst case, and the
records are compared. The privacy analysis needs (a) each released query (a 1-way histogram or a
2-way table, see ``query_vector``) to move by at most its L1 sensitivity 2, (b) nothing else
before the noise to depend on the replaced row, and (c) the noise step to add the same noise to
both given the same randomness, so that the outputs differ by the count difference only.
"""

from __future__ import annotations

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from dp_dask.data.counts import (
    attribute_pairs,
    count_graph,
    counts_from_codes,
    query_vector,
    rows_counted,
)
from dp_dask.data.encode import code_dtype, encode_partition
from dp_dask.data.io import read_table
from dp_dask.data.schema import load_schema
from dp_dask.privacy import QUERY_L1_SENSITIVITY, add_noise, noisy_count_matrix, plan_noise

OTHER = {"extra": ["other"], "on_unknown": "other", "on_missing": "other"}
SCHEMA = load_schema({"name": "audit", "attributes": [
    {"name": "colour", "categories": ["red", "green", "blue"], **OTHER},
    {"name": "grade", "categories": ["1", "2", "3"], **OTHER},
    {"name": "size", "type": "numeric", "edges": [0, 10, 20, 50, "inf"], **OTHER},
    {"name": "answer", "categories": ["False", "True"], **OTHER},
]})
ROWS, PART_ROWS = 600, 150
ROW = ROWS - 3  # in the last partition, so CSV byte blocks before it keep their rows
SEED = 20240611
# Worst cases for the replaced row: each dict replaces these cells of row ROW.
NEIGHBOURS = {
    "non-integral float in an integral float column": {"grade": 2.5},
    "infinities": {"grade": np.inf, "size": -np.inf},
    "out-of-domain value, public bin": {"colour": "purple", "size": np.inf},
    "missing values": {"colour": None, "grade": np.nan, "size": np.nan, "answer": pd.NA},
    "value on a bin edge": {"size": 10.0},
    "rare category": {"colour": "blue"},  # the base has no blue
    "whole row": {"colour": "purple", "grade": 2.5, "size": 1e300, "answer": False},
}
FORMATS = ("csv", "parquet", "pandas", "dask")


def base_frame() -> pd.DataFrame:
    rng = np.random.default_rng(SEED)
    grade = rng.integers(1, 4, ROWS).astype(float)
    grade[rng.random(ROWS) < 0.05] = np.nan  # integral floats with NaN, as read from Parquet
    frame = pd.DataFrame({
        "colour": pd.Series(rng.choice(["red", "green"], ROWS), dtype=object),
        "grade": grade,
        "size": np.round(rng.uniform(0, 80, ROWS), 2),
        "answer": pd.Series(rng.random(ROWS) < 0.4, dtype="boolean"),
    })
    frame.loc[ROW, ["colour", "grade", "size"]] = ["red", 2.0, 9.75]
    frame.loc[ROW, "answer"] = True
    return frame


def neighbour_frame(replace: dict) -> pd.DataFrame:
    frame = base_frame()
    for name, value in replace.items():
        column = frame[name].astype(object)
        column.iloc[ROW] = value
        frame[name] = column.astype(frame[name].dtype)  # same dtype: float, boolean, object
    return frame


def read(fmt: str, frame: pd.DataFrame, path) -> dd.DataFrame:
    """The frame as the pipeline reads it: several partitions, through read_table."""
    if fmt == "csv":  # %.10g writes 3.0 as "3", as a hand-written CSV would
        frame.to_csv(path.with_suffix(".csv"), index=False, float_format="%.10g")
        return read_table(path.with_suffix(".csv"), SCHEMA, csv_blocksize="4KB")
    if fmt == "parquet":
        path.mkdir()
        for i, start in enumerate(range(0, ROWS, PART_ROWS)):
            frame.iloc[start:start + PART_ROWS].to_parquet(path / f"part.{i}.parquet")
        return read_table(path, SCHEMA)
    if fmt == "pandas":
        return read_table(frame, SCHEMA, partition_rows=PART_ROWS)
    with dask.config.set({"dataframe.convert-string": False}):  # see read_table
        return read_table(dd.from_pandas(frame, npartitions=ROWS // PART_ROWS), SCHEMA)


def replay(ddf: dd.DataFrame, client) -> tuple[list, np.ndarray]:
    """The record of every step before noise, and the exact counts of the real reduction."""
    record = [("partitions", ddf.npartitions), ("columns", list(ddf.columns))]
    parts = dask.compute(*ddf.to_delayed(), scheduler="sync")
    total = np.zeros((SCHEMA.d, SCHEMA.d), dtype=np.int64)
    for part in parts:
        codes = encode_partition(part, SCHEMA)
        counts = counts_from_codes(codes, SCHEMA)
        total += counts
        record.append(("partition", part.shape, part.dtypes.astype(str).tolist(),
                       codes.shape, codes.dtype, counts.shape, counts.dtype))
    exact = client.compute(count_graph(ddf, SCHEMA, split_every=2)).result()
    np.testing.assert_array_equal(exact, total)  # the cluster's tree reduction = the replay
    queries = query_vector(exact, SCHEMA)
    record += [("counts", exact.shape, exact.dtype), ("queries", queries.shape, queries.dtype),
               ("rows", rows_counted(exact, SCHEMA))]
    return record, exact


def released_queries(vector: np.ndarray) -> list[np.ndarray]:
    """``query_vector``'s cells split into the k queries: m histograms, then C(m,2) tables."""
    sizes = SCHEMA.sizes
    bounds = np.cumsum([0, *sizes, *(sizes[i] * sizes[j] for i, j, _, _ in
                                    attribute_pairs(SCHEMA))])
    assert bounds[-1] == len(vector)
    return [vector[a:b] for a, b in zip(bounds, bounds[1:])]


BASES: dict[str, tuple[list, np.ndarray]] = {}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", list(NEIGHBOURS))
def test_neighbours_differ_by_the_stated_sensitivity(client, tmp_path, fmt, case):
    if fmt not in BASES:
        BASES[fmt] = replay(read(fmt, base_frame(), tmp_path / "base"), client)
    base_record, base = BASES[fmt]
    record, neighbour = replay(read(fmt, neighbour_frame(NEIGHBOURS[case]), tmp_path / "n"),
                               client)

    # (b) the same partitions, shapes and dtypes at every step before the noise
    assert base_record[0][1] > 1
    assert record == base_record
    assert base.dtype == np.int64 and code_dtype(SCHEMA) == np.int8

    # (a) each released query moves by 0 or 2 (one count down, one up), never more
    difference = query_vector(neighbour, SCHEMA) - query_vector(base, SCHEMA)
    l1 = [int(np.abs(q).sum()) for q in released_queries(difference)]
    assert len(l1) == SCHEMA.m + SCHEMA.m * (SCHEMA.m - 1) // 2
    assert set(l1) <= {0, 2}, l1
    assert max(l1) <= QUERY_L1_SENSITIVITY
    assert any(l1)  # the replaced row did move a count

    # (c) with the same seeded randomness the noisy answers differ by the count difference only
    for mechanism in ("laplace", "gaussian"):
        plan = plan_noise(mechanism, 1.0, 1e-6, SCHEMA.m)
        noisy = [add_noise(query_vector(c, SCHEMA), plan, sampler="numpy", seed=SEED)
                 for c in (base, neighbour)]
        assert noisy[0].shape == noisy[1].shape and noisy[0].dtype == noisy[1].dtype
        scale = np.abs(noisy[0]).max() + np.abs(noisy[1]).max()
        np.testing.assert_allclose(noisy[1] - noisy[0], difference, rtol=0,
                                   atol=8 * np.finfo(float).eps * scale)
        released = [noisy_count_matrix(c, SCHEMA, plan, sampler="numpy", seed=SEED)
                    for c in (base, neighbour)]
        # clamping at 0 is post-processing: it can only shrink the difference
        moved = np.abs(released[1] - released[0])
        assert np.all(moved <= np.abs(neighbour - base) + 8 * np.finfo(float).eps * scale)
