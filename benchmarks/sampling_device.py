"""Copula sampling on CPU workers vs a GPU (CuPy): draws alone, and draws written as a release.

    # once, where the input is: fit the copula and keep its sampler (factor, thresholds, offsets)
    python -m benchmarks.sampling_device save --shape art2 --out art2-sampler.npz
    # then, on any machine (no input needed):
    python -m benchmarks.sampling_device time --sampler art2-sampler.npz --device cpu \\
        --workers 16 --rows 5240260 [--write /tmp/out] [--json results.jsonl]

``time`` runs one task per partition (the release's partitioning) on a LocalCluster of
``--workers`` × 1 thread. Without ``--write`` each task draws its rows (random normals, latent
product, thresholds, argmax decoding; on the GPU the copy back to host memory too) and returns a
checksum, so the draws are timed without the output; with ``--write`` the tasks are the release
writer's (Zarr chunk + Parquet part). The model's fit is not timed: it does not depend on the
device.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import dask
import numpy as np

from benchmarks.run import append_json_line, cluster, machine
from dp_dask.cluster import compute
from dp_dask.copula.sample import (
    Sampler,
    default_partition_rows,
    partition_sizes,
    write_partitions,
)
from dp_dask.data.io import create_zarr
from dp_dask.data.schema import Schema


def save(shape: str, out: Path, root: Path, workers: int) -> Path:
    from benchmarks.run import run

    result = run(shape, workers=workers, sample_rows=0, root=root, method="copula",
                 return_model=True)
    sampler = result.pop("model").sampler()
    np.savez(out, factor=sampler.factor, thresholds=sampler.thresholds, offsets=sampler.offsets,
             schema=json.dumps(sampler.schema.to_json()))
    return out


def load(path: Path, device: str) -> Sampler:
    arrays = np.load(path)
    schema = Schema.from_json(json.loads(str(arrays["schema"])))
    return Sampler(schema, arrays["factor"], arrays["thresholds"], arrays["offsets"], device)


def _checksum(sampler: Sampler, rows: int, child: np.random.SeedSequence) -> int:
    binary, codes = sampler.draw(rows, child)
    return int(binary[:, 0].sum()) + int(codes[:, 0].sum())


def time_sampling(sampler: Sampler, rows: int, workers: int, write: Path | None = None,
                  memory_limit: str = "6GiB") -> dict[str, Any]:
    schema = sampler.schema
    partition_rows = default_partition_rows(schema.d)
    model = SimpleNamespace(schema=schema, n_rows=rows)
    with cluster(workers, memory_limit) as client:
        client.run(lambda: None)  # workers up before the clock starts
        started = time.perf_counter()
        if write is None:
            shared = dask.delayed(sampler, pure=True)
            sizes = partition_sizes(rows, partition_rows)
            children = np.random.SeedSequence(0).spawn(len(sizes))
            compute(*[dask.delayed(_checksum, pure=True)(shared, n, c)
                      for n, c in zip(sizes, children)])
        else:
            target = create_zarr(write / "synthetic.zarr", (rows, schema.d), partition_rows, {})
            (write / "markers").mkdir(parents=True, exist_ok=True)
            compute(*write_partitions(model, rows, seed=0, partition_rows=partition_rows,
                                      binary_target=target, parquet=write / "synthetic.parquet",
                                      markers=write / "markers", sampler=sampler))
        seconds = time.perf_counter() - started
    flops = 2.0 * rows * schema.d * schema.d
    return {"device": sampler.device, "workers": workers, "rows": rows, "d": schema.d,
            "m": schema.m, "partition_rows": partition_rows, "write": write is not None,
            "seconds": round(seconds, 2), "rows_per_s": round(rows / seconds),
            "gemm_equivalent_gflops": round(flops / seconds / 1e9, 1), "machine": machine()}


def main(argv: list[str] | None = None) -> dict[str, Any] | Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    fit = commands.add_parser("save", help="fit the copula on a shape and save its sampler")
    fit.add_argument("--shape", default="art2")
    fit.add_argument("--out", type=Path, required=True)
    fit.add_argument("--workers", type=int, default=2)
    fit.add_argument("--root", type=Path, default=Path("/tmp/dp_dask_bench"))
    timing = commands.add_parser("time", help="time sampling from a saved sampler")
    timing.add_argument("--sampler", type=Path, required=True)
    timing.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    timing.add_argument("--workers", type=int, default=2)
    timing.add_argument("--rows", type=int, default=5_240_260)
    timing.add_argument("--write", type=Path, help="write the release here (Zarr + Parquet)")
    timing.add_argument("--json", type=Path, help="append the result as one JSON line")
    args = parser.parse_args(argv)
    if args.command == "save":
        return save(args.shape, args.out, args.root, args.workers)
    result = time_sampling(load(args.sampler, args.device), args.rows, args.workers, args.write)
    print(json.dumps(result))
    append_json_line(args.json, result)
    return result


if __name__ == "__main__":
    main()
