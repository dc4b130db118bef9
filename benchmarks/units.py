"""What a privacy unit costs (issue 57): quality and time of person-level releases.

    python -m benchmarks.units --events 200000 --customers 40000 --workers 2

A generated event table: customers with skewed activity (most 1-5 events, a tail with hundreds:
1 + a Zipf draw, capped at 2,000), a customer-level segment and region, and per event a
category, an amount and a weekday whose distributions depend on the customer's activity (heavy
customers buy otherwise than light ones, so dropping their rows past K biases the release). The
default method at ε = 1 releases it row-level and with ``privacy_unit`` customer_id for each K;
each release is compared (Q1-Q3, dp_dask.evaluate) with the FULL event table, so the error holds
both the noise (growing with K) and the bias of the rows dropped (shrinking with K), and with
the bounded table it was fitted to (the same seed's bounding), which isolates the noise; and
with ``max_rows: auto`` (K chosen under DP, 5 % of the budget). The
bounding step (shuffle on the unit, keep K per unit) is timed on its own, beside reading and
counting the same table (after one warm-up count).

    python -m benchmarks.units --events 10000000 --customers 1000000 --scale 10

``--scale K`` measures size instead: the same generated table end to end through
``dp-dask synth --privacy-unit customer_id --max-rows-per-unit K`` and row-level on the
benchmark's own 2 workers (``--scheduler``), each worker's peak resident memory
(``ru_maxrss``, the workers restarted before each run) and the bounding step alone as above.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import dask.dataframe as dd
import numpy as np
import pandas as pd
from distributed import Client, LocalCluster

from dp_dask.cluster import compute
from dp_dask.data.counts import count_graph
from dp_dask.data.io import read_table
from dp_dask.data.schema import Schema
from dp_dask.data.units import PrivacyUnit, bound_contributions, unit_seed
from dp_dask.evaluate.queries import evaluate_release
from dp_dask.synthesizer import Synthesizer

KS = (1, 2, 5, 10, 50)
SCHEMA = Schema.from_json({"schema_version": 1, "name": "events", "attributes": [
    {"name": "segment", "type": "categorical", "categories": ["consumer", "business", "vip"]},
    {"name": "region", "type": "categorical", "categories": list("abcdefgh")},
    {"name": "category", "type": "categorical", "categories": [f"c{i}" for i in range(12)]},
    {"name": "amount", "type": "numeric", "edges": [0, 5, 10, 20, 50, 100, 200, 500, "inf"]},
    {"name": "weekday", "type": "categorical",
     "categories": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]},
]})


def event_table(events: int, customers: int, seed: int = 0) -> pd.DataFrame:
    """About ``events`` rows of ``customers`` customers (the module docstring)."""
    rng = np.random.default_rng(seed)
    activity = np.minimum(1 + rng.zipf(1.9, customers), 2_000)
    activity = np.maximum(1, np.round(activity * events / activity.sum())).astype(int)
    customer = np.repeat(np.arange(customers), activity)
    heavy = np.log1p(activity)[customer] / np.log1p(activity.max())  # in [0, 1]
    n = len(customer)
    segment = np.digitize(np.log1p(activity) + rng.normal(0, 0.5, customers), [1.5, 3.0])
    category = np.minimum(11, rng.poisson(2 + 8 * heavy)).astype(int)
    amount = np.exp(rng.normal(2.5 + 1.5 * heavy - 0.4 * (category % 3), 1.0))
    weekday = np.where(rng.random(n) < 0.3 + 0.4 * heavy, rng.integers(0, 5, n),
                       rng.integers(5, 7, n))
    labels = {a.name: list(a.labels) for a in SCHEMA.attributes if a.kind == "categorical"}
    # categoricals, not Python strings: 10 M rows of four text columns stay small
    return pd.DataFrame({
        "customer_id": customer.astype(np.int64),
        "segment": pd.Categorical.from_codes(segment[customer], labels["segment"]),
        "region": pd.Categorical.from_codes(rng.integers(0, 8, customers)[customer],
                                            labels["region"]),
        "category": pd.Categorical.from_codes(category, labels["category"]),
        "amount": amount,
        "weekday": pd.Categorical.from_codes(weekday, labels["weekday"]),
    }).sample(frac=1.0, random_state=seed).reset_index(drop=True)


def errors(records: pd.DataFrame) -> dict[str, float]:
    """Q1-Q3 mean error over the best 95 % of queries (β = 0.95), as the peers' tables."""
    chosen = records[np.isclose(records["beta"], 0.95)]
    return {w: round(float(chosen[chosen["workload"] == w]["average"].iloc[0]), 2)
            for w in ("Q1", "Q2", "Q3")}


def release(path: Path, k: int | str | None, epsilon: float, seed: int,
            out: Path) -> dict[str, Any]:
    unit = None if k is None else {"column": "customer_id", "max_rows": k}
    start = time.perf_counter()
    synthesizer = Synthesizer.create("marginals", SCHEMA, epsilon=epsilon, ledger=False,
                                     noise_sampler="numpy", noise_seed=seed, privacy_unit=unit)
    synthesizer.fit(str(path))
    written = synthesizer.write(out / f"k{k}", seed=seed)
    seconds = time.perf_counter() - start
    records, _ = evaluate_release(str(path), written["parquet"], SCHEMA, seed=0,
                                  method=f"k={k}")
    chosen = synthesizer.max_rows  # "auto": the K chosen under DP
    row = {"k": k or "row", "chosen_k": chosen, "epsilon": epsilon, "seed": seed,
           "released_rows": int(synthesizer.model.n_rows), "seconds": round(seconds, 1),
           "read_encode_count_s": round(synthesizer.timings_["read_encode_count"], 1),
           **errors(records)}
    if k is not None:  # the table the release was fitted to: the same seed's bounding
        bounded = out / f"bounded-{k}.parquet"
        bound_contributions(read_table(str(path), SCHEMA, extra=("customer_id",)), SCHEMA,
                            PrivacyUnit("customer_id", chosen), unit_seed(seed)
                            ).to_parquet(bounded)
        records, _ = evaluate_release(str(bounded), written["parquet"], SCHEMA, seed=0)
        row["vs_bounded"] = errors(records)
    return row


def bounding_time(path: Path, k: int) -> dict[str, float]:
    """Seconds to read and count the table, and to read, bound and count it."""
    times = {}
    compute(count_graph(read_table(str(path), SCHEMA), SCHEMA))  # warm-up
    for name, unit in (("count", None), ("bound_count", PrivacyUnit("customer_id", k))):
        start = time.perf_counter()
        ddf = read_table(str(path), SCHEMA, extra=() if unit is None else (unit.column,))
        if unit is not None:
            ddf = bound_contributions(ddf, SCHEMA, unit, 1)
        compute(count_graph(ddf, SCHEMA))
        times[f"{name}_s"] = round(time.perf_counter() - start, 2)
    return times


def peak_per_worker(client: Client) -> list[float]:
    """Each worker's peak resident memory since it started, in MiB (Linux: ru_maxrss KiB)."""
    peaks = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return [round(kib / 1024) for kib in peaks.values()]


def synth_run(path: Path, k: int | None, client: Client, out: Path) -> dict[str, Any]:
    """``dp-dask synth`` on the benchmark's workers, end to end: its summary's stage times and
    each worker's peak memory (the workers restarted first)."""
    client.restart()
    unit = [] if k is None else ["--privacy-unit", "customer_id", "--max-rows-per-unit", str(k)]
    schema, summary = out / "events.json", out / f"summary-{k}.json"
    schema.write_text(json.dumps(SCHEMA.to_json()))
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dp_dask.cli", "synth", "--data", str(path),
                    "--schema", str(schema), "--out", str(out / f"synth-{k}"), "--epsilon", "1",
                    "--noise-sampler", "numpy", "--noise-seed", "0", "--ledger",
                    str(out / "ledger.sqlite"), "--scheduler", client.scheduler.address,
                    "--quiet", "--summary", str(summary), *unit], check=True, env=os.environ)
    record = json.loads(summary.read_text())
    return {"k": k or "row", "seconds": round(time.perf_counter() - start, 1),
            "stages": record["stages"], "released_rows": record["release"]["rows"],
            "driver_peak_mib": round(record["peak_memory_bytes"]["driver"] / 2**20),
            "worker_peak_mib": peak_per_worker(client)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--customers", type=int, default=40_000)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--scale", type=int, metavar="K",
                        help="time and memory end to end at this K instead of quality per K")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/units.jsonl"))
    args = parser.parse_args()
    start = time.perf_counter()
    frame = event_table(args.events, args.customers, args.seed)
    rows_per = frame.groupby("customer_id").size()
    shape = {"events": len(frame), "customers": len(rows_per),
             "rows_per_customer": {q: int(rows_per.quantile(q)) for q in (0.5, 0.9, 0.99, 1.0)},
             "kept": {k: int(rows_per.clip(upper=k).sum()) for k in (*KS, args.scale or 1)},
             "load_average": os.getloadavg()}
    print(json.dumps(shape), f"generated in {time.perf_counter() - start:.1f} s", flush=True)
    with (tempfile.TemporaryDirectory() as tmp,
          LocalCluster(n_workers=args.workers, threads_per_worker=1) as cluster,
          Client(cluster) as client):
        path = Path(tmp) / "events.parquet"
        dd.from_pandas(frame, npartitions=max(8, len(frame) // 500_000)).to_parquet(path)
        del frame
        results = [{"table": shape, **bounding_time(path, args.scale or 10),
                    "worker_peak_mib": peak_per_worker(client)}]
        print(json.dumps(results[0]), flush=True)
        if args.scale:
            runs = [synth_run(path, k, client, Path(tmp)) for k in (args.scale, None)]
        else:
            runs = (release(path, k, args.epsilon, args.seed, Path(tmp))
                    for k in (None, *KS, "auto"))
        for row in runs:
            results.append({**row, "load_average": os.getloadavg()})
            print(json.dumps(results[-1]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as stream:
        for row in results:
            stream.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
