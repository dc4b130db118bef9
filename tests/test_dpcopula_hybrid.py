"""DPCopula-Hybrid: capped-subset sensitivity on every neighbour, budget, errors, releases."""

from __future__ import annotations

import itertools
import json

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from conftest import (
    CORRELATED_ROWS,
    SMALL_SCHEMA_PATH,
    assert_pure_laplace,
    assert_resamples_alike,
    codes_of,
)
from test_dpcopula_mle import file_orders, keyed_frame, ordered_by_content

from dp_dask.cli import main
from dp_dask.data.order import ORDER_KEY, sort_by_key
from dp_dask.data.schema import load_schema
from dp_dask.methods.dpcopula import kendall_counts
from dp_dask.methods.dpcopula_hybrid import (
    DPCopulaHybridSynthesizer,
    HybridModel,
    Strata,
    capped_counts,
    capped_graph,
    split_counts,
    split_hybrid_budget,
    stratum_rows,
)
from dp_dask.privacy.ledger import Ledger
from dp_dask.synthesizer import Synthesizer, load_model

TINY_SCHEMA = {"schema_version": 1, "name": "tiny", "attributes": [
    {"name": "s", "type": "categorical", "categories": ["a", "b"]},
    {"name": "x", "type": "categorical", "categories": ["0", "1", "2"]},
    {"name": "y", "type": "categorical", "categories": ["0", "1", "2"]},
    {"name": "z", "type": "categorical", "categories": ["0", "1", "2"]},
]}


def numerators(codes: np.ndarray, schema, strata: Strata, caps: np.ndarray,
               chunks: int = 1) -> np.ndarray:
    """(P, pairs) Kendall numerators of each stratum's capped subset, the table cut into
    ``chunks`` consecutive partitions with their per-stratum offsets (as the Dask pass does)."""
    copula = np.arange(strata.cells)
    pieces = np.array_split(np.arange(codes.shape[1]), chunks)
    offsets = np.zeros(strata.cells, dtype=np.int64)
    total = 0
    for rows in pieces:
        total = total + capped_counts(codes[:, rows], schema, strata, offsets, caps, copula)
        offsets = offsets + np.bincount(strata.index(codes[:, rows]), minlength=strata.cells)
    return kendall_numerators(split_counts(total, schema, strata, strata.cells)[1])


def kendall_numerators(tables) -> np.ndarray:
    """(P, pairs) Kendall numerators of each pair's (P, size_a, size_b) tables."""
    return np.array([[np.subtract(*kendall_counts(t[p].astype(np.int64))) for t in tables]
                     for p in range(len(tables[0]))])


def test_capped_numerators_move_within_the_bound_on_every_neighbour():
    """Exhaustive replace-one: every row of a 9-row table replaced by every value tuple (54).
    Stratum 'a' holds 5 rows under a cap of 3 (a removal pulls in the next row, an addition
    pushes out the last); 'b' holds 4 under a cap of 6 (additions and removals)."""
    schema = load_schema(TINY_SCHEMA)
    strata = Strata.of(schema, small_domain=2)
    assert (strata.small, strata.large, strata.cells) == ((0,), (1, 2, 3), 2)
    caps = np.array([3, 6])
    rng = np.random.default_rng(4)
    codes = np.stack([np.array([0, 1, 0, 0, 1, 0, 1, 1, 0]), *rng.integers(0, 3, (3, 9))])
    before = numerators(codes, schema, strata, caps)
    # cut into partitions, the offsets give the same capped subsets
    np.testing.assert_array_equal(numerators(codes, schema, strata, caps, chunks=4), before)
    bound = 2 * (caps - 1)
    worst = np.zeros(2)
    changed_strata = set()
    for row, values in itertools.product(range(9), itertools.product(range(2), *[range(3)] * 3)):
        neighbour = codes.copy()
        neighbour[:, row] = values
        change = np.abs(numerators(neighbour, schema, strata, caps) - before)
        assert np.all(change <= bound[:, None]), (row, values)
        assert np.count_nonzero(change.any(axis=1)) <= 2
        worst = np.maximum(worst, change.max(axis=1) / bound)
        changed_strata.add(tuple(change.any(axis=1)))
    assert (True, True) in changed_strata  # a row that changes stratum moves both
    assert worst[0] >= 0.5  # a substitution in 'a' comes near 2(N_a − 1)
    # 'b' only gains or loses a row: at most (its 5 rows after an addition − 1), under 2(N_b − 1)
    assert 0 < worst[1] * bound[1] <= 4


def test_budget_split_sums_to_epsilon():
    for epsilon, share, k in [(1.0, 0.1, 8.0), (0.3, 0.5, 1.0), (5.0, 0.05, 16.0)]:
        epsilon0, epsilon1, epsilon2 = split_hybrid_budget(epsilon, share, k, large=3)
        assert epsilon0 + epsilon1 + epsilon2 == pytest.approx(epsilon, rel=1e-15)
        assert epsilon0 == pytest.approx(share * epsilon)
        assert epsilon1 / epsilon2 == pytest.approx(k)
    assert split_hybrid_budget(1.0, 0.2, 8.0, large=1)[2] == 0.0  # one large attribute: no pair
    with pytest.raises(ValueError, match="counts_share"):
        split_hybrid_budget(1.0, 1.0, 8.0, large=3)


@pytest.mark.parametrize("options, message", [
    ({"small_domain": 1}, "no attribute has at most 1 values"),
    ({"small_domain": 10}, "every attribute has at most 10 values"),
    ({"small_domain": 3, "max_partitions": 5}, "6 joint values, more than max_partitions"),
])
def test_errors_before_any_budget_is_spent(data, tmp_path, options, message):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    with pytest.raises(ValueError, match=message):
        Synthesizer.create("dpcopula-hybrid", SMALL_SCHEMA_PATH, ledger=ledger,
                           dataset_name="small", **options).fit(data)
    assert ledger.entries("small") == []


def test_a_single_partition_is_refused():
    one = {**TINY_SCHEMA, "attributes": [
        {"name": "s", "type": "categorical", "categories": ["a"]}, *TINY_SCHEMA["attributes"][1:]]}
    with pytest.raises(ValueError, match="one joint value"):
        Strata.of(load_schema(one), small_domain=2)


def test_cli_refuses_with_exit_2(client, data, tmp_path, capsys):
    code = main(["synth", "--data", str(data), "--schema", str(SMALL_SCHEMA_PATH), "--out",
                 str(tmp_path / "release"), "--method", "dpcopula-hybrid",
                 "--ledger", str(tmp_path / "ledger.sqlite"), "--scheduler",
                 client.scheduler.address, "--quiet"])
    assert code == 2
    assert "no large-domain attribute" in capsys.readouterr().err
    assert not (tmp_path / "release").exists()


@pytest.fixture(scope="module")
def fitted(client, data):
    return Synthesizer.create("dpcopula-hybrid", SMALL_SCHEMA_PATH, epsilon=1.0, small_domain=3,
                              noise_sampler="numpy", noise_seed=3, ledger=False).fit(data)


def test_fit_sample_metadata_and_round_trip(client, fitted, tmp_path):
    assert isinstance(fitted, DPCopulaHybridSynthesizer)
    model = fitted.model
    details = model.metadata["model"]
    assert details["small_attributes"] == ["colour", "flag"]
    assert details["large_attributes"] == ["size", "city"]
    assert sum(details["noisy_counts"]) == CORRELATED_ROWS and details["strata"] == 6
    assert details["strata_with_copula"] >= 1
    paths = fitted.write(tmp_path / "release", 4_000, seed=2, partition_rows=1_500)
    metadata = json.loads(paths["metadata"].read_text())
    privacy = metadata["privacy"]
    assert_pure_laplace(privacy, 1.0)
    parts = privacy["epsilon0"] + privacy["epsilon1"] + privacy["epsilon2"]
    assert parts == pytest.approx(1.0) and "epsilon0" in privacy["budget_split"]
    frame = pd.read_parquet(paths["parquet"])
    assert frame.shape == (4_000, 4)
    # each stratum's share of the rows follows its noisy count
    schema = fitted.schema
    codes = codes_of(frame, schema)
    strata = np.ravel_multi_index((codes[:, 0], codes[:, 2]), (3, 2))
    shares = np.bincount(strata, minlength=6) / 4_000
    expected = model.counts / model.counts.sum()
    assert np.abs(shares - expected).max() < 4 * np.sqrt(0.25 / 4_000)
    model_path = fitted.save(tmp_path / "model")
    loaded = load_model(model_path)
    assert isinstance(loaded, HybridModel) and loaded.method == "dpcopula-hybrid"
    np.testing.assert_array_equal(loaded.correlations, model.correlations)
    assert_resamples_alike(fitted, model_path, "dpcopula-hybrid", 3_000)


def test_large_epsilon_keeps_per_stratum_statistics(client, data):
    """At ε = 10⁶ the noise vanishes: the counts, per-stratum histograms and τ are the data's."""
    fit = Synthesizer.create("dpcopula-hybrid", SMALL_SCHEMA_PATH, epsilon=1e6, small_domain=3,
                             cap_margin=0, noise_sampler="numpy", noise_seed=0,
                             ledger=False).fit(data)
    model = fit.model
    frame = pd.read_parquet(data)
    codes = codes_of(frame, fit.schema)
    strata = np.ravel_multi_index((codes[:, 0], codes[:, 2]), (3, 2))
    np.testing.assert_array_equal(model.counts, np.bincount(strata, minlength=6))
    p = int(np.argmax(model.counts))
    rows = codes[strata == p]
    sizes = fit.schema.sizes
    assert model.histograms[0][p] == pytest.approx(
        np.bincount(rows[:, 1], minlength=sizes[1]) / len(rows), abs=1e-4)
    assert model.metadata["model"]["strata_with_copula"] == 6
    # the whole stratum is its capped subset (margin 0): τ from its full table
    table = np.zeros((sizes[1], sizes[3]), dtype=np.int64)
    np.add.at(table, (rows[:, 1], rows[:, 3]), 1)
    concordant, discordant = kendall_counts(table)
    tau = (concordant - discordant) / (len(rows) * (len(rows) - 1) / 2)
    assert model.correlations[p][0, 1] == pytest.approx(np.sin(np.pi / 2 * tau), abs=1e-4)


def test_cli_synth_with_opendp_noise_is_recorded(client, data, tmp_path, capsys):
    out, ledger = tmp_path / "release", tmp_path / "ledger.sqlite"
    code = main(["synth", "--data", str(data), "--schema", str(SMALL_SCHEMA_PATH), "--out",
                 str(out), "--method", "dpcopula-hybrid", "--epsilon", "0.5",
                 "--method-options", '{"small_domain": 3, "min_rows": 50}',
                 "--ledger", str(ledger), "--dataset-name", "small", "--rows", "2000",
                 "--scheduler", client.scheduler.address, "--quiet"])
    assert code == 0
    assert "method dpcopula-hybrid" in capsys.readouterr().out
    model = load_model(out / "model")
    assert "epsilon0 = 0.05 to 6 stratum counts" in model.metadata["privacy"]["budget_split"]
    assert model.method == "dpcopula-hybrid"
    assert model.metadata["privacy"]["differentially_private"] is True
    assert model.metadata["model"]["min_rows"] == 50
    assert "a secret seed" in model.metadata["model"]["row_order"]  # OpenDP noise: not recorded
    (entry,) = Ledger(ledger).entries("small")
    assert (entry.epsilon, entry.delta, entry.mechanism) == (0.5, 0.0, "laplace")
    assert len(pd.read_parquet(out / "synthetic.parquet")) == 2_000


# --- the row order: capped subsets are a function of the data set, not of the file -----------

def capped_tables(frame: pd.DataFrame, schema, strata: Strata, caps: np.ndarray, parts: int,
                  *, random_order: bool = True) -> np.ndarray:
    """(pairs, P, size, size) the capped subsets' pair tables of a keyed codes frame, through
    the two Dask passes: in the order of its keys, or (``random_order=False``) in the file's."""
    ddf = dd.from_pandas(frame.reset_index(drop=True), npartitions=parts, sort=False)
    ordered = sort_by_key(ddf, seed=5) if random_order else ddf.drop(columns=ORDER_KEY)
    pieces = ordered.to_delayed()
    graph = capped_graph(pieces, stratum_rows(pieces, strata), schema, strata, caps,
                         np.arange(strata.cells))
    return np.stack(split_counts(dask.compute(graph)[0], schema, strata, strata.cells)[1])


def test_capped_subsets_move_one_row_per_stratum_whatever_the_file_orders(client):
    """D and its neighbour D' (one row replaced, keeping its key) each listed in any order (sorted
    by any column, either way, in 1 or 3 partitions): each stratum's capped subset gains and/or
    loses one row at most, and D's subsets are byte-equal over all its orders. By position
    (the old rule) D sorted one way and D' another have subsets far apart."""
    schema = load_schema(TINY_SCHEMA)
    strata = Strata.of(schema, small_domain=2)
    rng = np.random.default_rng(11)
    n = 60
    codes = np.stack([rng.integers(0, 2, n), *rng.integers(0, 3, (3, n))], axis=1)
    rows = np.bincount(codes[:, 0], minlength=2)
    caps = np.array([rows[0] - 4, rows[1] + 3])  # 'a' capped below its rows, 'b' above
    keys = rng.permutation(n) * (2**63 // n)
    frame = keyed_frame(codes, keys)
    tables = [capped_tables(order, schema, strata, caps, parts)
              for order, parts in itertools.product(file_orders(frame), (1, 3))]
    for other in tables[1:]:
        assert other.tobytes() == tables[0].tobytes()
    before = tables[0]
    bound = 2 * (caps - 1)
    moved = set()
    for row in range(0, n, 7):
        replaced = codes.copy()
        replaced[row] = [rng.integers(0, 2), *rng.integers(0, 3, 3)]
        for order in file_orders(keyed_frame(replaced, keys))[1::3]:
            after = capped_tables(order, schema, strata, caps, 3)
            change = np.abs(after.astype(np.int64) - before).sum(axis=(2, 3))  # (pairs, P)
            assert np.all(change <= 2), (row, change)  # one row out, one in: −1 and +1
            numerators = np.abs(kendall_numerators(after) - kendall_numerators(before))
            assert np.all(numerators <= bound[:, None])
            moved.add(int(np.count_nonzero(change.any(axis=0))))
    assert moved <= {0, 1, 2} and 2 in moved
    by_x, reversed_by_x = file_orders(frame)[3], file_orders(keyed_frame(replaced, keys))[4]
    positional = [capped_tables(order, schema, strata, caps, 3, random_order=False)
                  for order in (by_x, reversed_by_x)]
    assert np.abs(positional[1].astype(np.int64) - positional[0]).sum(axis=(2, 3)).max() > 2


PAIR_HYBRID_SCHEMA = {"schema_version": 1, "name": "pair-hybrid", "attributes": [
    {"name": "s", "type": "categorical", "categories": ["a", "b"]},
    {"name": "x", "type": "categorical", "categories": [str(v) for v in range(20)]},
    {"name": "y", "type": "categorical", "categories": [str(v) for v in range(10)]},
]}


def test_a_reordered_neighbour_moves_tau_within_the_bound(client, monkeypatch):
    """Stratum 'a' of D holds x = 0..19 with y rising then falling; D' replaces its last row by
    another and lists the rows in reverse. At ε = 10⁶ (caps n_p − 5), τ_a's numerator may move
    by 2(N_a − 1) under the coupling; by position the capped subsets are D's first and last
    rows: it moves by far more."""
    xs = list(range(20))
    rows = [("a", x, min(x, 19 - x) // 2) for x in xs] + [("b", x % 10, x % 7) for x in xs]
    neighbour = [*rows[:19], ("a", 9, 0), *rows[20:]][::-1]
    keys = dict(zip([(0 if s == "a" else 1, x, y) for s, x, y in rows],
                    np.random.default_rng(2).permutation(len(rows)).tolist(), strict=True))
    keys[(0, 9, 0)] = keys[(0, 19, 0)]
    monkeypatch.setattr("dp_dask.methods.dpcopula_hybrid.random_row_order",
                        ordered_by_content(keys), raising=False)
    numerators = []
    for table in (rows, neighbour):
        frame = pd.DataFrame([(s, str(x), str(y)) for s, x, y in table], columns=["s", "x", "y"])
        model = Synthesizer.create("dpcopula-hybrid", load_schema(PAIR_HYBRID_SCHEMA),
                                   epsilon=1e6, small_domain=2, cap_margin=5 / 2e-5 * 0.999,
                                   min_rows=2, noise_sampler="numpy", noise_seed=0,
                                   ledger=False).fit(frame).model
        (cap, _), rho = model.metadata["model"]["caps"], model.correlations[0][0, 1]
        numerators.append(2 / np.pi * np.arcsin(rho) * cap * (cap - 1) / 2)
    assert cap == 15
    assert abs(numerators[0] - numerators[1]) <= 2 * (cap - 1) + 0.1
