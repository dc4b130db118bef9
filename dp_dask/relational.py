"""Parent–child tables released together (issue 67): a parent table P (its key, its attributes)
and a child table C (a foreign key to P, its attributes), under one budget, as one release of
two tables whose every foreign key points at a released parent.

How. The privacy unit is the parent's key: a parent and all its children. C is left-joined onto
P, so a parent without children keeps one row, marked by the attribute :data:`HAS_CHILD` ("no"
on it, "yes" on a child's row; the child attributes of a "no" row hold a fixed in-domain
placeholder, :func:`placeholder`, a function of the public schema alone). The joined table is
released unit-shaped (:mod:`dp_dask.methods.marginals.unit_shape`) under the unit's bound K
(``max_children``: at most K children kept per parent, a random K of more): P's attributes and
:data:`HAS_CHILD` are declared unit-level, so the unit model measures parents × children per
parent (1..K rows per unit, and whether they are children at all), and the row model measures
the child attributes jointly with the parent's on the joined, bounded data (every parent × child
2-way table under K rows' sensitivity). Each table keeps a budget of its own (:func:`own_tables`):
P's 1-/2-way tables measured again on the unit table (a row's sensitivity, PARENT_SHARE of the
measurements' ρ) and C's with :data:`HAS_CHILD` again on the joined rows (K rows', CHILD_SHARE),
so that neither table's own marginals pay for the relation (docs/results-units.md). The
unit-shaped release is then split, partition by
partition, with no shuffle: P' is each synthetic unit's first row (its id and parent
attributes: one row per unit), C' the rows marked "yes" (a new child id, the unit's id as
foreign key, the child attributes); a unit marked "no" has no children in C'.

Privacy. One fit, one (ε, δ), one ledger entry (the unit-shaped fit's: unit model, own tables
and row model, their ρ adding up under the parent key's unit, each share in the record's
``rho_split``); the split is post-processing. A child
whose foreign key matches no parent belongs to no unit and is left out by the join (the join
is on P). Everything checked before the fit (:func:`relation`) reads the specification and the
inputs' column names only, so a refusal spends nothing.

Two tables only (a parent and one child): a grandchild or a second child is refused.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd

from dp_dask.data.attribute import Attribute, SchemaError
from dp_dask.data.io import TableSource, load_schema_from, local_path, read_table
from dp_dask.data.schema import Schema, load_schema
from dp_dask.privacy.ledger import Ledger
from dp_dask.synthesizer import DEFAULT_DELTA, Synthesizer

HAS_CHILD = "__dp_dask_has_child__"  # the joined table's marker: "no" on a childless parent's row
CHILD_LEVELS = ("no", "yes")
# the own tables' shares of the measurements' ρ (public constants, chosen on the generated
# customers/orders: docs/results-units.md, "Parent–child tables"); the unit model keeps
# config.unit_share, the row model the rest
PARENT_SHARE = 0.15
CHILD_SHARE = 0.3
PARENT_KEYS = {"data", "schema", "key"}  # what a parent table's entry may give
CHILD_KEYS = {"data", "schema", "parent", "foreign_key", "key"}  # a child table's


@dataclass(frozen=True)
class Relation:
    """A parent table and its child table, checked: names, inputs, schemas and key columns."""

    parent: str
    key: str  # the parent's key: the privacy unit, and the released parent id
    parent_data: TableSource
    parent_schema: Schema
    child: str
    foreign_key: str  # the child's column pointing at ``key``
    child_key: str  # the released child id column
    child_data: TableSource
    child_schema: Schema

    @property
    def name(self) -> str:
        return f"{self.parent}+{self.child}"


def _columns_of(source: TableSource, storage_options: dict[str, Any] | None) -> list[str]:
    """An input's column names (its metadata alone: a CSV's header, a Parquet footer)."""
    if isinstance(source, pd.DataFrame | dd.DataFrame):
        return [str(c) for c in source.columns]
    path = local_path(source)
    if str(path).lower().endswith((".csv", ".csv.gz")):
        return [str(c) for c in pd.read_csv(path, nrows=0, storage_options=storage_options)
                .columns]
    return [str(c) for c in dd.read_parquet(path, storage_options=storage_options).columns]


def _entry(tables: dict[str, Any], name: str) -> dict[str, Any]:
    entry = tables[name]
    if not isinstance(entry, dict):
        raise ValueError(f"tables=: table {name!r}: expected a mapping with data, schema and "
                         "key (a parent) or parent and foreign_key (a child)")
    return entry


def _schema(name: str, entry: dict[str, Any], base: Path | None,
            storage_options: dict[str, Any] | None) -> Schema:
    if "schema" not in entry:
        raise ValueError(f"tables=: table {name!r}: no schema (its public schema: a JSON "
                         "path or mapping)")
    given = entry["schema"]
    if isinstance(given, Schema | dict):
        return load_schema(given)
    path = Path(str(given)).expanduser()
    if base is not None and not path.is_absolute() and "://" not in str(given):
        path = base / path
    return load_schema_from(str(path), storage_options)


def _data(name: str, entry: dict[str, Any], base: Path | None) -> TableSource:
    if "data" not in entry:
        raise ValueError(f"tables=: table {name!r}: no data")
    given = entry["data"]
    if isinstance(given, pd.DataFrame | dd.DataFrame):
        return given
    path = Path(str(given)).expanduser()
    if base is not None and not path.is_absolute() and "://" not in str(given):
        return str(base / path)
    return str(given)


def relation(tables: dict[str, Any], *, base: Path | None = None,
             storage_options: dict[str, Any] | None = None) -> Relation:
    """The parent–child relation ``tables`` names, checked before anything is read but the
    inputs' column names: every parent a table given, no cycle, one parent and one child, each
    key column in its table's data. ``base``: the directory relative paths are relative to
    (a job config's). Raises ValueError naming the table and the column."""
    if not isinstance(tables, dict) or not tables:
        raise ValueError("tables=: expected a mapping of table names to their data, schema and "
                         "keys")
    entries = {name: _entry(tables, name) for name in tables}
    for name, entry in entries.items():
        allowed = CHILD_KEYS if "parent" in entry else PARENT_KEYS
        unknown = sorted(set(entry) - allowed)
        if unknown:
            raise ValueError(f"tables=: table {name!r}: unknown key(s) {unknown}; a "
                             f"{'child' if 'parent' in entry else 'parent'} table takes "
                             f"{sorted(allowed)}")
        parent = entry.get("parent")
        if parent is not None and parent not in entries:
            raise ValueError(f"tables=: table {name!r}: foreign_key "
                             f"{entry.get('foreign_key')!r} points nowhere: parent {parent!r} "
                             f"is not a table given ({sorted(entries)})")
        if parent is not None and "foreign_key" not in entry:
            raise ValueError(f"tables=: table {name!r}: a child names its foreign_key (its "
                             f"column pointing at {parent!r}'s key)")
    for name in entries:  # follow each table's parents: a cycle comes back
        seen = [name]
        while (parent := entries[seen[-1]].get("parent")) is not None:
            if parent in seen:
                cycle = " -> ".join([*seen[seen.index(parent):], parent])
                raise ValueError(f"tables=: a cycle of parents: {cycle}; the root table (the "
                                 "privacy unit's) has no parent")
            seen.append(parent)
    roots = [name for name, entry in entries.items() if "parent" not in entry]
    children = [name for name, entry in entries.items() if "parent" in entry]
    if len(roots) != 1 or len(children) != 1:
        raise ValueError(f"tables=: one parent table and one child table are released "
                         f"together; got parents {roots} and children {children} (more levels "
                         "or more children are not supported)")
    (parent,), (child,) = roots, children
    if "key" not in entries[parent]:
        raise ValueError(f"tables=: table {parent!r}: no key (its column of parent ids: the "
                         "privacy unit)")
    key, foreign_key = str(entries[parent]["key"]), str(entries[child]["foreign_key"])
    found = Relation(
        parent=parent, key=key,
        parent_data=_data(parent, entries[parent], base),
        parent_schema=_schema(parent, entries[parent], base, storage_options),
        child=child, foreign_key=foreign_key,
        child_key=str(entries[child].get("key", f"{child}_id")),
        child_data=_data(child, entries[child], base),
        child_schema=_schema(child, entries[child], base, storage_options))
    for table, column, role, data in ((parent, key, "key", found.parent_data),
                                      (child, foreign_key, "foreign_key", found.child_data)):
        if column not in _columns_of(data, storage_options):
            raise ValueError(f"tables=: table {table!r}: its {role} column {column!r} is not a "
                             "column of its data")
    _check_schemas(found)
    return found


def _check_schemas(found: Relation) -> None:
    """Attributes of distinct names, key columns not attributes, child attributes that take a
    placeholder."""
    names = [*found.parent_schema.names, *found.child_schema.names]
    clash = sorted({n for n in names if names.count(n) > 1} | ({HAS_CHILD} & set(names)))
    if clash:
        raise SchemaError(f"tables=: attributes {clash} named in both {found.parent!r} and "
                          f"{found.child!r} (or reserved): rename them in one schema")
    for table, schema, column in ((found.parent, found.parent_schema, found.key),
                                  (found.child, found.child_schema, found.foreign_key)):
        if column in schema.columns:
            raise SchemaError(f"tables=: table {table!r}: key column {column!r} is also an "
                              "attribute of its schema; keys are released as synthetic ids")
    taken = {found.key, found.foreign_key, *found.child_schema.columns}
    if found.child_key in taken or found.key in found.child_schema.columns:
        raise SchemaError(f"tables=: table {found.child!r}: its released id column "
                          f"{found.child_key!r} or the parent's key {found.key!r} is also one "
                          "of its columns (a key or an attribute); name the id apart (key)")
    for attribute in found.child_schema.attributes:
        placeholder(attribute, found.child)  # refuses a kind without one


def placeholder(attribute: Attribute, table: str = "child") -> Any:
    """The value a childless parent's row holds in a child attribute: in its first bin or
    category (the public schema's alone; the row model learns it goes with HAS_CHILD "no",
    and those rows are dropped from C')."""
    if attribute.kind == "categorical" and attribute.categories:
        return attribute.categories[0]
    if attribute.kind == "numeric":
        low, high = attribute.edges[0], attribute.edges[1]
        if math.isfinite(low):
            return float(low)
        return float(high) - 1.0 if math.isfinite(high) else 0.0  # one open bin: any number
    raise SchemaError(f"tables=: table {table!r}: attribute {attribute.name!r} of type "
                      f"{attribute.kind!r}: a child table's attributes are categorical or "
                      "numeric here")


def joined_schema(found: Relation) -> Schema:
    """The joined table's public schema: P's attributes (unit-level), :data:`HAS_CHILD`
    (unit-level), then C's attributes."""
    marker = Attribute(HAS_CHILD, "categorical", CHILD_LEVELS, categories=CHILD_LEVELS,
                       unit_level=True)
    parents = [replace(a, unit_level=True) for a in found.parent_schema.attributes]
    children = [replace(a, unit_level=False) for a in found.child_schema.attributes]
    return Schema((*parents, marker, *children), name=found.name)


def _fill_childless(frame: pd.DataFrame, fills: dict[str, Any]) -> pd.DataFrame:
    childless = frame[HAS_CHILD].isna().to_numpy()
    frame[HAS_CHILD] = np.where(childless, "no", "yes")
    for column, value in fills.items():
        frame[column] = frame[column].where(~childless, value)
    return frame


def joined_table(found: Relation, storage_options: dict[str, Any] | None = None
                 ) -> dd.DataFrame:
    """C left-joined onto P by key, lazily: one row per child, one for a childless parent
    (HAS_CHILD "no", placeholders in C's columns). Children of no parent are left out."""
    parents = read_table(found.parent_data, found.parent_schema, extra=[found.key],
                         storage_options=storage_options)
    children = read_table(found.child_data, found.child_schema, extra=[found.foreign_key],
                          storage_options=storage_options)
    children = children.rename(columns={found.foreign_key: found.key})
    children = children.assign(**{HAS_CHILD: "yes"})
    joined = parents.merge(children, on=found.key, how="left")
    fills = {a.column: placeholder(a, found.child) for a in found.child_schema.attributes}
    meta = joined._meta.astype({HAS_CHILD: object})
    return joined.map_partitions(_fill_childless, fills, meta=meta)


def _texts(frame: pd.DataFrame) -> pd.DataFrame:
    """Object columns (ids, decoded categories: text) as strings, so Parquet's schema is
    known from the empty meta (an object column's type is not)."""
    objects = [column for column in frame.columns if frame[column].dtype == object]
    return frame.astype(dict.fromkeys(objects, "string")) if objects else frame


def _parents_of(frame: pd.DataFrame, key: str, columns: list[str]) -> pd.DataFrame:
    """A partition's units, one row each (a unit's rows are adjacent and never span
    partitions): its id and parent attributes."""
    return _texts(frame.drop_duplicates(subset=[key])[[key, *columns]].reset_index(drop=True))


def _children_of(frame: pd.DataFrame, key: str, found: Relation,
                 columns: list[str]) -> pd.DataFrame:
    """A partition's children: the rows of units marked "yes", each a new id (its unit's id
    and its rank in the unit, unique as the unit ids are), its unit's id as foreign key."""
    rows = frame[frame[HAS_CHILD].astype(str) == "yes"]
    rank = rows.groupby(key, sort=False).cumcount() + 1
    ids = rows[key].astype(str).to_numpy().astype(object) + "-" + rank.astype(str).to_numpy()
    children = pd.DataFrame({found.child_key: ids,
                             found.foreign_key: rows[key].to_numpy()})
    for column in columns:
        children[column] = rows[column].to_numpy()
    return _texts(children)


def split_release(release: dd.DataFrame, found: Relation) -> tuple[dd.DataFrame, dd.DataFrame]:
    """P' and C' of a unit-shaped release of the joined table, partition by partition."""
    parent_columns, child_columns = found.parent_schema.columns, found.child_schema.columns
    parents_meta = _parents_of(release._meta, found.key, parent_columns)
    children_meta = _children_of(release._meta, found.key, found, child_columns)
    parents = release.map_partitions(_parents_of, found.key, parent_columns, meta=parents_meta)
    children = release.map_partitions(_children_of, found.key, found, child_columns,
                                      meta=children_meta)
    return parents, children


def own_tables(found: Relation, parent_share: float = PARENT_SHARE,
               child_share: float = CHILD_SHARE) -> dict[str, Any]:
    """The joined release's own tables (:class:`~.methods.marginals.unit_fit.OwnTables`), each
    table's 1-/2-way marginals measured again at a share of the measurements' ρ of its own:
    the parent's attributes on the unit table (one row per parent: a row's sensitivity), the
    child's with :data:`HAS_CHILD` on the joined rows (K rows': the marker's tables with the
    child's attributes are what tells a child's values from a childless row's placeholders)."""
    return {"units": {"attributes": list(found.parent_schema.names), "share": parent_share},
            "rows": {"attributes": [HAS_CHILD, *found.child_schema.names],
                     "share": child_share}}


@dataclass
class TablesRelease:
    """What :func:`release_tables` produced: the relation, the fitted unit-shaped synthesizer
    (its model holds the one privacy record), and the paths written, by table."""

    relation: Relation
    synthesizer: Synthesizer
    paths: dict[str, str]


def check_max_children(max_children: Any, found: Relation) -> int:
    """K, the children kept per parent: an integer >= 1 (raises naming the child table and its
    foreign key)."""
    if isinstance(max_children, bool) or not isinstance(max_children, int) or max_children < 1:
        raise ValueError(f"max_children= must be an integer >= 1: the rows of table "
                         f"{found.child!r} kept per value of its foreign_key "
                         f"{found.foreign_key!r} (K), got {max_children!r}")
    return max_children


def release_tables(tables: dict[str, Any], out: str | Path, *, epsilon: float,
                   max_children: int, delta: float = DEFAULT_DELTA, seed: int = 0,
                   parents: int | None = None, base: Path | None = None,
                   ledger: Ledger | str | Path | bool | None = None,
                   dataset_name: str | None = None, run_id: str | None = None,
                   budget_epsilon: float | None = None, force: bool = False,
                   noise_sampler: str = "opendp", noise_seed: int | None = None,
                   storage_options: dict[str, Any] | None = None,
                   **method_options: Any) -> TablesRelease:
    """Release a parent table and its child table together (module docstring) at ``out`` (a
    local directory):
    ``{parent}.parquet`` and ``{child}.parquet`` and ``metadata.json`` (the privacy record,
    both tables named).

    ``tables``: ``{name: {data, schema, key}}`` for the parent (``key``: its id column, the
    privacy unit) and ``{name: {data, schema, parent, foreign_key[, key]}}`` for the child
    (``key``: the name of its released id column, default ``{name}_id``); ``data`` a path or
    a DataFrame, ``schema`` a JSON path or mapping, relative paths relative to ``base``.
    ``max_children``: K, the children kept per parent. ``parents``: the release's rows are
    those of about this many units (default: as many as the data holds, public under
    replace-one-unit neighbours). The ledger (as for a fit) holds one entry; bad input raises
    ValueError before it is touched."""
    found = relation(tables, base=base, storage_options=storage_options)
    check_max_children(max_children, found)
    if "://" in str(out):  # the split writes with pathlib (an object store: not yet)
        raise ValueError(f"out=: a local directory for a parent–child release, got {out!r}")
    method_options.setdefault("own_tables", own_tables(found))
    # every pair of the joined table's few attributes (a tree's selection and refinement would
    # spend a third of the row model's ρ choosing among them: docs/results-units.md)
    method_options.setdefault("tables", "all")
    synthesizer = Synthesizer.create(
        "marginals", joined_schema(found), epsilon=epsilon, delta=delta,
        noise_sampler=noise_sampler, noise_seed=noise_seed, ledger=ledger,
        dataset_name=dataset_name or found.name, run_id=run_id,
        budget_epsilon=budget_epsilon, force=force,
        privacy_unit={"column": found.key, "max_rows": max_children}, unit_shape=True,
        **method_options)
    synthesizer.fit(joined_table(found, storage_options), storage_options=storage_options)
    model = synthesizer.model
    rows = None if parents is None else max(1, round(parents * model.mean_rows))
    parent_frame, child_frame = split_release(synthesizer.sample(rows, seed=seed), found)
    out = str(out)
    paths = {found.parent: f"{out}/{found.parent}.parquet",
             found.child: f"{out}/{found.child}.parquet", "metadata": f"{out}/metadata.json"}
    Path(out).mkdir(parents=True, exist_ok=True)
    dask.compute(parent_frame.to_parquet(paths[found.parent], compute=False,
                                         write_index=False),
                 child_frame.to_parquet(paths[found.child], compute=False, write_index=False))
    record = {"tables": {found.parent: {"key": found.key, "attributes":
                                        found.parent_schema.names},
                         found.child: {"parent": found.parent, "foreign_key": found.foreign_key,
                                       "key": found.child_key,
                                       "attributes": found.child_schema.names}},
              "max_children": max_children, "privacy_unit": found.key,
              "privacy": model.metadata["privacy"], "ledger": model.metadata.get("ledger")}
    Path(paths["metadata"]).write_text(json.dumps(record, indent=2, default=str))
    book, entry = synthesizer.ledger, synthesizer.ledger_entry_
    if book is not None and entry is not None:
        book.set_paths(entry.id, release_path=out)
    return TablesRelease(found, synthesizer, paths)
