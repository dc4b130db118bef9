"""A raw table in, a release out, with one ε: the schema drafted under DP, then the release.

``dp-dask synth --data raw.parquet --out rel --epsilon 1`` without ``--schema`` (a job config
without ``schema``), and :func:`synthesize` from Python, spend a total (ε, δ) in two parts:
:data:`DRAFT_SHARE` of both drafts the schema from the data under DP
(:func:`~dp_dask.data.draft.draft_schema`), the rest fits the release. The share was chosen by
measurement (docs/from-raw.md, "The draft's share"): at total ε = 1 on three public tables
(diamonds, weather, gss_wages; 10–15 columns of 26–62 k rows), 0.45 against 0.3 kept a mostly-null
column's range in every seed (left out before), 16 more of 150 text levels and gave an equal or
lower mean KS; 0.6 was no better. Measured on tables of that width only: it does not depend on
the number of columns.

Budget: the whole (ε, δ) is reserved in the ledger up front as one entry (basic composition of
the draft's and the release's guarantees, both under one unit), before any value is read, so a
refused budget spends nothing; the entry is cancelled if the work fails before any noise is
drawn, spent (failed, counted) after. The release's metadata records both parts and the split
(``privacy.schema_drafted_under_dp`` and ``privacy.one_command``); the drafted schema is written
beside the release (``schema.json``) for review. The two-step path (``dp-dask schema draft
--dp-epsilon``, then ``synth --schema``) stays for reviewing a schema before spending the rest.

A column the draft could not fill (a numeric column whose table is too small for its search at
its share, a timestamp with no year found) is left out of the release, named in the notes: the
user gets a release, not a refusal.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from dp_dask.cluster import current_client, dask_client
from dp_dask.data.attribute import TODO
from dp_dask.data.draft import Draft, draft_schema, storage_types
from dp_dask.data.io import TableSource
from dp_dask.data.schema import load_schema
from dp_dask.exceptions import DpDaskWarning
from dp_dask.privacy.labels import PRIVATE_SAMPLERS
from dp_dask.privacy.ledger import (
    DRAFT_MECHANISM,
    Entry,
    Ledger,
    dataset_name_for,
    new_run_id,
    reserving,
)
from dp_dask.synthesizer import DEFAULT_DELTA, Synthesizer

log = logging.getLogger(__name__)

# The draft's share of the total ε and δ (docs/from-raw.md, "The draft's share": measured).
DRAFT_SHARE = 0.45
ATTRS_KEY = "dp_dask"  # synthesize()'s DataFrame.attrs key of its record


@dataclass
class OneCommand:
    """What the one command produced: the fitted synthesizer, the draft (its schema and notes)
    and the ledger entry of the whole (ε, δ), if any."""

    synthesizer: Synthesizer
    draft: Draft
    entry: Entry | None


def split_budget(epsilon: float, delta: float, draft_share: float) -> dict[str, Any]:
    """The (ε, δ) of the draft and of the release: ``draft_share`` of each to the draft."""
    if not (isinstance(draft_share, int | float) and 0 < draft_share < 1):
        raise ValueError(f"draft_share= must lie in (0, 1), got {draft_share!r}")
    if not (isinstance(epsilon, int | float) and math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon= must be a finite number > 0, got {epsilon!r}")
    if not 0 < delta < 1:
        raise ValueError(f"delta= must lie in (0, 1) (the draft's thresholds need δ > 0), got "
                         f"{delta!r}")
    return {"epsilon": float(epsilon), "delta": float(delta), "draft_share": float(draft_share),
            "draft": {"epsilon": draft_share * epsilon, "delta": draft_share * delta},
            "release": {"epsilon": (1 - draft_share) * epsilon,
                        "delta": (1 - draft_share) * delta},
            "composition": "basic: the draft's (ε, δ) plus the release's, both under one unit; "
                           "reserved in the ledger as one entry before any value was read"}


def _request(data: TableSource, split: dict[str, Any], *, method: str,
             dataset_name: str | None, run_id: str | None, sampler: str, unit: Any) -> Entry:
    """The whole (ε, δ) as one ledger entry, reserved (and checked against the budget) before
    anything runs."""
    request = json.dumps({"input": storage_types(data), "split": split, "method": method},
                         sort_keys=True)
    entry = Entry.for_draft(
        dataset_name=dataset_name_for(data, dataset_name),
        request_sha256=hashlib.sha256(request.encode()).hexdigest(),
        run_id=run_id or new_run_id(), epsilon=split["epsilon"], delta=split["delta"],
        sampler=sampler, private=sampler in PRIVATE_SAMPLERS)
    unit_json = None if unit is None else unit if isinstance(unit, dict) else unit.to_json()
    max_rows = None if unit_json is None else unit_json.get("max_rows")
    return replace(entry, mechanism=f"{DRAFT_MECHANISM}+{method}",
                   unit_column=None if unit_json is None else unit_json["column"],
                   unit_max_rows=max_rows if isinstance(max_rows, int) else None)


def _without_placeholders(draft: Draft) -> list[str]:
    """Drop the attributes the draft left as placeholders (a release, not a refusal); their
    columns, each named in a note."""
    left = [a for a in draft.schema["attributes"] if TODO in a]
    dropped = sorted({a.get("source") or a["name"] for a in left})
    draft.schema["attributes"] = [a for a in draft.schema["attributes"] if TODO not in a]
    for column in dropped:
        draft.todo.pop(column, None)
        draft.notes.append(f"{column}: left out of the release: the draft could not fill it "
                           "under DP (see its note above); to release it, give it public "
                           "information (ranges=, public=) or draft it in two steps with more ε")
    return dropped


def _found_nothing(drafted: dict[str, Any]) -> dict[str, float]:
    """The drafted columns in which the draft found nothing under DP, each with the rows its
    table would need (a text column's lowest threshold, a numeric search's least table)."""
    needs = {}
    for column, mechanism in drafted.get("mechanisms", {}).items():
        if mechanism.get("released") == 0:
            needs[column] = min(r["threshold"] for r in mechanism.get("rounds", [mechanism]))
        elif "rows_needed" in mechanism:
            needs[column] = mechanism["rows_needed"]
    return needs


def _warn_if_noise(drafted: dict[str, Any], noisy_rows: float | None) -> None:
    """A draft whose noise swamps the counts releases such columns as one public bin: warn,
    with the figure (post-processing of the draft's noisy n̂ and public thresholds)."""
    needs = _found_nothing(drafted)
    if not needs or noisy_rows is None:
        return
    warnings.warn(
        f"the noise is comparable to the counts: the draft found nothing under DP in "
        f"{len(needs)} column(s) {sorted(needs)}: the table holds about {noisy_rows:,.0f} rows "
        f"(the noisy n̂) against the {min(needs.values()):,.0f} or more a value needs to pass "
        "its noise threshold at its share of ε; they are released as one public bin ('other') "
        "or left out. Spend more ε, give public categories or ranges (public=, ranges=), or "
        "release fewer columns", DpDaskWarning, stacklevel=3)


def draft_and_fit(data: TableSource, *, epsilon: float, delta: float = DEFAULT_DELTA,
                  draft_share: float = DRAFT_SHARE, method: str = "marginals",
                  public: str | Path | None = None, privacy_unit: Any = None,
                  ledger: Ledger | str | Path | bool | None = None,
                  dataset_name: str | None = None, run_id: str | None = None,
                  budget_epsilon: float | None = None, force: bool = False,
                  noise_sampler: str = "opendp", noise_seed: int | None = None,
                  show_progress: bool = False, storage_options: dict[str, Any] | None = None,
                  **method_options: Any) -> OneCommand:
    """Draft ``data``'s schema under DP with ``draft_share`` of (``epsilon``, ``delta``), then
    fit ``method`` with the rest (module docstring). The ledger (as for a fit: a
    :class:`Ledger`, a path, None for the default, False for none) holds one entry of the whole
    (ε, δ), reserved before any value is read. Needs a Dask client (a cluster) for the draft's
    and the fit's counts."""
    split = split_budget(epsilon, delta, draft_share)
    if method not in Synthesizer.methods:  # before any spend
        raise ValueError(f"method= must be one of {', '.join(sorted(Synthesizer.methods))}, "
                         f"got {method!r}")
    book = (None if ledger is False else ledger if isinstance(ledger, Ledger) else
            Ledger(None if ledger in (None, True) else ledger))
    request = _request(data, split, method=method, dataset_name=dataset_name, run_id=run_id,
                       sampler=noise_sampler, unit=privacy_unit)
    with reserving(book, [request], budget_epsilon=budget_epsilon, force=force) as booking:
        entry = booking.entries[0] if booking.entries else None
        draft = draft_schema(
            data, public=public, dp_epsilon=split["draft"]["epsilon"],
            dp_delta=split["draft"]["delta"], ledger=False, dataset_name=dataset_name,
            noise_sampler=noise_sampler, noise_seed=noise_seed, show_progress=show_progress,
            privacy_unit=privacy_unit)
        dropped = _without_placeholders(draft)
        drafted = draft.schema.get("drafted_under_dp")
        if drafted is not None:
            _warn_if_noise(drafted, drafted.get("rows", {}).get("noisy"))
        if drafted is not None and entry is not None:  # the one entry holds the draft too
            drafted["ledger"] = {"path": str(book.path), "dataset_name": entry.dataset_name,
                                 "run_id": entry.run_id, "one_command": True}
        synthesizer = Synthesizer.create(
            method, load_schema(draft.schema), epsilon=split["release"]["epsilon"],
            delta=split["release"]["delta"], noise_sampler=noise_sampler,
            noise_seed=noise_seed, show_progress=show_progress, ledger=False,
            dataset_name=dataset_name, **method_options)
        synthesizer.one_command = {**split, "left_out": dropped}  # in the record it renders
        synthesizer.fit(data, storage_options=storage_options)
    if entry is not None:
        synthesizer.model.metadata["ledger"] = {"dataset_name": entry.dataset_name,
                                                "run_id": entry.run_id}
    return OneCommand(synthesizer, draft, entry)


@contextmanager
def _client() -> Iterator[Any]:
    """The active Dask client, else a LocalCluster for the call."""
    with nullcontext(current_client()) if current_client() is not None else dask_client(
            quiet=True) as client:
        yield client


def synthesize(data: TableSource, epsilon: float = 1.0, *, delta: float | None = None,
               schema: Any = None, public: str | Path | None = None, privacy_unit: Any = None,
               rows: int | None = None, seed: int | None = None, method: str = "marginals",
               draft_share: float = DRAFT_SHARE,
               ledger: Ledger | str | Path | bool | None = None,
               dataset_name: str | None = None, noise_sampler: str = "opendp",
               noise_seed: int | None = None, **method_options: Any) -> pd.DataFrame:
    """A differentially private synthetic stand-in of ``data`` (a DataFrame or a
    Parquet/CSV path), with total (``epsilon``, ``delta``) (δ default 2⁻³⁰).

    Without ``schema``, the schema is drafted from the data under DP with ``draft_share`` of
    both (:mod:`dp_dask.one_command`), from public information too (``public``: a codebook or
    public sample); a column the draft could not fill is left out, with a warning. With
    ``schema`` (a :class:`~dp_dask.Schema`, a JSON path or a built-in name), all of it fits the
    release. ``rows``: the rows to sample (default: the noisy row count); ``seed``: the sampling
    seed (post-processing). ``privacy_unit``: ``{"column": ..., "max_rows": K or "auto"}``,
    optionally with ``"config"``, the unit's tuned numbers (``UnitConfig``, docs/tuning.md).
    The ledger records the spend as for a fit (``ledger``, ``dataset_name``).

    Returns a pandas DataFrame; ``df.attrs["dp_dask"]`` holds the record: ``privacy`` (ε, δ,
    unit, mechanism, the draft's part and the split), ``notes`` (the draft's), ``schema`` (the
    drafted schema, for review or the two-step path), ``quality`` (the noise figure, where the
    noise is comparable to the counts) and ``ledger``. The notes are logged (logger
    ``dp_dask.one_command``); a left-out column and a noisy release warn
    (:class:`~dp_dask.exceptions.DpDaskWarning`). Uses the active Dask client, else a
    LocalCluster for the call.
    """
    delta = DEFAULT_DELTA if delta is None else delta
    options = {"ledger": ledger, "dataset_name": dataset_name, "noise_sampler": noise_sampler,
               "noise_seed": noise_seed, **method_options}
    with _client():
        if schema is None:
            result = draft_and_fit(data, epsilon=epsilon, delta=delta, draft_share=draft_share,
                                   method=method, public=public, privacy_unit=privacy_unit,
                                   **options)
            synthesizer, notes, drafted = result.synthesizer, result.draft.notes, result.draft
            for note in notes:
                log.info("draft: %s", note)
            left_out = synthesizer.model.metadata["privacy"]["one_command"]["left_out"]
            if left_out:
                warnings.warn(f"column(s) {left_out} left out of the release: the draft could "
                              "not fill them under DP (df.attrs['dp_dask']['notes'] says why)",
                              DpDaskWarning, stacklevel=2)
        else:
            synthesizer = Synthesizer.create(method, load_schema(schema), epsilon=epsilon,
                                             delta=delta, privacy_unit=privacy_unit,
                                             **options).fit(data)
            notes, drafted = [], None
        frame = synthesizer.sample(rows, seed=0 if seed is None else seed).compute()
    metadata = synthesizer.model.metadata
    frame = frame.reset_index(drop=True)
    frame.attrs[ATTRS_KEY] = {
        "privacy": metadata["privacy"], "notes": list(notes),
        "schema": None if drafted is None else drafted.schema,
        "quality": metadata.get("quality", {}), "ledger": metadata.get("ledger")}
    return frame
