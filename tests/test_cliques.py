"""cliques="auto": the exact joint's counts (marginals.cliques) and the rule and charges of the
dense-joint path (marginals.joint, issue 59); tests/test_joint.py tests the path itself."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from dp_dask.data.encode import encode_partition
from dp_dask.data.schema import Schema
from dp_dask.data.tables import Domain
from dp_dask.methods.marginals import MarginalsConfig
from dp_dask.methods.marginals.cliques import exact_clique, joint_keys
from dp_dask.methods.marginals.joint import dense_fits, triple_noise
from dp_dask.privacy import rho_budget
from dp_dask.privacy.accounting import TABLE_L2_SENSITIVITY, gaussian_sigma, table_sensitivity
from dp_dask.privacy.selection import replace_one_rho
from dp_dask.synthesizer import Synthesizer

NAMES = ("a", "b", "c", "d", "e", "f")
# 20,000 rows at ε = 1 take the dense path at the default triple_noise (the largest triple's
# cells·σ/n̂ 0.028 replace-one, zCDP); a privacy unit of 3 rows (0.084) needs a larger one.
UNIT_NOISE = 0.5


def parity_schema() -> Schema:
    """a–d binary, e and f of 3 values."""
    return Schema.from_json({"schema_version": 1, "name": "parity", "attributes": [
        {"name": name, "type": "categorical",
         "categories": ["0", "1"] if name in "abcd" else ["0", "1", "2"]} for name in NAMES]})


def parity_frame(n: int = 20_000, seed: int = 0) -> pd.DataFrame:
    """d = a XOR b XOR c: every pair and triple of a–d independent, the 4-way table half
    empty; e, f independent."""
    rng = np.random.default_rng(seed)
    codes = np.column_stack([rng.integers(0, 2, (n, 4)), rng.integers(0, 3, (n, 2))])
    codes[:, 3] = codes[:, 0] ^ codes[:, 1] ^ codes[:, 2]
    return pd.DataFrame({name: codes[:, i].astype(str) for i, name in enumerate(NAMES)})


def shares(frame: pd.DataFrame, schema: Schema, clique: tuple[int, ...]) -> np.ndarray:
    codes = encode_partition(frame[schema.names], schema).T
    return Domain(schema.sizes).table(codes, clique) / len(frame)


def fit(frame: pd.DataFrame, mode: str, *, epsilon: float = 1.0, seed: int = 0,
        neighbours: str = "replace", tables: str = "all", rounds: int = 0,
        **config) -> Synthesizer:
    """All pairs by default (no tree plan, whose selections are charged beside the
    measurements); with ``rounds`` (at 5 % of ρ) cliques="auto" releases as "pairs"."""
    return Synthesizer.create("marginals", parity_schema(), epsilon=epsilon,
                              noise_sampler="numpy", noise_seed=seed, ledger=False,
                              accountant="zcdp", neighbours=neighbours, tables=tables,
                              rounds=rounds, adaptive_share=0.05,
                              config={"cliques": mode, **config}).fit(frame)


def spent(synthesizer: Synthesizer) -> float:
    """Σ Δ²/(2σ²) over the model's measurements (zCDP): repeats merged by inverse variance
    keep their precision, so this is every Gaussian charge of the release, counted once."""
    sensitivity = TABLE_L2_SENSITIVITY[synthesizer.neighbours]
    return sum(sensitivity**2 / (2 * m.sigma**2) for m in synthesizer.model_.measurements)


@pytest.mark.parametrize("neighbours", ["replace", "add_remove"])
def test_dense_path_charged_once_and_plan_fields_sum_to_rho(client, neighbours):
    synthesizer = fit(parity_frame(), "auto", neighbours=neighbours)
    plan = synthesizer.budget_plan()
    assert plan.with_cliques
    assert plan.one_shot + plan.adaptive == pytest.approx(plan.rho, rel=1e-12)
    # the histograms at their share, every triple the rest
    record = synthesizer.model_.metadata["privacy"]["cliques"]
    assert record["rho"] == pytest.approx(plan.one_shot * 0.75, rel=1e-12)
    assert record["sensitivity"] == TABLE_L2_SENSITIVITY[neighbours]
    assert [c["attributes"] for c in record["cliques"]] == [
        list(t) for t in itertools.combinations(NAMES, 3)]
    measured = synthesizer.model_.measurements
    assert [len(m.attributes) for m in measured] == [1] * 6 + [3] * 20  # no 2-way table
    # every measurement's charge, the triples' included, sums to the release's ρ: no more
    assert spent(synthesizer) == pytest.approx(plan.rho, rel=1e-9)
    assert spent(synthesizer) <= plan.rho * (1 + 1e-12)
    assert "20 3-way tables" in synthesizer.model_.metadata["privacy"]["budget_split"]


def same_release(first: Synthesizer, second: Synthesizer, rows: int) -> bool:
    """The two fits' measurements, consistent tables and sampled rows alike, byte for byte."""
    one, two = first.model_, second.model_
    return (len(one.measurements) == len(two.measurements)
            and all(a.attributes == b.attributes and a.sigma == b.sigma
                    and np.array_equal(a.values, b.values)
                    for a, b in zip(one.measurements, two.measurements))
            and all(np.array_equal(t, two.marginals.two_way[p])
                    for p, t in one.marginals.two_way.items())
            and first.sample(rows, seed=0).compute().equals(second.sample(rows, seed=0).compute()))


@pytest.mark.parametrize("neighbours", ["replace", "add_remove"])
def test_joint_over_the_noise_threshold_releases_as_pairs(client, neighbours):
    """Where the largest triple's cells·σ/n̂ is over triple_noise no triple is measured: the
    release is cliques="pairs"'s, byte for byte."""
    frame = parity_frame(2_000)
    auto = fit(frame, "auto", epsilon=0.05, neighbours=neighbours)
    assert auto.budget_plan().with_cliques  # possible by the public sizes, refused by n̂
    assert "cliques" not in auto.model_.metadata["privacy"]
    assert same_release(auto, fit(frame, "pairs", epsilon=0.05, neighbours=neighbours), 500)
    assert spent(auto) == pytest.approx(auto.budget_plan().rho, rel=1e-9)


def test_joint_over_the_memory_cap_releases_as_pairs(client):
    """A joint of more cells than max_clique_cells: decided from public sizes, no sparse joint
    counted, the plan as pairs'."""
    frame = parity_frame(2_000)
    auto = fit(frame, "auto", max_clique_cells=143)  # the joint has 144
    assert not auto.budget_plan().with_cliques
    assert same_release(auto, fit(frame, "pairs"), 500)


def test_default_pairs_measures_no_clique(client):
    synthesizer = fit(parity_frame(2_000), "pairs")
    assert not synthesizer.budget_plan().with_cliques
    assert "cliques" not in synthesizer.model_.metadata["privacy"]


@pytest.mark.parametrize("neighbours", ["replace", "add_remove"])
def test_auto_with_rounds_releases_as_pairs(client, neighbours):
    """With adaptive rounds cliques="auto" releases as "pairs" (the rounds' selection covers a
    workload; the dense path measures every triple): no sparse joint counted, the same
    measurements, tables and rows, and the record says so. Before, the full joint was
    measured beside the pairs."""
    frame = parity_frame()
    auto = fit(frame, "auto", neighbours=neighbours, rounds=1)
    assert not auto.budget_plan().with_cliques
    assert auto.model_.metadata["privacy"]["cliques"] == {
        "selection": "none: with adaptive rounds cliques='auto' releases as 'pairs'"}
    assert same_release(auto, fit(frame, "pairs", neighbours=neighbours, rounds=1), 500)


def test_rule_reads_the_triples_rho_and_cells_and_the_noisy_n():
    """The rule is the dense path's own noise: the largest triple's cells·σ/n̂ at the ρ and
    shares the triples get (e, f and one of a–d: 18 cells), from public sizes, ρ and n̂."""
    schema = parity_schema()
    shares = np.array([math.prod(schema.sizes[list(t)]) for t in itertools.combinations(
        range(6), 3)], dtype=np.float64) ** (1 / 3)
    sigma = gaussian_sigma(0.01 * 18 ** (1 / 3) / shares.sum(), 1.0, "zcdp")
    assert triple_noise(schema, 20_000, 0.01, 1.0, "zcdp") == pytest.approx(18 * sigma / 20_000)
    config = MarginalsConfig(cliques="auto")
    rows = math.ceil(18 * sigma / config.triple_noise * (1 + 1e-12))  # the fewest that pass
    assert dense_fits(schema, rows, 0.01, 1.0, "zcdp", config)
    assert not dense_fits(schema, rows - 1, 0.01, 1.0, "zcdp", config)
    assert not dense_fits(schema, 10**9, 0.01, 1.0, "zcdp", replace(config, max_clique_cells=143))
    assert not dense_fits(schema, 10**9, 0.01, 1.0, "zcdp", MarginalsConfig())  # "pairs"


@pytest.mark.parametrize("neighbours", ["replace", "add_remove"])
def test_rule_decided_at_the_noise_the_triples_get(client, neighbours):
    """The release's triples are measured at the rule's ρ: their largest cells·σ/n̂ is the
    rule's number (n̂ the 1-way histograms' under add/remove)."""
    frame = parity_frame()
    synthesizer = fit(frame, "auto", neighbours=neighbours)
    record = synthesizer.model_.metadata["privacy"]["cliques"]
    rows = synthesizer.model_.n_rows
    largest = max(c["cells"] * c["sigma"] for c in record["cliques"]) / rows
    assert triple_noise(parity_schema(), rows, record["rho"], record["sensitivity"],
                        "zcdp") == pytest.approx(largest, rel=1e-9)
    assert largest <= MarginalsConfig().triple_noise


@pytest.mark.parametrize("neighbours", ["replace", "add_remove"])
def test_dense_release_ledger_charge(client, neighbours):
    """Replace-one: the ledger charges the release's ε and no more (n public; the dense path
    spends what a tree's selections would have on its triples). Add/remove: the path and a
    tree plan are both chosen after n̂, so the replace-one charge counts the tree's selections
    whichever runs."""
    synthesizer = fit(parity_frame(), "auto", neighbours=neighbours, tables="auto")
    assert "cliques" in synthesizer.model_.metadata["privacy"]  # the dense path ran
    ledger = synthesizer._ledger_plan()
    rho = rho_budget(1.0, synthesizer.delta, "zcdp")
    if neighbours == "replace":
        assert ledger["epsilon"] == 1.0 and ledger["rho"] == rho
        assert "replace_one_row" not in synthesizer.model_.metadata["privacy"]
    else:
        plan = synthesizer.budget_plan()
        selections = plan.selections(synthesizer.schema, True, "zcdp")
        assert selections  # the tree plan's, counted though no tree was chosen
        assert ledger["rho"] == pytest.approx(replace_one_rho(rho, selections), rel=1e-12)
        assert ledger["rho"] > 2 * rho
        assert synthesizer.model_.metadata["privacy"]["replace_one_row"]["rho"] == ledger["rho"]


def test_exact_clique_sums_the_sparse_joint():
    schema, frame = parity_schema(), parity_frame(20_000)
    codes = encode_partition(frame[schema.names], schema).T
    joint = joint_keys(codes, schema)
    for clique in ((1, 4), tuple(range(6))):
        assert np.array_equal(exact_clique(joint, schema, clique),
                              Domain(schema.sizes).table(codes, clique))


def test_cliques_option_checked():
    with pytest.raises(ValueError, match="cliques must be one of"):
        MarginalsConfig(cliques="all")


def test_plan_reports_the_memory_cap():
    from dp_dask.estimate import estimate

    schema = parity_schema()
    planned = estimate(schema, 20_000, config={"cliques": "auto", "max_clique_cells": 256})
    assert planned.cliques["max_clique_cells"] == 256
    assert planned.cliques["joint_bytes"] == 16 * 144  # min(rows, the joint's 144 cells)
    assert planned.cliques["clique_bytes"] == 6 * 8 * 144  # the dense fit's six arrays
    assert "max_clique_cells" in planned.describe()
    # a joint over the cap is never measured: none of its memory
    assert estimate(schema, 20_000, config={"cliques": "auto", "max_clique_cells": 64}
                    ).cliques is None
    assert "cliques" not in estimate(schema, 20_000).to_json()  # default plans as before


@pytest.mark.parametrize("neighbours", ["replace", "add_remove"])
def test_cliques_of_a_privacy_unit_are_measured_at_its_sensitivity(client, neighbours):
    """With at most K rows per unit every measurement, the cliques' included, has K times a
    row's sensitivity: the charges sum to ρ at K·Δ, not at Δ (a clique measured at a row's
    sensitivity would spend K² times its share)."""
    frame = parity_frame().assign(uid=lambda f: (np.arange(len(f)) // 3).astype(str))
    synthesizer = Synthesizer.create(
        "marginals", parity_schema(), epsilon=1.0, noise_sampler="numpy", noise_seed=0,
        ledger=False, accountant="zcdp", neighbours=neighbours, tables="all",
        config={"cliques": "auto", "triple_noise": UNIT_NOISE}, unit_shape=False,  # rows:
        privacy_unit={"column": "uid", "max_rows": 3}).fit(frame)  # its measurements alone
    record = synthesizer.model_.metadata["privacy"]["cliques"]
    assert record["sensitivity"] == table_sensitivity(neighbours, "l2", 3)
    plan = synthesizer.budget_plan()
    assert spent(synthesizer) * 3**2 == pytest.approx(plan.rho, rel=1e-9)
