"""Conditions of conditional sampling (``dp-dask sample``/``synth --where``), over a
schema's attributes.

A condition is parsed, never evaluated: Python's parser reads it as an expression and only
attribute names, constants, ``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``in``, ``not in``,
``and``, ``or``, ``not`` are accepted (``\\`marital-status\\``: a name that is no identifier).
It is compiled to *units* of each attribute it names: a code, or for a numeric attribute
compared with numbers, the part of a bin between the condition's thresholds (its *piece*), with
its probability within the bin under ``uniform`` decoding (by the fine histogram where the
model has one). A row of codes then holds the condition with a probability
(:meth:`Condition.fraction`), and its values are drawn within the pieces that hold it
(:meth:`Condition.draw_values`).

Post-processing of a model: only the schema and the model's noisy statistics are read.
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from dp_dask.data.attribute import Attribute
from dp_dask.data.dtypes import FLOAT_DTYPES, fine_layout
from dp_dask.data.schema import Schema
from dp_dask.data.values import _cell_ranges, _draws_integers, decoding, fine_weights

OPERATORS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">",
             ast.GtE: ">=", ast.In: "in", ast.NotIn: "not in"}
FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
# a condition's disjunctive form grows with products of "or"s: past this, refused
MAX_TERMS = 256
# Spawn-key word of a partition's draws of values within the condition (cf. values.VALUES_KEY)
CONDITION_KEY = 0x636F6E64


class ConditionError(ValueError):
    """A condition that does not parse, names no attribute of the schema, compares a value its
    attribute cannot hold, or that the model gives probability 0."""


@dataclass(frozen=True)
class Atom:
    name: str
    op: str
    value: Any  # a constant, or a tuple of them for in / not in


@dataclass(frozen=True)
class Junction:
    op: str  # "and", "or"
    terms: tuple[Any, ...]


@dataclass(frozen=True)
class Negation:
    term: Any


def parse_where(text: str) -> Atom | Junction | Negation:
    """The condition's tree; ConditionError where it is not of the grammar above."""
    names: dict[str, str] = {}

    def placeholder(match: re.Match[str]) -> str:
        key = f"_dp_name_{len(names)}"
        names[key] = match.group(1)
        return key

    try:
        tree = ast.parse(re.sub(r"`([^`]*)`", placeholder, text.strip()), mode="eval")
    except SyntaxError as exc:
        raise ConditionError(f"condition {text!r} does not parse: {exc.msg}") from None
    return _node(tree.body, text, names)


def _node(node: ast.AST, text: str, names: dict[str, str]) -> Any:
    if isinstance(node, ast.BoolOp):
        op = "and" if isinstance(node.op, ast.And) else "or"
        return Junction(op, tuple(_node(v, text, names) for v in node.values))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return Negation(_node(node.operand, text, names))
    if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        atoms = [_atom(left, type(op), right, text, names)
                 for left, op, right in zip(sides, node.ops, sides[1:])]
        return atoms[0] if len(atoms) == 1 else Junction("and", tuple(atoms))
    raise ConditionError(f"condition {text!r}: {ast.unparse(node)!r} is not a comparison of an "
                         "attribute with a value (==, !=, <, <=, >, >=, in) joined by and/or/not")


def _atom(left: ast.AST, op: type, right: ast.AST, text: str, names: dict[str, str]) -> Atom:
    if op not in OPERATORS:
        raise ConditionError(f"condition {text!r}: operator {op.__name__} is not supported")
    symbol = OPERATORS[op]
    if isinstance(right, ast.Name) and not isinstance(left, ast.Name) and symbol in FLIPPED:
        left, right, symbol = right, left, FLIPPED[symbol]
    if not isinstance(left, ast.Name):
        raise ConditionError(f"condition {text!r}: {ast.unparse(left)!r} is not an attribute "
                             "name (quote values, backquote names with other characters)")
    try:
        value = ast.literal_eval(right)
    except ValueError:
        raise ConditionError(f"condition {text!r}: {ast.unparse(right)!r} is not a constant "
                             "value") from None
    if symbol in ("in", "not in"):
        if not isinstance(value, list | tuple | set | frozenset):
            raise ConditionError(f"condition {text!r}: '{symbol}' needs a list of values")
        value = tuple(value)
    return Atom(names.get(left.id, left.id), symbol, value)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _holds(op: str, left: Any, right: Any) -> bool:
    """``left op right``; a null (None) holds only != and not in, as in pandas."""
    if op in ("in", "not in"):
        return (left is not None and left in right) == (op == "in")
    if left is None:
        return op == "!="
    return {"==": left == right, "!=": left != right, "<": left < right, "<=": left <= right,
            ">": left > right, ">=": left >= right}[op]


@dataclass(frozen=True)
class Units:
    """An attribute's units: each a code and, for a split numeric bin, a piece [low, high]
    (closed; floats' open ends nudged one float inwards) with its probability within the bin."""

    index: int
    code: np.ndarray  # per unit, its code
    mass: np.ndarray  # per unit, its probability given its code
    value: list[Any]  # per unit, a value standing for it in comparisons (None: null)
    low: np.ndarray  # per unit, its piece's range (values of a split bin), else nan
    high: np.ndarray
    width: int  # most units of one code
    slot: np.ndarray  # (size, width): a code's units, -1 past them


def _pieces(thresholds: list[float], integers: bool) -> list[tuple[float, float, float]]:
    """The pieces of the line the thresholds cut: (low, high, a value inside), closed."""
    points = sorted(set(thresholds))
    pieces: list[tuple[float, float, float]] = []
    low = -math.inf
    for t in points:
        if integers:
            below = math.ceil(t) - 1
            if below >= low:
                pieces.append((low, below, below))
            if float(t).is_integer():
                pieces.append((t, t, t))
                low = t + 1
            else:
                low = math.ceil(t)
        else:
            below = np.nextafter(t, -math.inf)
            if low <= below:
                pieces.append((low, below, (low + t) / 2 if math.isfinite(low) else t - 1))
            pieces.append((t, t, t))
            low = np.nextafter(t, math.inf)
    top = low if math.isfinite(low) else 0.0
    pieces.append((low, math.inf, top + 1 if not integers else top))
    return pieces


def _decoding_cells(attribute: Attribute, fine: np.ndarray | None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The cells ``uniform`` decoding draws a bin's values in: bin b's are first[b]:first[b+1],
    with their weights within the bin and value ranges (the fine layout's where the model has
    a fine histogram, else the bins)."""
    if fine is not None:
        layout = fine_layout(attribute)
        edges, first = tuple(layout.edges), layout.first
        weights = fine_weights(attribute, fine)
    else:
        edges, first = attribute.edges, np.arange(attribute.bins + 1)
        weights = np.ones(attribute.bins)
    return (first, weights, *_cell_ranges(attribute, edges))


def _split_masses(attribute: Attribute, fine: np.ndarray | None,
                  pieces: list[tuple[float, float, float]]) -> np.ndarray:
    """(bins, pieces): each piece's probability within each bin under ``uniform`` decoding."""
    first, weights, low, high = _decoding_cells(attribute, fine)
    masses = np.zeros((attribute.bins, len(pieces)))
    for b in range(attribute.bins):
        cells = range(first[b], first[b + 1])
        total = sum(weights[c] for c in cells)
        for k, (p_low, p_high, _) in enumerate(pieces):
            masses[b, k] = sum(weights[c] * _overlap(attribute, low[c], high[c], p_low, p_high)
                               for c in cells) / total if total > 0 else 0.0
    return masses


def _overlap(attribute: Attribute, low: float, high: float, p_low: float, p_high: float) -> float:
    """The share of a decoding cell's values (integers [low, high], floats [low, high)) in the
    closed piece [p_low, p_high]."""
    if _draws_integers(attribute):
        inside = min(high, p_high) - max(low, p_low) + 1
        return max(inside, 0) / (high - low + 1) if high >= low else 0.0
    if high <= low:  # a point
        return float(p_low <= low <= p_high)
    return max(min(high, p_high) - max(low, p_low), 0.0) / (high - low)


def _units(schema: Schema, index: int, atoms: list[Atom], fine: np.ndarray | None,
           decode: str, text: str) -> Units:
    attribute = schema.attributes[index]
    numbers = [v for a in atoms for v in (a.value if isinstance(a.value, tuple) else (a.value,))
               if _number(v)]
    ordered = any(a.op in ("<", "<=", ">", ">=") for a in atoms)
    where = f"condition {text!r}: attribute {attribute.name!r}"
    if attribute.kind == "datetime":
        if numbers or ordered:
            raise ConditionError(f"{where} is a date feature: compare its bin labels with == or "
                                 "in")
    elif attribute.kind != "numeric" and ordered:
        raise ConditionError(f"{where} is {attribute.kind}: only ==, != and in compare it")
    split = attribute.kind == "numeric" and bool(numbers)
    pieces = _pieces(numbers, _draws_integers(attribute)) if split else []
    masses = _split_masses(attribute, fine, pieces) if split else None
    if split and decoding(attribute, decode) != "uniform" and (
            (masses > 0) & (masses < 1)).any():
        raise ConditionError(f"{where}: its values split bins, which only 'uniform' decoding "
                             "draws within; sample with --decode uniform")
    code, mass, value, low, high = [], [], [], [], []
    for c in range(attribute.size):
        if split and c < attribute.bins:
            for k, (p_low, p_high, inside) in enumerate(pieces):
                if masses[c, k] > 0:
                    code.append(c), mass.append(masses[c, k]), value.append(inside)
                    low.append(p_low), high.append(p_high)
            continue
        code.append(c), mass.append(1.0), low.append(np.nan), high.append(np.nan)
        value.append(None)  # a null, where compared with numbers; else compared by code
    code_array = np.array(code, dtype=np.intp)
    counts = np.bincount(code_array, minlength=attribute.size)
    width = int(counts.max())
    slot = np.full((attribute.size, width), -1, dtype=np.intp)
    for c in range(attribute.size):
        slot[c, :counts[c]] = np.flatnonzero(code_array == c)
    return Units(index, code_array, np.array(mass), value, np.array(low), np.array(high),
                 width, slot)


def _truth(atom: Atom, attribute: Attribute, units: Units, text: str) -> np.ndarray:
    """Per unit of the atom's attribute, whether the atom holds there."""
    targets = atom.value if isinstance(atom.value, tuple) else (atom.value,)
    numeric = attribute.kind == "numeric" and any(_number(t) for t in targets)
    if not numeric:  # values compared as codes: labels, categories, booleans
        codes = [_code(attribute, t, text) for t in targets]
        right = tuple(codes) if isinstance(atom.value, tuple) else codes[0]
        return np.array([_holds(atom.op, int(c), right) for c in units.code])
    if any(not _number(t) for t in targets):
        raise ConditionError(f"condition {text!r}: attribute {attribute.name!r} is compared with "
                             "numbers and texts at once")
    return np.array([_holds(atom.op, v, atom.value) for v in units.value])


def _code(attribute: Attribute, value: Any, text: str) -> int:
    """The code a constant compared with a non-numeric attribute names."""
    if attribute.kind == "boolean" and isinstance(value, bool):
        return int(value)
    texts = [str(value)] + (["True" if value else "False"] if isinstance(value, bool) else [])
    for label in texts:
        if label in attribute.labels:
            return attribute.labels.index(label)
    if _number(value):
        for i, category in enumerate(attribute.categories):
            try:
                if float(category) == value:
                    return i
            except ValueError:
                continue
    raise ConditionError(f"condition {text!r}: {value!r} is not a value of attribute "
                         f"{attribute.name!r}")


def _negated(node: Any) -> Any:
    """Negations pushed down to the atoms: (atom, negated) pairs under and/or."""
    return _nnf(node, False)


def _nnf(node: Any, negate: bool) -> Any:
    if isinstance(node, Negation):
        return _nnf(node.term, not negate)
    if isinstance(node, Junction):
        op = {"and": "or", "or": "and"}[node.op] if negate else node.op
        return Junction(op, tuple(_nnf(t, negate) for t in node.terms))
    return (node, negate)


def _dnf(node: Any, text: str) -> list[list[tuple[Atom, bool]]]:
    if isinstance(node, tuple):
        return [[node]]
    parts = [_dnf(t, text) for t in node.terms]
    if node.op == "or":
        return [term for part in parts for term in part]
    terms = [sum(combo, []) for combo in itertools.product(*parts)]
    if len(terms) > MAX_TERMS:
        raise ConditionError(f"condition {text!r} expands to more than {MAX_TERMS} alternatives; "
                             "write it with fewer or-ed parts")
    return terms


@dataclass(frozen=True)
class Condition:
    """A compiled condition: its attributes' units, each atom's truth on them, and its
    disjunctive form as allowed codes per attribute (for conditioning a model's draws)."""

    text: str
    schema: Schema
    tree: Any
    units: dict[int, Units]
    truths: dict[Atom, np.ndarray]
    # each alternative: allowed units per attribute (bool over the attribute's units)
    terms: tuple[dict[int, np.ndarray], ...]
    # codes restricted beyond the condition (a balanced class): attribute → allowed codes
    only: dict[int, np.ndarray] = field(default_factory=dict)
    # the model's fine histograms of the split attributes, which uniform decoding draws by
    fine: dict[int, np.ndarray] = field(default_factory=dict)

    @property
    def attributes(self) -> list[int]:
        return sorted(set(self.units) | set(self.only))

    def restricted(self, index: int, code: int) -> Condition:
        """This condition and attribute ``index`` == ``code`` (a balanced class)."""
        allowed = np.zeros(self.schema.sizes[index], dtype=bool)
        allowed[code] = True
        return dataclasses.replace(self, only={**self.only, index: allowed})

    def term_codes(self) -> list[dict[int, np.ndarray]]:
        """Per alternative, the allowed codes of each attribute it restricts (bool masks);
        alternatives that allow no code of some attribute are left out."""
        terms = []
        for term in self.terms:
            codes = {}
            for index, allowed in term.items():
                units = self.units[index]
                mask = np.zeros(self.schema.sizes[index], dtype=bool)
                mask[units.code[allowed & (units.mass > 0)]] = True
                codes[index] = mask
            for index, allowed in self.only.items():
                codes[index] = codes.get(index, np.ones_like(allowed)) & allowed
            if all(mask.any() for mask in codes.values()):
                terms.append(codes)
        return terms

    def possible(self, codes: np.ndarray) -> np.ndarray:
        """Per row of codes, whether the condition can hold there (probability > 0)."""
        return self.fraction(codes) > 0

    def _combos(self, codes: np.ndarray) -> list[tuple[dict[int, np.ndarray], np.ndarray]]:
        """Per combination of the rows' units (one of each attribute's units of the row's
        code): the units (by attribute) and their probability given the codes, zero where the
        condition fails there."""
        combos = []
        order = sorted(self.units)
        for slots in itertools.product(*(range(self.units[i].width) for i in order)):
            chosen, mass = {}, np.ones(len(codes))
            for index, j in zip(order, slots):
                units = self.units[index]
                unit = units.slot[codes[:, index].astype(np.intp), j]
                mass = mass * np.where(unit >= 0, units.mass[unit], 0.0)
                chosen[index] = unit
            holds = self._evaluate(self.tree, chosen)
            for index, allowed in self.only.items():
                holds &= allowed[codes[:, index].astype(np.intp)]
            combos.append((chosen, np.where(holds, mass, 0.0)))
        return combos

    def _evaluate(self, node: Any, chosen: dict[int, np.ndarray]) -> np.ndarray:
        if isinstance(node, Negation):
            return ~self._evaluate(node.term, chosen)
        if isinstance(node, Junction):
            parts = [self._evaluate(t, chosen) for t in node.terms]
            return np.logical_and.reduce(parts) if node.op == "and" else \
                np.logical_or.reduce(parts)
        unit = chosen[self.schema.names.index(node.name)]
        return (unit >= 0) & self.truths[node][np.maximum(unit, 0)]

    def fraction(self, codes: np.ndarray) -> np.ndarray:
        """Per row of codes, the probability that its decoded values hold the condition."""
        if not self.units:
            return np.logical_and.reduce([allowed[codes[:, i].astype(np.intp)]
                                          for i, allowed in self.only.items()]).astype(float)
        return np.sum([mass for _, mass in self._combos(codes)], axis=0)

    def split(self) -> dict[int, Units]:
        """The attributes whose values are drawn within pieces of their bins."""
        return {i: u for i, u in self.units.items() if (~np.isnan(u.low)).any()}

    def draw_values(self, frame: pd.DataFrame, codes: np.ndarray,
                    rng: np.random.Generator) -> pd.DataFrame:
        """``frame`` (decoded from ``codes``) with the values of split attributes redrawn
        within the pieces where the condition holds: a combination of pieces per row by its
        probability, then a value within the row's bin and piece, by the decoding's cells."""
        split = self.split()
        if not split or not len(codes):
            return frame
        combos = self._combos(codes)
        cumulative = np.cumsum([mass for _, mass in combos], axis=0)
        pick = (cumulative < rng.random(len(codes)) * cumulative[-1]).sum(axis=0)
        pick = np.minimum(pick, len(combos) - 1)
        frame = frame.copy()
        for index, units in split.items():
            unit = np.choose(pick, [chosen[index] for chosen, _ in combos])
            rows = np.flatnonzero(~np.isnan(units.low[unit]))  # a piece: low may be -inf
            attribute = self.schema.attributes[index]
            values = _within(attribute, codes[rows, index].astype(np.intp), units.low[unit[rows]],
                             units.high[unit[rows]], self.fine.get(index), rng)
            column = frame[attribute.name].array.copy()
            column[rows] = values
            frame[attribute.name] = column
        return frame

    def draw_partition_values(self, frame: pd.DataFrame, codes: np.ndarray,
                              seed: np.random.SeedSequence) -> pd.DataFrame:
        """:meth:`draw_values` for a decoded partition, from a child of the partition's
        ``seed`` derived without spawning (as dp_dask.data.values.value_seed): a retried task
        draws the same values."""
        child = np.random.SeedSequence(seed.entropy, spawn_key=(*seed.spawn_key, CONDITION_KEY),
                                       pool_size=seed.pool_size)
        return self.draw_values(frame, codes, np.random.default_rng(child))


def condition_record(condition: Condition, classes: tuple[Condition, ...], balance: int | None,
                     rows: int) -> dict[str, Any]:
    """What metadata.json says of the conditioning: ``condition`` and, with ``balance`` (the
    balanced attribute), its ``classes``."""
    record: dict[str, Any] = {"where": condition.text or None, "rows": rows}
    if balance is not None:
        attribute = condition.schema.attributes[balance]
        record |= {"balance": attribute.name,
                   "classes": [attribute.labels[int(np.flatnonzero(c.only[balance])[0])]
                               for c in classes],
                   "rows_per_class": "equal, up to one row per partition"}
    return record


def _within(attribute: Attribute, bins: np.ndarray, low: np.ndarray, high: np.ndarray,
            fine: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
    """Per row, a value of its bin within [low, high]: a decoding cell of the bin by its weight
    times its share in the piece, then uniform within the cell and the piece."""
    first, weights, cell_low, cell_high = _decoding_cells(attribute, fine)
    integers = _draws_integers(attribute)
    values = np.empty(len(bins))
    # rows of a few distinct (bin, piece) pairs: each drawn at once
    keys = np.stack([bins.astype(float), low, high], axis=1)
    distinct, inverse = np.unique(keys, axis=0, return_inverse=True)
    for g, (b, p_low, p_high) in enumerate(distinct):
        rows = np.flatnonzero(inverse.ravel() == g)
        cells = np.arange(first[int(b)], first[int(b) + 1])
        share = np.array([weights[c] * _overlap(attribute, cell_low[c], cell_high[c], p_low,
                                                 p_high) for c in cells])
        cell = cells[np.searchsorted(np.cumsum(share), rng.random(len(rows)) * share.sum(),
                                     side="right").clip(0, len(cells) - 1)]
        lo = np.maximum(cell_low[cell], p_low)
        hi = np.minimum(cell_high[cell], p_high)
        if integers:
            values[rows] = lo + np.floor(rng.random(len(rows)) * (hi - lo + 1)).clip(0, hi - lo)
        else:
            top = np.where(hi > lo, np.nextafter(hi, -np.inf), lo)
            values[rows] = np.minimum(lo + (hi - lo) * rng.random(len(rows)), top)
    if attribute.output_dtype == "float32":
        single = values.astype(np.float32)
        return np.where(single < low, np.nextafter(single, np.float32(np.inf)),
                        np.where(single > high, np.nextafter(single, np.float32(-np.inf)),
                                 single))
    return values if attribute.output_dtype in FLOAT_DTYPES else values.astype(np.int64)


def compile_where(text: str, schema: Schema, decode: str = "uniform",
                  fine: dict[int, np.ndarray] | None = None) -> Condition:
    """``text`` compiled against ``schema``: every name an attribute, every value one it can
    hold (ConditionError otherwise). ``fine``: the model's fine histograms, which ``uniform``
    decoding draws by."""
    fine = fine or {}
    tree = parse_where(text)
    atoms = _atoms(tree)
    by_attribute: dict[int, list[Atom]] = {}
    for atom in atoms:
        if atom.name not in schema.names:
            raise ConditionError(f"condition {text!r}: no attribute {atom.name!r} in schema "
                                 f"{schema.name!r}")
        by_attribute.setdefault(schema.names.index(atom.name), []).append(atom)
    units = {i: _units(schema, i, found, fine.get(i), decode, text)
             for i, found in by_attribute.items()}
    truths = {atom: _truth(atom, schema.attributes[schema.names.index(atom.name)],
                           units[schema.names.index(atom.name)], text) for atom in atoms}
    terms = []
    for term in _dnf(_negated(tree), text):
        allowed: dict[int, np.ndarray] = {}
        for atom, negate in term:
            index = schema.names.index(atom.name)
            holds = ~truths[atom] if negate else truths[atom]
            allowed[index] = allowed.get(index, np.ones_like(holds)) & holds
        terms.append(allowed)
    return Condition(text, schema, tree, units, truths, tuple(terms),
                     fine={i: fine[i] for i in units if i in fine})


def balanced_attribute(balance: str, schema: Schema) -> int:
    """The index of the attribute whose classes ``balance`` asks equal rows of (a
    ConditionError naming it where the schema has none)."""
    if balance not in schema.names:
        raise ConditionError(f"--balance {balance!r}: no such attribute in schema "
                             f"{schema.name!r}")
    return schema.names.index(balance)


def _atoms(node: Any) -> list[Atom]:
    if isinstance(node, Negation):
        return _atoms(node.term)
    if isinstance(node, Junction):
        return [a for t in node.terms for a in _atoms(t)]
    return [node]


def everything(schema: Schema) -> Condition:
    """The condition that always holds (a balance without --where)."""
    return Condition("", schema, Junction("and", ()), {}, {}, ({},))
