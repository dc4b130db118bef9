"""Schema parsing and encoding of a partition, including the out-of-domain rules."""

from __future__ import annotations

import json
import re

import dask
import numpy as np
import pandas as pd
import pytest
from conftest import SMALL_SCHEMA, SMALL_SCHEMA_PATH, correlated_frame

from dp_dask.cli import main
from dp_dask.data.encode import EncodingError, encode_partition
from dp_dask.data.schema import SchemaError, load_schema
from dp_dask.synthesizer import Synthesizer


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
    ("colour", ["red", "purple", "blue"],
     "column 'colour': 1 out-of-domain value(s) (not among its categories ['red', 'green', "
     "'blue'])"),
    ("colour", ["red", None, "blue"], "column 'colour': 1 missing value(s)"),
    ("size", [1.0, np.nan, 3.0], "column 'size': 1 missing value(s)"),
    ("size", [1.0, -5.0, -3.0], "column 'size': 2 out-of-domain value(s) (no number within "
                                "its bins [0, inf))"),
    ("size", ["1", "lots", "3"], "column 'size': 1 out-of-domain value(s) (no number"),
])
def test_values_outside_domain_fail_with_column_count_and_rule(small_schema, column, values,
                                                               message):
    frame = pd.DataFrame({"colour": ["red"] * 3, "size": [1.0] * 3, "flag": ["no"] * 3,
                          "city": ["a"] * 3})
    frame[column] = values
    with pytest.raises(EncodingError, match=re.escape(message)) as error:
        encode_partition(frame, small_schema)
    assert "rule is 'error'" in str(error.value)
    assert not {"purple", "-5", "lots"} & set(re.findall(r"[\w-]+", str(error.value)))


SECRETS = ("SECRET-VALUE-123", 987654321)


def _secret_input(tmp_path) -> str:
    """The small schema's data as Parquet, with one secret category and one secret size."""
    frame = correlated_frame(400)
    frame.loc[123, "colour"] = SECRETS[0]
    frame.loc[321, "size"] = -SECRETS[1]  # below the first bin [0, 10)
    frame.to_parquet(tmp_path / "secret.parquet")
    return str(tmp_path / "secret.parquet")


def _named(text: str) -> bool:
    return any(str(secret) in text for secret in SECRETS)


def test_errors_name_no_value_unless_asked(small_schema):
    frame = pd.DataFrame({"colour": [SECRETS[0], "red"], "size": [1.0, 2.0],
                          "flag": ["no", "no"], "city": ["a", "a"]})
    with pytest.raises(EncodingError, match=r"column 'colour': 1 out-of-domain") as error:
        encode_partition(frame, small_schema)
    assert not _named(str(error.value)) and not _named(repr(error.value))
    frame["colour"] = "red"
    frame.loc[0, "size"] = float(SECRETS[1]) * -1
    with pytest.raises(EncodingError, match=r"column 'size': 1 out-of-domain") as error:
        encode_partition(frame, small_schema)
    assert not _named(str(error.value))
    with dask.config.set({"dp-dask.show-values": True}):  # the data owner's own machine, asked for
        with pytest.raises(EncodingError, match=r"the first -987654321\.0"):
            encode_partition(frame, small_schema)


def test_a_fit_on_a_cluster_logs_no_value(client, tmp_path, small_schema):
    """Through the Python API on a LocalCluster: the exception, the driver's log and the workers'
    logs (Dask logs a failed task's exception there) hold no raw value."""
    data = _secret_input(tmp_path)
    with pytest.raises(EncodingError, match="column 'colour': 1 out-of-domain") as error:
        Synthesizer.create("marginals", small_schema, epsilon=1.0, ledger=False).fit(data)
    assert not _named(str(error.value)) and not _named(repr(error.value))
    logs = client.get_worker_logs()
    assert "out-of-domain" in str(logs) and not _named(str(logs))


def test_cli_shows_values_only_with_show_values(client, tmp_path, capsys):
    data = _secret_input(tmp_path)
    command = ["synth", "--data", data, "--schema", str(SMALL_SCHEMA_PATH),
               "--out", str(tmp_path / "out"), "--quiet"]
    assert main([*command, "--scheduler", client.scheduler.address]) == 2
    err = capsys.readouterr().err
    assert "column 'colour': 1 out-of-domain value(s)" in err and not _named(err)
    # Asked for, on local workers this command starts (this machine): the value is shown.
    assert main([*command, "--workers", "1", "--memory-limit", "0", "--show-values"]) == 2
    assert f"the first {SECRETS[0]!r}" in capsys.readouterr().err


def test_missing_column_is_named(small_schema):
    frame = pd.DataFrame({"colour": ["red"], "size": [1.0], "flag": ["no"]})
    with pytest.raises(EncodingError, match=r"missing column\(s\) \['city'\]"):
        encode_partition(frame, small_schema)


def test_clip_counts_numbers_beyond_the_bins_in_the_end_bins():
    """on_unknown 'clip': a number (a year) beyond the bins is counted in the nearest end bin;
    a value that is no number follows on_missing; only attributes with edges may clip."""
    schema = load_schema({"attributes": [
        {"name": "size", "type": "numeric", "edges": [0, 10, 20], "extra": ["missing"],
         "on_missing": "missing", "on_unknown": "clip"},
        {"name": "year", "type": "datetime", "unit": "year", "edges": [2013, 2014],
         "on_unknown": "clip"}]})
    frame = pd.DataFrame({"size": [-5, 5, 25, "abc", None],
                          "year": pd.to_datetime(["2012-12-31", "2013-06-01", "2014-01-01 00:05",
                                                  "2013-01-01", "2099-01-01"], utc=True,
                                                 format="ISO8601")})
    assert encode_partition(frame, schema).tolist() == [[0, 0, 1, 2, 2], [0, 0, 0, 0, 0]]
    bare = {"name": "size", "type": "numeric", "edges": [0, 10], "on_unknown": "clip"}
    with pytest.raises(EncodingError, match="1 value.s. that are no number") as error:
        encode_partition(pd.DataFrame({"size": ["x-secret"]}), load_schema({"attributes": [bare]}))
    assert "x-secret" not in str(error.value)
    with pytest.raises(SchemaError, match="on_unknown 'clip' needs bin edges"):
        load_schema({"attributes": [{"name": "c", "categories": ["a"], "on_unknown": "clip"}]})


def test_numeric_formats_read_each_value_on_its_own():
    """HHMM clock times are minutes of the day (2400 is 1440; 1275, 60 and 13.5 are no time),
    currency and percent text lose their symbols; each value on its own, whatever the dtype."""
    from dp_dask.data.encode import attribute_numbers

    def numbers(fmt: str, values: list) -> list:
        attribute = load_schema({"attributes": [{"name": "x", "type": "numeric", "format": fmt,
                                                 "edges": [0, 1440]}]})["x"]
        return attribute_numbers(pd.Series(values, dtype=object), attribute).tolist()

    hhmm = numbers("HHMM", [0, 59, 100, 1345, "0730", 2359.0, 2400, 1275, 13.5, 2401, -5, 60])
    assert hhmm[:7] == [0, 59, 60, 825, 450, 1439, 1440] and np.isnan(hhmm[7:]).all()
    money = numbers("currency", ["$1,234.50", "12", "€ 3", "x"])
    assert money[:3] == [1234.5, 12, 3] and np.isnan(money[3])
    assert numbers("percent", ["12.5%", 50]) == [12.5, 50]
    with pytest.raises(SchemaError, match="numeric format must be one of"):
        load_schema({"attributes": [{"name": "x", "type": "numeric", "format": "HH:MM",
                                     "edges": [0, 1]}]})


@pytest.mark.parametrize("ids, message", [
    ([{"name": "serial", "dtype": "float64"}], "id dtype must be one of"),
    ([{"name": "serial", "dtype": "int64", "format": "N###"}], "digits only"),
    ([{"name": "serial", "dtype": "int32", "format": "#" * 10}], "at most 9"),
    ([{"name": "serial", "format": "-"}], "draws nothing"),
    ([{"name": "colour"}], "'colour' is named like another column"),
    ([{"name": "a"}, {"name": "a"}], "'a' is named like another column"),
])
def test_bad_id_columns_are_schema_errors(small_schema, ids, message):
    with pytest.raises(SchemaError, match=message):
        load_schema({**small_schema.to_json(), "ids": ids})
