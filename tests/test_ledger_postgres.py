"""The privacy ledger on a real PostgreSQL server started by the test on 127.0.0.1, and the same
semantics on SQLite: budget, retries, unfinished entries, a 20-process race, export/import."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest
from conftest import SMALL_SCHEMA_PATH
from ledger_processes import SHA, laplace, race, reserve_and_hang

from dp_dask.cli import main
from dp_dask.privacy.ledger import (
    FAILED,
    RESERVED,
    SPENT,
    UNFINISHED,
    BudgetExceededError,
    Entry,
    Ledger,
    LedgerError,
    composed,
    report,
)

# Forked from one server that imported the ledger once: fresh processes (no connection or lock
# of the parent's) without each paying spawn's ~4 s import of dp_dask on 2 cores.
PROCESSES = multiprocessing.get_context("forkserver")
PROCESSES.set_forkserver_preload(  # modules the server can import (no tests/ on its path)
    ["dp_dask.privacy.ledger", "sqlalchemy.dialects.postgresql.psycopg"])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def postgres() -> Iterator[str]:
    """A throwaway PostgreSQL server (docs: /work/shared/notes/ops.md), as the ``postgres``
    user when run as root (the server refuses root); its URL, database ``postgres``."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    binaries = found[-1].parent if found else (
        Path(shutil.which("initdb")).parent if shutil.which("initdb") else None)
    if binaries is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but PostgreSQL's initdb is missing (.ci/run installs it)")
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not installed")
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    root = Path(tempfile.mkdtemp(prefix="dp-dask-pg-"))
    root.chmod(0o755)
    data, sockets = root / "pg", root / "sock"
    for directory in (data, sockets):
        directory.mkdir()
        if as_user:
            shutil.chown(directory, "postgres")
    port = free_port()

    def run(*command: str) -> None:
        subprocess.run([*as_user, *command], check=True, capture_output=True, timeout=120)

    run(str(binaries / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres")
    run(str(binaries / "pg_ctl"), "-D", str(data), "-l", str(sockets / "pg.log"), "-w", "start",
        "-o", f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        run(str(binaries / "pg_ctl"), "-D", str(data), "stop", "-m", "fast")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_url(postgres, request) -> str:
    """A new, empty database on the server for one test."""
    name = f"t_{request.node.name.lower().translate(str.maketrans('[]-', '___'))}"[:60]
    with psycopg.connect(postgres.replace("postgresql://", "postgresql://", 1),
                         autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}"')
        connection.execute(f'CREATE DATABASE "{name}"')
    return postgres.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request, tmp_path) -> str:
    """The same tests on each backend."""
    if request.param == "sqlite":
        return str(tmp_path / "ledger.sqlite")
    return request.getfixturevalue("pg_url")


def gaussian(epsilon: float, run: str, rho: float, delta: float = 1e-6) -> Entry:
    return Entry("people", SHA, run, epsilon, delta, "gaussian", "zcdp", rho, True, "opendp")


def totals(ledger: Ledger) -> list[str]:
    """``ledger list`` without its first line (the ledger's own path or URL)."""
    return report(ledger).splitlines()[1:]


def test_budget_retries_and_composition(location, tmp_path):
    ledger = Ledger(location)
    ledger.set_budget("people", 2.0, 1e-6)
    ledger.set_budget("people", 1.5, 1e-6)  # replaced
    first = ledger.reserve(gaussian(1.0, "g1", 0.01))
    ledger.mark_spent(first.entry.id)
    second = ledger.reserve(laplace(0.5, "l1", delta=1e-7))
    with pytest.raises(BudgetExceededError, match="budget of ε=1.5"):
        ledger.reserve(laplace(0.5, "l2"))
    forced = ledger.reserve(laplace(0.5, "l2"), force=True)
    test_run = ledger.record(Entry("people", SHA, "t", 9.0, 0.0, "laplace", "basic", None,
                                   False, "numpy"))
    entries = ledger.entries("people")
    assert [e.run_id for e in entries] == ["g1", "l1", "l2", "t"]
    assert [e.status for e in entries] == [SPENT, RESERVED, RESERVED, SPENT]
    assert entries[2].forced and test_run.status == SPENT and not entries[3].private
    total = ledger.total("people")
    assert total == composed(entries, 1e-6)
    assert (total.releases, total.test_runs, total.unfinished) == (3, 1, 2)
    assert total.pure_epsilon == 1.0 and total.rho == 0.01
    # A retry of a spent run with its model reuses it; other settings or no model: refused.
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.json").write_text("{}")
    ledger.set_paths(first.entry.id, model_path=model)
    again = ledger.reserve(gaussian(1.0, "g1", 0.01))
    assert again.reused and again.entry.id == first.entry.id
    with pytest.raises(LedgerError, match="use a new run id"):
        ledger.reserve(gaussian(2.0, "g1", 0.04))
    (model / "model.json").unlink()
    with pytest.raises(LedgerError, match="its model is not at"):
        ledger.reserve(gaussian(1.0, "g1", 0.01))
    ledger.cancel(second.entry.id)
    ledger.cancel(forced.entry.id)
    assert [e.run_id for e in ledger.entries()] == ["g1", "t"]
    assert ledger.datasets() == ["people"] and ledger.budget("people").epsilon == 1.5


def test_a_charge_known_only_at_the_spend_may_only_lower_it(location):
    ledger = Ledger(location)
    lower, higher = ledger.reserve(laplace(0.5, "lower")), ledger.reserve(laplace(0.5, "higher"))
    ledger.mark_spent(lower.entry.id, epsilon=0.125)
    ledger.mark_spent(higher.entry.id, failed=True, epsilon=2.0)  # the reserved 0.5 stays
    assert [(e.epsilon, e.status) for e in ledger.entries()] == [(0.125, SPENT), (0.5, FAILED)]


def test_twenty_processes_race_and_exactly_five_pass(location):
    twenty_race(location)


def test_the_race_on_a_server_whose_default_is_repeatable_read(pg_url):
    """Under REPEATABLE READ the snapshot is taken by the statement that waits for the dataset's
    lock: every waiter would check the budget against the total from before it waited."""
    with psycopg.connect(pg_url, autocommit=True) as connection:
        name = pg_url.rsplit("/", 1)[1]
        connection.execute(f'ALTER DATABASE "{name}" SET default_transaction_isolation '
                           "TO 'repeatable read'")
    with psycopg.connect(pg_url) as connection:  # new sessions take it
        assert connection.execute("SHOW transaction_isolation").fetchone() == ("repeatable read",)
    twenty_race(pg_url)


def test_two_fits_that_waited_for_the_lock_see_each_other_under_repeatable_read(pg_url):
    """The race above made deterministic: both fits start their budget check while the dataset's
    lock is held elsewhere, so both snapshots (REPEATABLE READ) predate either's reservation."""
    name = pg_url.rsplit("/", 1)[1]
    with psycopg.connect(pg_url, autocommit=True) as connection:
        connection.execute(f'ALTER DATABASE "{name}" SET default_transaction_isolation '
                           "TO 'repeatable read'")
    Ledger(pg_url).set_budget("people", 1.0, 1e-6)
    outcomes: list[str] = []

    def attempt(run: str) -> None:
        try:
            Ledger(pg_url).reserve(laplace(0.75, run))
            outcomes.append("recorded")
        except BudgetExceededError:
            outcomes.append("refused")

    fits = [threading.Thread(target=attempt, args=(run,)) for run in ("a", "b")]
    with psycopg.connect(pg_url) as holder:  # the dataset's lock, as a third fit would hold it
        holder.execute("SELECT pg_advisory_xact_lock(hashtextextended('people', 0))")
        for fit in fits:
            fit.start()
        waiting, deadline = 0, time.monotonic() + 30
        while waiting < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
            with psycopg.connect(pg_url, autocommit=True) as probe:
                waiting = probe.execute("SELECT count(*) FROM pg_locks WHERE locktype = "
                                        "'advisory' AND NOT granted").fetchone()[0]
        assert waiting == 2
    for fit in fits:  # the holder committed: the two go one after the other
        fit.join(timeout=30)
    assert sorted(outcomes) == ["recorded", "refused"]
    assert Ledger(pg_url).total("people").pure_epsilon == 0.75


def twenty_race(location: str) -> None:
    ledger = Ledger(location)
    ledger.set_budget("people", 1.25, 1e-6)  # five releases of ε=0.25, exactly
    start, results = PROCESSES.Barrier(20), PROCESSES.Queue()
    racers = [PROCESSES.Process(target=race, args=(location, f"run-{i}", start, results))
              for i in range(20)]
    for racer in racers:
        racer.start()
    outcomes = sorted(results.get(timeout=120) for _ in racers)
    for racer in racers:
        racer.join(timeout=30)
    assert outcomes == ["recorded"] * 5 + ["refused"] * 15
    assert len(ledger.entries()) == 5 and ledger.total("people").pure_epsilon == 1.25


def test_a_killed_fit_is_unfinished_and_its_retry_takes_it_over(location):
    ledger = Ledger(location)
    ledger.set_budget("people", 0.5, 1e-6)
    results = PROCESSES.Queue()
    fit = PROCESSES.Process(target=reserve_and_hang, args=(location, "nightly-3", results))
    fit.start()
    entry_id = results.get(timeout=60)
    # While its process lives, a retry (e.g. a duplicate task) may not take it over.
    with pytest.raises(LedgerError, match="in progress"):
        ledger.reserve(laplace(0.25, "nightly-3"))
    os.kill(fit.pid, signal.SIGKILL)
    fit.join(timeout=30)

    listing = report(ledger)
    assert f"{UNFINISHED}" in listing and "1 UNFINISHED entry(ies) counted" in listing
    assert "a retry with its run id takes it over" in listing
    assert ledger.total("people").pure_epsilon == 0.25  # counted: its noise may be drawn
    with pytest.raises(BudgetExceededError):
        ledger.reserve(laplace(0.5, "other"))
    deadline = time.monotonic() + 10  # PostgreSQL ends the dead client's session at once
    while True:
        try:
            retry = ledger.reserve(laplace(0.25, "nightly-3"))
            break
        except LedgerError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    assert retry.entry.id == entry_id and not retry.reused
    ledger.mark_spent(retry.entry.id)
    assert [(e.id, e.status) for e in ledger.entries()] == [(entry_id, SPENT)]
    assert UNFINISHED not in report(ledger) and ledger.total("people").unfinished == 0
    assert ledger.total("people").pure_epsilon == 0.25  # one fit, counted once


def test_export_sqlite_import_postgresql_and_back(pg_url, tmp_path, capsys):
    sqlite = str(tmp_path / "ledger.sqlite")
    ledger = Ledger(sqlite)
    ledger.set_budget("people", 3.0, 1e-6)
    ledger.set_budget("survey", 1.0, 1e-7)
    ledger.mark_spent(ledger.reserve(gaussian(1.0, "g1", 0.01)).entry.id)
    ledger.cancel(ledger.reserve(laplace(0.1, "gone")).entry.id)  # leaves a gap in the ids
    ledger.mark_spent(ledger.reserve(laplace(0.5, "l1", name="survey", delta=1e-8)).entry.id)
    ledger.reserve(laplace(0.25, "unfinished"))
    ledger.record(Entry("people", SHA, "t", 9.0, 0.0, "laplace", "basic", None, False, "numpy"))
    exported = tmp_path / "ledger.json"
    assert main(["ledger", "export", str(exported), "--ledger", sqlite]) == 0
    assert main(["ledger", "import", str(exported), "--ledger", pg_url]) == 0
    assert "imported 4 entries and 2 budgets" in capsys.readouterr().out
    postgres = Ledger(pg_url)
    assert totals(postgres) == totals(ledger) and postgres.entries() == ledger.entries()
    assert main(["ledger", "import", str(exported), "--ledger", pg_url]) == 0  # idempotent
    assert "imported 0 entries and 0 budgets" in capsys.readouterr().out
    # New ids continue past the imported ones; the unfinished entry can be taken over.
    assert postgres.reserve(laplace(0.25, "next")).entry.id == ledger.entries()[-1].id + 1
    assert postgres.reserve(laplace(0.25, "unfinished")).entry.id == ledger.entries()[2].id

    back = tmp_path / "back.json"
    assert main(["ledger", "export", str(back), "--ledger", pg_url]) == 0
    returned = str(tmp_path / "returned.sqlite")
    assert main(["ledger", "import", str(back), "--ledger", f"sqlite:///{returned}"]) == 0
    assert totals(Ledger(returned)) == totals(postgres)
    assert Ledger(returned).export() == json.loads(back.read_text())

    # A row that differs from the ledger's under its id: nothing is imported.
    document = json.loads(exported.read_text())
    document["entries"][0]["epsilon"] = 0.1
    document["budgets"].append({"dataset_name": "new", "epsilon": 1.0, "delta": 1e-6,
                                "updated": "2024-01-01T00:00:00+00:00"})
    exported.write_text(json.dumps(document))
    capsys.readouterr()
    assert main(["ledger", "import", str(exported), "--ledger", pg_url]) == 2
    assert "differ from the ledger's" in capsys.readouterr().err
    assert postgres.budget("new") is None


def test_cli_unreachable_database_exits_2_before_reading(tmp_path, capsys):
    closed = f"postgresql://postgres@127.0.0.1:{free_port()}/ledger"
    assert main(["ledger", "list", "--ledger", closed]) == 2
    assert "Connection refused" in capsys.readouterr().err
    code = main(["fit", "--data", str(tmp_path / "missing.csv"), "--schema", "adult",
                 "--model", str(tmp_path / "model"), "--ledger", closed])
    err = capsys.readouterr().err
    assert code == 2 and f"127.0.0.1:{closed.split(':')[2]}" in err
    assert "checked before any data is read" in err and "does not exist" not in err


def test_cli_fit_records_and_its_retry_reuses_on_postgresql(client, data, pg_url, tmp_path,
                                                             capsys):
    model = tmp_path / "model"
    fit = ["fit", "--data", str(data), "--schema", str(SMALL_SCHEMA_PATH), "--model", str(model),
           "--ledger", pg_url, "--run-id", "team-1", "--dataset-name", "people",
           "--scheduler", client.scheduler.address, "--quiet"]
    assert main(["ledger", "set-budget", "people", "--epsilon", "1.2", "--ledger", pg_url]) == 0
    assert main(fit) == 0
    assert main(fit) == 0  # the retried task, maybe on another machine
    assert "reused its model" in capsys.readouterr().out
    [entry] = Ledger(pg_url).entries()
    assert entry.status == SPENT and entry.model_path == str(model.resolve())
    assert main([*fit, "--run-id", "team-2"]) == 2  # two Gaussian ε=1 compose to ≈1.41 > 1.2
    assert "has a budget of ε=1.2" in capsys.readouterr().err


def test_privacy_units_are_recorded_and_totalled_apart(location):
    """Entries name their privacy unit; `ledger list` shows it and, where row-level and
    person-level releases of one dataset mix, warns and totals each unit column apart (its
    releases alone: the row-level one is not counted for the person). A ledger made before
    units (no unit columns) gains them, its entries a row's."""
    import sqlalchemy as sa

    ledger = Ledger(location)
    ledger.mark_spent(ledger.reserve(gaussian(1.0, "row", 0.01)).entry.id)
    with ledger._store.transaction() as connection:  # back to a ledger made before units
        for column in ("unit_column", "unit_max_rows"):
            connection.execute(sa.text(f"ALTER TABLE releases DROP COLUMN {column}"))
    ledger = Ledger(location)  # a new connection upgrades it
    assert ledger.entries()[0].unit == "row"
    person = replace(gaussian(1.0, "person", 0.02), unit_column="customer_id", unit_max_rows=10)
    ledger.mark_spent(ledger.reserve(person).entry.id)
    assert [e.unit for e in ledger.entries()] == ["row", "'customer_id' <= 10 rows"]
    lines = totals(ledger)
    assert " row " in lines[2] and "'customer_id' <= 10 rows" in lines[3]
    warning = next(i for i, line in enumerate(lines) if line.startswith("WARNING"))
    assert "different privacy units (row, 'customer_id' <= 10 rows)" in lines[warning]
    assert "its total above is what one row can lose" in lines[warning + 1]
    assert lines[warning + 2].startswith("  unit 'customer_id': ε=")
    assert "over 1 DP release(s)" in lines[warning + 2]
    running = ledger.reserve(replace(person, run_id="again")).entry
    with pytest.raises(LedgerError, match="unit_max_rows=10"):  # a retry under another K
        ledger.reserve(replace(person, run_id="again", unit_max_rows=5))
    ledger.cancel(running.id)
