"""Train on the release, test on real rows: the default method on Adult across ε
(docs/results-adult.md, "Downstream task").

Per ε and seed: a marginals release of adult.csv (seeded numpy noise of the release's scale, no
ledger, as many rows as the input), then :func:`dp_dask.evaluate.tasks.evaluate_tasks` with the
target ``income`` and adult_test.csv as the held-out rows (rows no release saw). Prints a
Markdown table and appends one JSON line per release to ``--out``.

    python -m benchmarks.downstream --epsilons 0.5 1 2 5 --seeds 1 \
        --out benchmarks/results/adult/downstream.jsonl
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from pathlib import Path

from benchmarks.paths import ADULT_CSV, ADULT_TEST_CSV
from dp_dask.checks import DpDaskWarning
from dp_dask.data.schema import load_schema
from dp_dask.evaluate.tasks import evaluate_tasks
from dp_dask.synthesizer import Synthesizer


def measure(epsilon: float | None, seed: int, workdir: Path) -> dict:
    """One release's (``None``: the real training rows alone) downstream scores."""
    schema = load_schema("adult")
    started = time.perf_counter()
    if epsilon is None:
        synthetic = ADULT_CSV
    else:
        synthetic = workdir / f"eps{epsilon}-seed{seed}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DpDaskWarning)  # Adult's open bins
            Synthesizer.create("marginals", schema, epsilon=epsilon, noise_sampler="numpy",
                               noise_seed=seed, ledger=False).fit(ADULT_CSV).write(
                synthetic, seed=seed)
    tasks = evaluate_tasks(ADULT_CSV, synthetic, schema, target="income",
                           test_data=ADULT_TEST_CSV, seed=seed)
    return {"epsilon": epsilon, "seed": seed, "seconds": round(time.perf_counter() - started),
            **tasks["downstream"]["models"], "quality": {
                key: tasks["quality"][key] for key in ("column_shapes", "column_pairs",
                                                       "summary")}}


def row(record: dict) -> str:
    models = ("logistic_regression", "gradient_boosting")
    cells = [f"{record[m]['synthetic'][k]:.3f}" for m in models for k in ("accuracy", "auc",
                                                                             "f1")]
    quality = record["quality"]
    return (f"| {record['epsilon']} | " + " | ".join(cells)
            + f" | {quality['column_shapes']:.3f} | {quality['column_pairs']:.3f} | "
            f"{quality['summary']:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.5, 1, 2, 5])
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    records = []
    with tempfile.TemporaryDirectory() as workdir:
        real = measure(None, 0, Path(workdir))
        for epsilon in args.epsilons:
            for seed in range(args.seeds):
                records.append(measure(epsilon, seed, Path(workdir)))
                print(row(records[-1]), flush=True)
    real_cells = " | ".join(f"{real[m]['real'][k]:.3f}" for m in ("logistic_regression",
                                                                  "gradient_boosting")
                            for k in ("accuracy", "auc", "f1"))
    print(f"| real training rows | {real_cells} | | | |")
    if args.out:
        with args.out.open("a") as file:
            for record in [real, *records]:
                file.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
