"""Output types of a release: which value type each attribute decodes to, and which it can hold.

A schema attribute may declare ``"dtype"`` (one of :data:`OUTPUT_DTYPES` or a timestamp type
``timestamp[UNIT]`` / ``timestamp[UNIT, tz=ZONE]``, Arrow/pandas names),
``"decode"`` (one of :data:`DECODINGS`) and, for a numeric or a datetime ``year`` attribute,
public ``"min"`` / ``"max"`` bounds that close its open bins. Absent, the dtype defaults by kind
(:func:`default_dtype`) and the decoding to the release's. These are public choices checked
here, before any data is read; :mod:`dp_dask.data.values` turns codes into such values.
"""

from __future__ import annotations

import math
import re
import zoneinfo
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from dp_dask.data.text import category_text

INTEGER_DTYPES = ("int64", "int32")
FLOAT_DTYPES = ("float64", "float32")
# "string": Arrow's string where declared (the default of a text attribute that declares no
# dtype stays pandas' str, Arrow's large_string); "large_string": Arrow's large_string.
STRING_DTYPES = ("string", "large_string")
# a dictionary of string values (a pandas categorical), unordered or ordered as its categories
ORDERED_CATEGORY = "category[ordered]"
CATEGORY_DTYPES = ("category", ORDERED_CATEGORY)
TEXT_DTYPES = (*STRING_DTYPES, *CATEGORY_DTYPES)
OUTPUT_DTYPES = (*INTEGER_DTYPES, *FLOAT_DTYPES, "bool", *TEXT_DTYPES)
# Arrow's names of timestamps: any unit, naive or in a time zone ("timestamp[us, tz=Europe/Paris]")
TIMESTAMP_UNITS = ("s", "ms", "us", "ns")
TIMESTAMPS = "timestamp[UNIT] or timestamp[UNIT, tz=ZONE] (UNIT s, ms, us or ns)"
_TIMESTAMP = re.compile(r"timestamp\[(s|ms|us|ns)(?:, tz=([^\]]+))?\]")
# Arrow's fixed-offset zones ("+01:00"), as pandas writes a column parsed from times with offsets
_FIXED_OFFSET = re.compile(r"[+-](?:[01]\d|2[0-3]):[0-5]\d")
# uniform: a seeded draw within the bin; midpoint: its centre; label: the bin's label as before.
DECODINGS = ("uniform", "midpoint", "label")
_INT32 = (-(2**31), 2**31 - 1)
_YEARS = (1678, 2261)  # whole years of int64 nanoseconds since 1970
MAX_FINE_CELLS = 100_000  # one fine histogram is measured, stored and decoded whole


def timestamp_type(dtype: str) -> tuple[str, str | None] | None:
    """A timestamp dtype's (unit, time zone or None), or None for another dtype."""
    match = _TIMESTAMP.fullmatch(dtype)
    return None if match is None else (match[1], match[2])


def is_timestamp(dtype: str) -> bool:
    return timestamp_type(dtype) is not None


def timestamp_dtype(unit: str, zone: str | None) -> str:
    """The dtype of timestamps of ``unit`` in ``zone`` (None: naive), Arrow's name."""
    return f"timestamp[{unit}" + (f", tz={zone}" if zone else "") + "]"


def dtype_problem(dtype: str) -> str | None:
    """Why ``dtype`` names no output type, or None."""
    stamp = timestamp_type(dtype)
    if stamp is None:
        return None if dtype in OUTPUT_DTYPES else (
            f"dtype must be one of {', '.join(OUTPUT_DTYPES)} or {TIMESTAMPS}, got {dtype!r}")
    if stamp[1] is not None and stamp[1] != "UTC" and not _FIXED_OFFSET.fullmatch(stamp[1]):
        try:
            zoneinfo.ZoneInfo(stamp[1])
        except (ValueError, zoneinfo.ZoneInfoNotFoundError):
            return (f"dtype {dtype!r}: {stamp[1]!r} is no IANA time zone (nor UTC, nor a "
                    "fixed offset such as +01:00)")
    return None


def default_dtype(kind: str, unit: str = "", source: str = "") -> str:
    """The output type of an attribute that declares none: what its values were, where a
    single calendar feature can say it (a year bin is a time; a month alone is its name; a
    feature of a source column is part of the source's timestamp)."""
    if source or (kind == "datetime" and unit == "year"):
        return "timestamp[ns]"
    if kind == "numeric":
        return "float64"
    if kind == "boolean":
        return "bool"
    return "string"


def allowed_dtypes(kind: str, unit: str = "", source: str = "") -> tuple[str, ...]:
    """The output types an attribute of this kind can hold (categorical ones checked further
    by :func:`output_problem`: the categories must parse as such values); ``TIMESTAMPS``
    stands for any timestamp type. A feature of a source column is released as the source's
    timestamp."""
    if source:
        return (TIMESTAMPS,)
    if kind == "numeric":
        return (*INTEGER_DTYPES, *FLOAT_DTYPES, *TEXT_DTYPES)
    if kind == "boolean":
        return ("bool", *TEXT_DTYPES)
    if kind == "datetime":
        return (TIMESTAMPS, *TEXT_DTYPES) if unit == "year" else TEXT_DTYPES
    return (*INTEGER_DTYPES, *FLOAT_DTYPES, "bool", *TEXT_DTYPES)


def parses_back(text: str, dtype: str) -> bool:
    """Whether a category's text is a number of ``dtype`` that encodes back to the text
    ("3" is int64 3, encoded as "3"; "3.0" is not: 3 would come back as "3")."""
    try:
        number = int(text) if dtype in INTEGER_DTYPES else np.dtype(dtype).type(text)
    except ValueError:
        return False
    if dtype == "int32" and not _INT32[0] <= number <= _INT32[1]:
        return False
    texts, inverse = category_text(pd.Series([number], dtype=dtype))  # as a column of dtype
    return texts[0 if inverse is None else inverse[0]] == text


def output_problem(attribute: Any) -> str | None:
    """Why the attribute's declared output (dtype, decode, min/max) is impossible, or None."""
    dtype, kind, source = attribute.dtype, attribute.kind, attribute.source
    if attribute.decode and attribute.decode not in DECODINGS:
        return f"decode must be one of {', '.join(DECODINGS)}, got {attribute.decode!r}"
    problem = dtype and dtype_problem(dtype)
    if problem:
        return problem
    allowed = allowed_dtypes(kind, attribute.unit, source)
    if dtype and dtype not in allowed and not (is_timestamp(dtype) and TIMESTAMPS in allowed):
        what = f"{kind} ({attribute.unit})" if kind == "datetime" else kind
        what += f" feature of source {source!r}" if source else " attribute"
        return f"a {what} can't be output as {dtype}; choose one of {', '.join(allowed)}"
    if kind == "categorical" and dtype == "bool" and not set(attribute.categories) <= {
            "False", "True"}:
        return f"dtype bool needs categories 'False'/'True', got {list(attribute.categories)}"
    if kind == "categorical" and dtype in (*INTEGER_DTYPES, *FLOAT_DTYPES):
        bad = [c for c in attribute.categories if not parses_back(c, dtype)]
        if bad:
            return f"dtype {dtype} needs categories that are {dtype} numbers, got {bad[0]!r}"
    bounds = (attribute.minimum, attribute.maximum)
    if bounds != (None, None):
        if not attribute.edges:
            return "'min'/'max' are public bounds of a numeric (or datetime year) attribute"
        problem = _bounds_problem(attribute.edges, *bounds)
        if problem:
            return problem
    if attribute.edges and (dtype in INTEGER_DTYPES or kind == "datetime"):
        first, last = integer_ranges(attribute.edges, *bounds)
        empty = np.flatnonzero(first > last)
        if len(empty):
            what = "year" if kind == "datetime" else "integer"
            return f"bin {attribute.labels[empty[0]]!r} holds no {what}"
        output = dtype or default_dtype(kind, attribute.unit, source)
        if is_timestamp(output) and not _YEARS[0] <= first.min() <= last.max() <= _YEARS[1]:
            return (f"{output} holds the years {_YEARS[0]}-{_YEARS[1]}; close the bins within "
                    "them (or release the years as 'string')")
    return None


def _bounds_problem(edges: tuple[float, ...], low: float | None, high: float | None) -> str | None:
    """Bounds must close the open outer bins without cutting into a finite one."""
    if any(b is not None and not math.isfinite(b) for b in (low, high)):
        return "'min'/'max' must be finite numbers"
    # min = max only closes one bin open at both ends: a constant
    if low is not None and high is not None and (low > high or (low == high and len(edges) > 2)):
        return f"min {low:g} must be below max {high:g}"
    finite = [e for e in edges if math.isfinite(e)]
    if not finite:
        return None
    # An open first bin [min, e) must hold a value: min < e; a closed one needs min <= e.
    if low is not None and (low > finite[0] or (low == finite[0] and math.isinf(edges[0]))):
        return f"min {low:g} must lie below the first finite edge {finite[0]:g}"
    if high is not None and high < finite[-1]:
        return f"max {high:g} must lie at or above the last finite edge {finite[-1]:g}"
    return None


def float_ranges(edges: tuple[float, ...], low: float | None,
                 high: float | None) -> tuple[np.ndarray, np.ndarray]:
    """Per bin, the float range [lo, hi) its values are drawn in (lo == hi: exactly lo). An open
    end is closed by the public bound; without one the bin decodes at its finite edge (just
    below it for a bin open below)."""
    finite = [e for e in edges if math.isfinite(e)] or [0.0]
    lo = np.array(edges[:-1], dtype=np.float64)
    hi = np.array(edges[1:], dtype=np.float64)
    if math.isinf(edges[0]):
        lo[0] = low if low is not None else np.nextafter(finite[0], -np.inf)
    if math.isinf(edges[-1]):
        hi[-1] = high if high is not None else finite[-1]
    return lo, hi


def integer_ranges(edges: tuple[float, ...], low: float | None,
                   high: float | None) -> tuple[np.ndarray, np.ndarray]:
    """Per bin, its first and last integer (first > last: none); open ends as in
    :func:`float_ranges`."""
    finite = [e for e in edges if math.isfinite(e)] or [0.0]
    first = np.ceil(np.array(edges[:-1], dtype=np.float64))
    last = np.ceil(np.array(edges[1:], dtype=np.float64)) - 1
    if math.isinf(edges[0]):
        first[0] = math.ceil(low) if low is not None else math.ceil(finite[0]) - 1
    if math.isinf(edges[-1]):
        last[-1] = math.floor(high) if high is not None else math.ceil(finite[-1])
    return first.astype(np.int64), last.astype(np.int64)


@dataclass(frozen=True)
class FineLayout:
    """An attribute's fine grid as decoding cells: the grid's cells, plus each open outer bin it
    does not reach as one cell; an outermost cell reaching into an open bin is open too (±inf),
    closed by the public bound as the bin is."""

    edges: np.ndarray  # the cells' edges
    first: np.ndarray  # bin b's cells are first[b]:first[b + 1]
    measured: slice  # the cells of the measured fine histogram (the grid's own), in order


def fine_layout(attribute: Any) -> FineLayout:
    """The decoding cells of an attribute with a (valid) fine grid; a function of the schema."""
    coarse, fine = attribute.edges, list(attribute.fine)
    finite = [e for e in coarse if math.isfinite(e)]
    below, above = math.isinf(coarse[0]), math.isinf(coarse[-1])
    cells = list(fine)
    if below:  # the grid's first cell reaches into the open bin, or the bin is a cell of its own
        cells = [-math.inf, *cells[1:]] if fine[0] < finite[0] else [-math.inf, *cells]
    if above:
        cells = [*cells[:-1], math.inf] if fine[-1] > finite[-1] else [*cells, math.inf]
    edges = np.array(cells, dtype=np.float64)
    start = int(below and fine[0] >= finite[0])
    return FineLayout(edges, np.searchsorted(edges, np.array(coarse, dtype=np.float64)),
                      slice(start, start + len(fine) - 1))


def fine_problem(attribute: Any) -> str | None:
    """Why the attribute's fine grid is impossible, or None (see dp_dask.data.schema)."""
    fine, coarse = attribute.fine, attribute.edges
    if not coarse:
        return "'fine' is a grid within the bins of a numeric (or datetime year) attribute"
    if len(fine) < 2 or not all(math.isfinite(e) for e in fine):
        return "'fine' needs at least two finite edges"
    if any(b <= a for a, b in zip(fine, fine[1:])):
        return "'fine' edges must increase strictly"
    if len(fine) - 1 > MAX_FINE_CELLS:
        return f"'fine' has {len(fine) - 1} cells, more than the limit of {MAX_FINE_CELLS:,}"
    finite = [e for e in coarse if math.isfinite(e)]
    missing = sorted(set(finite) - set(fine))
    if missing:
        return (f"'fine' is not nested in the bins: bin edge {missing[0]:g} is not a fine edge "
                "(every finite bin edge must be one)")
    for end, edge, which in ((fine[0], coarse[0], "first"), (fine[-1], coarse[-1], "last")):
        if math.isfinite(edge) and end != edge:
            return (f"'fine' reaches {end:g}, beyond the bins' span (their {which} edge is "
                    f"{edge:g})")
    if fine[0] < finite[0]:  # reaching into the open first bin: min in its first cell
        low = attribute.minimum
        if low is None or not fine[0] <= low < fine[1]:
            return (f"'fine' reaches {fine[0]:g} into the open first bin: it needs the public "
                    f"'min' within its first cell [{fine[0]:g}, {fine[1]:g}) (or start at "
                    f"{finite[0]:g})")
    if fine[-1] > finite[-1]:  # into the open last bin: max in its last cell
        high = attribute.maximum
        if high is None or not fine[-2] <= high <= fine[-1]:
            return (f"'fine' reaches {fine[-1]:g} into the open last bin: it needs the public "
                    f"'max' within its last cell [{fine[-2]:g}, {fine[-1]:g}] (or stop at "
                    f"{finite[-1]:g})")
    layout = fine_layout(attribute)
    if not (np.diff(layout.first) > 1).any():
        return "'fine' splits no bin: every bin is one fine cell already; leave 'fine' out"
    dtype = attribute.dtype or default_dtype(attribute.kind, attribute.unit, attribute.source)
    if dtype in INTEGER_DTYPES or attribute.kind == "datetime":
        first, last = integer_ranges(tuple(layout.edges), attribute.minimum, attribute.maximum)
        empty = np.flatnonzero(first > last)
        if len(empty):
            lo, hi = layout.edges[empty[0]], layout.edges[empty[0] + 1]
            return f"'fine' cell [{lo:g}, {hi:g}) holds no integer"
    return None
