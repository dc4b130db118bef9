"""A cluster that cannot make progress fails with a message naming the limit to raise, never
hangs: real LocalClusters started by ``dp-dask`` in a subprocess, killed by a hard timeout if
the watchdog regresses."""

from __future__ import annotations

from pathlib import Path

import pytest
from reliability_table import assert_row, run_cli

COMMAND = ["synth", "--schema", "adult", "--workers", "1", "--quiet", "--dataset-name", "adult"]
CASES: dict[str, dict[str, str]] = {
    # a worker process passes 120 MiB at start or in its first task: killed and restarted forever
    "memory-limit-tiny": {"--memory-limit": "120MiB"},
    # every worker paused for memory (its pause threshold set below its own footprint)
    "workers-paused": {"env:DASK_DISTRIBUTED__WORKER__MEMORY__PAUSE": "0.01"},
}


@pytest.mark.parametrize("case", CASES)
def test_stalled_cluster_fails_with_a_message(case, adult_csv, tmp_path: Path):
    options = [item for key, value in CASES[case].items() if not key.startswith("env:")
               for item in (key, value)]
    env = {key[4:]: value for key, value in CASES[case].items() if key.startswith("env:")}
    done = run_cli([*COMMAND, "--data", str(adult_csv), "--out", str(tmp_path / "out"),
                    *options], env={"DASK_DP_DASK__STALL_TIMEOUT": "3s", **env})
    assert_row(case, done.returncode, done.stderr, tmp_path)
    assert "raise --memory-limit" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "out").exists()
