"""DPCopula-Hybrid against DPCopula-Kendall on a generated census-like table.

    python -m benchmarks.hybrid --rows 1000000 --epsilon 1 --seeds 3

The table: three small-domain attributes (sex 2, race 5, region 4 values: 40 strata) and four
numeric ones binned by a public schema (age 16 bins, income 30, hours 20, wealth 30). The
numerics are a Gaussian copula whose correlations and means depend on the stratum (income rises
with age in some races and falls in others, sex and region shift the levels), which one global
copula cannot express. Each release is fitted in this process with seeded numpy noise at the
calibrated scale (noise_seed = seed) and n rows are sampled; the metric is
``dp_dask.evaluate.queries.marginal_distances`` (total-variation distance of every 1-way and
2-way marginal, mean and max), also split into the 2-way pairs of a small with a large attribute
and of two large ones. Against the raw data: the data owner's evaluation, not DP.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np
import pandas as pd

from dp_dask.checks import DpDaskWarning
from dp_dask.data.counts import counts_from_codes
from dp_dask.data.encode import encode_partition
from dp_dask.data.schema import Schema, load_schema
from dp_dask.evaluate.queries import marginal_distances
from dp_dask.evaluate.tables import markdown_table
from dp_dask.synthesizer import Synthesizer

SMALL = {"sex": ["f", "m"], "race": list("abcde"), "region": list("nesw")}
NUMERIC_BINS = {"age": np.linspace(16, 96, 17), "income": np.linspace(-4, 11, 31),
                "hours": np.linspace(0, 100, 21), "wealth": np.linspace(-6, 9, 31)}


def census_schema() -> Schema:
    attributes = [{"name": name, "type": "categorical", "categories": values}
                  for name, values in SMALL.items()]
    attributes += [{"name": name, "type": "numeric", "edges": ["-inf", *edges[1:-1], "inf"]}
                   for name, edges in NUMERIC_BINS.items()]
    return load_schema({"schema_version": 1, "name": "census-like", "attributes": attributes})


def census_frame(rows: int, seed: int = 0) -> pd.DataFrame:
    """The generated table: per stratum its own copula correlation and shifts."""
    rng = np.random.default_rng(seed)
    sex, race, region = (rng.integers(0, len(v), rows) for v in SMALL.values())
    sign = np.array([1.0, -1.0, 0.6, -0.5, 0.0])[race]  # age–income direction by race
    z = rng.standard_normal((rows, 4))
    age = z[:, 0]
    income = sign * 0.8 * age + np.sqrt(1 - (0.8 * sign) ** 2) * z[:, 1]
    hours = 0.5 * income * (2 * sex - 1) + np.sqrt(0.75) * z[:, 2]
    wealth = 0.7 * income - 0.3 * age * sign + 0.6 * z[:, 3]
    return pd.DataFrame({
        "sex": np.array(SMALL["sex"])[sex], "race": np.array(SMALL["race"])[race],
        "region": np.array(SMALL["region"])[region],
        "age": 45 + 14 * age, "income": 3 + 1.5 * income + 0.8 * sex + 0.5 * (region - 1.5),
        "hours": 40 + 12 * hours - 6 * (1 - sex), "wealth": 1 + 2 * wealth + 0.4 * region})


def distances(real: np.ndarray, frame: pd.DataFrame, schema: Schema) -> dict[str, float]:
    synthetic = counts_from_codes(encode_partition(frame, schema), schema)
    scores = marginal_distances(real, synthetic, schema)
    small = set(range(len(SMALL)))
    for name, keep in (("small_large", lambda i, j: (i in small) != (j in small)),
                       ("large_large", lambda i, j: i not in small and j not in small)):
        pairs = [(i, j) for i in range(schema.m) for j in range(i + 1, schema.m) if keep(i, j)]
        tvds = []
        for i, j in pairs:
            a = slice(schema.offsets[i], schema.offsets[i] + schema.sizes[i])
            b = slice(schema.offsets[j], schema.offsets[j] + schema.sizes[j])
            x, y = real[a, b], synthetic[a, b]
            tvds.append(0.5 * np.abs(x / x.sum() - y / y.sum()).sum())
        scores[f"two_way_tvd_{name}"] = float(np.mean(tvds))
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--hybrid-options", type=json.loads, default={},
                        help="dpcopula-hybrid's own options, JSON (e.g. '{\"min_rows\": 300}')")
    args = parser.parse_args()
    warnings.simplefilter("ignore", DpDaskWarning)  # the open end bins: decoding only
    schema = census_schema()
    frame = census_frame(args.rows)
    real = counts_from_codes(encode_partition(frame, schema), schema)
    results = []
    for method in ("dpcopula-kendall", "dpcopula-hybrid"):
        for seed in range(args.seeds):
            start = time.perf_counter()
            options = args.hybrid_options if method == "dpcopula-hybrid" else {}
            fitted = Synthesizer.create(method, schema, epsilon=args.epsilon,
                                        noise_sampler="numpy", noise_seed=seed,
                                        ledger=False, **options).fit(frame)
            synthetic = fitted.sample(args.rows, seed=seed).compute()
            results.append({"method": method, "seed": seed,
                            "seconds": time.perf_counter() - start,
                            "strata_with_copula": fitted.model.metadata["model"].get(
                                "strata_with_copula", 0),
                            **distances(real, synthetic, schema)})
            print(results[-1], flush=True)
    table = pd.DataFrame(results).drop(columns="seed").groupby("method").mean().reset_index()
    print(markdown_table(table, "{:.4f}"))


if __name__ == "__main__":
    main()
