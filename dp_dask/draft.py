"""Drafting a schema without reading the private data, and checking the data against one.

:func:`draft_schema` reads only what a file says about itself: column names and storage types
(the Parquet schema, the CSV header, a frame's dtypes), never a value. What only the values could
tell (categories, bounds) comes from public sources: the user's range shorthand (``ranges``), a
public codebook or a public sample file (``public``), or else stays a placeholder (a ``"todo"``
key that :func:`dp_dask.schema.load_schema` refuses, naming the attribute) for the user to fill.

:func:`check_schema` is the opposite: it reads the private data and counts, per column, the values
missing or outside the schema. Those are exact counts of the raw data, for the data owner's eyes
only: printed, labelled not private, never written into a release or a model.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pds

from dp_dask.cluster import compute
from dp_dask.encode import domain_codes
from dp_dask.io import TableSource, read_table
from dp_dask.schema import (
    ERROR,
    FALSE_VALUES,
    SCHEMA_VERSION,
    TODO,
    TRUE_VALUES,
    Schema,
    load_schema,
)

MISSING, OTHER = "missing", "other"
NOT_PRIVATE = ("NOT PRIVATE: exact counts of the raw data, for the data owner only; "
               "never publish them or put them in a release")
DEFAULT_MAX_CATEGORIES = 50
NUMERIC_BINS = 10  # bins of a numeric attribute drafted from a public sample's range


def _is_csv(source: TableSource) -> bool:
    return isinstance(source, str | Path) and str(source).lower().endswith((".csv", ".csv.gz"))


def storage_types(source: TableSource) -> dict[str, str]:
    """Column → ``boolean``, ``integer``, ``float``, ``datetime``, ``text`` or ``unknown``.

    Metadata only: the Parquet schema, the CSV header (CSV stores no types: every column is
    ``unknown``), or the dtypes of a frame. No value is read.
    """
    if isinstance(source, pd.DataFrame | dd.DataFrame):
        return {str(name): _dtype_kind(dtype) for name, dtype in source.dtypes.items()}
    path = Path(source)
    if not path.exists():
        raise FileNotFoundError(f"input {path} does not exist")
    if _is_csv(path):
        return {str(name): "unknown" for name in pd.read_csv(path, nrows=0).columns}
    schema = pds.dataset(path, format="parquet").schema
    return {f.name: _arrow_kind(f.type) for f in schema
            if not f.name.startswith("__index_level_")}  # pandas' stored index


def _arrow_kind(kind: pa.DataType) -> str:
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if pa.types.is_boolean(kind):
        return "boolean"
    if pa.types.is_integer(kind):
        return "integer"
    if pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        return "float"
    if pa.types.is_timestamp(kind) or pa.types.is_date(kind):
        return "datetime"
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "text"
    return "unknown"


def _dtype_kind(dtype: Any) -> str:
    if isinstance(dtype, pd.CategoricalDtype):
        return _dtype_kind(dtype.categories.dtype)
    if pd.api.types.is_bool_dtype(dtype):
        return "boolean"
    if pd.api.types.is_integer_dtype(dtype):
        return "integer"
    if pd.api.types.is_float_dtype(dtype):
        return "float"
    if pd.api.types.is_datetime64_any_dtype(dtype):
        return "datetime"
    return "text" if pd.api.types.is_string_dtype(dtype) else "unknown"


@dataclass
class Draft:
    """A drafted schema (JSON, possibly with placeholders) and what the user must still do."""

    schema: dict[str, Any]
    todo: dict[str, str] = field(default_factory=dict)  # column → what to fill in
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"drafted {len(self.schema['attributes'])} attribute(s) from public information"]
        lines += [f"  note: {note}" for note in self.notes]
        if self.todo:
            lines.append(f"{len(self.todo)} attribute(s) to fill in before the schema is valid "
                         "(each is marked \"todo\" in the file):")
            lines += [f"  {name}: {what}" for name, what in self.todo.items()]
        else:
            lines.append("nothing to fill in: the schema is complete")
        return "\n".join(lines)


def _with_missing_bin(spec: dict[str, Any], extra: tuple[str, ...] = ()) -> dict[str, Any]:
    return {**spec, "extra": [*extra, MISSING], "on_missing": MISSING}


def _placeholder(name: str, kind: str) -> tuple[dict[str, Any], str]:
    if kind in ("integer", "float"):
        what = (f"numeric ({kind}): give public bounds as \"edges\": {{\"start\": 0, "
                f"\"stop\": 100, \"step\": 5}} (or --range {name}=0:100:5), then delete \"todo\"")
        return {"name": name, "type": "numeric",
                "edges": {"start": None, "stop": None, "step": None}, TODO: what}, what
    stored = "stored as text" if kind == "text" else "a CSV stores no type"
    what = (f"categorical? ({stored}): list the public \"categories\" (a codebook), or make it "
            "numeric with public \"edges\"; values outside can go to a public bin with \"extra\": "
            "[\"other\"], \"on_unknown\": \"other\"; then delete \"todo\"")
    return {"name": name, "type": "categorical", "categories": [], TODO: what}, what


def _round(value: float) -> float | int:
    """Round float noise off (0.30000000000000004); integral values as ints, for the JSON."""
    value = round(value, 12)
    return int(value) if value.is_integer() else value


def _nice_step(span: float, bins: int) -> float:
    """A round step (1, 2 or 5 × 10^k) giving about ``bins`` bins over ``span``."""
    raw = span / bins if span > 0 else 1.0
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def _from_public_values(name: str, kind: str, values: pd.Series,
                        max_categories: int) -> tuple[dict[str, Any] | None, str]:
    """An attribute drafted from a public sample's values of one column (None: nothing there)."""
    if values.empty:
        return None, ""
    if kind == "unknown":  # a CSV column: the public values say what type it looks like
        texts = set(values.astype(str))
        if texts <= set(TRUE_VALUES + FALSE_VALUES) and len(texts) <= 2:
            return (_with_missing_bin({"name": name, "type": "boolean"}),
                    "boolean: the public sample holds only true/false values")
        if pd.to_numeric(values, errors="coerce").isna().all() and pd.to_datetime(
                values, format="ISO8601", errors="coerce").notna().all():
            return (_with_missing_bin({"name": name, "type": "datetime", "unit": "month"}),
                    "datetime (the public sample's values are ISO 8601): month bins; 'unit' "
                    "can be year (with edges), weekday, hour")
    numbers = pd.to_numeric(values, errors="coerce")
    numeric = kind in ("integer", "float") or (
        kind == "unknown" and numbers.notna().all() and values.nunique() > max_categories)
    if numeric:
        numbers = numbers.dropna()
        if numbers.empty:
            return None, ""
        lo, hi = float(numbers.min()), float(numbers.max())
        step = _nice_step(hi - lo, NUMERIC_BINS)
        start, stop = math.floor(lo / step) * step, (math.floor(hi / step) + 1) * step
        edges = {"start": _round(start), "stop": _round(stop), "step": _round(step),
                 "open_below": True, "open_above": True}
        return (_with_missing_bin({"name": name, "type": "numeric", "edges": edges}),
                f"round bins over the public sample's range [{lo:g}, {hi:g}], open at both ends")
    counts = values.astype(str).value_counts()
    if len(counts) <= max_categories:
        return (_with_missing_bin({"name": name, "type": "categorical",
                                   "categories": sorted(counts.index)}),
                f"{len(counts)} categories from the public sample")
    # A wide column: the public top-k and a public "other" bucket for the rest.
    top = counts.sort_index().sort_values(ascending=False, kind="stable").index[:max_categories]
    spec = _with_missing_bin({"name": name, "type": "categorical", "categories": list(top),
                              "on_unknown": OTHER}, (OTHER,))
    return spec, (f"the public sample's {max_categories} most frequent of {len(counts)} "
                  "categories, the rest in 'other'")


def _read_public(path: Path) -> pd.DataFrame | dict[str, Any]:
    if not path.exists():
        raise FileNotFoundError(f"public file {path} does not exist")
    if path.suffix.lower() == ".json":
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"public codebook {path}: invalid JSON ({exc})") from exc
    if _is_csv(path):  # text as text, the empty cell missing, as drafted CSV schemas read it
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, na_filter=False)
        return frame.replace("", np.nan)
    return pd.read_parquet(path)


def _codebook_spec(name: str, entry: Any) -> dict[str, Any]:
    """A codebook entry: a list of categories, a range shorthand, or an attribute spec."""
    if isinstance(entry, list):
        return _with_missing_bin({"name": name, "type": "categorical", "categories": entry})
    if isinstance(entry, dict) and {"start", "stop", "step"} <= set(entry):
        return _with_missing_bin({"name": name, "type": "numeric", "edges": entry})
    if isinstance(entry, dict):
        return {"name": name, **entry}
    raise ValueError(f"public codebook: entry of column {name!r} must be a list of categories, "
                     f"a range {{'start', 'stop', 'step'}} or an attribute spec, got {entry!r}")


def parse_range(text: str) -> tuple[str, dict[str, float]]:
    """``NAME=START:STOP:STEP`` (the CLI's --range) → (name, range shorthand)."""
    name, _, bounds = text.rpartition("=")
    parts = bounds.split(":")
    try:
        start, stop, step = (float(p) for p in parts)
    except ValueError:
        raise ValueError(f"--range {text!r}: expected NAME=START:STOP:STEP") from None
    if not name:
        raise ValueError(f"--range {text!r}: expected NAME=START:STOP:STEP")
    return name, {"start": start, "stop": stop, "step": step}


def draft_schema(source: TableSource, *, public: str | Path | None = None,
                 ranges: dict[str, dict[str, float]] | None = None,
                 max_categories: int = DEFAULT_MAX_CATEGORIES,
                 name: str | None = None) -> Draft:
    """A schema draft from public information only (see the module docstring).

    ``ranges``: column → public range shorthand ``{"start", "stop", "step"}`` (numeric bins).
    ``public``: a public codebook (JSON: a dp_dask schema, or column → list of categories /
    range / attribute spec) or a public sample file (CSV/Parquet: categories and round bins from
    its values; more than ``max_categories`` levels keep the public top-k and an "other" bin).
    """
    if max_categories < 1:
        raise ValueError(f"max_categories must be positive, got {max_categories}")
    kinds = storage_types(source)
    ranges = dict(ranges or {})
    unknown = sorted(set(ranges) - set(kinds))
    if unknown:
        raise ValueError(f"--range names column(s) {unknown} not in the input {sorted(kinds)}")
    codebook: dict[str, Any] = {}
    sample: pd.DataFrame | None = None
    if public is not None:
        loaded = _read_public(Path(public))
        if isinstance(loaded, pd.DataFrame):
            sample = loaded
        elif isinstance(loaded, dict) and isinstance(loaded.get("attributes"), list):
            codebook = {str(a.get("name")): dict(a) for a in loaded["attributes"]}
        elif isinstance(loaded, dict):
            codebook = {str(k): _codebook_spec(str(k), v) for k, v in loaded.items()}
        else:
            raise ValueError(f"public codebook {public}: expected a JSON object")
    draft = Draft({"schema_version": SCHEMA_VERSION,
                   "name": name or (Path(source).name.split(".")[0]
                                    if isinstance(source, str | Path) else "schema"),
                   "attributes": []})
    if _is_csv(source):
        draft.schema["missing_values"] = [""]
        draft.notes.append('CSV cells are text: the empty cell is listed as missing '
                           '("missing_values": [""]); NA, null etc. are text unless listed too')
    for column, kind in kinds.items():
        spec, why = None, ""
        if column in codebook:
            spec, why = codebook[column], "from the public codebook"
        elif column in ranges:
            spec = _with_missing_bin({"name": column, "type": "numeric",
                                      "edges": ranges[column]})
        elif kind == "boolean":
            spec = _with_missing_bin({"name": column, "type": "boolean"})
        elif kind == "datetime":
            spec = _with_missing_bin({"name": column, "type": "datetime", "unit": "month"})
            why = "datetime drafted as month bins: 'unit' can be year (with edges), weekday, hour"
        elif sample is not None and column in sample.columns:
            spec, why = _from_public_values(column, kind, sample[column].dropna(),
                                            max_categories)
        if spec is None:
            spec, draft.todo[column] = _placeholder(column, kind)
        elif why:
            draft.notes.append(f"{column}: {why}")
        draft.schema["attributes"].append(spec)
    if not draft.todo:
        load_schema(draft.schema)  # a complete draft must be a valid schema
    return draft


def write_draft(draft: Draft, out: str | Path, *, force: bool = False) -> Path:
    """Write the draft's JSON, whole or not at all; an existing file only with ``force``."""
    out = Path(out)
    if out.exists() and not force:
        raise ValueError(f"{out} exists; pass --force to overwrite it")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"directory {out.parent} does not exist")
    partial = out.with_name(f".{out.name}.partial")
    partial.write_text(json.dumps(draft.schema, indent=2) + "\n")
    os.replace(partial, out)  # atomic: a reader sees the old file or the whole new one
    return out


def _partition_outside(frame: pd.DataFrame, schema: Schema) -> np.ndarray:
    """Per attribute: (rows, missing, outside the domain) of one partition."""
    counts = np.zeros((schema.m, 3), dtype=np.int64)
    for i, attribute in enumerate(schema.attributes):
        codes, missing = domain_codes(frame[attribute.name], attribute)
        counts[i] = len(frame), missing.sum(), ((codes < 0) & ~missing).sum()
    return counts


def check_schema(source: TableSource, schema: Schema | str | Path,
                 show_progress: bool = False) -> pd.DataFrame:
    """NOT PRIVATE: per column, how many raw values are missing or outside the schema.

    Exact counts of the raw data for the data owner: print them, never publish or release them.
    ``fit`` says whether a fit would stop there (an 'error' rule with values to apply it to).
    """
    schema = load_schema(schema)
    parts = read_table(source, schema).to_delayed()
    blocks = [dask.delayed(_partition_outside)(part, schema) for part in parts]
    (counts,) = compute(dask.delayed(sum)(blocks, np.zeros((schema.m, 3), dtype=np.int64)),
                        show_progress=show_progress)
    rows = []
    for attribute, (n, missing, outside) in zip(schema.attributes, counts):
        stops = (missing and attribute.on_missing == ERROR) or (
            outside and attribute.on_unknown == ERROR)
        rows.append({"column": attribute.name, "rows": int(n), "missing": int(missing),
                     "on_missing": attribute.on_missing, "outside": int(outside),
                     "on_unknown": attribute.on_unknown,
                     "fit": "stops here" if stops else "ok"})
    return pd.DataFrame(rows)
