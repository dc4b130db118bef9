"""Shared fixtures: a real 2-worker LocalCluster, the public Adult data, small schemas."""

from __future__ import annotations

import json
import os
from pathlib import Path

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from distributed import Client, LocalCluster
from s3_server import moto_server

from dp_dask.cluster import worker_malloc
from dp_dask.data.schema import Schema, load_schema
from dp_dask.data.values import labels_of_release
from dp_dask.synthesizer import Synthesizer

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DP_DASK_SHARED", ROOT.parent / "shared"))
ADULT_CSV = SHARED / "data" / "adult" / "adult.csv"


@pytest.fixture(scope="session", autouse=True)
def suite_ledger(tmp_path_factory):
    """Fits record in a privacy ledger: the suite's goes to a temporary file, never ~/.config."""
    path = tmp_path_factory.mktemp("ledger") / "ledger.sqlite"
    before = os.environ.get("DP_DASK_LEDGER")
    os.environ["DP_DASK_LEDGER"] = str(path)  # notebook kernels inherit it
    yield path
    if before is None:
        del os.environ["DP_DASK_LEDGER"]
    else:
        os.environ["DP_DASK_LEDGER"] = before


@pytest.fixture(scope="session")
def client():
    with worker_malloc():  # workers as dp_dask's own local clusters start them
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, memory_limit="3GiB",
                               host="127.0.0.1", dashboard_address="127.0.0.1:0")
    with cluster, Client(cluster) as client:
        yield client


@pytest.fixture(scope="session")
def s3_options() -> dict:
    """fsspec's options of an S3 server (moto) on 127.0.0.1 in its own process, with the bucket
    ``dp-dask``; passed explicitly, they travel with the tasks to the suite's workers."""
    pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")

    with moto_server("dp-dask") as (options, _):
        yield options


@pytest.fixture(scope="session")
def adult_csv() -> Path:
    if not ADULT_CSV.exists():
        pytest.fail(f"public Adult data not found at {ADULT_CSV} (set DP_DASK_SHARED)")
    return ADULT_CSV


@pytest.fixture(scope="session")
def adult_schema() -> Schema:
    return load_schema("adult")


SMALL_SCHEMA_PATH = Path(__file__).with_name("small_schema.json")
SMALL_SCHEMA = json.loads(SMALL_SCHEMA_PATH.read_text())


@pytest.fixture
def small_schema() -> Schema:
    return load_schema(SMALL_SCHEMA)


def correlated_frame(n: int, seed: int = 0) -> pd.DataFrame:
    """Rows for SMALL_SCHEMA whose attributes depend on each other through a latent normal."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(n)
    noise = rng.standard_normal((n, 4))
    colour = np.digitize(0.8 * z + 0.6 * noise[:, 0], [-0.5, 0.7])
    size = np.exp(2.5 + 0.9 * (0.7 * z + 0.7 * noise[:, 1]))
    flag = (0.6 * z + 0.8 * noise[:, 2]) > 0.3
    city = np.digitize(noise[:, 3], [-1.0, -0.3, 0.3, 1.0])
    return pd.DataFrame({
        "colour": np.array(["red", "green", "blue"])[colour],
        "size": size,
        "flag": np.where(flag, "yes", "no"),
        "city": np.array(list("abcde"))[city],
    })


def synth_code(client: Client, tmp_path: Path, schema: dict, csv: str, *options: str) -> int:
    """The exit code of ``dp-dask synth`` of ``csv`` (the file's text) under ``schema`` (JSON),
    releasing to ``tmp_path / "out"``: how the CLI refuses a bad schema before reading data."""
    from dp_dask.cli import main

    (tmp_path / "schema.json").write_text(json.dumps(schema))
    (tmp_path / "data.csv").write_text(csv)
    return main(["synth", "--data", str(tmp_path / "data.csv"), "--schema",
                 str(tmp_path / "schema.json"), "--epsilon", "1", "--out", str(tmp_path / "out"),
                 "--ledger", str(tmp_path / "ledger.sqlite"), *options,
                 "--scheduler", client.scheduler.address, "--quiet"])


def codes_of(frame: pd.DataFrame, schema: Schema) -> np.ndarray:
    """(rows, m) codes of a decoded frame, typed values or labels, binned by the schema."""
    labels = labels_of_release(frame, schema)
    return np.stack([labels[a.name].cat.codes.to_numpy() for a in schema.attributes], axis=1)


CORRELATED_ROWS = 20_000
# A distinctive city, outside the schema (counted as "other"): it must never reach an output.
RAW_VALUE = "Zyxqv-Kelmarsh-48213"


@pytest.fixture(scope="session")
def people_csv(tmp_path_factory) -> Path:
    """2,000 rows of correlated_frame(seed=4) as CSV, every 7th city RAW_VALUE."""
    frame = correlated_frame(2_000, seed=4)
    frame.loc[::7, "city"] = RAW_VALUE
    path = tmp_path_factory.mktemp("people") / "people.csv"
    frame.to_csv(path, index=False)
    return path


@pytest.fixture(scope="session")
def data(tmp_path_factory) -> Path:
    """CORRELATED_ROWS rows of correlated_frame(seed=1) as 4 Parquet partitions."""
    path = tmp_path_factory.mktemp("input") / "data.parquet"
    dd.from_pandas(correlated_frame(CORRELATED_ROWS, seed=1), npartitions=4).to_parquet(path)
    return path


def assert_pure_laplace(privacy: dict, epsilon: float) -> None:
    """A release record of a pure ε-DP method: δ = 0, Laplace, basic composition."""
    assert (privacy["epsilon"], privacy["delta"], privacy["mechanism"]) == (epsilon, 0.0, "laplace")
    assert "basic composition" in privacy["accountant"]


def assert_resamples_alike(fitted: Synthesizer, model_path: Path, method: str, rows: int) -> None:
    """The saved model rebuilds a ``method`` synthesizer that samples what ``fitted`` does."""
    again = Synthesizer.from_model(model_path)
    assert again.name == method
    pd.testing.assert_frame_equal(again.sample(rows, seed=7).compute(),
                                  fitted.sample(rows, seed=7).compute())
