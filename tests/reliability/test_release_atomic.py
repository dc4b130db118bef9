"""Releases are atomic, have one writer, resume after a kill, and do not depend on BLAS threads.

Jobs run as real `python -m dp_dask.cli` subprocesses against the suite's 2-worker LocalCluster
and are killed by PID (SIGKILL) mid-sampling; outputs are real Zarr/Parquet files in tmp_path.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zarr
from conftest import ROOT, SMALL_SCHEMA_PATH, correlated_frame
from distributed import Client, LocalCluster
from threadpoolctl import threadpool_limits

from dp_dask.cli import main
from dp_dask.copula.correlation import times_lower_factor
from dp_dask.copula.normals import fill_standard_normal
from dp_dask.copula.sample import Sampler
from dp_dask.data.schema import load_schema
from dp_dask.release import (
    COMPLETE,
    LOCK_STALE_SECONDS,
    ReleaseError,
    ReleaseLockedError,
    checked_table,
    model_fingerprint,
    published_location,
    release_lock,
    verify_release,
)
from dp_dask.synthesizer import Synthesizer, load_model

ROWS, PARTITION_ROWS = 80_000, 1_000  # 80 partitions: seconds of sampling to kill inside


@pytest.fixture(scope="module")
def model_dir(client, data, tmp_path_factory) -> Path:
    synthesizer = Synthesizer.create("marginals", SMALL_SCHEMA_PATH, noise_sampler="numpy",
                                     noise_seed=1, ledger=False)
    return synthesizer.fit(data).save(tmp_path_factory.mktemp("model") / "model")


def scheduler(client) -> list[str]:
    return ["--scheduler", client.scheduler.address, "--quiet"]


def sample_args(client, model: Path, out: Path | str, seed: int = 3,
                rows: int = ROWS) -> list[str]:
    return ["sample", "--model", str(model), "--out", str(out), "--rows", str(rows),
            "--partition-rows", str(PARTITION_ROWS), "--seed", str(seed), *scheduler(client)]


def cli(args: list[str], cwd: Path | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "dp_dask.cli", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def staging_dirs(target: Path) -> list[Path]:
    """The version directories beside ``target`` that its link does not name."""
    published = published_location(target)
    return sorted(p for p in target.parent.glob(f".{target.name}.v-*") if p != published)


def synthetic_hashes(release: Path) -> dict[str, str]:
    files = verify_release(release, checksums=True)["files"]
    return {name: entry["sha256"] for name, entry in files.items()
            if name.startswith("synthetic.")}


def test_killed_job_leaves_the_old_release_and_resumes_to_the_same_bytes(client, model_dir,
                                                                         data, tmp_path):
    target = tmp_path / "release"
    assert main(sample_args(client, model_dir, target, seed=1, rows=4_000)) == 0
    old, old_version = verify_release(target), published_location(target)

    job = cli(sample_args(client, model_dir, target))
    while True:  # kill once some partitions are written, well before the last
        staged = staging_dirs(target)
        markers = staged[0] / "_staging" / "done" if staged else None
        if markers is not None and markers.is_dir() and len(list(markers.iterdir())) >= 5:
            break
        assert job.poll() is None, f"the job ended before it was killed: {job.communicate()}"
        time.sleep(0.01)
    os.kill(job.pid, signal.SIGKILL)
    job.wait()
    time.sleep(0.5)  # tasks already running on the workers finish their partition

    # The target is still the old, complete release; the partial one is refused by readers.
    assert verify_release(target) == old
    (staging,) = staging_dirs(target)
    assert not (staging / COMPLETE).exists()
    with pytest.raises(ReleaseError, match="not a complete dp_dask release"):
        checked_table(staging / "synthetic.parquet")
    assert main(["evaluate", "--data", str(data), "--schema", str(SMALL_SCHEMA_PATH),
                 "--synthetic", str(staging), *scheduler(client)]) == 2
    done = sorted(int(marker.name) for marker in (staging / "_staging" / "done").iterdir())
    assert 5 <= len(done) < ROWS // PARTITION_ROWS
    parts = {p.name: p.stat().st_mtime_ns for p in (staging / "synthetic.parquet").iterdir()
             if not p.name.startswith(".")}

    # Same arguments: the killed job's lock is stale (its pid is gone), its partitions are kept.
    again = cli(sample_args(client, model_dir, target))
    assert again.wait() == 0, again.communicate()
    # written in place and published by the link; the old version stays for the grace period
    assert published_location(target) == staging and staging_dirs(target) == [old_version]
    record = verify_release(target, checksums=True)
    assert record["rows"] == ROWS and record["seed"] == 3
    resumed = {p.name: p.stat().st_mtime_ns for p in (target / "synthetic.parquet").iterdir()}
    assert len(resumed) == record["partitions"]
    assert sum(resumed[name] == mtime for name, mtime in parts.items()) >= len(done)

    # Byte for byte what one uninterrupted job writes, here on one thread-based worker.
    with (LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster,
          Client(cluster, set_as_default=True)):
        Synthesizer.from_model(model_dir).write(tmp_path / "whole", ROWS, seed=3,
                                                partition_rows=PARTITION_ROWS)
    client.as_current()
    assert synthetic_hashes(target) == synthetic_hashes(tmp_path / "whole")


def test_a_second_writer_fails_at_once_naming_the_holder(client, model_dir, tmp_path,
                                                         capsys):
    target = tmp_path / "release"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom dp_dask.release import release_lock\n"
         "with release_lock(sys.argv[1]):\n    print('locked', flush=True)\n    time.sleep(120)",
         str(target)], env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
        text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert main(sample_args(client, model_dir, target, rows=2_000)) == 2
        message = capsys.readouterr().err
        assert f"being written by another job (pid {holder.pid}" in message
        assert not target.exists() and staging_dirs(target) == []
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    # The holder is gone: its lock is stale, and the next job writes the release.
    assert main(sample_args(client, model_dir, target, rows=2_000)) == 0
    assert verify_release(target)["rows"] == 2_000
    assert not (tmp_path / ".release.lock").exists()


def test_stale_lock_rule(tmp_path):
    target = tmp_path / "release"
    lock = tmp_path / ".release.lock"
    lock.write_text(json.dumps({"host": "elsewhere", "pid": 1, "created": "earlier"}))
    with pytest.raises(ReleaseLockedError, match=r"pid 1 on elsewhere, since earlier"):
        with release_lock(target):
            pass
    old = time.time() - LOCK_STALE_SECONDS - 60  # not refreshed for too long: broken
    os.utime(lock, (old, old))
    with release_lock(target) as held:
        assert json.loads(held.read_text())["pid"] == os.getpid()
        with release_lock(target):  # re-entrant in one process
            pass
        assert held.exists()
    assert not lock.exists()


def test_replacing_a_release_leaves_nothing_of_the_old_one(client, model_dir, data, tmp_path):
    target = tmp_path / "release"
    assert main(["synth", "--data", str(data), "--schema", str(SMALL_SCHEMA_PATH), "--out",
                 str(target), "--rows", "3000", "--noise-sampler", "numpy", "--noise-seed", "2",
                 *scheduler(client)]) == 0
    assert "model/model.json" in verify_release(target)["files"]
    first = published_location(target)
    (target / "eval").mkdir()  # e.g. a forced evaluation: not part of the release
    (target / "eval" / "alpha-beta.md").write_text("owner only")
    assert main([*sample_args(client, model_dir, target, rows=2_500), "--zarr"]) == 0
    record = verify_release(target, checksums=True)
    assert sorted(p.name for p in target.iterdir()) == [COMPLETE, "metadata.json",
                                                         "synthetic.parquet", "synthetic.zarr"]
    # no lock, no leftover; the superseded version stays for the grace period, not in the new
    assert target.is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["release", first.name, published_location(target).name])
    assert zarr.open_array(str(target / "synthetic.zarr"), mode="r").shape[0] == 2_500
    assert len(record["files"]) + 1 == len([p for p in target.rglob("*") if p.is_file()])


def test_a_directory_that_is_not_a_release_is_never_replaced(client, model_dir, tmp_path,
                                                             capsys):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    (tmp_path / "file").write_text("mine")
    for out in ("notes", "file"):
        assert main(sample_args(client, model_dir, tmp_path / out, rows=1_000)) == 2
        assert str(tmp_path / out) in capsys.readouterr().err
    assert (tmp_path / "notes" / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "notes"]


def test_relative_out_is_resolved_on_the_driver(client, model_dir, tmp_path):
    job = cli(sample_args(client, model_dir, "relative", rows=3_000), cwd=tmp_path)
    assert job.wait() == 0, job.communicate()
    assert verify_release(tmp_path / "relative", checksums=True)["rows"] == 3_000
    for cwd in client.run(os.getcwd).values():  # nothing written where the workers run
        assert not (Path(cwd) / "relative").exists()


def test_readers_refuse_a_release_without_its_record(client, model_dir, tmp_path):
    release = tmp_path / "release"
    Synthesizer.from_model(model_dir).write(release, 2_000, partition_rows=PARTITION_ROWS)
    assert len(checked_table(release)) == 2_000
    part = next((release / "synthetic.parquet").iterdir())
    part.write_bytes(part.read_bytes()[:-10])
    with pytest.raises(ReleaseError, match="was altered: synthetic.parquet/part"):
        checked_table(release / "synthetic.parquet")
    (release / COMPLETE).unlink()
    with pytest.raises(ReleaseError, match=f"has no {COMPLETE}"):
        checked_table(part)
    assert checked_table(tmp_path / "other.parquet") == tmp_path / "other.parquet"


def test_a_release_of_the_older_layout_is_replaced_by_the_link(client, model_dir, tmp_path):
    """A release directory of an older dp_dask (the files in the target itself) is replaced
    by the link to the new version, and deleted; so is an empty directory."""
    for name, older in (("older", {"metadata.json": "{}", COMPLETE: "{}"}), ("empty", {})):
        target = tmp_path / name
        target.mkdir()
        for file, text in older.items():
            (target / file).write_text(text)
        Synthesizer.from_model(model_dir).write(target, 1_000, partition_rows=PARTITION_ROWS)
        assert target.is_symlink() and verify_release(target, checksums=True)["rows"] == 1_000
        assert sorted(p.name for p in tmp_path.iterdir() if name in p.name) == sorted(
            [name, published_location(target).name])


def test_a_saved_model_has_the_fingerprint_of_the_fitted_one(client, model_dir, tmp_path):
    for method in ("marginals", "copula"):
        fitted = Synthesizer.create(method, SMALL_SCHEMA_PATH, noise_sampler="numpy",
                                    noise_seed=4, ledger=False,
                                    **({"calibration_draws": 5_000} if method == "copula"
                                       else {}))
        fitted.fit(correlated_frame(2_000))
        loaded = load_model(fitted.save(tmp_path / method))
        assert model_fingerprint(loaded) == model_fingerprint(fitted.model)
    assert model_fingerprint(loaded) != model_fingerprint(load_model(model_dir))


def test_latent_product_does_not_depend_on_blas_threads():
    schema = load_schema("adult")
    rng = np.random.default_rng(0)
    loadings = rng.standard_normal((schema.d, 8))
    covariance = loadings @ loadings.T + np.eye(schema.d)
    scale = 1 / np.sqrt(np.diag(covariance))
    factor = np.linalg.cholesky(covariance * np.outer(scale, scale)).astype(np.float32)
    rows, seed = 20_000, np.random.SeedSequence(5)
    z = fill_standard_normal(np.random.PCG64(seed), np.empty((rows, schema.d), np.float32))
    latent = {}
    for threads in (1, 2):
        with threadpool_limits(limits=threads, user_api="blas"):
            latent[threads] = times_lower_factor(z.copy(), factor)  # the sampler's product
    # Thresholds at latent values the thread counts disagree on: any product not computed
    # on one BLAS thread flips those dummies. Where this BLAS agrees on both (OpenBLAS's strmm
    # splits columns of rows among threads), thresholds at row 0's values: any other product
    # than the one-thread one flips some.
    row, column = np.nonzero(latent[1] != latent[2])
    if len(row) == 0:
        row, column = np.zeros(schema.d, dtype=int), np.arange(schema.d)
    thresholds = np.full(schema.d, np.inf, dtype=np.float32)
    thresholds[column] = np.minimum(latent[1], latent[2])[row, column]
    sampler = Sampler(schema, factor, thresholds, np.zeros(schema.d))
    with threadpool_limits(limits=2, user_api="blas"):
        binary, _ = sampler.draw(rows, seed)
    np.testing.assert_array_equal(binary, latent[1] > thresholds)
