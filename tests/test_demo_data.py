"""The demo generator (determinism, dependence, fit to its schema) and the built-in schemas."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dp_dask.data.demo import COLUMNS, MISSING_COLUMN, generate_census, write_census
from dp_dask.data.schema import Schema, load_schema

N_ROWS = 20_000
ADULT_DIR = Path(os.environ.get("DP_DASK_ADULT_DIR", "/work/shared/data/adult"))
ADULT_FILES = ("adult.csv", "adult_test.csv")


def _census(seed: int = 0, partition_rows: int = 6_000) -> pd.DataFrame:
    ddf = generate_census(N_ROWS, seed, partition_rows=partition_rows)
    return ddf.compute(scheduler="sync")


@pytest.fixture(scope="module")
def census() -> pd.DataFrame:
    return _census()


def cramers_v(x: pd.Series, y: pd.Series) -> float:
    table = pd.crosstab(x, y).to_numpy(dtype=float)
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
    chi2 = ((table - expected) ** 2 / expected).sum()
    return float(np.sqrt(chi2 / (table.sum() * (min(table.shape) - 1))))


def assert_in_domain(frame: pd.DataFrame, schema: Schema) -> None:
    """Every value is a category or inside the numeric edges; NaN only where on_missing maps."""
    assert list(frame.columns) == schema.names
    for attr in schema.attributes:
        column = frame[attr.name]
        missing = column.isna()
        if missing.any():
            assert attr.on_missing != "error", f"{attr.name}: NaN but on_missing is 'error'"
        present = column[~missing]
        if attr.kind == "categorical":
            unknown = set(present.astype(str)) - set(attr.categories)
            assert not unknown, f"{attr.name}: values outside the schema {sorted(unknown)[:5]}"
        else:
            values = pd.to_numeric(present).to_numpy(dtype=float)
            inside = (values >= attr.edges[0]) & (values < attr.edges[-1])
            assert inside.all(), f"{attr.name}: {values[~inside][:5]} outside {attr.edges}"


def test_same_seed_and_layout_is_identical(census: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(census, _census())
    assert len(census) == N_ROWS
    assert census.index.equals(pd.RangeIndex(N_ROWS))


def test_partitions_follow_the_layout() -> None:
    ddf = generate_census(N_ROWS, partition_rows=6_000)
    assert ddf.npartitions == 4
    assert ddf.divisions == (0, 6_000, 12_000, 18_000, N_ROWS - 1)
    assert len(ddf.get_partition(3).compute(scheduler="sync")) == 2_000


def test_different_seed_gives_different_data(census: pd.DataFrame) -> None:
    other = _census(seed=1)
    assert (census["age"] != other["age"]).mean() > 0.5
    assert (census["education"] != other["education"]).mean() > 0.3


def test_dependence_follows_the_design(census: pd.DataFrame) -> None:
    assert cramers_v(census["education"], census["occupation"]) > 0.2
    assert cramers_v(census["age"] // 10, census["marital_status"]) > 0.2
    male = (census["sex"] == "Male").astype(float)
    assert census["hours_per_week"].corr(male) > 0.2
    # Region and sex share no latent path, so they are independent.
    assert cramers_v(census["region"], census["sex"]) < 0.05
    assert cramers_v(census["region"], census["education"]) < 0.05


def test_structural_rules(census: pd.DataFrame) -> None:
    renters = census["tenure"] == "Rent"
    assert (census.loc[renters, "has_mortgage"] == "No").all()
    assert 0.01 < census[MISSING_COLUMN].isna().mean() < 0.03
    others = census.drop(columns=MISSING_COLUMN)
    assert not others.isna().any().any()


def test_demo_values_fit_the_demo_schema(census: pd.DataFrame) -> None:
    schema = load_schema("demo")
    assert schema.name == "demo"
    assert tuple(schema.names) == COLUMNS
    assert_in_domain(census, schema)
    occupation = schema["occupation"]
    assert occupation.on_missing in occupation.labels
    assert occupation.on_missing not in occupation.categories


def test_assert_in_domain_catches_an_unknown_value(census: pd.DataFrame) -> None:
    bad = census.head(10).copy()
    bad.loc[0, "region"] = "Atlantis"
    with pytest.raises(AssertionError, match="region"):
        assert_in_domain(bad, load_schema("demo"))


def test_write_census_round_trips(tmp_path: Path) -> None:
    target = write_census(tmp_path / "census", n_rows=5_000, seed=2, partition_rows=2_000)
    assert len(list(target.glob("*.parquet"))) == 3
    back = pd.read_parquet(target)
    expected = generate_census(5_000, 2, partition_rows=2_000).compute(scheduler="sync")
    assert back.shape == expected.shape
    assert (back["age"].to_numpy() == expected["age"].to_numpy()).all()
    with pytest.raises(FileExistsError):
        write_census(target, n_rows=5_000, seed=2, partition_rows=2_000)


@pytest.mark.skipif(not ADULT_DIR.is_dir(), reason=f"UCI Adult not found in {ADULT_DIR}")
@pytest.mark.parametrize("file_name", ADULT_FILES)
def test_adult_data_fits_the_adult_schema(file_name: str) -> None:
    schema = load_schema("adult")
    assert schema.name == "adult"
    assert schema.m == 15
    assert 150 <= schema.d <= 220
    frame = pd.read_csv(ADULT_DIR / file_name, dtype=str, keep_default_na=False)
    assert list(frame.columns) == schema.names
    assert len(frame) > 10_000
    assert_in_domain(frame, schema)


def test_adult_schema_marks_question_mark_as_a_category() -> None:
    schema = load_schema("adult")
    for name in ("workclass", "occupation", "native-country"):
        assert "?" in schema[name].categories
    assert all(a.on_missing == a.on_unknown == "error" for a in schema.attributes)
    assert schema["education-num"].labels == tuple(str(i) for i in range(1, 17))
