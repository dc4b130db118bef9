"""Where the benchmarks read the public data and keep their results, in one place.

The public data sets (UCI Adult) sit under ``$DP_DASK_SHARED/data``: by default ``shared/`` beside
the repository, as for tests/conftest.py and in CI. Measured results are committed under
``benchmarks/results/`` (docs/benchmarks.md and docs/results-adult.md cite them)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DP_DASK_SHARED", ROOT.parent / "shared"))
ADULT_CSV = SHARED / "data" / "adult" / "adult.csv"
ADULT_TEST_CSV = SHARED / "data" / "adult" / "adult_test.csv"
RESULTS_DIR = ROOT / "benchmarks" / "results"
