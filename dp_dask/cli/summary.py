"""The run summary (``--summary``, ``run.json``) of fit, sample, synth and stats."""

from __future__ import annotations

import datetime as dt
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

import dp_dask
from dp_dask.config import Options
from dp_dask.data.io import Location, location, read_bytes, write_json
from dp_dask.synthesizer import Synthesizer

SUMMARY_FORMAT = 1


SUMMARY_PRIVACY = ("epsilon", "delta", "mechanism", "accountant", "rho", "noise_sampler",
                   "differentially_private", "label")


def run_summary(args: Options, synthesizer: Synthesizer, paths: dict[str, Path],
                started: float, started_at: dt.datetime) -> dict[str, Any]:
    """:func:`job_summary` of a fit, sample or synth."""
    entry = synthesizer.ledger_entry_
    return job_summary(
        args, synthesizer.name, synthesizer.timings_, synthesizer.model.metadata.get("privacy", {}),
        None if entry is None else {
            "path": str(synthesizer.ledger.path), "dataset_name": entry.dataset_name,
            "run_id": entry.run_id, "reused": synthesizer.reused_, "forced": entry.forced},
        paths, started, started_at)


def job_summary(args: Options, method: str, stages: dict[str, float],
                privacy: dict[str, Any], ledger: dict[str, Any] | None, paths: dict[str, Path],
                started: float, started_at: dt.datetime) -> dict[str, Any]:
    """The machine-readable record of a finished job (``run.json``): stages, times, the driver's
    peak memory, paths, privacy. Parameters and public facts only: the release's row count and
    partitions come from its completion record, nothing from the input's rows. A release under
    another notion than DP (stats' Tabular-DDP) keeps its notion and statement."""
    # ru_maxrss is in KiB on Linux (bytes on macOS): the process's peak resident set so far
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin"
                                                                 else 1024)
    summary: dict[str, Any] = {
        "format": SUMMARY_FORMAT, "command": args.command, "status": "ok",
        "config": str(args.config) if getattr(args, "config", None) else None,
        "dp_dask": dp_dask.__version__, "method": method,
        "started": started_at.isoformat(timespec="seconds"),
        "finished": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "seconds": round(time.perf_counter() - started, 3),
        "stages": {stage: round(seconds, 3) for stage, seconds in stages.items()},
        "peak_memory_bytes": {"driver": peak},
        "paths": {"data": str(args.data) if getattr(args, "data", None) else None,
                  "schema": str(args.schema) if getattr(args, "schema", None) else None,
                  **{kind: str(path) for kind, path in paths.items()}},
        "privacy": {key: privacy.get(key) for key in SUMMARY_PRIVACY}
                   | {key: privacy[key] for key in ("notion", "statement") if key in privacy},
        "ledger": ledger,
        "cluster": {"kind": args.cluster_kind, "scheduler": args.scheduler,
                    "workers": args.workers},
    }
    if "record" in paths:
        record = json.loads(read_bytes(paths["record"], getattr(args, "storage_options", None)))
        summary["release"] = {key: record.get(key) for key in (
            "rows", "partitions", "partition_rows", "seed", "plan_key")}
    return summary


def write_summary(args: Options, beside: Location,
                  summary: dict[str, Any]) -> Location | None:
    """``--summary``, else for a job config ``<beside>.run.json``: outside the release, whose
    completion record lists its files, so the summary can hold the time the whole job took.
    Plain commands write none unless asked: nothing appears beside an output unannounced."""
    if args.summary:
        path = location(args.summary)
    elif getattr(args, "config", None):
        path = location(f"{beside}.run.json")
    else:
        return None
    write_json(path, summary, getattr(args, "storage_options", None))
    print(f"{'summary':>9}: {path}")
    return path


def started_now() -> tuple[float, dt.datetime]:
    return time.perf_counter(), dt.datetime.now(dt.UTC)

