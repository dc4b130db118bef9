"""Per-row cost of each stage of the default method's sampling and writing, beside its floor.

    python -m benchmarks.stages --model MODEL_DIR [--rows 100000] [--repeat 3] [--json out.jsonl]
    python -m benchmarks.stages --adult-csv /tmp/adult-1M.csv        # fit Adult's 9 categorical

One partition of ``--rows`` rows, in this process on one core, every stage in CPU seconds
(``time.process_time``: what a loaded machine does not inflate), the median of ``--repeat``:
the release's estimate (tree start, raking, weight fit; once per release, not per partition),
the partition's draw (resample, targets, row updates, the 1-way match), the one-hot dummies,
decoding, the Arrow table, the Parquet part and the Zarr chunk. Floors on the same rows: one
NumPy pass over the codes, one NumPy count of every table, pyarrow writing the same Arrow table
with its defaults, and the dummies' bytes written raw.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dp_dask.copula.sample import dictionary_columns, fine_histograms
from dp_dask.data.io import create_zarr
from dp_dask.data.tables import Domain, one_hot
from dp_dask.data.values import arrow_schema, decode_frame
from dp_dask.methods.marginals import MarginalModel, raked_start, tree_start
from dp_dask.synthesizer import load_model
from dp_dask.timing import timed


def one_run(model: MarginalModel, rows: int, seed: int) -> dict[str, float]:
    """CPU seconds of every stage for one partition of ``rows`` rows (and ``sweeps``)."""
    cpu: dict[str, float] = {}
    root = np.random.SeedSequence(seed)
    part, release = root.spawn(2)
    with timed(None, "estimate: tree start", cpu):
        tree_start(model, rows, np.random.default_rng(release))
    with timed(None, "estimate: tree + raking", cpu):
        raked_start(model, rows, np.random.default_rng(release))
    with timed(None, "estimate: whole (tree, raking, weight fit, trial)", cpu):
        sampler = model.sampler().for_release(rows, release)
    codes = sampler.draw_codes(rows, part, cpu)
    del cpu["estimate"]  # shared: the partition makes none
    schema = model.schema
    with timed(None, "one-hot dummies", cpu):
        binary = one_hot(codes, schema)
    small = codes.astype(np.int16)
    fine = fine_histograms(sampler)
    with timed(None, "zarr chunk", cpu), tempfile.TemporaryDirectory() as where:
        create_zarr(Path(where) / "z", (rows, schema.d), rows, {})[:] = binary
    with timed(None, "floor: dummies' bytes to a file", cpu), \
            tempfile.TemporaryDirectory() as where:
        binary.tofile(Path(where) / "raw")
    for decode in ("uniform", "label"):
        arrow = arrow_schema(schema, decode)
        with timed(None, f"decode ({decode})", cpu):
            frame = decode_frame(small, schema, decode, part, fine)
        with timed(None, f"arrow table ({decode})", cpu):
            table = pa.Table.from_pandas(frame, schema=arrow, preserve_index=False)
        with timed(None, f"parquet part ({decode})", cpu):
            pq.write_table(table, io.BytesIO(), use_dictionary=dictionary_columns(arrow))
        with timed(None, f"floor: pyarrow defaults, same table ({decode})", cpu):
            pq.write_table(table, io.BytesIO())
    with timed(None, "floor: one numpy pass over the codes", cpu):
        np.bincount(codes.ravel())
    pairs, domain = list(model.marginals.two_way), Domain(schema.sizes)
    with timed(None, f"floor: numpy count of every table ({len(pairs)})", cpu):
        for pair in pairs:
            np.bincount(domain.index(codes, pair))
    return cpu


def profile(model: MarginalModel, rows: int, repeat: int) -> dict[str, Any]:
    runs = [one_run(model, rows, seed) for seed in range(repeat)]
    median = {stage: statistics.median(run[stage] for run in runs) for stage in runs[0]}
    return {"rows": rows, "m": model.schema.m, "d": model.schema.d,
            "tables": len(model.marginals.two_way), "repeat": repeat,
            "cpu_s": median, "load": os.getloadavg()[0]}


def table(result: dict[str, Any]) -> str:
    rows, cpu = result["rows"], result["cpu_s"]
    lines = [f"{rows:,} rows, m={result['m']}, d={result['d']}, {result['tables']} tables, "
             f"median of {result['repeat']}, load {result['load']:.1f}",
             f"{'stage':52s} {'CPU s':>8s} {'µs/row':>8s}"]
    for stage, seconds in cpu.items():
        if stage == "sweeps":
            lines.append(f"{'row-update sweeps':52s} {seconds:8.0f}")
        else:
            lines.append(f"{stage:52s} {seconds:8.3f} {seconds / rows * 1e6:8.2f}")
    return "\n".join(lines)


def adult_model(csv: Path) -> MarginalModel:
    """Adult's 9 categorical attributes fitted on ``csv`` as the peers' harness fits them."""
    from benchmarks.peers import read_data, table_schema
    from dp_dask.synthesizer import Synthesizer

    synthesizer = Synthesizer.create("marginals", table_schema("categorical"), epsilon=1.0,
                                     noise_sampler="numpy", noise_seed=0, ledger=False)
    return synthesizer.fit(read_data(csv)).model


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", type=Path, help="a saved marginals model")
    source.add_argument("--adult-csv", type=Path, help="fit Adult's categorical columns")
    parser.add_argument("--rows", type=int, default=100_000, help="rows of the partition")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="append the result as one JSON line")
    args = parser.parse_args(argv)
    model = load_model(args.model) if args.model else adult_model(args.adult_csv)
    result = profile(model, args.rows, args.repeat)
    result["source"] = str(args.model or args.adult_csv)
    print(table(result))
    if args.json:
        with args.json.open("a") as out:
            out.write(json.dumps(result) + "\n")
    return result


if __name__ == "__main__":
    main()
