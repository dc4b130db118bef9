"""The empirical audit of the methods as released (dp_dask.audit, ``dp-dask audit``).

Every method and notion passes (ε̂ ≤ the claimed ε at the audit's δ, ε̂ a lower bound at
confidence 95 %); each planted bug fails. Seeded: the trials' noise is the numpy sampler's with
fixed seeds, so the verdicts are deterministic. The slow half (every scenario at its default
trials, the second Gaussian plant) runs with ``-m slow`` and in ``dp-dask audit`` itself.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from dp_dask.audit.plants import PLANTS
from dp_dask.audit.report import DEFAULT_TRIALS, TRIALS, format_table, run_audit
from dp_dask.audit.runner import published
from dp_dask.audit.scenarios import CANARY, scenarios


def _one(name: str, trials: int, plant: str | None = None):
    (result,) = run_audit([name], trials=trials, plant=plant)
    print(format_table([result]))
    return result


def test_the_neighbours_differ_in_every_measured_cell_they_can() -> None:
    # The canary moves every 1-way histogram and 2-way table of the marginals by its full
    # sensitivity (the worst case): two cells of each, by one.
    scenario = scenarios()["marginals"]
    release = scenario.prepare()
    d0, d1 = (published(release(side, 7)) for side in (0, 1))
    measured = [k for k in d0 if k.startswith("measurement")]
    assert len(measured) == 4 + 6
    for key in measured:
        change = d1[key] - d0[key]  # same seed: same noise
        assert sorted(np.round(change[change != 0], 9)) == [-1.0, 1.0], key
    assert scenario.frames[1].iloc[-1].to_dict() == CANARY


@pytest.mark.parametrize("name", ["dpcopula-kendall", "dpview", "stats", "schema-draft",
                                  "marginals-fine"])
def test_audit_passes(name: str) -> None:
    result = _one(name, 150)
    assert result.passed, result
    assert result.epsilon_lower_bound <= result.claimed_epsilon


def test_audit_of_mle_passes() -> None:
    # A sorted input: the neighbour shifts every row by one position. Fails before the rows
    # are put in a random order inside the count graph (ε̂ = 2.54 > ε = 2 at 150 trials).
    assert _one("dpcopula-mle", 150).passed


@pytest.mark.parametrize("plant", ["sigma-halved", "mle-order-restored", "data-dependent-bin"])
def test_planted_bug_fails_the_audit(plant: str) -> None:
    trials = {"sigma-halved": 1500, "mle-order-restored": 150, "data-dependent-bin": 150}[plant]
    result = _one(PLANTS[plant][1], trials, plant)
    assert not result.passed, result
    assert result.epsilon_lower_bound > result.claimed_epsilon


@pytest.mark.slow
def test_sensitivity_undercounted_fails_the_audit() -> None:
    result = _one("marginals", 2000, "sensitivity-undercounted")
    assert not result.passed, result


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(scenarios()) - {"dpcopula-mle"}))
def test_audit_passes_at_default_trials(name: str) -> None:
    result = _one(name, TRIALS.get(name, DEFAULT_TRIALS))
    assert result.passed, result
    assert math.isfinite(result.claimed_epsilon)


def test_cli_exit_code_and_table(tmp_path) -> None:
    out = tmp_path / "audit.json"
    ok = subprocess.run([sys.executable, "-m", "dp_dask.cli", "audit", "--method",
                         "dpcopula-kendall", "--trials", "60", "--json", str(out),
                         "--quiet-progress"], capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr
    assert "dpcopula-kendall" in ok.stdout and " ok" in ok.stdout
    assert '"passed": true' in out.read_text()
    bug = subprocess.run([sys.executable, "-m", "dp_dask.cli", "audit", "--plant",
                          "data-dependent-bin", "--trials", "60", "--quiet-progress"],
                         capture_output=True, text=True, timeout=300)
    assert bug.returncode == 1, bug.stderr
    assert "FAIL" in bug.stdout
