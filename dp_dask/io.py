"""Reading the private input lazily, and writing a release: Zarr, decoded Parquet, metadata."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dask
import dask.dataframe as dd
import pandas as pd
import zarr

from dp_dask.encode import check_columns
from dp_dask.schema import Schema

TableSource = str | Path | pd.DataFrame | dd.DataFrame


def read_table(source: TableSource, schema: Schema, *, partition_rows: int = 250_000,
               csv_blocksize: str = "64MB") -> dd.DataFrame:
    """The schema's columns of a Parquet file/directory, a CSV, or a (Dask) DataFrame, lazily.

    CSV cells are read as text and parsed by the encoder, so a stray non-number in a numeric
    column is reported by the schema's rules rather than by the CSV parser. No cell is a null:
    pandas' default markers (``NA``, ``null``, ``""``, ``N/A``...) stay text, and the schema's
    ``missing_values`` say which texts mean missing, the one rule for every input format.

    A pandas DataFrame keeps its dtypes: Dask's default would turn its object columns to text
    with ``str`` (3.0 → "3.0") but leave float columns as numbers (3.0 → "3" by the encoder), so
    one string in a float column would change every row's text. A Dask DataFrame is used as
    given; build it with ``dataframe.convert-string`` off for the same reason.
    """
    if isinstance(source, dd.DataFrame):
        ddf = source
    elif isinstance(source, pd.DataFrame):
        with dask.config.set({"dataframe.convert-string": False}):
            ddf = dd.from_pandas(source, chunksize=partition_rows)
    else:
        path = Path(source)
        if not path.exists():
            raise FileNotFoundError(f"input {path} does not exist")
        name = path.name.lower()
        if name.endswith((".csv", ".csv.gz")):
            check_columns(pd.read_csv(path, nrows=0).columns, schema)
            blocksize = None if name.endswith(".gz") else csv_blocksize  # gzip can't be split
            ddf = dd.read_csv(path, usecols=schema.names, dtype=str, blocksize=blocksize,
                              keep_default_na=False, na_filter=False)
        else:
            ddf = dd.read_parquet(path)
    check_columns(ddf.columns, schema)
    return ddf[schema.names]


def create_zarr(path: Path, shape: tuple[int, int], chunk_rows: int,
                attributes: dict[str, Any]) -> zarr.Array:
    """An empty uint8 Zarr v3 array, one chunk per output partition."""
    return zarr.create_array(store=str(path), shape=shape, chunks=(chunk_rows, shape[1]),
                             dtype="uint8", attributes=attributes, overwrite=True)


def write_json(path: Path, document: dict[str, Any]) -> Path:
    path.write_text(json.dumps(document, indent=2, default=str))
    return path
