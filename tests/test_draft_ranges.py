"""Issue 65, ranges: drafted numeric ranges that do not reach past the data. Small integer codes
(months, days, hours) get no invented negative values (item 1), and a public point mass that
passed its threshold by noise alone does not stretch a column's range to it (item 2). Columns
shaped as the weather table's (20,920 rows) at the one command's share of ε = 1 on it; seeded
numpy noise."""

from __future__ import annotations

import numpy as np
import pytest

from dp_dask.data.draft_kinds import Noise, release_searched
from dp_dask.data.draft_numeric import (
    POINTS_MISS,
    numeric_counts,
    search_cells,
    search_numeric,
    threshold,
)
from dp_dask.data.draft_points import value_counts

ROWS = 20_920
# a numeric column's search ε on the weather table at total ε = 1: Laplace scale 2/(ε/2) = 213
# rows per cell, 8 scales for a month's 1,740 rows, 3 for a day's 680, 1.6 for the 31st's 344
SEARCH_EPSILON = 0.0188
COLUMN_EPSILON = 0.0209  # the column's whole share: its point masses take a tenth
DELTA = 3.2e-12
ROWS_SCALE = 44.0  # n̂'s Laplace scale there (5 % of the draft's ε 0.45)


def codes(low: int, high: int, seed: int) -> np.ndarray:
    """ROWS integers uniform on low..high, as an hour, a month or a day of the month (the 31st
    half as often) are."""
    values = np.random.default_rng(seed).integers(low, high + 1, ROWS)
    if high == 31:
        values[(values == 31) & (np.arange(ROWS) % 2 == 0)] = 30
    return values.astype(np.float64)


@pytest.mark.parametrize(("column", "low", "high"), [("month", 1, 12), ("day", 1, 31),
                                                      ("hour", 0, 23)])
def test_item_1_small_codes_get_no_invented_negative_values(column, low, high):
    """On 0231366 every seed drafted these as integers -16..15 (or -16..31): the integer zero
    cell [-16, 16) joined the range and no unit cell passed its threshold, so the release drew
    1.6-2.4 % of a month's values at -16..0. Now the zero cell is split at 0 ([-16, 0) is an
    octave of its own, empty, joining with probability GROW_MISS), and the cells grow from the
    fullest: the range starts at the real minimum or one value below it, never clamps the real
    ends (the 31st: 1.6 noise scales), and a month's ends are exact in most seeds."""
    data = codes(low, high, seed=500)
    cells = search_cells("integer", "int64")
    ranges = []
    for seed in range(12):
        spec, _, _ = search_numeric(column, numeric_counts(data, cells), cells,
                                    epsilon=SEARCH_EPSILON, bins=10, sampler="numpy",
                                    rng=np.random.default_rng(seed))
        ranges.append((spec["min"], spec["max"]))
    assert all(low - 1 <= first <= low and last >= high for first, last in ranges), ranges
    if column == "month":  # 8 noise scales a value: the cells grown from the fullest are exact
        assert sum(r == (low, high) for r in ranges) >= len(ranges) // 2, ranges


def test_item_1_a_thin_negative_tail_beside_codes_is_still_found():
    """The split zero cell keeps a negative code that holds more than noise: -1 as a 'not
    asked' code on 10 % of the rows (9.8 noise scales; the octave [-16, 0) joins the range at the
    grow threshold, 4.6 scales, as any octave beside the range does) stays in the range."""
    data = codes(1, 12, seed=501)
    data[np.random.default_rng(502).random(ROWS) < 0.10] = -1.0
    cells = search_cells("integer", "int64")
    for seed in range(6):
        spec, _, _ = search_numeric("answer", numeric_counts(data, cells), cells,
                                    epsilon=SEARCH_EPSILON, bins=10, sampler="numpy",
                                    rng=np.random.default_rng(seed))
        assert spec["min"] <= -1 and spec["max"] >= 12, spec


def pressures() -> np.ndarray:
    """983.9..1,042.1 hPa, one decimal (the weather table's pressure)."""
    return np.round(np.clip(np.random.default_rng(7).normal(1017.0, 7.5, ROWS), 983.9,
                            1042.1), 1)


# Seeds (of 6,000 scanned) at which an empty public candidate passes the points' threshold
# (PUBLIC_MISS) on pressures(): -900,000,000 (noisy 12,224), -0.004 (11,913), 70 (11,800)
FALSE_POINT_SEEDS = (2321, 3912, 4022)


def _release(data: np.ndarray, seed: int, kind: str = "float"):
    cells = search_cells(kind, "float64" if kind == "float" else "int64")
    return release_searched(
        "c", numeric_counts(data, cells), value_counts(data), cells,
        Noise("numpy", np.random.default_rng(seed), 1), rows=float(len(data)),
        rows_scale=ROWS_SCALE, epsilon=COLUMN_EPSILON, search_epsilon=SEARCH_EPSILON,
        delta=DELTA, bins=10, coarse=False)


@pytest.mark.parametrize("seed", FALSE_POINT_SEEDS)
def test_item_2_a_false_public_point_does_not_stretch_the_range(seed):
    """On 0231366 the range became [-900,000,000, 1,042.1] (or [-0.004, ...], [70, ...]): the
    empty candidate's noisy count (more than half the rows) was released as a point and the
    range widened to it. Now the points' noisy mass beside the rest's (20,920 rows in the
    octaves that pass alone) exceeds n̂ by more than the noises' bound: the public point
    outside the rest's octaves is dropped, the range stays within the data's cells."""
    data = pressures()
    spec, mechanism, _ = _release(data, seed)
    assert "points" not in spec
    fine = search_cells("float", "float64").fine  # a search cell: 32 hPa below 1,024, 64 above
    width = np.diff(fine)[np.searchsorted(fine, [data.min(), data.max()], side="right") - 1]
    assert data.min() - width[0] <= spec["min"] and spec["max"] <= data.max() + width[1], spec
    check = mechanism["steps"][1]["points_check"]
    assert len(check["dropped"]) == 1
    # the excess is the false point's count: above its public threshold, far beyond the slack
    assert check["points"] + check["rest"] - check["rows"] > check["slack"]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("column", "point", "share", "rest"), [
    ("rain", 0.0, 0.93, lambda rng, n: rng.integers(1, 122, n) / 100),
    ("visib", 10.0, 0.84, lambda rng, n: rng.integers(0, 40, n) / 4)])
def test_item_2_real_points_are_kept(seed, column, point, share, rest):
    """Rain's zeros (93 %) and visibility's 10.0 (84 %) stay points: real points and the rest
    add up to n̂, within the noises' bound (the check drops nothing)."""
    rng = np.random.default_rng(600 + seed)
    data = np.where(rng.random(ROWS) < share, point, rest(rng, ROWS))
    spec, mechanism, _ = _release(data, seed)
    assert point in spec["points"], spec
    assert mechanism["steps"][1]["points_check"]["dropped"] == []
    assert spec["max"] >= point, spec  # (the rests, 7-16 % over 4-7 octaves, are thin here)


def test_item_2_the_check_reads_the_rest_and_the_points_on_one_scale():
    """The slack is the three noises' bound at POINTS_MISS: at least the points' own tail at a
    third of it, below a false point's count (its public threshold, 11.7 noise scales), and the
    rest read over the octaves that pass alone, grown (3,700 of the 20,920 pressures lie above
    1,024, below the octaves' threshold): all the rest's rows, within the octaves' noise."""
    data = pressures()
    _, mechanism, _ = _release(data, FALSE_POINT_SEEDS[0])
    found, check = mechanism["steps"][0], mechanism["steps"][1]["points_check"]
    assert threshold(found["scale"], 1, POINTS_MISS / 3) <= check["slack"]
    assert check["slack"] < found["public"]["threshold"]
    assert check["rest_octaves"] == 2
    octave_scale = mechanism["steps"][1]["scale"]
    assert abs(check["rest"] - ROWS) < 6 * octave_scale


@pytest.mark.parametrize("seed", FALSE_POINT_SEEDS)
def test_item_2_the_check_counts_the_missing_values_beside_the_rest(seed):
    """A column of many missing values (pressures, 9,000 of them beside 20,920 values): n̂
    holds the missing rows too, so a check of the points and the rest against n̂ alone left a
    false point room to pass (on 8558be9: its range to -900,000,000, -0.004 or 70). The
    octaves' step counts the missing values in one more cell; the check holds them beside the
    rest, its noise in the slack, and drops the false point."""
    data = pressures()
    missing = 9_000
    cells = search_cells("float", "float64")
    spec, mechanism, _ = release_searched(
        "c", numeric_counts(data, cells), value_counts(data), cells,
        Noise("numpy", np.random.default_rng(seed), 1), rows=float(len(data) + missing),
        rows_scale=ROWS_SCALE, epsilon=COLUMN_EPSILON, search_epsilon=SEARCH_EPSILON,
        delta=DELTA, bins=10, coarse=False, missing=missing)
    assert mechanism["steps"][1]["points_check"]["dropped"]
    # within the data's octaves [512, 2048), no point of its own
    assert 512 <= spec["min"] and spec["max"] <= 2_048 and not spec.get("points")
