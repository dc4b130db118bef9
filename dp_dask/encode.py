"""Encode one partition: raw columns → one small integer code per attribute and row.

The dummy (one-hot) matrix is never built: a row's dummy column for attribute i is
``schema.offsets[i] + codes[i, row]``. Values outside the public domain follow the schema's
declared rule (error, or a public bin); no rule ever depends on the data.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dp_dask.schema import ERROR, Attribute, Schema


class EncodingError(ValueError):
    """The input does not fit the public schema."""


def code_dtype(schema: Schema) -> np.dtype:
    """The smallest signed integer type holding every code (int8 for domains up to 127)."""
    return np.dtype(np.int8) if schema.sizes.max() <= 127 else np.dtype(np.int16)


def check_columns(columns: list[str] | pd.Index, schema: Schema) -> None:
    """Raise if the input lacks an attribute of the schema (extra columns are ignored)."""
    missing = [name for name in schema.names if name not in set(columns)]
    if missing:
        raise EncodingError(
            f"input is missing column(s) {missing} required by schema {schema.name!r}; "
            f"it has {list(columns)}"
        )


def _as_category_strings(values: pd.Series) -> pd.Series:
    """Numbers read from Parquet/CSV compare with the schema's string categories as text."""
    if pd.api.types.is_float_dtype(values):
        present = values.dropna()
        if bool((present == np.floor(present)).all()):  # 3.0 (from a NaN-holding column) is "3"
            values = values.astype("Int64")
    if pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
        return values.astype("string")
    return values


def _categorical_codes(values: pd.Series, attribute: Attribute) -> tuple[np.ndarray, np.ndarray]:
    values = _as_category_strings(values)
    missing = values.isna().to_numpy()
    codes = pd.Index(attribute.categories).get_indexer(values).astype(np.int64)  # -1: unknown
    return codes, missing


def _numeric_codes(values: pd.Series, attribute: Attribute) -> tuple[np.ndarray, np.ndarray]:
    missing = values.isna().to_numpy()
    numbers = pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    edges = np.asarray(attribute.edges)
    codes = np.searchsorted(edges, numbers, side="right") - 1
    bins = len(edges) - 1
    # Non-numeric text and values beyond the outer edges are out of domain (code -1).
    codes[(codes < 0) | (codes >= bins) | np.isnan(numbers)] = -1
    return codes, missing


def _apply_rule(codes: np.ndarray, where: np.ndarray, rule: str, attribute: Attribute,
                values: pd.Series, what: str) -> None:
    if not where.any():
        return
    if rule == ERROR:
        if what == "missing":
            problem = f"{int(where.sum())} missing value(s) (NaN/None)"
            remedy = "on_missing"
        else:
            example = values[where].iloc[0]
            example = example.item() if isinstance(example, np.generic) else example
            problem = f"out-of-domain value {example!r} ({int(where.sum())} row(s))"
            remedy = "on_unknown"
        raise EncodingError(
            f"column {attribute.name!r}: {problem} and its rule is 'error'; add the value to the "
            f"schema or map it to a public bin with {remedy}"
        )
    codes[where] = attribute.rule_code(rule)


def encode_column(values: pd.Series, attribute: Attribute) -> np.ndarray:
    """Codes in ``[0, attribute.size)`` for one column, int64."""
    if attribute.kind == "categorical":
        codes, missing = _categorical_codes(values, attribute)
    else:
        codes, missing = _numeric_codes(values, attribute)
    _apply_rule(codes, missing, attribute.on_missing, attribute, values, "missing")
    unknown = (codes < 0) & ~missing
    _apply_rule(codes, unknown, attribute.on_unknown, attribute, values, "out-of-domain")
    return codes


def encode_partition(frame: pd.DataFrame, schema: Schema) -> np.ndarray:
    """Codes of shape (m, rows): one row of codes per attribute, in the schema's order."""
    check_columns(frame.columns, schema)
    codes = np.empty((schema.m, len(frame)), dtype=code_dtype(schema))
    for i, attribute in enumerate(schema.attributes):
        codes[i] = encode_column(frame[attribute.name], attribute)
    return codes
