"""CPU seconds of one estimate and a few partitions' write tasks, in this process.

    PYTHONPATH=. python -m benchmarks.write_tasks --model MODEL_DIR [--zarr] [--decode label]

Each write task is the release's own (``copula.sample._write_partition``: draw, the Zarr chunk
with ``--zarr``, decode, the Parquet part, the marker) into a temporary directory. It uses only
functions older commits have too, so the same file runs against an export of another commit
(``git archive <commit> | tar -x -C /tmp/old``, then ``cd /tmp/old && PYTHONPATH=/tmp/old
python /path/to/write_tasks.py ...``; ``--zarr`` there, as the dummies were always written):
old and new in turn, in fresh processes, give a ratio that the machine's load disturbs least.
``--release-rows``: the estimate a release of that size makes (no value moves past
``move_partitions`` partitions), as a large release's tasks see it.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from dp_dask.copula.sample import _write_partition
from dp_dask.data.io import create_zarr
from dp_dask.data.values import arrow_schema
from dp_dask.synthesizer import load_model


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="a saved marginals model")
    parser.add_argument("--rows", type=int, default=100_000, help="rows per partition")
    parser.add_argument("--tasks", type=int, default=3)
    parser.add_argument("--zarr", action="store_true", help="write the Zarr dummies too")
    parser.add_argument("--decode", default="uniform")
    parser.add_argument("--label", default="", help="a name for this run in the JSON line")
    parser.add_argument("--release-rows", type=int,
                        help="estimate as a release of this many rows does (past "
                             "move_partitions partitions: no value moves); default: one "
                             "partition's")
    args = parser.parse_args(argv)
    model = load_model(args.model)
    rows = args.rows
    started = time.process_time()
    shared = model.sampler().for_release(rows, np.random.SeedSequence(99), args.release_rows)
    estimate = time.process_time() - started
    arrow = arrow_schema(model.schema, args.decode)
    tasks = []
    with tempfile.TemporaryDirectory() as where:
        where = Path(where)
        target = (create_zarr(where / "z", (args.tasks * rows, model.schema.d), rows, {})
                  if args.zarr else None)
        for index in range(args.tasks):
            started = time.process_time()
            _write_partition(shared, index, index * rows, rows, np.random.SeedSequence([7, index]),
                             target, where / f"part{index}.parquet", where / "done", None,
                             args.decode, arrow)
            tasks.append(time.process_time() - started)
        written = sum(f.stat().st_size for f in where.rglob("*") if f.is_file())
    result = {"label": args.label, "zarr": args.zarr, "decode": args.decode, "rows": rows,
              "estimate_cpu_s": round(estimate, 3), "task_cpu_s": [round(t, 3) for t in tasks],
              "bytes": written, "load": os.getloadavg()[0]}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
