"""Drafting a schema from public information only, and checking the data against it."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dp_dask.cli import main
from dp_dask.data.draft import NOT_PRIVATE, check_schema, draft_schema
from dp_dask.data.encode import encode_partition
from dp_dask.data.schema import SchemaError, load_schema
from dp_dask.privacy.ledger import Ledger
from dp_dask.synthesizer import Synthesizer


def table(seed: int, rows: int = 200) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "answer": rng.choice(["yes", "no", "NA"], rows),
        "age": rng.integers(18, 90, rows),
        "income": rng.normal(50_000, 10_000, rows),
        "when": pd.Timestamp("2020-01-01") + pd.to_timedelta(rng.integers(0, 900, rows), "D"),
        "ok": rng.random(rows) < 0.5,
        "zip": rng.integers(10_000, 10_400, rows).astype(str),
    })


def test_draft_reads_metadata_only(tmp_path):
    """Drafts of tables that differ in every value are identical: no value was read."""
    drafts = []
    for seed in (1, 2):
        frame = table(seed, rows=50 * seed)
        frame.to_parquet(tmp_path / f"{seed}.parquet")
        drafts.append(draft_schema(tmp_path / f"{seed}.parquet", name="t"))
    assert drafts[0] == drafts[1]
    kinds = {a["name"]: a["type"] for a in drafts[0].schema["attributes"]}
    assert kinds == {"answer": "categorical", "age": "numeric", "income": "numeric",
                     "when": "datetime", "ok": "boolean", "zip": "categorical"}
    assert set(drafts[0].todo) == {"answer", "age", "income", "zip"}
    # A CSV: only the header is read; the body may be anything, even bytes that aren't text.
    (tmp_path / "a.csv").write_bytes(b"answer,age\n\xff\xfe,\x00garbage\n")
    csv = draft_schema(tmp_path / "a.csv")
    assert set(csv.todo) == {"answer", "age"} and csv.schema["missing_values"] == [""]


def test_draft_states_the_stored_types_as_output_types(tmp_path):
    """With --public-types, integer and float widths and categorical storage become the
    attributes' dtype, from the Parquet schema or the frame's dtypes alone; a CSV states none."""
    frame = pd.DataFrame({"age": np.array([30, 40], dtype="int64"),
                          "rooms": pd.array([2, None], dtype="Int32"),
                          "score": np.array([0.5, 1.5], dtype="float32"),
                          "city": pd.Categorical(["a", "b"]), "note": ["x", "y"]})
    frame.to_parquet(tmp_path / "t.parquet")
    ranges = {name: {"start": 0, "stop": 100, "step": 10} for name in ("age", "rooms", "score")}
    expected = {"age": "int64", "rooms": "int32", "score": "float32", "city": "category",
                "note": None}
    for source in (tmp_path / "t.parquet", frame):
        draft = draft_schema(source, ranges=ranges, public_types=True)
        assert {a["name"]: a.get("dtype") for a in draft.schema["attributes"]} == expected
        assert {a["dtype_source"] for a in draft.schema["attributes"]} == {
            "public-storage-schema"}
    filled = draft_schema(tmp_path / "t.parquet", ranges=ranges, public_types=True,
                          public=_codebook(tmp_path, {"city": ["a", "b"], "note": ["x", "y"]}))
    assert load_schema(filled.schema)["rooms"].dtype == "int32"
    assert load_schema(filled.schema)["rooms"].dtype_source == "public-storage-schema"
    frame.to_csv(tmp_path / "t.csv", index=False)
    assert all("dtype" not in a for a in draft_schema(tmp_path / "t.csv").schema["attributes"])


def test_placeholders_are_refused_by_name_until_filled(tmp_path):
    table(1).to_parquet(tmp_path / "t.parquet")
    draft = draft_schema(tmp_path / "t.parquet")
    with pytest.raises(SchemaError, match="attribute 'answer' is a draft placeholder: "
                                          "categorical"):
        load_schema(draft.schema)
    filled = draft_schema(tmp_path / "t.parquet",
                          ranges={"age": {"start": 0, "stop": 100, "step": 10},
                                  "income": {"start": 0, "stop": 200_000, "step": 20_000}},
                          public=_codebook(tmp_path, {"answer": ["yes", "no", "NA"],
                                                      "zip": {"type": "categorical",
                                                              "categories": ["10000"],
                                                              "extra": ["other"],
                                                              "on_unknown": "other"}}))
    assert filled.todo == {}
    schema = load_schema(filled.schema)
    assert schema["age"].edges == tuple(range(0, 101, 10))
    # A public bin by kind for values outside the domain (--on-unknown), unless stated.
    assert schema["answer"].labels == ("yes", "no", "NA", "other", "missing")
    assert (schema["answer"].on_unknown, schema["age"].on_unknown) == ("other", "clip")
    assert schema["zip"].labels == ("10000", "other")


def _codebook(tmp_path, entries: dict) -> str:
    path = tmp_path / "codebook.json"
    path.write_text(json.dumps(entries))
    return str(path)


def test_public_sample_gives_categories_round_bins_and_a_top_k(tmp_path):
    table(1).to_csv(tmp_path / "private.csv", index=False)
    public = table(7, rows=120)
    public.loc[3, "answer"] = ""  # the empty cell: missing, never a category
    public.to_csv(tmp_path / "public.csv", index=False)
    draft = draft_schema(tmp_path / "private.csv", public=tmp_path / "public.csv",
                         max_categories=20)
    assert draft.todo == {}
    schema = load_schema(draft.schema)
    assert schema["answer"].categories == tuple(sorted(set(public["answer"]) - {""}))
    assert schema["ok"].kind == "boolean" and schema["when"].kind == "datetime"
    age = schema["age"]  # round bins over the public range, open at both ends
    assert age.edges[0] == -np.inf and age.edges[-1] == np.inf
    assert age.edges[1] <= public["age"].min() and age.edges[-2] > public["age"].max()
    assert all(e == round(e) for e in age.edges[1:-1])
    # Wide text column of a Parquet input: the public top-k and an "other" bucket.
    table(1).to_parquet(tmp_path / "private.parquet")
    wide = load_schema(draft_schema(tmp_path / "private.parquet", public=tmp_path / "public.csv",
                                    max_categories=20).schema)
    top = public["zip"].value_counts().sort_index().sort_values(ascending=False, kind="stable")
    assert wide["zip"].categories == tuple(top.index[:20])
    assert wide["zip"].labels[-2:] == ("other", "missing") and wide["zip"].on_unknown == "other"


def test_cli_draft_prints_what_to_fill_in_and_never_overwrites(tmp_path, capsys):
    table(1).to_parquet(tmp_path / "t.parquet")
    out = tmp_path / "schema.json"
    assert main(["schema", "draft", str(tmp_path / "t.parquet"), "--out", str(out),
                 "--range", "age=0:100:5"]) == 0
    printed = capsys.readouterr().out
    assert "3 attribute(s) to fill in" in printed
    for column in ("answer", "income", "zip"):
        assert f"  {column}: " in printed
    written = json.loads(out.read_text())
    assert written["attributes"][1]["edges"] == {"start": 0, "stop": 100, "step": 5}
    before = out.read_text()
    assert main(["schema", "draft", str(tmp_path / "t.parquet"), "--out", str(out)]) == 2
    assert "exists; pass --force" in capsys.readouterr().err and out.read_text() == before
    assert main(["schema", "draft", str(tmp_path / "t.parquet"), "--out", str(out),
                 "--range", "nope=0:1:1"]) == 2
    assert "['nope'] not in the input" in capsys.readouterr().err


def test_check_counts_outside_values_for_the_owner_only(client, tmp_path, capsys):
    frame = pd.DataFrame({"answer": ["yes", "no", "NA", "maybe", "", "yes"],
                          "age": ["30", "200", "", "41", "x", "17"]})
    frame.to_csv(tmp_path / "private.csv", index=False)
    schema = {"missing_values": [""], "attributes": [
        {"name": "answer", "categories": ["yes", "no", "NA"]},
        {"name": "age", "type": "numeric", "edges": {"start": 0, "stop": 120, "step": 10},
         "extra": ["missing", "other"], "on_missing": "missing", "on_unknown": "other"}]}
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    result = check_schema(tmp_path / "private.csv", tmp_path / "schema.json")
    assert result[["column", "rows", "missing", "outside", "fit"]].values.tolist() == [
        ["answer", 6, 1, 1, "stops here"], ["age", 6, 1, 2, "ok"]]
    files = sorted(tmp_path.rglob("*"))
    assert main(["schema", "check", str(tmp_path / "private.csv"), str(tmp_path / "schema.json"),
                 "--scheduler", client.scheduler.address, "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(NOT_PRIVATE)
    assert "a fit would stop at column(s) ['answer']" in printed
    assert sorted(tmp_path.rglob("*")) == files  # printed, nothing written


@pytest.mark.parametrize("zone", [None, "America/New_York"])
def test_public_years_draft_calendar_features_of_one_timestamp(tmp_path, zone):
    """A datetime column with public years is drafted as year/month/weekday/hour features of
    one source column, declaring the stored timestamp type; without years, month bins."""
    when = pd.Series(pd.to_datetime(["2021-03-04 05:06", "2023-12-31 23:59"]),
                     dtype="datetime64[ms]")
    frame = pd.DataFrame({"when": when.dt.tz_localize(zone) if zone else when, "n": [1, 2]})
    frame.to_parquet(tmp_path / "t.parquet")
    draft = draft_schema(tmp_path / "t.parquet",
                         ranges={"when": {"start": 2020, "stop": 2025, "step": 1},
                                 "n": {"start": 0, "stop": 10, "step": 5}}, public_types=True)
    schema = load_schema(draft.schema)
    assert schema.names == ["when_year", "when_month", "when_weekday", "when_hour", "n"]
    features = schema.sources["when"]
    assert [schema.attributes[i].unit for i in features] == ["year", "month", "weekday", "hour"]
    assert schema["when_year"].edges == (2020, 2021, 2022, 2023, 2024, 2025)
    stored = f"timestamp[ms{', tz=' + zone if zone else ''}]"
    assert schema["when_year"].dtype == stored and not draft.todo
    assert [a["type"] for a in draft_schema(frame).schema["attributes"]][0] == "datetime"
    assert draft_schema(frame).schema["attributes"][0]["unit"] == "month"


def _neighbours(tmp_path) -> dict[str, list]:
    """Two tables that differ in one row: an integer column with and without a null (pandas
    stores it as float64 then), as frames and as pandas-written Parquet."""
    base = table(1, rows=60)
    near = base.copy()
    near["age"] = near["age"].astype("float64")
    near.loc[5, "age"] = np.nan
    assert base["age"].dtype == "int64" and near["age"].dtype == "float64"
    for name, frame in (("base", base), ("near", near)):
        frame.to_parquet(tmp_path / f"{name}.parquet")
    return {"frames": [base, near],
            "parquet": [tmp_path / "base.parquet", tmp_path / "near.parquet"]}


def test_neighbours_storage_types_draft_the_same_schema(tmp_path):
    """With --no-public-types the storage types are data: one null in an integer column must
    not change the drafted output types or the DP grid (pandas turns int64 into float64)."""
    ranges = {"age": {"start": 0, "stop": 100, "step": 10}}
    for sources in _neighbours(tmp_path).values():
        drafts = [draft_schema(source, ranges=ranges, name="t", public_types=False)
                  for source in sources]
        assert drafts[0].schema == drafts[1].schema and drafts[0].todo == drafts[1].todo
        ages = [load_schema({"attributes": [a for a in d.schema["attributes"]
                                            if a["name"] == "age"]})["age"] for d in drafts]
        assert [a.output_dtype for a in ages] == ["float64", "float64"]
        placeholders = [draft_schema(source, name="t", public_types=False) for source in sources]
        assert placeholders[0].schema == placeholders[1].schema  # "age" to fill in
        assert any("dtype_source" in note and "public_types=" in note
                   for note in drafts[0].notes)
    # The boolean and datetime columns' types came from the storage types: marked as data.
    sources = {a["name"]: a["dtype_source"] for a in drafts[0].schema["attributes"]}
    assert sources == {"answer": "data", "age": "declared", "income": "data", "when": "data",
                       "ok": "data", "zip": "data"}


def test_public_types_are_taken_and_recorded_as_public(tmp_path):
    parquet = _neighbours(tmp_path)["parquet"]
    drafts = [draft_schema(p, public_types=True, ranges={"age": {"start": 0, "stop": 100,
                                                                 "step": 10}}) for p in parquet]
    ages = [next(a for a in d.schema["attributes"] if a["name"] == "age") for d in drafts]
    assert [a["dtype"] for a in ages] == ["int64", "float64"]
    assert {a["dtype_source"] for a in ages} == {"public-storage-schema"}
    assert any("public_types=" in note and "public" in note for note in drafts[0].notes)
    out = tmp_path / "schema.json"
    assert main(["schema", "draft", str(parquet[0]), "--out", str(out), "--public-types",
                 "--range", "age=0:100:10"]) == 0
    written = {a["name"]: a for a in json.loads(out.read_text())["attributes"]}
    assert written["age"]["dtype"] == "int64"
    assert written["ok"]["dtype_source"] == "public-storage-schema"


def test_a_release_warns_of_types_taken_from_the_data(client, tmp_path):
    """A schema whose types came from the data's storage types is never used silently: the fit
    warns and the release's privacy metadata names the columns."""
    from dp_dask.checks import DpDaskWarning
    from dp_dask.synthesizer import Synthesizer

    parquet = _neighbours(tmp_path)["parquet"][0]
    codebook = _codebook(tmp_path, {"answer": ["yes", "no", "NA"], "zip": {
        "type": "categorical", "categories": ["10000"], "extra": ["other"],
        "on_unknown": "other"}})
    ranges = {"age": {"start": 0, "stop": 100, "step": 10},
              "income": {"start": 0, "stop": 200_000, "step": 20_000, "open_above": True}}
    for public_types, flagged in ((False, ["when", "ok"]), (True, [])):
        draft = draft_schema(parquet, public=codebook, ranges=ranges, public_types=public_types)
        schema = load_schema(draft.schema)
        assert schema.types_from_data == flagged
        synthesizer = Synthesizer.create("marginals", schema, epsilon=1.0, ledger=False)
        if flagged:
            with pytest.warns(DpDaskWarning, match=r"\['when', 'ok'\].*--public-types"):
                synthesizer.fit(parquet)
            assert synthesizer.model.metadata["privacy"]["schema_types_from_data"] == flagged
            (tmp_path / "schema.json").write_text(schema.dumps())
            assert main(["synth", "--data", str(parquet), "--schema", str(tmp_path / "schema.json"),
                         "--out", str(tmp_path / "release"), "--scheduler",
                         client.scheduler.address, "--quiet"]) == 0
            metadata = json.loads((tmp_path / "release" / "metadata.json").read_text())
            assert metadata["privacy"]["schema_types_from_data"] == flagged
        else:
            synthesizer.fit(parquet)
            assert "schema_types_from_data" not in synthesizer.model.metadata["privacy"]


def test_drafted_domains_never_lose_a_run(client, tmp_path, capsys):
    """Values outside a drafted domain (a category the codebook lacks, numbers beyond public
    ranges, a UTC time in the next year) go to the public bin of their kind, and the release
    runs; with --on-unknown error the fit stops (exit 2) naming the column and count, never a
    value."""
    frame = table(3)
    frame.loc[5, "answer"], frame.loc[6, "age"], frame.loc[7, "income"] = "x-secret", 12345, -9e9
    frame["when"] = frame["when"].dt.tz_localize("UTC")
    frame.loc[8, "when"] = pd.Timestamp("2031-01-01 00:30", tz="UTC")  # past the public years
    frame.to_parquet(tmp_path / "t.parquet")
    common = ["schema", "draft", str(tmp_path / "t.parquet"), "--range", "age=0:100:10",
              "--range", "income=0:100000:10000", "--range", "when=2020:2023:1",
              "--public", _codebook(tmp_path, {"answer": ["yes", "no", "NA"],
                                               "zip": [str(z) for z in range(10_000, 10_400)]})]
    assert main([*common, "--out", str(tmp_path / "kind.json")]) == 0
    schema = load_schema(tmp_path / "kind.json")
    assert {a.name: a.on_unknown for a in schema.attributes} == {
        "answer": "other", "age": "clip", "income": "clip", "when_year": "clip",
        "when_month": "missing", "when_weekday": "missing", "when_hour": "missing",
        "ok": "missing", "zip": "other"}
    codes = encode_partition(frame, schema)
    assert codes[0, 5] == schema["answer"].labels.index("other")
    assert codes[1, 6] == 9 and codes[2, 7] == 0  # the nearest end bins
    assert codes[3, 8] == 2  # 2031 → the last public year bin, [2022, 2023)
    release = ["synth", "--data", str(tmp_path / "t.parquet"), "--epsilon", "1", "--rows", "50",
               "--ledger", str(tmp_path / "ledger.sqlite"), "--scheduler",
               client.scheduler.address, "--quiet"]
    assert main([*release, "--schema", str(tmp_path / "kind.json"),
                 "--out", str(tmp_path / "out")]) == 0
    assert main([*common, "--out", str(tmp_path / "error.json"), "--on-unknown", "error"]) == 0
    assert load_schema(tmp_path / "error.json")["age"].on_unknown == "error"
    capsys.readouterr()
    assert main([*release, "--schema", str(tmp_path / "error.json"),
                 "--out", str(tmp_path / "out2")]) == 2
    err = capsys.readouterr().err
    assert "out-of-domain value(s)" in err
    assert not any(secret in err for secret in ("x-secret", "12345", "9e+09", "2031"))
    with pytest.raises(SystemExit, match="2"):  # argparse: exit 2 before anything is read
        main([*common, "--out", str(tmp_path / "bad.json"), "--on-unknown", "drop"])


CODEBOOK = """\
# Public knowledge of the flights table, in one file
dep_time: {format: HHMM, units: local time}
distance: {start: 0, stop: 5000, step: 250, units: miles}
time_hour: {start: 2013, stop: 2014, step: 1}
price: {format: currency, start: 0, stop: 2000, step: 100}
share: {format: percent}
carrier: [AA, B6, UA]
"""


def clock_table(rows: int = 3_000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    minutes = rng.integers(0, 1440, rows)
    dep = (minutes // 60 * 100 + minutes % 60).astype(np.float64)
    dep[:20], dep[20] = np.nan, 2400  # nullable clock times, and midnight as 2400
    return pd.DataFrame({
        "dep_time": dep, "distance": rng.integers(80, 4_983, rows),
        "time_hour": pd.Timestamp("2013-01-01", tz="UTC") + pd.to_timedelta(
            rng.integers(0, 365 * 24, rows), "h"),
        "price": [f"${p:,.2f}" for p in rng.uniform(0, 1999, rows)],
        "share": rng.uniform(0, 100, rows), "carrier": rng.choice(["AA", "B6", "UA"], rows)})


def test_a_yaml_codebook_replaces_range_flags_and_clock_times_stay_valid(client, tmp_path):
    """One public codebook (YAML) gives ranges, units and formats: HHMM clock times are binned
    as minutes of the day and released as valid HHMM values of the input's type (no 12:75),
    currency text is read as numbers and released in whole cents, a bare range of a timestamp
    gives its public years; nothing is left to fill in."""
    frame = clock_table()
    frame.to_parquet(tmp_path / "flights.parquet")
    (tmp_path / "codebook.yaml").write_text(CODEBOOK)
    draft = draft_schema(tmp_path / "flights.parquet", public=tmp_path / "codebook.yaml",
                         public_types=True)
    assert draft.todo == {}
    schema = load_schema(draft.schema)
    clock = schema["dep_time"]
    assert (clock.format, clock.edges[0], clock.edges[-1], clock.dtype) == (
        "HHMM", 0, 1440, "float64")
    assert schema["time_hour_year"].edges == (2013, 2014)
    assert schema["price"].format == "currency" and schema["share"].edges[-1] == 100
    codes = encode_partition(frame, schema)
    assert codes[0, 20] == clock.bins - 1  # 2400: minute 1440, clipped into the last bin
    assert (codes[0, :20] == clock.labels.index("missing")).all()
    assert codes[0, 21] == (frame["dep_time"][21] // 100 * 60 + frame["dep_time"][21] % 100) // 60
    out = Synthesizer.create("marginals", schema, epsilon=1.0, ledger=False).fit(
        tmp_path / "flights.parquet").write(tmp_path / "release", 5_000)
    release = pd.read_parquet(out["parquet"])
    times = release["dep_time"].dropna()
    assert release["dep_time"].dtype == np.float64 and (times == times.round()).all()
    assert ((times % 100 < 60) & (times // 100 < 24) & (times >= 0)).all()
    assert len(set(times % 100)) > 30  # minutes drawn within the hour, not its start
    price = release["price"].dropna()
    assert np.allclose(price * 100, (price * 100).round()) and price.between(0, 2000).all()


def test_int64_clock_times_come_back_int64_valid_and_in_order(client, tmp_path):
    """HHMM clock times stored as int64 (one nullable, one Parquet ``required``) are drafted with
    their stored type and released as int64 (pandas' Int64 where nullable) of valid
    HHMM values; under an order constraint the values redrawn to keep dep <= arr are drawn as
    minutes and written back as HHMM too (drawn as HHMM numbers, 1.5 % came out as 12:75). The
    storage types are declared public (--public-types; no longer the default: issue 64)."""
    rng = np.random.default_rng(0)
    dep = rng.integers(0, 1440, 3_000)
    arr = np.minimum(dep + rng.integers(30, 300, 3_000), 1439)
    fields = [pa.field("dep_time", pa.int64()), pa.field("arr_time", pa.int64(), nullable=False)]
    pq.write_table(pa.table([pa.array(m // 60 * 100 + m % 60) for m in (dep, arr)],
                            schema=pa.schema(fields)), tmp_path / "clock.parquet")
    (tmp_path / "codebook.yaml").write_text("dep_time: {format: HHMM}\narr_time: {format: HHMM}\n")
    draft = draft_schema(tmp_path / "clock.parquet", public=tmp_path / "codebook.yaml",
                         public_types=True)
    assert [a["dtype"] for a in draft.schema["attributes"]] == ["int64", "int64"]
    for constraints in ([], [{"order": ["dep_time", "arr_time"]}]):
        schema = load_schema({**draft.schema, "constraints": constraints})
        out = Synthesizer.create("marginals", schema, epsilon=1.0, ledger=False).fit(
            tmp_path / "clock.parquet").write(tmp_path / f"release{len(constraints)}", 5_000)
        release = pq.read_table(out["parquet"])
        assert release.schema.remove_metadata().equals(
            pq.read_schema(tmp_path / "clock.parquet").remove_metadata())
        frame = release.to_pandas()
        for name in ("dep_time", "arr_time"):
            times = frame[name].dropna()
            assert ((times % 100 < 60) & (times // 100 < 24) & (times >= 0)).all(), name
        both = frame.dropna()
        assert not constraints or (both["dep_time"] <= both["arr_time"]).all()


@pytest.mark.parametrize("name, text, message", [
    ("c.yaml", "dep_time: {format: HHMM2}", "column 'dep_time': format must be one of HHMM"),
    ("c.yaml", "price: {format: currency}", "'price': format 'currency' needs a public range"),
    ("c.yaml", "dep_time: [unclosed", "invalid YAML"),
    ("c.yaml", "dep_time: {format: HHMM, start: 0, stop: 2400, step: 100}", "minutes of the day"),
    ("c.yaml", "- just a list", "expected a JSON/YAML mapping"),
    ("c.json", '{"carrier": {"categories": ["AA"], "on_unknown": "nope"}}',
     "on_unknown='nope' is neither"),
])
def test_bad_codebooks_exit_2_before_any_budget(tmp_path, capsys, name, text, message):
    """A bad public codebook stops the draft (exit 2) before the DP draft reads or spends
    anything, naming the column, never a value of the data."""
    clock_table(rows=50).to_parquet(tmp_path / "flights.parquet")
    (tmp_path / name).write_text(text)
    ledger = tmp_path / "ledger.sqlite"
    assert main(["schema", "draft", str(tmp_path / "flights.parquet"), "--out",
                 str(tmp_path / "schema.json"), "--public", str(tmp_path / name),
                 "--dp-epsilon", "0.1", "--dp-delta", "1e-9", "--ledger", str(ledger)]) == 2
    err = capsys.readouterr().err
    assert message in err and "$" not in err  # no value of the data
    assert not (tmp_path / "schema.json").exists()
    assert not ledger.exists() or Ledger(ledger).entries() == []
