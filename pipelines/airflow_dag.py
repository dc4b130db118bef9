"""Airflow DAG (TaskFlow, Airflow 3): fit → sample → evaluate a DP synthetic release on Dask.

Put this file in the DAGs folder of an Airflow that has dp-dask installed, then trigger
``dp_dask_release`` with its params (``data``, ``schema``, ``out``, ``epsilon``, ``rows``,
``dataset_name``). Where the work runs: ``$DP_DASK_SCHEDULER`` or the Airflow Variable
``dp_dask_scheduler``, a Dask scheduler address; unset, each task starts a LocalCluster of its
own. The privacy ledger: ``$DP_DASK_LEDGER`` or Variable ``dp_dask_ledger``, else
``~/.config/dp_dask/ledger.sqlite``; it must be one file that every retry of a task sees.

Object storage: ``out`` may be a URL (``s3://bucket/runs``): the model and the release go there,
reached with the storage options in ``$DP_DASK_STORAGE_OPTIONS`` or the Variable
``dp_dask_storage_options`` (a JSON object, e.g. ``{"endpoint_url": ...}``; unset, the
protocol's own configuration: ``AWS_*`` variables, instance roles). Credentials stay out of the
params, which the UI shows. The evaluation is the data owner's and not DP: it goes under the
param ``reports`` (a local or shared directory; default: ``out``, which must then be local).

Retries never spend budget twice: the ledger run id is ``<dag id>/<Airflow run id>``, the same
for every retry within a DAG run, so a retried fit reuses the model it saved (dp_dask.steps).
Files go under ``<out>/<run id>/`` (model, release) and ``<reports>/<run id>/evaluation``. The
evaluation reads the raw data: it is the data owner's, not differentially private, and stays
outside the release.

``DP_DASK_FAIL_ONCE=fit,sample`` (tests) makes those tasks fail once, after their work;
``DP_DASK_RETRY_DELAY_S`` sets the delay before a retry (default 60 s).
Run one DAG run in-process: ``python pipelines/airflow_dag.py`` (``dag.test()``).
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import Param, Variable, dag, get_current_context, task

RETRY_DELAY = timedelta(seconds=float(os.environ.get("DP_DASK_RETRY_DELAY_S", "60")))


def _setting(name: str) -> str | None:
    """The environment variable ``name`` in capitals, else the Airflow Variable ``name``."""
    return os.environ.get(name.upper()) or Variable.get(name, default=None) or None


def _storage_options() -> dict[str, Any] | None:
    """The JSON object of the setting ``dp_dask_storage_options``, if set."""
    value = _setting("dp_dask_storage_options")
    return json.loads(value) if value else None


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
        "out": Param("dp-dask-runs", type="string",
                     description="base output directory or object-store URL (s3://...)"),
        "reports": Param(None, type=["null", "string"],
                         description="local base directory of the evaluation (default: out)"),
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
        evaluation = steps.evaluation_directory(params["reports"], params["out"], run_id)
        run = steps.run_directory(params["out"], run_id)
        fitted = steps.fit_step(params["data"], params["schema"], f"{run}/model", run_id=run_id,
                                epsilon=params["epsilon"], dataset_name=params["dataset_name"],
                                ledger=_setting("dp_dask_ledger"),
                                scheduler=_setting("dp_dask_scheduler"),
                                storage_options=_storage_options())
        _fail_once("fit")
        return {**fitted, "run": str(run), "evaluation": str(evaluation)}

    @task
    def sample(fitted: dict[str, Any]) -> dict[str, str]:
        from dp_dask import steps

        params = get_current_context()["params"]
        paths = steps.sample_step(fitted["model"], f"{fitted['run']}/release",
                                  rows=params["rows"], ledger=_setting("dp_dask_ledger"),
                                  run_id=fitted["run_id"],
                                  scheduler=_setting("dp_dask_scheduler"),
                                  storage_options=_storage_options())
        _fail_once("sample")
        return paths

    @task
    def evaluate(fitted: dict[str, Any], release: dict[str, str]) -> dict[str, str]:
        from dp_dask import steps

        params = get_current_context()["params"]
        paths = steps.evaluate_step(params["data"], release["parquet"], params["schema"],
                                    fitted["evaluation"], scheduler=_setting("dp_dask_scheduler"),
                                    storage_options=_storage_options())
        _fail_once("evaluate")
        return paths

    fitted = fit()
    evaluate(fitted, sample(fitted))


release_dag = dp_dask_release()

if __name__ == "__main__":
    release_dag.test()
