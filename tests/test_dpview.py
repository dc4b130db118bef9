"""DPView and DPView+: layout invariants, view tables on Dask, budget shares, post-processing,
linking, upper cross views as match filters."""

from __future__ import annotations

import json
import math

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from conftest import (
    CORRELATED_ROWS,
    SMALL_SCHEMA,
    SMALL_SCHEMA_PATH,
    assert_pure_laplace,
    assert_resamples_alike,
    codes_of,
    correlated_frame,
)
from distributed import Client, LocalCluster

from dp_dask.checks import CostError
from dp_dask.data.counts import view_count_graph
from dp_dask.data.encode import encode_partition
from dp_dask.data.schema import load_schema
from dp_dask.data.tables import round_to_total
from dp_dask.methods.dpview import (
    DPViewConfig,
    DPViewModel,
    DPViewPlusSynthesizer,
    DPViewSynthesizer,
    as_blocks,
    budget_shares,
    chain_links,
    cross_view,
    domain,
    guideline_view_size,
    inconsistency,
    laplace_scales,
    link_views,
    make_consistent,
    measure_views,
    non_negative,
    paired_cells,
    post_process,
    propagate,
    round_rows,
    sorted_base_views,
    upper_links,
    upper_views,
    view_layout,
)
from dp_dask.model_io import ModelError
from dp_dask.privacy.labels import NEIGHBOURING
from dp_dask.privacy.ledger import Ledger
from dp_dask.synthesizer import Synthesizer, load_model

SHIPPED = DPViewConfig()


def exact_table(codes: np.ndarray, view: tuple[int, ...], sizes: np.ndarray) -> np.ndarray:
    """A view's contingency table of codes (rows, m), by np.add.at (not the code under test)."""
    table = np.zeros([int(sizes[a]) for a in view], dtype=np.int64)
    np.add.at(table, tuple(codes[:, a] for a in view), 1)
    return table


def random_chain_tables(views, sizes, total, rng) -> list[np.ndarray]:
    """Chain-consistent integer tables of ``total`` rows: the views of random rows."""
    codes = np.stack([rng.integers(0, s, total) for s in sizes], axis=1)
    return [exact_table(codes, v, sizes) for v in views]


# --- layout --------------------------------------------------------------------------------------

LAYOUT_CASES = [(m, d, seed) for m, d in [(1, 5), (4, 2), (4, 3), (9, 5), (15, 5), (27, 5),
                                          (12, 4), (10, 7), (20, 3)] for seed in (0, 1)]


@pytest.mark.parametrize("m, view_size, seed", LAYOUT_CASES)
def test_layout_invariants(m, view_size, seed):
    sizes = np.random.default_rng(100 + seed).integers(2, 20, m)
    layout = view_layout(sizes, view_size, tries=10, seed=seed)
    base, cross = layout.base, layout.cross
    assert len(base) == math.ceil(m / view_size) and len(cross) == len(base) - 1
    # the base views partition the attributes: each attribute in exactly one
    assert sorted(a for b in base for a in b) == list(range(m))
    for view in layout.views:
        assert 1 <= len(view) <= view_size and len(set(view)) == len(view)
    for c, left, right in zip(cross, base, base[1:]):
        assert set(c) <= set(left) | set(right)
        assert set(c) & set(left) and set(c) & set(right)  # meets both neighbours
        # the largest-domain attributes of the left base view, the smallest of the right one
        taken, rest = set(c) & set(left), set(left) - set(c)
        assert not rest or min(sizes[list(taken)]) >= max(sizes[list(rest)])
        taken, rest = set(c) & set(right), set(right) - set(c)
        assert not rest or max(sizes[list(taken)]) <= min(sizes[list(rest)])
        assert len(set(c) & set(left)) == min(view_size // 2, len(left))
    if layout.accepted and cross:
        assert max(domain(c, sizes) for c in cross) <= max(domain(b, sizes) for b in base)
    chain_links(layout.views)  # linking's precondition holds
    assert view_layout(sizes, view_size, tries=10, seed=seed) == layout  # deterministic


def test_more_tries_never_give_a_larger_layout():
    sizes = np.array([9, 16, 7, 15, 6, 5, 2, 42, 2, 3, 11, 4])
    layouts = {tries: view_layout(sizes, 5, tries, seed=3) for tries in (1, 5, 20)}
    rank = {tries: (not layout.accepted, sum(domain(v, sizes) for v in layout.views))
            for tries, layout in layouts.items()}
    # the first tries of a seed are the same draws: more tries can only keep or lower D, among
    # the layouts that meet the cross-view rule first
    assert rank[20] <= rank[5] <= rank[1]
    assert view_layout(sizes, 5, 20, seed=3) != view_layout(sizes, 5, 20, seed=4)


@pytest.mark.parametrize("bad", [{"view_size": 1}, {"view_size": 2.5}, {"tries": 0}])
def test_layout_rejects_bad_parameters(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        view_layout(np.array([3, 4, 5]), **{"view_size": 5, "tries": 2, **bad})


def test_base_views_in_algorithm_1s_order():
    sizes = np.array([5, 2, 3, 7, 2, 4])
    # domains: {0, 3} 5·7 = 35, {1, 4} 2·2 = 4, {2, 5} 3·4 = 12: ascending, attributes sorted
    groups = [np.array([3, 0]), np.array([4, 1]), np.array([2, 5])]
    assert sorted_base_views(groups, sizes) == ((1, 4), (2, 5), (0, 3))
    for seed in range(5):  # every drawn layout keeps that order along its chain
        base = view_layout(sizes, 2, tries=3, seed=seed).base
        assert [domain(b, sizes) for b in base] == sorted(domain(b, sizes) for b in base)


def test_odd_view_size_takes_the_extra_attribute_from_the_right_view():
    sizes = np.array([2, 9, 4, 8, 3, 5])
    # d = 3: ⌊3/2⌋ = 1 largest of the left view (attribute 1, 9 values), ⌈3/2⌉ = 2 smallest of
    # the right one (4 with 3 values, 5 with 5)
    assert cross_view((0, 1, 2), (3, 4, 5), sizes, 3) == (1, 4, 5)
    # d = 5 on three-attribute views: 2 largest of the left (1, 2), all 3 of the right
    assert cross_view((0, 1, 2), (3, 4, 5), sizes, 5) == (1, 2, 3, 4, 5)
    # even d = 4: 2 and 2
    assert cross_view((0, 1, 2), (3, 4, 5), sizes, 4) == (1, 2, 4, 5)


@pytest.mark.parametrize("n_rows, epsilon, sensitivity, expected", [
    # six binary attributes. d = 2: 5 views of 4 cells, P = 1/5, θ = (n/4)·ε/(5Δ) = nε/(20Δ);
    # d = 3: 3 views of 8 cells, P = 1/3, θ = nε/(24Δ); d = 4: views of 8, 16, 8 cells,
    # P ∝ 2, 16^(1/3), 2: the cross view's θ = (n/16)·0.3865·ε/Δ = 0.0242·nε/Δ; d = 5: 8, 32, 8,
    # cross θ = (n/32)·0.4425·ε/Δ = 0.0138·nε/Δ; d = 6: one view of 64 cells, θ = nε/(64Δ).
    (100, 1.0, 1, 3),  # θ: 5, 4.17, 2.4, 1.38, 1.56 → the largest d with θ ≥ 4 is 3
    (90, 1.0, 1, 2),  # 4.5, 3.75, ... → 2
    (150, 1.0, 2, 2),  # nε/Δ = 75: 3.75 at d = 2 already, so the smallest, 2
    (300, 1.0, 1, 6),  # 15, 12.5, 7.2, 4.15, 4.69 → 6
    (150, 2.0, 1, 6),  # the same nε/Δ = 300
])
def test_guideline_view_size_by_hand(n_rows, epsilon, sensitivity, expected):
    sizes = np.full(6, 2)
    assert guideline_view_size(sizes, n_rows, epsilon, sensitivity, tries=3) == expected


# --- view tables on Dask -------------------------------------------------------------------------

def test_view_tables_by_one_reduction(client, data):
    schema = load_schema(SMALL_SCHEMA)
    views = ((0, 2), (1, 2, 3), (3,), (0, 1, 2, 3))
    ddf = dd.read_parquet(data)
    (vector,) = client.compute([view_count_graph(ddf, schema, views)], sync=True)
    codes = encode_partition(ddf.compute(), schema).T
    expected = np.concatenate([exact_table(codes, v, schema.sizes).ravel() for v in views])
    np.testing.assert_array_equal(vector, expected)
    assert vector.dtype == np.int64


# --- measure -------------------------------------------------------------------------------------

def test_budget_shares_closed_form_and_optimal():
    domains = np.array([72_576, 47_040, 1_050, 8])
    shares = budget_shares(domains)
    assert shares.sum() == pytest.approx(1.0)
    cube_roots = np.array([41.7, 36.1, 10.16, 2.0])  # s^(1/3), by hand
    np.testing.assert_allclose(shares, cube_roots / cube_roots.sum(), rtol=2e-3)
    # they minimise the total noise variance Σ s·2b² ∝ Σ s/P² over the simplex
    rng = np.random.default_rng(0)
    best = (domains / shares**2).sum()
    for _ in range(200):
        other = np.abs(shares + rng.normal(0, 0.02, shares.size))
        other /= other.sum()
        assert (domains / other**2).sum() >= best
    epsilon = 0.7
    scales = laplace_scales(epsilon, shares)
    assert (2 / scales).sum() == pytest.approx(epsilon)  # per-view ε = Δ/b sums to ε


def test_view_noise_has_the_calibrated_scale():
    zeros = [np.zeros(40_000, dtype=np.int64), np.zeros((200, 100), dtype=np.int64)]
    scales = np.array([3.0, 0.5])
    noisy = measure_views(zeros, scales, sampler="numpy", rng=np.random.default_rng(1))
    for table, scale in zip(noisy, scales):
        # mean |Laplace(b)| = b; its sample mean has std b/√N = 0.005·b here
        assert np.abs(table).mean() == pytest.approx(scale, rel=0.03)
    assert noisy[1].shape == (200, 100)


# --- post-processing -----------------------------------------------------------------------------

def noisy_chain(seed=0):
    sizes = np.array([3, 4, 2, 5, 3, 2])
    layout = view_layout(sizes, 3, tries=5, seed=seed)
    rng = np.random.default_rng(seed)
    exact = random_chain_tables(layout.views, sizes, 2_000, rng)
    noisy = [t + rng.laplace(0, 20, t.shape) for t in exact]
    return layout.views, sizes, noisy


def test_consistency_makes_shared_marginals_equal_with_inverse_variance_weights():
    views, sizes, noisy = noisy_chain()
    noisy = [t + (2_000 - t.sum()) / t.size for t in noisy]  # post_process's first step
    links = chain_links(views)
    # this layout's views each share disjoint attribute sets with their two neighbours, so
    # spreading one link's correction leaves the other link's marginals as they were
    for (_, j, first), (k, _, second) in zip(links, links[1:]):
        assert j != k or not set(first) & set(second)
    shares = budget_shares([t.size for t in noisy])
    assert inconsistency(noisy, views) > 1
    consistent = make_consistent(noisy, views, shares)
    assert inconsistency(consistent, views) < 1e-9
    for i, j, shared in links:
        # the common marginal is the average of the two weighted by P²/ξ (ξ: cells per block)
        before = [as_blocks(noisy[v], views[v], shared) for v in (i, j)]
        weights = [shares[v] ** 2 / b.shape[1] for v, b in zip((i, j), before)]
        expected = sum(w * b.sum(axis=1) for w, b in zip(weights, before)) / sum(weights)
        after = as_blocks(consistent[i], views[i], shared).sum(axis=1)
        np.testing.assert_allclose(after, expected, rtol=1e-12)
    # the correction is spread evenly over each block's cells (b₁ is in one link only)
    change = as_blocks(consistent[0] - noisy[0], views[0], links[0][2])
    np.testing.assert_allclose(change, change[:, :1] * np.ones_like(change), atol=1e-9)
    np.testing.assert_allclose([t.sum() for t in consistent], 2_000)


def test_non_negativity_is_the_papers_iteration_and_keeps_the_total():
    rng = np.random.default_rng(2)
    table = rng.laplace(3.0, 10.0, (6, 7))
    total = table.sum()
    expected = table.copy()  # the paper: zero the negatives, take q/o from the o positives
    while (expected < -1e-12).any():
        q = expected[expected < 0].sum()
        expected[expected < 0] = 0.0
        positive = expected > 0
        expected[positive] += q / positive.sum()
    got = non_negative(table, total)
    np.testing.assert_allclose(got, expected, atol=1e-9)
    assert got.min() >= 0 and got.sum() == pytest.approx(total)


def test_post_process_gives_non_negative_consistent_tables_of_n():
    views, _, noisy = noisy_chain(1)
    shares = budget_shares([t.size for t in noisy])
    tables, rounds, gap = post_process(noisy, views, shares, 2_000)
    assert all(t.min() >= 0 for t in tables)
    np.testing.assert_allclose([t.sum() for t in tables], 2_000)
    assert gap == pytest.approx(inconsistency(tables, views))
    assert gap <= SHIPPED.consistency_tol or rounds == SHIPPED.max_rounds
    assert gap < 1.0


def test_upper_views_take_part_in_consistency_but_not_in_normalisation():
    sizes = np.array([3, 4, 2, 5, 3, 2])
    layout = view_layout(sizes, 3, tries=5, seed=0)
    upper, _ = upper_views(layout, sizes)
    kept = tuple(v for v in upper if v is not None)
    assert kept
    views = layout.views + kept
    rng = np.random.default_rng(3)
    noisy = [t + rng.laplace(0, 20, t.shape)
             for t in random_chain_tables(views, sizes, 2_000, rng)]
    links = upper_links(views, upper)
    assert len(links) == 2 * len(kept)
    shares = budget_shares([t.size for t in noisy])
    assert inconsistency(noisy, views, links) > 1
    tables, rounds, gap = post_process(noisy, views, shares, 2_000, upper)
    chain = len(layout.views)
    for base, u, shared in links:  # the upper view's marginal equals its base views'
        assert set(shared) == set(views[u]) & set(views[base]) and shared
        np.testing.assert_allclose(as_blocks(tables[u], views[u], shared).sum(axis=1),
                                   as_blocks(tables[base], views[base], shared).sum(axis=1),
                                   atol=SHIPPED.consistency_tol + 1e-9)
    assert rounds < SHIPPED.max_rounds and gap <= SHIPPED.consistency_tol
    assert all(t.min() >= 0 for t in tables[:chain])  # only the chain is normalised
    np.testing.assert_allclose([t.sum() for t in tables], 2_000)


def test_round_rows_is_round_to_total_row_by_row():
    rng = np.random.default_rng(3)
    blocks = rng.random((50, 7)) * (rng.random((50, 1)) > 0.2)  # some rows without mass
    totals = rng.integers(0, 30, 50)
    got = round_rows(blocks, totals)
    fallback = blocks.sum(axis=0)
    for row, total, counts in zip(blocks, totals, got):
        np.testing.assert_array_equal(
            counts, round_to_total(row if row.sum() > 0 else fallback, int(total)))


def test_propagate_is_exactly_consistent_and_idempotent():
    views, _, noisy = noisy_chain(2)
    shares = budget_shares([t.size for t in noisy])
    tables, _, _ = post_process(noisy, views, shares, 2_000)
    integer = propagate(tables, views, 2_000)
    assert all(t.dtype == np.int64 and t.min() >= 0 and t.sum() == 2_000 for t in integer)
    assert inconsistency(integer, views) == 0
    assert np.abs(integer[0] - tables[0]).max() < 1  # b₁: largest remainder only
    for again, first in zip(propagate(integer, views, 2_000), integer):
        np.testing.assert_array_equal(again, first)
    scaled = propagate(integer, views, 333)  # a partition's share
    assert all(t.sum() == 333 for t in scaled) and inconsistency(scaled, views) == 0


# --- linking -------------------------------------------------------------------------------------

@pytest.mark.parametrize("view_size", [2, 3, 4])
def test_linking_reproduces_every_view_table(view_size):
    sizes = np.array([3, 4, 2, 5, 3, 2, 6])
    views = view_layout(sizes, view_size, tries=3, seed=1).views
    tables = random_chain_tables(views, sizes, 5_000, np.random.default_rng(view_size))
    codes = link_views(tables, views, sizes, np.random.default_rng(0))
    assert codes.shape == (5_000, 7)
    for view, table in zip(views, tables):
        np.testing.assert_array_equal(exact_table(codes, view, sizes), table)
    with pytest.raises(ValueError, match="does not agree"):
        link_views([tables[0], tables[1] * 2], views[:2], sizes, np.random.default_rng(0))


# --- the method ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fitted(client, data):
    return Synthesizer.create("dpview", SMALL_SCHEMA_PATH, epsilon=1.0, view_size=3,
                              noise_sampler="numpy", noise_seed=3, ledger=False).fit(data)


def test_one_partition_reproduces_the_integer_view_tables(client, fitted):
    model = fitted.model
    assert isinstance(model, DPViewModel) and model.n_rows == CORRELATED_ROWS
    frame = fitted.sample(seed=4, partition_rows=CORRELATED_ROWS).compute()
    codes = codes_of(frame, model.schema)
    for view, table in zip(model.views, model.tables):
        np.testing.assert_array_equal(exact_table(codes, view, model.schema.sizes), table)
    # several partitions: each partition's tables are the model's scaled to its rows
    frame = fitted.sample(seed=4, partition_rows=7_000).compute()
    codes = codes_of(frame, model.schema)
    for view, table in zip(model.views, model.tables):
        assert np.abs(exact_table(codes, view, model.schema.sizes) - table).max() <= 3


def test_large_epsilon_keeps_the_exact_view_tables(client):
    frame = correlated_frame(5_000, seed=7)
    synthesizer = Synthesizer.create("dpview", SMALL_SCHEMA_PATH, epsilon=1e7, view_size=2,
                                     noise_sampler="numpy", noise_seed=0, ledger=False)
    model = synthesizer.fit(frame).model
    codes = encode_partition(frame, model.schema).T
    for view, table in zip(model.views, model.tables):
        np.testing.assert_array_equal(table, exact_table(codes, view, model.schema.sizes))


def test_release_metadata_and_model_round_trip(client, fitted, tmp_path):
    assert isinstance(fitted, DPViewSynthesizer)
    paths = fitted.write(tmp_path / "release", 5_000, seed=2, partition_rows=2_000)
    metadata = json.loads(paths["metadata"].read_text())
    privacy = metadata["privacy"]
    assert_pure_laplace(privacy, 1.0)
    layout = metadata["model"]["layout"]
    shares = budget_shares(layout["domain_sizes"])
    np.testing.assert_allclose(privacy["budget_shares"], shares)
    np.testing.assert_allclose(privacy["laplace_scales"], 2 / (1.0 * shares))
    assert metadata["parameters"] == {"view_size": 3, "chosen_view_size": 3, "rows": None,
                                      "tries": 200, "layout_seed": 0, "neighbours": "replace"}
    assert all(set(v) <= set(SMALL_SCHEMA_NAMES) for v in layout["views"])
    assert len(pd.read_parquet(paths["parquet"])) == 5_000
    model_path = fitted.save(tmp_path / "model")
    loaded = load_model(model_path)
    assert isinstance(loaded, DPViewModel) and loaded.views == fitted.model.views
    assert_resamples_alike(fitted, model_path, "dpview", 3_000)
    # a corrupted model is refused, naming what is wrong
    document = json.loads((model_path / "model.json").read_text())
    (model_path / "model.json").write_text(json.dumps({**document, "views": [[0, 1]]}))
    with pytest.raises(ModelError, match="invalid views"):
        load_model(model_path)
    (model_path / "model.json").write_text(json.dumps(document))
    arrays = dict(np.load(model_path / "model.npz"))
    arrays["view_0"] = arrays["view_0"] - 1
    np.savez(model_path / "model.npz", **arrays)
    with pytest.raises(ModelError, match="view_0"):
        load_model(model_path)


SMALL_SCHEMA_NAMES = [a["name"] for a in SMALL_SCHEMA["attributes"]]


def test_opendp_fit_is_recorded_as_pure_dp(client, data, tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    synthesizer = Synthesizer.create("dpview", SMALL_SCHEMA_PATH, epsilon=0.5, ledger=ledger,
                                     dataset_name="small").fit(data)
    assert synthesizer.model.metadata["privacy"]["differentially_private"] is True
    (entry,) = ledger.entries("small")
    assert (entry.epsilon, entry.delta, entry.mechanism) == (0.5, 0.0, "laplace")


def test_add_remove_accounting_is_recorded(client, data, tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    synthesizer = Synthesizer.create("dpview", SMALL_SCHEMA_PATH, epsilon=0.5, ledger=ledger,
                                     dataset_name="small", neighbours="add_remove",
                                     noise_sampler="numpy", noise_seed=3).fit(data)
    metadata = synthesizer.model.metadata
    privacy = metadata["privacy"]
    assert privacy["neighbouring"] == NEIGHBOURING["add_remove"]
    assert privacy["replace_one_row"] == {"epsilon": 1.0, "rho": None}  # 2ε as replace-one
    # the guideline needed n, which is private: ε/100 on a noisy count, the rest on the views
    rows = privacy["noisy_rows_for_guideline"]
    assert rows["epsilon"] == pytest.approx(0.005) and rows["laplace_scale"] == 200
    shares = np.array(privacy["budget_shares"])
    np.testing.assert_allclose(privacy["laplace_scales"], 1 / (0.495 * shares))  # Δ = 1
    assert "L1 sensitivity 1 each" in privacy["budget_split"]
    assert metadata["parameters"]["chosen_view_size"] >= 2
    assert abs(metadata["n_rows"] - CORRELATED_ROWS) < 0.1 * CORRELATED_ROWS  # estimated
    (entry,) = ledger.entries("small")
    assert entry.epsilon == 1.0  # the ledger counts replace-one ε


@pytest.mark.parametrize("method", ["dpview", "dpview+"])
def test_huge_views_are_refused_before_any_data_is_read(tmp_path, method):
    schema = {"schema_version": 1, "name": "wide", "attributes": [
        {"name": f"a{i}", "type": "categorical", "categories": [str(c) for c in range(40)]}
        for i in range(6)]}
    ledger = Ledger(tmp_path / "ledger.sqlite")
    synthesizer = Synthesizer.create(method, schema, ledger=ledger, dataset_name="wide",
                                     view_size=5)
    with pytest.raises(CostError, match=r"DPView's views hold .* cells .*view_size"):
        synthesizer.fit(tmp_path / "missing.parquet")  # never read: refused first
    assert ledger.entries("wide") == []


@pytest.mark.parametrize("method", ["dpview", "dpview+"])
def test_cli_synth_with_dpview(client, data, tmp_path, capsys, method):
    from dp_dask.cli import main

    out = tmp_path / "release"
    code = main(["synth", "--data", str(data), "--schema", str(SMALL_SCHEMA_PATH), "--out",
                 str(out), "--method", method, "--ledger", str(tmp_path / "ledger.sqlite"),
                 "--rows", "2000", "--scheduler", client.scheduler.address, "--quiet"])
    assert code == 0
    assert "basic composition" in capsys.readouterr().out
    assert load_model(out / "model").method == method
    assert len(pd.read_parquet(out / "synthetic.parquet")) == 2_000


# --- DPView+: upper cross views ------------------------------------------------------------------

@pytest.mark.parametrize("m, view_size, seed", LAYOUT_CASES)
def test_upper_view_layout_invariants(m, view_size, seed):
    sizes = np.random.default_rng(100 + seed).integers(2, 20, m)
    layout = view_layout(sizes, view_size, tries=10, seed=seed)
    upper, dropped = upper_views(layout, sizes)
    assert len(upper) == len(layout.cross)
    assert [d["link"] for d in dropped] == [i for i, u in enumerate(upper) if u is None]
    for i, u in enumerate(upper):
        left, cross, right = layout.base[i], layout.cross[i], layout.base[i + 1]
        expected = sorted((set(left) | set(right)) - set(cross))
        if u is None:
            assert sorted(dropped[[d["link"] for d in dropped].index(i)]["view"]) == expected
            continue
        assert list(u) == expected and not set(u) & set(cross)
        assert set(u) & set(left) and set(u) & set(right)  # something on each side to pair
        # linking bᵢ₊₁: its new attributes are uᵢ's right side, blocked on cᵢ ∩ bᵢ₊₁
        assert set(u) & set(right) == set(right) - set(cross)


def test_upper_views_dropped_with_a_reason():
    sizes = np.array([2, 3, 5, 7, 4, 6])
    layout = view_layout(sizes, 3, tries=1, seed=0)
    (u,), () = upper_views(layout, sizes)
    shared = [a for a in layout.base[1] if a in layout.cross[0]]
    plan = domain(tuple(shared), sizes) * domain(u, sizes)
    (none,), (why,) = upper_views(layout, sizes, DPViewConfig(max_plan_cells=plan - 1))
    assert none is None and why["link"] == 0 and f"{plan:,} cells" in why["reason"]
    # m = 4, d = 3: two base views of 2; c₁ takes 2 of b₂, i.e. all of it: nothing to pair
    inside = view_layout(np.array([2, 3, 4, 5]), 3, tries=1, seed=0)
    assert set(inside.base[1]) <= set(inside.cross[0])
    (none,), (why,) = upper_views(inside, np.array([2, 3, 4, 5]))
    assert none is None and "nothing to pair" in why["reason"]


def test_paired_cells_keep_each_blocks_cells_and_follow_the_upper_table():
    rng = np.random.default_rng(5)
    rows, blocks_n, width, left_n = 6_000, 4, 5, 5
    keys = rng.integers(0, blocks_n, rows)
    left = rng.integers(0, left_n, rows)
    wanted = (left + (rng.random(rows) < 0.1)) % width  # the pairing the data had
    blocks = np.zeros((blocks_n, width), dtype=np.int64)
    np.add.at(blocks, (keys, wanted), 1)
    upper = np.zeros((left_n, width), dtype=np.int64)
    np.add.at(upper, (left, wanted), 1)
    cells = paired_cells(keys, left, blocks, upper, np.random.default_rng(0))
    got = np.zeros_like(blocks)
    np.add.at(got, (keys, cells), 1)
    np.testing.assert_array_equal(got, blocks)  # each block's cells, exactly
    paired = np.zeros_like(upper)
    np.add.at(paired, (left, cells), 1)
    uniform = np.repeat(np.tile(np.arange(width), blocks_n), blocks.ravel())  # a blind deal
    blind = np.zeros_like(upper)
    np.add.at(blind, (left[np.lexsort((rng.random(rows), keys))], uniform), 1)
    assert np.abs(paired - upper).sum() < 0.05 * np.abs(blind - upper).sum()
    again = paired_cells(keys, left, blocks, upper, np.random.default_rng(0))
    np.testing.assert_array_equal(again, cells)  # seeded


def dependent_frame(rows: int, schema, layout, seed: int = 0) -> pd.DataFrame:
    """Independent attributes, except that b₁ \\ c₁ and b₂ \\ c₁ copy one latent value (with
    10 % noise): a dependence that only the upper view u₁ holds."""
    rng = np.random.default_rng(seed)
    latent = rng.integers(0, 4, rows)
    tied = ((set(layout.base[0]) | set(layout.base[1])) - set(layout.cross[0]))
    columns = {}
    for a, attribute in enumerate(schema.attributes):
        codes = rng.integers(0, 4, rows)
        if a in tied:
            codes = np.where(rng.random(rows) < 0.9, latent, codes)
        columns[attribute.name] = np.array(attribute.categories)[codes]
    return pd.DataFrame(columns)


FOUR_BY_SIX = {"schema_version": 1, "name": "tied", "attributes": [
    {"name": f"a{i}", "type": "categorical", "categories": list("wxyz")} for i in range(6)]}


@pytest.fixture(scope="module")
def tied(client):
    """DPView and DPView+ at ε = 10⁷ on 6,000 rows of dependent_frame; the frame, the fits."""
    schema = load_schema(FOUR_BY_SIX)
    layout = view_layout(schema.sizes, 3, seed=0)
    frame = dependent_frame(6_000, schema, layout)
    fits = {method: Synthesizer.create(method, FOUR_BY_SIX, epsilon=1e7, view_size=3,
                                       noise_sampler="numpy", noise_seed=0,
                                       ledger=False).fit(frame)
            for method in ("dpview", "dpview+")}
    return frame, fits


def test_dpview_plus_reproduces_the_upper_view_far_better(tied):
    frame, fits = tied
    plus = fits["dpview+"]
    assert isinstance(plus, DPViewPlusSynthesizer) and plus.model.method == "dpview+"
    (u,) = plus.model.upper
    schema = plus.model.schema
    exact = encode_partition(frame, schema).T
    truth = exact_table(exact, u, schema.sizes)
    np.testing.assert_array_equal(plus.model.upper_tables[0], truth)  # ε huge: exact
    errors = {}
    for method, fit in fits.items():
        codes = codes_of(fit.sample(seed=1, partition_rows=6_000).compute(), schema)
        errors[method] = np.abs(exact_table(codes, u, schema.sizes) - truth).sum()
        # linking still reproduces every base and cross view exactly
        for view, table in zip(fit.model.views, fit.model.tables):
            np.testing.assert_array_equal(exact_table(codes, view, schema.sizes), table)
            np.testing.assert_array_equal(table, exact_table(exact, view, schema.sizes))
    # dpview pairs the two sides blindly: about 2·0.9·(3/4)·n of the mass off; dpview+ keeps it
    assert errors["dpview"] > 0.5 * 6_000
    assert errors["dpview+"] < 0.1 * errors["dpview"]


def test_dpview_plus_same_seed_same_rows_on_one_and_two_workers(client, tied):
    plus = tied[1]["dpview+"]
    two = plus.sample(5_000, seed=3, partition_rows=1_500).compute()
    with (LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                       dashboard_address=":0") as cluster,
          Client(cluster, set_as_default=False) as one):
        single = one.compute(plus.sample(5_000, seed=3, partition_rows=1_500)).result()
    pd.testing.assert_frame_equal(single, two)
    other = plus.sample(5_000, seed=4, partition_rows=1_500).compute()
    assert not other.equals(two)


def test_dpview_plus_release_metadata_and_model_round_trip(client, tied, tmp_path):
    plus = tied[1]["dpview+"]
    metadata = plus.model.metadata
    assert_pure_laplace(metadata["privacy"], 1e7)
    layout = metadata["model"]["layout"]
    (u,) = plus.model.upper
    names = [plus.schema.names[a] for a in u]
    assert metadata["model"]["upper_views"] == [names] and metadata["model"]["upper_dropped"] == []
    # the upper view shares the budget with the chain by the same s^(1/3) rule
    shares = budget_shares(layout["domain_sizes"] + [domain(u, plus.schema.sizes)])
    np.testing.assert_allclose(metadata["privacy"]["budget_shares"], shares)
    assert "1 upper cross views" in metadata["privacy"]["budget_split"]
    model_path = plus.save(tmp_path / "model")
    loaded = load_model(model_path)
    assert loaded.upper == plus.model.upper
    np.testing.assert_array_equal(loaded.upper_tables[0], plus.model.upper_tables[0])
    assert_resamples_alike(plus, model_path, "dpview+", 3_000)
    document = json.loads((model_path / "model.json").read_text())
    (model_path / "model.json").write_text(json.dumps({**document, "upper": [[0, 1]]}))
    with pytest.raises(ModelError, match="upper view"):
        load_model(model_path)


def test_a_config_reaches_the_fit_the_record_and_the_saved_model(client, tmp_path):
    """DPViewConfig through Synthesizer.create as a dict: a pairing plan over max_plan_cells
    drops the upper view, the release records the fields that differ, a saved model keeps them."""
    frame = dependent_frame(2_000, load_schema(FOUR_BY_SIX),
                            view_layout(load_schema(FOUR_BY_SIX).sizes, 3, seed=0))
    plus = Synthesizer.create("dpview+", FOUR_BY_SIX, epsilon=1.0, view_size=3,
                              noise_sampler="numpy", noise_seed=0, ledger=False,
                              config={"max_plan_cells": 1, "max_rounds": 2}).fit(frame)
    assert plus.model.upper == (None,)
    assert "pairing plan" in plus.model.metadata["model"]["upper_dropped"][0]["reason"]
    assert plus.model.metadata["model"]["consistency_rounds"] <= 2
    assert plus.model.metadata["parameters"]["config"] == {"max_plan_cells": 1, "max_rounds": 2}
    loaded = load_model(plus.save(tmp_path / "model"))
    assert loaded.config == DPViewConfig(max_plan_cells=1, max_rounds=2)


@pytest.mark.parametrize("method", ["dpview", "dpview+"])
@pytest.mark.parametrize("bad", [{"view_size": 1}, {"tries": 0}, {"layout_seed": -1},
                                 {"layout_seed": "7"}])
def test_bad_options_fail_at_create(method, bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        Synthesizer.create(method, SMALL_SCHEMA_PATH, **bad)


@pytest.mark.parametrize(("config", "match"), [
    ({"plan_round": 1}, "no field 'plan_round'; its fields: usefulness, .*plan_rounds"),
    ({"max_rounds": -1}, "max_rounds must be an integer"), ({"max_rounds": 2.5}, "max_rounds"),
    ({"rows_share": 1}, "rows_share must be below 1"), ({"rows_share": 0}, "rows_share .* > 0"),
    ([("plan_rounds", 1)], "a dict")])
def test_bad_configs_fail_at_create_naming_the_field(config, match):
    with pytest.raises(ValueError, match=match):
        Synthesizer.create("dpview", SMALL_SCHEMA_PATH, config=config)
