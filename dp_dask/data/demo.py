"""A seeded, census-like demo dataset with real dependence between its attributes.

Every row draws one latent vector ``z ~ N(0, LATENT_CORR)`` with one coordinate per attribute.
Each coordinate is turned into its attribute by a fixed, public marginal: categoricals by
thresholding ``z`` at the normal quantiles of their cumulative probabilities (so the category
order below is the direction of the dependence), numerics by a piecewise-linear quantile
function of ``Phi(z)``. The dependence is therefore exactly a Gaussian copula with the
correlation matrix built in ``_latent_corr`` (the design is listed in ``CORRELATIONS``):

* life stage: age <-> marital_status <-> relationship <-> household_size, age -> tenure;
* socio-economics: education <-> occupation <-> income_band, hours_per_week -> income_band,
  income_band -> tenure -> has_mortgage, urban -> income_band;
* sex -> hours_per_week and income_band (latent high = "Male"), race <-> region (weak);
* independent of each other: region and sex, region and age, for example.

Two structural rules sit on top: renters never have a mortgage, and about 2% of occupation
values are missing (NaN) completely at random, to exercise a schema's ``on_missing`` rule.
The matching public schema is ``dp_dask/schemas/demo.json``.

Each partition is generated from its own child ``np.random.SeedSequence(seed).spawn(n)[i]``,
so the data depend only on ``(n_rows, seed, partition_rows)``, never on the cluster.
"""

from __future__ import annotations

import math
from pathlib import Path

import dask.dataframe as dd
import numpy as np
import pandas as pd
from scipy.special import ndtr, ndtri

# Categories in latent order: a higher latent value moves towards the end of the list.
CATEGORIES: dict[str, tuple[str, ...]] = {
    "sex": ("Female", "Male"),
    "race": ("White", "Black", "Asian", "Native", "Other"),
    "education": (
        "Less than HS",
        "HS grad",
        "Some college",
        "Associate",
        "Bachelor",
        "Master",
        "Professional",
        "Doctorate",
    ),
    "marital_status": ("Never married", "Married", "Divorced", "Separated", "Widowed"),
    "relationship": (
        "Own child",
        "Other relative",
        "Not in family",
        "Unmarried partner",
        "Spouse",
        "Householder",
    ),
    "occupation": (
        "Service",
        "Labourer",
        "Production",
        "Transport",
        "Sales",
        "Office",
        "Craft",
        "Technical",
        "Professional",
        "Management",
    ),
    "workclass": ("Private", "Non-profit", "Local gov", "State gov", "Federal gov", "Self-emp"),
    "income_band": ("<25k", "25k-50k", "50k-75k", "75k-100k", "100k-150k", "150k+"),
    "region": ("Northeast", "Midwest", "South", "West"),
    "urban": ("Rural", "Urban"),
    "tenure": ("Rent", "Own"),
    "has_mortgage": ("No", "Yes"),
}

# Marginal probabilities of each category, same order as CATEGORIES.
PROBABILITIES: dict[str, tuple[float, ...]] = {
    "sex": (0.51, 0.49),
    "race": (0.72, 0.13, 0.07, 0.02, 0.06),
    "education": (0.10, 0.28, 0.19, 0.09, 0.21, 0.09, 0.02, 0.02),
    "marital_status": (0.33, 0.50, 0.10, 0.02, 0.05),
    "relationship": (0.12, 0.06, 0.17, 0.07, 0.24, 0.34),
    "occupation": (0.16, 0.08, 0.07, 0.07, 0.10, 0.12, 0.09, 0.08, 0.14, 0.09),
    "workclass": (0.70, 0.07, 0.08, 0.05, 0.03, 0.07),
    "income_band": (0.20, 0.22, 0.18, 0.13, 0.15, 0.12),
    "region": (0.17, 0.21, 0.38, 0.24),
    "urban": (0.20, 0.80),
    "tenure": (0.35, 0.65),
    "has_mortgage": (0.40, 0.60),
}

# Numeric marginals as piecewise-linear quantile functions: knots (u, value), u = Phi(z).
# Values are floored to integers, so a flat stretch (hours 40) is a point mass.
QUANTILE_KNOTS: dict[str, tuple[tuple[float, float], ...]] = {
    "age": ((0.0, 18.0), (0.12, 25.0), (0.30, 35.0), (0.47, 45.0), (0.64, 55.0), (0.80, 65.0),
            (0.92, 75.0), (0.98, 85.0), (1.0, 90.999)),
    "hours_per_week": ((0.0, 1.0), (0.04, 15.0), (0.12, 30.0), (0.20, 38.0), (0.22, 40.0),
                       (0.66, 40.999), (0.78, 45.0), (0.92, 55.0), (0.985, 70.0), (1.0, 99.999)),
}
HOUSEHOLD_SIZE_PROBABILITIES = (0.28, 0.34, 0.15, 0.13, 0.06, 0.025, 0.01, 0.005)  # sizes 1..8

COLUMNS: tuple[str, ...] = (
    "age",
    "sex",
    "race",
    "education",
    "marital_status",
    "relationship",
    "occupation",
    "workclass",
    "hours_per_week",
    "income_band",
    "region",
    "urban",
    "household_size",
    "tenure",
    "has_mortgage",
)
NUMERIC_COLUMNS = ("age", "hours_per_week", "household_size")
MISSING_COLUMN = "occupation"
MISSING_RATE = 0.02

# Latent correlations; every pair not listed is independent.
CORRELATIONS: dict[tuple[str, str], float] = {
    ("age", "marital_status"): 0.60,
    ("age", "relationship"): 0.45,
    ("age", "tenure"): 0.40,
    ("age", "income_band"): 0.25,
    ("age", "workclass"): 0.10,
    ("marital_status", "relationship"): 0.55,
    ("marital_status", "household_size"): 0.20,
    ("relationship", "household_size"): 0.15,
    ("education", "occupation"): 0.60,
    ("education", "income_band"): 0.45,
    ("occupation", "income_band"): 0.40,
    ("occupation", "workclass"): 0.15,
    ("hours_per_week", "income_band"): 0.35,
    ("sex", "hours_per_week"): 0.35,
    ("sex", "income_band"): 0.20,
    ("income_band", "tenure"): 0.30,
    ("tenure", "has_mortgage"): 0.35,
    ("urban", "income_band"): 0.15,
    ("urban", "tenure"): -0.20,
    ("race", "region"): 0.20,
}


def _latent_corr() -> np.ndarray:
    index = {name: i for i, name in enumerate(COLUMNS)}
    corr = np.eye(len(COLUMNS))
    for (a, b), rho in CORRELATIONS.items():
        corr[index[a], index[b]] = corr[index[b], index[a]] = rho
    return corr


LATENT_CORR = _latent_corr()
# Fails at import if the design stops being positive definite.
_LATENT_CHOLESKY = np.linalg.cholesky(LATENT_CORR)


def _thresholds(probabilities: tuple[float, ...]) -> np.ndarray:
    cumulative = np.cumsum(probabilities)[:-1] / math.fsum(probabilities)
    return ndtri(cumulative)


def _quantile(z: np.ndarray, knots: tuple[tuple[float, float], ...]) -> np.ndarray:
    u, value = np.array(knots).T
    return np.floor(np.interp(ndtr(z), u, value)).astype(np.int64)


def _strings(codes: np.ndarray, categories: tuple[str, ...]) -> pd.Series:
    return pd.Series(np.array(categories, dtype=object)[codes], dtype="str")


def _partition(seed_seq: np.random.SeedSequence, start: int, n_rows: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed_seq)
    # One row of z per attribute, so each attribute's latent vector is contiguous.
    z = _LATENT_CHOLESKY @ rng.standard_normal((len(COLUMNS), n_rows))
    latent = dict(zip(COLUMNS, z))
    data: dict[str, pd.Series] = {}
    for name in COLUMNS:
        if name in QUANTILE_KNOTS:
            data[name] = pd.Series(_quantile(latent[name], QUANTILE_KNOTS[name]))
        elif name == "household_size":
            codes = np.searchsorted(_thresholds(HOUSEHOLD_SIZE_PROBABILITIES), latent[name])
            data[name] = pd.Series(codes.astype(np.int64) + 1)
        else:
            codes = np.searchsorted(_thresholds(PROBABILITIES[name]), latent[name])
            if name == "has_mortgage":
                # Structural zero: only owners can hold a mortgage.
                codes = np.where(data["tenure"] == "Own", codes, 0)
            data[name] = _strings(codes, CATEGORIES[name])
    # Drawn after the latent block so that the missingness never shifts the other columns.
    missing = rng.random(n_rows) < MISSING_RATE
    data[MISSING_COLUMN] = data[MISSING_COLUMN].mask(missing)
    frame = pd.DataFrame(data)
    frame.index = pd.RangeIndex(start, start + n_rows)
    return frame


def _meta() -> pd.DataFrame:
    return _partition(np.random.SeedSequence(0), 0, 0)


def generate_census(
    n_rows: int, seed: int = 0, *, partition_rows: int = 250_000
) -> dd.DataFrame:
    """A lazy census-like DataFrame of ``n_rows`` rows, identical for a given seed and layout.

    Partition ``i`` holds rows ``[i * partition_rows, ...)`` and is drawn from
    ``np.random.SeedSequence(seed).spawn(n_partitions)[i]`` alone.
    """
    if n_rows < 1:
        raise ValueError(f"n_rows must be positive, got {n_rows}")
    if partition_rows < 1:
        raise ValueError(f"partition_rows must be positive, got {partition_rows}")
    n_partitions = -(-n_rows // partition_rows)
    children = np.random.SeedSequence(seed).spawn(n_partitions)
    starts = [i * partition_rows for i in range(n_partitions)]
    sizes = [min(partition_rows, n_rows - start) for start in starts]
    return dd.from_map(
        _partition,
        children,
        starts,
        sizes,
        meta=_meta(),
        divisions=(*starts, n_rows - 1),
        label="generate-census",
        enforce_metadata=False,
    )


def write_census(
    path: str | Path,
    n_rows: int = 1_000_000,
    seed: int = 0,
    partition_rows: int = 250_000,
    *,
    overwrite: bool = False,
) -> Path:
    """Write ``generate_census(n_rows, seed)`` as partitioned Parquet under ``path``.

    Runs on the active Dask client if there is one, else on the default scheduler. A non-empty
    ``path`` is replaced only with ``overwrite=True``: stale part files from an earlier, larger
    write would otherwise be read back as part of the dataset.
    """
    path = Path(path)
    exists = path.exists() and any(path.iterdir())
    if exists and not overwrite:
        raise FileExistsError(f"{path} exists and is not empty; pass overwrite=True to replace it")
    generate_census(n_rows, seed, partition_rows=partition_rows).to_parquet(
        path, write_index=False, overwrite=exists
    )
    return path
