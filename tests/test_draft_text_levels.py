"""Issue 65, text levels drafted under DP: thresholds that keep every level holding >= 1 % of a
25k-row table, levels in noisy order, constant columns as constants, numbers stored as text with
a few stray words drafted as numbers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from scipy.stats import norm

from dp_dask.data.draft import draft_schema
from dp_dask.data.draft_text import WEIGHT_SCALE
from dp_dask.data.schema import load_schema
from dp_dask.one_command import DRAFT_SHARE
from dp_dask.synthesizer import Synthesizer

DELTA = 1e-6
SHAPES = {"grade": [0.45, 0.30, 0.14, 0.10, 0.01],
          "clarity": [0.25, 0.20, 0.17, 0.15, 0.10, 0.07, 0.05, 0.01],
          "group": [0.15, *[0.10] * 4, *[0.05] * 6, *[0.02] * 6, *[0.01] * 3]}


def _column(shares: list[float], rows: int, rng: np.random.Generator, name: str) -> np.ndarray:
    """Exactly round(share x rows) rows of each level (the first takes the rounding), shuffled."""
    counts = np.floor(np.array(shares) * rows).astype(int)
    counts[0] += rows - counts.sum()
    values = np.repeat([f"{name}{i}" for i in range(len(shares))], counts)
    rng.shuffle(values)
    return values


def _missed(levels: dict, rows: int, columns: int) -> float:
    """The chance that a level of ``rows`` rows misses the second of the text columns' joint
    Gaussian rounds (draft_text; the first may release it too), at its least weight there: a
    row whose values are unreleased in all ``columns`` text columns (1/√columns)."""
    second = levels["rounds"][1]
    weighted = rows * WEIGHT_SCALE / math.sqrt(columns)
    return float(norm.cdf((second["threshold"] - weighted) / second["scale"]))


def _draft(frame: pd.DataFrame, path, epsilon: float, seed: int = 0):
    frame.to_parquet(path)
    return draft_schema(path, dp_epsilon=epsilon, dp_delta=DELTA, ledger=False,
                        noise_sampler="numpy", noise_seed=seed)


def test_issue65_text_levels_of_one_percent_kept_on_25k_rows(tmp_path):
    """25,000 rows, three text columns with levels of 1-10 % (and larger): every level, down
    to the 250-row ones, is kept, in noisy order (largest first), drafted at ε 0.8, δ = 1e-6.

    Failure probability: a 250-row level missed by the first of the joint Gaussian rounds is
    lost only if its weighted count (at least 250/√3 rows) falls below the second round's
    threshold, Φ((T − w)/σ) computed from the record (T ≈ 61 rows, σ ≈ 11: below 1e-12 over
    the five 1 % levels); the seed is fixed. Laplace thresholds per column (652615b) needed
    0.7-0.8 for this (a second-round threshold of 211 rows at 0.7)."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({k: _column(v, 25_000, rng, k) for k, v in SHAPES.items()})
    draft = _draft(frame, tmp_path / "levels.parquet", 0.8)
    schema = load_schema(draft.schema)
    record = draft.schema["drafted_under_dp"]
    lost = 0.0
    for column, shares in SHAPES.items():
        assert set(schema[column].categories) == {f"{column}{i}" for i in range(len(shares))}
        assert schema[column].categories[0] == f"{column}0"  # the largest level first
        lost += sum(_missed(record["text"]["levels"], s * 25_000, len(SHAPES))
                    for s in shares if s == 0.01)
    assert lost < 0.02


def test_issue65_constant_column_is_drafted_as_a_constant(tmp_path):
    """A column holding one value in all 3,000 rows is one level without an 'other' bin (the
    noisy rows n̂ leave fewer than a threshold outside its level's noisy count); a column of
    two levels holding every row is covered too (no 'other', not a constant)."""
    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"country": ["NL"] * 3_000,
                          "answer": rng.choice(["yes", "no"], 3_000)})
    draft = _draft(frame, tmp_path / "constant.parquet", 0.3)
    schema = load_schema(draft.schema)
    assert schema["country"].labels == ("NL",)
    assert schema["country"].on_unknown == "NL"
    assert schema["answer"].labels == ("no", "yes") or schema["answer"].labels == ("yes", "no")
    assert draft.schema["drafted_under_dp"]["text"]["covered"]["columns"] == ["country", "answer"]
    assert draft.schema["drafted_under_dp"]["text"]["constants"]["columns"] == ["country"]
    assert any("country: 1 categories" in note and "a constant" in note
               for note in draft.notes)


def test_issue65_971_row_level_of_a_3000_row_table_kept(tmp_path):
    """A 3,000-row table from Python: a constant column, a level of 971 rows among three, two
    columns of ten levels and two numeric columns, drafted at the one command's share of a total
    ε = 1 (DRAFT_SHARE, 0.45). Of it 0.45 x 0.85 reaches the columns, the four text columns
    their equal share of it (their need at so few rows n̂ is more: draft_split.text_total), and
    the joint rounds release the 971-row level in the first, or else in the second at a weight
    of at least 1/√4: it is lost with probability below Φ((T − w)/σ) from the record (< 1 %);
    the seed is fixed. The constant column is one level without 'other'. The old code kept an
    'other' bin in the constant column (and, at 0.3, thresholded this column's second round
    near 1,060 rows, losing the 971-row level)."""
    rng = np.random.default_rng(2)
    frame = pd.DataFrame({
        "site": ["main"] * 3_000,
        "level": _column([1_029 / 3_000, 1_000 / 3_000, 971 / 3_000], 3_000, rng, "L"),
        "a": _column([0.1] * 10, 3_000, rng, "a"), "b": _column([0.1] * 10, 3_000, rng, "b"),
        "x": rng.normal(size=3_000), "y": rng.integers(0, 100, 3_000)})
    draft = _draft(frame, tmp_path / "small.parquet", DRAFT_SHARE)
    drafted = {a["name"]: a for a in draft.schema["attributes"]}  # x, y: too small to search
    assert set(drafted["level"]["categories"]) == {"L0", "L1", "L2"}
    assert _missed(draft.schema["drafted_under_dp"]["text"]["levels"], 971, 4) < 0.01
    assert drafted["site"]["categories"] == ["main"]
    assert "other" not in drafted["site"].get("extra", [])  # never null: no missing bin either


def test_issue65_numbers_stored_as_text_with_stray_words_are_numbers(tmp_path):
    """A CSV column of 50,000 integers with 1 % words ("n/a", "unknown": below STRAY_SHARE, 5 %)
    is drafted as an integer column, its words counted as missing, said in the notes; with a
    third of its values words it stays text. The words' 500 rows pass the type step's presence
    threshold (about 340 rows at ε 0.1 over two columns), which used to make the column text."""
    rng = np.random.default_rng(3)
    rows = 50_000
    amount = rng.integers(0, 1_000, rows).astype(str).astype(object)
    amount[rng.choice(rows, rows // 100, replace=False)] = rng.choice(["n/a", "unknown"],
                                                                      rows // 100)
    mixed = amount.copy()
    mixed[rng.choice(rows, rows // 3, replace=False)] = "none"
    pd.DataFrame({"amount": amount, "mixed": mixed}).to_csv(tmp_path / "t.csv", index=False)
    draft = draft_schema(tmp_path / "t.csv", dp_epsilon=1.0, dp_delta=DELTA, ledger=False,
                         noise_sampler="numpy", noise_seed=0)
    types = draft.schema["drafted_under_dp"]["types"]
    assert types["noisy"]["amount"]["no number"] > types["threshold"]  # present, not dropped
    assert types["decided"]["amount"]["dtype"] == "int64"
    assert types["decided"]["mixed"]["dtype"] == "string"
    assert any("amount int64" in note and "no number, about" in note and "count as missing" in note
               for note in draft.notes)


def test_issue65_string_in_string_out_and_ordered_categorical_keeps_its_order(tmp_path):
    """A Parquet column of Arrow string is drafted as dtype 'string' and released as string (not
    large_string); a pandas ordered categorical as an ordered dictionary whose levels follow the
    dictionary's order (not the noisy counts), an unordered one as a dictionary."""
    rng = np.random.default_rng(4)
    grades = pd.CategoricalDtype(["low", "mid", "high", "top"], ordered=True)
    frame = pd.DataFrame({
        "city": pd.Series(rng.choice(["a", "b", "c"], 5_000, p=[0.2, 0.5, 0.3]), dtype=object),
        "grade": pd.Categorical(rng.choice(["low", "mid", "high"], 5_000, p=[0.2, 0.5, 0.3]),
                                dtype=grades),
        "colour": pd.Categorical(rng.choice(["red", "blue"], 5_000))})
    frame.to_parquet(tmp_path / "typed.parquet")
    stored = pq.read_schema(tmp_path / "typed.parquet")
    assert stored.field("city").type == pa.string()
    draft = _draft(frame, tmp_path / "typed.parquet", 1.0)
    drafted = {a["name"]: a for a in draft.schema["attributes"]}
    assert drafted["city"]["dtype"] == "string"
    assert drafted["grade"]["dtype"] == "category[ordered]"
    assert drafted["grade"]["categories"] == ["low", "mid", "high"]  # "top": no row, no level
    assert drafted["colour"]["dtype"] == "category"
    fitted = Synthesizer.create("marginals", load_schema(draft.schema), epsilon=1.0,
                                ledger=False, noise_sampler="numpy", noise_seed=0).fit(
        tmp_path / "typed.parquet")
    fitted.write(tmp_path / "release", 1_000, seed=0)
    table = pq.read_table(tmp_path / "release" / "synthetic.parquet")
    released = table.schema
    assert released.field("city").type == pa.string()
    grade = released.field("grade").type
    assert pa.types.is_dictionary(grade) and grade.ordered
    assert pa.types.is_dictionary(released.field("colour").type)
    assert table.column("grade").chunk(0).dictionary.to_pylist()[:3] == ["low", "mid", "high"]
