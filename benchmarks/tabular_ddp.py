"""Tabular-DDP vs Laplace: L2 error of all column histograms (docs/results-tabular-ddp.md).

As the paper's evaluation: ε ∈ {0.1, 1, 10}, k ∈ {5, 10, 15}, 100 trials of noise each, on Adult
and on a generated survey of 120 questions. Exact counts are computed once per dataset; a trial
redraws only the histograms' noise. Tabular-DDP's network comes from our DP noisy 2-way tables
(``--share`` of ε, default 0.2, learned once per (dataset, k, ε); the histograms get the rest),
so both mechanisms spend the same total ε. Seeded numpy noise: an evaluation on public data,
not a release.

Run: python -m benchmarks.tabular_ddp [--adult PATH] [--trials 100] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.paths import ADULT_CSV, RESULTS_DIR
from dp_dask.cluster import compute
from dp_dask.data.counts import count_graph, exact_answer
from dp_dask.data.io import read_table
from dp_dask.data.schema import Schema, load_schema
from dp_dask.network import chunks, network_from_tables
from dp_dask.stats import add_noise, measure_tables, plan_chunks, table_views

EPSILONS = (0.1, 1.0, 10.0)
KS = (5, 10, 15)
SURVEY_QUESTIONS, SURVEY_FACTORS, SURVEY_ROWS = 120, 12, 20_000


def survey(seed: int = 0) -> tuple[pd.DataFrame, Schema]:
    """120 Likert-like questions (2-5 answers) driven by 12 latent factors, 10 questions each."""
    rng = np.random.default_rng(seed)
    factors = rng.standard_normal((SURVEY_ROWS, SURVEY_FACTORS))
    columns, attributes = {}, []
    for q in range(SURVEY_QUESTIONS):
        levels = 2 + q % 4
        loading = rng.uniform(0.3, 0.9)
        latent = loading * factors[:, q // 10] + math.sqrt(1 - loading**2) * rng.standard_normal(
            SURVEY_ROWS)
        cuts = np.sort(rng.normal(0, 0.6, levels - 1))
        answers = [str(v) for v in range(1, levels + 1)]
        columns[f"q{q:03d}"] = np.array(answers)[np.digitize(latent, cuts)]
        attributes.append({"name": f"q{q:03d}", "type": "categorical", "categories": answers})
    return pd.DataFrame(columns), load_schema({"schema_version": 1, "name": "survey",
                                               "attributes": attributes})


def histograms_and_tables(counts: np.ndarray, schema: Schema,
                          views: list[tuple[int, ...]]) -> list[np.ndarray]:
    return [exact_answer(counts, schema, view) for view in views]


def evaluate(name: str, counts: np.ndarray, schema: Schema, trials: int, share: float,
             seed: int) -> list[dict]:
    exact = histograms_and_tables(counts, schema, [(a,) for a in range(schema.m)])
    flat = np.concatenate(exact)
    n_rows = int(exact[0].sum())
    rows = []
    for epsilon in EPSILONS:
        for k in (None, *KS):  # None: the Laplace baseline (no chunks)
            rng = np.random.default_rng([seed, int(epsilon * 10), k or 0])
            timings = {}
            if k is None:
                started = time.perf_counter()
                plan = plan_chunks(schema, epsilon, "laplace")
                timings["sensitivity"] = time.perf_counter() - started
                mechanism, network = "laplace", None
            else:
                column_chunks = chunks(schema.m, k)
                views = table_views(schema, column_chunks)
                started = time.perf_counter()
                measurements = measure_tables(histograms_and_tables(counts, schema, views),
                                              views, share * epsilon, sampler="numpy", rng=rng)
                network = network_from_tables(measurements, schema, n_rows, column_chunks)
                timings["network"] = time.perf_counter() - started
                started = time.perf_counter()
                plan = plan_chunks(schema, (1 - share) * epsilon, "tabular-ddp", k=k,
                                   network=network)
                timings["sensitivity"] = time.perf_counter() - started
                mechanism = "tabular-ddp"
            errors, noise_seconds = [], []
            for _ in range(trials):
                started = time.perf_counter()
                noisy = add_noise(exact, plan, sampler="numpy", rng=rng)
                noise_seconds.append(time.perf_counter() - started)
                errors.append(float(np.linalg.norm(np.concatenate(noisy) - flat)))
            timings["noise"] = float(np.median(noise_seconds))
            rows.append({"dataset": name, "m": schema.m, "n": n_rows, "epsilon": epsilon,
                         "mechanism": mechanism, "k": k, "l2_mean": float(np.mean(errors)),
                         "l2_std": float(np.std(errors)),
                         "fallback_chunks": sum(c.fallback for c in plan),
                         "chunks": len(plan),
                         "ds": [c.dependent_sensitivity for c in plan] if k else None,
                         "seconds": timings})
            print(json.dumps({key: rows[-1][key] for key in
                              ("dataset", "epsilon", "mechanism", "k", "l2_mean",
                               "fallback_chunks", "chunks")}), flush=True)
    return rows


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["dataset"] for r in rows))
    figure, axes = plt.subplots(1, len(names), figsize=(5.5 * len(names), 4))
    for axis, name in zip(np.atleast_1d(axes), names):
        mine = [r for r in rows if r["dataset"] == name]
        for k in (None, *KS):
            line = [r for r in mine if r["k"] == k]
            label = "Laplace (2m/ε)" if k is None else f"Tabular-DDP k={k}"
            axis.errorbar([r["epsilon"] for r in line], [r["l2_mean"] for r in line],
                          yerr=[r["l2_std"] for r in line], marker="o", label=label,
                          linestyle="-" if k is None else "--", capsize=3)
        axis.set(xscale="log", yscale="log", xlabel="ε", title=f"{name} (m={mine[0]['m']})",
                 ylabel="L2 error of all column histograms")
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adult", type=Path, default=ADULT_CSV)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--share", type=float, default=0.2,
                        help="share of ε spent on the noisy tables the network is learned from")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args()
    rows, count_seconds = [], {}
    adult = load_schema("adult")
    frame, schema = survey(args.seed)
    for name, source, sch in (("Adult", args.adult, adult), ("survey", frame, schema)):
        started = time.perf_counter()
        (counts,) = compute(count_graph(read_table(source, sch), sch))
        count_seconds[name] = time.perf_counter() - started
        rows += evaluate(name, counts, sch, args.trials, args.share, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results-tabular-ddp.json").write_text(json.dumps(
        {"share": args.share, "trials": args.trials, "count_seconds": count_seconds,
         "rows": rows}, indent=1))
    plot(rows, args.out / "results-tabular-ddp.png")


if __name__ == "__main__":
    main()
