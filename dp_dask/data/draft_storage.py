"""What a table says about itself, read without any value: its columns' storage kinds, output
types, never-null fields, stored text types and time zones (the Parquet schema, the CSV
header, a frame's dtypes). Whether the draft may read them as public is
:mod:`dp_dask.data.draft`'s rule (its module docstring): the kinds only propose a column's
candidates, the output types only with ``public_types``; a text column's stored type (and an
ordered dictionary's order among the levels released under DP) is read as the writer's, not the
rows', and a timestamp column's time zone as the column's, not its values'.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask.dataframe as dd
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pds

from dp_dask.data.dtypes import dtype_problem, timestamp_dtype
from dp_dask.data.io import TableSource

# The unit of a drafted timestamp's release where the storage types are not public: a constant,
# as the stored unit can follow the values (stored_timestamp_types)
DRAFTED_UNIT = "us"


def is_csv(source: TableSource) -> bool:
    return isinstance(source, str | Path) and str(source).lower().endswith((".csv", ".csv.gz"))


def storage_types(source: TableSource) -> dict[str, str]:
    """Column → ``boolean``, ``integer``, ``float``, ``datetime``, ``text`` or ``unknown``.

    Metadata only: the Parquet schema, the CSV header (CSV stores no types: every column is
    ``unknown``), or the dtypes of a frame. No value is read.
    """
    if isinstance(source, pd.DataFrame | dd.DataFrame):
        return {str(name): _dtype_kind(dtype) for name, dtype in source.dtypes.items()}
    path = Path(source)
    if not path.exists():
        raise FileNotFoundError(f"input {path} does not exist")
    if is_csv(path):
        return {str(name): "unknown" for name in pd.read_csv(path, nrows=0).columns}
    schema = pds.dataset(path, format="parquet").schema
    return {f.name: _arrow_kind(f.type) for f in schema
            if not f.name.startswith("__index_level_")}  # pandas' stored index


def storage_dtypes(source: TableSource) -> dict[str, str]:
    """Column → the release's output type that holds its stored values (dp_dask.data.dtypes),
    for the columns whose storage says one: integers and floats by width, dictionary-encoded
    or categorical text as ``category``. Metadata only, as :func:`storage_types`, but public only
    if the storage schema is (:func:`draft_schema`'s ``public_types``); a CSV states none (give
    ``dtype`` in the schema)."""
    if isinstance(source, pd.DataFrame | dd.DataFrame):
        types = {str(name): (pa.dictionary(pa.int32(), pa.string())
                             if isinstance(dtype, pd.CategoricalDtype) else _arrow_of(dtype))
                 for name, dtype in source.dtypes.items()}
    elif is_csv(source):
        return {}
    else:
        types = {f.name: f.type for f in pds.dataset(Path(source), format="parquet").schema}
    dtypes = {name: _output_dtype(kind) for name, kind in types.items() if kind is not None}
    return {name: dtype for name, dtype in dtypes.items() if dtype is not None}


def stored_text_types(source: TableSource) -> dict[str, tuple[str, list[str] | None]]:
    """Column → the output type of its stored text (dp_dask.data.dtypes: ``string``,
    ``large_string``, ``category`` or ``category[ordered]``) and, for an ordered dictionary, its
    categories in order (None otherwise). Read for a text column drafted under DP even when the
    storage types are not public: the writer chooses them for the column, not for its rows (a
    neighbour written alike has the same), and an ordered dictionary's order is read only among
    the levels released under DP (docs/privacy.md). A CSV stores none."""
    if is_csv(source):
        return {}
    if isinstance(source, pd.DataFrame | dd.DataFrame):
        types = {}
        for name, dtype in source.dtypes.items():
            if isinstance(dtype, pd.CategoricalDtype):
                values = pa.string() if pd.api.types.is_string_dtype(
                    dtype.categories.dtype) else pa.int64()  # numbers: no text type
                types[str(name)] = (pa.dictionary(pa.int32(), values, dtype.ordered),
                                    [str(c) for c in dtype.categories])
            elif pd.api.types.is_string_dtype(dtype):  # pandas writes str as large_string
                text = pa.string() if getattr(dtype, "kind", "") == "O" else pa.large_string()
                types[str(name)] = (text, None)
    else:
        dataset = pds.dataset(Path(source), format="parquet")
        types = {f.name: (f.type, _categories(dataset, f.name)
                          if pa.types.is_dictionary(f.type) and f.type.ordered else None)
                 for f in dataset.schema}
    named = {}
    for name, (kind, categories) in types.items():
        if pa.types.is_dictionary(kind) and _is_text(kind.value_type):
            named[name] = ("category[ordered]" if kind.ordered else "category", categories)
        elif _is_text(kind):
            named[name] = (str(kind), None)
    return named


def stored_timestamp_types(source: TableSource) -> dict[str, str]:
    """Column → the output type of a timestamp column: microseconds (:data:`DRAFTED_UNIT`) in
    its stored zone (``timestamp[us, tz=ZONE]``, dp_dask.data.dtypes), or naive. Read for a
    timestamp even when the storage types are not public: an Arrow or pandas timestamp column
    has one zone (or none) for all its values, the writer's choice for the column, which no row
    can change (a row holds an instant; the zone only says how every instant is shown). The
    unit is not read, as pandas infers it from the values (one time with nanoseconds makes a
    column of times parsed from text ``ns``): the release takes microseconds, a constant, the
    unit pandas 3 gives times it parses and Arrow gives Python datetimes, as Spark and most
    warehouses write them, and one that holds every instant the draft's years can (1678-2261).
    A timestamp whose zone no schema dtype names (neither UTC, an IANA zone nor a fixed offset)
    is naive: its instants come back in UTC. A CSV stores none: every CSV column is ``unknown``
    to the draft, never a timestamp, so no row's offset can set a zone (docs/privacy.md,
    "Drafting a schema under DP": time zones)."""
    if is_csv(source):
        return {}
    if isinstance(source, pd.DataFrame | dd.DataFrame):
        types = {str(name): _arrow_of(dtype) for name, dtype in source.dtypes.items()}
    else:
        types = {f.name: f.type for f in pds.dataset(Path(source), format="parquet").schema}
    stamps = {name: timestamp_dtype(DRAFTED_UNIT, kind.tz) for name, kind in types.items()
              if kind is not None and pa.types.is_timestamp(kind)}
    return {name: dtype if dtype_problem(dtype) is None else timestamp_dtype(DRAFTED_UNIT, None)
            for name, dtype in stamps.items()}


def written_by_pandas(source: TableSource) -> bool:
    """Whether the input comes from pandas: a frame, or a Parquet file whose schema metadata
    carries pandas' ``pandas`` key (what ``DataFrame.to_parquet`` writes). A property of the
    writer, the same for every neighbour written alike, not of any row: pandas stores an
    integer column with a null as float64 and reads an Arrow int64 column with nulls back as
    float64, so a nullable whole-valued column decided under DP is released as pandas holds it
    (:mod:`dp_dask.data.draft_dp`). A CSV says nothing of its writer."""
    if isinstance(source, pd.DataFrame | dd.DataFrame):
        return True
    if is_csv(source):
        return False
    metadata = pds.dataset(Path(source), format="parquet").schema.metadata or {}
    return b"pandas" in metadata


def _is_text(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _categories(dataset: pds.Dataset, column: str) -> list[str]:
    """An ordered dictionary column's categories, in order: its first fragment's dictionary
    (pandas writes the categorical's whole category list there, used or not)."""
    for fragment in dataset.get_fragments():
        chunks = fragment.to_table(columns=[column]).column(column).chunks
        if chunks:
            return [str(c) for c in chunks[0].dictionary.to_pylist()]
    return []


def storage_required(source: TableSource) -> set[str]:
    """The columns whose storage schema says they hold no null (a Parquet ``required``, a
    non-nullable Arrow field). Metadata only; a frame or a CSV says none."""
    if isinstance(source, pd.DataFrame | dd.DataFrame) or is_csv(source):
        return set()
    return {f.name for f in pds.dataset(Path(source), format="parquet").schema if not f.nullable}


def _arrow_of(dtype: Any) -> pa.DataType | None:
    if isinstance(dtype, pd.DatetimeTZDtype):  # its unit and zone, as Arrow names them
        return pa.array(pd.Series([], dtype=dtype)).type
    try:  # pandas' nullable Int64/Float64 store the NumPy type they hold
        return pa.from_numpy_dtype(getattr(dtype, "numpy_dtype", dtype))
    except (TypeError, NotImplementedError, pa.ArrowNotImplementedError):
        return None  # pandas' own extension types: no storage width to keep


def _output_dtype(kind: pa.DataType) -> str | None:
    if pa.types.is_dictionary(kind):
        return "category"
    if pa.types.is_timestamp(kind):  # a recombined timestamp's type (calendar_features)
        return timestamp_dtype(kind.unit, kind.tz)
    if pa.types.is_integer(kind):
        return "int32" if kind.bit_width <= 32 and pa.types.is_signed_integer(kind) else "int64"
    if pa.types.is_floating(kind):
        return "float32" if kind.bit_width <= 32 else "float64"
    return None


def _arrow_kind(kind: pa.DataType) -> str:
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if pa.types.is_boolean(kind):
        return "boolean"
    if pa.types.is_integer(kind):
        return "integer"
    if pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        return "float"
    if pa.types.is_timestamp(kind) or pa.types.is_date(kind):
        return "datetime"
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "text"
    return "unknown"


def _dtype_kind(dtype: Any) -> str:
    if isinstance(dtype, pd.CategoricalDtype):
        return _dtype_kind(dtype.categories.dtype)
    if pd.api.types.is_bool_dtype(dtype):
        return "boolean"
    if pd.api.types.is_integer_dtype(dtype):
        return "integer"
    if pd.api.types.is_float_dtype(dtype):
        return "float"
    if pd.api.types.is_datetime64_any_dtype(dtype):
        return "datetime"
    return "text" if pd.api.types.is_string_dtype(dtype) else "unknown"
