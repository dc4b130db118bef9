"""Neighbouring inputs: replacing one row changes that row's codes and no other row's.

The DP analysis assumes that a replaced row moves one count per histogram/table (L1 ≤ 2). That
holds only if a row's codes are a function of its own values and the public schema: never of the
other rows, the partition, or the column's dtype. Each case encodes a dataset and its neighbour
(row ``ROW`` replaced by a worst case) read from CSV, Parquet, a pandas or a Dask DataFrame.
"""

from __future__ import annotations

import re
from decimal import Decimal

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from dp_dask.data.encode import SHOW_VALUES, EncodingError, encode_partition
from dp_dask.data.io import read_table
from dp_dask.data.schema import load_schema
from dp_dask.data.text import category_text, value_text

OTHER = {"extra": ["other"], "on_unknown": "other", "on_missing": "other"}
SCHEMA = load_schema({"name": "neighbours", "attributes": [
    {"name": "colour", "categories": ["red", "green", "blue"], **OTHER},
    {"name": "grade", "categories": ["1", "2", "3"], **OTHER},
    {"name": "size", "type": "numeric", "edges": [0, 10, 20, 50, "inf"], **OTHER},
    {"name": "answer", "categories": ["False", "True"], **OTHER},
]})
FILLER = {"colour": "red", "grade": "2", "size": "5", "answer": "True"}  # the other columns
ROWS, ROW = 40, 17  # 17 is odd: the second base value of every case's cycle
NA, NAN, INF = pd.NA, np.nan, np.inf
SIZE_BINS = ["[0, 10)", "[10, 20)", "[20, 50)", "[50, inf)"]

# (attribute, dtype) → (base: (value, label) cycled over the rows, replacements of row ROW:
# (value, label), or (value, label, label when the value went through a CSV file)).
# "mixed" is an object column holding several types; Parquet cannot store it.
CASES = {
    ("colour", "object"): (
        [("red", "red"), ("green", "green")],
        [("purple", "other"), (None, "other"), ("blue", "blue"), ("", "other")]),
    ("colour", "string"): (
        [("red", "red"), ("green", "green")],
        [("purple", "other"), (NA, "other"), ("blue", "blue")]),
    ("colour", "category"): (
        [("red", "red"), ("green", "green")],
        [("purple", "other"), (NAN, "other"), ("blue", "blue")]),
    ("grade", "float64"): (
        [(1.0, "1"), (2.0, "2"), (3.0, "3"), (NAN, "other")],
        [(2.5, "other"), (INF, "other"), (-INF, "other"), (NAN, "other"), (1e20, "other"),
         (-0.0, "other"), (3.0, "3", "other")]),  # to_csv writes 3.0 as "3.0"
    ("grade", "Int64"): (
        [(1, "1"), (2, "2"), (3, "3"), (NA, "other")],
        [(7, "other"), (NA, "other"), (3, "3")]),
    ("grade", "int64"): (
        [(1, "1"), (2, "2"), (3, "3")],
        [(7, "other"), (-1, "other"), (3, "3")]),
    ("grade", "string"): (
        [("1", "1"), ("2", "2"), ("3", "3"), (NA, "other")],
        [("2.5", "other"), ("3.0", "other"), ("3", "3"), (NA, "other")]),
    ("grade", "category"): (  # float categories, as Parquet dictionaries of floats read back
        [(1.0, "1"), (2.0, "2"), (3.0, "3"), (NAN, "other")],
        [(2.5, "other"), (3.0, "3", "other"), (NAN, "other")]),
    ("grade", "mixed"): (
        [("1", "1"), (2, "2"), (3.0, "3", ), (None, "other")],
        [(2.5, "other"), ("x", "other"), (True, "other"), ("3.0", "other"), (INF, "other"),
         (np.float64(3.0), "3", "other"), (np.int8(3), "3"), (Decimal("3"), "3")]),
    ("grade", "bool"): (  # bools are "True"/"False", never "1"/"0"
        [(True, "other"), (False, "other")],
        [(True, "other")]),
    ("size", "float64"): (
        [(5.0, "[0, 10)"), (15.5, "[10, 20)"), (30.0, "[20, 50)"), (NAN, "other")],
        [(10.0, "[10, 20)"), (9.999, "[0, 10)"), (50.0, "[50, inf)"), (INF, "other"),
         (-INF, "other"), (NAN, "other"), (-0.5, "other"), (2.5, "[0, 10)")]),
    ("size", "Int64"): (
        [(5, "[0, 10)"), (15, "[10, 20)"), (30, "[20, 50)"), (NA, "other")],
        [(20, "[20, 50)"), (-5, "other"), (NA, "other")]),
    ("size", "int64"): (
        [(5, "[0, 10)"), (15, "[10, 20)"), (30, "[20, 50)"), (60, "[50, inf)")],
        [(20, "[20, 50)"), (-5, "other"), (0, "[0, 10)")]),
    ("size", "string"): (
        [("5", "[0, 10)"), ("15.5", "[10, 20)"), ("30", "[20, 50)"), (NA, "other")],
        [("lots", "other"), ("10", "[10, 20)"), ("inf", "other"), ("-inf", "other"),
         (NA, "other"), ("2.5", "[0, 10)")]),
    ("size", "mixed"): (
        [(5, "[0, 10)"), ("15.5", "[10, 20)"), (30.0, "[20, 50)"), (None, "other")],
        [("lots", "other"), (10, "[10, 20)"), (INF, "other"), (2.5, "[0, 10)"),
         ("20", "[20, 50)")]),
    ("size", "category"): (
        [("5", "[0, 10)"), ("15.5", "[10, 20)"), ("30", "[20, 50)"), (NAN, "other")],
        [("lots", "other"), ("10", "[10, 20)"), (NAN, "other")]),
    ("answer", "bool"): (
        [(True, "True"), (False, "False")],
        [(True, "True")]),
    ("answer", "boolean"): (
        [(True, "True"), (False, "False"), (NA, "other")],
        [(True, "True"), (NA, "other")]),
    ("answer", "mixed"): (
        [(True, "True"), ("False", "False"), (None, "other")],
        [(np.True_, "True"), (1, "other"), ("yes", "other")]),
}
FORMATS = ("pandas", "dask", "parquet", "csv")


def row_texts(values: pd.Series) -> list[str]:
    """The text each row is compared as, from ``category_text``'s (texts, inverse)."""
    texts, inverse = category_text(values)
    return list(texts) if inverse is None else list(np.asarray(texts, dtype=object)[inverse])


def column(values: list, dtype: str) -> pd.Series:
    if dtype in ("object", "mixed"):
        return pd.Series(values, dtype=object)
    if dtype == "category":  # one category set for base and neighbours
        return pd.Series(pd.Categorical(values))
    return pd.Series(values, dtype=dtype)


def frames(attribute: str, dtype: str, value) -> tuple[pd.DataFrame, pd.DataFrame]:
    base, _ = CASES[attribute, dtype]
    values = [base[r % len(base)][0] for r in range(ROWS)]
    changed = list(values)
    changed[ROW] = value
    if dtype == "category":  # the same categories on both sides, as a public dictionary
        cats = pd.unique(pd.Series([v for v in values + [value] if not pd.isna(v)],
                                   dtype=object))
        cats = pd.Index(list(cats), dtype=float if attribute == "grade" else object)
        make = lambda vs: pd.Series(pd.Categorical(vs, categories=cats))  # noqa: E731
    else:
        make = lambda vs: column(vs, dtype)  # noqa: E731
    filler = {name: pd.Series([v] * ROWS, dtype=object) for name, v in FILLER.items()}
    return (pd.DataFrame({**filler, attribute: make(values)}),
            pd.DataFrame({**filler, attribute: make(changed)}))


def encode_via(fmt: str, frame: pd.DataFrame, path) -> tuple[np.ndarray, int]:
    """Codes of all rows read through one input format, and the number of partitions."""
    if fmt == "pandas":
        ddf = read_table(frame, SCHEMA, partition_rows=15)
    elif fmt == "dask":  # built without Dask's object → text conversion (see read_table)
        with dask.config.set({"dataframe.convert-string": False}):
            ddf = read_table(dd.from_pandas(frame, npartitions=3), SCHEMA)
    elif fmt == "parquet":
        frame.to_parquet(path.with_suffix(".parquet"), row_group_size=15)
        ddf = read_table(path.with_suffix(".parquet"), SCHEMA)
    else:
        frame.to_csv(path.with_suffix(".csv"), index=False)
        ddf = read_table(path.with_suffix(".csv"), SCHEMA, csv_blocksize="256B")
    parts = dask.compute(*ddf.to_delayed(), scheduler="sync")
    return np.concatenate([encode_partition(p, SCHEMA) for p in parts], axis=1), len(parts)


def label_codes(attribute: str, labels: list[str]) -> list[int]:
    return [SCHEMA[attribute].labels.index(label) for label in labels]


BASES: dict[tuple[str, str, str], tuple[np.ndarray, int]] = {}
PARAMS = [
    pytest.param(fmt, attribute, dtype, replacement, id=f"{fmt}-{attribute}-{dtype}-{i}")
    for fmt in FORMATS
    for (attribute, dtype), (_, replacements) in CASES.items()
    for i, replacement in enumerate(replacements)
    if not (fmt == "parquet" and dtype == "mixed")
]


@pytest.mark.parametrize("fmt, attribute, dtype, replacement", PARAMS)
def test_one_replaced_row_changes_only_its_own_codes(tmp_path, fmt, attribute, dtype,
                                                     replacement):
    value, label = replacement[:2]
    if fmt == "csv" and len(replacement) > 2:
        label = replacement[2]
    base_frame, neighbour_frame = frames(attribute, dtype, value)
    key = fmt, attribute, dtype
    if key not in BASES:  # the base dataset is the same for all replacements of a case
        BASES[key] = encode_via(fmt, base_frame, tmp_path / "base")
    base, base_parts = BASES[key]
    neighbour, neighbour_parts = encode_via(fmt, neighbour_frame, tmp_path / "neighbour")
    assert base.shape == neighbour.shape == (SCHEMA.m, ROWS)
    i = SCHEMA.names.index(attribute)
    if fmt != "csv":  # CSV holds to_csv's text of the values (3.0 → "3.0")
        pattern = CASES[attribute, dtype][0]
        expected = [pattern[r % len(pattern)][1] for r in range(ROWS)]
        assert base[i].tolist() == label_codes(attribute, expected)
    others = np.arange(ROWS) != ROW
    np.testing.assert_array_equal(neighbour[:, others], base[:, others])
    assert neighbour[i, ROW] == SCHEMA[attribute].labels.index(label)
    changed = set(np.flatnonzero((neighbour != base).any(axis=0)).tolist())
    assert changed == ({ROW} if neighbour[i, ROW] != base[i, ROW] else set())
    if fmt != "csv":  # row-based partitions; CSV blocks are bytes (see test_replay_audit)
        assert base_parts == neighbour_parts


# The same value compares as the same text whatever column holds it.
SAME_VALUE = [
    (3.0, "3", ["float64", "Float64", "object", "category", "float32"]),
    (3, "3", ["int64", "Int64", "object", "category", "int8", "uint64"]),
    (2.5, "2.5", ["float64", "Float64", "object", "category", "float32"]),
    (INF, "inf", ["float64", "Float64", "object", "category"]),
    (-INF, "-inf", ["float64", "object"]),
    (-0.0, "0", ["float64", "object"]),
    (1e20, "100000000000000000000", ["float64", "object"]),
    (1e-05, "1e-05", ["float64", "object"]),
    (True, "True", ["bool", "boolean", "object", "category"]),
    ("3.0", "3.0", ["object", "string", "str", "category"]),
]
NEIGHBOURS = [None, NAN, "x", 2.5, 7.0, True, 10**30, 1e300, -INF]


@pytest.mark.parametrize("value, text, dtypes", SAME_VALUE, ids=lambda x: repr(x)[:12])
def test_text_of_a_value_ignores_its_column_and_dtype(value, text, dtypes):
    assert value_text(value) == text
    for dtype in dtypes:
        assert row_texts(pd.Series([value], dtype=dtype)) == [text], dtype
    for other in NEIGHBOURS:  # next to any other value, in an object column
        assert row_texts(pd.Series([other, value, other], dtype=object))[1] == text, other


def test_vectorised_text_equals_value_text():
    rng = np.random.default_rng(0)
    floats = np.concatenate([
        rng.standard_normal(2000) * 10.0 ** rng.integers(-30, 30, 2000),
        rng.integers(-10**6, 10**6, 500).astype(float), [2.0**63, -2.0**63, 2.0**64, 1e300],
        [0.1, 1e-05, 1e16, 123456789.5, INF, -INF, -0.0, 5e-324]])
    for dtype in (np.float64, np.float32):
        with np.errstate(over="ignore"):
            numbers = floats.astype(dtype)
        expected = [value_text(v) for v in numbers]
        assert row_texts(pd.Series(numbers)) == expected
        assert row_texts(pd.Series(list(numbers), dtype=object)) == expected
    ints = np.array([0, -1, 2**62, -(2**63)], dtype=np.int64)
    assert row_texts(pd.Series(ints)) == ["0", "-1", str(2**62), str(-(2**63))]


POOL = [True, False, 1, 0, 1.0, 0.0, -0.0, 2.5, np.float32(2.5), np.float64(1.0), np.int8(1),
        np.uint64(2**64 - 1), np.bool_(True), "1", "1.0", "True", float("inf"), -INF, 10**30,
        1e30, Decimal("1"), Decimal("2.50"), Decimal("2.5"), pd.Timestamp("2020-01-01", tz="UTC"),
        pd.Timestamp("2020-01-01 01:00", tz="Europe/Paris"), [1], b"1", 3 + 0j, None, NAN, NA]


def test_object_columns_mixing_types_are_converted_value_by_value():
    """Equal values of different types (True, 1, 1.0) or reprs (tz) are never merged."""
    rng = np.random.default_rng(1)
    for _ in range(200):
        values = [POOL[i] for i in rng.integers(0, len(POOL), rng.integers(1, 30))]
        column = pd.Series(values, dtype=object)
        present = ~column.isna().to_numpy()
        texts = row_texts(column)
        assert [t for t, p in zip(texts, present) if p] == [
            value_text(v) for v, p in zip(values, present) if p]


@pytest.mark.parametrize("values, message", [
    ([3.0, 2.5, 1.0, 3.0], "1 out-of-domain value(s) ({rule}), the first 2.5"),
    ([3.0, INF, 1.0], "1 out-of-domain value(s) ({rule}), the first inf"),
    ([3.0, 1.0, -INF], "1 out-of-domain value(s) ({rule}), the first -inf"),
    ([1, 2, 7, 8], "2 out-of-domain value(s) ({rule}), the first 7"),
    (["1", 3.0, "3.0"], "1 out-of-domain value(s) ({rule}), the first '3.0'"),
    ([True, 1.0], "1 out-of-domain value(s) ({rule}), the first True"),
])
def test_error_names_the_offending_value_when_asked(values, message):
    schema = load_schema({"attributes": [{"name": "grade", "categories": ["1", "2", "3"]}]})
    frame = pd.DataFrame({"grade": pd.Series(values, dtype=object if len(
        {type(v) for v in values}) > 1 else None)})
    message = message.format(rule="not among its categories ['1', '2', '3']")
    with dask.config.set({SHOW_VALUES: True}), pytest.raises(
            EncodingError, match=re.escape(f"column 'grade': {message}")):
        encode_partition(frame, schema)
    with pytest.raises(EncodingError, match=re.escape(message.split(", the first")[0])):
        encode_partition(frame, schema)  # by default: the count and the rule, no value


def test_error_shows_the_text_a_number_was_compared_as():
    schema = load_schema({"attributes": [{"name": "grade", "categories": ["1.0", "2.0"]}]})
    with dask.config.set({SHOW_VALUES: True}), pytest.raises(EncodingError, match=re.escape(
            "the first 1.0, compared with the categories as '1' and its rule")):
        encode_partition(pd.DataFrame({"grade": [1.0, 1.0]}), schema)


def test_pandas_input_keeps_object_columns_as_values():
    """Dask's default would turn an object column's 3.0 into "3.0" but a float column's into 3.0."""
    floats = pd.DataFrame({name: [v] * 4 for name, v in FILLER.items()})
    floats["grade"] = [1.0, 2.0, 3.0, 3.0]
    mixed = floats.copy()
    mixed["grade"] = pd.Series([1.0, 2.0, 3.0, "x"], dtype=object)
    codes = [encode_via("pandas", frame, None)[0][1].tolist() for frame in (floats, mixed)]
    assert codes == [[0, 1, 2, 2], [0, 1, 2, 3]]
