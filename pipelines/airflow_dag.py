"""Airflow DAG (TaskFlow, Airflow 3): fit → sample → evaluate a DP synthetic release on Dask.

Put this file in the DAGs folder of an Airflow that has dp-dask installed, then trigger
``dp_dask_release`` with its params (``data``, ``schema``, ``out``, ``epsilon``, ``rows``,
``dataset_name``). Where the work runs: ``$DP_DASK_SCHEDULER`` or the Airflow Variable
``dp_dask_scheduler``, a Dask scheduler address; unset, each task starts a LocalCluster of its
own. The privacy ledger: ``$DP_DASK_LEDGER`` or Variable ``dp_dask_ledger``, else
``~/.config/dp_dask/ledger.sqlite``; it must be one file that every retry of a task sees.

Retries never spend budget twice: the ledger run id is ``<dag id>/<Airflow run id>``, the same
for every retry within a DAG run, so a retried fit reuses the model it saved (dp_dask.steps).
Files go under ``<out>/<run id>/`` (model, release, evaluation). The evaluation reads the raw
data: it is the data owner's, not differentially private, and stays outside the release.

``DP_DASK_FAIL_ONCE=fit,sample`` (tests) makes those tasks fail once, after their work;
``DP_DASK_RETRY_DELAY_S`` sets the delay before a retry (default 60 s).
Run one DAG run in-process: ``python pipelines/airflow_dag.py`` (``dag.test()``).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import Param, Variable, dag, get_current_context, task

RETRY_DELAY = timedelta(seconds=float(os.environ.get("DP_DASK_RETRY_DELAY_S", "60")))


def _setting(name: str) -> str | None:
    """The environment variable ``name`` in capitals, else the Airflow Variable ``name``."""
    return os.environ.get(name.upper()) or Variable.get(name, default=None) or None


def _fail_once(step: str) -> None:
    """Test hook: fail this task's first try (after its work) when DP_DASK_FAIL_ONCE names it."""
    if step in os.environ.get("DP_DASK_FAIL_ONCE", "").split(","):
        if get_current_context()["ti"].try_number == 1:
            raise RuntimeError(f"injected failure of the {step} task (first try)")


@dag(
    dag_id="dp_dask_release",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    default_args={"retries": 2, "retry_delay": RETRY_DELAY},
    params={
        "data": Param(os.environ.get("DP_DASK_DATA", ""), type="string",
                      description="Parquet file/directory or CSV (path or URL)"),
        "schema": Param("demo", type="string", description="schema JSON or built-in name"),
        "out": Param("dp-dask-runs", type="string", description="base output directory"),
        "epsilon": Param(1.0, type="number", exclusiveMinimum=0),
        "rows": Param(None, type=["null", "integer"], description="default: as the input"),
        "dataset_name": Param(None, type=["null", "string"],
                              description="the dataset's name in the ledger"),
    },
    tags=["dp_dask"],
)
def dp_dask_release() -> None:
    # dp_dask (and dask) are imported inside the tasks: Airflow parses DAG files often.
    @task
    def fit() -> dict[str, Any]:
        from dp_dask import steps

        context = get_current_context()
        params = context["params"]
        run_id = f"{context['dag'].dag_id}/{context['run_id']}"  # shared by this run's retries
        run = steps.run_directory(params["out"], run_id)
        fitted = steps.fit_step(params["data"], params["schema"], run / "model", run_id=run_id,
                                epsilon=params["epsilon"], dataset_name=params["dataset_name"],
                                ledger=_setting("dp_dask_ledger"),
                                scheduler=_setting("dp_dask_scheduler"))
        _fail_once("fit")
        return {**fitted, "run": str(run)}

    @task
    def sample(fitted: dict[str, Any]) -> dict[str, str]:
        from dp_dask import steps

        params = get_current_context()["params"]
        paths = steps.sample_step(fitted["model"], f"{fitted['run']}/release",
                                  rows=params["rows"], ledger=_setting("dp_dask_ledger"),
                                  run_id=fitted["run_id"],
                                  scheduler=_setting("dp_dask_scheduler"))
        _fail_once("sample")
        return paths

    @task
    def evaluate(fitted: dict[str, Any], release: dict[str, str]) -> dict[str, str]:
        from dp_dask import steps

        params = get_current_context()["params"]
        paths = steps.evaluate_step(params["data"], release["parquet"], params["schema"],
                                    f"{fitted['run']}/evaluation",
                                    scheduler=_setting("dp_dask_scheduler"))
        _fail_once("evaluate")
        return paths

    fitted = fit()
    evaluate(fitted, sample(fitted))


release_dag = dp_dask_release()

if __name__ == "__main__":
    release_dag.test()
