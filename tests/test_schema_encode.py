"""Schema parsing and encoding of a partition, including the out-of-domain rules."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from conftest import SMALL_SCHEMA

from dp_dask.data.encode import EncodingError, encode_partition
from dp_dask.data.schema import SchemaError, load_schema


def test_schema_round_trips_through_json(small_schema, tmp_path):
    path = tmp_path / "schema.json"
    path.write_text(small_schema.dumps())
    again = load_schema(path)
    assert again == small_schema
    assert again.sha256() == small_schema.sha256()
    assert small_schema.sizes.tolist() == [3, 4, 2, 6]
    assert small_schema.offsets.tolist() == [0, 3, 7, 9]
    assert small_schema.d == 15
    assert small_schema["size"].labels == ("[0, 10)", "[10, 20)", "[20, 50)", "[50, inf)")


@pytest.mark.parametrize("change, message", [
    (lambda s: s["attributes"][0].update(on_unknown="purple"), "neither 'error' nor a label"),
    (lambda s: s["attributes"][1].update(edges=[0, 10, 10]), "increase strictly"),
    (lambda s: s["attributes"][0].update(categories=["a", "a"]), "duplicate labels"),
    (lambda s: s["attributes"].append({"name": "flag", "categories": ["x"]}), "duplicate"),
    (lambda s: s.update(schema_version=9), "not supported"),
    (lambda s: s["attributes"][1].update(type="date"), "type must be"),
])
def test_invalid_schemas_are_rejected(change, message):
    spec = json.loads(json.dumps(SMALL_SCHEMA))
    change(spec)
    with pytest.raises(SchemaError, match=message):
        load_schema(spec)


def test_unknown_schema_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a file nor a built-in"):
        load_schema(tmp_path / "nope.json")


def test_encode_codes_bins_and_public_other_bin(small_schema):
    frame = pd.DataFrame({
        "colour": ["red", "blue", "green"],
        "size": [0, 19.99, 1e9],
        "flag": ["yes", "no", "yes"],
        "city": ["e", "zzz", None],  # unknown and missing both go to the public "other" bin
        "ignored": [1, 2, 3],
    })
    codes = encode_partition(frame, small_schema)
    assert codes.dtype == np.int8
    assert codes.tolist() == [[0, 2, 1], [0, 1, 3], [1, 0, 1], [4, 5, 5]]


def test_numbers_match_string_categories():
    schema = load_schema({"attributes": [
        {"name": "grade", "categories": ["1", "2", "3"]}]})
    frame = pd.DataFrame({"grade": [3.0, 1.0, 2.0]})
    assert encode_partition(frame, schema).tolist() == [[2, 0, 1]]


@pytest.mark.parametrize("column, values, message", [
    ("colour", ["red", "purple", "blue"], "column 'colour': out-of-domain value 'purple'"),
    ("colour", ["red", None, "blue"], "column 'colour': 1 missing value(s)"),
    ("size", [1.0, np.nan, 3.0], "column 'size': 1 missing value(s)"),
    ("size", [1.0, -5.0, 3.0], "column 'size': out-of-domain value -5.0"),
    ("size", ["1", "lots", "3"], "column 'size': out-of-domain value 'lots'"),
])
def test_values_outside_domain_fail_with_column_and_value(small_schema, column, values, message):
    frame = pd.DataFrame({"colour": ["red"] * 3, "size": [1.0] * 3, "flag": ["no"] * 3,
                          "city": ["a"] * 3})
    frame[column] = values
    with pytest.raises(EncodingError, match=re.escape(message)):
        encode_partition(frame, small_schema)


def test_missing_column_is_named(small_schema):
    frame = pd.DataFrame({"colour": ["red"], "size": [1.0], "flag": ["no"]})
    with pytest.raises(EncodingError, match=r"missing column\(s\) \['city'\]"):
        encode_partition(frame, small_schema)
