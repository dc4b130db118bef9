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

import numpy as np

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


def plot(results: list[dict[str, Any]], out: Path) -> Path:
    """Seconds (log-log, with the ideal T₁/k) and parallel efficiency against workers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks.peers import plain_log_ticks, save_figure

    results = sorted(results, key=lambda r: r["workers"])
    workers = [r["workers"] for r in results]
    eff = efficiency(results)
    fig, (time_ax, eff_ax) = plt.subplots(1, 2, figsize=(9, 3.6))
    for stage, label in (("read_encode_count", "read+encode+count"),
                         ("sample_write", "sampling+write"), ("total", "total")):
        seconds = [r["total_s"] if stage == "total" else r["timings"].get(stage, np.nan)
                   for r in results]
        line, = time_ax.plot(workers, seconds, "o-", label=label)
        time_ax.plot(workers, [seconds[0] * workers[0] / k for k in workers], ":",
                     color=line.get_color())
        eff_ax.plot(workers, [eff[k].get(stage, np.nan) for k in workers], "o-", label=label)
    time_ax.set(xscale="log", yscale="log", xlabel="workers", ylabel="seconds (dotted: ideal)")
    eff_ax.set(xscale="log", xlabel="workers", ylabel="parallel efficiency", ylim=(0, 1.1))
    eff_ax.axhline(0.7, color="grey", lw=0.8, ls="--")
    for ax in (time_ax, eff_ax):
        plain_log_ticks(ax, workers)
    time_ax.legend(fontsize=8)
    return save_figure(fig, f"{results[0]['shape']} shape, {results[0]['rows']:,} rows counted, "
                       f"{results[0]['sample_rows']:,} sampled", out, dpi=120)


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
    parser.add_argument("--plot", type=Path, help="also draw time and efficiency to this PNG")
    args = parser.parse_args(argv)
    if args.from_json:
        results = [json.loads(line) for line in args.from_json.read_text().splitlines()]
        print(table(results))
        if args.plot:
            plot(results, args.plot)
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
    if args.plot:
        plot(results, args.plot)
    return results


if __name__ == "__main__":
    main()
