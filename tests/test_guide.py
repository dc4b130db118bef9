"""docs/guide.md: its commands marked ``<!-- run -->`` run, in order, in one empty folder."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys

import pytest
from conftest import ROOT

from dp_dask.privacy.labels import OWNER_ONLY

GUIDE = ROOT / "docs" / "guide.md"
# The guide's whole session (~1 min on 2 idle cores): CI's .ci/harness step, not the default suite.
pytestmark = pytest.mark.harness


def run_blocks() -> list[str]:
    """The fenced bash blocks right after a ``<!-- run -->`` line."""
    return re.findall(r"^<!-- run -->\n```bash\n(.*?)^```", GUIDE.read_text(), re.M | re.S)


def test_guide_commands_run(tmp_path):
    blocks = run_blocks()
    assert len(blocks) == 4
    # `dp-dask` and `python3` of this checkout and interpreter, whatever is installed
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, command in (("dp-dask", "-m dp_dask.cli"), ("python3", "")):
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" {command} "$@"\n')
        shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(ROOT), "DP_DASK_LEDGER": str(tmp_path / "unused.sqlite")}
    script = "set -euo pipefail\n" + "\n".join(blocks)
    done = subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "nothing spent again" in done.stdout  # the retried fit reused its model
    assert re.search(r"^1 +\S+ +census@sha256:\w+ +guide-1 ", done.stdout, re.M)
    assert (work / "release" / "_COMPLETE.json").is_file()
    conditioned = json.loads((work / "older" / "metadata.json").read_text())["sampling"]
    assert conditioned["conditioned"]["where"] == "age >= 60 and sex == 'Female'"
    assert OWNER_ONLY in (work / "evaluation" / "report.html").read_text().lower()
    assert OWNER_ONLY in (work / "evaluation" / "values.md").read_text().lower()  # typed release
    assert not (tmp_path / "unused.sqlite").exists()  # the guide's export took effect
