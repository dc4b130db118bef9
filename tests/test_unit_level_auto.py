"""Unit-level attributes found under DP (issue 67): ``privacy_unit`` ``unit_level: "auto"``.

Attributes the schema does not declare unit-level are looked for from a noisy count of units in
which each varies (Laplace, pure ε, its own share of the release's ρ): one found comes back
constant within every synthetic unit, the search is recorded as its own mechanism, and the
release's total stays its (ε, δ)."""

from __future__ import annotations

import json

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from test_unit_shape import PANEL_SCHEMA, panel

from dp_dask.cli import main
from dp_dask.data.encode import encode_partition
from dp_dask.data.schema import load_schema
from dp_dask.data.units import (
    UNIT_DEFAULTS,
    _with_unit_text,
    varying_units_graph,
)
from dp_dask.privacy.accounting import rho_budget
from dp_dask.privacy.ledger import Ledger
from dp_dask.stats import release_stats
from dp_dask.synthesizer import Synthesizer

K = 6
EPSILON = 2.0
# the panel with nothing declared unit-level: gender and region are constant within each
# person in the data, wage and flag vary
UNDECLARED = {**PANEL_SCHEMA, "attributes": [
    {key: value for key, value in attribute.items() if key != "unit_level"}
    for attribute in PANEL_SCHEMA["attributes"]]}


def _auto(frame: pd.DataFrame, **options) -> Synthesizer:
    return Synthesizer.create(
        "marginals", load_schema(UNDECLARED), epsilon=EPSILON, noise_sampler="numpy",
        noise_seed=5, ledger=False,
        privacy_unit={"column": "uid", "max_rows": K, "unit_level": "auto"},
        **options).fit(frame)


def test_item2_constant_attribute_found_without_declaring_it(client):
    # Before, privacy_unit refused the key: ValueError "privacy_unit must be {'column': ...,
    # 'max_rows': K}, got {..., 'unit_level': 'auto'}", and undeclared attributes varied within
    # the synthetic units.
    frame = panel(10_000)
    fitted = _auto(frame)
    release = fitted.sample(seed=3).compute()
    per_unit = release.groupby("uid")[["gender", "region", "flag"]].nunique()
    assert (per_unit[["gender", "region"]] == 1).all(axis=None)
    assert (per_unit["flag"] > 1).any()  # a row-level attribute still varies
    privacy = fitted.model.metadata["privacy"]
    search = privacy["privacy_unit"]["unit_level"]
    assert search["found"] == ["gender", "region"]
    assert fitted.model.metadata["unit_shape"]["unit_level"] == ["gender", "region"]
    assert "gender, region" in search["note"]
    # Laplace of scale (candidates + 1)/ε on every count (80 units here, against about 6,900
    # units of two rows or more): each noisy count within 8 scales of the real one (a miss
    # has probability e⁻⁸ per count)
    real = _real_counts(frame, load_schema(UNDECLARED))
    noisy = [*search["noisy_varying_units"].values(), search["noisy_units_of_two_rows"]]
    assert search["l1_sensitivity"] == 5
    assert np.abs(np.array(noisy) - real).max() < 8 * search["scale"]
    assert real[2] / real[-1] > 0.5 and real[3] / real[-1] > 0.5  # wage, flag: row-level
    # its own mechanism, charged once: the split adds up to the release's ρ, which is its
    # (ε, δ)'s
    plan = rho_budget(EPSILON, privacy["delta"])
    split = privacy["rho_split"]
    assert split["unit_level_search"] == pytest.approx(UNIT_DEFAULTS.unit_level_share * plan)
    assert search["rho"] == pytest.approx(split["unit_level_search"], rel=1e-9)
    assert privacy["rho"] == pytest.approx(plan, rel=1e-9)
    assert split["measurements"] == pytest.approx(plan - split["unit_level_search"], rel=1e-9)
    assert privacy["epsilon"] == EPSILON


def test_item2_counts_move_by_one_unit_at_most(client):
    # Replacing one unit by another of many rows moves each count of varying units (and of
    # units of two rows) by at most 1: the Laplace's L1 sensitivity, candidates + 1.
    schema = load_schema(UNDECLARED)
    frame = panel(300, seed=2)
    other = pd.concat([frame[frame["uid"] != "7"],
                       pd.DataFrame({"uid": "7", "gender": ["f", "m"] * 20,
                                     "region": list("abc" * 13) + ["a"],
                                     "wage": np.linspace(1, 60, 40), "flag": "y"})])
    counts = [varying_units_graph(dd_frame, schema, "uid", list(range(4))).compute()
              for dd_frame in (_dask(frame), _dask(other))]
    assert np.abs(counts[1] - counts[0]).max() <= 1
    assert list(counts[0]) == list(_real_counts(frame, schema))


def _real_counts(frame: pd.DataFrame, schema) -> np.ndarray:
    """Per attribute the units whose rows hold more than one of its codes, then the units of
    two rows or more, in pandas."""
    codes = pd.DataFrame(encode_partition(frame, schema).T, columns=schema.names)
    per_unit = codes.groupby(_with_unit_text(frame, "uid")["uid"].to_numpy())
    return np.array([*(per_unit.nunique() > 1).sum(), (per_unit.size() >= 2).sum()])


def _dask(frame: pd.DataFrame) -> dd.DataFrame:
    return dd.from_pandas(frame, npartitions=3)


def test_item2_unit_level_auto_needs_units():
    # a release of rows has no unit-level attributes: the search would spend for nothing
    with pytest.raises(ValueError, match="'uid': unit_level 'auto'.*has rows, not units"):
        _auto(panel(50), unit_shape=False)
    with pytest.raises(ValueError, match="'uid': unit_level 'auto'.*not units"):
        release_stats(panel(50), load_schema(UNDECLARED), epsilon=1.0, ledger=False,
                      privacy_unit={"column": "uid", "max_rows": K, "unit_level": "auto"})
    with pytest.raises(ValueError, match="unit_level must be one of"):
        Synthesizer.create("marginals", load_schema(UNDECLARED), ledger=False,
                           privacy_unit={"column": "uid", "max_rows": K,
                                         "unit_level": "yes"}).fit(panel(50))


def test_item2_cli_unit_level_auto(tmp_path, client):
    (tmp_path / "schema.json").write_text(json.dumps(UNDECLARED))
    panel(10_000).to_csv(tmp_path / "data.csv", index=False)
    common = ["synth", "--data", str(tmp_path / "data.csv"), "--schema",
              str(tmp_path / "schema.json"), "--epsilon", str(EPSILON), "--noise-sampler",
              "numpy", "--noise-seed", "5", "--ledger", str(tmp_path / "ledger.sqlite"), "--quiet",
              "--scheduler", client.scheduler.address]
    assert main([*common, "--out", str(tmp_path / "bad"), "--unit-level", "auto"]) == 2
    assert not Ledger(tmp_path / "ledger.sqlite").entries()  # refused before any spend
    assert main([*common, "--out", str(tmp_path / "out"), "--privacy-unit", "uid",
                 "--max-rows-per-unit", str(K), "--unit-level", "auto"]) == 0
    release = pd.read_parquet(tmp_path / "out" / "synthetic.parquet")
    assert (release.groupby("uid")[["gender", "region"]].nunique() == 1).all(axis=None)
    record = json.loads((tmp_path / "out" / "metadata.json").read_text())
    found = record["privacy"]["privacy_unit"]["unit_level"]["found"]
    assert found == ["gender", "region"] and UNIT_DEFAULTS.unit_level_threshold == 0.05


def test_item2_both_searches_share_the_budget_once(client):
    # max_rows "auto" and unit_level "auto" together: each search charged its own share, the
    # measurements the rest, the total the release's ρ (a first version charged the K choice
    # both shares: ρ over the plan by UNIT_DEFAULTS.unit_level_share).
    fitted = Synthesizer.create(
        "marginals", load_schema(UNDECLARED), epsilon=EPSILON, noise_sampler="numpy",
        noise_seed=5, ledger=False,
        privacy_unit={"column": "uid", "max_rows": "auto", "unit_level": "auto"}).fit(
            panel(2_000))
    privacy = fitted.model.metadata["privacy"]
    plan = rho_budget(EPSILON, privacy["delta"])
    split = privacy["rho_split"]
    assert split["max_rows_choice"] == pytest.approx(UNIT_DEFAULTS.auto_share * plan)
    assert split["unit_level_search"] == pytest.approx(UNIT_DEFAULTS.unit_level_share * plan)
    assert privacy["privacy_unit"]["auto"]["rho"] <= split["max_rows_choice"]
    assert privacy["privacy_unit"]["unit_level"]["rho"] == pytest.approx(
        split["unit_level_search"], rel=1e-9)
    parts = split["max_rows_choice"] + split["unit_level_search"] + split["measurements"]
    assert parts == pytest.approx(plan, rel=1e-9) and privacy["rho"] == pytest.approx(plan)
