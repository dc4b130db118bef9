"""Encode one partition: raw columns → one small integer code per attribute and row.

The dummy (one-hot) matrix is never built: a row's dummy column for attribute i is
``schema.offsets[i] + codes[i, row]``. Values outside the public domain follow the schema's
declared rule (error, or a public bin); no rule ever depends on the data.

A row's codes are a function of its own values and the public schema alone, never of the other
rows, the partition or the column's dtype (the DP analysis relies on it: replacing one row changes
one row's codes). Categorical values are compared with the categories as text, value by value
(see :mod:`dp_dask.data.text`): 3.0 and 3 are "3", 2.5 is "2.5", True is "True". Numeric values are
parsed value by value with ``pd.to_numeric(errors="coerce")``, boolean values by their text,
datetime values with the schema's public format. A value is missing if it is a real null or its
text is in the attribute's ``missing_values``: the same rule for CSV, Parquet, pandas and Dask
input (a CSV cell is text, never a null).

An :class:`EncodingError` names the column, the number of values and the rule, never a value: it
is raised on the workers, whose logs may be a shared cluster's. The data owner can ask for the
first offending value on their own machine (``dask.config.set({"dp-dask.show-values": True})``
before starting a LocalCluster, or ``--show-values``): it is read where the encoding runs, so the
setting of the process that starts local workers reaches them, and a remote cluster's workers keep
their own (off).
"""

from __future__ import annotations

import dask
import numpy as np
import pandas as pd

from dp_dask.data.attribute import CLIP, ERROR, Attribute
from dp_dask.data.cell_search import cells_of_values
from dp_dask.data.dtypes import fine_layout
from dp_dask.data.schema import Schema
from dp_dask.data.text import category_text, value_text

# Dask config key: errors show the first offending raw value (the data owner's own machine only).
SHOW_VALUES = "dp-dask.show-values"


class EncodingError(ValueError):
    """The input does not fit the public schema (named by column, count and rule, not value)."""


def code_dtype(schema: Schema) -> np.dtype:
    """The smallest signed integer type holding every code (int8 for domains up to 127)."""
    return np.dtype(np.int8) if schema.sizes.max() <= 127 else np.dtype(np.int16)


def check_columns(columns: list[str] | pd.Index, schema: Schema) -> None:
    """Raise if the input lacks a column the schema reads (extra columns are ignored)."""
    missing = [name for name in schema.columns if name not in set(columns)]
    if missing:
        raise EncodingError(
            f"input is missing column(s) {missing} required by schema {schema.name!r}; "
            f"it has {list(columns)}"
        )


def _text_lookup(values: pd.Series, table: tuple[str, ...]) -> np.ndarray:
    """Per row, the position of the value's text (:func:`category_text`) in ``table``, or -1."""
    texts, inverse = category_text(values)
    found = pd.Index(table, dtype=object).get_indexer(texts).astype(np.int64)
    return found if inverse is None else np.append(found, -1)[inverse]  # inverse -1 → -1


def _missing(values: pd.Series, attribute: Attribute) -> np.ndarray:
    """Real nulls, and values whose text the schema lists in ``missing_values``."""
    missing = values.isna().to_numpy(dtype=bool)
    if attribute.missing_values:
        missing = missing | (_text_lookup(values, attribute.missing_values) >= 0)
    return missing


def _categorical_codes(values: pd.Series, attribute: Attribute) -> np.ndarray:
    return _text_lookup(values, attribute.categories)


def _boolean_codes(values: pd.Series, attribute: Attribute) -> np.ndarray:
    true = _text_lookup(values, attribute.true_values) >= 0
    false = _text_lookup(values, attribute.false_values) >= 0
    return np.where(true, 1, np.where(false, 0, -1)).astype(np.int64)


def _numbers(values: pd.Series) -> np.ndarray:
    """Each value as a float64, parsed on its own (NaN where it is missing or no number)."""
    return pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def _formatted(values: pd.Series, fmt: str) -> np.ndarray:
    """Each value of a numeric attribute with a public ``format`` as the number its bins hold:
    an HHMM clock time as minutes of the day (2400 is 1440; 1275, no time, is NaN), currency
    and percent text without their symbols and thousands separators ("$1,234.50" is 1234.5)."""
    if fmt in ("currency", "percent") and not pd.api.types.is_numeric_dtype(values.dtype):
        texts, inverse = category_text(values)
        stripped = pd.Series(np.asarray(texts, dtype=object)).str.replace(
            r"[\s,$€£¥%]", "", regex=True)
        numbers = pd.to_numeric(stripped, errors="coerce").to_numpy(dtype=np.float64,
                                                                    na_value=np.nan)
        return numbers if inverse is None else np.append(numbers, np.nan)[inverse]
    numbers = _numbers(values)
    if fmt != "HHMM":
        return numbers
    hours, minutes = np.floor_divide(numbers, 100), np.mod(numbers, 100)
    valid = (numbers == np.floor(numbers)) & (hours >= 0) & (minutes < 60) & (
        (hours < 24) | (numbers == 2400))
    return np.where(valid, hours * 60 + minutes, np.nan)


def attribute_numbers(values: pd.Series, attribute: Attribute) -> np.ndarray:
    """A numeric attribute's values as the numbers its bins hold (its ``format`` read), or a
    datetime ``year`` attribute's years; float64, NaN where there is none."""
    if attribute.kind == "datetime":
        return _years(_timestamps(values, attribute))
    return _formatted(values, attribute.format) if attribute.format else _numbers(values)


def _numeric_codes(values: pd.Series, attribute: Attribute) -> np.ndarray:
    return _bin_codes(attribute_numbers(values, attribute), attribute.edges)


def _bin_codes(numbers: np.ndarray, edges: tuple[float, ...]) -> np.ndarray:
    edges = np.asarray(edges)
    codes = np.searchsorted(edges, numbers, side="right") - 1
    bins = len(edges) - 1
    # Non-numeric text and values beyond the outer edges are out of domain (code -1).
    codes[(codes < 0) | (codes >= bins) | np.isnan(numbers)] = -1
    return codes


def _timestamps(values: pd.Series, attribute: Attribute) -> pd.Series:
    """Each value as a UTC-or-naive timestamp, parsed on its own (NaT where it is not a time).

    Datetime columns are used as they are (aware ones in UTC). Anything else is parsed from its
    text (:func:`category_text`) with the schema's public format: never pandas' format guess,
    which looks at the first row of the partition.
    """
    dtype = values.dtype
    if isinstance(dtype, pd.DatetimeTZDtype):
        return values.dt.tz_convert("UTC").dt.tz_localize(None)
    if pd.api.types.is_datetime64_dtype(dtype):
        return values
    texts, inverse = category_text(values)
    if inverse is not None:
        texts = np.append(np.asarray(texts, dtype=object), None)[inverse]
    parsed = pd.to_datetime(pd.Series(texts, dtype=object, index=values.index),
                            format=attribute.format, errors="coerce", utc=True)
    return parsed.dt.tz_localize(None)


def _years(stamps: pd.Series) -> np.ndarray:
    """Each timestamp's calendar year, float64 (NaN for NaT)."""
    return stamps.dt.year.to_numpy(dtype=np.float64, na_value=np.nan)


def _decimal_years(stamps: pd.Series) -> np.ndarray:
    """Each timestamp as its year plus the elapsed share of that year (NaN for NaT)."""
    instants = stamps.to_numpy(dtype="datetime64[ns]")
    start = instants.astype("datetime64[Y]")
    elapsed = (instants - start).astype(np.float64)
    length = ((start + 1).astype("datetime64[ns]") - start).astype(np.float64)
    return _years(stamps) + elapsed / length


def _datetime_codes(values: pd.Series, attribute: Attribute) -> np.ndarray:
    stamps = _timestamps(values, attribute)
    if attribute.unit == "year":
        return _bin_codes(_years(stamps), attribute.edges)
    accessor, first = {"month": ("month", 1), "weekday": ("day_of_week", 0),
                       "hour": ("hour", 0)}[attribute.unit]
    field = getattr(stamps.dt, accessor) - first
    return field.fillna(-1).to_numpy(dtype=np.int64)  # NaT (not a time): out of domain


CODERS = {"categorical": _categorical_codes, "boolean": _boolean_codes,
          "numeric": _numeric_codes,
          "datetime": _datetime_codes}


def _span(edges: tuple[float, ...]) -> str:
    return f"[{edges[0]:g}, {edges[-1]:g})"


def domain_rule(attribute: Attribute) -> str:
    """The public rule a value must meet to have a bin of its own (for messages)."""
    if attribute.kind == "categorical":
        listed = list(attribute.categories)
        return (f"not among its categories {listed}" if len(listed) <= 10
                else f"not among its {len(listed)} categories")
    if attribute.kind == "numeric":
        return f"no number within its bins {_span(attribute.edges)}"
    if attribute.kind == "boolean":
        return "neither in its true_values nor its false_values"
    within = f" within its year bins {_span(attribute.edges)}" if attribute.unit == "year" else ""
    return f"no time in format {attribute.format!r}{within}"


def _first_value(values: pd.Series, where: np.ndarray, attribute: Attribute) -> str:
    example = values.iloc[int(np.flatnonzero(where)[0])]  # the first offending row's
    example = example.item() if isinstance(example, np.generic) else example
    compared = ""
    if attribute.kind != "numeric" and value_text(example) != str(example):
        compared = f", compared with the categories as {value_text(example)!r}"
    return f"the first {example!r}{compared}"


def _apply_rule(codes: np.ndarray, where: np.ndarray, rule: str, attribute: Attribute,
                values: pd.Series, what: str) -> None:
    if not where.any():
        return
    if rule == ERROR:
        if what == "missing":
            listed = f" or in missing_values {list(attribute.missing_values)}" \
                if attribute.missing_values else ""
            problem = f"{int(where.sum())} missing value(s) (null{listed})"
            remedy = "on_missing"
        elif what == "no number":
            problem = (f"{int(where.sum())} value(s) that are no number, which on_unknown "
                       f"{CLIP!r} counts as missing,")
            remedy = "on_missing"
        else:
            problem = f"{int(where.sum())} out-of-domain value(s) ({domain_rule(attribute)})"
            if dask.config.get(SHOW_VALUES, default=False):  # asked for, on one's own machine
                problem += f", {_first_value(values, where, attribute)}"
            remedy = "on_unknown"
        raise EncodingError(
            f"column {attribute.name!r}: {problem} and its rule is 'error'; add the values to "
            f"the schema from public sources or map them to a public bin with {remedy}"
        )
    codes[where] = attribute.rule_code(rule)


def domain_codes(values: pd.Series, attribute: Attribute) -> tuple[np.ndarray, np.ndarray]:
    """Codes before the out-of-domain rules (-1: missing or unknown), and the missing mask."""
    missing = _missing(values, attribute)
    codes = CODERS[attribute.kind](values, attribute)
    codes[missing] = -1
    return codes, missing


def domain_values(values: pd.Series, attribute: Attribute, *,
                  keep_outside: bool = False) -> np.ndarray:
    """A numeric or datetime ``year`` column's values as the encoder reads them, float64 (a
    time as a decimal year: 2000.5 is mid-2000), NaN where the value is missing or outside the
    attribute's bins (where ``on_missing``/``on_unknown`` decide its bin, not its value);
    ``keep_outside``: a finite number beyond the bins keeps its value (the raw column, as it
    is; an infinity is still NaN)."""
    if attribute.kind == "datetime" and attribute.unit == "year":
        stamps = _timestamps(values, attribute)
        numbers, codes = _decimal_years(stamps), _bin_codes(_years(stamps), attribute.edges)
    elif attribute.kind == "numeric":
        numbers = attribute_numbers(values, attribute)
        codes = _bin_codes(numbers, attribute.edges)
    else:
        raise ValueError(f"attribute {attribute.name!r} ({attribute.kind}) has no numeric values")
    outside = ~np.isfinite(numbers) if keep_outside else codes < 0
    return np.where(outside | _missing(values, attribute), np.nan, numbers)


def encode_column(values: pd.Series, attribute: Attribute) -> np.ndarray:
    """Codes in ``[0, attribute.size)`` for one column, int64."""
    codes, missing = domain_codes(values, attribute)
    unknown = (codes < 0) & ~missing
    if attribute.on_unknown == CLIP and unknown.any():
        # A number beyond the bins: its nearest end bin; no number at all: as if missing.
        numbers = attribute_numbers(values, attribute)
        codes[unknown] = np.where(numbers[unknown] < attribute.edges[0], 0, attribute.bins - 1)
        _apply_rule(codes, unknown & np.isnan(numbers), attribute.on_missing, attribute,
                    values, "no number")
        unknown[:] = False
    _apply_rule(codes, missing, attribute.on_missing, attribute, values, "missing")
    _apply_rule(codes, unknown, attribute.on_unknown, attribute, values, "out-of-domain")
    return codes


def fine_cells(values: pd.Series, codes: np.ndarray, attribute: Attribute) -> np.ndarray:
    """Per row, its cell of the attribute's measured fine histogram, -1 for none (an extra bin,
    or an open bin the grid does not reach): from the row's value and bin code and the public
    schema alone. A value beyond the grid's cells of its bin (above a public ``max``, or put in
    the bin by ``on_unknown``) is counted in the bin's nearest cell."""
    layout = fine_layout(attribute)
    numbers = attribute_numbers(values, attribute)
    bins = np.minimum(codes, attribute.bins - 1).astype(np.intp)
    cells = cells_of_values(layout.edges, layout.first, bins, numbers) - layout.measured.start
    size = layout.measured.stop - layout.measured.start
    cells[(codes >= attribute.bins) | (cells < 0) | (cells >= size)] = -1
    return cells


def encode_partition(frame: pd.DataFrame, schema: Schema) -> np.ndarray:
    """Codes of shape (m, rows): one row of codes per attribute, in the schema's order."""
    check_columns(frame.columns, schema)
    codes = np.empty((schema.m, len(frame)), dtype=code_dtype(schema))
    for i, attribute in enumerate(schema.attributes):
        codes[i] = encode_column(frame[attribute.column], attribute)
    return codes
