"""Runs pipelines/airflow_dag.py with dag.test() on small data, its fit and sample tasks made to
fail once: the run succeeds and the ledger holds one spend. Twice: to a local folder, then to an
S3 server on 127.0.0.1 (model and release in the store, the evaluation local). Usage (in a venv
with Airflow and dp-dask): python tests/orchestration/run_airflow.py WORKDIR"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from common import BUCKET, ROOT, check_run, object_store, prepare

work = Path(sys.argv[1]).resolve()
work.mkdir(parents=True, exist_ok=True)
dags = work / "dags"  # only the DAG: Airflow parses every file of its DAGs folder
dags.mkdir(exist_ok=True)
(dags / "airflow_dag.py").write_text((ROOT / "pipelines" / "airflow_dag.py").read_text())
os.environ.update({"AIRFLOW_HOME": str(work / "airflow"),
                   "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
                   "AIRFLOW__CORE__LOAD_EXAMPLES": "False"})
subprocess.run([Path(sys.executable).with_name("airflow"), "db", "migrate"], check=True,
               stdout=subprocess.DEVNULL)

if __name__ == "__main__":
    cluster, data = prepare(work)
    sys.path.insert(0, str(dags))
    from airflow_dag import release_dag  # after AIRFLOW_HOME is set

    def release(out: str, reports: Path) -> None:
        run = release_dag.test(run_conf={"data": str(data), "out": out, "reports": str(reports),
                                         "dataset_name": "census"})
        tries = {ti.task_id: (ti.state, ti.try_number) for ti in run.get_task_instances()}
        print("task states and tries:", tries)
        assert run.state == "success", tries
        assert tries["fit"][1] == 2 and tries["sample"][1] == 2 and tries["evaluate"][1] == 1

    started = time.perf_counter()
    release(str(work / "runs"), work / "runs")
    print("airflow:", check_run(work, "dp_dask_release/", work / "runs"),
          f"in {time.perf_counter() - started:.0f} s")
    started = time.perf_counter()
    with object_store(work / "s3") as options:
        release(f"s3://{BUCKET}/runs", work / "s3" / "reports")
        print("airflow, s3:", check_run(work / "s3", "dp_dask_release/", work / "s3" / "reports",
                                        options), f"in {time.perf_counter() - started:.0f} s")
    cluster.close()
