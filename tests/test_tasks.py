"""``dp-dask evaluate --target``: train on the release / test on real rows, and the
SDMetrics-style quality scores, on Adult and a real LocalCluster; the report in a browser."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from test_report_html import rendered

from dp_dask.cli import main
from dp_dask.data.schema import load_schema
from dp_dask.evaluate.html import REPORT_NAME, TASKS_NAME
from dp_dask.evaluate.tasks import Tables, TaskError, evaluate_tasks, held_out, quality_scores
from dp_dask.synthesizer import Synthesizer


@pytest.fixture(scope="module")
def release(client, adult_csv, tmp_path_factory):
    path = tmp_path_factory.mktemp("tasks") / "release"
    with pytest.warns(Warning):  # Adult's open bins without public max
        Synthesizer.create("marginals", "adult", epsilon=1.0, noise_sampler="numpy",
                           noise_seed=0, ledger=False).fit(adult_csv).write(path, seed=0)
    return path


@pytest.fixture(scope="module")
def evaluated(client, adult_csv, release):
    out = release.parent / "eval"
    assert main(["evaluate", "--data", str(adult_csv), "--synthetic", str(release),
                 "--schema", "adult", "--out", str(out), "--target", "income",
                 "--q3-sample", "40", "--scheduler", client.scheduler.address,
                 "--quiet"]) == 0
    return out


@pytest.mark.extended  # its fixture trains on Adult's real and released rows
def test_tasks_json_holds_both_trainings_side_by_side(evaluated):
    tasks = json.loads((evaluated / TASKS_NAME).read_text())
    task = tasks["downstream"]
    assert task["target"] == "income" and task["task"] == "classification"
    assert set(task["models"]) == {"logistic_regression", "gradient_boosting"}
    for runs in task["models"].values():
        assert set(runs) == {"real", "synthetic"}
        assert set(runs["real"]) == set(runs["synthetic"]) == {"accuracy", "auc", "f1"}
        assert runs["real"]["accuracy"] > 0.8  # Adult's income: ~0.85 for both models
        assert runs["real"]["auc"] > 0.85
        # the release at ε = 1 loses a few points, and is far above the majority class (0.76)
        assert 0.78 < runs["synthetic"]["accuracy"] <= runs["real"]["accuracy"] + 0.02
        assert 0.5 < runs["synthetic"]["auc"] <= 1
    assert task["test_rows"] + task["train_rows"]["real"] == 32561
    quality = tasks["quality"]
    assert 0.9 < quality["column_shapes"] <= 1 and 0.9 < quality["column_pairs"] <= 1
    assert quality["summary"] == pytest.approx((quality["column_shapes"]
                                                + quality["column_pairs"]) / 2)
    assert quality["per_column"]["age"]["metric"] == "1 - KS"
    assert quality["per_column"]["sex"]["metric"] == "1 - TV"
    assert quality["per_pair"]["age | fnlwgt"]["metric"] == "correlation similarity"


@pytest.mark.extended
def test_report_holds_the_task_table(evaluated):
    page = (evaluated / REPORT_NAME).read_text()
    tasks = json.loads((evaluated / TASKS_NAME).read_text())
    assert "Downstream task: income" in page
    assert "<th>trained on real</th>" in page and "<th>trained on release</th>" in page
    accuracy = tasks["downstream"]["models"]["gradient_boosting"]["real"]["accuracy"]
    assert f"<td>{accuracy:.4g}</td>" in page
    assert f"<td>{tasks['quality']['summary']:.4g}</td>" in page


def test_browser_renders_the_task_tables(evaluated, tmp_path):
    _, result = rendered(evaluated / REPORT_NAME, tmp_path)
    # privacy, distances, (α, β), shares, values, quantiles, the columns section's three
    # (columns, lost levels, their quantiles); then quality and the task
    assert result["tables"] == 11


def test_a_numeric_target_reports_r2_and_mae(client, adult_csv, release):
    tasks = evaluate_tasks(adult_csv, release, load_schema("adult"), target="age")
    runs = tasks["downstream"]["models"]
    assert set(runs) == {"linear_regression", "gradient_boosting"}
    for run in runs.values():
        assert set(run["real"]) == {"r2", "mae"}
        assert 0.2 < run["real"]["r2"] < 1 and run["real"]["mae"] < 12
        assert run["synthetic"]["r2"] > 0


def test_held_out_rows_depend_on_their_values_not_their_place():
    labels = pd.DataFrame({"a": list("xyzxyzxxyz") * 30, "b": [str(i % 7) for i in range(300)]})
    test = held_out(labels, seed=0)
    order = np.random.default_rng(1).permutation(len(labels))
    assert np.array_equal(held_out(labels.iloc[order].reset_index(drop=True), seed=0),
                          test[order])
    assert 0.15 < test.mean() < 0.45
    assert not np.array_equal(held_out(labels, seed=1), test)


def test_identical_tables_score_one_and_shuffled_pairs_less():
    rng = np.random.default_rng(0)
    x = rng.normal(size=2000)
    schema = load_schema({"name": "t", "attributes": [
        {"name": "x", "type": "numeric", "edges": [-10, 0, 10]},
        {"name": "y", "type": "numeric", "edges": [-10, 0, 10]},
        {"name": "c", "type": "categorical", "categories": ["p", "q"]}]})
    labels = pd.DataFrame({"x": np.where(x < 0, "a", "b"), "y": np.where(x < 0, "a", "b"),
                           "c": np.where(x < 0, "p", "q")})
    table = Tables(labels, pd.DataFrame({"x": x, "y": x + 0.1 * rng.normal(size=2000)}))
    scores = quality_scores(table, table, schema)
    assert scores["summary"] == pytest.approx(1.0)
    shuffled = Tables(labels.assign(c=rng.permutation(labels["c"])),
                      table.values.assign(y=rng.permutation(table.values["y"])))
    worse = quality_scores(table, shuffled, schema)
    assert worse["column_shapes"] == pytest.approx(1.0)  # each column's shape is unchanged
    assert worse["per_pair"]["x | y"]["score"] < 0.6  # r ≈ 1 against ≈ 0
    assert worse["per_pair"]["x | c"]["score"] < 0.6


def test_an_unknown_target_is_refused(adult_csv):
    with pytest.raises(TaskError, match="'salary' is no attribute"):
        evaluate_tasks(adult_csv, adult_csv, load_schema("adult"), target="salary")
