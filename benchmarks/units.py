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
counting the same table (after one warm-up count), each on fresh workers with their peak memory.

    python -m benchmarks.units --events 10000000 --customers 1000000 --scale 10

``--scale K`` measures size instead: the same generated table end to end through
``dp-dask synth --privacy-unit customer_id --max-rows-per-unit K`` and row-level on
``--workers`` workers the benchmark starts (``--scheduler``), each worker's peak resident memory
(sampled every 0.5 s, fresh workers for each run) and the bounding step alone as above; with
``--bounding-only`` the bounding step alone (e.g. ``--events 100000000 --chunks 10``).

    python -m benchmarks.units --adult-households 3

Adult (32,561 rows) with a synthetic household id: the rows in a seeded random order (seed 57,
independent of their values) cut into households of 1-6 rows (sizes uniform), released at
ε = 1 row-level and with ``privacy_unit`` household for K = 1, 2, 5, each with that many noise
seeds (Q1-Q3 against the full table and the bounded one, as above).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from distributed import Client, LocalCluster

from benchmarks.paths import ADULT_CSV
from dp_dask.cluster import compute
from dp_dask.data.counts import count_graph
from dp_dask.data.io import read_table
from dp_dask.data.schema import Schema, load_schema
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


def households(rows: int, seed: int = 57) -> np.ndarray:
    """A household id per row: rows in a seeded random order cut into households of 1-6."""
    sizes = np.random.default_rng(seed).integers(1, 7, rows)  # more than enough households
    ids = np.repeat(np.arange(rows), sizes)[:rows]
    return ids[np.random.default_rng(seed + 1).permutation(rows)]


def release(path: Path, k: int | str | None, epsilon: float, seed: int,
            out: Path, schema: Schema = SCHEMA, column: str = "customer_id") -> dict[str, Any]:
    unit = None if k is None else {"column": column, "max_rows": k}
    start = time.perf_counter()
    # row-shaped under a unit too (unit_shape False): the cost of K on the rows' errors
    synthesizer = Synthesizer.create("marginals", schema, epsilon=epsilon, ledger=False,
                                     noise_sampler="numpy", noise_seed=seed, privacy_unit=unit,
                                     unit_shape=False)
    synthesizer.fit(str(path))
    written = synthesizer.write(out / f"k{k}-{seed}", seed=seed)
    seconds = time.perf_counter() - start
    records, _ = evaluate_release(str(path), written["parquet"], schema, seed=0,
                                  method=f"k={k}")
    chosen = synthesizer.max_rows_  # the K the fit bounded to ("auto": chosen under DP)
    row = {"k": k or "row", "chosen_k": chosen, "epsilon": epsilon, "seed": seed,
           "released_rows": int(synthesizer.model.n_rows), "seconds": round(seconds, 1),
           "read_encode_count_s": round(synthesizer.timings_["read_encode_count"], 1),
           **errors(records)}
    if k is not None:  # the table the release was fitted to: the same seed's bounding
        bounded = out / f"bounded-{k}-{seed}.parquet"
        bound_contributions(read_table(str(path), schema, extra=(column,)), schema,
                            PrivacyUnit(column, chosen), unit_seed(seed)
                            ).to_parquet(bounded)
        records, _ = evaluate_release(str(bounded), written["parquet"], schema, seed=0)
        row["vs_bounded"] = errors(records)
    return row


def bounding_time(path: Path, k: int, workers: int) -> dict[str, Any]:
    """Seconds to read and count the table, and to read, bound (K = ``k``) and count it, each
    on ``workers`` fresh workers (after one warm-up count there: the file in the page cache),
    and each worker's peak memory in MiB (:func:`peak_per_worker`)."""
    times: dict[str, Any] = {}
    for name, unit in (("count", None), ("bound_count", PrivacyUnit("customer_id", k))):
        with (LocalCluster(n_workers=workers, threads_per_worker=1) as cluster,
              Client(cluster) as client):
            compute(count_graph(read_table(str(path), SCHEMA), SCHEMA))  # warm-up
            start = time.perf_counter()
            ddf = read_table(str(path), SCHEMA, extra=() if unit is None else (unit.column,))
            if unit is not None:
                ddf = bound_contributions(ddf, SCHEMA, unit, 1)
            compute(count_graph(ddf, SCHEMA))
            times[f"{name}_s"] = round(time.perf_counter() - start, 2)
            times[f"{name}_worker_peak_mib"] = peak_per_worker(client)
    return times


def write_events(path: Path, events: int, customers: int, seed: int, chunks: int,
                 ks: tuple[int, ...]) -> dict[str, Any]:
    """The event table as Parquet under ``path`` (``chunks`` parts of seeds seed + i, customers
    numbered apart, about 500 k rows a partition), and its shape."""
    sizes = []
    for i in range(chunks):
        frame = event_table(events // chunks, customers // chunks, seed + i)
        frame["customer_id"] += i * (customers // chunks)
        sizes.append(frame.groupby("customer_id").size())
        path.mkdir(exist_ok=True)
        cuts = np.linspace(0, len(frame), max(8, len(frame) // 500_000) + 1).astype(int)
        for n, (a, b) in enumerate(zip(cuts, cuts[1:])):
            frame.iloc[a:b].to_parquet(path / f"part.{i}.{n}.parquet", index=False)
    rows_per = pd.concat(sizes)
    return {"events": int(rows_per.sum()), "customers": len(rows_per),
            "rows_per_customer": {q: int(rows_per.quantile(q)) for q in (0.5, 0.9, 0.99, 1.0)},
            "kept": {k: int(rows_per.clip(upper=k).sum()) for k in ks},
            "load_average": os.getloadavg()}


def peak_per_worker(client: Client) -> list[float]:
    """Each worker's peak resident memory since it started, in MiB: the largest of its system
    monitor's samples (every 0.5 s), not ru_maxrss, which a spawned worker inherits from the
    process that forked it (Linux keeps it across exec)."""
    peaks = client.run(lambda dask_worker: max(dask_worker.monitor.quantities["memory"]))
    return [round(rss / 2**20) for rss in peaks.values()]


def synth_run(path: Path, k: int | None, workers: int, out: Path) -> dict[str, Any]:
    """``dp-dask synth`` on fresh workers of the benchmark's own, end to end: its summary's
    stage times and each worker's peak memory."""
    # the row-shaped release under a unit (what docs/results-units measured), not the
    # unit-shaped default (issue 67), whose cost benchmarks/units_shape.py measures
    unit = [] if k is None else ["--privacy-unit", "customer_id", "--max-rows-per-unit", str(k),
                                 "--method-options", '{"unit_shape": false}']
    schema, summary = out / "events.json", out / f"summary-{k}.json"
    schema.write_text(json.dumps(SCHEMA.to_json()))
    with (LocalCluster(n_workers=workers, threads_per_worker=1) as cluster,
          Client(cluster) as client):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "dp_dask.cli", "synth", "--data", str(path),
                        "--schema", str(schema), "--out", str(out / f"synth-{k}"),
                        "--epsilon", "1", "--noise-sampler", "numpy", "--noise-seed", "0",
                        "--ledger", str(out / "ledger.sqlite"), "--scheduler",
                        cluster.scheduler_address, "--quiet", "--summary", str(summary), *unit],
                       check=True, env=os.environ)
        seconds = time.perf_counter() - start
        peaks = peak_per_worker(client)
    record = json.loads(summary.read_text())
    return {"k": k or "row", "seconds": round(seconds, 1), "stages": record["stages"],
            "released_rows": record["release"]["rows"],
            "worker_peak_mib": peaks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--customers", type=int, default=40_000)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--scale", type=int, metavar="K",
                        help="time and memory end to end at this K instead of quality per K")
    parser.add_argument("--chunks", type=int, default=1,
                        help="generate the table in this many independent parts of "
                             "events/chunks rows (customers apart): 100 M events in memory")
    parser.add_argument("--bounded-only", action="store_true",
                        help="with --scale: only the release at K, end to end")
    parser.add_argument("--bounding-only", action="store_true",
                        help="with --scale: only the bounding pass beside reading and "
                             "counting (100 M events), no release")
    parser.add_argument("--adult-households", type=int, metavar="SEEDS",
                        help="Adult with a synthetic household id instead, this many seeds")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/units.jsonl"))
    args = parser.parse_args()
    if args.adult_households:
        return adult_households(args)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "events.parquet"
        start = time.perf_counter()
        shape = write_events(path, args.events, args.customers, args.seed, args.chunks,
                             (*KS, args.scale or 1))
        print(json.dumps(shape), f"written in {time.perf_counter() - start:.1f} s", flush=True)
        results = [{"table": shape}]
        if not args.bounded_only:  # the bounding pass alone, beside reading and counting
            results[0].update(bounding_time(path, args.scale or 10, args.workers))
            print(json.dumps(results[0]), flush=True)
        if not args.scale:
            with (LocalCluster(n_workers=args.workers, threads_per_worker=1) as cluster,
                  Client(cluster)):
                for k in (None, *KS, "auto"):
                    results.append(release(path, k, args.epsilon, args.seed, Path(tmp)))
                    print(json.dumps(results[-1]), flush=True)
        releases = (() if not args.scale or args.bounding_only
                    else (args.scale, *([] if args.bounded_only else [None])))
        for k in releases:
            results.append({**synth_run(path, k, args.workers, Path(tmp)),
                            "load_average": os.getloadavg()})
            print(json.dumps(results[-1]), flush=True)
    append(args.out, results)


def append(out: Path, results: list[dict[str, Any]]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a") as stream:
        for row in results:
            stream.write(json.dumps(row) + "\n")


def adult_households(args: argparse.Namespace) -> None:
    """Adult row-level and by household, K = 1, 2, 5 (the module docstring)."""
    frame = pd.read_csv(ADULT_CSV, skipinitialspace=True)
    frame["household"] = households(len(frame))
    results: list[dict[str, Any]] = [{"table": "adult-households", "rows": len(frame),
                                      "households": int(frame["household"].nunique()),
                                      "load_average": os.getloadavg()}]
    with (tempfile.TemporaryDirectory() as tmp,
          LocalCluster(n_workers=args.workers, threads_per_worker=1) as cluster,
          Client(cluster)):
        path = Path(tmp) / "adult.parquet"
        frame.to_parquet(path)
        for k in (None, 1, 2, 5):
            for seed in range(args.adult_households):
                results.append(release(path, k, args.epsilon, seed, Path(tmp),
                                       load_schema("adult"), "household"))
                print(json.dumps(results[-1]), flush=True)
    append(args.out, results)


if __name__ == "__main__":
    main()
