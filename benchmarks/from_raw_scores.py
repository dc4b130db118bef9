"""Scores of one release against its raw table, for docs/from-raw.md (benchmarks.from_raw).

* per column, :func:`dp_dask.evaluate.columns.column_report` (Arrow type in and out, KS of a
  numeric or timestamp column, TVD of a text one, the share of values outside the real range,
  null shares in and out, the levels holding ≥ 1 % of the rows that the release lost), read
  through one evaluation schema per table (:func:`evaluation_schema`) whatever the path, so that
  every path (a peer's too) is compared column for column the same way; beside it, the real
  levels the release holds at all (``levels_present``), to set against a peer that copies the
  data's level list;
* point masses (:func:`point_masses`): per numeric column whose most common exact value holds at
  least ``POINT_MASS`` of its non-null rows, that value's share, real and released;
* pairs (:func:`pairs`): Pearson and Spearman of the three real numeric pairs with the largest
  |Spearman|, real and released; Cramér's V of the real text pair with the largest V;
* train on synthetic, test on real (:func:`train_on_synthetic`): scikit-learn's
  HistGradientBoosting trained on the release and, for reference, on the real input, each
  tested on the held-out real rows (:mod:`benchmarks.raw_tables`), for the table's target.

An evaluation for the data owner: it reads raw values and is not differentially private.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from scipy.stats import chi2_contingency

from benchmarks.raw_tables import Target
from dp_dask.data.attribute import Attribute
from dp_dask.data.draft import draft_schema
from dp_dask.data.schema import Schema, load_schema
from dp_dask.evaluate.columns import LOST_SHARE, REPORT_COLUMNS, TEXT_KINDS, column_report
from dp_dask.release import checked_table

POINT_MASS = 0.05  # a value holding this share of a numeric column's rows is a point mass
STRONGEST_PAIRS = 3
TSTR_SEED = 0
LEFT_OUT = "left out"  # the type out of a column the release does not hold


def evaluation_schema(data: Path) -> Schema:
    """The lens every path's release is read through: the raw table's storage types, one bin
    over each numeric column's real range, each timestamp's real years, its text columns' own
    values as a "public sample" (their categories): an evaluation schema, never one a release
    is drafted with (its bins do not matter: values beyond them are compared too)."""
    arrow = pq.read_schema(data)
    spans = [f.name for f in arrow if pa.types.is_timestamp(f.type) or _numeric_like(f)]
    frame = pd.read_parquet(data, columns=spans)
    ranges = {}
    for name in spans:
        column = frame[name].dropna()
        if pa.types.is_timestamp(arrow.field(name).type):  # its years, a bin each
            years = column.dt.year
            low, high = (int(years.min()), int(years.max())) if len(years) else (1970, 1970)
            ranges[name] = {"start": low, "stop": high + 1, "step": 1}
        else:
            low, high = ((math.floor(column.min()), math.floor(column.max())) if len(column)
                         else (0, 0))
            ranges[name] = {"start": low, "stop": high + 1, "step": high + 1 - low}
    draft = draft_schema(data, public=data, public_types=True, ranges=ranges)
    return load_schema(draft.schema)


def read_release(release: Path) -> pd.DataFrame:
    """A release (a dp_dask release directory, or a peer's Parquet file) as one frame."""
    table = checked_table(release)
    return table.compute() if hasattr(table, "compute") else pd.read_parquet(table)


def _text_like(field: pa.Field) -> bool:
    kind = field.type
    return (pa.types.is_string(kind) or pa.types.is_large_string(kind)
            or pa.types.is_dictionary(kind) or pa.types.is_boolean(kind))


def _numeric_like(field: pa.Field) -> bool:
    return pa.types.is_integer(field.type) or pa.types.is_floating(field.type)


def _texts(column: pd.Series) -> pd.Series:
    return column.astype(object).where(column.notna(), None).map(
        lambda value: None if value is None else str(value))


def _numbers(column: pd.Series) -> pd.Series:
    if pd.api.types.is_datetime64_any_dtype(column):
        return column.astype("int64").where(column.notna()).astype(float)
    return pd.to_numeric(column, errors="coerce").astype(float)


def released_part(schema: Schema, released: Iterable[str]) -> Schema | None:
    """The evaluation schema's attributes that the release holds (a timestamp through its
    column or its features' own); None where it holds none of them."""
    present = set(released)
    kept = tuple(a for a in schema.attributes if a.read_column(present) in present)
    return dataclasses.replace(schema, attributes=kept) if kept else None


def left_out_row(attribute: Attribute, real: pd.Series, type_in: str) -> dict[str, Any]:
    """A column the release left out, counted as lost: KS or TVD 1, every level with ≥ 1 %
    of the rows lost, no type out (``LEFT_OUT``), nothing released to be out of range."""
    text = attribute.kind in TEXT_KINDS
    shares = _texts(real).value_counts() / max(len(real), 1)
    return {"kind": attribute.kind, "type_in": type_in, "type_out": LEFT_OUT,
            "metric": "TVD" if text else "KS", "ks_or_tvd": 1.0, "outside_range": None,
            "null_in": float(real.isna().mean()) if len(real) else None, "null_out": None,
            "invented_nulls": None,
            "levels_lost": list(shares[shares >= LOST_SHARE].index) if text else [],
            "computed_on": "left out of the release: counted as lost"}


def columns(data: Path, release: Path, schema: Schema, real: pd.DataFrame,
            synthetic: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per input column: column_report's row (:func:`left_out_row` for a column the release
    left out), and for a text column its real levels, those holding ≥ 1 % of the rows, and how
    many of all the real levels the release holds."""
    compared = released_part(schema, synthetic.columns)
    report = (column_report(data, release, compared) if compared is not None
              else pd.DataFrame(columns=list(REPORT_COLUMNS)))
    fields = {f.name: f for f in pq.read_schema(data)}
    rows = {str(name): {key: (None if isinstance(value, float) and math.isnan(value) else value)
                        for key, value in row.items()} for name, row in report.iterrows()}
    for attribute in schema.attributes:
        if attribute.column not in rows:
            rows[attribute.column] = left_out_row(attribute, real[attribute.column],
                                                  str(fields[attribute.column].type))
    found: dict[str, dict[str, Any]] = {}
    for name in schema.columns:  # the input's order, a left-out column in its place
        entry = rows[name]
        entry["levels_lost"] = list(entry["levels_lost"])
        entry["same_type"] = entry["type_in"] == entry["type_out"]
        if _text_like(fields[name]):
            shares = _texts(real[name]).value_counts(normalize=False) / len(real)
            held = set(_texts(synthetic[name]).dropna()) if name in synthetic else set()
            entry |= {"levels": len(shares),
                      "levels_common": int((shares >= LOST_SHARE).sum()),
                      "levels_present": int(sum(level in held for level in shares.index))}
        found[str(name)] = entry
    for name in fields.keys() - found.keys():  # not in the evaluation schema (an identifier)
        found[name] = {"type_in": str(fields[name].type), "metric": "",
                       "computed_on": "not compared: an identifier"}
    return found


def point_masses(real: pd.DataFrame, synthetic: pd.DataFrame,
                 fields: dict[str, pa.Field]) -> dict[str, dict[str, float]]:
    """Per numeric column, its most common exact value when it holds ≥ ``POINT_MASS`` of the
    non-null rows: that value's share of the non-null rows, real and released."""
    found = {}
    for name, field in fields.items():
        if not _numeric_like(field):
            continue
        values = _numbers(real[name]).dropna()
        if values.empty:
            continue
        counts = values.value_counts(normalize=True)
        if counts.iloc[0] < POINT_MASS:
            continue
        released = (_numbers(synthetic[name]).dropna() if name in synthetic
                    else pd.Series(dtype=float))
        value = float(counts.index[0])
        share = float((released == value).mean()) if len(released) else 0.0
        found[name] = {"value": value, "real": float(counts.iloc[0]), "released": share}
    return found


def _cramers_v(a: pd.Series, b: pd.Series) -> float:
    table = pd.crosstab(a, b)
    if min(table.shape) < 2:
        return 0.0
    chi2 = chi2_contingency(table, correction=False)[0]
    return float(math.sqrt(chi2 / table.to_numpy().sum() / (min(table.shape) - 1)))


def pairs(real: pd.DataFrame, synthetic: pd.DataFrame,
          fields: dict[str, pa.Field]) -> dict[str, Any]:
    """The three real numeric pairs with the largest |Spearman| (pairwise-complete rows, no
    constant column): Pearson and Spearman, real and released; the real text pair with the
    largest Cramér's V (nulls a level of their own): V real and released."""
    numeric = [n for n, f in fields.items() if _numeric_like(f)
               and _numbers(real[n]).nunique() > 1]
    found: dict[str, Any] = {"numeric": [], "categorical": None}
    if len(numeric) >= 2:
        real_numbers = pd.DataFrame({n: _numbers(real[n]) for n in numeric})
        spearman = real_numbers.corr(method="spearman")
        ranked = sorted(((abs(spearman.loc[a, b]), a, b) for i, a in enumerate(numeric)
                         for b in numeric[i + 1:] if np.isfinite(spearman.loc[a, b])),
                        reverse=True)[:STRONGEST_PAIRS]
        for _, a, b in ranked:
            entry = {"pair": [a, b]}
            for side, frame in (("real", real), ("released", synthetic)):
                x = _numbers(frame[a]) if a in frame else pd.Series(dtype=float)
                y = _numbers(frame[b]) if b in frame else pd.Series(dtype=float)
                for method in ("pearson", "spearman"):
                    value = x.corr(y, method=method) if len(x) else np.nan
                    entry[f"{method}_{side}"] = None if pd.isna(value) else float(value)
            found["numeric"].append(entry)
    texts = [n for n, f in fields.items() if _text_like(f)]
    if len(texts) >= 2:
        as_text = {n: _texts(real[n]).fillna("<null>") for n in texts}
        v, a, b = max((_cramers_v(as_text[a], as_text[b]), a, b)
                      for i, a in enumerate(texts) for b in texts[i + 1:])
        released = (_cramers_v(_texts(synthetic[a]).fillna("<null>"),
                               _texts(synthetic[b]).fillna("<null>"))
                    if a in synthetic and b in synthetic else None)
        found["categorical"] = {"pair": [a, b], "v_real": v, "v_released": released}
    return found


def _features(frame: pd.DataFrame, fields: dict[str, pa.Field], target: str,
              levels: dict[str, list[str]]) -> pd.DataFrame:
    """The model's inputs: numbers as floats (a timestamp as seconds), text as codes of the real
    input's levels (a level the input lacks: missing)."""
    columns = {}
    for name, field in fields.items():
        if name == target:
            continue
        values = frame[name] if name in frame else pd.Series(np.nan, index=frame.index)
        if _text_like(field):
            texts = _texts(values)
            codes = pd.Categorical(texts.where(texts.isin(levels[name])),
                                   categories=levels[name]).codes
            columns[name] = np.where(codes < 0, np.nan, codes)
        else:
            columns[name] = _numbers(values).to_numpy()
    return pd.DataFrame(columns, index=frame.index)


def _fit_score(train: pd.DataFrame, test: pd.DataFrame, fields: dict[str, pa.Field],
               target: Target, levels: dict[str, list[str]]) -> float | None:
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
    from sklearn.metrics import r2_score, roc_auc_score

    if target.column not in train:
        return None
    if target.task == "classification":
        y_train = (_texts(train[target.column]) == target.positive).to_numpy()
        y_test = (_texts(test[target.column]) == target.positive).to_numpy()
        if y_train.all() or not y_train.any():
            return 0.5  # a release holding one class: a constant guess
    else:
        y_train, y_test = (_numbers(frame[target.column]) for frame in (train, test))
        train, test = train[y_train.notna()], test[y_test.notna()]
        y_train, y_test = y_train.dropna().to_numpy(), y_test.dropna().to_numpy()
        if train.empty:
            return None
    x_train, x_test = (_features(frame, fields, target.column, levels) for frame in (train, test))
    # a column the release left out (or holds only nulls of) teaches the model nothing, and
    # the model cannot bin a feature with no value: the model goes without it
    held = [name for name in x_train if x_train[name].notna().any()]
    x_train, x_test = x_train[held], x_test[held]
    categorical = [name for name in levels if name in held] or None
    if target.task == "classification":
        model = HistGradientBoostingClassifier(categorical_features=categorical,
                                               random_state=TSTR_SEED).fit(x_train, y_train)
        return float(roc_auc_score(y_test, model.predict_proba(x_test)[:, 1]))
    model = HistGradientBoostingRegressor(categorical_features=categorical,
                                          random_state=TSTR_SEED).fit(x_train, y_train)
    return float(r2_score(y_test, model.predict(x_test)))


def train_on(train: pd.DataFrame, real: pd.DataFrame, holdout: pd.DataFrame,
             fields: dict[str, pa.Field], target: Target) -> float | None:
    """The target's score (ROC AUC, or R²) on the held-out real rows of a model trained on
    ``train`` (a release, or the real input itself), its text columns coded by the real input's
    levels."""
    levels = {n: sorted(_texts(real[n]).dropna().unique()) for n, f in fields.items()
              if _text_like(f)}
    levels = {n: v for n, v in levels.items() if len(v) <= 255}  # the model's category limit
    usable = {n: f for n, f in fields.items() if not _text_like(f) or n in levels}
    return _fit_score(train, holdout, usable, target, levels)


def score(data: Path, holdout: Path, release: Path, schema: Schema,
          target: Target) -> dict[str, Any]:
    """Every score of :mod:`benchmarks.from_raw_scores` for one release (the train-on-real
    reference is the table's, :func:`train_on` the input)."""
    real, held, synthetic = pd.read_parquet(data), pd.read_parquet(holdout), read_release(release)
    fields = {f.name: f for f in pq.read_schema(data)}
    per_column = columns(data, release, schema, real, synthetic)
    return {"columns": per_column, "point_masses": point_masses(real, synthetic, fields),
            "pairs": pairs(real, synthetic, fields),
            "train_on_synthetic": train_on(synthetic, real, held, fields, target)}
