"""Unit-shaped releases (issue 67): synthetic units with shared ids, rows per unit from a DP
histogram, unit-level attributes constant within units; the evaluation's unit checks."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from unit_events import EVENTS_SCHEMA, events

from dp_dask.cli import main
from dp_dask.data.schema import load_schema
from dp_dask.evaluate.units import lag1_correlation, unit_checks
from dp_dask.privacy.accounting import rho_budget
from dp_dask.privacy.ledger import Ledger
from dp_dask.synthesizer import Synthesizer

K = 6
PANEL_SCHEMA = {"name": "panel", "attributes": [
    {"name": "gender", "type": "categorical", "categories": ["f", "m"], "unit_level": True},
    {"name": "region", "type": "categorical", "categories": ["a", "b", "c"], "unit_level": True},
    {"name": "wage", "type": "numeric", "edges": [0, 5, 10, 20, 50, 1000], "unit_level": False},
    {"name": "flag", "type": "categorical", "categories": ["n", "y"]}]}


def panel(units: int = 2_000, seed: int = 0) -> pd.DataFrame:
    """People with 1-8 rows each (skewed towards few), gender and region per person, wage per
    row depending on gender."""
    rng = np.random.default_rng(seed)
    sizes = np.minimum(rng.geometric(0.35, units), 8)
    uid = np.repeat(np.arange(units), sizes)
    gender = np.where(rng.random(units) < 0.4, "f", "m")[uid]
    region = rng.choice(list("abc"), units, p=[0.5, 0.3, 0.2])[uid]
    wage = np.exp(1.5 + (gender == "m") * 1.0 + rng.normal(0, 0.4, len(uid)))
    return pd.DataFrame({"uid": uid.astype(str), "gender": gender, "region": region,
                         "wage": wage, "flag": np.where(rng.random(len(uid)) < 0.3, "y", "n")})


def fitted(frame: pd.DataFrame, **options) -> Synthesizer:
    return Synthesizer.create("marginals", load_schema(PANEL_SCHEMA), epsilon=1.0,
                              noise_sampler="numpy", noise_seed=11, ledger=False,
                              privacy_unit={"column": "uid", "max_rows": K},
                              **options).fit(frame)


def test_item1_unit_shaped_release_keeps_units(client):
    """Every synthetic id holds 1..K rows, unit-level attributes are constant within each unit,
    and the rows per unit follow the real (bounded) ones at least twice as closely as today's
    release, whose rows each carry their own id. Row-level wage stays related to gender."""
    frame = panel()
    shaped = fitted(frame, unit_shape=True)
    release = shaped.sample(seed=3).compute()
    assert list(release.columns) == ["gender", "region", "wage", "flag", "uid"]
    sizes = release.groupby("uid").size()
    assert sizes.min() >= 1 and sizes.max() <= K
    assert (release.groupby("uid")[["gender", "region"]].nunique() == 1).all(axis=None)
    checks = unit_checks(frame, release, shaped.schema, "uid", max_rows=K)
    assert checks["unit_constant_share"] == 1.0
    today = fitted(frame).sample(seed=3).compute()
    today["uid"] = np.arange(len(today)).astype(str)  # today: one random id per row
    baseline = unit_checks(frame, today, shaped.schema, "uid", max_rows=K)
    assert checks["rows_per_unit_tvd"] <= baseline["rows_per_unit_tvd"] / 2
    # ε = 1, 2,000 units: the unit model's one-way σ is ~60 units per size on a histogram
    # of 2,000, so the TVD stays within ~6 σ / 2,000 per size summed: well under 0.25
    assert checks["rows_per_unit_tvd"] < 0.25
    male = release.groupby("gender")["wage"].median()
    assert male["m"] > male["f"]  # the row-level attribute related to the unit-level one


def test_item1_one_budget_split_and_recorded(client):
    """The unit model and the row model share one (ε, δ): their ρ add up to the plan's."""
    shaped = fitted(panel(600), unit_shape=True)
    privacy = shaped.model.metadata["privacy"]
    split = privacy["rho_split"]
    assert split["unit_model"] + split["row_model"] == pytest.approx(privacy["rho"])
    assert privacy["rho"] == pytest.approx(rho_budget(1.0, privacy["delta"], "exact"))
    assert "to the unit model" in privacy["budget_split"]
    record = shaped.model.metadata["unit_shape"]
    assert record["unit_level"] == ["gender", "region"] and record["max_rows"] == K


def test_item1_release_and_model_through_the_cli(client, tmp_path, capsys):
    """synth with unit_shape writes a unit-shaped release and its model; evaluate --unit
    reports the unit checks; the model, loaded again, samples units."""
    (tmp_path / "schema.json").write_text(json.dumps(PANEL_SCHEMA))
    panel(800).to_csv(tmp_path / "data.csv", index=False)
    ledger = tmp_path / "ledger.sqlite"
    assert main(["synth", "--data", str(tmp_path / "data.csv"), "--schema",
                 str(tmp_path / "schema.json"), "--out", str(tmp_path / "out"),
                 "--ledger", str(ledger), "--privacy-unit", "uid", "--max-rows-per-unit",
                 str(K), "--method-options", '{"unit_shape": true}',
                 "--scheduler", client.scheduler.address, "--quiet"]) == 0
    (entry,) = Ledger(ledger).entries()
    assert (entry.unit_column, entry.epsilon) == ("uid", 1.0)
    release = pd.read_parquet(tmp_path / "out" / "synthetic.parquet")
    assert release.groupby("uid").size().max() <= K
    assert main(["evaluate", "--data", str(tmp_path / "data.csv"), "--schema",
                 str(tmp_path / "schema.json"), "--synthetic", str(tmp_path / "out"),
                 "--unit", "uid", "--max-rows-per-unit", str(K),
                 "--scheduler", client.scheduler.address]) == 0
    assert "unit_constant_share: 1.0" in capsys.readouterr().out
    loaded = Synthesizer.from_model(tmp_path / "out" / "model")
    again = loaded.sample(500, seed=1).compute()
    assert len(again) == 500
    assert (again.groupby("uid")[["gender", "region"]].nunique() == 1).all(axis=None)


@pytest.mark.parametrize(("options", "says"), [
    ([], "privacy_unit"),  # unit_shape without a unit
    (["--privacy-unit", "person", "--max-rows-per-unit", "3"], "'person'"),  # missing column
    (["--privacy-unit", "uid", "--max-rows-per-unit", "0"], "'uid'"),
    (["--privacy-unit", "uid", "--max-rows-per-unit", "3", "--balance", "flag"],
     "unit-shaped"),
])
def test_item1_bad_input_exit_2_nothing_spent(client, tmp_path, capsys, options, says):
    (tmp_path / "schema.json").write_text(json.dumps(PANEL_SCHEMA))
    panel(200).to_csv(tmp_path / "data.csv", index=False)
    ledger = tmp_path / "ledger.sqlite"
    code = main(["synth", "--data", str(tmp_path / "data.csv"), "--schema",
                 str(tmp_path / "schema.json"), "--out", str(tmp_path / "out"),
                 "--ledger", str(ledger), "--method-options", '{"unit_shape": true}',
                 *options, "--scheduler", client.scheduler.address, "--quiet"])
    assert code == 2 and says in capsys.readouterr().err
    assert not ledger.exists() or Ledger(ledger).entries() == []


def test_item1_unit_level_is_a_flag():
    bad = json.loads(json.dumps(PANEL_SCHEMA))
    bad["attributes"][0]["unit_level"] = "yes"
    with pytest.raises(ValueError, match="'unit_level' must be true or false"):
        load_schema(bad)
    # declared false or absent: the schema's JSON (and hash) as without the key
    assert "unit_level" not in load_schema(PANEL_SCHEMA).to_json()["attributes"][2]


def test_item3_unit_checks_on_known_tables():
    """Exact figures: rows per unit clipped to K, constant shares, lag-1 correlation."""
    real = pd.DataFrame({"uid": ["a"] * 4 + ["b"] * 2 + ["c"],
                         "gender": ["f", "f", "m", "f", "m", "m", "f"],
                         "year": [1, 2, 3, 4, 1, 2, 1],
                         "wage": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]})
    synthetic = pd.DataFrame({"uid": ["x", "x", "y", "z"], "gender": ["f", "f", "m", "m"],
                              "year": [2, 1, 1, 1], "wage": [2.0, 1.0, 3.0, 3.0]})
    schema = load_schema({"name": "t", "attributes": [
        {"name": "gender", "type": "categorical", "categories": ["f", "m"], "unit_level": True},
        {"name": "wage", "type": "numeric", "edges": [0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5]}]})
    checks = unit_checks(real, synthetic, schema, "uid", max_rows=3, order="year", lag="wage")
    # real sizes clipped to 3: {3: 1/3, 2: 1/3, 1: 1/3}; synthetic {2: 1/3, 1: 2/3}
    assert checks["rows_per_unit_tvd"] == pytest.approx(1 / 3)
    assert checks["unit_constant_share"] == 1.0
    assert checks["real_unit_constant_share"] == pytest.approx(2 / 3)
    # real lag pairs (1,2), (2,3), (3,4), (5,6): Pearson of now vs before
    expected = np.corrcoef([2, 3, 4, 6], [1, 2, 3, 5])[0, 1]
    assert checks["lag1"]["real"] == pytest.approx(expected)
    assert np.isnan(lag1_correlation(synthetic, "uid", "year", "wage"))  # one pair only


def test_item2_order_and_lag_survive(client, tmp_path):
    """With an order and a lag attribute, each unit's rows come in order and the lag-1
    correlation of spend within users is kept far better than by units dealt rows at random;
    the lag table's charge is in the one budget, and a saved model draws the same."""

    frame = events(3_000)
    schema = load_schema(EVENTS_SCHEMA)

    def release(**options):
        synthesizer = Synthesizer.create(
            "marginals", schema, epsilon=4.0, noise_sampler="numpy", noise_seed=5, ledger=False,
            privacy_unit={"column": "user", "max_rows": 10}, unit_shape=True,
            **options).fit(frame)
        return synthesizer, synthesizer.sample(seed=2).compute()

    sequenced, rows = release(unit_order="hour", unit_lag="amount")
    _, unordered = release()
    errors = [unit_checks(frame, r, schema, "user", max_rows=10, order="hour",
                          lag="amount")["lag1_error"] for r in (rows, unordered)]
    assert errors[0] < errors[1] / 2
    within = rows.groupby("user", sort=False)["hour"]
    assert (within.diff().dropna() >= 0).all()  # each unit's rows in order
    privacy = sequenced.model.metadata["privacy"]
    assert sum(privacy["rho_split"][k] for k in ("unit_model", "lag", "row_model")) == \
        pytest.approx(privacy["rho"])
    assert privacy["rho"] == pytest.approx(rho_budget(4.0, privacy["delta"], "exact"))
    sequenced.save(tmp_path / "model")
    loaded = Synthesizer.from_model(tmp_path / "model")
    np.testing.assert_array_equal(loaded.model.sampler().transition,
                                  sequenced.model.sampler().transition)
    assert loaded.sample(1_000, seed=2).compute().equals(sequenced.sample(1_000, seed=2).compute())


@pytest.mark.parametrize(("options", "says"), [
    ({"unit_order": "hour"}, "go together"),
    ({"unit_order": "hour", "unit_lag": "spend"}, "'spend'"),
    ({"unit_order": "hour", "unit_lag": "plan"}, "unit-level"),
])
def test_item2_bad_sequence_options_refused_before_reading(options, says):

    with pytest.raises(ValueError, match=says):
        Synthesizer.create("marginals", EVENTS_SCHEMA, ledger=False, unit_shape=True,
                           privacy_unit={"column": "user", "max_rows": 3},
                           **options).fit("/nonexistent.csv")


@pytest.mark.parametrize("cliques", ["joint", "auto"])
def test_a_unit_shaped_release_under_any_cliques_setting(client, cliques):
    """The unit model is fitted to the unit table's 1-/2-way counts only, so it is always the
    pairs model, whatever ``cliques`` the row model is given: on 4b91098 ``cliques: joint``
    crashed inside the unit model (TypeError in cliques.exact_clique, no joint counted for
    it). The rows' model takes the setting."""
    shaped = fitted(panel(), unit_shape=True, config={"cliques": cliques})
    release = shaped.sample(seed=3).compute()
    assert release.groupby("uid").size().max() <= K
    assert (release.groupby("uid")[["gender", "region"]].nunique() == 1).all(axis=None)
