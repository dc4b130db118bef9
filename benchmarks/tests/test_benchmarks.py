"""The benchmark generator and runner, on the smallest shape (timings are never asserted)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchmarks.run import STAGES, run, table
from benchmarks.shapes import SHAPES, generate, schema_for
from dp_dask.data.schema import load_schema

# Each runner starts its own cluster or child processes: kept out of the default suite's time,
# run by CI's .ci/benchmarks step (as the benchmarks are scripts around the library).
pytestmark = pytest.mark.harness


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_shape_schema_has_the_papers_d(name):
    shape = SHAPES[name]
    schema = load_schema(schema_for(shape)[0])
    assert (schema.m, schema.d) == (shape.m, shape.d)
    assert {a.kind for a in schema.attributes} == {"numeric", "categorical"}
    assert schema.sizes.min() >= 2


def test_generator_is_seeded_and_correlated(tmp_path):
    first = generate("adult", tmp_path / "a", rows=3_000, partition_rows=1_000)
    second = generate("adult", tmp_path / "b", rows=3_000, partition_rows=1_000)
    frame = pd.read_parquet(first / "data")
    pd.testing.assert_frame_equal(frame, pd.read_parquet(second / "data"))
    assert len(frame) == 3_000 and len(list((first / "data").glob("*.parquet"))) == 3
    schema = load_schema(first / "schema.json")
    assert list(frame.columns) == schema.names
    # x1 and x3 share a latent block (loading 0.75²): clearly correlated.
    assert frame["x1"].corr(frame["x3"]) > 0.4


@pytest.mark.parametrize("method", sorted(STAGES))
def test_runner_reports_every_stage(tmp_path, method):
    result = run("adult", rows=2_000, workers=1, memory_limit="2GiB", root=tmp_path,
                 method=method)
    assert set(result["timings"]) == {key for _, key in STAGES[method]}
    assert result["d"] == SHAPES["adult"].d and result["sample_rows"] == 2_000
    assert result["total_s"] == pytest.approx(sum(result["timings"].values()))
    assert set(result["peak_rss_gib"]) == {"driver", "worker0"}
    assert all(v > 0 for v in result["peak_rss_gib"].values())
    text = table(result)
    assert all(label in text for label, _ in STAGES[method])
    assert not (tmp_path / "out-adult-2000").exists()  # output removed unless kept


def test_runner_counts_cpu_seconds_and_writes_zarr_only_when_asked(tmp_path):
    for zarr in (False, True):
        result = run("adult", rows=2_000, workers=1, memory_limit="2GiB", root=tmp_path,
                     keep_output=True, with_binary=zarr)
        assert result["cpu_s"]["fit"] > 0 and result["cpu_s"]["write"] > 0
        assert (tmp_path / "out-adult-2000" / "synthetic.zarr").exists() == zarr
        assert result["bytes_written"] > 0
        assert "CPU s (driver + workers)" in table(result)


def test_runner_writes_a_release_to_an_s3_server(tmp_path):
    pytest.importorskip("moto.server")
    result = run("adult", rows=2_000, workers=1, memory_limit="2GiB", root=tmp_path,
                 target="s3", keep_output=True, noise_sampler="numpy")
    assert result["target"] == "s3" and "written to s3" in table(result)
    assert result["bytes_written"] > 2_000  # the release's objects, listed on the server
    assert result["peak_rss_gib"]["s3 server"] > 0  # the server's memory is counted
    assert not (tmp_path / "out-adult-2000").exists()  # nothing written locally
    assert (tmp_path / "moto.log").exists()


def test_stage_profile_times_every_stage_and_its_floor(tmp_path):
    from benchmarks.stages import profile
    from benchmarks.stages import table as stage_table
    from dp_dask.synthesizer import load_model

    result = run("adult", rows=2_000, workers=1, memory_limit="2GiB", root=tmp_path,
                 sample_rows=0, return_model=True, noise_sampler="numpy")
    model = result["model"]
    model.save(tmp_path / "model")
    profiled = profile(load_model(tmp_path / "model"), 1_500, repeat=1)
    cpu = profiled["cpu_s"]
    # the 1-way match is timed only where a partition is not settled by value moves
    for stage in ("resample", "decode (uniform)", "parquet part (label)", "zarr chunk",
                  "floor: one numpy pass over the codes"):
        assert cpu[stage] >= 0
    assert cpu["estimate: whole (tree, raking, weight fit, trial)"] > cpu["estimate: tree start"]
    assert "µs/row" in stage_table(profiled)


def test_runner_times_a_label_release_against_a_typed_one(tmp_path):
    """--decode reaches the release: label output holds bin labels, typed output numbers."""
    types = {}
    for decode in ("label", "uniform"):
        result = run("adult", rows=2_000, workers=1, memory_limit="2GiB",
                     root=tmp_path / decode, keep_output=True, decode=decode)
        assert result["decode"] == decode
        parquet = tmp_path / decode / "out-adult-2000" / "synthetic.parquet"
        schema = load_schema(schema_for(SHAPES["adult"])[0])
        numeric = next(a.name for a in schema.attributes if a.kind == "numeric")
        types[decode] = pd.read_parquet(parquet)[numeric].dtype
    assert isinstance(types["label"], pd.CategoricalDtype)
    assert pd.api.types.is_numeric_dtype(types["uniform"])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hospital", "dss"])
def test_full_shape_runs(name, tmp_path):
    result = run(name, root=tmp_path)
    assert set(result["timings"]) == {key for _, key in STAGES["marginals"]}


def test_plot_draws_copula_and_default_method_runs(tmp_path):
    from benchmarks.plot import plot

    def result(shape, rows, method, seconds):
        return {"shape": shape, "rows": rows, "d": SHAPES[shape].d, "workers": 2,
                "sample_rows": rows, "method": method, "total_s": seconds,
                "timings": {key: seconds / len(STAGES[method]) for _, key in STAGES[method]},
                "peak_rss_gib": {"driver": 0.3, "worker0": 0.4, "worker1": 0.4}}

    runs = [result("dss", 10**6, "copula", 40.0), result("adult", 10**6, "marginals", 10.0),
            result("adult", 10**7, "marginals", 90.0)]
    del runs[0]["method"]  # runs from before --method were the copula's
    out = plot(runs, tmp_path / "plot.png")
    assert out.stat().st_size > 10_000


def test_scaling_runs_each_worker_count_and_reports_efficiency(tmp_path, capsys):
    from benchmarks.scaling import efficiency, main

    results = main(["--shape", "adult", "--rows", "4000", "--workers", "1", "2",
                    "--noise-sampler", "numpy", "--root", str(tmp_path),
                    "--json", str(tmp_path / "runs.jsonl")])
    assert [r["workers"] for r in results] == [1, 2]
    assert len((tmp_path / "runs.jsonl").read_text().splitlines()) == 2
    eff = efficiency(results)
    assert eff[1] == {"read_encode_count": 1.0, "sample_write": 1.0, "total": 1.0}
    two = results[1]
    assert eff[2]["total"] == pytest.approx(results[0]["total_s"] / (2 * two["total_s"]))
    assert "| 2 |" in capsys.readouterr().out
    again = main(["--from-json", str(tmp_path / "runs.jsonl"), "--plot", str(tmp_path / "c.png")])
    assert again[1]["workers"] == 2 and (tmp_path / "c.png").stat().st_size > 10_000


def test_sampling_device_times_draws_and_release_writes_of_a_saved_sampler(tmp_path, capsys):
    import numpy as np

    from benchmarks.sampling_device import load, main, save

    path = save("adult", tmp_path / "sampler.npz", tmp_path, workers=1)
    sampler = load(path, "cpu")
    assert sampler.schema.d == SHAPES["adult"].d and sampler.factor.dtype == np.float32
    drawn = main(["time", "--sampler", str(path), "--workers", "1", "--rows", "3000"])
    assert drawn["rows"] == 3_000 and not drawn["write"] and drawn["device"] == "cpu"
    written = main(["time", "--sampler", str(path), "--workers", "1", "--rows", "3000",
                    "--write", str(tmp_path / "out")])
    assert written["write"]
    assert len(pd.read_parquet(tmp_path / "out" / "synthetic.parquet")) == 3_000


def test_ceiling_compares_k_processes_with_one():
    from benchmarks.ceiling import ceiling

    result = ceiling([1, 2])
    assert result["gather"][1] == 1.0 and result["gemm"][1] == 1.0
    assert 0 < result["gather"][2] <= 2 and result["gemm_seconds"][2] > 0


def test_starts_share_one_model_and_beat_unfitted_rows_on_one_way_counts():
    from benchmarks.starts import compare, summary_table
    from dp_dask.data.demo import generate_census

    frame = generate_census(3_000, seed=0).compute().reset_index(drop=True)
    lines = list(compare(load_schema("demo"), frame, epsilon=2.0, seeds=[0]))
    by_start = {line["start"]: line for line in lines}
    assert set(by_start) == {"raked", "tree", "independent", "copula", "copula rows, no updates"}
    # Every start is fitted to the same measurements and ends on its fit's 1-way counts, which
    # the copula's own i.i.d. rows miss by their sampling error.
    updated = [by_start[name]["Q1"]["avg95"] for name in ("raked", "tree", "independent", "copula")]
    assert max(updated) < 0.75 * by_start["copula rows, no updates"]["Q1"]["avg95"]
    table = summary_table(lines)
    assert list(table["seeds"]) == [1, 1, 1, 1, 1]
    assert list(table["copula fit s"][:3]) == ["–", "–", "–"]


def test_object_storage_writes_each_target_alternately_and_puts_the_bytes_alone(tmp_path,
                                                                               capsys):
    from benchmarks.object_storage import main, summary

    result = main(["--rows", "3000", "--runs", "2", "--fit-rows", "4000", "--workers", "1",
                   "--memory-limit", "2GiB", "--root", str(tmp_path),
                   "--json", str(tmp_path / "runs.jsonl")])
    writes = result["writes"]
    assert [w["target"] for w in writes] == ["local", "s3", "s3", "local"]
    assert all(w["wall_s"] >= w["sample_write_s"] > 0 for w in writes)
    assert {k for w in writes for k in w["peak_rss_gib"]} == {"worker0", "s3 server"}
    local = [w for w in writes if w["target"] == "local"]
    # every local release's bytes PUT again by s3fs alone; the server works for S3 writes
    assert all(w["put_alone"]["bytes"] == w["bytes"] > 0 for w in local)
    assert max(w["server_cpu_s"] for w in local) <= min(
        w["server_cpu_s"] for w in writes if w["target"] == "s3")
    assert not (tmp_path / "release").exists()  # each release removed after its write
    s = summary(result)
    assert s["ratio"] == round(s["s3_median_s"] / s["local_median_s"], 2)
    assert "s3fs alone" in capsys.readouterr().out
    assert len((tmp_path / "runs.jsonl").read_text().splitlines()) == 1


def test_dpcopula_paper_gaussian_table_has_its_public_correlation_and_domain():
    from benchmarks.dpcopula_paper import gaussian_correlation, gaussian_frame, gaussian_schema

    frame = gaussian_frame(20_000)
    schema = gaussian_schema()
    assert (schema.m, set(schema.sizes.tolist())) == (8, {1_000})
    assert frame.to_numpy().min() >= 0 and frame.to_numpy().max() <= 999
    assert abs(frame.to_numpy().mean() - 500) < 5
    target = gaussian_correlation()
    np.testing.assert_allclose(np.corrcoef(frame.to_numpy().T), target, atol=0.03)
    assert np.abs(target[np.triu_indices(8, 1)]).max() > 0.3  # real structure to recover
    pd.testing.assert_frame_equal(frame, gaussian_frame(20_000))


def test_dpcopula_paper_scores_numeric_ranges_and_pair_groups():
    from benchmarks.dpcopula_paper import pair_groups, scorer
    from benchmarks.dpcopula_paper import table as paper_table
    from dp_dask.data.encode import encode_partition

    schema, frame = paper_table("census", 5_000)
    codes = encode_partition(frame, schema)
    score = scorer(schema, codes)
    numeric = score.workloads["range_numeric"]
    constrained = (numeric.lo > 0) | (numeric.hi < schema.sizes - 1)
    assert not constrained[:, :3].any() and constrained.sum(axis=1).max() == 2
    assert score.sanity == 5.0  # 0.1 % of n
    shuffled = codes[:, np.random.default_rng(0).permutation(codes.shape[1])]
    assert score.score(shuffled)["range_all"]["mean"] == 0
    independent = np.stack([np.random.default_rng(i).permutation(c) for i, c in enumerate(codes)])
    scores = score.score(independent)
    groups = pair_groups(scores, schema)
    assert set(groups) == {"two_way_tvd_small_large", "two_way_tvd_large_large"}
    # permuting each column alone keeps the 1-way marginals and breaks the dependence
    assert scores["one_way_tvd_max"] == 0 and groups["two_way_tvd_large_large"] > 0.02


def test_dpcopula_paper_runs_a_release_in_a_child_and_reports(tmp_path):
    import json

    from benchmarks.dpcopula_paper import main

    results = tmp_path / "results.jsonl"
    main(["--shape", "census", "--rows", "3000", "--epsilons", "1", "--seeds", "1",
          "--methods", "dpcopula", "dpcopula-hybrid", "--results", str(results)])
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [(r["method"], r["status"]) for r in rows] == [("dpcopula", "ok"),
                                                         ("dpcopula-hybrid", "ok")]
    assert all(r["peak_rss_mib"] > 0 and r["scores"]["range_all"]["queries"] == 1_000
               for r in rows)
    main(["--shape", "census", "--rows", "3000", "--epsilons", "1", "--seeds", "1",
          "--methods", "dpcopula", "--results", str(results)])  # cached: not run again
    assert len(results.read_text().splitlines()) == 2
    main(["--results", str(results), "--report", str(tmp_path / "report")])
    text = (tmp_path / "report.md").read_text()
    assert "census, n = 3,000" in text and "dpcopula-hybrid" in text
    assert (tmp_path / "report.png").stat().st_size > 0
