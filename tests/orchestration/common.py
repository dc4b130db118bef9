"""Shared by run_airflow.py and run_prefect.py (run by .ci/orchestration in their own virtual
environments, not by pytest): small public data, a real LocalCluster, an S3 server on
127.0.0.1 for the object-storage variant, and the checks."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from distributed import LocalCluster

from dp_dask.data.demo import write_census
from dp_dask.data.io import filesystem, remote
from dp_dask.privacy.ledger import Ledger
from dp_dask.release import verify_release
from dp_dask.steps import evaluation_directory

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from s3_server import moto_server  # noqa: E402  (the tests' helper: tests/ is no package)

ROWS = 5000
BUCKET = "dp-dask-ci"


def prepare(work: Path) -> tuple[LocalCluster, Path]:
    """Demo data under ``work`` and a 2-worker cluster whose address the tasks read from
    DP_DASK_SCHEDULER; the ledger in ``work``; fit and sample fail once, after their work."""
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1",
                           dashboard_address="127.0.0.1:0")
    data = write_census(work / "census.parquet", n_rows=ROWS, seed=0, overwrite=True)
    os.environ.update({"DP_DASK_SCHEDULER": cluster.scheduler_address,
                       "DP_DASK_LEDGER": str(work / "ledger.sqlite"),
                       "DP_DASK_FAIL_ONCE": "fit,sample", "DP_DASK_RETRY_DELAY_S": "1"})
    return cluster, data


@contextlib.contextmanager
def object_store(work: Path) -> Iterator[dict]:
    """The object-storage variant: an S3 server (moto) on 127.0.0.1, its fsspec options in
    DP_DASK_STORAGE_OPTIONS (read by the tasks) and a ledger of its own in ``work``. The server
    runs in $DP_DASK_MOTO_PYTHON (default: python3 on PATH, the CI's own, which has the test
    extra): the orchestrator's venv has no moto."""
    work.mkdir(parents=True, exist_ok=True)
    python = os.environ.get("DP_DASK_MOTO_PYTHON", "python3")
    with moto_server(BUCKET, python=python, log=work / "s3.log") as (options, _):
        os.environ.update({"DP_DASK_STORAGE_OPTIONS": json.dumps(options),
                           "DP_DASK_LEDGER": str(work / "ledger.sqlite")})
        try:
            yield options
        finally:
            del os.environ["DP_DASK_STORAGE_OPTIONS"]


def check_run(work: Path, run_prefix: str, reports: Path,
              storage_options: dict | None = None) -> str:
    """One spent ledger entry for the run; a complete release and the model where the run sent
    them (the store when ``storage_options``); the owner's report under ``reports``."""
    entries = Ledger(work / "ledger.sqlite").entries()
    assert len(entries) == 1, f"expected one ledger entry, found {entries}"
    (entry,) = entries
    assert entry.run_id.startswith(run_prefix) and entry.status == "spent", entry
    release, model = entry.release_path or "", entry.model_path or ""
    assert remote(release) == remote(model) == (storage_options is not None), entry
    # raises unless the pointer, every partition and the record check out
    verify_release(release, storage_options=storage_options)
    fs, path = filesystem(model, storage_options)
    assert fs.isfile(f"{path}/model.json"), model
    assert (evaluation_directory(reports, "", entry.run_id) / "report.html").is_file()
    return f"ledger: one spend for run {entry.run_id!r}; release {release} complete"
