"""Drafting a schema's placeholders from the data under DP (``--dp-epsilon``): categories by
thresholded noisy counts, numeric bins at DP quantiles over a public grid. The exact counts are
reduced on Dask to the driver, noised once there and dropped; the spend is recorded in the
privacy ledger and in the schema (``"drafted_under_dp"``). The public drafting that leaves the
placeholders is :mod:`dp_dask.data.draft`.
"""

from __future__ import annotations

import hashlib
import json
import math
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
    free_label,
)
from dp_dask.data.draft_text import ID_DISTINCT, TextDraft, check_text_budget, draft_texts
from dp_dask.data.io import TableSource, read_table
from dp_dask.data.schema import DECLARED, Attribute, load_schema
from dp_dask.data.text import category_text
from dp_dask.privacy.labels import NEIGHBOURING, PRIVATE_SAMPLERS
from dp_dask.privacy.ledger import Entry, Ledger, charging, dataset_name_for, new_run_id
from dp_dask.privacy.noise import _check_sampler
from dp_dask.privacy.selection import noisy_min_index, noisy_min_scale, quantile_scores


def default_grid(kind: str) -> np.ndarray:
    """A wide public grid for a numeric storage type: 0 and ±{1, 2, 3, 5, 7}·10^j, j = 0..9 for
    integers, j = −3..9 for floats and numbers of either (storage types that are data). DP
    quantiles are chosen among these candidates."""
    low = 0 if kind == "integer" else -3
    steps = [round(m * 10.0**j, 12) for j in range(low, 10) for m in (1, 2, 3, 5, 7)]
    return np.array(sorted({0.0, *steps, *(-v for v in steps)}))


def _grid(column: str, spec: dict[str, float]) -> np.ndarray:
    """The finite candidates of a public range shorthand, validated as the schema would."""
    edges = Attribute.from_json({"name": column, "type": "numeric", "edges": spec}).edges
    return np.array([e for e in edges if math.isfinite(e)])


def _missing_mask(values: pd.Series, missing_values: tuple[str, ...],
                  texts: Any, inverse: np.ndarray | None) -> np.ndarray:
    """Per row whether the value is missing: a null, or its text (``category_text``) listed."""
    missing = values.isna().to_numpy(dtype=bool)
    if missing_values:
        listed = pd.Index(missing_values, dtype=object).get_indexer(
            np.asarray(texts, dtype=object)) >= 0
        missing = missing | (listed if inverse is None else np.append(listed, False)[inverse])
    return missing


def _partition_counts(frame: pd.DataFrame, grids: dict[str, np.ndarray | None],
                      missing_values: tuple[str, ...]) -> dict[str, Any]:
    """Exact counts of one partition: per text column, rows per value text (category_text);
    per numeric column, values below and above each grid candidate (shape (2, candidates))."""
    counts: dict[str, Any] = {}
    for column, grid in grids.items():
        values = frame[column]
        if grid is None:
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
            numbers = np.sort(numbers[~np.isnan(numbers)])
            counts[column] = np.stack([
                np.searchsorted(numbers, grid, side="left"),
                len(numbers) - np.searchsorted(numbers, grid, side="right")]).astype(np.int64)
    return counts


def _merge_counts(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for column, first in blocks[0].items():
        parts = [block[column] for block in blocks]
        merged[column] = (pd.concat(parts).groupby(level=0).sum()
                          if isinstance(first, pd.Series) else np.sum(parts, axis=0))
    return merged


def draft_under_dp(draft: Draft, source: TableSource, kinds: dict[str, str], *,
                   epsilon: float, delta: float | None, columns: list[str] | None = None,
                   grids: dict[str, dict[str, float]] | None = None, bins: int = DP_BINS,
                   ledger: Ledger | str | Path | bool | None = None,
                   dataset_name: str | None = None, sampler: str = "opendp",
                   seed: int | None = None, show_progress: bool = False,
                   ids: str = "synthetic") -> None:
    """Fill placeholders of ``draft`` from the data, under (ε, δ)-DP (replace one row).

    The budget is split equally over the columns (basic composition); the text columns' shares
    and δ are split among them by :func:`.draft_text.draft_texts`. Exact counts are reduced
    on Dask to the driver, noised once there (dp_dask.privacy.selection) and dropped; only the
    selected values and quantiles enter the schema.

    * A text column (or a CSV column without a grid): an identifier if its noisy count of
      distinct values nears the rows (released as synthetic ids, or dropped with ``ids``
      "drop"); else its categories are the value texts
      (:func:`~dp_dask.data.text.category_text`, missing values excluded) whose thresholded noisy
      count passes (OpenDP's Laplace threshold, in one or two rounds: :mod:`.draft_text`). Values
      below the threshold go to a public ``other`` bin (``on_unknown``), missing ones to
      ``missing``.
    * A numeric column (integer/float storage type, or a column given a public grid in
      ``grids``: ``{"start", "stop", "step"}``; default :func:`default_grid`): bin edges at
      the DP quantiles i/``bins``, i = 1..bins−1, each a report-noisy-min over the candidates
      of the grid with ε_col / (bins − 1); edges sorted and deduplicated, open at both ends
      (``-inf``/``inf``), missing values in ``missing``.

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
    candidates: dict[str, np.ndarray | None] = {
        c: _grid(c, grids[c]) if c in grids else
        default_grid(kinds[c]) if kinds[c] in NUMBER_KINDS else None for c in columns}
    texts = [c for c in columns if candidates[c] is None]
    share = epsilon / len(columns)
    if texts:  # bad budgets fail here, before any data is read
        check_text_budget(share * len(texts), delta, len(texts))
    levels = list(range(1, bins))
    scale = noisy_min_scale(share / len(levels), bins)
    rng = None if seed is None else np.random.default_rng(seed)
    _check_sampler(sampler, rng)

    book = (None if ledger is False else ledger if isinstance(ledger, Ledger) else
            Ledger(None if ledger in (None, True) else ledger))
    request = json.dumps({"input": kinds, "columns": columns, "grids": grids, "bins": bins,
                          "epsilon": epsilon, "delta": delta}, sort_keys=True)
    reservation = None if book is None else book.reserve(Entry.for_draft(
        dataset_name=dataset_name_for(source, dataset_name),
        request_sha256=hashlib.sha256(request.encode()).hexdigest(), run_id=new_run_id(),
        epsilon=float(epsilon), delta=float(delta), sampler=sampler,
        private=sampler in PRIVATE_SAMPLERS))
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
        parts = read_table(source, reading).to_delayed()
        blocks = [dask.delayed(_partition_counts)(part, candidates, missing_values)
                  for part in parts]
        # n is public (neighbours replace a row): the identifiers' rule compares with it
        exact, rows = compute(dask.delayed(_merge_counts)(blocks),
                              dask.delayed(sum)([dask.delayed(len)(part) for part in parts]),
                              show_progress=show_progress)
        # noise drawn once per measurement, after the reduction
        text = draft_texts({c: exact[c] for c in texts}, rows, share * len(texts), delta,
                           sampler=sampler, rng=rng) if texts else TextDraft()
        for column in columns:
            counts, grid = exact[column], candidates[column]
            if column in text.identifiers:
                add_identifier(draft, column, kinds[column], ids, "its noisy count of distinct "
                               f"values is above {ID_DISTINCT:g} x the rows")
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
            else:
                below, above = counts
                chosen = [grid[noisy_min_index(quantile_scores(below, above, i, bins), scale,
                                               sampler=sampler, rng=rng)] for i in levels]
                edges = sorted({_round(float(v)) for v in chosen})
                specs[column] = _with_missing_bin({"name": column, "type": "numeric",
                                                   "edges": ["-inf", *edges, "inf"],
                                                   "dtype_source": typed_by[column]})
                mechanisms[column] = {
                    "mechanism": "noisy-max quantiles", "epsilon": share,
                    "quantiles": [f"{i}/{bins}" for i in levels],
                    "epsilon_each": share / len(levels), "sensitivity": bins, "scale": scale,
                    "grid": grids.get(column,
                                      f"default {kinds[column]} grid 0, ±{{1,2,3,5,7}}·10^j"),
                    "candidates": len(grid),
                    "opendp": "make_noisy_max(negate=True) over LInfDistance(u64, "
                              "monotonic=False) of make_quantile_score_candidates' score with "
                              "alpha = i/bins, computed from counts below/above each candidate"}
                draft.notes.append(f"{column}: {len(edges) + 1} bins at DP quantiles (edges "
                                   f"{edges}), open at both ends")
    draft.schema["attributes"] = [specs.get(a["name"], a) for a in draft.schema["attributes"]
                                  if a["name"] not in text.identifiers]
    for column in columns:
        draft.todo.pop(column)
    draft.schema["drafted_under_dp"] = {
        "epsilon": float(epsilon), "delta": float(delta), "columns": columns,
        "neighbouring": NEIGHBOURING["replace"],
        "composition": f"basic: ε split equally over {len(columns)} column(s); the "
                       f"{len(texts)} text column(s)' shares and all of δ split among them by "
                       "\"text\"",
        "mechanisms": mechanisms, **({"text": text.record} if texts else {}),
        "noise_sampler": sampler,
        "differentially_private": sampler in PRIVATE_SAMPLERS,
        "ledger": None if reservation is None else {
            "path": str(book.path), "dataset_name": reservation.entry.dataset_name,
            "run_id": reservation.entry.run_id},
    }
