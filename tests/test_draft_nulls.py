"""Issue 65, nulls and storage types a raw table's release keeps: a column's nullability is
decided from both noisy counts of its missing values (the type step's, and its own histogram's
at no extra ε), so a column of 8-10 % nulls keeps its missing bin where the type step's share
alone (at 15 columns, a threshold of 27 % of the rows) dropped it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dp_dask.data.draft import draft_schema
from dp_dask.data.draft_types import TYPE_MISS

ROWS = 20_000
NUMERIC = 14


def nulls_table(rows: int = ROWS, seed: int = 0) -> pd.DataFrame:
    """14 numeric columns (integer codes and floats; ``pressure`` 10 % null, the others never
    null) and one text column ``station`` 8 % null, as pandas writes them."""
    rng = np.random.default_rng(seed)
    frame = {}
    for i in range(NUMERIC - 1):
        frame[f"x{i}"] = (rng.integers(0, 60, rows) if i % 2 else
                          np.round(rng.normal(50 * (i + 1), 10, rows), 1))
    frame["pressure"] = np.where(rng.random(rows) < 0.10, np.nan,
                                 np.round(rng.normal(1013, 7, rows), 1))
    frame["station"] = pd.array(np.where(rng.random(rows) < 0.08, None,
                                         rng.choice(["EWR", "JFK", "LGA"], rows)), dtype="str")
    return pd.DataFrame(frame)


def test_item_1_a_column_of_10_percent_nulls_is_nullable_and_never_null_ones_stay_so(
        client, tmp_path):
    """At the one command's draft share of ε = 1 (0.45), 15 columns: the type step's noisy
    count of pressure's 2,000 nulls has scale 2·15/0.045 = 667 and threshold 5,680 (28 % of the
    rows), so 0231366 drafted pressure and station never null in every seed. Their own
    histograms' missing cell (pressure's octaves and cells, station's public level
    "missing") find them; the 13 never-null columns stay never null, and station's levels
    cover it once its nulls are taken off n̂ (no 'other' bin). The combined estimate
    lies within 6 of its noise's standard deviations of the true count."""
    frame = nulls_table()
    data = tmp_path / "nulls.parquet"
    frame.to_parquet(data)
    truth = frame.isna().sum()
    for seed in range(3):
        draft = draft_schema(data, dp_epsilon=0.45, dp_delta=0.45e-9, ledger=False,
                             dataset_name="nulls", noise_sampler="numpy", noise_seed=seed)
        spec = {a["name"]: a for a in draft.schema["attributes"]}
        types = draft.schema["drafted_under_dp"]["types"]
        decided = {c: d["nullable"] for c, d in types["decided"].items()}
        assert decided == {c: c in ("pressure", "station") for c in frame}, seed
        assert spec["pressure"]["on_missing"] in spec["pressure"]["extra"], seed
        assert spec["station"]["on_missing"] in spec["station"]["extra"], seed
        # its three levels and its missing values hold every row: no 'other' bin (0231366
        # kept one, n̂ less the levels' counts being its 1,600 nulls)
        assert spec["station"]["extra"] == ["missing"], seed
        for column in frame.columns.drop(["pressure", "station"]):
            assert spec[column]["on_missing"] not in spec[column].get("extra", []), (seed,
                                                                                     column)
        for column, record in types["nullable"]["columns"].items():
            counts = record["counts"]
            assert set(counts) >= {"types"} and len(counts) >= 2, (seed, column)
            sd = math.sqrt(sum((c["weight"] * c["scale"]) ** 2
                               * (2 if c["noise"] == "laplace" else 1)
                               for c in counts.values()))
            assert abs(record["estimate"] - truth[column]) <= 6 * sd, (seed, column)
            assert record["threshold"] < truth["station"] < truth["pressure"]


def test_item_1_combined_threshold_is_the_noises_tail_at_the_miss():
    """One Laplace noise: b·ln(1/2β) exactly (the type step's old threshold); two Laplace noises
    of one scale: their sum's tail ½e^(−t/b)(1 + t/2b) is β there; a Gaussian: σ·Φ⁻¹(1 − β)."""
    from scipy.stats import norm

    from dp_dask.data.draft_types import combined_threshold  # new: not in 0231366
    assert combined_threshold([("laplace", 100.0)], TYPE_MISS) == pytest.approx(
        100 * math.log(1 / (2 * TYPE_MISS)))
    t = combined_threshold([("laplace", 100.0), ("laplace", 100.0)], TYPE_MISS)
    assert 0.5 * math.exp(-t / 100) * (1 + t / 200) == pytest.approx(TYPE_MISS, rel=0.02)
    assert combined_threshold([("gaussian", 50.0), ("laplace", 1e-6)], TYPE_MISS) == \
        pytest.approx(50 * norm.isf(TYPE_MISS), rel=0.01)


def test_item_1_a_never_null_column_passes_the_combined_threshold_with_the_miss_chance():
    """No null, two noisy counts (Laplace 667 and 213, as on weather): the weighted mean passes
    the threshold in about TYPE_MISS of draws (seeded, 10⁶ draws: at most 3 β), and the
    decision is the type step's alone where there is one count."""
    from dp_dask.data.draft_types import MissingCount, decide_nullable  # new: not in 0231366
    rng = np.random.default_rng(0)
    draws = 1_000_000
    first = rng.laplace(0, 667, draws)
    second = rng.laplace(0, 213, draws)
    nullable, record = decide_nullable([MissingCount(0.0, "laplace", 667, "types"),
                                        MissingCount(0.0, "laplace", 213, "octaves")])
    weights = [c["weight"] for c in record["counts"].values()]
    passed = np.mean(weights[0] * first + weights[1] * second > record["threshold"])
    assert not nullable and passed <= 3 * TYPE_MISS
    alone, only = decide_nullable([MissingCount(5_000.0, "laplace", 667, "types")])
    assert alone is (5_000 > 667 * math.log(1 / (2 * TYPE_MISS)))
    assert only["threshold"] == pytest.approx(667 * math.log(1 / (2 * TYPE_MISS)), abs=0.1)


def winds(rows: int = ROWS, seed: int = 1) -> pd.DataFrame:
    """A whole-valued column with 20 % nulls as pandas holds it (float64), a never-null integer
    column and a float one."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "wind_dir": np.where(rng.random(rows) < 0.2, np.nan, 10.0 * rng.integers(0, 36, rows)),
        "hour": rng.integers(0, 24, rows),
        "temp": np.round(rng.normal(15, 8, rows), 1)})


def test_item_2_a_nullable_whole_column_from_pandas_comes_back_float64(client, tmp_path):
    """wind_dir, decided integer and nullable under DP: from a frame, or a Parquet file pandas
    wrote (its schema metadata's ``pandas`` key), it comes back float64 of whole values with
    its nulls, as pandas holds it (0231366 released int64 with nulls: pandas' Int64); the
    never-null hour stays int64. Written without pandas' metadata, it stays an integer."""
    from dp_dask import synthesize

    frame = winds()
    frame.to_parquet(tmp_path / "pandas.parquet")
    plain = pa.Table.from_pandas(frame, preserve_index=False)
    pq.write_table(plain.replace_schema_metadata(None), tmp_path / "arrow.parquet")
    for name, source in (("frame", frame), ("pandas", tmp_path / "pandas.parquet"),
                         ("arrow", tmp_path / "arrow.parquet")):
        released = synthesize(source, epsilon=1.0, rows=5_000, seed=0, ledger=False,
                              dataset_name="winds", noise_sampler="numpy", noise_seed=0)
        spec = {a["name"]: a for a in released.attrs["dp_dask"]["schema"]["attributes"]}
        values = released["wind_dir"].dropna().to_numpy(dtype=float)
        assert (values == np.round(values)).all() and len(values), name
        assert 0.1 <= released["wind_dir"].isna().mean() <= 0.3, name
        assert released["hour"].dtype == np.int64, name
        if name != "arrow":
            assert released["wind_dir"].dtype == np.float64, (name, released["wind_dir"].dtype)
            assert (spec["wind_dir"]["dtype"], spec["wind_dir"]["decimals"]) == ("float64", 0)
        else:  # no writer said pandas: an integer, as the values are
            assert str(released["wind_dir"].dtype) == "Int64"
            assert spec["wind_dir"]["dtype"] == "int64"
