"""Prefect flow (Prefect 3): fit → sample → evaluate a DP synthetic release on Dask, with retries.

Run it locally: ``python pipelines/prefect_flow.py DATA [SCHEMA] [OUT]`` (Prefect starts a
temporary local server), or deploy
``release_flow`` like any flow. Where the work runs: the ``scheduler`` parameter or
``$DP_DASK_SCHEDULER``, a Dask scheduler address; unset, each task starts a LocalCluster of its
own. The privacy ledger: the ``ledger`` parameter or ``$DP_DASK_LEDGER``, else
``~/.config/dp_dask/ledger.sqlite``; it must be one file that every retry of a task sees.

Object storage: ``out`` may be a URL (``s3://bucket/runs``): the model and the release go there,
reached with the ``storage_options`` parameter or the JSON object in ``$DP_DASK_STORAGE_OPTIONS``
(e.g. ``{"endpoint_url": ...}``; unset, the protocol's own configuration: ``AWS_*`` variables,
instance roles; keep credentials in the environment or a Secret block, not in parameters,
which Prefect records). The evaluation is the data owner's and not DP: it goes under
``reports`` (a local or shared directory; default: ``out``, which must then be local).

Retries never spend budget twice: the ledger run id is the ``run_id`` parameter, by default
``prefect/<flow run id>``, the same for every retry within a flow run, so a retried fit reuses
the model it saved (dp_dask.steps). Files go under ``<out>/<run id>/`` (model, release) and
``<reports>/<run id>/evaluation``. The evaluation reads the raw data: it is the data owner's,
not differentially private, and stays outside the release.

``DP_DASK_FAIL_ONCE=fit,sample`` (tests) makes those tasks fail once, after their work;
``DP_DASK_RETRY_DELAY_S`` sets the delay before a retry (default 60 s).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run, task_run

from dp_dask import steps

RETRIES = 2
RETRY_DELAY_S = float(os.environ.get("DP_DASK_RETRY_DELAY_S", "60"))
# The ledger, not Prefect's result cache, decides whether a fit is reused.
TASK_OPTIONS: dict[str, Any] = {"retries": RETRIES, "retry_delay_seconds": RETRY_DELAY_S,
                                "cache_policy": NO_CACHE}


def _fail_once(step: str) -> None:
    """Test hook: fail this task's first try (after its work) when DP_DASK_FAIL_ONCE names it."""
    if step in os.environ.get("DP_DASK_FAIL_ONCE", "").split(",") and task_run.run_count == 1:
        raise RuntimeError(f"injected failure of the {step} task (first try)")


@task(**TASK_OPTIONS)
def fit(data: str, schema: str, out: str, reports: str | None, run_id: str, epsilon: float,
        dataset_name: str | None, ledger: str | None, scheduler: str | None,
        storage_options: dict[str, Any] | None) -> dict[str, Any]:
    evaluation = steps.evaluation_directory(reports, out, run_id)  # checked before the fit
    run = steps.run_directory(out, run_id)
    fitted = steps.fit_step(data, schema, f"{run}/model", run_id=run_id, epsilon=epsilon,
                            dataset_name=dataset_name, ledger=ledger, scheduler=scheduler,
                            storage_options=storage_options)
    _fail_once("fit")
    return {**fitted, "run": str(run), "evaluation": str(evaluation)}


@task(**TASK_OPTIONS)
def sample(fitted: dict[str, Any], rows: int | None, ledger: str | None,
           scheduler: str | None, storage_options: dict[str, Any] | None) -> dict[str, str]:
    paths = steps.sample_step(fitted["model"], f"{fitted['run']}/release", rows=rows,
                              ledger=ledger, run_id=fitted["run_id"], scheduler=scheduler,
                              storage_options=storage_options)
    _fail_once("sample")
    return paths


@task(**TASK_OPTIONS)
def evaluate(data: str, schema: str, fitted: dict[str, Any], release: dict[str, str],
             scheduler: str | None, storage_options: dict[str, Any] | None) -> dict[str, str]:
    paths = steps.evaluate_step(data, release["parquet"], schema, fitted["evaluation"],
                                scheduler=scheduler, storage_options=storage_options)
    _fail_once("evaluate")
    return paths


@flow(name="dp-dask-release")
def release_flow(data: str, table_schema: str = "demo", out: str = "dp-dask-runs",
                 epsilon: float = 1.0, rows: int | None = None,
                 dataset_name: str | None = None, run_id: str | None = None,
                 scheduler: str | None = None, ledger: str | None = None,
                 reports: str | None = None,
                 storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Fit, sample and evaluate; returns the fit's summary and the release's and report's paths.

    ``table_schema``: a schema JSON or built-in name (not ``schema``: pydantic, which validates
    flow parameters, reserves that name)."""
    run_id = run_id or f"prefect/{flow_run.get_id()}"  # shared by this run's retries
    scheduler = scheduler or os.environ.get("DP_DASK_SCHEDULER")
    ledger = ledger or os.environ.get("DP_DASK_LEDGER")
    options = storage_options or json.loads(os.environ.get("DP_DASK_STORAGE_OPTIONS") or "null")
    fitted = fit(data, table_schema, out, reports, run_id, epsilon, dataset_name, ledger,
                 scheduler, options)
    release = sample(fitted, rows, ledger, scheduler, options)
    report = evaluate(data, table_schema, fitted, release, scheduler, options)
    return {"fit": fitted, "release": release, "evaluation": report}


if __name__ == "__main__":
    release_flow(*sys.argv[1:4])
