"""Where the privacy ledger lives: a SQLite file or a PostgreSQL database (SQLAlchemy Core).

Both hold the same two tables, ``releases`` and ``budgets``. They differ in two things:

- How a budget check and its reservation become one atomic step. SQLite: ``BEGIN IMMEDIATE``
  takes the database's write lock when a write transaction starts. PostgreSQL: each write
  transaction first takes ``pg_advisory_xact_lock`` on a hash of each dataset name it touches,
  so reservations of one dataset queue up and see each other's rows: each statement reads what
  was committed before it started, so the engine pins READ COMMITTED (a server defaulting to
  REPEATABLE READ would fix the snapshot before the lock is granted). (A ``SELECT ... FOR UPDATE``
  on the budget row locks nothing when the dataset has no stored budget, e.g. with
  ``--budget-epsilon`` alone; SERIALIZABLE would abort one of two concurrent fits and need a
  retry loop around the whole check. The advisory lock waits instead, and only on one dataset.)
- How a fit in progress is told from one whose process died: from its reservation until it is
  spent or cancelled, the fit holds a lock that the operating system or the server drops with
  its process. SQLite: an ``flock`` on ``<ledger>.entry-<id>.lock``; PostgreSQL: a session
  advisory lock on the entry id, on a connection kept open meanwhile.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.pool import NullPool

FORMAT = 1
_HOLD_CLASS = 0x6470  # first key of the entries' session advisory locks ("dp")
_DATABASES = {"sqlite": "sqlite", "postgresql": "postgresql+psycopg",
              "postgres": "postgresql+psycopg"}

metadata = sa.MetaData()
releases = sa.Table(
    "releases", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("dataset_name", sa.Text, nullable=False),
    sa.Column("schema_sha256", sa.Text, nullable=False),
    sa.Column("run_id", sa.Text, nullable=False),
    sa.Column("created", sa.Text, nullable=False),
    sa.Column("epsilon", sa.Double, nullable=False),
    sa.Column("delta", sa.Double, nullable=False),
    sa.Column("mechanism", sa.Text, nullable=False),
    sa.Column("accountant", sa.Text, nullable=False),
    sa.Column("rho", sa.Double),
    sa.Column("notion", sa.Text, nullable=False),
    sa.Column("private", sa.Boolean, nullable=False),
    sa.Column("sampler", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("forced", sa.Boolean, nullable=False),
    sa.Column("model_path", sa.Text),
    sa.Column("release_path", sa.Text),
    sa.Column("unit_column", sa.Text),  # the privacy unit's column (NULL: a row)
    sa.Column("unit_max_rows", sa.Integer),
    sa.Index("releases_run", "dataset_name", "schema_sha256", "run_id"),
    sqlite_autoincrement=True,  # ids never reused, as in the ledgers written before
)
budgets = sa.Table(
    "budgets", metadata,
    sa.Column("dataset_name", sa.Text, primary_key=True),
    sa.Column("epsilon", sa.Double, nullable=False),
    sa.Column("delta", sa.Double, nullable=False),
    sa.Column("updated", sa.Text, nullable=False),
)
# SQLite keeps the format in PRAGMA user_version; other databases in this one-row table.
_format = sa.Table("ledger_format", sa.MetaData(), sa.Column("version", sa.Integer, nullable=False))


# This process's holds, by ledger and entry id: one process-wide table, so that a hold lasts
# until released through any Ledger object of the same ledger, not while one object lives.
_held: dict[tuple[str, int], tuple[Connection, int | None]] = {}


class StoreError(RuntimeError):
    """The ledger's database cannot be reached or used."""


def database_url(location: str | Path) -> URL | None:
    """``location`` as a SQLAlchemy URL of a supported database, or None for a file path.
    ``postgresql://`` means psycopg 3 (SQLAlchemy's default would be psycopg2)."""
    if not isinstance(location, str) or "://" not in location:
        return None
    scheme = location.split("://", 1)[0].lower()
    if scheme.split("+", 1)[0] not in _DATABASES:
        return None
    url = make_url(location)
    return url.set(drivername=_DATABASES[scheme]) if scheme in _DATABASES else url


class Store:
    """The ledger's tables in the SQLite file or the database that ``location`` names."""

    def __init__(self, location: str | Path) -> None:
        url = database_url(location)
        if url is None or url.get_backend_name() == "sqlite":
            file = url.database if url is not None else location
            if not file or file == ":memory:":
                raise ValueError(f"ledger {location}: a SQLite ledger must be a file")
            self.path: Path | None = Path(file).expanduser()
            self.location: str | Path = self.path
            self.url = URL.create("sqlite", database=str(self.path))
        else:
            self.path, self.url = None, url
            self.location = url.render_as_string(hide_password=True)
        self._engine: Engine | None = None
        self._ready = False

    @property
    def sqlite(self) -> bool:
        return self.path is not None

    def __getstate__(self) -> dict[str, Any]:  # a Synthesizer copied holds no connections
        return {**self.__dict__, "_engine": None, "_ready": False}

    def exists(self) -> bool:
        """Whether there is anything to read (a SQLite file is only made by a write)."""
        return not self.sqlite or self.path.exists()

    def _connect(self) -> Connection:
        if self._engine is None:
            # One connection per use (NullPool), as the ledger is used rarely, from many
            # processes; a pool would outlive forks and server restarts.
            if self.sqlite:
                self._engine = sa.create_engine(self.url, poolclass=NullPool,
                                                connect_args={"timeout": 60})
                sa.event.listen(self._engine, "connect", _sqlite_manual_transactions)
                sa.event.listen(self._engine, "begin", _sqlite_begin)
            else:
                # READ COMMITTED whatever the server's default: under REPEATABLE READ the
                # snapshot is taken by the statement that waits for the dataset's lock, so the
                # budget check would miss reservations committed meanwhile.
                self._engine = sa.create_engine(self.url, poolclass=NullPool,
                                                isolation_level="READ COMMITTED",
                                                connect_args={"connect_timeout": 10})
        connection = self._engine.connect()
        if not self._ready:
            try:
                self._create(connection)
            except BaseException:
                connection.close()
                raise
            self._ready = True
        return connection

    def _create(self, connection: Connection) -> None:
        with connection.execution_options(immediate=True).begin():
            if not self.sqlite:  # CREATE TABLE IF NOT EXISTS races in PostgreSQL
                connection.execute(sa.select(sa.func.pg_advisory_xact_lock(_HOLD_CLASS)))
            metadata.create_all(connection)
            _add_unit_columns(connection)
            if self.sqlite:
                version = connection.exec_driver_sql("PRAGMA user_version").scalar()
                if version == 0:
                    connection.exec_driver_sql(f"PRAGMA user_version = {FORMAT}")
            else:
                _format.create(connection, checkfirst=True)
                version = connection.execute(sa.select(_format.c.version)).scalar()
                if version is None:
                    connection.execute(_format.insert().values(version=FORMAT))
            if version not in (0, None, FORMAT):
                raise StoreError(f"ledger {self.location}: format {version} is not supported")
        connection.execution_options(immediate=False)  # in place: reads take no write lock

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """Database and lock-file errors as :class:`StoreError`, naming the ledger."""
        try:
            yield
        except sa.exc.DBAPIError as exc:
            reason = " ".join(str(exc.orig).split())
            raise StoreError(f"ledger {self.location}: {reason}") from exc
        except (sa.exc.SQLAlchemyError, OSError) as exc:
            raise StoreError(f"ledger {self.location}: {exc}") from exc

    def check(self) -> None:
        """Connect (and make the tables): an unreachable database fails here."""
        if self.sqlite:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.errors():
            self._connect().close()

    @contextlib.contextmanager
    def reading(self) -> Iterator[Connection]:
        with self.errors():
            connection = self._connect()
        try:
            with self.errors():
                yield connection
        finally:
            connection.close()

    @contextlib.contextmanager
    def transaction(self, *dataset_names: str) -> Iterator[Connection]:
        """A write transaction, serialised with every other one touching ``dataset_names``
        (SQLite: with every other write). Holds taken in it are dropped if it fails."""
        if self.sqlite:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.errors():
            connection = self._connect().execution_options(immediate=True)
        try:
            with self.errors(), connection.begin():
                for name in sorted(set(dataset_names)):  # one order: no deadlocks
                    if not self.sqlite:
                        connection.execute(sa.select(sa.func.pg_advisory_xact_lock(
                            sa.func.hashtextextended(name, 0))))
                yield connection
        except BaseException:
            for key in [k for k, (c, _) in _held.items() if c is connection]:
                self.release(key[1])
            raise
        finally:
            if not any(c is connection for c, _ in _held.values()):
                connection.close()  # else it keeps a PostgreSQL hold until release()

    def hold(self, connection: Connection, entry_id: int) -> bool:
        """Take the lock that says this process is working on ``entry_id`` (see the module
        docstring); False if another live process holds it."""
        if self.sqlite:
            descriptor = os.open(f"{self.path}.entry-{entry_id}.lock", os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(descriptor)
                return False
            _held[str(self.location), entry_id] = (connection, descriptor)
            return True
        taken = connection.execute(sa.select(sa.func.pg_try_advisory_lock(
            _HOLD_CLASS, entry_id))).scalar()
        if taken:
            _held[str(self.location), entry_id] = (connection, None)
        return bool(taken)

    def release(self, entry_id: int) -> None:
        """Drop this process's hold on ``entry_id`` (after its new status is committed)."""
        held = _held.pop((str(self.location), entry_id), None)
        if held is None:
            return
        connection, descriptor = held
        if descriptor is not None:
            with contextlib.suppress(OSError):
                os.unlink(f"{self.path}.entry-{entry_id}.lock")
            os.close(descriptor)
        elif not any(c is connection for c, _ in _held.values()):
            connection.close()  # the server drops the session's advisory lock

    def fix_ids(self, connection: Connection) -> None:
        """After rows were inserted with their own ids: new ids continue past them (SQLite's
        AUTOINCREMENT does this itself)."""
        if not self.sqlite:
            connection.exec_driver_sql(
                "SELECT setval(pg_get_serial_sequence('releases', 'id'), max(id)) FROM releases "
                "HAVING max(id) IS NOT NULL")


def _add_unit_columns(connection: Connection) -> None:
    """A ledger made before privacy units gains their two columns, NULL (a row) in its rows;
    the format stays: older dp_dask versions read and write it as before."""
    present = {c["name"] for c in sa.inspect(connection).get_columns("releases")}
    for column in ("unit_column", "unit_max_rows"):
        if column not in present:
            kind = releases.c[column].type.compile(connection.dialect)
            connection.exec_driver_sql(f"ALTER TABLE releases ADD COLUMN {column} {kind}")


def _sqlite_manual_transactions(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # pysqlite would BEGIN on its own


def _sqlite_begin(connection: Connection) -> None:
    """SQLite's write lock at the start of each write transaction: two concurrent fits cannot
    both read the old total (a plain BEGIN would take the lock only at the first write)."""
    immediate = connection.get_execution_options().get("immediate")
    connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")
