"""Drafting a schema's placeholders from the data under DP (``--dp-epsilon``): each column's type
from noisy counts of its values' forms (:mod:`dp_dask.data.draft_types`, unless the storage
types are declared public), categories by thresholded noisy counts, numeric domains by a DP
search, numeric bins at DP quantiles over a public grid. The exact counts are
reduced on Dask to the driver, noised once there and dropped; the spend is recorded in the
privacy ledger and in the schema (``"drafted_under_dp"``). The public drafting that leaves the
placeholders is :mod:`dp_dask.data.draft`.

The per-column work is one drafter per column kind (:mod:`.draft_kinds`: each kind's counts of
a partition, its release from noisy counts); this module decides the kinds, the budget and its
order, reduces the counts once and records the spend. Its options travel as one
:class:`DraftRequest`.

Neighbours: the draft never reads the exact row count n. Where a rule needs it (the identifiers',
the text split's floor, whether a table is large enough to search), it reads a noisy count n̂
(:data:`ROWS_SHARE` of ε). Every mechanism is calibrated to the sensitivity of a replaced row
(or unit), at least that of an added or removed one, so the draft's (ε, δ) holds under both.
With a privacy unit (:mod:`dp_dask.data.units`) each unit's rows are first bounded to K, chosen
by a keyed hash of their values (K "auto": chosen under DP with the unit's ``config.auto_share``
of ε), and every mechanism takes that contribution bound K (1 for a row).

Size: :func:`draft_under_dp` is the draft's budget order, read top to bottom as one sequence
(n̂, K, the types, the searches and their point masses measured together or not, the text
columns),
and most of its length is the checks that run before anything is read and the record it
writes; the kinds' drafters (:mod:`.draft_kinds`), the ε and δ splits (:mod:`.draft_split`) and
the searches' mechanisms (:mod:`.draft_numeric`) live apart. A further part (another budget
step) would move the record's assembly out first.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from dp_dask.cluster import compute
from dp_dask.data.attribute import (
    DECLARED,
    PUBLIC_STORAGE,
    TODO,
    UNDER_DP,
    Attribute,
)
from dp_dask.data.counts import partition_reduction
from dp_dask.data.draft_kinds import (
    FORM_COUNTS,
    ROWS,
    VALUE_COUNTS,
    Noise,
    merge_counts,
    partition_counts,
    release_quantiles,
    release_searched,
    release_text,
    release_years,
    weighted_text_counts,
)
from dp_dask.data.draft_numeric import (
    Cells,
    joint_searches,
    search_cells,
    searches_record,
    smallest_table,
)
from dp_dask.data.draft_points import (
    POINT_SHARE,
    check_points_budget,
    find_points,
)
from dp_dask.data.draft_specs import (
    DP_BINS,
    NUMBER_KINDS,
    Draft,
    add_identifier,
    calendar_features,
    placeholder,
    with_missing_bin,
)
from dp_dask.data.draft_split import (
    gaussian_together,
    split_delta,
    split_epsilon,
    split_note,
    split_record,
)
from dp_dask.data.draft_storage import stored_text_types, written_by_pandas
from dp_dask.data.draft_text import (
    ID_DISTINCT,
    TextDraft,
    check_text_budget,
    draft_texts,
    text_plan,
)
from dp_dask.data.draft_types import (
    FORMS,
    NUMBER_TYPES,
    TEXT,
    TIMESTAMP,
    TYPE_SHARE,
    YEARS,
    Undecided,
    decide_nulls,
    decide_types,
    never_null,
    with_points_places,
)
from dp_dask.data.io import TableSource, read_table
from dp_dask.data.schema import load_schema
from dp_dask.data.units import (
    AUTO,
    UNIT_DEFAULTS,
    PrivacyUnit,
    bound_contributions,
    choose_max_rows,
    rows_per_unit_graph,
    unit_record,
    unit_seed,
)
from dp_dask.privacy.labels import PRIVATE_SAMPLERS
from dp_dask.privacy.ledger import Entry, Ledger, dataset_name_for, new_run_id, reserving
from dp_dask.privacy.noise import _check_sampler, laplace_noise


def _typed_grid(column: str, spec: dict[str, float], kind: str,
                dtype: str | None) -> np.ndarray:
    """The finite candidates of a public range shorthand, validated as the schema would and
    against the column's storage type (checked before any budget is reserved)."""
    edges = Attribute.from_json({"name": column, "type": "numeric", "edges": spec}).edges
    grid = np.array([e for e in edges if math.isfinite(e)])
    if kind == "datetime":
        raise ValueError(f"dp_grids= {column}: a timestamp column's years are searched under "
                         f"DP; give public years with ranges= {column}=START:STOP:1 instead")
    if kind == "integer" and not np.array_equal(grid, np.round(grid)):
        raise ValueError(f"dp_grids= {column}: the column stores integers ({dtype}); give a "
                         "grid of integers (integral start and step)")
    limit = 2.0**31 if dtype == "int32" else 2.0**63
    if kind in NUMBER_KINDS and np.abs(grid).max() >= limit:
        raise ValueError(f"dp_grids= {column}: the grid reaches beyond what its storage type "
                         f"({dtype or kind}) holds, ±{limit:.3g}")
    return grid


# The least table is one whose rows all lie in two octaves; a column spread over more needs more
# (600 ages uniform on 0..99, five octaves, found no octave beside point masses taking 30 % at
# 1.25 times the least table)
POINT_FIT = 1.5


def _points_fit(rows: float, epsilon: float, cells: Cells, bound: int) -> bool:
    """Whether a column of ``epsilon`` spends :data:`POINT_SHARE` of it on point masses: where
    the noisy rows n̂ are at least :data:`POINT_FIT` times the full search's least table at the
    rest (post-processing of n̂ and public shares); a smaller table's search takes the whole
    share."""
    return rows >= POINT_FIT * smallest_table((1 - POINT_SHARE) * epsilon, cells, bound)


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


@dataclass(frozen=True)
class DraftRequest:
    """What a draft under DP is asked for (:func:`~dp_dask.data.draft.draft_schema`'s ``dp_*``
    and noise options): the budget (``epsilon``, ``delta``), the placeholders to fill
    (``columns``, default all), public grids (``grids``) with their quantile ``bins``, where the
    spend is recorded (``ledger``, ``dataset_name``), the noise (``sampler``, ``seed``), what an
    identifier becomes (``ids``), whether the storage types are public (``public_types``) and the
    privacy ``unit``."""

    epsilon: float
    delta: float | None
    columns: list[str] | None = None
    grids: dict[str, dict[str, float]] | None = None
    bins: int = DP_BINS
    ledger: Ledger | str | Path | bool | None = None
    dataset_name: str | None = None
    sampler: str = "opendp"
    seed: int | None = None
    show_progress: bool = False
    ids: str = "synthetic"
    public_types: bool = False
    unit: PrivacyUnit | None = None


def draft_under_dp(draft: Draft, source: TableSource, kinds: dict[str, str],
                   request: DraftRequest) -> None:
    """Fill placeholders of ``draft`` from the data, under (ε, δ)-DP (add, remove or replace
    one row; with a privacy ``unit``, all rows of one unit, each bounded to its ``max_rows``),
    as ``request`` asks (:class:`DraftRequest`: its fields are named below without it).

    The budget, each part a fixed share of ``epsilon`` chosen from public facts alone (basic
    composition), in this order: :data:`ROWS_SHARE` buys the noisy row count n̂ (Laplace,
    sensitivity K) where a text column or a numeric search reads it; unless ``public_types``
    (the storage types declared public), :data:`.draft_types.TYPE_SHARE` decides every column's
    type (:mod:`.draft_types`: numbers or text, integer or float, nullable or not; a timestamp
    stays one, nullable or not; ``kinds``, the storage's, only propose the candidates), equal
    over the columns (all of it to one timestamp's nullability where that is the only column
    drafted); with a ``unit`` of K "auto", the unit's ``config.auto_share``
    (:class:`~.units.UnitConfig`) chooses K. The rest is split over the columns by
    :func:`.draft_split.split_epsilon`, in proportion to what their kinds' searches need
    (decided or public kinds, their number, δ, K and n̂); the text columns' shares and δ go to
    one mechanism over all of them (:func:`.draft_text.draft_texts`). With a ``unit`` its rows
    are bounded first (module docstring) and every mechanism, the type step's included, takes
    its contribution bound K. Exact counts are reduced on Dask to the driver, noised once there
    (dp_dask.privacy.selection) and dropped; only the selected values and quantiles enter the
    schema.

    * A text column (or a CSV column without a grid): an identifier if its noisy count of
      distinct values nears n̂ (released as synthetic ids, or dropped with ``ids``
      "drop"); else its categories are the value texts
      (:func:`~dp_dask.data.text.category_text`, missing values excluded) whose thresholded noisy
      count passes (OpenDP's Laplace threshold for one text column, Gaussian thresholds over
      all of them at once for several: :mod:`.draft_text`). Values
      below the threshold go to a public ``other`` bin (``on_unknown``), missing ones to
      ``missing`` (to ``other`` where the column is decided never null); where the released
      levels cover the column by their noisy counts (:mod:`.draft_text`, step 4) there is no
      ``other`` bin, and those values (fewer than a level's threshold) count in the largest
      level.
    * A numeric column (integer/float storage type, or decided numeric): its point masses
      (exact values of a large share, :mod:`.draft_points`: a thresholded noisy count per value,
      :data:`.draft_points.POINT_SHARE` of its ε, its share of δ; Gaussian in the searches' one
      zCDP budget where they are measured together; after its type is decided, a fractional
      point making a column decided integer a float), then the rest's range, bins
      and fine grid found by the domain search of :mod:`dp_dask.data.draft_numeric` (octaves,
      then cells inside, of its public or decided kind), open outer bins closed by
      ``min``/``max`` at the found range; missing values in ``missing`` (in the middle bin
      where the column is decided never null). A column whose table n̂ puts below what its
      search needs (:func:`~.draft_numeric.smallest_table`, at its search's share and K) is not
      searched: it keeps its placeholder (the budget is spent, as n̂ is drawn).
    * A numeric column given a public grid in ``grids`` (``{"start", "stop", "step"}``, checked
      against its storage type): bin edges at the DP quantiles i/``bins``, i = 1..bins−1, each
      a report-noisy-min over the grid's candidates with ε_col / (bins − 1); edges sorted and
      deduplicated, open at both ends, closed by the grid's ends where they lie outside.
    * A timestamp column: its years by thresholded noisy counts per year, drafted as calendar
      features released as one timestamp of the stored type (its zone kept even where the
      storage types are not public: :func:`.draft_storage.stored_timestamp_types`), with a
      missing bin only where it is decided nullable.
    * Nullable: by the type step's and the column's own noisy counts of missing values
      (:func:`.draft_types.decide_nulls`); integer and nullable from a pandas writer
      (:func:`.draft_storage.written_by_pandas`): float64 of whole values, as pandas holds it.

    δ is recorded as stated even when no text column uses it. The ledger entry is reserved
    (checked against the dataset's budget) before any data is read, cancelled if the work fails
    before any noise is drawn, and spent otherwise.
    """
    epsilon, delta, bins, unit = request.epsilon, request.delta, request.bins, request.unit
    sampler, seed, public_types = request.sampler, request.seed, request.public_types
    show_progress = request.show_progress
    if not (isinstance(epsilon, int | float) and math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"dp_epsilon= must be a finite number > 0, got {epsilon!r}")
    if delta is None or not 0 < delta < 1:
        raise ValueError(f"dp_delta= must lie in (0, 1) (thresholding the values present "
                         f"needs δ > 0), got {delta!r}")
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 2:
        raise ValueError(f"dp_bins= must be an integer >= 2, got {bins!r}")
    columns = list(draft.todo) if request.columns is None else list(request.columns)
    grids = dict(request.grids or {})
    if not columns:
        raise ValueError("dp_columns=: no column to draft under DP (every column is drafted "
                         "from public information)")
    for column in [*columns, *grids]:
        if unit is not None and column == unit.column:
            raise ValueError(f"dp_columns=/dp_grids=: column {column!r} is the privacy unit's "
                             "column: it bounds each unit's rows, never an attribute; leave it "
                             "out")
        if column not in kinds:
            raise ValueError(f"dp_columns=/dp_grids=: column {column!r} is not in the input "
                             f"{sorted(kinds)}")
        if column not in draft.todo:
            raise ValueError(f"dp_columns=/dp_grids=: column {column!r} is drafted from public "
                             "information already (its type, ranges=, public=, or an "
                             "identifier's name); leave it out")
    if set(grids) - set(columns):
        raise ValueError(f"dp_grids= names column(s) {sorted(set(grids) - set(columns))} not "
                         f"in dp_columns= {columns}")
    if unit is not None and unit.column not in kinds:
        raise ValueError(f"privacy_unit=: column {unit.column!r} is not in the input "
                         f"{sorted(kinds)}")
    given = {a["name"]: a for a in draft.schema["attributes"]}
    dtypes = {c: given[c].get("dtype") if c in given else None for c in columns}
    candidates: dict[str, Any] = {}
    for c in columns:
        if c in grids:
            candidates[c] = _typed_grid(c, grids[c], kinds[c], dtypes[c])
        elif kinds[c] == "datetime":
            candidates[c] = YEARS
        elif not public_types:  # the storage type proposes, the type step decides
            candidates[c] = Undecided.stored_as(text=kinds[c] not in NUMBER_KINDS)
        elif kinds[c] in NUMBER_KINDS:
            candidates[c] = search_cells(kinds[c], dtypes[c])
        else:
            candidates[c] = None
    # Every drafted column's type is decided, a timestamp's nullability alone (a null leaves
    # pandas' datetime64 kind): nullable only where its noisy count of nulls says so.
    typed = [] if public_types else list(columns)
    texts = [c for c in columns if candidates[c] is None]
    maybe = [c for c in columns if isinstance(candidates[c], Undecided) and candidates[c].text]
    # The budget, from public facts alone, in one order (basic composition): n̂ where a column
    # reads it (all but a public grid's: a text column, a search, or a type yet to decide), the
    # type step, K "auto", then the columns' shares of the rest.
    rows_epsilon = (ROWS_SHARE * epsilon if any(not isinstance(candidates[c], np.ndarray)
                                                for c in columns) else 0.0)
    type_epsilon = TYPE_SHARE * epsilon if typed else 0.0
    auto_share = (UNIT_DEFAULTS if unit is None else unit.config).auto_share
    auto_epsilon = auto_share * epsilon if unit is not None and unit.max_rows == AUTO else 0.0
    rest_epsilon = epsilon - rows_epsilon - type_epsilon - auto_epsilon
    # Bad budgets fail here, before any data is read, whatever the type step decides: the most
    # text columns give each the least ε and δ, at the unit's bound (K "auto": at K = 1, the
    # least it chooses). A search's size is checked on n̂, once the types and K are drawn.
    # δ, from public facts alone (split_delta): SEARCH_DELTA of it to the searches measured
    # together where two columns may be searched, POINT_DELTA of the rest to the searched
    # columns' point masses where text columns may be drafted too, the text columns the rest
    searched = [c for c in columns if isinstance(candidates[c], Cells | Undecided)]
    search_delta, text_delta, points_delta = split_delta(delta, len(searched),
                                                         bool(texts or maybe))
    least_bound = 1 if unit is None or unit.max_rows == AUTO else unit.max_rows
    times = [c for c in columns if isinstance(candidates[c], str)]  # YEARS

    def split(text_columns: list[str], contributions: int,
              noisy_rows: float | None) -> dict[str, float]:
        return split_epsilon(rest_epsilon, columns, text_columns, times, delta=text_delta,
                             bound=contributions, rows=noisy_rows)

    # every number of the columns stored as text that may turn out text; the text columns'
    # least share (before n̂) and their most (n̂ of one row) bound the others' from below
    splits = [split([*texts, *maybe[:k]], least_bound, noisy_rows)
              for k in range(len(maybe) + 1) for noisy_rows in (None, 1.0)]
    for k, proposed in enumerate(splits[::2]):
        if texts or maybe[:k]:
            check_text_budget(sum(proposed[c] for c in [*texts, *maybe[:k]]), text_delta,
                              len(texts) + k, least_bound)
    if searched:
        check_points_budget(min(min(proposed.values()) for proposed in splits), points_delta,
                            least_bound)
    text_types = stored_text_types(source)  # metadata: the writer's, not the rows'
    from_pandas = written_by_pandas(source)  # likewise: pandas holds nullable integers as floats
    rng = None if seed is None else np.random.default_rng(seed)
    _check_sampler(sampler, rng)

    ledger = request.ledger
    book = (None if ledger is False else ledger if isinstance(ledger, Ledger) else
            Ledger(None if ledger in (None, True) else ledger))
    asked = json.dumps({"input": kinds, "columns": columns, "grids": grids, "bins": bins,
                          "epsilon": epsilon, "delta": delta, "public_types": public_types,
                          **({} if unit is None else {"privacy_unit": unit.to_json()})},
                         sort_keys=True)
    draft_entry = replace(Entry.for_draft(
        dataset_name=dataset_name_for(source, request.dataset_name),
        request_sha256=hashlib.sha256(asked.encode()).hexdigest(), run_id=new_run_id(),
        epsilon=float(epsilon), delta=float(delta), sampler=sampler,
        private=sampler in PRIVATE_SAMPLERS), unit_column=getattr(unit, "column", None),
        unit_max_rows=None if unit is None or unit.max_rows == AUTO else unit.max_rows)
    mechanisms: dict[str, Any] = {}
    specs: dict[str, dict[str, Any]] = {}
    # Decided under DP, unless the storage types are public; a grid declares a number, else
    # the storage kind chose numbers or text, as for the placeholder.
    typed_by = {a["name"]: UNDER_DP if a["name"] in typed else DECLARED if a["name"] in grids
                else a.get("dtype_source", DECLARED) for a in draft.schema["attributes"]}
    with reserving(book, [draft_entry]) as booking:  # charged once noise is drawn, else cancelled
        # read_table reads the columns its schema names: these, each as plain text/numbers.
        reading = load_schema({"attributes": [{"name": c, "categories": ["_"]}
                                              for c in columns]})
        missing_values = tuple(draft.schema.get("missing_values", ()))
        frame = read_table(source, reading, extra=() if unit is None else (unit.column,))
        bound, choice = 1, None  # the rows one unit contributes at most (a row: 1)
        if unit is not None:
            frame, bound, choice = _bounded_frame(frame, unit, auto_epsilon, seed, sampler, rng,
                                                  show_progress)
        (exact,) = compute(partition_reduction(frame, partition_counts, candidates,
                                               missing_values, tuple(typed),
                                               combine=merge_counts),
                           show_progress=show_progress)
        # noise drawn once per measurement, after the reduction, in the budget's order; n only
        # as n̂, every sensitivity at the unit's bound K
        rows, rows_record = (_noisy_rows(exact[ROWS], rows_epsilon, bound, sampler, rng)
                             if rows_epsilon else (None, None))
        decisions, types = (decide_types(
            {c: exact[FORM_COUNTS][c] for c in typed}, candidates, epsilon=type_epsilon,
            contributions=bound, sampler=sampler, rng=rng, rows=rows) if typed else ({}, {}))
        kinds_counted = {c: exact[c] for c in decisions if isinstance(candidates[c], Undecided)}
        for column, decision in decisions.items():  # what a column's kind is, the rest follows
            if isinstance(candidates[column], Undecided):
                candidates[column] = (None if decision.kind == TEXT else
                                      candidates[column].cells[decision.kind])
                exact[column] = exact[column][decision.kind]
        texts = [c for c in columns if candidates[c] is None]
        shares = split(texts, bound, rows)
        # Rows a search needs to find anything, at its share and K: a smaller table (by n̂) is
        # not searched (a column stored as text that turned out numeric included). A numeric
        # column's point masses take POINT_SHARE of its budget where the full search still
        # fits beside them (by n̂); a small table's search takes it all.
        numeric = [c for c in columns if isinstance(candidates[c], Cells)]
        points = {c for c in numeric if _points_fit(rows, shares[c], candidates[c], bound)}
        kept = {c: 1 - POINT_SHARE if c in points else 1.0 for c in numeric}
        search_share = {c: shares[c] * kept.get(c, 1.0) for c in columns}
        # The numeric searches and their point masses measured together (Gaussian, one zCDP
        # budget of the columns' whole shares at search_delta) where that lowers every search's
        # threshold: public facts
        rhos = joint_searches({c: shares[c] for c in numeric},
                              {c: candidates[c] for c in numeric}, search_delta, bound,
                              kept) or {}
        # and with the text columns' Gaussian rounds, where both are drafted: one zCDP budget,
        # each part's ρ times the factor the one conversion gives (public facts)
        together, gaussian = gaussian_together(
            text_plan(sum(shares[c] for c in texts), text_delta, len(texts), bound)
            if len(texts) >= 2 else None, rhos, sum(shares[c] for c in rhos), search_delta)
        rhos = {c: rho * together for c, rho in rhos.items()}
        # the point masses, before the searches whose counts they leave: a fractional point of
        # a column decided integer makes it a float (post-processing of the released points)
        found = {c: find_points(exact[VALUE_COUNTS][c], rows, epsilon=shares[c],
                                delta=points_delta, bound=bound,
                                integer=candidates[c].integer, sampler=sampler, rng=rng,
                                rho=rhos[c] * POINT_SHARE if c in rhos else None)
                 for c in numeric if c in points}
        for column, (values, _) in found.items():
            if column not in decisions:
                continue
            decisions[column] = with_points_places(decisions[column], values)
            if decisions[column].kind == "float" and candidates[column].integer:
                candidates[column] = search_cells("float", None)
                exact[column] = kinds_counted[column]["float"]
        budget = rhos  # each column's whole ρ, its point masses' part included
        rhos = {c: rho * kept[c] for c, rho in rhos.items()}  # the searches' part
        needed = {c: smallest_table(search_share[c], candidates[c], bound, rho=rhos.get(c))
                  for c in columns if isinstance(candidates[c], Cells | str)}
        # Below the full search's size, a numeric column is searched coarsely (all its share on
        # the octaves) where that finds something; below that too, not at all.
        coarse = {c for c in needed if rows < needed[c] and isinstance(candidates[c], Cells)
                  and rows >= smallest_table(search_share[c], candidates[c], bound, coarse=True,
                                             rho=rhos.get(c))}
        needed = {c: n if c not in coarse else smallest_table(search_share[c], candidates[c],
                                                              bound, coarse=True,
                                                              rho=rhos.get(c))
                  for c, n in needed.items()}
        noise = Noise(sampler, rng, bound)
        reread = partial(weighted_text_counts, frame, missing_values, show_progress)
        # each typed column's own histogram counts its missing values too (one more cell, or a
        # text column's public level "missing"), for its nullability beside the type step's
        missing = {c: int(exact[FORM_COUNTS][c][FORMS.index("missing")]) for c in typed}
        text = draft_texts({c: exact[c] for c in texts}, rows, sum(shares[c] for c in texts),
                           text_delta, rows_scale=rows_record["scale"], sampler=sampler,
                           rng=rng, bound=bound, weighted=reread,
                           missing={c: missing[c] for c in texts if c in missing},
                           together=together) if texts else TextDraft()
        for column in columns:
            counts, grid, share = exact[column], candidates[column], shares[column]
            if column in needed and rows < needed[column]:
                mechanisms[column] = {"mechanism": "none (not searched)", "epsilon": share,
                                      "rows_needed": needed[column], "noisy_rows": rows}
                draft.notes.append(
                    f"{column}: not searched: this table holds about {rows:,.0f} rows (the "
                    f"noisy n̂), and at ε = {share:.3g} a range is found only in a table of at "
                    f"least {needed[column]:,.0f}; its share of dp_epsilon= is spent (n̂ was "
                    "drawn). Give its public range (ranges=), more dp_epsilon= or fewer "
                    "dp_columns=")
            elif column in text.identifiers:
                add_identifier(draft, column, kinds[column], request.ids, "its noisy count of "
                               f"distinct values is above {ID_DISTINCT:g} x the noisy rows n̂")
            else:
                if grid is None:
                    stored, order = text_types.get(column, (None, None))
                    spec, mechanisms[column], note = release_text(column, text, stored, order,
                                                                  typed_by[column])
                elif isinstance(grid, Cells):  # point masses first, then the rest searched
                    spec, mechanisms[column], note = release_searched(
                        column, counts, exact[VALUE_COUNTS][column], grid, noise, rows=rows,
                        rows_scale=rows_record["scale"], epsilon=share,
                        search_epsilon=search_share[column], delta=points_delta, bins=bins,
                        coarse=column in coarse, found=found.get(column),
                        points=column in points, missing=missing.get(column),
                        rho=rhos.get(column))
                elif isinstance(grid, str):
                    spec, mechanisms[column], note = release_years(
                        column, counts, noise, epsilon=share, missing=missing.get(column))
                else:
                    spec, mechanisms[column], note = release_quantiles(
                        column, counts, grid, grids[column], noise, epsilon=share, bins=bins)
                draft.notes.append(note)
                if spec is not None:
                    specs[column] = spec
    # nullable by the type step's and its own noisy counts of missing values, before any spec
    decisions = decide_nulls(decisions, mechanisms, types)
    for column in [c for c in specs if candidates[c] is not None]:  # numbers and times
        dtype = dtypes[column]
        if column in decisions and decisions[column].kind != TIMESTAMP:
            # int64 only where the bins hold integers
            grid = candidates[column]
            integral = not isinstance(grid, np.ndarray) or np.array_equal(grid, np.round(grid))
            dtype = decisions[column].dtype if integral else NUMBER_TYPES["float"]
        output = {"dtype_source": typed_by[column], **({"dtype": dtype} if dtype else {})}
        if column in decisions and dtype == NUMBER_TYPES["float"] and \
                decisions[column].decimals is not None:  # the decimal places found
            output["decimals"] = decisions[column].decimals
        if from_pandas and column in decisions and dtype == NUMBER_TYPES["integer"] and \
                decisions[column].nullable:
            # decided integer and nullable, both under DP, from a pandas writer: released as
            # pandas holds such a column, float64 of whole values (never its storage dtype)
            output |= {"dtype": NUMBER_TYPES["float"], "decimals": 0}
        found = specs[column]
        if "decimals" in output:  # the decimal places found decide, not the points' lattice
            found.pop("lattice", None)
        if isinstance(candidates[column], np.ndarray):
            specs[column] = {**found, **output}
        elif isinstance(candidates[column], Cells):
            specs[column] = with_missing_bin({"name": column, "type": "numeric", **found,
                                               **output})
        else:  # calendar features, the year closed by the years found
            features = calendar_features(column, found.pop("edges"), dtypes[column])
            specs[column] = [{**f, **(found if f["unit"] == "year" else {}),
                              "dtype_source": typed_by[column]} for f in features]
    for column in [c for c in specs if c in decisions and not decisions[c].nullable]:
        # a timestamp's calendar features: none has a missing bin, so none decodes a null
        specs[column] = ([never_null(f) for f in specs[column]]
                         if isinstance(specs[column], list) else never_null(specs[column]))
    by_need = split_record(columns, texts, times, delta=text_delta, bound=bound)
    draft.notes.append(split_note(shares, by_need["kinds"]))
    if decisions:
        draft.notes.append(
            "types decided under DP (ε " + f"{type_epsilon:.3g}): " + "; ".join(
                f"{c} {'text' if d.kind == TEXT else d.dtype}"
                + ("" if d.nullable else ", never null")
                + (f" (stored as text: its values that are no number, about {d.words:,} by "
                   "their noisy count, count as missing"
                   + ("" if d.nullable else ", in its middle bin as it has no missing one")
                   + ")" if d.from_text else "") for c, d in decisions.items()))
    # a search that found nothing leaves its placeholder, of the kind decided under DP (a
    # timestamp's, its years to give, is the public draft's)
    for column in [c for c, d in decisions.items()
                   if d.kind not in (TEXT, TIMESTAMP) and c not in specs]:
        specs[column], draft.todo[column] = placeholder(column, decisions[column].kind)
        specs[column]["dtype_source"] = typed_by[column]
    draft.schema["attributes"] = [
        spec for a in draft.schema["attributes"] if a["name"] not in text.identifiers
        for spec in (specs[a["name"]] if isinstance(specs.get(a["name"]), list)
                     else [specs.get(a["name"], a)])]
    for column in [*specs, *text.identifiers]:
        if TODO not in specs.get(column, {}):
            draft.todo.pop(column)
    bounded = None if unit is None else PrivacyUnit(unit.column, bound)
    if bounded is not None:  # a release of this unit takes it by default, at the K drafted
        draft.schema["privacy_unit"] = bounded.to_json()
    # the shares spent before the columns', in the budget's order
    first = [*(["n̂ counted with split.rows"] if rows_epsilon else []),
             *([f"the types of {len(typed)} column(s) decided with split.types (\"types\")"]
               if typed else []),
             *(["K chosen with split.max_rows"] if choice else [])]
    draft.schema["drafted_under_dp"] = {
        "epsilon": float(epsilon), "delta": float(delta), "columns": columns,
        "neighbouring": draft_neighbouring(bounded), "notions": list(NOTIONS),
        "privacy_unit": {**unit_record(bounded, seed is not None, "their values' texts"),
                         **({"auto": choice} if choice else {})},
        "composition": "basic: " + ", ".join([*first, ("the rest" if first else "ε")
                                               + f" split over {len(columns)} column(s) as "
                                               "split.epsilon"])
                       + f"; δ {text_delta:.3g} to the {len(texts)} text column(s), spent by "
                       "their one mechanism (\"text\"), and "
                       f"{points_delta:.3g} to each of the {len(searched)} column(s) that may be "
                       f"searched for point masses; a searched numeric column's ε: {POINT_SHARE:g} "
                       "for its point masses (found after its type is decided), the rest halved "
                       "over its two search steps (mechanisms[column].steps; one step where it "
                       "was searched coarsely, mechanisms[column].coarse)"
                       + (f"; δ {search_delta:.3g} to the numeric searches" if search_delta
                          else "") + (", measured together: their point masses and steps "
                                      "Gaussian, one zCDP budget of their ε converted once "
                                      "(\"searches\")" if rhos else "")
                       + ("; the text columns' Gaussian rounds and the numeric searches in one "
                          "zCDP budget, their ε summed and converted once, each part's ρ "
                          f"{together:.3g} times its own (\"gaussian\")" if gaussian else ""),
        "searches": searches_record(budget, shares, search_delta, numeric, together),
        **({"gaussian": gaussian} if gaussian else {}),
        "split": {"order": ["rows", "types", "max_rows", "epsilon"], "rows": rows_epsilon,
                  "types": type_epsilon, "max_rows": auto_epsilon, "epsilon": shares, "rule": (
            f"in this order, each a share of ε: {ROWS_SHARE:g} to count the rows (n̂) where a "
            f"column reads them (all but a public grid's), {TYPE_SHARE:g} to decide the types "
            f"unless they are public, {auto_share:g} to choose K \"auto\"; the rest over the "
            "columns in proportion to their needs (\"by_need\"), from the columns' kinds: "
            "decided under DP (\"types\") or public"),
                  "by_need": by_need},
        **({"rows": rows_record} if rows_record else {}),
        "types": types or {"source": PUBLIC_STORAGE,
                           "rule": "the storage types, declared public (--public-types)"},
        "mechanisms": mechanisms, **({"text": text.record} if texts else {}),
        "noise_sampler": sampler,
        "differentially_private": sampler in PRIVATE_SAMPLERS,
        "ledger": None if not booking.entries else {
            "path": str(book.path), "dataset_name": booking.entries[0].dataset_name,
            "run_id": booking.entries[0].run_id},
    }
