"""The orchestrator steps (dp_dask.steps) on a real cluster: a retried fit spends once."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
from conftest import SMALL_SCHEMA_PATH

from dp_dask.privacy.labels import OWNER_ONLY
from dp_dask.privacy.ledger import Ledger
from dp_dask.release import verify_release
from dp_dask.steps import evaluate_step, fit_step, run_directory, sample_step


def test_fit_sample_evaluate_with_a_retried_fit(client, data, tmp_path):
    ledger = tmp_path / "ledger.sqlite"
    run = run_directory(tmp_path / "runs", "scheduled__2024-06-01T00:00:00+00:00")
    assert run.name == "scheduled__2024-06-01T00_00_00_00_00"
    options = {"run_id": "nightly-1", "ledger": ledger, "dataset_name": "small",
               "scheduler": client.scheduler.address}
    first = fit_step(str(data), SMALL_SCHEMA_PATH, run / "model", **options)
    retried = fit_step(str(data), SMALL_SCHEMA_PATH, run / "elsewhere", **options)
    assert not first["reused"] and retried["reused"]
    assert retried["model"] == first["model"] and not (run / "elsewhere").exists()
    assert first["privacy"]["differentially_private"] is True
    json.dumps([first, retried])  # plain values: an XCom or a task result holds them

    paths = sample_step(first["model"], run / "release", rows=3000, partition_rows=1000,
                        ledger=ledger, run_id="nightly-1", scheduler=client.scheduler.address)
    assert len(pd.read_parquet(paths["parquet"])) == 3000
    (entry,) = Ledger(ledger).entries("small")
    assert entry.run_id == "nightly-1" and entry.status == "spent"
    assert entry.release_path == os.path.abspath(run / "release")  # the link, not its version

    report = evaluate_step(str(data), run / "release", SMALL_SCHEMA_PATH, run / "evaluation",
                           q3_sample=20, scheduler=client.scheduler.address)
    assert OWNER_ONLY in Path(report["html"]).read_text().lower()
    # a typed release: the value metrics too; every release: the columns
    assert set(report) == {"csv", "json", "md", "values_csv", "values_json", "values_md",
                           "columns", "html"}


def test_steps_to_object_storage_with_a_retried_fit(client, data, tmp_path, s3_options):
    ledger = tmp_path / "ledger.sqlite"
    run = run_directory("s3://dp-dask/runs", "manual__2024-06-01T00:00:00+00:00")
    assert run == "s3://dp-dask/runs/manual__2024-06-01T00_00_00_00_00"
    options = {"run_id": "nightly-s3", "ledger": ledger, "scheduler": client.scheduler.address,
               "storage_options": s3_options}
    first = fit_step(str(data), SMALL_SCHEMA_PATH, f"{run}/model", dataset_name="small",
                     **options)
    retried = fit_step(str(data), SMALL_SCHEMA_PATH, f"{run}/elsewhere", dataset_name="small",
                       **options)
    assert not first["reused"] and retried["reused"]
    assert retried["model"] == first["model"] == f"{run}/model"  # the URL, not a folded path

    sample_step(first["model"], f"{run}/release", rows=3000, partition_rows=1000, **options)
    assert verify_release(f"{run}/release", storage_options=s3_options)["rows"] == 3000
    (entry,) = Ledger(ledger).entries("small")
    assert entry.status == "spent" and entry.release_path == f"{run}/release"

    report = evaluate_step(str(data), f"{run}/release", SMALL_SCHEMA_PATH, tmp_path / "eval",
                           q3_sample=20, scheduler=client.scheduler.address,
                           storage_options=s3_options)
    assert OWNER_ONLY in Path(report["html"]).read_text().lower()
    with pytest.raises(ValueError, match="not an object-store URL"):  # the owner's, not shared
        evaluate_step(str(data), f"{run}/release", SMALL_SCHEMA_PATH, f"{run}/evaluation",
                      storage_options=s3_options)
