"""The compiled cell searches (issue 69, the roofline's decoding and counting) return, row for
row, what the NumPy expressions they replaced return: a release and its counts stay the same."""

import numpy as np
import pytest

from dp_dask.data.cell_search import cells_of_values, draw_cells, draw_integers


def _bins_layout(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
    """A layout's ``first`` (bin b's cells first[b]:first[b + 1]): bins of 1 to 12 cells."""
    per_bin = rng.integers(1, 13, size=9)
    return np.concatenate([[0], np.cumsum(per_bin)]), per_bin, len(per_bin)


@pytest.mark.parametrize("seed", range(5))
def test_issue69_cells_of_values_is_searchsorted_clipped_to_the_bin(seed: int) -> None:
    rng = np.random.default_rng(seed)
    first, _, bins = _bins_layout(rng)
    edges = np.cumsum(rng.uniform(0.1, 3.0, size=first[-1] + 1))
    edges[0], edges[-1] = -np.inf, np.inf  # open outer cells, as fine_layout makes them
    rows = 20_000
    codes = rng.integers(0, bins, size=rows)
    # values in, beyond and below their bin, on the edges themselves, NaN and infinities
    numbers = rng.uniform(edges[1] - 5, edges[-2] + 5, size=rows)
    numbers[::7] = edges[rng.integers(1, len(edges) - 1, size=len(numbers[::7]))]
    numbers[::101] = np.nan
    numbers[1::103], numbers[2::107] = np.inf, -np.inf
    expected = np.clip(np.searchsorted(edges, numbers, side="right") - 1, first[codes],
                       first[codes + 1] - 1)
    np.testing.assert_array_equal(cells_of_values(edges, first, codes, numbers), expected)


@pytest.mark.parametrize("seed", range(5))
def test_issue69_draw_cells_is_searchsorted_of_the_within_bin_cdf(seed: int) -> None:
    rng = np.random.default_rng(seed)
    first, per_bin, bins = _bins_layout(rng)
    weights = rng.uniform(0, 5, size=first[-1]) * (rng.random(first[-1]) > 0.3)  # zeros too
    weights[first[:-1]] += 1e-3  # every bin holds mass (fine_weights sees to it)
    bin_of = np.repeat(np.arange(bins), per_bin)
    totals = np.bincount(bin_of, weights=weights, minlength=bins)
    within = np.cumsum(weights) - np.repeat(np.cumsum(totals) - totals, per_bin)
    cdf = bin_of + within / totals[bin_of]
    rows = 20_000
    codes = rng.integers(0, bins, size=rows).astype(np.intp)
    uniforms = rng.random(rows)
    uniforms[:3] = (0.0, 1 - 2**-53, 0.5)
    expected = np.clip(np.searchsorted(cdf, codes + uniforms, side="right"), first[codes],
                       first[codes + 1] - 1)
    np.testing.assert_array_equal(draw_cells(cdf, first, codes, uniforms), expected)


@pytest.mark.parametrize("dtype", [np.int16, np.int64])
def test_issue69_draw_integers_is_the_numpy_draw(dtype: type) -> None:
    rng = np.random.default_rng(3)
    low = np.array([-10, 0, 5, 7, 1_000_000_000_000, 3], dtype=np.int64)
    high = np.array([-3, 0, 9, 6, 1_000_000_000_999, 3], dtype=np.int64)  # 6..7: none
    codes = rng.integers(0, len(low), size=10_000).astype(dtype)
    uniforms = rng.random(len(codes))
    uniforms[:2] = (0.0, 1 - 2**-53)
    lo, hi = low[codes], high[codes]
    expected = np.minimum(lo + np.floor(uniforms * (hi - lo + 1).astype(np.float64)
                                        ).astype(np.int64), hi)
    np.testing.assert_array_equal(draw_integers(codes, low, high, uniforms), expected)
