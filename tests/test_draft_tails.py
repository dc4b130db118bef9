"""Issue 65, tails: the draft's numeric range keeps a tail holding ≥ 0.5 % of the rows (not
clamped at a power of two) and never ends more than one fine cell beyond the real data, on
columns shaped as the issue's real tables (carats, prices capped at 18,823, a depth heaped far
inside its octaves). Seeded; the tolerances are cells of the public grid."""

from __future__ import annotations

import numpy as np
import pytest

from dp_dask.data.draft_numeric import (
    FINE_TARGET,
    StepNoise,
    _range_ends,
    numeric_counts,
    search_cells,
    search_numeric,
)

ROWS = 40_000
EPSILON = 0.2  # a column's share: Laplace scale 2 / 0.1 = 20 rows per cell


def carats(rng: np.random.Generator) -> np.ndarray:
    """Two decimals, 0.2..5.01, 3.5 % of the rows above 2 (the diamonds' carat)."""
    body = np.clip(rng.lognormal(-0.35, 0.5, ROWS), 0.2, 1.99)
    tail = rng.random(ROWS) < 0.035
    body[tail] = 2.0 + rng.exponential(0.4, tail.sum())
    return np.round(np.minimum(body, 5.01), 2)


def prices(rng: np.random.Generator) -> np.ndarray:
    """Integers 326..18,823, about 2 % of them at or above 16,384 (the diamonds' price)."""
    return np.clip(np.round(rng.lognormal(7.8, 1.0, ROWS)), 326, 18_823)


def depths(rng: np.random.Generator) -> np.ndarray:
    """One decimal, 43..79, heaped at 58..66: far inside the octaves [32, 64) and [64, 128)."""
    return np.round(np.clip(rng.normal(61.7, 1.4, ROWS), 43, 79), 1)


def _cell_width(cells, value: float, data: np.ndarray) -> float:
    """The width of the fine (or unit, for integers all within ±4096) cell holding ``value``."""
    edges = (cells.units if cells.units is not None and np.abs(data).max() < 4096
             else cells.fine)
    j = int(np.searchsorted(edges, value, side="right")) - 1
    return float(edges[j + 1] - edges[j])


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("column", "kind", "values"), [
    ("carat", "float", carats), ("price", "integer", prices), ("depth", "float", depths)])
def test_item1_tails_are_kept_and_the_range_ends_within_a_cell_of_the_data(seed, column, kind,
                                                                            values):
    rng = np.random.default_rng(seed)
    data = values(np.random.default_rng(100 + seed))
    cells = search_cells(kind, "float64" if kind == "float" else "int64")
    spec, _, _ = search_numeric(column, numeric_counts(data, cells), cells, epsilon=EPSILON,
                                bins=10, sampler="numpy", rng=rng)
    low, high = float(spec["min"]), float(spec["max"])
    # no tail of 1.5 % of the rows clamped (at this ε the ends' noise is ~300 rows summed over
    # the cells beyond them: see tail_threshold)...
    assert low <= np.quantile(data, 0.015) and high >= np.quantile(data, 0.985), (low, high)
    # ...and no end more than one fine cell beyond the data
    assert low >= data.min() - _cell_width(cells, data.min(), data), (low, data.min())
    assert high <= data.max() + _cell_width(cells, data.max(), data), (high, data.max())


@pytest.mark.parametrize("seed", range(4))
def test_item1_zeros_beside_far_values_are_not_clamped_into_them(seed):
    """Wind directions: 5 % calm hours at exactly 0, the rest 10..360 in steps of 10, empty
    float octaves between. At ε = 0.02 (the one command's share on a 15-column table) the zeros
    pass the grow threshold, not the octaves' own: the zero cell joins the range across the
    empty octaves, and 0 is not clamped to 8."""
    rng = np.random.default_rng(seed)
    data = np.random.default_rng(200 + seed).integers(1, 37, ROWS) * 10.0
    data[np.random.default_rng(300 + seed).random(ROWS) < 0.05] = 0.0
    cells = search_cells("float", "float64")
    spec, record, _ = search_numeric("wind_dir", numeric_counts(data, cells), cells,
                                     epsilon=0.02, bins=10, sampler="numpy", rng=rng)
    assert float(spec["min"]) <= 0.0 < float(spec["min"]) + 2.0**-9
    assert record["steps"][0]["zero_cell_joined"]


@pytest.mark.parametrize("seed", range(4))
def test_item1_the_rest_beside_a_point_mass_is_searched_by_runs_of_octaves(seed):
    """80 % of 5,000 rows exactly 0, the rest spread over 0.1..25 (one decimal): no octave
    beside the zero cell passes alone at the one command's share of a two-column table, so
    the range was the zero cell and every released value 0. Runs of octaves whose noisy sum
    is above noise's (post-processing of the same counts) keep the rest: 14 % of the rows lie
    at 1 or above."""
    rows = 5_000
    data = np.random.default_rng(400 + seed)
    values = np.where(data.random(rows) < 0.8, 0.0, np.round(data.exponential(3.0, rows), 1))
    cells = search_cells("float", "float64")
    spec, record, _ = search_numeric("rain", numeric_counts(values, cells), cells,
                                     epsilon=0.172, bins=10, sampler="numpy",
                                     rng=np.random.default_rng(seed))
    assert float(spec["min"]) <= 0.0 and float(spec["max"]) >= 1.0, spec
    assert record["steps"][0]["tail_octaves"][1] > 0
    assert float(spec["max"]) <= values.max() + _cell_width(cells, values.max(), values)


@pytest.mark.parametrize("seed", range(3))
def test_item1_a_column_heaped_within_two_octaves_gets_fine_cells_of_a_few_units(seed):
    """Pressures of 26,000 hourly rows, 1017 ± 7 hPa on one decimal: the range found spans two
    search cells of 32 and 64 hPa, and values were drawn uniformly within them (weather's
    pressure KS 0.32 at the one command's ε = 1, 13.7 % outside the real range). The fine grid
    splits each search cell of the range by its noisy rows (public halvings, ROWS_PER_FINE_CELL
    of them a part at least): cells of a few hPa."""
    values = np.round(np.random.default_rng(500 + seed).normal(1017.0, 7.0, 26_000), 1)
    cells = search_cells("float", "float64")
    spec, record, _ = search_numeric("pressure", numeric_counts(values, cells), cells,
                                     epsilon=0.07, bins=10, sampler="numpy",
                                     rng=np.random.default_rng(seed))
    fine = np.asarray(spec["fine"], dtype=float)
    heap = (fine[:-1] >= 1000) & (fine[1:] <= 1034)
    assert heap.any() and np.diff(fine)[heap].max() <= 4.0, fine
    assert len(fine) - 1 <= FINE_TARGET


def test_item1_a_tail_spread_over_octaves_is_kept_to_its_last_dense_octave():
    """Issue 65: the octaves beyond a range were kept up to the first octave of a run whose
    noisy sum passed, so a tail of 8 % of the rows spread over five octaves ([512, 16384): 420
    rows each, 2.8 noise scales at this column's share of the one command's Gaussian budget on
    Adult) was cut after its first octave or two, and the cells then read the core as all of
    it: 0..15 or 0..2047, 92-95 % of the values inside, in 13 seeds of 20. The range now goes
    on into the run through its adjacent octaves of at least one noise deviation each, never
    past the data's last octave."""
    rng = np.random.default_rng(0)
    core = rng.integers(0, 16, 23_920)
    tail = np.round(2 ** rng.uniform(9, 14, 2_080))
    values = np.concatenate([core, tail]).astype(float)
    cells = search_cells("integer", "int64")
    counts = numeric_counts(values, cells)
    kept = 0
    for seed in range(20):
        spec, _, _ = search_numeric("loss", counts, cells, epsilon=0.023, bins=10,
                                    sampler="numpy", rng=np.random.default_rng(seed), rho=9e-5)
        kept += np.mean((values >= spec["min"]) & (values <= spec["max"])) >= 0.96
        assert spec["max"] < 2**15, (seed, spec["max"])  # the data's last octave, [2^14, 2^15)
    assert kept >= 13, kept  # 15 here (noise hides the whole tail in the others); 7 before


def test_item1_a_trim_never_cuts_what_the_octaves_outside_it_hold():
    """Issue 65: an end was trimmed where the cells it cuts off, plus noise's bound, held at
    most half the trim share: on Adult's capital gains (2,080 rows beside 23,920 zeros, over
    175 fine cells of [1, 16384) at σ 149) their noisy sum came out at −1,500, and the range
    was the zeros alone (every released value 0). The octaves outside the trimmed range (11
    noises, not 175) hold the 2,080 rows: the end now stays at the octaves' range."""
    cells = search_cells("integer", "int64")
    edges = cells.fine[(cells.fine >= -16) & (cells.fine <= 32768)]
    cell = np.zeros(len(edges) - 1)
    zero = int(np.searchsorted(edges, 0))
    top = int(np.searchsorted(edges, 16384))
    cell[zero] = 23_920
    cell[zero + 1:top] = -1_500 / (top - zero - 1)  # the rest's noisy cells, summed to −1,500
    octaves = 2.0 ** np.arange(4, 15)
    octave_counts = np.array([23_920, 0, 0, 0, 0, 0, 416, 416, 416, 416, 416], dtype=float)
    first, last, _ = _range_ends(cell, StepNoise(149.0, gaussian=True), edges, 0.0, 16384.0,
                                 (np.concatenate([[0.0], octaves]), octave_counts))
    assert (edges[first], edges[last + 1]) == (0, 16384)


def wind_speeds(rng: np.random.Generator, rows: int = 21_000) -> np.ndarray:
    """Knots converted to mph (a lattice of 1.15078), 5 % calm at 0, 7.7 % of the rows past
    19 mph on 19.6..40 at 1-2 % a value: the weather table's wind speeds."""
    knots = np.concatenate([np.zeros(round(rows * 0.05)),
                            rng.integers(3, 17, round(rows * 0.873)),
                            17 + np.minimum(rng.geometric(0.25, rows), 19)])[:rows]
    return knots * 1.15078


def test_a_tail_of_a_cut_octave_is_not_clamped_by_the_noise_of_the_cells_sum():
    """Issue 65: at the one command's share of weather's draft (ρ 7.1e-5 a column, Gaussian
    σ 168 a cell) no cell past 19 mph passes alone and the cells kept held all but the trim
    share of the octaves' mass by the noise of their sum, so half the seeds drafted the range
    to 19-21 and clamped 5-7.7 % of the rows (4 of these 8). The octave [16, 32) holds them:
    its noisy count beyond the cells kept moves the end out to 32. The difference's noise
    (σ·√6 = 411 rows against about 1,100-1,600) still hides them in one seed in eight."""
    clamped = []
    for seed in range(8):
        data = wind_speeds(np.random.default_rng(400 + seed))
        cells = search_cells("float", "float64")
        spec, _, _ = search_numeric("wind_speed", numeric_counts(data, cells), cells,
                                    epsilon=0.0209, rho=7.07e-5, bins=10, sampler="numpy",
                                    rng=np.random.default_rng(seed))
        clamped.append(float(spec["max"]) < np.quantile(data, 0.99))
    assert sum(clamped) <= 1, clamped
