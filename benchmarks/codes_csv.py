"""A CSV of numeric codes released with no schema, against a hand schema from its published data
dictionary (issue 65: "a CSV of numeric codes (no storage types) is drafted as numbers and codes,
not as text, and its release scores within a few points of a hand schema's on a marginal-based
benchmark"; docs/from-raw.md, "A CSV of numeric codes").

The table: private-pgm's discretized Adult (``shared/data/adult_discrete``: ``adult.csv``,
48,842 rows of 14 integer-coded columns, a CSV, so no storage types) and its data dictionary
``adult-domain.json`` (column → number of codes n, the codes 0..n−1: public, as a published
codebook). The closest public stand-in we hold for the issue's census benchmark of coded survey
answers. Two paths, each at total ε = 1, δ = 1e-9, the default method, seeded numpy noise (so
the numbers reproduce; not private releases), for each seed:

* ``no_schema``: the one command on the CSV path (:func:`dp_dask.synthesize` without a schema:
  :data:`dp_dask.one_command.DRAFT_SHARE` of (ε, δ) drafts the schema under DP, the rest
  releases). It never reads the dictionary. Its drafted type of each column (number or text) and
  the codes the draft kept (a dictionary code alone in its bin) or merged (codes sharing a bin)
  are recorded; codes the drafted range clamps into an end bin count as merged.
* ``hand_schema``: every column categorical over its dictionary's n codes, all of (ε, δ) on the
  release.
* ``hand_release_part`` (``--paths``, a diagnosis): the hand schema at the no-schema path's
  release part of (ε, δ) alone, so that a gap between the two paths splits into what the
  draft's spend costs and what its drafted domain costs.

Score, the k-marginal metric of NIST's SDNist (v2, ``sdnist/report/score/kmarginal.py``,
``KMarginal._compute_score``; the 2018–2020 NIST challenges' marginal score, NIST TN 2151): for
a marginal over a set of columns, t and s the target's and the release's densities over the
cells (each cell's rows over all rows; a cell either table lacks has density 0), its total
variation distance TVD = ½ Σ |t − s| ∈ [0, 1]; the score is 1000 × (1 − mean TVD), the mean
over every marginal of k columns (SDNist writes it (2 − mean Σ|t − s|) × 500). SDNist v2 scores
its 2-way marginals; this module reports k = 3 (every one of the C(14, 3) = 364 triples) as
``score_3way`` (the headline), k = 2 (every pair) as ``score_2way``, and the mean 1-way and
2-way TVD. Cells are the code values as released: a value the dictionary lacks (a drafted bin
beyond the codes) is a cell of its own, density 0 in the target.

    python -m benchmarks.codes_csv [--seeds 3] [--first-seed 0] [--rows N]
        [--paths no_schema hand_schema hand_release_part] [--out F]
    python -m benchmarks.codes_csv --report F

An evaluation for the data owner: it reads raw values and is not differentially private.
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.paths import SHARED
from dp_dask.cluster import dask_client
from dp_dask.one_command import DRAFT_SHARE, synthesize

DATA = SHARED / "data" / "adult_discrete"
EPSILON = 1.0
DELTA = 1e-9
PATHS = ("no_schema", "hand_schema", "hand_release_part")


def dictionary() -> dict[str, int]:
    """The published data dictionary: column → its number of codes (0..n−1)."""
    return json.loads((DATA / "adult-domain.json").read_text())


def hand_schema(codes: dict[str, int]) -> dict[str, Any]:
    """The schema a data owner writes from the dictionary: each column categorical over its
    codes."""
    return {"schema_version": 1, "name": "adult_codes", "attributes": [
        {"name": column, "type": "categorical", "categories": [str(c) for c in range(n)]}
        for column, n in codes.items()]}


def table(rows: int | None, work: Path) -> Path:
    """The CSV the paths read: the whole file, or a seeded sample of ``rows`` of its rows
    written as a CSV (text cells, as the file)."""
    if rows is None:
        return DATA / "adult.csv"
    frame = pd.read_csv(DATA / "adult.csv", dtype=str)
    path = work / f"adult-{rows}.csv"
    frame.sample(n=rows, random_state=0).to_csv(path, index=False)
    return path


def tvd(real: pd.DataFrame, released: pd.DataFrame, columns: tuple[str, ...]) -> float:
    """½ Σ |t − s| over the cells of the marginal on ``columns`` (module docstring)."""
    target = real.groupby(list(columns)).size() / len(real)
    synthetic = released.groupby(list(columns)).size() / len(released)
    return 0.5 * float(target.subtract(synthetic, fill_value=0).abs().sum())


def marginal_scores(real: pd.DataFrame, released: pd.DataFrame) -> dict[str, Any]:
    """The k-marginal scores (k = 2, 3) and mean 1-, 2-way TVD of ``released`` against
    ``real``, both integer codes; per column its 1-way TVD and the mean 2-way TVD of its
    pairs (which columns lose the points)."""
    # cells keyed by the codes' text: a column released as text meets the same cells
    real, released = real.astype(str), released.astype(str)
    tvds = {k: {columns: tvd(real, released, columns)
                for columns in itertools.combinations(real.columns, k)} for k in (1, 2, 3)}
    means = {k: float(np.mean(list(found.values()))) for k, found in tvds.items()}
    return {"score_3way": 1000 * (1 - means[3]), "score_2way": 1000 * (1 - means[2]),
            "tvd_1way": means[1], "tvd_2way": means[2], "tvd_3way": means[3],
            "column_tvd_1way": {c: tvds[1][(c,)] for c in real.columns},
            "column_tvd_2way": {c: float(np.mean([v for pair, v in tvds[2].items()
                                                  if c in pair])) for c in real.columns}}


def drafted_codes(attribute: dict[str, Any], n: int) -> dict[str, Any]:
    """The drafted attribute's type and, over the dictionary's codes 0..n−1, how many it keeps
    alone in a bin and which it merges (runs of codes sharing a bin, e.g. ``"63-84"``); its
    other bins hold no code (a drafted range wider than the codes)."""
    found = {"type": attribute["type"], "dtype": attribute.get("dtype")}
    if attribute["type"] != "numeric":
        return found
    inner = [float(e) for e in attribute["edges"] if e not in ("-inf", "inf")]
    bins = np.searchsorted(inner, np.arange(n), side="right")
    groups = [list(g) for _, g in itertools.groupby(range(n), key=lambda c: bins[c])]
    return found | {"bins": len(inner) + 1, "kept": sum(len(g) == 1 for g in groups),
                    "merged": [f"{g[0]}-{g[-1]}" for g in groups if len(g) > 1],
                    "fine": "fine" in attribute}


def _codes(column: pd.Series) -> pd.Series:
    """A released column as integer codes where every value is a number (a categorical
    release decodes to the code's text), else as released."""
    try:
        return pd.to_numeric(column)
    except (ValueError, TypeError):
        return column


def release(path: str, data: Path, seed: int,
            codes: dict[str, int]) -> tuple[pd.DataFrame, dict[str, Any], dict[str, str]]:
    """One release of ``data`` by ``path`` (module docstring): its values as codes, its record
    and its columns' dtypes as released."""
    schema = None if path == "no_schema" else hand_schema(codes)
    part = 1 - DRAFT_SHARE if path == "hand_release_part" else 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the release's noise warnings: scored, not read
        released = synthesize(str(data), epsilon=part * EPSILON, delta=part * DELTA,
                              schema=schema,
                              ledger=False, noise_sampler="numpy", noise_seed=seed,
                              dataset_name="adult_codes")
    dtypes = {column: str(dtype) for column, dtype in released.dtypes.items()}
    return released.apply(_codes), released.attrs["dp_dask"], dtypes


def run(path: str, data: Path, seed: int, codes: dict[str, int]) -> dict[str, Any]:
    """One release scored against the CSV it read, with the draft's columns (no_schema)."""
    real = pd.read_csv(data)
    released, record, dtypes = release(path, data, seed, codes)
    kept = [column for column in real if column in released]
    line = {"path": path, "seed": seed, "rows": len(real), "released_rows": len(released),
            "dtypes_out": dtypes, **marginal_scores(real[kept], released[kept]),
            "left_out": sorted(set(real) - set(released))}
    if record["schema"] is not None:
        drafted = {a["name"]: a for a in record["schema"]["attributes"]}
        line["drafted"] = {c: drafted_codes(drafted[c], n) if c in drafted else None
                           for c, n in codes.items()}
    return line


def report(path: Path) -> None:
    """The table of docs/from-raw.md ("A CSV of numeric codes") from a results file."""
    lines = [json.loads(line) for line in path.read_text().splitlines() if line]
    print("| path | seeds | 3-way score (per seed) | 2-way score | mean 1-way TVD | "
          "mean 2-way TVD |")
    print("|---|---|---|---|---|---|")
    for name in PATHS:
        runs = [line for line in lines if line["path"] == name]
        if not runs:
            continue
        scores = ", ".join(f"{r['score_3way']:.0f}" for r in runs)
        print(f"| {name} | {len(runs)} | {np.mean([r['score_3way'] for r in runs]):.1f} "
              f"({scores}) | {np.mean([r['score_2way'] for r in runs]):.1f} | "
              f"{np.mean([r['tvd_1way'] for r in runs]):.4f} | "
              f"{np.mean([r['tvd_2way'] for r in runs]):.4f} |")
    drafts = [line for line in lines if line["path"] == "no_schema"]
    if not drafts:
        return
    codes = dictionary()
    print("\n| column | codes | drafted type (seeds) | bins | bins beyond the codes | codes "
          "kept alone | merged |")
    print("|---|---|---|---|---|---|---|")
    for column, n in codes.items():
        seen = [line["drafted"][column] for line in drafts]
        types = ", ".join(sorted({f"{s['type']} {s['dtype']}" if s else "left out"
                                  for s in seen}))
        numeric = [s for s in seen if s and "bins" in s]
        print(f"| {column} | {n} | {types} | "
              + " / ".join(str(s["bins"]) + (" (fine)" if s["fine"] else "") for s in numeric)
              + " | " + " / ".join(str(s["bins"] - s["kept"] - len(s["merged"])) for s in numeric)
              + " | " + " / ".join(str(s["kept"]) for s in numeric) + " | "
              + " / ".join(", ".join(s["merged"]) or "-" for s in numeric) + " |")
    names = [name for name in PATHS if any(line["path"] == name for line in lines)]
    print("\n| column | 1-way TVD (" + " / ".join(names) + ") | mean 2-way TVD of its pairs |")
    print("|---|---|---|")
    for column in codes:
        means = {k: [np.mean([line[k][column] for line in lines if line["path"] == name])
                     for name in names] for k in ("column_tvd_1way", "column_tvd_2way")}
        print(f"| {column} | " + " / ".join(f"{v:.4f}" for v in means["column_tvd_1way"])
              + " | " + " / ".join(f"{v:.4f}" for v in means["column_tvd_2way"]) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--rows", type=int, help="a seeded sample of this many rows (default: "
                        "the whole CSV)")
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS[:2]))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/codes_csv.jsonl"))
    parser.add_argument("--report", type=Path)
    args = parser.parse_args()
    if args.report:
        report(args.report)
        return
    codes = dictionary()
    with tempfile.TemporaryDirectory() as work, \
            dask_client(n_workers=1, threads_per_worker=2, quiet=True):
        data = table(args.rows, Path(work))
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for path in args.paths:
                line = run(path, data, seed, codes)
                with args.out.open("a") as out:
                    out.write(json.dumps(line) + "\n")
                print(f"{path} seed {seed}: 3-way score {line['score_3way']:.1f}, 2-way "
                      f"{line['score_2way']:.1f}", flush=True)


if __name__ == "__main__":
    main()
