"""Run the whole pipeline on a benchmark shape and print a per-stage table.

    python -m benchmarks.run --shape dss [--rows N] [--workers 2] [--memory-limit 4GiB]
        [--method dpview --method-options '{"view_size": 4}'] [--sampling-device gpu]
        [--noise-sampler numpy] [--decode label] [--target s3]

The input is generated (or reused) under ``--root``, a LocalCluster is started (not timed), and
``fit`` then ``write`` run on it; the stage times come from ``synthesizer.timings_``. Peak RSS of
the driver and of each worker process is sampled with psutil in a background thread.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import psutil
from distributed import Client, LocalCluster
from threadpoolctl import threadpool_limits

from benchmarks.paths import load_test_helper
from benchmarks.shapes import SHAPES, generate
from dp_dask.cluster import worker_malloc
from dp_dask.data.counts import query_vector
from dp_dask.data.dtypes import DECODINGS
from dp_dask.release import delete_release
from dp_dask.synthesizer import Synthesizer

# the tests' S3 server (moto) on 127.0.0.1 (tests/s3_server.py), for --target s3
_S3_SERVER = load_test_helper("s3_server")
BUCKET, moto_server = _S3_SERVER.BUCKET, _S3_SERVER.moto_server

# Table rows per method: (label, key in timings_). "total" is their sum.
COUNT, NOISE = ("read+encode+count", "read_encode_count"), ("noise", "noise")
SAMPLE_WRITE = ("sampling+write", "sample_write")  # Parquet; Zarr too with --zarr
STAGES = {
    "copula": [COUNT, NOISE, ("rho-mapping", "rho_mapping"), ("NCM", "ncm"),
               ("diagnostics (eigvalsh)", "diagnostics"), ("decode calibration", "calibration"),
               ("Cholesky", "prepare_sampler"), SAMPLE_WRITE],
    "marginals": [COUNT, NOISE, ("consistency + tree", "consistency"),
                  ("prepare sampler", "prepare_sampler"),
                  ("sampling+row updates+write", "sample_write")],
    "dpview": [COUNT, ("noise+consistency+integers", "noise_views"),
               ("prepare sampler", "prepare_sampler"), ("linking+write", "sample_write")],
}
STAGES["dpview+"] = STAGES["dpview"]
STAGES["dpcopula-kendall"] = STAGES["dpcopula-mle"] = [
    COUNT, ("noise+copula (m×m)", "noise_copula"), ("prepare sampler", "prepare_sampler"),
    SAMPLE_WRITE]
MEMORY_POLL_S = 0.1


class PeakMemory:
    """Peak RSS of a set of processes, polled in a daemon thread."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.processes = {name: psutil.Process(pid) for name, pid in pids.items()}
        self.peak = dict.fromkeys(pids, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            for name, process in self.processes.items():
                with contextlib.suppress(psutil.Error):  # a worker restarting
                    self.peak[name] = max(self.peak[name], process.memory_info().rss)
            self._stop.wait(MEMORY_POLL_S)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def cpu_seconds(self) -> float:
        """User + system CPU seconds of all the processes so far: what load does not inflate
        (much), unlike wall time."""
        return sum(sum(process.cpu_times()[:2]) for process in self.processes.values())


def machine() -> dict[str, Any]:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").open()
                  if line.startswith("model name")), platform.processor())
    return {"nproc": os.cpu_count(), "cpu": model,
            "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def rates(result: dict[str, Any]) -> dict[str, str]:
    """Throughput of the stages that have a natural unit."""
    t, rows, m, d = result["timings"], result["rows"], result["m"], result["d"]
    updates = rows * m * (m - 1) / 2 / t["read_encode_count"] / result["workers"]
    out = {"read_encode_count": f"{updates / 1e6:.0f} M pair-updates/s/worker",
           **({"noise": f"{result['cells'] / t['noise'] / 1e6:.2f} M cells/s"}
              if "noise" in t else {})}
    if "rho_mapping" in t:
        out["rho_mapping"] = f"{d * (d - 1) / 2 / t['rho_mapping'] / 1e6:.2f} M pairs/s"
    if "sample_write" in t and result["method"] != "copula":
        out["sample_write"] = f"{result['sample_rows'] / t['sample_write'] / 1e3:.0f} k rows/s"
    elif "sample_write" in t:
        flops = 2.0 * result["sample_rows"] * d * d
        out["sample_write"] = f"{flops / t['sample_write'] / 1e9:.0f} GFLOP/s (GEMM-equivalent)"
    return out


def table(result: dict[str, Any]) -> str:
    t = result["timings"]
    rate = rates(result)
    lines = [f"shape {result['shape']} ({result['method']}): {result['rows']:,} rows, "
             f"m={result['m']}, d={result['d']}, "
             f"{result['workers']} worker(s), written to {result.get('target', 'local')}, "
             f"load {result['load_before']} -> "
             f"{result['load_after']}",
             f"{'stage':32s} {'seconds':>9s}  rate"]
    lines += [f"{label:32s} {t[key]:9.2f}  {rate.get(key, '')}"
              for label, key in STAGES[result["method"]] if key in t]
    lines.append(f"{'total':32s} {result['total_s']:9.2f}")
    cpu = result["cpu_s"]
    lines.append(f"CPU s (driver + workers): fit {cpu['fit']:.1f}, write {cpu['write']:.1f}")
    peak = result["peak_rss_gib"]
    lines.append("peak RSS GiB: " + ", ".join(f"{k} {v:.2f}" for k, v in peak.items()))
    return "\n".join(lines)


@contextlib.contextmanager
def cluster(workers: int, memory_limit: str) -> Iterator[Client]:
    with worker_malloc():  # as dp_dask's own local clusters
        local = LocalCluster(n_workers=workers, threads_per_worker=1, memory_limit=memory_limit,
                             host="127.0.0.1", dashboard_address="127.0.0.1:0")
    with local, Client(local) as client:
        yield client


def run(shape: str, *, rows: int | None = None, workers: int = 2, memory_limit: str = "4GiB",
        sample_rows: int | None = None, root: Path = Path("/tmp/dp_dask_bench"),
        blas_threads: int | None = None, keep_output: bool = False,
        method: str = "marginals", method_options: dict[str, Any] | None = None,
        noise_sampler: str = "opendp", sampling_device: str = "cpu", decode: str = "uniform",
        return_model: bool = False, with_binary: bool = False,
        target: str = "local") -> dict[str, Any]:
    """Generate/reuse the input, run fit (and write unless sample_rows == 0), return results
    (with the fitted model under "model" if ``return_model``).

    ``noise_sampler`` "numpy" (seeded) is for machines without OpenDP: the noise stage's time is
    then not the release's. ``decode``: the release's values ("uniform", "midpoint") or its bin
    labels ("label"), to time typed output against labels. ``with_binary``: write the Zarr
    dummies too (the release's default until 2026-11-26). ``target`` "s3": the release is
    written to an S3 server on 127.0.0.1 (moto, its own process, started untimed; its peak RSS
    and CPU seconds counted with the rest) instead of under ``root``."""
    rows = rows or SHAPES[shape].rows
    data = generate(shape, root / f"{shape}-{rows}", rows=rows, processes=os.cpu_count() or 2)
    sample_rows = rows if sample_rows is None else sample_rows
    out: str | Path = root / f"out-{shape}-{rows}"
    with contextlib.ExitStack() as stack:
        client = stack.enter_context(cluster(workers, memory_limit))
        pids = {"driver": os.getpid(), **{f"worker{i}": pid for i, pid in
                                          enumerate(client.run(os.getpid).values())}}
        options = None
        if target == "s3":
            options, pids["s3 server"] = stack.enter_context(moto_server(log=root / "moto.log"))
            out = f"s3://{BUCKET}/out-{shape}-{rows}"
        load_before = os.getloadavg()[0]
        # The driver's BLAS (eigh, Cholesky) only; workers are single-threaded by Dask.
        with PeakMemory(pids) as memory, threadpool_limits(blas_threads, user_api="blas"):
            # Generated, public data: nothing to record in the privacy ledger.
            synthesizer = Synthesizer.create(
                method, data / "schema.json", epsilon=1.0, ledger=False,
                noise_sampler=noise_sampler, noise_seed=0 if noise_sampler == "numpy" else None,
                **(method_options or {}))
            started = memory.cpu_seconds()
            synthesizer.fit(data / "data")
            fitted = memory.cpu_seconds()
            if sample_rows:
                synthesizer.write(out, sample_rows, device=sampling_device, decode=decode,
                                  with_binary=with_binary, storage_options=options)
            cpu = {"fit": fitted - started, "write": memory.cpu_seconds() - fitted}
        load_after = os.getloadavg()[0]
        written = bytes_under(out, options) if sample_rows else 0
    if not keep_output and target == "local":  # the S3 server's objects went with it
        delete_release(out)
    schema = synthesizer.schema
    timings = synthesizer.timings_
    stages = STAGES[method]
    return {"shape": shape, "method": method, "method_options": method_options or {},
            "rows": rows, "m": schema.m, "d": schema.d,
            "workers": workers, "noise_sampler": noise_sampler,
            "sampling_device": sampling_device, "decode": decode,
            "memory_limit": memory_limit, "sample_rows": sample_rows,
            "blas_threads": blas_threads,
            "cells": int(query_vector(np.zeros((schema.d, schema.d)), schema).size),
            "timings": {key: timings[key] for _, key in stages if key in timings},
            "total_s": sum(timings[key] for _, key in stages if key in timings),
            "with_binary": with_binary, "target": target, "bytes_written": written,
            "cpu_s": cpu,
            "peak_rss_gib": {k: v / 2**30 for k, v in memory.peak.items()},
            "load_before": round(load_before, 2), "load_after": round(load_after, 2),
            "machine": machine(), **({"model": synthesizer.model} if return_model else {})}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), required=True)
    parser.add_argument("--method", choices=sorted(STAGES), default="marginals")
    parser.add_argument("--method-options", type=json.loads, default={},
                        help="JSON object of the method's own parameters, e.g. "
                             "'{\"view_size\": 4}'")
    parser.add_argument("--rows", type=int, help="input rows (default: the paper's)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-limit", default="4GiB", help="per worker")
    parser.add_argument("--sample-rows", type=int,
                        help="synthetic rows to write (default: as many as input; 0: fit only)")
    parser.add_argument("--blas-threads", type=int, help="cap the driver's BLAS threads")
    parser.add_argument("--root", type=Path, default=Path("/tmp/dp_dask_bench"))
    parser.add_argument("--keep-output", action="store_true")
    parser.add_argument("--noise-sampler", choices=("opendp", "numpy"), default="opendp",
                        help="numpy: seeded noise, for a machine without OpenDP (not a release)")
    parser.add_argument("--sampling-device", choices=("cpu", "gpu", "auto"), default="cpu")
    parser.add_argument("--decode", choices=DECODINGS, default="uniform",
                        help="the release's values (uniform, midpoint) or its bin labels")
    parser.add_argument("--zarr", action="store_true",
                        help="write the dummy-coded rows as Zarr too (off by default)")
    parser.add_argument("--target", choices=("local", "s3"), default="local",
                        help="write the release under --root, or to an S3 server (moto) on "
                             "127.0.0.1")
    parser.add_argument("--json", type=Path, help="append the result as one JSON line")
    args = parser.parse_args(argv)
    result = run(args.shape, rows=args.rows, workers=args.workers,
                 memory_limit=args.memory_limit, sample_rows=args.sample_rows, root=args.root,
                 blas_threads=args.blas_threads, keep_output=args.keep_output,
                 method=args.method, method_options=args.method_options,
                 noise_sampler=args.noise_sampler, sampling_device=args.sampling_device,
                 decode=args.decode, with_binary=args.zarr, target=args.target)
    print(table(result))
    append_json_line(args.json, result)
    return result


def bytes_under(location: str | Path, options: dict[str, Any] | None) -> int:
    """Bytes of every file under a local directory or an object-storage prefix."""
    fs, root = fsspec.core.url_to_fs(str(location), **(options or {}))
    return sum(fs.du(root, total=False).values())


def append_json_line(path: Path | None, result: dict[str, Any]) -> None:
    """One result as one JSON line appended to ``path`` (nothing when None)."""
    if path is not None:
        with path.open("a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
