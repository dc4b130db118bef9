"""The table of bad inputs in docs/reliability.md; the reliability tests run it row by row."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "reliability.md"
ROW = re.compile(r"^\| `(?P<case>[a-z0-9-]+)` \| (?P<input>.+?) \| `(?P<message>.+?)` \| "
                 r"(?P<exit>\d+) \|$")


@dataclass(frozen=True)
class Row:
    case: str
    message: str  # an excerpt of stderr, the temporary directory written as <tmp>
    exit_code: int


def rows() -> dict[str, Row]:
    found = [ROW.match(line) for line in DOC.read_text().splitlines()]
    return {m["case"]: Row(m["case"], m["message"], int(m["exit"])) for m in found if m}


def assert_row(case: str, code: int, stderr: str, tmp: Path) -> None:
    """The exit code and message of ``case`` are the ones docs/reliability.md states."""
    row = rows()[case]
    assert code == row.exit_code, stderr
    assert row.message.replace("<tmp>", str(tmp)) in stderr, stderr


def run_cli(args: list[str], env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``dp-dask`` in a fresh process group, killed with its workers after ``timeout`` s so that
    a hang fails the test instead of stalling the suite."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    command = [sys.executable, "-m", "dp_dask.cli", *args]
    with subprocess.Popen(command, env=environment, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, cwd=ROOT,
                          start_new_session=True) as process:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise AssertionError(f"dp-dask {' '.join(args)} hung for over {timeout} s") from None
    return subprocess.CompletedProcess(command, process.returncode, out, err)
