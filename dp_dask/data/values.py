"""Codes → typed values: a decoded release that stands in for the table, not its bin labels.

Each attribute is released as its output type (:mod:`dp_dask.data.dtypes`), decoded by
``uniform`` (a seeded draw within the bin; integer types among its integers), ``midpoint`` or
``label`` (the bin's label, a Categorical: the output before typed values). Open outer bins are
closed by the schema's public ``min``/``max``; without them they decode at their finite edge.
With a model's consistent fine histogram (a schema ``fine`` grid, marginals method), ``uniform``
draws a fine cell by that histogram within the row's bin, then a value within the cell
(:func:`fine_codes`): among the values of the attribute's ``decimals`` places, else of its
``lattice`` (multiples of a step), where the schema has either (:func:`_on_grid`); a point's cell
holds the point alone, so it comes back exact.

Calendar features of one source column (schema ``source``) are recombined into that one
timestamp column (:func:`output_columns`, :func:`_recombined`): real dates only, null where any
feature's code is an extra bin.

Nulls: a code of the extra bin that ``on_missing`` maps to decodes as a null (pandas ``Int64``,
``boolean``, NaN, NaT, ``<NA>``); any other extra bin (e.g. "other", or a bin ``on_unknown``
shares with ``on_missing``) decodes as its label in a text column and as a null in a numeric,
boolean or timestamp column. Columns that can hold no
null are non-nullable in the Arrow schema.

This is post-processing of the noisy model's codes: nothing here reads the data, and the draws
come from their own child of the partition's seed (:func:`value_seed`), so the codes, and the
label output, are the same as without them.

Size: one decoder per value kind (numbers on their decimals or lattice, points, timestamps, text,
dictionaries) and the Arrow schema they share; split by kind when the next kind joins.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from dp_dask.data.attribute import CALENDAR_UNITS, ERROR, Attribute
from dp_dask.data.cell_search import draw_cells, draw_integers
from dp_dask.data.constraints import value_ranges
from dp_dask.data.decode import codes_to_frame
from dp_dask.data.dtypes import (
    CATEGORY_DTYPES,
    DECODINGS,
    FLOAT_DTYPES,
    INTEGER_DTYPES,
    ORDERED_CATEGORY,
    STRING_DTYPES,
    TEXT_DTYPES,
    fine_layout,
    float_ranges,
    integer_ranges,
    is_timestamp,
    timestamp_type,
)
from dp_dask.data.encode import _text_lookup, encode_column
from dp_dask.data.ids import draw_ids, with_ids
from dp_dask.data.schema import Schema
from dp_dask.exceptions import DpDaskWarning

# Spawn-key word of the value draws' seed: a child no partition seed spawns (they use 0, 1...).
VALUES_KEY = 0x76616C75
NANOSECONDS = 10**9
PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": NANOSECONDS}  # a timestamp unit's counts


def check_decode(decode: str) -> str:
    if decode not in DECODINGS:
        raise ValueError(f"decode must be one of {', '.join(DECODINGS)}, got {decode!r}")
    return decode


def decoding(attribute: Attribute, default: str) -> str:
    """The attribute's own decoding, else the release's."""
    return attribute.decode or default


def value_seed(seed: np.random.SeedSequence) -> np.random.SeedSequence:
    """The seed of a partition's value draws: a child of its seed, derived without spawning
    (spawning counts on the object, so a retried task would draw another child)."""
    return np.random.SeedSequence(seed.entropy, spawn_key=(*seed.spawn_key, VALUES_KEY),
                                  pool_size=seed.pool_size)


def _null_codes(attribute: Attribute) -> np.ndarray:
    """Per code, whether it decodes as a null (typed output)."""
    extra = np.arange(attribute.size) >= attribute.bins
    # The missing bin, unless unknown values share it ("other"): then it is more than a null.
    missing = np.array([label == attribute.on_missing != attribute.on_unknown
                        for label in attribute.labels])
    return extra & (missing | (attribute.output_dtype not in TEXT_DTYPES))


def nullable(attribute: Attribute, mode: str) -> bool:
    return mode != "label" and bool(_null_codes(attribute).any())


def _draws_integers(attribute: Attribute) -> bool:
    """Whether values are drawn among integers: integer dtypes, years of a datetime, and
    minutes of an HHMM clock time."""
    return (attribute.output_dtype in INTEGER_DTYPES or attribute.kind == "datetime"
            or attribute.format == "HHMM")


def _cell_ranges(attribute: Attribute, edges: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Per cell of ``edges``, its value range closed by the public bounds: first and last
    integer where values are integers, else [low, high)."""
    bounds = (edges, attribute.minimum, attribute.maximum)
    return integer_ranges(*bounds) if _draws_integers(attribute) else float_ranges(*bounds)


def cell_spans(attribute: Attribute, edges: tuple[float, ...] | np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """Per cell of ``edges``, the values it draws from as one span [low, high) in the value's
    units, open ends closed by the public bounds: [first, last + 1) of its integers where values
    are integers (an empty cell has no width), else its own [low, high)."""
    low, high = _cell_ranges(attribute, tuple(float(e) for e in edges))
    if _draws_integers(attribute):
        return low.astype(np.float64), np.maximum(high + 1, low).astype(np.float64)
    return low, high


def fine_weights(attribute: Attribute, histogram: np.ndarray) -> np.ndarray:
    """Per cell of the attribute's fine layout (``fine_layout``), its weight within its bin:
    the consistent fine ``histogram``, or the cells' sizes in a bin whose cells hold no mass."""
    layout = fine_layout(attribute)
    low, high = cell_spans(attribute, layout.edges)
    sizes = high - low
    weights = np.ones(len(layout.edges) - 1)  # an open bin the grid leaves out: its one cell
    weights[layout.measured] = histogram
    bin_of = np.repeat(np.arange(attribute.bins), np.diff(layout.first))
    totals = np.bincount(bin_of, weights=weights, minlength=attribute.bins)
    return np.where(totals[bin_of] > 0, weights, np.where(sizes > 0, sizes, 1.0))


def fine_codes(codes: np.ndarray, attribute: Attribute, histogram: np.ndarray,
               rng: np.random.Generator) -> np.ndarray:
    """Per row of bin ``codes``, a cell of the attribute's fine layout (``fine_layout``) drawn
    by the consistent fine ``histogram`` restricted to the row's bin; a bin whose cells hold no
    mass draws them by their size (uniform within the bin). Extra bins: any cell, nulled later."""
    layout = fine_layout(attribute)
    weights = fine_weights(attribute, histogram)
    bin_of = np.repeat(np.arange(attribute.bins), np.diff(layout.first))
    # Within-bin CDFs, each shifted by its bin's index (non-decreasing: the weights are not
    # negative), each row searching its own bin's (draw_cells).
    totals = np.bincount(bin_of, weights=weights, minlength=attribute.bins)
    within = np.cumsum(weights) - np.repeat(np.cumsum(totals) - totals, np.diff(layout.first))
    cdf = bin_of + within / totals[bin_of]
    bins = np.minimum(codes, attribute.bins - 1).astype(np.intp)
    return draw_cells(cdf, layout.first, bins, rng.random(len(codes)))


def _numbers(codes: np.ndarray, attribute: Attribute, mode: str, rng: np.random.Generator,
             edges: tuple[float, ...]) -> np.ndarray:
    """Numeric bins (or fine cells) of ``edges`` as values of the output dtype (float64/int64
    before the final cast)."""
    integers = _draws_integers(attribute)
    low, high = _cell_ranges(attribute, edges)
    codes = np.minimum(codes, len(edges) - 2)  # extra bins: any value, nulled later
    if attribute.kind == "datetime":  # years → [first year's start, after the last year's)
        low, high = (_year_start(low), _year_start(high + 1) - 1)
    if integers:
        if mode == "uniform":  # one pass: no gathered bounds per row
            return draw_integers(codes, low, high, rng.random(len(codes)))
        return _integers(low[codes], high[codes], mode, rng)
    # [low, high): rounding may reach high, so values stop at the float below it; a bin with
    # low == high holds low alone. Per bin, then gathered: the same values as per row, without
    # a nextafter of every row (a third of a typed part's decoding).
    closed = high > low
    span = np.where(closed, high - low, 0.0)
    top = np.where(closed, np.nextafter(high, -np.inf), low)
    values = low[codes] + span[codes] * (0.5 if mode == "midpoint" else rng.random(len(codes)))
    values = np.minimum(values, top[codes])
    grid = _value_grid(attribute)
    if grid is None:
        return values
    return _on_grid(values, codes, low, top, grid, mode, rng)


@dataclasses.dataclass(frozen=True)
class _Grid:
    """The values a column is released on: k / 10^decimals (each the decimal it writes as), or
    k · lattice (the products the data's own arithmetic gives: 6 · 1.15078), k an integer."""

    per: float  # grid values per unit
    divide: bool  # k / per (decimals), else k · (1 / per) (a lattice's step)
    step: float

    def index(self, x: np.ndarray) -> np.ndarray:
        return x * self.per if self.divide else x / self.step

    def value(self, k: np.ndarray) -> np.ndarray:
        return k / self.per if self.divide else k * self.step


def _value_grid(attribute: Attribute) -> _Grid | None:
    """The attribute's release grid: its decimals, else its lattice, else none (unrounded)."""
    if attribute.decimals is not None:
        return _Grid(10.0**attribute.decimals, True, 10.0**-attribute.decimals)
    if attribute.lattice is not None:
        return _Grid(1.0 / attribute.lattice, False, float(attribute.lattice))
    return None


def _on_grid(values: np.ndarray, codes: np.ndarray, low: np.ndarray, top: np.ndarray,
             grid: _Grid, mode: str, rng: np.random.Generator) -> np.ndarray:
    """Per row, a value of its cell [low, top] on the ``grid`` (decimal places or a lattice):
    drawn among them (uniform, or the lower middle one), as integers are; in a cell holding
    none (a fine cell narrower than a step) the grid value nearest ``values``, by
    post-processing as any rounding (a point off the grid keeps its value: its cell holds it
    alone)."""
    # the integers k of [index(low), index(top)]; the slack absorbs binary rounding
    # (0.7 · 10 = 7.000000000000001 is the decimal 0.7)
    first, last = np.ceil(grid.index(low) - 1e-6), np.floor(grid.index(top) + 1e-6)
    # a grid value whose float lies beyond the cell's (above a point: (0, 0.5)) is not in it
    first = np.where(grid.value(first) < low, first + 1, first)[codes]
    last = np.where(grid.value(last) > top, last - 1, last)[codes]
    if mode == "midpoint":
        k = first + np.floor((last - first) / 2)
    else:
        k = first + np.floor(rng.random(len(codes)) * (last - first + 1))
    point = (low == top)[codes]
    nearest = np.where(point, values, grid.value(np.rint(grid.index(values))))
    return np.where(first <= last, grid.value(np.minimum(k, last)), nearest)


def _integers(low: np.ndarray, high: np.ndarray, mode: str,
              rng: np.random.Generator) -> np.ndarray:
    """Per row, an integer of [low, high], both included: uniform, or the lower middle one."""
    if mode == "midpoint":
        return low + (high - low) // 2
    u = rng.random(len(low))
    return np.minimum(low + np.floor(u * (high - low + 1).astype(np.float64)).astype(np.int64),
                      high)


def _year_start(years: np.ndarray) -> np.ndarray:
    """Nanoseconds since 1970 at the start of each year."""
    return (years - 1970).astype("datetime64[Y]").astype("datetime64[ns]").astype(np.int64)


def _float32(values: np.ndarray, codes: np.ndarray, attribute: Attribute,
             edges: tuple[float, ...]) -> np.ndarray:
    """float64 values as float32, each nudged back into its bin (of ``edges``) where rounding
    left it."""
    low, high = _cell_ranges(attribute, edges)
    codes = np.minimum(codes, len(edges) - 2)
    single = values.astype(np.float32)
    low, high = low[codes], high[codes]
    below, above = single < low, (single >= high) & (high > low)
    single[below] = np.nextafter(single[below], np.float32(np.inf))
    single[above] = np.nextafter(single[above], np.float32(-np.inf))
    return single


def _typed(codes: np.ndarray, attribute: Attribute, mode: str, rng: np.random.Generator,
           fine: np.ndarray | None) -> np.ndarray:
    """The non-null values of a column, as a NumPy array (timestamps as int64 ns); ``fine``:
    the attribute's consistent fine histogram, drawn from by ``uniform``."""
    dtype = attribute.output_dtype
    if attribute.kind == "boolean":
        return codes == 1
    if attribute.kind == "categorical":  # the schema checked each category parses back
        texts = np.array(attribute.categories)
        table = texts == "True" if dtype == "bool" else texts.astype(dtype)
        return np.append(table, table[:1].repeat(attribute.size - attribute.bins))[codes]
    edges = attribute.edges
    if fine is not None and mode == "uniform":
        codes, edges = fine_codes(codes, attribute, fine, rng), tuple(fine_layout(attribute).edges)
    values = _numbers(codes, attribute, mode, rng, edges)
    if attribute.format == "HHMM":  # minutes of the day, written back as valid HHMM times
        return _hhmm(values, dtype)
    if attribute.format == "currency" and dtype in FLOAT_DTYPES:
        values = np.floor(values * 100) / 100  # whole cents, still below the bin's upper edge
    if dtype == "float32":
        return _float32(values, codes, attribute, edges)
    return values if attribute.kind == "datetime" else values.astype(dtype)


def _column(codes: np.ndarray, attribute: Attribute, mode: str, rng: np.random.Generator,
            fine: np.ndarray | None = None, values: np.ndarray | None = None) -> Any:
    """One column of the decoded frame: one vectorised pass over its codes (``values``: its
    :func:`_typed` values, where drawn already)."""
    labels = list(attribute.labels)
    if mode == "label":
        return pd.Categorical.from_codes(codes, categories=labels)
    dtype, null_codes = attribute.output_dtype, _null_codes(attribute)
    if dtype in CATEGORY_DTYPES:  # Arrow's dictionary of string values, as pandas writes one
        kept = np.flatnonzero(~null_codes)
        position = np.full(attribute.size, -1)
        position[kept] = np.arange(len(kept))
        return pd.Categorical.from_codes(position[codes], categories=[labels[i] for i in kept],
                                         ordered=dtype == ORDERED_CATEGORY)
    if dtype in STRING_DTYPES:  # Arrow's take: ten times faster than through Python strings
        # of labels that are null where the code decodes as null: no mask gathered per row;
        # Arrow's large_string: pandas' str wraps it (decode_frame), decode_table stores it
        texts = pa.array([None if is_null else label
                          for label, is_null in zip(labels, null_codes)], pa.large_string())
        return pc.take(texts, pa.array(codes))
    # None where no code decodes as null: most columns, and a gather per column saved
    null = null_codes[codes] if null_codes.any() else None
    values = _typed(codes, attribute, mode, rng, fine) if values is None else values
    if is_timestamp(dtype):  # nanoseconds, floored to the unit: still within the year
        return _stamps(values // (NANOSECONDS // PER_SECOND[timestamp_type(dtype)[0]]), null,
                       dtype)
    if dtype in FLOAT_DTYPES:
        if null is not None:
            values[null] = np.nan
        return values
    if not nullable(attribute, mode):
        return values
    masked = pd.arrays.BooleanArray if dtype == "bool" else pd.arrays.IntegerArray
    return masked(values, null)  # pandas' nullable Int64/Int32/boolean


def _hhmm(minutes: np.ndarray, dtype: str) -> np.ndarray:
    """Minutes of the day as HHMM clock times (90 → 130) of the output dtype."""
    return (minutes // 60 * 100 + minutes % 60).astype(dtype)


def _stamps(values: np.ndarray, null: np.ndarray | None, dtype: str) -> Any:
    """int64 counts of the dtype's unit since 1970 (UTC where it has a zone) as its
    timestamps, NaT where ``null`` (None: nowhere); an aware column shows each instant in its
    zone."""
    unit, zone = timestamp_type(dtype)
    if null is not None:
        values[null] = np.iinfo(np.int64).min  # NaT
    stamps = pd.Series(values.view(f"datetime64[{unit}]"))
    return (stamps if zone is None else stamps.dt.tz_localize("UTC").dt.tz_convert(zone)).array


@dataclasses.dataclass(frozen=True)
class OutputColumn:
    """A column of the decoded release: one attribute's, or a source column recombined from
    its calendar features (``features``: their positions in the schema)."""

    name: str
    features: tuple[int, ...]
    mode: str  # its decoding
    recombined: bool


def output_columns(schema: Schema, decode: str) -> list[OutputColumn]:
    """The release's columns in order: each attribute's, except that the features of a source
    column decoded as values make that one column, at its first feature's place (decoded as
    labels, each feature is its own label column)."""
    columns: list[OutputColumn] = []
    for i, attribute in enumerate(schema.attributes):
        mode = decoding(attribute, decode)
        if not attribute.source or mode == "label":
            columns.append(OutputColumn(attribute.name, (i,), mode, False))
        elif attribute.source not in {c.name for c in columns}:
            columns.append(OutputColumn(attribute.source, schema.sources[attribute.source], mode,
                                        True))
    return columns


def _calendar(unit: str, codes: dict[str, np.ndarray], mode: str, rng: np.random.Generator,
              rows: int) -> np.ndarray:
    """A calendar field's code (month, weekday, hour from 0) where it is a feature (an extra
    bin: any, nulled later), else drawn over its public range."""
    size = len(CALENDAR_UNITS[unit])
    if unit in codes:
        return np.minimum(codes[unit], size - 1).astype(np.int64)
    return _integers(np.zeros(rows, dtype=np.int64), np.full(rows, size - 1), mode, rng)


def _recombined(codes: np.ndarray, schema: Schema, column: OutputColumn,
                rng: np.random.Generator, fine: dict[int, np.ndarray]) -> Any:
    """A source column from its features' codes: a year drawn in its bin (by the fine
    histogram under ``uniform``), the month, a day of that month (one of its days with the
    weekday, where that is a feature), the hour, then the time within the hour (or day) at
    the dtype's unit; a field that is no feature drawn over its public range. Only real dates
    come out: days are drawn within the month's length in that year. Null where any feature's
    code decodes as null."""
    rows, mode = len(codes), column.mode
    features = {schema.attributes[i].unit: (schema.attributes[i], i) for i in column.features}
    field = {unit: codes[:, i] for unit, (_, i) in features.items()}
    year, index = features["year"]
    edges = year.edges
    if index in fine and mode == "uniform":
        field["year"] = fine_codes(field["year"], year, fine[index], rng)
        edges = tuple(fine_layout(year).edges)
    low, high = _cell_ranges(year, edges)
    cells = np.minimum(field["year"], len(edges) - 2)
    years = _integers(low[cells], high[cells], mode, rng)
    months = (years - 1970) * 12 + _calendar("month", field, mode, rng, rows)
    first = months.astype("datetime64[M]").astype("datetime64[D]").astype(np.int64)
    length = (months + 1).astype("datetime64[M]").astype("datetime64[D]").astype(np.int64) - first
    if "weekday" in field:  # the month's days with the weekday (4 or 5): the first, + weeks
        # day 0, 1970-01-01, was a Thursday (3, from Monday 0)
        offset = (_calendar("weekday", field, mode, rng, rows) - (first + 3)) % 7
        days = offset + 7 * _integers(np.zeros(rows, dtype=np.int64), (length - 1 - offset) // 7,
                                      mode, rng)
    else:
        days = _integers(np.zeros(rows, dtype=np.int64), length - 1, mode, rng)
    dtype = schema.source_dtype(column.name)
    second = PER_SECOND[timestamp_type(dtype)[0]]
    span = 3600 * second if "hour" in field else 86400 * second
    start = _calendar("hour", field, mode, rng, rows) * span if "hour" in field else 0
    within = _integers(np.zeros(rows, dtype=np.int64), np.full(rows, span - 1), mode, rng)
    null = np.zeros(rows, dtype=bool)
    for attribute, i in features.values():
        null |= _null_codes(attribute)[codes[:, i]]
    return _stamps((first + days) * 86400 * second + start + within, null, dtype)


def decoded_columns(codes: np.ndarray, schema: Schema, decode: str,
                    seed: np.random.SeedSequence,
                    fine: dict[int, np.ndarray] | None = None) -> dict[str, Any]:
    """A partition's codes (rows, m) as its decoded columns by name, in the release's order
    (:func:`output_columns`, then the ids by :func:`with_ids`): NumPy or pandas arrays, text as
    Arrow arrays; ``decode`` is the release's decoding, ``seed`` the partition's seed, ``fine``
    the model's consistent fine histograms by attribute (``uniform`` draws from them:
    :func:`fine_codes`). What :func:`decode_frame` and :func:`decode_table` are made of."""
    rng = np.random.default_rng(value_seed(seed))
    fine = fine or {}
    ordered = _ordered_values(codes, schema, decode, rng, fine)
    columns = {}
    for column in output_columns(schema, decode):
        if column.recombined:
            columns[column.name] = _recombined(codes, schema, column, rng, fine)
        else:
            (i,) = column.features
            columns[column.name] = _column(codes[:, i], schema.attributes[i], column.mode, rng,
                                           fine.get(i), ordered.get(i))
    for ids in schema.ids:  # drawn after every attribute: their values are as without ids
        columns[ids.name] = draw_ids(ids, len(codes), rng)
    return {name: columns[name] for name in with_ids(list(columns), schema.ids)}


def decode_frame(codes: np.ndarray, schema: Schema, decode: str, seed: np.random.SeedSequence,
                 fine: dict[int, np.ndarray] | None = None) -> pd.DataFrame:
    """A partition's codes (rows, m) as a frame of typed values (:func:`decoded_columns`;
    text as pandas' str)."""
    return pd.DataFrame({name: pd.array(column, dtype="str") if isinstance(column, pa.Array)
                         else column for name, column in
                         decoded_columns(codes, schema, decode, seed, fine).items()})


def decode_table(codes: np.ndarray, schema: Schema, decode: str, seed: np.random.SeedSequence,
                 arrow: pa.Schema, fine: dict[int, np.ndarray] | None = None) -> pa.Table:
    """:func:`decode_frame`'s rows as the Arrow table of schema ``arrow`` (:func:`arrow_schema`)
    that ``pa.Table.from_pandas(frame, schema=arrow, preserve_index=False)`` makes of it, built
    from the columns without the frame: a quarter of a typed part's decoding went to wrapping
    its text in pandas and out again (the roofline, docs/benchmarks.md)."""
    columns = decoded_columns(codes, schema, decode, seed, fine)
    # pa.array(from_pandas=True) is what from_pandas converts each column with (NaN: null)
    return pa.Table.from_arrays(
        [column.cast(field.type) if isinstance(column, pa.Array) else
         pa.array(column, type=field.type, from_pandas=True)
         for field, column in ((field, columns[field.name]) for field in arrow)], schema=arrow)


def _value_bounds(attribute: Attribute, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the least and greatest value its bin decodes to, as :func:`_typed` draws them
    (nanoseconds for a datetime's years, minutes for an HHMM clock time)."""
    low, high = (_cell_ranges(attribute, attribute.edges) if attribute.format == "HHMM"
                 else value_ranges(attribute))
    codes = np.minimum(codes, attribute.bins - 1)
    if attribute.kind == "datetime":
        return _year_start(low[codes]), _year_start(high[codes] + 1) - 1
    return low[codes], high[codes]


def _ordered_values(codes: np.ndarray, schema: Schema, decode: str, rng: np.random.Generator,
                    fine: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """The typed values of the attributes of the schema's ``order`` constraints, each pair in
    order: where the draws within bins give first > second, the second is drawn again within
    [first, its bin's end]; where first is past that end (overlapping bins), first is drawn in
    the bins' overlap, then second from it. The constraint's structural zeros leave no pair of
    bins without such values."""
    pairs = [c.order for c in schema.constraints if c.kind == "order" and all(
        decoding(schema.attributes[a], decode) != "label" for a in c.order)]
    values = {a: _typed(codes[:, a], schema.attributes[a], decoding(schema.attributes[a], decode),
                        rng, fine.get(a)) for a in sorted({a for pair in pairs for a in pair})}
    # HHMM clock times are ordered and redrawn as minutes of the day (never as 1275)
    clocks = {a: values[a].dtype for a in values if schema.attributes[a].format == "HHMM"}
    for a in clocks:
        values[a] = (values[a] // 100 * 60 + values[a] % 100).astype(np.int64)
    for a, b in pairs:
        first, second = schema.attributes[a], schema.attributes[b]
        rows = np.flatnonzero((codes[:, a] < first.bins) & (codes[:, b] < second.bins)
                              & (values[a] > values[b]))
        if not len(rows):
            continue
        (low_a, high_a), (low_b, high_b) = (_value_bounds(first, codes[rows, a]),
                                            _value_bounds(second, codes[rows, b]))
        start = values[a][rows]
        past = start > high_b
        start[past] = _within(np.maximum(low_a, low_b)[past], np.minimum(high_a, high_b)[past],
                              rng)
        values[a][rows] = start
        values[b][rows] = _within(start, high_b, rng)
    return {a: _hhmm(v, clocks[a]) if a in clocks else v for a, v in values.items()}


def _within(low: np.ndarray, high: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Per row, a value of [low, high], both included: an integer where they are integers."""
    if np.issubdtype(low.dtype, np.integer):
        return _integers(low, high, "uniform", rng)
    return np.minimum(low + (high - low) * rng.random(len(low)), high)


def empty_frame(schema: Schema, decode: str) -> pd.DataFrame:
    """The decoded frame's columns and dtypes, no rows (Dask's meta)."""
    return decode_frame(np.zeros((0, schema.m), dtype=np.int16), schema, decode,
                        np.random.SeedSequence(0))


def arrow_schema(schema: Schema, decode: str) -> pa.Schema:
    """The Arrow schema of the decoded Parquet: every part the same, nullable only where a
    null can be decoded; its pandas metadata as ``pa.Table.from_pandas`` writes it with these
    types (a function of the types and the frame's dtypes, not of its rows), so that
    :func:`decode_table` makes the table the frame would."""
    empty = empty_frame(schema, decode)
    inferred = pa.Schema.from_pandas(empty, preserve_index=False)
    nullable = {column.name: _nullable(schema, column)
                for column in output_columns(schema, decode)}  # an id column: never null
    declared = {a.name: a.dtype for a in schema.attributes
                if a.dtype in TEXT_DTYPES and decoding(a, decode) != "label"}
    typed = pa.schema([_stored_text(field, declared.get(field.name)).with_nullable(
        nullable.get(field.name, False)) for field in inferred])
    # a declared string is 'unicode' there, where the inferred large_string was 'object'
    return pa.Table.from_pandas(empty, schema=typed, preserve_index=False).schema


def _stored_text(field: pa.Field, dtype: str | None) -> pa.Field:
    """A text column stored as its declared dtype says (a drafted input's type): ``string`` as
    Arrow's string, a category's dictionary of string values (what pandas writes a categorical
    as); pandas' own str, Arrow's large_string, where none is declared (hand-written schemas, as
    before)."""
    if dtype == "string":
        return field.with_type(pa.string())
    if dtype in CATEGORY_DTYPES:
        return field.with_type(pa.dictionary(field.type.index_type, pa.string(),
                                             field.type.ordered))
    return field


def _nullable(schema: Schema, column: OutputColumn) -> bool:
    return any(nullable(schema.attributes[i], column.mode) for i in column.features)


def _open_without_bounds(attribute: Attribute, mode: str) -> list[str]:
    if mode == "label" or attribute.output_dtype in TEXT_DTYPES or not attribute.edges:
        return []
    ends = [("min", attribute.edges[0], attribute.minimum),
            ("max", attribute.edges[-1], attribute.maximum)]
    return [key for key, edge, bound in ends if math.isinf(edge) and bound is None]


def warn_open_bins(schema: Schema, decode: str) -> None:
    """Warn once per attribute whose open bin has no public bound (it decodes at the edge)."""
    for attribute in schema.attributes:
        unbounded = _open_without_bounds(attribute, decoding(attribute, decode))
        if unbounded:
            warnings.warn(f"attribute {attribute.name!r}: an open bin without public "
                          f"{'/'.join(unbounded)}: its values are decoded at the bin's finite "
                          "edge; declare 'min'/'max' in the schema to draw within it",
                          DpDaskWarning, stacklevel=3)


def output_record(schema: Schema, decode: str,
                  fine: dict[int, np.ndarray] | None = None) -> list[dict[str, Any]]:
    """Per column, what the release holds: dtype, Arrow type, decoding, nullability, the
    public bounds used (or which open ends had none and decode at their edge), and the cells of
    the fine histogram ``uniform`` draws from (``fine``: the model's, by attribute)."""
    record = []
    fine = fine or {}
    arrow = arrow_schema(schema, decode)
    for output in output_columns(schema, decode):
        field = arrow.field(output.name)
        mode = output.mode
        index = output.features[0]
        if output.recombined:  # the year feature's bounds and grid
            index = next(i for i in output.features if schema.attributes[i].unit == "year")
        attribute = schema.attributes[index]
        column = {"name": output.name, "dtype": "category (labels)" if mode == "label"
                  else schema.source_dtype(output.name) if output.recombined
                  else attribute.output_dtype, "arrow": str(field.type), "decode": mode,
                  "nullable": field.nullable}
        if output.recombined:
            column["recombined"] = _recombination(schema, output)
        if mode != "label" and attribute.edges and attribute.output_dtype not in TEXT_DTYPES:
            column |= {key: value for key, value in (("min", attribute.minimum),
                                                     ("max", attribute.maximum))
                       if value is not None}
        unbounded = _open_without_bounds(attribute, mode)
        if unbounded:
            column["open_bins_at_edge"] = unbounded
        if mode == "uniform" and index in fine:
            column["fine_cells"] = len(fine[index])
        record.append(column)
    return record + [{"name": ids.name, "dtype": ids.dtype, "nullable": False,
                      "arrow": str(arrow.field(ids.name).type),
                      "decode": f"synthetic ids of format {ids.format!r}"} for ids in schema.ids]


def _recombination(schema: Schema, column: OutputColumn) -> dict[str, Any]:
    """How a source column was recombined, for metadata.json."""
    units = {schema.attributes[i].unit: schema.attributes[i].name for i in column.features}
    day = ("a day of the month with the weekday" if "weekday" in units
           else "a day of the month")
    drawn = [f"{unit} over {span}" for unit, span in (("month", "Jan..Dec"),
                                                      ("hour", "00..23")) if unit not in units]
    return {"features": units,
            "drawn": [f"{day}, within its length that year", *drawn,
                      "the time within the hour" if "hour" in units else
                      "the time within the day"],
            "draws": "uniform" if column.mode == "uniform" else "the middle of each range",
            "null": "where any feature's bin decodes as null"}


def null_label(attribute: Attribute) -> str:
    """The label a null in a decoded column stands for (the ``on_missing`` bin first), or
    'error' where none decodes as null; with several extra bins, a null reads as the first."""
    null = [attribute.labels[i] for i in np.flatnonzero(_null_codes(attribute))]
    return attribute.on_missing if attribute.on_missing in null else (null or [ERROR])[0]


def release_codes(values: pd.Series, attribute: Attribute) -> np.ndarray:
    """Codes of a decoded release column, label or typed value: the inverse of decoding.

    A text column (labels, typed text, a CSV's cells) is read as labels first, and a cell that
    is no label as a value through the schema's attribute; any other column as values. A null
    (or an empty CSV cell) is the bin :func:`null_label` names.
    """
    # A null written to CSV is an empty cell: missing, unless "" is a value of the domain.
    values_of = attribute.labels + attribute.true_values + attribute.false_values
    reader = dataclasses.replace(attribute, on_missing=null_label(attribute),
                                 missing_values=() if "" in values_of else ("",))
    dtype = values.dtype
    if not (isinstance(dtype, pd.CategoricalDtype) or pd.api.types.is_string_dtype(dtype)):
        return encode_column(values, reader)
    codes = _text_lookup(values, attribute.labels)
    rest = np.flatnonzero(codes < 0)
    if len(rest):
        codes[rest] = encode_column(values.iloc[rest], reader)
    return codes


def labels_of_release(frame: pd.DataFrame, schema: Schema) -> pd.DataFrame:
    """A partition of a decoded release as label Categoricals (read with ``as_labels()``)."""
    codes = np.column_stack([release_codes(frame[a.read_column(frame.columns)], a)
                             for a in schema.attributes])
    return codes_to_frame(codes.reshape(len(frame), schema.m), schema)
