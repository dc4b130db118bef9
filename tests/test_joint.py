"""The dense-joint path of cliques="joint" (and of "auto" where the rule picks it;
marginals.joint, issue 59): every triple measured,
the dense joint fitted to them, rows drawn from it."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from dp_dask.data.constraints import satisfied
from dp_dask.data.encode import encode_partition
from dp_dask.data.schema import Schema
from dp_dask.data.tables import Domain
from dp_dask.methods.marginals.joint import (
    balanced_counts,
    estimate_joint,
    joint_steps,
    release_positions,
    systematic_counts,
)
from dp_dask.postprocess.consistency import Measurement
from dp_dask.privacy.accounting import TABLE_L2_SENSITIVITY
from dp_dask.synthesizer import Synthesizer, load_model

NAMES = ("a", "b", "c", "d", "e", "f")


def schema_of(constraints: list | None = None) -> Schema:
    """a–d binary, e and f of 3 values (144 cells)."""
    return Schema.from_json({"schema_version": 1, "name": "triple", "attributes": [
        {"name": name, "type": "categorical",
         "categories": ["0", "1"] if name in "abcd" else ["0", "1", "2"]} for name in NAMES],
        **({"constraints": constraints} if constraints else {})})


def triple_frame(n: int = 20_000, seed: int = 0) -> pd.DataFrame:
    """c = a XOR b: every pair of a, b, c independent, their 3-way table half empty; the
    rest independent."""
    rng = np.random.default_rng(seed)
    codes = np.column_stack([rng.integers(0, 2, (n, 4)), rng.integers(0, 3, (n, 2))])
    codes[:, 2] = codes[:, 0] ^ codes[:, 1]
    return pd.DataFrame({name: codes[:, i].astype(str) for i, name in enumerate(NAMES)})


def fit(frame: pd.DataFrame, mode: str = "joint", schema: Schema | None = None, *,
        neighbours: str = "replace", seed: int = 0) -> Synthesizer:
    return Synthesizer.create("marginals", schema or schema_of(), epsilon=1.0,
                              noise_sampler="numpy", noise_seed=seed, ledger=False,
                              accountant="zcdp", neighbours=neighbours, tables="all",
                              config={"cliques": mode}).fit(frame)


def table(frame: pd.DataFrame, schema: Schema, clique: tuple[int, ...]) -> np.ndarray:
    return Domain(schema.sizes).table(encode_partition(frame[schema.names], schema).T, clique)


def test_fit_recovers_a_joint_of_triple_interactions_from_exact_tables():
    """A joint whose log is a sum of functions of triples is the maximum-entropy joint of its
    triples' tables: mirror descent from the uniform joint stays in that family, so exact
    tables give it back."""
    sizes = (2, 3, 2, 3)
    rng = np.random.default_rng(0)
    log = rng.normal(size=(2, 3, 2, 1)) + rng.normal(size=(1, 3, 2, 3))
    true = 10_000 * np.exp(log) / np.exp(log).sum()
    m = len(sizes)
    cliques = [(a,) for a in range(m)] + list(itertools.combinations(range(m), 3))
    tables = [Measurement(c, true.sum(axis=tuple(a for a in range(m) if a not in c)).ravel(),
                          1.0) for c in cliques]
    fitted = estimate_joint(sizes, tables, 10_000.0)
    assert fitted.sum() == pytest.approx(10_000)
    assert np.abs(fitted - true).max() < 0.5  # counts of 10 000 rows
    assert np.array_equal(fitted, estimate_joint(sizes, tables, 10_000.0))  # deterministic


def test_fit_holds_structural_zeros_and_bounds_its_steps():
    sizes = (3, 4)
    forbidden = np.zeros(12, dtype=bool)
    forbidden[[0, 5]] = True
    tables = [Measurement((0,), np.array([10.0, 20, 30]), 1.0),
              Measurement((0, 1), np.arange(12, dtype=float) + 1, 1.0)]
    fitted = estimate_joint(sizes, tables, 60.0, forbidden=forbidden, iterations=200)
    assert fitted.ravel()[[0, 5]].tolist() == [0.0, 0.0]
    assert fitted.sum() == pytest.approx(60)
    assert joint_steps(648, 26) == 3000  # the planted table: every step
    assert joint_steps(2**20, 1140) == 10  # a wide binary joint: the work bound's floor


def test_systematic_sampling_rounds_each_cell():
    p = np.array([0.0, 0.125, 0.0, 0.5, 0.375, 0.0])
    rng = np.random.default_rng(3)
    for rows in (1, 7, 1000, 10**12):
        counts = systematic_counts(p, rows, rng.random())
        assert counts.sum() == rows and (counts[p == 0] == 0).all()
        assert (np.abs(counts - rows * p) < 1).all()


def test_balanced_counts_round_the_one_way_counts_and_lower_every_table_error():
    """Each attribute's 1-way counts end within 1 of the expected ones, and the 2- and 3-way
    tables' summed squared error is under half the systematic sample's (a 1-way move may
    raise a 2-way table's, which its own moves then lower: 83 → 9 and 144 → 31 here); a cell
    stays within 2 of expected, and one expected 0 receives no row."""
    rng = np.random.default_rng(5)
    shape = (3, 4, 2, 3, 2)
    p = rng.gamma(0.5, size=shape)
    p[0, 1] = 0  # a structural zero: 36 cells
    rows = 10_007
    expected = p * (rows / p.sum())
    sampled = systematic_counts(p.ravel(), rows, 0.3).reshape(shape)
    counts = balanced_counts(sampled, expected)
    assert counts.sum() == rows and (counts[0, 1] == 0).all() and (counts >= 0).all()
    m = len(shape)

    def errors(table: np.ndarray, attributes: tuple[int, ...]) -> np.ndarray:
        other = tuple(b for b in range(m) if b not in attributes)
        return table.sum(axis=other) - expected.sum(axis=other)

    for a in range(m):
        assert np.abs(errors(counts, (a,))).max() < 1
    for order in (2, 3):
        squared = [sum((errors(table, attributes) ** 2).sum()
                       for attributes in itertools.combinations(range(m), order))
                   for table in (counts, sampled)]
        assert squared[0] < squared[1] / 2
    assert np.abs(counts - expected).max() < 2


def test_release_positions_deal_every_row_once():
    """Partitions of 700 rows (the last fewer) take every position of a 5 000-row layout once,
    each spread over it: every tenth of the layout holds a tenth of each partition's rows, up
    to the golden-ratio sequence's discrepancy (an interval's count off by at most about
    2 · 0.42 · ln(rows) + 1, Dupain and Sós 1984; ln(rows) here)."""
    total, size = 5_000, 700
    starts = range(0, total, size)
    parts = [release_positions(start, min(size, total - start), total) for start in starts]
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(total))
    for part in parts[:-1]:
        tenths = np.bincount(part * 10 // total, minlength=10)
        assert np.abs(tenths - size / 10).max() <= math.log(size)


def test_item_joint_rows_keep_one_way_counts_across_partitions(client):
    """Issue 68: a release of 20 000 rows in 10 partitions keeps the fitted joint's 1-way
    counts, scaled to its rows, within 1 for every value of every attribute (one layout of the
    release's rows, its 1-way counts rounded). Each partition drawing its own systematic sample
    rounded every cell once per partition, and the roundings added up over the cells of a
    value; balanced classes keep their rows as before."""
    synthesizer = fit(triple_frame(), neighbours="add_remove")
    model, schema, rows = synthesizer.model_, schema_of(), 20_000
    released = synthesizer.sample(rows, seed=2, partition_rows=2_000).compute()
    codes = encode_partition(released[schema.names], schema).T
    m = schema.m
    for a in range(m):
        expected = model.joint.sum(axis=tuple(b for b in range(m) if b != a))
        expected = expected * (rows / model.joint.sum())
        got = np.bincount(codes[:, a], minlength=schema.sizes[a])
        assert np.abs(got - expected).max() < 1, (schema.names[a], got - expected)
    balanced = synthesizer.sample(3_001, seed=1, balance="e", partition_rows=1_000).compute()
    assert sorted(balanced["e"].value_counts().tolist()) == [1_000, 1_000, 1_001]


def test_dense_release_recovers_a_planted_triple(client):
    """A 3-way parity no pair shows: pairs leave its TVD near 0.5; the dense joint, fitted to
    the measured triple (8 cells of σ), is off by about 8·σ·√(2/π)/(2n) in TVD, and n rows
    drawn from it by systematic sampling add at most 8·1/(2n)."""
    frame, schema = triple_frame(), schema_of()
    true = table(frame, schema, (0, 1, 2)) / len(frame)
    errors = {}
    for mode in ("pairs", "joint"):
        synthesizer = fit(frame, mode)
        rows = synthesizer.sample(len(frame), seed=0).compute()
        errors[mode] = 0.5 * float(np.abs(table(rows, schema, (0, 1, 2)) / len(rows)
                                          - true).sum())
    (measured,) = [m for m in synthesizer.model_.measurements if m.attributes == (0, 1, 2)]
    tolerance = 3 * 8 * (measured.sigma * math.sqrt(2 / math.pi) + 1) / (2 * len(frame))
    assert errors["pairs"] > 0.4
    assert errors["joint"] < tolerance < errors["pairs"] / 20


def test_dense_model_round_trip(client, tmp_path):
    """The saved model holds the fitted joint: sampling the loaded model gives the same rows,
    partition by partition (each seeded by the release seed and its index)."""
    synthesizer = fit(triple_frame(), neighbours="add_remove")
    model = synthesizer.model_
    assert model.joint is not None and model.joint.shape == tuple(schema_of().sizes)
    assert "dense joint" in model.metadata["method"]
    loaded = load_model(synthesizer.save(tmp_path / "model"))
    assert np.array_equal(loaded.joint, model.joint)
    assert [m.attributes for m in loaded.measurements] == [m.attributes
                                                           for m in model.measurements]
    first = synthesizer.sample(5_000, seed=4, partition_rows=1_000).compute()
    synthesizer.model_ = loaded
    again = synthesizer.sample(5_000, seed=4, partition_rows=1_000).compute()
    assert first.reset_index(drop=True).equals(again.reset_index(drop=True))


def test_dense_where_and_balance(client):
    synthesizer = fit(triple_frame())
    rows = synthesizer.sample(3_000, seed=1, where="a == '1'").compute()
    assert len(rows) == 3_000 and (rows["a"] == "1").all()
    # the parity holds within the condition too: c = b XOR 1
    assert (rows["c"] != rows["b"]).mean() > 0.95
    balanced = synthesizer.sample(3_001, seed=1, balance="e").compute()
    assert sorted(balanced["e"].value_counts().tolist()) == [1_000, 1_000, 1_001]


def test_dense_joint_holds_the_constraints(client):
    """The schema's forbidden cells are structural zeros of the joint: no released row breaks
    a constraint."""
    schema = schema_of([{"forbid": {"a": ["1"], "b": ["1"]}}])
    frame = triple_frame()
    frame = frame[~((frame["a"] == "1") & (frame["b"] == "1"))]
    synthesizer = fit(frame, schema=schema)
    assert synthesizer.model_.joint is not None
    assert synthesizer.model_.joint[1, 1].sum() == 0
    rows = synthesizer.sample(len(frame), seed=0).compute()
    codes = encode_partition(rows[schema.names], schema).T
    assert satisfied(schema.constraints, codes).all()


def test_dense_path_with_fine_grids_spends_rho_once(client):
    """Fine histograms are measured on the dense path at their share (and made consistent with
    the joint's 1-way tables for decoding): every charge sums to ρ."""
    from test_fine import heaped_frame, spec

    schema = Schema.from_json(spec())
    synthesizer = fit(heaped_frame(20_000), schema=schema)
    model = synthesizer.model_
    assert model.joint is not None and model.fine
    record = model.metadata["privacy"]
    sensitivity = TABLE_L2_SENSITIVITY["replace"]
    charges = [sensitivity**2 / (2 * m.sigma**2) for m in model.measurements]
    charges += [sensitivity**2 / (2 * h["sigma"]**2)
                for h in record["fine_histograms"].values()]
    assert sum(charges) == pytest.approx(synthesizer.budget_plan().rho, rel=1e-9)
    assert "fine histograms" in record["budget_split"]
