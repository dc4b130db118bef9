"""MST beside dp_dask on Adult resampled to many rows, every step out of core.

    python -m benchmarks.peers_scale --rows 100000000 --private-pgm /work/mbi-repo \\
        --peer-python /work/peers-venv/bin/python --work /tmp/scale --memory-limit 20 \\
        --record benchmarks/results/peers-scale/adult-100M.jsonl

``benchmarks.peers`` gives every tool the whole CSV in memory, which stops at ~10 M rows on a
machine of 24 GiB (the text alone is 11 GB at 100 M). Here the input is written once, in chunks,
in each tool's own format: Parquet parts of dictionary columns for dp_dask (what a data team
holds), a CSV of integer codes with its domain JSON for MST (what its script reads). The rows are
Adult's 9 categorical attributes resampled with replacement, chunk k drawn from
``SeedSequence(seed).spawn(chunks)[k]``: the same law as the 1 M / 10 M tables of
docs/benchmarks.md (pandas' ``sample``), other rows.

MST runs the authors' script as ``benchmarks.peers`` does; it reads its whole CSV into pandas and
then into Python lists, so it runs under a memory watchdog (``--memory-limit`` GiB) that stops it
before the machine runs out and records where it stood. dp_dask runs in a child of the same
harness, reading the Parquet parts as a release does. Both outputs are evaluated the same way
from disk (Q1, Q2, a Q3 sample, the range queries), against the Parquet input.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from benchmarks.peers import (
    DEFAULT_DATA,
    DELTA,
    append_cache,
    cache_key,
    load_cache,
    peer_versions,
    read_data,
    reusable,
    run_ours,
    run_peer,
    table_schema,
)
from benchmarks.shapes import PARTITION_ROWS
from dp_dask.data.decode import codes_to_frame
from dp_dask.data.encode import encode_partition
from dp_dask.data.schema import Schema
from dp_dask.evaluate.queries import DEFAULT_Q3_SAMPLE

COLUMNS = "categorical"


def generate(rows: int, out: Path, *, seed: int = 0, source: str = DEFAULT_DATA,
             chunk_rows: int = PARTITION_ROWS, codes: bool = True) -> tuple[Path, Path, Path]:
    """Adult's categorical attributes resampled to ``rows``: ``out/data/part-*.parquet``
    (labels, dictionary-encoded) and, if ``codes``, ``out/codes.csv`` with ``out/domain.json``
    (MST's format), the same rows in both. Returns (parquet directory, codes CSV, domain JSON);
    an input already complete for (rows, seed, chunk_rows, codes) is kept."""
    schema = table_schema(COLUMNS)
    data, csv, domain = out / "data", out / "codes.csv", out / "domain.json"
    stamp = {"rows": rows, "seed": seed, "chunk_rows": chunk_rows, "source": str(source),
             **({} if codes else {"codes": False})}
    stamp_path = out / "dataset.json"
    if stamp_path.exists() and json.loads(stamp_path.read_text()) == stamp:
        return data, csv, domain
    data.mkdir(parents=True, exist_ok=True)
    for old in data.glob("part-*.parquet"):
        old.unlink()
    adult = encode_partition(read_data(source, schema.names), schema)  # (m, 32,561)
    full, rest = divmod(rows, chunk_rows)
    sizes = [chunk_rows] * full + ([rest] if rest else [])
    children = np.random.SeedSequence(seed).spawn(len(sizes))
    header = pa.schema([(name, pa.int16()) for name in schema.names])
    with contextlib.ExitStack() as stack:
        writer = stack.enter_context(pacsv.CSVWriter(csv, header)) if codes else None
        for k, (size, child) in enumerate(zip(sizes, children)):
            chunk = adult[:, np.random.default_rng(child).integers(0, adult.shape[1], size)]
            if writer is not None:
                writer.write_table(pa.table(dict(zip(schema.names, chunk.astype(np.int16))),
                                            schema=header))
            labels = codes_to_frame(chunk.T, schema)
            pq.write_table(pa.Table.from_pandas(labels, preserve_index=False),
                           data / f"part-{k:05d}.parquet")
    domain.write_text(json.dumps(dict(zip(schema.names, schema.sizes.tolist()))))
    stamp_path.write_text(json.dumps(stamp))
    return data, csv, domain


def run_mst(args: argparse.Namespace, schema: Schema, data: Path, csv: Path,
            domain: Path) -> dict[str, Any]:
    """MST on the code CSV (or its recorded row), measured under the memory watchdog."""
    key = cache_key("mst", f"{COLUMNS}-{args.rows}", args.epsilon, DELTA, args.seed)
    cached = load_cache(args.record).get(key)
    if cached and reusable(cached) and not args.rerun_peers:
        return cached
    row = run_peer(key, checkout=args.private_pgm.resolve(), python=args.peer_python,
                   options={}, data_csv=csv, domain_json=domain, work=args.work, frame=data,
                   schema=schema, q3_sample=args.q3_sample, timeout=args.peer_timeout,
                   versions=peer_versions(args.peer_python),
                   memory_limit_gib=args.memory_limit)
    append_cache(args.record, row)
    return row


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--work", type=Path, required=True,
                        help="where the inputs (kept for the next run) and the outputs go")
    parser.add_argument("--record", type=Path, required=True,
                        help="JSON lines to append every row to (MST's rows are reused from it "
                             "unless --rerun-peers)")
    parser.add_argument("--private-pgm", type=Path, help="checkout with mechanisms/mst.py")
    parser.add_argument("--peer-python", help="python of the peers' env (mbi==2.0.0)")
    parser.add_argument("--memory-limit", type=float, default=20.0,
                        help="GiB at which a run is stopped (default 20: this machine has 23.5)")
    parser.add_argument("--peer-timeout", type=float, default=None)
    parser.add_argument("--rerun-peers", action="store_true")
    parser.add_argument("--no-peer", action="store_true",
                        help="dp_dask only (MST's code CSV is not written)")
    parser.add_argument("--no-errors", action="store_true",
                        help="time and memory only: the errors are not computed (at 1 B rows "
                             "the evaluation reads 2 B rows)")
    parser.add_argument("--ours", default="marginals")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0, help="the releases' seed")
    parser.add_argument("--q3-sample", type=int, default=DEFAULT_Q3_SAMPLE)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = parse_args(argv)
    if not args.no_peer and not (args.private_pgm and args.peer_python):
        raise SystemExit("--private-pgm and --peer-python are needed to run MST (or --no-peer)")
    schema = table_schema(COLUMNS)
    args.work.mkdir(parents=True, exist_ok=True)
    data, csv, domain = generate(args.rows, args.work / "input", codes=not args.no_peer)
    rows = [] if args.no_peer else [run_mst(args, schema, data, csv, domain)]
    ours = run_ours(args.ours, columns=f"{COLUMNS}-{args.rows}", data=str(data),
                    epsilon=args.epsilon, delta=DELTA, seed=args.seed, work=args.work,
                    frame=data, schema=schema, q3_sample=args.q3_sample,
                    schema_argument=COLUMNS, scored=not args.no_errors)
    append_cache(args.record, ours)
    rows.append(ours)
    for row in rows:
        errors = row.get("errors", {})
        print(f"{row['release']}: {row['status']}, {row['wall_s']} s, "
              f"{row['peak_rss_mib'] / 1024:.2f} GiB, Q2 95 % "
              f"{errors.get('Q2', {}).get('avg95', '—')}")
    return rows


if __name__ == "__main__":
    main()
