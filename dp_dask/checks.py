"""Checks run before any expensive work: options, paths, input files, and the fit's cost.

Every check reads public things only (options, paths, file names, Parquet footers' column names,
the schema), never a row of the private data; each failure names the option, path or column.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from dask.utils import parse_bytes

from dp_dask.data.encode import EncodingError
from dp_dask.data.io import (
    Location,
    filesystem,
    join,
    put_bytes,
    store_entries,
)
from dp_dask.data.schema import Schema
from dp_dask.exceptions import DpDaskWarning
from dp_dask.model_io import MODEL_FILES


class CheckError(ValueError):
    """An option, path or input that the job can tell is unusable before it starts."""


class CostError(CheckError):
    """The schema makes the fit too expensive to attempt."""


# ε outside [0.01, 20] is legal (research sweeps, tests) but rarely intended, so warn, never
# refuse: past ε = 20 the noise is negligible next to most counts and the release is close to
# the exact statistics; below ε = 0.01 the noise swamps every count of all but huge inputs.
EPSILON_WARN_HIGH = 20.0
EPSILON_WARN_LOW = 0.01


def _int_at_least(text: str, minimum: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be {what}, got {value}")
    return value


def positive_int(text: str) -> int:
    """argparse ``type=``: an integer >= 1 (0 and negatives are refused, never defaulted)."""
    return _int_at_least(text, 1, "a positive integer (>= 1)")


def non_negative_int(text: str) -> int:
    """argparse ``type=``: an integer >= 0 (seeds)."""
    return _int_at_least(text, 0, "an integer >= 0")


def _finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """argparse ``type=``: a finite number > 0."""
    value = _finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value:g}")
    return value


def epsilon_value(text: str) -> float:
    """argparse ``type=``: a finite ε > 0; a warning outside [EPSILON_WARN_LOW,
    EPSILON_WARN_HIGH]."""
    value = positive_float(text)
    if value > EPSILON_WARN_HIGH:
        warnings.warn(f"--epsilon {value:g} is above {EPSILON_WARN_HIGH:g}: the noise is "
                      "negligible and the release is close to the exact statistics of the data",
                      DpDaskWarning, stacklevel=2)
    elif value < EPSILON_WARN_LOW:
        warnings.warn(f"--epsilon {value:g} is below {EPSILON_WARN_LOW:g}: the noise swamps the "
                      "counts and the release is close to uniform noise", DpDaskWarning,
                      stacklevel=2)
    return value


def delta_value(text: str) -> float:
    """argparse ``type=``: δ in the open interval (0, 1)."""
    value = _finite_float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must lie in (0, 1), got {value:g}")
    return value


def memory_limit(text: str) -> str:
    """argparse ``type=``: "auto", a size ("4GiB", bytes; 0 for none) or a fraction of RAM in
    (0, 1]."""
    if text == "auto":
        return text
    try:
        fraction = float(text)
    except ValueError:
        fraction = None
    if fraction is not None and 0 < fraction <= 1:
        return text
    try:
        size = parse_bytes(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be 'auto', a size such as 4GiB, or a fraction of RAM in (0, 1]; got {text!r}"
        ) from None
    if size < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text!r}")
    return text  # 0: no limit, as in distributed


def check_output_dir(path: str | Path, option: str) -> Path:
    """The absolute output directory, if it is (or can be made) a writable directory.

    Nothing is created here, so a job refused later leaves nothing behind.
    """
    path = Path(path).absolute()
    if path.exists() and not path.is_dir():
        raise CheckError(f"{option} {path} is a file, not a directory")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise CheckError(f"{option} {path}: {existing} is a file, not a directory")
    try:  # a real probe: os.access says yes to root, and no to nothing on a read-only mount
        tempfile.TemporaryFile(dir=existing).close()
    except OSError as exc:
        raise CheckError(f"{option} {path}: directory {existing} is not writable "
                         f"({exc.strerror})") from None
    return path


def check_model_output(path: Location, storage_options: dict[str, Any] | None = None
                       ) -> Location:
    """``fit --model``: a writable directory (:func:`check_output_dir`), or an object-store
    prefix holding nothing or an earlier model, into which a probe object is written and
    removed: a store that cannot take the model fails here, before the fit spends budget."""
    if isinstance(path, Path):
        return check_output_dir(path, "--model")
    others = sorted(store_entries(path, storage_options, "--model") - set(MODEL_FILES))
    if others:
        raise CheckError(f"--model {path} holds other data ({', '.join(others[:3])}) and is not "
                         "a dp_dask model: choose another prefix")
    probe = join(path, f".dp_dask-probe-{uuid.uuid4().hex}")
    try:
        put_bytes(probe, b"", storage_options)
        fs, inner = filesystem(probe, storage_options)
        fs.rm_file(inner)
    except Exception as exc:  # the store's own errors: permissions, quotas, endpoint
        raise CheckError(f"--model {path}: cannot write there ({type(exc).__name__}: "
                         f"{exc})") from None
    return path


GZIP_MAGIC = b"\x1f\x8b"


def check_input(path: str | Path, schema: Schema) -> None:
    """A CSV is not compressed under a plain name, and every Parquet file holds every column of
    the schema (read from the footers, not the rows). A missing input is left to the reader, so
    that the ledger's budget refusal, which comes first, is what the user sees."""
    path = Path(path)
    if not path.exists():
        return
    name = path.name.lower()
    if name.endswith(".csv"):
        if path.is_dir():
            raise CheckError(f"input {path} is a directory; a CSV input must be one file")
        with path.open("rb") as stream:
            if stream.read(2) == GZIP_MAGIC:
                raise CheckError(f"input {path} is gzip-compressed but named .csv: "
                                 "name it .csv.gz (or decompress it)")
        return
    if name.endswith(".csv.gz"):
        return
    import pyarrow.dataset as ds  # only Parquet needs it
    import pyarrow.parquet as pq

    try:
        files = ds.dataset(path, format="parquet", partitioning="hive").files
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise CheckError(f"input {path} is not readable as Parquet: {exc}") from None
    for file in files:
        # hive-partitioned directories (key=value/) supply columns of their own
        keys = {part.split("=")[0] for part in Path(file).parent.parts if "=" in part}
        try:
            columns = set(pq.read_schema(file).names) | keys
        except (OSError, ValueError) as exc:
            raise CheckError(f"input {file} is not readable as Parquet: {exc}") from None
        missing = [column for column in schema.columns if column not in columns]
        if missing:
            raise EncodingError(f"input {file} is missing column(s) {missing} required by "
                                f"schema {schema.name!r}")


def locate_non_utf8(path: str | Path) -> str:
    """Where a CSV first holds bytes that are not UTF-8: line and column (only run after a
    decoding failure; one pass over the file on the driver, the data owner's own machine)."""
    import csv
    import gzip

    opener = gzip.open if str(path).lower().endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="surrogateescape", newline="") as stream:
        reader = csv.reader(stream)
        header: list[str] = []
        for row in reader:
            for column, cell in enumerate(row):
                if any("\udc80" <= char <= "\udcff" for char in cell):
                    if not header:
                        return "line 1 (the header)"
                    name = header[column] if column < len(header) else f"#{column + 1}"
                    return f"line {reader.line_num}, column {name!r}"
            header = header or row
    return "a value"


# Cost limits, from the schema alone. The d×d count matrix (int64) is built by every counting
# task and summed on the driver; the copula's nearest-correlation repair is O(d³) per sweep
# (d = 5,000 took 194 s, ~35 sweeps); the marginals method keeps every 2-way table dense.
WARN_DUMMY_COLUMNS = 2_000
MAX_DUMMY_COLUMNS = 12_000  # a 1.15 GB count matrix per task
WARN_TABLE_CELLS = 1_000_000
MAX_TABLE_CELLS = 20_000_000  # one 160 MB table


@dataclass(frozen=True)
class Cost:
    """The schema's size in the terms the fit's cost grows with."""

    dummy_columns: int  # d = Σ categories: the count matrix is d×d
    largest_attribute: str
    largest_table: tuple[str, str] | None  # the pair with the most 2-way cells
    table_cells: int

    @classmethod
    def of(cls, schema: Schema) -> Cost:
        sizes = schema.sizes
        largest = int(np.argmax(sizes))
        if schema.m < 2:
            return cls(schema.d, schema.names[largest], None, 0)
        second = int(np.argmax(np.where(np.arange(schema.m) == largest, -1, sizes)))
        pair = tuple(schema.names[i] for i in sorted((largest, second)))
        return cls(schema.d, schema.names[largest], pair, int(sizes[largest] * sizes[second]))


class DeclaredCost(Protocol):
    """What a method's class declares of its fit's cost (:attr:`Synthesizer.dense_tables`,
    :attr:`Synthesizer.grows_with_d`): which limits beyond the count matrix's apply."""

    dense_tables: bool
    grows_with_d: str | None


def check_cost(schema: Schema, method: DeclaredCost) -> Cost:
    """Refuse a schema past the hard limits; warn past the soft ones. Shared by CLI and API;
    the warnings come from this line, so that warnings' "default" filter shows them once when
    both run. ``method``: the method's class (``Synthesizer.methods[name]``), whose
    declarations say which limits beyond the count matrix's apply."""
    cost = Cost.of(schema)
    sizes = dict(zip(schema.names, schema.sizes.tolist()))
    advice = "merge rare categories or use coarser bins"
    columns = (f"{cost.dummy_columns:,} dummy columns in all ({cost.largest_attribute!r} has "
               f"{sizes[cost.largest_attribute]:,} categories)")
    if cost.dummy_columns > MAX_DUMMY_COLUMNS:
        raise CostError(f"schema {schema.name!r}: {columns}; the limit is "
                        f"{MAX_DUMMY_COLUMNS:,} (a {cost.dummy_columns:,}² count matrix per "
                        f"task): {advice}")
    if method.dense_tables and cost.table_cells > MAX_TABLE_CELLS:
        raise CostError(f"schema {schema.name!r}: the 2-way table {cost.largest_table} has "
                        f"{cost.table_cells:,} cells; the limit is {MAX_TABLE_CELLS:,}: {advice}")
    if cost.dummy_columns > WARN_DUMMY_COLUMNS:
        slow = f" and {method.grows_with_d}" if method.grows_with_d else ""
        warnings.warn(f"schema {schema.name!r}: {columns}: counting builds a d×d matrix per "
                      f"task{slow}; expect a slow fit ({advice})", DpDaskWarning, stacklevel=1)
    elif method.dense_tables and cost.table_cells > WARN_TABLE_CELLS:
        warnings.warn(f"schema {schema.name!r}: the 2-way table {cost.largest_table} has "
                      f"{cost.table_cells:,} cells; expect a slow fit ({advice})",
                      DpDaskWarning, stacklevel=1)
    return cost
