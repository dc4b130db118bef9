"""dp-dask stats: plain-DP Laplace histograms and Tabular-DDP (dependent DP, weaker, opt-in)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from conftest import CORRELATED_ROWS, SMALL_SCHEMA_PATH, correlated_frame

from dp_dask.cli import main
from dp_dask.data.encode import encode_partition
from dp_dask.data.schema import load_schema
from dp_dask.network import Network, chunks, dependent_sensitivity, edge_rho, network_from_json
from dp_dask.privacy.ledger import (
    APPROX_DP,
    DEPENDENT_DP,
    FAILED,
    BudgetExceededError,
    Ledger,
    report,
)
from dp_dask.stats import (
    DDP_STATEMENT,
    DependentPrivacyWarning,
    add_noise,
    laplace_scale,
    plain_dp_epsilon,
    plan_chunks,
    release_stats,
    tabular_ddp_scale,
)

SCHEMA = load_schema(SMALL_SCHEMA_PATH)
# A hand-built network over 3 binary/ternary columns: 0 -> 1 -> 2, and 0 -> 2.
J01 = np.array([[0.4, 0.1], [0.1, 0.4]])
J12 = np.array([[0.3, 0.2, 0.05], [0.1, 0.2, 0.15]])
HAND = Network(((0, 1), (1, 2)), {(0, 1): J01, (1, 2): J12}, "hand-built")


def test_rho_and_dependent_sensitivity_of_a_hand_built_network():
    # J01: for each column, max/min over rows is 0.4/0.1 = 4; the transpose gives the same.
    assert edge_rho(J01, smoothing=0) == pytest.approx(math.log(4))
    # J12: over rows per column 3, 1, 3; over columns per row 0.3/0.05 = 6, 0.2/0.1 = 2.
    assert edge_rho(J12, smoothing=0) == pytest.approx(math.log(6))
    ds, rho = dependent_sensitivity(HAND, [0, 1, 2], smoothing=0)
    assert ds == pytest.approx(math.log(24)) and set(rho) == {"0->1", "1->2"}
    # an edge leaving the chunk does not count
    assert dependent_sensitivity(HAND, [0, 1], smoothing=0)[0] == pytest.approx(math.log(4))
    # smoothing λ = 0.1 over 4 cells: 0.9·0.4 + 0.025 = 0.385 against 0.9·0.1 + 0.025 = 0.115
    assert edge_rho(J01, smoothing=0.1) == pytest.approx(math.log(0.385 / 0.115))
    # unnormalised tables are normalised first; a zero cell without smoothing is infinite
    assert edge_rho(10 * J01, smoothing=0) == pytest.approx(math.log(4))
    assert edge_rho(np.array([[0.5, 0.0], [0.25, 0.25]]), smoothing=0) == math.inf


def test_noise_scales_laplace_baseline_tabular_ddp_and_fallback():
    # plain DP, replace-one: m histograms of L1 sensitivity 2 each: 2m/ε
    assert laplace_scale(30, 0.5) == pytest.approx(120.0)
    # Tabular-DDP: 2·m·DS/(k·ε) (twice the paper's add/remove m·DS/(k·ε))
    assert tabular_ddp_scale(30, 10, 2.5, 1.0) == (pytest.approx(15.0), False)
    # DS floored at 1 (the column's own term), never fewer than one histogram's noise
    assert tabular_ddp_scale(30, 10, 0.0, 1.0) == (pytest.approx(6.0), False)
    # DS ≥ k (or infinite): the plain-DP scale, flagged
    for ds in (10.0, 11.0, math.inf):
        assert tabular_ddp_scale(30, 10, ds, 1.0) == (pytest.approx(60.0), True)
    # uneven chunks get ε in proportion to their columns: Σε_c = ε
    assert chunks(4, 3) == [[0, 1, 2], [3]]
    plan = plan_chunks(SCHEMA, 2.0, "tabular-ddp", k=3, network=HAND, smoothing=0)
    assert [c.epsilon for c in plan] == pytest.approx([1.5, 0.5])
    # chunk {0, 1, 2}: DS = log 24 ≈ 3.18 ≥ 3 falls back to 2m/ε; chunk {3}: DS = 0, floored
    assert plan[0].dependent_sensitivity == pytest.approx(math.log(24)) and plan[0].fallback
    assert plan[0].scale == pytest.approx(2 * 4 / 2.0)
    assert plan[1].dependent_sensitivity == 0 and not plan[1].fallback
    assert plan[1].scale == pytest.approx(2 * 4 * 1 / (1 * 2.0))
    (whole,) = plan_chunks(SCHEMA, 2.0, "tabular-ddp", k=4, network=HAND, smoothing=0)
    assert whole.scale == pytest.approx(2 * 4 * math.log(24) / (4 * 2.0)) and not whole.fallback
    assert whole.dp_epsilon == pytest.approx(2 * 4 / whole.scale)  # as plain DP: 2k/b
    # k = 2: an edge of ratio 9 (ρ = log 9 ≈ 2.2 ≥ 2) makes chunk {0, 1} fall back to 2m/ε
    strong = Network(((0, 1),), {(0, 1): np.array([[0.45, 0.05], [0.05, 0.45]])}, "strong")
    fell = plan_chunks(SCHEMA, 1.0, "tabular-ddp", k=2, network=strong, smoothing=0)
    assert [c.fallback for c in fell] == [True, False]
    assert fell[0].scale == pytest.approx(laplace_scale(4, 1.0))


def test_plain_dp_epsilon_of_a_known_network_and_the_bound_for_any():
    plan = plan_chunks(SCHEMA, 2.0, "tabular-ddp", k=3, network=HAND, smoothing=0)
    exact = plain_dp_epsilon(SCHEMA, 2.0, 3, HAND, 0)
    # chunk {0, 1, 2} falls back (its ε_c = 1.5); chunk {3}: DS floored at 1, 2·1/b = 0.5
    assert exact == pytest.approx(sum(c.dp_epsilon for c in plan)) == pytest.approx(2.0)
    # a network still to be learnt: every chunk at DS ≤ 1, Σ k_c²·ε/m = (9 + 1)·2/4
    assert plain_dp_epsilon(SCHEMA, 2.0, 3, None, 0) == pytest.approx(5.0)


def test_laplace_baseline_draws_noise_of_scale_2m_over_epsilon():
    plan = plan_chunks(SCHEMA, 0.5, "laplace")
    assert len(plan) == 1 and plan[0].scale == pytest.approx(16.0)  # 2·4/0.5
    exact = [np.full(size, 1000, dtype=np.int64) for size in SCHEMA.sizes]
    rng = np.random.default_rng(7)
    noise = np.concatenate([np.concatenate(add_noise(exact, plan, sampler="numpy", rng=rng))
                            - 1000 for _ in range(400)])
    # E|Laplace(b)| = b; 6000 draws: the mean's std is b/√6000 ≈ 1.3 % of b
    assert np.mean(np.abs(noise)) == pytest.approx(16.0, rel=0.06)


def exact_histograms(frame: pd.DataFrame) -> list[np.ndarray]:
    codes = encode_partition(frame, SCHEMA)
    return [np.bincount(codes[a], minlength=size) for a, size in enumerate(SCHEMA.sizes)]


def test_end_to_end_tabular_ddp_from_noisy_tables_on_the_cluster(client, data, tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    with pytest.warns(DependentPrivacyWarning, match="weaker than differential privacy"):
        release = release_stats(data, SCHEMA, epsilon=1.0, mechanism="tabular-ddp", k=2,
                                network_share=0.3, noise_sampler="numpy", noise_seed=3,
                                ledger=ledger, dataset_name="people")
    privacy = release.metadata["privacy"]
    assert privacy["statement"] == DDP_STATEMENT
    assert "Pufferfish" in privacy["statement"] and privacy["differentially_private"] is False
    assert privacy["ledger_notion"] == DEPENDENT_DP
    assert "epsilon 0.3 to" in privacy["budget_split"]
    assert [c["columns"] for c in privacy["chunks"]] == [["colour", "size"], ["flag", "city"]]
    # the network is the Chow–Liu tree of each chunk: one edge each
    assert len(privacy["network"]["edges"]) == 2
    exact = exact_histograms(correlated_frame(CORRELATED_ROWS, seed=1))
    for a, chunk in enumerate([0, 0, 1, 1]):
        scale = privacy["chunks"][chunk]["laplace_scale"]
        assert scale <= laplace_scale(4, 0.7) + 1e-9  # never more noise than plain DP
        assert np.abs(release.histograms[a] - exact[a]).max() < 12 * scale
    # written: histograms and the metadata naming the notion
    paths = release.write(tmp_path / "out")
    written = json.loads(paths["metadata"].read_text())
    assert written["privacy"]["notion"] == "dependent differential privacy"
    table = pd.read_csv(paths["csv"])
    assert len(table) == SCHEMA.d and set(table["column"]) == set(SCHEMA.names)
    histograms = json.loads(paths["json"].read_text())
    assert histograms["notion"] == DDP_STATEMENT
    assert list(histograms["columns"]["flag"]) == ["no", "yes"]
    # seeded numpy noise: recorded, never counted
    assert [e.notion for e in ledger.entries("people")] == [APPROX_DP, APPROX_DP, DEPENDENT_DP]
    assert ledger.total("people").releases == 0


def test_ledger_counts_dp_parts_and_lists_dependent_dp_apart(client, data, tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    with pytest.warns(DependentPrivacyWarning):
        release_stats(data, SCHEMA, epsilon=1.0, mechanism="tabular-ddp", k=2,
                      network_share=0.25, ledger=ledger, dataset_name="people")  # OpenDP noise
    total = ledger.total("people")
    # the noisy tables (0.25·ε, pure DP) and the histograms at their plain-DP ε are in the DP
    # total; the 0.75 under DDP is listed apart
    plain = next(e.epsilon for e in ledger.entries("people") if e.run_id.endswith("-dp"))
    assert total.epsilon == pytest.approx(0.25 + plain) and total.releases == 2
    assert total.other_notions == 1
    ledger.set_budget("people", total.epsilon + 0.25, 1e-9)
    # a DP release past the budget is refused before any data is read (the input is missing)
    with pytest.raises(BudgetExceededError, match="would bring the total"):
        release_stats(tmp_path / "missing.parquet", SCHEMA, epsilon=0.3, ledger=ledger,
                      dataset_name="people")
    release = release_stats(data, SCHEMA, epsilon=0.2, ledger=ledger, dataset_name="people")
    assert release.metadata["privacy"]["differentially_private"] is True
    assert ledger.total("people").epsilon == pytest.approx(total.epsilon + 0.2)


def test_tabular_ddp_counts_at_its_plain_dp_epsilon_and_is_refused_past_the_budget(
        client, data, tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.set_budget("people", 1.0, 1e-9)
    ddp = {"epsilon": 1.0, "mechanism": "tabular-ddp", "k": 2, "network_share": 0.25,
           "ledger": ledger, "dataset_name": "people"}
    # Before the data is read, a network learnt from it could give any DS: the histograms'
    # ε = 0.75 may be worth Σ_c k_c²·ε/m = 1.5 as plain DP, with the tables' 0.25 past 1.
    with pytest.warns(DependentPrivacyWarning), pytest.raises(
            BudgetExceededError, match="budget of ε=1 .*tabular-ddp"):
        release_stats(tmp_path / "missing.parquet", SCHEMA, **ddp)
    assert ledger.entries() == []  # nothing read, nothing kept
    with pytest.warns(DependentPrivacyWarning):
        release = release_stats(data, SCHEMA, **ddp, force=True)  # OpenDP noise
    plain = release.metadata["privacy"]["dp_without_assumption"]["epsilon"]
    tables, counted, dependent = ledger.entries("people")
    assert (tables.epsilon, tables.notion) == (0.25, APPROX_DP)
    # counted at its own plain-DP ε once the network was known (at most the bound)
    assert counted.notion == APPROX_DP and counted.run_id == f"{dependent.run_id}-dp"
    assert counted.epsilon == pytest.approx(plain - 0.25) and counted.epsilon <= 1.5
    assert (dependent.epsilon, dependent.notion) == (0.75, DEPENDENT_DP)  # listed apart
    total = ledger.total("people")
    assert total.epsilon == pytest.approx(plain) and total.other_notions == 1
    listing = report(ledger)
    assert "1 entry(ies) under other notions not summed (ε=0.75 under their notions; 1 " \
           "counted above at their plain-DP ε" in listing
    # spent now: any further DP release is past the budget, a dependent-DP one too
    with pytest.warns(DependentPrivacyWarning), pytest.raises(BudgetExceededError):
        release_stats(tmp_path / "missing.parquet", SCHEMA, **{**ddp, "epsilon": 0.01})


def test_stats_interrupted_after_their_noise_keep_their_charge(client, data, tmp_path,
                                                              monkeypatch):
    from dp_dask import stats

    ledger = Ledger(tmp_path / "ledger.sqlite")

    def interrupted(*_):  # the metadata, after the noise: post-processing
        raise KeyboardInterrupt

    monkeypatch.setattr(stats, "stats_metadata", interrupted)
    with pytest.raises(KeyboardInterrupt):
        release_stats(data, SCHEMA, epsilon=0.5, ledger=ledger, dataset_name="people")
    (kept,) = ledger.entries()
    assert kept.status == FAILED and ledger.total("people").epsilon == 0.5


@pytest.fixture(scope="module")
def pgmpy():
    return pytest.importorskip("pgmpy")


def test_public_network_and_public_sample_sources(pgmpy, client, data, tmp_path):
    # colour -> flag with P(colour) = (.5, .3, .2) and P(flag | colour) by column:
    # joint = [[.45, .05], [.15, .15], [.04, .16]]; over colour per flag: 11.25 and 3.2;
    # over flag per colour: 9, 1, 4. ρ = log 11.25.
    document = {"edges": [["colour", "flag"]],
                "cpds": {"colour": {"values": [[0.5], [0.3], [0.2]]},
                         "flag": {"parents": ["colour"],
                                  "values": [[0.9, 0.5, 0.2], [0.1, 0.5, 0.8]]}}}
    path = tmp_path / "network.json"
    path.write_text(json.dumps(document))
    network = network_from_json(path, SCHEMA)
    assert network.edges == ((0, 2),)
    np.testing.assert_allclose(network.joints[(0, 2)],
                               [[0.45, 0.05], [0.15, 0.15], [0.04, 0.16]])
    assert dependent_sensitivity(network, [0, 1, 2], smoothing=0)[0] == pytest.approx(
        math.log(11.25))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"edges": [["colour", "shoe"]], "cpds": {}}))
    with pytest.raises(ValueError, match="'shoe' is not in schema"):
        network_from_json(bad, SCHEMA)
    # a public sample (here: other rows of the same generator): structure learned per chunk
    sample = tmp_path / "public.csv"
    correlated_frame(3_000, seed=11).to_csv(sample, index=False)
    with pytest.warns(DependentPrivacyWarning):
        release = release_stats(data, SCHEMA, epsilon=1.0, mechanism="tabular-ddp", k=4,
                                public_sample=sample, noise_sampler="numpy", noise_seed=0,
                                ledger=False)
    privacy = release.metadata["privacy"]
    assert "public sample" in privacy["network"]["source"]
    assert privacy["network"]["edges"]  # colour, size and flag depend on each other
    assert privacy["chunks"][0]["dependent_sensitivity"] > 0


def test_cli_stats(client, data, tmp_path, capsys):
    scheduler = ["--scheduler", client.scheduler.address, "--quiet"]
    common = ["stats", "--data", str(data), "--schema", str(SMALL_SCHEMA_PATH), "--epsilon", "1",
              "--noise-sampler", "numpy", "--noise-seed", "0",
              "--ledger", str(tmp_path / "ledger.sqlite"), *scheduler]
    out = tmp_path / "ddp"
    assert main([*common, "--out", str(out), "--mechanism", "tabular-ddp", "--k", "2",
                 "--network-from-noisy-tables", "0.3"]) == 0
    captured = capsys.readouterr()
    assert "dependent differential privacy" in captured.out
    assert "dp-dask: warning:" in captured.err and "weaker than differential" in captured.err
    assert json.loads((out / "metadata.json").read_text())["privacy"]["k"] == 2
    assert main([*common, "--out", str(tmp_path / "dp"), "--mechanism", "laplace"]) == 0
    assert "ε-differential privacy (pure DP)" in capsys.readouterr().out
    # bad combinations: exit 2, named, nothing written
    for extra, message in ((["--mechanism", "laplace", "--network-from-noisy-tables", "0.2"],
                            "applies to --mechanism tabular-ddp only"),
                           (["--mechanism", "tabular-ddp"], "needs exactly one network source"),
                           (["--mechanism", "tabular-ddp", "--network-from-noisy-tables", "1.5"],
                            "must lie in (0, 1)")):
        assert main([*common, "--out", str(tmp_path / "bad"), *extra]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
