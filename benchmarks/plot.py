"""Plot benchmark results (JSON lines from ``benchmarks.run --json``): time vs rows and vs d.

    python -m benchmarks.plot results.jsonl benchmarks/results/benchmarks.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from benchmarks.run import STAGES  # noqa: E402


def plot(results: list[dict], out: Path) -> Path:
    fig, (by_rows, rows_memory, by_d) = plt.subplots(1, 3, figsize=(17, 4.5))
    # Left: the paper's copula on the DSS shape (d = 674) at several row counts.
    for workers in sorted({r["workers"] for r in results}):
        for sampled, style in ((True, "o-"), (False, "s--")):
            points = sorted((r["rows"], r["total_s"]) for r in results
                            if r["shape"] == "dss" and r["workers"] == workers
                            and method(r) == "copula" and bool(r["sample_rows"]) == sampled)
            if points:
                rows, seconds = zip(*points)
                what = "fit + sample/write" if sampled else "fit only"
                by_rows.plot(rows, seconds, style, label=f"{workers} worker(s), {what}")
    by_rows.set(xscale="log", yscale="log", xlabel="input rows (DSS shape, d = 674)",
                ylabel="wall seconds", title="copula: time vs rows")
    by_rows.legend(fontsize=8)
    # Middle: the default method end to end (as many rows sampled as read) on the Adult shape:
    # time, and the peak memory of the driver and of the largest worker, against rows.
    curve = sorted((r for r in results if r["shape"] == "adult" and method(r) == "marginals"
                    and r["sample_rows"] == r["rows"] and r["workers"] == 2),
                   key=lambda r: r["rows"])
    if curve:
        rows = [r["rows"] for r in curve]
        rows_memory.plot(rows, [r["total_s"] for r in curve], "o-", color="C0",
                         label="wall seconds")
        rows_memory.set(xscale="log", yscale="log", xlabel="rows read and sampled (Adult shape)",
                        ylabel="wall seconds", title="marginals: time and memory vs rows")
        memory = rows_memory.twinx()
        memory.plot(rows, [r["peak_rss_gib"]["driver"] for r in curve], "s--", color="C1",
                    label="driver peak GiB")
        memory.plot(rows, [max(v for k, v in r["peak_rss_gib"].items() if k != "driver")
                           for r in curve], "^--", color="C2", label="largest worker peak GiB")
        memory.set(ylabel="peak RSS GiB", ylim=(0, 1.0))
        lines = rows_memory.get_legend_handles_labels()
        more = memory.get_legend_handles_labels()
        rows_memory.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="upper left")
    # Right: each shape's largest 2-worker copula run, stacked by stage, against d.
    full: dict[str, dict] = {}
    for r in results:
        if (r["workers"] == 2 and r["sample_rows"] and method(r) == "copula"
                and r["rows"] >= full.get(r["shape"], {}).get("rows", 0)):
            full[r["shape"]] = r
    runs = sorted(full.values(), key=lambda r: r["d"])
    labels = [f"{r['shape']}\nd={r['d']}\n{r['rows']:,} rows" for r in runs]
    bottom = [0.0] * len(runs)
    for label, key in STAGES["copula"]:
        heights = [r["timings"].get(key, 0.0) for r in runs]
        by_d.bar(labels, heights, bottom=bottom, label=label)
        bottom = [b + h for b, h in zip(bottom, heights)]
    by_d.set(ylabel="wall seconds", title="copula: time by stage vs d (2 workers)")
    by_d.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return out


def method(result: dict) -> str:
    """The run's method; runs from before benchmarks.run had --method were the copula's."""
    return result.get("method", "copula")


if __name__ == "__main__":
    lines = Path(sys.argv[1]).read_text().splitlines()
    print(plot([json.loads(line) for line in lines if line.strip()], Path(sys.argv[2])))
