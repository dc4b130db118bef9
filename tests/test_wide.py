"""Which 2-way tables the marginals method measures on wide schemas (marginals.select_pairs)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dp_dask.data.counts import exact_answer
from dp_dask.data.schema import Schema
from dp_dask.methods.marginals import (
    MarginalsConfig,
    MarginalSynthesizer,
    budget_shares,
    measure_all,
    measured_queries,
)
from dp_dask.methods.marginals.select_pairs import (
    all_pairs_noise,
    refine,
    select_tree,
    tree_wanted,
)
from dp_dask.postprocess.consistency import Measurement
from dp_dask.privacy.accounting import (
    TABLE_L2_SENSITIVITY,
    gaussian_rho,
    gaussian_sigma,
    rho_budget,
)
from dp_dask.privacy.selection import calibrate_selection
from dp_dask.synthesizer import load_model

EPSILON, DELTA = 1.0, 1e-9
CONFIG = MarginalsConfig()  # the defaults
ADULT_CATEGORICAL = ("workclass", "education", "marital-status", "occupation", "relationship",
                     "race", "sex", "native-country", "income")


def schema_of(sizes: list[int]) -> Schema:
    return Schema.from_json({"schema_version": 1, "name": "wide", "attributes": [
        {"name": f"a{i}", "type": "categorical", "categories": [f"v{k}" for k in range(s)]}
        for i, s in enumerate(sizes)]})


def planted(m: int, rows: int, seed: int = 0) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Codes (rows, m) of 4 levels: attribute 2k + 1 copies 2k for 90 % of rows, else free."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 4, (rows, m))
    for a in range(0, m - 1, 2):
        codes[:, a + 1] = np.where(rng.random(rows) < 0.9, codes[:, a], codes[:, a + 1])
    return codes, [(a, a + 1) for a in range(0, m - 1, 2)]


def count_matrix(codes: np.ndarray, schema: Schema) -> np.ndarray:
    dummies = np.zeros((len(codes), schema.d), dtype=np.int64)
    dummies[np.arange(len(codes))[:, None], schema.offsets + codes] = 1
    return dummies.T @ dummies


def noise(schema: Schema, rows: int, neighbours: str) -> float:
    rho = rho_budget(EPSILON, DELTA)
    return all_pairs_noise(schema, rows, rho * (1 - CONFIG.one_way_share),
                           TABLE_L2_SENSITIVITY[neighbours], "exact", CONFIG.cells_exponent)


@pytest.mark.parametrize("neighbours", ["replace", "add_remove"])
def test_threshold_keeps_adult_on_all_pairs_and_sends_50_columns_to_a_tree(neighbours):
    adult = Schema.from_json({"schema_version": 1, "name": "adult", "attributes": [
        a for a in Schema.from_json(_adult_spec()).to_json()["attributes"]
        if a["name"] in ADULT_CATEGORICAL]})
    assert adult.m == 9 and not tree_wanted(noise(adult, 32_561, neighbours))
    sizes = np.random.default_rng(0).integers(2, 11, 50).tolist()
    assert tree_wanted(noise(schema_of(sizes), 10_000, neighbours))


def _adult_spec() -> dict:
    from dp_dask.data.schema import load_schema

    return load_schema("adult").to_json()


@pytest.mark.parametrize("accountant", ["exact", "zcdp"])
def test_the_tree_plan_spends_rho_exactly(accountant):
    schema = schema_of([4] * 12)
    codes, _ = planted(12, 2_000)
    counts = count_matrix(codes, schema)
    rho = rho_budget(EPSILON, DELTA, accountant)
    measurements, _, tree = measure_all(counts, {}, schema, rho, accountant=accountant,
                                        sampler="numpy", rng=np.random.default_rng(1),
                                        neighbours="add_remove", tables="tree")
    # the histograms: drawn at one_way_share before the plan, topped up to tree_one_way_share
    # after it, the two averaged by inverse variance
    shares = budget_shares(schema, measured_queries(schema, tree.pairs))[:12]
    draws = [[gaussian_sigma(rho * share * part, 1.0, accountant) for share in shares]
             for part in (1.0, CONFIG.tree_one_way_share / CONFIG.one_way_share - 1)]
    one_way = sum(gaussian_rho(sigma, 1.0, accountant) for sigmas in draws for sigma in sigmas)
    assert one_way == pytest.approx(rho * CONFIG.tree_one_way_share, rel=1e-9)
    assert [m.sigma for m in measurements[:12]] == pytest.approx(
        [(a**-2 + b**-2) ** -0.5 for a, b in zip(*draws)], rel=1e-12)
    charges = one_way + sum(gaussian_rho(m.sigma, 1.0, accountant) for m in measurements[12:])
    assert tree.rounds * tree.selection.rho == pytest.approx(rho * CONFIG.selection_share, rel=1e-9)
    refined = tree.refinement
    assert len(refined.pairs) == CONFIG.refine_rounds
    spent = refined.rho_select + CONFIG.refine_rounds * gaussian_rho(refined.sigma, 1.0, accountant)
    assert spent <= rho * CONFIG.refine_share
    assert spent == pytest.approx(rho * CONFIG.refine_share, rel=1e-9)
    assert charges + tree.rho <= rho
    assert charges + tree.rho == pytest.approx(rho, rel=1e-9)
    assert [m.attributes for m in measurements[12:-CONFIG.refine_rounds]] == tree.pairs
    # the refinement measures pairs outside the tree, each once
    assert [m.attributes for m in measurements[-CONFIG.refine_rounds:]] == refined.pairs
    assert not set(refined.pairs) & set(tree.pairs)
    assert len(set(refined.pairs)) == CONFIG.refine_rounds
    # a spanning tree: m - 1 distinct pairs joining every attribute
    assert len(set(tree.pairs)) == 11
    assert {a for pair in tree.pairs for a in pair} == set(range(12))


def test_selection_is_seeded_and_finds_planted_pairs():
    schema = schema_of([4] * 10)
    codes, pairs = planted(10, 3_000)
    counts = count_matrix(codes, schema)
    one_way = [exact_answer(counts, schema, (a,)).astype(float) for a in range(10)]

    def choose(seed: int) -> list[tuple[int, int]]:
        return select_tree(counts, schema, one_way, 3_000, 0.005, 1.0, "exact", noise=1.0,
                           sampler="numpy", rng=np.random.default_rng(seed)).pairs

    assert choose(3) == choose(3)
    assert set(pairs) <= set(choose(3))  # the planted pairs far outscore the selection's noise


def test_refinement_scores_pairs_against_the_tree_not_independence():
    """1, 2 and 3 copy 0 (90 %), 5 copies 4, 6 is free; the tree holds 0's copies but links 4
    and 5 only through 6. Against independence (the tree's selection) the copies' pairs (1, 2),
    (1, 3), (2, 3) score ~4,900, close to (4, 5)'s ~5,400; against the tree's model they are
    near 0. So the rounds pick (4, 5), then no copy pair (Gumbel scale ~35)."""
    rows = 4_000
    schema = schema_of([4] * 7)
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 4, (rows, 7))
    for a, source in ((1, 0), (2, 0), (3, 0), (5, 4)):
        codes[:, a] = np.where(rng.random(rows) < 0.9, codes[:, source], codes[:, a])
    counts = count_matrix(codes, schema)
    tree = [(0, 1), (0, 2), (0, 3), (3, 4), (4, 6), (5, 6)]
    exact = [Measurement(q, exact_answer(counts, schema, q).astype(float), 1.0)
             for q in [(a,) for a in range(7)] + tree]

    def chosen(seed: int) -> list[tuple[int, int]]:
        measured, refinement = refine(counts, schema, exact, rows, 0.05, 1.0, "exact",
                                      l1_sensitivity=1.0, sampler="numpy",
                                      rng=np.random.default_rng(seed))
        assert [m.attributes for m in measured[len(exact):]] == refinement.pairs
        return refinement.pairs

    for seed in range(3):
        assert chosen(seed) == chosen(seed)
        assert chosen(seed)[0] == (4, 5)
        assert not {(1, 2), (1, 3), (2, 3)} & set(chosen(seed))


def test_wide_release_beats_independent_marginals(client, tmp_path):
    m, rows = 30, 3_000
    schema = schema_of([4] * m)
    codes, pairs = planted(m, rows)
    frame = pd.DataFrame({name: [f"v{k}" for k in codes[:, a]]
                          for a, name in enumerate(schema.names)})
    assert tree_wanted(noise(schema, rows, "add_remove"))
    synthesizer = MarginalSynthesizer(schema, epsilon=EPSILON, delta=DELTA, ledger=False,
                                      noise_sampler="numpy", noise_seed=0,
                                      neighbours="add_remove").fit(frame)
    privacy = synthesizer.model.metadata["privacy"]
    assert privacy["tables"]["tables"] == "spanning tree"
    assert privacy["k"] == 3 * m - 1 + CONFIG.refine_rounds
    # the record states the tree plan's shares, not the all-pairs plan's
    assert f"{CONFIG.tree_one_way_share:g} of it to histograms" in privacy["budget_split"]
    assert synthesizer.model.metadata["model"]["budget_shares"].startswith(
        f"{CONFIG.tree_one_way_share:g} of rho to the histograms, "
        f"{CONFIG.selection_share:.6g} to the tree's")
    model = load_model(synthesizer.model.save(tmp_path / "model"))
    assert sorted(model.marginals.two_way) == sorted(synthesizer.model.marginals.two_way)
    synthetic = synthesizer.sample(rows, seed=0).compute()
    released = np.stack([synthetic[n].cat.codes if hasattr(synthetic[n], "cat")
                         else synthetic[n].str[1:].astype(int) for n in schema.names], axis=1)
    sigma = max(s for s in synthesizer.model.metadata["model"]["noise_sigma"]["two_way"])
    for a, b in pairs:
        true = np.histogram2d(codes[:, a], codes[:, b], bins=4, range=[[0, 4], [0, 4]])[0]
        synthetic_table = np.histogram2d(released[:, a], released[:, b], bins=4,
                                         range=[[0, 4], [0, 4]])[0]
        independent = np.outer(true.sum(axis=1), true.sum(axis=0)) / rows
        # independence misses the planted pair by far more than the noise; the release does not
        assert np.abs(independent - true).mean() > 3 * sigma
        assert np.abs(synthetic_table - true).mean() < 3 * sigma


@pytest.mark.parametrize("accountant", ["exact", "zcdp"])
@pytest.mark.parametrize("rho", [6.6e-19, 1e-12, 0.05])
def test_a_selection_never_charges_more_than_its_rho(accountant, rho):
    # at tiny ρ the GDP conversion loses digits (ε = 1e-9 of a whole release gave 6.6e-19)
    selection = calibrate_selection(rho, 2.0, accountant)
    assert 0 < selection.rho <= rho
    assert selection.rho > rho * (1 - 1e-6)  # and wastes none of it
