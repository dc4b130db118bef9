"""Inputs from object storage and ``file://`` URLs, for real: an S3-compatible server (moto's
server mode) on 127.0.0.1, read with s3fs by the driver and by the suite's worker processes.
Release, model and ledger outputs to an object store are refused (docs/releases.md)."""

from __future__ import annotations

import json
import socket
import textwrap

import dask.dataframe as dd
import pytest
from conftest import SMALL_SCHEMA_PATH, correlated_frame

from dp_dask.cli import main
from dp_dask.release import verify_release

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
                 *scheduler(client)])
    assert code == 2
    assert capsys.readouterr().err == (f"dp-dask: error: input s3://{BUCKET}/nobody.csv does "
                                       "not exist\n")
    assert not (tmp_path / "release").exists()


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--out", f"s3://{BUCKET}/release", "releases are written to a local or shared filesystem"),
    ("--ledger", f"s3://{BUCKET}/ledger.sqlite", "--ledger s3://"),
])
def test_outputs_to_object_storage_are_refused(client, s3, tmp_path, capsys, option, value,
                                               message):
    fs, options = s3
    arguments = {"--out": str(tmp_path / "release"), "--ledger": str(tmp_path / "l.sqlite"),
                 option: value}
    code = main(["synth", "--data", f"s3://{BUCKET}/people.csv", "--schema",
                 str(SMALL_SCHEMA_PATH), "--storage-options", json.dumps(options),
                 *[item for pair in arguments.items() for item in pair], *scheduler(client)])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("dp-dask: error:") and message in err and err.count("\n") == 1
    assert not fs.exists(f"{BUCKET}/release") and not fs.exists(f"{BUCKET}/ledger.sqlite")


def test_fit_model_to_object_storage_is_refused(s3, tmp_path, capsys):
    code = main(["fit", "--data", f"s3://{BUCKET}/people.csv", "--schema",
                 str(SMALL_SCHEMA_PATH), "--model", f"s3://{BUCKET}/model"])
    assert code == 2
    assert "--model s3://dp-dask-test/model: must be a local or shared filesystem path" in \
        capsys.readouterr().err


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
