"""benchmarks/codes_csv.py (issue 65: a CSV of numeric codes with no schema against a hand
schema): its k-marginal score on hand-made frames, its account of the drafted codes, and both
paths end to end on a few thousand rows of the discretized Adult CSV (no timing asserts)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchmarks.codes_csv import (
    DATA,
    PATHS,
    dictionary,
    drafted_codes,
    marginal_scores,
    run,
    table,
)
from dp_dask.cluster import dask_client


def test_k_marginal_score_is_1000_for_the_table_itself_and_0_for_disjoint_codes():
    rng = np.random.default_rng(0)
    real = pd.DataFrame(rng.integers(0, 3, (500, 4)), columns=list("abcd"))
    assert marginal_scores(real, real)["score_3way"] == pytest.approx(1000)
    assert marginal_scores(real, real + 3)["score_3way"] == pytest.approx(0)
    # one column's codes moved on one row in ten: each 1-way TVD of that column is 0.1
    moved = real.copy()
    moved.loc[::10, "a"] = 9
    scores = marginal_scores(real, moved)
    assert scores["column_tvd_1way"]["a"] == pytest.approx(0.1)
    assert scores["tvd_1way"] == pytest.approx(0.1 / 4)


def test_drafted_codes_names_the_codes_an_end_bin_merges():
    # a grid 2..14 whose lower bin is open: codes 0 and 1 share it; 15 codes in the dictionary
    grid = {"type": "numeric", "dtype": "int64", "edges": ["-inf", *range(2, 15), "inf"]}
    assert drafted_codes(grid, 15) | {"fine": False} == {
        "type": "numeric", "dtype": "int64", "bins": 14, "kept": 13, "merged": ["0-1"],
        "fine": False}
    text = {"type": "categorical", "categories": ["0", "1"]}
    assert drafted_codes(text, 2) == {"type": "categorical", "dtype": None}


@pytest.mark.harness
@pytest.mark.skipif(not (DATA / "adult.csv").exists(), reason="shared/data not present")
def test_both_paths_score_and_the_draft_keeps_every_code_column_a_number(tmp_path):
    # 5,000 rows: below about 3,100 (5 noise scales of the type step's 14 columns at the one
    # command's ε = 1) the draft keeps a CSV column's cautious type, text (draft_types.py)
    data = table(5_000, tmp_path)
    codes = dictionary()
    with dask_client(n_workers=1, threads_per_worker=1, quiet=True):
        lines = {path: run(path, data, 0, codes) for path in PATHS[:2]}
    for line in lines.values():
        assert line["rows"] == 5_000 and line["left_out"] == []
        assert 0 <= line["score_3way"] <= 1000 and 0 <= line["score_2way"] <= 1000
    drafted = lines["no_schema"]["drafted"]
    assert set(drafted) == set(codes)
    assert all(d["type"] == "numeric" and d["dtype"] == "int64" for d in drafted.values())
    assert all(t == "int64" for t in lines["no_schema"]["dtypes_out"].values())
