"""Issue 65, values outside the real range: where a drafted range reaches past the data (ages
drafted to 127 where they end at 90), the release drew 1.4-2.6 % of its values beyond the real
range: an end bin's fine cells, each far below their noise, spread the bin's rows over the
whole drafted range. The release's tail prior (post-processing of the noisy counts) keeps them
near the data. Seeded; tolerances from the noise scale."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import isotonic_regression

from dp_dask.data.dtypes import fine_layout
from dp_dask.data.schema import load_schema
from dp_dask.data.values import cell_spans
from dp_dask.postprocess.consistency import consistent_fine, tail_target, unimodal_regression

SIGMA = 200.0  # a fine cell's noise in the one command's release of a 26 k-row, 15-column table


def age_attribute(edges: list) -> object:
    return load_schema({"attributes": [{
        "name": "age", "type": "numeric", "edges": ["-inf", *edges, "inf"], "min": 16,
        "max": 127, "dtype": "int64", "fine": list(range(16, 129))}]}).attributes[0]


AGE = age_attribute([23, 30, 40, 55, 69])
# a bin beyond the data too, as a draft's noisy quantiles place them: [100, 127] holds no row
AGE_BEYOND = age_attribute([23, 30, 40, 55, 69, 100])


def ages(rows: int, rng: np.random.Generator) -> np.ndarray:
    """Adult-like ages 17..90: a body in the 20s-50s and a tail of about 2 % above 69."""
    return np.clip(np.round(17 + rng.gamma(2.2, 9.0, rows)), 17, 90).astype(int)


def _consistent(values: np.ndarray, seed: int, tail_prior: bool,
                attribute: object = AGE) -> tuple[np.ndarray, np.ndarray]:
    """The age column's consistent fine histogram from its exact counts plus Gaussian noise
    of SIGMA (the bins' counts exact: their noise is a tenth of a bin's rows here), and each
    cell's span of values."""
    layout = fine_layout(attribute)
    exact = np.bincount(np.searchsorted(layout.edges, values, side="right") - 1,
                        minlength=len(layout.edges) - 1).astype(float)
    coarse = np.add.reduceat(exact, layout.first[:-1])
    noisy = exact + np.random.default_rng(seed).normal(0.0, SIGMA, len(exact))
    spans = cell_spans(attribute, layout.edges)
    extra = (SIGMA, spans) if tail_prior else ()
    return consistent_fine(noisy, layout.first, 0, coarse, *extra), spans[0]


@pytest.mark.parametrize("attribute", [AGE, AGE_BEYOND], ids=["last bin", "bin beyond"])
def test_an_end_bin_its_cells_cannot_resolve_keeps_its_rows_near_the_data(attribute):
    """The last bin [69, 127] holds about 500 rows over 59 cells of noise 200 each: projected
    alone, a third of its rows went beyond 90 (1.4 % of the table on average, 3.5 % at worst in
    Adult's release); leaning on a tail that decays from 69 at the density of [55, 69), at most
    a tenth of the old share. Where a bin beyond the data follows ([100, 127], no row: the
    flights' clock times drafted to 4,095 had three), [69, 100) is the end bin all the same:
    the bins beyond hold fewer rows than one cell's noise."""
    values = ages(26_000, np.random.default_rng(7))
    beyond = {True: [], False: []}
    for seed in range(20):
        for prior in (True, False):
            fine, low = _consistent(values, seed, prior, attribute)
            beyond[prior].append(fine[low > values.max()].sum() / len(values))
    old, new = np.mean(beyond[False]), np.mean(beyond[True])
    assert old > 0.005, old  # the failure this guards against: half a percent and more
    assert new < 0.1 * old and max(beyond[True]) < 0.005, (new, max(beyond[True]))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("value", "share"), [(16, 0.04), (45, 0.3)],
                         ids=["at the outer end", "inside a bin"])
def test_a_heap_stays_where_it_is(seed, value, share):
    """Calm winds: 4 % of the rows at the range's first value, the rest of its end bin thin;
    hours of work: a third of the rows at one value inside a bin of the body. The heap is far
    beyond any cell's noise, so it is kept whole, not spread by the decaying tail or the
    body's even spread over its bin: its cell keeps its rows within a few noise scales."""
    rng = np.random.default_rng(20 + seed if value == 16 else 30 + seed)
    values = ages(26_000, rng)
    values[rng.random(len(values)) < share] = value
    fine, low = _consistent(values, seed, True)
    heap = (values == value).sum()
    assert abs(fine[low == value][0] - heap) < 4 * SIGMA, (fine[low == value][0], heap)


def test_the_tail_holds_the_bins_count_decays_outwards_and_is_flat_where_it_cannot():
    """The tail target: the bin's count in all, decaying outwards from the edge it shares with
    its neighbour (either end), at that neighbour's density there; uniform where the bin is
    denser than its neighbour (no decaying tail holds its count), and over its cells where it
    spans no value of its kind (an integer bin within one unit)."""
    layout = fine_layout(AGE)
    spans = cell_spans(AGE, layout.edges)
    coarse = np.array([700.0, 3_000, 4_000, 6_000, 5_000, 500])
    last, first = (tail_target(coarse, layout.first, spans, end, neighbour)
                   for end, neighbour in ((5, 4), (0, 1)))
    np.testing.assert_allclose([last.sum(), first.sum()], [500.0, 700.0])
    assert (np.diff(last) < 0).all() and (np.diff(first) > 0).all()
    # at the inner edge, the neighbour's density ([55, 69): 5,000 rows over 14 years): cells of
    # one year each hold d·(1 − r)/λ, r = e^(−λ) the ratio of neighbouring cells
    ratio = last[1] / last[0]
    np.testing.assert_allclose(last[0] * -np.log(ratio) / (1 - ratio), 5_000 / 14, rtol=1e-6)
    flat = tail_target(np.array([700.0, 3_000, 4_000, 6_000, 50, 5_000]), layout.first, spans,
                       5, 4)
    np.testing.assert_allclose(flat, 5_000 / len(flat))
    no_values = tail_target(np.array([100.0, 50.0, 10.0]), np.array([0, 1, 2, 3]),
                            (np.array([0.0, 1.0, 1.0]), np.array([1.0, 1.0, 1.0])), 2, 1)
    np.testing.assert_allclose(no_values, [10.0])


# [55, 127] holds about 15 % of the rows: its cells resolve it (more rows than σ a cell), so no
# tail prior; its cells past 90 hold noise only.
AGE_WIDE_LAST = age_attribute([23, 30, 40, 55])


def test_an_end_bin_its_cells_resolve_draws_no_noise_past_the_data():
    """Issue 65, outside the real range: an end bin holding more rows than its cells' noise
    was projected cell by cell, so each of its cells past the rows' last value kept its noise's
    positive part (ages above 90 drawn where the draft's range ran on to 127). The cells past
    the bin's outermost signal cell are now fitted by one unimodal sequence (rising to a mode,
    falling outwards), which pools those noise-only cells: under half the old count past the
    data on average (2.3x fewer at this seed). The first bin (ages 17-22, about 2,000 rows a
    year) is signal to its outermost cell: left as it was."""
    values = ages(200_000, np.random.default_rng(9))
    beyond = {True: [], False: []}
    for seed in range(20):
        new, low = _consistent(values, seed, True, AGE_WIDE_LAST)
        old, _ = _consistent(values, seed, False, AGE_WIDE_LAST)
        np.testing.assert_array_equal(new[low < 23], old[low < 23])
        for fitted, fine in ((True, new), (False, old)):
            beyond[fitted].append(fine[low > values.max()].sum())
    old_share, new_share = np.mean(beyond[False]), np.mean(beyond[True])
    assert old_share > 4 * SIGMA, old_share  # the failure: 37 cells' positive noise
    assert new_share < old_share / 2, (new_share, old_share)


def test_a_bin_whose_cells_hold_less_than_their_noise_leans_on_the_uniform():
    """Issue 65, worst KS: a column with few non-null rows (weather's gusts, 4,300 of 20,920,
    noise 254 a cell) had each inner bin's cells projected as measured, noise alone placing
    its rows within the bin. Shrunk towards each bin spread evenly over its cells' widths (an
    empirical-Bayes weight from the body's cells' energy beyond their noise), the fine
    histogram's largest cumulative error over the body falls by a quarter and more on
    average."""
    values = ages(4_300, np.random.default_rng(11))
    layout = fine_layout(AGE)
    exact = np.bincount(values - 16, minlength=112).astype(float)
    body = slice(layout.first[1], layout.first[-2])  # the bins between the end bins
    errors = {True: [], False: []}
    for seed in range(20):
        new, _ = _consistent(values, seed, True)
        old, _ = _consistent(values, seed, False)
        for flat, fine in ((True, new), (False, old)):
            errors[flat].append(np.abs(np.cumsum(fine[body] - exact[body])).max())
    assert np.mean(errors[True]) < 0.75 * np.mean(errors[False]), errors


def test_the_unimodal_fit_is_the_least_squares_one_over_every_mode():
    """Against a fit per mode (scipy's isotonic regression each way, the least squared error
    kept) on random sequences of 1-40 values: the same error, and the cells' sum kept."""
    rng = np.random.default_rng(5)
    for _ in range(200):
        values = rng.normal(0.0, 1.0, rng.integers(1, 41)) * 50 + rng.integers(0, 300)
        best = min(float(np.sum((np.concatenate([
            isotonic_regression(values[:mode]).x if mode else values[:0],
            isotonic_regression(values[mode:], increasing=False).x if mode < len(values)
            else values[:0]]) - values) ** 2)) for mode in range(len(values) + 1))
        fitted = unimodal_regression(values)
        assert np.sum((fitted - values) ** 2) == pytest.approx(best, rel=1e-9, abs=1e-6)
        assert fitted.sum() == pytest.approx(values.sum())
        peak = int(np.argmax(fitted))
        assert np.all(np.diff(fitted[:peak + 1]) >= -1e-9)
        assert np.all(np.diff(fitted[peak:]) <= 1e-9)
