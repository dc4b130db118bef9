"""Declared constraints (dp_dask.data.constraints): checked as the schema loads, enforced in
every release of the default method on a real LocalCluster, free of privacy cost."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest
from conftest import codes_of

from dp_dask.checks import DpDaskWarning
from dp_dask.cli import main
from dp_dask.data.constraints import satisfied, violations
from dp_dask.data.schema import Schema, SchemaError, load_schema
from dp_dask.data.values import decode_frame
from dp_dask.synthesizer import Synthesizer

ROWS = 6_000
ATTRIBUTES = [
    {"name": "colour", "type": "categorical", "categories": ["red", "green", "blue"]},
    {"name": "flag", "type": "categorical", "categories": ["no", "yes"]},
    {"name": "city", "type": "categorical", "categories": ["a", "b", "c", "d", "e"]},
    {"name": "state", "type": "categorical", "categories": ["N", "S"]},
    {"name": "cancelled", "type": "boolean"},
    {"name": "arr_time", "type": "numeric", "edges": [0, 6, 12, 18, 24], "extra": ["missing"],
     "on_missing": "missing"},
    {"name": "start", "type": "numeric", "edges": [0, 10, 20, 30, 40]},
    {"name": "end", "type": "numeric", "edges": [0, 10, 20, 30, 40]},
]
STATES = {"a": "N", "b": "N", "c": "N", "d": "S", "e": "S"}
CONSTRAINTS = {
    "forbid": {"forbid": {"colour": ["red"], "flag": ["yes"]}},
    "allow_only": {"allow_only": [{"colour": ["green"], "city": ["a", "b"]},
                                  {"colour": ["red", "blue"], "city": ["a", "b", "c", "d", "e"]}]},
    "depends": {"depends": {"from": "city", "to": "state", "table": "states.csv"}},
    "null_if": {"null_if": {"column": "arr_time", "when": {"cancelled": ["True"]}}},
    "order": {"order": ["start", "end"]},
}


def rows(n: int, seed: int = 0) -> pd.DataFrame:
    """Rows satisfying every constraint, with dependence the noise blurs: unconstrained
    releases break them."""
    rng = np.random.default_rng(seed)
    colour = rng.choice(["red", "green", "blue"], n, p=[0.5, 0.1, 0.4])
    city = np.where(colour == "green", rng.choice(["a", "b"], n),
                    rng.choice(list("abcde"), n, p=[0.05, 0.05, 0.1, 0.4, 0.4]))
    cancelled = rng.random(n) < 0.04
    start = rng.uniform(0, 40, n)
    return pd.DataFrame({
        "colour": colour, "flag": np.where(colour == "red", "no", rng.choice(["no", "yes"], n)),
        "city": city, "state": pd.Series(city).map(STATES).to_numpy(),
        "cancelled": cancelled,
        "arr_time": np.where(cancelled, np.nan, rng.uniform(0, 24, n)),
        "start": start, "end": np.minimum(start + rng.exponential(3, n), 39.9)})


def spec(*kinds: str) -> dict:
    return {"schema_version": 1, "name": "flights", "attributes": ATTRIBUTES,
            "constraints": [CONSTRAINTS[k] for k in kinds]}


@pytest.fixture
def schema_dir(tmp_path):
    pd.DataFrame({"city": list(STATES), "state": list(STATES.values())}).to_csv(
        tmp_path / "states.csv", index=False)
    return tmp_path


def load(schema_dir, *kinds: str) -> Schema:
    (schema_dir / "schema.json").write_text(json.dumps(spec(*kinds)))
    return load_schema(schema_dir / "schema.json")


def release(schema: Schema, tmp_path, seed: int = 0, epsilon: float = 0.3,
            name: str = "release") -> pd.DataFrame:
    synthesizer = Synthesizer.create("marginals", schema, epsilon=epsilon, noise_sampler="numpy",
                                     noise_seed=seed, ledger=False).fit(rows(ROWS))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DpDaskWarning)
        paths = synthesizer.write(tmp_path / f"{name}-{seed}", ROWS, seed=seed,
                                  partition_rows=2_000)
    return pd.read_parquet(paths["parquet"])


def evaluated(client, schema_dir, release: str) -> list[int]:
    """The violations ``dp-dask evaluate`` finds in a release, per constraint of the schema."""
    rows(2_000, seed=9).to_parquet(schema_dir / "real.parquet")
    out = schema_dir / f"evaluation-{release}"
    assert main(["evaluate", "--data", str(schema_dir / "real.parquet"), "--schema",
                 str(schema_dir / "schema.json"), "--synthetic", str(schema_dir / release),
                 "--out", str(out), "--scheduler", client.scheduler.address, "--quiet"]) == 0
    assert "Declared constraints" in (out / "report.html").read_text()
    return [r["violations"] for r in json.loads((out / "constraints.json").read_text())["records"]]


@pytest.mark.parametrize("kind", list(CONSTRAINTS))
def test_every_released_row_satisfies_each_kind(client, schema_dir, kind):
    schema = load(schema_dir, kind)
    synthetic = release(schema, schema_dir)
    assert len(synthetic) == ROWS
    assert violations(schema.constraints, codes_of(synthetic, schema)) == {
        f"constraint 1 ({kind})": 0}
    if kind == "order":  # values too, not only bins
        assert not (synthetic["start"] > synthetic["end"]).any()
    if kind == "null_if":
        assert synthetic["arr_time"].isna().eq(synthetic["cancelled"]).all()


def test_unconstrained_releases_break_them(client, schema_dir):
    """The schema's rules hold in the data but not in a release that does not know them: what
    the tests above guard against."""
    schema = load(schema_dir, *CONSTRAINTS)
    synthetic = release(load_schema({**spec(), "constraints": []}), schema_dir, name="plain")
    broken = violations(schema.constraints, codes_of(synthetic, schema))
    assert all(count > 0 for count in broken.values()), broken
    # evaluate counts them too, and for order the rows whose values break it within bins
    broken["constraint 5 (order)"] = int(((synthetic["start"] > synthetic["end"])
                                          | ~schema.constraints[4].holds(codes_of(synthetic,
                                                                                  schema))).sum())
    assert broken["constraint 5 (order)"] > violations(schema.constraints[4:], codes_of(
        synthetic, schema))["constraint 5 (order)"]
    assert evaluated(client, schema_dir, "plain-0") == list(broken.values())


def test_all_kinds_at_once_and_the_privacy_record_is_unchanged(client, schema_dir):
    """Structural zeros are post-processing: the same ρ and budget split, the same noise."""
    constrained = load(schema_dir, *CONSTRAINTS)
    plain = load_schema({**spec(), "constraints": []})
    fitted = [Synthesizer.create("marginals", schema, epsilon=1.0, noise_sampler="numpy",
                                 noise_seed=5, ledger=False).fit(rows(ROWS))
              for schema in (plain, constrained)]
    privacy = [f.model.metadata["privacy"] for f in fitted]
    for key in ("epsilon", "delta", "rho", "budget_split", "k", "mechanism", "accountant"):
        assert privacy[0][key] == privacy[1][key]
    sigmas = [[m.sigma for m in f.model.measurements] for f in fitted]
    assert sigmas[0] == sigmas[1]
    # the same draws: the constrained values are the plain ones with forbidden cells zeroed
    for before, after in zip(*(f.model.measurements for f in fitted)):
        zeroed = after.values == 0
        np.testing.assert_array_equal(before.values[~zeroed], after.values[~zeroed])
    assert any((m.values == 0).any() for m in fitted[1].model.measurements)
    synthetic = release(constrained, schema_dir, seed=1)
    assert set(violations(constrained.constraints, codes_of(synthetic, constrained)).values()
               ) == {0}
    assert not (synthetic["start"] > synthetic["end"]).any()
    assert evaluated(client, schema_dir, "release-1") == [0] * len(CONSTRAINTS)
    # sampled again from the saved model: its schema keeps the constraints (the table inline)
    fitted[1].save(schema_dir / "model")
    again = Synthesizer.from_model(schema_dir / "model")
    assert again.schema == constrained
    resampled = again.sample(3_000, seed=4).compute()
    assert satisfied(constrained.constraints, codes_of(resampled, constrained)).all()
    assert not (resampled["start"] > resampled["end"]).any()


BAD = [
    ({"forbid": {"colour": ["red"], "altitude": ["high"]}}, "unknown attribute 'altitude'"),
    ({"forbid": {"colour": ["purple"]}}, "'purple' is not a label of 'colour'"),
    ({"depends": {"from": "city", "to": "state", "table": {"a": "W"}}},
     "'W' is not a label of 'state'"),
    ({"depends": {"from": "city", "to": "state", "table": {"z": "N"}}},
     "'z' is not a label of 'city'"),
    ({"allow_only": [{"flag": ["yes"]}], "name": "flag-yes"}, None),
    ({"null_if": {"column": "city", "when": {"cancelled": ["True"]}}}, "'city' has no null"),
    ({"order": ["start", "colour"]}, "'colour' is not a numeric"),
    ({"forbid": {"state": ["N", "S"]}, "name": "no-state"}, "leaves 'state' no possible label"),
]


@pytest.mark.parametrize("constraint, message", BAD)
def test_bad_constraints_stop_before_data_is_read(client, tmp_path, constraint, message):
    """Exit 2, the message naming the constraint; the input does not exist, so nothing was
    read."""
    constraints = [CONSTRAINTS["forbid"], constraint]
    if constraint.get("name") == "flag-yes":  # contradicts the forbid on red: green, blue left
        constraints.append({"forbid": {"colour": ["green", "blue"], "flag": ["yes"]},
                            "name": "clash"})
        message = "no possible label"
    schema = {**spec(), "constraints": constraints}
    with pytest.raises(SchemaError, match="constraint [123]") as caught:
        load_schema(schema)
    assert message in str(caught.value)
    for declared in constraints[1:]:
        assert f"({declared.get('name') or next(iter(declared))})" in str(caught.value)
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    code = main(["synth", "--data", str(tmp_path / "absent.csv"), "--schema",
                 str(tmp_path / "schema.json"), "--epsilon", "1", "--out", str(tmp_path / "out"),
                 "--ledger", str(tmp_path / "l.sqlite"), "--scheduler", client.scheduler.address,
                 "--quiet"])
    assert code == 2


def test_a_method_that_cannot_honour_a_kind_refuses(client, tmp_path, capsys):
    (tmp_path / "schema.json").write_text(json.dumps(spec("forbid")))
    (tmp_path / "data.csv").write_text(rows(50).to_csv(index=False))
    code = main(["synth", "--method", "copula", "--data", str(tmp_path / "data.csv"),
                 "--schema", str(tmp_path / "schema.json"), "--epsilon", "1",
                 "--out", str(tmp_path / "out"), "--ledger", str(tmp_path / "l.sqlite"),
                 "--scheduler", client.scheduler.address, "--quiet"])
    assert code == 2
    assert "constraint 1 (forbid): method 'copula' cannot honour" in capsys.readouterr().err


def test_schemas_without_constraints_keep_their_json_and_hash():
    schema = load_schema("adult")
    assert "constraints" not in schema.to_json()
    constrained = load_schema({**schema.to_json(), "constraints": [
        {"forbid": {"relationship": ["Husband"], "sex": ["Female"]}}]})
    again = load_schema(json.loads(constrained.dumps()))
    assert again == constrained and again.sha256() == constrained.sha256() != schema.sha256()


@pytest.mark.parametrize("kind", ["int64", "float64", "datetime"])
def test_order_holds_within_shared_and_overlapping_bins(kind):
    """Values drawn within bins keep first <= second: in one bin, and across overlapping bins
    of different edges (the bins' structural zeros leave only pairs with such values)."""
    if kind == "datetime":
        first = {"type": "datetime", "unit": "year", "edges": [2000, 2005, 2010, 2020]}
        second = {"type": "datetime", "unit": "year", "edges": [2000, 2008, 2020]}
    else:
        first = {"type": "numeric", "edges": [0, 5, 10, 20], "dtype": kind}
        second = {"type": "numeric", "edges": [0, 8, 20], "dtype": kind}
    schema = load_schema({"attributes": [{"name": "start", **first}, {"name": "end", **second}],
                          "constraints": [{"order": ["start", "end"]}]})
    (constraint,) = schema.constraints
    assert constraint.allowed.tolist() == [[True, True], [True, True], [False, True]]
    rng = np.random.default_rng(0)
    allowed = np.argwhere(constraint.allowed)
    codes = allowed[rng.integers(0, len(allowed), 20_000)].astype(np.int16)
    frame = decode_frame(codes, schema, "uniform", np.random.SeedSequence(1))
    assert not (frame["start"] > frame["end"]).any()
    assert (codes_of(frame, schema) == codes).all()  # each value still in its bin


def test_adaptive_rounds_and_add_remove_keep_them(client, schema_dir):
    """The rounds' 3-way measurements get the structural zeros too; under add/remove the noisy
    n changes nothing of it."""
    schema = load(schema_dir, *CONSTRAINTS)
    synthesizer = Synthesizer.create("marginals", schema, epsilon=0.5, noise_sampler="numpy",
                                     noise_seed=2, ledger=False, rounds=2,
                                     neighbours="add_remove").fit(rows(ROWS))
    assert synthesizer.model.metadata["privacy"]["adaptive"]["rounds"] == 2
    synthetic = synthesizer.sample(4_000, seed=2).compute()
    assert satisfied(schema.constraints, codes_of(synthetic, schema)).all()
    assert not (synthetic["start"] > synthetic["end"]).any()
