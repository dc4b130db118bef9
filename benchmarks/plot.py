"""Plot benchmark results (JSON lines from ``benchmarks.run --json``): time vs rows and vs d.

    python -m benchmarks.plot results.jsonl docs/benchmarks.png
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
    fig, (by_rows, by_d) = plt.subplots(1, 2, figsize=(12, 4.5))
    # Left: DSS-shape (d = 674) at several row counts, fit-only and full runs apart.
    for workers in sorted({r["workers"] for r in results}):
        for sampled, style in ((True, "o-"), (False, "s--")):
            points = sorted((r["rows"], r["total_s"]) for r in results
                            if r["shape"] == "dss" and r["workers"] == workers
                            and bool(r["sample_rows"]) == sampled)
            if points:
                rows, seconds = zip(*points)
                what = "fit + sample/write" if sampled else "fit only"
                by_rows.plot(rows, seconds, style, label=f"{workers} worker(s), {what}")
    by_rows.set(xscale="log", yscale="log", xlabel="input rows (DSS shape, d = 674)",
                ylabel="wall seconds", title="time vs rows")
    by_rows.legend(fontsize=8)
    # Right: each shape's full run (largest rows, 2 workers), stacked by stage, against d.
    full = {}
    for r in results:
        if r["workers"] == 2 and r["sample_rows"] and r["rows"] >= full.get(r["shape"], {}).get(
                "rows", 0):
            full[r["shape"]] = r
    runs = sorted(full.values(), key=lambda r: r["d"])
    labels = [f"{r['shape']}\nd={r['d']}\n{r['rows']:,} rows" for r in runs]
    bottom = [0.0] * len(runs)
    for label, key in STAGES:
        heights = [r["timings"].get(key, 0.0) for r in runs]
        by_d.bar(labels, heights, bottom=bottom, label=label)
        bottom = [b + h for b, h in zip(bottom, heights)]
    by_d.set(ylabel="wall seconds", title="time by stage vs d (2 workers)")
    by_d.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return out


if __name__ == "__main__":
    lines = Path(sys.argv[1]).read_text().splitlines()
    print(plot([json.loads(line) for line in lines if line.strip()], Path(sys.argv[2])))
