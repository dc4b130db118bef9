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

:func:`distinct_ids` gives ids that are distinct by construction (a unit-shaped release's unit
ids, where two units sharing an id would merge into one of more than K rows): a keyed
pseudo-random permutation of the format's id space (:func:`keyed_permutation`) applied to
distinct sequence numbers, so the ids look random, of the same format, and never collide.

:func:`id_like` is the public rule ``schema draft`` detects identifiers by: the column's name and
storage type (metadata), never its values.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

ID_DTYPES = ("string", "int64", "int32")
DEFAULT_FORMAT = "#" * 12
_DIGITS = {"int64": 18, "int32": 9}  # the most digits the integer type always holds
# The permuted part of a format's id space stays below this, so that the Feistel network's
# halves (at most 2**31 each) and their products fit in uint64 arithmetic.
_PERMUTED_SPACE = 2**62
FEISTEL_ROUNDS = 8  # not a cipher (ids are public post-processing): enough to look random
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
    return _typed(column, _random_chars(column, rows, rng))


def _radices(column: IdColumn) -> list[tuple[int, int, int]]:
    """Per drawn position of the format: (position, radix, first character's code); an integer
    id's first digit is 1-9, so that every id has the format's length."""
    drawn = []
    for i, char in enumerate(column.format):
        if char == "#":
            low = 1 if i == 0 and column.dtype != "string" and len(column.format) > 1 else 0
            drawn.append((i, 10 - low, ord("0") + low))
        elif char == "@":
            drawn.append((i, 26, ord("A")))
    return drawn


def _random_chars(column: IdColumn, rows: int, rng: np.random.Generator) -> np.ndarray:
    """``rows`` ids' characters (rows × the format's length), each drawn position uniform."""
    chars = np.empty((rows, len(column.format)), dtype=np.uint8)
    drawn = {position: (radix, first) for position, radix, first in _radices(column)}
    for i, char in enumerate(column.format):
        if i in drawn:
            radix, first = drawn[i]
            chars[:, i] = first + rng.integers(0, radix, rows)
        else:
            chars[:, i] = ord(char)
    return chars


def _typed(column: IdColumn, chars: np.ndarray) -> Any:
    """Ids as the column's dtype from their characters (rows × the format's length)."""
    if column.dtype != "string":
        digits = (chars - ord("0")).astype(np.int64)
        powers = 10 ** np.arange(len(column.format) - 1, -1, -1, dtype=np.int64)
        return (digits @ powers).astype(column.dtype)
    texts = np.ascontiguousarray(chars).view(f"S{len(column.format)}").ravel()
    return pd.array(texts.astype(str), dtype="str")


def _permuted(column: IdColumn) -> tuple[list[tuple[int, int, int]], int]:
    """The drawn positions :func:`distinct_ids` permutes, the format's last ones (all of them
    where the whole space stays under ``_PERMUTED_SPACE``), and the number of ids they hold."""
    permuted, space = [], 1
    for position in reversed(_radices(column)):
        if space * position[1] > _PERMUTED_SPACE:
            break
        permuted.insert(0, position)
        space *= position[1]
    return permuted, space


def id_space(column: IdColumn) -> int:
    """How many distinct ids :func:`distinct_ids` can give for the column's format: its whole
    id space (10¹² for the default format), or for a format past 2⁶² ids that of its last
    positions."""
    return _permuted(column)[1]


def _round_hash(values: np.ndarray, key: np.uint64) -> np.ndarray:
    """A keyed 64-bit hash of uint64 ``values`` (splitmix64's finaliser of value ^ key)."""
    z = (values ^ key) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def keyed_permutation(values: np.ndarray, size: int, keys: np.ndarray) -> np.ndarray:
    """A pseudo-random permutation of ``range(size)`` (``size`` ≤ 2⁶²), keyed by ``keys`` (one
    uint64 per round), applied to ``values``: distinct values give distinct results. A
    Feistel network on (value // h, value % h), h = ⌈√size⌉, each round a bijection of
    [0, h²); cycle walking (encrypt again while the result is ≥ ``size``) restricts it to
    [0, size) and stays a bijection there."""
    if not 0 < size <= _PERMUTED_SPACE:
        raise ValueError(f"a keyed permutation's size must be in 1..2**62, got {size}")
    half = np.uint64(math.isqrt(size - 1) + 1)

    def encrypt(x: np.ndarray) -> np.ndarray:
        left, right = x // half, x % half
        for key in keys:
            left, right = right, (left + _round_hash(right, key) % half) % half
        return left * half + right

    out = encrypt(np.asarray(values, dtype=np.uint64))
    outside = np.flatnonzero(out >= np.uint64(size))
    while len(outside):  # h² < size + 2h + 1: few values walk, and those few steps
        out[outside] = encrypt(out[outside])
        outside = outside[out[outside] >= np.uint64(size)]
    return out


def distinct_ids(column: IdColumn, sequence: np.ndarray, key: np.random.SeedSequence,
                 rng: np.random.Generator) -> Any:
    """Ids of the column's format and dtype, one per number of ``sequence`` (distinct integers
    in ``0 .. id_space(column) - 1``), distinct where the numbers are: each number's image by
    :func:`keyed_permutation` (round keys from ``key``) written, in mixed radix, on the
    format's permuted positions (:func:`_permuted`); ``rng`` draws the positions before them,
    if the format has more ids than 2⁶² (the permuted ones keep the ids apart)."""
    permuted, space = _permuted(column)
    sequence = np.asarray(sequence, dtype=np.int64)
    if len(sequence) and (sequence.min() < 0 or sequence.max() >= space):
        raise ValueError(f"id column {column.name!r}: format {column.format!r} holds {space} "
                         f"distinct ids, fewer than the {int(sequence.max()) + 1} needed")
    keys = key.generate_state(FEISTEL_ROUNDS, np.uint64)
    rest = keyed_permutation(sequence, space, keys) if len(sequence) else np.zeros(0, np.uint64)
    chars = _random_chars(column, len(sequence), rng)
    for position, radix, first in reversed(permuted):
        chars[:, position] = first + (rest % np.uint64(radix)).astype(np.uint8)
        rest //= np.uint64(radix)
    return _typed(column, chars)
