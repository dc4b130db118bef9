"""The privacy unit's tuned numbers are configuration (issues 66, 67): ``UnitConfig``'s
auto_share, unit_level_share and unit_level_threshold, set with the unit from Python, the CLI
and a job config, recorded in the release where they differ from their defaults, and read by
the fit (the searches' shares of ρ, the threshold deciding what is unit-level)."""

from __future__ import annotations

import json
import textwrap

import pandas as pd
import pytest
from test_unit_level_auto import EPSILON, UNDECLARED, K
from test_unit_shape import panel

from dp_dask.cli import job_spec, main
from dp_dask.cli.options import privacy_unit
from dp_dask.data.schema import load_schema
from dp_dask.data.units import UNIT_DEFAULTS, PrivacyUnit, UnitConfig
from dp_dask.privacy.accounting import rho_budget
from dp_dask.privacy.ledger import Ledger
from dp_dask.synthesizer import Synthesizer


def searched(frame: pd.DataFrame, config: dict | None) -> Synthesizer:
    """Both of the unit's searches (K "auto", unit_level "auto") under ``config``, seeded."""
    unit = {"column": "uid", "max_rows": "auto", "unit_level": "auto",
            **({"config": config} if config is not None else {})}
    return Synthesizer.create("marginals", load_schema(UNDECLARED), epsilon=EPSILON,
                              noise_sampler="numpy", noise_seed=5, ledger=False,
                              privacy_unit=unit).fit(frame)


def test_item1_unit_config_sets_the_searches_shares_and_threshold(client):
    """Set through the unit's config, the two shares move the searches' ρ (and the Laplace
    scale of the unit-level search, ∝ 1/√ρ under the exact accountant's pure-ε bound), the
    measurements keep the rest of the same total, and a threshold of 0.9 finds wage and flag
    unit-level too (they vary in about 60 % of the units of two rows or more: noisy shares far
    from both thresholds at this scale), so the fit and its release change; the release records
    the fields set. Before (652615b): ValueError "privacy_unit must be {'column': ...,
    'max_rows': K} (and optionally 'unit_level': ...), got {..., 'config': ...}"."""
    frame = panel(4_000)
    default = searched(frame, None)
    tuned = searched(frame, {"auto_share": 0.1, "unit_level_share": 0.2,
                             "unit_level_threshold": 0.9})
    plan = rho_budget(EPSILON, default.delta)
    records = [s.model.metadata["privacy"] for s in (default, tuned)]
    for privacy, auto, level in zip(records, (UNIT_DEFAULTS.auto_share, 0.1),
                                    (UNIT_DEFAULTS.unit_level_share, 0.2)):
        split = privacy["rho_split"]
        assert split["max_rows_choice"] == pytest.approx(auto * plan, rel=1e-12)
        assert split["unit_level_search"] == pytest.approx(level * plan, rel=1e-12)
        assert split["measurements"] == pytest.approx((1 - auto - level) * plan, rel=1e-9)
        assert privacy["rho"] == pytest.approx(plan, rel=1e-9)
    assert "config" not in records[0]["privacy_unit"]  # the defaults record nothing new
    assert records[1]["privacy_unit"]["config"] == {
        "auto_share": 0.1, "unit_level_share": 0.2, "unit_level_threshold": 0.9}
    searches = [r["privacy_unit"]["unit_level"] for r in records]
    assert [s["threshold"] for s in searches] == [UNIT_DEFAULTS.unit_level_threshold, 0.9]
    # pure ε′ with ε′² ∝ the share (the exact accountant's bound is monotone: ε′ grows with ρ)
    assert searches[1]["scale"] < searches[0]["scale"]
    assert not {"wage", "flag"} & set(searches[0]["found"])  # row-level at 0.05
    assert searches[1]["found"] == ["gender", "region", "wage", "flag"]
    assert tuned.model.metadata["unit_shape"]["unit_level"] == ["gender", "region", "wage",
                                                                "flag"]
    release = tuned.sample(seed=3).compute()
    assert (release.groupby("uid")[["wage", "flag"]].nunique() == 1).all(axis=None)
    assert tuned.budget_plan().rho < default.budget_plan().rho  # the measurements' ρ


def test_item1_unit_config_is_checked_naming_the_field():
    assert PrivacyUnit.of({"column": "uid", "max_rows": 3}).config == UnitConfig()
    assert PrivacyUnit.of({"column": "uid", "max_rows": 3, "config": {"auto_share": 0.2}}
                          ).config == UnitConfig(auto_share=0.2)
    with pytest.raises(ValueError, match="privacy unit 'uid': config: UnitConfig has no field "
                                         "'share'"):
        PrivacyUnit("uid", 3, config={"share": 0.2})
    with pytest.raises(ValueError, match="UnitConfig.auto_share must be a number > 0"):
        UnitConfig(auto_share=0)
    with pytest.raises(ValueError, match="UnitConfig.unit_level_threshold must be below 1"):
        UnitConfig(unit_level_threshold=1.0)
    with pytest.raises(ValueError, match="auto_share \\+ unit_level_share must be below 1"):
        UnitConfig(auto_share=0.6, unit_level_share=0.5)
    # a unit's to_json (a drafted schema's declaration) keeps what differs, and reads back
    unit = PrivacyUnit("uid", "auto", config=UnitConfig(unit_level_share=0.1))
    assert unit.to_json() == {"column": "uid", "max_rows": "auto",
                              "config": {"unit_level_share": 0.1}}
    assert PrivacyUnit.of(unit.to_json()) == unit


def test_item1_unit_config_from_the_cli_and_a_job_config(tmp_path, client):
    """``--unit-config`` (exit 2 without a unit or with an unknown field, nothing spent) and a
    job's ``privacy.unit_config`` give the unit its config; the release records it."""
    (tmp_path / "schema.json").write_text(json.dumps(UNDECLARED))
    panel(1_000).to_csv(tmp_path / "data.csv", index=False)
    ledger = tmp_path / "ledger.sqlite"
    common = ["synth", "--data", str(tmp_path / "data.csv"), "--schema",
              str(tmp_path / "schema.json"), "--epsilon", str(EPSILON), "--noise-sampler",
              "numpy", "--noise-seed", "5", "--ledger", str(ledger), "--quiet",
              "--scheduler", client.scheduler.address]
    assert main([*common, "--out", str(tmp_path / "bad"),
                 "--unit-config", '{"auto_share": 0.1}']) == 2
    assert main([*common, "--out", str(tmp_path / "bad"), "--privacy-unit", "uid",
                 "--max-rows-per-unit", "auto", "--unit-config", '{"autoshare": 0.1}']) == 2
    assert not Ledger(ledger).entries()  # both refused before any spend
    assert main([*common, "--out", str(tmp_path / "out"), "--privacy-unit", "uid",
                 "--max-rows-per-unit", "auto", "--unit-config", '{"auto_share": 0.1}']) == 0
    privacy = json.loads((tmp_path / "out" / "metadata.json").read_text())["privacy"]
    assert privacy["privacy_unit"]["config"] == {"auto_share": 0.1}
    assert privacy["rho_split"]["max_rows_choice"] == pytest.approx(
        0.1 * rho_budget(EPSILON, privacy["delta"]), rel=1e-12)
    config = tmp_path / "job.yaml"
    config.write_text(textwrap.dedent(f"""\
        data: {tmp_path / "data.csv"}
        schema: {tmp_path / "schema.json"}
        privacy: {{epsilon: 1, privacy_unit: uid, max_rows_per_unit: {K},
                   unit_config: {{unit_level_share: 0.1, unit_level_threshold: 0.2}}}}
        output: {{out: release}}
        """))
    assert privacy_unit(job_spec(config, [])) == {
        "column": "uid", "max_rows": K,
        "config": {"unit_level_share": 0.1, "unit_level_threshold": 0.2}}


def test_stats_refuses_a_unit_config_it_would_not_use(tmp_path, capsys):
    """dp-dask stats takes an integer K and runs no unit-level search, so a unit config tunes
    nothing there: the CLI (and a job's privacy.unit_config, the same spec) exits 2 naming it,
    and Python raises naming it, both before any spend (before, stats accepted it and ignored
    it)."""
    from dp_dask.stats import release_stats

    (tmp_path / "schema.json").write_text(json.dumps(UNDECLARED))
    panel(200).to_csv(tmp_path / "data.csv", index=False)
    ledger = tmp_path / "ledger.sqlite"
    assert main(["stats", "--data", str(tmp_path / "data.csv"), "--schema",
                 str(tmp_path / "schema.json"), "--out", str(tmp_path / "out"), "--ledger",
                 str(ledger), "--privacy-unit", "uid", "--max-rows-per-unit", str(K),
                 "--unit-config", '{"auto_share": 0.1}', "--quiet"]) == 2
    assert "auto_share" in capsys.readouterr().err
    with pytest.raises(ValueError, match="config .*auto_share.*stats never runs"):
        release_stats(tmp_path / "data.csv", UNDECLARED, epsilon=1.0,
                      ledger=ledger, privacy_unit={"column": "uid", "max_rows": K,
                                                   "config": {"auto_share": 0.1}})
    assert not Ledger(ledger).entries()
