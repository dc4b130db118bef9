"""Drafting a schema's placeholders from the data under DP (``--dp-epsilon``): categories by
thresholded noisy counts, numeric bins at DP quantiles over a public grid. The exact counts are
reduced on Dask to the driver, noised once there and dropped; the spend is recorded in the
privacy ledger and in the schema (``"drafted_under_dp"``). The public drafting that leaves the
placeholders is :mod:`dp_dask.data.draft`.

Neighbours: the draft never reads the exact row count n. Where a rule needs it (the identifiers',
the text split's floor, whether a table is large enough to search), it reads a noisy count n̂
(:data:`ROWS_SHARE` of ε). Every mechanism is calibrated to the sensitivity of a replaced row
(or unit), at least that of an added or removed one, so the draft's (ε, δ) holds under both.
With a privacy unit (:mod:`dp_dask.data.units`) each unit's rows are first bounded to K, chosen
by a keyed hash of their values (K "auto": chosen under DP with ``units.AUTO_SHARE`` of ε), and
every mechanism takes that contribution bound K (1 for a row).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pandas as pd

from dp_dask.cluster import compute
from dp_dask.data.draft import (
    DP_BINS,
    MISSING,
    NUMBER_KINDS,
    OTHER,
    Draft,
    _round,
    _with_missing_bin,
    add_identifier,
    calendar_features,
    free_label,
)
from dp_dask.data.draft_numeric import (
    Cells,
    numeric_counts,
    search_cells,
    search_numeric,
    search_years,
    smallest_table,
    year_counts,
)
from dp_dask.data.draft_text import ID_DISTINCT, TextDraft, check_text_budget, draft_texts
from dp_dask.data.io import TableSource, read_table
from dp_dask.data.schema import DECLARED, Attribute, load_schema
from dp_dask.data.text import category_text
from dp_dask.data.units import (
    AUTO,
    AUTO_SHARE,
    PrivacyUnit,
    bound_contributions,
    choose_max_rows,
    rows_per_unit_graph,
    unit_record,
    unit_seed,
)
from dp_dask.privacy.labels import PRIVATE_SAMPLERS
from dp_dask.privacy.ledger import Entry, Ledger, charging, dataset_name_for, new_run_id
from dp_dask.privacy.noise import _check_sampler, laplace_noise
from dp_dask.privacy.selection import noisy_min_index, noisy_min_scale, quantile_scores


def _typed_grid(column: str, spec: dict[str, float], kind: str,
                dtype: str | None) -> np.ndarray:
    """The finite candidates of a public range shorthand, validated as the schema would and
    against the column's storage type (checked before any budget is reserved)."""
    edges = Attribute.from_json({"name": column, "type": "numeric", "edges": spec}).edges
    grid = np.array([e for e in edges if math.isfinite(e)])
    if kind == "datetime":
        raise ValueError(f"--dp-grid {column}: a timestamp column's years are searched under "
                         f"DP; give public years with --range {column}=START:STOP:1 instead")
    if kind == "integer" and not np.array_equal(grid, np.round(grid)):
        raise ValueError(f"--dp-grid {column}: the column stores integers ({dtype}); give a "
                         "grid of integers (integral start and step)")
    limit = 2.0**31 if dtype == "int32" else 2.0**63
    if kind in NUMBER_KINDS and np.abs(grid).max() >= limit:
        raise ValueError(f"--dp-grid {column}: the grid reaches beyond what its storage type "
                         f"({dtype or kind}) holds, ±{limit:.3g}")
    return grid


# The text columns' least share of the draft's ε, together: a text column needs each of its levels
# above a threshold of ~ln(1/δ)/ε rows, a numeric search only the octaves holding the data.
TEXT_FLOOR = 1 / 4


def split_epsilon(epsilon: float, columns: list[str], texts: list[str]) -> dict[str, float]:
    """Each column's ε (basic composition), from public column kinds alone: equal, except that
    the ``texts`` together get at least :data:`TEXT_FLOOR` of ``epsilon`` while other columns
    are drafted too (the others then share the rest equally)."""
    equal = epsilon / len(columns)
    if not texts or len(texts) == len(columns) or len(texts) * equal >= TEXT_FLOOR * epsilon:
        return {c: equal for c in columns}
    text = TEXT_FLOOR * epsilon / len(texts)
    other = (1 - TEXT_FLOOR) * epsilon / (len(columns) - len(texts))
    return {c: text if c in texts else other for c in columns}


ROWS = "__rows__"  # the reduction's row count: private, read only as its noisy count n̂
YEARS = "years"  # a timestamp column's candidates: its years
# The noisy row count's share of the draft's ε, where a rule reads n̂ (text columns, searches).
ROWS_SHARE = 0.05
NOTIONS = ["replace", "add_remove"]  # the neighbours the draft's (ε, δ) holds under


def draft_neighbouring(unit: PrivacyUnit | None) -> str:
    """The draft's neighbouring data sets in words (both notions: :data:`NOTIONS`)."""
    which = "one row" if unit is None else (
        f"all rows of one {unit.column!r} (at most {unit.max_rows} after bounding)")
    return (f"add, remove or replace {which}: (ε, δ) under both, every mechanism calibrated to "
            "a replaced one's sensitivity, at least an added or removed one's; n private, read "
            "only as the noisy n̂")


def _bounded_frame(frame: Any, unit: PrivacyUnit, epsilon: float, seed: int | None,
                   sampler: str, rng: np.random.Generator | None, show_progress: bool
                   ) -> tuple[Any, int, dict[str, Any] | None]:
    """``frame`` with at most K rows of each unit (chosen by a keyed hash of their values),
    the unit column dropped; K, and for K "auto" the record of its choice under ``epsilon``
    (pure DP: OpenDP's report-noisy-max at Gumbel scale 2Δ/ε, whose zCDP charge is ε²/8)."""
    bound, choice = unit.max_rows, None
    if bound == AUTO:
        (sizes,) = compute(rows_per_unit_graph(frame, unit.column), show_progress=show_progress)
        bound, choice = choose_max_rows(sizes, epsilon**2 / 8, "zcdp", sampler=sampler, rng=rng)
        choice = {**choice, "epsilon": math.sqrt(8 * choice["rho"]),
                  "charge": "pure ε-DP: the exponential mechanism (Gumbel scale 2Δ/ε) whose "
                            "zCDP charge rho is ε²/8"}
    return (bound_contributions(frame, None, PrivacyUnit(unit.column, bound), unit_seed(seed)),
            int(bound), choice)


def _missing_mask(values: pd.Series, missing_values: tuple[str, ...],
                  texts: Any, inverse: np.ndarray | None) -> np.ndarray:
    """Per row whether the value is missing: a null, or its text (``category_text``) listed."""
    missing = values.isna().to_numpy(dtype=bool)
    if missing_values:
        listed = pd.Index(missing_values, dtype=object).get_indexer(
            np.asarray(texts, dtype=object)) >= 0
        missing = missing | (listed if inverse is None else np.append(listed, False)[inverse])
    return missing


def _noisy_rows(exact: int, epsilon: float, bound: int, sampler: str,
                rng: np.random.Generator | None) -> tuple[float, dict[str, Any]]:
    """n̂: the (bounded) rows plus Laplace noise (a unit adds, removes or replaces at most
    ``bound`` rows: sensitivity ``bound``), at least 1 (post-processing), and its record."""
    scale = bound / epsilon
    noisy = laplace_noise(np.array([exact], dtype=np.int64), scale, sensitivity=bound,
                          sampler=sampler, rng=rng)[0]
    rows = max(float(noisy), 1.0)
    return rows, {"mechanism": "laplace", "epsilon": epsilon, "sensitivity": bound,
                  "scale": scale, "noisy": rows,
                  "opendp": "make_laplace over vector_domain(atom_domain(i64)), l1_distance(i64)",
                  "read_by": "the identifiers' rule, the text split's floor and the size a "
                             "numeric search needs: n̂, never the exact n"}


def _partition_counts(frame: pd.DataFrame, grids: dict[str, Any],
                      missing_values: tuple[str, ...]) -> dict[str, Any]:
    """Exact counts of one partition: per text column, rows per value text (category_text);
    per numeric column given a grid, values below and above each candidate (shape (2,
    candidates)); per searched numeric column its cells' counts, per timestamp its years'
    (:mod:`dp_dask.data.draft_numeric`); the rows under :data:`ROWS`."""
    counts: dict[str, Any] = {ROWS: len(frame)}
    for column, grid in grids.items():
        values = frame[column]
        if isinstance(grid, str):  # YEARS
            counts[column] = year_counts(values)
        elif grid is None:
            texts, inverse = category_text(values)
            missing = _missing_mask(values, missing_values, texts, inverse)
            if inverse is None:
                per_value = pd.Series(texts)[~missing].value_counts()
            else:
                kept = inverse[~missing & (inverse >= 0)]
                per_value = pd.Series(np.bincount(kept, minlength=len(texts)),
                                      index=pd.Index(texts, dtype=object))
            # Distinct values of different types can share a text (1 and "1"): summed by text.
            counts[column] = per_value[per_value > 0].groupby(level=0).sum()
        else:
            numbers = pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64,
                                                                      na_value=np.nan)
            if missing_values:  # a listed numeric text ("-9") is missing, not a number
                numbers = np.where(_missing_mask(values, missing_values, *category_text(values)),
                                   np.nan, numbers)
            if isinstance(grid, Cells):
                counts[column] = numeric_counts(numbers, grid)
                continue
            numbers = np.sort(numbers[~np.isnan(numbers)])
            counts[column] = np.stack([
                np.searchsorted(numbers, grid, side="left"),
                len(numbers) - np.searchsorted(numbers, grid, side="right")]).astype(np.int64)
    return counts


def _merge_counts(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for column, first in blocks[0].items():
        parts = [block[column] for block in blocks]
        if isinstance(first, dict):  # a searched column's cells
            merged[column] = {key: np.sum([part[key] for part in parts], axis=0)
                              for key in first}
        else:
            merged[column] = (pd.concat(parts).groupby(level=0).sum()
                              if isinstance(first, pd.Series) else np.sum(parts, axis=0))
    return merged


def draft_under_dp(draft: Draft, source: TableSource, kinds: dict[str, str], *,
                   epsilon: float, delta: float | None, columns: list[str] | None = None,
                   grids: dict[str, dict[str, float]] | None = None, bins: int = DP_BINS,
                   ledger: Ledger | str | Path | bool | None = None,
                   dataset_name: str | None = None, sampler: str = "opendp",
                   seed: int | None = None, show_progress: bool = False,
                   ids: str = "synthetic", unit: PrivacyUnit | None = None) -> None:
    """Fill placeholders of ``draft`` from the data, under (ε, δ)-DP (add, remove or replace
    one row; with a privacy ``unit``, all rows of one unit, each bounded to its ``max_rows``).

    With a ``unit`` its rows are bounded first (module docstring); K "auto" is chosen with
    ``units.AUTO_SHARE`` of ε. Where a text column or a numeric search needs the row count,
    :data:`ROWS_SHARE` of ε buys the noisy n̂ (Laplace, sensitivity K). The budget left is split
    over the columns by :func:`split_epsilon` (basic composition); the text columns' shares and
    δ are split among them by :func:`.draft_text.draft_texts`. Exact counts are reduced on Dask
    to the driver, noised once there (dp_dask.privacy.selection) and dropped; only the selected
    values and quantiles enter the schema.

    * A text column (or a CSV column without a grid): an identifier if its noisy count of
      distinct values nears n̂ (released as synthetic ids, or dropped with ``ids``
      "drop"); else its categories are the value texts
      (:func:`~dp_dask.data.text.category_text`, missing values excluded) whose thresholded noisy
      count passes (OpenDP's Laplace threshold, in one or two rounds: :mod:`.draft_text`). Values
      below the threshold go to a public ``other`` bin (``on_unknown``), missing ones to
      ``missing``.
    * A numeric column (integer/float storage type): its range, bins and fine grid found by
      the domain search of :mod:`dp_dask.data.draft_numeric` (octaves, then cells inside),
      open outer bins closed by ``min``/``max`` at the found range; missing values in
      ``missing``. A column whose table n̂ puts below what its search needs
      (:func:`~.draft_numeric.smallest_table`) is not searched: it keeps its placeholder (the
      budget is spent, as n̂ is drawn).
    * A numeric column given a public grid in ``grids`` (``{"start", "stop", "step"}``, checked
      against its storage type): bin edges at the DP quantiles i/``bins``, i = 1..bins−1, each
      a report-noisy-min over the grid's candidates with ε_col / (bins − 1); edges sorted and
      deduplicated, open at both ends, closed by the grid's ends where they lie outside.
    * A timestamp column: its years by thresholded noisy counts per year, drafted as calendar
      features released as one timestamp of the stored type.

    δ is recorded as stated even when no text column uses it. The ledger entry is reserved
    (checked against the dataset's budget) before any data is read, cancelled if the work fails
    before any noise is drawn, and spent otherwise.
    """
    if not (isinstance(epsilon, int | float) and math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"--dp-epsilon must be a finite number > 0, got {epsilon!r}")
    if delta is None or not 0 < delta < 1:
        raise ValueError(f"--dp-delta must lie in (0, 1) (thresholding the values present "
                         f"needs δ > 0), got {delta!r}")
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 2:
        raise ValueError(f"--dp-bins must be an integer >= 2, got {bins!r}")
    columns = list(draft.todo) if columns is None else list(columns)
    grids = dict(grids or {})
    if not columns:
        raise ValueError("--dp-columns: no column to draft under DP (every column is drafted "
                         "from public information)")
    for column in [*columns, *grids]:
        if unit is not None and column == unit.column:
            raise ValueError(f"--dp-columns/--dp-grid: column {column!r} is the privacy unit's "
                             "column: it bounds each unit's rows, never an attribute; leave it "
                             "out")
        if column not in kinds:
            raise ValueError(f"--dp-columns/--dp-grid: column {column!r} is not in the input "
                             f"{sorted(kinds)}")
        if column not in draft.todo:
            raise ValueError(f"--dp-columns/--dp-grid: column {column!r} is drafted from public "
                             "information already (its type, --range, --public, or an "
                             "identifier's name); leave it out")
    if set(grids) - set(columns):
        raise ValueError(f"--dp-grid names column(s) {sorted(set(grids) - set(columns))} not "
                         f"in --dp-columns {columns}")
    if unit is not None and unit.column not in kinds:
        raise ValueError(f"--privacy-unit: column {unit.column!r} is not in the input "
                         f"{sorted(kinds)}")
    given = {a["name"]: a for a in draft.schema["attributes"]}
    dtypes = {c: given[c].get("dtype") if c in given else None for c in columns}
    candidates: dict[str, Any] = {}
    for c in columns:
        if c in grids:
            candidates[c] = _typed_grid(c, grids[c], kinds[c], dtypes[c])
        elif kinds[c] in NUMBER_KINDS:
            candidates[c] = search_cells(kinds[c], dtypes[c])
        else:
            candidates[c] = YEARS if kinds[c] == "datetime" else None
    texts = [c for c in columns if candidates[c] is None]
    searched = [c for c in columns if isinstance(candidates[c], Cells | str)]
    auto_epsilon = AUTO_SHARE * epsilon if unit is not None and unit.max_rows == AUTO else 0.0
    rows_epsilon = ROWS_SHARE * epsilon if texts or searched else 0.0
    shares = split_epsilon(epsilon - auto_epsilon - rows_epsilon, columns, texts)
    text_epsilon = sum(shares[c] for c in texts)
    if texts:  # bad budgets fail here, before any data is read (K "auto": at K = 1)
        check_text_budget(text_epsilon, delta, len(texts),
                          1 if unit is None or unit.max_rows == AUTO else unit.max_rows)
    levels = list(range(1, bins))
    rng = None if seed is None else np.random.default_rng(seed)
    _check_sampler(sampler, rng)

    book = (None if ledger is False else ledger if isinstance(ledger, Ledger) else
            Ledger(None if ledger in (None, True) else ledger))
    request = json.dumps({"input": kinds, "columns": columns, "grids": grids, "bins": bins,
                          "epsilon": epsilon, "delta": delta,
                          **({} if unit is None else {"privacy_unit": unit.to_json()})},
                         sort_keys=True)
    reservation = None if book is None else book.reserve(replace(Entry.for_draft(
        dataset_name=dataset_name_for(source, dataset_name),
        request_sha256=hashlib.sha256(request.encode()).hexdigest(), run_id=new_run_id(),
        epsilon=float(epsilon), delta=float(delta), sampler=sampler,
        private=sampler in PRIVATE_SAMPLERS), unit_column=getattr(unit, "column", None),
        unit_max_rows=None if unit is None or unit.max_rows == AUTO else unit.max_rows))
    mechanisms: dict[str, Any] = {}
    specs: dict[str, dict[str, Any]] = {}
    # A grid is declared; else the storage kind chose numbers or text, as for the placeholder.
    typed_by = {a["name"]: DECLARED if a["name"] in grids else a.get("dtype_source", DECLARED)
                for a in draft.schema["attributes"]}
    # cancelled on a failure before the first noise draw; spent (failed) after it
    with charging(book, [] if reservation is None else [reservation.entry]):
        # read_table reads the columns its schema names: these, each as plain text/numbers.
        reading = load_schema({"attributes": [{"name": c, "categories": ["_"]}
                                              for c in columns]})
        missing_values = tuple(draft.schema.get("missing_values", ()))
        frame = read_table(source, reading, extra=() if unit is None else (unit.column,))
        bound, choice = 1, None  # the rows one unit contributes at most (a row: 1)
        if unit is not None:
            frame, bound, choice = _bounded_frame(frame, unit, auto_epsilon, seed, sampler, rng,
                                                  show_progress)
        blocks = [dask.delayed(_partition_counts)(part, candidates, missing_values)
                  for part in frame.to_delayed()]
        (exact,) = compute(dask.delayed(_merge_counts)(blocks), show_progress=show_progress)
        # noise drawn once per measurement, after the reduction; n only as n̂
        rows, rows_record = (_noisy_rows(exact[ROWS], rows_epsilon, bound, sampler, rng)
                             if rows_epsilon else (None, None))
        # Rows a search needs to find anything: a smaller table (by n̂) is not searched.
        needed = {c: smallest_table(shares[c], candidates[c], bound) for c in searched}
        text = draft_texts({c: exact[c] for c in texts}, rows, text_epsilon, delta,
                           rows_scale=rows_record["scale"], sampler=sampler, rng=rng,
                           bound=bound) if texts else TextDraft()
        for column in columns:
            counts, grid, share = exact[column], candidates[column], shares[column]
            if column in needed and rows < needed[column]:
                mechanisms[column] = {"mechanism": "none (not searched)", "epsilon": share,
                                      "rows_needed": needed[column], "noisy_rows": rows}
                draft.notes.append(
                    f"{column}: not searched: this table holds about {rows:,.0f} rows (the "
                    f"noisy n̂), and at ε = {share:.3g} a range is found only in a table of at "
                    f"least {needed[column]:,.0f}; its share of --dp-epsilon is spent (n̂ was "
                    "drawn). Give its public range (--range), more --dp-epsilon or fewer "
                    "--dp-columns")
            elif column in text.identifiers:
                add_identifier(draft, column, kinds[column], ids, "its noisy count of distinct "
                               f"values is above {ID_DISTINCT:g} x the noisy rows n̂")
            elif grid is None:
                released = text.categories[column]
                other = free_label(OTHER, released)
                missing = free_label(MISSING, released + [other])
                specs[column] = {"name": column, "type": "categorical", "categories": released,
                                 "extra": [other, missing], "on_missing": missing,
                                 "on_unknown": other, "dtype_source": typed_by[column]}
                mechanisms[column] = {**text.mechanisms[column],
                                      "rest": f"values below the threshold go to {other!r}"}
                draft.notes.append(f"{column}: {len(released)} categories released under DP "
                                   f"(ε {mechanisms[column]['epsilon']:.3g}); the rest in "
                                   f"{other!r}" + ("" if released else "; if it is numeric, give "
                                                   "it a public grid (--dp-grid) for DP quantile "
                                                   "bins"))
            elif isinstance(grid, Cells | str):
                spec, mechanisms[column], note = (
                    search_numeric(column, counts, grid, epsilon=share, bins=bins,
                                   sampler=sampler, rng=rng, bound=bound)
                    if isinstance(grid, Cells) else
                    search_years(column, counts, epsilon=share, sampler=sampler, rng=rng,
                                 bound=bound))
                draft.notes.append(note)
                if spec is not None:
                    specs[column] = spec
            else:
                below, above = counts
                scale = noisy_min_scale(share / len(levels), bins * bound)
                chosen = [grid[noisy_min_index(quantile_scores(below, above, i, bins), scale,
                                               sampler=sampler, rng=rng)] for i in levels]
                edges = sorted({_round(float(v)) for v in chosen})
                bounds = {"min": _round(float(grid[0]))} if grid[0] < edges[0] else {}
                specs[column] = _with_missing_bin({"name": column, "type": "numeric",
                                                   "edges": ["-inf", *edges, "inf"], **bounds,
                                                   "max": _round(float(grid[-1]))})
                mechanisms[column] = {
                    "mechanism": "noisy-max quantiles", "epsilon": share,
                    "quantiles": [f"{i}/{bins}" for i in levels],
                    "epsilon_each": share / len(levels), "sensitivity": bins * bound,
                    "scale": scale,
                    "grid": grids[column], "candidates": len(grid),
                    "opendp": "make_noisy_max(negate=True) over LInfDistance(u64, "
                              "monotonic=False) of make_quantile_score_candidates' score with "
                              "alpha = i/bins, computed from counts below/above each candidate"}
                draft.notes.append(f"{column}: {len(edges) + 1} bins at DP quantiles (edges "
                                   f"{edges}), open at both ends, closed by the grid's ends")
    for column in [c for c in specs if candidates[c] is not None]:  # numbers and times
        typed = {"dtype_source": typed_by[column],
                 **({"dtype": dtypes[column]} if dtypes[column] else {})}
        found = specs[column]
        if isinstance(candidates[column], np.ndarray):
            specs[column] = {**found, **typed}
        elif isinstance(candidates[column], Cells):
            specs[column] = _with_missing_bin({"name": column, "type": "numeric", **found,
                                               **typed})
        else:  # calendar features, the year closed by the years found
            features = calendar_features(column, found.pop("edges"), dtypes[column])
            specs[column] = [{**f, **(found if f["unit"] == "year" else {}),
                              "dtype_source": typed_by[column]} for f in features]
    draft.schema["attributes"] = [
        spec for a in draft.schema["attributes"] if a["name"] not in text.identifiers
        for spec in (specs[a["name"]] if isinstance(specs.get(a["name"]), list)
                     else [specs.get(a["name"], a)])]
    # a search that found nothing leaves its placeholder
    for column in [*specs, *text.identifiers]:
        draft.todo.pop(column)
    bounded = None if unit is None else PrivacyUnit(unit.column, bound)
    if bounded is not None:  # a release of this unit takes it by default, at the K drafted
        draft.schema["privacy_unit"] = bounded.to_json()
    draft.schema["drafted_under_dp"] = {
        "epsilon": float(epsilon), "delta": float(delta), "columns": columns,
        "neighbouring": draft_neighbouring(bounded), "notions": list(NOTIONS),
        "privacy_unit": {**unit_record(bounded, seed is not None, "their values' texts"),
                         **({"auto": choice} if choice else {})},
        "composition": f"basic: {'K chosen with split.max_rows, ' if choice else ''}"
                       f"{'n̂ counted with split.rows, ' if rows_epsilon else ''}the rest split "
                       f"over {len(columns)} column(s) as \"split\"; the "
                       f"{len(texts)} text column(s)' shares and all of δ split among them by "
                       "\"text\"; a searched numeric column's ε halved over its two steps "
                       "(mechanisms[column].steps)",
        "split": {"epsilon": shares, "rows": rows_epsilon, "max_rows": auto_epsilon, "rule": (
            f"{ROWS_SHARE:g} of ε to count the rows (n̂) where a text column or search reads "
            f"them, {AUTO_SHARE:g} to choose K \"auto\"; the rest equal over the columns, but "
            f"the text columns together at least {TEXT_FLOOR:.3g} of it while other columns are "
            "drafted too (the others share the rest equally); from the columns' public kinds "
            "only")},
        **({"rows": rows_record} if rows_record else {}),
        "mechanisms": mechanisms, **({"text": text.record} if texts else {}),
        "noise_sampler": sampler,
        "differentially_private": sampler in PRIVATE_SAMPLERS,
        "ledger": None if reservation is None else {
            "path": str(book.path), "dataset_name": reservation.entry.dataset_name,
            "run_id": reservation.entry.run_id},
    }
