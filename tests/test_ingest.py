"""Bringing real data in: the schema, not the reader, says what is missing; boolean and datetime.

A CSV cell is text (``NA``, ``null`` and the empty cell included) and the schema's
``missing_values`` decide which texts are missing: one rule for CSV, Parquet, pandas and Dask.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from dp_dask.cli import main
from dp_dask.data.counts import count_graph
from dp_dask.data.encode import EncodingError, encode_partition
from dp_dask.data.io import read_table
from dp_dask.data.schema import CALENDAR_UNITS, SchemaError, load_schema
from dp_dask.evaluate.queries import release_labels
from dp_dask.synthesizer import Synthesizer

ANSWERS = ["yes", "NA", "", "null"]  # pandas' read_csv would make the last three NaN
SHARES = [0.4, 0.3, 0.2, 0.1]
ROWS = 4_000
SCHEMA = {"name": "survey", "attributes": [
    {"name": "answer", "categories": ANSWERS},
    {"name": "score", "type": "numeric", "edges": {"start": 0, "stop": 100, "step": 25},
     "missing_values": ["-9"], "extra": ["unknown"], "on_missing": "unknown"},
]}


def survey(rows: int = ROWS, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    score = rng.integers(0, 100, rows)
    score[rng.random(rows) < 0.1] = -9  # the survey's own "no answer" code
    return pd.DataFrame({"answer": rng.choice(ANSWERS, rows, p=SHARES), "score": score})


def inputs(frame: pd.DataFrame, tmp_path) -> dict[str, object]:
    frame.to_csv(tmp_path / "survey.csv", index=False)
    frame.to_parquet(tmp_path / "survey.parquet")
    with dask.config.set({"dataframe.convert-string": False}):
        ddf = dd.from_pandas(frame, npartitions=3)
    return {"csv": tmp_path / "survey.csv", "parquet": tmp_path / "survey.parquet",
            "pandas": frame, "dask": ddf}


def test_csv_keeps_na_like_text(tmp_path):
    frame = survey(50)
    frame.to_csv(tmp_path / "survey.csv", index=False)
    read = read_table(tmp_path / "survey.csv", load_schema(SCHEMA)).compute()
    assert read["answer"].isna().sum() == 0
    assert read["answer"].tolist() == frame["answer"].tolist()


def test_every_input_format_counts_the_same(client, tmp_path):
    schema = load_schema(SCHEMA)
    frame = survey()
    counts = {fmt: count_graph(read_table(source, schema), schema).compute()
              for fmt, source in inputs(frame, tmp_path).items()}
    expected = counts.pop("pandas")
    one_way = np.diag(expected)
    answer_counts = one_way[: len(ANSWERS)]
    assert answer_counts.tolist() == [int((frame["answer"] == a).sum()) for a in ANSWERS]
    assert one_way[schema.offsets[1] + schema["score"].labels.index("unknown")] == int(
        (frame["score"] == -9).sum())
    for fmt, table in counts.items():
        np.testing.assert_array_equal(table, expected, err_msg=fmt)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_na_like_categories_round_trip_to_a_release(client, tmp_path, fmt):
    frame = survey()
    source = inputs(frame, tmp_path)[fmt]
    synthesizer = Synthesizer.create("marginals", SCHEMA, epsilon=8.0, noise_sampler="numpy",
                                     noise_seed=0, ledger=False).fit(source)
    paths = synthesizer.write(tmp_path / "release", ROWS, seed=1)
    release = pd.read_parquet(paths["parquet"])
    answers = release["answer"].astype(object)
    assert answers.isna().sum() == 0
    assert set(answers) == set(ANSWERS)  # "NA", "" and "null" come back as text
    # Each share within 0.05: at ε = 8 the noise of a 4,000-row histogram is a few counts, and
    # the sampling error of 4,000 rows has σ ≤ 0.008.
    shares = answers.value_counts(normalize=True)
    for answer, share in zip(ANSWERS, SHARES):
        assert abs(shares[answer] - share) < 0.05, answer
    # The release reads back through the schema, its nulls ("score": missing) included.
    labels = synthesizer.schema.as_labels()
    assert release["score"].isna().any() and release["score"].dtype == np.float64
    again = count_graph(release_labels(paths["parquet"], synthesizer.schema), labels).compute()
    assert np.diag(again)[: len(ANSWERS)].tolist() == [int((answers == a).sum())
                                                         for a in ANSWERS]


def test_missing_values_schema_wide_and_per_attribute():
    schema = load_schema({"missing_values": ["NA", ""], "attributes": [
        {"name": "a", "categories": ["x", "y"], "extra": ["missing"], "on_missing": "missing"},
        {"name": "b", "categories": ["x", "NA", ""], "missing_values": []},  # its own rule
        {"name": "c", "type": "numeric", "edges": [0, 10], "extra": ["m"], "on_missing": "m"},
    ]})
    assert schema["a"].missing_values == ("NA", "") and schema["b"].missing_values == ()
    frame = pd.DataFrame({"a": ["x", "NA", "", None], "b": ["NA", "", "x", "x"],
                          "c": ["5", "", "NA", np.nan]})
    assert encode_partition(frame, schema).tolist() == [[0, 2, 2, 2], [1, 2, 0, 0],
                                                        [0, 1, 1, 1]]
    assert load_schema(schema.to_json()) == schema


def test_missing_error_names_the_missing_values():
    schema = load_schema({"attributes": [
        {"name": "answer", "categories": ["yes", "no"], "missing_values": ["NA"]}]})
    with pytest.raises(EncodingError, match=re.escape(
            "column 'answer': 2 missing value(s) (null or in missing_values ['NA'])")):
        encode_partition(pd.DataFrame({"answer": ["yes", "NA", None]}), schema)


def test_a_value_cannot_be_both_category_and_missing():
    with pytest.raises(SchemaError, match=r"attribute 'a': \['NA'\] listed both"):
        load_schema({"missing_values": ["NA"], "attributes": [
            {"name": "a", "categories": ["NA", "x"]}]})


@pytest.mark.parametrize("change, message", [
    ({"type": "numeric", "edges": [0, float("nan"), 10]}, "attribute 'a': bin edge NaN"),
    ({"type": "numeric", "edges": [0, 10, 5]}, "attribute 'a': edges must increase strictly"),
    ({"type": "numeric", "edges": [0, "inf", "inf"]}, "attribute 'a': edges must increase"),
    ({"type": "numeric", "edges": "0-10"}, "attribute 'a': edges must be a list or a range"),
    ({"type": "numeric", "edges": {"start": 0, "stop": 10, "step": 3}}, "multiple of step"),
    ({"type": "numeric", "edges": {"start": 0, "stop": 10}}, "needs 'start', 'stop', 'step'"),
    ({"categories": "MF"}, "attribute 'a': 'categories' must be a list, got 'MF'"),
    ({"categories": ["M", None]}, "attribute 'a': 'categories' holds None"),
    ({"categories": ["M"], "missing_values": "NA"}, "'missing_values' must be a list"),
    ({"type": "datetime", "unit": "fortnight"}, "datetime 'unit' must be one of"),
    ({"type": "datetime", "unit": "year"}, "needs year 'edges'"),
    ({"type": "boolean", "true_values": ["1"], "false_values": ["1", "0"]}, "in both true_"),
])
def test_insane_schemas_name_the_attribute(change, message):
    with pytest.raises(SchemaError, match=re.escape(message)):
        load_schema({"attributes": [{"name": "a", **change}]})


def test_range_shorthand_expands_to_round_edges():
    schema = load_schema({"attributes": [
        {"name": "x", "type": "numeric", "edges": {"start": 0, "stop": 1, "step": 0.1}},
        {"name": "y", "type": "numeric",
         "edges": {"start": 0, "stop": 100, "step": 25, "open_below": True,
                   "open_above": True}}]})
    assert schema["x"].edges == tuple(i / 10 for i in range(11))
    assert schema["y"].edges == (-math.inf, 0, 25, 50, 75, 100, math.inf)
    assert schema["y"].labels[0] == "[-inf, 0)"
    assert load_schema(json.loads(schema.dumps())) == schema


def test_boolean_and_datetime_attributes_round_trip_through_json():
    schema = load_schema({"attributes": [
        {"name": "b", "type": "boolean", "true_values": ["Y"], "false_values": ["N"]},
        {"name": "t", "type": "datetime", "unit": "year", "format": "%Y",
         "edges": {"start": 2000, "stop": 2020, "step": 10}, "extra": ["m"], "on_missing": "m"},
        {"name": "h", "type": "datetime", "unit": "hour"}]})
    assert schema.sizes.tolist() == [2, 3, 24]
    assert load_schema(json.loads(schema.dumps())) == schema
    assert encode_partition(pd.DataFrame({"b": ["N", "Y"], "t": ["2019", None],
                                          "h": ["2020-01-01T05:00", "2020-01-01T23:59"]}),
                            schema).tolist() == [[0, 1], [1, 2], [5, 23]]


def test_schema_path_that_is_a_directory_exits_2(client, tmp_path, capsys):
    frame = survey(20)
    frame.to_parquet(tmp_path / "data.parquet")
    (tmp_path / "schema.json").mkdir()
    code = main(["fit", "--data", str(tmp_path / "data.parquet"), "--schema",
                 str(tmp_path / "schema.json"), "--model", str(tmp_path / "model"),
                 "--scheduler", client.scheduler.address, "--quiet"])
    assert code == 2
    assert "schema.json' is a directory" in capsys.readouterr().err
    assert not (tmp_path / "model").exists()


def test_boolean_values_by_their_text(tmp_path):
    schema = load_schema({"attributes": [
        {"name": "flag", "type": "boolean", "extra": ["other"], "on_unknown": "other",
         "on_missing": "other", "missing_values": [""]}]})
    values = [True, "yes", "0", 1, 0.0, "maybe", None, "", "FALSE", np.False_]
    codes = encode_partition(pd.DataFrame({"flag": pd.Series(values, dtype=object)}), schema)
    assert codes.tolist() == [[1, 1, 0, 1, 0, 2, 2, 2, 0, 0]]
    # The same values through a CSV (as text) and a nullable boolean Parquet column.
    pd.DataFrame({"flag": ["True", "yes", "0", "1", "0", "maybe", "", "", "FALSE", "False"]}
                 ).to_csv(tmp_path / "f.csv", index=False)
    csv = encode_partition(read_table(tmp_path / "f.csv", schema).compute(), schema)
    assert csv.tolist() == codes.tolist()
    pd.DataFrame({"flag": pd.array([True, None, False], dtype="boolean")}).to_parquet(
        tmp_path / "f.parquet")
    parquet = encode_partition(read_table(tmp_path / "f.parquet", schema).compute(), schema)
    assert parquet.tolist() == [[1, 2, 0]]


DATETIME = [
    ({"unit": "month"}, ["2021-03-04", "2021-12-31T23:59:59", "2020-01-01 00:00:00"],
     ["Mar", "Dec", "Jan"]),
    ({"unit": "weekday"}, ["2024-06-03", "2024-06-09"], ["Mon", "Sun"]),
    ({"unit": "hour"}, ["2024-06-03T07:30", "2024-06-03T23:00+02:00"], ["07", "21"]),
    ({"unit": "year", "edges": {"start": 1990, "stop": 2030, "step": 10}},
     ["1990-01-01", "2029-12-31", "2005-06"], ["[1990, 2000)", "[2020, 2030)", "[2000, 2010)"]),
    ({"unit": "month", "format": "%d/%m/%Y"}, ["01/02/2020", "13/01/2020"], ["Feb", "Jan"]),
]


@pytest.mark.parametrize("spec, values, labels", DATETIME)
def test_datetime_calendar_bins(tmp_path, spec, values, labels):
    schema = load_schema({"attributes": [
        {"name": "t", "type": "datetime", **spec, "extra": ["other"], "on_unknown": "other"}]})
    if spec["unit"] != "year":
        assert schema["t"].labels == (*CALENDAR_UNITS[spec["unit"]], "other")
    codes = encode_partition(pd.DataFrame({"t": values}), schema)
    assert [schema["t"].labels[c] for c in codes[0]] == labels
    pd.DataFrame({"t": values}).to_csv(tmp_path / "t.csv", index=False)
    csv = encode_partition(read_table(tmp_path / "t.csv", schema).compute(), schema)
    assert csv.tolist() == codes.tolist()


def test_datetime_values_are_parsed_one_by_one(tmp_path):
    """A row in another format is out of domain; it never changes how the other rows parse."""
    schema = load_schema({"attributes": [
        {"name": "t", "type": "datetime", "unit": "month", "format": "%d/%m/%Y",
         "extra": ["other"], "on_unknown": "other", "on_missing": "other"}]})
    base = ["01/02/2020", "03/04/2020", "05/06/2020", None]
    for replacement, label in [("2020-12-01", "other"), ("31/12/2020", "Dec"), ("x", "other"),
                               (None, "other")]:
        changed = [replacement] + base[1:]
        codes = encode_partition(pd.DataFrame({"t": changed}), schema)[0]
        assert [schema["t"].labels[c] for c in codes] == [label, "Apr", "Jun", "other"]
    stamps = pd.DataFrame({"t": pd.to_datetime(["2020-02-01", "2020-07-01"])})
    stamps.to_parquet(tmp_path / "t.parquet")  # a Parquet timestamp column, no parsing
    codes = encode_partition(read_table(tmp_path / "t.parquet", schema).compute(), schema)
    assert codes.tolist() == [[1, 6]]
    aware = pd.DataFrame({"t": pd.to_datetime(["2020-03-01T00:30+01:00"])})  # Feb in UTC
    assert encode_partition(aware, schema).tolist() == [[1]]


# docs/from-csv.md, run as written on a generated mixed-type CSV.
DOC = Path(__file__).resolve().parents[1] / "docs" / "from-csv.md"
AIRPORTS = ["ATL", "DEN", "DFW", "LAX", "ORD"]


def doc_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.S)


def survey_csv(path: Path, rows: int = 3_000, seed: int = 3) -> None:
    """Text with NA, ISO dates (some empty), integers (some empty), floats, booleans, and ~400
    airport codes of which the codebook names 5."""
    rng = np.random.default_rng(seed)
    codes = AIRPORTS + ["".join(c) for c in rng.choice(list("BCGHJKMPQVWXZ"), (400, 3))]
    dates = pd.Timestamp("2023-01-01") + pd.to_timedelta(rng.integers(0, 365, rows), "D")
    frame = pd.DataFrame({
        "answer": rng.choice(["yes", "no", "NA"], rows, p=[0.5, 0.3, 0.2]),
        "visit_date": np.where(rng.random(rows) < 0.05, "", dates.strftime("%Y-%m-%d")),
        "age": np.where(rng.random(rows) < 0.05, "", rng.integers(18, 95, rows).astype(str)),
        "income": np.round(rng.lognormal(10.5, 0.6, rows), 2),
        "member": rng.choice(["true", "false"], rows),
        "airport": np.where(rng.random(rows) < 0.5, rng.choice(AIRPORTS, rows),
                            rng.choice(codes, rows)),
    })
    frame.to_csv(path, index=False)


def test_from_csv_doc_runs_as_written(client, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    survey_csv(tmp_path / "survey.csv")
    (tmp_path / "codebook.json").write_text(doc_blocks("json")[0])
    commands = [shlex.split(line) for line in _joined(doc_blocks("bash"))]
    assert [c[:2] for c in commands] == [["dp-dask", "schema"]] * 3 + [["dp-dask", "synth"]]
    outputs = []
    for command in commands:
        cluster = [] if command[1:3] == ["schema", "draft"] else [
            "--scheduler", client.scheduler.address, "--quiet"]
        assert main(command[1:] + cluster) == 0, command
        outputs.append(capsys.readouterr().out)
    assert "6 attribute(s) to fill in" in outputs[0]
    assert "nothing to fill in" in outputs[1]
    assert outputs[2].startswith("NOT PRIVATE") and "every value has a bin" in outputs[2]
    release = pd.read_parquet(tmp_path / "release" / "synthetic.parquet")
    schema = load_schema("schema.json")
    with_missing_bin = {a.name for a in schema.attributes if a.on_missing in a.labels[a.bins:]}
    assert len(release) == 3_000 and set(release.columns[release.isna().any()]) <= with_missing_bin
    # the drafted on_unknown counts an unknown boolean text as missing: a nullable boolean
    assert release["age"].dtype == np.float64 and release["member"].dtype == "boolean"
    assert "NA" in set(release["answer"].astype(str))
    assert set(release["airport"].astype(str)) <= {*AIRPORTS, "other"}
    privacy = json.loads((tmp_path / "release" / "metadata.json").read_text())["privacy"]
    assert privacy["epsilon"] == 1.0 and privacy["differentially_private"] is True
    for block in doc_blocks("python"):
        exec(compile(block, str(DOC), "exec"), {})


def _joined(blocks: list[str]) -> list[str]:
    """The commands of bash blocks, continuation lines joined."""
    return [line for block in blocks for line in block.replace("\\\n", " ").splitlines()
            if line.strip()]
