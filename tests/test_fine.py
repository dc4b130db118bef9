"""Fine grids: schema checks, exact fine histograms in the counting pass, their share of the
budget, consistency with the coarse 1-way marginal, and decoding from them."""

import json
import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from conftest import synth_code

from dp_dask.checks import DpDaskWarning
from dp_dask.data.counts import counts_from_codes, fine_counts, split_fine
from dp_dask.data.dtypes import fine_layout
from dp_dask.data.encode import encode_partition
from dp_dask.data.schema import SchemaError, load_schema
from dp_dask.data.values import decode_frame, release_codes
from dp_dask.methods.marginals import FINE_SHARE, measure_all, measured_queries
from dp_dask.postprocess.consistency import Measurement, combine_one_way, fine_bin_sums
from dp_dask.privacy import gaussian_rho, rho_budget
from dp_dask.release import ReleasePlan, release_metadata
from dp_dask.synthesizer import Synthesizer, load_model

ROWS = 20_000
HEAP = 33  # half the ages: a heap inside the bin [30, 40)


def spec(**age):
    """A schema with a heaped integer age (fine grid of one year, an open top bin closed by
    max 60, a missing bin), a float with a fine grid, and a categorical."""
    first = {"name": "age", "type": "numeric", "dtype": "int64", "edges": [20, 30, 40, 50, "inf"],
             "max": 60, "fine": {"start": 20, "stop": 61, "step": 1}, "extra": ["missing"],
             "on_missing": "missing", "missing_values": [""]} | age
    return {"schema_version": 1, "name": "heaped", "attributes": [
        {key: value for key, value in first.items() if value is not None},
        {"name": "hours", "type": "numeric", "edges": [0, 40, 41, 80],
         "fine": [{"start": 0, "stop": 40, "step": 5}, 41, {"start": 45, "stop": 80, "step": 5}]},
        {"name": "group", "type": "categorical", "categories": ["a", "b", "c"]}]}


def heaped_frame(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    age = np.where(rng.random(n) < 0.5, HEAP, rng.integers(20, 61, n)).astype(float)
    age[rng.random(n) < 0.02] = np.nan  # missing: the extra bin, no fine cell
    return pd.DataFrame({"age": age, "hours": rng.uniform(0, 80, n),
                         "group": rng.choice(["a", "b", "c"], n)})


@pytest.fixture(scope="module")
def heaped_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("fine") / "heaped.csv"
    heaped_frame(ROWS).to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def fitted(client, heaped_csv):
    return Synthesizer.create("marginals", load_schema(spec()), epsilon=1.0,
                              noise_sampler="numpy", noise_seed=7, ledger=False).fit(heaped_csv)


@pytest.mark.parametrize("age, message", [
    ({"fine": [20, 25, 31, 40, 50]}, "not nested in the bins: bin edge 30"),
    ({"fine": {"start": 10, "stop": 50, "step": 1}}, "beyond the bins' span"),
    ({"fine": {"start": 20, "stop": 70, "step": 1}}, "needs the public 'max'"),
    ({"fine": {"start": 20, "stop": 61, "step": 1}, "max": None}, "needs the public 'max'"),
    ({"fine": [20, *np.linspace(30, 40, 100_001).tolist(), 50]}, "more than the limit"),
    ({"fine": {"start": 20, "stop": 100_000_020, "step": 1}}, "at most 100,000"),
    ({"fine": [20, 30, 40, 50]}, "splits no bin"),
    ({"fine": [20, 20.2, 20.6, 30, 40, 50]}, r"cell \[20.2, 20.6\) holds no integer"),
])
def test_bad_fine_grids_name_the_attribute(age, message):
    with pytest.raises(SchemaError, match=f"attribute 'age'.*{message}"):
        load_schema(spec(**age))


def test_cli_refuses_a_bad_fine_grid_before_reading_data(client, tmp_path, capsys):
    # read, the CSV would stop on its out-of-domain values
    assert synth_code(client, tmp_path, spec(fine=[20, 25, 31, 40, 50]),
                      "age,hours,group\n5,1,zz\n") == 2
    assert "attribute 'age': 'fine' is not nested" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_to_json_keeps_the_grid_and_omits_it_when_absent():
    schema = load_schema(spec())
    again = load_schema(json.loads(schema.dumps()))
    assert again == schema and again.sha256() == schema.sha256()
    assert again["hours"].fine[8:11] == (40, 41, 45)  # the ranges joined around 41
    without = load_schema(spec(fine=None))
    assert "fine" not in without.to_json()["attributes"][0]
    assert without.sha256() != schema.sha256()


def test_fine_cells_follow_the_value_and_the_rules():
    schema = load_schema(spec())
    frame = pd.DataFrame({"age": [33, 20, 60, 75, np.nan, 49.5], "hours": [0.0, 40.5, 41, 79, 5, 1],
                          "group": ["a"] * 6})
    fine = split_fine(fine_counts(frame, encode_partition(frame, schema), schema), schema)
    # 75 is above max 60: counted in the open bin's last cell [60, ...); the missing row in none
    expected = np.zeros(41, dtype=np.int64)
    np.add.at(expected, [13, 0, 40, 40, 29], 1)
    np.testing.assert_array_equal(fine[0], expected)
    assert fine[1].tolist() == [2, 1] + [0] * 6 + [1, 1] + [0] * 6 + [1]


def test_the_fine_histograms_spend_their_share_once(fitted):
    privacy, model = fitted.model.metadata["privacy"], fitted.model.metadata["model"]
    rho = rho_budget(1.0, fitted.delta, "exact")
    sigmas = model["noise_sigma"]
    fine_sigmas = list(sigmas["fine"].values())
    assert sorted(sigmas["fine"]) == ["age", "hours"]
    spent = [gaussian_rho(s, math.sqrt(2), "exact")
             for s in sigmas["one_way"] + sigmas["two_way"] + fine_sigmas]
    assert sum(spent) == pytest.approx(rho, rel=1e-6) and sum(spent) <= rho * (1 + 1e-12)
    fine_rho = sum(gaussian_rho(s, math.sqrt(2), "exact") for s in fine_sigmas)
    assert fine_rho == pytest.approx(FINE_SHARE * rho, rel=1e-6)
    assert privacy["fine_share"] == FINE_SHARE
    assert privacy["fine_histograms"]["age"] == {"cells": 41, "sigma": sigmas["fine"]["age"]}
    assert "fine histograms of age, hours" in privacy["budget_split"]


def test_every_cell_gets_exactly_one_noise_draw(heaped_csv):
    schema = load_schema(spec())
    frame = pd.read_csv(heaped_csv)
    codes = encode_partition(frame, schema)
    counts = counts_from_codes(codes, schema)
    fine = split_fine(fine_counts(frame, codes, schema), schema)
    rng = np.random.default_rng(3)
    measurements, noisy_fine, tree = measure_all(counts, fine, schema, 0.05,
                                                 accountant="zcdp", sampler="numpy", rng=rng)
    assert tree is None  # two narrow attributes: every pair
    cells = sum(len(m.values) for m in measurements) + sum(len(v) for v in fine.values())
    once = np.random.default_rng(3)
    once.normal(size=cells)
    assert rng.bit_generator.state == once.bit_generator.state  # no cell drawn twice
    assert [m.attributes for m in measurements] == measured_queries(schema)
    assert sorted(noisy_fine) == [0, 1] and len(noisy_fine[0].values) == 41


def test_consistent_fine_histograms_sum_to_the_coarse_marginal(fitted):
    model = fitted.model
    age = model.fine[0]
    coarse = model.marginals.one_way[0]
    assert (age >= 0).all()
    # bins [20, 30) ... [50, inf): cells 0-9, 10-19, 20-29, 30-40 (60 in the open bin's last)
    sums = [age[0:10].sum(), age[10:20].sum(), age[20:30].sum(), age[30:41].sum()]
    np.testing.assert_allclose(sums, coarse[:4], rtol=1e-9)


def test_values_stay_in_their_bins_and_follow_the_fine_histogram(fitted):
    schema = fitted.schema
    labels = fitted.sample(seed=4, partition_rows=7_000, decode="label").compute()
    values = fitted.sample(seed=4, partition_rows=7_000).compute()
    for attribute in schema.attributes:  # the value draws leave the codes as they are
        np.testing.assert_array_equal(release_codes(values[attribute.name], attribute),
                                      release_codes(labels[attribute.name], attribute))
    assert values["age"].dropna().between(20, 60).all()
    in_bin = values["age"][labels["age"] == "[30, 40)"]
    share = (in_bin == HEAP).mean()
    # The heap's share of its bin, from the consistent fine histogram: within the noise of its
    # cell and of the bin's count (4 σ each) and the sampling error of the release's rows.
    model = fitted.model
    sigma = model.metadata["model"]["noise_sigma"]["fine"]["age"]
    truth = heaped_frame(ROWS)["age"]
    true_share = (truth == HEAP).sum() / truth.between(30, 39).sum()
    tolerance = (8 * sigma / model.marginals.one_way[0][1]
                 + 4 * math.sqrt(true_share * (1 - true_share) / len(in_bin)))
    # far below what uniform within the bin would miss by: 0.75 and more
    assert abs(share - true_share) < tolerance < 0.06
    assert true_share > 0.75  # uniform within the bin would give a tenth


def test_model_round_trip_and_same_seed_same_values(fitted, tmp_path):
    path = fitted.save(tmp_path / "model")
    loaded = load_model(path)
    assert sorted(loaded.fine) == [0, 1]
    for a, histogram in fitted.model.fine.items():
        np.testing.assert_array_equal(loaded.fine[a], histogram)
    first = fitted.sample(3_000, seed=9, partition_rows=1_500).compute()
    again = Synthesizer.from_model(loaded).sample(3_000, seed=9, partition_rows=1_500).compute()
    pd.testing.assert_frame_equal(first, again)
    other = fitted.sample(3_000, seed=10, partition_rows=1_500).compute()
    assert not first["age"].equals(other["age"])
    plan = ReleasePlan.for_model(fitted.model, 3_000, seed=9, partition_rows=1_500)
    output = release_metadata(fitted.model, plan)["output"]
    assert [column.get("fine_cells") for column in output] == [41, 17, None]
    midpoint = release_metadata(fitted.model, replace(plan, decode="midpoint"))["output"]
    assert all("fine_cells" not in column for column in midpoint)


def test_other_methods_warn_the_grid_is_unused(client, heaped_csv):
    synthesizer = Synthesizer.create("copula", load_schema(spec()), epsilon=1.0,
                                     noise_sampler="numpy", noise_seed=0, ledger=False)
    with pytest.warns(DpDaskWarning, match="does not measure fine grids: 'fine' of age, hours"):
        synthesizer.fit(heaped_csv)
    assert "fine_share" not in synthesizer.model.metadata["privacy"]


@pytest.mark.parametrize("share", [0, 1, 1.5, -0.1, True, "0.1"])
def test_fine_share_must_be_a_fraction(share):
    with pytest.raises(ValueError, match="fine_share must be a number between 0 and 1"):
        Synthesizer.create("marginals", load_schema(spec()), fine_share=share)


def test_a_year_grid_counts_and_draws_years():
    schema = load_schema({"attributes": [
        {"name": "when", "type": "datetime", "unit": "year", "edges": [2000, 2010, 2020],
         "fine": {"start": 2000, "stop": 2020, "step": 1}}]})
    frame = pd.DataFrame({"when": ["2005-03-01", "2005-12-31T23:00:00", "2019-01-01"]})
    fine = split_fine(fine_counts(frame, encode_partition(frame, schema), schema), schema)[0]
    assert np.flatnonzero(fine).tolist() == [5, 19] and fine[5] == 2
    histogram = np.zeros(20)
    histogram[[5, 12]] = [10, 10]  # all of bin [2000, 2010) in 2005, of [2010, 2020) in 2012
    codes = np.repeat([[0], [1]], 500, axis=0).astype(np.int16)
    values = decode_frame(codes, schema, "uniform", np.random.SeedSequence(0), {0: histogram})
    years = pd.Series(values["when"]).dt.year
    assert (years[:500] == 2005).all() and (years[500:] == 2012).all()


def test_fine_bin_sums_measure_the_covered_bins():
    schema = load_schema(spec())
    layout = fine_layout(schema["age"])
    values = np.arange(41.0)
    sums, variance = fine_bin_sums(Measurement((0,), values, 2.0), layout.first,
                                   layout.measured.start, schema.sizes[0])
    # bins [20, 30) ... [50, inf) hold 10, 10, 10 and 11 cells (60 and over: the last); the
    # missing bin none
    np.testing.assert_array_equal(sums[:4], [values[0:10].sum(), values[10:20].sum(),
                                             values[20:30].sum(), values[30:41].sum()])
    np.testing.assert_array_equal(variance, [40.0, 40.0, 40.0, 44.0, np.inf])


def test_an_extra_estimate_enters_the_histogram_by_its_variance():
    # One histogram measured with σ² = 4 per cell, an extra estimate of variance 4 on the first
    # two cells and 12 on the third: inverse-variance means, the last cell's direct value alone.
    measured = Measurement((0,), np.array([100.0, 200.0, 300.0, 400.0]), 2.0)
    extra = {0: (np.array([120.0, 180.0, 340.0, 0.0]), np.array([4.0, 4.0, 12.0, np.inf]))}
    (combined,) = combine_one_way([measured], np.array([4]), 1_010, extra)  # their total
    np.testing.assert_allclose(combined, [110.0, 190.0, 310.0, 400.0])
    (direct,) = combine_one_way([measured], np.array([4]), 1_000)
    np.testing.assert_allclose(direct, [100.0, 200.0, 300.0, 400.0])
