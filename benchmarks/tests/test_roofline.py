"""The roofline benchmark at a small size (timings are never asserted: the machine is shared)."""

from __future__ import annotations

import json

import pytest

from benchmarks.roofline import PRIMITIVES, STAGES, main, rows_of

pytestmark = pytest.mark.harness  # CI's benchmarks step (.ci/benchmarks)


def test_item1_roofline_times_every_stage_beside_its_primitive(tmp_path, capsys):
    """Issue 69: each stage of a demo-shaped release (and the DP draft of its raw table and the
    bounding of a unit column), its primitive and their ratio, on 20 k
    rows counted and a 200 k-row release sampled in partitions of 5 k (no value moves, as in
    a release past ``move_partitions`` partitions)."""
    result = main(["--rows", "20000", "--release-rows", "200000", "--partition-rows", "5000",
                   "--partitions", "2", "--work", str(tmp_path), "--json",
                   str(tmp_path / "roofline.jsonl")])
    assert result["rows"] == 20_000 and result["partition_rows"] == 5_000
    assert set(STAGES) <= set(result["cpu_s"]) and set(PRIMITIVES) == set(STAGES)
    measured = {stage: (mine, theirs, ratio) for stage, mine, theirs, ratio in rows_of(result)}
    for stage in STAGES:
        mine, theirs, ratio = measured[stage]
        assert mine >= 0
        # every stage but the driver's fit and encoding (read's primitive) has a ratio
        assert (ratio is None) == (stage in ("fit on the driver", "encode"))
    assert result["estimates"] >= 1 and result["part_bytes"] > 0
    assert result["versions"] and result["machine"] and len(result["load"]) == 3
    printed = capsys.readouterr().out
    assert "| estimation |" in printed and "primitive CPU s / M rows" in printed
    assert json.loads((tmp_path / "roofline.jsonl").read_text())["release_rows"] == 200_000
