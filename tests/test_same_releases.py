"""Same releases: every method, fitted with the seeded numpy noise sampler and written with a
fixed sampling seed on the demo data and a subsample of Adult, writes the rows, model and
metadata whose hashes tests/golden/releases.json holds (the cases and the hashing:
tests/golden_releases.py).

A refactor must leave them unchanged (issue 55). After an intended change of releases, rewrite
the golden file and say why in the commit:

    python tests/golden_releases.py --update

or ``DP_DASK_UPDATE_GOLDEN=1 pytest tests/test_same_releases.py`` (each case rewrites its entry).
"""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest
from golden_releases import (
    CASES,
    GOLDEN,
    UPDATE_ENV,
    case_hashes,
    changed_parts,
    float_summary,
    input_frame,
    read_golden,
    summaries_differ,
    write_golden,
)

from dp_dask.synthesizer import Synthesizer


@pytest.fixture(scope="module")
def frames():
    return functools.cache(input_frame)  # each input read once


def test_every_method_has_a_case_on_both_inputs():
    methods = {method for _, method, _ in CASES.values()}
    assert set(Synthesizer.methods) | {"stats"} <= methods
    for data in ("demo", "adult"):
        assert {m for d, m, _ in CASES.values() if d == data} == methods


def test_the_golden_file_holds_every_case():
    if os.environ.get(UPDATE_ENV):
        pytest.skip(f"{UPDATE_ENV} set: the cases rewrite the golden file")
    assert sorted(read_golden()) == sorted(CASES), (
        f"{GOLDEN.name} and tests/golden_releases.CASES list different cases: run "
        "python tests/golden_releases.py --update")


@pytest.mark.parametrize("case", list(CASES))
def test_release_is_unchanged(client, tmp_path, frames, case):
    got = case_hashes(case, tmp_path, frames)
    if os.environ.get(UPDATE_ENV):
        write_golden({**read_golden(), case: got})
        return
    expected = read_golden().get(case)
    assert expected is not None, (f"{case}: no golden hashes; run "
                                  "python tests/golden_releases.py --update")
    changed = changed_parts(expected, got)
    data, method, options = CASES[case]
    assert not changed, (
        f"{case} (method {method!r}, options {options}, {data} data): the release's "
        f"{', '.join(changed)} differ from {GOLDEN.name}. If the change is intended, run "
        "python tests/golden_releases.py --update and say why in the commit")


def test_float_summaries_hold_a_machines_drift_and_catch_a_change():
    """The drift an AVX-512 machine showed against an AVX2 one (2.9e-10 of each correlation)
    passes; one correlation moved by 1e-5, or two rows swapped, fails."""
    correlation = np.random.default_rng(0).uniform(-1, 1, (80, 80))
    expected = float_summary(correlation)
    assert not summaries_differ(expected, float_summary(correlation * (1 + 2.9e-10)))
    changed = correlation.copy()
    changed[3, 5] += 1e-5
    assert summaries_differ(expected, float_summary(changed))
    swapped = correlation.copy()
    swapped[[3, 5]] = swapped[[5, 3]]
    assert summaries_differ(expected, float_summary(swapped))
    assert changed_parts({"model_floats": {"a": expected}, "rows": "x"},
                         {"model_floats": {"a": float_summary(changed)}, "rows": "x"}) == [
        "model_floats"]
