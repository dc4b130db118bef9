"""Raw typed tables for docs/from-raw.md: what a data team hands over, with no schema.

* ``adult``: the shared UCI Adult CSV written as typed Parquet (``pandas.read_csv`` then
  ``to_parquet``: six int64 columns with heavy tails and heaps, nine text columns).
* ``demo``: the census-like demo (dp_dask.data.demo) written as typed Parquet.
* ``flights``: generated, seeded, with the traits of the issue's real table: a constant int64
  column, integer calendar columns, HHMM clock times (nullable), a heavy-tailed delay with a spike
  at −5…0, a heavy-tailed distance, a UTC timestamp across a year boundary, a 16-level and a
  100-level text column, a near-unique identifier and a near-constant flag.

Each table comes with a public codebook (JSON for ``schema draft --public``): the ranges a data
owner would know from documentation, for the informed path. Nothing here is private.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.paths import ADULT_CSV
from dp_dask.data.demo import generate_census

TABLES = ("adult", "demo", "flights")

# Public ranges from each table's documentation: NAME → (start, stop, step) of its bins.
PUBLIC_RANGES: dict[str, dict[str, tuple[float, float, float]]] = {
    "adult": {"age": (17, 91, 1), "fnlwgt": (0, 1_500_000, 50_000), "education-num": (1, 17, 1),
              "capital-gain": (0, 100_000, 5_000), "capital-loss": (0, 5_000, 250),
              "hours-per-week": (1, 100, 1)},
    "demo": {"age": (16, 96, 1), "hours_per_week": (0, 100, 1), "household_size": (1, 11, 1)},
    "flights": {"year": (2013, 2015, 1), "month": (1, 13, 1), "day": (1, 32, 1),
                "hour": (0, 24, 1), "minute": (0, 60, 1), "distance": (0, 5_000, 50),
                "dep_delay": (-60, 1_500, 15), "dep_time": (0, 2_400, 100),
                "arr_time": (0, 2_400, 100), "diverted": (0, 2, 1)},
}
# Where the documentation says most values are 0: a bin of 0 alone, then the range's bins.
ZERO_HEAVY = {"adult": ("capital-gain", "capital-loss")}
# Plausible ranges of a column's values (its documented meaning), for "outside the type's range".
PLAUSIBLE = {table: {c: (r[0], r[1]) for c, r in ranges.items()}
             for table, ranges in PUBLIC_RANGES.items()}


def adult_frame() -> pd.DataFrame:
    return pd.read_csv(ADULT_CSV, skipinitialspace=True)


def demo_frame(rows: int, seed: int = 0) -> pd.DataFrame:
    return generate_census(rows, seed=seed).compute()


def flights_frame(rows: int, seed: int = 0) -> pd.DataFrame:
    """A flights-like table of ``rows`` rows (seeded)."""
    rng = np.random.default_rng(seed)
    month = rng.integers(1, 13, rows)
    day = rng.integers(1, 29, rows)
    hour = rng.choice(np.arange(5, 24), rows, p=_normalised(np.r_[np.full(10, 3.0),
                                                                  np.full(9, 2.0)]))
    minute = rng.choice(np.arange(0, 60, 5), rows)
    departs = hour * 60 + minute + rng.integers(-10, 11, rows)
    # A spike of small early departures, a long right tail of delays; 2 % cancelled (null).
    delay = np.where(rng.random(rows) < 0.6, rng.integers(-5, 1, rows),
                     np.round(rng.lognormal(2.5, 1.2, rows)).clip(max=1_300))
    cancelled = rng.random(rows) < 0.02
    duration = rng.integers(40, 400, rows)
    stamps = pd.Timestamp("2013-01-01", tz="UTC") + pd.to_timedelta(
        (month - 1) * 30.4 + day - 1, unit="D") + pd.to_timedelta(departs, unit="m")
    carriers = np.array([f"C{i:02d}" for i in range(16)])
    airports = np.array([f"A{i:02d}" for i in range(100)])
    frame = pd.DataFrame({
        "year": np.full(rows, 2013, dtype=np.int64),
        "month": month.astype(np.int64), "day": day.astype(np.int64),
        "hour": hour.astype(np.int64), "minute": minute.astype(np.int64),
        "dep_time": pd.array(np.where(cancelled, np.nan, _hhmm(departs + delay)),
                             dtype="Float64"),
        "arr_time": pd.array(np.where(cancelled, np.nan, _hhmm(departs + delay + duration)),
                             dtype="Float64"),
        "dep_delay": pd.array(np.where(cancelled, np.nan, delay), dtype="Float64"),
        "distance": np.round(rng.lognormal(6.5, 0.7, rows)).clip(30, 4_983).astype(np.int64),
        "carrier": carriers[rng.zipf(1.6, rows).clip(max=16) - 1],
        "origin": airports[rng.zipf(1.3, rows).clip(max=100) - 1],
        "tailnum": [f"N{v:05d}" for v in rng.integers(0, 99_999, rows)],
        "diverted": (rng.random(rows) < 0.002).astype(np.int64),
        "time_hour": stamps.floor("h"),
    })
    return frame


def _normalised(weights: np.ndarray) -> np.ndarray:
    return weights / weights.sum()


def _hhmm(minutes: np.ndarray) -> np.ndarray:
    minutes = np.mod(minutes, 24 * 60)
    return (minutes // 60) * 100 + minutes % 60


def write_table(table: str, directory: Path, rows: int, seed: int = 0) -> Path:
    """Write ``table`` as typed Parquet under ``directory`` and its public codebook beside it;
    the Parquet file's path."""
    frame = {"adult": adult_frame, "demo": lambda: demo_frame(rows, seed),
             "flights": lambda: flights_frame(rows, seed)}[table]()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{table}.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
    codebook: dict[str, object] = {c: {"start": r[0], "stop": r[1], "step": r[2]}
                                   for c, r in PUBLIC_RANGES[table].items()}
    for column in ZERO_HEAVY.get(table, ()):
        start, stop, step = PUBLIC_RANGES[table][column]
        codebook[column] = {"type": "numeric", "edges": [start, start + 1, *np.arange(
            start + step, stop + step, step).tolist()], "on_unknown": "clip"}
    (directory / f"{table}.codebook.json").write_text(json.dumps(codebook, indent=1))
    return path
