"""A release written to an S3 server on 127.0.0.1 (moto) vs to local disk (issue 43 §4).

    python -m benchmarks.object_storage --rows 10000000 --runs 2 [--json results.jsonl]

One model (the default method on the census-like demo schema, fitted once on ``--fit-rows``
generated rows, seeded numpy noise: a benchmark, not a release), then ``--rows`` rows sampled and
written to each target on the same LocalCluster (2 workers × 1 thread by default), alternating
local, s3, s3, local, ... so that a drift of the machine's load hits both alike. Per write: the
wall time of ``Synthesizer.write`` (sample + write + publish), its ``sample_write`` stage, the
peak RSS of each worker and of the S3 server (psutil, as benchmarks.run), and the CPU seconds
of the workers, the driver and the server (the work done, which the machine's load does not
change); apart, the time to read every file back and hash it (as the completion record's
SHA-256 does inside the write). The same bytes (each local release) are also PUT into the
server by s3fs alone, from the driver, after each local write: the server's own ingest rate,
without sampling.

moto is a Python server: on a small machine it takes CPU from the workers, which real S3 does
not; its CPU seconds per write and the s3fs-alone PUT say how much of the difference it is.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from benchmarks.run import (
    BUCKET,
    PeakMemory,
    append_json_line,
    bytes_under,
    cluster,
    machine,
    moto_server,
)
from dp_dask.data.demo import generate_census
from dp_dask.release import delete_release, verify_release
from dp_dask.synthesizer import Synthesizer

WARM_UP_ROWS = 10_000


def write_once(synthesizer: Synthesizer, out: str, rows: int, options: dict[str, Any] | None,
               pids: dict[str, int]) -> dict[str, Any]:
    """One release written to ``out``: wall, stage time, peaks, CPU seconds, bytes."""
    synthesizer.timings_.clear()
    processes = {name: psutil.Process(pid) for name, pid in {**pids, "driver": os.getpid()}.items()}
    cpu_before = {name: sum(p.cpu_times()[:2]) for name, p in processes.items()}
    load_before = os.getloadavg()[0]
    with PeakMemory(pids) as memory:
        started = time.perf_counter()
        paths = synthesizer.write(out, rows, seed=0, storage_options=options)
        wall = time.perf_counter() - started
    # CPU seconds (user + system) per process: the work done, whatever the machine's load
    cpu = {name: round(sum(p.cpu_times()[:2]) - cpu_before[name], 1)
           for name, p in processes.items()}
    # what the record's SHA-256 costs: the driver reads every file back (in the write, too)
    started = time.perf_counter()
    verify_release(out, checksums=True, storage_options=options)
    read_back = time.perf_counter() - started
    return {"target": "s3" if options else "local", "wall_s": round(wall, 2),
            "sample_write_s": round(synthesizer.timings_["sample_write"], 2),
            "read_back_s": round(read_back, 2),
            "bytes": (written := bytes_under(out, options)),
            "mib_per_s": round(written / 2**20 / wall, 1),
            "server_cpu_s": cpu["s3 server"], "cpu_s": cpu,
            "peak_rss_gib": {k: round(v / 2**30, 3) for k, v in memory.peak.items()},
            "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
            "parquet": str(paths["parquet"])}


def put_alone(local: Path, options: dict[str, Any], server: psutil.Process) -> dict[str, Any]:
    """The files of a local release PUT into the server by s3fs alone (no sampling)."""
    import s3fs

    fs = s3fs.S3FileSystem(**options)
    size = sum(f.stat().st_size for f in local.rglob("*") if f.is_file())
    files = sum(1 for f in local.rglob("*") if f.is_file())
    cpu_before = sum(server.cpu_times()[:2])
    started = time.perf_counter()
    fs.put(str(local), f"{BUCKET}/put-alone", recursive=True)
    seconds = time.perf_counter() - started
    result = {"bytes": size, "files": files, "seconds": round(seconds, 2),
              "mib_per_s": round(size / 2**20 / seconds, 1),
              "server_cpu_s": round(sum(server.cpu_times()[:2]) - cpu_before, 1)}
    fs.rm(f"{BUCKET}/put-alone", recursive=True)
    return result


def benchmark(rows: int, *, runs: int = 2, fit_rows: int = 1_000_000, workers: int = 2,
              memory_limit: str = "4GiB", root: Path | None = None) -> dict[str, Any]:
    """Fit once, then ``runs`` writes to each target, alternating; then the PUT-alone check."""
    root = Path(root or tempfile.mkdtemp(prefix="dp-dask-objstore-"))
    local_out = root / "release"
    with moto_server(log=root / "moto.log") as (options, server_pid), \
            cluster(workers, memory_limit) as client:
        server = psutil.Process(server_pid)
        workers_pids = client.run(os.getpid)
        pids = {**{f"worker{i}": pid for i, pid in enumerate(workers_pids.values())},
                "s3 server": server_pid}
        idle = {name: round(psutil.Process(pid).memory_info().rss / 2**30, 3)
                for name, pid in pids.items()}
        # Generated, public data: nothing to record in the privacy ledger.
        synthesizer = Synthesizer.create("marginals", "demo", epsilon=1.0, ledger=False,
                                         noise_sampler="numpy", noise_seed=0)
        synthesizer.fit(generate_census(fit_rows, seed=0))
        # untimed: the workers compile the row passes (numba) on their first sampling task
        synthesizer.write(str(local_out), WARM_UP_ROWS, seed=0)
        delete_release(local_out)
        # local, s3, s3, local, local, s3, ...: each target first as often as the other
        order = [("local", "s3")[(i + i // 2) % 2] for i in range(2 * runs)]
        writes = []
        for index, target in enumerate(order):
            out = f"s3://{BUCKET}/release" if target == "s3" else str(local_out)
            write = write_once(synthesizer, out, rows, options if target == "s3" else None,
                               pids)
            if target == "local":  # the same bytes, PUT by s3fs alone
                write["put_alone"] = put_alone(local_out, options, server)
            delete_release(out, options if target == "s3" else None)
            writes.append({"order": index, **write})
            print(f"{target:5s} write {index}: {write['wall_s']:.1f} s "
                  f"({write['mib_per_s']} MiB/s), server CPU {write['server_cpu_s']} s",
                  flush=True)
    return {"rows": rows, "fit_rows": fit_rows, "workers": workers, "runs": runs,
            "memory_limit": memory_limit, "schema": "demo", "method": "marginals",
            "idle_rss_gib": idle, "writes": writes, "machine": machine()}


def summary(result: dict[str, Any]) -> dict[str, float]:
    """Median wall time and CPU seconds (all processes) per target, the ratio of the wall
    times, and the largest worker peak per target."""
    out: dict[str, float] = {}
    for target in ("local", "s3"):
        writes = [w for w in result["writes"] if w["target"] == target]
        out[f"{target}_median_s"] = statistics.median(w["wall_s"] for w in writes)
        out[f"{target}_median_cpu_s"] = statistics.median(sum(w["cpu_s"].values())
                                                          for w in writes)
        out[f"{target}_worker_peak_gib"] = max(
            v for w in writes for k, v in w["peak_rss_gib"].items() if k.startswith("worker"))
    out["ratio"] = round(out["s3_median_s"] / out["local_median_s"], 2)
    return out


def table(result: dict[str, Any]) -> str:
    lines = [f"{result['rows']:,} rows ({result['schema']} schema, {result['method']}), "
             f"{result['workers']} workers; idle RSS GiB {result['idle_rss_gib']}",
             "| # | target | write s | sample_write s | read back s | MiB | MiB/s "
             "| worker peaks GiB | CPU s workers / driver / S3 server | server peak GiB | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for w in result["writes"]:
        peaks = ", ".join(f"{v:.2f}" for k, v in w["peak_rss_gib"].items()
                          if k.startswith("worker"))
        workers_cpu = sum(v for k, v in w["cpu_s"].items() if k.startswith("worker"))
        lines.append(f"| {w['order']} | {w['target']} | {w['wall_s']:.1f} | "
                     f"{w['sample_write_s']:.1f} | {w['read_back_s']:.1f} | "
                     f"{w['bytes'] / 2**20:.0f} | {w['mib_per_s']} | "
                     f"{peaks} | {workers_cpu:.1f} / {w['cpu_s']['driver']} / "
                     f"{w['server_cpu_s']} | {w['peak_rss_gib']['s3 server']:.2f} | "
                     f"{w['load_before']} → {w['load_after']} |")
    for w in result["writes"]:
        if "put_alone" in w:
            alone = w["put_alone"]
            lines.append(f"s3fs alone, the files of write {w['order']}: {alone['files']} files, "
                         f"{alone['bytes'] / 2**20:.0f} MiB PUT in {alone['seconds']} s "
                         f"({alone['mib_per_s']} MiB/s), server CPU {alone['server_cpu_s']} s")
    s = summary(result)
    lines += [f"median write: local {s['local_median_s']:.1f} s, s3 {s['s3_median_s']:.1f} s, "
              f"ratio {s['ratio']}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows per release")
    parser.add_argument("--runs", type=int, default=2, help="writes per target")
    parser.add_argument("--fit-rows", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-limit", default="4GiB", help="per worker")
    parser.add_argument("--root", type=Path, help="local release and logs (default: a temp dir)")
    parser.add_argument("--json", type=Path, help="append the result as one JSON line")
    args = parser.parse_args(argv)
    result = benchmark(args.rows, runs=args.runs, fit_rows=args.fit_rows, workers=args.workers,
                       memory_limit=args.memory_limit, root=args.root)
    print(table(result))
    append_json_line(args.json, result)
    return result


if __name__ == "__main__":
    main()
