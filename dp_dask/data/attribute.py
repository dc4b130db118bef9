"""One attribute of the public schema: its name, its bins and labels, its rules for values
outside them and its public output choices, read from its JSON and checked (a SchemaError naming
the attribute and the key). The keys are those of dp_dask.data.schema's JSON format; the
schema's declared constraints (dp_dask.data.constraints) are compiled over these attributes,
and the schema (dp_dask.data.schema) holds both.

Nothing here looks at the private data.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dp_dask.data.dtypes import default_dtype, fine_problem, output_problem

ERROR = "error"
CLIP = "clip"  # on_unknown of an attribute with edges: beyond the bins, the nearest end bin
NUMERIC_FORMATS = ("HHMM", "currency", "percent")
MAX_DECIMALS = 15  # a numeric attribute's 'decimals': float64 holds about 15 of them
TODO = "todo"  # key of a drafted attribute the user still has to fill in
DECLARED, PUBLIC_STORAGE, FROM_DATA, UNDER_DP = "declared", "public-storage-schema", "data", "dp"
DTYPE_SOURCES = (DECLARED, PUBLIC_STORAGE, FROM_DATA, UNDER_DP)  # an attribute's "dtype_source"
KINDS = ("categorical", "numeric", "boolean", "datetime")
TRUE_VALUES = ("True", "true", "TRUE", "T", "t", "1", "yes", "Yes", "YES", "y", "Y")
FALSE_VALUES = ("False", "false", "FALSE", "F", "f", "0", "no", "No", "NO", "n", "N")
# Public calendar bins of a datetime attribute: unit → fixed labels (year: from its edges).
CALENDAR_UNITS: dict[str, tuple[str, ...]] = {
    "year": (),
    "month": ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"),
    "weekday": ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"),
    "hour": tuple(f"{h:02d}" for h in range(24)),
}


class SchemaError(ValueError):
    """The schema file itself is invalid."""


def _edge(value: Any, where: str) -> float:
    if isinstance(value, str):
        if value.strip().lower() in ("inf", "+inf", "infinity"):
            return math.inf
        if value.strip().lower() in ("-inf", "-infinity"):
            return -math.inf
        raise SchemaError(f"{where}: bin edge {value!r} is not a number, 'inf' or '-inf'")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SchemaError(f"{where}: bin edge {value!r} is not a number, 'inf' or '-inf'")
    if math.isnan(value):
        raise SchemaError(f"{where}: bin edge NaN is not a number")
    return float(value)


def _range_edges(spec: dict[str, Any], where: str) -> list[float]:
    """The public range shorthand ``{"start", "stop", "step"}``: start, start+step, ..., stop."""
    unknown = set(spec) - {"start", "stop", "step", "open_below", "open_above"}
    if unknown or not {"start", "stop", "step"} <= set(spec):
        raise SchemaError(f"{where}: edges range needs 'start', 'stop', 'step' (and optional "
                          f"'open_below', 'open_above'), got {sorted(spec)}")
    start, stop, step = (_edge(spec[k], where) for k in ("start", "stop", "step"))
    if not all(math.isfinite(v) for v in (start, stop, step)) or step <= 0 or stop <= start:
        raise SchemaError(f"{where}: edges range needs finite start < stop and step > 0")
    bins = (stop - start) / step
    if abs(bins - round(bins)) > 1e-9 or round(bins) > 100_000:
        raise SchemaError(f"{where}: edges range: stop - start must be a multiple of step "
                          "(at most 100,000 bins)")
    # round(): start + i * step in binary floats gives 0.30000000000000004 for 0.1 steps
    edges = [round(start + i * step, 12) for i in range(round(bins) + 1)]
    return [-math.inf] * bool(spec.get("open_below")) + edges + [math.inf] * bool(
        spec.get("open_above"))


def _edges(spec: Any, where: str) -> tuple[float, ...]:
    if isinstance(spec, dict):
        return tuple(_range_edges(spec, where))
    if not isinstance(spec, list):
        raise SchemaError(f"{where}: edges must be a list or a range "
                          f"{{'start', 'stop', 'step'}}, got {spec!r}")
    edges: list[float] = []
    for item in spec:  # numbers and ranges, in turn; a range starting at the last edge joins it
        if not isinstance(item, dict):
            edges.append(_edge(item, where))
            continue
        more = _range_edges(item, where)
        edges += more[1:] if edges and more[0] == edges[-1] else more
    return tuple(edges)


def text_list(spec: dict[str, Any], key: str, where: str, default: Any = ()) -> tuple[str, ...]:
    """A list of public values as text; a bare string ("MF") is refused, not split."""
    values = spec.get(key, default)
    if not isinstance(values, list | tuple):
        raise SchemaError(f"{where}: {key!r} must be a list, got {values!r}")
    texts = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise SchemaError(f"{where}: {key!r} holds {value!r}; give text or numbers")
        texts.append(str(value))
    return tuple(texts)


def _edge_json(value: float) -> float | int | str:
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return int(value) if float(value).is_integer() else value


def _interval_label(lo: float, hi: float, points: tuple[float, ...] = ()) -> str:
    def fmt(v: float) -> str:
        return str(_edge_json(v))

    if any(lo <= p < hi for p in points):  # a point's own bin: labelled by its value
        return fmt(next(p for p in points if lo <= p < hi))
    above = [p for p in points if lo == _above(p)]  # the bin just above a point excludes it
    return f"({fmt(above[0])}, {fmt(hi)})" if above else f"[{fmt(lo)}, {fmt(hi)})"


def _bin_labels(spec: dict[str, Any], edges: tuple[float, ...], where: str,
                points: tuple[float, ...] = ()) -> tuple[str, ...]:
    bins = len(edges) - 1
    labels = spec.get("labels")
    if labels is None:
        return tuple(_interval_label(a, b, points) for a, b in zip(edges, edges[1:]))
    labels = text_list(spec, "labels", where)
    if len(labels) != bins:
        raise SchemaError(f"{where}: {len(labels)} labels for {bins} bins" + (
            " (each point is a bin of its own: label the bins with the points)" if points
            else ""))
    return labels


def _above(point: float) -> float:
    """The upper edge of a point's bin [point, the next float): it holds that value alone."""
    return float(np.nextafter(point, math.inf))


def _points(spec: dict[str, Any], where: str) -> tuple[float, ...]:
    values = spec.get("points", [])
    if not isinstance(values, list) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            for v in values):
        raise SchemaError(f"{where}: 'points' must be a list of finite numbers, got {values!r}")
    return tuple(sorted({float(v) for v in values}))


def _with_points(edges: tuple[float, ...], fine: tuple[float, ...], points: tuple[float, ...],
                 low: float | None, high: float | None,
                 where: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Edges (and fine grid) with each point's own bin [p, next float), which holds p alone:
    its edges are inserted, except p itself where it closes an open first bin (``min`` = p:
    that bin is the point's) and the next float where p closes an open last bin (``max`` = p).
    Inserting is idempotent, so a written schema (its edges hold them) reads back the same."""
    if not points or len(edges) < 2 or any(b <= a for a, b in zip(edges, edges[1:])):
        # refused by the attribute's own check
        return edges, fine
    lowest = edges[0] if math.isfinite(edges[0]) else -math.inf if low is None else low
    highest = edges[-1] if math.isfinite(edges[-1]) else math.inf if high is None else high
    outside = [p for p in points if not lowest <= p <= highest or p == edges[-1]]
    if outside:
        raise SchemaError(f"{where}: point {_edge_json(outside[0])} lies outside the bins' "
                          "range (their edges, closed by 'min'/'max')")
    added = set()
    for p in points:
        if not (math.isinf(edges[0]) and p == low):
            added.add(p)
        if not (math.isinf(edges[-1]) and p == high):
            added.add(_above(p))
    return (tuple(sorted(set(edges) | added)),
            tuple(sorted(set(fine) | added)) if fine else fine)


def _flag(spec: dict[str, Any], key: str, where: str) -> bool:
    """An optional true/false of the attribute's JSON (default false)."""
    value = spec.get(key, False)
    if not isinstance(value, bool):
        raise SchemaError(f"{where}: {key!r} must be true or false, got {value!r}")
    return value


@dataclass(frozen=True)
class Attribute:
    """One attribute: its name, its public domain (bin labels) and its out-of-domain rules."""

    name: str
    kind: str  # one of KINDS
    labels: tuple[str, ...]
    categories: tuple[str, ...] = ()  # raw values of a categorical attribute, labels[:len]
    edges: tuple[float, ...] = ()  # numeric (or datetime year) bin edges, len(edges) - 1 bins
    on_missing: str = ERROR
    on_unknown: str = ERROR
    missing_values: tuple[str, ...] = ()  # texts that mean missing, besides real nulls
    true_values: tuple[str, ...] = ()  # boolean: texts read as True / False
    false_values: tuple[str, ...] = ()
    unit: str = ""  # datetime: a key of CALENDAR_UNITS
    format: str = ""  # datetime: the public parse format of text values; numeric: NUMERIC_FORMATS
    dtype: str = ""  # output type (dp_dask.data.dtypes); "": the kind's default
    decode: str = ""  # "uniform", "midpoint" or "label"; "": the release's choice
    minimum: float | None = None  # public bounds closing open outer bins
    maximum: float | None = None
    fine: tuple[float, ...] = ()  # public fine grid within the bins (numeric, datetime year)
    source: str = ""  # datetime: the input column it is a calendar feature of ("": its own)
    dtype_source: str = ""  # one of DTYPE_SOURCES ("": not stated)
    points: tuple[float, ...] = ()  # numeric: exact values, each its own bin (in edges)
    decimals: int | None = None  # numeric: decimal places its values are released at
    # constant within a privacy unit in a unit-shaped release (methods/marginals/unit_shape.py)
    unit_level: bool = False
    lattice: float | None = None  # numeric: values are multiples of this step (no decimals)

    def __post_init__(self) -> None:
        where = f"attribute {self.name!r}"
        if self.kind not in KINDS:
            raise SchemaError(f"{where}: type must be one of {', '.join(KINDS)}")
        if self.dtype_source and self.dtype_source not in DTYPE_SOURCES:
            raise SchemaError(f"{where}: dtype_source must be one of {', '.join(DTYPE_SOURCES)}, "
                              f"got {self.dtype_source!r}")
        if self.source and self.kind != "datetime":
            raise SchemaError(f"{where}: 'source' names the datetime column a calendar feature "
                              f"is read from; a {self.kind} attribute reads its own column")
        if self.source == self.name:
            raise SchemaError(f"{where}: a feature is named apart from its source column "
                              f"{self.source!r}, which the release recombines it into")
        if not self.labels:
            raise SchemaError(f"{where}: empty domain")
        if len(set(self.labels)) != len(self.labels):
            raise SchemaError(f"{where}: duplicate labels in {list(self.labels)}")
        if self.edges:
            if len(self.edges) < 2:
                raise SchemaError(f"{where}: bins need at least two edges")
            if any(math.isnan(e) for e in self.edges):
                raise SchemaError(f"{where}: bin edge NaN is not a number")
            if any(b <= a for a, b in zip(self.edges, self.edges[1:])):
                raise SchemaError(f"{where}: edges must increase strictly, got "
                                  f"{[_edge_json(e) for e in self.edges]}")
        elif self.kind == "numeric" or self.unit == "year":
            raise SchemaError(f"{where}: needs 'edges'")
        if self.kind == "datetime" and self.unit not in CALENDAR_UNITS:
            raise SchemaError(f"{where}: datetime 'unit' must be one of "
                              f"{', '.join(CALENDAR_UNITS)}, got {self.unit!r}")
        if CLIP in self.labels and CLIP in (self.on_missing, self.on_unknown):
            raise SchemaError(f"{where}: {CLIP!r} is both a rule and a label; rename the label")
        if self.on_unknown == CLIP and not self.edges:
            raise SchemaError(f"{where}: on_unknown {CLIP!r} needs bin edges (numeric or datetime "
                              "year); use a public bin such as 'other' or 'missing'")
        if self.kind == "numeric" and self.format and self.format not in NUMERIC_FORMATS:
            raise SchemaError(f"{where}: numeric format must be one of "
                              f"{', '.join(NUMERIC_FORMATS)}, got {self.format!r}")
        if self.format == "HHMM" and not all(0 <= e <= 1440 for e in self.edges
                                             if math.isfinite(e)):
            raise SchemaError(f"{where}: the edges of an HHMM clock time are minutes of the "
                              "day, within [0, 1440]")
        for rule_name in ("on_missing", "on_unknown"):
            rule = getattr(self, rule_name)
            if rule != ERROR and rule not in self.labels and (
                    rule_name, rule) != ("on_unknown", CLIP):
                raise SchemaError(
                    f"{where}: {rule_name}={rule!r} is neither 'error' "
                    f"nor a label of its domain {list(self.labels)}"
                )
        values = self.categories + self.true_values + self.false_values
        both = sorted(set(self.missing_values) & set(values))
        if both:
            raise SchemaError(f"{where}: {both} listed both as values and in missing_values")
        if set(self.true_values) & set(self.false_values):
            raise SchemaError(f"{where}: {sorted(set(self.true_values) & set(self.false_values))}"
                              " listed in both true_values and false_values")
        if (self.points or self.decimals is not None) and self.kind != "numeric":
            raise SchemaError(f"{where}: 'points' and 'decimals' are for numeric attributes")
        if self.decimals is not None and (isinstance(self.decimals, bool) or not isinstance(
                self.decimals, int) or not 0 <= self.decimals <= MAX_DECIMALS):
            raise SchemaError(f"{where}: 'decimals' must be an integer 0..{MAX_DECIMALS}, got "
                              f"{self.decimals!r}")
        if self.lattice is not None and (self.kind != "numeric" or isinstance(
                self.lattice, bool) or not isinstance(self.lattice, int | float)
                or not 0 < self.lattice < math.inf):
            raise SchemaError(f"{where}: 'lattice' is a numeric attribute's step, a positive "
                              f"number, got {self.lattice!r}")
        problem = output_problem(self) or (self.fine and fine_problem(self))
        if problem:
            raise SchemaError(f"{where}: {problem}")

    @property
    def output_dtype(self) -> str:
        """The type its values are released as: the declared dtype or the kind's default."""
        return self.dtype or default_dtype(self.kind, self.unit, self.source)

    @property
    def column(self) -> str:
        """The input column it reads: its source, else its own name."""
        return self.source or self.name

    def read_column(self, available: Iterable[str]) -> str:
        """The column of a table it is read from: the input column; in a release, a feature's
        own (label) column where its source column is absent."""
        return self.name if self.source and self.source not in set(available) else self.column

    @property
    def size(self) -> int:
        return len(self.labels)

    @property
    def bins(self) -> int:
        """Bins of the domain proper (categories, intervals, calendar bins), before extra."""
        if self.kind == "categorical":
            return len(self.categories)
        if self.edges:
            return len(self.edges) - 1
        return 2 if self.kind == "boolean" else len(CALENDAR_UNITS[self.unit])

    def rule_code(self, rule: str) -> int:
        """Code of the public bin a rule maps to, or -1 for 'error' ('clip': per value)."""
        return -1 if rule in (ERROR, CLIP) else self.labels.index(rule)

    @classmethod
    def from_json(cls, spec: dict[str, Any],
                  missing_values: tuple[str, ...] = ()) -> Attribute:
        """An attribute from its JSON; ``missing_values``: the schema-wide default."""
        if not isinstance(spec, dict) or "name" not in spec:
            raise SchemaError(f"attribute spec {spec!r} needs a 'name'")
        name = str(spec["name"])
        where = f"attribute {name!r}"
        if TODO in spec:  # left by dp_dask.data.draft for the user to fill in
            raise SchemaError(f"{where} is a draft placeholder: {spec[TODO]}")
        kind = spec.get("type", "categorical")
        extra = text_list(spec, "extra", where)
        common: dict[str, Any] = {
            "on_missing": str(spec.get("on_missing", ERROR)),
            "on_unknown": str(spec.get("on_unknown", ERROR)),
            "missing_values": text_list(spec, "missing_values", where, list(missing_values)),
            "dtype": str(spec.get("dtype", "")), "decode": str(spec.get("decode", "")),
            "minimum": None if spec.get("min") is None else _edge(spec["min"], where),
            "maximum": None if spec.get("max") is None else _edge(spec["max"], where),
            "fine": () if spec.get("fine") is None else _edges(spec["fine"], f"{where} fine"),
            "source": str(spec.get("source", "")),
            "dtype_source": str(spec.get("dtype_source", "")),
            "unit_level": _flag(spec, "unit_level", where),
        }
        if kind == "categorical":
            if "categories" not in spec:
                raise SchemaError(f"{where}: categorical needs 'categories'")
            categories = text_list(spec, "categories", where)
            return cls(name, kind, categories + extra, categories=categories, **common)
        if kind == "numeric":
            if "edges" not in spec:
                raise SchemaError(f"{where}: numeric needs 'edges'")
            points = _points(spec, where)
            edges, common["fine"] = _with_points(_edges(spec["edges"], where), common["fine"],
                                                 points, common["minimum"], common["maximum"],
                                                 where)
            return cls(name, kind, _bin_labels(spec, edges, where, points) + extra, edges=edges,
                       format=str(spec.get("format", "")), points=points,
                       decimals=spec.get("decimals"), lattice=spec.get("lattice"), **common)
        if kind == "boolean":
            return cls(name, kind, ("False", "True") + extra,
                       true_values=text_list(spec, "true_values", where, TRUE_VALUES),
                       false_values=text_list(spec, "false_values", where, FALSE_VALUES), **common)
        if kind == "datetime":
            unit = str(spec.get("unit", ""))
            common |= {"unit": unit, "format": str(spec.get("format", "ISO8601"))}
            if unit == "year":
                if "edges" not in spec:
                    raise SchemaError(f"{where}: datetime unit 'year' needs year 'edges'")
                edges = _edges(spec["edges"], where)
                return cls(name, kind, _bin_labels(spec, edges, where) + extra, edges=edges,
                           **common)
            return cls(name, kind, CALENDAR_UNITS.get(unit, ("?",)) + extra, **common)
        raise SchemaError(f"{where}: type must be one of {', '.join(KINDS)}, got {kind!r}")

    def to_json(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"name": self.name, "type": self.kind}
        if self.kind == "categorical":
            spec["categories"] = list(self.categories)
        if self.kind == "datetime":
            spec |= {"unit": self.unit, "format": self.format}
            if self.source:  # absent when not declared: older schemas keep their sha256
                spec["source"] = self.source
        elif self.format:  # a numeric format; absent when not declared (sha256 kept)
            spec["format"] = self.format
        if self.kind == "boolean":
            spec |= {"true_values": list(self.true_values),
                     "false_values": list(self.false_values)}
        if self.edges:
            spec["edges"] = [_edge_json(e) for e in self.edges]
            spec["labels"] = list(self.labels[: self.bins])
        extra = self.labels[self.bins :]
        if extra:
            spec["extra"] = list(extra)
        spec["on_missing"] = self.on_missing
        spec["on_unknown"] = self.on_unknown
        if self.missing_values:  # absent when empty: older schemas keep their sha256
            spec["missing_values"] = list(self.missing_values)
        # The output choices too are absent when not declared, for the same reason.
        spec |= {key: value for key, value in (("dtype", self.dtype), ("decode", self.decode),
                                               ("dtype_source", self.dtype_source)) if value}
        spec |= {key: _edge_json(value) for key, value in (("min", self.minimum),
                                                          ("max", self.maximum))
                 if value is not None}
        if self.fine:
            spec["fine"] = [_edge_json(e) for e in self.fine]
        # absent when not declared: older schemas keep their sha256
        if self.points:
            spec["points"] = [_edge_json(p) for p in self.points]
        if self.decimals is not None:
            spec["decimals"] = self.decimals
        if self.unit_level:
            spec["unit_level"] = True
        if self.lattice is not None:
            spec["lattice"] = _edge_json(self.lattice)
        return spec
