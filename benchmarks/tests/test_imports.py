"""Every benchmark script imports against today's package: a refactor that moves a name the
scripts use fails here, in the fast part of .ci/benchmarks, not only in the harness runs."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

SCRIPTS = sorted(p.stem for p in Path(__file__).parents[1].glob("*.py") if p.stem != "__init__")
# run inside the peers' own environment (jax, private-pgm's mbi), not this one
PEER_ONLY = {"mbi_adapter"}


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s not in PEER_ONLY])
def test_script_imports(script: str) -> None:
    importlib.import_module(f"benchmarks.{script}")


def test_peer_only_scripts_exist() -> None:
    assert PEER_ONLY <= set(SCRIPTS)
