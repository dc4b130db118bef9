"""A release as three retry-safe steps for orchestrators (Airflow, Prefect, cron): fit, sample,
evaluate. Each takes and returns paths and plain values only (what an XCom or a Prefect result
can hold), and runs on the scheduler it is given or on a LocalCluster of its own.

Retries never spend budget twice: ``fit_step`` records its run id in the privacy ledger before
reading anything and saves the model where the ledger points; retried with the same run id, it
finds both and reuses the model (nothing recorded again). ``sample_step`` writes the release
atomically and resumes it (docs/releases.md). ``evaluate_step`` rewrites the data owner's files,
outside the release. Give one run id per pipeline run, shared by the retries of its tasks.

Models and releases may go to an object store (``s3://...``, reached with ``storage_options``,
fsspec's options of the store); the evaluation, not differentially private, stays on the data
owner's local or shared disk.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from dp_dask.cluster import dask_client
from dp_dask.data.io import Location, join, local_only, read_table, remote
from dp_dask.data.schema import Schema, load_schema
from dp_dask.evaluate.html import write_evaluation
from dp_dask.evaluate.queries import DEFAULT_Q3_SAMPLE
from dp_dask.privacy.ledger import Ledger
from dp_dask.release import checked_table
from dp_dask.synthesizer import DEFAULT_DELTA, Synthesizer


def run_directory(base: str | Path, run_id: str) -> Location:
    """``base/<run id>`` with characters other than letters, digits, ``.``, ``_``, ``-`` replaced
    (orchestrators' run ids hold ``:`` and ``+``): a Path, or a URL when ``base`` is one (a
    Path would fold its ``//``)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", run_id)
    return join(str(base), name) if remote(base) else Path(base) / name


def evaluation_directory(reports: str | Path | None, out: str | Path, run_id: str) -> Path:
    """``<reports>/<run id>/evaluation`` (``reports`` defaults to ``out``): checked before the
    fit spends anything, since the evaluation is not DP and may not go to an object store."""
    base = local_only(reports or out, "the evaluation's base directory (reports)")
    return Path(run_directory(base, run_id)) / "evaluation"


def fit_step(data: str, schema: str | Path | Schema, model: str | Path, *, run_id: str,
             method: str = "marginals", epsilon: float = 1.0, delta: float = DEFAULT_DELTA,
             dataset_name: str | None = None, ledger: str | Path | None = None,
             scheduler: str | None = None,
             storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Fit and save the model at ``model`` (a path or URL); a retry with the same ``run_id``
    reuses it.

    ``ledger``: a path, or None for the default ledger ($DP_DASK_LEDGER, else ~/.config). The
    result holds the model path (the recorded one when reused), the run id, whether it was
    reused, and the privacy parameters.
    """
    synthesizer = Synthesizer.create(method, load_schema(schema), epsilon=epsilon, delta=delta,
                                     ledger=ledger, dataset_name=dataset_name, run_id=run_id)
    with dask_client(scheduler, quiet=True):
        synthesizer.fit(data, storage_options=storage_options)
    entry = synthesizer.ledger_entry_
    # the recorded path as it is: a URL must not pass through Path
    saved = entry.model_path if synthesizer.reused_ and entry and entry.model_path \
        else synthesizer.save(model, storage_options)
    privacy = synthesizer.model.metadata["privacy"]
    return {"model": str(saved), "run_id": run_id, "reused": synthesizer.reused_,
            "ledger": str(synthesizer.ledger.path) if synthesizer.ledger else None,
            "privacy": {key: privacy.get(key) for key in (
                "epsilon", "delta", "mechanism", "accountant", "differentially_private")}}


def sample_step(model: str | Path, out: str | Path, *, rows: int | None = None, seed: int = 0,
                partition_rows: int | None = None, ledger: str | Path | None = None,
                run_id: str | None = None, scheduler: str | None = None,
                device: str = "cpu",
                storage_options: dict[str, Any] | None = None) -> dict[str, str]:
    """Write the release from the saved model (no private data); a retry resumes or keeps it.
    ``device``: where the rows are drawn ("cpu", "gpu", "auto"; see Synthesizer.write).

    With ``run_id``, the release path is recorded on that run's ledger entry.
    """
    synthesizer = Synthesizer.from_model(model, storage_options=storage_options)
    with dask_client(scheduler, quiet=True):
        paths = synthesizer.write(out, rows, seed=seed, partition_rows=partition_rows,
                                  device=device, storage_options=storage_options)
    if run_id is not None:
        book = Ledger(ledger)
        for entry in book.entries():
            if entry.run_id == run_id:
                book.set_paths(entry.id or 0, release_path=out)
    return {kind: str(path) for kind, path in paths.items()}


def evaluate_step(data: str, release: str | Path, schema: str | Path | Schema,
                  out: str | Path, *, q3_sample: int | None = DEFAULT_Q3_SAMPLE,
                  scheduler: str | None = None,
                  storage_options: dict[str, Any] | None = None) -> dict[str, str]:
    """The data owner's (α, β) tables, value metrics, columns and HTML report of the release,
    written to ``out`` (not differentially private; refused inside the release directory, and in
    an object store). ``data`` and ``release`` may be URLs (a release read once its record checks
    out)."""
    out = local_only(out, "the evaluation's output")
    schema = load_schema(schema)
    with dask_client(scheduler, quiet=True):
        if remote(data):
            data = read_table(data, schema, storage_options=storage_options)
        if remote(release):
            release = read_table(checked_table(release, storage_options), schema,
                                 storage_options=storage_options)
        _, paths = write_evaluation(data, release, schema, out, q3_sample=q3_sample)
    return {kind: str(path) for kind, path in paths.items()}
