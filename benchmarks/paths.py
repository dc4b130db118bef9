"""Where the benchmarks read the public data and keep their results, in one place.

The public data sets (UCI Adult) sit under ``$DP_DASK_SHARED/data``: by default ``shared/`` beside
the repository, as for tests/conftest.py and in CI. Measured results are committed under
``benchmarks/results/`` (docs/benchmarks.md and docs/results-adult.md cite them)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DP_DASK_SHARED", ROOT.parent / "shared"))
ADULT_CSV = SHARED / "data" / "adult" / "adult.csv"
ADULT_TEST_CSV = SHARED / "data" / "adult" / "adult_test.csv"
RESULTS_DIR = ROOT / "benchmarks" / "results"


def load_test_helper(name: str) -> ModuleType:
    """The helper module ``tests/<name>.py`` (e.g. its S3 server), shared with the benchmarks: the
    tests own their machinery and never import benchmarks/. Loaded from its file because tests/
    is no package (an installed package named ``tests`` would shadow it on sys.path)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
