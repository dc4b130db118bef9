"""Reading the private input lazily, and writing a release: Zarr, decoded Parquet, metadata.

Inputs may be local paths or fsspec URLs (``s3://``, ``gs://``, ``abfs://``, ``file://``...; the
protocol's package, e.g. s3fs, must be installed on the driver and the workers). Credentials and
endpoints come from ``storage_options`` or the protocol's own configuration (environment,
``~/.aws``, fsspec's ``FSSPEC_<PROTOCOL>_<KEY>`` variables).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import dask
import dask.dataframe as dd
import fsspec
import pandas as pd
import zarr
from fsspec.utils import get_protocol

from dp_dask.data.encode import check_columns
from dp_dask.data.schema import Schema, load_schema

TableSource = str | Path | pd.DataFrame | dd.DataFrame


def is_url(source: Any) -> bool:
    """Whether ``source`` is a URL with a protocol (``file://`` included), not a plain path."""
    return isinstance(source, str) and "://" in source


def local_path(source: str | Path) -> str | Path:
    """A ``file://`` URL as the local path it names; anything else unchanged."""
    if is_url(source) and get_protocol(source) in ("file", "local"):
        return fsspec.filesystem("file")._strip_protocol(source)
    return source


def remote(source: Any) -> bool:
    """Whether ``source`` is a URL of a store other than the local filesystem."""
    return is_url(source) and get_protocol(source) not in ("file", "local")


def local_only(source: str | Path, what: str) -> str | Path:
    """A local path for ``what`` (an option naming a model or a ledger): a ``file://`` URL as
    its path; an object-store URL is refused, since these are read and written in place
    (SQLite locking, model files) and object stores offer neither locks nor in-place files."""
    if remote(source):
        raise ValueError(f"{what} {source}: must be a local or shared filesystem path, not an "
                         "object-store URL (copy it from or to the store)")
    return local_path(source)


def load_schema_from(source: Any, storage_options: dict[str, Any] | None = None) -> Schema:
    """:func:`load_schema` of a schema that may also be a URL (read with fsspec)."""
    if not remote(source):
        return load_schema(local_path(source) if isinstance(source, str | Path) else source)
    try:
        with fsspec.open(source, "rt", **(storage_options or {})) as stream:
            text = stream.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"schema {source} does not exist") from None
    try:
        return load_schema(json.loads(text))
    except json.JSONDecodeError as exc:
        raise ValueError(f"schema {source}: invalid JSON ({exc})") from None


def read_table(source: TableSource, schema: Schema, *, partition_rows: int = 250_000,
               csv_blocksize: str = "64MB",
               storage_options: dict[str, Any] | None = None) -> dd.DataFrame:
    """The schema's columns of a Parquet file/directory, a CSV, or a (Dask) DataFrame, lazily.

    CSV cells are read as text and parsed by the encoder, so a stray non-number in a numeric
    column is reported by the schema's rules rather than by the CSV parser. No cell is a null:
    pandas' default markers (``NA``, ``null``, ``""``, ``N/A``...) stay text, and the schema's
    ``missing_values`` say which texts mean missing, the one rule for every input format.

    A pandas DataFrame keeps its dtypes: Dask's default would turn its object columns to text
    with ``str`` (3.0 → "3.0") but leave float columns as numbers (3.0 → "3" by the encoder), so
    one string in a float column would change every row's text. A Dask DataFrame is used as
    given; build it with ``dataframe.convert-string`` off for the same reason.

    ``storage_options`` are fsspec's options of a URL ``source`` (endpoint, credentials); they
    travel with the tasks to the workers.
    """
    if isinstance(source, dd.DataFrame):
        ddf = source
    elif isinstance(source, pd.DataFrame):
        with dask.config.set({"dataframe.convert-string": False}):
            ddf = dd.from_pandas(source, chunksize=partition_rows)
    else:
        source = local_path(source)
        if remote(source):
            fs, inner = fsspec.core.url_to_fs(source, **(storage_options or {}))
            if not fs.exists(inner):
                raise FileNotFoundError(f"input {source} does not exist")
            path, name = source, source.rstrip("/").rsplit("/", 1)[-1].lower()
            options = {"storage_options": storage_options}
        else:
            path = Path(source)
            if not path.exists():
                raise FileNotFoundError(f"input {path} does not exist")
            name, options = path.name.lower(), {}
        if name.endswith((".csv", ".csv.gz")):
            check_columns(pd.read_csv(path, nrows=0, **options).columns, schema)
            blocksize = None if name.endswith(".gz") else csv_blocksize  # gzip can't be split
            ddf = dd.read_csv(path, usecols=schema.names, dtype=str, blocksize=blocksize,
                              keep_default_na=False, na_filter=False, **options)
        else:
            ddf = dd.read_parquet(path, **options)
    check_columns(ddf.columns, schema)
    return ddf[schema.names]


# Zarr skips writing a chunk that holds only its fill value, and to know, compares every byte of
# every chunk written. A partition's chunk has a one in each row, so the check never skips: off,
# a DSS partition's chunk (100 k × 674) is written in 0.2 s instead of 0.5 (docs/benchmarks.md).
# Arrays take it from zarr's config when created or opened, and keep it when pickled to workers.
_WRITING = {"array.write_empty_chunks": True}


def create_zarr(path: Path, shape: tuple[int, int], chunk_rows: int,
                attributes: dict[str, Any]) -> zarr.Array:
    """An empty uint8 Zarr v3 array, one chunk per output partition, for writing."""
    with zarr.config.set(_WRITING):
        return zarr.create_array(store=str(path), shape=shape, chunks=(chunk_rows, shape[1]),
                                 dtype="uint8", attributes=attributes, overwrite=True)


def open_zarr_for_writing(path: Path) -> zarr.Array:
    """The array :func:`create_zarr` made, opened to write the partitions it lacks."""
    with zarr.config.set(_WRITING):
        return zarr.open_array(str(path), mode="r+")


def write_json(path: Path, document: dict[str, Any]) -> Path:
    """``document`` as JSON at ``path``, whole or not at all: written under a hidden name beside
    it and renamed onto it, so a reader sees the old file or the complete new one."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(document, indent=2, default=str) + "\n")
    os.replace(partial, path)
    return path
