"""docs/from-raw.md's runner on a small real table, our two paths, one seed, no peer (timings
are never asserted)."""

from __future__ import annotations

import json

import pytest

from benchmarks.from_raw import main
from benchmarks.from_raw_report import figures, report

pytestmark = pytest.mark.harness  # the runner starts its own clusters: CI's .ci/benchmarks

DIAMONDS = ("carat", "cut", "color", "clarity", "depth", "table", "price", "x", "y", "z")


def test_a_raw_table_comes_back_scored_column_by_column_on_each_path(tmp_path):
    out = tmp_path / "from_raw.jsonl"
    main(["--tables", "diamonds", "--max-rows", "3000", "--paths", "naive", "codebook",
          "--seeds", "1", "--workers", "1", "--naive", "two-step", "--out", str(out)])
    records = {r["path"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(records) == {"naive", "codebook"}
    assert records["naive"]["rows"] + records["naive"]["holdout_rows"] == 3000
    # The codebook names every column, so nothing is drafted and the release gets all of ε;
    # the naive path, on so few rows, may fail: then it says why, and is reported as failed.
    codebook = records["codebook"]
    assert codebook["draft_epsilon"] == 0.0 and "error" not in codebook
    columns = codebook["columns"]
    assert tuple(columns) == DIAMONDS
    assert columns["cut"]["type_in"] == "dictionary<values=string, indices=int8, ordered=1>"
    assert columns["cut"]["metric"] == "TVD" and columns["price"]["metric"] == "KS"
    assert columns["price"]["type_out"] == "int64"  # the codebook's documented whole dollars
    assert columns["cut"]["levels"] == 5  # the documented levels: none is lost
    assert columns["cut"]["levels_present"] == 5 and columns["cut"]["levels_lost"] == []
    assert len(codebook["pairs"]["numeric"]) == 3
    assert codebook["pairs"]["categorical"]["v_released"] is not None
    assert codebook["point_masses"]["table"]["real"] >= 0.05  # whole percents: 56, 57 (18 %)
    assert 0.5 < codebook["train_on_real"] <= 1  # R² of price, from the held-out real rows
    assert isinstance(codebook["train_on_synthetic"], float)
    assert 0 <= figures(codebook)["mean_ks"] <= 1
    naive = records["naive"]
    assert "error" in naive or tuple(naive["columns"]) == DIAMONDS
    text = report(out)
    assert "| threshold (naive path, total ε = 1) | diamonds |" in text
    assert "### diamonds (" in text and "| cut | dictionary (ordered, int8) |" in text
