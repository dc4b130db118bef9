"""Identifier columns: released as synthetic ids of a public format, never read from the data.

An identifier (a serial number, a customer or tail number) holds about one value per row: no
threshold releases its values and no model learns them, so thresholding it would release only
``other``. A schema lists such columns apart from its attributes, under ``"ids"``::

    "ids": [{"name": "tailnum", "dtype": "string", "format": "N###@@"}]

The encoder never reads them (they are no attribute: no budget, no bin) and the decoder writes
each, at its ``position`` among the release's columns (the input's place, as drafted; default the
end), as random ids of its public ``format``: ``#`` a digit, ``@`` an upper-case letter, any other
character itself (default :data:`DEFAULT_FORMAT`, 12 digits); ``dtype`` ``string``, or an integer
type whose format is digits only (the first drawn 1-9, so every id has the format's length).
The draws come from the partition's value seed after the attributes' values: a function of the
seed alone. Random, not unique: two of n rows share an id with probability about n² / 2 over the
number of ids the format holds (10¹² for the default).

:func:`id_like` is the public rule ``schema draft`` detects identifiers by: the column's name and
storage type (metadata), never its values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

ID_DTYPES = ("string", "int64", "int32")
DEFAULT_FORMAT = "#" * 12
_DIGITS = {"int64": 18, "int32": 9}  # the most digits the integer type always holds
# Names of identifiers: "id", "..._id", "userId", "serial", "uuid"; of any storage type.
_ID_NAME = re.compile(r"(^|[_\-. ])id$|(serial|uuid|guid)$")
_CAMEL_ID = re.compile(r"[a-z0-9](Id|ID)$")
# "...number", "tailnum", "..._no": identifiers only when stored as text (not a CSV: its
# columns store no type); an integer column so
# named is usually a count or a code ("education-num": a level 1-16, not an id).
_TEXT_ID_NAME = re.compile(r"(^|[_\-. ])(no|nr)$|(number|num)$")
ID_STORAGE_KINDS = ("text", "integer", "number", "unknown")  # unknown: a CSV column


def id_like(name: str, kind: str) -> bool:
    """Whether a column looks like an identifier from public metadata alone: its name (see
    :data:`_ID_NAME`; :data:`_TEXT_ID_NAME` for text only) and a text or integer storage type."""
    lower = name.lower()
    return kind in ID_STORAGE_KINDS and bool(
        _ID_NAME.search(lower) or _CAMEL_ID.search(name)
        or (kind == "text" and _TEXT_ID_NAME.search(lower)))


@dataclass(frozen=True)
class IdColumn:
    """One synthetic id column of a release: its name, output type and public format."""

    name: str
    dtype: str = "string"
    format: str = DEFAULT_FORMAT
    position: int | None = None  # its place among the release's columns (None: the end)

    def problem(self) -> str | None:
        """Why the id column can't be released, or None."""
        if self.dtype not in ID_DTYPES:
            return f"id dtype must be one of {', '.join(ID_DTYPES)}, got {self.dtype!r}"
        if not self.format.isascii():
            return f"id format {self.format!r}: ASCII characters only"
        if "#" not in self.format and "@" not in self.format:
            return f"id format {self.format!r} draws nothing: give '#' (digit) or '@' (letter)"
        if self.dtype in _DIGITS and (set(self.format) != {"#"}
                                      or len(self.format) > _DIGITS[self.dtype]):
            return (f"an {self.dtype} id's format is digits only ('#', at most "
                    f"{_DIGITS[self.dtype]}), got {self.format!r}")
        return None

    @classmethod
    def from_json(cls, spec: Any) -> IdColumn:
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise ValueError(f"an id column is an object with a 'name', got {spec!r}")
        unknown = set(spec) - {"name", "dtype", "format", "position", "type"}
        if unknown or spec.get("type", "id") != "id":
            raise ValueError(f"id column {spec['name']!r}: keys are name, dtype, format, "
                             f"position (and type 'id'), got {sorted(spec)}")
        position = spec.get("position")
        if position is not None and (isinstance(position, bool) or not isinstance(position, int)
                                     or position < 0):
            raise ValueError(f"id column {spec['name']!r}: position must be an integer >= 0, "
                             f"got {position!r}")
        column = cls(spec["name"], str(spec.get("dtype", "string")),
                     str(spec.get("format", DEFAULT_FORMAT)), position)
        problem = column.problem()
        if problem:
            raise ValueError(f"id column {column.name!r}: {problem}")
        return column

    def to_json(self) -> dict[str, Any]:
        spec = {"name": self.name, "dtype": self.dtype, "format": self.format}
        return spec if self.position is None else {**spec, "position": self.position}


def with_ids(columns: list[str], ids: tuple[IdColumn, ...]) -> list[str]:
    """The release's column names: ``columns`` (the attributes' output columns) with the id
    columns inserted at their positions, in order of position (those without one at the end)."""
    names = list(columns)
    placed = sorted((i for i in ids if i.position is not None), key=lambda i: i.position)
    for column in placed:
        names.insert(min(column.position, len(names)), column.name)
    return names + [i.name for i in ids if i.position is None]


def draw_ids(column: IdColumn, rows: int, rng: np.random.Generator) -> Any:
    """``rows`` random ids of the column's format, as its dtype."""
    chars = np.empty((rows, len(column.format)), dtype=np.uint8)
    for i, char in enumerate(column.format):
        if char == "#":
            low = 1 if i == 0 and column.dtype != "string" and len(column.format) > 1 else 0
            chars[:, i] = ord("0") + rng.integers(low, 10, rows)
        elif char == "@":
            chars[:, i] = ord("A") + rng.integers(0, 26, rows)
        else:
            chars[:, i] = ord(char)
    if column.dtype != "string":
        digits = (chars - ord("0")).astype(np.int64)
        powers = 10 ** np.arange(len(column.format) - 1, -1, -1, dtype=np.int64)
        return (digits @ powers).astype(column.dtype)
    texts = np.ascontiguousarray(chars).view(f"S{len(column.format)}").ravel()
    return pd.array(texts.astype(str), dtype="str")
