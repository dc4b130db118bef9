"""End to end on a real LocalCluster: fit → noisy model → sample → Zarr + Parquet + metadata."""

from __future__ import annotations

import json
from dataclasses import replace

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import zarr
from conftest import CORRELATED_ROWS, SMALL_SCHEMA_PATH, codes_of, correlated_frame
from distributed import Client, LocalCluster

from dp_dask.copula.model import CopulaModel
from dp_dask.copula.sample import sample_frame
from dp_dask.data.counts import count_graph
from dp_dask.data.decode import calibrate_offsets
from dp_dask.data.encode import EncodingError
from dp_dask.data.io import create_zarr, open_zarr_for_writing, read_table
from dp_dask.evaluate.queries import marginal_distances, release_labels
from dp_dask.methods.copula import GaussianCopulaSynthesizer
from dp_dask.synthesizer import EmptyInputError

ROWS = CORRELATED_ROWS  # the rows of conftest's `data`


def counts_of(client, frame_or_path, schema):
    return client.compute(count_graph(read_table(frame_or_path, schema), schema)).result()


@pytest.fixture(scope="module")
def exact_fit(client, data):
    synthesizer = GaussianCopulaSynthesizer(SMALL_SCHEMA_PATH, epsilon=1e6,
                                            noise_sampler="numpy", noise_seed=3)
    return synthesizer.fit(data)


def two_way_error(client, model, real, seed=5):
    frame = sample_frame(model, ROWS, seed=seed, partition_rows=5_000)
    synthetic = counts_of(client, release_labels(frame, model.schema), model.schema.as_labels())
    return marginal_distances(real, synthetic, model.schema)


def test_large_epsilon_keeps_marginals_and_correlations(client, data, exact_fit):
    schema = exact_fit.schema
    real = counts_of(client, data, schema)
    copula = two_way_error(client, exact_fit.model, real)
    model = exact_fit.model
    identity = np.eye(schema.d)
    independent_model = replace(model, correlation=identity, decode_offsets=calibrate_offsets(
        identity, model.marginals, schema))
    independent = two_way_error(client, independent_model, real)
    # Sampling error alone for 20k rows: TVD of a k-cell table ≈ sqrt(k / (2π n)) ≈ 0.01-0.02.
    assert copula["one_way_tvd_max"] < 0.02
    assert copula["two_way_tvd_mean"] < 0.025
    # The data's attributes are strongly dependent: ignoring correlation must fail the bound.
    assert independent["two_way_tvd_mean"] > 0.06
    assert independent["one_way_tvd_max"] < 0.02


def test_release_files_and_metadata(client, exact_fit, tmp_path):
    paths = exact_fit.write(tmp_path, 12_345, seed=7, partition_rows=5_000, with_binary=True)
    binary = zarr.open_array(str(paths["zarr"]), mode="r")
    assert binary.shape == (12_345, exact_fit.schema.d)
    assert binary.chunks == (5_000, exact_fit.schema.d)
    assert binary.dtype == np.uint8 and set(np.unique(binary[:])) <= {0, 1}
    assert binary.attrs["columns"][0] == "colour=red"
    # The files hold the same draws as the lazy API's.
    lazy = exact_fit.sample_binary(12_345, seed=7, partition_rows=5_000).compute()
    np.testing.assert_array_equal(binary[:], lazy)
    frame = pd.read_parquet(paths["parquet"])
    assert len(frame) == 12_345 and list(frame.columns) == exact_fit.schema.names
    # Typed values (the schema's defaults: text, float64), each inside its bin.
    assert [str(t) for t in frame.dtypes] == ["str", "float64", "str", "str"]
    assert frame["size"].between(0, 100_000).all()
    assert (codes_of(frame, exact_fit.schema) >= 0).all()
    metadata = json.loads(paths["metadata"].read_text())
    privacy = metadata["privacy"]
    assert privacy["epsilon"] == 1e6 and privacy["delta"] == 2.0**-30
    assert privacy["mechanism"] == "gaussian" and privacy["accountant"] == "exact"
    assert privacy["k"] == 4 + 6 and privacy["noise_seeded"] is True
    assert metadata["schema"]["sha256"] == exact_fit.schema.sha256()
    assert metadata["sampling"] == {"rows": 12_345, "seed": 7, "partition_rows": 5_000,
                                    "device": "cpu", "decode": "uniform"}
    assert [c["decode"] for c in metadata["output"]] == ["uniform"] * 4
    assert metadata["n_rows"] == ROWS


def test_release_arrays_write_chunks_without_scanning_them(tmp_path):
    # A written chunk is stored as given, even one of zeros: zarr's scan for chunks holding only
    # the fill value (which a partition's never are) is off, on creating and on resuming.
    path = tmp_path / "synthetic.zarr"
    created = create_zarr(path, (4, 3), 2, {})
    created[0:2] = 0
    resumed = open_zarr_for_writing(path)
    resumed[2:4] = 0
    assert sorted(p.name for p in (path / "c").iterdir()) == ["0", "1"]
    assert (resumed[:] == 0).all() and resumed.attrs.asdict() == {}


def test_saved_model_samples_identically(client, exact_fit, tmp_path):
    loaded = CopulaModel.load(exact_fit.save(tmp_path / "model"))
    np.testing.assert_array_equal(loaded.correlation, exact_fit.model.correlation)
    again = GaussianCopulaSynthesizer.from_model(loaded).sample(3_000, seed=2).compute()
    first = exact_fit.sample(3_000, seed=2).compute()
    pd.testing.assert_frame_equal(again, first)


def test_same_seed_same_release_on_one_or_two_workers(client, data, tmp_path):
    def release(out):
        synthesizer = GaussianCopulaSynthesizer(SMALL_SCHEMA_PATH, epsilon=1.0,
                                                noise_sampler="numpy", noise_seed=11)
        synthesizer.fit(data).write(out, 9_000, seed=4, partition_rows=2_000, with_binary=True)
        return (zarr.open_array(str(out / "synthetic.zarr"), mode="r")[:],
                pd.read_parquet(out / "synthetic.parquet"), synthesizer.model.noisy_counts)

    two = release(tmp_path / "two")
    with (LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=":0") as cluster,
          Client(cluster, set_as_default=True) as one_worker):
        assert len(one_worker.scheduler_info()["workers"]) == 1
        one = release(tmp_path / "one")
    client.as_current()
    np.testing.assert_array_equal(one[2], two[2])
    np.testing.assert_array_equal(one[0], two[0])
    pd.testing.assert_frame_equal(one[1], two[1])


def test_noise_is_added_to_the_counts(client, data, small_schema):
    exact = counts_of(client, data, small_schema)
    model = GaussianCopulaSynthesizer(small_schema, epsilon=1.0, noise_sampler="numpy",
                                      noise_seed=0).fit(data).model
    off = model.noisy_counts - exact
    assert np.count_nonzero(off) > 0.9 * np.count_nonzero(exact)
    # σ for ε=1, δ=2^-30, k=10 is about 26; the clamped noise has that order of magnitude.
    assert 5 < np.abs(off[exact > 100]).mean() < 60


def test_empty_input_is_rejected(client, small_schema):
    empty = correlated_frame(10).iloc[:0]
    with pytest.raises(EmptyInputError, match="no rows"):
        GaussianCopulaSynthesizer(small_schema).fit(empty)


def test_unknown_category_on_a_worker_reaches_the_caller(client, small_schema):
    frame = correlated_frame(1_000)
    frame.loc[777, "colour"] = "purple"
    ddf = dd.from_pandas(frame, npartitions=4)
    with pytest.raises(EncodingError, match="column 'colour': 1 out-of-domain value") as error:
        GaussianCopulaSynthesizer(small_schema).fit(ddf)
    assert "purple" not in str(error.value)


def test_missing_column_fails_before_any_work(client, small_schema):
    frame = correlated_frame(100).drop(columns=["flag"])
    with pytest.raises(EncodingError, match=r"missing column\(s\) \['flag'\]"):
        GaussianCopulaSynthesizer(small_schema).fit(frame)


def test_rewriting_a_release_replaces_it(client, exact_fit, tmp_path):
    exact_fit.write(tmp_path, 6_000, seed=1, partition_rows=1_000, with_binary=True)
    paths = exact_fit.write(tmp_path, 2_500, seed=2, partition_rows=1_000, with_binary=True)
    assert len(pd.read_parquet(paths["parquet"])) == 2_500
    assert zarr.open_array(str(paths["zarr"]), mode="r").shape[0] == 2_500
