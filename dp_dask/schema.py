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
``on_missing`` (NaN/None) and ``on_unknown`` (a value outside the domain) are either ``"error"``
(the default: encoding stops with a message naming the column and an offending value) or the
label of a bin of the attribute's domain that such values are counted in.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

SCHEMA_VERSION = 1
ERROR = "error"
BUILTIN_SCHEMAS = ("adult", "demo")


class SchemaError(ValueError):
    """The schema file itself is invalid."""


def _edge(value: Any) -> float:
    if isinstance(value, str):
        if value.strip().lower() in ("inf", "+inf", "infinity"):
            return math.inf
        if value.strip().lower() in ("-inf", "-infinity"):
            return -math.inf
        raise SchemaError(f"bin edge {value!r} is not a number, 'inf' or '-inf'")
    return float(value)


def _edge_json(value: float) -> float | int | str:
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return int(value) if float(value).is_integer() else value


def _interval_label(lo: float, hi: float) -> str:
    def fmt(v: float) -> str:
        return str(_edge_json(v))

    return f"[{fmt(lo)}, {fmt(hi)})"


@dataclass(frozen=True)
class Attribute:
    """One attribute: its name, its public domain (bin labels) and its out-of-domain rules."""

    name: str
    kind: str  # "categorical" or "numeric"
    labels: tuple[str, ...]
    categories: tuple[str, ...] = ()  # raw values of a categorical attribute, labels[:len]
    edges: tuple[float, ...] = ()  # numeric bin edges, len(edges) - 1 bins, labels[:bins]
    on_missing: str = ERROR
    on_unknown: str = ERROR

    def __post_init__(self) -> None:
        if self.kind not in ("categorical", "numeric"):
            raise SchemaError(f"attribute {self.name!r}: type must be 'categorical' or 'numeric'")
        if not self.labels:
            raise SchemaError(f"attribute {self.name!r}: empty domain")
        if len(set(self.labels)) != len(self.labels):
            raise SchemaError(f"attribute {self.name!r}: duplicate labels in {list(self.labels)}")
        if self.kind == "numeric":
            if len(self.edges) < 2:
                raise SchemaError(f"attribute {self.name!r}: numeric needs at least two edges")
            if any(b <= a for a, b in zip(self.edges, self.edges[1:])):
                raise SchemaError(f"attribute {self.name!r}: edges must increase strictly")
        for rule_name in ("on_missing", "on_unknown"):
            rule = getattr(self, rule_name)
            if rule != ERROR and rule not in self.labels:
                raise SchemaError(
                    f"attribute {self.name!r}: {rule_name}={rule!r} is neither 'error' "
                    f"nor a label of its domain {list(self.labels)}"
                )

    @property
    def size(self) -> int:
        return len(self.labels)

    def rule_code(self, rule: str) -> int:
        """Code of the public bin a rule maps to, or -1 for 'error'."""
        return -1 if rule == ERROR else self.labels.index(rule)

    @classmethod
    def from_json(cls, spec: dict[str, Any]) -> Attribute:
        try:
            name = str(spec["name"])
            kind = spec.get("type", "categorical")
        except (KeyError, TypeError) as exc:
            raise SchemaError(f"attribute spec {spec!r} needs a 'name'") from exc
        extra = tuple(str(x) for x in spec.get("extra", ()))
        rules = {
            "on_missing": str(spec.get("on_missing", ERROR)),
            "on_unknown": str(spec.get("on_unknown", ERROR)),
        }
        if kind == "categorical":
            if "categories" not in spec:
                raise SchemaError(f"attribute {name!r}: categorical needs 'categories'")
            categories = tuple(str(c) for c in spec["categories"])
            return cls(name, kind, categories + extra, categories=categories, **rules)
        if kind == "numeric":
            if "edges" not in spec:
                raise SchemaError(f"attribute {name!r}: numeric needs 'edges'")
            edges = tuple(_edge(e) for e in spec["edges"])
            bins = len(edges) - 1
            labels = spec.get("labels")
            if labels is None:
                labels = [_interval_label(a, b) for a, b in zip(edges, edges[1:])]
            if len(labels) != bins:
                raise SchemaError(f"attribute {name!r}: {len(labels)} labels for {bins} bins")
            return cls(name, kind, tuple(str(x) for x in labels) + extra, edges=edges, **rules)
        raise SchemaError(f"attribute {name!r}: type must be 'categorical' or 'numeric'")

    def to_json(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"name": self.name, "type": self.kind}
        if self.kind == "categorical":
            spec["categories"] = list(self.categories)
            extra = self.labels[len(self.categories) :]
        else:
            spec["edges"] = [_edge_json(e) for e in self.edges]
            spec["labels"] = list(self.labels[: len(self.edges) - 1])
            extra = self.labels[len(self.edges) - 1 :]
        if extra:
            spec["extra"] = list(extra)
        spec["on_missing"] = self.on_missing
        spec["on_unknown"] = self.on_unknown
        return spec


@dataclass(frozen=True)
class Schema:
    """An ordered tuple of attributes; dummy column ``offsets[i] + code`` encodes attribute i."""

    attributes: tuple[Attribute, ...]
    name: str = "schema"
    version: int = field(default=SCHEMA_VERSION)

    def __post_init__(self) -> None:
        if not self.attributes:
            raise SchemaError("schema has no attributes")
        names = [a.name for a in self.attributes]
        if len(set(names)) != len(names):
            raise SchemaError(f"duplicate attribute names in {names}")

    @property
    def names(self) -> list[str]:
        return [a.name for a in self.attributes]

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
        return {
            "schema_version": self.version,
            "name": self.name,
            "attributes": [a.to_json() for a in self.attributes],
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)

    def sha256(self) -> str:
        canonical = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    @classmethod
    def from_json(cls, spec: dict[str, Any]) -> Schema:
        if not isinstance(spec, dict) or "attributes" not in spec:
            raise SchemaError("schema JSON must be an object with an 'attributes' list")
        version = int(spec.get("schema_version", SCHEMA_VERSION))
        if version != SCHEMA_VERSION:
            raise SchemaError(f"schema_version {version} is not supported (expected 1)")
        attributes = tuple(Attribute.from_json(a) for a in spec["attributes"])
        return cls(attributes, name=str(spec.get("name", "schema")), version=version)


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
        text = path.read_text()
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"schema {source}: invalid JSON ({exc})") from exc
    return Schema.from_json(spec)
