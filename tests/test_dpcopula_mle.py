"""DPCopula-MLE: blocks in a random row order, the block estimator, its sensitivity, releases."""

from __future__ import annotations

import itertools
import json
import math

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from conftest import (
    CORRELATED_ROWS,
    SMALL_SCHEMA_PATH,
    assert_pure_laplace,
    assert_resamples_alike,
)
from scipy.special import ndtri
from scipy.stats import rankdata
from test_dpcopula import FINE_SCHEMA, codes_of, fine_copula_frame

from dp_dask.data.encode import encode_partition
from dp_dask.data.order import (
    ORDER_KEY,
    codes_frame,
    frame_codes,
    order_seed,
    random_row_order,
    sort_by_key,
)
from dp_dask.data.schema import load_schema
from dp_dask.methods.dpcopula import DPCopulaModel, split_budget
from dp_dask.methods.dpcopula_mle import (
    QUANTUM,
    DPCopulaMLESynthesizer,
    block_correlations,
    block_count,
    block_edges,
    block_sums,
    block_tasks,
    noisy_block_average,
    ordered_mle_graph,
)
from dp_dask.synthesizer import Synthesizer, load_model


def scipy_normal_scores_correlation(block: np.ndarray) -> np.ndarray:
    """(rows, m) codes → the C(m,2) correlations of Φ⁻¹(mid-rank/(rows+1)), 0 for constants."""
    pairs = np.triu_indices(block.shape[1], k=1)
    if len(block) < 2:  # nothing varies in one row
        return np.zeros(len(pairs[0]))
    scores = ndtri(rankdata(block, axis=0) / (len(block) + 1))
    constant = np.ptp(block, axis=0) == 0
    with np.errstate(invalid="ignore", divide="ignore"):
        matrix = np.corrcoef(scores.T)
    matrix[constant, :] = matrix[:, constant] = 0.0
    return matrix[pairs]


def random_codes(rng: np.random.Generator, m: int, n: int, size: int = 5) -> np.ndarray:
    codes = rng.integers(0, size, (m, n)).astype(np.int8)
    codes[1] = np.clip(codes[0] + rng.integers(-1, 2, n), 0, size - 1)  # one dependent pair
    return codes


@pytest.mark.parametrize("n, blocks", [(103, 7), (40, 1), (12, 12), (2_000, 450)])
def test_block_estimates_are_normal_scores_correlations(n, blocks):
    rng = np.random.default_rng(n)
    codes = random_codes(rng, 4, n)
    edges = block_edges(n, blocks)
    assert set(np.diff(edges)) <= {n // blocks, -(-n // blocks)} and edges[-1] == n
    got = block_correlations(codes, edges)
    for t in range(blocks):
        expected = scipy_normal_scores_correlation(codes[:, edges[t] : edges[t + 1]].T)
        np.testing.assert_allclose(got[t], expected, atol=1e-12)


def partition_sums(codes: np.ndarray, lengths: np.ndarray, blocks: int) -> np.ndarray:
    """S as the Dask graph computes it: tasks over partitions of ``lengths`` rows."""
    parts = np.split(codes, np.cumsum(lengths)[:-1], axis=1)
    edges = block_edges(codes.shape[1], blocks)
    starts = np.cumsum(lengths) - lengths
    return sum(block_sums(edges[k0 : k1 + 1] - edges[k0], int(edges[k0] - starts[p]),
                          *parts[p : q + 1])
               for p, q, k0, k1 in block_tasks(lengths, edges))


def test_blocks_depend_on_positions_only():
    """The same rows cut into any partitions give the same S (a CSV's byte ranges can move a row
    to the next partition); replacing one row changes one block's estimates and nothing else."""
    rng = np.random.default_rng(0)
    n, blocks = 600, 40
    codes = random_codes(rng, 4, n)
    whole = block_sums(block_edges(n, blocks), 0, codes)
    for _ in range(5):  # random layouts, with empty partitions and blocks over several of them
        cuts = np.sort(rng.integers(0, n, int(rng.integers(1, 40))))
        lengths = np.diff(np.concatenate([[0], cuts, [n]]))
        np.testing.assert_array_equal(partition_sums(codes, lengths, blocks), whole)
    before = block_correlations(codes, block_edges(n, blocks))
    row = 317
    codes[:, row] = (codes[:, row] + 1) % 5
    after = block_correlations(codes, block_edges(n, blocks))
    changed = np.flatnonzero(np.any(after != before, axis=1))
    assert changed.tolist() == [int(np.searchsorted(block_edges(n, blocks), row, "right")) - 1]


def test_averages_move_at_most_2_over_l_per_coefficient():
    """L1 sensitivity C(m,2)·2/l of the block averages under replace-one, and it is attained."""
    rng = np.random.default_rng(1)
    worst = 0.0
    for _ in range(300):
        m, n = int(rng.integers(2, 5)), int(rng.integers(6, 60))
        blocks = int(rng.integers(1, n // 2 + 1))
        codes = random_codes(rng, m, n, size=int(rng.integers(2, 6)))
        edges = block_edges(n, blocks)
        before = block_correlations(codes, edges).mean(axis=0)
        codes[:, rng.integers(n)] = rng.integers(0, 2, m)
        change = np.abs(block_correlations(codes, edges).mean(axis=0) - before)
        assert change.sum() <= m * (m - 1) // 2 * 2 / blocks + 1e-12
        worst = max(worst, change.max() * blocks / 2)
    assert worst > 0.9  # random neighbours come near the per-coefficient bound
    # attained: a 2-row block (1, 1), (2, 2) has r = +1; replacing (2, 2) by (2, 0) gives −1
    codes = np.array([[1, 2, 0, 1, 2, 0], [1, 2, 1, 0, 2, 2]], dtype=np.int8)
    edges = block_edges(6, 3)
    before = block_correlations(codes, edges).mean(axis=0)
    codes[1, 1] = 0
    assert before[0] - block_correlations(codes, edges).mean(axis=0)[0] == pytest.approx(2 / 3)


def test_block_rule_and_noise_scale():
    # the public rule: B = sqrt(n·ε2/(4√2·C(m,2))), at least 3 rows, l = n // B
    _, epsilon2 = split_budget(1.0, 8.0, 15)
    assert block_count(45_222, 15, epsilon2) == 45_222 // 3  # Adult, ε = 1: B = 2.9 → 3
    assert block_count(5_240_000, 10, epsilon2) == 5_240_000 // round(
        math.sqrt(5_240_000 * epsilon2 / (4 * math.sqrt(2) * 45)))
    assert block_count(1, 15, epsilon2) == 1 and block_count(10**6, 1, epsilon2) == 1
    # Laplace of scale C(m,2)·2/(l·ε2) on each average: std √2·b over seeded draws (± 5 %)
    rng = np.random.default_rng(2)
    sums, blocks, epsilon2 = np.array([3 * QUANTUM, -QUANTUM, 0]), 40, 2.0
    draws = np.array([noisy_block_average(sums, blocks, epsilon2, sampler="numpy", rng=rng)
                      for _ in range(4_000)])
    b = 3 * 2 / (blocks * epsilon2)
    assert draws.std(axis=0) == pytest.approx(np.full(3, math.sqrt(2) * b), rel=0.05)
    assert np.abs(draws.mean(axis=0) - [3 / 40, -1 / 40, 0]).max() < 5 * b / math.sqrt(2_000)
    # OpenDP's discrete Laplace accepts the calibration (its privacy map is checked first)
    noisy = noisy_block_average(sums, blocks, epsilon2, sampler="opendp", rng=None)
    assert noisy.shape == (3,) and np.all(np.abs(noisy) <= 1)


def test_large_epsilon_recovers_marginals_and_correlations(client):
    n, rho, blocks = 20_000, 0.6, 200
    schema = load_schema(FINE_SCHEMA)
    frame = fine_copula_frame(n, rho, seed=2)
    real = encode_partition(frame, schema)  # (m, n) codes
    with dask.config.set({"dataframe.convert-string": False}):
        ddf = dd.from_pandas(frame, npartitions=3)  # 6,667 rows: blocks of 100 straddle them
    synthesizer = Synthesizer.create("dpcopula-mle", FINE_SCHEMA, epsilon=1e6, blocks=blocks,
                                     noise_sampler="numpy", noise_seed=0, ledger=False)
    model = synthesizer.fit(ddf).model
    # the blocks are cut in the fit's random order (its seed derived from noise_seed = 0)
    ordered = frame_codes(random_row_order(codes_frame(ddf, schema), order_seed(0)).compute())
    exact = block_correlations(ordered, block_edges(n, blocks)).mean(axis=0)
    assert not np.allclose(exact, block_correlations(real, block_edges(n, blocks)).mean(axis=0),
                           atol=1e-3)  # ... not in the file's order
    # noise ~1e-8, rounding to 1/Q ≤ 8e-6: the model holds the data's block averages
    assert model.metadata["model"]["noisy_correlations"] == pytest.approx(exact, abs=2e-5)
    for a, histogram in enumerate(model.histograms):
        assert histogram == pytest.approx(np.bincount(real[a], minlength=schema.sizes[a]) / n,
                                          abs=1e-6)
    # ... and they estimate the latent ρ: bias about ρ/B (B = 100), sampling error ~ 1/√n
    latent = {(0, 1): rho, (0, 2): rho**2, (1, 2): rho}
    for (i, j), value in latent.items():
        got = model.correlation[i, j]
        assert abs(got - value) < value / 100 + 4 / math.sqrt(n), (i, j, got)
    synthetic = codes_of(synthesizer.sample(n, seed=5, partition_rows=7_000).compute(), schema)
    for a, histogram in enumerate(model.histograms):
        observed = np.bincount(synthetic[:, a], minlength=schema.sizes[a]) / n
        assert np.abs(observed - histogram).max() < 4 * math.sqrt(0.25 / n)
    one_block = scipy_normal_scores_correlation(synthetic[:, :3])  # the fine numeric attributes
    assert one_block == pytest.approx([model.correlation[0, 1], model.correlation[0, 2],
                                       model.correlation[1, 2]], abs=4 / math.sqrt(n))


@pytest.fixture(scope="module")
def fitted(client, data):
    return Synthesizer.create("dpcopula-mle", SMALL_SCHEMA_PATH, epsilon=1.0, k=4,
                              noise_sampler="numpy", noise_seed=3, ledger=False).fit(data)


def test_release_metadata_and_saved_model(client, fitted, tmp_path):
    assert isinstance(fitted, DPCopulaMLESynthesizer)
    _, epsilon2 = split_budget(1.0, 4.0, 4)
    blocks = block_count(CORRELATED_ROWS, 4, epsilon2)
    paths = fitted.write(tmp_path / "release", 3_000, seed=2, partition_rows=2_000)
    metadata = json.loads(paths["metadata"].read_text())
    privacy = metadata["privacy"]
    assert_pure_laplace(privacy, 1.0)
    assert privacy["epsilon1"] + privacy["epsilon2"] == pytest.approx(1.0)
    assert privacy["epsilon1"] / privacy["epsilon2"] == pytest.approx(4.0)
    assert privacy["blocks"] == blocks == metadata["model"]["blocks"]
    assert f"l = {blocks}" in privacy["budget_split"] and "2/l" in privacy["budget_split"]
    assert metadata["parameters"] == {"k": 4, "histograms": "laplace", "blocks": None}
    assert "uniformly random order" in metadata["model"]["row_order"]
    assert "derived from noise_seed" in metadata["model"]["row_order"]  # a seeded fit
    assert metadata["method"].startswith("dpcopula-mle")
    assert metadata["n_rows"] == CORRELATED_ROWS
    assert pd.read_parquet(paths["parquet"]).shape == (3_000, 4)
    model_path = fitted.save(tmp_path / "model")
    loaded = load_model(model_path)
    assert isinstance(loaded, DPCopulaModel) and loaded.method == "dpcopula-mle"
    np.testing.assert_array_equal(loaded.correlation, fitted.model.correlation)
    assert_resamples_alike(fitted, model_path, "dpcopula-mle", 2_000)


def test_bad_blocks_are_refused(client, data):
    with pytest.raises(ValueError, match="blocks must be an integer >= 1, got 0"):
        Synthesizer.create("dpcopula-mle", SMALL_SCHEMA_PATH, blocks=0, ledger=False).fit(data)
    with pytest.raises(ValueError, match=f"more than the {CORRELATED_ROWS} rows"):
        Synthesizer.create("dpcopula-mle", SMALL_SCHEMA_PATH, blocks=CORRELATED_ROWS + 1,
                           ledger=False).fit(data)


# --- the row order: blocks are a function of the data set (a multiset), not of the file -------

PAIR_SCHEMA = {"schema_version": 1, "name": "pair", "attributes": [
    {"name": "A", "type": "categorical", "categories": [str(v) for v in range(7)]},
    {"name": "B", "type": "categorical", "categories": ["0", "1"]},
]}


def ordered_by_content(keys: dict[tuple[int, ...], int]):
    """A ``random_row_order`` whose keys are given per row (rows told apart by their codes):
    the coupling of the privacy proof, where a replaced row's replacement keeps its key and
    every other row keeps its own, whatever the files' orders."""
    def order(ddf: dd.DataFrame, seed: int) -> dd.DataFrame:
        frame = ddf.compute()
        rank = np.argsort([keys[tuple(row)] for row in frame.itertuples(index=False)])
        return dd.from_pandas(frame.iloc[rank].reset_index(drop=True), npartitions=2)
    return order


def test_a_sorted_file_moves_one_block_under_the_coupling(client, monkeypatch):
    """Rows (A, B) = (0,0), (1,1), (2,0), ..., (5,1) sorted by A, 3 blocks; the neighbour replaces
    (0,0) by (6,0), which sorts last. By position every block changes (+1 to −1: r̄ moves by
    2.0 > 2/l); in a random order, coupled, one block does (≤ 2/l)."""
    rows = [(a, a % 2) for a in range(6)]
    neighbour = [*rows[1:], (6, 0)]  # sorted by A as well
    frames = [pd.DataFrame([(str(a), str(b)) for a, b in table], columns=["A", "B"])
              for table in (rows, neighbour)]
    rng = np.random.default_rng(7)
    worst = 0.0
    for _ in range(8):
        keys = dict(zip(rows, rng.permutation(6).tolist(), strict=True))
        keys[(6, 0)] = keys[(0, 0)]
        # the fit's own seam; without it (the old code) the blocks stay in file order
        monkeypatch.setattr("dp_dask.methods.dpcopula_mle.random_row_order",
                            ordered_by_content(keys), raising=False)
        averages = [Synthesizer.create("dpcopula-mle", load_schema(PAIR_SCHEMA), epsilon=1e6,
                                       blocks=3, noise_sampler="numpy", noise_seed=0,
                                       ledger=False).fit(frame).model.metadata["model"]
                    ["noisy_correlations"][0] for frame in frames]
        worst = max(worst, abs(averages[0] - averages[1]))
    assert worst <= 2 / 3 + 1e-4  # 2/l, up to the noise (~1e-5) and the 1/Q rounding


def keyed_frame(codes: np.ndarray, keys: np.ndarray) -> pd.DataFrame:
    """(rows, m) codes as a :func:`codes_frame` partition, with each row's ordering key."""
    frame = pd.DataFrame(codes, columns=[str(a) for a in range(codes.shape[1])])
    return frame.assign(**{ORDER_KEY: keys})


def file_orders(frame: pd.DataFrame) -> list[pd.DataFrame]:
    """The rows sorted by each attribute, ascending and descending, and as given."""
    columns = [c for c in frame.columns if c != ORDER_KEY]
    return [frame, *(frame.sort_values(c, ascending=up, kind="stable")
                     for c in columns for up in (True, False))]


def test_block_sums_do_not_depend_on_the_file_order(client):
    """Rows re-sorted by each column (and reversed), cut into other partitions, each keeping its
    key: the same S, byte for byte; by position (the old blocks) S changes with the order."""
    schema = load_schema({"schema_version": 1, "name": "three", "attributes": [
        {"name": n, "type": "categorical", "categories": [str(v) for v in range(5)]}
        for n in "xyz"]})
    rng = np.random.default_rng(3)
    n, blocks = 300, 37
    keys = rng.permutation(n) * (2**63 // n)  # distinct, spread over every output partition
    frame = keyed_frame(random_codes(rng, 3, n).T, keys)
    sums, positional = [], []
    for order, parts in itertools.product(file_orders(frame), (1, 4)):
        ddf = dd.from_pandas(order.reset_index(drop=True), npartitions=parts, sort=False)
        for target, ordered in ((sums, sort_by_key(ddf, seed=5)),
                                (positional, ddf.drop(columns=ORDER_KEY))):
            graph, _ = ordered_mle_graph(ordered, schema, blocks, 1.0)
            target.append(dask.compute(graph)[0][1])
    for other in sums[1:]:
        assert other.tobytes() == sums[0].tobytes()
    assert len({s.tobytes() for s in positional}) > 1


def test_random_order_is_uniform_whatever_the_file_order():
    """Each row's place in the random order is uniform over the n places, for a sorted input
    and the same input reversed, in 1 or 3 partitions (χ² over 240 seeds); rows whose keys tie
    come out in each of their orders alike."""
    from scipy.stats import chisquare
    n, seeds = 6, 240
    frame = pd.DataFrame({"0": np.arange(n)})
    with dask.config.set({"dataframe.shuffle.method": "tasks"}):
        for rows, parts in ((frame, 1), (frame[::-1], 3)):
            ddf = dd.from_pandas(rows.reset_index(drop=True), npartitions=parts, sort=False)
            orders = dask.compute(*[random_row_order(ddf, s) for s in range(seeds)],
                                  scheduler="sync")
            assert all(sorted(o["0"]) == list(range(n)) for o in orders)
            places = np.array([np.flatnonzero(o["0"].to_numpy() == 0)[0] for o in orders])
            assert chisquare(np.bincount(places, minlength=n)).pvalue > 1e-3
        tied = dd.from_pandas(keyed_frame(np.arange(3)[:, None], np.zeros(3, dtype=np.int64)),
                              npartitions=2, sort=False)
        orders = dask.compute(*[sort_by_key(tied, s) for s in range(seeds)], scheduler="sync")
    permutations = [tuple(o["0"]) for o in orders]
    assert len(set(permutations)) == 6
    assert chisquare([permutations.count(p) for p in set(permutations)]).pvalue > 1e-3


def test_order_seed_is_secret_unless_the_noise_is_seeded():
    assert order_seed(3) == order_seed(3) != order_seed(4)
    assert order_seed(None) != order_seed(None)
