"""Value metrics of typed releases (dp_dask.evaluate.values): known answers on constructed
columns, exact histograms against samples, the parsing of real values, and the CLI outputs."""

from __future__ import annotations

import json

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import scipy.stats
from conftest import SMALL_SCHEMA_PATH, correlated_frame

from dp_dask import Synthesizer
from dp_dask.cli import main
from dp_dask.data.schema import load_schema
from dp_dask.evaluate.values import (
    QUANTILES,
    compare_values,
    ks_statistic,
    value_metrics,
    weighted_quantiles,
)
from dp_dask.privacy.labels import OWNER_ONLY

SCHEMA = load_schema({"schema_version": 1, "name": "values", "attributes": [
    {"name": "x", "type": "numeric", "edges": ["-inf", 0, "inf"]},
    {"name": "k", "type": "numeric", "edges": [0, 5, 10], "dtype": "int64",
     "extra": ["unknown"], "on_missing": "unknown", "on_unknown": "unknown"},
    {"name": "t", "type": "datetime", "unit": "year", "edges": [1990, 2000, 2030]},
    {"name": "c", "type": "categorical", "categories": ["a", "b"]}]})


def frame(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    return pd.DataFrame({
        "x": x,
        "k": np.clip(np.round(3 * x + 5), 0, 9).astype(np.int64),  # rank-correlated with x
        "t": pd.Timestamp("1995-01-01") + pd.to_timedelta(rng.integers(0, 10_000, n), "D"),
        "c": rng.choice(["a", "b"], n)})


def decimal_years(stamps: pd.Series) -> np.ndarray:
    """Year plus the share of it elapsed, computed apart from the encoder."""
    start = pd.to_datetime(stamps.dt.year.astype(str) + "-01-01")
    end = pd.to_datetime((stamps.dt.year + 1).astype(str) + "-01-01")
    return (stamps.dt.year + (stamps - start) / (end - start)).to_numpy()


def test_identical_columns_have_zero_distances(client):
    real = frame(3000)
    metrics = compare_values(real, real.copy(), SCHEMA).metrics.set_index("column")
    assert list(metrics.index) == ["x", "k", "t"]  # the categorical column has no values
    assert (metrics["KS"] == 0).all() and (metrics["W1"] == 0).all()
    assert (metrics["computed on"] == "all values").all()  # 3000 rows: every one of them


def test_a_shifted_column_has_its_shift_as_w1_and_numpy_moments(client):
    real = frame(2000, seed=1)
    shifted = real.assign(x=real["x"] + 0.25)
    comparison = compare_values(dd.from_pandas(real, npartitions=3),
                                dd.from_pandas(shifted, npartitions=2), SCHEMA)
    x = comparison.metrics.set_index("column").loc["x"]
    assert x["W1"] == pytest.approx(0.25, abs=1e-12)
    assert x["KS"] == pytest.approx(scipy.stats.ks_2samp(real["x"], shifted["x"]).statistic)
    assert x["KS"] > 0.05
    for side, values in (("real", real["x"]), ("synthetic", shifted["x"])):
        assert x[f"mean {side}"] == pytest.approx(values.mean())
        assert x[f"std {side}"] == pytest.approx(values.std(ddof=0))
        np.testing.assert_allclose([x[f"q{q:.0%} {side}"] for q in QUANTILES],
                                   np.quantile(values, QUANTILES))
    t = comparison.metrics.set_index("column").loc["t"]  # times in decimal years
    np.testing.assert_allclose([t[f"q{q:.0%} real"] for q in QUANTILES],
                               np.quantile(decimal_years(real["t"]), QUANTILES))


def test_missing_and_out_of_domain_values_are_left_out(client):
    real = frame(500, seed=2).astype({"k": "float64"})
    real.loc[::10, "k"] = np.nan  # missing → "unknown"
    real.loc[1::10, "k"] = 42.0  # beyond the last edge → "unknown"
    as_text = real.assign(k=real["k"].map(lambda v: "" if np.isnan(v) else f"{v:g}"))
    kept = real["k"][real["k"].between(0, 9)]
    for data in (real, as_text):  # a number column, and text cells as a CSV gives them
        k = compare_values(data, frame(400, seed=3), SCHEMA).metrics.set_index("column").loc["k"]
        assert k["real values"] == len(kept) == 400
        np.testing.assert_allclose([k[f"q{q:.0%} real"] for q in QUANTILES],
                                   np.quantile(kept, QUANTILES))


def test_histograms_are_exact_and_the_sample_is_a_seeded_set_of_rows(client):
    real = dd.from_pandas(frame(3000, seed=4), npartitions=4)
    synthetic = dd.from_pandas(frame(3000, seed=5), npartitions=3)
    comparison = compare_values(real, synthetic, SCHEMA, sample_rows=200, histogram_values=100)
    metrics = comparison.metrics.set_index("column")
    # k has 10 distinct values: its exact histogram over all 3000 rows; x and t (3000 distinct
    # values, over 100): the 200-row sample
    assert metrics.loc["k", "computed on"] == "all values"
    assert (metrics.loc[["x", "t"], "computed on"] == "sample").all()
    assert "200 of 3,000 real" in comparison.sample
    pandas_k = frame(3000, seed=4)["k"]
    np.testing.assert_allclose([metrics.loc["k", f"q{q:.0%} real"] for q in QUANTILES],
                               np.quantile(pandas_k, QUANTILES))
    sampled = comparison.real["x"]
    assert len(sampled.values) == 200 and not sampled.exact
    assert np.isin(sampled.values, frame(3000, seed=4)["x"]).all()
    again = compare_values(real, synthetic, SCHEMA, sample_rows=200, histogram_values=100)
    pd.testing.assert_frame_equal(again.metrics, comparison.metrics)  # seeded
    other = compare_values(real, synthetic, SCHEMA, sample_rows=200, histogram_values=100,
                           seed=1)
    assert not np.array_equal(other.real["x"].values, sampled.values)


def test_spearman_matrices_match_scipy(client):
    real, synthetic = frame(1500, seed=6), frame(1500, seed=7)
    comparison = compare_values(real, synthetic.assign(k=9 - synthetic["k"]), SCHEMA)
    expected = scipy.stats.spearmanr(np.column_stack([real["x"], real["k"],
                                                      decimal_years(real["t"])])).statistic
    np.testing.assert_allclose(comparison.spearman_real.loc[["x", "k", "t"], ["x", "k", "t"]],
                               expected)
    assert comparison.spearman_real.loc["x", "k"] > 0.9
    assert comparison.spearman_synthetic.loc["x", "k"] < -0.9  # k reversed
    difference = (comparison.spearman_real - comparison.spearman_synthetic).abs().to_numpy()
    assert comparison.spearman_max_difference == pytest.approx(difference.max())
    assert comparison.spearman_max_difference > 1.8


def test_weighted_statistics_equal_those_of_the_repeated_values():
    rng = np.random.default_rng(8)
    u, v = rng.integers(0, 20, 50).astype(float), rng.integers(0, 20, 40).astype(float)
    u_weights, v_weights = rng.integers(1, 6, 50), rng.integers(1, 6, 40)
    u_all, v_all = np.repeat(u, u_weights), np.repeat(v, v_weights)
    assert ks_statistic(u, v, u_weights, v_weights) == pytest.approx(
        scipy.stats.ks_2samp(u_all, v_all).statistic)
    assert ks_statistic(u_all, u_all) == 0
    np.testing.assert_allclose(weighted_quantiles(u, u_weights), np.quantile(u_all, QUANTILES))


def test_label_columns_have_no_value_metrics(client):
    real = correlated_frame(300, seed=1)
    labels = real.assign(size=pd.cut(real["size"], [0, 10, 20, 50, np.inf], right=False,
                                      labels=["[0, 10)", "[10, 20)", "[20, 50)", "[50, inf)"]))
    schema = load_schema(SMALL_SCHEMA_PATH)
    assert compare_values(real, labels, schema) is None
    assert value_metrics(real, labels, schema).empty
    assert list(value_metrics(real, real, schema)["column"]) == ["size"]


def scheduler(client) -> list[str]:
    return ["--scheduler", client.scheduler.address, "--quiet"]


@pytest.mark.parametrize("decode", ["uniform", "label"])
def test_evaluate_command_writes_value_tables_of_typed_releases_only(client, data, tmp_path,
                                                                     capsys, decode):
    synthesizer = Synthesizer.create("marginals", SMALL_SCHEMA_PATH, epsilon=1.0, ledger=False)
    synthesizer.fit(data).write(tmp_path / "release", 3000, seed=0, partition_rows=1000,
                                decode=decode)
    out = tmp_path / "eval"
    assert main(["evaluate", "--data", str(data), "--synthetic", str(tmp_path / "release"),
                 "--schema", str(SMALL_SCHEMA_PATH), "--out", str(out), "--q3-sample", "20",
                 *scheduler(client)]) == 0
    printed = capsys.readouterr().out
    if decode == "label":
        assert not list(out.glob("values.*")) and "values (" not in printed
        assert 'id="values"' not in (out / "report.html").read_text()
        return
    # 20,000 distinct floats: no histogram, but the sample holds every row
    assert "| size | numeric | all values | 20000 | 3000 |" in printed
    for name in ("values.md", "values.csv"):  # marked on their first line
        assert OWNER_ONLY in (out / name).read_text().splitlines()[0].lower()
    document = json.loads((out / "values.json").read_text())
    assert document["privacy"] == OWNER_ONLY and document["differentially_private"] is False
    table = pd.read_csv(out / "values.csv", comment="#").set_index("column")
    assert table.loc["size", "real values"] == 20_000
    assert table.loc["size", "synthetic values"] == 3000
    assert 0 < table.loc["size", "KS"] < 0.2  # a DP release at ε = 1: close, not equal
    assert document["records"][0]["KS"] == pytest.approx(table.loc["size", "KS"])
    assert 'id="values"' in (out / "report.html").read_text()
