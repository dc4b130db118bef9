"""What the ledger tests run in other processes: small, so that a forked child imports nothing
more than the ledger (tests/test_ledger_postgres.py)."""

from __future__ import annotations

import time
from typing import Any

from dp_dask.privacy.ledger import APPROX_DP, BudgetExceededError, Entry, Ledger

SHA = "0" * 64


def laplace(epsilon: float, run: str, name: str = "people", delta: float = 0.0) -> Entry:
    return Entry(name, SHA, run, epsilon, delta, "laplace", "basic", None, True, "opendp",
                 notion=APPROX_DP)


def race(location: str, run: str, start: Any, results: Any) -> None:
    """Wait for the others, then try to reserve ε=0.25 (as another machine's fit would)."""
    ledger = Ledger(location)
    start.wait()
    try:
        ledger.reserve(laplace(0.25, run))
        results.put("recorded")
    except BudgetExceededError:
        results.put("refused")
    except Exception as exc:  # reported to the test, which fails on anything else
        results.put(f"error: {exc}")


def reserve_and_hang(location: str, run: str, results: Any) -> None:
    """A fit killed between its reservation and its spend: it reserves, says so, and waits."""
    ledger = Ledger(location)
    results.put(ledger.reserve(laplace(0.25, run)).entry.id)
    time.sleep(120)
