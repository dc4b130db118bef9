"""Public schema: the attributes, their bins and the rule for values outside them.

The schema is a public input written by the user. Nothing here looks at the private data: bins,
labels and the missing/unknown rules are fixed before any row is read.

JSON format (``schema_version`` 1)::

    {"schema_version": 1, "name": "adult",
     "attributes": [
        {"name": "age", "type": "numeric", "edges": [17, 25, 35, "inf"],
         "labels": ["17-24", "25-34", "35+"],          # optional, one per bin
         "extra": ["missing"],                         # optional public extra bins
         "on_missing": "missing", "on_unknown": "error"},
        {"name": "sex", "type": "categorical", "categories": ["Female", "Male"]}]}

Numeric bins are half-open ``[edges[i], edges[i+1])``; ``"inf"``/``"-inf"`` are allowed as edges.
Categories are text, and each value is compared with them on its own: a string as it is, an
integer or an integral float as its digits (3 and 3.0 are "3"), any other float as its repr
("2.5", "inf"), a bool as "True"/"False"; never depending on the other rows or the column's dtype.
``on_missing`` (a missing value) and ``on_unknown`` (a value outside the domain) are either
``"error"`` (the default: encoding stops with a message naming the column, the count and the rule,
never the value) or the label of a bin of the attribute's domain that such values are counted in.
``on_unknown`` may also be ``"clip"`` where the attribute has bin edges (numeric, datetime
``year``): a number (year) beyond the bins is counted in the nearest end bin, a value that is no
number (time) at all follows ``on_missing``.

Missing values: a real null (None, NaN, pd.NA, NaT; a Parquet null) always, and any value whose
text is listed in ``missing_values`` — per attribute, else the schema-wide ``missing_values``
(default: none). A CSV cell is text, never a null: the empty cell is ``""`` and ``NA`` is ``"NA"``;
list them in ``missing_values`` to count them as missing. A value can't be both a category and a
missing value.

Bin edges (numeric ``edges``, datetime ``year`` edges) are a list or the public range shorthand
``{"start": 0, "stop": 100, "step": 5}`` (``start, start+step, ..., stop``; ``"open_below"`` /
``"open_above": true`` add ``-inf`` / ``inf``), or a list mixing numbers and such ranges (a range
starting at the edge before it joins it), stored expanded.

``boolean``: bins ``False``/``True``; a value is True if its text is in ``true_values``, False if in
``false_values`` (defaults :data:`TRUE_VALUES` / :data:`FALSE_VALUES`), else out of domain.

Output (optional, all public; see :mod:`dp_dask.data.dtypes` and :mod:`dp_dask.data.values`):
``"dtype"``, the type the release holds (default by kind: categorical → string, numeric →
float64, boolean → bool, datetime year → timestamp[ns], other calendar units → their name),
``"min"``/``"max"``, public bounds closing a numeric (or year) attribute's open outer bins
(``min`` = ``max`` only for one bin open at both ends: a constant), and
``"decode"`` (uniform, midpoint or label; default: the release's). An output the attribute can't
hold is a SchemaError naming it. Absent keys are left out of ``to_json``, so older schemas keep
their sha256.

``"dtype_source"`` (optional; :data:`DTYPE_SOURCES`, set by ``schema draft``): where the
attribute's type came from: ``declared`` (a public codebook or sample, ``--range``, the user),
``public-storage-schema`` (the input's storage types, declared public with ``--public-types``),
``dp`` (decided under DP from noisy counts of the values' forms, :mod:`dp_dask.data.draft_types`)
or ``data`` (the input's storage types, which a pandas frame's or pandas-written Parquet's values
decide: one null turns int64 into float64). A fit of a schema with ``data`` types warns and names
those attributes in the release's privacy metadata (:attr:`Schema.types_from_data`).

Fine grid (optional, public; numeric and datetime ``year``): ``"fine"``, edges in the same list
or range form as ``edges``, finer than the bins: the marginals method measures each attribute's
histogram over it and ``uniform`` decoding draws from it (:mod:`dp_dask.data.dtypes`,
``fine_layout``). Every finite bin edge must be a fine edge, a closed outer end of the bins is the
grid's end, and a grid reaching into an open outer bin needs that bin's public ``min``/``max``
inside its outermost cell (that cell is then closed by the bound, as the open bin is); a grid
stopping at the open bin's finite edge leaves that bin decoded as without a grid. At most 100,000
cells, splitting at least one bin (``fine_problem``).

Exact values (optional, public or drafted under DP; numeric): ``"points"``, values each its own
bin [p, the next float), inserted into the edges (and the fine grid), labelled by the value: a
value equal to a point encodes there and decodes as exactly it. Within the bins' range (closed by
``min``/``max``); a point equal to an open outer bin's bound makes that bin its own. Decimal
places (optional; numeric): ``"decimals"``, 0–15, values drawn with that many places within each
bin (:mod:`dp_dask.data.values`). A lattice (optional; numeric): ``"lattice"``, a positive step s,
values drawn among the multiples k·s within each bin (wind speeds in converted knots), unless
``"decimals"`` is declared too. All three are absent from ``to_json`` when not declared.

Numeric ``"format"`` (optional, public; :data:`NUMERIC_FORMATS`): ``HHMM`` clock times (1345 is
13:45; the bins are minutes of the day, 0 to 1440, and the release writes valid HHMM values back),
``currency`` (text such as "$1,234.50" read as 1234.5; released rounded to cents) or ``percent``
("12.5%" read as 12.5).

Constraints (optional, public): a top-level ``"constraints"`` list of rules every released row
satisfies (``forbid``, ``allow_only``, ``depends``, ``null_if``, ``order``; syntax in
:mod:`dp_dask.data.constraints` and docs/guide.md), compiled and checked here (a SchemaError
naming the rule) into :attr:`Schema.constraints`; absent from ``to_json`` when none.

``datetime``: one public calendar bin set by ``unit`` (see :data:`CALENDAR_UNITS`): ``year`` (with
year ``edges``), ``month`` (Jan..Dec), ``weekday`` (Mon..Sun) or ``hour`` (00..23). Values are
parsed one by one with the public ``format`` (default ``"ISO8601"``); timezone-aware times are
taken in UTC, naive ones as written.

Calendar features of one column: a datetime attribute with ``"source": "signup"`` reads the
input column ``signup`` (not a column of its own name), so several attributes (``signup_year``,
``signup_month``, ``signup_hour``...) are features of one column, each its own bins, one per
``unit``; one of them is the ``year``. The release recombines them into one timestamp column
named ``signup`` (:mod:`dp_dask.data.values`), of the features' ``dtype`` (a timestamp type,
declared alike on any of them; default ``timestamp[ns]``) and ``decode`` (alike too). Checked
here (:meth:`Schema.sources`), naming the attribute, before any data is read.

Identifiers (optional, top level): ``"ids": [{"name": "tailnum", "dtype": "string", "format":
"N###@@", "position": 4}]``, columns that are no attribute: never read, released as synthetic ids
of the public format at their place among the release's columns (:mod:`dp_dask.data.ids`).

Each attribute's keys are read and checked by :class:`~dp_dask.data.attribute.Attribute`
(dp_dask/data/attribute.py, with :class:`~dp_dask.data.attribute.SchemaError` and the constants
named above), the constraints over the attributes by :mod:`dp_dask.data.constraints`, the rest
here: a bad schema stops as it loads, naming the key, before any data is read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from dp_dask.data.attribute import (
    CALENDAR_UNITS,  # noqa: F401  (the datetime units the format above names: importable here)
    FROM_DATA,
    Attribute,
    SchemaError,
    text_list,
)
from dp_dask.data.constraints import Constraint, parse_constraints
from dp_dask.data.dtypes import default_dtype, output_problem
from dp_dask.data.ids import IdColumn

SCHEMA_VERSION = 1
BUILTIN_SCHEMAS = ("adult", "demo")


@dataclass(frozen=True)
class Schema:
    """An ordered tuple of attributes; dummy column ``offsets[i] + code`` encodes attribute i."""

    attributes: tuple[Attribute, ...]
    name: str = "schema"
    version: int = field(default=SCHEMA_VERSION)
    # The budget spent drafting this schema from the data (dp_dask.data.draft), if any: carried into
    # every release's privacy record.
    drafted_under_dp: dict[str, Any] | None = field(default=None, compare=False)
    ids: tuple[IdColumn, ...] = ()  # synthetic id columns of the release (dp_dask.data.ids)
    # Declared constraints (dp_dask.data.constraints), compiled and checked.
    constraints: tuple[Constraint, ...] = ()
    # The release's privacy unit, {"column": ..., "max_rows": K} (dp_dask.data.units checks it);
    # None: a row.
    privacy_unit: dict[str, Any] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.attributes:
            raise SchemaError("schema has no attributes")
        names = [a.name for a in self.attributes]
        if len(set(names)) != len(names):
            raise SchemaError(f"duplicate attribute names in {names}")
        ids = [column.name for column in self.ids]
        clash = sorted(set(ids) & {*names, *self.sources}) or sorted(
            {i for i in ids if ids.count(i) > 1})
        if clash:
            raise SchemaError(f"id column {clash[0]!r} is named like another column")
        self._check_sources()

    def _check_sources(self) -> None:
        """Features of one source column: one per unit, a year among them, one dtype and
        decoding, extra bins on all or none, and a source named like no other attribute (the
        release's column)."""
        for source, features in self.sources.items():
            attributes = [self.attributes[i] for i in features]
            where = f"attribute {attributes[0].name!r}"
            other = next((a for a in self.attributes if a.name == source), None)
            if other is not None:
                raise SchemaError(f"attribute {other.name!r} is named like the source column of "
                                  f"{attributes[0].name!r}; the release recombines the features "
                                  "into that column: name the attribute apart (or make it a "
                                  f"feature with \"source\": {source!r})")
            units: dict[str, str] = {}
            for attribute in attributes:
                if attribute.unit in units:
                    raise SchemaError(f"attribute {attribute.name!r}: source {source!r} has "
                                      f"the {attribute.unit} feature already "
                                      f"({units[attribute.unit]!r})")
                units[attribute.unit] = attribute.name
            if "year" not in units:
                raise SchemaError(f"{where}: source {source!r} needs a 'year' feature (public "
                                  "year bins bound the recombined timestamp)")
            for key in ("dtype", "decode"):
                declared = {a.name: getattr(a, key) for a in attributes if getattr(a, key)}
                if len(set(declared.values())) > 1:
                    raise SchemaError(f"attribute {list(declared)[1]!r}: the features of source "
                                      f"{source!r} declare different {key}s {declared}; they "
                                      "make one column")
            extra = [a.name for a in attributes if a.size > a.bins]
            if extra and len(extra) < len(attributes):
                bare = next(a.name for a in attributes if a.name not in extra)
                raise SchemaError(f"attribute {bare!r}: the release's {source!r} is null where "
                                  f"a feature's extra bin is ({extra[0]!r} has some), and a null "
                                  "reads back as an extra bin of each feature: give it one too "
                                  "(e.g. \"extra\": [\"missing\"], \"on_missing\": \"missing\")")
            dtype = self.source_dtype(source)
            year = self.attributes[features[list(units).index("year")]]
            problem = output_problem(dataclasses.replace(year, dtype=dtype, fine=()))
            if problem:
                raise SchemaError(f"attribute {year.name!r}: {problem}")

    @property
    def sources(self) -> dict[str, tuple[int, ...]]:
        """Each source column the schema recombines, with its features' positions."""
        sources: dict[str, list[int]] = {}
        for i, attribute in enumerate(self.attributes):
            if attribute.source:
                sources.setdefault(attribute.source, []).append(i)
        return {source: tuple(features) for source, features in sources.items()}

    def source_dtype(self, source: str) -> str:
        """The dtype of a source's recombined column: declared on its features, or the default."""
        declared = [self.attributes[i].dtype for i in self.sources[source]]
        return next((d for d in declared if d), default_dtype("datetime", "year", source))

    @property
    def columns(self) -> list[str]:
        """The input columns the schema reads, in schema order (a source once)."""
        return list(dict.fromkeys(a.column for a in self.attributes))

    def read_columns(self, available: Iterable[str]) -> list[str]:
        """The columns a table is read by: the input's; in a release, where a source column is
        absent, its features' own (label) columns."""
        present = set(available)
        return list(dict.fromkeys(a.read_column(present) for a in self.attributes))

    @property
    def names(self) -> list[str]:
        return [a.name for a in self.attributes]

    @property
    def types_from_data(self) -> list[str]:
        """The attributes whose type a draft took from the data's storage types (not public)."""
        return [a.name for a in self.attributes if a.dtype_source == FROM_DATA]

    @property
    def sizes(self) -> np.ndarray:
        return np.array([a.size for a in self.attributes], dtype=np.int64)

    @property
    def offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)

    @property
    def m(self) -> int:
        """Number of attributes."""
        return len(self.attributes)

    @property
    def d(self) -> int:
        """Number of dummy (binary) columns."""
        return int(self.sizes.sum())

    @property
    def fine_grids(self) -> tuple[int, ...]:
        """The attributes with a fine grid, in schema order."""
        return tuple(i for i, a in enumerate(self.attributes) if a.fine)

    def column_labels(self) -> list[str]:
        return [f"{a.name}={label}" for a in self.attributes for label in a.labels]

    def __getitem__(self, name: str) -> Attribute:
        for attribute in self.attributes:
            if attribute.name == name:
                return attribute
        raise KeyError(name)

    def as_labels(self) -> Schema:
        """The same domain with each attribute categorical over its labels: reads decoded output."""
        attributes = tuple(Attribute(a.name, "categorical", a.labels, categories=a.labels)
                           for a in self.attributes)
        return Schema(attributes, name=self.name, version=self.version)

    def to_json(self) -> dict[str, Any]:
        spec = {
            "schema_version": self.version,
            "name": self.name,
            "attributes": [a.to_json() for a in self.attributes],
        }
        if self.drafted_under_dp:  # absent otherwise: other schemas keep their sha256
            spec["drafted_under_dp"] = self.drafted_under_dp
        if self.ids:  # absent otherwise, as drafted_under_dp
            spec["ids"] = [column.to_json() for column in self.ids]
        if self.constraints:  # likewise
            spec["constraints"] = [c.to_json() for c in self.constraints]
        if self.privacy_unit:  # likewise
            spec["privacy_unit"] = self.privacy_unit
        return spec

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)

    def sha256(self) -> str:
        canonical = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    @classmethod
    def from_json(cls, spec: dict[str, Any], base: Path | None = None) -> Schema:
        """The schema of a JSON object; ``base``: the folder its constraints' relative table
        paths are read from."""
        if not isinstance(spec, dict) or "attributes" not in spec:
            raise SchemaError("schema JSON must be an object with an 'attributes' list")
        version = int(spec.get("schema_version", SCHEMA_VERSION))
        if version != SCHEMA_VERSION:
            raise SchemaError(f"schema_version {version} is not supported (expected 1)")
        if not isinstance(spec["attributes"], list):
            raise SchemaError("schema JSON: 'attributes' must be a list")
        missing_values = text_list(spec, "missing_values", "schema")  # default of every attribute
        attributes = tuple(Attribute.from_json(a, missing_values) for a in spec["attributes"])
        drafted = spec.get("drafted_under_dp")
        if drafted is not None and not isinstance(drafted, dict):
            raise SchemaError("schema JSON: 'drafted_under_dp' must be an object")
        unit = spec.get("privacy_unit")
        if unit is not None and not isinstance(unit, dict):
            raise SchemaError("schema JSON: 'privacy_unit' must be an object "
                              "{\"column\": ..., \"max_rows\": K}")
        if not isinstance(spec.get("ids", []), list):
            raise SchemaError("schema JSON: 'ids' must be a list")
        try:
            ids = tuple(IdColumn.from_json(column) for column in spec.get("ids", []))
        except ValueError as exc:
            raise SchemaError(str(exc)) from None
        return cls(attributes, name=str(spec.get("name", "schema")), version=version,
                   drafted_under_dp=drafted, ids=ids,
                   constraints=parse_constraints(spec.get("constraints", []), attributes, base),
                   privacy_unit=unit)


def load_schema(source: str | Path | dict[str, Any] | Schema) -> Schema:
    """A schema from a Schema, a JSON dict, a JSON file, or a built-in name ('adult', 'demo')."""
    if isinstance(source, Schema):
        return source
    if isinstance(source, dict):
        return Schema.from_json(source)
    if str(source) in BUILTIN_SCHEMAS:
        text = resources.files("dp_dask.schemas").joinpath(f"{source}.json").read_text()
    else:
        path = Path(source)
        if not path.exists():
            builtins = ", ".join(BUILTIN_SCHEMAS)
            raise FileNotFoundError(
                f"schema {str(source)!r} is neither a file nor a built-in ({builtins})"
            )
        if path.is_dir():
            raise SchemaError(f"schema {str(source)!r} is a directory, not a JSON file")
        text = path.read_text()
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"schema {source}: invalid JSON ({exc})") from exc
    return Schema.from_json(spec, None if str(source) in BUILTIN_SCHEMAS else Path(source).parent)
