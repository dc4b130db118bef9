"""Can a model be trained on the release? Train-on-synthetic / test-on-real, and SDMetrics-style
column-shape and column-pair scores: what ``dp-dask evaluate --target`` adds.

Downstream task: logistic regression and gradient boosting (scikit-learn) trained once on the
release and once on the real training rows, both tested on the same real held-out rows.
Features: every attribute but the target, one-hot over its schema labels (bins), read the same
way from the real table and the release, so the two trainings differ only in their rows. The
held-out rows are ``--test-data`` where given (rows the release never saw); otherwise a fixed
split of the real table: a row is held out when a seeded hash of its values falls in the lowest
``TEST_SHARE`` (equal rows on the same side, whatever their order in the file). Where the
release was fitted on that table, its test rows were also in the release's input: the real
model is then tested on rows it never saw, the release's model on rows its data saw.
Classification (a categorical or boolean target) reports accuracy, AUC (one-vs-rest macro for
more than two classes) and F1 (the positive class: the target's second label; macro otherwise);
a numeric target, R² and MAE of its values.

Scores (SDMetrics' "quality report", by our own code): column shapes, 1 − KS of a numeric
column's values (where both tables hold values) else 1 − TV of its label shares; column pairs,
for two value columns 1 − |Pearson's r real − synthetic| / 2, else 1 − TV of their 2-way label
table. The summary is the mean of the two means.

PRIVACY: exact functions of the raw data, for the data owner only (evaluate's output, never a
release).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import ks_2samp

from dp_dask.data.io import TableSource, read_table
from dp_dask.data.schema import Schema
from dp_dask.evaluate.queries import labels_frame, release_labels, tvd

TEST_SHARE = 0.3
# rows each model is trained on at most (a seeded sample of a larger table or release)
MAX_TRAIN_ROWS = 100_000
MAX_SCORE_ROWS = 100_000


class TaskError(ValueError):
    """A target the downstream task cannot be set up for."""


@dataclass(frozen=True)
class Tables:
    """Rows of a table as its schema labels and, per numeric attribute, its values (NaN where
    the table holds none)."""

    labels: pd.DataFrame
    values: pd.DataFrame


def _tables(source: TableSource, schema: Schema, real: bool, rows: int, seed: int) -> Tables:
    labels = (labels_frame if real else release_labels)(source, schema)
    raw = read_table(source, schema)
    labels, raw = labels.compute(), raw.compute()
    labels.index = raw.index = pd.RangeIndex(len(labels))
    if len(labels) > rows:
        keep = np.sort(np.random.default_rng(seed).choice(len(labels), rows, replace=False))
        labels, raw = labels.iloc[keep].reset_index(drop=True), raw.iloc[keep].reset_index(
            drop=True)
    values = {}
    for attribute in schema.attributes:
        column = attribute.read_column(raw.columns)
        if attribute.kind == "numeric" and column in raw:
            series = raw[column]
            numeric = (pd.api.types.is_numeric_dtype(series.dtype) if not real
                       else True) and not isinstance(series.dtype, pd.CategoricalDtype)
            values[attribute.name] = (pd.to_numeric(series, errors="coerce").astype(float)
                                      if numeric else pd.Series(np.nan, index=series.index))
    return Tables(labels, pd.DataFrame(values, index=labels.index))


def held_out(labels: pd.DataFrame, seed: int, share: float = TEST_SHARE) -> np.ndarray:
    """Per row, whether it is a test row: a seeded hash of its labels below ``share``."""
    hashes = pd.util.hash_pandas_object(labels.astype(str), index=False,
                                        hash_key=f"{seed:016d}"[:16]).to_numpy()
    return hashes < np.uint64(share * 2.0**64)


def _features(labels: pd.DataFrame, target: str) -> pd.DataFrame:
    return labels.drop(columns=[target]).astype(str)


def _models(classification: bool, seed: int) -> dict[str, Any]:
    from sklearn.compose import make_column_transformer
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder

    def encoded(model: Any) -> Any:  # dense: the boosting takes no sparse input
        return make_pipeline(make_column_transformer(
            (OneHotEncoder(handle_unknown="ignore", sparse_output=False), slice(None))), model)

    if classification:
        return {"logistic_regression": encoded(LogisticRegression(max_iter=2000)),
                "gradient_boosting": encoded(HistGradientBoostingClassifier(random_state=seed))}
    return {"linear_regression": encoded(LinearRegression()),
            "gradient_boosting": encoded(HistGradientBoostingRegressor(random_state=seed))}


def _scores(model: Any, x: pd.DataFrame, y: np.ndarray, classes: list[str],
            classification: bool) -> dict[str, float]:
    from sklearn.metrics import (
        accuracy_score,
        f1_score,
        mean_absolute_error,
        r2_score,
        roc_auc_score,
    )

    predicted = model.predict(x)
    if not classification:
        return {"r2": float(r2_score(y, predicted)),
                "mae": float(mean_absolute_error(y, predicted))}
    scores = {"accuracy": float(accuracy_score(y, predicted))}
    known = list(model.classes_)
    probabilities = model.predict_proba(x)
    if len(classes) == 2:
        positive = classes[1]
        column = known.index(positive) if positive in known else None
        scores["auc"] = (float(roc_auc_score(y == positive, probabilities[:, column]))
                         if column is not None and len(set(y)) == 2 else float("nan"))
        scores["f1"] = float(f1_score(y, predicted, pos_label=positive, zero_division=0))
    else:  # one-vs-rest, the mean over the classes the model knows and the test rows hold
        aucs = [roc_auc_score(y == label, probabilities[:, k]) for k, label in enumerate(known)
                if 0 < (y == label).sum() < len(y)]
        scores["auc"] = float(np.mean(aucs)) if aucs else float("nan")
        scores["f1"] = float(f1_score(y, predicted, average="macro", zero_division=0))
    return scores


def downstream_task(real: Tables, test: Tables, synthetic: Tables, schema: Schema,
                    target: str, seed: int = 0) -> dict[str, Any]:
    """Each model trained on the real training rows and on the release, tested on ``test``."""
    attribute = schema[target]
    classification = attribute.kind != "numeric"
    classes = list(attribute.labels)
    runs: dict[str, dict[str, Any]] = {}
    for trained_on, table in (("real", real), ("synthetic", synthetic)):
        x = _features(table.labels, target)
        y = (table.labels[target].astype(str).to_numpy() if classification
             else table.values[target].to_numpy())
        keep = np.ones(len(y), dtype=bool) if classification else np.isfinite(y)
        if classification and len(set(y)) < 2:
            raise TaskError(f"--target {target!r}: the {trained_on} training rows hold one "
                            "class only")
        if not classification and not keep.any():
            raise TaskError(f"--target {target!r}: the {trained_on} rows hold no values of it "
                            "(a label release?)")
        test_y = (test.labels[target].astype(str).to_numpy() if classification
                  else test.values[target].to_numpy())
        test_keep = np.ones(len(test_y), dtype=bool) if classification else np.isfinite(test_y)
        for name, model in _models(classification, seed).items():
            model.fit(x[keep], y[keep])
            runs.setdefault(name, {})[trained_on] = _scores(
                model, _features(test.labels, target)[test_keep], test_y[test_keep], classes,
                classification)
    return {"target": target, "task": "classification" if classification else "regression",
            "train_rows": {"real": len(real.labels), "synthetic": len(synthetic.labels)},
            "test_rows": len(test.labels), "models": runs}


def _tv(a: pd.Series, b: pd.Series) -> float:
    """Total variation between two columns' value shares, their levels aligned."""
    counts = pd.concat([a.value_counts(), b.value_counts()], axis=1).fillna(0.0).to_numpy()
    return tvd(counts[:, 0], counts[:, 1])


def _with_values(real: Tables, synthetic: Tables, name: str) -> bool:
    return (name in real.values and name in synthetic.values
            and real.values[name].notna().any() and synthetic.values[name].notna().any())


def quality_scores(real: Tables, synthetic: Tables, schema: Schema) -> dict[str, Any]:
    """Column shapes and column pairs (module docstring), each per column / pair and as a
    mean, and their mean: one summary figure per release."""
    shapes = {}
    for name in schema.names:
        if _with_values(real, synthetic, name):
            a, b = real.values[name].dropna(), synthetic.values[name].dropna()
            shapes[name] = {"metric": "1 - KS", "score": 1 - float(ks_2samp(a, b).statistic)}
        else:
            shapes[name] = {"metric": "1 - TV", "score": 1 - _tv(real.labels[name].astype(str),
                                                                 synthetic.labels[name].astype(str))}
    pairs = {}
    for first, second in itertools.combinations(schema.names, 2):
        if _with_values(real, synthetic, first) and _with_values(real, synthetic, second):
            r = [table.values[[first, second]].dropna().corr().iloc[0, 1]
                 for table in (real, synthetic)]
            score = 1 - abs(np.nan_to_num(r[0]) - np.nan_to_num(r[1])) / 2
            metric = "correlation similarity"
        else:
            joined = [table.labels[first].astype(str) + "\x1f" + table.labels[second].astype(str)
                      for table in (real, synthetic)]
            score, metric = 1 - _tv(*joined), "contingency similarity"
        pairs[f"{first} | {second}"] = {"metric": metric, "score": float(score)}
    shape_mean = float(np.mean([s["score"] for s in shapes.values()]))
    pair_mean = float(np.mean([s["score"] for s in pairs.values()])) if pairs else shape_mean
    return {"column_shapes": shape_mean, "column_pairs": pair_mean,
            "summary": (shape_mean + pair_mean) / 2, "per_column": shapes, "per_pair": pairs}


def evaluate_tasks(data: TableSource, synthetic: TableSource, schema: Schema, *,
                   target: str | None, test_data: TableSource | None = None,
                   seed: int = 0) -> dict[str, Any]:
    """The quality scores of ``synthetic`` against ``data`` and, with ``target``, the
    downstream task (module docstring): evaluate's ``tasks.json``."""
    if target is not None and target not in schema.names:
        raise TaskError(f"--target {target!r} is no attribute of schema {schema.name!r}")
    real = _tables(data, schema, True, 10 * MAX_TRAIN_ROWS, seed)
    released = _tables(synthetic, schema, False, MAX_TRAIN_ROWS, seed)
    result: dict[str, Any] = {"quality": quality_scores(_head(real, MAX_SCORE_ROWS, seed),
                                                        _head(released, MAX_SCORE_ROWS, seed),
                                                        schema)}
    if target is None:
        return result
    if test_data is not None:
        train, test = _head(real, MAX_TRAIN_ROWS, seed), _tables(test_data, schema, True,
                                                                 MAX_TRAIN_ROWS, seed)
        split = "--test-data"
    else:
        test_rows = held_out(real.labels, seed)
        train = _head(_rows(real, ~test_rows), MAX_TRAIN_ROWS, seed)
        test = _rows(real, test_rows)
        split = (f"a seeded hash (seed {seed}) of each real row's labels: "
                 f"{TEST_SHARE:.0%} held out")
    result["downstream"] = downstream_task(train, test, released, schema, target, seed) | {
        "test_split": split}
    return result


def _rows(tables: Tables, keep: np.ndarray) -> Tables:
    return Tables(tables.labels[keep].reset_index(drop=True),
                  tables.values[keep].reset_index(drop=True))


def _head(tables: Tables, rows: int, seed: int) -> Tables:
    """At most ``rows`` rows, a seeded sample."""
    if len(tables.labels) <= rows:
        return tables
    keep = np.zeros(len(tables.labels), dtype=bool)
    keep[np.random.default_rng(seed).choice(len(keep), rows, replace=False)] = True
    return _rows(tables, keep)


def tasks_tables(result: dict[str, Any]) -> dict[str, pd.DataFrame]:
    """The downstream task side by side (model × metric: real-trained, release-trained) and
    the quality summary, as tables for the report."""
    quality = result["quality"]
    tables = {"quality": pd.DataFrame([{"column shapes": quality["column_shapes"],
                                        "column pairs": quality["column_pairs"],
                                        "summary": quality["summary"]}])}
    if "downstream" in result:
        rows = []
        for model, runs in result["downstream"]["models"].items():
            for metric in runs["real"]:
                rows.append({"model": model, "metric": metric, "trained on real":
                             runs["real"][metric], "trained on release":
                             runs["synthetic"][metric]})
        tables["downstream"] = pd.DataFrame(rows)
    return tables
