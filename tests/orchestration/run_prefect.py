"""Runs pipelines/prefect_flow.py locally on small data, its fit and sample tasks made to fail
once: the flow succeeds and the ledger holds one spend. Twice: to a local folder, then to an S3
server on 127.0.0.1 (model and release in the store, the evaluation local). Usage (in a venv
with Prefect and dp-dask): python tests/orchestration/run_prefect.py WORKDIR"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from common import BUCKET, ROOT, check_run, object_store, prepare

work = Path(sys.argv[1]).resolve()
work.mkdir(parents=True, exist_ok=True)
# Prefect's local state (its temporary server's database) in the work folder, not in ~/.prefect
os.environ["PREFECT_HOME"] = str(work / "prefect")
# its temporary server starts in ~20 s on 2 busy cores: Prefect's default wait is 20 s
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # offline: no telemetry

if __name__ == "__main__":
    cluster, data = prepare(work)
    sys.path.insert(0, str(ROOT / "pipelines"))
    from prefect_flow import release_flow  # after PREFECT_HOME is set

    started = time.perf_counter()
    result = release_flow(str(data), out=str(work / "runs"), dataset_name="census")
    assert result["fit"]["reused"], "the retried fit did not reuse the saved model"
    print("prefect:", check_run(work, "prefect/", work / "runs"),
          f"in {time.perf_counter() - started:.0f} s")
    started = time.perf_counter()
    with object_store(work / "s3") as options:
        reports = work / "s3" / "reports"
        result = release_flow(str(data), out=f"s3://{BUCKET}/runs", reports=str(reports),
                              dataset_name="census")
        assert result["fit"]["reused"], "the retried fit did not reuse the model in the store"
        assert result["fit"]["model"].startswith(f"s3://{BUCKET}/runs/prefect_"), result["fit"]
        print("prefect, s3:", check_run(work / "s3", "prefect/", reports, options),
              f"in {time.perf_counter() - started:.0f} s")
    cluster.close()
