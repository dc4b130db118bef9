"""The privacy ledger: every fit's spending, per dataset, in SQLite, checked against a budget.

Each fit draws fresh noise, so each fit spends budget again. The ledger records every fit
(dataset, run id, UTC time, ε, δ, mechanism, accountant, ρ, privacy notion, model path, and
whether it was a non-private test run), and before any data is read it checks, in the same SQLite
transaction (``BEGIN IMMEDIATE``, so two concurrent fits cannot both pass), that the dataset's
composed total stays within its budget.

A dataset is named by the user (default: the input file's stem) and its entries also carry the
schema's sha256; ``dataset_id`` joins the two. Budgets and totals are per dataset *name*: releases
of one name under different schemas are summed, as they usually describe the same people.

A schema drafted under DP (``dp-dask schema draft --dp-epsilon``) is an entry of the same
dataset name too (mechanism ``schema-draft``), summed like a Laplace release.

Composition (see :func:`compose`): Gaussian releases add their ρ (zCDP) and convert once;
Laplace releases (pure or advanced composition) add ε and δ (basic composition); a mix adds the
two parts. Test runs (seeded noise) and entries under other notions (e.g. "dependent-DP") are
listed but never summed into the DP total.

Where: ``Ledger(path)``, else ``$DP_DASK_LEDGER``, else ``$XDG_CONFIG_HOME/dp_dask/ledger.sqlite``
(``~/.config/dp_dask/ledger.sqlite``). It holds no data values: names, parameters and paths only.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import os
import sqlite3
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from dp_dask.privacy import BASIC_COMPOSITION, epsilon_spent

LEDGER_ENV = "DP_DASK_LEDGER"
APPROX_DP = "approx-DP"  # the only notion summed into a DP total
DEPENDENT_DP = "dependent-DP"  # Tabular-DDP (dp_dask.stats): listed, never summed
RESERVED, SPENT = "reserved", "spent"
DRAFT_MECHANISM = "schema-draft"  # a schema's categories/bins drafted under DP
IN_MEMORY = "in-memory"  # dataset name of an unnamed in-memory frame: all such fits sum together
_RELATIVE_SLACK = 1e-9  # float rounding allowed when comparing a total with its budget
_FORMAT = 1

_TABLES = """
CREATE TABLE IF NOT EXISTS releases (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dataset_name TEXT NOT NULL,
    schema_sha256 TEXT NOT NULL,
    run_id TEXT NOT NULL,
    created TEXT NOT NULL,
    epsilon REAL NOT NULL,
    delta REAL NOT NULL,
    mechanism TEXT NOT NULL,
    accountant TEXT NOT NULL,
    rho REAL,
    notion TEXT NOT NULL,
    private INTEGER NOT NULL,
    sampler TEXT NOT NULL,
    status TEXT NOT NULL,
    forced INTEGER NOT NULL DEFAULT 0,
    model_path TEXT,
    release_path TEXT
);
CREATE INDEX IF NOT EXISTS releases_run ON releases (dataset_name, schema_sha256, run_id);
CREATE TABLE IF NOT EXISTS budgets (
    dataset_name TEXT PRIMARY KEY,
    epsilon REAL NOT NULL,
    delta REAL NOT NULL,
    updated TEXT NOT NULL
);
"""


class LedgerError(RuntimeError):
    """The ledger refuses a fit (a failed earlier run of the same id, a clash of settings)."""


class BudgetExceededError(LedgerError):
    """The fit would take the dataset's composed total past its budget."""


def default_ledger_path() -> Path:
    """``$DP_DASK_LEDGER``, else the per-user config directory (XDG_CONFIG_HOME honoured)."""
    if os.environ.get(LEDGER_ENV):
        return Path(os.environ[LEDGER_ENV]).expanduser()
    config = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(config) / "dp_dask" / "ledger.sqlite"


def dataset_name_for(source: Any, name: str | None = None) -> str:
    """The given name, else a file's or directory's stem, else :data:`IN_MEMORY` for a frame."""
    if name is not None:
        if not str(name).strip():
            raise ValueError("the dataset name must not be empty")
        return str(name).strip()
    if isinstance(source, str | Path):
        path = Path(source)
        stem = path.name or path.resolve().name
        for suffix in (".csv.gz", ".csv", ".parquet", ".pq"):
            if stem.lower().endswith(suffix) and len(stem) > len(suffix):
                return stem[: -len(suffix)]
        return stem
    return IN_MEMORY


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

    @classmethod
    def for_plan(cls, plan: Mapping[str, Any], *, dataset_name: str, schema_sha256: str,
                 run_id: str, sampler: str, private: bool) -> Entry:
        """The entry of a release calibrated by ``plan`` (epsilon, delta, mechanism,
        accountant and, for Gaussian noise, the charge rho: e.g. ``NoisePlan.to_json()``)."""
        gaussian = plan["mechanism"] == "gaussian"
        basic = plan["mechanism"] == "laplace" and plan["accountant"] == BASIC_COMPOSITION
        return cls(dataset_name, schema_sha256, run_id, plan["epsilon"],
                   0.0 if basic else plan["delta"], plan["mechanism"], plan["accountant"],
                   plan["rho"] if gaussian else None, private, sampler)

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

    def model_exists(self) -> bool:
        return self.model_path is not None and (Path(self.model_path) / "model.json").exists()

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
                 sum(e.private and e.notion != APPROX_DP for e in entries))


def compose(entries: Iterable[Entry], delta: float) -> float:
    """Total ε of the DP entries at total δ = ``delta`` (inf if δ cannot be met)."""
    return composed(entries, delta).epsilon


@dataclass(frozen=True)
class Reservation:
    """The ledger's answer to a fit: a new entry to fill in, or an earlier one to reuse."""

    entry: Entry
    reused: bool


class Ledger:
    """A SQLite privacy ledger at ``path`` (default: :func:`default_ledger_path`)."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path).expanduser() if path is not None else default_ledger_path()
        self._ready = False

    def __repr__(self) -> str:
        return f"Ledger({str(self.path)!r})"

    def _connect(self) -> sqlite3.Connection:
        # Autocommit; transactions are explicit. The timeout waits out another fit's check.
        connection = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        connection.row_factory = sqlite3.Row
        if not self._ready:
            connection.executescript(_TABLES)
            version = connection.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                connection.execute(f"PRAGMA user_version = {_FORMAT}")
            elif version != _FORMAT:
                connection.close()
                raise LedgerError(f"{self.path}: ledger format {version} is not supported")
            self._ready = True
        return connection

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction that takes SQLite's write lock at once (BEGIN IMMEDIATE)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._errors():
            connection = self._connect()
        try:
            with self._errors():
                connection.execute("BEGIN IMMEDIATE")
            yield connection
            with self._errors():
                connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        finally:
            connection.close()

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise LedgerError(f"ledger {self.path}: {exc}") from exc

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection | None]:
        if not self.path.exists():
            yield None
            return
        with self._errors():
            connection = self._connect()
        try:
            yield connection
        finally:
            connection.close()

    # --- budgets -----------------------------------------------------------------------------

    def set_budget(self, dataset_name: str, epsilon: float, delta: float) -> Budget:
        """Store (replace) the total (ε, δ) that fits of ``dataset_name`` may compose to."""
        if not (math.isfinite(epsilon) and epsilon > 0):
            raise ValueError(f"the budget's epsilon must be a finite number > 0, got {epsilon!r}")
        if not 0 < delta < 1:
            raise ValueError(f"the budget's delta must lie in (0, 1), got {delta!r}")
        budget = Budget(dataset_name_for(None, dataset_name), float(epsilon), float(delta),
                        _now())
        with self._transaction() as connection:
            connection.execute("INSERT OR REPLACE INTO budgets VALUES (?, ?, ?, ?)",
                               (budget.dataset_name, budget.epsilon, budget.delta,
                                budget.updated))
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
            rows = connection.execute("SELECT dataset_name FROM releases UNION "
                                      "SELECT dataset_name FROM budgets ORDER BY 1")
            return [row[0] for row in rows]

    def total(self, dataset_name: str, delta: float | None = None) -> Total:
        """The dataset's composed total at ``delta``; by default at its budget's δ, else at the
        δ its entries add up to (Σδ of the Laplace releases + the largest Gaussian δ)."""
        entries = self.entries(dataset_name)
        if delta is None:
            budget = self.budget(dataset_name)
            counted = [e for e in entries if e.counted]
            delta = budget.delta if budget else (
                math.fsum(e.delta for e in counted if e.rho is None)
                + max((e.delta for e in counted if e.rho is not None), default=0.0))
        return composed(entries, delta)

    def reserve(self, request: Entry, *, budget_epsilon: float | None = None,
                force: bool = False) -> Reservation:
        """Check and record a fit in one transaction, before it reads any data.

        If ``(dataset, schema, run id)`` is already recorded and its model exists, that entry is
        returned to be reused (nothing is recorded). If it is recorded without a model, or the
        new entry would take the dataset past its budget (the stored one, and ``budget_epsilon``
        at the stored δ or else the request's δ), :class:`LedgerError` /
        :class:`BudgetExceededError` is raised, unless ``force``. Test runs are never refused
        for budget. The new entry is ``reserved`` until :meth:`mark_spent` or :meth:`cancel`.
        """
        with self._transaction() as connection:
            prior = _run(connection, request)
            if prior is not None and not force:
                if prior.model_exists():
                    _check_same_settings(prior, request)
                    return Reservation(prior, reused=True)
                raise LedgerError(
                    f"run {request.run_id!r} of dataset {request.dataset_id} is already in the "
                    f"ledger ({self.path}, entry {prior.id}, {prior.status}, {prior.created}) "
                    f"but its model is not at {prior.model_path or '(not saved)'}; its noise "
                    "may have been drawn. Nothing was read. Pass --force (force=True) to fit "
                    "again, which records and spends again")
            if request.counted and not force:
                _check_budget(connection, request, budget_epsilon)
            entry = replace(request, created=_now(), status=RESERVED, forced=force, id=None)
            columns = [f.name for f in fields(Entry) if f.name != "id"]
            cursor = connection.execute(
                f"INSERT INTO releases ({', '.join(columns)}) "
                f"VALUES ({', '.join('?' for _ in columns)})",
                [getattr(entry, c) for c in columns])
            return Reservation(replace(entry, id=cursor.lastrowid), reused=False)

    def mark_spent(self, entry_id: int) -> None:
        """The fit drew its noise and built its model."""
        with self._transaction() as connection:
            connection.execute("UPDATE releases SET status = ? WHERE id = ?", (SPENT, entry_id))

    def cancel(self, entry_id: int) -> None:
        """The fit failed before releasing anything: drop its reservation."""
        with self._transaction() as connection:
            connection.execute("DELETE FROM releases WHERE id = ? AND status = ?",
                               (entry_id, RESERVED))

    def set_paths(self, entry_id: int, *, model_path: str | Path | None = None,
                  release_path: str | Path | None = None) -> None:
        """Record where the entry's model (used to reuse it on a retry) or release went."""
        with self._transaction() as connection:
            for column, value in (("model_path", model_path), ("release_path", release_path)):
                if value is not None:
                    connection.execute(f"UPDATE releases SET {column} = ? WHERE id = ?",
                                       (str(Path(value).resolve()), entry_id))

    def record(self, entry: Entry) -> Entry:
        """Record an entry as spent without a budget check (e.g. a release of another notion)."""
        reservation = self.reserve(replace(entry, run_id=entry.run_id or new_run_id()),
                                   force=True)
        self.mark_spent(reservation.entry.id or 0)
        return replace(reservation.entry, status=SPENT)


def _entry(row: sqlite3.Row) -> Entry:
    values = dict(row)
    values["private"] = bool(values["private"])
    values["forced"] = bool(values["forced"])
    return Entry(**values)


def _entries(connection: sqlite3.Connection, dataset_name: str | None) -> list[Entry]:
    if dataset_name is None:
        rows = connection.execute("SELECT * FROM releases ORDER BY id")
    else:
        rows = connection.execute("SELECT * FROM releases WHERE dataset_name = ? ORDER BY id",
                                  (dataset_name,))
    return [_entry(row) for row in rows]


def _budget(connection: sqlite3.Connection, dataset_name: str) -> Budget | None:
    row = connection.execute("SELECT * FROM budgets WHERE dataset_name = ?",
                             (dataset_name,)).fetchone()
    return None if row is None else Budget(**dict(row))


def _run(connection: sqlite3.Connection, request: Entry) -> Entry | None:
    row = connection.execute(
        "SELECT * FROM releases WHERE dataset_name = ? AND schema_sha256 = ? AND run_id = ? "
        "ORDER BY id DESC LIMIT 1",
        (request.dataset_name, request.schema_sha256, request.run_id)).fetchone()
    return None if row is None else _entry(row)


def _check_same_settings(prior: Entry, request: Entry) -> None:
    keys = ("epsilon", "delta", "mechanism", "private", "sampler")
    differ = [k for k in keys if getattr(prior, k) != getattr(request, k)]
    if differ:
        was = ", ".join(f"{k}={getattr(prior, k)!r}" for k in differ)
        now = ", ".join(f"{k}={getattr(request, k)!r}" for k in differ)
        raise LedgerError(f"run {request.run_id!r} of dataset {request.dataset_id} was recorded "
                          f"with {was}, not {now}: use a new run id for new settings")


def _check_budget(connection: sqlite3.Connection, request: Entry,
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
        before = composed(entries, delta)
        after = composed([*entries, request], delta)
        if after.epsilon > epsilon * (1 + _RELATIVE_SLACK):
            raise BudgetExceededError(
                f"dataset {request.dataset_name!r} has a budget of ε={epsilon:g} at "
                f"δ={delta:.3g} ({source}); its {before.releases} recorded DP release(s) "
                f"compose to ε={before.epsilon:.6g}, and this release (ε={request.epsilon:g}, "
                f"δ={request.delta:.3g}, {request.mechanism}) would bring the total to "
                f"ε={after.epsilon:.6g}. Refused before reading any data or drawing any noise. "
                "Raise the budget with 'dp-dask ledger set-budget', or pass --force "
                "(force=True) to release anyway (it is recorded)")


def _number(value: float | None, spec: str = ".4g") -> str:
    return "-" if value is None else format(value, spec)


def report(ledger: Ledger, dataset_name: str | None = None) -> str:
    """A plain-text table of the entries and, per dataset name, the composed total."""
    entries = ledger.entries(dataset_name)
    names = [dataset_name] if dataset_name is not None else ledger.datasets()
    lines = [f"ledger: {ledger.path}"]
    if not entries and not any(ledger.budget(n) for n in names):
        return "\n".join([*lines, "no entries" + (f" for dataset {dataset_name!r}"
                                                   if dataset_name else "")])
    header = ["id", "created (UTC)", "dataset", "run id", "ε", "δ", "mechanism", "ρ", "notion",
              "kind", "status", "model"]
    rows = [[str(e.id), e.created, e.dataset_id, e.run_id, _number(e.epsilon),
             _number(e.delta, ".3g"), e.mechanism, _number(e.rho), e.notion,
             e.kind + (" forced" if e.forced else ""), e.status, e.model_path or "-"]
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
        lines.append(line)
    return "\n".join(lines)
