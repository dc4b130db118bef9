"""benchmarks/dpsynth.py without dpsynth: the tables the peers read, the runner on a stand-in
dpsynth, the record."""

from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd
import pytest

from benchmarks import dpsynth
from benchmarks.peers import (
    append_cache,
    cache_key,
    load_cache,
    plan_peers,
    read_codes,
    reusable,
    table_schema,
)
from dp_dask.data.encode import encode_partition

# The part of dpsynth's API the runner calls, as a stand-in: it records what it was given and
# releases the input rows shuffled by the seeded generator.
STAND_IN = {
    "dpsynth/__init__.py": """\
import dataclasses, json, os, time
import numpy as np
from dpsynth import discrete_mechanisms, domain

@dataclasses.dataclass(frozen=True)
class Calibrated:
    config: object
    epsilon: float
    delta: float
    base_mechanism: object = None
    dp_event: str = "GaussianDpEvent(noise_multiplier=1.0)"

    def __call__(self, rng, frame):
        time.sleep(float(os.environ.get("STAND_IN_SLEEP", "0")))
        given = {"domains": {k: v.possible_values for k, v in self.config.domains.items()},
                 "mechanism": type(self.config.discrete_mechanism).__name__,
                 "epsilon": self.epsilon, "delta": self.delta, "draw": float(rng.random()),
                 "columns": list(frame.columns), "dtypes": sorted(set(map(str, frame.dtypes)))}
        open(os.environ["STAND_IN_OUT"], "w").write(json.dumps(given))
        order = rng.permutation(len(frame))
        class Result:
            synthetic_data = frame.iloc[order].reset_index(drop=True)
        return Result()

@dataclasses.dataclass(frozen=True)
class TabularConfig:
    domains: dict
    discrete_mechanism: object
    init_budget_fraction: float = 0.1

    def calibrate(self, *, epsilon, delta):
        return Calibrated(self, epsilon, delta)
""",
    "dpsynth/domain.py": """\
import dataclasses
@dataclasses.dataclass(frozen=True)
class CategoricalAttribute:
    possible_values: list
""",
    "dpsynth/discrete_mechanisms.py": """\
import dataclasses
@dataclasses.dataclass(frozen=True)
class SWIFTConfig:
    max_clique_size: float = 1e7
AIMGDPConfig = MSTConfig = SWIFTConfig
""",
}


@pytest.fixture
def small(monkeypatch):
    monkeypatch.setattr(dpsynth, "PLANTED_ROWS", 2_000)
    monkeypatch.setattr(dpsynth, "DEMO_ROWS", 3_000)


def stand_in(tmp_path, monkeypatch, sleep=0.0):
    for name, text in STAND_IN.items():
        (tmp_path / "env" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "env" / name).write_text(text)
    monkeypatch.setenv("STAND_IN_OUT", str(tmp_path / "given.json"))
    monkeypatch.setenv("STAND_IN_SLEEP", str(sleep))
    return str(tmp_path / "env")


def check_codes(table, frame):
    """The peers' code table is the schema's encoding of the rows, its domain the schema's."""
    schema = table.schema
    assert json.loads(table.domain.read_text()) == dict(zip(schema.names,
                                                            schema.sizes.tolist()))
    codes = read_codes(table.codes, schema)
    np.testing.assert_array_equal(codes, encode_partition(frame, schema).T)


def test_planted_table_is_the_same_rows_for_both(tmp_path, small):
    table = dpsynth.prepare("planted", tmp_path)
    assert table.schema.names == list("abcdef") and table.schema.sizes.tolist() == [3, 3, 3, 3,
                                                                                    4, 2]
    assert len(table.source) == 2_000
    pd.testing.assert_frame_equal(pd.read_parquet(table.data), table.source)  # dp_dask's input
    check_codes(table, table.source)


@pytest.mark.parametrize(("name", "columns"), [("adult9", "categorical"), ("adult15", "all")])
def test_adult_tables_are_binned_by_the_adult_schema(tmp_path, name, columns):
    table = dpsynth.prepare(name, tmp_path)
    assert table.schema_argument == columns and table.schema == table_schema(columns)
    assert len(json.loads(table.domain.read_text())) == (9 if name == "adult9" else 15)
    check_codes(table, table.source)


def test_demo_table_is_the_census_binned_by_its_schema(tmp_path, small):
    table = dpsynth.prepare("demo", tmp_path)
    assert table.schema.name == "demo" and table.schema.m == 15
    check_codes(table, pd.read_parquet(table.source))
    stamp = table.codes.stat().st_mtime_ns
    dpsynth.prepare("demo", tmp_path)  # complete: kept
    assert table.codes.stat().st_mtime_ns == stamp


def test_unknown_table_is_refused(tmp_path):
    with pytest.raises(ValueError, match="planted"):
        dpsynth.prepare("adult", tmp_path)


def test_runner_gives_dpsynth_the_schema_domains_and_the_seed(tmp_path, monkeypatch, small):
    env = stand_in(tmp_path, monkeypatch)
    table = dpsynth.prepare("planted", tmp_path)
    key = cache_key("swift", "planted", 1.0, 1e-9, 3)
    row = dpsynth.run_dpsynth(key, table, python=sys.executable, checkout=None, work=tmp_path,
                              timeout=None, q3_sample=1_000, pythonpath=env)
    assert row["status"] == "ok", row.get("log_tail")
    given = json.loads((tmp_path / "given.json").read_text())
    assert given["domains"] == {n: list(range(s)) for n, s in zip(table.schema.names,
                                                                  table.schema.sizes)}
    assert given["mechanism"] == "SWIFTConfig" and given["epsilon"] == 1.0
    assert given["delta"] == 1e-9 and given["dtypes"] == ["int64"]
    assert given["draw"] == np.random.default_rng(3).random()
    # the rows back (shuffled): every error of a release equal to its input is 0
    assert row["rows_released"] == 2_000
    assert all(row["errors"][w]["max"] == 0 for w in ("Q1", "Q2", "Q3"))
    assert row["dpsynth"]["mechanism"] == "SWIFTConfig"
    assert row["dpsynth"]["config"] == {"max_clique_size": 1e7}
    assert row["release"] == "SWIFT (dpsynth)" and row["neighbours"] == "add_remove"
    assert row["wall_s"] > 0 and row["peak_rss_mib"] > 0 and "-P" in row["command"]


def test_a_peer_past_its_time_is_recorded_and_kept(tmp_path, monkeypatch, small):
    env = stand_in(tmp_path, monkeypatch, sleep=60)
    table = dpsynth.prepare("planted", tmp_path)
    key = cache_key("aim-gdp", "planted", 1.0, 1e-9, 0)
    row = dpsynth.run_dpsynth(key, table, python=sys.executable, checkout=None, work=tmp_path,
                              timeout=2, q3_sample=1_000, pythonpath=env)
    assert row["status"] == "timeout after 2 s" and reusable(row) and "errors" not in row
    with pytest.raises(ValueError, match="add/remove"):
        dpsynth.run_dpsynth(cache_key("mst", "planted", 1.0, 1e-9, 0, "replace"), table,
                            python=sys.executable, checkout=None, work=tmp_path, timeout=None,
                            q3_sample=1_000)


def ours_row(method, table, seed, status="ok", wall=5.0):
    errors = {w: {"avg95": 1.0 + seed, "max": 9.0, "queries": 3} for w in ("Q1", "Q2", "Q3")}
    return {"kind": "ours", "release": method, "ours": method, "columns": table,
            "epsilon": 1.0, "delta": 1e-9, "seed": seed, "status": status, "errors": errors,
            "wall_s": wall, "cpu_s": wall, "peak_rss_mib": 512.0, "load_mean": 1.0}


def test_record_keys_runs_by_table_and_keeps_the_last(tmp_path):
    record = tmp_path / "dpsynth.jsonl"
    peer = {**ours_row("SWIFT (dpsynth)", "planted", 0), "kind": "peer", "peer": "swift"}
    del peer["ours"]
    append_cache(record, peer)
    append_cache(record, {**peer, "columns": "adult9", "status": "timeout after 1200 s"})
    append_cache(record, ours_row("marginals-add-remove", "planted", 0, status="failed (exit 1)"))
    append_cache(record, ours_row("marginals-add-remove", "planted", 1, wall=7.0))
    append_cache(record, ours_row("marginals-add-remove", "planted", 1, wall=3.0))
    rows = dpsynth.recorded(record)
    assert len(rows) == 4
    assert dpsynth.ours_done(rows) == {("marginals-add-remove", "planted", 1.0, 1)}
    _, todo = plan_peers(["swift", "mst"], "planted", [1.0], 1e-9, [0], load_cache(record))
    assert todo == [cache_key("mst", "planted", 1.0, 1e-9, 0)]
    _, todo = plan_peers(["swift"], "adult9", [1.0], 1e-9, [0], load_cache(record))
    assert todo == []  # a timeout is a result
    table = dpsynth.summary(rows, "planted").set_index("release")
    assert list(table.columns) == ["ε", "seeds", "Q1", "Q2", "worst 2-way", "Q3", "wall s",
                                   "CPU s", "peak GiB", "load"]
    assert table.loc["marginals-add-remove", "wall s"] == 3.0  # the failed seed is not averaged
    assert table.loc["SWIFT (dpsynth)", "Q2"] == 1.0
    assert dpsynth.summary(rows, "adult9").loc[0, "wall s"] == "timeout after 1200 s"
    assert dpsynth.summary(rows, "demo").empty


def test_both_clique_modes_are_dp_dask_releases_under_add_remove():
    from benchmarks.peers import OURS

    assert set(dpsynth.OURS_HERE) <= set(OURS)
    assert all("add/remove" in OURS[name][0] for name in dpsynth.OURS_HERE)


def test_dp_dask_releases_its_own_noisy_count_under_add_remove(tmp_path, small):
    from benchmarks.peers import OURS

    table = dpsynth.prepare("planted", tmp_path)
    args = (table.schema, table.source, 1.0, 1e-9, 0)
    exact = OURS["marginals-add-remove-auto"][1](*args)
    own = OURS["marginals-add-remove-auto-nhat"][1](*args)
    assert len(exact) == 2_000
    assert len(own) != 2_000 and abs(len(own) - 2_000) < 200  # n̂: σ of a few rows


def test_main_shows_the_record_without_running_or_writing_tables(tmp_path):
    record = tmp_path / "dpsynth.jsonl"
    for seed in (0, 1, 2):
        append_cache(record, ours_row("marginals-add-remove-nhat", "planted", seed))
    tables = dpsynth.main(["--tables", "planted", "--peers", "--ours",
                           "marginals-add-remove-nhat", "--cache", str(record),
                           "--work", str(tmp_path / "work")])
    assert not (tmp_path / "work").exists()  # nothing to run: no table prepared
    assert tables["planted"].loc[0, "seeds"] == 3 and tables["planted"].loc[0, "Q1"] == 2.0
