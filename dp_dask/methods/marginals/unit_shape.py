"""Unit-shaped releases (issue 67): under a privacy unit, a release of synthetic units, not rows.

Without it a release under a privacy unit (:mod:`dp_dask.data.units`) has the shape of a row
release: no two rows share a unit, nothing is constant within one. The marginals method's
release under a privacy unit is a set of synthetic units instead (its default; ``unit_shape``
False opts out, :class:`~.synthesizer.MarginalSynthesizer`):

* each unit's number of rows (1..K) and its **unit-level attributes** (those the schema declares
  ``"unit_level": true``, and under the privacy unit's ``unit_level: "auto"`` those found so
  under DP before the fit, :func:`dp_dask.data.units.find_unit_level`) come from a *unit
  model*: the marginals method fitted to the bounded data's *unit table*, one row per unit
  holding its unit-level codes and its rows after bounding (the attribute
  :func:`rows_attribute`, categories "1".."K");
* the rows come from the *row model*: the usual marginals release of the bounded rows, every
  attribute (unit-level ones too, so row-level attributes are measured jointly with them), its
  sensitivity that of K rows;
* each partition draws its units, then its rows, and deals the rows to the units that hold the
  same unit-level codes (a merge on the codes and each one's rank among equals): rows left over
  fill the slots left over, their unit-level codes overwritten by their unit's. Every unit-level
  value is then its unit's (decoded values too: one per unit), and every row of a unit carries
  the unit's synthetic id, of the format the schema's ``ids`` give the unit column (default
  12 digits, :mod:`dp_dask.data.ids`): distinct by construction (:func:`unit_ids`), so no two
  units merge into one of more than K rows.

Which value stands for a unit. A declared unit-level attribute may still vary within a unit in
the data; the unit table takes, per unit, the smallest code combination of its unit-level
attributes among its kept rows (a function of that unit's bounded rows alone; the output is
constant within every unit whatever the input held).

Privacy. The unit table holds one row per unit, so a unit moves one row of it: its 1-/2-way
tables have a row's sensitivity (replace: L2 √2, add/remove: 1), the rows-per-unit histogram
included. The row model's tables have K rows' (``table_sensitivity(..., max_rows=K)``). The two
models are Gaussian measurements of the same unit-level neighbours: their ρ add up (zCDP, and
the exact accountant's Gaussian composition), the unit model taking
``MarginalsConfig.unit_share`` of the measurements' ρ. Under replace-one-unit neighbours the
number of units is the same in both data sets, so it is public as n is for a row release
(under add/remove the unit model estimates it from its noisy counts). Dealing, overwriting and
ids are post-processing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import dask.dataframe as dd
import numpy as np
import pandas as pd
from dask.delayed import Delayed

from dp_dask.conditions import ConditionError
from dp_dask.copula.sample import PartitionSampler, ReleaseSampler, draw_codes
from dp_dask.data.attribute import Attribute
from dp_dask.data.counts import counts_from_codes, partition_reduction
from dp_dask.data.encode import code_dtype, encode_partition
from dp_dask.data.ids import IdColumn, distinct_ids, id_space
from dp_dask.data.io import Location, join
from dp_dask.data.schema import Schema
from dp_dask.data.tables import one_hot
from dp_dask.data.units import shuffle_method
from dp_dask.methods.marginals.model import MarginalModel
from dp_dask.model_io import read_model_arrays, read_model_document, write_model_files

# a unit's pairs in the lag-1 table weigh LAG_WEIGHT // pairs each: at most LAG_WEIGHT in all
LAG_WEIGHT = 2**16
UNIT_KEY = "__dp_dask_unit__"  # the unit column's copy carried through bounding, then dropped
_DRAW_MARGIN = 1.1  # units drawn per partition over the expected need (more drawn if short)
_IDS_STREAM = 2**63 + 67  # the release seed's stream keying its unit ids (never a partition's)


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
    return partition_reduction(per_unit, _unit_counts, schema, units_schema, levels)


def _unit_codes(frame: pd.DataFrame, schema: Schema, order: int, lag: int) -> pd.DataFrame:
    """Per row of a bounded partition: its unit (UNIT_KEY), order code and lag code."""
    codes = encode_partition(frame, schema)
    return pd.DataFrame({UNIT_KEY: frame[UNIT_KEY].to_numpy(),
                         "order": codes[order].astype(np.int64),
                         "lag": codes[lag].astype(np.int64)})


def ordinal(attribute: Attribute) -> bool:
    """Whether an attribute's codes are ordered bins (numeric, datetime years): its lag-1
    relation is then measured as steps between codes, else as a table of code pairs."""
    return bool(attribute.edges)


def lag_pairs(frame: pd.DataFrame, size: int, steps: bool, once: bool = True) -> np.ndarray:
    """The (previous, this) lag-code pairs' weighted counts (size × size, flattened), or with
    ``steps`` their steps this − previous (2·size − 1 cells, from −(size − 1)), of a
    partition holding every row of its units: a unit's rows in the order of their order codes,
    ties by their lag codes (a function of the unit's rows alone; nulls one unit), each of its
    p pairs weighing LAG_WEIGHT // p, so that one unit adds at most LAG_WEIGHT in all (L1, and
    so L2) whatever its rows: the table's sensitivity is a row's times LAG_WEIGHT, not K − 1
    rows'. The table then counts each unit once, its transitions averaged. ``once`` False
    weighs every pair LAG_WEIGHT (a unit counted once per pair): the bug the audit's plant
    lag-pairs-unweighted releases, never the product's."""
    unit, _ = pd.factorize(frame[UNIT_KEY], use_na_sentinel=True)
    order = np.lexsort((frame["lag"].to_numpy(), frame["order"].to_numpy(), unit))
    unit, lag = unit[order], frame["lag"].to_numpy()[order]
    follows = unit[1:] == unit[:-1]
    _, owner, pairs_of = np.unique(unit[1:][follows], return_inverse=True, return_counts=True)
    # a unit's pairs: LAG_WEIGHT at most in all
    weights = LAG_WEIGHT // pairs_of[owner] if once else np.full(len(owner), LAG_WEIGHT)
    before, this = lag[:-1][follows], lag[1:][follows]
    cells = this - before + size - 1 if steps else before * size + this
    return np.bincount(cells, weights=weights, minlength=2 * size - 1 if steps
                       else size * size).astype(np.int64)


def lag_count_graph(ddf: dd.DataFrame, schema: Schema, order: int, lag: int,
                    once: bool = True) -> Delayed:
    """Lazily, the lag-1 table of attribute ``lag`` (its steps where :func:`ordinal`):
    consecutive rows' codes within each unit of the bounded rows (carrying UNIT_KEY), ordered
    by attribute ``order``, each unit weighed ``once`` (:func:`lag_pairs`). Only the unit and
    two codes per row move (a shuffle on the unit), never whole rows."""
    meta = pd.DataFrame({UNIT_KEY: pd.Series([], dtype=object),
                         "order": pd.Series([], dtype=np.int64),
                         "lag": pd.Series([], dtype=np.int64)})
    codes = ddf.map_partitions(_unit_codes, schema, order, lag, meta=meta)
    together = codes.shuffle(on=UNIT_KEY, shuffle_method=shuffle_method())
    size, steps = int(schema.sizes[lag]), ordinal(schema.attributes[lag])
    return partition_reduction(together, lag_pairs, size, steps, once)


def transitions(noisy: np.ndarray, sigma: float, prior: np.ndarray) -> np.ndarray:
    """Row-stochastic P(this | previous) from a noisy lag-1 table, or steps (1-D), whose
    noise has std ``sigma``: cells below ``sigma`` set to 0 (clipped at 0 alone, the empty
    cells' noise would add about 0.4 σ each, spread over every jump). Steps give
    P(this | previous) ∝ steps[this − previous] · prior[this] (``prior``: the row model's
    histogram of the attribute, so the chain keeps near its shares). A previous code with no
    mass left takes the table's column marginal, or the prior (uniform if all is gone)."""
    kept = np.where(noisy > sigma, noisy, 0.0)
    if kept.ndim == 1:
        size = len(prior)
        weights = np.clip(prior, 0.0, None)
        step = np.arange(size)[None, :] - np.arange(size)[:, None] + size - 1
        table = kept[step] * weights[None, :]
    else:
        table = kept
    marginal = table.sum(axis=0)
    marginal = marginal / marginal.sum() if marginal.sum() > 0 else np.full(len(table),
                                                                            1 / len(table))
    totals = table.sum(axis=1, keepdims=True)
    return np.where(totals > 0, table / np.where(totals > 0, totals, 1), marginal)


def _deal(slot_keys: np.ndarray, row_keys: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """For each slot, the index of the row it takes: a row of the slot's key where one is left
    (which row of a key meets which slot: random), the rows left over to the slots left over
    (in random order)."""
    rows = len(row_keys)
    shuffled = rng.permutation(rows)
    slots = pd.DataFrame({"key": slot_keys, "slot": np.arange(len(slot_keys))})
    slots["rank"] = slots.groupby("key").cumcount()
    candidates = pd.DataFrame({"key": row_keys[shuffled], "row": shuffled})
    candidates["rank"] = candidates.groupby("key").cumcount()
    dealt = slots.merge(candidates, on=["key", "rank"])  # same key, one to one
    taken = np.full(len(slot_keys), -1, dtype=np.int64)
    taken[dealt["slot"].to_numpy()] = dealt["row"].to_numpy()
    free = np.ones(rows, dtype=bool)
    free[dealt["row"].to_numpy()] = False
    taken[taken < 0] = shuffled[free[shuffled]]
    return taken


def unit_ids(column: IdColumn, units: int, seed: np.random.SeedSequence,
             partition_rows: int) -> Any:
    """A partition's ``units`` unit ids, distinct across the whole release: the partition's
    seed is its release's ``i``-th spawned child (:func:`dp_dask.copula.sample
    ._seeded_partitions`), every partition before the last holds ``partition_rows`` rows and
    a unit at least one, so unit ``j`` of partition ``i`` has the release-wide sequence number
    ``i · partition_rows + j``, below the release's rows; :func:`~dp_dask.data.ids.distinct_ids`
    maps it through a permutation of the format's id space keyed by the release's seed alone."""
    *release, partition = seed.spawn_key
    key = np.random.SeedSequence(seed.entropy, spawn_key=(*release, _IDS_STREAM))
    sequence = partition * partition_rows + np.arange(units, dtype=np.int64)
    return distinct_ids(column, sequence, key, np.random.default_rng(_child(seed, 3)))


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
    order: int | None = None  # the attribute ordering a unit's rows
    lag: int | None = None  # the attribute whose lag-1 relation ``transition`` holds
    transition: np.ndarray | None = None  # P(this code | previous code), row-stochastic
    partition_rows: int | None = None  # the release's rows per partition (for_release's)

    @property
    def fine(self) -> dict[int, np.ndarray]:
        return getattr(self.rows, "fine", {})

    def estimates(self, sizes: list[int]) -> int:
        return self.rows.estimates(sizes) if isinstance(self.rows, ReleaseSampler) else 1

    def for_release(self, rows: int, seed: np.random.SeedSequence,
                    release_rows: int | None = None) -> UnitSampler:
        """Both models' estimates made once per release (:class:`ReleaseSampler`), and its
        rows per partition, which number the units for their ids (:func:`unit_ids`). A
        release of more rows than the unit id's format has ids is refused: its units could
        not all have ids of their own."""
        space = id_space(self.unit_id)
        if (release_rows or rows) > space:
            raise ValueError(f"unit id column {self.unit_id.name!r}: its format "
                             f"{self.unit_id.format!r} holds {space} distinct ids, fewer than "
                             f"the release's {release_rows or rows} rows (at most as many "
                             "units): give the schema's id a longer format, or draw fewer rows")
        shared: dict[str, Any] = {"partition_rows": rows}
        for stream, name, size in ((0, "rows", rows), (1, "units", self._units_needed(rows))):
            sampler = getattr(self, name)
            if isinstance(sampler, ReleaseSampler):
                shared[name] = sampler.for_release(
                    size, _child(seed, stream), release_rows if name == "rows" else None)
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
        levels = list(self.levels)
        room_unit = np.repeat(np.arange(len(units)), sizes)
        if levels:
            radix = tuple(self.schema.sizes[levels])
            unit_key = np.ravel_multi_index(tuple(units[:, :-1].T), radix)[room_unit]
            row_key = np.ravel_multi_index(tuple(drawn[:, levels].T), radix)
        else:
            unit_key, row_key = np.zeros(rows, np.int64), np.zeros(rows, np.int64)
        codes = drawn[_deal(unit_key, row_key, rng)]
        if levels:
            codes[:, levels] = units[room_unit, :-1]
        if self.lag is not None:
            codes = self._sequenced(codes, room_unit, unit_key, rng)
        return codes.astype(np.int16)

    def _sequenced(self, codes: np.ndarray, room_unit: np.ndarray, unit_key: np.ndarray,
                   rng: np.random.Generator) -> np.ndarray:
        """The dealt rows as sequences: each unit's rows in the order of their order codes, its
        first row's lag code kept and each next one drawn from ``transition`` given the one
        before; then the rows dealt again to these (unit-level codes, lag code) slots, the
        slot's order and lag codes written on the row it takes."""
        codes = codes[np.lexsort((codes[:, self.order], room_unit))]  # rooms stay by unit
        starts = np.r_[True, room_unit[1:] != room_unit[:-1]]
        positions = np.arange(len(codes))
        position = positions - np.maximum.accumulate(np.where(starts, positions, 0))
        wanted = codes[:, self.lag].copy()
        cumulative = np.cumsum(self.transition, axis=1)
        for step in range(1, int(position.max(initial=0)) + 1):
            at = np.flatnonzero(position == step)
            before = cumulative[wanted[at - 1]]
            wanted[at] = np.minimum((rng.random(len(at))[:, None] > before).sum(axis=1),
                                    len(self.transition) - 1)
        size = len(self.transition)
        taken = codes[_deal(unit_key * size + wanted, unit_key * size + codes[:, self.lag], rng)]
        taken[:, self.lag] = wanted
        taken[:, self.order] = codes[:, self.order]
        return taken

    def draw(self, rows: int, seed: np.random.SeedSequence) -> tuple[np.ndarray, np.ndarray]:
        codes = self.draw_codes(rows, seed)
        return one_hot(codes, self.schema), codes

    def finish_frame(self, frame: pd.DataFrame, codes: np.ndarray,
                     seed: np.random.SeedSequence) -> pd.DataFrame:
        """The decoded rows with each unit's id, each unit-level column's value that of its
        unit's first row (a numeric bin decodes to one value per unit, not per row), and a
        numeric order column's values in order within each unit."""
        sizes = self.draw_units(len(frame), seed)[:, -1] + 1
        first = np.repeat(np.cumsum(sizes) - sizes, sizes)
        unit = np.repeat(np.arange(len(sizes)), sizes)
        ordered = None if self.order is None else self.schema.attributes[self.order]
        if ordered is not None and ordered.kind == "numeric":
            # the rows are in order of their bins; their values, drawn within the bins, in
            # order too (bins do not overlap: each row keeps a value of its own bin)
            values = frame[ordered.column].to_numpy()
            frame[ordered.column] = values[np.lexsort((values, unit))]
        for i in self.levels:
            attribute = self.schema.attributes[i]
            for column in {attribute.name, attribute.column} & set(frame.columns):
                frame[column] = frame[column].to_numpy()[first]
        if self.partition_rows is None:
            raise RuntimeError("a unit-shaped release's partitions are drawn through "
                               "for_release, which numbers its units")
        ids = unit_ids(self.unit_id, len(sizes), seed, self.partition_rows)
        frame[self.unit_id.name] = np.asarray(ids)[unit]
        return frame


@dataclass(frozen=True)
class UnitShapedModel:
    """A unit-shaped release's model: the row model, the unit model and the release schema."""

    rows: MarginalModel
    units: MarginalModel
    schema: Schema  # the release's: the row model's with the unit id among its ids
    unit_column: str
    # the noisy lag-1 table (previous × this), or its steps (:func:`ordinal`), per unit
    lag_table: np.ndarray | None = None

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
        sequence = self.metadata["unit_shape"].get("lag")
        order, lag = ((self.rows.schema.names.index(sequence["order"]),
                       self.rows.schema.names.index(sequence["attribute"]))
                      if sequence else (None, None))
        transition = None if self.lag_table is None else transitions(
            self.lag_table, sequence["sigma_per_unit"], self.rows.marginals.one_way[lag])
        return UnitSampler(self.schema, self.rows.sampler(), self.units.sampler(), levels,
                           unit_id_column(self.schema, self.unit_column), self.mean_rows,
                           order, lag, transition)

    def conditioned_sampler(self, where: str | None, balance: str | None,
                            decode: str = "uniform") -> Any:
        raise ConditionError("a unit-shaped release cannot be sampled conditionally "
                             "(--where, --balance): its units are drawn whole; fit with "
                             "unit_shape false for a model of rows that can be")

    def save(self, path: Location, storage_options: dict[str, Any] | None = None) -> Location:
        """The row model at ``path`` (its metadata's ``unit_shape`` marks it), the unit model
        in ``path/units``."""
        self.units.save(join(path, "units"), storage_options)
        if self.lag_table is not None:
            write_model_files(join(path, "lag"), {"format": 1, "method": "lag-1 table"},
                              {"lag": self.lag_table}, storage_options)
        return self.rows.save(path, storage_options)

    @classmethod
    def from_files(cls, path: Location, document: dict[str, Any],
                   storage_options: dict[str, Any] | None = None) -> UnitShapedModel:
        rows = MarginalModel.from_files(path, document, storage_options)
        units_path = join(path, "units")
        units = MarginalModel.from_files(
            units_path, read_model_document(units_path, storage_options=storage_options),
            storage_options)
        record = document["metadata"]["unit_shape"]
        lag = None
        if record.get("lag"):
            attribute = rows.schema[record["lag"]["attribute"]]
            shape = (2 * attribute.size - 1,) if ordinal(attribute) else (attribute.size,) * 2
            lag = read_model_arrays(join(path, "lag"), {"lag": shape}, storage_options)["lag"]
        column = record["unit"]
        return cls(rows, units, release_schema(rows.schema, column), column, lag)
