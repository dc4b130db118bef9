"""Operations: --version, defaults in every option's help, logs without progress-bar floods
when stdout is not a terminal, JSON log lines, the run summary, ``dp-dask plan``, and the
cluster kinds that run offline (local for real; the SLURM job script dask-jobqueue would submit;
missing backends named with their extra)."""

from __future__ import annotations

import argparse
import json
import os
import resource
import warnings

import dask
import numpy as np
import pytest
from conftest import RAW_VALUE, SMALL_SCHEMA_PATH

import dp_dask
from dp_dask.cli import build_parser, main
from dp_dask.cluster import (
    BACKENDS,
    WORKER_MALLOC,
    ClusterError,
    backend,
    compute,
    dask_client,
    jobqueue_cluster,
)
from dp_dask.data.schema import load_schema

STAGES = ("read_encode_count", "noise", "consistency", "sample_write")


def scheduler(client) -> list[str]:
    return ["--scheduler", client.scheduler.address]


def synth(client, source, out, *extra) -> list[str]:
    return ["synth", "--data", str(source), "--schema", str(SMALL_SCHEMA_PATH), "--out",
            str(out), "--rows", "1000", "--ledger", str(out.parent / "ledger.sqlite"), *extra,
            *scheduler(client)]


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"dp-dask {dp_dask.__version__}\n"


def _parsers(parser: argparse.ArgumentParser, name: str = "dp-dask"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {command}")


def test_every_option_shows_its_default():
    missing = []
    for name, parser in _parsers(build_parser()):
        help_text = parser.format_help()
        formatter = parser._get_formatter()
        for action in parser._actions:
            if (not action.option_strings or action.required or action.nargs == 0
                    or isinstance(action, argparse._SubParsersAction)):
                continue  # positionals, required options, flags (--force), help, --version
            if "default" not in formatter._get_help_string(action):
                missing.append(f"{name} {action.option_strings[0]}")
        assert "%(default)" not in help_text
    assert not missing, missing
    synth_help = next(p for n, p in _parsers(build_parser()) if n == "dp-dask synth")
    assert "(default: 0)" in synth_help.format_help()  # --seed


def test_logs_without_a_terminal_one_line_per_stage(client, people_csv, tmp_path, capsys):
    out = tmp_path / "release"
    summary_path = tmp_path / "release.run.json"
    # not --quiet; capsys' stdout is no TTY
    assert main(synth(client, people_csv, out, "--summary", str(summary_path))) == 0
    captured = capsys.readouterr()
    assert "\r" not in captured.out + captured.err  # no progress-bar redraws
    assert "Completed" not in captured.out  # distributed's text progress bar
    lines = captured.err.splitlines()
    for stage in STAGES:
        assert sum(f"dp_dask.timing {stage}: " in line for line in lines) == 1, captured.err
    summary = json.loads(summary_path.read_text())
    assert set(STAGES) <= set(summary["stages"])
    assert summary["status"] == "ok" and summary["command"] == "synth"
    assert summary["peak_memory_bytes"]["driver"] > 50 * 2**20
    assert summary["release"]["rows"] == 1000
    assert summary["privacy"]["epsilon"] == 1.0
    assert summary["privacy"]["differentially_private"] is True
    assert summary["paths"]["parquet"] == str(out / "synthetic.parquet")
    assert RAW_VALUE not in summary_path.read_text()
    assert f"summary: {summary_path}" in captured.out


def test_json_log_lines(client, people_csv, tmp_path, capsys):
    summary = tmp_path / "elsewhere" / "summary.json"
    summary.parent.mkdir()
    assert main(synth(client, people_csv, tmp_path / "release", "--log-format", "json",
                      "--summary", str(summary))) == 0
    lines = capsys.readouterr().err.splitlines()
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert {"time", "level", "logger", "message"} <= set(records[0])
    messages = [r["message"] for r in records if r["logger"] == "dp_dask.timing"]
    assert [m.split(":")[0] for m in messages if m.split(":")[0] in STAGES] == list(STAGES)
    assert json.loads(summary.read_text())["paths"]["record"].endswith("_COMPLETE.json")
    assert sorted(path.name for path in tmp_path.iterdir()  # and the release's version dir
                  if not path.name.startswith(".")) == ["elsewhere", "ledger.sqlite", "release"]


def test_json_errors_are_log_lines(tmp_path, capsys):
    code = main(["synth", "--data", str(tmp_path / "none.csv"), "--schema", "nonesuch",
                 "--out", str(tmp_path / "r"), "--log-format", "json"])
    assert code == 2
    record = json.loads(capsys.readouterr().err)
    assert record["level"] == "ERROR" and "schema 'nonesuch'" in record["message"]


def test_plan(capsys):
    adult = load_schema("adult")
    assert main(["plan", "--schema", "adult", "--rows", "1000000", "--workers", "2",
                 "--json"]) == 0
    small = json.loads(capsys.readouterr().out)
    assert small["dummy_columns"] == adult.d
    assert small["queries"] == adult.m + adult.m * (adult.m - 1) // 2
    assert small["count_matrix_bytes"] == adult.d**2 * 8
    assert small["sample_partition_rows"] == 100_000
    assert main(["plan", "--schema", "adult", "--rows", "10000000", "--workers", "2",
                 "--json"]) == 0
    large = json.loads(capsys.readouterr().out)
    assert large["seconds"]["count"] == pytest.approx(10 * small["seconds"]["count"], rel=1e-3)
    assert large["driver_bytes"] == small["driver_bytes"]  # the driver holds no rows
    assert main(["plan", "--schema", "adult", "--rows", "1000", "--method", "copula"]) == 0
    text = capsys.readouterr().out
    assert "d = 177 dummy columns" in text and "each worker ≈" in text


def test_plan_refuses_what_a_fit_would_refuse(tmp_path, capsys):
    wide = {"schema_version": 1, "name": "wide", "attributes": [
        {"name": "id", "type": "categorical", "categories": [str(i) for i in range(13_000)]},
        {"name": "flag", "type": "categorical", "categories": ["no", "yes"]}]}
    (tmp_path / "wide.json").write_text(json.dumps(wide))
    assert main(["plan", "--schema", str(tmp_path / "wide.json"), "--rows", "10"]) == 2
    assert "the limit is 12,000" in capsys.readouterr().err


def test_local_cluster_kind_for_real():
    with dask_client(kind="local", n_workers=1, memory_limit="1GiB", quiet=True) as client:
        assert client.submit(sum, [1, 2, 3]).result() == 6
        assert client.dashboard_link.startswith("http://127.0.0.1:")
        # glibc's thresholds reach the worker processes (set before they start) and hold:
        # a 2 MB array made and freed 100 times is faulted in about once, not 100 times
        environ = client.run(lambda: {key: os.environ.get(key) for key in WORKER_MALLOC})
        assert list(environ.values()) == [{k: str(v) for k, v in WORKER_MALLOC.items()}]
        (faults,) = client.run(_page_faults_of_new_arrays).values()
        assert faults < 100 * (2 * 2**20 // 4096) / 10


def _page_faults_of_new_arrays() -> int:
    """Minor page faults while a 2 MB array is made, written and freed 100 times."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(100):
        np.ones(2**18)  # 2 MiB of float64
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"kind": "address"}, "--cluster address needs --scheduler ADDRESS"),
    ({"kind": "local", "scheduler": "tcp://127.0.0.1:9"}, "needs --cluster address"),
    ({"kind": "local", "options": {"cores": 2}}, "--cluster-options are for jobqueue"),
])
def test_cluster_option_conflicts(kwargs, message):
    with pytest.raises(ClusterError, match=message), dask_client(**kwargs):
        pass


def test_missing_backend_names_its_extra(monkeypatch):
    monkeypatch.setitem(BACKENDS, "gateway", ("dp_dask_no_such_module", "gateway"))
    with pytest.raises(ClusterError, match=r"pip install 'dp-dask\[gateway\]'"):
        backend("gateway")


def test_slurm_job_script():
    pytest.importorskip("dask_jobqueue")
    with jobqueue_cluster({"system": "slurm", "cores": 4, "processes": 2, "memory": "16GiB",
                           "queue": "batch", "walltime": "02:00:00",
                           "scheduler_options": {"host": "127.0.0.1"}}) as cluster:
        script = cluster.job_script()
    assert "#SBATCH -p batch" in script
    assert "#SBATCH -t 02:00:00" in script
    assert "#SBATCH --cpus-per-task=4" in script
    assert "--nworkers 2" in script and "--nthreads 2" in script
    assert "distributed.cli.dask_worker" in script


def test_unknown_jobqueue_system():
    with pytest.raises(ClusterError, match="system 'cron' is not one of slurm"):
        jobqueue_cluster({"system": "cron"})


def test_kubernetes_spec_offline():
    pytest.importorskip("dask_kubernetes.operator")
    from dp_dask.cluster import kubernetes_spec

    spec = kubernetes_spec({"image": "registry.example/dp-dask:0.1", "n_workers": 3,
                            "resources": {"limits": {"memory": "4Gi", "cpu": "1"}},
                            "env": {"DP_DASK_LEDGER": "/ledger/ledger.sqlite"}})
    assert spec["kind"] == "DaskCluster" and spec["metadata"]["name"] == "dp-dask"
    worker = spec["spec"]["worker"]
    assert worker["replicas"] == 3
    container = worker["spec"]["containers"][0]
    assert container["image"] == "registry.example/dp-dask:0.1"
    assert container["resources"]["limits"]["memory"] == "4Gi"
    assert {"name": "DP_DASK_LEDGER", "value": "/ledger/ledger.sqlite"} in container["env"]
    with pytest.raises(ClusterError, match="bad cluster option"):
        kubernetes_spec({"replicas": 3})


def test_a_model_carried_in_the_graph_does_not_warn(client):
    model = np.ones(12 * 2**20 // 8)  # 12 MiB, like DPView's tables on the DSS shape
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (total,) = compute(dask.delayed(np.sum, pure=True)(model))
    assert total == model.size
    assert not [w for w in caught if "large graph" in str(w.message)]
