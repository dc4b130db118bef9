"""Where the marginals method's 1-way error comes from on large domains (issue 45 §4).

    python -m benchmarks.one_way --rows 300000 --seeds 3

A generated stand-in (module :func:`large_domains`): a few hundred thousand rows, attributes of
2–120 levels with Zipf-skewed frequencies (benchmarks/shapes.py's latent Gaussian, correlated
blocks of 5). One fit per seed (ε = 1, add/remove), and Q1 (mean error over the best 95 % of
1-way cells, counts scaled to n) after each stage: the noisy 1-way histograms alone, the
consistent 1-way estimates (inverse variance over every table holding the attribute), the
weighted candidates the sampler fits to the measurements, and the released rows.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from benchmarks.peers import DELTA
from benchmarks.shapes import latent_rows
from dp_dask.data.schema import Schema

SIZES = (120, 100, 60, 41, 30, 16, 14, 7, 2)


def large_domains(rows: int, seed: int = 0) -> tuple[Schema, pd.DataFrame, np.ndarray]:
    """Schema, frame (string labels) and codes (rows, m) of the stand-in."""
    rng = np.random.default_rng([seed, rows])
    z = latent_rows(rows, len(SIZES), rng)
    codes = np.empty((rows, len(SIZES)), dtype=np.int64)
    for a, size in enumerate(SIZES):
        p = 1.0 / np.arange(1, size + 1) ** 1.1  # Zipf-like: a few large, many rare levels
        cuts = np.quantile(z[:, a], np.cumsum(p / p.sum())[:-1])
        codes[:, a] = np.searchsorted(cuts, z[:, a])
    schema = Schema.from_json({"schema_version": 1, "name": "large-domains", "attributes": [
        {"name": f"a{a}", "type": "categorical", "categories": [f"v{k}" for k in range(s)]}
        for a, s in enumerate(SIZES)]})
    frame = pd.DataFrame({n: pd.Categorical.from_codes(codes[:, a], [f"v{k}" for k in
                                                                    range(SIZES[a])])
                          for a, n in enumerate(schema.names)})
    return schema, frame, codes


def q1(true: list[np.ndarray], estimate: list[np.ndarray], rows: int) -> float:
    """Mean |error| over the best 95 % of 1-way cells, the estimate scaled to ``rows``."""
    errors = np.sort(np.concatenate([np.abs(t - e * rows / max(e.sum(), 1e-300))
                                     for t, e in zip(true, estimate)]))
    return float(errors[: int(np.ceil(0.95 * len(errors)))].mean())


def stages(schema: Schema, frame: pd.DataFrame, codes: np.ndarray, seed: int,
           **options: object) -> dict[str, float]:
    from dp_dask.synthesizer import Synthesizer

    rows = len(codes)
    true = [np.bincount(codes[:, a], minlength=s) for a, s in enumerate(SIZES)]
    synthesizer = Synthesizer.create("marginals", schema, epsilon=1.0, delta=DELTA,
                                     noise_sampler="numpy", noise_seed=seed, ledger=False,
                                     neighbours="add_remove", **options).fit(frame)
    model = synthesizer.model
    noisy = [m.values for m in model.measurements if len(m.attributes) == 1]
    shared = model.sampler().for_release(rows, np.random.SeedSequence(seed)).shared
    released = synthesizer.sample(rows, seed=seed).compute()
    final = [np.bincount(released[n].astype(str).str[1:].astype(int), minlength=s)
             for n, s in zip(schema.names, SIZES)]
    return {"noisy 1-way": q1(true, noisy, rows),
            "consistent": q1(true, list(model.marginals.one_way), rows),
            "fitted weights": q1(true, list(shared.one_way), rows),
            "released rows": q1(true, final, rows)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args(argv)
    schema, frame, codes = large_domains(args.rows)
    results = pd.DataFrame([stages(schema, frame, codes, seed) for seed in range(args.seeds)])
    print(f"large-domains stand-in: {args.rows:,} rows, sizes {SIZES}, ε = 1, add/remove")
    print(results.mean().round(2).to_string())


if __name__ == "__main__":
    main()
