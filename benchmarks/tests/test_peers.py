"""benchmarks/peers.py without the peers: the code table they read, the cache, the table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks.peers import (
    ADD_REMOVE,
    CATEGORICAL,
    DEFAULT_DATA,
    REPLACE,
    append_cache,
    cache_key,
    codes_release,
    export_codes,
    load_cache,
    measured_run,
    peer_epsilon,
    peer_name,
    plan_peers,
    read_codes,
    read_data,
    results_table,
    table_rows,
    table_schema,
)
from benchmarks.peers_scale import generate
from dp_dask.data.decode import codes_to_frame
from dp_dask.data.encode import encode_partition
from dp_dask.data.schema import load_schema
from dp_dask.privacy.accounting import zcdp_rho_for


def raw_frame(schema, rows=500, seed=0):
    """Raw-looking rows of a schema: categories, and numbers at a bin's left (finite) edge."""
    rng = np.random.default_rng(seed)
    columns = {}
    for attribute in schema.attributes:
        if attribute.kind == "categorical":
            columns[attribute.name] = rng.choice(list(attribute.categories), rows)
        else:
            columns[attribute.name] = rng.choice(np.asarray(attribute.edges[:-1]), rows)
    return pd.DataFrame(columns)


def test_categorical_table_is_the_adult_schema_restricted():
    adult, schema = load_schema("adult"), table_schema("categorical")
    assert schema.names == list(CATEGORICAL)
    assert all(schema[name] == adult[name] for name in CATEGORICAL)
    assert table_schema("all") == adult
    with pytest.raises(ValueError):
        table_schema("numeric")


def test_another_table_is_given_by_its_schema_file():
    path = Path(__file__).parents[2] / "tests" / "small_schema.json"  # the suite's
    assert table_schema(str(path)) == load_schema(path)


@pytest.mark.parametrize("columns", ["categorical", "all"])
def test_code_table_round_trips(tmp_path, columns):
    schema = table_schema(columns)
    frame = raw_frame(load_schema("adult"))  # extra columns are ignored by the encoder
    csv, domain = export_codes(frame, schema, tmp_path)
    assert json.loads(domain.read_text()) == dict(zip(schema.names, schema.sizes.tolist()))
    assert list(json.loads(domain.read_text())) == schema.names  # order kept
    codes = read_codes(csv, schema)
    np.testing.assert_array_equal(codes, encode_partition(frame, schema).T)
    decoded = codes_release(csv, schema).compute()  # lazy: in blocks
    pd.testing.assert_frame_equal(decoded.reset_index(drop=True), codes_to_frame(codes, schema))
    # decoded labels encode back to the same codes (what evaluate_release counts)
    np.testing.assert_array_equal(encode_partition(decoded, schema.as_labels()).T, codes)


def test_read_codes_rejects_codes_outside_the_domain(tmp_path):
    schema = table_schema("categorical")
    codes = np.zeros((3, schema.m), dtype=np.int64)
    codes[1, schema.names.index("sex")] = 2  # sex has 2 categories
    pd.DataFrame(codes, columns=schema.names).to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(ValueError, match="sex"):
        read_codes(tmp_path / "bad.csv", schema)
    pd.DataFrame(codes[:, :-1], columns=schema.names[:-1]).to_csv(tmp_path / "short.csv",
                                                                  index=False)
    with pytest.raises(ValueError, match="income"):
        read_codes(tmp_path / "short.csv", schema)
    with pytest.raises(ValueError, match="sex"):  # the lazy decoding checks each block
        codes_release(tmp_path / "bad.csv", schema).compute()


def peer_row(peer, epsilon, seed=0, wall=10.0, columns="categorical"):
    errors = {w: {"avg95": 1.0, "max": 2.0, "queries": 10} for w in ("Q1", "Q2", "Q3")}
    return {"kind": "peer", "release": peer.upper(), "peer": peer, "columns": columns,
            "epsilon": epsilon, "delta": 1e-9, "seed": seed, "status": "ok", "errors": errors,
            "wall_s": wall, "cpu_s": wall, "peak_rss_mib": 1024.0, "load_before": [1, 1, 1],
            "load_after": [3, 1, 1]}


def test_cache_reuses_rows_by_key_unless_rerun(tmp_path):
    cache_path = tmp_path / "peers.jsonl"
    assert load_cache(cache_path) == {}
    append_cache(cache_path, peer_row("mst", 1, wall=50.0))
    append_cache(cache_path, peer_row("aim", 1.0, wall=600.0))
    append_cache(cache_path, peer_row("mst", 1, wall=40.0))  # a later line replaces it
    append_cache(cache_path, peer_row("mst", 1, columns="all"))
    cache = load_cache(cache_path)
    assert len(cache) == 3
    assert cache[cache_key("mst", "categorical", 1, 1e-9, 0)]["wall_s"] == 40.0

    reused, todo = plan_peers(["mst", "aim"], "categorical", [1.0, 2.0], 1e-9, [0, 1], cache)
    assert [(r["peer"], r["seed"]) for r in reused] == [("mst", 0), ("aim", 0)]
    assert todo == [cache_key("mst", "categorical", 1.0, 1e-9, 1),
                    cache_key("aim", "categorical", 1.0, 1e-9, 1),
                    cache_key("mst", "categorical", 2.0, 1e-9, 0),
                    cache_key("mst", "categorical", 2.0, 1e-9, 1),
                    cache_key("aim", "categorical", 2.0, 1e-9, 0),
                    cache_key("aim", "categorical", 2.0, 1e-9, 1)]
    # another δ, or another attribute set, is another key
    assert plan_peers(["mst"], "categorical", [1], 2e-9, [0], cache)[0] == []
    assert plan_peers(["mst"], "all", [1], 1e-9, [0], cache)[1] == []
    reused, todo = plan_peers(["mst", "aim"], "categorical", [1], 1e-9, [0], cache, rerun=True)
    assert reused == [] and len(todo) == 2


def test_cache_runs_failed_peers_again_but_keeps_timeouts(tmp_path):
    cache_path = tmp_path / "peers.jsonl"
    append_cache(cache_path, {**peer_row("mst", 1), "status": "failed (exit 1)"})
    append_cache(cache_path, {**peer_row("aim", 1), "status": "timeout after 2400 s"})
    reused, todo = plan_peers(["mst", "aim"], "categorical", [1], 1e-9, [0],
                              load_cache(cache_path))
    assert [r["peer"] for r in reused] == ["aim"]
    assert todo == [cache_key("mst", "categorical", 1.0, 1e-9, 0)]


def test_cache_keeps_the_two_neighbouring_notions_apart(tmp_path):
    cache_path = tmp_path / "peers.jsonl"
    append_cache(cache_path, peer_row("mst", 1, wall=50.0))  # cached before the notion was kept
    append_cache(cache_path, {**peer_row("mst", 1, wall=70.0), "neighbours": REPLACE,
                              "peer_epsilon": peer_epsilon(1, 1e-9, REPLACE)})
    cache = load_cache(cache_path)
    assert len(cache) == 2
    assert cache[cache_key("mst", "categorical", 1, 1e-9, 0)]["wall_s"] == 50.0
    assert cache[cache_key("mst", "categorical", 1, 1e-9, 0, ADD_REMOVE)]["wall_s"] == 50.0
    assert cache[cache_key("mst", "categorical", 1, 1e-9, 0, REPLACE)]["wall_s"] == 70.0
    reused, todo = plan_peers(["mst"], "categorical", [1, 2], 1e-9, [0], cache,
                              neighbours=REPLACE)
    assert [r["wall_s"] for r in reused] == [70.0]
    assert todo == [cache_key("mst", "categorical", 2, 1e-9, 0, REPLACE)]


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1.0, 2.0, 5.0, 20.0])
def test_a_replace_one_peer_runs_at_half_the_rho(epsilon):
    run = peer_epsilon(epsilon, 1e-9, REPLACE)
    assert run < epsilon
    assert zcdp_rho_for(run, 1e-9) == pytest.approx(zcdp_rho_for(epsilon, 1e-9) / 2, rel=1e-9)
    assert peer_epsilon(epsilon, 1e-9, ADD_REMOVE) == epsilon
    with pytest.raises(ValueError, match="neighbours"):
        peer_epsilon(epsilon, 1e-9, "replace_one")


def test_the_rho_is_private_pgms():
    # private-pgm's mechanisms/cdp2adp.py (commit 361705d): cdp_rho(1, 1e-9), cdp_rho(ε′, 1e-9)
    # at the ε′ that peer_epsilon gives for ε = 1 under replace-one
    assert zcdp_rho_for(1.0, 1e-9) == pytest.approx(0.014973057673588523, rel=1e-8)
    run = peer_epsilon(1.0, 1e-9, REPLACE)
    assert run == pytest.approx(0.6968239584827284, rel=1e-12)
    assert zcdp_rho_for(run, 1e-9) == pytest.approx(0.007486528836794265, rel=1e-8)


def test_peer_name_marks_non_default_options():
    assert peer_name("aim") == "aim" and peer_name("aim", {}) == "aim"
    assert peer_name("aim", {"max_model_size": 10.0}) == "aim[max_model_size=10]"


def test_results_table_averages_seeds_and_shows_timeouts():
    timeout = {**peer_row("aim", 1), "status": "timeout after 2400 s", "errors": None}
    rows = [peer_row("mst", 1, seed=0, wall=10.0), peer_row("mst", 1, seed=1, wall=30.0),
            timeout]
    table = results_table(rows)
    assert list(table.columns[:3]) == ["release", "ε", "seeds"]
    assert {"Q1 95 %", "Q3 max", "wall s", "CPU s", "peak RSS GiB", "load"} <= set(table.columns)
    mst = table[table["release"] == "MST"].iloc[0]
    assert mst["seeds"] == 2 and mst["wall s"] == 20.0 and mst["peak RSS GiB"] == "1.00"
    assert mst["load"] == "2.0"  # no load_mean: between before and after
    aim = table[table["release"] == "AIM"].iloc[0]
    assert aim["wall s"] == "timeout after 2400 s" and aim["Q1 95 %"] == "—"
    assert "script's ε′" not in table.columns


def test_results_table_shows_the_epsilon_a_replace_one_peer_ran_at():
    replace = {**peer_row("mst", 1), "release": "MST, replace-one", "neighbours": REPLACE,
               "peer_epsilon": peer_epsilon(1, 1e-9, REPLACE)}
    table = results_table([peer_row("mst", 1), replace]).set_index("release")
    assert table.loc["MST", "script's ε′"] == "1"
    assert table.loc["MST, replace-one", "script's ε′"] == "0.6968"


def test_measured_run_reports_time_memory_and_exit(tmp_path):
    work = "import time; x = bytearray(50 * 2**20); x[::4096] = b'1' * len(x[::4096]); " \
           "time.sleep(0.5)"
    result = measured_run([sys.executable, "-c", work], log=tmp_path / "log")
    assert result["returncode"] == 0 and not result["timed_out"]
    assert result["peak_rss_mib"] >= 50 and result["cpu_s"] >= 0 and result["wall_s"] > 0
    failed = measured_run([sys.executable, "-c", "raise SystemExit(3)"], log=tmp_path / "log")
    assert failed["returncode"] == 3
    slow = measured_run([sys.executable, "-c", "import time; time.sleep(30)"],
                        log=tmp_path / "log", timeout=0.5)
    assert slow["timed_out"] and slow["wall_s"] < 10


def test_measured_run_stops_a_run_at_its_memory_limit(tmp_path):
    grow = "import time\nx = bytearray(400 * 2**20)\nx[::4096] = b'1' * len(x[::4096])\n" \
           "time.sleep(30)"
    stopped = measured_run([sys.executable, "-c", grow], log=tmp_path / "log",
                           memory_limit_gib=0.2)
    assert stopped["memory_stopped"] and not stopped["timed_out"]
    assert stopped["returncode"] < 0 and stopped["wall_s"] < 20
    assert stopped["peak_rss_mib"] > 0.2 * 1024  # it did outgrow the limit
    assert "stopped at the memory limit" in (tmp_path / "log").read_text()
    within = measured_run([sys.executable, "-c", "x = bytearray(20 * 2**20)"],
                          log=tmp_path / "log", memory_limit_gib=0.2)
    assert within["returncode"] == 0 and not within["memory_stopped"]


def test_measured_peak_is_the_child_s_own_not_the_harness_s(tmp_path):
    held = bytearray(600 * 2**20)  # the harness holding a large frame
    held[::4096] = b"1" * len(held[::4096])
    idle = measured_run([sys.executable, "-c", "import time; time.sleep(0.5)"],
                        log=tmp_path / "log")
    assert 0 < idle["peak_rss_mib"] < 300  # wait4's ru_maxrss says > 600 here
    del held


def test_generated_scale_input_holds_the_same_rows_in_both_formats(tmp_path):
    schema = table_schema("categorical")
    data, csv, domain = generate(1_000, tmp_path / "a", chunk_rows=300)
    assert len(list(data.glob("part-*.parquet"))) == 4 and table_rows(data) == 1_000
    labels = pd.read_parquet(data)
    codes = read_codes(csv, schema)
    assert codes.shape == (1_000, schema.m)
    np.testing.assert_array_equal(encode_partition(labels, schema.as_labels()).T, codes)
    assert json.loads(domain.read_text()) == dict(zip(schema.names, schema.sizes.tolist()))
    # every row is one of Adult's: its 9 categorical codes
    adult = encode_partition(read_data(DEFAULT_DATA, schema.names), schema).T
    assert set(map(tuple, codes)) <= set(map(tuple, adult))
    stamp = (data / "part-00000.parquet").stat().st_mtime_ns
    generate(1_000, tmp_path / "a", chunk_rows=300)  # complete: kept
    assert (data / "part-00000.parquet").stat().st_mtime_ns == stamp
    other, _, _ = generate(1_000, tmp_path / "b", chunk_rows=300, seed=1)
    assert not pd.read_parquet(other).equals(labels)
    alone, no_csv, _ = generate(1_000, tmp_path / "c", chunk_rows=300, codes=False)
    assert not no_csv.exists()  # dp_dask's input only
    pd.testing.assert_frame_equal(pd.read_parquet(alone), labels)  # the same rows


def test_cache_leaves_our_rows_out(tmp_path):
    record = tmp_path / "record.jsonl"
    append_cache(record, peer_row("mst", 1))
    append_cache(record, {"kind": "ours", "release": "dp_dask marginals", "status": "ok"})
    assert list(load_cache(record)) == [cache_key("mst", "categorical", 1, 1e-9, 0)]


@pytest.mark.parametrize("name", ["bank.json", "flights.json"])
def test_benchmark_tables_have_public_schemas(name):
    schema = table_schema(str(Path(__file__).parents[1] / name))
    assert schema.m >= 8 and {a.kind for a in schema.attributes} == {"numeric", "categorical"}


def test_a_cancelled_flight_falls_in_the_missing_bin():
    schema = table_schema(str(Path(__file__).parents[1] / "flights.json"))
    row = {"month": "1", "hour": "5", "dep_delay": "NA", "arr_delay": "-3", "carrier": "UA",
           "origin": "EWR", "air_time": "NA", "distance": "1400"}
    codes = encode_partition(pd.DataFrame([row]), schema)[:, 0]
    labels = {a.name: a.labels[c] for a, c in zip(schema.attributes, codes)}
    assert labels["dep_delay"] == labels["air_time"] == "missing"
    assert labels["hour"] == "[4, 6)" and labels["distance"] == "[1000, 1500)"


STAND_INS = {  # the parts of jax and mbi 2.0 the runner patches, as stand-ins
    "jax.py": "import contextlib\nJIT = [True]\n@contextlib.contextmanager\n"
              "def disable_jit():\n    JIT[0] = False\n    yield\n    JIT[0] = True\n",
    "mbi/__init__.py": "import numpy as np\nfrom mbi import estimation\n"
                       "class MarkovRandomField:\n    def project(self, attrs):\n"
                       "        import jax\n        return (attrs, jax.JIT[0])\n"
                       "class Domain:\n    attributes = ('a', 'b')\n"
                       "class Dataset:\n    def to_dict(self):\n"
                       "        return {'a': np.array([1, 2], np.uint8)}\n",
    "mbi/estimation.py": "class Estimator:\n    def estimate(self, *args, warm_start=None):\n"
                         "        return warm_start\n",
}
PEER_SCRIPT = """\
import json, sys
import numpy as np
import mbi
print(json.dumps({
    "argv": sys.argv[1:], "draw": float(np.random.random()),
    "project": mbi.MarkovRandomField().project(["a"]), "attrs": list(mbi.Domain().attrs),
    "warm_start": mbi.estimation.Estimator().estimate(potentials="p"),
    "dtype": str(mbi.Dataset().to_dict()["a"].dtype)}))
"""


def test_peer_runner_seeds_patches_mbi_and_runs_the_script(tmp_path):
    from benchmarks.peers import PEER_RUNNER

    for name, text in STAND_INS.items():
        (tmp_path / "env" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "env" / name).write_text(text)
    (tmp_path / "mst.py").write_text(PEER_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "env")}
    run = subprocess.run([sys.executable, "-c", PEER_RUNNER, "3", str(tmp_path / "mst.py"),
                          "--epsilon", "1"], env=env, capture_output=True, text=True, check=True)
    out = json.loads(run.stdout)
    assert out["argv"] == ["--epsilon", "1"]
    assert out["draw"] == np.random.RandomState(3).random_sample()  # seeded global generator
    assert out["project"] == [["a"], False]  # projections run with jit off
    assert out["attrs"] == ["a", "b"] and out["warm_start"] == "p" and out["dtype"] == "int64"
