"""Numeric values of a release against the raw columns: midpoint, uniform within the bins, and
the fine grids (docs/results-adult.md, "Numeric values").

For each dataset (UCI Adult with the ``adult`` schema; the generated demo census with ``demo``),
ε and seed: one marginals fit with the schema's fine grids (``fine_share`` of ρ to them), its
codes decoded three ways (midpoint, uniform within the bins, fine grid: the same codes, the same
value seed), and one fit without the fine grids (all of ρ to the 1-/2-way measurements). Per
numeric column the Kolmogorov–Smirnov statistic and the Wasserstein-1 distance to the real column
(scipy), and range queries as a fraction of rows: 1,000 random intervals over one numeric column,
and 1,000 over two numeric columns with one categorical value; the coarse (α, β) errors Q1–Q3 of
both fits (dp_dask.evaluate.compare_release). Noise: numpy, seeded (``noise_seed``), so every
number here can be reproduced; not a private release.

Run: python -m benchmarks.values [--datasets adult demo] [--epsilons 0.5 1 2] [--seeds 3]
     python -m benchmarks.values --report   (the tables and plots from the JSONL)
Compares with the raw data: an evaluation for the data owner, not differentially private.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from dask.distributed import Client, LocalCluster
from scipy.stats import ks_2samp, wasserstein_distance

from benchmarks.paths import ADULT_CSV, RESULTS_DIR
from dp_dask.data.demo import generate_census
from dp_dask.data.dtypes import float_ranges
from dp_dask.data.schema import Schema, load_schema
from dp_dask.data.values import decode_frame
from dp_dask.evaluate.queries import compare_release
from dp_dask.methods.marginals import FINE_SHARE
from dp_dask.privacy.labels import OWNER_ONLY
from dp_dask.synthesizer import Synthesizer

RESULTS = RESULTS_DIR / "adult" / "values.jsonl"
PLOTS = RESULTS_DIR / "adult"
DECODINGS = ("midpoint", "uniform", "fine")
QUERIES = 1_000
DEMO_ROWS = 200_000


def without_fine(schema: Schema) -> Schema:
    """The schema with its fine grids left out: the fit that spends all of ρ on the bins."""
    return replace(schema, attributes=tuple(replace(a, fine=()) for a in schema.attributes))


def numeric_columns(schema: Schema) -> list[str]:
    return [a.name for a in schema.attributes if a.kind == "numeric"]


def real_frame(dataset: str, schema: Schema) -> pd.DataFrame:
    if dataset == "adult":
        return pd.read_csv(ADULT_CSV)
    return generate_census(DEMO_ROWS, seed=0).compute()


def decoded(codes: np.ndarray, schema: Schema, fine: dict[int, np.ndarray],
            seed: int) -> dict[str, pd.DataFrame]:
    """The same codes decoded three ways, from the same value seed."""
    child = np.random.SeedSequence(seed)
    return {"midpoint": decode_frame(codes, schema, "midpoint", child),
            "uniform": decode_frame(codes, schema, "uniform", child),
            "fine": decode_frame(codes, schema, "uniform", child, fine)}


def public_span(schema: Schema, name: str) -> tuple[float, float]:
    """Where the random intervals fall: the column's bins closed by their public bounds."""
    attribute = schema[name]
    low, high = float_ranges(attribute.edges, attribute.minimum, attribute.maximum)
    return float(low[0]), float(max(high[-1], low[-1] + 1))


def range_workloads(schema: Schema, seed: int) -> dict[str, list[dict]]:
    """1,000 intervals over one numeric column; 1,000 over two plus one categorical value.
    Drawn from the public schema and a fixed seed: the same queries for every release."""
    rng = np.random.default_rng(seed)
    numeric = numeric_columns(schema)
    categorical = [a for a in schema.attributes if a.kind == "categorical"]

    def interval(name: str) -> tuple[str, float, float]:
        low, high = public_span(schema, name)
        a, b = np.sort(rng.uniform(low, high, 2))
        return name, float(a), float(b)

    one = [{"ranges": [interval(str(rng.choice(numeric)))]} for _ in range(QUERIES)]
    two = []
    for _ in range(QUERIES):
        pair = rng.choice(numeric, 2, replace=False)
        attribute = categorical[rng.integers(len(categorical))]
        two.append({"ranges": [interval(str(c)) for c in pair],
                    "category": (attribute.name, str(rng.choice(attribute.categories)))})
    return {"range1": one, "range2+cat": two}


def answers(frame: pd.DataFrame, queries: list[dict]) -> np.ndarray:
    """Each query's fraction of rows (a null is in no interval)."""
    numbers = {name: pd.to_numeric(frame[name], errors="coerce").to_numpy(dtype=float,
                                                                          na_value=np.nan)
               for name in {r[0] for q in queries for r in q["ranges"]}}
    result = np.empty(len(queries))
    for k, query in enumerate(queries):
        mask = np.ones(len(frame), dtype=bool)
        for name, a, b in query["ranges"]:
            mask &= (numbers[name] >= a) & (numbers[name] < b)
        if "category" in query:
            name, value = query["category"]
            mask &= frame[name].astype(str).to_numpy() == value
        result[k] = mask.mean()
    return result


def value_metrics(real: pd.DataFrame, synthetic: pd.DataFrame, schema: Schema,
                  workloads: dict[str, list[dict]], true: dict[str, np.ndarray]) -> dict:
    metrics: dict[str, float] = {}
    for name in numeric_columns(schema):
        x = pd.to_numeric(real[name], errors="coerce").dropna().to_numpy(dtype=float)
        y = pd.to_numeric(synthetic[name], errors="coerce").dropna().to_numpy(dtype=float)
        metrics[f"ks {name}"] = float(ks_2samp(x, y).statistic)
        metrics[f"w1 {name}"] = float(wasserstein_distance(x, y))
    for workload, queries in workloads.items():
        errors = np.abs(answers(synthetic, queries) - true[workload])
        metrics[f"{workload} mean"] = float(errors.mean())
        metrics[f"{workload} 95%"] = float(np.quantile(errors, 0.95))
    return metrics


def coarse_errors(real: pd.DataFrame, synthetic: pd.DataFrame, schema: Schema) -> dict:
    """Q1–Q3 at β = 95 % (average over the best 95 % of queries), on the bins."""
    records = compare_release(real, synthetic, schema).records
    kept = records[(records["beta"] == 0.95) & records["workload"].isin(["Q1", "Q2", "Q3"])]
    return {f"{row.workload} 95%": float(row.average) for row in kept.itertuples()}


def run(dataset: str, epsilon: float, seed: int, fine_share: float, real: pd.DataFrame,
        workloads: dict[str, list[dict]], true: dict[str, np.ndarray],
        baseline: bool = True) -> list[dict]:
    schema = load_schema(dataset)
    rows = []
    fits = (("fine grids", schema), ("no fine grids", without_fine(schema)))
    for label, fit_schema in fits[: 1 + baseline]:
        started = time.perf_counter()
        synthesizer = Synthesizer.create(
            "marginals", fit_schema, epsilon=epsilon, noise_sampler="numpy", noise_seed=seed,
            ledger=False, **({"fine_share": fine_share} if fit_schema.fine_grids else {}))
        synthesizer.fit(real)  # public data, seeded noise
        labels = synthesizer.sample(seed=seed, decode="label").compute()
        codes = np.column_stack([labels[a.name].cat.codes.to_numpy()
                                 for a in schema.attributes]).astype(np.int16)
        base = {"dataset": dataset, "epsilon": epsilon, "seed": seed, "fit": label,
                "fine_share": fine_share if fit_schema.fine_grids else 0.0,
                **coarse_errors(real, labels, schema)}
        frames = decoded(codes, schema, synthesizer.model.fine, seed)
        for decoding in DECODINGS if fit_schema.fine_grids else ("uniform",):
            rows.append(base | {"decode": decoding,
                                **value_metrics(real, frames[decoding], schema, workloads, true)})
        print(f"{dataset} eps={epsilon:g} seed={seed} {label}: "
              f"{time.perf_counter() - started:.0f} s", flush=True)
        if fit_schema.fine_grids and seed == 0 and epsilon == 1.0:
            plot(dataset, real, frames, schema)
    return rows


def plot(dataset: str, real: pd.DataFrame, frames: dict[str, pd.DataFrame],
         schema: Schema) -> None:
    """Per numeric column: the real and the three decodings' CDFs (ε = 1, seed 0)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for name in numeric_columns(schema):
        figure, axis = plt.subplots(figsize=(7, 4))
        for label, frame, style in (("real", real, "k-"), ("midpoint", frames["midpoint"], ":"),
                                    ("uniform in bins", frames["uniform"], "--"),
                                    ("fine grid", frames["fine"], "-")):
            values = np.sort(pd.to_numeric(frame[name], errors="coerce").dropna()
                             .to_numpy(dtype=float))
            axis.step(values, np.arange(1, len(values) + 1) / len(values), style, label=label,
                      where="post", linewidth=1.2 if label == "real" else 1.0)
        if name in ("capital-gain", "fnlwgt"):
            axis.set_xscale("symlog", linthresh=1000)
        axis.set(xlabel=name, ylabel="CDF",
                 title=f"{dataset}: {name}, ε = 1, seed 0 ({OWNER_ONLY})")
        axis.title.set_fontsize(8)
        axis.legend()
        figure.tight_layout()
        figure.savefig(PLOTS / f"values-{dataset}-{name}.png", dpi=110)
        plt.close(figure)


def report(path: Path) -> str:
    """The markdown tables of docs/results-adult.md, "Numeric values": means over seeds."""
    rows = pd.DataFrame([json.loads(line) for line in path.read_text().splitlines()
                         if line.strip()])
    parts = [f"> **{OWNER_ONLY.capitalize()}**: computed from the raw data.\n"]
    for dataset, table in rows.groupby("dataset", sort=False):
        schema = load_schema(dataset)
        columns = numeric_columns(schema)
        share = table["fine_share"].map(lambda v: f" ({v:g} of ρ)" if v else "")
        table = table.assign(release=table["fit"] + share + ", " + table["decode"])
        mean = table.groupby(["epsilon", "release"], sort=False).mean(numeric_only=True)
        seeds = table.groupby(["epsilon", "release"], sort=False)["seed"].nunique()
        tables = {
            "KS statistic / Wasserstein-1 per numeric column":
                [(c, lambda v, c=c: f"{v[f'ks {c}']:.4f} / {v[f'w1 {c}']:.4g}") for c in columns],
            "range queries (mean |error| as a fraction of rows) and coarse (α, β) at β = 95 %":
                [("1 numeric range", lambda v: f"{v['range1 mean']:.4f}"),
                 ("2 ranges + 1 category", lambda v: f"{v['range2+cat mean']:.4f}")]
                + [(k, lambda v, k=k: f"{v.get(f'{k} 95%', math.nan):.1f}")
                   for k in ("Q1", "Q2", "Q3")]}
        for title, cells in tables.items():
            header = ["ε", "release", "seeds"] + [name for name, _ in cells]
            lines = [f"{dataset}: {title}", "", "| " + " | ".join(header) + " |",
                     "|" + "---|" * len(header)]
            for (epsilon, release), values in mean.iterrows():
                row = [f"{epsilon:g}", release, str(seeds[(epsilon, release)])]
                lines.append("| " + " | ".join(row + [cell(values) for _, cell in cells]) + " |")
            parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["adult", "demo"])
    parser.add_argument("--epsilons", nargs="+", type=float, default=[0.5, 1.0, 2.0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--fine-share", type=float, default=FINE_SHARE)
    parser.add_argument("--no-baseline", action="store_true",
                        help="only the fit with fine grids (to compare fine shares)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--report", action="store_true", help="print the tables of --out")
    args = parser.parse_args()
    if args.report:
        print(report(args.out))
        return
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False) as cluster, \
            Client(cluster):
        for dataset in args.datasets:
            schema = load_schema(dataset)
            real = real_frame(dataset, schema)
            workloads = range_workloads(schema, seed=0)
            true = {name: answers(real, queries) for name, queries in workloads.items()}
            for epsilon in args.epsilons:
                for seed in range(args.seeds):
                    rows = run(dataset, epsilon, seed, args.fine_share, real, workloads, true,
                               baseline=not args.no_baseline)
                    with args.out.open("a") as handle:
                        for row in rows:
                            handle.write(json.dumps({"privacy": OWNER_ONLY, **row}) + "\n")


if __name__ == "__main__":
    main()
