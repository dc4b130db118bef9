"""Where the default method's sampler should start (issue 26, item 3): the spanning tree's rows
raked to every 2-way table (the default), the spanning tree alone, independent columns, or the
binary Gaussian copula of the same consistent marginals — and the copula's own rows, without
the fit and updates, for reference.

    python -m benchmarks.starts --table adult --seeds 3
    python -m benchmarks.starts --table bank --data bank.csv --seeds 3
    python -m benchmarks.starts --table flights --data flights.csv --seeds 3
    python -m benchmarks.starts --table demo --rows 200000 --seeds 3

Every start gets the same fitted model (seeded numpy noise of the release's scale, as in
``benchmarks.peers``), the same weight fit, row updates and final 1-way match, and the same
evaluation
(``benchmarks.peers.evaluate``: Q1–Q3 and 3-attribute range queries). The copula is fitted to
the consistent counts (its d×d matrix built from the consistent histograms and tables, no noise
of its own), so it costs a nearest-correlation repair and a decoding calibration per release and
a latent product per partition; its seconds are reported beside the errors.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.peers import DEFAULT_DATA, DELTA, evaluate, read_data, table_schema
from dp_dask.copula.model import CopulaModel, fit_model
from dp_dask.copula.sample import Sampler
from dp_dask.data.decode import codes_to_frame
from dp_dask.data.demo import generate_census
from dp_dask.data.schema import Schema, load_schema
from dp_dask.evaluate.tables import markdown_table
from dp_dask.methods.marginals import (
    MarginalModel,
    MarginalSampler,
    Start,
    raked_start,
    tree_start,
)
from dp_dask.postprocess.consistency import Marginals
from dp_dask.postprocess.rowupdate import code_dtype, round_to_total
from dp_dask.synthesizer import Synthesizer

TABLES = ("adult", "bank", "flights", "demo")
SCHEMAS = {"bank": Path(__file__).with_name("bank.json"),
           "flights": Path(__file__).with_name("flights.json")}
Q3_SAMPLE = 100_000


def load_table(table: str, data: str | None, rows: int) -> tuple[Schema, pd.DataFrame]:
    """Adult's 15 attributes, UCI Bank or nycflights13's flights (CSV given by ``data``: see
    benchmarks/PEERS.md) or ``rows`` of the demo census."""
    if table == "adult":
        return table_schema("all"), read_data(data or DEFAULT_DATA)
    if table in SCHEMAS:
        if data is None:
            raise SystemExit(f"--data is needed for {table} (its CSV: benchmarks/PEERS.md)")
        return table_schema(str(SCHEMAS[table])), read_data(data)
    frame = generate_census(rows, seed=0).compute().reset_index(drop=True)
    return load_schema("demo"), frame


def copula_of(marginals: Marginals, schema: Schema, n_rows: int) -> CopulaModel:
    """The binary Gaussian copula of consistent marginals: their d×d count matrix, fitted as
    exact counts (the tables are already shrunk; a second shrinkage would double it)."""
    counts = np.zeros((schema.d, schema.d))
    blocks = [slice(o, o + s) for o, s in zip(schema.offsets, schema.sizes)]
    for a, histogram in enumerate(marginals.one_way):
        counts[blocks[a], blocks[a]] = np.diag(histogram)
    for (a, b), table in marginals.two_way.items():
        counts[blocks[a], blocks[b]] = table
        counts[blocks[b], blocks[a]] = table.T
    return fit_model(counts, schema, n_rows)


def _start_codes(codes: np.ndarray, schema: Schema) -> tuple[np.ndarray, np.ndarray]:
    """Codes in the layout the sampler expects (row-major, :func:`code_dtype`), weight 1 each."""
    return np.ascontiguousarray(codes, dtype=code_dtype(schema.sizes)), np.ones(len(codes))


def independent_start(model: MarginalModel, rows: int,
                      rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Each column on its own: its rounded target counts, shuffled."""
    columns = [rng.permutation(np.repeat(np.arange(len(h)), round_to_total(h, rows)))
               for h in model.marginals.one_way]
    return _start_codes(np.stack(columns, axis=1), model.schema)


def copula_start(sampler: Sampler) -> Start:
    """Rows of the copula fitted to the same consistent marginals, decoded to codes."""

    def start(model: MarginalModel, rows: int,
              rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        seed = np.random.SeedSequence(int(rng.integers(2**63)))
        return _start_codes(sampler.draw(rows, seed)[1], model.schema)

    return start


def compare(schema: Schema, frame: pd.DataFrame, epsilon: float,
            seeds: list[int]) -> Iterator[dict[str, Any]]:
    """One line per seed and start: errors, and the seconds of the start and of the copula fit."""
    for seed in seeds:
        model = Synthesizer.create("marginals", schema, epsilon=epsilon, delta=DELTA,
                                   noise_sampler="numpy", noise_seed=seed,
                                   ledger=False).fit(frame).model
        began = time.perf_counter()
        copula = copula_of(model.marginals, schema, model.n_rows)
        copula_fit_s = time.perf_counter() - began
        copula_sampler = copula.sampler()  # its Cholesky factor, once for both copula rows
        starts: dict[str, Start] = {"raked": raked_start, "tree": tree_start,
                                    "independent": independent_start,
                                    "copula": copula_start(copula_sampler)}
        draws = {name: MarginalSampler(model, start).draw for name, start in starts.items()}
        draws["copula rows, no updates"] = copula_sampler.draw
        for name, draw in draws.items():
            began = time.perf_counter()
            codes = draw(model.n_rows, np.random.SeedSequence(seed))[1]
            seconds = time.perf_counter() - began
            synthetic = codes_to_frame(codes.astype(np.int64), schema).astype(str)
            summary, _ = evaluate(frame, synthetic, schema, name, Q3_SAMPLE)
            yield {"start": name, "seed": seed, "epsilon": epsilon, "draw_s": round(seconds, 2),
                   "copula_fit_s": round(copula_fit_s, 2) if "copula" in name else None,
                   **summary}


def summary_table(lines: list[dict[str, Any]]) -> pd.DataFrame:
    """Mean over seeds per start: Q1/Q2/Q3 (95 % and max), range error, seconds."""
    rows = []
    for start, group in pd.DataFrame(lines).groupby("start", sort=False):
        row: dict[str, Any] = {"start": start, "seeds": len(group)}
        for workload in ("Q1", "Q2", "Q3"):
            row[f"{workload} 95 %"] = np.mean([s["avg95"] for s in group[workload]])
            row[f"{workload} max"] = np.mean([s["max"] for s in group[workload]])
        row["range3 rel. error"] = np.mean([s["mean"] for s in group["range3"]])
        row["draw s"] = group["draw_s"].mean()
        fits = group["copula_fit_s"].dropna()
        row["copula fit s"] = fits.mean() if len(fits) else "–"
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", choices=TABLES, default="adult")
    parser.add_argument("--data", help="the table's CSV (adult: the shared raw Adult CSV)")
    parser.add_argument("--rows", type=int, default=200_000, help="demo census rows")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1")
    parser.add_argument("--out", type=Path, help="also write one JSON line per release here")
    args = parser.parse_args(argv)
    schema, frame = load_table(args.table, args.data, args.rows)
    lines = []
    for line in compare(schema, frame, args.epsilon, list(range(args.seeds))):
        print(json.dumps(line), flush=True)
        lines.append(line)
    if args.out:
        args.out.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = summary_table(lines)
    print(f"\n{args.table} (m = {schema.m}, d = {schema.d}, {len(frame):,} rows), "
          f"ε = {args.epsilon:g}\n\n{markdown_table(result, '{:.2f}')}")
    return result


if __name__ == "__main__":
    main()
