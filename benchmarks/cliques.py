"""Cliques beyond pairs (issue 59): ``cliques="pairs"`` against ``"auto"`` at ε = 1
(``--epsilons``), both notions, on Adult's 9 categorical columns and generated narrow tables
with planted 3- and 4-way structure that no pair shows (6 attributes, 200 k rows by default;
planted8: 8 attributes, 255 k rows).

    python -m benchmarks.cliques --seeds 3 [--rows 200000] [--tables adult planted planted8]
        [--modes pairs auto joint] [--auto-config '{"pairs_three_way_bias": 0.003}']

Scored by the project's scorer (Q1/Q2/Q3: mean error over the best 95 % of queries, and the
worst 2-way query; evaluate.queries), with fit + sample seconds. Seeded numpy noise of the
release's scale (benchmarks.peers.fitted); compares with the raw data: an evaluation for the
data owner, not a release.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time

import numpy as np
import pandas as pd
from dask.distributed import Client, LocalCluster

from benchmarks.peers import DEFAULT_DATA, DELTA, error_summary, fitted, read_data, table_schema
from dp_dask.data.schema import Schema
from dp_dask.evaluate.queries import evaluate_release

PLANTED = ("a", "b", "c", "d", "e", "f", "g", "h")
Q3_SAMPLE = 100_000


def planted(rows: int, seed: int = 0, m: int = 6) -> tuple[Schema, pd.DataFrame]:
    """a, b, c, d of 3 values, d = a + b + c mod 3 in 90 % of rows (a 4-way structure: every
    pair and triple of them about independent); e of 4 values, f binary, f = a + e mod 2 in 90 %
    of rows (a 3-way one); with ``m`` = 8, g of 3 values and h binary, g = b + h mod 3 in 90 %
    of rows (another 3-way one): 23 levels in all, as the issue's tall narrow table."""
    sizes = (3, 3, 3, 3, 4, 2, 3, 2)[:m]
    schema = Schema.from_json({"schema_version": 1, "name": "planted", "attributes": [
        {"name": name, "type": "categorical", "categories": [str(v) for v in range(size)]}
        for name, size in zip(PLANTED, sizes)]})
    rng = np.random.default_rng(seed)
    codes = np.column_stack([rng.integers(0, s, rows) for s in sizes])
    keep = rng.random((rows, 2)) < 0.9
    codes[:, 3] = np.where(keep[:, 0], codes[:, :3].sum(1) % 3, codes[:, 3])
    codes[:, 5] = np.where(keep[:, 1], (codes[:, 0] + codes[:, 4]) % 2, codes[:, 5])
    if m == 8:  # drawn after the 6-attribute table's, which stays as it was
        keep = rng.random(rows) < 0.9
        codes[:, 6] = np.where(keep, (codes[:, 1] + codes[:, 7]) % 3, codes[:, 6])
    return schema, pd.DataFrame({n: codes[:, i].astype(str) for i, n in enumerate(schema.names)})


def run(table: str, schema: Schema, frame: pd.DataFrame, neighbours: str, mode: str,
        seed: int, config: dict | None = None, epsilon: float = 1.0) -> dict:
    """One release with ``cliques=mode`` (and, under "auto", ``config``'s other fields)."""
    config = {"cliques": mode, **((config or {}) if mode == "auto" else {})}
    start = time.perf_counter()
    synthesizer = fitted("marginals", schema, frame, epsilon, DELTA, seed, neighbours=neighbours,
                         config=config)
    synthetic = synthesizer.sample(len(frame), seed=seed).compute()
    seconds = time.perf_counter() - start
    records, _ = evaluate_release(frame, synthetic, schema, q3_sample=Q3_SAMPLE, seed=0)
    summary = error_summary(records)
    cliques = synthesizer.model_.metadata["privacy"].get("cliques", {})
    return {"table": table, "neighbours": neighbours, "config": config, "epsilon": epsilon,
            "seed": seed,
            "Q1": summary["Q1"]["avg95"], "Q2": summary["Q2"]["avg95"],
            "worst2": summary["Q2"]["max"], "Q3": summary["Q3"]["avg95"],
            "seconds": round(seconds, 1),
            "measured": [c["attributes"] for c in cliques.get("cliques", [])]
            or cliques.get("refused", "")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rows8", type=int, default=255_000)
    parser.add_argument("--tables", nargs="+", default=["adult", "planted"],
                        help="adult, planted (6 attributes), planted8 (8, 23 levels)")
    parser.add_argument("--neighbours", nargs="+", default=["replace", "add_remove"])
    parser.add_argument("--modes", nargs="+", default=["pairs", "auto"])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0])
    parser.add_argument("--auto-config", type=json.loads, default=None,
                        help="MarginalsConfig fields for the auto releases, as JSON")
    args = parser.parse_args()
    tables = {"adult": lambda: (table_schema("categorical"), read_data(DEFAULT_DATA)),
              "planted": lambda: planted(args.rows),
              "planted8": lambda: planted(args.rows8, m=8)}
    with Client(LocalCluster(n_workers=1, threads_per_worker=2, processes=False)):
        for table in args.tables:
            schema, frame = tables[table]()
            for neighbours, epsilon in itertools.product(args.neighbours, args.epsilons):
                for seed in range(args.seeds):
                    for mode in args.modes:
                        print(json.dumps(run(table, schema, frame, neighbours, mode, seed,
                                             args.auto_config, epsilon)), flush=True)


if __name__ == "__main__":
    main()
