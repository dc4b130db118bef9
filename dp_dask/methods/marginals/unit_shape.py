"""Unit-shaped releases (issue 67): under a privacy unit, a release of synthetic units, not rows.

Without it a release under a privacy unit (:mod:`dp_dask.data.units`) has the shape of a row
release: no two rows share a unit, nothing is constant within one. With the marginals method's
``unit_shape=True`` the release is a set of synthetic units instead:

* each unit's number of rows (1..K) and its **unit-level attributes** (those the schema declares
  ``"unit_level": true``) come from a *unit model*: the marginals method fitted to the bounded
  data's *unit table*, one row per unit holding its unit-level codes and its rows after bounding
  (the attribute :func:`rows_attribute`, categories "1".."K");
* the rows come from the *row model*: the usual marginals release of the bounded rows, every
  attribute (unit-level ones too, so row-level attributes are measured jointly with them), its
  sensitivity that of K rows;
* each partition draws its units, then its rows, and deals the rows to the units that hold the
  same unit-level codes (a merge on the codes and each one's rank among equals): rows left over
  fill the slots left over, their unit-level codes overwritten by their unit's. Every unit-level
  value is then its unit's (decoded values too: one per unit), and every row of a unit carries
  the unit's synthetic id, of the format the schema's ``ids`` give the unit column (default
  12 digits, :mod:`dp_dask.data.ids`).

Which value stands for a unit. A declared unit-level attribute may still vary within a unit in
the data; the unit table takes, per unit, the smallest code combination of its unit-level
attributes among its kept rows (a function of that unit's bounded rows alone; the output is
constant within every unit whatever the input held).

Privacy. The unit table holds one row per unit, so a unit moves one row of it: its 1-/2-way
tables have a row's sensitivity (replace: L2 √2, add/remove: 1), the rows-per-unit histogram
included. The row model's tables have K rows' (``table_sensitivity(..., max_rows=K)``). The two
models are Gaussian measurements of the same unit-level neighbours: their ρ add up (zCDP, and
the exact accountant's Gaussian composition), the unit model taking :data:`UNIT_SHARE` of the
measurements' ρ. Under replace-one-unit neighbours the number of units is the same in both data
sets, so it is public as n is for a row release (under add/remove the unit model estimates it
from its noisy counts). Dealing, overwriting and ids are post-processing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
from dask.delayed import Delayed

from dp_dask.conditions import ConditionError
from dp_dask.copula.sample import PartitionSampler, ReleaseSampler, draw_codes
from dp_dask.data.attribute import Attribute
from dp_dask.data.counts import counts_from_codes, tree_sum
from dp_dask.data.encode import code_dtype, encode_partition
from dp_dask.data.ids import IdColumn, draw_ids
from dp_dask.data.io import Location, join
from dp_dask.data.schema import Schema
from dp_dask.data.tables import one_hot
from dp_dask.methods.marginals.model import MarginalModel
from dp_dask.model_io import read_model_document

UNIT_SHARE = 0.2  # of the measurements' ρ, to the unit model (the rest: the row model)
UNIT_KEY = "__dp_dask_unit__"  # the unit column's copy carried through bounding, then dropped
_DRAW_MARGIN = 1.1  # units drawn per partition over the expected need (more drawn if short)


def unit_level(schema: Schema) -> list[int]:
    """The indices of the attributes declared ``"unit_level": true``."""
    return [i for i, attribute in enumerate(schema.attributes) if attribute.unit_level]


def rows_attribute(unit_column: str, max_rows: int) -> Attribute:
    """The unit table's attribute of rows per unit: categories "1".."K" (code = rows − 1)."""
    categories = tuple(str(k) for k in range(1, max_rows + 1))
    return Attribute(f"{unit_column} rows", "categorical", categories, categories=categories)


def unit_schema(schema: Schema, unit_column: str, max_rows: int) -> Schema:
    """The unit table's public schema: the unit-level attributes (their fine grids left out:
    the row model measures those) and the rows per unit, last."""
    attributes = [replace(schema.attributes[i], fine=()) for i in unit_level(schema)]
    return Schema((*attributes, rows_attribute(unit_column, max_rows)),
                  name=f"{schema.name} units")


def unit_id_column(schema: Schema, unit_column: str) -> IdColumn:
    """The release's unit id column: the schema's id column of that name (its format and
    place), else one of the default format at the end."""
    declared = [column for column in schema.ids if column.name == unit_column]
    return declared[0] if declared else IdColumn(unit_column)


def release_schema(schema: Schema, unit_column: str) -> Schema:
    """``schema`` with the unit id column among its ids: the columns a unit-shaped release
    writes."""
    if any(column.name == unit_column for column in schema.ids):
        return schema
    return replace(schema, ids=(*schema.ids, IdColumn(unit_column)))


def _unit_rows(frame: pd.DataFrame, schema: Schema, levels: list[int]) -> pd.DataFrame:
    """Per row of a bounded partition: its unit (UNIT_KEY) and the mixed-radix key of its
    unit-level codes."""
    if levels:
        codes = encode_partition(frame, schema)[levels].astype(np.int64)
        key = np.ravel_multi_index(tuple(codes), tuple(schema.sizes[levels]))
    else:
        key = np.zeros(len(frame), dtype=np.int64)
    return pd.DataFrame({UNIT_KEY: frame[UNIT_KEY].to_numpy(), "key": key})


def _unit_counts(units: pd.DataFrame, schema: Schema, units_schema: Schema,
                 levels: list[int]) -> np.ndarray:
    """The unit table's d×d counts of one partition of units (their key and rows)."""
    codes = np.empty((units_schema.m, len(units)), dtype=code_dtype(units_schema))
    if levels:
        codes[:-1] = np.unravel_index(units["key"].to_numpy(), tuple(schema.sizes[levels]))
    codes[-1] = units["rows"].to_numpy() - 1
    return counts_from_codes(codes, units_schema)


def unit_count_graph(ddf: dd.DataFrame, schema: Schema, units_schema: Schema) -> Delayed:
    """Lazily, the unit table's d×d counts and its number of units, from the bounded rows
    (carrying UNIT_KEY): a groupby over (unit, key) pairs only, so no row moves whole."""
    levels = unit_level(schema)
    meta = pd.DataFrame({UNIT_KEY: pd.Series([], dtype=object),
                         "key": pd.Series([], dtype=np.int64)})
    keyed = ddf.map_partitions(_unit_rows, schema, levels, meta=meta)
    per_unit = keyed.groupby(UNIT_KEY, dropna=False).agg(
        key=("key", "min"), rows=("key", "size"), split_out=ddf.npartitions)
    counts = [dask.delayed(_unit_counts)(part, schema, units_schema, levels)
              for part in per_unit.to_delayed()]
    return tree_sum(counts)


def _child(seed: np.random.SeedSequence, stream: int) -> np.random.SeedSequence:
    """A child of ``seed`` by its stream number alone: the same whenever asked (spawn is not)."""
    return np.random.SeedSequence(seed.entropy, spawn_key=(*seed.spawn_key, stream))


@dataclass(frozen=True)
class UnitSampler:
    """One partition of a unit-shaped release: units from ``units`` (the unit model's sampler),
    rows from ``rows`` (the row model's), dealt to the units by their unit-level codes.

    ``schema``: the release's (the unit id among its ids); ``levels``: the unit-level attributes'
    indices; ``mean_rows``: the unit model's expected rows per unit."""

    schema: Schema
    rows: PartitionSampler
    units: PartitionSampler
    levels: tuple[int, ...]
    unit_id: IdColumn
    mean_rows: float

    @property
    def fine(self) -> dict[int, np.ndarray]:
        return getattr(self.rows, "fine", {})

    def estimates(self, sizes: list[int]) -> int:
        return self.rows.estimates(sizes) if isinstance(self.rows, ReleaseSampler) else 1

    def for_release(self, rows: int, seed: np.random.SeedSequence,
                    release_rows: int | None = None) -> UnitSampler:
        """Both models' estimates made once per release (:class:`ReleaseSampler`)."""
        shared = {}
        for stream, name, size in ((0, "rows", rows), (1, "units", self._units_needed(rows))):
            sampler = getattr(self, name)
            if isinstance(sampler, ReleaseSampler):
                shared[name] = sampler.for_release(size, _child(seed, stream))
        return replace(self, **shared)

    def _units_needed(self, rows: int) -> int:
        return math.ceil(rows / self.mean_rows * _DRAW_MARGIN) + 10

    def draw_units(self, rows: int, seed: np.random.SeedSequence) -> np.ndarray:
        """The partition's units' codes (unit-level attributes, then rows − 1), as many as fill
        ``rows`` rows, the last one's rows cut to fit: a function of the seed alone."""
        units, draws = [], 0
        while True:
            drawn = draw_codes(self.units, self._units_needed(rows),
                               _child(seed, 10 + draws)).astype(np.int64)
            units.append(drawn)
            sizes = np.concatenate(units)[:, -1] + 1
            draws += 1
            if sizes.sum() >= rows:
                break
        codes = np.concatenate(units)
        ends = np.cumsum(codes[:, -1] + 1)
        used = int(np.searchsorted(ends, rows)) + 1  # the first unit reaching `rows`
        codes = codes[:used]
        codes[-1, -1] -= ends[used - 1] - rows  # cut the last to fit
        return codes

    def draw_codes(self, rows: int, seed: np.random.SeedSequence) -> np.ndarray:
        """The partition's rows, unit by unit (a unit's rows adjacent, in the order of
        :meth:`draw_units`): each row of the row model dealt to a unit of its unit-level codes
        where one has room, the rest to the rooms left; the units' codes then overwrite the
        rows' unit-level codes."""
        units = self.draw_units(rows, seed)
        sizes = units[:, -1] + 1
        drawn = draw_codes(self.rows, rows, _child(seed, 1)).astype(np.int64)
        rng = np.random.default_rng(_child(seed, 2))
        drawn = drawn[rng.permutation(rows)]  # which row of a key meets which room: random
        levels = list(self.levels)
        room_unit = np.repeat(np.arange(len(units)), sizes)
        if levels:
            radix = tuple(self.schema.sizes[levels])
            unit_key = np.ravel_multi_index(tuple(units[:, :-1].T), radix)[room_unit]
            row_key = np.ravel_multi_index(tuple(drawn[:, levels].T), radix)
        else:
            unit_key, row_key = np.zeros(rows, np.int64), np.zeros(rows, np.int64)
        rooms = pd.DataFrame({"key": unit_key, "room": np.arange(rows)})
        rooms["rank"] = rooms.groupby("key").cumcount()
        candidates = pd.DataFrame({"key": row_key, "row": np.arange(rows)})
        candidates["rank"] = candidates.groupby("key").cumcount()
        dealt = rooms.merge(candidates, on=["key", "rank"])  # same codes, one to one
        order = np.full(rows, -1, dtype=np.int64)
        order[dealt["room"].to_numpy()] = dealt["row"].to_numpy()
        left = np.setdiff1d(np.arange(rows), dealt["row"].to_numpy(), assume_unique=True)
        order[order < 0] = left  # rows of codes no unit holds: to the rooms left
        codes = drawn[order]
        if levels:
            codes[:, levels] = units[room_unit, :-1]
        return codes.astype(np.int16)

    def draw(self, rows: int, seed: np.random.SeedSequence) -> tuple[np.ndarray, np.ndarray]:
        codes = self.draw_codes(rows, seed)
        return one_hot(codes, self.schema), codes

    def finish_frame(self, frame: pd.DataFrame, codes: np.ndarray,
                     seed: np.random.SeedSequence) -> pd.DataFrame:
        """The decoded rows with each unit's id, and each unit-level column's value that of its
        unit's first row (a numeric bin decodes to one value per unit, not per row)."""
        sizes = self.draw_units(len(frame), seed)[:, -1] + 1
        first = np.repeat(np.cumsum(sizes) - sizes, sizes)
        for i in self.levels:
            attribute = self.schema.attributes[i]
            for column in {attribute.name, attribute.column} & set(frame.columns):
                frame[column] = frame[column].to_numpy()[first]
        ids = draw_ids(self.unit_id, len(sizes), np.random.default_rng(_child(seed, 3)))
        frame[self.unit_id.name] = np.asarray(ids)[np.repeat(np.arange(len(sizes)), sizes)]
        return frame


@dataclass(frozen=True)
class UnitShapedModel:
    """A unit-shaped release's model: the row model, the unit model and the release schema."""

    rows: MarginalModel
    units: MarginalModel
    schema: Schema  # the release's: the row model's with the unit id among its ids
    unit_column: str

    method: ClassVar[str] = "marginals"

    @property
    def metadata(self) -> dict[str, Any]:
        return self.rows.metadata

    @property
    def n_rows(self) -> int:
        """The rows a release draws by default: the units' number times their mean rows."""
        return max(1, round(self.units.n_rows * self.mean_rows))

    @property
    def mean_rows(self) -> float:
        """Rows per unit in the unit model's consistent histogram of rows."""
        histogram = np.clip(self.units.marginals.one_way[-1], 0, None)
        total = histogram.sum()
        return float((histogram * np.arange(1, len(histogram) + 1)).sum() / total) \
            if total > 0 else 1.0

    def sampler(self) -> UnitSampler:
        levels = tuple(unit_level(self.rows.schema))
        return UnitSampler(self.schema, self.rows.sampler(), self.units.sampler(), levels,
                           unit_id_column(self.schema, self.unit_column), self.mean_rows)

    def conditioned_sampler(self, where: str | None, balance: str | None,
                            decode: str = "uniform") -> Any:
        raise ConditionError("a unit-shaped release cannot be sampled conditionally "
                             "(--where, --balance): its units are drawn whole")

    def save(self, path: Location, storage_options: dict[str, Any] | None = None) -> Location:
        """The row model at ``path`` (its metadata's ``unit_shape`` marks it), the unit model
        in ``path/units``."""
        self.units.save(join(path, "units"), storage_options)
        return self.rows.save(path, storage_options)

    @classmethod
    def from_files(cls, path: Location, document: dict[str, Any],
                   storage_options: dict[str, Any] | None = None) -> UnitShapedModel:
        rows = MarginalModel.from_files(path, document, storage_options)
        units_path = join(path, "units")
        units = MarginalModel.from_files(
            units_path, read_model_document(units_path, storage_options=storage_options),
            storage_options)
        column = document["metadata"]["unit_shape"]["unit"]
        return cls(rows, units, release_schema(rows.schema, column), column)
