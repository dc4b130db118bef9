"""Issue 65, "the report shows the columns, not the bins": each raw column against the
released one (dp_dask.evaluate.columns), in Python, in the HTML report and in the CLI's
summary, on a real raw table whose release clamps a tail and merges a level into ``other``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dp_dask import Synthesizer, load_schema
from dp_dask.cli import main
from dp_dask.evaluate.columns import (
    CSV_TEXT,
    LOST_SHARE,
    column_report,
    compare_columns,
    merge_texts,
    text_partition,
)
from dp_dask.evaluate.html import REPORT_NAME, write_evaluation
from dp_dask.privacy.labels import OWNER_ONLY

ROWS, CAP = 20_000, 100_000
SCHEMA = {
    "schema_version": 1, "name": "columns", "missing_values": [""],  # a CSV's empty cell
    "attributes": [
        # the tail beyond CAP is counted in the last bin: the release draws it below CAP
        {"name": "income", "type": "numeric", "edges": [0, 10_000, 30_000, 60_000, CAP],
         "on_unknown": "clip"},
        # ages 18..89 in bins of ten: the release draws 10..17 in the bin of 18 and 19
        {"name": "age", "type": "numeric", "edges": {"start": 0, "stop": 100, "step": 10},
         "dtype": "int64", "extra": ["missing"], "on_missing": "missing"},
        {"name": "grade", "type": "categorical", "categories": ["low", "mid", "high"]},
        {"name": "city", "type": "categorical", "categories": ["a", "b", "c"],
         "extra": ["other", "missing"], "on_unknown": "other", "on_missing": "missing"}],
    # the budget an earlier draft of this schema spent (dp_dask.data.draft), as it records it
    "drafted_under_dp": {"epsilon": 0.5, "delta": 1e-7, "columns": ["city"],
                         "differentially_private": True, "ledger": None}}


def raw_frame() -> pd.DataFrame:
    """Floats with a tail beyond CAP, nullable ints with 5 % nulls, an ordered categorical,
    strings with a level outside the schema (7.5 %), a rare one (0.5 %) and 5 % nulls."""
    rng = np.random.default_rng(0)
    age = rng.integers(18, 90, ROWS).astype(float)
    age[:ROWS // 20] = np.nan
    city = rng.choice(["a", "b", "c", "zzz", "rare"], ROWS, p=[.4, .3, .22, .075, .005])
    city = city.astype(object)
    city[ROWS // 20: ROWS // 10] = None
    return pd.DataFrame({
        "income": np.exp(rng.normal(10.5, 0.8, ROWS)),
        "age": pd.array(age, dtype="Int64"),
        "grade": pd.Categorical(rng.choice(["low", "mid", "high"], ROWS, p=[.5, .3, .2]),
                                categories=["low", "mid", "high"], ordered=True),
        "city": pd.array(city, dtype="str")})


@pytest.fixture(scope="module")
def released(client, tmp_path_factory) -> tuple[Path, Path, pd.DataFrame]:
    """The raw table as Parquet, and its release at ε = 10 (seeded)."""
    root = tmp_path_factory.mktemp("columns")
    frame = raw_frame()
    frame.to_parquet(root / "raw.parquet")
    Synthesizer.create("marginals", load_schema(SCHEMA), epsilon=10.0, ledger=False,
                       noise_sampler="numpy", noise_seed=1).fit(root / "raw.parquet").write(
        root / "release", ROWS, seed=0)
    return root / "raw.parquet", root / "release", frame


def test_issue65_report_columns_clamped_tail_lost_level_nulls_and_types(released):
    raw, release, frame = released
    comparison = compare_columns(raw, release, load_schema(SCHEMA))
    table = comparison.table
    assert list(table.index) == ["income", "age", "grade", "city"]
    assert table.equals(column_report(raw, release, load_schema(SCHEMA)))
    # Arrow types as stored: the ordered dictionary in, the release's text out
    assert table.loc["grade", "type_in"] == "dictionary<values=string, indices=int8, ordered=1>"
    assert table.loc["grade", "type_out"] == "large_string"
    assert (table.loc["income", "type_in"], table.loc["income", "type_out"]) == ("double",
                                                                                 "double")
    assert (table.loc["age", "type_in"], table.loc["age", "type_out"]) == ("int64", "int64")

    # The clamped tail: every real value above CAP is released below it, so the CDFs differ by
    # the tail's share at CAP, while the top bin's share, which counts the tail, looks right.
    # (ε = 10 on 20,000 rows: the noise moves a bin's share by ~0.001.)
    tail = float((frame["income"] >= CAP).mean())
    assert tail > 0.08
    synthetic = pd.read_parquet(release / "synthetic.parquet")
    assert (synthetic["income"] >= 60_000).mean() == pytest.approx(
        (frame["income"] >= 60_000).mean(), abs=0.01)
    assert table.loc["income", "metric"] == "KS"
    assert table.loc["income", "ks_or_tvd"] == pytest.approx(tail, abs=0.02)
    quantiles = comparison.quantiles().set_index(["column", "table"])
    assert quantiles.loc[("income", "real"), "99%"] > CAP > quantiles.loc[
        ("income", "synthetic"), "99%"]
    histogram = comparison.histogram("income")
    beyond = histogram["low"] >= CAP
    assert histogram.loc[beyond, "real"].sum() > 0.05 and histogram.loc[beyond,
                                                                          "synthetic"].sum() == 0
    assert histogram["real"].sum() == pytest.approx(1, abs=0.003)  # the central 99.8 %

    # Synthetic ages outside the real [18, 89]: 8 in 10 of the draws in the bin [10, 20),
    # which holds 2 of the 72 ages
    assert table.loc["age", "outside_range"] == pytest.approx(0.8 * 2 / 72, abs=0.005)
    assert table.loc["age", "null_in"] == 0.05  # exact: the real rows
    assert table.loc["age", "null_out"] == pytest.approx(0.05, abs=0.005)
    assert table.loc["income", "null_in"] == table.loc["income", "null_out"] == 0

    # The level outside the categories is merged into "other" and named; the rare one is not
    city = frame["city"]
    present = city.notna()
    assert table.loc["city", "levels_lost"] == ("zzz",)
    lost = comparison.lost.set_index(["column", "level"])
    assert lost.loc[("city", "zzz"), "real share"] == pytest.approx((city == "zzz").mean())
    assert (city == "rare").mean() < LOST_SHARE
    assert "rare" not in comparison.lost["level"].tolist()
    # TVD on the texts: "zzz" and "rare" are gone, "other" is new; on the bins it is ~0
    merged = float(city[present].isin(["zzz", "rare"]).mean())
    assert table.loc["city", "metric"] == "TVD"
    assert table.loc["city", "ks_or_tvd"] == pytest.approx(merged, abs=0.01)
    assert table.loc["city", "null_in"] == 0.05
    assert table.loc["city", "invented_nulls"] == pytest.approx(0, abs=0.005)
    assert table.loc["grade", "ks_or_tvd"] < 0.01 and table.loc["grade", "levels_lost"] == ()
    assert (table["computed_on"] == "all values").all()


def test_issue65_report_columns_html_csv_and_draft_epsilon(released, tmp_path):
    raw, release, _ = released
    _, paths = write_evaluation(raw, release, load_schema(SCHEMA), tmp_path / "eval",
                                q3_sample=20)
    page = (tmp_path / "eval" / REPORT_NAME).read_text()
    assert '<h2 id="columns">Columns</h2>' in page
    assert "<td>zzz</td>" in page  # the lost level, named
    for name in ("income", "age"):
        assert f'alt="{name}: raw values, real vs synthetic"' in page
    assert "<td>dictionary&lt;values=string, indices=int8, ordered=1&gt;</td>" in page
    # the draft's ε beside the release's, and their sum
    privacy = json.loads((release / "metadata.json").read_text())["privacy"]
    together = privacy["schema_drafted_under_dp"]["with_this_release"]
    assert "<td>drafting its schema (under DP)</td>\n      <td>0.5</td>" in page
    assert f"<td>this release</td>\n      <td>{privacy['epsilon']}</td>" in page
    assert f"<td>{together['epsilon']}</td>" in page and together["epsilon"] == 10.5
    columns = pd.read_csv(paths["columns"], comment="#").set_index("column")
    assert OWNER_ONLY in paths["columns"].read_text().splitlines()[0].lower()
    assert columns.loc["city", "levels_lost"] == "zzz"


def test_issue65_report_columns_printed_by_the_cli_for_a_csv(released, client, tmp_path,
                                                            capsys):
    _, release, frame = released
    frame.to_csv(tmp_path / "raw.csv", index=False)  # nulls as empty cells
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    assert main(["evaluate", "--data", str(tmp_path / "raw.csv"), "--synthetic", str(release),
                 "--schema", str(tmp_path / "schema.json"), "--q3-sample", "20",
                 "--scheduler", client.scheduler.address, "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "columns (each raw column against the released one):" in printed
    row = next(line for line in printed.splitlines() if line.startswith("| city |"))
    assert f"| {CSV_TEXT} | large_string | TVD |" in row and "| zzz |" in row
    assert "| city | zzz |" in printed  # the lost levels' table


def test_text_counts_keep_the_common_texts_past_their_limit():
    """Past ``limit`` distinct texts a Misra–Gries summary: texts more common than the rows it
    no longer counts / (limit + 1) stay, each count low by at most that."""
    attribute = load_schema(SCHEMA)["city"]
    common = {"a": 3000, "b": 2000, "c": 1000}
    texts = np.array([t for t, k in common.items() for _ in range(k)]
                     + [f"u{i}" for i in range(4000)], dtype=object)
    frames = [pd.DataFrame({"city": pd.array(texts[i::4], dtype="str")}) for i in range(4)]
    (merged,) = merge_texts([text_partition(f, (attribute,), True, 10) for f in frames], 10)
    assert len(merged.texts) <= 10 and (merged.rows, merged.nulls) == (10_000, 0)
    counts = dict(zip(merged.texts, merged.counts))
    bound = merged.uncounted / 11
    for text, count in common.items():
        assert count - bound <= counts[text] <= count
    (exact,) = merge_texts([text_partition(f, (attribute,), True, 10_000) for f in frames],
                           10_000)
    assert exact.uncounted == 0 and dict(zip(exact.texts, exact.counts))["a"] == 3000
