"""dp_dask beside the real peers: private-pgm's MST and AIM (mbi 2.0) on binned Adult.

    python -m benchmarks.peers --private-pgm DIR --peer-python PY --columns categorical \\
        --epsilons 0.5 1 2 5 --seeds 1 --ours marginals copula \\
        --out benchmarks/results/adult/peers --plot

Every release gets the same binned table (Adult through the built-in ``adult`` schema, all 15
attributes or its 9 categorical ones), the same ε and δ, and the same evaluation
(``dp_dask.evaluate.queries.evaluate_release``: Q1, Q2, a seeded sample of Q3; and, for releases
run here, 1,000 random 3-attribute range-count queries' relative error). Each release
runs in a child process of its own and is measured the same way: wall time, CPU time (user +
system) and peak RSS from ``wait4``, the load average next to it.

The peers are the authors' own scripts ``mechanisms/mst.py`` and ``mechanisms/aim.py`` from a
checkout (``--private-pgm``), with their default parameters, run by the Python of a separate
virtual env that holds ``mbi==2.0.0`` (``--peer-python``). Nothing of private-pgm is part of this
repository. Their results are slow to get, so each one is cached as one JSON line in ``--cache``
keyed by (peer, attribute set, ε, δ, seed, neighbouring notion), and reused unless
``--rerun-peers``. dp_dask rows are recomputed on every run; a new method is one more entry in
``OURS``.

See benchmarks/PEERS.md for how to get the peers and for the measured table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import dask.dataframe as dd
import numpy as np
import pandas as pd
import psutil
import pyarrow.dataset as pads
from scipy.optimize import brentq

from benchmarks.paths import ADULT_CSV, RESULTS_DIR
from dp_dask.data.decode import codes_to_frame
from dp_dask.data.encode import encode_partition
from dp_dask.data.io import TableSource
from dp_dask.data.schema import Schema, load_schema
from dp_dask.evaluate.queries import DEFAULT_Q3_SAMPLE, evaluate_release, range_query_errors
from dp_dask.evaluate.tables import markdown_table
from dp_dask.privacy.accounting import zcdp_rho_for

DELTA = 1e-9
DEFAULT_DATA = str(ADULT_CSV)
DEFAULT_CACHE = RESULTS_DIR / "adult" / "peers.jsonl"
CATEGORICAL = ("workclass", "education", "marital-status", "occupation", "relationship",
               "race", "sex", "native-country", "income")
COLUMN_SETS = ("categorical", "all")
WORKLOADS = ("Q1", "Q2", "Q3")
RANGE_QUERIES, RANGE_ATTRIBUTES = 1_000, 3
RANGE_KEY = "range3"  # mean relative error of the range-count queries
LOAD_POLL_S = 5.0
POLL_S = 0.05  # a measured run's memory, and whether it is done
MEMORY_STOP = "stopped at the memory limit"  # a run's status, see measured_run

# The peers: the authors' scripts, run as they are (their argparse defaults) on our code table.
PEERS = {"mst": ("MST (private-pgm)", "mechanisms/mst.py"),
         "aim": ("AIM (private-pgm)", "mechanisms/aim.py")}  # run in this order (MST is fast)

# Neighbouring notions a peer can be run under (dp_dask's names, as in ``neighbours=``). The
# scripts are calibrated for add/remove-one; "replace" runs them at the ε′ of ``peer_epsilon``.
ADD_REMOVE, REPLACE = "add_remove", "replace"
NEIGHBOURS = (ADD_REMOVE, REPLACE)
NEIGHBOURS_LABEL = {ADD_REMOVE: "", REPLACE: ", replace-one"}

# Runs a peer script in the peers' env (``python -c PEER_RUNNER SEED SCRIPT ARGS...``): the
# script seeded, on mbi 2.0 patched where the authors' scripts need it; the patches and why
# each is needed are in benchmarks/mbi_adapter.py.
PEER_RUNNER = Path(__file__).with_name("mbi_adapter.py").read_text()
PEER_VERSIONS = """\
import importlib.metadata as m, json, platform
names = ["mbi", "jax", "jaxlib", "numpy", "scipy", "pandas", "networkx"]
print(json.dumps({"python": platform.python_version(), **{n: m.version(n) for n in names}}))
"""


# --- the table every release sees ---------------------------------------------------------------

def table_schema(columns: str) -> Schema:
    """The built-in adult schema, whole ("all") or restricted to its 9 categorical attributes,
    or the schema in a JSON file (another table, given with ``--data``)."""
    if columns.endswith(".json"):
        return load_schema(columns)
    adult = load_schema("adult")
    if columns == "all":
        return adult
    if columns != "categorical":
        raise ValueError(f"columns must be one of {COLUMN_SETS} or a schema file, "
                         f"got {columns!r}")
    attributes = tuple(adult[name] for name in CATEGORICAL)
    assert all(a.kind == "categorical" for a in attributes)
    return Schema(attributes, name="adult-categorical")


def read_data(path: str | Path, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """The raw CSV as strings, all its columns or ``columns``."""
    # pyarrow's reader: the same frame (checked on Adult at 1 M rows) in half the CPU of
    # pandas' own, which at 10 M rows was a quarter of dp_dask's measured child process
    return pd.read_csv(path, dtype=str, keep_default_na=False, engine="pyarrow",
                       usecols=None if columns is None else list(columns))


def export_codes(frame: pd.DataFrame, schema: Schema, out: Path) -> tuple[Path, Path]:
    """private-pgm's data format: a CSV of integer codes (one column per attribute, header = the
    attribute names) and a domain JSON ``{"attr": size, ...}``. Returns (csv, domain) paths."""
    out.mkdir(parents=True, exist_ok=True)
    codes = encode_partition(frame, schema)  # (m, rows)
    csv, domain = out / "data.csv", out / "domain.json"
    pd.DataFrame(codes.T, columns=schema.names).to_csv(csv, index=False)
    domain.write_text(json.dumps(dict(zip(schema.names, schema.sizes.tolist()))))
    return csv, domain


def read_codes(csv: Path, schema: Schema) -> np.ndarray:
    """Codes (rows, m) of a code CSV (a peer's output), checked against the schema's domain."""
    frame = pd.read_csv(csv)
    missing = [name for name in schema.names if name not in frame.columns]
    if missing:
        raise ValueError(f"{csv}: no column(s) {missing}")
    return checked_codes(frame, schema, csv)


def checked_codes(frame: pd.DataFrame, schema: Schema, csv: Path) -> np.ndarray:
    """The schema's columns of a block of a code CSV as codes (rows, m), checked against the
    domain."""
    codes = frame[schema.names].to_numpy(dtype=np.int64)
    bad = (codes < 0) | (codes >= schema.sizes[None, :])
    if bad.any():
        column = schema.names[int(np.nonzero(bad.any(axis=0))[0][0])]
        raise ValueError(f"{csv}: column {column!r} has codes outside its domain")
    return codes


def codes_release(csv: Path, schema: Schema) -> dd.DataFrame:
    """A code CSV decoded to schema labels, the form ``evaluate_release`` reads: lazily, in
    blocks, so a peer's 100 M-row output is never held whole; codes outside the domain raise
    when computed."""
    codes = dd.read_csv(csv, usecols=schema.names, dtype=np.int64, blocksize="64MB")
    return codes.map_partitions(lambda block: codes_to_frame(checked_codes(block, schema, csv),
                                                             schema),
                                meta=codes_to_frame(np.zeros((0, schema.m), np.int64), schema))


def table_rows(data: TableSource) -> int:
    """Rows of a frame, or of a Parquet file or directory from its metadata (nothing read)."""
    if isinstance(data, pd.DataFrame | dd.DataFrame):
        return len(data)
    return pads.dataset(data, format="parquet").count_rows()


def is_parquet(data: str | Path) -> bool:
    """Whether ``--data`` names Parquet (a directory of parts or a ``.parquet`` file)."""
    return Path(data).is_dir() or str(data).endswith(".parquet")


# --- dp_dask's side: pluggable ------------------------------------------------------------------

Release = Callable[[Schema, TableSource, float, float, int], dd.DataFrame]


def dp_dask_release(method: str, *, own_rows: bool = False, **options: Any) -> Release:
    """dp_dask's ``method`` with its ``options``: fit, then n synthetic rows (schema labels),
    lazy on the cluster; with ``own_rows`` the model's own count instead, as a release samples
    (under add/remove its noisy n̂, as the peers release theirs). Seeded numpy noise, as in the
    data owner's evaluation (a real release uses OpenDP's samplers, same scale); Adult is
    public, so nothing goes to the privacy ledger."""

    def release(schema: Schema, data: TableSource, epsilon: float, delta: float,
                seed: int) -> dd.DataFrame:
        synthesizer = fitted(method, schema, data, epsilon, delta, seed, **options)
        return synthesizer.sample(None if own_rows else table_rows(data), seed=seed)

    return release


def fitted(method: str, schema: Schema, data: TableSource, epsilon: float, delta: float,
           seed: int, **options: Any) -> Any:
    """dp_dask's ``method`` fitted to ``data`` with seeded noise."""
    from dp_dask.synthesizer import Synthesizer

    return Synthesizer.create(method, schema, epsilon=epsilon, delta=delta,
                              noise_sampler="numpy", noise_seed=seed, ledger=False,
                              **options).fit(data)


def fitted_release(method: str, schema: Schema, frame: pd.DataFrame, epsilon: float,
                   delta: float, seed: int, **options: Any) -> tuple[Any, pd.DataFrame]:
    """The fitted synthesizer (its model, for a benchmark to inspect) and its n rows."""
    synthesizer = fitted(method, schema, frame, epsilon, delta, seed, **options)
    return synthesizer, synthesizer.sample(len(frame), seed=seed).compute()


# name -> (label in the table, function (schema, raw frame, ε, δ, seed) -> labels frame)
OURS: dict[str, tuple[str, Release]] = {
    "marginals": ("dp_dask marginals", dp_dask_release("marginals")),
    # the peers' neighbouring datasets (add or remove one row, n private): like for like
    "marginals-add-remove": ("dp_dask marginals, add/remove",
                             dp_dask_release("marginals", neighbours="add_remove")),
    # which 2-way tables, forced either way (default: by the threshold, docs/method.md)
    "marginals-add-remove-all": ("dp_dask marginals, add/remove, all pairs",
                                 dp_dask_release("marginals", neighbours="add_remove",
                                                 tables="all")),
    "marginals-add-remove-tree": ("dp_dask marginals, add/remove, tree",
                                  dp_dask_release("marginals", neighbours="add_remove",
                                                  tables="tree")),
    # n̂ rows, like google/dpsynth's releases (benchmarks/dpsynth.py); cliques pairs and auto
    "marginals-add-remove-nhat": ("dp_dask marginals, add/remove, n̂ rows",
                                  dp_dask_release("marginals", own_rows=True,
                                                  neighbours="add_remove")),
    "marginals-add-remove-auto": ("dp_dask marginals, add/remove, cliques auto",
                                  dp_dask_release("marginals", neighbours="add_remove",
                                                  config={"cliques": "auto"})),
    "marginals-add-remove-auto-nhat": ("dp_dask marginals, add/remove, cliques auto, n̂ rows",
                                       dp_dask_release("marginals", own_rows=True,
                                                       neighbours="add_remove",
                                                       config={"cliques": "auto"})),
    "marginals-all": ("dp_dask marginals, all pairs", dp_dask_release("marginals", tables="all")),
    "copula": ("dp_dask copula", dp_dask_release("copula")),
    "dpcopula-kendall": ("DPCopula-Kendall (k = 8)", dp_dask_release("dpcopula-kendall")),
    "dpcopula-mle": ("DPCopula-MLE (k = 8)", dp_dask_release("dpcopula-mle")),
    "dpview": ("DPView (d = 5)", dp_dask_release("dpview", view_size=5)),
    "dpview+": ("DPView+ (d = 5)", dp_dask_release("dpview+", view_size=5)),
}


def run_ours_child(name: str, columns: str, data: str, epsilon: float, delta: float, seed: int,
                   save: Path) -> None:
    """In the child process: one dp_dask release, written as Parquet parts (labels) under
    ``save``; its seconds, writing included, beside it. A CSV is read into memory first (as
    every tool in the harness gets it); Parquet is read by the release, out of core."""
    schema = table_schema(columns)
    # The schema's columns only, as a peer reads only its exported codes.
    source = data if is_parquet(data) else read_data(data, schema.names)
    start = time.perf_counter()
    synthetic = OURS[name][1](schema, source, epsilon, delta, seed)
    # Written by the workers, as a release writes its parts, not gathered on the driver first
    # (at 10 M rows gathering and writing there took 4 s more); labels as Parquet dictionaries,
    # read back by the parent as strings. Converting them to Python strings here took 14 CPU s.
    synthetic[list(schema.names)].to_parquet(save, write_index=False, overwrite=True)
    seconds = time.perf_counter() - start
    save.with_suffix(".json").write_text(json.dumps({"release_s": round(seconds, 2)}))


# --- measuring a child process ------------------------------------------------------------------

def measured_run(argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
                 log: Path, timeout: float | None = None,
                 memory_limit_gib: float | None = None) -> dict[str, Any]:
    """Run ``argv``; its wall and CPU seconds (from wait4), its peak RSS and the load around it.

    The peak is the largest VmHWM seen (:func:`tree_peak`, polled every POLL_S), not wait4's
    ``ru_maxrss``: Linux carries the parent's RSS at fork into the child's ``ru_maxrss`` (``python
    -c pass`` from a parent of 2 GiB reports 2.3 GiB), so that counted this harness's own memory
    (a 10 M-row frame) as the child's. Growth in a run's last POLL_S is not seen.

    With ``memory_limit_gib`` the run is stopped once its processes hold more than that,
    before the machine runs out, and where it stood (py-spy's dump of its stacks,
    where py-spy is installed) goes to the end of its log; the kernel's OOM killer is told to
    take it first should it outgrow the limit between two polls."""
    load_before = os.getloadavg()
    loads = [load_before[0]]  # 1-minute load average, sampled every LOAD_POLL_S during the run
    start = polled = time.perf_counter()
    with log.open("wb") as out:
        process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   preexec_fn=_oom_first if memory_limit_gib else None)
        timed_out = memory_stopped = False
        peak = 0
        while True:
            peak = max(peak, tree_peak(process.pid))
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - polled >= LOAD_POLL_S:
                loads.append(os.getloadavg()[0])
                polled = time.perf_counter()
            timed_out = bool(timeout) and time.perf_counter() - start > timeout
            memory_stopped = (memory_limit_gib is not None
                              and tree_rss(process.pid) > memory_limit_gib * 2**30)
            if timed_out or memory_stopped:
                # the peak as it stood when stopped: the polls' last one came before the check
                # that found it over the limit (it grew 202 -> 205 MiB in between under load)
                peak = max(peak, tree_peak(process.pid))
                if memory_stopped:
                    out.write(stacks(process.pid))
                    out.flush()
                process.kill()
                _, status, usage = os.wait4(process.pid, 0)
                break
            time.sleep(POLL_S)
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    return {"returncode": process.returncode, "timed_out": timed_out,
            "memory_stopped": memory_stopped,
            "wall_s": round(time.perf_counter() - start, 2),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_rss_mib": round(peak / 2**20, 1), "peak_rss": "VmHWM",
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
            "load_mean": round(float(np.mean(loads + [os.getloadavg()[0]])), 2),
            "load_max": round(max(loads + [os.getloadavg()[0]]), 2)}


def _oom_first() -> None:
    """In the child before it runs: the kernel's first choice if memory runs out (where the
    system lets a process say so; the watchdog does not depend on it)."""
    try:
        Path("/proc/self/oom_score_adj").write_text("1000")
    except OSError:
        pass


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and its descendants now (0 once it is gone)."""
    return sum(_tree_values(pid, lambda process: process.memory_info().rss))


def tree_peak(pid: int) -> int:
    """Peak resident bytes of a process and its descendants: each one's VmHWM, the high-water
    mark of its own memory since its exec, summed (an upper bound when there are several);
    0 once it is gone."""
    return sum(_tree_values(pid, lambda process: _vm_hwm(process.pid)))


def _vm_hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024  # kB
    return 0  # a zombie has no memory left


def _tree_values(pid: int, value: Callable[[psutil.Process], int]) -> list[int]:
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    values = []
    for process in processes:
        try:
            values.append(value(process))
        except (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError):
            pass
    return values


def stacks(pid: int) -> bytes:
    """py-spy's dump of a running process's Python stacks, for the log."""
    spy = shutil.which("py-spy")
    if spy is None:
        return b"\n[stopped at the memory limit; py-spy not installed: no stacks]\n"
    dump = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, timeout=60)
    return b"\n[stopped at the memory limit; its stacks then]\n" + dump.stdout + dump.stderr


# --- a peer under replace-one ------------------------------------------------------------------

def peer_epsilon(epsilon: float, delta: float, neighbours: str = ADD_REMOVE) -> float:
    """The ε to pass a peer script so that its Gaussian measurements are (ε, δ)-DP under
    ``neighbours``. The scripts turn ε into ρ with private-pgm's ``cdp_rho`` (the CKS 2020
    Cor. 13 bound, which ``zcdp_rho_for`` computes too) and calibrate every marginal to
    add/remove-one, L2 sensitivity 1. Replacing a row changes two cells (sensitivity² 2), so the
    same noise is 2ρ-zCDP: under replace-one the script gets the ε′ with ρ(ε′) = ρ(ε)/2.
    MST's and AIM's exponential-mechanism selections (L1 scores, sensitivity 1 → 2) cost 4× ρ
    under replace-one, which this halving does not cover: the peer keeps the edge there."""
    if neighbours not in NEIGHBOURS:
        raise ValueError(f"neighbours must be one of {NEIGHBOURS}, got {neighbours!r}")
    if neighbours == ADD_REMOVE:
        return float(epsilon)
    target = zcdp_rho_for(epsilon, delta) / 2
    # ρ(ε) grows like ε² for small ε and like ε for large: half of it lies in (ε/4, ε)
    return float(brentq(lambda e: zcdp_rho_for(e, delta) - target, epsilon / 4, epsilon,
                        xtol=1e-300, rtol=4 * np.finfo(float).eps))


# --- the cache of peer results ------------------------------------------------------------------

def peer_name(peer: str, options: dict[str, Any] | None = None) -> str:
    """Cache name of a peer run: ``aim``, or ``aim[max_model_size=10]`` off the authors'
    defaults."""
    if not options:
        return peer
    return peer + "[" + ",".join(f"{k}={v:g}" for k, v in sorted(options.items())) + "]"


CacheKey = tuple[str, str, float, float, int, str]


def cache_key(peer: str, columns: str, epsilon: float, delta: float, seed: int,
              neighbours: str = ADD_REMOVE) -> CacheKey:
    """A peer run: ``epsilon`` is the stated guarantee under ``neighbours``, not the ε′ passed
    to the script, so the notion must be part of the key."""
    return (str(peer), str(columns), float(epsilon), float(delta), int(seed), str(neighbours))


def row_key(row: dict[str, Any]) -> CacheKey:
    """The key of a cached row; rows cached before the notion was recorded are add/remove."""
    return cache_key(row["peer"], row["columns"], row["epsilon"], row["delta"], row["seed"],
                     row.get("neighbours", ADD_REMOVE))


def load_cache(path: Path) -> dict[CacheKey, dict[str, Any]]:
    """Cached peer rows by key; a later line for the same key replaces an earlier one. dp_dask's
    rows in the same file (a record of both sides) are left out."""
    if not path.exists():
        return {}
    rows = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return {row_key(row): row for row in rows if row["kind"] == "peer"}


def append_cache(path: Path, row: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        out.write(json.dumps(row, sort_keys=True) + "\n")


def reusable(row: dict[str, Any]) -> bool:
    """A finished run (or one stopped at its time or memory limit) is kept; a crashed one is
    run again."""
    return row["status"] == "ok" or row["status"].startswith(("timeout", MEMORY_STOP))


def plan_peers(peers: Iterable[str], columns: str, epsilons: Iterable[float], delta: float,
               seeds: Iterable[int], cache: dict, rerun: bool = False,
               neighbours: str = ADD_REMOVE) -> tuple[list[dict[str, Any]], list[CacheKey]]:
    """(cached rows to reuse, keys to run) for every peer × ε × seed, in run order. Failed rows
    are run again; timeouts are kept (``--rerun-peers`` runs everything again)."""
    reused, todo = [], []
    for epsilon in epsilons:
        for peer in peers:
            for seed in seeds:
                key = cache_key(peer, columns, epsilon, delta, seed, neighbours)
                if key in cache and reusable(cache[key]) and not rerun:
                    reused.append(cache[key])
                else:
                    todo.append(key)
    return reused, todo


# --- running and evaluating releases ------------------------------------------------------------

def error_summary(records: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Q1/Q2/Q3: mean error over the best 95 % of queries, and the largest error of all."""
    summary = {}
    for workload in WORKLOADS:
        rows = records[records["workload"] == workload]
        if rows.empty:
            continue
        best = rows[np.isclose(rows["beta"], 0.95)]["average"].iloc[0]
        worst = rows[np.isclose(rows["beta"], 1.0)]["maximum"].iloc[0]
        summary[workload] = {"avg95": round(float(best), 2), "max": round(float(worst), 2),
                             "queries": int(rows["queries"].iloc[0])}
    return summary


def evaluate(frame: TableSource, synthetic: TableSource, schema: Schema, method: str,
             q3_sample: int) -> tuple[dict[str, Any], str]:
    """Q1–Q3, and the DPCopula/DPView papers' metric: the relative error (sanity bound 1) of
    RANGE_QUERIES random range-count queries on RANGE_ATTRIBUTES attributes each (seed 0)."""
    records, workload = evaluate_release(frame, synthetic, schema, q3_sample=q3_sample, seed=0,
                                         method=method)
    relative = range_query_errors(frame, synthetic, schema, queries=RANGE_QUERIES,
                                  attributes=min(RANGE_ATTRIBUTES, schema.m), seed=0)
    ranges = {"mean": round(float(relative.mean()), 4),
              "median": round(float(np.median(relative)), 4), "queries": len(relative)}
    return error_summary(records) | {RANGE_KEY: ranges}, workload.describe()


def git_commit(checkout: Path) -> str | None:
    try:
        return subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def peer_versions(python: str) -> dict[str, str]:
    result = subprocess.run([python, "-c", PEER_VERSIONS], check=True, capture_output=True,
                            text=True)
    return json.loads(result.stdout)


def run_peer(key: CacheKey, *, checkout: Path, python: str, options: dict[str, Any],
             data_csv: Path, domain_json: Path, work: Path, frame: TableSource,
             schema: Schema, q3_sample: int, timeout: float | None, versions: dict[str, str],
             score: Callable[[np.ndarray], dict[str, Any]] | None = None,
             memory_limit_gib: float | None = None) -> dict[str, Any]:
    """One peer release (``key`` from :func:`cache_key`), measured; scored by :func:`evaluate`
    on its labels against ``frame`` (the raw rows, or their Parquet), or by ``score`` on its
    codes (m, rows) when given. ``memory_limit_gib``: see :func:`measured_run`."""
    peer, columns, epsilon, delta, seed, neighbours = key
    base = peer.split("[")[0]
    label, script = PEERS[base]
    run_epsilon = peer_epsilon(epsilon, delta, neighbours)
    notion = "" if neighbours == ADD_REMOVE else f"-{neighbours}"
    save = work / f"{peer}{notion}-{columns}-eps{epsilon:g}-seed{seed}.csv"
    argv = [python, "-c", PEER_RUNNER, str(seed), str(checkout / script), "--dataset",
            str(data_csv), "--domain", str(domain_json), "--epsilon", repr(run_epsilon),
            "--delta", repr(delta), "--save", str(save)]
    for name, value in sorted(options.items()):
        argv += [f"--{name}", str(value)]
    # mbi from the peers' env, never a checkout's src/; the log written as it goes
    env = {**os.environ, "PYTHONPATH": "", "PYTHONUNBUFFERED": "1"}
    print(f"running {label} ({peer}) on {columns}, ε = {epsilon:g} under {neighbours} "
          f"(script's ε {run_epsilon:.6g}), seed {seed} ...", flush=True)
    measured = measured_run(argv, cwd=checkout / "mechanisms", env=env,
                            log=save.with_suffix(".log"), timeout=timeout,
                            memory_limit_gib=memory_limit_gib)
    row = {"kind": "peer", "release": label + peer[len(base):] + NEIGHBOURS_LABEL[neighbours],
           "peer": peer, "columns": columns, "epsilon": epsilon, "delta": delta, "seed": seed,
           "neighbours": neighbours, "peer_epsilon": run_epsilon,
           "command": shlex.join(["python", "-c", "<PEER_RUNNER>"] + argv[3:]),
           "private_pgm_commit": git_commit(checkout), "versions": versions,
           "machine": machine(), **measured}
    return peer_outcome(row, save, frame=frame, schema=schema, q3_sample=q3_sample,
                        timeout=timeout, memory_limit_gib=memory_limit_gib, score=score)


def peer_outcome(row: dict[str, Any], save: Path, *, frame: TableSource, schema: Schema,
                 q3_sample: int, timeout: float | None,
                 memory_limit_gib: float | None = None,
                 score: Callable[[np.ndarray], dict[str, Any]] | None = None
                 ) -> dict[str, Any]:
    """A measured peer run's ``row`` (:func:`measured_run`'s fields in it) with its status, and
    its errors where it wrote its code CSV ``save`` (see :func:`run_peer`)."""
    if row["timed_out"]:
        row["status"] = f"timeout after {timeout:g} s"
    elif row["memory_stopped"]:
        row["status"] = f"{MEMORY_STOP} ({memory_limit_gib:g} GiB) after {row['wall_s']:g} s"
        row["log_tail"] = save.with_suffix(".log").read_text(errors="replace")[-4000:]
    elif row["returncode"] < 0:  # killed by a signal: by hand, or for memory
        row["status"] = f"stopped (signal {-row['returncode']}) after {row['wall_s']:g} s"
        row["log_tail"] = save.with_suffix(".log").read_text(errors="replace")[-2000:]
    elif row["returncode"] != 0:
        row["status"] = f"failed (exit {row['returncode']})"
        row["log_tail"] = save.with_suffix(".log").read_text(errors="replace")[-2000:]
    elif score is not None:
        codes = read_codes(save, schema)
        row.update(status="ok", rows_released=len(codes), errors=score(codes.T))
    else:
        synthetic = codes_release(save, schema)
        row["status"] = "ok"
        row["rows_released"] = len(synthetic)  # one pass over the CSV
        row["errors"], row["q3"] = evaluate(frame, synthetic, schema, row["release"],
                                            q3_sample)
    print(f"  {row['status']}: {row['wall_s']} s wall, {row['cpu_s']} s CPU, "
          f"{row['peak_rss_mib']} MiB, load {run_load(row)}", flush=True)
    return row


def run_ours(name: str, *, columns: str, data: str, epsilon: float, delta: float, seed: int,
             work: Path, frame: TableSource, schema: Schema, q3_sample: int,
             schema_argument: str, scored: bool = True) -> dict[str, Any]:
    """One dp_dask release in a child (:func:`run_ours_child`), measured, and evaluated against
    ``frame`` (the raw rows, or their Parquet) from its Parquet parts, out of core (unless not
    ``scored``)."""
    label = OURS[name][0]
    save = work / f"ours-{name}-{columns}-eps{epsilon:g}-seed{seed}.parquet"
    argv = [sys.executable, "-m", "benchmarks.peers", "--child", name,
            "--columns", schema_argument,
            "--data", data, "--epsilons", repr(epsilon), "--delta", repr(delta),
            "--seed-value", str(seed), "--save", str(save)]
    print(f"running {label} on {columns}, ε = {epsilon:g}, seed {seed} ...", flush=True)
    measured = measured_run(argv, log=save.with_suffix(".log"))
    row = {"kind": "ours", "release": label, "ours": name, "columns": columns,
           "epsilon": epsilon, "delta": delta, "seed": seed,
           "command": shlex.join(["python"] + argv[1:]), "machine": machine(), **measured}
    if measured["returncode"] != 0:
        row["status"] = f"failed (exit {measured['returncode']})"
        row["log_tail"] = save.with_suffix(".log").read_text(errors="replace")[-2000:]
    else:
        row.update(json.loads(save.with_suffix(".json").read_text()), status="ok",
                   rows_released=table_rows(save))
        if scored:
            row["errors"], row["q3"] = evaluate(frame, save, schema, label, q3_sample)
        from dp_dask.version import library_versions

        row["versions"] = library_versions()
    print(f"  {row['status']}: {row['wall_s']} s wall, {row['cpu_s']} s CPU, "
          f"{row['peak_rss_mib']} MiB, load {run_load(row)}", flush=True)
    return row


def machine() -> dict[str, Any]:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").open()
                  if line.startswith("model name")), platform.processor())
    return {"nproc": os.cpu_count(), "cpu": model,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


# --- the table and the plot ---------------------------------------------------------------------

def results_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """One line per release and ε, averaged over seeds (errors, wall, CPU, RSS, load). ``load``
    is the machine's 1-minute load average during the run (2 cores: above 2, runs queued).
    Where a peer ran at another ε than the stated one (replace-one), the script's ε′ is shown."""
    lines = []
    order = {}
    moved = any("peer_epsilon" in r and r["peer_epsilon"] != r["epsilon"] for r in rows)
    for row in rows:
        order.setdefault(row["release"], len(order))
    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["release"], row["epsilon"]), []).append(row)
    for (release, epsilon), group in sorted(groups.items(),
                                            key=lambda kv: (kv[0][1], order[kv[0][0]])):
        ok = [r for r in group if r["status"] == "ok"]
        line: dict[str, Any] = {"release": release, "ε": f"{epsilon:g}", "seeds": len(group)}
        if moved:
            line["script's ε′"] = f"{group[0].get('peer_epsilon', epsilon):.4g}"
        for workload in WORKLOADS:
            for stat, title in (("avg95", "95 %"), ("max", "max")):
                values = [r["errors"][workload][stat] for r in ok if workload in r["errors"]]
                line[f"{workload} {title}"] = float(np.mean(values)) if values else "—"
        ranges = [r["errors"][RANGE_KEY]["mean"] for r in ok if RANGE_KEY in r["errors"]]
        line[f"{RANGE_KEY} rel. error"] = f"{np.mean(ranges):.3f}" if ranges else "—"
        if ok:
            line["wall s"] = float(np.mean([r["wall_s"] for r in ok]))
            line["CPU s"] = float(np.mean([r["cpu_s"] for r in ok]))
            line["peak RSS GiB"] = f"{np.mean([r['peak_rss_mib'] for r in ok]) / 1024:.2f}"
            line["load"] = f"{np.mean([run_load(r) for r in ok]):.1f}"
        else:
            line["wall s"] = f"{group[0]['status']}"
            line["CPU s"] = line["peak RSS GiB"] = "—"
            line["load"] = f"{run_load(group[0]):.1f}"
        lines.append(line)
    return pd.DataFrame(lines)


def run_load(row: dict[str, Any]) -> float:
    """The 1-minute load average during a run (its mean; before/after for rows that lack it)."""
    if "load_mean" in row:
        return row["load_mean"]
    return (row["load_before"][0] + row["load_after"][0]) / 2


def plot(rows: list[dict[str, Any]], out: Path, title: str) -> Path:
    """Error (mean over the best 95 % of queries) against ε, one line per release, Q1/Q2/Q3."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    releases = list(dict.fromkeys(r["release"] for r in rows))
    for ax, workload in zip(axes, WORKLOADS):
        for release in releases:
            points: dict[float, list[float]] = {}
            for r in rows:
                if r["release"] == release and r["status"] == "ok" and workload in r["errors"]:
                    points.setdefault(r["epsilon"], []).append(r["errors"][workload]["avg95"])
            if points:
                eps = sorted(points)
                ax.plot(eps, [np.mean(points[e]) for e in eps], "o-", label=release)
        ax.set(xscale="log", yscale="log", xlabel="ε", title=f"{workload}: mean error, best 95 %")
        plain_log_ticks(ax, sorted({r["epsilon"] for r in rows}))
    axes[0].set_ylabel("|true − synthetic| (counts, n rows)")
    axes[0].legend(fontsize=8)
    return save_figure(fig, title, out, dpi=110)


def plain_log_ticks(ax: Any, ticks: Iterable[float]) -> None:
    """A log x axis ticked at ``ticks``, labelled as plain numbers (no 3×10⁰ etc.)."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    ax.set_xticks(list(ticks))
    ax.get_xaxis().set_major_formatter(ScalarFormatter())
    ax.get_xaxis().set_minor_formatter(NullFormatter())


def save_figure(fig: Any, title: str, out: Path, dpi: int) -> Path:
    """Title, tight layout, write, close."""
    import matplotlib.pyplot as plt

    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=dpi)
    plt.close(fig)
    return out


# --- command line -------------------------------------------------------------------------------

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--private-pgm", type=Path,
                        help="a checkout holding mechanisms/mst.py and mechanisms/aim.py; "
                             "without it only cached peer rows are shown")
    parser.add_argument("--peer-python", default=None,
                        help="python of the peers' virtual env (mbi==2.0.0, pandas, matplotlib)")
    parser.add_argument("--columns", default="categorical",
                        help=f"Adult's attribute set, one of {COLUMN_SETS}, or a dp_dask schema "
                             "file (JSON) of another table given with --data: the schema's name "
                             "then keys the cache and the output files")
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0])
    parser.add_argument("--delta", type=float, default=DELTA)
    parser.add_argument("--seeds", type=int, default=1, help="seeds 0 .. N-1 for every release")
    parser.add_argument("--peers", nargs="*", choices=list(PEERS), default=list(PEERS),
                        help="peers to show (default: all; none: dp_dask only)")
    parser.add_argument("--ours", nargs="*", choices=sorted(OURS), default=["marginals"])
    parser.add_argument("--aim-max-model-size", type=float, default=None,
                        help="AIM's --max_model_size (MB); default: the authors' (80). A value "
                             "here is cached as a peer of its own, aim[max_model_size=...]")
    parser.add_argument("--peer-neighbours", choices=NEIGHBOURS, default=ADD_REMOVE,
                        help="the neighbouring notion the peers' ε is stated under: add_remove "
                             "(the scripts' own) or replace (one row replaced: the script is "
                             "run at the ε′ with half the zCDP ρ, cached as rows of their own)")
    parser.add_argument("--peer-timeout", type=float, default=None,
                        help="seconds before a peer run is stopped (recorded as a timeout)")
    parser.add_argument("--rerun-peers", action="store_true", help="ignore cached peer rows")
    parser.add_argument("--data", default=DEFAULT_DATA, help="raw Adult CSV")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--out", type=Path, default=Path("peers-out"))
    parser.add_argument("--work", type=Path, default=None,
                        help="where code tables, synthetic outputs and logs go (default: a "
                             "temporary directory, removed afterwards)")
    parser.add_argument("--q3-sample", type=int, default=DEFAULT_Q3_SAMPLE)
    parser.add_argument("--plot", action="store_true", help="also write error-vs-ε plots")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one dp_dask release, in a child
    parser.add_argument("--seed-value", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--save", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = parse_args(argv)
    if args.child:
        run_ours_child(args.child, args.columns, args.data, args.epsilons[0], args.delta,
                       args.seed_value, args.save)
        return []
    schema = table_schema(args.columns)
    table_name = args.columns if args.columns in COLUMN_SETS else schema.name
    frame = read_data(args.data)
    seeds = list(range(args.seeds))
    options = ({"max_model_size": args.aim_max_model_size}
               if args.aim_max_model_size is not None else {})
    names = [peer_name(p, options if p == "aim" else None) for p in args.peers]
    cache = load_cache(args.cache)
    reused, todo = plan_peers(names, table_name, args.epsilons, args.delta, seeds, cache,
                              args.rerun_peers, args.peer_neighbours)
    if todo and args.private_pgm is None:
        shown = [cache[key] for key in todo if key in cache]  # failed or stopped: shown as such
        print(f"not run (no --private-pgm): {len(todo)} peer release(s) without a finished "
              f"cached row ({len(shown)} shown with their status)")
        reused += shown
        todo = []
    if todo and not args.peer_python:
        raise SystemExit("--peer-python is needed to run the peers")

    with tempfile.TemporaryDirectory(prefix="dp-dask-peers-") as scratch:
        work = args.work or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        rows = list(reused)
        if todo:
            data_csv, domain_json = export_codes(frame, schema, work / f"table-{table_name}")
            versions = peer_versions(args.peer_python)
            for key in todo:
                cached = load_cache(args.cache).get(key)  # another run may have done it since
                if cached and reusable(cached) and not args.rerun_peers:
                    rows.append(cached)
                    continue
                row = run_peer(key, checkout=args.private_pgm.resolve(),
                               python=args.peer_python,
                               options=options if key[0].startswith("aim") else {},
                               data_csv=data_csv, domain_json=domain_json, work=work,
                               frame=frame, schema=schema, q3_sample=args.q3_sample,
                               timeout=args.peer_timeout, versions=versions)
                append_cache(args.cache, row)
                rows.append(row)
        for name in args.ours:
            for epsilon in args.epsilons:
                for seed in seeds:
                    rows.append(run_ours(name, columns=table_name, data=args.data,
                                         epsilon=epsilon, delta=args.delta, seed=seed, work=work,
                                         frame=frame, schema=schema, q3_sample=args.q3_sample,
                                         schema_argument=args.columns))

    order = {name: i for i, name in enumerate(names)}
    rows.sort(key=lambda r: (r["kind"] != "peer", order.get(r.get("peer"), 0), r["epsilon"],
                             r["seed"]))
    what = (f"Adult, {table_name} attributes" if table_name in COLUMN_SETS
            else f"{table_name} ({args.data})")
    title = (f"{what} (m = {schema.m}, d = {schema.d}), "
             f"δ = {args.delta:g}, {len(frame):,} rows")
    if args.peer_neighbours != ADD_REMOVE and names:
        title += f"; peers' ε under {args.peer_neighbours} (script run at ε′)"
    table = markdown_table(results_table(rows))
    print(f"\n{title}\n\n{table}")
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"peers-{table_name}"
    stem.with_suffix(".md").write_text(f"{title}\n\n{table}\n")
    stem.with_suffix(".jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n"
                                                  for r in rows))
    if args.plot and rows:
        print(plot(rows, stem.with_suffix(".png"), title))
    return rows


if __name__ == "__main__":
    main()
