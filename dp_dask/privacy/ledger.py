"""The privacy ledger: every fit's spending, per dataset, in a database, checked against a budget.

Each fit draws fresh noise, so each fit spends budget again. The ledger records every fit
(dataset, run id, UTC time, ε, δ, mechanism, accountant, ρ, privacy notion, model path, and
whether it was a non-private test run), and before any data is read it checks, in the same
transaction that records the fit (so two concurrent fits cannot both pass), that the dataset's
composed total stays within its budget. The database is a SQLite file on the driver, or a
PostgreSQL database that one team's jobs on many machines share (dp_dask.privacy.ledger_store:
how each makes the check atomic).

A dataset is named by the user (``--dataset-name``, the job config's ``ledger.dataset_name``,
``dataset_name=``; else the input file's stem, with a warning) and its entries also carry the
schema's sha256; ``dataset_id`` joins the two. Budgets and totals are per dataset *name*: releases
of one name under different schemas are summed, as they usually describe the same people.

A budget bounds what any single row can lose: the total checked against it (and shown as the
dataset's total) counts every entry as a bound on one row, a privacy unit's release with K = 1
or K "auto" at 4ρ (2ε if pure), one with K >= 2 and a row-level one at their own charge; a
unit's own total (its releases only, at their own charge) is reported beside it
(:func:`budget_totals`, the one place of that rule).

A schema drafted under DP (``dp-dask schema draft --dp-epsilon``) is an entry of the same
dataset name too (mechanism ``schema-draft``), summed like a Laplace release.

Composition (see :func:`compose`): Gaussian releases add their ρ (zCDP) and convert once;
Laplace releases (pure or advanced composition) add ε and δ (basic composition); a mix adds the
two parts. Test runs (seeded noise) and entries under other notions (e.g. "dependent-DP") are
listed but never summed into the DP total; dp_dask.stats counts a Tabular-DDP release at its
plain-DP ε too, as a DP entry of its own (run id ``<run id>-dp``), so that the budget bounds it.

An entry is ``reserved`` from the budget check until its fit has drawn its noise (``spent``). A
fit that fails before its first noise draw drops its entry; one that fails after keeps it
(``failed``, counted: see :func:`charging`). A fit killed in between leaves it *unfinished*:
counted in the total (its noise may have been drawn), listed as UNFINISHED, and taken over by a
retry with the same run id once the killed process is gone (see :meth:`Ledger.reserve`).
``export``/``import_`` move a ledger between SQLite and PostgreSQL, ids and run ids kept.

Where: ``Ledger(location)`` (a path, ``sqlite:///PATH`` or ``postgresql://user@host:port/db``),
else ``$DP_DASK_LEDGER``, else ``$XDG_CONFIG_HOME/dp_dask/ledger.sqlite``
(``~/.config/dp_dask/ledger.sqlite``). It holds no data values: names, parameters and paths only.

Size: the Ledger's transactions, the composition they check and the report all read
:class:`Entry` and :class:`Total`; the SQL of each store is in dp_dask.privacy.ledger_store.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import os
import uuid
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dp_dask.data.io import filesystem, join, remote
from dp_dask.exceptions import DpDaskWarning
from dp_dask.privacy import BASIC_COMPOSITION, epsilon_spent
from dp_dask.privacy.ledger_store import FORMAT as _FORMAT
from dp_dask.privacy.ledger_store import Store, StoreError, budgets, database_url, releases
from dp_dask.privacy.noise import DrawWatch, watch_draws
from dp_dask.privacy.record import Cost

LEDGER_ENV = "DP_DASK_LEDGER"
APPROX_DP = "approx-DP"  # the only notion summed into a DP total
DEPENDENT_DP = "dependent-DP"  # Tabular-DDP (dp_dask.stats): listed, never summed
RESERVED, SPENT = "reserved", "spent"
FAILED = "failed"  # spent: its noise was drawn, then its work failed; counted, nothing released
UNFINISHED = "UNFINISHED (reserved)"  # how `ledger list` shows a reserved entry
DRAFT_MECHANISM = "schema-draft"  # a schema's categories/bins drafted under DP
IN_MEMORY = "in-memory"  # dataset name of an unnamed in-memory frame: all such fits sum together
_RELATIVE_SLACK = 1e-9  # float rounding allowed when comparing a total with its budget

class LedgerError(RuntimeError):
    """The ledger refuses a fit (a failed earlier run of the same id, a clash of settings)."""


class BudgetExceededError(LedgerError):
    """The fit would take the dataset's composed total past its budget."""


def default_ledger_path() -> Path | str:
    """``$DP_DASK_LEDGER`` (a path or a database URL), else the per-user config directory
    (XDG_CONFIG_HOME honoured)."""
    if os.environ.get(LEDGER_ENV):
        value = os.environ[LEDGER_ENV]
        return value if database_url(value) is not None else Path(value).expanduser()
    config = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(config) / "dp_dask" / "ledger.sqlite"


def dataset_name_for(source: Any, name: str | None = None) -> str:
    """The declared name, else a file's or directory's stem (with a :class:`DpDaskWarning`),
    else :data:`IN_MEMORY` for a frame.

    A budget belongs to the people in the data, not to a file: the same people read from
    another file (a copy, an export in another format, a new extract) would get a budget of
    their own under its stem, so the fallback warns, naming it and how to declare the name."""
    if name is not None:
        if not str(name).strip():
            raise ValueError("the dataset name must not be empty")
        return str(name).strip()
    if not isinstance(source, str | Path):
        return IN_MEMORY
    path = Path(source)
    stem = path.name or path.resolve().name
    stem = next((stem[: -len(suffix)] for suffix in (".csv.gz", ".csv", ".parquet", ".pq")
                 if stem.lower().endswith(suffix) and len(stem) > len(suffix)), stem)
    warnings.warn(f"no dataset name declared: the ledger counts this release under the input "
                  f"file's stem {stem!r}, so the same people read from another file would get "
                  "a budget of their own; declare the name their budget belongs to with "
                  "--dataset-name NAME (job config: ledger.dataset_name; Python: "
                  "dataset_name=...)", DpDaskWarning, stacklevel=2)
    return stem


def new_run_id() -> str:
    return uuid.uuid4().hex[:16]


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Entry:
    """One fit: what it spent, on which dataset, and where its model went."""

    dataset_name: str
    schema_sha256: str
    run_id: str
    epsilon: float
    delta: float  # the release's total δ (0 for a pure-DP Laplace release)
    mechanism: str
    accountant: str
    rho: float | None  # zCDP ρ of a Gaussian release; None otherwise
    private: bool  # False: seeded test noise, recorded but never counted as DP spending
    sampler: str
    notion: str = APPROX_DP
    created: str = ""
    status: str = RESERVED
    forced: bool = False
    model_path: str | None = None
    release_path: str | None = None
    id: int | None = None
    unit_column: str | None = None  # the privacy unit (dp_dask.data.units); None: a row
    unit_max_rows: int | None = None  # its bound on rows per unit

    @property
    def unit(self) -> str:
        """The privacy unit in words: "row", or "'column' <= K rows" (K "auto": chosen under
        DP, recorded in the release)."""
        return ("row" if self.unit_column is None
                else f"{self.unit_column!r} <= {self.unit_max_rows or 'auto'} rows")

    @classmethod
    def for_cost(cls, cost: Cost, *, dataset_name: str, schema_sha256: str, run_id: str,
                 sampler: str, private: bool, unit_column: str | None = None,
                 unit_max_rows: int | None = None) -> Entry:
        """The entry of a release that spends ``cost`` under replace-one-row neighbours (the
        value its privacy record holds: dp_dask.privacy.record), of privacy unit
        ``unit_column`` (None: a row) with at most ``unit_max_rows`` rows."""
        return cls(dataset_name, schema_sha256, run_id, cost.epsilon, cost.delta,
                   cost.mechanism, cost.accountant,
                   cost.rho if cost.mechanism == "gaussian" else None, private, sampler,
                   unit_column=unit_column, unit_max_rows=unit_max_rows)

    @classmethod
    def for_draft(cls, *, dataset_name: str, request_sha256: str, run_id: str, epsilon: float,
                  delta: float, sampler: str, private: bool) -> Entry:
        """The entry of a schema drafted under DP (dp_dask.data.draft): thresholded counts and
        noisy-max quantiles, pure ε plus the thresholds' δ, added by basic composition. The
        schema does not exist before the draft, so ``request_sha256`` names the request (input
        columns and DP options); the drafted schema records this entry's run id."""
        return cls(dataset_name, request_sha256, run_id, epsilon, delta, DRAFT_MECHANISM,
                   BASIC_COMPOSITION, None, private, sampler)

    @property
    def dataset_id(self) -> str:
        return f"{self.dataset_name}@sha256:{self.schema_sha256[:12]}"

    @property
    def counted(self) -> bool:
        """Whether this entry is part of the dataset's DP total."""
        return self.private and self.notion == APPROX_DP

    def model_exists(self, storage_options: dict[str, Any] | None = None) -> bool:
        """Whether the entry's saved model is there (in a store: read with
        ``storage_options``); a store that cannot be reached counts as no model."""
        if self.model_path is None:
            return False
        if not remote(self.model_path):
            return (Path(self.model_path) / "model.json").exists()
        try:
            fs, path = filesystem(join(self.model_path, "model.json"), storage_options)
            return bool(fs.exists(path))
        except Exception:  # unreachable endpoint, refused credentials: fit as if none
            return False

    @property
    def kind(self) -> str:
        if not self.private:
            return "TEST (not DP)"
        return "DP" if self.notion == APPROX_DP else f"{self.notion} (not summed)"


@dataclass(frozen=True)
class Budget:
    dataset_name: str
    epsilon: float
    delta: float
    updated: str = ""


@dataclass(frozen=True)
class Total:
    """The composed spending of some entries at one δ (see :func:`composed`)."""

    epsilon: float  # inf when the entries' pure δ alone reaches δ
    delta: float
    rho: float  # Σρ of the Gaussian releases
    pure_epsilon: float  # Σε of the other (Laplace) releases
    pure_delta: float  # Σδ of the other releases
    releases: int  # entries summed
    test_runs: int  # seeded-noise entries, not summed
    other_notions: int  # entries under notions that are never summed (e.g. dependent-DP)
    unfinished: int = 0  # summed entries still reserved: counted, as their noise may be drawn


def composed(entries: Iterable[Entry], delta: float) -> Total:
    """The total spending of ``entries`` at total ``delta``, with its parts.

    Gaussian releases add exactly: ρ = Σρ_i, converted by the exact Gaussian curve when every
    one was charged by it, else by the zCDP conversion (an exact charge is a valid zCDP ρ too).
    Other releases add by basic composition: ε = Σε_i, δ = Σδ_i. A mix spends
    ``delta - Σδ_i`` on converting Σρ, and the two ε add.
    """
    entries = list(entries)
    counted = [e for e in entries if e.counted]
    gaussian = [e for e in counted if e.rho is not None]
    pure = [e for e in counted if e.rho is None]
    rho = math.fsum(e.rho for e in gaussian if e.rho is not None)
    pure_epsilon = math.fsum(e.epsilon for e in pure)
    pure_delta = math.fsum(e.delta for e in pure)
    if gaussian:
        remaining = delta - pure_delta
        accountant = "exact" if all(e.accountant == "exact" for e in gaussian) else "zcdp"
        epsilon = (epsilon_spent(rho, remaining, accountant) + pure_epsilon if remaining > 0
                   else math.inf)
    else:
        epsilon = pure_epsilon if pure_delta <= delta * (1 + _RELATIVE_SLACK) else math.inf
    return Total(epsilon, delta, rho, pure_epsilon, pure_delta, len(counted),
                 sum(not e.private for e in entries),
                 sum(e.private and e.notion != APPROX_DP for e in entries),
                 sum(e.status == RESERVED for e in counted))


def compose(entries: Iterable[Entry], delta: float) -> float:
    """Total ε of the DP entries at total δ = ``delta`` (inf if δ cannot be met)."""
    return composed(entries, delta).epsilon


@dataclass(frozen=True)
class Reservation:
    """The ledger's answer to a fit: a new entry to fill in, or an earlier one to reuse."""

    entry: Entry
    reused: bool


class Ledger:
    """The privacy ledger at ``location``: a SQLite file (a path or ``sqlite:///PATH``) or a
    PostgreSQL database (``postgresql://user@host:port/db``); default :func:`default_ledger_path`.
    ``path`` is the file, or the URL with any password hidden."""

    def __init__(self, location: str | Path | None = None) -> None:
        self._store = Store(location if location is not None else default_ledger_path())
        self.path: str | Path = self._store.location

    def __repr__(self) -> str:
        return f"Ledger({str(self.path)!r})"

    @contextlib.contextmanager
    def _transaction(self, *dataset_names: str) -> Iterator[Connection]:
        try:
            with self._store.transaction(*dataset_names) as connection:
                yield connection
        except StoreError as exc:
            raise LedgerError(str(exc)) from exc

    @contextlib.contextmanager
    def _reading(self) -> Iterator[Connection | None]:
        if not self._store.exists():
            yield None
            return
        try:
            with self._store.reading() as connection:
                yield connection
        except StoreError as exc:
            raise LedgerError(str(exc)) from exc

    def check(self) -> None:
        """Open the ledger now (connect, make its tables): a bad URL or an unreachable server
        fails here, before a job reads any data."""
        try:
            self._store.check()
        except StoreError as exc:
            raise LedgerError(f"{exc} (the ledger is checked before any data is read)") from exc

    # --- budgets -----------------------------------------------------------------------------

    def set_budget(self, dataset_name: str, epsilon: float, delta: float) -> Budget:
        """Store (replace) the total (ε, δ) that fits of ``dataset_name`` may compose to."""
        if not (math.isfinite(epsilon) and epsilon > 0):
            raise ValueError(f"the budget's epsilon must be a finite number > 0, got {epsilon!r}")
        if not 0 < delta < 1:
            raise ValueError(f"the budget's delta must lie in (0, 1), got {delta!r}")
        budget = Budget(dataset_name_for(None, dataset_name), float(epsilon), float(delta),
                        _now())
        with self._transaction(budget.dataset_name) as connection:
            connection.execute(budgets.delete().where(
                budgets.c.dataset_name == budget.dataset_name))
            connection.execute(budgets.insert().values(**asdict(budget)))
        return budget

    def budget(self, dataset_name: str) -> Budget | None:
        with self._reading() as connection:
            return None if connection is None else _budget(connection, dataset_name)

    # --- entries -----------------------------------------------------------------------------

    def entries(self, dataset_name: str | None = None) -> list[Entry]:
        """All entries (of one dataset name), oldest first."""
        with self._reading() as connection:
            if connection is None:
                return []
            return _entries(connection, dataset_name)

    def datasets(self) -> list[str]:
        """Names with entries or a budget, sorted."""
        with self._reading() as connection:
            if connection is None:
                return []
            names = sa.union(sa.select(releases.c.dataset_name),
                             sa.select(budgets.c.dataset_name))
            return sorted(connection.execute(names).scalars())

    def total(self, dataset_name: str, delta: float | None = None) -> Total:
        """The dataset's composed total at ``delta``, what its budget bounds (one row's:
        :func:`budget_totals`); by default at its budget's δ, else at the δ its entries add up
        to (Σδ of the Laplace releases + the largest Gaussian δ)."""
        entries = self.entries(dataset_name)
        if delta is None:
            budget = self.budget(dataset_name)
            counted = [e for e in entries if e.counted]
            delta = budget.delta if budget else (
                math.fsum(e.delta for e in counted if e.rho is None)
                + max((e.delta for e in counted if e.rho is not None), default=0.0))
        return budget_totals(entries, delta)[0]

    def reserve(self, request: Entry, *, budget_epsilon: float | None = None,
                force: bool = False,
                storage_options: dict[str, Any] | None = None) -> Reservation:
        """Check and record a fit in one transaction, before it reads any data.

        If ``(dataset, schema, run id)`` is already recorded and its model exists, that entry is
        returned to be reused (nothing is recorded); a request whose ε, δ, mechanism,
        accountant, ρ, notion or sampler differ from the recorded ones is refused. If it is
        recorded ``reserved`` (unfinished: its fit never marked it spent) and no process holds
        it any more (the fit was killed), this fit takes it over: the entry, already counted, is
        returned to be fitted and spent (sound because callers write nothing before
        :meth:`mark_spent`). If a live process still holds it, or it is spent without a model,
        or the new entry would take the dataset past its budget (the stored one, and
        ``budget_epsilon`` at the stored δ or else the request's δ), :class:`LedgerError` /
        :class:`BudgetExceededError` is raised, unless ``force``.
        Test runs are never refused for budget. The new entry is ``reserved`` until
        :meth:`mark_spent` or :meth:`cancel`.
        """
        with self._transaction(request.dataset_name) as connection:
            prior = _run(connection, request)
            if prior is not None and not force:
                if prior.model_exists(storage_options):
                    _check_same_settings(prior, request)
                    return Reservation(prior, reused=True)
                if prior.status == RESERVED:
                    _check_same_settings(prior, request)
                    if self._store.hold(connection, prior.id or 0):
                        return Reservation(prior, reused=False)
                    raise LedgerError(
                        f"run {request.run_id!r} of dataset {request.dataset_id} is in progress: "
                        f"its entry {prior.id} in the ledger ({self.path}) is held by a fit "
                        "still running. Nothing was read. Retry once that process has ended "
                        "(a retry then takes the entry over)")
                raise LedgerError(
                    f"run {request.run_id!r} of dataset {request.dataset_id} is already in the "
                    f"ledger ({self.path}, entry {prior.id}, {prior.status}, {prior.created}) "
                    f"but its model is not at {prior.model_path or '(not saved)'}; its noise "
                    "may have been drawn. Nothing was read. Pass --force (force=True) to fit "
                    "again, which records and spends again")
            if request.counted and not force:
                _check_budget(connection, request, budget_epsilon)
            entry = replace(request, created=_now(), status=RESERVED, forced=force, id=None)
            values = {k: v for k, v in asdict(entry).items() if k != "id"}
            entry_id = connection.execute(releases.insert().values(**values)
                                          ).inserted_primary_key[0]
            self._store.hold(connection, entry_id)  # a new id: nobody else holds it
            return Reservation(replace(entry, id=entry_id), reused=False)

    def _update(self, entry_id: int, **values: Any) -> None:
        with self._transaction() as connection:
            connection.execute(releases.update().where(releases.c.id == entry_id)
                               .values(**values))

    def mark_spent(self, entry_id: int, *, failed: bool = False,
                   epsilon: float | None = None) -> None:
        """The fit drew its noise and built its model (``failed``: drew its noise, then
        failed; still counted). ``epsilon``: the charge where it is known only now, kept only
        if below the reserved one (which the budget check used)."""
        values: dict[str, Any] = {"status": FAILED if failed else SPENT}
        if epsilon is not None:
            values["epsilon"] = sa.case((releases.c.epsilon > epsilon, float(epsilon)),
                                        else_=releases.c.epsilon)
        self._update(entry_id, **values)
        self._store.release(entry_id)

    def cancel(self, entry_id: int) -> None:
        """The fit failed before drawing any noise: drop its reservation."""
        with self._transaction() as connection:
            connection.execute(releases.delete().where(releases.c.id == entry_id,
                                                       releases.c.status == RESERVED))
        self._store.release(entry_id)

    def set_paths(self, entry_id: int, *, model_path: str | Path | None = None,
                  release_path: str | Path | None = None) -> None:
        """Record where the entry's model (used to reuse it on a retry) or release went: a
        local path made absolute (a release's link kept, not the version it names), an
        object-store URL as it is."""
        paths = {column: str(value) if remote(value) else os.path.abspath(value)
                 for column, value in
                 (("model_path", model_path), ("release_path", release_path))
                 if value is not None}
        if paths:
            self._update(entry_id, **paths)

    def record(self, entry: Entry) -> Entry:
        """Record an entry as spent without a budget check (e.g. a release of another notion)."""
        reservation = self.reserve(replace(entry, run_id=entry.run_id or new_run_id()),
                                   force=True)
        self.mark_spent(reservation.entry.id or 0)
        return replace(reservation.entry, status=SPENT)

    # --- migration ---------------------------------------------------------------------------

    def export(self) -> dict[str, Any]:
        """Every entry and budget, ids and run ids included, as JSON-ready data."""
        with self._reading() as connection:
            found = [] if connection is None else connection.execute(
                sa.select(budgets).order_by(budgets.c.dataset_name)).mappings().all()
        return {"dp_dask_ledger": _FORMAT, "entries": [asdict(e) for e in self.entries()],
                "budgets": [dict(b) for b in found]}

    def import_(self, document: Mapping[str, Any]) -> dict[str, int]:
        """Add an :meth:`export`'s entries and budgets, keeping their ids. Rows already here
        unchanged are skipped (importing twice adds nothing); if any row differs from the one
        here under its id (an entry) or name (a budget), nothing is imported. Meant for
        moving a ledger while no fit runs: an imported ``reserved`` entry is unfinished here."""
        if not isinstance(document, Mapping) or document.get("dp_dask_ledger") != _FORMAT:
            raise LedgerError(f"not a dp_dask ledger export of format {_FORMAT}")
        try:
            entries = [Entry(**row) for row in document.get("entries", [])]
            found_budgets = [Budget(**row) for row in document.get("budgets", [])]
        except TypeError as exc:
            raise LedgerError(f"not a dp_dask ledger export: {exc}") from exc
        if any(e.id is None for e in entries):
            raise LedgerError("not a dp_dask ledger export: an entry has no id")
        names = {e.dataset_name for e in entries} | {b.dataset_name for b in found_budgets}
        rows = [*((e, releases, e.id, _entry_by_id, "entries") for e in entries),
                *((b, budgets, b.dataset_name, _budget, "budgets") for b in found_budgets)]
        added = {"entries": 0, "budgets": 0, "unchanged": 0}
        conflicts = []
        with self._transaction(*names) as connection:
            for row, table, key, find, kind in rows:  # keyed by id (entries), name (budgets)
                here = find(connection, key)
                if here is None:
                    connection.execute(table.insert().values(**asdict(row)))
                    added[kind] += 1
                elif here == row:
                    added["unchanged"] += 1
                else:
                    conflicts.append(f"{kind[:-1]} {key!r}: here {here}, imported {row}")
            if conflicts:
                raise LedgerError(f"{len(conflicts)} imported row(s) differ from the ledger's "
                                  f"({self.path}); nothing was imported. First: {conflicts[0]}")
            self._store.fix_ids(connection)
        return added


class Charge:
    """The reservations of one release while its work runs (see :func:`charging`)."""

    def __init__(self, watch: DrawWatch) -> None:
        self._watch = watch
        self.epsilon: dict[int, float] = {}  # charges known only once the work has run

    @property
    def noise_drawn(self) -> bool:
        return self._watch.drawn

    def settle(self, entry: Entry, epsilon: float) -> None:
        """``entry``'s charge, where known only now: recorded if below the reserved one."""
        self.epsilon[entry.id or 0] = epsilon


@contextlib.contextmanager
def charging(ledger: Ledger | None, entries: Sequence[Entry]) -> Iterator[Charge]:
    """The reserved ``entries`` of one release while its work (counting, noise, the model) runs
    in the block: spent when it ends. If it fails (any exception, Ctrl-C included) before any
    noise is drawn (every sampler reports its draws: dp_dask.privacy.noise.watch_draws), the
    entries are cancelled; after, they stay, ``failed`` and counted, as the noise exists (it
    may sit on objects and in messages)."""
    with watch_draws() as watch:
        charge = Charge(watch)
        try:
            yield charge
        except BaseException:
            for entry in entries:
                if charge.noise_drawn:
                    ledger.mark_spent(entry.id or 0, failed=True,
                                      epsilon=charge.epsilon.get(entry.id or 0))
                else:
                    ledger.cancel(entry.id or 0)
            raise
    for entry in entries:
        ledger.mark_spent(entry.id or 0, epsilon=charge.epsilon.get(entry.id or 0))


@dataclass(frozen=True)
class Booking:
    """One release's place in the ledger while its work runs (see :func:`reserving`):
    ``entries`` reserved (none without a ledger); ``reused``: an earlier run of the same
    request whose model exists, to be loaded (nothing is charged); ``charge``: the running
    charge (None when reused)."""

    entries: list[Entry]
    reused: bool
    charge: Charge | None


@contextlib.contextmanager
def reserving(ledger: Ledger | None, requests: Sequence[Entry], *,
              budget_epsilon: float | None = None, force: bool = False,
              storage_options: dict[str, Any] | None = None) -> Iterator[Booking]:
    """The one way a release (a fit, a schema draft, dp-dask stats) uses the ledger: its
    ``requests`` reserved together before any data is read (:meth:`Ledger.reserve`; a refusal
    cancels those reserved before it), then the block's work charged to them
    (:func:`charging`: cancelled on a failure before the first noise draw, spent after). Where
    the ledger reuses an earlier run (its model exists), the block loads it: nothing is
    charged again."""
    reservations: list[Reservation] = []
    if ledger is not None:
        try:
            for request in requests:
                reservations.append(ledger.reserve(request, budget_epsilon=budget_epsilon,
                                                   force=force, storage_options=storage_options))
        except BaseException:
            for reservation in reservations:  # this release's own, never a reused run's
                if not reservation.reused:
                    ledger.cancel(reservation.entry.id or 0)
            raise
    entries = [reservation.entry for reservation in reservations]
    if any(reservation.reused for reservation in reservations):
        yield Booking(entries, True, None)
        return
    with charging(ledger, entries) as charge:
        yield Booking(entries, False, charge)


def _entries(connection: Connection, dataset_name: str | None) -> list[Entry]:
    query = sa.select(releases).order_by(releases.c.id)
    if dataset_name is not None:
        query = query.where(releases.c.dataset_name == dataset_name)
    return [Entry(**row) for row in connection.execute(query).mappings()]


def _entry_by_id(connection: Connection, entry_id: int) -> Entry | None:
    row = connection.execute(sa.select(releases).where(releases.c.id == entry_id)
                             ).mappings().first()
    return None if row is None else Entry(**row)


def _budget(connection: Connection, dataset_name: str) -> Budget | None:
    row = connection.execute(sa.select(budgets).where(budgets.c.dataset_name == dataset_name)
                             ).mappings().first()
    return None if row is None else Budget(**row)


def _run(connection: Connection, request: Entry) -> Entry | None:
    row = connection.execute(
        sa.select(releases).where(releases.c.dataset_name == request.dataset_name,
                                  releases.c.schema_sha256 == request.schema_sha256,
                                  releases.c.run_id == request.run_id)
        .order_by(releases.c.id.desc()).limit(1)).mappings().first()
    return None if row is None else Entry(**row)


def _check_same_settings(prior: Entry, request: Entry) -> None:
    """A retry reuses or takes over ``prior`` only for the same charge: any field the ledger
    composes or labels by (dataset, schema and run id are the lookup's key)."""
    keys = ("epsilon", "delta", "mechanism", "accountant", "rho", "notion", "private", "sampler",
            "unit_column", "unit_max_rows")
    differ = [k for k in keys if getattr(prior, k) != getattr(request, k)]
    if differ:
        was = ", ".join(f"{k}={getattr(prior, k)!r}" for k in differ)
        now = ", ".join(f"{k}={getattr(request, k)!r}" for k in differ)
        raise LedgerError(f"run {request.run_id!r} of dataset {request.dataset_id} was recorded "
                          f"with {was}, not {now}: use a new run id for new settings")


def _check_budget(connection: Connection, request: Entry,
                  budget_epsilon: float | None) -> None:
    stored = _budget(connection, request.dataset_name)
    limits = []
    if stored is not None:
        limits.append((stored.epsilon, stored.delta, "its stored budget"))
    if budget_epsilon is not None:
        limits.append((float(budget_epsilon), stored.delta if stored else request.delta,
                       "--budget-epsilon"))
    if not limits:
        return
    entries = _entries(connection, request.dataset_name)
    for epsilon, delta, source in limits:
        before, _ = budget_totals(entries, delta)
        after, unit = budget_totals([*entries, request], delta, request.unit_column)
        if after.epsilon > epsilon * (1 + _RELATIVE_SLACK):
            counted_up = after.epsilon != composed([*entries, request], delta).epsilon
            raise BudgetExceededError(
                f"dataset {request.dataset_name!r} has a budget of ε={epsilon:g} at "
                f"δ={delta:.3g} ({source}), which bounds what one row can lose; its "
                f"{before.releases} recorded DP release(s) compose to ε={before.epsilon:.6g}, "
                f"and this release (ε={request.epsilon:g}, δ={request.delta:.3g}, "
                f"{request.mechanism}"
                + ("" if unit is None else f", unit {request.unit}")
                + f") would bring the total to ε={after.epsilon:.6g}"
                + (f" ({ROW_RULE})" if counted_up else "")
                + ("" if unit is None else
                   f"; unit {request.unit_column!r} alone (its {unit.releases} DP release(s) "
                   "with this one, at their own charge; row-level and other units' releases "
                   f"not counted) would total ε={unit.epsilon:.6g}")
                + ". Refused before reading any data or drawing any noise. Raise the budget "
                "with 'dp-dask ledger set-budget', or pass --force (force=True) to release "
                "anyway (it is recorded)")


def _number(value: float | None, spec: str = ".4g") -> str:
    return "-" if value is None else format(value, spec)


def _plain_dp_counted(entries: list[Entry]) -> str:
    """Of the entries under other notions, which are counted at their plain-DP ε by a DP entry
    of run id ``<run id>-dp`` (dp_dask.stats' Tabular-DDP)."""
    others = [e for e in entries if e.private and e.notion != APPROX_DP]
    counted = {(e.schema_sha256, e.run_id) for e in entries if e.counted}
    plain = [e for e in others if (e.schema_sha256, f"{e.run_id}-dp") in counted]
    return (f" (ε={math.fsum(e.epsilon for e in others):.6g} under their notions; {len(plain)} "
            "counted above at their plain-DP ε, as DP entries '<run id>-dp')")


# How budget_totals counts a unit release for one row, in words (messages, `ledger list`).
ROW_RULE = ("a unit release with K = 1 or auto counts at 4ρ, 2ε if Laplace, for one row: a row "
            "moved between two units changes both")


def _as_row_level(entry: Entry) -> Entry:
    """``entry``'s charge as a bound on one row's change. After bounding (at most K kept rows
    per unit), replacing one row touches at most two units, and in each one kept row leaves and
    another comes in (the row itself, or one kept or dropped in its place): two replacements, so
    a table moves by at most L1 4 and L2 2√2 (both may move a count between the same two cells:
    −2 and +2). That is within a unit's replace bound (L1 2K, L2 √2·K) for K >= 2, and twice it
    for K = 1: four times the ρ of a Gaussian measurement (ρ ∝ L2²) and of a selection (ε ∝
    its sensitivity, ρ ∝ ε²), twice a pure release's ε. The ledger does not hold the K an
    "auto" release chose: it counts as K = 1."""
    if entry.unit_column is None or (entry.unit_max_rows or 1) >= 2:
        return entry
    if entry.rho is not None:
        return replace(entry, rho=4 * entry.rho)
    return replace(entry, epsilon=2 * entry.epsilon)


def budget_totals(entries: Iterable[Entry], delta: float, unit_column: str | None = None
                  ) -> tuple[Total, Total | None]:
    """What a dataset's budget bounds, and one privacy unit's part: the one rule of the budget
    check, :meth:`Ledger.total` and :func:`report`.

    A budget of ε bounds what any single row can lose, so the first total composes every entry
    as a bound on one row (:func:`_as_row_level`): row-level entries and unit entries of
    K >= 2 at their own charge, K = 1 and "auto" ones at 4ρ (2ε if pure). The second (None when
    ``unit_column`` is None: a row) composes the entries of ``unit_column`` only, at their own
    charge whatever their K: what one unit (a person) can lose through the releases that protect
    it; a row-level entry bounds nothing for a person's many rows, nor another unit's for this
    one. It never exceeds the first (the same entries or fewer, at no more), so a budget that
    holds the first holds it too."""
    entries = list(entries)
    row = composed([_as_row_level(e) for e in entries], delta)
    if unit_column is None:
        return row, None
    return row, composed([e for e in entries if e.unit_column == unit_column], delta)


def unit_totals(entries: list[Entry], delta: float) -> list[str]:
    """Where the dataset's total (one row's: :func:`budget_totals`) is not what its units' people
    can lose, the rule and each unit column's total, its releases alone at their own charge;
    where units mix, a warning first: a row-level release protects one row, so a person with
    many rows is protected less by it (and not at all by how the row-level ones add up)."""
    counted = [e for e in entries if e.counted]
    columns = list(dict.fromkeys(e.unit_column for e in counted))
    units = [column for column in columns if column is not None]
    row = budget_totals(entries, delta)[0]
    parts = [budget_totals(entries, delta, column)[1] for column in units]
    if not units or columns == units[:1] and parts[0].epsilon == row.epsilon:
        return []  # no unit, or one whose releases all bound a row at their own charge
    name = entries[0].dataset_name
    lines = [f"dataset {name!r}: its total above is what one row can lose ({ROW_RULE}); by "
             "unit, its releases alone at their own charge:"]
    if len(columns) > 1:
        lines.insert(0, f"WARNING: dataset {name!r} has DP releases of different privacy units "
                        f"({', '.join(dict.fromkeys(e.unit for e in counted))}). "
                        + ("A row-level release protects one row: a person with many rows is "
                           "protected less by it" if None in columns else
                           "A unit's releases protect the units of its own column only"))
    for column, part in zip(units, parts):
        lines.append(f"  unit {column!r}: ε={part.epsilon:.6g} at δ={part.delta:.3g} over "
                     f"{part.releases} DP release(s)")
    return lines


def report(ledger: Ledger, dataset_name: str | None = None) -> str:
    """A plain-text table of the entries and, per dataset name, the composed total."""
    entries = ledger.entries(dataset_name)
    names = [dataset_name] if dataset_name is not None else ledger.datasets()
    lines = [f"ledger: {ledger.path}"]
    if not entries and not any(ledger.budget(n) for n in names):
        return "\n".join([*lines, "no entries" + (f" for dataset {dataset_name!r}"
                                                   if dataset_name else "")])
    header = ["id", "created (UTC)", "dataset", "run id", "ε", "δ", "mechanism", "ρ", "notion",
              "unit", "kind", "status", "model"]
    rows = [[str(e.id), e.created, e.dataset_id, e.run_id, _number(e.epsilon),
             _number(e.delta, ".3g"), e.mechanism, _number(e.rho), e.notion, e.unit,
             e.kind + (" forced" if e.forced else ""),
             UNFINISHED if e.status == RESERVED else e.status, e.model_path or "-"]
            for e in entries]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, ["-" * w for w in widths], *rows]:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    for name in names:
        budget = ledger.budget(name)
        total = ledger.total(name)
        line = (f"total {name!r}: ε={total.epsilon:.6g} at δ={total.delta:.3g} over "
                f"{total.releases} DP release(s) (zCDP ρ={total.rho:.6g}; basic composition "
                f"ε={total.pure_epsilon:.6g}, δ={total.pure_delta:.3g})")
        if budget is not None:
            line += f"; budget ε={budget.epsilon:g} at δ={budget.delta:.3g}"
        if total.test_runs:
            line += f"; {total.test_runs} non-private test run(s) not counted"
        if total.other_notions:
            line += f"; {total.other_notions} entry(ies) under other notions not summed"
            line += _plain_dp_counted([e for e in entries if e.dataset_name == name])
        if total.unfinished:
            line += f"; {total.unfinished} UNFINISHED entry(ies) counted"
        lines.append(line)
        lines += unit_totals([e for e in entries if e.dataset_name == name], total.delta)
    if any(e.status == RESERVED for e in entries):
        lines.append(f"{UNFINISHED}: reserved by a fit that has not drawn its noise yet: still "
                     "running, or killed. Counted, as its noise may have been drawn; a retry "
                     "with its run id takes it over once that process has ended")
    if any(e.status == FAILED for e in entries):
        lines.append(f"{FAILED}: its noise was drawn, then its fit failed. Counted; nothing was "
                     "released, and a retry with its run id is refused unless forced")
    return "\n".join(lines)
