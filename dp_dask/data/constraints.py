"""Declared constraints: public rules every released row satisfies (the schema's ``constraints``).

Each kind compiles to the cells it allows over its clique of attributes (a boolean table over
their bins, :attr:`Constraint.allowed`); the rest are structural zeros. They are public inputs,
like the bins, so enforcing them is post-processing of the noisy statistics and costs no budget
(the marginals method zeroes them in its noisy tables and never releases a row outside them).

Kinds (values are bin labels: categories, numeric bin labels, "True"/"False")::

    {"forbid": {"age": ["15-19"], "marital-status": ["Widowed"]}}
        no row has every listed attribute in its listed labels at once
    {"allow_only": [{"relationship": ["Husband"], "sex": ["Male"]},
                    {"relationship": ["Wife", "Own-child"], "sex": ["Female", "Male"]}]}
        each row matches one of the combinations (all of them over the same attributes)
    {"depends": {"from": "zip", "to": "state", "table": {"02139": "MA", ...}}}
        functional dependency: a ``from`` label in the public lookup table forces ``to``'s
        label; the table inline, or a CSV path (two columns headed ``from`` and ``to``'s names;
        a relative path is read from the schema file's folder). Labels not in it: unconstrained
    {"null_if": {"column": "arr_time", "when": {"cancelled": ["True"]}}}
        ``column`` is null (the extra bin its ``on_missing`` names) iff ``when`` holds;
        ``"iff": false`` keeps only "null if"
    {"order": ["start", "end"]}
        start <= end, between numeric (or datetime ``year``, own column) attributes alike in
        integer or float values: the bins no pair of values can satisfy are zero, and values
        drawn within bins keep the order (dp_dask.data.values); nulls are not compared

Each may carry ``"name"`` (messages name it, else by kind and position). A bad constraint (an
unknown attribute or label, a table disagreeing with the schema, or constraints leaving an
attribute no possible label) is a SchemaError naming it, raised as the schema loads, before any
data is read.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dp_dask.data.attribute import Attribute, SchemaError
from dp_dask.data.dtypes import INTEGER_DTYPES, float_ranges, integer_ranges

CONSTRAINT_KINDS = ("forbid", "allow_only", "depends", "null_if", "order")


@dataclass(frozen=True)
class Constraint:
    """One compiled constraint: its declaration and the cells it allows over its clique."""

    kind: str
    name: str  # how messages name it
    spec: str  # its declaration, canonical JSON (its identity; the schema's JSON)
    attributes: tuple[int, ...]  # the clique: schema positions, increasing
    allowed: np.ndarray = field(compare=False, repr=False)  # bool, shape: the clique's sizes
    order: tuple[int, ...] = ()  # "order": (first, second) positions, first <= second

    def to_json(self) -> dict[str, Any]:
        return json.loads(self.spec)

    def holds(self, codes: np.ndarray) -> np.ndarray:
        """Per row of ``codes`` (rows, m), whether it satisfies the constraint."""
        return self.allowed[tuple(codes[:, a].astype(np.intp) for a in self.attributes)]


def _error(name: str, message: str) -> Exception:
    return SchemaError(f"{name}: {message}")


def _labels(value: Any, attribute: Attribute, name: str) -> list[int]:
    """The codes of a label or a list of labels of ``attribute``."""
    values = value if isinstance(value, list) else [value]
    codes = []
    for label in values:
        if isinstance(label, bool) or not isinstance(label, str | int | float):
            raise _error(name, f"{label!r} is not a label of {attribute.name!r}")
        if str(label) not in attribute.labels:
            raise _error(name, f"{str(label)!r} is not a label of {attribute.name!r} "
                               f"(its labels: {list(attribute.labels)[:20]})")
        codes.append(attribute.labels.index(str(label)))
    if not codes:
        raise _error(name, f"no label given for {attribute.name!r}")
    return codes


class _Clique:
    """Attribute names → schema positions and a boolean table over their bins."""

    def __init__(self, names: Sequence[str], attributes: Sequence[Attribute], name: str) -> None:
        positions = {a.name: i for i, a in enumerate(attributes)}
        unknown = [n for n in names if n not in positions]
        if unknown:
            raise _error(name, f"unknown attribute {unknown[0]!r}")
        if len(set(names)) != len(names) or not names:
            raise _error(name, f"needs distinct attributes, got {list(names)}")
        self.attributes = attributes
        self.positions = tuple(sorted(positions[n] for n in names))
        self.axis = {n: self.positions.index(positions[n]) for n in names}
        self.shape = tuple(attributes[p].size for p in self.positions)

    def cells(self, labels: dict[str, list[int]]) -> np.ndarray:
        """The cells whose every named attribute is in its codes (others: any)."""
        mask = np.ones(self.shape, dtype=bool)
        for attribute, codes in labels.items():
            chosen = np.zeros(self.shape[self.axis[attribute]], dtype=bool)
            chosen[codes] = True
            shape = [1] * len(self.shape)
            shape[self.axis[attribute]] = -1
            mask &= chosen.reshape(shape)
        return mask

    def attribute(self, name: str) -> Attribute:
        return self.attributes[self.positions[self.axis[name]]]


def _mapping(spec: Any, name: str, key: str) -> dict[str, Any]:
    if not isinstance(spec, dict) or not spec:
        raise _error(name, f"{key!r} must be an object of attribute → labels, got {spec!r}")
    return spec


def _forbid(spec: Any, attributes: Sequence[Attribute], name: str) -> tuple[_Clique, np.ndarray]:
    spec = _mapping(spec, name, "forbid")
    clique = _Clique(list(spec), attributes, name)
    return clique, ~clique.cells({a: _labels(v, clique.attribute(a), name)
                                  for a, v in spec.items()})


def _allow_only(spec: Any, attributes: Sequence[Attribute],
                name: str) -> tuple[_Clique, np.ndarray]:
    if not isinstance(spec, list) or not spec:
        raise _error(name, "'allow_only' must be a list of combinations (attribute → labels)")
    names = list(_mapping(spec[0], name, "allow_only"))
    clique = _Clique(names, attributes, name)
    allowed = np.zeros(clique.shape, dtype=bool)
    for combination in spec:
        if set(_mapping(combination, name, "allow_only")) != set(names):
            raise _error(name, f"every combination names the same attributes {names}, got "
                               f"{sorted(combination)}")
        allowed |= clique.cells({a: _labels(v, clique.attribute(a), name)
                                 for a, v in combination.items()})
    return clique, allowed


def _lookup(table: Any, source: str, target: str, base: Path | None,
            name: str) -> dict[str, str]:
    """The dependency's public lookup table, inline or read from a CSV file."""
    if isinstance(table, dict):
        return {str(k): str(v) for k, v in table.items()}
    if not isinstance(table, str):
        raise _error(name, f"'table' must be an object or a CSV path, got {table!r}")
    path = Path(table)
    if not path.is_absolute() and base is not None:
        path = base / path
    try:
        with path.open(newline="") as file:
            rows = list(csv.DictReader(file))
    except OSError as exc:
        raise _error(name, f"cannot read its table {table!r} ({exc.strerror})") from exc
    if rows and not {source, target} <= set(rows[0]):
        raise _error(name, f"its table {table!r} needs columns {source!r} and {target!r}, "
                           f"has {sorted(rows[0])}")
    lookup: dict[str, str] = {}
    for row in rows:
        if lookup.setdefault(row[source], row[target]) != row[target]:
            raise _error(name, f"its table {table!r} maps a {source!r} label to two "
                               f"{target!r} labels")
    return lookup


def _depends(spec: Any, attributes: Sequence[Attribute], name: str,
             base: Path | None) -> tuple[_Clique, np.ndarray, dict[str, Any]]:
    if not isinstance(spec, dict) or not {"from", "to", "table"} <= set(spec):
        raise _error(name, "'depends' needs 'from', 'to' and 'table'")
    source, target = str(spec["from"]), str(spec["to"])
    clique = _Clique([source, target], attributes, name)
    lookup = _lookup(spec["table"], source, target, base, name)
    allowed = np.ones(clique.shape, dtype=bool)
    for key, value in lookup.items():
        forced = _labels(value, clique.attribute(target), name)
        allowed &= ~clique.cells({source: _labels(key, clique.attribute(source), name)}) | (
            clique.cells({target: forced}))
    # the table stored inline: the schema's JSON (and a saved model's) stands alone
    return clique, allowed, {**spec, "table": lookup}


def _null_if(spec: Any, attributes: Sequence[Attribute],
             name: str) -> tuple[_Clique, np.ndarray]:
    if not isinstance(spec, dict) or not {"column", "when"} <= set(spec):
        raise _error(name, "'null_if' needs 'column' and 'when'")
    column = str(spec["column"])
    when = _mapping(spec["when"], name, "when")
    clique = _Clique([column, *when], attributes, name)
    attribute = clique.attribute(column)
    if attribute.on_missing not in attribute.labels[attribute.bins:]:
        raise _error(name, f"{column!r} has no null: give it an extra bin that on_missing "
                           "names (e.g. \"extra\": [\"missing\"], \"on_missing\": \"missing\")")
    condition = clique.cells({a: _labels(v, clique.attribute(a), name) for a, v in when.items()})
    null = clique.cells({column: [attribute.labels.index(attribute.on_missing)]})
    allowed = ~condition | null
    if spec.get("iff", True):
        allowed &= condition | ~null
    return clique, allowed


def value_ranges(attribute: Attribute) -> tuple[np.ndarray, np.ndarray]:
    """Per bin, the least and greatest value decoding can give it (years for a datetime):
    integers, or floats (greatest: the float below the open end, as decoding draws)."""
    bounds = (attribute.edges, attribute.minimum, attribute.maximum)
    if attribute.output_dtype in INTEGER_DTYPES or attribute.kind == "datetime":
        return integer_ranges(*bounds)
    low, high = float_ranges(*bounds)
    return low, np.where(high > low, np.nextafter(high, -np.inf), low)


def _order(spec: Any, attributes: Sequence[Attribute],
           name: str) -> tuple[_Clique, np.ndarray, tuple[int, int]]:
    if not isinstance(spec, list) or len(spec) != 2:
        raise _error(name, "'order' must be [first, second] (first <= second)")
    clique = _Clique([str(s) for s in spec], attributes, name)
    first, second = (clique.attribute(str(s)) for s in spec)
    for attribute in (first, second):
        if not (attribute.kind == "numeric" or attribute.unit == "year") or attribute.source:
            raise _error(name, f"{attribute.name!r} is not a numeric or datetime year column")
    if first.kind != second.kind or (first.output_dtype in INTEGER_DTYPES) != (
            second.output_dtype in INTEGER_DTYPES):
        raise _error(name, f"{first.name!r} and {second.name!r} are not alike (both numeric or "
                           "both datetime, both integer or both float)")
    low = np.full(first.size, -math.inf)
    high = np.full(second.size, math.inf)  # extra bins (nulls) compare with nothing
    low[:first.bins] = value_ranges(first)[0]
    high[:second.bins] = value_ranges(second)[1]
    allowed = low[:, None] <= high[None, :]
    positions = (attributes.index(first), attributes.index(second))
    return clique, allowed if positions[0] < positions[1] else allowed.T, positions


def parse_constraints(specs: Any, attributes: Sequence[Attribute],
                      base: Path | None = None) -> tuple[Constraint, ...]:
    """The schema's ``constraints`` compiled over ``attributes``, checked (SchemaError naming
    the constraint); ``base``: the folder relative table paths are read from."""
    if not isinstance(specs, list):
        raise _error("schema", f"'constraints' must be a list, got {specs!r}")
    compiled = []
    for number, spec in enumerate(specs, 1):
        kinds = [k for k in CONSTRAINT_KINDS if isinstance(spec, dict) and k in spec]
        if len(kinds) != 1 or set(spec) - {kinds[0], "name"}:
            raise _error(f"constraint {number}", f"needs exactly one of "
                         f"{', '.join(CONSTRAINT_KINDS)} (and an optional 'name'), got "
                         f"{sorted(spec) if isinstance(spec, dict) else spec!r}")
        kind = kinds[0]
        name = f"constraint {number} ({spec.get('name') or kind})"
        declared, order = dict(spec), ()
        if kind == "forbid":
            clique, allowed = _forbid(spec[kind], attributes, name)
        elif kind == "allow_only":
            clique, allowed = _allow_only(spec[kind], attributes, name)
        elif kind == "depends":
            clique, allowed, declared[kind] = _depends(spec[kind], attributes, name, base)
        elif kind == "null_if":
            clique, allowed = _null_if(spec[kind], attributes, name)
        else:
            clique, allowed, order = _order(spec[kind], attributes, name)
        compiled.append(Constraint(kind, name, json.dumps(declared, sort_keys=True),
                                   clique.positions, allowed, order))
    possible_labels(compiled, attributes)
    return tuple(compiled)


def possible_labels(constraints: Sequence[Constraint],
                    attributes: Sequence[Attribute]) -> list[np.ndarray]:
    """Per attribute, the labels some row satisfying every constraint may hold, as far as
    each constraint's support shows (arc consistency, to a fixed point); a SchemaError names
    the constraint that leaves an attribute none."""
    possible = [np.ones(a.size, dtype=bool) for a in attributes]
    pruning: list[str] = []  # the constraints that ruled labels out, in turn
    changed = True
    while changed:
        changed = False
        for constraint in constraints:
            table = constraint.allowed
            for axis, a in enumerate(constraint.attributes):  # restricted to the domains
                shape = [1] * table.ndim
                shape[axis] = -1
                table = table & possible[a].reshape(shape)
            for axis, a in enumerate(constraint.attributes):
                others = tuple(k for k in range(table.ndim) if k != axis)
                supported = table.any(axis=others) if others else table
                if not supported.any():
                    with_ = [n for n in dict.fromkeys(pruning) if n != constraint.name]
                    raise _error(constraint.name, f"leaves {attributes[a].name!r} no possible "
                                 "label" + (f" (with {', '.join(with_)})" if with_ else ""))
                if (possible[a] & ~supported).any():
                    possible[a] &= supported
                    pruning.append(constraint.name)
                    changed = True
    return possible


def forbidden_cells(constraints: Sequence[Constraint], attributes: Sequence[Attribute],
                    clique: tuple[int, ...]) -> np.ndarray | None:
    """The structural zeros of the table over ``clique`` (increasing positions), flattened in
    C order: cells some constraint within the clique forbids, or holding a label no row can
    (:func:`possible_labels`); None where there are none."""
    if not constraints:
        return None
    shape = tuple(attributes[a].size for a in clique)
    allowed = np.ones(shape, dtype=bool)
    for axis, labels in enumerate(possible_labels(constraints, attributes)[a] for a in clique):
        allowed &= labels.reshape([-1 if k == axis else 1 for k in range(len(clique))])
    for constraint in constraints:
        if set(constraint.attributes) <= set(clique):
            axes = [clique.index(a) for a in constraint.attributes]
            allowed &= np.expand_dims(constraint.allowed, [k for k in range(len(clique))
                                                           if k not in axes])
    return None if allowed.all() else ~allowed.ravel()


def satisfied(constraints: Sequence[Constraint], codes: np.ndarray) -> np.ndarray:
    """Per row of ``codes`` (rows, m), whether it satisfies every constraint."""
    ok = np.ones(len(codes), dtype=bool)
    for constraint in constraints:
        ok &= constraint.holds(codes)
    return ok


def violations(constraints: Sequence[Constraint], codes: np.ndarray) -> dict[str, int]:
    """Per constraint, the rows of ``codes`` (bins) breaking it."""
    return {c.name: int((~c.holds(codes)).sum()) for c in constraints}
