"""Each stage of a default release of the demo's shape beside a primitive doing the same work.

    python -m benchmarks.roofline [--rows 1000000] [--release-rows 10000000] \\
        [--partitions 3] [--work /tmp/roofline] [--json out.jsonl] [--plot out.png]
    python -m benchmarks.roofline --from-json out.jsonl --plot out.png   # no run

A release (``synth --schema demo``, the default method, typed output) is made of stages; each
one here runs the library's own functions in this process, on one core, timed in CPU seconds
(``time.process_time``: what the other processes on a shared machine do not inflate), beside
the best a primitive alone does for the same work on the same data, in the same run. The ratio
stage / primitive is the figure: where the machine is loaded both sides slow alike.

The stages and their primitives (``PRIMITIVES``): the DP draft of the raw table (``draft_schema``
at ε 0.1: every column's type, points, range and levels, each a pass of counts) against one
pyarrow read of every column with one count each; bounding a unit column to K rows a unit
(``bound_contributions``' masks: row hashes, a shuffle on the unit and one back, on a copy of
the table with a seeded unit column of about K rows a unit) against reading every column, a
hash of each row and the unit's value counts (a key per row from its values, each unit's rows:
what the bound needs at least); reading (dp_dask's ``read_table``) and encoding
(``encode_partition``) against pyarrow reading the same columns; counting
(``counts_from_codes``, ``fine_counts``) against ``np.bincount`` of every attribute and pair;
the fit on the driver (noise, consistency; once per release, no primitive); candidate drawing
(the tree's draws) against numpy drawing as many categorical rows; estimation (raking, the
weight fit, the shared tables, the trial partition) against one weighted ``np.bincount`` of the
candidates' pairs (the stage makes many such passes: its ratio counts them); a partition's rows
(the balanced resample, row updates, the 1-way match) against numpy drawing as many rows from
the candidates by weight; decoding to typed values (``decode_table``, the part's Arrow table)
against a pyarrow take of each column's values and a uniform draw per numeric value; the Parquet
part (the release's writer options) against pyarrow writing the same table; storing it
(``put_bytes``) against writing its bytes to a file.

The demo data (``dp_dask.data.demo``, seed 0) of ``--rows`` rows are generated into ``--work``
once. The estimate's stages run once per estimate; a release of ``--release-rows`` makes
``estimates`` of them (``MarginalSampler.estimates``), and its partitions (``--partitions`` of
them timed, the median reported) are sampled with what a release of that size does (no value
moves past ``move_partitions`` partitions). The process's first compiled call (numba loading
its machinery and the cached code) is timed apart, on 1,000 rows before the counting: a worker
pays it once, not per row (``once_per_process_cpu_s``). Writing to S3 is not timed here:
``benchmarks.object_storage`` measures a release to an S3 server against local disk.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dp_dask.copula.sample import compression, dictionary_columns, fine_histograms
from dp_dask.data.counts import counts_from_codes, fine_counts
from dp_dask.data.demo import write_census
from dp_dask.data.draft import draft_schema
from dp_dask.data.encode import encode_partition
from dp_dask.data.io import put_bytes, read_table
from dp_dask.data.schema import load_schema
from dp_dask.data.units import PrivacyUnit, bound_contributions
from dp_dask.data.values import arrow_schema, decode_table
from dp_dask.methods.marginals.sampler import MarginalSampler, distinct_draws
from dp_dask.synthesizer import Synthesizer
from dp_dask.version import library_versions

DEMO_PARTITION_ROWS = 250_000  # rows of each generated Parquet file (write_census's default)
FIRST_CALL = "first compiled call"  # once per process: reported apart from the stages
UNIT, ROWS_PER_UNIT = "person", 4  # the bounding stage's unit column and K (and mean rows)
DRAFT_EPSILON = 0.1  # the draft stage's ε (its work does not depend on it)


@contextmanager
def cpu_seconds(into: dict[str, float], stage: str) -> Iterator[None]:
    """Adds the block's CPU seconds to ``into[stage]``."""
    started = time.process_time()
    yield
    into[stage] = into.get(stage, 0.0) + time.process_time() - started


def best(f: Callable[[], object], repeat: int = 3) -> float:
    """The least CPU seconds of ``repeat`` calls of a primitive: its own speed."""
    seconds = np.inf
    for _ in range(repeat):
        started = time.process_time()
        f()
        seconds = min(seconds, time.process_time() - started)
    return float(seconds)


def demo_data(work: Path, rows: int) -> Path:
    """The demo table of ``rows`` rows (seed 0) under ``work``, generated once."""
    path = work / f"demo-{rows}"
    if not (path.exists() and any(path.glob("*.parquet"))):
        with dask.config.set(scheduler="synchronous"):
            write_census(path, rows, seed=0, overwrite=path.exists())
    return path


def unit_data(work: Path, data: Path) -> Path:
    """The demo table with a unit column ``UNIT`` (seeded: about ROWS_PER_UNIT rows a unit,
    a unit's rows in any part), written once under ``work``."""
    path = work / f"{data.name}-units"
    if not (path.exists() and any(path.glob("*.parquet"))):
        path.mkdir(parents=True, exist_ok=True)
        files = sorted(data.glob("*.parquet"))
        rows = sum(pq.read_metadata(file).num_rows for file in files)
        rng = np.random.default_rng(0)
        for file in files:
            part = pq.read_table(file)
            units = rng.integers(0, max(rows // ROWS_PER_UNIT, 1), part.num_rows)
            pq.write_table(part.append_column(UNIT, pa.array(units)), path / file.name)
    return path


def draft_and_bound(data: Path, units: Path) -> tuple[dict[str, float], dict[str, float]]:
    """CPU seconds of a DP draft of the demo table's raw Parquet (every column drafted, types
    decided under DP, ε 0.1) and of bounding its units to K rows (the masks of
    :func:`bound_contributions`: hashes, two shuffles of 40 bytes a row; the release's read of
    the kept rows not included), in this process, and those of their primitives: one pyarrow
    read of every column with one count each (a histogram of 64 bins a number, value counts a
    text), and one read of every column with a hash of each row (pandas') and the unit's value
    counts: a key per row from its values and each unit's rows, what the bound needs."""
    cpu: dict[str, float] = {}
    floor: dict[str, float] = {}
    files = sorted(data.glob("*.parquet"))
    with dask.config.set(scheduler="synchronous"), cpu_seconds(cpu, "draft"):
        draft_schema(data, dp_epsilon=DRAFT_EPSILON, dp_delta=1e-9, ledger=False,
                     noise_sampler="numpy", noise_seed=0)

    def one_pass(file: Path) -> list[object]:
        table = pq.read_table(file)
        return [np.histogram(column.to_numpy(), 64) if pa.types.is_integer(column.type) or
                pa.types.is_floating(column.type) else pc.value_counts(column)
                for column in table.columns]
    floor["draft"] = sum(best(lambda file=file: one_pass(file)) for file in files)
    unit = PrivacyUnit(UNIT, ROWS_PER_UNIT)
    with dask.config.set(scheduler="synchronous"), cpu_seconds(cpu, "bounding"):
        bound_contributions(dd.read_parquet(units), load_schema("demo"), unit, seed=0)
    def keyed(file: Path) -> object:  # a key per row from its values, and each unit's rows
        frame = pq.read_table(file).to_pandas()
        return pd.util.hash_pandas_object(frame, index=False), frame[UNIT].value_counts()
    floor["bounding"] = sum(best(lambda file=file: keyed(file))
                            for file in sorted(units.glob("*.parquet")))
    return cpu, floor


def read_encode_count(data: Path, synthesizer: Synthesizer
                      ) -> tuple[dict[str, float], dict[str, float], tuple[np.ndarray, ...], int]:
    """CPU seconds of reading, encoding and counting every part of ``data`` as a fit's tasks
    do, those of the primitives on the same parts, and the exact counts (matrix, fine)."""
    schema = synthesizer.schema
    cpu: dict[str, float] = {}
    floor: dict[str, float] = {}
    counts, fine, rows = None, None, 0
    files = sorted(data.glob("*.parquet"))
    parts = read_table(data, schema).to_delayed()
    pairs = [(a, b) for a in range(schema.m) for b in range(a + 1, schema.m)]
    # A process's first compiled call loads numba's machinery and cached code (0.3 CPU s
    # here): once per worker, not per row, so timed apart, on a few rows, as the estimate's
    # stages are compiled before they are timed.
    head = parts[0].compute(scheduler="synchronous").head(1000)
    with cpu_seconds(cpu, FIRST_CALL):
        head_codes = encode_partition(head, schema)
        counts_from_codes(head_codes, schema)
        fine_counts(head, head_codes, schema)
    for file, part in zip(files, parts, strict=True):
        with cpu_seconds(cpu, "read"):
            frame = part.compute(scheduler="synchronous")
        with cpu_seconds(cpu, "encode"):
            codes = encode_partition(frame, schema)
        with cpu_seconds(cpu, "count"):
            matrix = counts_from_codes(codes, schema)
            histograms = fine_counts(frame, codes, schema)
        floor["read"] = floor.get("read", 0.0) + best(
            lambda file=file: pq.read_table(file, columns=schema.columns))
        floor["count"] = floor.get("count", 0.0) + best(lambda codes=codes: [
            np.bincount(codes[a].astype(np.intp) * schema.sizes[b] + codes[b])
            for a, b in pairs] + [np.bincount(c) for c in codes])
        counts = matrix if counts is None else counts + matrix
        fine = histograms if fine is None else fine + histograms
        rows += len(frame)
    return cpu, floor, (counts, fine), rows


def fit_on_driver(synthesizer: Synthesizer, exact: tuple[np.ndarray, ...], rows: int
                  ) -> tuple[float, Any]:
    """CPU seconds of the driver's part of the fit (noise, consistency, the model's tables)
    from the exact counts, and the model."""
    started = time.process_time()
    model = synthesizer._fit_counts(exact, rows, {"n_rows": rows})
    return time.process_time() - started, model


def categorical_rows(probabilities: list[np.ndarray], rows: int,
                     rng: np.random.Generator) -> np.ndarray:
    """``rows`` rows of independent categorical draws, one per attribute: numpy's floor for
    drawing rows of the schema's codes."""
    return np.stack([np.searchsorted(np.cumsum(p / p.sum()), rng.random(rows))
                     for p in probabilities], axis=1).astype(np.uint8)


def estimate_stages(sampler: MarginalSampler, rows: int, release_rows: int
                    ) -> tuple[dict[str, float], dict[str, float], MarginalSampler, int]:
    """CPU seconds of one estimate's stages and their primitives; the release's sampler; the
    number of estimates a release of ``release_rows`` makes.

    The stages nest (the start draws, then rakes; the weight fit starts from the raked rows;
    ``for_release`` fits, then makes the shared tables and the trial partition), so each is
    run from the same seed and the stage is the difference of the nested calls."""
    seed = np.random.SeedSequence(11)
    moves = release_rows <= sampler.config.move_partitions * rows
    release = sampler.for_release(rows, seed, release_rows)  # compiles, and what is timed
    candidates = sampler.candidate_rows(rows)
    start = release.start
    cpu: dict[str, float] = {}
    with cpu_seconds(cpu, "draws"):
        codes, _, draws = distinct_draws(sampler.model, candidates, np.random.default_rng(seed),
                                         sampler.config.max_draws_per_row if moves else
                                         sampler.config.unsettled_draws_per_row)
    with cpu_seconds(cpu, "start"):
        start(sampler.model, candidates, np.random.default_rng(seed))
    with cpu_seconds(cpu, "weighted"):
        _, weights = release.weighted_candidates(candidates, np.random.default_rng(seed))
    with cpu_seconds(cpu, "release"):
        sampler.for_release(rows, seed, release_rows)
    stages = {"candidate drawing": cpu["draws"],
              "estimation": cpu["release"] - cpu["draws"]}
    one_way = [np.asarray(v, dtype=float) for v in sampler.model.marginals.one_way]
    rng = np.random.default_rng(0)
    pairs = list(sampler.model.marginals.two_way)
    sizes = sampler.schema.sizes
    wide = codes.astype(np.intp)
    floor = {"candidate drawing": best(lambda: categorical_rows(one_way, draws, rng)),
             "estimation": best(lambda: [np.bincount(wide[:, a] * sizes[b] + wide[:, b],
                                                     weights=weights[: len(wide)])
                                         for a, b in pairs])}
    estimates = sampler.estimates([rows] * -(-release_rows // rows))
    return stages, floor, release, estimates


def partition_stages(release: MarginalSampler, rows: int, index: int,
                     where: Path) -> tuple[dict[str, float], dict[str, float], int]:
    """CPU seconds of one partition's task (the release's ``_write_partition``, stage by
    stage), those of the primitives on the same rows and table, and the part's bytes."""
    schema, child = release.schema, np.random.SeedSequence([7, index])
    arrow = arrow_schema(schema, "uniform")
    cpu: dict[str, float] = {}
    draw_cpu: dict[str, float] = {}
    with cpu_seconds(cpu, "partition rows"):
        codes = release.draw_codes(rows, child, draw_cpu).astype(np.int16)
    with cpu_seconds(cpu, "decoding"):
        table = decode_table(codes, schema, "uniform", child, arrow, fine_histograms(release))
    with cpu_seconds(cpu, "parquet part"):
        buffer = io.BytesIO()
        pq.write_table(table, buffer, use_dictionary=dictionary_columns(arrow),
                       compression=compression(arrow))
    data = buffer.getvalue()
    with cpu_seconds(cpu, "storing the part"):
        put_bytes(where / f"part.{index}.parquet", data)
    fitted = release.shared
    p = np.maximum(fitted.weights, 0.0) / np.maximum(fitted.weights, 0.0).sum()
    rng = np.random.default_rng(index)
    # The typed table again by the least work decoding does: a take of each column's values
    # by the rows' codes, and a uniform draw per value of each numeric column.
    encoded = [pc.dictionary_encode(column).combine_chunks() for column in table.columns]
    numeric = sum(not pa.types.is_string(f.type) and not pa.types.is_large_string(f.type)
                  for f in arrow)

    def typed_table() -> pa.Table:
        rng.random((numeric, rows))
        return pa.table([e.dictionary.take(e.indices) for e in encoded], schema=arrow)

    floor = {
        "partition rows": best(lambda: fitted.codes[rng.choice(len(p), rows, p=p)]),
        "decoding": best(typed_table),
        "parquet part": min(best(lambda: pq.write_table(table, io.BytesIO())),
                            best(lambda: pq.write_table(table, io.BytesIO(),
                                                        compression="none"))),
        "storing the part": best(lambda: (where / f"raw.{index}").write_bytes(data)),
    }
    cpu.update({f"  {step}": seconds for step, seconds in draw_cpu.items()
                if step != "sweeps" and seconds > 1e-3})
    return cpu, floor, len(data)


# The stages in a release's order, the per-release ones first.
STAGES = ("draft", "bounding", "read", "encode", "count", "fit on the driver",
          "candidate drawing", "estimation", "partition rows", "decoding", "parquet part",
          "storing the part")
PRIMITIVES = {
    "draft": "pyarrow reading every column, one count each (64-bin histogram, value counts)",
    "bounding": "pyarrow reading every column, a hash of each row, the unit's value counts",
    "read": "pyarrow reading the same columns",
    "encode": "(read's primitive holds the columns decoded)",
    "count": "np.bincount of every attribute and pair",
    "fit on the driver": "none: once per release, not per row",
    "candidate drawing": "numpy drawing as many categorical rows",
    "estimation": "one weighted np.bincount of the candidates' pairs",
    "partition rows": "numpy drawing its rows from the candidates by weight",
    "decoding": "pyarrow take of each column's values + a uniform per numeric value",
    "parquet part": "pyarrow writing the same table (best of defaults, no compression)",
    "storing the part": "the part's bytes written to a file",
}


def profile(rows: int, release_rows: int, partitions: int, work: Path,
            partition_rows: int = 100_000) -> dict[str, Any]:
    """Every stage's CPU seconds and its primitive's, on the demo's ``rows`` rows (counted)
    and ``partitions`` sampled partitions of ``partition_rows`` (median), for a release of
    ``release_rows``."""
    work.mkdir(parents=True, exist_ok=True)
    data = demo_data(work, rows)
    synthesizer = Synthesizer.create("marginals", "demo", epsilon=1.0, noise_sampler="numpy",
                                     noise_seed=0, ledger=False)
    # what Synthesizer.fit sets up before its stages, which are timed here one by one
    synthesizer.max_rows_, synthesizer.unit_choice_, synthesizer.timings_ = None, None, {}
    synthesizer._load_params()
    load = [os.getloadavg()[0]]
    cpu, floor, exact, counted = read_encode_count(data, synthesizer)
    drafted, drafted_floor = draft_and_bound(data, unit_data(work, data))
    cpu, floor = drafted | cpu, drafted_floor | floor
    once = {FIRST_CALL: cpu.pop(FIRST_CALL)}
    cpu["fit on the driver"], model = fit_on_driver(synthesizer, exact, counted)
    sample_rows = min(partition_rows, release_rows)
    stages, estimate_floor, release, estimates = estimate_stages(model.sampler(), sample_rows,
                                                                 release_rows)
    cpu.update(stages)
    floor.update(estimate_floor)
    load.append(os.getloadavg()[0])
    runs, floors, part_bytes = [], [], 0
    with tempfile.TemporaryDirectory(dir=work) as where:
        for index in range(partitions):
            run, run_floor, part_bytes = partition_stages(release, sample_rows, index,
                                                          Path(where))
            runs.append(run)
            floors.append(run_floor)
    cpu.update({stage: statistics.median(r[stage] for r in runs) for stage in runs[0]})
    floor.update({stage: statistics.median(f[stage] for f in floors) for stage in floors[0]})
    load.append(os.getloadavg()[0])
    per_stage_rows = {stage: counted for stage in ("draft", "bounding", "read", "encode",
                                                   "count")}
    per_stage_rows.update({stage: sample_rows for stage in runs[0]})
    return {"rows": counted, "release_rows": release_rows, "partition_rows": sample_rows,
            "partitions_timed": partitions, "estimates": estimates,
            "candidates": len(release.shared.codes), "cpu_s": cpu, "primitive_cpu_s": floor,
            "stage_rows": per_stage_rows, "once_per_process_cpu_s": once,
            "part_bytes": part_bytes,
            "load": [round(v, 2) for v in load], "machine": machine(),
            "versions": library_versions()}


def machine() -> str:
    """The CPU model and count, as /proc/cpuinfo names them (the platform's where it has none)."""
    try:
        names = [line.split(":", 1)[1].strip() for line in
                 Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")]
    except OSError:
        names = []
    return f"{names[0] if names else platform.processor()} x {os.cpu_count()}"


def per_million(result: dict[str, Any], stage: str, seconds: float) -> float:
    """CPU seconds per million released rows: a per-release stage spread over the release
    (``estimates`` times each estimate's), the rest per row they handle."""
    if stage == "fit on the driver":
        return seconds / result["release_rows"] * 1e6
    if stage in ("candidate drawing", "estimation"):
        return seconds * result["estimates"] / result["release_rows"] * 1e6
    return seconds / result["stage_rows"][stage] * 1e6


def rows_of(result: dict[str, Any]) -> list[tuple[str, float, float | None, float | None]]:
    """(stage, CPU s per million rows, primitive's, ratio) in the release's order; a
    partition's own steps (indented) have no primitive of their own."""
    out = []
    for stage, seconds in result["cpu_s"].items():
        primitive = result["primitive_cpu_s"].get(stage)
        mine = per_million(result, stage.strip(), seconds) if not stage.startswith(" ") else \
            seconds / result["partition_rows"] * 1e6
        theirs = None if primitive is None else per_million(result, stage, primitive)
        ratio = None if theirs is None or theirs <= 0 else mine / theirs
        out.append((stage, mine, theirs, ratio))
    order = {stage: i for i, stage in enumerate(STAGES)}
    return sorted(out, key=lambda row: order.get(row[0], order["partition rows"] + 0.5))


def table(result: dict[str, Any]) -> str:
    """The results as a Markdown table, its conditions above it."""
    lines = [f"{result['machine']}; load {result['load']}; {result['rows']:,} rows counted, a "
             f"release of {result['release_rows']:,} ({result['estimates']} estimates of "
             f"{result['candidates']:,} candidates, partitions of {result['partition_rows']:,}, "
             f"median of {result['partitions_timed']}); CPU seconds, one process",
             "",
             "| stage | CPU s / M rows | primitive | primitive CPU s / M rows | ratio |",
             "|---|---|---|---|---|"]
    for stage, mine, theirs, ratio in rows_of(result):
        primitive = PRIMITIVES.get(stage, "")
        lines.append(f"| {stage.strip() if not stage.startswith(' ') else '↳ ' + stage.strip()}"
                     f" | {mine:.3f} | {primitive} | "
                     f"{'' if theirs is None else f'{theirs:.3f}'} | "
                     f"{'' if ratio is None else f'{ratio:.1f}×'} |")
    lines += ["", *(f"Once per process, not in the stages: {step}, {seconds:.3f} CPU s"
                    for step, seconds in result.get("once_per_process_cpu_s", {}).items())]
    return "\n".join(lines)


def plot(result: dict[str, Any], out: Path) -> Path:
    """Each stage's CPU seconds per million rows beside its primitive's (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = [row for row in rows_of(result) if not row[0].startswith(" ")]
    names = [stage for stage, *_ in measured]
    places = np.arange(len(names))
    figure, axes = plt.subplots(figsize=(8, 4.5))
    axes.barh(places + 0.2, [mine for _, mine, _, _ in measured], 0.4, label="dp_dask")
    axes.barh(places - 0.2, [theirs or 0 for _, _, theirs, _ in measured], 0.4,
              label="primitive")
    for place, (_, mine, _, ratio) in zip(places, measured):
        if ratio is not None:
            axes.text(mine * 1.1, place + 0.2, f"{ratio:.1f}×", va="center", fontsize=8)
    axes.set_yticks(places, names)
    axes.invert_yaxis()
    axes.set_xscale("log")
    axes.set_xlabel("CPU s per million rows (one core)")
    axes.set_title(f"Demo shape, a release of {result['release_rows']:,} rows: each stage "
                   "beside its primitive", fontsize=9)
    axes.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(out, dpi=110)
    plt.close(figure)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="demo rows read and counted")
    parser.add_argument("--release-rows", type=int, default=10_000_000,
                        help="the release the sampling stages are those of")
    parser.add_argument("--partition-rows", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=3, help="partitions timed")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "roofline")
    parser.add_argument("--json", type=Path, help="append the result as one JSON line")
    parser.add_argument("--plot", type=Path, help="draw the stages against their primitives")
    parser.add_argument("--from-json", type=Path,
                        help="table (and --plot) of the last result in this file, not run")
    args = parser.parse_args(argv)
    if args.from_json:
        result = json.loads(args.from_json.read_text().splitlines()[-1])
    else:
        result = profile(args.rows, args.release_rows, args.partitions, args.work,
                         args.partition_rows)
    if args.plot:
        plot(result, args.plot)
    print(table(result))
    if args.json and not args.from_json:
        with args.json.open("a") as out:
            out.write(json.dumps(result) + "\n")
    return result


if __name__ == "__main__":
    main()
