"""Issue 65, drafting raw tables: numbers stored as text with a stray word and CSVs of numeric
codes drafted as numbers at budgets too small for the type step's thresholds (items 1, 2), no
unused ``other`` in a release's dictionary (item 3), notes that speak Python from Python
(item 4)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dp_dask.data.draft import draft_schema
from dp_dask.data.schema import load_schema
from dp_dask.keywords import as_flags
from dp_dask.synthesizer import Synthesizer

DELTA = 1e-9
ROWS = 27_000


def coded_survey(rows: int = ROWS, seed: int = 0) -> pd.DataFrame:
    """A survey as a CSV hands it over: 24 columns of numeric codes (answers 1..9, a 1..5 scale,
    yes/no as 1/2, ages 17..90), no storage types."""
    rng = np.random.default_rng(seed)
    columns = {"age": rng.integers(17, 91, rows)}
    for i in range(23):
        levels = 2 + i % 8  # 2..9 answer codes
        shares = rng.dirichlet(np.ones(levels) * 3)
        columns[f"q{i + 1}"] = rng.choice(np.arange(1, levels + 1), rows, p=shares)
    return pd.DataFrame(columns)


def _types(draft) -> dict[str, str]:
    return {c: d["dtype"] for c, d in draft.schema["drafted_under_dp"]["types"]["decided"].items()}


def test_item1_a_numeric_csv_column_with_one_stray_word_is_a_number_at_a_small_budget(tmp_path):
    """One "unknown" among 27,000 ages in a 24-column CSV at dp_epsilon 0.1: the type step's
    noise (scale 2·24/0.01 = 4,800 per count) puts its threshold (about 41,000) above the rows,
    so no form passes. The largest noisy form (integers) decides: int64, the stray counted as
    missing (in the middle bin: the column has no missing bin), said with its noisy count."""
    frame = coded_survey().astype(object)
    frame.loc[7, "age"] = "unknown"
    frame.to_csv(tmp_path / "stray.csv", index=False)
    draft = draft_schema(tmp_path / "stray.csv", dp_epsilon=0.1, dp_delta=DELTA, ledger=False,
                         noise_sampler="numpy", noise_seed=0)
    types = draft.schema["drafted_under_dp"]["types"]
    assert types["threshold"] > ROWS  # no form can pass: the fallback decides
    assert _types(draft)["age"] == "int64"
    (note,) = [n for n in draft.notes if n.startswith("types decided under DP")]
    assert "age int64, never null (stored as text: its values that are no number, about" in note
    assert "count as missing, in its middle bin" in note


def test_item2_a_csv_of_numeric_codes_is_drafted_as_numbers_not_text(tmp_path):
    """A 27k-row CSV of 24 coded columns at the two-step default draft budget (dp_epsilon 0.1):
    every column is decided a number, none text; a column of words beside them stays text. On
    25596b3 every column was text, with no level passing its threshold: all 'other'. At this
    budget each noisy form count has scale 5,000: the integer form (27,000 rows) is the largest
    but for about 6 % of columns (7 noisy rivals, each beating it with probability ~0.8 %), which
    then are floats, the cautious number (unrounded, not cut to integers)."""
    frame = coded_survey()
    frame["city"] = np.random.default_rng(1).choice(["north", "south", "east"], ROWS)
    frame.to_csv(tmp_path / "survey.csv", index=False)
    draft = draft_schema(tmp_path / "survey.csv", dp_epsilon=0.1, dp_delta=DELTA, ledger=False,
                         noise_sampler="numpy", noise_seed=0)
    types = _types(draft)
    codes = [types[c] for c in frame.columns if c != "city"]
    assert "string" not in codes
    assert codes.count("int64") >= 20, codes
    assert types["city"] == "string"
    drafted = {a["name"]: a for a in draft.schema["attributes"]}
    assert all(drafted[c]["type"] == "numeric" for c in frame.columns if c in drafted
               and c != "city")


def test_item3_a_dictionary_whose_levels_are_all_released_gets_no_other(tmp_path):
    """An ordered categorical, an unordered one and a string column, every level of each
    holding thousands of rows: drafted without an 'other' bin, so the release's dictionaries
    are exactly the input's levels in the input's order (no invented 'other' value) and its
    Arrow types equal the input's. A column of 300 rare values beside a large level keeps
    its 'other', which holds them."""
    rng = np.random.default_rng(5)
    rows = 6_000
    grades = pd.CategoricalDtype(["low", "mid", "high"], ordered=True)
    rare = np.where(rng.random(rows) < 0.9, "common",
                    np.char.add("r", rng.integers(0, 300, rows).astype(str)))
    table = pa.table({  # dictionaries of Arrow string, as pandas' categoricals of object text
        "grade": pa.array(pd.Categorical(rng.choice(["low", "mid", "high"], rows,
                                                    p=[0.3, 0.4, 0.3]), dtype=grades)).cast(
            pa.dictionary(pa.int8(), pa.string(), ordered=True)),
        "colour": pa.array(pd.Categorical(rng.choice(["red", "blue"], rows))).cast(
            pa.dictionary(pa.int8(), pa.string())),
        "city": pa.array(rng.choice(["x", "y"], rows), pa.string()),
        "tag": pa.array(rare, pa.string())})
    pq.write_table(table, tmp_path / "typed.parquet")
    draft = draft_schema(tmp_path / "typed.parquet", dp_epsilon=1.0, dp_delta=DELTA,
                         ledger=False, noise_sampler="numpy", noise_seed=0)
    drafted = {a["name"]: a for a in draft.schema["attributes"]}
    for column in ("grade", "colour", "city"):
        assert "other" not in drafted[column].get("extra", []), drafted[column]
    assert drafted["tag"]["categories"] == ["common"] and "other" in drafted["tag"]["extra"]
    assert draft.schema["drafted_under_dp"]["text"]["covered"]["columns"] == [
        "grade", "colour", "city"]
    fitted = Synthesizer.create("marginals", load_schema(draft.schema), epsilon=1.0,
                                ledger=False, noise_sampler="numpy", noise_seed=0).fit(
        tmp_path / "typed.parquet")
    fitted.write(tmp_path / "release", 3_000, seed=0)
    released = pq.read_table(tmp_path / "release" / "synthetic.parquet")
    for column in ("grade", "colour", "city", "tag"):
        assert released.schema.field(column).type == table.schema.field(column).type, column
    assert released.column("grade").chunk(0).dictionary.to_pylist() == ["low", "mid", "high"]
    assert sorted(released.column("colour").chunk(0).dictionary.to_pylist()) == ["blue", "red"]
    assert set(released.column("city").to_pylist()) == {"x", "y"}


def test_item4_notes_drafted_from_python_name_keyword_arguments(tmp_path):
    """From Python a draft's notes and placeholders name keyword arguments (ranges=,
    dp_epsilon=, public_types=, ids=, on_unknown=), never CLI flags; the CLI prints them as its
    flags (keywords.as_flags)."""
    frame = pd.DataFrame({"user_id": np.arange(50), "when": pd.date_range("2020", periods=50),
                          "amount": np.arange(50.0), "city": ["a", "b"] * 25})
    frame.to_parquet(tmp_path / "t.parquet")
    draft = draft_schema(tmp_path / "t.parquet", ids="drop")
    texts = [*draft.notes, *draft.todo.values(), draft.summary()]
    assert not [t for t in texts if "--" in t], [t for t in texts if "--" in t]
    said = "\n".join(texts)
    for keyword in ("ranges=", "dp_epsilon=", "public_types=", "ids=", "on_unknown="):
        assert keyword in said, keyword
    printed = as_flags(draft.summary())
    for flag in ("--range", "--dp-epsilon", "--public-types", "--ids", "--on-unknown"):
        assert flag in printed, flag
