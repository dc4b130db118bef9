"""docs/from-raw.md's runner on a small flights-like table (timings are never asserted)."""

from __future__ import annotations

import json

import pytest

from benchmarks.from_raw import main, report

pytestmark = pytest.mark.harness  # the runner starts its own clusters: CI's .ci/benchmarks


def test_a_raw_table_comes_back_with_its_types_and_calendar_columns(tmp_path):
    out = tmp_path / "from_raw.jsonl"
    main(["--tables", "flights", "--paths", "naive", "--rows", "60000", "--seeds", "1",
          "--workers", "1", "--out", str(out)])
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["same_types"] == record["n_columns"] == 14
    columns = record["columns"]
    assert columns["year"]["ks"] == 0.0 and columns["year"]["outside_real"] == 0.0  # a constant
    for name in ("month", "hour", "minute"):  # small integer grids, found value by value
        assert columns[name]["ks"] < 0.05, name
    assert "| flights | naive | 1 |" in report(out)
