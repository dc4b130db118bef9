"""Several calendar features of one datetime column, recombined into one timestamp on output."""

from __future__ import annotations

import calendar
import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import codes_of, synth_code
from dask.distributed import Client, LocalCluster

from dp_dask.data.schema import SchemaError, load_schema
from dp_dask.data.values import decode_frame
from dp_dask.evaluate.values import compare_values
from dp_dask.synthesizer import Synthesizer

MISSING = {"extra": ["missing"], "on_missing": "missing"}


def features(source: str, dtype: str, years: list[int], **year: object) -> list[dict]:
    """year, month, weekday and hour features of ``source``; the dtype declared on the year."""
    spec = {"type": "datetime", "source": source, **MISSING}
    return [{"name": f"{source}_year", **spec, "unit": "year", "edges": years, "dtype": dtype,
             **year},
            *({"name": f"{source}_{unit}", **spec, "unit": unit}
              for unit in ("month", "weekday", "hour"))]


# A naive and an aware column (another zone than UTC, another unit than ns), a plain one between.
SCHEMA = {"schema_version": 1, "name": "calendar", "attributes": [
    *features("signup", "timestamp[ms]", [2015, 2020, 2025], fine={"start": 2015, "stop": 2025,
                                                                   "step": 1}),
    {"name": "plan", "type": "categorical", "categories": ["free", "paid"]},
    *features("login", "timestamp[us, tz=America/New_York]", [2019, 2021, 2024]),
]}
ROWS = 4_000


def calendar_frame(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    signup = (np.datetime64("2015-01-01T00:00", "ms")
              + rng.integers(0, 10 * 365 * 86_400_000, n).astype("timedelta64[ms]"))
    login = pd.Series(np.datetime64("2019-01-01", "us")
                      + rng.integers(0, 5 * 365 * 86_400 * 10**6, n).astype("timedelta64[us]"))
    login[rng.random(n) < 0.05] = pd.NaT  # null in every login feature: their missing bins
    return pd.DataFrame({"signup": pd.Series(signup, dtype="datetime64[ms]"),
                         "plan": rng.choice(["free", "paid"], n),
                         "login": login.dt.tz_localize("UTC").dt.tz_convert("America/New_York")})


def write(synthesizer, out, decode):
    return synthesizer.write(out, ROWS, seed=4, partition_rows=1_000, decode=decode)


@pytest.mark.parametrize("kind", ["parquet", "pandas"])
def test_features_recombine_into_the_inputs_timestamp_columns(client, tmp_path, kind):
    frame = calendar_frame(3_000)
    source = frame
    if kind == "parquet":
        source = tmp_path / "in.parquet"
        frame.to_parquet(source)
    given = pq.read_schema(source) if kind == "parquet" else pa.Schema.from_pandas(frame)
    synthesizer = Synthesizer.create("marginals", SCHEMA, epsilon=2.0, noise_sampler="numpy",
                                     noise_seed=1, ledger=False).fit(source)
    typed = write(synthesizer, tmp_path / "typed", "uniform")
    labels = write(synthesizer, tmp_path / "labels", "label")
    released = pq.read_schema(next(typed["parquet"].glob("*.parquet")))
    # one column per source, in the input's order and of the input's Arrow type
    assert released.names == ["signup", "plan", "login"] == list(frame.columns)
    for name in ("signup", "login"):
        assert released.field(name).type == given.field(name).type
    assert released.field("login").nullable and not released.field("plan").nullable
    synthetic = pd.read_parquet(typed["parquet"])
    label_frame = pd.read_parquet(labels["parquet"])
    assert list(label_frame.columns) == load_schema(SCHEMA).names  # labels: one per feature
    # Re-encoded through the schema, each timestamp's features are its label twin's bins: a
    # day beyond its month (30 February) would roll into the next and change the month.
    schema = synthesizer.schema
    typed_codes, label_codes = codes_of(synthetic, schema), codes_of(label_frame, schema)
    null = synthetic[["signup", "login"]].isna().any(axis=1).to_numpy()
    assert 0 < null.sum() < len(null) / 2
    np.testing.assert_array_equal(typed_codes[~null], label_codes[~null])
    login = [i for i, a in enumerate(schema.attributes) if a.source == "login"]
    extra = label_codes[:, login] >= np.array([schema.attributes[i].bins for i in login])
    # null iff a feature's bin is an extra one; then every feature reads back as "missing"
    np.testing.assert_array_equal(extra.any(axis=1), synthetic["login"].isna())
    assert (typed_codes[synthetic["login"].isna()][:, login] == np.array(
        [schema.attributes[i].bins for i in login])).all()
    output = json.loads(typed["metadata"].read_text())["output"]
    assert [c["name"] for c in output] == ["signup", "plan", "login"]
    assert output[0]["recombined"]["features"] == {
        "year": "signup_year", "month": "signup_month", "weekday": "signup_weekday",
        "hour": "signup_hour"}
    assert output[0]["fine_cells"] == 10 and output[2]["arrow"] == str(given.field("login").type)
    complete = json.loads((typed["parquet"].parent / "_COMPLETE.json").read_text())
    assert complete["columns"] == ["signup", "plan", "login"]


def test_recombined_release_is_the_same_on_one_and_two_workers(client, tmp_path):
    synthesizer = Synthesizer.create("marginals", SCHEMA, epsilon=1.0, noise_sampler="numpy",
                                     noise_seed=2, ledger=False).fit(calendar_frame(2_000))
    two = synthesizer.sample(ROWS, seed=5, partition_rows=1_000).compute()
    with (LocalCluster(n_workers=1, threads_per_worker=1, host="127.0.0.1",
                       dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as one):
        single = synthesizer.sample(ROWS, seed=5, partition_rows=1_000).compute(scheduler=one)
    pd.testing.assert_frame_equal(two, single)
    assert str(two["login"].dtype) == "datetime64[us, America/New_York]"


def every_code(schema, repeat: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    rows = repeat * int(schema.sizes.max())
    return np.stack([rng.permutation(np.resize(np.arange(s), rows)) for s in schema.sizes],
                    axis=1).astype(np.int16)


@pytest.mark.parametrize("units", [("month", "weekday"), ("month",), ()])
def test_only_real_dates_and_every_day_of_each_month(units):
    spec = {"type": "datetime", "source": "t"}
    schema = load_schema({"attributes": [
        {"name": "y", **spec, "unit": "year", "edges": [2019, 2020, 2021, 2022]},
        *({"name": unit, **spec, "unit": unit} for unit in units)]})
    codes = every_code(schema, repeat=3_000)
    stamps = decode_frame(codes, schema, "uniform", np.random.SeedSequence(0))["t"]
    years, months, days = (stamps.dt.year.to_numpy(), stamps.dt.month.to_numpy(),
                           stamps.dt.day.to_numpy())
    np.testing.assert_array_equal(years, codes[:, 0] + 2019)
    if "month" in units:
        np.testing.assert_array_equal(months, codes[:, 1] + 1)
    if "weekday" in units:
        np.testing.assert_array_equal(stamps.dt.day_of_week.to_numpy(), codes[:, 2])
    reached = pd.DataFrame({"y": years, "m": months, "d": days}).groupby(["y", "m"])["d"].max()
    # Each month's last day is drawn, never a day beyond it: 29 February in 2020 alone.
    expected = {(y, m): calendar.monthrange(y, m)[1] for y in (2019, 2020, 2021)
                for m in range(1, 13)}
    assert reached.to_dict() == expected
    assert stamps.dt.hour.nunique() == 24  # the time of day drawn over the whole day


def test_midpoint_takes_the_middle_of_each_field():
    spec = {"type": "datetime", "source": "t"}
    schema = load_schema({"attributes": [
        {"name": "y", **spec, "unit": "year", "edges": [2000, 2001]},
        {"name": "m", **spec, "unit": "month"}, {"name": "h", **spec, "unit": "hour"}]})
    codes = np.array([[0, 1, 5]], dtype=np.int16)  # 2000, February, 05h
    stamp = decode_frame(codes, schema, "midpoint", np.random.SeedSequence(0))["t"][0]
    # 29 days in February 2000: the lower middle day is the 15th (index 14)
    assert stamp == pd.Timestamp("2000-02-15 05:29:59.999999999")


def bad(*attributes: dict) -> dict:
    return {"attributes": list(attributes)}


YEAR = {"name": "t_year", "type": "datetime", "source": "t", "unit": "year", "edges": [2000, 2010]}
MONTH = {"name": "t_month", "type": "datetime", "source": "t", "unit": "month"}


@pytest.mark.parametrize("spec, name, message", [
    (bad(YEAR, MONTH, {**MONTH, "name": "t_month2"}), "t_month2", "has the month feature"),
    (bad({"name": "x", "type": "numeric", "edges": [0, 1], "source": "t"}), "x",
     "a numeric attribute reads its own column"),
    (bad(MONTH), "t_month", "needs a 'year' feature"),
    (bad({**YEAR, "dtype": "timestamp[ns]"}, {**MONTH, "dtype": "timestamp[us]"}), "t_month",
     "different dtypes"),
    (bad(YEAR, {**MONTH, "decode": "label"}, {**MONTH, "name": "h", "unit": "hour",
                                              "decode": "midpoint"}), "h", "different decodes"),
    (bad(YEAR, {**MONTH, "dtype": "string"}), "t_month", "can't be output as string"),
    (bad({**YEAR, "dtype": "timestamp[ns, tz=Mars/Olympus]"}), "t_year", "no IANA time zone"),
    (bad(YEAR, {"name": "t", "type": "categorical", "categories": ["a"]}), "t",
     "named like the source column"),
    (bad({**YEAR, **MISSING}, MONTH), "t_month", "give it one too"),
    (bad({**YEAR, "edges": [1500, 2000]}), "t_year", "holds the years 1678-2261"),
])
def test_bad_features_are_schema_errors_naming_the_attribute(spec, name, message):
    with pytest.raises(SchemaError, match=f"attribute '{name}'.*{message}"):
        load_schema(spec)


def test_a_source_survives_the_schema_json():
    schema = load_schema(SCHEMA)
    assert load_schema(json.loads(schema.dumps())) == schema
    assert schema.columns == ["signup", "plan", "login"]


def test_cli_refuses_bad_features_before_reading_data(client, tmp_path, capsys):
    # read, "not a time" would stop on its out-of-domain value
    assert synth_code(client, tmp_path, bad(YEAR, MONTH, {**MONTH, "name": "again"}),
                      "t\nnot a time\n") == 2
    assert "attribute 'again': source 't' has the month feature" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_value_metrics_read_a_recombined_release(client, tmp_path):
    """`dp-dask evaluate`'s value metrics take each year feature's values from the one
    recombined column; a uniform draw within the years' fine grid beats bin midpoints."""
    frame = calendar_frame(3_000)
    synthesizer = Synthesizer.create("marginals", SCHEMA, epsilon=2.0, noise_sampler="numpy",
                                     noise_seed=1, ledger=False).fit(frame)
    metrics = {}
    for decode in ("uniform", "midpoint"):
        out = write(synthesizer, tmp_path / decode, decode)
        metrics[decode] = compare_values(frame, out["parquet"].parent, synthesizer.schema
                                         ).metrics.set_index("column")
        released = pd.read_parquet(out["parquet"])
        assert (metrics[decode]["synthetic values"]
                == released[["signup", "login"]].notna().sum().to_numpy()).all()
    uniform, midpoint = metrics["uniform"], metrics["midpoint"]
    assert list(uniform.index) == ["signup_year", "login_year"]
    assert set(uniform["kind"]) == {"year"}
    assert uniform.loc["signup_year", "real values"] == len(frame)
    assert uniform.loc["login_year", "real values"] == frame["login"].notna().sum()
    # midpoints pile each 5- or 3-year bin on one instant: KS ≥ a quarter of a bin's mass
    assert (midpoint["KS"] > 0.15).all()
    assert (uniform["KS"] < midpoint["KS"] / 2).all() and (uniform["W1"] < 0.5).all()
