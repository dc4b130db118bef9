"""The worker curve: the whole pipeline at several worker counts, per stage, with efficiency.

    python -m benchmarks.scaling --shape dss --rows 8000000 --sample-rows 1600000 \\
        --workers 16 8 4 2 1 --json scaling.jsonl

One ``benchmarks.run`` per worker count (same generated input, 1 thread per worker), each
appended to ``--json`` as it finishes, so a run cut short keeps what it measured. Parallel
efficiency of a stage at k workers is T(k₀)·k₀ / (T(k)·k) against the fewest workers measured
(k₀ = 1 when present). Choose rows so the input (250 k-row files) and the sampled partitions
(100 k rows at DSS's d) divide evenly among the largest worker count: a last round with idle
workers is the partitioning's loss, not the code's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.run import SHAPES, append_json_line, run

# The stages that run on the workers; the rest run on the driver and do not scale with them.
WORKER_STAGES = ("read_encode_count", "sample_write")


def efficiency(results: list[dict[str, Any]]) -> dict[int, dict[str, float]]:
    """Per worker count, each worker stage's (and the total's) parallel efficiency."""
    base = min(results, key=lambda r: r["workers"])
    out = {}
    for result in results:
        k, k0 = result["workers"], base["workers"]
        times = {**{s: result["timings"][s] for s in WORKER_STAGES if s in result["timings"]},
                 "total": result["total_s"]}
        ref = {**base["timings"], "total": base["total_s"]}
        out[k] = {stage: ref[stage] * k0 / (t * k) for stage, t in times.items()}
    return out


def table(results: list[dict[str, Any]]) -> str:
    eff = efficiency(results)
    lines = ["| workers | read+encode+count s | sampling+write s | driver stages s | total s "
             "| efficiency count / sample / total | peak worker GiB |",
             "|---|---|---|---|---|---|---|"]
    for result in sorted(results, key=lambda r: r["workers"]):
        t, k = result["timings"], result["workers"]
        driver = result["total_s"] - sum(t.get(s, 0.0) for s in WORKER_STAGES)
        workers_peak = max(v for name, v in result["peak_rss_gib"].items() if name != "driver")
        e = eff[k]
        lines.append(f"| {k} | {t['read_encode_count']:.1f} | {t.get('sample_write', 0):.1f} | "
                     f"{driver:.1f} | {result['total_s']:.1f} | {e['read_encode_count']:.0%} / "
                     f"{e.get('sample_write', float('nan')):.0%} / {e['total']:.0%} | "
                     f"{workers_peak:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="dss")
    parser.add_argument("--rows", type=int, help="input rows (default: the shape's)")
    parser.add_argument("--sample-rows", type=int, help="synthetic rows (default: as input)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--method", default="marginals")
    parser.add_argument("--memory-limit", default="4GiB", help="per worker")
    parser.add_argument("--noise-sampler", choices=("opendp", "numpy"), default="opendp")
    parser.add_argument("--root", type=Path, default=Path("/tmp/dp_dask_bench"))
    parser.add_argument("--json", type=Path, help="append each run as one JSON line")
    parser.add_argument("--from-json", type=Path,
                        help="print the table of earlier runs in this file and stop")
    args = parser.parse_args(argv)
    if args.from_json:
        results = [json.loads(line) for line in args.from_json.read_text().splitlines()]
        print(table(results))
        return results
    results = []
    for workers in args.workers:
        result = run(args.shape, rows=args.rows, workers=workers,
                     memory_limit=args.memory_limit, sample_rows=args.sample_rows,
                     root=args.root, blas_threads=1, method=args.method,
                     noise_sampler=args.noise_sampler)
        results.append(result)
        print(f"{workers} worker(s): total {result['total_s']:.1f} s", flush=True)
        append_json_line(args.json, result)
    print(table(results))
    return results


if __name__ == "__main__":
    main()
