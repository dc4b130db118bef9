"""Conditional sampling (``dp-dask sample --where/--balance``, ``Synthesizer.sample(where=)``):
the marginals model conditioned, on a real LocalCluster, from a model fitted on Adult."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dp_dask.cli import main
from dp_dask.conditions import ConditionError, compile_where, parse_where
from dp_dask.data.schema import load_schema
from dp_dask.methods.marginals.conditioned import Tree
from dp_dask.synthesizer import Synthesizer

ROWS = 3000
# Conditional shares of the release against the real table's: at ε = 1 on Adult's 32 k rows a
# 2-way cell's noise is ~0.1 % of n; the model's tree and the resample of 3 000 rows add about
# 1 % (binomial sd of a 0.3 share over 3 000 rows); 0.05 leaves room for the tree's bias.
SHARE_TOLERANCE = 0.05


@pytest.fixture(scope="module")
def fitted(client, adult_csv):
    return Synthesizer.create("marginals", "adult", epsilon=1.0, noise_sampler="numpy",
                              noise_seed=0, ledger=False).fit(adult_csv)


@pytest.fixture(scope="module")
def real(adult_csv):
    return pd.read_csv(adult_csv, skipinitialspace=True)


@pytest.fixture(scope="module")
def saved(fitted, tmp_path_factory):
    path = tmp_path_factory.mktemp("conditional") / "model"
    fitted.save(path)
    return path


def sample(fitted, where=None, balance=None, rows=ROWS, seed=1):
    with pytest.warns(Warning):  # Adult's open bins without public max
        return fitted.sample(rows, where=where, balance=balance, seed=seed,
                             partition_rows=rows // 2).compute()


@pytest.mark.parametrize("where", [
    "sex == 'Female'",
    "workclass in ['Federal-gov', 'State-gov', 'Local-gov']",
    "age >= 33 and age < 37",
    "age < 32 and sex == 'Female'",  # a piece open below: (-inf, 31] of the bin 30-34
    "(sex == 'Male' and age < 25) or not (race != 'Black')",
    "hours-per-week > 45 and education != 'HS-grad'".replace("hours-per-week", "`hours-per-week`"),
])
def test_every_row_holds_the_condition_and_follows_the_conditional(client, fitted, real, where):
    frame = sample(fitted, where)
    assert len(frame) == ROWS
    assert len(frame.query(where)) == ROWS
    subset = real.query(where)
    for column, value in (("income", ">50K"), ("relationship", "Husband")):
        assert abs((frame[column] == value).mean() - (subset[column] == value).mean()) \
            < SHARE_TOLERANCE, column


def test_values_of_split_bins_are_drawn_within_the_condition(client, fitted, real):
    # 33..36 cut the bins 30-34 and 35-39: each age of the range drawn, by the fine histogram
    frame = sample(fitted, "age >= 33 and age < 37")
    counts = frame["age"].value_counts(normalize=True).sort_index()
    assert list(counts.index) == [33, 34, 35, 36]
    truth = real.query("age >= 33 and age < 37")["age"].value_counts(normalize=True).sort_index()
    assert np.abs(counts.to_numpy() - truth.to_numpy()).max() < SHARE_TOLERANCE


def test_a_rare_condition_conditions_the_model_not_the_release(client, fitted):
    where = "age >= 75 and sex == 'Female' and race == 'Black'"
    condition = compile_where(where, fitted.schema, fine=fitted.model.fine)
    tree = Tree.of(fitted.model)
    probability = sum(tree.probability(term) for term in condition.term_codes())
    assert 0 < probability < 0.002  # rare: filtering a release would keep ~2 in 1 000 rows
    sampler = fitted.sampler(where=where)
    candidates = sampler.base.candidate_rows(ROWS)
    estimate = sampler.for_release(ROWS, np.random.SeedSequence(0)).shared[0]
    # as many distinct candidates inside the condition as rejection would get from ~100 times
    # the candidates: the conditioned tree's draws, not the whole estimate's filtered
    assert len(estimate.codes) > 100 * probability * candidates
    frame = sample(fitted, where)
    assert len(frame) == len(frame.query(where)) == ROWS


def test_balance_gives_each_class_equal_rows(client, fitted):
    frame = sample(fitted, where="age >= 40", balance="income", rows=3001)
    counts = frame["income"].value_counts()
    assert sorted(counts.to_dict()) == ["<=50K", ">50K"]
    assert abs(counts.iloc[0] - counts.iloc[1]) <= 2  # one per partition at most
    assert (frame["age"] >= 40).all()


def test_a_condition_the_model_gives_probability_0_names_it(client, fitted):
    # one row of the real data; the model's noisy marginal pulls the cell to zero
    where = "`native-country` == 'Holand-Netherlands'"
    with pytest.raises(ConditionError, match="Holand-Netherlands.*probability 0"):
        fitted.sampler(where=where)
    with pytest.raises(ConditionError, match="probability 0"):
        fitted.sampler(where="age > 200")


@pytest.mark.parametrize("where, message", [
    ("__import__('os').system('true')", "not a comparison"),
    ("age.real > 3", "not an attribute name"),
    ("salary > 3", "no attribute 'salary'"),
    ("sex == 'Unknown'", "'Unknown' is not a value of attribute 'sex'"),
    ("sex < 'M'", "only ==, != and in"),
    ("age in 30", "needs a list"),
    ("age >", "does not parse"),
])
def test_conditions_are_parsed_never_evaluated(where, message):
    with pytest.raises(ConditionError, match=message):
        compile_where(where, load_schema("adult"))


def test_chained_and_reversed_comparisons_parse():
    tree = parse_where("30 <= age < 40")
    assert [(a.name, a.op, a.value) for a in tree.terms] == [("age", ">=", 30), ("age", "<", 40)]


def test_cli_marks_the_release_conditioned(client, saved, tmp_path, capsys):
    out = tmp_path / "out"
    where = "sex == 'Female' and age >= 30"
    code = main(["sample", "--model", str(saved), "--where", where, "--balance", "income",
                 "--rows", "1000", "--out", str(out), "--scheduler", client.scheduler.address,
                 "--quiet"])
    assert code == 0
    sampling = json.loads((out / "metadata.json").read_text())["sampling"]
    assert sampling["conditioned"] == {
        "where": where, "rows": 1000, "balance": "income", "classes": ["<=50K", ">50K"],
        "rows_per_class": "equal, up to one row per partition"}
    frame = pd.read_parquet(out / "synthetic.parquet")
    assert len(frame.query(where)) == 1000
    assert frame["income"].value_counts().tolist() == [500, 500]


def test_cli_refuses_an_impossible_condition_before_sampling(client, saved, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["sample", "--model", str(saved), "--where", "age > 200", "--rows", "10",
                 "--out", str(out), "--scheduler", client.scheduler.address, "--quiet"])
    assert code == 2
    assert "condition 'age > 200' probability 0" in capsys.readouterr().err
    assert not out.exists()


def test_synth_keeps_the_model_a_condition_of_probability_0_stopped(client, adult_csv,
                                                                    tmp_path, capsys):
    # Before, the fit spent its budget, the condition failed at write and the noisy model was
    # lost with it: the spent release could not be drawn from under another condition.
    out = tmp_path / "release"
    code = main(["synth", "--data", str(adult_csv), "--schema", "adult", "--out", str(out),
                 "--epsilon", "1", "--noise-sampler", "numpy", "--noise-seed", "0",
                 "--ledger", str(tmp_path / "ledger.sqlite"), "--dataset-name", "adult",
                 "--where", "age > 200", "--rows", "10",
                 "--scheduler", client.scheduler.address, "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert "probability 0" in err and "budget is spent" in err and str(out / "model") in err
    assert not (out / "synthetic.parquet").exists()
    again = tmp_path / "again"
    assert main(["sample", "--model", str(out / "model"), "--where", "sex == 'Female'",
                 "--rows", "100", "--out", str(again), "--scheduler", client.scheduler.address,
                 "--quiet"]) == 0
    assert (pd.read_parquet(again / "synthetic.parquet")["sex"] == "Female").all()


def test_methods_whose_model_cannot_be_conditioned_refuse(client, adult_csv):
    with pytest.warns(Warning):  # fine grids unused by the copula
        copula = Synthesizer.create("copula", "adult", epsilon=1.0, noise_sampler="numpy",
                                    noise_seed=0, ledger=False).fit(adult_csv)
    assert not copula.conditional
    with pytest.raises(ConditionError, match="method 'copula' cannot sample conditionally"):
        copula.sample(10, where="sex == 'Female'")


@pytest.fixture(scope="module")
def with_nulls(client):
    """Floats with nulls (an extra bin), a boolean, a category with an 'other' bin."""
    spec = {"name": "nulls", "attributes": [
        {"name": "size", "type": "numeric", "dtype": "float64", "edges": [0, 10, 20, 50, "inf"],
         "max": 1000, "extra": ["missing"], "on_missing": "missing"},
        {"name": "ok", "type": "boolean"},
        {"name": "city", "type": "categorical", "categories": ["a", "b", "c"],
         "extra": ["other"], "on_unknown": "other", "on_missing": "other"}]}
    rng = np.random.default_rng(0)
    size = rng.exponential(20, 20_000)
    size[rng.random(len(size)) < 0.1] = np.nan
    frame = pd.DataFrame({"size": size, "ok": rng.random(len(size)) < 0.3,
                          "city": rng.choice(["a", "b", "c", "zz"], len(size))})
    return Synthesizer.create("marginals", load_schema(spec), epsilon=2.0, noise_sampler="numpy",
                              noise_seed=0, ledger=False).fit(frame)


@pytest.mark.parametrize("where", [
    "ok == True and size < 12.5",  # a float bin cut, its lower piece open
    "size != 15 and city == 'other'",  # nulls hold != (as in pandas), 'other' by its label
    "not (size >= 5) or ok == False",  # a null holds not (size >= 5)
])
def test_nulls_booleans_and_float_pieces(with_nulls, where):
    frame = with_nulls.sample(2000, where=where, seed=3).compute()
    assert len(frame) == len(frame.query(where)) == 2000


def test_a_float_point_has_probability_0(with_nulls):
    with pytest.raises(ConditionError, match="probability 0"):
        with_nulls.sampler(where="size == 15.0")
