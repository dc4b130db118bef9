"""From a raw typed table to a release, with no hand-written schema (docs/from-raw.md).

For each table of :mod:`benchmarks.raw_tables`, path and seed, the user's two commands:

    dp-dask schema draft T.parquet --out S.json --dp-epsilon 0.1 --dp-delta 1e-9
        --public-types [--public CB]
    dp-dask synth --data T.parquet --schema S.json --epsilon 0.9 --out R

(ε = 1 in total), ``naive`` with no public information, ``informed`` with the table's public
codebook of ranges. The tables' Parquet schemas are written by :mod:`benchmarks.raw_tables`, a
fixed pipeline, so they are declared public (``--public-types``; the measured numbers of
docs/from-raw.md were taken so, when it was the default). Scored against the raw table: per
numeric column the Kolmogorov–Smirnov statistic and Wasserstein-1 distance (scipy), the share of
released values outside the real column's range and outside its documented plausible range;
whether each column's Arrow type equals the input's; Q1–Q3 on the draft's bins
(dp_dask.evaluate.compare_release). Noise: numpy, seeded (``--noise-seed``) so every number can
be reproduced; not a private release.

Run: python -m benchmarks.from_raw [--tables adult demo flights] [--rows 300000] [--seeds 3]
     python -m benchmarks.from_raw --report   (the table of docs/from-raw.md from the JSONL)
Compares with the raw data: an evaluation for the data owner, not differentially private.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from scipy.stats import ks_2samp, wasserstein_distance

from benchmarks.paths import RESULTS_DIR
from benchmarks.raw_tables import PLAUSIBLE, TABLES, write_table

DRAFT_EPSILON, RELEASE_EPSILON, DELTA = 0.1, 0.9, 1e-9
PATHS = ("naive", "informed")


def _cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "dp_dask.cli", *args, "--quiet"], check=True,
                   stdout=subprocess.DEVNULL)


def release(data: Path, work: Path, path: str, seed: int, workers: int) -> tuple[Path, Path]:
    """Draft the schema and release under ``path``; the schema and release paths."""
    schema, out = work / f"{path}-{seed}.schema.json", work / f"{path}-{seed}"
    public = ["--public", str(data.with_suffix(".codebook.json"))] if path == "informed" else []
    noise = ["--noise-sampler", "numpy", "--noise-seed", str(seed), "--ledger",
             str(work / "ledger.sqlite")]
    _cli("schema", "draft", str(data), "--out", str(schema), "--force", "--dp-epsilon",
         str(DRAFT_EPSILON), "--dp-delta", str(DELTA), "--public-types", *public, *noise)
    _cli("synth", "--data", str(data), "--schema", str(schema), "--epsilon",
         str(RELEASE_EPSILON), "--delta", str(DELTA), "--out", str(out), "--seed", str(seed),
         "--workers", str(workers), *noise)
    return schema, out


def _numbers(column: pd.Series) -> np.ndarray | None:
    if pd.api.types.is_datetime64_any_dtype(column):
        return column.dropna().astype("int64").to_numpy() / 86_400e9  # days
    if pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column):
        return pd.to_numeric(column, errors="coerce").dropna().to_numpy(dtype=float)
    return None


def score(table: str, data: Path, schema: Path, out: Path) -> dict[str, Any]:
    """The release's column scores against the raw table (see the module docstring)."""
    from dp_dask.data.schema import load_schema
    from dp_dask.evaluate.queries import compare_release

    real_table = pq.read_table(data)
    released_table = pq.read_table(out / "synthetic.parquet")
    real, synthetic = real_table.to_pandas(), released_table.to_pandas()
    types = {f.name: str(f.type) for f in released_table.schema}
    columns: dict[str, Any] = {}
    for field in real_table.schema:
        name = field.name
        entry: dict[str, Any] = {"input_type": str(field.type), "release_type": types.get(name),
                                 "same_type": types.get(name) == str(field.type)}
        a = _numbers(real[name])
        b = None if name not in synthetic else _numbers(synthetic[name])
        if a is not None and b is not None and len(a) and len(b):
            low, high = PLAUSIBLE[table].get(name, (-np.inf, np.inf))
            entry |= {"ks": float(ks_2samp(a, b).statistic),
                      "w1": float(wasserstein_distance(a, b)),
                      "outside_real": float(np.mean((b < a.min()) | (b > a.max()))),
                      "outside_plausible": float(np.mean((b < low) | (b > high)))}
        columns[name] = entry
    queries: dict[str, float] = {}
    try:
        records = compare_release(data, out, load_schema(schema)).records
        at_95 = records[records["beta"] == 0.95].set_index("workload")["average"]
        queries = {q: float(at_95[q]) for q in ("Q1", "Q2", "Q3") if q in at_95}
    except Exception as exc:  # a draft whose labels the scorer cannot bin: reported, not fatal
        queries = {"error": f"{type(exc).__name__}: {exc}"[:200]}
    ks = [c["ks"] for c in columns.values() if "ks" in c]
    return {"columns": columns, "mean_ks": float(np.mean(ks)) if ks else None,
            "same_types": sum(c["same_type"] for c in columns.values()),
            "n_columns": len(columns),
            "max_outside_plausible": max((c.get("outside_plausible", 0.0)
                                          for c in columns.values()), default=0.0),
            "queries": queries}


def report(path: Path) -> str:
    """The markdown table of docs/from-raw.md from the JSONL: per table and path, means over
    seeds (per numeric column KS, then their mean; outside ranges: the worst column)."""
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    lines = ["| table | path | seeds | mean KS | worst column KS | outside real range (worst "
             "column) | outside plausible range | Arrow types equal | Q1 | Q2 | Q3 | s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    keys = dict.fromkeys((r["table"], r["path"]) for r in records)
    for table, kind in keys:
        runs = [r for r in records if (r["table"], r["path"]) == (table, kind)]
        columns = [{c: v for c, v in r["columns"].items() if "ks" in v} for r in runs]
        ks = {c: np.mean([cs[c]["ks"] for cs in columns]) for c in columns[0]}
        worst = max(ks, key=ks.get)
        outside = max((np.mean([cs[c]["outside_real"] for cs in columns]), c) for c in ks)
        plausible = max(np.mean([cs[c]["outside_plausible"] for cs in columns]) for c in ks)
        q = {k: np.mean([r["queries"].get(k, np.nan) for r in runs]) for k in ("Q1", "Q2", "Q3")}
        lines.append(
            f"| {table} | {kind} | {len(runs)} | {np.mean(list(ks.values())):.3f} | "
            f"{ks[worst]:.3f} ({worst}) | {outside[0]:.2%} ({outside[1]}) | {plausible:.2%} | "
            f"{min(r['same_types'] for r in runs)} / {runs[0]['n_columns']} | {q['Q1']:.1f} | "
            f"{q['Q2']:.2f} | {q['Q3']:.2f} | {np.mean([r['seconds'] for r in runs]):.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", nargs="+", choices=TABLES, default=list(TABLES))
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    parser.add_argument("--rows", type=int, default=300_000, help="demo/flights rows")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "from_raw.jsonl")
    parser.add_argument("--report", action="store_true", help="print the table of --out")
    args = parser.parse_args(argv)
    if args.report:
        print(report(args.out))
        return
    with tempfile.TemporaryDirectory() as tmp, args.out.open("a") as log:
        work = Path(tmp)
        for table in args.tables:
            data = write_table(table, work / table, args.rows)
            for path in args.paths:
                for seed in range(args.seeds):
                    start = time.perf_counter()
                    schema, out = release(data, work / table, path, seed, args.workers)
                    record = {"table": table, "path": path, "seed": seed,
                              "rows": pq.read_metadata(data).num_rows,
                              "seconds": round(time.perf_counter() - start, 1),
                              **score(table, data, schema, out)}
                    log.write(json.dumps(record) + "\n")
                    log.flush()
                    print(table, path, seed, record["seconds"], "s, mean KS",
                          record["mean_ks"], "types", record["same_types"], "/",
                          record["n_columns"], record["queries"], flush=True)


if __name__ == "__main__":
    main()
