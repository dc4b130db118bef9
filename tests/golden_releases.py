"""Golden hashes of seeded releases, one case per method and option path, on the demo data and
a subsample of Adult: what tests/test_same_releases.py compares a refactor's releases with.

Each case fits on small real input with the seeded numpy noise sampler, writes a release with a
fixed sampling seed and records SHA-256s of what it wrote:

* ``rows``: the Parquet's column names and values, read back with pyarrow, in row order;
* ``columns``: the Parquet's column names and Arrow types;
* ``model``: the saved model (model.json, the arrays of model.npz), and ``metadata``: the
  release's metadata.json, both less what changes from run to run (creation time, library
  versions): a SHA-256 of everything but their finite floats (keys, strings, integers, array
  names, dtypes and shapes, where values are not finite), and beside it (``model_floats``,
  ``metadata_floats``) a summary of each document's or array's finite floats, compared within
  RTOL. The last bits of a sum or a BLAS product move with the machine: an AVX-512 CPU against
  an AVX2 one (OpenBLAS's kernels, numpy's SIMD loops, numba's target) moved the copula's
  correlations by up to 2.9e-10 and a marginals table by 2.1e-9 of their values, which flipped
  a hash of 32 mantissa bits in 6 of 28 cases (2026-12-07);

and, for ``stats`` (no rows to sample), its written histograms.csv and metadata.json.
The Parquet file's bytes are not hashed: they carry the writer's version. The hashes hold across
processes, hash seeds and cluster layouts, with numba's compiled code: under NUMBA_DISABLE_JIT=1
the marginals' consistent tables differ in their last bits (their rows do not).

Rewrite the golden file after an intended change of releases (and say why in the commit):

    python tests/golden_releases.py --update

or run tests/test_same_releases.py with ``DP_DASK_UPDATE_GOLDEN=1``.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

import dp_dask.methods  # noqa: F401  (registers every method in Synthesizer.methods)
from dp_dask.data.demo import generate_census
from dp_dask.data.schema import load_schema
from dp_dask.stats import release_stats
from dp_dask.synthesizer import Synthesizer

GOLDEN = Path(__file__).with_name("golden") / "releases.json"
UPDATE_ENV = "DP_DASK_UPDATE_GOLDEN"
SHARED = Path(os.environ.get("DP_DASK_SHARED", Path(__file__).resolve().parents[2] / "shared"))
ADULT_CSV = SHARED / "data" / "adult" / "adult.csv"

DEMO_ROWS, DEMO_SEED = 2_000, 3
ADULT_EVERY = 16  # every 16th row of Adult's 32,561: 2,036 rows, independent of any RNG
EPSILON, NOISE_SEED = 1.0, 5
RELEASE_ROWS, PARTITION_ROWS, SAMPLING_SEED = 500, 250, 11  # two partitions
VOLATILE = {"created", "versions"}  # keys that differ between identical runs
# Tolerance of a float summary, relative to its scale (the sum of magnitudes or of squares):
# 135x the largest drift measured between an AVX-512 and an AVX2 run of all 28 cases (7.4e-12,
# a marginals table's sum of squares), while one of 6,400 correlations moved by 1e-5 fails.
RTOL = 1e-9
FLOAT = "<float>"  # what stands for a finite float in the exactly hashed structure

# (data, method, options): every method, and marginals' option paths.
CASES: dict[str, tuple[str, str, dict[str, Any]]] = {
    f"{data}/{name}": (data, method, options)
    for data in ("demo", "adult")
    for name, method, options in [
        ("marginals", "marginals", {}),  # replace-one, its automatic plan, fine grids
        ("marginals-coarse", "marginals", {"schema": "coarse"}),  # no fine grids
        ("marginals-all", "marginals", {"tables": "all"}),
        # at ε = 1 the automatic plan is a tree already (case "marginals"): forced where it
        # would measure every pair
        ("marginals-tree", "marginals", {"tables": "tree", "epsilon": 64.0}),
        ("marginals-add-remove", "marginals", {"neighbours": "add_remove"}),
        ("marginals-adaptive", "marginals", {"rounds": 2, "accountant": "zcdp"}),
        ("copula", "copula", {}),
        ("dpcopula-kendall", "dpcopula-kendall", {}),
        ("dpcopula-mle", "dpcopula-mle", {}),
        ("dpcopula-hybrid", "dpcopula-hybrid", {"small_domain": 2}),
        ("dpview", "dpview", {}),
        ("dpview+", "dpview+", {}),
        ("stats-laplace", "stats", {}),
        ("stats-tabular-ddp", "stats", {"mechanism": "tabular-ddp", "network_share": 0.5}),
    ]
}


def input_frame(data: str) -> pd.DataFrame:
    """The case's private input: the seeded demo data, or every ADULT_EVERY-th row of Adult."""
    if data == "demo":
        return generate_census(DEMO_ROWS, DEMO_SEED, partition_rows=1_000).compute()
    if not ADULT_CSV.exists():
        raise FileNotFoundError(f"public Adult data not found at {ADULT_CSV} (set DP_DASK_SHARED)")
    return pd.read_csv(ADULT_CSV).iloc[::ADULT_EVERY].reset_index(drop=True)


def case_schema(data: str, variant: str | None) -> Any:
    """The built-in schema of ``data``; "coarse": the same without its fine grids."""
    if variant is None:
        return data
    spec = load_schema(data).to_json()
    for attribute in spec["attributes"]:
        attribute.pop("fine", None)
    return load_schema(spec)


def _sha(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _structure(document: Any, floats: list[float]) -> Any:
    """``document`` without its VOLATILE keys, at any depth, each finite float replaced by FLOAT
    and appended to ``floats`` (in key order)."""
    if isinstance(document, dict):
        return {k: _structure(document[k], floats) for k in sorted(document) if k not in VOLATILE}
    if isinstance(document, list):
        return [_structure(v, floats) for v in document]
    if isinstance(document, float) and np.isfinite(document):
        floats.append(document)
        return FLOAT
    return document


def float_summary(values: np.ndarray) -> list[float]:
    """Count, sum of magnitudes, sum, a sum weighted by position (an order change moves it) and
    sum of squares of ``values``' finite entries: what RTOL compares."""
    v = np.asarray(values, dtype=np.float64).ravel()
    v = np.where(np.isfinite(v), v, 0.0)
    weights = np.cos(np.arange(v.size))
    return [float(v.size), float(np.abs(v).sum()), float(v.sum()), float(v @ weights),
            float(v @ v)]


def summaries_differ(expected: list[float], got: list[float]) -> bool:
    """Whether two float_summary lists differ by more than RTOL of their scale."""
    if len(expected) != len(got) or expected[0] != got[0]:
        return True
    magnitude, squares = max(expected[1], got[1]), max(expected[4], got[4])
    scales = [magnitude, magnitude, magnitude, squares]
    return any(abs(e - g) > RTOL * scale for e, g, scale in zip(expected[1:], got[1:], scales))


def floats_differ(expected: dict[str, list[float]], got: dict[str, list[float]]) -> bool:
    """Whether two ``*_floats`` entries name other parts or any part's summary differs."""
    return expected.keys() != got.keys() or any(summaries_differ(expected[k], got[k])
                                                for k in expected)


def _json_hashes(path: Path) -> tuple[str, list[float]]:
    floats: list[float] = []
    structure = _structure(json.loads(path.read_text()), floats)
    return _sha(structure), float_summary(np.array(floats))


def model_hashes(path: Path) -> dict[str, Any]:
    """``model``: model.json's structure (less VOLATILE) and its arrays' names, dtypes, shapes,
    integer values and non-finite entries; ``model_floats``: a float_summary per part."""
    structure, summary = _json_hashes(path / "model.json")
    digest = hashlib.sha256(structure.encode())
    floats = {"model.json": summary}
    for file in sorted(path.glob("*.npz")):
        with np.load(file, allow_pickle=False) as arrays:
            for name in sorted(arrays.files):
                array = arrays[name]
                digest.update(f"{file.name}/{name}:{array.dtype.str}:{array.shape}".encode())
                if array.dtype.kind == "f":
                    finite = np.isfinite(array)
                    digest.update(np.packbits(finite).tobytes())
                    digest.update(np.ascontiguousarray(array[~finite]).tobytes())
                    floats[f"{file.name}/{name}"] = float_summary(array)
                else:
                    digest.update(np.ascontiguousarray(array).tobytes())
    return {"model": digest.hexdigest(), "model_floats": floats}


def metadata_hashes(path: Path) -> dict[str, Any]:
    structure, summary = _json_hashes(path)
    return {"metadata": structure, "metadata_floats": {"metadata.json": summary}}


def changed_parts(expected: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """The keys of a case's hashes whose values differ: exactly, or beyond RTOL for floats."""
    def differ(key: str) -> bool:
        if key not in expected or key not in got:
            return True
        if key.endswith("_floats"):
            return floats_differ(expected[key], got[key])
        return expected[key] != got[key]
    return sorted(k for k in expected.keys() | got.keys() if differ(k))


def parquet_hashes(path: Path) -> dict[str, str]:
    """``rows`` and ``columns`` of the Parquet dataset at ``path``, its parts in name order."""
    parts = sorted(path.glob("*.parquet"))
    tables = [pq.read_table(part) for part in parts]
    names = tables[0].column_names
    return {
        "rows": _sha([[name, [v for t in tables for v in t.column(name).to_pylist()]]
                      for name in names]),
        "columns": _sha([[field.name, str(field.type)] for field in tables[0].schema]),
    }


def case_hashes(case: str, out: Path, frames: Callable[[str], pd.DataFrame]) -> dict[str, Any]:
    """Fit ``case`` on ``frames(data)`` on the current Dask client, write its release under
    ``out`` and return its hashes."""
    data, method, options = CASES[case]
    options = dict(options)
    schema = case_schema(data, options.pop("schema", None))
    common = {"epsilon": options.pop("epsilon", EPSILON), "noise_sampler": "numpy",
              "noise_seed": NOISE_SEED, "ledger": False}
    target = out / case.replace("/", "-")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # non-private sampler, open bins, dependent DP
        if method == "stats":
            paths = release_stats(frames(data), schema, **common, **options).write(target)
            return {"rows": hashlib.sha256(paths["csv"].read_bytes()).hexdigest(),
                    **metadata_hashes(paths["metadata"])}
        synthesizer = Synthesizer.create(method, schema, **common, **options).fit(frames(data))
        paths = synthesizer.write(target, RELEASE_ROWS, seed=SAMPLING_SEED,
                                  partition_rows=PARTITION_ROWS, with_model=True)
    return {**parquet_hashes(Path(paths["parquet"])), **model_hashes(Path(paths["model"])),
            **metadata_hashes(Path(paths["metadata"]))}


def read_golden() -> dict[str, dict[str, str]]:
    return json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}


def write_golden(hashes: dict[str, dict[str, str]]) -> None:
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps(dict(sorted(hashes.items())), indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tests/golden_releases.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--update", action="store_true", help=f"rewrite {GOLDEN}")
    parser.add_argument("cases", nargs="*", help="only these cases (default: all)")
    args = parser.parse_args(argv)
    from distributed import Client, LocalCluster

    from dp_dask.cluster import worker_malloc

    frames = functools.cache(input_frame)  # each input read once
    golden = read_golden()
    hashes = dict(golden)
    with worker_malloc():  # as tests/conftest.py's client
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, memory_limit="3GiB",
                               host="127.0.0.1", dashboard_address="127.0.0.1:0")
    with cluster, Client(cluster), tempfile.TemporaryDirectory() as out:
        for case in args.cases or CASES:
            start = time.perf_counter()
            hashes[case] = case_hashes(case, Path(out), frames)
            changed = changed_parts(golden.get(case, {}), hashes[case])
            verdict = ("new" if case not in golden else
                       f"CHANGED: {', '.join(changed)}" if changed else "same")
            print(f"{case}: {verdict} ({time.perf_counter() - start:.1f} s)", flush=True)
    if args.update:
        write_golden({case: hashes[case] for case in CASES if case in hashes})
        print(f"wrote {GOLDEN}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
