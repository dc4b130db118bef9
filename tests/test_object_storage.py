"""Object storage for real: an S3-compatible server (moto's server mode, which enforces
conditional PUTs) on 127.0.0.1, read and written with s3fs by the driver and by the suite's
worker processes. Inputs, releases (staged under ``<out>/_v/<key>/``, published by the pointer
``<out>/_CURRENT.json``), models and run summaries may be URLs; the ledger may not
(docs/releases.md)."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import textwrap
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit
from xml.etree import ElementTree

import dask.dataframe as dd
import fsspec
import pandas as pd
import pytest
from conftest import SMALL_SCHEMA_PATH, correlated_frame
from distributed import Client, LocalCluster
from s3_server import moto_server as s3_server_process

from dp_dask.cli import main
from dp_dask.data.io import read_table
from dp_dask.data.schema import load_schema
from dp_dask.privacy.ledger import Ledger
from dp_dask.release import (
    COMPLETE,
    CURRENT,
    GRACE_ENV,
    LOCK,
    SUPERSEDED,
    VERSIONS,
    ReleaseError,
    checked_table,
    delete_release,
    published_location,
    verify_release,
)
from dp_dask.synthesizer import Synthesizer, load_model

s3fs = pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")

ROWS = 2_000
BUCKET = "dp-dask-test"


def scheduler(client) -> list[str]:
    return ["--scheduler", client.scheduler.address, "--quiet"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """The server, a bucket holding a CSV, a Parquet directory and the schema; the fsspec
    options that reach it (passed explicitly: the suite's workers started before this)."""
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    options = {"endpoint_url": f"http://127.0.0.1:{port}", "key": "testing",
               "secret": "testing", "client_kwargs": {"region_name": "us-east-1"}}
    fs = s3fs.S3FileSystem(**options)
    fs.call_s3("create_bucket", Bucket=BUCKET)  # mkdir would send us-east-1 as a constraint
    local = tmp_path_factory.mktemp("s3-input")
    frame = correlated_frame(ROWS, seed=5)
    frame.to_csv(local / "people.csv", index=False)
    dd.from_pandas(frame, npartitions=2).to_parquet(local / "people.parquet")
    fs.put(str(local / "people.csv"), f"{BUCKET}/people.csv")
    fs.put(str(local / "people.parquet"), f"{BUCKET}/people.parquet", recursive=True)
    fs.put(str(SMALL_SCHEMA_PATH), f"{BUCKET}/schema.json")
    yield fs, options
    server.stop()


def test_config_reads_csv_and_schema_from_s3(client, s3, tmp_path, capsys):
    fs, options = s3
    config = tmp_path / "job.yaml"
    config.write_text(textwrap.dedent(f"""\
        data: s3://{BUCKET}/people.csv
        schema: s3://{BUCKET}/schema.json
        storage_options: {json.dumps(options)}
        privacy: {{epsilon: 1}}
        output: {{out: release, rows: 500}}
        ledger: {{path: ledger.sqlite}}
        """))
    assert main(["run", str(config), *scheduler(client)]) == 0, capsys.readouterr().err
    record = verify_release(tmp_path / "release", checksums=True)
    assert record["rows"] == 500
    metadata = json.loads((tmp_path / "release" / "metadata.json").read_text())
    assert metadata["n_rows"] == ROWS  # every row of the object was counted
    assert metadata["ledger"]["dataset_name"] == "people"  # the object's stem


def test_fit_reads_parquet_directory_from_s3(client, s3, tmp_path, capsys):
    _, options = s3
    code = main(["fit", "--data", f"s3://{BUCKET}/people.parquet", "--schema",
                 str(SMALL_SCHEMA_PATH), "--storage-options", json.dumps(options), "--model",
                 str(tmp_path / "model"), "--ledger", str(tmp_path / "ledger.sqlite"),
                 "--summary", str(tmp_path / "model.run.json"), *scheduler(client)])
    assert code == 0, capsys.readouterr().err
    document = json.loads((tmp_path / "model" / "model.json").read_text())
    assert document["n_rows"] == ROWS
    summary = json.loads((tmp_path / "model.run.json").read_text())
    assert summary["paths"]["data"] == f"s3://{BUCKET}/people.parquet"


def test_missing_object_is_a_one_line_error(client, s3, tmp_path, capsys):
    _, options = s3
    code = main(["synth", "--data", f"s3://{BUCKET}/nobody.csv", "--schema",
                 str(SMALL_SCHEMA_PATH), "--storage-options", json.dumps(options), "--out",
                 str(tmp_path / "release"), "--ledger", str(tmp_path / "ledger.sqlite"),
                 "--dataset-name", "nobody", *scheduler(client)])
    assert code == 2
    assert capsys.readouterr().err == (f"dp-dask: error: input s3://{BUCKET}/nobody.csv does "
                                       "not exist\n")
    assert not (tmp_path / "release").exists()


def test_ledger_on_object_storage_is_refused(client, s3, tmp_path, capsys):
    fs, options = s3
    code = main(["synth", "--data", f"s3://{BUCKET}/people.csv", "--schema",
                 str(SMALL_SCHEMA_PATH), "--storage-options", json.dumps(options),
                 "--out", str(tmp_path / "release"), "--ledger", f"s3://{BUCKET}/ledger.sqlite",
                 *scheduler(client)])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("dp-dask: error: --ledger s3://") and err.count("\n") == 1
    assert not fs.exists(f"{BUCKET}/ledger.sqlite") and not (tmp_path / "release").exists()


def spent(ledger: Path) -> list[str]:
    """The statuses of the ledger's entries (none when the job never reached it)."""
    return [entry.status for entry in Ledger(ledger).entries()] if ledger.exists() else []


def objects(fs, prefix: str) -> list[str]:
    fs.invalidate_cache()
    return sorted(path[len(prefix) + 1:] for path in fs.find(prefix))


def test_synth_releases_to_s3(client, s3, tmp_path, capsys):
    fs, options = s3
    out = f"s3://{BUCKET}/synth-release"
    code = main(["synth", "--data", f"s3://{BUCKET}/people.csv", "--schema",
                 str(SMALL_SCHEMA_PATH), "--storage-options", json.dumps(options), "--out", out,
                 "--rows", "700", "--partition-rows", "300", "--ledger",
                 str(tmp_path / "ledger.sqlite"), "--summary", f"{out}.run.json",
                 *scheduler(client)])
    assert code == 0, capsys.readouterr().err
    record = verify_release(out, checksums=True, storage_options=options)
    assert record["rows"] == 700 and record["partitions"] == 3
    pointer = json.loads(fs.cat(f"{BUCKET}/synth-release/{CURRENT}"))
    version = f"{BUCKET}/synth-release/{pointer['version']}"
    # the record lists every object of the version but itself: model, parts, chunks, metadata
    assert sorted(record["files"]) == [name for name in objects(fs, version) if name != COMPLETE]
    assert "model/model.npz" in record["files"]
    assert objects(fs, f"{BUCKET}/synth-release") == sorted(
        [CURRENT] + [f"{pointer['version']}/{name}" for name in objects(fs, version)])  # no lock
    # the parts the record lists, read from the version the pointer names
    rows = checked_table(out, options).compute()
    assert len(rows) == 700 and list(rows.columns) == record["columns"]
    summary = json.loads(fs.cat(f"{BUCKET}/synth-release.run.json"))
    assert summary["release"]["rows"] == 700 and summary["paths"]["record"].startswith("s3://")
    assert spent(tmp_path / "ledger.sqlite") == ["spent"]
    evaluate = ["evaluate", "--data", f"s3://{BUCKET}/people.csv", "--schema",
                str(SMALL_SCHEMA_PATH), "--storage-options", json.dumps(options),
                "--q3-sample", "10", *scheduler(client)]
    capsys.readouterr()
    for synthetic in (out, f"{out}/synthetic.parquet"):  # the local forms, through the pointer
        assert main([*evaluate, "--synthetic", synthetic]) == 0, capsys.readouterr().err
        assert "Q3:" in capsys.readouterr().out
    fs.pipe(f"{BUCKET}/unpublished/_v/0123/metadata.json", b"{}")  # staged, never published
    assert main([*evaluate, "--synthetic", f"s3://{BUCKET}/unpublished"]) == 2
    assert f"s3://{BUCKET}/unpublished is not a complete dp_dask release: it has no " \
        f"{CURRENT}" in capsys.readouterr().err


def test_config_releases_to_s3_with_its_summary_beside(client, s3, tmp_path, capsys):
    _, options = s3
    config = tmp_path / "job.yaml"
    config.write_text(textwrap.dedent(f"""\
        data: s3://{BUCKET}/people.csv
        schema: {SMALL_SCHEMA_PATH}
        storage_options: {json.dumps(options)}
        privacy: {{epsilon: 1}}
        output: {{out: s3://{BUCKET}/config-release, rows: 400}}
        ledger: {{path: ledger.sqlite}}
        """))
    assert main(["run", str(config), *scheduler(client)]) == 0, capsys.readouterr().err
    assert verify_release(f"s3://{BUCKET}/config-release", storage_options=options)["rows"] == 400
    fs, _ = s3
    summary = json.loads(fs.cat(f"{BUCKET}/config-release.run.json"))
    assert summary["config"] == str(config) and summary["release"]["rows"] == 400


def test_fit_and_sample_through_s3(client, s3, tmp_path, capsys):
    """fit saves the model under a URL; sample loads it from there and releases twice to one
    target: the second release replaces the first, whose version is kept for the grace period
    after the pointer moved."""
    fs, options = s3
    model, out = f"s3://{BUCKET}/model", f"s3://{BUCKET}/sampled"
    ledger = tmp_path / "ledger.sqlite"
    fit = ["fit", "--data", f"s3://{BUCKET}/people.parquet", "--schema", str(SMALL_SCHEMA_PATH),
           "--storage-options", json.dumps(options), "--model", model, "--ledger", str(ledger),
           "--run-id", "nightly-1", *scheduler(client)]
    assert main(fit) == 0, capsys.readouterr().err
    assert objects(fs, f"{BUCKET}/model") == ["model.json", "model.npz"]  # the probe is gone
    assert load_model(model, options).n_rows == ROWS
    # The ledger keeps the model's URL, so a retry of the run reuses it: nothing spent again.
    assert [entry.model_path for entry in Ledger(ledger).entries()] == [model]
    saved = fs.info(f"{BUCKET}/model/model.npz")["ETag"]
    assert main(fit) == 0, capsys.readouterr().err
    assert len(Ledger(ledger).entries()) == 1
    assert fs.info(f"{BUCKET}/model/model.npz")["ETag"] == saved
    versions = []
    for rows in (400, 900):
        code = main(["sample", "--model", model, "--storage-options", json.dumps(options),
                     "--out", out, "--rows", str(rows), *scheduler(client)])
        assert code == 0, capsys.readouterr().err
        assert verify_release(out, storage_options=options)["rows"] == rows
        versions.append(json.loads(fs.cat(f"{BUCKET}/sampled/{CURRENT}"))["version"])
    assert versions[0] != versions[1]
    # the superseded version stays for the grace period, marked with when it was superseded
    assert {name.split("/")[0] for name in objects(fs, f"{BUCKET}/sampled/{VERSIONS}")} == \
        {versions[0][3:], versions[1][3:]}
    assert fs.exists(f"{BUCKET}/sampled/{versions[0]}/{SUPERSEDED}")


def test_second_writer_fails_fast_and_stale_locks_are_broken(client, s3, tmp_path, capsys):
    """A lock object held by a live process (here: a real ``sleep``) stops a second writer at
    once; a lock whose process is gone is broken and the release written."""
    fs, options = s3
    model = Synthesizer.create("marginals", SMALL_SCHEMA_PATH, noise_sampler="numpy",
                               noise_seed=2, ledger=False).fit(correlated_frame(ROWS, seed=2))
    model.save(tmp_path / "model")
    lock = f"{BUCKET}/locked/{LOCK}"
    argv = ["sample", "--model", str(tmp_path / "model"), "--storage-options",
            json.dumps(options), "--out", f"s3://{BUCKET}/locked", "--rows", "300",
            *scheduler(client)]
    with subprocess.Popen(["sleep", "60"]) as holder:
        fs.pipe(lock, json.dumps({"host": socket.gethostname(), "pid": holder.pid,
                                  "created": "now", "token": "other"}).encode())
        started = time.perf_counter()
        assert main(argv) == 2
        assert time.perf_counter() - started < 10
        holder.kill()
    err = capsys.readouterr().err
    assert f"s3://{BUCKET}/locked is being written by another job (pid {holder.pid}" in err
    assert objects(fs, f"{BUCKET}/locked") == [LOCK]  # nothing written beside the live lock
    assert main(argv) == 0, capsys.readouterr().err  # its process is gone: the lock is stale
    assert verify_release(f"s3://{BUCKET}/locked", storage_options=options)["rows"] == 300
    assert not fs.exists(lock)


@pytest.mark.parametrize("case", ["other data", "missing bucket", "unreachable endpoint",
                                  "missing credentials"])
def test_bad_targets_stop_before_any_budget_is_spent(client, s3, tmp_path, capsys, monkeypatch,
                                                     case):
    fs, options = s3
    out = f"s3://{BUCKET}/foreign"
    fs.pipe(f"{BUCKET}/foreign/keep.csv", b"a,b\n1,2\n")
    output_options = dict(options)
    if case == "missing bucket":
        out, message = "s3://no-such-bucket/release", "bucket 'no-such-bucket' does not exist"
    elif case == "unreachable endpoint":
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            port = closed.getsockname()[1]  # nothing listens there once closed
        output_options["endpoint_url"] = f"http://127.0.0.1:{port}"
        out, message = f"s3://{BUCKET}/release", "cannot reach the store (EndpointConnection"
    elif case == "missing credentials":
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
        del output_options["key"], output_options["secret"]
        out, message = f"s3://{BUCKET}/release", "cannot reach the store (NoCredentialsError"
    else:
        message = f"{out} holds other data (keep.csv) and is not a dp_dask release"
    # a local input: only the output is bad
    correlated_frame(ROWS, seed=3).to_csv(tmp_path / "people.csv", index=False)
    ledger = tmp_path / "ledger.sqlite"
    code = main(["synth", "--data", str(tmp_path / "people.csv"), "--schema",
                 str(SMALL_SCHEMA_PATH), "--storage-options", json.dumps(output_options),
                 "--out", out, "--ledger", str(ledger), *scheduler(client)])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dp-dask: error: output {out}" if case != "other data"
                          else f"dp-dask: error: {out}") and message in err, err
    assert "spent" not in spent(ledger)  # stopped before the ledger's reservation
    assert objects(fs, f"{BUCKET}/foreign") == ["keep.csv"]  # other data untouched
    assert not fs.exists(f"{BUCKET}/release")


@pytest.fixture
def threads():
    """Workers as threads of this process: fsspec's memory store is one process's memory."""
    with (LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                       dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client):
        yield client


def test_fit_model_to_a_bad_prefix_stops_before_the_fit(client, s3, tmp_path, capsys):
    fs, options = s3
    fs.pipe(f"{BUCKET}/not-a-model/notes.txt", b"mine")
    for model, message in ((f"s3://{BUCKET}/not-a-model", "holds other data (notes.txt)"),
                           ("s3://no-such-bucket/model", "bucket 'no-such-bucket' does not")):
        code = main(["fit", "--data", f"s3://{BUCKET}/people.csv", "--schema",
                     str(SMALL_SCHEMA_PATH), "--storage-options", json.dumps(options),
                     "--model", model, "--ledger", str(tmp_path / "ledger.sqlite"),
                     *scheduler(client)])
        assert code == 2
        err = capsys.readouterr().err
        assert err.startswith(f"dp-dask: error: --model {model}") and message in err, err
    assert spent(tmp_path / "ledger.sqlite") == []
    assert objects(fs, f"{BUCKET}/not-a-model") == ["notes.txt"]


def test_memory_release_in_process(threads):
    """The same code path on fsspec's in-memory store: write, verify, read, replace."""
    out = f"memory://dp-dask-{uuid.uuid4().hex[:8]}/release"
    synthesizer = Synthesizer.create("marginals", SMALL_SCHEMA_PATH, noise_sampler="numpy",
                                     noise_seed=4, ledger=False).fit(correlated_frame(ROWS, 4))
    paths = synthesizer.write(out, 1_500, partition_rows=500, with_model=True)
    record = verify_release(out, checksums=True)
    assert record["rows"] == 1_500 and record["partitions"] == 3
    frame = checked_table(out).compute()
    assert len(frame) == 1_500
    assert load_model(paths["model"]).n_rows == synthesizer.model.n_rows
    memory = fsspec.filesystem("memory")
    version = json.loads(memory.cat(f"{out}/{CURRENT}"))["version"]
    # an altered object is caught by its checksum
    part = f"{out}/{version}/synthetic.parquet/part.000000.parquet"
    original = memory.cat(part)
    memory.pipe(part, original[:-1] + bytes([original[-1] ^ 1]))
    with pytest.raises(ReleaseError, match="SHA-256 differs"):
        verify_release(out, checksums=True)
    synthesizer.write(out, 600, partition_rows=500)  # replaces the altered release
    assert verify_release(out, checksums=True)["rows"] == 600
    assert len(memory.ls(f"{out}/{VERSIONS}")) == 2  # the superseded one, for the grace period


def test_file_urls_are_local_paths(client, tmp_path, capsys):
    data = tmp_path / "people.csv"
    correlated_frame(ROWS, seed=6).to_csv(data, index=False)
    code = main(["synth", "--data", data.as_uri(), "--schema", SMALL_SCHEMA_PATH.as_uri(),
                 "--out", (tmp_path / "release").as_uri(), "--rows", "300",
                 "--ledger", (tmp_path / "ledger.sqlite").as_uri(), *scheduler(client)])
    assert code == 0, capsys.readouterr().err
    assert verify_release(tmp_path / "release")["rows"] == 300
    assert (tmp_path / "ledger.sqlite").is_file()
    assert json.loads((tmp_path / "release" / "metadata.json").read_text())["n_rows"] == ROWS


@pytest.fixture(scope="module")
def fitted(client) -> Synthesizer:
    return Synthesizer.create("marginals", SMALL_SCHEMA_PATH, noise_sampler="numpy",
                              noise_seed=7, ledger=False).fit(correlated_frame(ROWS, seed=7))


def release_target(store: str, s3, tmp_path: Path) -> tuple[str | Path, dict | None]:
    if store == "disk":
        return tmp_path / "release", None
    return f"s3://{BUCKET}/{tmp_path.name}", s3[1]


@pytest.mark.parametrize("store", ["disk", "s3"])
def test_a_slow_reader_reads_the_version_it_verified(client, s3, fitted, tmp_path, store):
    """A reader verifies version 1, another job publishes version 2 to the same target (same
    part names), then the reader reads: exactly version 1's rows."""
    out, options = release_target(store, s3, tmp_path)
    fitted.write(out, 900, seed=1, partition_rows=300, storage_options=options)
    first = dd.read_parquet(f"{published_location(out, options)}/synthetic.parquet",
                            storage_options=options).compute()
    reader = read_table(checked_table(out, options), load_schema(SMALL_SCHEMA_PATH),
                        storage_options=options)  # verified, not yet read
    fitted.write(out, 900, seed=2, partition_rows=300, storage_options=options)
    rows = reader.compute()
    pd.testing.assert_frame_equal(rows.reset_index(drop=True), first.reset_index(drop=True))
    assert not rows.equals(dd.read_parquet(f"{published_location(out, options)}/synthetic"
                                           ".parquet", storage_options=options).compute())


@pytest.mark.parametrize("store", ["disk", "s3"])
def test_a_superseded_version_is_kept_for_the_grace_period(client, s3, fitted, tmp_path,
                                                           monkeypatch, store):
    out, options = release_target(store, s3, tmp_path)
    fs, _ = fsspec.core.url_to_fs(str(out), **(options or {}))
    monkeypatch.setenv(GRACE_ENV, "3")
    versions = []
    for seed in (1, 2, 3):
        fitted.write(out, 600, seed=seed, partition_rows=300, storage_options=options)
        versions.append(str(published_location(out, options)))
        fs.invalidate_cache()
        if seed == 2:  # version 1 was superseded just now: still there, whole
            assert json.loads(fs.cat(f"{versions[0]}/{COMPLETE}"))["seed"] == 1
            time.sleep(3.5)  # from its supersession (a slow write must not eat into it)
    # version 3's publish found version 1 past its grace period: deleted; version 2 kept
    assert not fs.exists(versions[0])
    assert json.loads(fs.cat(f"{versions[1]}/{COMPLETE}"))["seed"] == 2
    assert verify_release(out, storage_options=options)["seed"] == 3
    delete_release(out, options)  # the link (or pointer) and every version
    fs.invalidate_cache()
    assert not fs.exists(str(out)) and not any(tmp_path.iterdir())


def deleted_keys(recording: Path) -> list[set[str]]:
    """The keys each deleting request deleted (DeleteObject, DeleteObjects), in the order the
    server received them: from its own record of every request (moto's recorder)."""
    deletes = []
    for line in recording.read_text().splitlines():
        request = json.loads(line)
        url = urlsplit(request["url"])
        body = request.get("body") or ""
        if request.get("body_encoded"):
            body = base64.b64decode(body).decode()
        if request["method"] == "POST" and url.query == "delete":
            deletes.append({key.text for key in ElementTree.fromstring(body).iter()
                            if key.tag.endswith("Key")})
        elif request["method"] == "DELETE":
            deletes.append({url.path.split("/", 2)[2]})
    return deletes


def test_item8a_deleting_a_release_in_a_store_removes_its_pointer_first(client, fitted,
                                                                        tmp_path, monkeypatch):
    """As on disk, where the link goes first: the pointer is deleted alone, before any object of
    any version, so a reader never follows it to a version being deleted. The S3 server runs
    in its own process and records every request it receives."""
    recording = tmp_path / "requests.jsonl"
    monkeypatch.setenv("MOTO_RECORDER_FILEPATH", str(recording))
    monkeypatch.setenv("MOTO_ENABLE_RECORDING", "true")
    with s3_server_process(BUCKET) as (options, _):
        out = f"s3://{BUCKET}/release"
        for seed in (1, 2):  # the published version and a superseded one
            fitted.write(out, 600, seed=seed, partition_rows=300, storage_options=options)
        recording.write_text("")  # the deletion's requests only (each is appended)
        delete_release(out, options)
        assert s3fs.S3FileSystem(**options).find(f"{BUCKET}/release") == []
    deletes = deleted_keys(recording)
    pointer = f"release/{CURRENT}"
    first_pointer = next(i for i, keys in enumerate(deletes) if pointer in keys)
    first_version = next(i for i, keys in enumerate(deletes)
                         if any(k.startswith(f"release/{VERSIONS}/") for k in keys))
    assert deletes[first_pointer] == {pointer}
    assert first_pointer < first_version
