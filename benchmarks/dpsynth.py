"""google/dpsynth's SWIFT, AIM-GDP and MST beside dp_dask's marginals method (issue 59).

    python -m benchmarks.dpsynth --dpsynth-python /work/dpsynth-venv/bin/python \\
        --dpsynth /work/peers/dpsynth --tables planted adult9 --work /tmp/dpsynth

Every release gets the same binned table, ε, δ = 1e-9 and add/remove-one neighbours (dpsynth's
notion; dp_dask's through ``neighbours="add_remove"``), and the same scorer
(``benchmarks.peers.evaluate``: Q1, Q2, Q3 mean error over the best 95 % of queries, the worst
2-way query, the range queries). The tables: ``planted`` (benchmarks.cliques, 200 k rows, 3- and
4-way structure no pair shows; ``planted8``: 8 attributes, 255 k rows), ``adult9`` /
``adult15`` (Adult's 9 categorical attributes, or all 15 binned by the ``adult`` schema),
``adult1m`` (Adult 9 resampled to 1 M rows,
benchmarks.peers_scale) and ``demo`` (dp_dask's generated census, 1 M rows, its schema).

The peers get the code table private-pgm's scripts read (``export_codes``) and run in dpsynth's
env through benchmarks/dpsynth_runner.py, with every attribute a closed categorical domain of
the schema's codes; dp_dask runs ``cliques="pairs"`` and ``"auto"`` (its default) in a child of
its own (``benchmarks.peers.run_ours``). Each run is measured by ``measured_run`` (wall, CPU,
peak RSS); a peer past ``--timeout`` is recorded as not finished. All rows go to ``--cache``
(JSON lines): a finished or timed-out peer row, or a finished dp_dask row, is not run again
unless ``--rerun``. See benchmarks/DPSYNTH.md for the peers' env and the measured table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks.cliques import planted
from benchmarks.paths import RESULTS_DIR
from benchmarks.peers import (
    ADD_REMOVE,
    DEFAULT_DATA,
    DELTA,
    OURS,
    append_cache,
    export_codes,
    git_commit,
    load_cache,
    machine,
    measured_run,
    peer_outcome,
    plan_peers,
    read_data,
    results_table,
    run_ours,
    table_schema,
)
from benchmarks.peers_scale import generate
from dp_dask.data.demo import write_census
from dp_dask.data.io import TableSource
from dp_dask.data.schema import Schema
from dp_dask.evaluate.queries import DEFAULT_Q3_SAMPLE
from dp_dask.evaluate.tables import markdown_table

DEFAULT_CACHE = RESULTS_DIR / "dpsynth.jsonl"
RUNNER = Path(__file__).with_name("dpsynth_runner.py")
PEERS = {"mst": "MST (dpsynth)", "swift": "SWIFT (dpsynth)",  # run in this order: fastest first
         "aim-gdp": "AIM-GDP (dpsynth)"}
# cliques pairs and auto, n̂ rows as dpsynth releases: a count off by 20 moves Q1 by up to 20
OURS_HERE = ("marginals-add-remove-nhat", "marginals-add-remove-auto-nhat")
TABLES = ("planted", "planted8", "adult9", "adult1m", "adult15", "demo")
PLANTED_ROWS, PLANTED8_ROWS, SCALE_ROWS, DEMO_ROWS = 200_000, 255_000, 1_000_000, 1_000_000
DEMO_SCHEMA = str(Path(__file__).parents[1] / "dp_dask" / "schemas" / "demo.json")
SUMMARY = {"Q1 95 %": "Q1", "Q2 95 %": "Q2", "Q2 max": "worst 2-way", "Q3 95 %": "Q3",
           "wall s": "wall s", "CPU s": "CPU s", "peak RSS GiB": "peak GiB", "load": "load"}


@dataclasses.dataclass(frozen=True)
class Table:
    """One benchmark table in every tool's format."""

    name: str
    schema_argument: str  # benchmarks.peers.table_schema's argument, for dp_dask's child
    data: str  # what dp_dask's child reads: Adult's CSV or Parquet
    source: TableSource  # the rows every release is scored against
    codes: Path  # the peers' input: integer codes ...
    domain: Path  # ... and {"attr": size}

    @property
    def schema(self) -> Schema:
        return table_schema(self.schema_argument)


def prepare(name: str, work: Path) -> Table:
    """Table ``name`` written under ``work/name`` (kept for the next run where complete)."""
    out = work / name
    out.mkdir(parents=True, exist_ok=True)
    if name in ("planted", "planted8"):
        schema, frame = (planted(PLANTED_ROWS) if name == "planted"
                         else planted(PLANTED8_ROWS, m=8))
        schema_path, data = out / "schema.json", out / "data.parquet"
        schema_path.write_text(json.dumps(schema.to_json()))
        frame.to_parquet(data, index=False)
        return Table(name, str(schema_path), str(data), frame,
                     *export_codes(frame, schema, out))
    if name in ("adult9", "adult15"):
        columns = "categorical" if name == "adult9" else "all"
        frame = read_data(DEFAULT_DATA)
        return Table(name, columns, DEFAULT_DATA, frame,
                     *export_codes(frame, table_schema(columns), out))
    if name == "adult1m":
        data, codes, domain = generate(SCALE_ROWS, out)
        return Table(name, "categorical", str(data), data, codes, domain)
    if name == "demo":
        data, codes, domain = out / "data", out / "data.csv", out / "domain.json"
        if not (codes.exists() and domain.exists()):
            write_census(data, DEMO_ROWS, seed=0, overwrite=True)
            export_codes(pd.read_parquet(data), table_schema(DEMO_SCHEMA), out)
        return Table(name, DEMO_SCHEMA, str(data), data, codes, domain)
    raise ValueError(f"table must be one of {TABLES}, got {name!r}")


def run_dpsynth(key: tuple, table: Table, *, python: str, checkout: Path | None, work: Path,
                timeout: float | None, q3_sample: int, pythonpath: str = "") -> dict[str, Any]:
    """One dpsynth release (``key`` from ``benchmarks.peers.cache_key``) in the peers' env,
    measured and scored like private-pgm's (``peer_outcome``). ``pythonpath``: the child's
    (empty: dpsynth and mbi from the env, never from a checkout)."""
    peer, columns, epsilon, delta, seed, neighbours = key
    if neighbours != ADD_REMOVE:
        raise ValueError("dpsynth's mechanisms are calibrated to add/remove-one neighbours")
    save = work / f"dpsynth-{peer}-{columns}-eps{epsilon:g}-seed{seed}.csv"
    save.with_suffix(".json").unlink(missing_ok=True)  # a former run's
    # -P: the runner's folder is not put on sys.path, where this module would hide dpsynth
    argv = [python, "-P", str(RUNNER), peer, str(seed), str(table.codes), str(table.domain),
            repr(epsilon), repr(delta), str(save)]
    # mbi warns that JAX's persistent compilation cache slows it down: off
    env = {**os.environ, "PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1",
           "JAX_ENABLE_COMPILATION_CACHE": "false"}
    print(f"running {PEERS[peer]} on {columns}, ε = {epsilon:g}, seed {seed} ...", flush=True)
    measured = measured_run(argv, env=env, log=save.with_suffix(".log"), timeout=timeout)
    row = {"kind": "peer", "release": PEERS[peer], "peer": peer, "columns": columns,
           "epsilon": epsilon, "delta": delta, "seed": seed, "neighbours": neighbours,
           "command": shlex.join(["python", *argv[1:]]),
           "dpsynth_commit": git_commit(checkout) if checkout else None,
           "machine": machine(), **measured}
    if save.with_suffix(".json").exists():  # what ran: config, budget split, versions
        row["dpsynth"] = json.loads(save.with_suffix(".json").read_text())
    return peer_outcome(row, save, frame=table.source, schema=table.schema,
                        q3_sample=q3_sample, timeout=timeout)


def ours_done(rows: Iterable[dict[str, Any]]) -> set[tuple[str, str, float, int]]:
    """(method, table, ε, seed) of the finished dp_dask rows among ``rows``."""
    return {(r["ours"], r["columns"], float(r["epsilon"]), int(r["seed"])) for r in rows
            if r["kind"] == "ours" and r["status"] == "ok"}


def recorded(path: Path) -> list[dict[str, Any]]:
    """The rows of the record, the last of each run: peers by cache key, dp_dask's by
    (method, table, ε, δ, seed)."""
    if not path.exists():
        return []
    ours: dict[tuple, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line) if line.strip() else None
        if row and row["kind"] == "ours":
            ours[(row["ours"], row["columns"], row["epsilon"], row["delta"], row["seed"])] = row
    return [*load_cache(path).values(), *ours.values()]


def summary(rows: list[dict[str, Any]], table: str) -> pd.DataFrame:
    """The table's rows averaged over seeds: Q1, Q2, Q3 (best 95 %), worst 2-way, time, RSS."""
    mine = [r for r in rows if r["columns"] == table]
    if not mine:
        return pd.DataFrame()
    full = results_table(mine)
    return full[["release", "ε", "seeds", *SUMMARY]].rename(columns=SUMMARY)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", nargs="+", choices=TABLES, default=["planted", "adult9"])
    parser.add_argument("--dpsynth-python", help="python of dpsynth's env (without it: only "
                                                 "recorded peer rows are shown)")
    parser.add_argument("--dpsynth", type=Path, help="the dpsynth checkout (its commit is "
                                                     "recorded)")
    parser.add_argument("--peers", nargs="*", choices=list(PEERS), default=list(PEERS))
    parser.add_argument("--ours", nargs="*", choices=sorted(OURS), default=list(OURS_HERE))
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0])
    parser.add_argument("--delta", type=float, default=DELTA)
    parser.add_argument("--peer-seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2],
                        help="dp_dask's seeds")
    parser.add_argument("--timeout", type=float, default=1200.0,
                        help="seconds before a peer run is stopped (recorded as not finished)")
    parser.add_argument("--rerun", action="store_true", help="run recorded releases again")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--work", type=Path, default=Path("dpsynth-work"),
                        help="tables, synthetic outputs and logs (tables kept for the next run)")
    parser.add_argument("--q3-sample", type=int, default=DEFAULT_Q3_SAMPLE)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, pd.DataFrame]:
    args = parse_args(argv)
    for name in args.tables:
        done = set() if args.rerun else ours_done(recorded(args.cache))
        ours = [(method, epsilon, seed) for method in args.ours for epsilon in args.epsilons
                for seed in args.seeds if (method, name, epsilon, seed) not in done]
        _, todo = plan_peers(args.peers, name, args.epsilons, args.delta, args.peer_seeds,
                             load_cache(args.cache), args.rerun)
        todo = todo if args.dpsynth_python else []
        if not (ours or todo):  # all recorded: the table only
            continue
        table = prepare(name, args.work)
        # dp_dask first: minutes, where a peer may take its whole time cap
        for method, epsilon, seed in ours:
            append_cache(args.cache, run_ours(
                method, columns=name, data=table.data, epsilon=epsilon, delta=args.delta,
                seed=seed, work=args.work, frame=table.source, schema=table.schema,
                q3_sample=args.q3_sample, schema_argument=table.schema_argument))
        for key in todo:
            append_cache(args.cache, run_dpsynth(key, table, python=args.dpsynth_python,
                                                 checkout=args.dpsynth, work=args.work,
                                                 timeout=args.timeout,
                                                 q3_sample=args.q3_sample))
    rows = recorded(args.cache)
    tables = {name: summary(rows, name) for name in args.tables}
    for name, frame in tables.items():
        print(f"\n{name}, δ = {args.delta:g}, add/remove\n\n{markdown_table(frame)}")
    return tables


if __name__ == "__main__":
    main()
