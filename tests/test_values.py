"""Typed release values: schema output types, decoding codes to values, reading them back."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SMALL_SCHEMA, codes_of, synth_code

from dp_dask.checks import DpDaskWarning
from dp_dask.cli import main
from dp_dask.data.decode import codes_to_frame
from dp_dask.data.demo import write_census
from dp_dask.data.dtypes import fine_layout
from dp_dask.data.encode import encode_partition
from dp_dask.data.schema import SchemaError, load_schema
from dp_dask.data.values import arrow_schema, decode_frame, decode_table
from dp_dask.evaluate.queries import compare_release
from dp_dask.synthesizer import Synthesizer

ROWS = 3_000
# Every output type, with open bins closed by public bounds (or not: "score").
TYPED = {"schema_version": 1, "name": "typed", "attributes": [
    {"name": "age", "type": "numeric", "edges": [0, 18, 65, "inf"], "dtype": "int64",
     "max": 99},
    {"name": "income", "type": "numeric", "edges": ["-inf", 0, 0.5, 10], "dtype": "float32",
     "min": -5},
    {"name": "score", "type": "numeric", "edges": [0, 1, "inf"]},
    {"name": "smoker", "type": "boolean", "extra": ["missing"], "on_missing": "missing"},
    {"name": "kids", "type": "categorical", "categories": ["0", "1", "2"], "dtype": "int32"},
    {"name": "colour", "type": "categorical", "categories": ["red", "blue"],
     "dtype": "category", "extra": ["other"], "on_unknown": "other"},
    {"name": "born", "type": "datetime", "unit": "year", "edges": [1950, 1980, 2000],
     "dtype": "timestamp[ns, tz=UTC]"},
    {"name": "month", "type": "datetime", "unit": "month"},
    {"name": "city", "type": "categorical", "categories": ["a", "b"], "extra": ["missing"],
     "on_missing": "missing"},
]}
EXPECTED = pa.schema([
    pa.field("age", pa.int64(), nullable=False),
    pa.field("income", pa.float32(), nullable=False),
    pa.field("score", pa.float64(), nullable=False),
    pa.field("smoker", pa.bool_()),
    pa.field("kids", pa.int32(), nullable=False),
    # Parquet gives a dictionary column back with string values, whatever it was written with
    pa.field("colour", pa.dictionary(pa.int8(), pa.string()), nullable=False),
    pa.field("born", pa.timestamp("ns", tz="UTC"), nullable=False),
    pa.field("month", pa.large_string(), nullable=False),
    pa.field("city", pa.large_string()),
])


def typed_frame(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    years = rng.integers(1950, 2000, n)
    born = pd.to_datetime(pd.Series(years.astype(str)) + "-06-15", utc=True)
    smoker = pd.array(rng.random(n) < 0.3, dtype="boolean")
    smoker[rng.random(n) < 0.1] = pd.NA
    city = pd.Series(rng.choice(["a", "b"], n), dtype=object)
    city[rng.random(n) < 0.1] = None
    return pd.DataFrame({
        "age": rng.integers(0, 99, n), "income": rng.uniform(-4, 9.9, n).astype(np.float32),
        "score": rng.exponential(1, n), "smoker": smoker, "kids": rng.integers(0, 3, n),
        "colour": rng.choice(["red", "blue", "green"], n), "born": born,
        "month": born + pd.to_timedelta(rng.integers(0, 300, n), unit="D"), "city": city})


def release(source, tmp_path, decode="uniform", schema=TYPED):
    synthesizer = Synthesizer.create("marginals", schema, epsilon=1.0, noise_sampler="numpy",
                                     noise_seed=1, ledger=False).fit(source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DpDaskWarning)  # "score" has no public max
        return synthesizer, synthesizer.write(tmp_path / "release", ROWS, seed=3,
                                              partition_rows=1_000, decode=decode)


@pytest.mark.parametrize("kind", ["csv", "parquet", "pandas", "dask"])
def test_release_has_the_schemas_types_whatever_the_input(client, tmp_path, kind):
    frame = typed_frame(2_000)
    source = {"pandas": frame, "dask": dd.from_pandas(frame, npartitions=2)}.get(kind)
    if kind == "csv":
        source = tmp_path / "in.csv"
        frame.assign(smoker=frame["smoker"].astype(object).where(frame["smoker"].notna(), "")
                     ).to_csv(source, index=False)
    if kind == "parquet":
        source = tmp_path / "in.parquet"
        frame.to_parquet(source)
    schema = TYPED if kind != "csv" else {**TYPED, "missing_values": [""]}
    _, paths = release(source, tmp_path, schema=schema)
    parts = sorted(paths["parquet"].glob("*.parquet"))
    assert len(parts) == 3
    for part in parts:  # every part alike, nullable only where a null can be decoded
        assert pq.read_schema(part).remove_metadata() == EXPECTED
    synthetic = pd.read_parquet(paths["parquet"])
    assert synthetic["smoker"].isna().any() and synthetic["city"].isna().any()
    assert set(synthetic["month"]) <= {"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug",
                                       "Sep", "Oct", "Nov", "Dec"}
    output = json.loads(paths["metadata"].read_text())["output"]
    assert [c["name"] for c in output] == [a["name"] for a in TYPED["attributes"]]
    assert output[0] | {"max": 99} == output[0] and output[2]["open_bins_at_edge"] == ["max"]


def rows_of(schema, codes, decode="uniform", seed=0):
    return decode_frame(codes, schema, decode, np.random.SeedSequence(seed))


def all_codes(schema, repeat=2_000):
    """Every code of every attribute, ``repeat`` times, shuffled."""
    rng = np.random.default_rng(0)
    rows = repeat * int(schema.sizes.max())
    return np.stack([rng.permutation(np.resize(np.arange(s), rows)) for s in schema.sizes],
                    axis=1).astype(np.int16)


def test_values_stay_in_their_bins_and_public_bounds():
    schema = load_schema(TYPED)
    codes = all_codes(schema)
    frame = rows_of(schema, codes)
    age, income, born = frame["age"], frame["income"], frame["born"]
    assert age.dtype == np.int64 and income.dtype == np.float32
    # Binned back through the schema, each value is in the bin it was drawn for.
    np.testing.assert_array_equal(codes_of(frame, schema), codes)
    assert age.max() == 99 and age[codes[:, 0] == 2].min() == 65  # [65, max 99], both ends
    assert age[codes[:, 0] == 0].min() == 0 and age[codes[:, 0] == 0].max() == 17
    assert income.min() >= -5 and income[codes[:, 1] == 1].max() < 0.5
    assert frame["score"][codes[:, 2] == 1].eq(1.0).all()  # open, no max: the edge
    assert born.dt.year.min() == 1950 and born.dt.year.max() == 1999
    assert len(np.unique(age)) == 100  # uniform over the integers: every one drawn


def test_midpoint_and_label_modes():
    schema = load_schema(TYPED)
    codes = all_codes(schema, repeat=3)
    middle = rows_of(schema, codes, "midpoint")
    assert middle["age"].tolist() == [[8, 41, 82][c] for c in codes[:, 0]]
    expected = np.array([-2.5, 0.25, 5.25], dtype=np.float32)[codes[:, 1]]
    np.testing.assert_allclose(middle["income"], expected, rtol=1e-6)
    labels = rows_of(schema, codes, "label")
    pd.testing.assert_frame_equal(labels, codes_to_frame(codes, schema))
    # An attribute's own decode wins over the release's.
    own = load_schema({**TYPED, "attributes": [{**TYPED["attributes"][0], "decode": "label"}]})
    assert rows_of(own, codes[:, :1], "uniform")["age"].dtype == "category"


def test_extra_bins_decode_as_null_or_label():
    schema = load_schema(TYPED)
    codes = np.zeros((4, schema.m), dtype=np.int16)
    codes[:, 3] = [0, 1, 2, 2]  # smoker: False, True, missing
    codes[:, 5] = [0, 2, 1, 2]  # colour: red, other, blue, other
    codes[:, 8] = [2, 0, 2, 1]  # city: missing, a, missing, b
    frame = rows_of(schema, codes)
    assert frame["smoker"].dtype == "boolean"
    assert frame["smoker"].tolist() == [False, True, pd.NA, pd.NA]
    assert frame["colour"].tolist() == ["red", "other", "blue", "other"]  # text: its label
    assert frame["city"].isna().tolist() == [True, False, True, False]
    # A numeric column's extra bin other than the missing one is a null too.
    numeric = load_schema({"attributes": [{"name": "n", "type": "numeric", "edges": [0, 1],
                                           "dtype": "int64", "extra": ["unknown"],
                                           "on_unknown": "unknown"}]})
    values = rows_of(numeric, np.array([[0], [1]], dtype=np.int16))["n"]
    assert values.dtype == "Int64" and values.isna().tolist() == [False, True]
    np.testing.assert_array_equal(codes_of(values.to_frame(), numeric)[:, 0], [0, 1])


def test_draws_come_from_a_child_of_the_partition_seed():
    schema = load_schema(TYPED)
    codes = all_codes(schema, repeat=10)
    pd.testing.assert_frame_equal(rows_of(schema, codes, seed=5), rows_of(schema, codes, seed=5))
    assert not rows_of(schema, codes, seed=5)["age"].equals(rows_of(schema, codes, seed=6)["age"])


def test_same_codes_in_every_mode_and_same_rows_however_scheduled(client, tmp_path):
    synthesizer = Synthesizer.create("marginals", TYPED, epsilon=1.0, noise_sampler="numpy",
                                     noise_seed=1, ledger=False).fit(typed_frame(2_000))
    schema = synthesizer.schema
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DpDaskWarning)
        typed = synthesizer.sample(ROWS, seed=2, partition_rows=1_000).compute()
        with dask.config.set(scheduler="sync"):
            in_process = synthesizer.sample(ROWS, seed=2, partition_rows=1_000).compute()
        labels = synthesizer.sample(ROWS, seed=2, partition_rows=1_000, decode="label").compute()
    pd.testing.assert_frame_equal(typed, in_process)
    # The value draws take their own seed: label mode's codes are the typed release's bins.
    np.testing.assert_array_equal(codes_of(typed, schema), codes_of(labels, schema))
    assert (labels.dtypes == "category").all()


def test_a_resumed_write_never_mixes_decodings(client, tmp_path):
    synthesizer, paths = release(typed_frame(2_000), tmp_path, decode="label")
    first = pd.read_parquet(paths["parquet"])
    assert first["age"].dtype == "category"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DpDaskWarning)
        synthesizer.write(tmp_path / "release", ROWS, seed=3, partition_rows=1_000)
    again = pd.read_parquet(paths["parquet"])
    assert again["age"].dtype == np.int64  # a new plan, all parts rewritten
    np.testing.assert_array_equal(codes_of(first, synthesizer.schema),
                                  codes_of(again, synthesizer.schema))


def test_typed_and_label_releases_evaluate_alike(client, tmp_path):
    data = typed_frame(2_000)
    synthesizer, typed = release(data, tmp_path / "typed")
    _, labels = release(data, tmp_path / "labels", decode="label")
    schema = synthesizer.schema
    expected = compare_release(data, labels["parquet"], schema).records
    pd.testing.assert_frame_equal(compare_release(data, typed["parquet"], schema).records,
                                  expected)
    csv = tmp_path / "typed.csv"  # typed values as text: read back value by value
    pd.read_parquet(typed["parquet"]).to_csv(csv, index=False)
    pd.testing.assert_frame_equal(compare_release(data, csv, schema).records, expected)


def test_demo_release_has_the_demo_inputs_arrow_types(client, tmp_path):
    data = write_census(tmp_path / "census.parquet", n_rows=4_000, partition_rows=2_000)
    synthesizer = Synthesizer.create("marginals", "demo", epsilon=1.0, noise_sampler="numpy",
                                     noise_seed=0, ledger=False).fit(data)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DpDaskWarning)  # every open bin has a public max
        paths = synthesizer.write(tmp_path / "release", 4_000, seed=0, partition_rows=2_000)
    given = pq.read_schema(next(data.glob("*.parquet")))
    released = pq.read_schema(next(paths["parquet"].glob("*.parquet")))
    assert [(f.name, f.type) for f in released] == [(f.name, f.type) for f in given]
    assert [f.name for f in released if f.nullable] == ["occupation"]
    frame = pd.read_parquet(paths["parquet"])
    assert frame["age"].between(18, 90).all() and frame["household_size"].between(1, 8).all()


def attribute(**spec):
    return {"attributes": [{"name": "x", **spec}]}


@pytest.mark.parametrize("spec, message", [
    (attribute(type="numeric", edges=[0, 10, "inf"], max=5), "max 5 must lie at or above"),
    (attribute(type="numeric", edges=["-inf", 0, 10], min=3), "min 3 must lie below"),
    (attribute(type="numeric", edges=["-inf", 0, 10], min=0), "min 0 must lie below"),
    (attribute(type="numeric", edges=[0, 10, "inf"], max="inf"), "must be finite"),
    (attribute(type="numeric", edges=[0, 0.5, 1], dtype="int64"), r"bin '\[0.5, 1\)' holds no"),
    (attribute(type="categorical", categories=list("abcde"), dtype="bool"), "dtype bool"),
    (attribute(type="categorical", categories=["1", "two"], dtype="int64"), "'two'"),
    (attribute(type="categorical", categories=["1", "2.0"], dtype="int64"), "'2.0'"),
    (attribute(type="categorical", categories=["a"], min=0), "'min'/'max' are public"),
    (attribute(type="boolean", dtype="int64"), "can't be output as int64"),
    (attribute(type="datetime", unit="month", dtype="timestamp[ns]"), "can't be output"),
    (attribute(type="numeric", edges=[0, 1], dtype="int8"), "dtype must be one of"),
    (attribute(type="datetime", unit="year", edges=[1500, 2000]), "holds the years 1678-2261"),
    (attribute(type="numeric", edges=[0, 1], decode="random"), "decode must be one of"),
])
def test_impossible_outputs_are_schema_errors(spec, message):
    with pytest.raises(SchemaError, match=f"attribute 'x': .*{message}"):
        load_schema(spec)


def test_schemas_without_outputs_keep_their_hash():
    small = load_schema(SMALL_SCHEMA)
    assert "dtype" not in json.dumps(small.to_json())
    typed = load_schema(TYPED)
    assert load_schema(json.loads(typed.dumps())) == typed  # dtype, min/max survive
    assert typed.to_json()["attributes"][0] | {"dtype": "int64", "max": 99} == \
        typed.to_json()["attributes"][0]


def test_cli_refuses_a_bad_output_type_before_reading_data(client, tmp_path, capsys):
    spec = attribute(type="categorical", categories=["a", "b", "c"], dtype="bool")
    # read, "x\nd\n" would stop on its out-of-domain value
    assert synth_code(client, tmp_path, spec, "x\nd\n", "--decode", "midpoint") == 2
    assert "attribute 'x': dtype bool needs categories" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_drawn_floats_are_stored_uncompressed_and_read_back_exactly(client, tmp_path):
    """Parquet keeps drawn floats (float64 and float32) uncompressed and everything else
    snappy; the part holds the decoded values to the bit (as the lazy sample decodes them)."""
    synthesizer, paths = release(typed_frame(2_000), tmp_path)
    parts = sorted(Path(paths["parquet"]).glob("part.*.parquet"))
    assert len(parts) == 3
    chunks = pq.ParquetFile(parts[0]).metadata.row_group(0)
    stored = {chunks.column(i).path_in_schema: chunks.column(i).compression
              for i in range(chunks.num_columns)}
    assert stored == {"age": "SNAPPY", "income": "UNCOMPRESSED", "score": "UNCOMPRESSED",
                      **{name: "SNAPPY" for name in stored if name not in
                         ("age", "income", "score")}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DpDaskWarning)  # "score" has no public max
        expected = synthesizer.sample(ROWS, seed=3, partition_rows=1_000).compute()
    written = pd.read_parquet(paths["parquet"])
    pd.testing.assert_frame_equal(written, expected.reset_index(drop=True), check_exact=True)


def test_values_read_back_exactly_through_the_schema():
    schema = load_schema(TYPED)
    frame = typed_frame(500, seed=4)
    codes = encode_partition(frame.assign(smoker=frame["smoker"].fillna(False)), schema).T
    decoded = rows_of(schema, codes.astype(np.int16))
    np.testing.assert_array_equal(codes_of(decoded, schema), codes)


@pytest.mark.parametrize("decode", ["label", "midpoint"])
def test_cli_decode_option(client, people_csv, tmp_path, decode):
    out = tmp_path / "release"
    code = main(["synth", "--data", str(people_csv), "--schema", "tests/small_schema.json",
                 "--epsilon", "1", "--out", str(out), "--rows", "500", "--decode", decode,
                 "--ledger", str(tmp_path / "ledger.sqlite"), "--noise-sampler", "numpy",
                 "--noise-seed", "0", "--scheduler", client.scheduler.address, "--quiet"])
    assert code == 0
    frame = pd.read_parquet(out / "synthetic.parquet")
    metadata = json.loads((out / "metadata.json").read_text())
    assert metadata["sampling"]["decode"] == decode
    assert [c["decode"] for c in metadata["output"]] == [decode] * 4
    if decode == "label":
        assert (frame.dtypes == "category").all()
    else:  # size's bins [0, 10), [10, 20), [20, 50), [50, max 100000]
        assert set(frame["size"]) <= {5.0, 15.0, 35.0, 50_025.0}


# Every output type, declared text types, ids, recombined timestamps (naive and aware), fine grids.
ISSUE69_SCHEMAS = [
    TYPED,
    {**TYPED, "name": "declared", "attributes": [
        {**a, "dtype": "string"} if a["name"] == "city" else a for a in TYPED["attributes"]],
     "ids": [{"name": "serial", "dtype": "int64", "format": "#####"},
             {"name": "code", "dtype": "string", "format": "@@-##", "position": 0}]},
    {"schema_version": 1, "name": "calendar", "attributes": [
        *({"name": f"signup_{unit}", "type": "datetime", "source": "signup", "unit": unit,
           "extra": ["missing"], "on_missing": "missing",
           **({"edges": [2015, 2020, 2025], "dtype": "timestamp[us, tz=America/New_York]",
               "fine": {"start": 2015, "stop": 2025, "step": 1}} if unit == "year" else {})}
          for unit in ("year", "month", "weekday", "hour")),
        {"name": "hours", "type": "numeric", "edges": [0, 10, 40, 100], "dtype": "float64",
         "decimals": 1, "fine": {"start": 0, "stop": 100, "step": 5}, "extra": ["missing"],
         "on_missing": "missing"}]},
]


@pytest.mark.parametrize("decode", ["uniform", "midpoint", "label"])
@pytest.mark.parametrize("spec", ISSUE69_SCHEMAS, ids=lambda spec: spec["name"])
def test_issue69_decode_table_is_the_frames_arrow_table(spec, decode):
    """The write path's table, built without the frame, is the frame's: values, nulls, types
    and the pandas metadata alike."""
    schema = load_schema(spec)
    codes = all_codes(schema, repeat=500)
    rng = np.random.default_rng(1)
    fine = {i: rng.random(fine_layout(schema.attributes[i]).measured.stop
                          - fine_layout(schema.attributes[i]).measured.start)
            for i in schema.fine_grids}
    arrow = arrow_schema(schema, decode)
    seed = np.random.SeedSequence([7, 3])
    table = decode_table(codes, schema, decode, seed, arrow, fine)
    frame = decode_frame(codes, schema, decode, seed, fine)
    expected = pa.Table.from_pandas(frame, schema=arrow, preserve_index=False)
    assert table.equals(expected, check_metadata=True)
    assert sum(column.null_count for column in table.columns) > 0 or decode == "label"
