"""The evaluation harness: query answers against pandas, (α, β) by hand, workload sizes, CLI."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from conftest import SMALL_SCHEMA_PATH, correlated_frame

from dp_dask.cli import main
from dp_dask.cluster import compute
from dp_dask.data.counts import counts_from_codes, partition_counts
from dp_dask.data.schema import load_schema
from dp_dask.evaluate.queries import (
    Answers,
    CodeScorer,
    RangeQueries,
    alpha_beta,
    answer_graphs,
    error_records,
    marginal_distances,
    marginal_l1_errors,
    pair_correlations,
    pair_tvds,
    partition_three_way_counts,
    range_counts_from_codes,
    range_fraction_errors,
    range_query_errors,
    range_query_workload,
    relative_errors,
    three_way_workload,
    workload_sizes,
)
from dp_dask.privacy.labels import OWNER_ONLY


def labelled(frame: pd.DataFrame) -> pd.DataFrame:
    """SMALL_SCHEMA labels of a correlated_frame, binned by pandas rather than by dp_dask."""
    labels = frame.copy()
    labels["size"] = pd.cut(frame["size"], [0, 10, 20, 50, np.inf], right=False,
                            labels=["[0, 10)", "[10, 20)", "[20, 50)", "[50, inf)"]).astype(str)
    return labels


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return correlated_frame(600, seed=5)


@pytest.fixture(scope="module")
def answered(client, frame):
    """d×d counts and all of Q3 of the frame, from 3 partitions on the cluster."""
    schema = load_schema(SMALL_SCHEMA_PATH)
    workload = three_way_workload(schema, sample=None)
    counts, q3 = compute(*answer_graphs(dd.from_pandas(frame, npartitions=3), schema, workload))
    return schema, workload, counts, q3


def pandas_count(labels: pd.DataFrame, condition: dict[str, str]) -> int:
    mask = np.ones(len(labels), dtype=bool)
    for name, value in condition.items():
        mask &= (labels[name] == value).to_numpy()
    return int(mask.sum())


def test_one_and_two_way_answers_match_pandas(answered, frame):
    schema, _, counts, _ = answered
    labels = labelled(frame)
    answers = Answers.from_counts(counts, schema)
    names = schema.names
    expected_q1 = [labels[a.name].value_counts().get(v, 0)
                   for a in schema.attributes for v in a.labels]
    pairs = labels.groupby(names, observed=True).size()  # one groupby, then marginalise
    expected_q2 = [pairs.groupby(level=[i, j]).sum().get((u, v), 0)
                   for i, j in itertools.combinations(range(schema.m), 2)
                   for u in schema.attributes[i].labels for v in schema.attributes[j].labels]
    assert answers.n_rows == len(frame)
    np.testing.assert_array_equal(answers.q1, expected_q1)
    np.testing.assert_array_equal(answers.q2, expected_q2)


def test_all_three_way_answers_match_pandas(answered, frame):
    schema, workload, _, q3 = answered
    labels = labelled(frame)
    assert not workload.sampled and len(q3) == workload_sizes(schema)["Q3"]
    attributes, codes = workload.queries(schema)
    expected = []
    for triple, cell in zip(attributes, codes):
        grouped = labels.groupby([schema.names[t] for t in triple]).size()
        key = tuple(schema.attributes[t].labels[c] for t, c in zip(triple, cell))
        expected.append(grouped.get(key, 0))
    np.testing.assert_array_equal(q3, expected)
    assert q3.sum() == len(frame) * math.comb(schema.m, 3)  # each row lands once per triple


def test_sampled_three_way_answers_match_pandas(client, frame):
    schema = load_schema(SMALL_SCHEMA_PATH)
    workload = three_way_workload(schema, sample=40, seed=3)
    assert workload.sampled and len(workload.cells) == 40
    assert "40 of 180" in workload.describe() and "seed 3" in workload.describe()
    attributes, codes = workload.queries(schema)
    assert len({(*a, *c) for a, c in zip(attributes, codes)}) == 40  # distinct queries
    _, q3 = compute(*answer_graphs(dd.from_pandas(frame, npartitions=2), schema, workload))
    labels = labelled(frame)
    expected = [pandas_count(labels, {schema.names[t]: schema.attributes[t].labels[c]
                                      for t, c in zip(triple, cell)})
                for triple, cell in zip(attributes, codes)]
    np.testing.assert_array_equal(q3, expected)
    again = three_way_workload(schema, sample=40, seed=3)
    other = three_way_workload(schema, sample=40, seed=4)
    np.testing.assert_array_equal(again.cells, workload.cells)

    def query_set(w):
        return {(*a, *c) for a, c in zip(*w.queries(schema))}

    assert query_set(other) != query_set(workload)


def test_workload_sizes_follow_the_combinatorial_formula(adult_schema):
    schema = load_schema(SMALL_SCHEMA_PATH)
    sizes = [a.size for a in schema.attributes]  # 3, 4, 2, 6
    # Enumerate every conjunction explicitly rather than multiply.
    q2 = sum(1 for i, j in itertools.combinations(range(4), 2)
             for _ in itertools.product(range(sizes[i]), range(sizes[j])))
    q3 = sum(1 for t in itertools.combinations(range(4), 3)
             for _ in itertools.product(*(range(sizes[k]) for k in t)))
    assert workload_sizes(schema) == {"Q1": 15, "Q2": q2, "Q3": q3}
    assert (q2, q3) == (3 * 4 + 3 * 2 + 3 * 6 + 4 * 2 + 4 * 6 + 2 * 6,
                        3 * 4 * 2 + 3 * 4 * 6 + 3 * 2 * 6 + 4 * 2 * 6)
    adult = workload_sizes(adult_schema)
    s = adult_schema.sizes.tolist()
    assert adult["Q2"] == sum(s[i] * s[j] for i in range(15) for j in range(i + 1, 15))
    assert adult["Q3"] == sum(s[i] * s[j] * s[k] for i in range(15) for j in range(i + 1, 15)
                              for k in range(j + 1, 15))
    full = three_way_workload(adult_schema, sample=adult["Q3"])
    assert not full.sampled and len(full.cells) == adult["Q3"]


def test_alpha_beta_by_hand():
    errors = np.array([100.0, *range(19)])  # 0..18 and one outlier, shuffled below
    np.random.default_rng(0).shuffle(errors)
    stats = alpha_beta(errors)
    assert stats[0.95] == (9.0, 18.0)  # ceil(0.95·20) = 19 best: 0..18
    assert stats[0.99] == ((171 + 100) / 20, 100.0)  # ceil(19.8) = 20: all
    assert stats[1.0] == stats[0.99]
    assert alpha_beta(np.arange(10.0), (0.95,))[0.95] == (4.5, 9.0)  # ceil(9.5) = 10


def test_errors_scale_synthetic_counts_and_split_by_correlation(frame):
    schema = load_schema(SMALL_SCHEMA_PATH)
    frame = frame.assign(flag=np.where(frame["colour"] == "red", "yes", "no"))  # r = 1 pairs
    counts = partition_counts(frame, schema)
    workload = three_way_workload(schema, sample=None)
    q3 = partition_three_way_counts(frame, workload, schema)
    true = Answers.from_counts(counts, schema, q3)
    doubled = Answers.from_counts(2 * counts, schema, 2 * q3)  # a release of 2n identical rows
    records = pd.DataFrame(error_records("twice", true, doubled, pair_correlations(counts,
                                                                                   schema)))
    assert set(records["workload"]) >= {"Q1", "Q2", "Q3"}
    assert (records["average"] == 0).all() and (records["maximum"] == 0).all()
    # r of each Q2 query equals numpy's Pearson r of the two dummy columns.
    labels = labelled(frame)
    dummies = {f"{a.name}={v}": (labels[a.name] == v).to_numpy(float)
               for a in schema.attributes for v in a.labels}
    expected = []
    for i, j in itertools.combinations(range(schema.m), 2):
        for u in schema.attributes[i].labels:
            for v in schema.attributes[j].labels:
                x, y = dummies[f"{schema.names[i]}={u}"], dummies[f"{schema.names[j]}={v}"]
                expected.append(0.0 if x.std() == 0 or y.std() == 0 else np.corrcoef(x, y)[0, 1])
    np.testing.assert_allclose(pair_correlations(counts, schema), expected, atol=1e-12)
    split = records[records["beta"] == 1.0].set_index("workload")["queries"]
    assert split["Q2 |r|>=0.5"] + split["Q2 |r|<0.5"] == split["Q2"]
    assert split["Q2 |r|>=0.5"] == int((np.abs(expected) >= 0.5).sum()) > 0


def scheduler(client) -> list[str]:
    return ["--scheduler", client.scheduler.address, "--quiet"]


def test_evaluate_command_writes_tables(client, tmp_path, capsys):
    real = tmp_path / "real.csv"
    correlated_frame(800, seed=1).to_csv(real, index=False)
    synthetic = tmp_path / "synthetic.parquet"
    labelled(correlated_frame(500, seed=2)).to_parquet(synthetic)
    code = main(["evaluate", "--data", str(real), "--synthetic", str(synthetic),
                 "--schema", str(SMALL_SCHEMA_PATH), "--out", str(tmp_path / "eval"),
                 "--q3-sample", "50", "--seed", "7", *scheduler(client)])
    assert code == 0
    assert "uniform sample of 50 of 180 queries (seed 7)" in capsys.readouterr().out
    records = json.loads((tmp_path / "eval" / "alpha-beta.json").read_text())["records"]
    assert {r["workload"] for r in records} >= {"Q1", "Q2", "Q3"}
    table = pd.read_csv(tmp_path / "eval" / "alpha-beta.csv", comment="#")
    assert set(table["beta"]) == {0.95, 0.99, 1.0}
    assert (table["average"] > 0).all()  # different samples: some error everywhere
    assert "| method | workload | queries | avg 95% |" in (tmp_path / "eval"
                                                          / "alpha-beta.md").read_text()
    for name in ("alpha-beta.md", "alpha-beta.csv"):  # marked on their first line
        first = (tmp_path / "eval" / name).read_text().splitlines()[0]
        assert OWNER_ONLY in first.lower()
    assert json.loads((tmp_path / "eval" / "alpha-beta.json").read_text())["privacy"] == OWNER_ONLY
    assert not list((tmp_path / "eval").glob("values.*"))  # labels: no values to compare

    labelled(correlated_frame(50)).drop(columns=["city"]).to_parquet(tmp_path / "bad.parquet")
    code = main(["evaluate", "--data", str(real), "--synthetic", str(tmp_path / "bad.parquet"),
                 "--schema", str(SMALL_SCHEMA_PATH), *scheduler(client)])
    assert code == 2
    assert "missing column(s) ['city']" in capsys.readouterr().err


def test_report_command_on_a_small_frame(client, tmp_path, capsys):
    real, test = tmp_path / "real.csv", tmp_path / "test.csv"
    correlated_frame(3000, seed=1).to_csv(real, index=False)
    correlated_frame(1000, seed=9).to_csv(test, index=False)
    out = tmp_path / "report"
    code = main(["report", "--data", str(real), "--schema", str(SMALL_SCHEMA_PATH),
                 "--out", str(out), "--epsilons", "1", "5", "--seeds", "2",
                 "--table-epsilon", "5", "--calibration-draws", "5000",
                 "--test-data", str(test), "--target", "flag", *scheduler(client)])
    assert code == 0
    written = {p.name for p in out.iterdir()}
    assert {"report.md", "alpha-beta.md", "alpha-beta.csv", "alpha-beta.json", "sweep.csv",
            "sweep-summary.csv", "classifier.csv", "error-vs-epsilon-q1.png",
            "error-vs-epsilon-q2.png", "error-vs-epsilon-q3.png"} <= written
    sweep = pd.read_csv(out / "sweep.csv", comment="#")
    assert set(sweep["method"]) == {"dpc-gauss", "dpc-laplace", "independent", "copula-exact",
                                    "gauss-histograms", "laplace-histograms"}
    assert set(sweep["seed"]) == {0, 1}
    assert not sweep.loc[sweep["method"].str.endswith("histograms"), "workload"].eq("Q3").any()
    report = (out / "report.md").read_text()
    for name in ("report.md", "sweep.csv", "sweep-summary.csv", "classifier.csv"):
        assert OWNER_ONLY in (out / name).read_text().splitlines()[0].lower()
    assert "(α, β) errors at ε = 5" in report and "![error-vs-epsilon-q2]" in report
    accuracy = pd.read_csv(out / "classifier.csv", comment="#").set_index(
        "training data")["accuracy"]
    assert accuracy["real"] > accuracy.filter(like="majority").iloc[0]

    code = main(["report", "--data", str(real), "--schema", str(SMALL_SCHEMA_PATH),
                 "--out", str(out), "--epsilons", "1", "--table-epsilon", "2",
                 *scheduler(client)])
    assert code == 2
    assert "not among the swept" in capsys.readouterr().err


# --- range-count queries (the DPCopula paper's metric) -----------------------------------------

@pytest.mark.parametrize("table_cells", [1, 1 << 22])  # by rows; by contingency tables
def test_range_counts_by_hand(small_schema, table_cells):
    # rows (colour, size, flag, city) as codes; sizes 3, 4, 2, 6
    codes = np.array([[0, 0, 1, 0], [1, 2, 0, 3], [2, 3, 1, 5], [1, 1, 1, 1], [0, 3, 0, 2]]).T
    full = small_schema.sizes - 1
    lo = np.zeros((4, 4), dtype=np.int64)
    hi = np.tile(full, (4, 1))
    lo[0, 0], hi[0, 0] = 1, 2  # colour in {green, blue}: rows 1, 2, 3
    lo[1, 1], hi[1, 1], lo[1, 2] = 1, 2, 1  # size bins 1-2 and flag yes: row 3
    lo[2, 3], hi[2, 3] = 4, 4  # city e: nobody
    workload = RangeQueries(lo, hi, attributes=2, seed=0,  # query 3 is the whole domain
                            table_cells=table_cells)
    np.testing.assert_array_equal(range_counts_from_codes(codes, workload, small_schema),
                                  [3, 1, 0, 5])


def test_range_workload_depends_on_schema_and_seed_only(small_schema):
    workload = range_query_workload(small_schema, queries=500, attributes=2, seed=7)
    again = range_query_workload(small_schema, queries=500, attributes=2, seed=7)
    other = range_query_workload(small_schema, queries=500, attributes=2, seed=8)
    np.testing.assert_array_equal(workload.lo, again.lo)
    np.testing.assert_array_equal(workload.hi, again.hi)
    assert not np.array_equal(workload.lo, other.lo)
    sizes = small_schema.sizes
    assert np.all((0 <= workload.lo) & (workload.lo <= workload.hi) & (workload.hi < sizes))
    constrained = (workload.lo > 0) | (workload.hi < sizes - 1)
    assert constrained.sum(axis=1).max() <= 2  # a range may happen to span the whole domain
    assert (constrained.sum(axis=1) == 2).mean() > 0.3
    assert np.all(range_query_workload(small_schema, queries=50).lo.shape == (50, 4))
    with pytest.raises(ValueError, match="1 to 4 attributes"):
        range_query_workload(small_schema, attributes=5)


@pytest.mark.parametrize("table_cells", [1, 30, 1 << 22])  # by rows, both, tables
def test_range_answers_match_pandas_in_small_batches(client, frame, table_cells):
    """The Dask reduction (3 partitions) with batches of a few queries against pandas; queries
    answered from contingency tables up to ``table_cells`` cells, the rest row by row."""
    import dp_dask.evaluate.queries as evaluate

    schema = load_schema(SMALL_SCHEMA_PATH)
    workload = replace(range_query_workload(schema, queries=60, attributes=3, seed=1),
                       batch_cells=1_000,  # 5 queries per 200-row partition
                       table_cells=table_cells)
    (answers,) = compute(evaluate.range_query_graph(dd.from_pandas(frame, npartitions=3),
                                                    schema, workload))
    labels = labelled(frame)
    position = {a.name: labels[a.name].map({v: i for i, v in enumerate(a.labels)}).to_numpy()
                for a in schema.attributes}
    expected = [int(np.all([(lo[a] <= position[name]) & (position[name] <= hi[a])
                            for a, name in enumerate(schema.names)], axis=0).sum())
                for lo, hi in zip(workload.lo, workload.hi)]
    np.testing.assert_array_equal(answers[:-1], expected)
    assert answers[-1] == len(frame)


def test_range_errors_are_zero_on_the_data_itself_and_use_the_sanity_bound(client, frame):
    schema = load_schema(SMALL_SCHEMA_PATH)
    same = range_query_errors(frame, labelled(frame), schema, queries=200, seed=3)
    assert same.shape == (200,) and np.all(same == 0)
    # the data twice: answers scaled to n are the data's; the first half twice: they are not
    twice = range_query_errors(frame, pd.concat([labelled(frame)] * 2), schema, queries=200,
                               seed=3)
    half = range_query_errors(frame, pd.concat([labelled(frame).iloc[:300]] * 2), schema,
                              queries=200, seed=3)
    assert np.all(twice == 0) and np.any(half > 0)
    # |true − released·n/n'| / max(true, s), by hand
    got = relative_errors(np.array([0, 0, 10, 4]), np.array([3, 0, 3, 1]), 100, 50, sanity=2)
    np.testing.assert_allclose(got, [6 / 2, 0.0, 4 / 10, 2 / 4])
    with pytest.raises(ValueError, match="sanity"):
        relative_errors(np.zeros(1), np.zeros(1), 1, 1, sanity=0)


# --- the DPView paper's metrics ------------------------------------------------------------------

def test_marginal_l1_by_hand():
    sizes = np.array([2, 3, 2])
    real = np.array([[0, 0, 0], [1, 2, 1], [1, 2, 0], [0, 1, 1]]).T  # 4 rows
    synthetic = np.array([[0, 0, 0], [1, 2, 1]]).T  # 2 rows: fractions, not counts, compared
    # 1-way: a0 real (1/2, 1/2) vs (1/2, 1/2): 0; a1 real (1/4, 1/4, 1/2) vs (1/2, 0, 1/2): 1/2;
    # a2 real (1/2, 1/2) vs (1/2, 1/2): 0
    np.testing.assert_allclose(marginal_l1_errors(real, synthetic, sizes, 1), [0, 0.5, 0])
    # 3-way: real cells 000, 121, 120, 011 at 1/4 each; synthetic 000, 121 at 1/2 each:
    # |1/4 − 1/2|·2 + 1/4·2 = 1
    np.testing.assert_allclose(marginal_l1_errors(real, synthetic, sizes, 3), [1.0])
    assert marginal_l1_errors(real, real, sizes, 2).tolist() == [0.0, 0.0, 0.0]


def test_range_fraction_errors_by_hand(small_schema):
    codes = np.array([[0, 0, 1, 0], [1, 2, 0, 3], [2, 3, 1, 5], [1, 1, 1, 1], [0, 3, 0, 2]]).T
    errors = range_fraction_errors(codes, codes[:, :2], small_schema, queries=40, attributes=2,
                                   seed=4)
    workload = range_query_workload(small_schema, queries=40, attributes=2, seed=4)
    true = range_counts_from_codes(codes, workload, small_schema) / 5
    released = range_counts_from_codes(codes[:, :2], workload, small_schema) / 2
    np.testing.assert_allclose(errors, np.abs(true - released))
    assert errors.max() > 0  # two rows of five answer some query differently
    assert not range_fraction_errors(codes, codes, small_schema, queries=40).any()


def test_range_workload_among_constrains_only_those_attributes(small_schema):
    workload = range_query_workload(small_schema, queries=400, attributes=1, seed=2, among=[1, 3])
    sizes = small_schema.sizes
    constrained = (workload.lo > 0) | (workload.hi < sizes - 1)
    assert not constrained[:, [0, 2]].any() and constrained[:, [1, 3]].any(axis=0).all()
    # without among, the draws are the ones before the option existed: all m attributes
    whole = range_query_workload(small_schema, queries=400, attributes=1, seed=2)
    assert ((whole.lo > 0) | (whole.hi < sizes - 1))[:, [0, 2]].any()
    assert range_query_workload(small_schema, queries=9, among=[2]).attributes == 1
    with pytest.raises(ValueError, match="distinct attribute indices"):
        range_query_workload(small_schema, among=[1, 1])
    with pytest.raises(ValueError, match="1 to 2 attributes"):
        range_query_workload(small_schema, attributes=3, among=[0, 1])


def codes_of(n: int, seed: int, schema) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(0, size, n) for size in schema.sizes])


def test_pair_tvds_match_the_count_matrix_distances(small_schema):
    real, synthetic = codes_of(500, 0, small_schema), codes_of(300, 1, small_schema)
    pairs = pair_tvds(real, synthetic, small_schema)
    assert sorted(pairs) == list(itertools.combinations(range(small_schema.m), 2))
    expected = marginal_distances(counts_from_codes(real, small_schema),
                                  counts_from_codes(synthetic, small_schema), small_schema)
    assert np.mean(list(pairs.values())) == pytest.approx(expected["two_way_tvd_mean"])
    assert max(pairs.values()) == pytest.approx(expected["two_way_tvd_max"])
    assert all(v == 0 for v in pair_tvds(real, real, small_schema).values())


def test_code_scorer_uses_its_sanity_bound_and_scales_to_n(small_schema):
    real = codes_of(400, 0, small_schema)
    workloads = {"all": range_query_workload(small_schema, queries=100, seed=0)}
    scorer = CodeScorer.build(real, small_schema, workloads, sanity=4.0)
    same = scorer.score(np.concatenate([real, real], axis=1))  # twice the rows, same shares
    assert same["all"]["mean"] == 0 and same["two_way_tvd_max"] == 0
    other = codes_of(400, 1, small_schema)
    scores = scorer.score(other)
    true = range_counts_from_codes(real, workloads["all"], small_schema)
    released = range_counts_from_codes(other, workloads["all"], small_schema)
    by_hand = np.abs(true - released) / np.maximum(true, 4.0)
    assert scores["all"]["mean"] == pytest.approx(by_hand.mean())
    assert scores["all"]["median"] == pytest.approx(np.median(by_hand))
    assert scores["two_way_tvd_mean"] > 0 and len(scores["pair_tvd"]) == 6
