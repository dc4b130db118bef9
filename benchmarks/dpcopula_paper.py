"""DPCopula in its own regime: large numeric domains (Li, Xiong & Jiang, EDBT 2014).

    python -m benchmarks.dpcopula_paper --shape gaussian --rows 100000 --seeds 3 \\
        --private-pgm /work/mbi-repo --peer-python /work/peers-venv/bin/python
    python -m benchmarks.dpcopula_paper --report      # tables and plot from the cached rows

Two shapes. "gaussian", the paper's synthetic data: k = 8 attributes from a multivariate normal
with a fixed public correlation matrix (random, seed 2014), each scaled to mean 500, σ 125 and
cut to the integers 0..999 (domain 1,000). "census": the census-like table of benchmarks/hybrid.py
(three small-domain attributes and four binned numeric ones whose dependence changes by stratum).

Methods side by side: DPCopula-Kendall, DPCopula-MLE, DPCopula-Hybrid (census only: it needs
small-domain attributes), the default ``marginals``, and private-pgm's MST (the authors' script,
run by benchmarks/peers.py's runner in the peers' venv). Every release runs in a child process
measured by ``benchmarks.peers.measured_run`` (wall and CPU seconds, peak RSS from wait4) and is
scored on its codes by ``dp_dask.evaluate.queries.CodeScorer``: the paper's metric (1,000 random
range-count queries with a range on every attribute, relative error with sanity bound 0.1 % of n),
1,000 range queries on 2 random numeric attributes each (same bound), and 1-/2-way TVD. Each
release is one JSON line in ``--results`` keyed by (shape, rows, method, ε, seed) and is not run
again (``--rerun`` does). The data are generated here, so this is the data owner's evaluation.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.dpcopula_sweep import EPSILONS  # the paper's ε grid, as on Adult
from benchmarks.hybrid import census_frame, census_schema
from benchmarks.paths import RESULTS_DIR
from benchmarks.peers import (
    DELTA,
    cache_key,
    export_codes,
    fitted_release,
    machine,
    measured_run,
    peer_versions,
    plain_log_ticks,
    run_load,
    run_peer,
    save_figure,
)
from dp_dask.checks import DpDaskWarning
from dp_dask.data.encode import encode_partition
from dp_dask.data.schema import Schema, load_schema
from dp_dask.evaluate.queries import PAPER_SANITY_SHARE, CodeScorer, range_query_workload
from dp_dask.evaluate.tables import markdown_table

RESULTS = RESULTS_DIR / "dpcopula-paper.jsonl"
GAUSSIAN_K, GAUSSIAN_DOMAIN = 8, 1_000
CORRELATION_SEED = 2014  # the public correlation matrix's seed
QUERIES = 1_000
NUMERIC_ATTRIBUTES = 2  # constrained attributes per "range_numeric" query
PEER_TIMEOUT_S = 600.0
# method -> dp_dask method name (None: private-pgm's MST, a peer)
METHODS = {"dpcopula": "dpcopula-kendall", "dpcopula-mle": "dpcopula-mle",
           "dpcopula-hybrid": "dpcopula-hybrid", "marginals": "marginals", "mst": None}
SHAPES = ("gaussian", "census")


def gaussian_correlation(k: int = GAUSSIAN_K, seed: int = CORRELATION_SEED) -> np.ndarray:
    """A fixed public correlation matrix: A·Aᵀ of a seeded normal k×k matrix, normalised."""
    a = np.random.default_rng(seed).standard_normal((k, k))
    c = a @ a.T
    scale = 1.0 / np.sqrt(np.diag(c))
    return c * scale[:, None] * scale[None, :]


def gaussian_schema(k: int = GAUSSIAN_K, domain: int = GAUSSIAN_DOMAIN) -> Schema:
    """k numeric attributes, one bin per integer 0..domain−1 (bins [v, v + 1), public bounds)."""
    edges = ["-inf", *range(1, domain), "inf"]
    attributes = [{"name": f"x{i}", "type": "numeric", "edges": edges, "min": 0,
                   "max": domain - 1} for i in range(k)]
    return load_schema({"schema_version": 1, "name": "dpcopula-gaussian",
                        "attributes": attributes})


def gaussian_frame(rows: int, seed: int = 0, k: int = GAUSSIAN_K,
                   domain: int = GAUSSIAN_DOMAIN) -> pd.DataFrame:
    """rows × k integers: the latent normal at mean domain/2 and σ domain/8, cut to 0..domain−1."""
    rng = np.random.default_rng(seed)
    z = rng.multivariate_normal(np.zeros(k), gaussian_correlation(k), size=rows,
                                method="cholesky")
    values = np.clip(np.floor(domain / 2 + domain / 8 * z), 0, domain - 1).astype(np.int64)
    return pd.DataFrame(values, columns=[f"x{i}" for i in range(k)])


def table(shape: str, rows: int) -> tuple[Schema, pd.DataFrame]:
    """The shape's schema and its generated table (data seed 0)."""
    if shape == "gaussian":
        return gaussian_schema(), gaussian_frame(rows)
    if shape == "census":
        return census_schema(), census_frame(rows)
    raise ValueError(f"shape must be one of {SHAPES}, got {shape!r}")


def scorer(schema: Schema, codes: np.ndarray) -> CodeScorer:
    """The paper's all-attribute range queries and 2-attribute numeric ones, s = 0.1 % of n."""
    numeric = [i for i, a in enumerate(schema.attributes) if a.kind == "numeric"]
    workloads = {"range_all": range_query_workload(schema, QUERIES, None, seed=0),
                 "range_numeric": range_query_workload(schema, QUERIES, NUMERIC_ATTRIBUTES,
                                                       seed=1, among=numeric)}
    return CodeScorer.build(codes, schema, workloads, PAPER_SANITY_SHARE * codes.shape[1])


def pair_groups(scores: dict[str, Any], schema: Schema) -> dict[str, float]:
    """Mean 2-way TVD over small×large pairs (categorical with numeric) and large×large ones."""
    numeric = {i for i, a in enumerate(schema.attributes) if a.kind == "numeric"}
    groups: dict[str, list[float]] = {"small_large": [], "large_large": []}
    for key, value in scores["pair_tvd"].items():
        i, j = map(int, key.split(","))
        if (i in numeric) != (j in numeric):
            groups["small_large"].append(value)
        elif i in numeric:
            groups["large_large"].append(value)
    return {f"two_way_tvd_{name}": float(np.mean(v)) for name, v in groups.items() if v}


# --- one release ---------------------------------------------------------------------------------

def run_child(method: str, shape: str, rows: int, epsilon: float, seed: int, save: Path) -> None:
    """In the child process: generate the table, one release of ``method``, its codes to ``save``
    (.npy, m × rows) and its seconds beside it."""
    import time

    warnings.simplefilter("ignore", DpDaskWarning)  # open end bins: decoding only
    schema, frame = table(shape, rows)
    start = time.perf_counter()
    fitted, synthetic = fitted_release(METHODS[method], schema, frame, epsilon, DELTA, seed)
    seconds = time.perf_counter() - start
    np.save(save, encode_partition(synthetic, schema))
    found = {"release_s": round(seconds, 2)}
    correlation = getattr(fitted.model, "correlation", None)
    if shape == "gaussian" and correlation is not None:  # one global copula: Kendall or MLE
        found["correlation_error"] = correlation_error(correlation)
    save.with_suffix(".json").write_text(json.dumps(found))


def correlation_error(estimate: np.ndarray) -> float:
    """Mean |ρ̂ − ρ| over the pairs, against the Gaussian table's public latent correlation
    (the copula's own: cutting a normal to 1,000 integers changes it by far less than noise)."""
    upper = np.triu_indices(GAUSSIAN_K, 1)
    return float(np.abs(estimate[upper] - gaussian_correlation()[upper]).mean())


def run_ours(method: str, shape: str, rows: int, epsilon: float, seed: int, work: Path,
             score: CodeScorer) -> dict[str, Any]:
    save = work / f"{method}-{shape}-{rows}-eps{epsilon:g}-seed{seed}.npy"
    argv = [sys.executable, "-m", "benchmarks.dpcopula_paper", "--child", method, "--shape",
            shape, "--rows", str(rows), "--epsilons", repr(epsilon), "--seed-value", str(seed),
            "--save", str(save)]
    measured = measured_run(argv, log=save.with_suffix(".log"))
    row = {"command": shlex.join(["python"] + argv[1:]), **measured}
    if measured["returncode"] != 0:
        row["status"] = f"failed (exit {measured['returncode']})"
        row["log_tail"] = save.with_suffix(".log").read_text(errors="replace")[-2000:]
        return row
    row.update(json.loads(save.with_suffix(".json").read_text()), status="ok")
    row["scores"] = score.score(np.load(save))
    return row


def run_mst(shape: str, rows: int, epsilon: float, seed: int, work: Path, schema: Schema,
            frame: pd.DataFrame, score: CodeScorer, args: argparse.Namespace) -> dict[str, Any]:
    data = work / f"table-{shape}-{rows}"
    csv, domain = data / "data.csv", data / "domain.json"
    if not csv.exists():
        export_codes(frame, schema, data)
    row = run_peer(cache_key("mst", f"{shape}-{rows}", epsilon, DELTA, seed),
                   checkout=args.private_pgm.resolve(), python=args.peer_python, options={},
                   data_csv=csv, domain_json=domain, work=work, frame=frame, schema=schema,
                   q3_sample=0, timeout=args.peer_timeout,
                   versions=peer_versions(args.peer_python), score=score.score)
    if "errors" in row:
        row["scores"] = row.pop("errors")
    return row


def load_results(path: Path) -> dict[tuple, dict[str, Any]]:
    """Rows by (shape, rows, method, ε, seed); a later line replaces an earlier one."""
    if not path.exists():
        return {}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {result_key(r): r for r in rows}


def result_key(row: dict[str, Any]) -> tuple:
    return (row["shape"], int(row["rows"]), row["method"], float(row["epsilon"]),
            int(row["seed"]))


def run_grid(args: argparse.Namespace) -> None:
    warnings.simplefilter("ignore", DpDaskWarning)
    done = load_results(args.results)
    for shape in args.shape:
        for rows in args.rows:
            schema, frame = table(shape, rows)
            score = scorer(schema, encode_partition(frame, schema))
            methods = [m for m in args.methods if m != "dpcopula-hybrid" or shape == "census"]
            with tempfile.TemporaryDirectory(prefix="dpcopula-paper-") as work:
                for epsilon in args.epsilons:
                    for method in methods:
                        for seed in range(args.seeds):
                            key = (shape, rows, method, float(epsilon), seed)
                            if key in done and not args.rerun and (
                                    done[key]["status"] == "ok"
                                    or done[key]["status"].startswith("timeout")):
                                continue
                            if method == "mst" and args.private_pgm is None:
                                continue
                            print(f"{shape} n={rows:,} {method} ε={epsilon:g} seed {seed}",
                                  flush=True)
                            if method == "mst":
                                row = run_mst(shape, rows, epsilon, seed, Path(work), schema,
                                              frame, score, args)
                            else:
                                row = run_ours(method, shape, rows, epsilon, seed, Path(work),
                                               score)
                            row.update(shape=shape, rows=rows, method=method,
                                       epsilon=float(epsilon), seed=seed, machine=machine())
                            if row["status"] == "ok":
                                row["scores"] |= pair_groups(row["scores"], schema)
                            print(f"  {row['status']}: {row['wall_s']} s, "
                                  f"{row['peak_rss_mib']} MiB, load {run_load(row):.1f}, "
                                  f"range_all {summary(row, 'range_all')}", flush=True)
                            with args.results.open("a") as out:
                                out.write(json.dumps(row, sort_keys=True) + "\n")


def summary(row: dict[str, Any], metric: str) -> str:
    return f"{row['scores'][metric]['mean']:.4f}" if row["status"] == "ok" else "—"


# --- report -------------------------------------------------------------------------------------

COLUMNS = {"range all (paper)": ("range_all", "mean"), "range all median": ("range_all", "median"),
           "range numeric": ("range_numeric", "mean"), "2-way TVD": ("two_way_tvd_mean", None),
           "small×large": ("two_way_tvd_small_large", None),
           "large×large": ("two_way_tvd_large_large", None),
           "1-way TVD": ("one_way_tvd_mean", None), "ρ error": ("correlation_error", None)}


def value(row: dict[str, Any], metric: tuple[str, str | None]) -> float:
    name, stat = metric
    got = row["scores"].get(name, row.get(name, np.nan))  # ρ error: beside the scores
    return got[stat] if stat else got


def report_table(rows: list[dict[str, Any]], shape: str, n: int) -> pd.DataFrame:
    """Per ε and method: mean over seeds of each metric, wall s, peak RSS GiB (timeouts shown)."""
    lines = []
    for epsilon in sorted({r["epsilon"] for r in rows}):
        for method in METHODS:
            group = [r for r in rows if r["shape"] == shape and r["rows"] == n
                     and r["method"] == method and r["epsilon"] == epsilon]
            if not group:
                continue
            ok = [r for r in group if r["status"] == "ok"]
            line: dict[str, Any] = {"ε": f"{epsilon:g}", "method": method,
                                    "seeds": f"{len(ok)}/{len(group)}"}
            for title, metric in COLUMNS.items():
                values = [value(r, metric) for r in ok]
                line[title] = (f"{np.mean(values):.4f}" if values and np.isfinite(values).all()
                               else "—")
            line["wall s"] = (f"{np.mean([r['wall_s'] for r in ok]):.0f}" if ok
                              else group[0]["status"])
            line["peak RSS GiB"] = f"{max(r['peak_rss_mib'] for r in group) / 1024:.2f}"
            lines.append(line)
    frame = pd.DataFrame(lines)
    if shape == "gaussian":
        frame = frame.drop(columns=["small×large", "large×large"], errors="ignore")
    else:
        frame = frame.drop(columns=["ρ error"], errors="ignore")
    return frame


def plot(rows: list[dict[str, Any]], out: Path) -> Path:
    """The paper's metric (range queries on every attribute) against ε, one line per method, one
    panel per shape × rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(r["shape"], r["rows"]) for r in rows}, key=lambda p: (-len(p[0]), p[1]))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False)
    for ax, (shape, n) in zip(axes[0], panels):
        for colour, method in enumerate(METHODS):  # one colour per method in every panel
            points: dict[float, list[float]] = {}
            for r in rows:
                if (r["shape"], r["rows"], r["method"]) == (shape, n, method) \
                        and r["status"] == "ok":
                    points.setdefault(r["epsilon"], []).append(r["scores"]["range_all"]["mean"])
            if points:
                eps = sorted(points)
                ax.plot(eps, [np.mean(points[e]) for e in eps], "o-", label=method,
                        color=f"C{colour}")
        ax.set(xscale="log", yscale="log", xlabel="ε", title=f"{shape}, n = {n:,}")
        plain_log_ticks(ax, sorted({r["epsilon"] for r in rows}))
        if ax.lines:
            ax.legend(fontsize=7)
    axes[0][0].set_ylabel("relative error, s = 0.1 % of n (mean)")
    return save_figure(fig, "DPCopula's regime: range queries on every attribute", out, dpi=110)


def paper_metric_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The paper's metric (mean over seeds) per shape × rows × method, one column per ε."""
    ok = pd.DataFrame([{"shape": SHAPES.index(r["shape"]), "n": r["rows"],
                        "method": list(METHODS).index(r["method"]), "ε": r["epsilon"],
                        "error": r["scores"]["range_all"]["mean"]}
                       for r in rows if r["status"] == "ok"])
    table = ok.pivot_table(index=["shape", "n", "method"], columns="ε", values="error",
                           aggfunc="mean").reset_index()
    table["shape"] = [SHAPES[i] for i in table["shape"]]
    table["n"] = [f"{n:,}" for n in table["n"]]
    table["method"] = [list(METHODS)[i] for i in table["method"]]
    table.columns = [f"ε = {c:g}" if isinstance(c, float) else c for c in table.columns]
    return table.map(lambda v: f"{v:.4f}" if isinstance(v, float) else v).replace("nan", "—")


def report(path: Path, out: Path) -> str:
    rows = list(load_results(path).values())
    parts = ["### The paper's metric against ε (range queries on every attribute, s = 0.1 % of n)"
             f"\n\n{markdown_table(paper_metric_table(rows))}\n"]
    for shape in SHAPES:
        for n in sorted({r["rows"] for r in rows if r["shape"] == shape}):
            parts.append(f"### {shape}, n = {n:,}\n\n"
                         f"{markdown_table(report_table(rows, shape, n))}\n")
    text = "\n".join(parts)
    out.with_suffix(".md").write_text(text)
    plot(rows, out.with_suffix(".png"))
    return text


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", nargs="+", choices=SHAPES, default=list(SHAPES))
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000])
    parser.add_argument("--epsilons", type=float, nargs="+", default=list(EPSILONS))
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1")
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    parser.add_argument("--private-pgm", type=Path, help="checkout holding mechanisms/mst.py")
    parser.add_argument("--peer-python", help="python of the peers' venv (mbi 2.0)")
    parser.add_argument("--peer-timeout", type=float, default=PEER_TIMEOUT_S)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--rerun", action="store_true", help="run cached releases again")
    parser.add_argument("--report", type=Path, nargs="?", const=RESULTS_DIR / "dpcopula-paper",
                        help="write STEM.md and STEM.png from --results (no runs)")
    parser.add_argument("--child", choices=[m for m, v in METHODS.items() if v],
                        help=argparse.SUPPRESS)
    parser.add_argument("--seed-value", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--save", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        run_child(args.child, args.shape[0], args.rows[0], args.epsilons[0], args.seed_value,
                  args.save)
    elif args.report:
        print(report(args.results, args.report))
    else:
        if "mst" in args.methods and args.private_pgm and not args.peer_python:
            raise SystemExit("--peer-python is needed to run MST")
        run_grid(args)


if __name__ == "__main__":
    main()
