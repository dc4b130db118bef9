"""Steps every release shares, written once (issue 66): the ledger reservation (fit, schema
draft, stats) is dp_dask.privacy.ledger.reserving; every one-pass count is
dp_dask.data.counts.partition_reduction."""

from __future__ import annotations

import ast
from pathlib import Path

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from conftest import SMALL_SCHEMA_PATH

from dp_dask.data.counts import partition_reduction
from dp_dask.data.draft_kinds import merge_counts
from dp_dask.data.schema import load_schema
from dp_dask.privacy.ledger import (
    FAILED,
    RESERVED,
    SPENT,
    BudgetExceededError,
    Entry,
    Ledger,
    reserving,
)
from dp_dask.privacy.noise import laplace_noise

PACKAGE = Path(__file__).resolve().parents[1] / "dp_dask"
SHA = load_schema(SMALL_SCHEMA_PATH).sha256()


def calls(path: Path, names: set[str]) -> list[str]:
    """``file:line: name`` of each call of a function or method named in ``names``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", None))
            if name in names:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {name}")
    return found


def test_item4_the_ledger_is_reserved_and_charged_in_one_place():
    """Only the ledger module reserves and charges; a fit, a draft and stats ask `reserving`."""
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if path.name != "ledger.py"
             for hit in calls(path, {"reserve", "charging"})]
    assert not found, ("ledger reservations outside dp_dask.privacy.ledger.reserving: "
                       + "; ".join(found))


def request(run: str, epsilon: float) -> Entry:
    return Entry("people", SHA, run, epsilon, 0.0, "laplace", "test", None, True, "opendp")


def test_item4_a_refused_request_cancels_the_release_s_other_reservations(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.set_budget("people", 1.0, 1e-6)
    with pytest.raises(BudgetExceededError):
        with reserving(ledger, [request("a", 0.6), request("b", 0.6)]):
            pytest.fail("the block runs only once every request is reserved")
    assert ledger.entries("people") == []  # "a" was reserved, then dropped with "b"
    # a failure before any noise cancels; after the first draw the charge stays, failed
    with pytest.raises(RuntimeError), reserving(ledger, [request("c", 0.5)]):
        raise RuntimeError("before any noise")
    with pytest.raises(RuntimeError), reserving(ledger, [request("d", 0.5)]) as booking:
        assert booking.entries[0].status == RESERVED and not booking.reused
        laplace_noise(np.zeros(1, dtype=np.int64), 1.0, sensitivity=1, sampler="numpy",
                      rng=np.random.default_rng(0))
        raise RuntimeError("after the noise")
    with reserving(ledger, [request("e", 0.4)]) as booking:
        booking.charge.settle(booking.entries[0], 0.3)  # known only once the work has run
    statuses = {e.run_id: (e.status, e.epsilon) for e in ledger.entries("people")}
    assert statuses == {"d": (FAILED, 0.5), "e": (SPENT, 0.3)}  # "c" cancelled: dropped
    with reserving(None, [request("f", 9.0)]) as booking:  # no ledger: nothing reserved
        assert booking.entries == [] and not booking.reused


def test_item4_every_one_pass_count_is_the_one_reduction():
    """The counting modules map over partitions only through data.counts.partition_reduction."""
    counting = ["data/draft.py", "data/draft_dp.py", "methods/marginals/cliques.py",
                "methods/marginals/adaptive.py", "methods/marginals/unit_shape.py",
                "data/counts.py"]
    found = []
    for name in counting:
        path = PACKAGE / name
        allowed = {"partition_reduction"} if name == "data/counts.py" else set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name not in allowed:
                found += [f"{name}:{hit.lineno}: {node.name}" for hit in ast.walk(node)
                          if isinstance(hit, ast.Call)
                          and getattr(hit.func, "attr", None) == "to_delayed"]
    assert not found, ("partitions reduced outside data.counts.partition_reduction: "
                       + "; ".join(found))


def draft_like_counts(frame: pd.DataFrame) -> dict:
    """A partition's counts as a draft holds them: an array, a Series of texts, a row count."""
    return {"cells": np.bincount(frame["x"], minlength=4),
            "texts": frame["word"].value_counts(), "rows": len(frame)}


def test_item4_the_tree_reduction_gives_the_flat_merge(client):
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"x": rng.integers(0, 4, 900),
                          "word": rng.choice(["a", "b", "c", "d", "e"], 900)})
    ddf = dd.from_pandas(frame, npartitions=9)
    tree = partition_reduction(ddf, draft_like_counts, combine=merge_counts,
                               split_every=2).compute()
    flat = merge_counts([draft_like_counts(part) for part in
                          (ddf.get_partition(i).compute() for i in range(9))])
    assert tree["rows"] == flat["rows"] == 900
    np.testing.assert_array_equal(tree["cells"], np.bincount(frame["x"], minlength=4))
    pd.testing.assert_series_equal(tree["texts"], flat["texts"])
    assert tree["texts"].to_dict() == frame["word"].value_counts().to_dict()
