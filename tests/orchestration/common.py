"""Shared by run_airflow.py and run_prefect.py (run by .ci/orchestration in their own virtual
environments, not by pytest): small public data, a real LocalCluster, and the checks."""

from __future__ import annotations

import os
from pathlib import Path

from distributed import LocalCluster

from dp_dask.data.demo import write_census
from dp_dask.privacy.ledger import Ledger
from dp_dask.release import verify_release

ROOT = Path(__file__).resolve().parents[2]
ROWS = 5000


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


def check_run(work: Path, run_prefix: str) -> str:
    """One spent ledger entry for the run, a complete release, the owner's report beside it."""
    entries = Ledger(work / "ledger.sqlite").entries()
    assert len(entries) == 1, f"expected one ledger entry, found {entries}"
    (entry,) = entries
    assert entry.run_id.startswith(run_prefix) and entry.status == "spent", entry
    release = Path(entry.release_path or "")
    verify_release(release)  # raises unless every partition and the record check out
    assert (release.parent / "evaluation" / "report.html").is_file()
    assert (release.parent / "model" / "model.json").is_file()
    return f"ledger: one spend for run {entry.run_id!r}; release {release} complete"
