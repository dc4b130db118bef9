"""Wide schemas: every 2-way table vs a DP spanning tree vs noise-free independent marginals.

    python -m benchmarks.wide adult --out /tmp/wide        # Adult + 30 derived columns (45)
    python -m benchmarks.wide sweep --ms 10 20 30 50 --seeds 1  # generated, as m grows

``adult`` writes ``adult-wide.csv`` and ``adult-wide.json`` (a dp_dask schema): 12,000 rows drawn
(seeded) from UCI Adult's 32,561, its 15 attributes binned by the built-in schema, and per
attribute two derived ones: a noisy copy (its code kept with probability 0.7, else uniform) and
a noisy sum with another attribute (mod 3–8), so strong pairs sit among many weak ones. Run
benchmarks/peers.py on them for MST beside dp_dask (docs/method.md "Wide schemas").

``sweep`` generates tables of n = 10⁴ rows and m attributes of 2–10 levels (benchmarks/shapes.py's
latent Gaussian: correlated blocks of 5) and prints Q1/Q2/Q3 (95 % average) of the marginals
method with every pair, with a tree, and of noise-free independent marginals (each column of the
real table shuffled on its own), with the threshold's noise level beside them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.peers import DEFAULT_DATA, DELTA, evaluate, read_data
from benchmarks.shapes import _probabilities, latent_rows
from dp_dask.data.encode import encode_partition
from dp_dask.data.schema import Schema, load_schema
from dp_dask.methods.marginals import MarginalsConfig
from dp_dask.methods.marginals.select_pairs import all_pairs_noise
from dp_dask.privacy.accounting import TABLE_L2_SENSITIVITY, rho_budget

KEEP = 0.7  # a noisy copy keeps its source's code with this probability


def categorical(name: str, size: int) -> dict:
    return {"name": name, "type": "categorical", "categories": [f"v{k}" for k in range(size)]}


def adult_wide(rows: int = 12_000, seed: int = 0,
               data: str = DEFAULT_DATA) -> tuple[dict, pd.DataFrame]:
    """Adult's 15 binned attributes and 30 derived ones (module docstring): schema, frame."""
    rng = np.random.default_rng(seed)
    adult = load_schema("adult")
    raw = read_data(data)
    raw = raw.iloc[np.sort(rng.choice(len(raw), rows, replace=False))].reset_index(drop=True)
    codes = encode_partition(raw, adult).astype(np.int64)  # (m, rows)
    specs, columns = [], {}
    for a, name in enumerate(adult.names):
        size = int(adult.sizes[a])
        copy = np.where(rng.random(rows) < KEEP, codes[a], rng.integers(0, size, rows))
        partner = int(rng.integers(0, adult.m))
        modulus = int(rng.integers(3, 9))
        mixed = (codes[a] + codes[partner] + (rng.random(rows) < 0.2)) % modulus
        for suffix, values, levels in (("copy", copy, size), ("mix", mixed, modulus)):
            specs.append(categorical(f"{name}-{suffix}", levels))
            columns[f"{name}-{suffix}"] = [f"v{k}" for k in values]
    frame = pd.concat([raw[list(adult.names)], pd.DataFrame(columns)], axis=1)
    schema = {"schema_version": 1, "name": "adult-wide",
              "attributes": [*adult.to_json()["attributes"], *specs]}
    return schema, frame


def generated(m: int, rows: int = 10_000, seed: int = 0) -> tuple[dict, pd.DataFrame]:
    """m categorical attributes of 2–10 levels cut from a block-correlated latent Gaussian."""
    rng = np.random.default_rng([seed, m])
    z = latent_rows(rows, m, rng)
    specs, columns = [], {}
    for i in range(m):
        size = int(rng.integers(2, 11))
        cuts = np.quantile(z[:, i], np.cumsum(_probabilities(size, rng))[:-1])
        specs.append(categorical(f"g{i}", size))
        columns[f"g{i}"] = [f"v{k}" for k in np.searchsorted(cuts, z[:, i])]
    return {"schema_version": 1, "name": f"generated-{m}", "attributes": specs}, \
        pd.DataFrame(columns)


def independent(frame: pd.DataFrame, seed: int) -> pd.DataFrame:
    """Noise-free independent marginals: each column shuffled on its own (exact 1-way counts)."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({c: rng.permutation(frame[c].to_numpy()) for c in frame.columns})


def noise_level(schema: Schema, rows: int, epsilon: float, neighbours: str) -> float:
    """The threshold's statistic for this table (public quantities; n itself here)."""
    rho, config = rho_budget(epsilon, DELTA), MarginalsConfig()
    return all_pairs_noise(schema, rows, rho * (1 - config.one_way_share),
                           TABLE_L2_SENSITIVITY[neighbours], "exact", config.cells_exponent)


def release(schema: Schema, frame: pd.DataFrame, epsilon: float, seed: int, tables: str,
            neighbours: str) -> pd.DataFrame:
    from dp_dask.synthesizer import Synthesizer

    synthesizer = Synthesizer.create("marginals", schema, epsilon=epsilon, delta=DELTA,
                                     noise_sampler="numpy", noise_seed=seed, ledger=False,
                                     neighbours=neighbours, tables=tables)
    return synthesizer.fit(frame).sample(len(frame), seed=seed).compute().astype(str)


def sweep(ms: list[int], seeds: int, epsilon: float, neighbours: str, q3_sample: int) -> None:
    print("| m | noise level | release | Q1 95 % | Q2 95 % | Q3 95 % |\n|---|---|---|---|---|---|")
    for m in ms:
        spec, frame = generated(m)
        schema = Schema.from_json(spec)
        level = noise_level(schema, len(frame), epsilon, neighbours)
        for name in ("all", "tree", "independent"):
            errors = []
            for seed in range(seeds):
                synthetic = (independent(frame, seed) if name == "independent" else
                             release(schema, frame, epsilon, seed, name, neighbours))
                summary, _ = evaluate(frame, synthetic, schema, name, q3_sample)
                errors.append([summary[q]["avg95"] for q in ("Q1", "Q2", "Q3")])
            q1, q2, q3 = np.mean(errors, axis=0)
            print(f"| {m} | {level:.3f} | {name} | {q1:.1f} | {q2:.1f} | {q3:.1f} |", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("adult", "sweep"))
    parser.add_argument("--out", type=Path, default=Path("wide-out"))
    parser.add_argument("--ms", type=int, nargs="+", default=[10, 20, 30, 50])
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--neighbours", default="add_remove")
    parser.add_argument("--q3-sample", type=int, default=20_000)
    args = parser.parse_args(argv)
    if args.what == "sweep":
        sweep(args.ms, args.seeds, args.epsilon, args.neighbours, args.q3_sample)
        return
    spec, frame = adult_wide()
    args.out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out / "adult-wide.csv", index=False)
    (args.out / "adult-wide.json").write_text(json.dumps(spec, indent=1))
    schema = Schema.from_json(spec)
    print(f"{args.out}/adult-wide.csv: {len(frame):,} rows, m = {schema.m}, d = {schema.d}; "
          f"noise level {noise_level(schema, len(frame), args.epsilon, args.neighbours):.3f}")


if __name__ == "__main__":
    main()
