"""Same releases: every method, fitted with the seeded numpy noise sampler and written with a
fixed sampling seed on the demo data and a subsample of Adult, writes the rows, model and
metadata whose hashes tests/golden/releases.json holds (the cases and the hashing:
tests/golden_releases.py).

A refactor must leave them unchanged (issue 55). After an intended change of releases, rewrite
the golden file and say why in the commit:

    python -m tests.golden_releases --update

or ``DP_DASK_UPDATE_GOLDEN=1 pytest tests/test_same_releases.py`` (each case rewrites its entry).
"""

from __future__ import annotations

import functools
import os

import pytest
from golden_releases import (
    CASES,
    GOLDEN,
    UPDATE_ENV,
    case_hashes,
    input_frame,
    read_golden,
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
        "python -m tests.golden_releases --update")


@pytest.mark.parametrize("case", list(CASES))
def test_release_is_unchanged(client, tmp_path, frames, case):
    got = case_hashes(case, tmp_path, frames)
    if os.environ.get(UPDATE_ENV):
        write_golden({**read_golden(), case: got})
        return
    expected = read_golden().get(case)
    assert expected is not None, (f"{case}: no golden hashes; run "
                                  "python -m tests.golden_releases --update")
    changed = sorted(k for k in expected.keys() | got.keys() if expected.get(k) != got.get(k))
    data, method, options = CASES[case]
    assert not changed, (
        f"{case} (method {method!r}, options {options}, {data} data): the release's "
        f"{', '.join(changed)} differ from {GOLDEN.name}. If the change is intended, run "
        "python -m tests.golden_releases --update and say why in the commit")
