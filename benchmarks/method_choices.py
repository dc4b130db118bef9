"""Measure two design choices of the core pipeline on UCI Adult (docs/method.md).

1. How an attribute's own (exclusive) dummies enter the latent correlation matrix:
   ``within_attribute="pairwise"`` vs ``"zero"``.
2. Decoding: 1-way error of the decoded output vs the paper's binary output.

Run: python -m benchmarks.method_choices [--adult PATH] [--seeds 3]
Compares with the raw data, so it is an evaluation for the data owner, not a release.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import dask
import numpy as np

from benchmarks.paths import ADULT_CSV
from dp_dask.data.counts import attribute_pairs, count_graph, counts_from_codes
from dp_dask.data.io import read_table
from dp_dask.methods.copula import GaussianCopulaSynthesizer


def errors(real: np.ndarray, synthetic: np.ndarray, schema, n: int) -> dict[str, float]:
    """Mean absolute count errors of 1-way cells and of cross-attribute 2-way cells."""
    scale = n / np.trace(synthetic[: schema.sizes[0], : schema.sizes[0]])
    diff = np.abs(real - synthetic * scale)
    two_way = np.concatenate([diff[a, b].ravel() for _, _, a, b in attribute_pairs(schema)])
    return {"one_way": float(np.diagonal(diff).mean()), "two_way": float(two_way.mean())}


def measure(adult: Path, epsilon: float, within: str, seed: int) -> dict[str, float]:
    synthesizer = GaussianCopulaSynthesizer("adult", epsilon=epsilon, within_attribute=within,
                                            noise_sampler="numpy", noise_seed=seed,
                                            ledger=False)  # public data, seeded noise
    schema = synthesizer.schema
    real = count_graph(read_table(adult, schema), schema).compute()
    model = synthesizer.fit(adult).model
    n = model.n_rows
    binary, codes = model.sampler().draw(n, np.random.SeedSequence(seed))
    decoded = counts_from_codes(codes.T, schema)
    wide = binary.astype(np.float32)
    binary_counts = (wide.T @ wide).astype(np.float64)  # co-occurrence of the paper's 0/1 output
    result = {f"decoded_{k}": v for k, v in errors(real, decoded, schema, n).items()}
    # The binary output has no fixed row total per attribute: compare raw counts, no rescaling.
    diff = np.abs(real - binary_counts)
    result["binary_one_way"] = float(np.diagonal(diff).mean())
    result["binary_two_way"] = float(np.concatenate(
        [diff[a, b].ravel() for _, _, a, b in attribute_pairs(schema)]).mean())
    result["ones_per_row_per_attribute"] = float(binary.sum() / (n * schema.m))
    diagnostics = model.metadata["model"]
    result.update({k: diagnostics[k] for k in ("pairwise_min_eigenvalue", "repair_max_abs_change")})
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adult", type=Path, default=ADULT_CSV)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    dask.config.set(scheduler="threads")
    for epsilon in (1.0, 1e6):
        for within in ("pairwise", "zero"):
            runs = [measure(args.adult, epsilon, within, seed) for seed in range(args.seeds)]
            mean = {k: np.mean([r[k] for r in runs]) for k in runs[0]}
            print(f"| {epsilon:g} | {within} | " + " | ".join(
                f"{mean[k]:.4g}" for k in ("decoded_one_way", "decoded_two_way", "binary_one_way",
                                          "binary_two_way", "ones_per_row_per_attribute",
                                          "pairwise_min_eigenvalue", "repair_max_abs_change"))
                  + " |", flush=True)


if __name__ == "__main__":
    main()
