"""The marginals method's adaptive rounds and declared workload (marginals.adaptive)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from dp_dask.cli import main
from dp_dask.data.encode import encode_partition
from dp_dask.data.schema import Schema
from dp_dask.data.tables import Domain
from dp_dask.methods.marginals import MarginalModel, adaptive
from dp_dask.privacy.accounting import TABLE_L2_SENSITIVITY
from dp_dask.privacy.ledger import Ledger
from dp_dask.privacy.selection import calibrate_selection, noisy_max_index
from dp_dask.synthesizer import Synthesizer, load_model

NAMES = ("a", "b", "c", "d", "e")


def xor_schema() -> Schema:
    """Five binary columns."""
    return Schema.from_json({"schema_version": 1, "name": "xor", "attributes": [
        {"name": name, "type": "categorical", "categories": ["0", "1"]} for name in NAMES]})


def xor_frame(n: int = 6_000, seed: int = 0) -> pd.DataFrame:
    """c = a XOR b: every pair of the three is independent, the triple is deterministic."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 2, (n, 5))
    codes[:, 2] = codes[:, 0] ^ codes[:, 1]
    codes[:, 4] = np.where(rng.random(n) < 0.8, codes[:, 3], codes[:, 4])
    return pd.DataFrame({name: codes[:, i].astype(str) for i, name in enumerate(NAMES)})


def triple_tvd(real: pd.DataFrame, synthetic: pd.DataFrame, schema: Schema) -> float:
    """Total variation distance of the two frames' (a, b, c) tables."""
    def shares(frame: pd.DataFrame) -> np.ndarray:
        keys = Domain(schema.sizes).index(encode_partition(frame[schema.names], schema).T,
                                          (0, 1, 2))
        return np.bincount(keys, minlength=8) / len(frame)
    return 0.5 * float(np.abs(shares(real) - shares(synthetic)).sum())


def release(frame: pd.DataFrame, rounds: int, seed: int = 0,
            **options) -> tuple[Synthesizer, pd.DataFrame]:
    synthesizer = Synthesizer.create("marginals", xor_schema(), epsilon=2.0,
                                     noise_sampler="numpy", noise_seed=seed, ledger=False,
                                     rounds=rounds, accountant="zcdp", **options)
    synthesizer.fit(frame)
    return synthesizer, synthesizer.sample(len(frame), seed=seed).compute()


def test_planted_triple_is_selected_first_and_its_error_drops(client):
    frame = xor_frame()
    with_rounds, rows = release(frame, rounds=2)
    # pairs alone (on this small domain the public rule would pick the dense joint, whose
    # triples measure (a, b, c) too)
    _, without = release(frame, rounds=0, config={"cliques": "pairs"})
    record = with_rounds.model.metadata["privacy"]["adaptive"]
    assert record["measured"][0]["marginal"] == ["a", "b", "c"]
    # Without the triple the pairs say (a, b, c) is uniform: TVD 1/2. Measured, its error is
    # the noise's: ℓ1 ≈ √(2/π)·σ·8 cells, here ~1 % of the rows; 0.1 leaves room for the rows.
    sigma = record["measured"][0]["sigma"]
    assert math.sqrt(2 / math.pi) * sigma * 8 / len(frame) < 0.03
    assert triple_tvd(frame, without, with_rounds.schema) > 0.3
    assert triple_tvd(frame, rows, with_rounds.schema) < 0.1


def test_rounds_spend_exactly_their_budget_and_are_recorded(client, tmp_path):
    synthesizer, _ = release(xor_frame(2_000), rounds=3)
    privacy = synthesizer.model.metadata["privacy"]
    record = privacy["adaptive"]
    assert privacy["accountant"] == "zcdp" and len(record["measured"]) == 3
    spent = record["rho_one_shot"] + sum(r["rho_select"] + r["rho_measure"]
                                         for r in record["measured"])
    assert spent == pytest.approx(privacy["rho"], rel=1e-12)
    assert record["rho"] == pytest.approx(0.3 * privacy["rho"], rel=1e-12)
    for r in record["measured"]:  # each measurement's σ pays its recorded ρ
        charge = TABLE_L2_SENSITIVITY["replace"] ** 2 / (2 * r["sigma"] ** 2)
        assert charge == pytest.approx(r["rho_measure"], rel=1e-9)
    assert "adaptive rounds" in privacy["budget_split"]
    assert privacy["differentially_private"] is False  # seeded numpy noise claims no DP
    # the model with its 3-way measurements saves and loads
    synthesizer.save(tmp_path / "model")
    loaded = load_model(tmp_path / "model")
    assert isinstance(loaded, MarginalModel)
    assert [m.attributes for m in loaded.measurements] == [
        m.attributes for m in synthesizer.model.measurements]


def test_rounds_are_reproducible_with_the_seeded_sampler(client):
    frame = xor_frame(2_000)
    first, rows = release(frame, rounds=3, seed=7)
    second, again = release(frame, rounds=3, seed=7)
    assert (first.model.metadata["privacy"]["adaptive"]["measured"]
            == second.model.metadata["privacy"]["adaptive"]["measured"])
    for m, n in zip(first.model.measurements, second.model.measurements):
        np.testing.assert_array_equal(m.values, n.values)
    pd.testing.assert_frame_equal(rows, again)


def test_selection_spends_its_rho_and_picks_the_clear_winner():
    rng = np.random.default_rng(0)
    clear, scarce = calibrate_selection(0.5, 1.0, "zcdp"), calibrate_selection(1e-4, 1.0, "zcdp")
    scores = np.array([0.0, 50.0, 3.0])
    picks = [noisy_max_index(scores, clear, sampler="numpy", rng=rng) for _ in range(200)]
    assert picks.count(1) == 200
    assert noisy_max_index(scores, clear) == 1  # OpenDP, map checked
    close = [noisy_max_index(np.array([0.0, 0.1]), scarce, sampler="numpy", rng=rng)
             for _ in range(200)]
    assert 50 < close.count(1) < 150  # little budget: nearly a coin


def test_workload_expands_wildcards_and_weighs_candidates_by_overlap():
    schema = xor_schema()
    assert adaptive.check_workload(schema, [["c", "*", "*"]]) == (
        (0, 1, 2), (0, 2, 3), (0, 2, 4), (1, 2, 3), (1, 2, 4), (2, 3, 4))
    assert adaptive.check_workload(schema, ["a,b", ["d"]]) == ((0, 1), (3,))
    weights = adaptive.candidates(schema, ((0, 1, 2),))
    assert weights == {(0, 1): 2.0, (0, 2): 2.0, (1, 2): 2.0, (0, 1, 2): 3.0}


@pytest.mark.parametrize("workload, message", [
    ([["a", "nope"]], "unknown column 'nope'"),
    ([["a", "b", "c", "d"]], "4 columns"),
    ([["a", "a"]], "twice"),
    ("a,b", "non-empty list"),
])
def test_bad_workload_is_refused(workload, message):
    with pytest.raises(ValueError, match=message):
        adaptive.check_workload(xor_schema(), workload)


def test_exact_accountant_with_rounds_is_refused():
    with pytest.raises(ValueError, match="zCDP"):
        Synthesizer.create("marginals", xor_schema(), rounds=2, accountant="exact")
    plain = Synthesizer.create("marginals", xor_schema())
    assert plain.accountant is None and plain.release_accountant == "exact"  # no rounds
    declared = Synthesizer.create("marginals", xor_schema(), workload=[["c", "*", "*"]])
    # as given; some rounds
    assert declared.rounds is None and declared.accountant is None
    assert declared.release_accountant == "zcdp"
    declared._load_params()  # what fit does first: how many, from the schema
    assert declared.rounds_ == adaptive.rounds_for(declared.schema)


def test_cli_bad_workload_exits_2_before_any_budget_is_spent(tmp_path, capsys):
    data = tmp_path / "xor.csv"
    xor_frame(200).to_csv(data, index=False)
    schema = tmp_path / "xor.json"
    schema.write_text(json.dumps(xor_schema().to_json()))
    ledger = tmp_path / "ledger.sqlite"
    code = main(["synth", "--data", str(data), "--schema", str(schema), "--out",
                 str(tmp_path / "out"), "--ledger", str(ledger), "--workload", "a,zzz",
                 "--quiet", "--workers", "1"])
    assert code == 2 and "unknown column 'zzz'" in capsys.readouterr().err
    assert not ledger.exists() or Ledger(ledger).total("xor").epsilon == 0


def test_evaluate_reports_the_workload_apart(client, tmp_path, capsys):
    frame = xor_frame(1_000)
    data, same, broken = (tmp_path / f"{name}.csv" for name in ("data", "same", "broken"))
    frame.to_csv(data, index=False)
    frame.to_csv(same, index=False)
    independent = frame.copy()
    independent["c"] = np.random.default_rng(1).permutation(independent["c"].to_numpy())
    independent.to_csv(broken, index=False)
    schema = tmp_path / "xor.json"
    schema.write_text(json.dumps(xor_schema().to_json()))
    tvd = {}
    for name, synthetic in (("same", same), ("broken", broken)):
        assert main(["evaluate", "--data", str(data), "--schema", str(schema), "--synthetic",
                     str(synthetic), "--workload", "a,b,c;d,e", "--quiet",
                     "--scheduler", client.scheduler.address]) == 0
        out = capsys.readouterr().out
        assert "workload (2 marginals" in out
        tvd[name] = float(out.split("mean TVD ")[1].split(")")[0])
    assert tvd["same"] == 0 and tvd["broken"] > 0.15


def test_released_rows_round_the_estimates_triples(client):
    """The measured triple enters the estimate (the fitted weights), and a partition's rows
    round the estimate's triples (postprocess/balance.py; a plain resample of many distinct
    candidates would vary about them like a sample: tests/test_balance.py)."""
    frame = xor_frame()
    synthesizer, _ = release(frame, rounds=2)
    rows = len(frame)
    sampler = synthesizer.model.sampler().for_release(rows, np.random.SeedSequence(3))
    estimate = sampler.shared
    assert (0, 1, 2) in estimate.balanced
    sizes = synthesizer.schema.sizes
    weights = estimate.weights * rows / estimate.weights.sum()
    wanted = np.bincount(Domain(sizes).index(estimate.codes, (0, 1, 2)), weights=weights,
                         minlength=8)
    truth = np.bincount(Domain(sizes).index(encode_partition(frame, xor_schema()).T, (0, 1, 2)),
                        minlength=8)
    assert 0.5 * np.abs(wanted - truth).sum() / rows < 0.05  # XOR: the pairs alone give 0.5
    drawn = sampler.draw_codes(rows, np.random.SeedSequence(4))
    # cells of ~750 rows: a sample's would move by ~√750 ≈ 27; rounding and the 1-way match
    assert np.abs(np.bincount(Domain(sizes).index(drawn, (0, 1, 2)), minlength=8)
                  - wanted).max() <= 5
