"""Drafting a schema without reading the private data, and checking the data against one.

:func:`draft_schema` reads only what a file says about itself: column names and storage types
(the Parquet schema, the CSV header, a frame's dtypes), never a value. What only the values could
tell (categories, bounds) comes from public sources: the user's range shorthand (``ranges``), a
public codebook or a public sample file (``public``), or else stays a placeholder (a ``"todo"``
key that :func:`dp_dask.data.schema.load_schema` refuses, naming the attribute) for the user to
fill.

Storage types follow the values unless the data owner declares them public: a pandas frame's
dtypes, and the Parquet schema pandas writes, turn an int64 column with one null into float64 and
mark every column nullable. So by default no output ``dtype`` is drafted from them, integer and
float columns share one kind (``number``), and the attributes whose type they chose say
``"dtype_source": "data"``, which a fit warns about and records in the release; drafted under DP
(below), a column's type is decided from noisy counts instead (:mod:`dp_dask.data.draft_types`:
text or number, integer or float, nullable or not; ``"dtype_source": "dp"``). Where the types are
fixed by the pipeline that wrote the table, the owner declares them public (``public_types``,
``--public-types``): each attribute's output ``dtype`` (int64 stays int64, a timestamp keeps its
unit and zone) and kind (integer or float) come from them, recorded as ``"dtype_source":
"public-storage-schema"``, read as what they state, never as a fact about the values: a nullable
type says "may be null" (the attribute keeps a missing bin), a non-nullable one (a Parquet
``required`` column) "never null" (no missing bin, so the release's column is not nullable
either). A public codebook (``--public``) overrides both per column (its ``dtype`` is declared).
A timestamp's time zone is read either way: one zone holds for all of a column's values, so no row
sets it (:func:`.draft_storage.stored_timestamp_types`); without public types its unit is not.

Only when asked (``dp_epsilon``, ``--dp-epsilon``) does :func:`dp_dask.data.draft_dp.draft_under_dp`
read values, under DP with the user's budget: each column's type, unless the storage types are
declared public (:mod:`dp_dask.data.draft_types`), categories by thresholded noisy counts, numeric
ranges, bins and fine grids by a domain search over cells of the column's type
(:mod:`dp_dask.data.draft_numeric`), a timestamp's years; with a privacy unit, each unit's rows
bounded first (:mod:`dp_dask.data.units`) and every step, the types' included, at its
contribution bound. The spend is recorded in the privacy ledger, in the schema
(``"drafted_under_dp"``, with its unit, neighbours and budget split) and so in the metadata of
every release fitted with it.

:func:`check_schema` is the opposite: it reads the private data and counts, per column, the values
missing or outside the schema. Those are exact counts of the raw data, for the data owner's eyes
only: printed, labelled not private, never written into a release or a model.

Every rule of the public draft is here (codebook and ranges, identifiers' places, the drafted
``on_unknown`` by kind, never-null columns), as each reads the specs the others wrote; what the
storage says is read in :mod:`.draft_storage`, the shared spec helpers are :mod:`.draft_specs`,
the DP steps live in :mod:`.draft_dp` (with draft_types, draft_text, draft_numeric and
draft_points), which this module calls and which imports none of it back.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from dp_dask.cluster import compute
from dp_dask.data.attribute import (
    CLIP,
    DECLARED,
    ERROR,
    FALSE_VALUES,
    FROM_DATA,
    NUMERIC_FORMATS,
    PUBLIC_STORAGE,
    TODO,
    TRUE_VALUES,
    Attribute,
)
from dp_dask.data.counts import partition_reduction
from dp_dask.data.draft_dp import DraftRequest, draft_under_dp
from dp_dask.data.draft_specs import (
    DP_BINS,
    IDS,
    MISSING,
    NUMBER_KINDS,
    OTHER,
    Draft,
    add_identifier,
    calendar_features,
    free_label,
    placeholder,
    round_value,
    with_missing_bin,
)
from dp_dask.data.draft_storage import (
    is_csv,
    storage_dtypes,
    storage_required,
    storage_types,
    stored_timestamp_types,
)
from dp_dask.data.dtypes import FLOAT_DTYPES, INTEGER_DTYPES
from dp_dask.data.encode import domain_codes
from dp_dask.data.ids import id_like
from dp_dask.data.io import TableSource, read_table, write_json
from dp_dask.data.schema import SCHEMA_VERSION, Schema, load_schema
from dp_dask.data.units import PrivacyUnit
from dp_dask.privacy.ledger import Ledger

NOT_PRIVATE = ("NOT PRIVATE: exact counts of the raw data, for the data owner only; "
               "never publish them or put them in a release")
DEFAULT_MAX_CATEGORIES = 50
NUMERIC_BINS = 10  # bins of a numeric attribute drafted from a public sample's range
DATA_TYPES_NOTE = (
    "types: the input's storage types follow the values (pandas turns an int64 column with a "
    "null into float64), so they are not read as public (the default): no output \"dtype\" is "
    "drafted from them, integer and float columns are one kind, and the attributes whose type "
    "they chose say \"dtype_source\": \"data\", which a fit warns about and records in the "
    "release; under DP (dp_epsilon=) the drafted columns' types are decided from noisy counts "
    "(\"dtype_source\": \"dp\"); if the storage schema is public, declare it so "
    "(public_types=)")
PUBLIC_TYPES_NOTE = (
    "types: the input's storage schema is declared the data owner's public metadata "
    "(public_types=): the output \"dtype\", kinds and never-null columns taken from it say "
    "\"dtype_source\": \"public-storage-schema\"")


def _without_missing_bin(spec: dict[str, Any]) -> dict[str, Any]:
    """A drafted attribute of a column stored as never null: no missing bin, so its output is
    not nullable either (a missing value, which the storage rules out, would be an error)."""
    if spec.get("extra") != [MISSING] or spec.get("on_missing") != MISSING:
        return spec
    return {k: v for k, v in spec.items() if k not in ("extra", "on_missing")}


def _place_ids(draft: Draft, columns: list[str]) -> None:
    """Give each id column its input's place among the release's columns (``columns``: the
    input's, in order), so the release's columns come in the input's order."""
    ids = {spec["name"]: spec for spec in draft.schema.get("ids", [])}
    released = {a.get("source") or a["name"] for a in draft.schema["attributes"]}
    placed = 0
    for column in columns:
        if column in ids:
            ids[column]["position"] = placed
        placed += column in ids or column in released


# --on-unknown: the public bin of a value outside the drafted domain, by kind, or stop.
ON_UNKNOWN = ("kind", ERROR, MISSING)
ON_UNKNOWN_NOTE = (
    "on_unknown: a value outside the drafted domain is counted in a public bin, not an error: "
    "numeric and year bins 'clip' (the nearest end bin; no number at all counts as missing), "
    "text 'other', boolean and calendar units 'missing'; on_unknown= error stops instead, "
    "on_unknown= missing counts them as missing (text drafted under DP keeps its 'other', "
    "where it has one, which holds the values below its threshold)")


def with_unknown_rule(spec: dict[str, Any], choice: str, nullable: bool = True) -> dict[str, Any]:
    """The attribute with the public ``on_unknown`` of :data:`ON_UNKNOWN_NOTE` (``choice``:
    one of :data:`ON_UNKNOWN`), unless it states one or the choice is 'error'. A column stored
    as never null (not ``nullable``) gets no missing bin: without one, the bin of its kind
    instead of 'missing', none for a boolean or calendar unit (their stored values are known)."""
    if "on_unknown" in spec or choice == ERROR:
        return spec
    kind, extra = spec.get("type", "categorical"), list(spec.get("extra", []))
    taken = [*map(str, spec.get("categories") or []), *extra]
    binned = spec.get("on_missing", ERROR) != ERROR  # has a missing bin
    if (choice == MISSING and (nullable or binned)) or kind == "boolean" or (
            kind == "datetime" and spec.get("unit") != "year"):
        if not binned:
            if not nullable:
                return spec
            missing = free_label(MISSING, taken)
            spec = {**spec, "extra": [*extra, missing], "on_missing": missing}
        return {**spec, "on_unknown": spec["on_missing"]}
    if kind == "categorical":
        other = OTHER if OTHER in extra else free_label(OTHER, taken)
        return {**spec, "extra": extra if other in extra else [other, *extra],
                "on_unknown": other}
    return {**spec, "on_unknown": CLIP}  # numeric, datetime year: bins with edges


def _with_output_dtype(spec: dict[str, Any], dtype: str | None) -> dict[str, Any]:
    """The drafted attribute with the stored column's type as its output ``dtype``: numbers
    for a numeric attribute, a category for a categorical one (other cases keep the default,
    which :mod:`dp_dask.data.dtypes` knows the attribute can hold)."""
    fits = {"numeric": (*INTEGER_DTYPES, *FLOAT_DTYPES), "categorical": ("category",)}
    if dtype is None or "dtype" in spec or dtype not in fits.get(spec.get("type", ""), ()):
        return spec
    return {**spec, "dtype": dtype}


def _sourced(spec: dict[str, Any], dtype: str | None, declared: bool,
             storage: str) -> dict[str, Any]:
    """The attribute with the stored output ``dtype`` (given only when the storage schema is
    public) and where its type came from: ``storage`` if the storage types chose its kind or
    dtype, else the spec's own (a public codebook's) or ``declared``."""
    typed = _with_output_dtype(spec, dtype)
    if not declared or typed is not spec:
        return {**typed, "dtype_source": storage}
    return {**typed, "dtype_source": spec.get("dtype_source", DECLARED)}


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
            return (with_missing_bin({"name": name, "type": "boolean"}),
                    "boolean: the public sample holds only true/false values")
        if pd.to_numeric(values, errors="coerce").isna().all() and pd.to_datetime(
                values, format="ISO8601", errors="coerce").notna().all():
            return (with_missing_bin({"name": name, "type": "datetime", "unit": "month"}),
                    "datetime (the public sample's values are ISO 8601): month bins; 'unit' "
                    "can be year (with edges), weekday, hour")
    numbers = pd.to_numeric(values, errors="coerce")
    numeric = kind in NUMBER_KINDS or (
        kind == "unknown" and numbers.notna().all() and values.nunique() > max_categories)
    if numeric:
        numbers = numbers.dropna()
        if numbers.empty:
            return None, ""
        lo, hi = float(numbers.min()), float(numbers.max())
        step = _nice_step(hi - lo, NUMERIC_BINS)
        start, stop = math.floor(lo / step) * step, (math.floor(hi / step) + 1) * step
        edges = {"start": round_value(start), "stop": round_value(stop), "step": round_value(step),
                 "open_below": True, "open_above": True}
        return (with_missing_bin({"name": name, "type": "numeric", "edges": edges}),
                f"round bins over the public sample's range [{lo:g}, {hi:g}], open at both ends")
    counts = values.astype(str).value_counts()
    if len(counts) <= max_categories:
        return (with_missing_bin({"name": name, "type": "categorical",
                                   "categories": sorted(counts.index)}),
                f"{len(counts)} categories from the public sample")
    # A wide column: the public top-k and a public "other" bucket for the rest.
    top = counts.sort_index().sort_values(ascending=False, kind="stable").index[:max_categories]
    spec = with_missing_bin({"name": name, "type": "categorical", "categories": list(top),
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
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            return yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            raise ValueError(f"public codebook {path}: invalid YAML ({exc})") from exc
    if is_csv(path):  # text as text, the empty cell missing, as drafted CSV schemas read it
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, na_filter=False)
        return frame.replace("", np.nan)
    return pd.read_parquet(path)


RANGE_KEYS = ("start", "stop", "step", "open_below", "open_above")
# The public range of a numeric format without one: minutes of the day, hourly; 0-100 %.
FORMAT_RANGES = {"HHMM": {"start": 0, "stop": 1440, "step": 60},
                 "percent": {"start": 0, "stop": 100, "step": 10}}


def _codebook_spec(name: str, entry: Any) -> dict[str, Any]:
    """A codebook entry: a list of categories, a numeric range shorthand with optional
    ``format``, ``units`` and attribute keys (``dtype``, ``min``...), or an attribute spec."""
    if isinstance(entry, list):
        return with_missing_bin({"name": name, "type": "categorical", "categories": entry})
    if isinstance(entry, dict) and "type" not in entry and (
            "format" in entry or set(entry) & set(RANGE_KEYS)):
        fmt = entry.get("format")
        if fmt is not None and fmt not in NUMERIC_FORMATS:
            raise ValueError(f"public codebook: column {name!r}: format must be one of "
                             f"{', '.join(NUMERIC_FORMATS)}, got {fmt!r}")
        edges = {k: entry[k] for k in RANGE_KEYS if k in entry} or FORMAT_RANGES.get(fmt)
        if edges is None:
            raise ValueError(f"public codebook: column {name!r}: format {fmt!r} needs a public "
                             "range {start, stop, step}")
        rest = {k: v for k, v in entry.items() if k not in RANGE_KEYS}
        return with_missing_bin({"name": name, "type": "numeric", "edges": edges, **rest})
    if isinstance(entry, dict):
        return {"name": name, **entry}
    raise ValueError(f"public codebook: entry of column {name!r} must be a list of categories, "
                     f"a range {{'start', 'stop', 'step'}} or an attribute spec, got {entry!r}")


def parse_range(text: str, option: str = "--range") -> tuple[str, dict[str, float]]:
    """``NAME=START:STOP:STEP`` (the CLI's --range, --dp-grid) → (name, range shorthand)."""
    name, _, bounds = text.rpartition("=")
    parts = bounds.split(":")
    try:
        start, stop, step = (float(p) for p in parts)
    except ValueError:
        raise ValueError(f"{option} {text!r}: expected NAME=START:STOP:STEP") from None
    if not name:
        raise ValueError(f"{option} {text!r}: expected NAME=START:STOP:STEP")
    return name, {"start": start, "stop": stop, "step": step}


def draft_schema(source: TableSource, *, public: str | Path | None = None,
                 ranges: dict[str, dict[str, float]] | None = None,
                 max_categories: int = DEFAULT_MAX_CATEGORIES,
                 name: str | None = None, dp_epsilon: float | None = None,
                 dp_delta: float | None = None, dp_columns: list[str] | None = None,
                 dp_grids: dict[str, dict[str, float]] | None = None,
                 dp_bins: int = DP_BINS,
                 ledger: Ledger | str | Path | bool | None = None,
                 dataset_name: str | None = None, noise_sampler: str = "opendp",
                 noise_seed: int | None = None, show_progress: bool = False,
                 public_types: bool = False, on_unknown: str = "kind",
                 ids: str = "synthetic",
                 privacy_unit: PrivacyUnit | dict[str, Any] | None = None) -> Draft:
    """A schema draft from public information (see the module docstring), and optionally
    from the data under DP.

    ``ranges``: column → public range shorthand ``{"start", "stop", "step"}`` (numeric bins).
    ``public``: a public codebook (JSON: a dp_dask schema, or column → list of categories /
    range / attribute spec) or a public sample file (CSV/Parquet: categories and round bins from
    its values; more than ``max_categories`` levels keep the public top-k and an "other" bin).

    Under DP, only with ``dp_epsilon`` (and ``dp_delta`` > 0, which thresholding needs): the
    placeholders named in ``dp_columns`` (default: all of them) are drafted from the data, see
    :func:`.draft_dp.draft_under_dp` for the mechanisms, ``dp_grids``, ``dp_bins`` and the noise
    options.
    The spend is recorded in ``ledger`` (as for a fit: a :class:`Ledger`, a path, None for the
    default ledger, False for none) under ``dataset_name`` (default: the input's stem) and in
    the schema's ``"drafted_under_dp"``. Without ``dp_epsilon`` no value of the data is read.

    ``public_types``: the input's storage types (Parquet schema, frame dtypes) are declared the
    data owner's public metadata, fixed by the producing pipeline (``--public-types``): output
    dtypes and kinds are drafted from them, recorded as ``"dtype_source":
    "public-storage-schema"``, and a column stored as never null gets no missing bin. False (the
    default): they follow the values (the module docstring); under DP the drafted columns'
    types are decided from noisy counts (:mod:`dp_dask.data.draft_types`).

    ``on_unknown`` (:data:`ON_UNKNOWN`): every attribute that states no ``on_unknown`` gets a
    public bin by its kind ("kind", :data:`ON_UNKNOWN_NOTE`), its missing bin ("missing"), or
    none ("error": encoding stops there, naming the column and count, never the value). A
    column stored as never null has no missing bin to count them in: "missing" gives it the
    bin of its kind, and a boolean or calendar unit (which can hold no unknown value) none.

    ``ids`` ("synthetic" or "drop"): identifiers — codebook entries of ``"type": "id"``, columns
    :func:`~dp_dask.data.ids.id_like` by name and storage type, and under DP text columns whose
    noisy count of distinct values nears the rows — are released as synthetic ids of a public
    format (the schema's ``"ids"``), or left out of the schema.

    ``privacy_unit`` (``{"column": ..., "max_rows": K or "auto"}``; default: a public codebook's
    ``privacy_unit``, else a row): the unit column is no attribute of the schema, which declares
    the unit (``"privacy_unit"``) for its releases; under DP each unit's rows are bounded to K
    before anything is counted and every mechanism protects all rows of one unit
    (:mod:`.draft_dp`), K "auto" chosen under DP and written into the schema.
    """
    if max_categories < 1:
        raise ValueError(f"max_categories must be positive, got {max_categories}")
    if ids not in IDS:
        raise ValueError(f"ids= must be one of {', '.join(IDS)}, got {ids!r}")
    if on_unknown not in ON_UNKNOWN:
        raise ValueError(f"on_unknown= must be one of {', '.join(ON_UNKNOWN)}, "
                         f"got {on_unknown!r}")
    dp_options = {"dp_delta=": dp_delta, "dp_columns=": dp_columns, "dp_grids=": dp_grids}
    given = [option for option, value in dp_options.items() if value is not None]
    if dp_epsilon is None and given:
        raise ValueError(f"{', '.join(given)}: only with dp_epsilon=; without it the draft "
                         "reads no value of the data")
    kinds = storage_types(source)
    storage = PUBLIC_STORAGE if public_types else FROM_DATA
    dtypes = storage_dtypes(source) if public_types else {}
    # a timestamp's output type: the stored one if public, else its zone alone (the column's)
    stamps = dtypes if public_types else stored_timestamp_types(source)
    if not public_types:  # one null makes a pandas int64 column float64: one kind for both
        kinds = {c: "number" if k in NUMBER_KINDS else k for c, k in kinds.items()}
    ranges = dict(ranges or {})
    unknown = sorted(set(ranges) - set(kinds))
    if unknown:
        raise ValueError(f"ranges= names column(s) {unknown} not in the input {sorted(kinds)}")
    codebook: dict[str, Any] = {}
    sample: pd.DataFrame | None = None
    declared_unit = None  # a codebook's privacy_unit
    if public is not None:
        loaded = _read_public(Path(public))
        if isinstance(loaded, dict) and "privacy_unit" not in kinds:
            declared_unit = loaded.pop("privacy_unit", None)
        if isinstance(loaded, pd.DataFrame):
            sample = loaded
        elif isinstance(loaded, dict) and isinstance(loaded.get("attributes"), list):
            codebook = {str(a.get("name")): dict(a) for a in loaded["attributes"]}
        elif isinstance(loaded, dict):
            codebook = {str(k): _codebook_spec(str(k), v) for k, v in loaded.items()}
            # A bare range is a --range: a datetime column's public years, or numeric bins.
            ranges = {**{k: v for k, v in loaded.items() if k in kinds and isinstance(v, dict)
                         and v and set(v) <= set(RANGE_KEYS)}, **ranges}
            codebook = {k: v for k, v in codebook.items() if k not in ranges}
        else:
            raise ValueError(f"public codebook {public}: expected a JSON/YAML mapping")
    unit = PrivacyUnit.of(privacy_unit if privacy_unit is not None else declared_unit)
    if unit is not None and unit.column not in kinds:
        raise ValueError(f"privacy_unit=: column {unit.column!r} is not in the input "
                         f"{sorted(kinds)}")
    draft = Draft({"schema_version": SCHEMA_VERSION,
                   "name": name or (Path(source).name.split(".")[0]
                                    if isinstance(source, str | Path) else "schema"),
                   "attributes": []})
    if is_csv(source):
        draft.schema["missing_values"] = [""]
        draft.notes.append('CSV cells are text: the empty cell is listed as missing '
                           '("missing_values": [""]); NA, null etc. are text unless listed too')
    else:
        draft.notes.append(PUBLIC_TYPES_NOTE if public_types else DATA_TYPES_NOTE)
    for column, kind in kinds.items():
        if unit is not None and column == unit.column:
            draft.notes.append(f"{column}: the privacy unit's column: it bounds each unit's rows "
                               "and never reaches a model, so it is no attribute of the schema")
            continue
        spec, why = None, ""
        # Declared: the type comes from public sources, or the storage states none (a CSV).
        declared = column in codebook or column in ranges or kind == "unknown"
        if codebook.get(column, {}).get("type") == "id":
            add_identifier(draft, column, kind, ids, "the public codebook", codebook[column])
            continue
        if not (column in codebook or column in ranges) and id_like(column, kind):
            add_identifier(draft, column, kind, ids, "its name and storage type")
            continue
        if column in codebook:
            spec, why = codebook[column], "from the public codebook"
        elif column in ranges and kind == "datetime":
            stored = stamps.get(column)
            source_of_type = storage if column in dtypes else DECLARED
            draft.schema["attributes"] += [
                {**feature, "dtype_source": source_of_type}
                for feature in calendar_features(column, ranges[column], stored)]
            draft.notes.append(f"{column}: year, month, weekday and hour features from the public "
                               "years given, released as one timestamp (docs/releases.md)")
            continue
        elif column in ranges:
            spec = with_missing_bin({"name": column, "type": "numeric",
                                      "edges": ranges[column]})
        elif kind == "boolean":
            spec = with_missing_bin({"name": column, "type": "boolean"})
        elif kind == "datetime" and dp_epsilon is not None and column in (
                dp_columns or [column]):  # calendar features, its years found under DP
            what = (f"timestamp: give its public years (ranges= {column}=2015:2025:1) for "
                    "calendar features released as one timestamp")
            spec = {"name": column, "type": "datetime", "unit": "year",
                    "edges": {"start": None, "stop": None, "step": None}, TODO: what,
                    **({"dtype": stamps[column]} if column in stamps else {})}
            draft.todo[column] = what
            draft.schema["attributes"].append({**spec, "dtype_source": storage})
            continue
        elif kind == "datetime":
            spec = with_missing_bin({"name": column, "type": "datetime", "unit": "month"})
            why = (f"datetime drafted as month bins (released as month names); give its public "
                   f"years (ranges= {column}=2015:2025:1), or draft under DP (dp_epsilon=), "
                   "for calendar features released as one timestamp")
        elif sample is not None and column in sample.columns:
            spec, why = _from_public_values(column, kind, sample[column].dropna(),
                                            max_categories)
        if spec is None:
            spec, draft.todo[column] = placeholder(column, kind)
        elif why:
            draft.notes.append(f"{column}: {why}")
        draft.schema["attributes"].append(_sourced(spec, dtypes.get(column), declared, storage))
    for spec in draft.schema["attributes"]:  # a bad public spec stops before any budget
        if TODO not in spec:
            Attribute.from_json(spec, tuple(draft.schema.get("missing_values", ())))
    if unit is not None:  # its releases' unit (under DP, the K drafted replaces "auto")
        draft.schema["privacy_unit"] = unit.to_json()
    if dp_epsilon is not None:
        draft_under_dp(draft, source, kinds, DraftRequest(
            epsilon=dp_epsilon, delta=dp_delta, columns=dp_columns, grids=dp_grids, bins=dp_bins,
            ledger=ledger, dataset_name=dataset_name, sampler=noise_sampler, seed=noise_seed,
            show_progress=show_progress, ids=ids, public_types=public_types, unit=unit))
    # A nullable type says "may be null" (a missing bin); a non-nullable one "never null".
    required = storage_required(source) if public_types else set()
    draft.schema["attributes"] = [
        with_unknown_rule(_without_missing_bin(a), on_unknown, nullable=False)
        if a.get("source", a["name"]) in required else with_unknown_rule(a, on_unknown)
        for a in draft.schema["attributes"]]
    _place_ids(draft, list(kinds))
    if on_unknown != ERROR:
        draft.notes.append(ON_UNKNOWN_NOTE)
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
    return write_json(out, draft.schema)


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
    (counts,) = compute(partition_reduction(read_table(source, schema), _partition_outside,
                                            schema), show_progress=show_progress)
    rows = []
    for attribute, (n, missing, outside) in zip(schema.attributes, counts):
        stops = (missing and attribute.on_missing == ERROR) or (
            outside and attribute.on_unknown == ERROR)
        rows.append({"column": attribute.name, "rows": int(n), "missing": int(missing),
                     "on_missing": attribute.on_missing, "outside": int(outside),
                     "on_unknown": attribute.on_unknown,
                     "fit": "stops here" if stops else "ok"})
    return pd.DataFrame(rows)
