"""Reading the private input lazily, and writing a release: Zarr, decoded Parquet, metadata.

Inputs may be local paths or fsspec URLs (``s3://``, ``gs://``, ``abfs://``, ``file://``...; the
protocol's package, e.g. s3fs, must be installed on the driver and the workers). Credentials and
endpoints come from ``storage_options`` or the protocol's own configuration (environment,
``~/.aws``, fsspec's ``FSSPEC_<PROTOCOL>_<KEY>`` variables).
"""

from __future__ import annotations

import io
import json
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dask
import dask.dataframe as dd
import fsspec
import numpy as np
import pandas as pd
import zarr
from fsspec.utils import get_protocol

from dp_dask.data.encode import EncodingError, check_columns
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
    """A local path for ``what`` (an option naming a ledger or the demo's directory): a
    ``file://`` URL as its path; an object-store URL is refused (SQLite needs a local file)."""
    if remote(source):
        raise ValueError(f"{what} {source}: must be a local or shared filesystem path, not an "
                         "object-store URL (copy it from or to the store)")
    return local_path(source)


Location = Path | str  # a local path, or the URL of an object (prefix) in a store


def location(source: str | Path) -> Location:
    """A local path (``file://`` URLs included) as an absolute Path, an object-store URL as
    itself without a trailing slash: made on the driver, since workers have other cwds."""
    if remote(source):
        return str(source).rstrip("/")
    return Path(os.path.abspath(os.path.expanduser(local_path(source))))


def join(base: Location, *names: str) -> Location:
    """``base / names``, for a Path or a URL alike."""
    if isinstance(base, Path):
        return base.joinpath(*names)
    return "/".join([base.rstrip("/"), *names])


def filesystem(where: Location,
               storage_options: dict[str, Any] | None = None) -> tuple[Any, str]:
    """fsspec's filesystem of ``where`` and the path inside it. A remote listing is read afresh
    (fsspec caches listings per instance, and other processes write these prefixes)."""
    options = (storage_options or {}) if remote(where) else {}
    fs, path = fsspec.core.url_to_fs(str(where), **options)
    fs.invalidate_cache()
    return fs, path


def store_entries(target: str, storage_options: dict[str, Any] | None, what: str) -> set[str]:
    """The names directly under the prefix ``target`` of an object store (none if it is
    absent): the cheap preflight of an output, before any work. A ValueError naming ``what``
    and the target when the store cannot be reached (endpoint, credentials) or the bucket does
    not exist."""
    try:
        fs, root = filesystem(target, storage_options)
        try:
            return {entry.rstrip("/").rsplit("/", 1)[-1] for entry in fs.ls(root, detail=False)}
        except FileNotFoundError:
            bucket = root.split("/", 1)[0]
            if get_protocol(target) != "memory" and not fs.exists(bucket):
                raise ValueError(f"{what} {target}: bucket {bucket!r} does not exist (or these "
                                 "credentials cannot see it)") from None
            return set()
    except ValueError:
        raise
    except Exception as exc:  # unreachable endpoint, missing or refused credentials...
        raise ValueError(f"{what} {target}: cannot reach the store ({type(exc).__name__}: "
                         f"{exc})") from None


def put_bytes(where: Location, data: bytes,
              storage_options: dict[str, Any] | None = None) -> None:
    """``data`` at ``where``, whole or not at all. On disk: written under a unique hidden name
    beside it, then renamed onto it. In an object store: one PUT (or one completed multipart
    upload), which S3, GCS and Azure make visible atomically, so no temporary key is needed."""
    if remote(where):
        fs, path = filesystem(where, storage_options)
        fs.pipe_file(path, data)
        return
    path = Path(where)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    partial.write_bytes(data)
    os.replace(partial, path)


def read_bytes(where: Location, storage_options: dict[str, Any] | None = None) -> bytes:
    """The whole file or object at ``where`` (FileNotFoundError when there is none)."""
    if not remote(where):
        return Path(where).read_bytes()
    fs, path = filesystem(where, storage_options)
    return fs.cat_file(path)


def npz_bytes(arrays: dict[str, Any]) -> bytes:
    """Arrays as a compressed ``.npz`` file's bytes, for :func:`put_bytes`."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


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
               storage_options: dict[str, Any] | None = None,
               extra: Sequence[str] = ()) -> dd.DataFrame:
    """The schema's columns of a Parquet file/directory, a CSV, or a (Dask) DataFrame, lazily,
    and the ``extra`` columns (a privacy unit's) after them.

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
            columns = _columns(pd.read_csv(path, nrows=0, **options).columns, schema, extra)
            blocksize = None if name.endswith(".gz") else csv_blocksize  # gzip can't be split
            ddf = dd.read_csv(path, usecols=columns, dtype=str, blocksize=blocksize,
                              keep_default_na=False, na_filter=False, **options)
        else:
            ddf = dd.read_parquet(path, **options)
    return ddf[_columns(ddf.columns, schema, extra)]


def _columns(available: pd.Index, schema: Schema, extra: Sequence[str] = ()) -> list[str]:
    """The columns a table is read by (:meth:`Schema.read_columns`), then ``extra``; raises
    naming the input columns it lacks."""
    columns = schema.read_columns(available)
    if not set(columns) <= set(available):
        check_columns(available, schema)  # lacking one means lacking an input column
    missing = [name for name in extra if name not in set(available)]
    if missing:
        raise EncodingError(f"input lacks the privacy unit column {missing[0]!r}")
    return columns + list(extra)


# Zarr skips writing a chunk that holds only its fill value, and to know, compares every byte of
# every chunk written. A partition's chunk has a one in each row, so the check never skips: off,
# a DSS partition's chunk (100 k × 674) is written in 0.2 s instead of 0.5 (docs/benchmarks.md).
# Arrays take it from zarr's config when created or opened, and keep it when pickled to workers.
_WRITING = {"array.write_empty_chunks": True}


def _zarr_store(path: Location, storage_options: dict[str, Any] | None) -> dict[str, Any]:
    """zarr's store arguments: a URL opens an FsspecStore with ``storage_options`` (zarr
    refuses options for a local path)."""
    return {"store": str(path),
            **({"storage_options": storage_options or {}} if remote(path) else {})}


def create_zarr(path: Location, shape: tuple[int, int], chunk_rows: int,
                attributes: dict[str, Any],
                storage_options: dict[str, Any] | None = None) -> zarr.Array:
    """An empty uint8 Zarr v3 array, one chunk per output partition, for writing. Each chunk is
    one file or one object, written whole by one task."""
    with zarr.config.set(_WRITING):
        return zarr.create_array(**_zarr_store(path, storage_options), shape=shape,
                                 chunks=(chunk_rows, shape[1]), dtype="uint8",
                                 attributes=attributes, overwrite=True)


def open_zarr_for_writing(path: Location,
                          storage_options: dict[str, Any] | None = None) -> zarr.Array:
    """The array :func:`create_zarr` made, opened to write the partitions it lacks."""
    with zarr.config.set(_WRITING):
        return zarr.open_array(**_zarr_store(path, storage_options), mode="r+")


def write_json(path: Location, document: dict[str, Any],
               storage_options: dict[str, Any] | None = None) -> Location:
    """``document`` as JSON at ``path`` (a file or an object), whole or not at all
    (:func:`put_bytes`): a reader sees the old one or the complete new one."""
    put_bytes(path, (json.dumps(document, indent=2, default=str) + "\n").encode(),
              storage_options)
    return path
