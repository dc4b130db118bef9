"""DPCopula on binned Adult over ε × k, Laplace and EFPA histograms, beside the default method.

    python -m benchmarks.dpcopula_sweep --columns all --seeds 3 --plot

Every release is fitted in this process (the synchronous path, as benchmarks.peers' own child
does), with seeded numpy noise at the calibrated scale (noise_seed = seed; a real release draws
OpenDP's noise), and n synthetic rows are drawn with the same seed. Metrics, against the raw data
(the data owner's evaluation, not DP):

* ``evaluate_release``'s Q1/Q2/Q3: the mean error over the best 95 % of queries and the max, and
  Q1 at β = 99 % (average, max: the Gaussian-copula paper's Table 5 numbers);
* the DPCopula papers' metric: relative error of 1,000 random range-count queries with sanity
  bound s = 1 (``dp_dask.evaluate.queries.range_query_errors``), mean and median, on all m
  attributes per query (predicates on every attribute, the papers' setting as we read it) and on 3.

DPCopula-Kendall and -MLE run for every k; ``marginals``, ``copula`` and ``copula`` with its
Laplace mechanism once per ε: k does not apply to them. The last is the Gaussian-copula paper's
dpc-Lap in its Table 5 setting, ε' = ε/m' over the m' = m + C(m,2) queries, δ = 0: asked with
δ = 1e-30, the Laplace plan's basic composition (ε/m', pure DP) beats advanced composition, so
that is what it uses (and records). The others get δ = 1e-9 (benchmarks.peers). Each result
is one JSON line in ``--cache`` keyed by (release, ε, k, seed), reused unless ``--rerun``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.paths import RESULTS_DIR
from benchmarks.peers import (
    DEFAULT_DATA,
    DELTA,
    error_summary,
    machine,
    plain_log_ticks,
    read_data,
    save_figure,
    table_schema,
)
from dp_dask.cluster import compute
from dp_dask.data.io import read_table
from dp_dask.data.schema import Schema
from dp_dask.evaluate.queries import (
    RangeQueries,
    evaluate_release,
    range_query_graph,
    range_query_workload,
    relative_errors,
)
from dp_dask.evaluate.tables import markdown_table
from dp_dask.synthesizer import Synthesizer

DEFAULT_OUT = RESULTS_DIR / "adult"
EPSILONS = (0.1, 0.5, 1.0, 2.0)
KS = (1.0, 4.0, 8.0, 16.0)
RANGE_QUERIES = 1_000
SANITY = 1.0
PLOT_K = 8.0
PLOT_EPSILON = 1.0

BASIC_DELTA = 1e-30  # small enough that the Laplace plan takes basic composition: δ = 0
# release name -> (method, options (δ if not DELTA), whether k applies)
RELEASES: dict[str, tuple[str, dict[str, Any], bool]] = {
    "DPCopula-Kendall, Laplace": ("dpcopula-kendall", {"histograms": "laplace"}, True),
    "DPCopula-Kendall, EFPA": ("dpcopula-kendall", {"histograms": "efpa"}, True),
    "DPCopula-MLE, Laplace": ("dpcopula-mle", {"histograms": "laplace"}, True),
    "DPCopula-MLE, EFPA": ("dpcopula-mle", {"histograms": "efpa"}, True),
    "dp_dask marginals": ("marginals", {}, False),
    "dp_dask copula": ("copula", {}, False),
    "dp_dask copula, Laplace (dpc-Lap)": ("copula", {"mechanism": "laplace",
                                                     "delta": BASIC_DELTA}, False),
}


def release(name: str, schema: Schema, frame: pd.DataFrame, epsilon: float, k: float | None,
            seed: int) -> pd.DataFrame:
    """One release's n synthetic rows (schema labels)."""
    method, options, uses_k = RELEASES[name]
    options = {**options, "k": k} if uses_k else dict(options)
    delta = options.pop("delta", DELTA)
    synthesizer = Synthesizer.create(method, schema, epsilon=epsilon, delta=delta,
                                     noise_sampler="numpy", noise_seed=seed, ledger=False,
                                     **options)
    return synthesizer.fit(frame).sample(len(frame), seed=seed).compute()


def range_answers(table: pd.DataFrame, schema: Schema, workload: RangeQueries) -> np.ndarray:
    """(Q + 1,): the workload's answers on ``table`` (read by ``schema``), then its rows."""
    (answers,) = compute(range_query_graph(read_table(table, schema), schema, workload))
    return answers


def measure(name: str, schema: Schema, frame: pd.DataFrame, epsilon: float, k: float | None,
            seed: int, workloads: dict[str, tuple[RangeQueries, np.ndarray]],
            q3_sample: int) -> dict[str, Any]:
    start = time.perf_counter()
    synthetic = release(name, schema, frame, epsilon, k, seed)
    seconds = time.perf_counter() - start
    records, _ = evaluate_release(frame, synthetic, schema, q3_sample=q3_sample, seed=0,
                                  method=name)
    q1 = records[(records["workload"] == "Q1") & np.isclose(records["beta"], 0.99)].iloc[0]
    row: dict[str, Any] = {
        "release": name, "epsilon": epsilon, "k": k, "seed": seed,
        "release_s": round(seconds, 2), "errors": error_summary(records),
        "q1_beta99": {"average": round(float(q1["average"]), 2),
                      "maximum": round(float(q1["maximum"]), 2)}}
    labels = schema.as_labels()
    for key, (workload, true) in workloads.items():
        released = range_answers(synthetic, labels, workload)
        errors = relative_errors(true[:-1], released[:-1], int(true[-1]), int(released[-1]),
                                 SANITY)
        row[key] = {"mean": round(float(errors.mean()), 4),
                    "median": round(float(np.median(errors)), 4)}
    return row


def cache_key(row: dict[str, Any]) -> tuple[str, float, float | None, int]:
    return (row["release"], float(row["epsilon"]),
            None if row["k"] is None else float(row["k"]), int(row["seed"]))


def load_cache(path: Path) -> dict[tuple, dict[str, Any]]:
    if not path.exists():
        return {}
    rows = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return {cache_key(row): row for row in rows}


def plan(epsilons: list[float], ks: list[float], seeds: int) -> list[tuple[str, float,
                                                                          float | None, int]]:
    """Every (release, ε, k, seed), seed outermost: a cut-short run has whole grids."""
    return [(name, epsilon, k if uses_k else None, seed)
            for seed in range(seeds) for epsilon in epsilons
            for name, (_, _, uses_k) in RELEASES.items()
            for k in (ks if uses_k else [None])]


def summary(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Mean over seeds per (release, ε, k)."""
    flat = []
    for row in rows:
        line = {"release": row["release"], "ε": row["epsilon"],
                "k": "—" if row["k"] is None else f"{row['k']:g}", "seed": row["seed"]}
        for workload in ("Q1", "Q2", "Q3"):
            line[f"{workload} 95 %"] = row["errors"][workload]["avg95"]
            line[f"{workload} max"] = row["errors"][workload]["max"]
        line["Q1 99 % avg"] = row["q1_beta99"]["average"]
        line["Q1 99 % max"] = row["q1_beta99"]["maximum"]
        for key, title in (("range_all", "range m"), ("range_3", "range 3")):
            line[f"{title} mean"] = row[key]["mean"]
            line[f"{title} median"] = row[key]["median"]
        line["release s"] = row["release_s"]
        flat.append(line)
    frame = pd.DataFrame(flat)
    order = {name: i for i, name in enumerate(RELEASES)}
    grouped = frame.groupby(["release", "ε", "k"], sort=False)
    table = grouped.mean(numeric_only=True).drop(columns="seed")
    table.insert(0, "seeds", grouped.size())
    table = table.reset_index()
    table["order"] = table["release"].map(order)
    table["k_value"] = pd.to_numeric(table["k"], errors="coerce")
    table = table.sort_values(["ε", "order", "k_value"]).drop(columns=["order", "k_value"])
    table["ε"] = table["ε"].map("{:g}".format)
    return table


def plot(table: pd.DataFrame, out: Path, title: str) -> Path:
    """Error vs ε per release at k = 8 (top), and vs k at ε = 1 (bottom): Q2 95 % and the
    range-query mean relative error on 3 attributes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = (("Q2 95 %", "Q2: mean error, best 95 % (counts)"),
               ("range 3 mean", "range queries, 3 attributes: mean rel. error"),
               ("range m mean", "range queries, all m attributes: mean rel. error"))
    fig, axes = plt.subplots(2, len(metrics), figsize=(15, 8))
    data = table.assign(eps=table["ε"].astype(float))
    for column, (metric, label) in enumerate(metrics):
        top, bottom = axes[0, column], axes[1, column]
        for name in RELEASES:
            rows = data[data["release"] == name]
            at_k = rows[rows["k"].isin(["—", f"{PLOT_K:g}"])].sort_values("eps")
            if not at_k.empty:
                top.plot(at_k["eps"], at_k[metric], "o-", label=name)
            vs_k = rows[(rows["eps"] == PLOT_EPSILON) & (rows["k"] != "—")]
            if not vs_k.empty:
                vs_k = vs_k.assign(kk=vs_k["k"].astype(float)).sort_values("kk")
                bottom.plot(vs_k["kk"], vs_k[metric], "o-", label=name)
            elif not rows[rows["eps"] == PLOT_EPSILON].empty:  # k does not apply: a level
                bottom.axhline(float(rows[rows["eps"] == PLOT_EPSILON][metric].iloc[0]),
                               linestyle="--", color=f"C{list(RELEASES).index(name)}",
                               label=name)
        top.set(xscale="log", yscale="log", xlabel="ε", title=f"{label}\nk = {PLOT_K:g}")
        bottom.set(xscale="log", yscale="log", xlabel="k = ε1/ε2",
                   title=f"{label}\nε = {PLOT_EPSILON:g}")
        plain_log_ticks(top, sorted(data["eps"].unique()))
        plain_log_ticks(bottom, KS)
    axes[0, 0].legend(fontsize=7)
    return save_figure(fig, title, out, dpi=100)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--columns", default="all", help="Adult's attribute set: all or "
                                                         "categorical (benchmarks.peers)")
    parser.add_argument("--epsilons", type=float, nargs="+", default=list(EPSILONS))
    parser.add_argument("--ks", type=float, nargs="+", default=list(KS))
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1")
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--cache", type=Path, default=None,
                        help="JSON lines of results (default: OUT/dpcopula-sweep.jsonl)")
    parser.add_argument("--rerun", action="store_true", help="ignore cached rows")
    parser.add_argument("--q3-sample", type=int, default=100_000)
    parser.add_argument("--plot", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    args = parse_args(argv)
    schema = table_schema(args.columns)
    frame = read_data(args.data)
    cache_path = args.cache or args.out / "dpcopula-sweep.jsonl"
    cache = {} if args.rerun else load_cache(cache_path)
    workloads = {}
    for key, attributes in (("range_all", None), ("range_3", 3)):
        workload = range_query_workload(schema, RANGE_QUERIES, attributes, seed=0)
        workloads[key] = (workload, range_answers(frame, schema, workload))
    rows = []
    started = time.perf_counter()
    for name, epsilon, k, seed in plan(args.epsilons, args.ks, args.seeds):
        key = (name, float(epsilon), k, seed)
        if key not in cache:
            row = measure(name, schema, frame, epsilon, k, seed, workloads, args.q3_sample)
            row.update(columns=args.columns, machine=machine())
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            with cache_path.open("a") as out:
                out.write(json.dumps(row, sort_keys=True) + "\n")
            cache[key] = row
            print(f"{name}, ε = {epsilon:g}, k = {k}, seed {seed}: "
                  f"Q2 {row['errors']['Q2']['avg95']}, range3 {row['range_3']['mean']} "
                  f"({time.perf_counter() - started:.0f} s)", flush=True)
        rows.append(cache[key])
    table = summary(rows)
    title = (f"Adult, {args.columns} attributes (m = {schema.m}), {len(frame):,} rows, "
             f"seeds 0-{args.seeds - 1} (mean), numpy noise at the calibrated scale")
    text = markdown_table(table, "{:.3g}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "dpcopula-sweep.md").write_text(f"{title}\n\n{text}\n")
    print(f"\n{title}\n\n{text}\nwall {time.perf_counter() - started:.0f} s")
    if args.plot:
        print(plot(table, args.out / "dpcopula-sweep.png", title))
    return table


if __name__ == "__main__":
    main()
