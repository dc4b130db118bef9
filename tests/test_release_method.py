"""The default release method end to end on a real LocalCluster: fit, sample, save, load."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import zarr
from conftest import CORRELATED_ROWS, SMALL_SCHEMA_PATH, codes_of

from dp_dask.cluster import compute
from dp_dask.data.counts import count_graph
from dp_dask.data.io import read_table
from dp_dask.data.schema import load_schema
from dp_dask.evaluate.queries import release_labels
from dp_dask.methods.marginals import (
    MarginalModel,
    MarginalsConfig,
    MarginalSynthesizer,
    WeightedRows,
    balance_groups,
    budget_shares,
    distinct_draws,
    fit_marginals,
    measure,
    measured_queries,
    one_way_targets,
    raked_start,
    tree_start,
)
from dp_dask.model_io import ModelError
from dp_dask.postprocess import reweight, rowupdate
from dp_dask.postprocess.config import BalanceConfig, RowUpdateConfig
from dp_dask.postprocess.consistency import Marginals, Measurement
from dp_dask.privacy import gaussian_rho, rho_budget
from dp_dask.synthesizer import Synthesizer, load_model

ROWS = CORRELATED_ROWS  # the rows of conftest's `data`
CONFIG = MarginalsConfig()  # the defaults


@pytest.fixture(scope="module")
def fitted(client, data):
    return Synthesizer.create("marginals", SMALL_SCHEMA_PATH, epsilon=1.0,
                              noise_sampler="numpy", noise_seed=3).fit(data)


def test_create_knows_the_methods():
    assert isinstance(Synthesizer.create("marginals", SMALL_SCHEMA_PATH), MarginalSynthesizer)
    with pytest.raises(ValueError, match="unknown method"):
        Synthesizer.create("nope", SMALL_SCHEMA_PATH)


def test_measurements_spend_exactly_the_budget(fitted):
    privacy = fitted.model.metadata["privacy"]
    rho = rho_budget(1.0, fitted.delta, "exact")
    assert privacy["rho"] == pytest.approx(rho)
    sigmas = (fitted.model.metadata["model"]["noise_sigma"]["one_way"]
              + fitted.model.metadata["model"]["noise_sigma"]["two_way"])
    spent = sum(gaussian_rho(s, np.sqrt(2), "exact") for s in sigmas)
    assert spent <= rho * (1 + 1e-12)
    assert spent == pytest.approx(rho, rel=1e-6)
    shares = budget_shares(fitted.schema, measured_queries(fitted.schema))
    assert shares.sum() == pytest.approx(1.0)



def test_partitions_hit_their_one_way_targets_and_two_way_tables(client, fitted, data):
    schema = fitted.schema
    frame = fitted.sample(ROWS, seed=1, partition_rows=7_000).compute()
    assert len(frame) == ROWS
    synthetic = codes_of(frame, schema)
    model = fitted.model
    one_way_sigma = min(model.metadata["model"]["noise_sigma"]["one_way"])
    for a, histogram in enumerate(model.marginals.one_way):
        counts = np.bincount(synthetic[:, a], minlength=schema.sizes[a])
        # Each partition ends on the release's fit's 1-way counts (exactly: test_marginals);
        # the fit moves the consistent estimate by less than one histogram's noise.
        assert np.abs(counts - histogram * ROWS / model.n_rows).max() < one_way_sigma
    (real,) = compute(count_graph(read_table(data, schema), schema))
    sigma = max(model.metadata["model"]["noise_sigma"]["two_way"])
    labels = schema.as_labels()
    (released,) = compute(count_graph(release_labels(dd.from_pandas(frame, npartitions=2),
                                                     schema), labels))
    pair = slice(0, 3), slice(3, 8)  # colour × size, the strongest dependence
    assert np.abs(released[pair] - real[pair]).max() < 5 * sigma


def test_same_seed_same_rows_on_one_or_two_workers(client, fitted):
    on_cluster = fitted.sample(9_000, seed=4, partition_rows=4_000).compute()
    with dask.config.set(scheduler="sync"):
        in_process = fitted.sample(9_000, seed=4, partition_rows=4_000).compute(scheduler="sync")
    pd.testing.assert_frame_equal(on_cluster.reset_index(drop=True),
                                  in_process.reset_index(drop=True))


def test_partitions_share_fits_drawn_once_per_release(client, fitted):
    # Enough estimates that their candidates (4 per measured row up to min_candidates) stand for
    # the measured rows, one per partition at most: for a model of more rows than one estimate's
    # candidates, two for three partitions, taken in turn.
    sizes = [10_000, 10_000, 5_000]
    assert fitted.model.n_rows <= CONFIG.min_candidates
    assert fitted.model.sampler().estimates(sizes) == 1
    model = replace(fitted.model, n_rows=CONFIG.min_candidates + 1)
    sampler = model.sampler()
    assert sampler.estimates(sizes) == 2
    assert sampler.estimates([1_000] * 30) == 2
    assert replace(fitted.model, n_rows=10 * CONFIG.min_candidates).sampler().estimates(
        [1_000] * 30) == CONFIG.max_estimates
    assert sampler.estimates([2 * CONFIG.min_candidates]) == 1
    frame = Synthesizer.from_model(model).sample(25_000, seed=4, partition_rows=10_000).compute()
    *children, first, second = np.random.SeedSequence(4).spawn(5)
    estimates = [sampler.for_release(10_000, first), sampler.for_release(10_000, second)]
    assert len(estimates[0].shared.codes) <= CONFIG.min_candidates  # distinct rows of the draws
    # the candidates' weights stand for 4 per measured row (their distinct rows are fewer)
    small = fitted.model.sampler().for_release(1_000, first).shared
    assert small.weights.sum() == pytest.approx(CONFIG.candidates_per_row * fitted.model.n_rows,
                                                rel=0.01)
    expected = np.concatenate([estimates[index % 2].draw(rows, child)[1]
                               for index, (rows, child) in enumerate(zip(sizes, children))])
    np.testing.assert_array_equal(codes_of(frame, fitted.schema), expected)


def test_saved_model_samples_the_same(client, fitted, tmp_path):
    loaded = load_model(fitted.save(tmp_path / "model"))
    assert isinstance(loaded, MarginalModel)
    again = Synthesizer.from_model(loaded).sample(3_000, seed=2).compute()
    first = fitted.sample(3_000, seed=2).compute()
    pd.testing.assert_frame_equal(again.reset_index(drop=True), first.reset_index(drop=True))


def test_write_release(client, fitted, tmp_path):
    paths = fitted.write(tmp_path / "release", 5_000, seed=0, partition_rows=2_000,
                          with_binary=True)
    frame = pd.read_parquet(paths["parquet"])
    assert len(frame) == 5_000
    binary = zarr.open_array(str(paths["zarr"]))[:]
    # one dummy set per attribute and row, agreeing with the decoded labels
    assert (binary.sum(axis=1) == fitted.schema.m).all()
    codes = codes_of(frame, fitted.schema)
    np.testing.assert_array_equal(binary[np.arange(5_000)[:, None],
                                         fitted.schema.offsets + codes], 1)


def test_opendp_measurements_pass_their_privacy_map(fitted):
    # Queries of one noise scale are drawn as one OpenDP measurement with sensitivity √(2k):
    # OpenDP's own map must agree with that charge, else gaussian_noise refuses to draw.
    schema = fitted.schema
    counts = np.full((schema.d, schema.d), 1_000, dtype=np.int64)
    rho = rho_budget(1.0, 1e-9, "exact")
    measurements = measure(counts, schema, rho, accountant="exact")
    assert [m.attributes for m in measurements] == measured_queries(schema)
    z = np.concatenate([(m.values - 1_000) / m.sigma for m in measurements])
    assert len(z) == schema.d + sum(a * b for a, b in itertools.combinations(schema.sizes, 2))
    assert 0.7 < z.std() < 1.3 and abs(z.mean()) < 0.5


@pytest.mark.parametrize("rows", [0, -5, 2.5, True])
def test_rows_must_be_positive_never_the_default(fitted, tmp_path, rows):
    with pytest.raises(ValueError, match="positive integer"):
        fitted.sample(rows)
    with pytest.raises(ValueError, match="positive integer"):
        fitted.write(tmp_path / "release", rows)
    assert not (tmp_path / "release").exists()


def test_partition_rows_zero_is_an_error(fitted):
    with pytest.raises(ValueError, match="partition_rows must be positive"):
        fitted.sample(100, partition_rows=0)


def pair_counts(codes: np.ndarray, pair: tuple[int, int], sizes: np.ndarray) -> np.ndarray:
    keys = codes[:, pair[0]].astype(np.int64) * sizes[pair[1]] + codes[:, pair[1]]
    return np.bincount(keys, minlength=sizes[pair[0]] * sizes[pair[1]])


def test_guard_rules_out_exactly_what_some_table_rules_out():
    rng = np.random.default_rng(0)
    sizes = np.array([3, 5, 4, 2, 6])
    possible = {(x, y): rng.random((sizes[x], sizes[y])) < 0.7
                for x, y in itertools.combinations(range(len(sizes)), 2)}
    possible[(1, 2)][:] = True  # a table with no impossible cell
    guard = rowupdate._Guard(possible, sizes)
    row_codes = np.stack([rng.integers(0, s, 400) for s in sizes], axis=1).astype(np.uint8)
    for a, fixed in [(0, ()), (1, ()), (2, (2, 4)), (4, (0, 4))]:
        values = rng.integers(0, sizes[a], 400)
        expected = np.ones(400, dtype=bool)
        for (x, y), allowed in possible.items():  # each table of a, one at a time
            if x == a and y not in fixed:
                expected &= allowed[values, row_codes[:, y]]
            elif y == a and x not in fixed:
                expected &= allowed[row_codes[:, x], values]
        assert 0 < expected.sum() < 400
        np.testing.assert_array_equal(guard.possible(row_codes, a, values, fixed), expected)


def test_one_pass_over_the_rows_picks_what_the_exact_copy_rates_pick(monkeypatch):
    # A visit picks movers and copy candidates in one pass, against a bound on the copy rates,
    # falling back to a second pass when the bound is too low: any bound gives the same rows.
    rng = np.random.default_rng(1)
    n, sizes = 5_000, np.array([4, 5, 3, 6])
    a = rng.choice(4, n, p=[0.4, 0.3, 0.2, 0.1])
    truth = np.stack([a, np.minimum(a + rng.integers(0, 2, n), 4), rng.integers(0, 3, n),
                      np.where(rng.random(n) < 0.9, a, rng.integers(0, 6, n))], axis=1)
    targets = {pair: pair_counts(truth, pair, sizes)
               for pair in itertools.combinations(range(4), 2)}
    possible = rowupdate.possible_cells(targets, sizes)
    start = np.stack([rng.permutation(truth[:, k]) for k in range(4)], axis=1).astype(np.uint8)
    results = []
    for bound in (RowUpdateConfig.copy_bound, 0.0, 1e9):  # shipped, always a second pass, never
        codes = start.copy()
        rowupdate.update_rows(codes, targets, sizes, np.random.default_rng(2), possible=possible,
                              config=RowUpdateConfig(copy_bound=bound))
        results.append(codes)
    np.testing.assert_array_equal(results[1], results[0])
    np.testing.assert_array_equal(results[2], results[0])
    error = [sum(np.abs(pair_counts(c, p, sizes) - t).sum() for p, t in targets.items())
             for c in (start, results[0])]
    assert error[1] < error[0] / 3


def test_coins_below_the_rates_found_in_one_pass():
    # A row leaves when its coin, as a share of 2³², is below its cell's leave rate, exactly;
    # the copy candidates found in the same pass hold every donor at any copy rate within their
    # bound, and a pass over all rows finds them beyond it.
    rng = np.random.default_rng(3)
    cells, n, share, bound = 50, 20_000, 0.5, 1.25
    keys = rng.integers(0, cells, n).astype(np.uint8)
    coins = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    current = np.bincount(keys, minlength=cells)
    excess = np.where(np.arange(cells) < 25, rng.integers(1, 100, cells),
                      -rng.integers(1, 100, cells))
    excess[0] = current[0]  # its leave rate is the rate itself
    first = coins[keys == 0][0] / 2**32
    fraction = coins / 2**32  # exact in float64
    for rate in (first, np.nextafter(first, 1.0), 0.3):  # at a coin (it stays), a hair above
        bounds, leaving, arrived = rowupdate._coin_bounds(excess, current, rate, share, bound)
        movers, candidates = rowupdate._below(coins, keys, bounds, leaving)
        leave_rate = np.where(excess > 0, rate * excess / np.maximum(current, 1), 0.0)
        np.testing.assert_array_equal(movers, np.flatnonzero(fraction < leave_rate[keys]))
        assert arrived == excess[excess > 0].sum()
        assert (np.flatnonzero(keys == 0)[0] in movers) == (rate > first)
    deficit = np.maximum(-excess, 0)
    for scale in (0.5, 1.0, 1.5):  # copy rates within their bound, at it, beyond it
        arriving = np.floor(scale * (bound * deficit + 1)).astype(np.int64)
        donors, rest = rowupdate._donors(coins, keys, np.arange(n), candidates, excess, current,
                                         arriving, share, bound,
                                         np.array([1, 2], dtype=np.uint64))
        copy_rate = np.where(excess < 0, share * arriving / np.maximum(current, 1), 0.0)
        np.testing.assert_array_equal(np.sort(donors),
                                      np.flatnonzero(fraction < copy_rate[keys]))
        np.testing.assert_array_equal(
            rest, np.maximum(arriving - np.bincount(keys[donors], minlength=cells), 0))


def test_codes_of_wide_attributes_keep_their_cells():
    # 300 values need uint16 codes; a 300 × 300 table has more cells than uint16 can count.
    rows, size = 30_000, 300
    diagonal = np.diag(np.full(size, rows / size))
    marginals = Marginals((np.full(size, rows / size),) * 2, {(0, 1): diagonal})
    codes = rowupdate.sample_tree(marginals, np.array([0, 1]), np.array([-1, 0]), rows,
                                  np.random.default_rng(0))
    assert codes.dtype == np.uint16 and (codes[:, 0] == codes[:, 1]).all()
    sizes = np.array([size, size])
    shifted = {(0, 1): np.roll(diagonal, 1, axis=1).ravel().astype(np.int64)}
    before = np.abs(pair_counts(codes, (0, 1), sizes) - shifted[(0, 1)]).sum()
    rowupdate.update_rows(codes, shifted, sizes, np.random.default_rng(1))
    after = np.abs(pair_counts(codes, (0, 1), sizes) - shifted[(0, 1)]).sum()
    assert before == 2 * rows and after < before / 100


def test_partitions_make_row_updates_only_where_the_releases_trial_kept_some(fitted):
    # The trial is a partition like the others: where it kept no sweep, their own sweeps
    # (made anyway here) are thrown away too, so skipping them loses nothing.
    sampler = fitted.model.sampler()
    estimate = sampler.for_release(5_000, np.random.SeedSequence(1))
    kept = [replace(estimate, updates=True)._draw(5_000, np.random.default_rng(seed))[1]
            for seed in range(3)]
    assert kept == [estimate.updates] * 3
    # Far from its targets (no fit, the tree's rows alone), the trial keeps its sweeps.
    far = replace(sampler, start=tree_start, fit_iterations=0)
    assert far.for_release(5_000, np.random.SeedSequence(1)).updates
    # Value moves in releases of up to move_partitions partitions, not in larger ones.
    assert estimate.value_moves
    releases = {k: sampler.for_release(5_000, np.random.SeedSequence(1), k * 5_000)
                for k in (CONFIG.move_partitions, CONFIG.move_partitions + 1)}
    assert releases[CONFIG.move_partitions].value_moves
    assert not releases[CONFIG.move_partitions + 1].value_moves
    settled = releases[CONFIG.move_partitions]._draw(5_000, np.random.default_rng(3))[0]
    unsettled = releases[CONFIG.move_partitions + 1]._draw(5_000, np.random.default_rng(3))[0]
    assert (settled != unsettled).any()
    # without the moves, fewer tree draws per candidate: the sampler before them
    assert releases[CONFIG.move_partitions].start.keywords == {
        "draws_per_row": CONFIG.max_draws_per_row, "raking": CONFIG.raking}
    assert releases[CONFIG.move_partitions + 1].start.keywords == {
        "draws_per_row": CONFIG.unsettled_draws_per_row, "raking": CONFIG.raking}
    # Without updates an unsettled partition still ends on its exact one-way targets; settled
    # rows keep their own, near the fit's (within the pairs' slack of value moves).
    skipping = replace(estimate, updates=False)
    targets = one_way_targets(fitted.model.marginals.one_way, estimate.shared.one_way, 5_000)
    plain = skipping._draw(5_000, np.random.default_rng(2), value_moves=False)[0]
    settled = skipping.draw_codes(5_000, np.random.SeedSequence(2))
    gaps = []
    for a, size in enumerate(fitted.schema.sizes):
        np.testing.assert_array_equal(np.bincount(plain[:, a], minlength=size), targets[a])
        fit = estimate.shared.one_way[a] * (5_000 / estimate.shared.one_way[a].sum())
        gaps.append(np.abs(np.bincount(settled[:, a], minlength=size) - fit).max())
    assert max(gaps) <= BalanceConfig.pair_slack * len(fitted.schema.sizes)


def test_a_releases_partitions_aim_at_what_each_would_compute(fitted):
    """The aims computed once per estimate (for its partitions' size) are those a partition
    computes for itself: the same rows, with row updates kept or not; other sizes compute
    their own; without updates no 2-way targets travel to the tasks."""
    sampler = fitted.model.sampler()
    for estimate in (sampler.for_release(5_000, np.random.SeedSequence(1)),
                     replace(sampler, start=tree_start, fit_iterations=0).for_release(
                         5_000, np.random.SeedSequence(1))):
        assert estimate.aims.rows == 5_000
        assert (estimate.aims.two_way is None) == (not estimate.updates and
                                                   estimate.fit_iterations > 0)
        alone = replace(estimate, aims=None)
        for rows, seed in ((5_000, 2), (5_000, 3), (1_234, 4)):
            np.testing.assert_array_equal(
                estimate.draw_codes(rows, np.random.SeedSequence(seed)),
                alone.draw_codes(rows, np.random.SeedSequence(seed)))
    assert {False, True} == {sampler.for_release(5_000, np.random.SeedSequence(1)).updates,
                             replace(sampler, start=tree_start, fit_iterations=0).for_release(
                                 5_000, np.random.SeedSequence(1)).updates}


def test_dummies_are_written_only_when_asked(client, fitted, tmp_path):
    plain = fitted.write(tmp_path / "plain", 5_000, seed=0, partition_rows=2_000)
    both = fitted.write(tmp_path / "both", 5_000, seed=0, partition_rows=2_000,
                        with_binary=True)
    assert "zarr" not in plain and not (tmp_path / "plain" / "synthetic.zarr").exists()
    assert not any(name.startswith("synthetic.zarr")
                   for name in json.loads(plain["record"].read_text())["files"])
    assert zarr.open_array(str(both["zarr"])).shape == (5_000, fitted.schema.d)
    pd.testing.assert_frame_equal(pd.read_parquet(plain["parquet"]),
                                  pd.read_parquet(both["parquet"]))


def test_a_fitted_partition_ends_on_the_mean_of_consistent_and_fitted_one_way_counts(fitted):
    """Between the consistent estimates (better on large domains) and the fit's margins (better
    on Adult): benchmarks/one_way.py, docs/method.md."""
    sampler = fitted.model.sampler()
    assert sampler.fit_iterations > 0
    rows, seed = 4_321, np.random.SeedSequence(7)
    # rows not settled by value moves (settled ones keep their own: the test above)
    codes = sampler._draw(rows, np.random.default_rng(seed), value_moves=False)[0]
    # the draw's first use of its generator: the same candidates and weights
    weighted = WeightedRows.of(*sampler.weighted_candidates(sampler.candidate_rows(rows),
                                                            np.random.default_rng(seed)),
                               fitted.model)
    differs = []
    for a, size in enumerate(fitted.schema.sizes):
        consistent = fitted.model.marginals.one_way[a]
        target = rowupdate.round_to_total(consistent / consistent.sum()
                                          + weighted.one_way[a] / weighted.one_way[a].sum(), rows)
        np.testing.assert_array_equal(np.bincount(codes[:, a], minlength=size), target)
        differs.append(not np.array_equal(target, rowupdate.round_to_total(consistent, rows)))
    assert any(differs)  # the test tells the mean from the consistent estimates alone


def test_a_model_saved_before_the_measurements_were_kept_is_refused(client, fitted, tmp_path):
    path = fitted.save(tmp_path / "model")
    document = json.loads((path / "model.json").read_text())
    (path / "model.json").write_text(json.dumps({**document, "format": 1}))
    with pytest.raises(ModelError, match="format 1 is not supported.*fit again"):
        load_model(path)
    document["measurements"] = document["measurements"][1:]
    (path / "model.json").write_text(json.dumps(document))
    with pytest.raises(ModelError, match="measurements are not those of its schema"):
        load_model(path)


def test_without_the_fit_partitions_end_on_the_consistent_one_way_counts(client, data):
    unfitted = Synthesizer.create("marginals", SMALL_SCHEMA_PATH, epsilon=1.0,
                                  noise_sampler="numpy", noise_seed=3,
                                  fit_iterations=0).fit(data)
    assert unfitted.model.sampler().fit_iterations == 0
    model, rows = unfitted.model, 4_321
    _, codes = model.sampler().draw(rows, np.random.SeedSequence(7))
    for a, histogram in enumerate(model.marginals.one_way):
        np.testing.assert_array_equal(np.bincount(codes[:, a], minlength=histogram.size),
                                      rowupdate.round_to_total(histogram, rows))


def test_the_fit_iterations_follow_the_noise_unless_given(fitted):
    sigmas = [m.sigma for m in fitted.model.measurements]
    recorded = fitted.model.metadata["model"]["fit_iterations"]
    assert recorded == reweight.iterations_for(sigmas) == fitted.model.sampler().fit_iterations
    model = fitted.model
    quieter = [Measurement(m.attributes, m.values, m.sigma / 4) for m in model.measurements]
    refit = fit_marginals(quieter, model.schema, model.n_rows)
    # A quarter of the noise: the fit runs about four times as long.
    assert abs(refit.metadata["model"]["fit_iterations"] - 4 * recorded) <= 2
    given = fit_marginals(quieter, model.schema, model.n_rows, fit_iterations=7)
    assert given.sampler().fit_iterations == 7


@pytest.mark.parametrize("bad", [-1, 2.5, True, "50"])
def test_a_bad_fit_iterations_is_refused_before_any_work(bad):
    with pytest.raises(ValueError, match="fit_iterations must be an integer"):
        Synthesizer.create("marginals", SMALL_SCHEMA_PATH, fit_iterations=bad)


def test_an_estimate_keeps_the_distinct_rows_of_more_draws(fitted):
    rows = 5_000
    candidates, counts, draws = distinct_draws(fitted.model, rows, np.random.default_rng(2))
    # a small domain: 8 × 5,000 draws still hold fewer distinct rows than 5,000
    assert draws == CONFIG.max_draws_per_row * rows and counts.sum() == draws
    assert len(candidates) <= rows and len(np.unique(candidates, axis=0)) == len(candidates)
    codes, weights = raked_start(fitted.model, rows, np.random.default_rng(2))
    np.testing.assert_array_equal(codes, candidates)
    assert weights.sum() == pytest.approx(rows, rel=0.01)
    fewer = distinct_draws(fitted.model, rows, np.random.default_rng(2),
                           CONFIG.unsettled_draws_per_row)
    assert fewer[2] == CONFIG.unsettled_draws_per_row * rows < draws


def test_balanced_and_unbalanced_schemas_draw_their_candidates(fitted):
    """Triples balanced: 4 candidates per measured row (up to 2¹⁷); a schema of too many
    triples (16 booleans: 560) is resampled plainly from unbalanced_candidates_per_row per
    partition row, up to 2¹⁶ (larger partitions: one per row)."""
    model = fitted.model
    assert {len(group) for group in balance_groups(model.schema)} == {3}
    assert model.sampler().candidate_rows(1_000) == max(
        1_000, min(CONFIG.candidates_per_row * model.n_rows, CONFIG.min_candidates)) > 1_000
    wide = load_schema({"schema_version": 1, "name": "wide", "attributes": [
        {"name": f"b{i}", "type": "boolean"} for i in range(16)]})
    assert balance_groups(wide) == ()
    plain = replace(model, schema=wide).sampler()
    assert plain.candidate_rows(1_000) == CONFIG.unbalanced_candidates_per_row * 1_000
    assert plain.candidate_rows(40_000) == CONFIG.min_candidates // 2
    assert plain.candidate_rows(100_000) == 100_000
