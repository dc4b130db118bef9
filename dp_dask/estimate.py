"""What a run will cost, from the schema and the row count alone (``dp-dask plan``).

Sizes are exact (d, the 2-way cells, the count matrix); memory and time are estimates from the
measurements of docs/benchmarks.md (a 2-core VM, LocalCluster of 2 workers): order-of-magnitude
guides for choosing workers and ``--memory-limit`` before a run, not promises. No data is read.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from dask.utils import format_bytes, format_time

from dp_dask.checks import Cost, check_cost
from dp_dask.copula.sample import default_partition_rows
from dp_dask.data.decode import GROUPED_MIN_CATEGORIES
from dp_dask.data.schema import Schema
from dp_dask.privacy.accounting import query_count

# Rates measured in docs/benchmarks.md (per worker unless said otherwise).
PROCESS_BYTES = 250 * 2**20  # an idle driver or worker process with numpy, pandas, dask
INPUT_PARTITION_ROWS = 250_000  # rows per counting task (Parquet row groups, 64 MB of CSV)
TEXT_CELL_BYTES = 64  # a CSV cell read as a Python string
COUNT_UPDATES_PER_SECOND = 45e6  # read + encode + count, row x attribute-pair updates
# Each counting task allocates, fills, ships and sums one d×d int64 matrix: what dominates a
# wide schema's count (wide5000, d = 5,054: 4.5 s for 4 tasks of 250k rows).
COUNT_SECONDS_PER_MATRIX_CELL = 7.5e-8
NOISE_SECONDS_PER_CELL = 10.4e-6  # OpenDP's discrete Gaussian, on the driver
NOISE_SECONDS_PER_MARGINAL = 0.01  # one OpenDP measurement's setup (Adult: ~1 s for 120)
EIGH_SECONDS_PER_D3 = 1.7e-10  # one eigendecomposition, one BLAS thread
# Nearest correlation (Newton: ~6–7 eigh plus CG products worth a few more, measured at
# d = 2,000) + diagnostics and Cholesky.
COPULA_EIGH_SWEEPS = 15
CONSISTENCY_SECONDS_PER_CELL = 1e-5  # marginals: consistent tables + spanning tree
SAMPLE_FLOPS = 50e9  # copula: float32 GEMM of Z·Lᵀ
WRITE_SECONDS_PER_CELL = 0.4e-6  # decode + Parquet/Zarr, per row and attribute
# The Zarr chunk of uint8 dummies, per row and dummy column (compression of mostly zeros):
# 1.05 s for one 13,278-row partition of wide5000 (d = 5,054).
WRITE_SECONDS_PER_DUMMY = 1.6e-8
# Copula decoding calibration (dp_dask.data.decode), per attribute of s categories: a factor of its
# s × s block, draws × s normals through it, a few passes of argmax over them.
CALIBRATION_DRAWS = 200_000  # the copula's default calibration_draws
CALIBRATION_FACTOR_EIGH = 1.5  # psd_correlation_factor: eigh, then reconstruct + Cholesky
NORMAL_SECONDS = 1 / 111e6  # float32 standard normals
# s × s float64 temporaries besides the draws (group keys, reduced covariance, eigh, factor):
# 1.06 GB measured with tracemalloc at s = 5,000.
CALIBRATION_BLOCK_COPIES = 6
CALIBRATION_PASSES = 5  # 3–5 for attributes of 2–411 categories, 1 for wide5000's 5,000
ARGMAX_SECONDS_PER_VALUE = 1.4e-9  # offsets added + argmax, per draw and category
ROW_UPDATE_SECONDS = 1.0e-6  # marginals: row updates, per row and attribute pair


@dataclass(frozen=True)
class FitWork:
    """What a method's estimate (:meth:`Synthesizer.fit_cost`) reads: sizes from the schema and
    the row counts, no data."""

    sizes: list[int]  # categories per attribute
    d: int  # dummy columns, Σ sizes
    pairs: int  # attribute pairs, m(m-1)/2
    cells: int  # all 2-way cells
    matrix_bytes: int  # the d×d int64 count matrix
    sample_rows: int
    sample_rows_task: int  # rows per sampling task


@dataclass(frozen=True)
class FitCost:
    """A method's part of the estimate: its model, fit, sampling and any decoding calibration."""

    model_bytes: int  # the fitted model on the driver
    sample_task_bytes: int  # one sampling task, before its decoded partition
    fit_seconds: float
    sample_seconds: float  # all rows, one worker, before decoding and writing
    calibration_bytes: int = 0  # on the driver, besides the model
    calibration_seconds: float | None = None  # None: the method calibrates nothing


def dense_tables_cost(work: FitWork) -> FitCost:
    """Every 2-way table kept dense (the marginals method's model and row updates)."""
    return FitCost(model_bytes=4 * 8 * work.cells,  # measurements, variances, tables, work copy
                   sample_task_bytes=work.sample_rows_task * len(work.sizes) * 8 * 3
                   + 8 * work.cells,
                   fit_seconds=CONSISTENCY_SECONDS_PER_CELL * work.cells,
                   sample_seconds=work.sample_rows * work.pairs * ROW_UPDATE_SECONDS)


def copula_cost(work: FitWork) -> FitCost:
    """The Gaussian copula's d×d model, nearest-correlation repair, GEMM sampling, and its
    decoding calibration."""
    d = work.d
    largest = max(work.sizes)
    return FitCost(
        model_bytes=4 * work.matrix_bytes,  # noisy counts, correlation, its factor, a work copy
        sample_task_bytes=work.sample_rows_task * d * (4 + 1)  # float32 latent, uint8 dummies
        + 4 * work.matrix_bytes,
        fit_seconds=COPULA_EIGH_SWEEPS * EIGH_SECONDS_PER_D3 * d**3,
        sample_seconds=work.sample_rows * (2 * d * d / SAMPLE_FLOPS),
        # on the driver only: the calibration's float32 draws of the largest attribute and its
        # s × s float64 temporaries
        calibration_bytes=largest * (CALIBRATION_DRAWS * 4 + CALIBRATION_BLOCK_COPIES
                                     * largest * 8),
        calibration_seconds=calibration_seconds(work.sizes))


@dataclass(frozen=True)
class Estimate:
    schema: str
    method: str
    attributes: int
    dummy_columns: int
    queries: int
    table_cells: int  # all 2-way cells
    largest_table: tuple[str, str] | None
    largest_table_cells: int
    rows: int
    sample_rows: int
    workers: int
    sample_partition_rows: int
    count_matrix_bytes: int
    driver_bytes: int
    worker_bytes: int
    seconds: dict[str, float]
    # marginals under cliques="auto": the memory cap and what it bounds (None: no cliques)
    cliques: dict[str, int] | None = None

    def to_json(self) -> dict[str, Any]:
        record = asdict(self)
        if self.cliques is None:  # such plans' JSON stays as it was
            del record["cliques"]
        return {**record, "total_seconds": sum(self.seconds.values())}

    def describe(self) -> str:
        pair = (f"; largest {self.largest_table[0]} × {self.largest_table[1]}: "
                f"{self.largest_table_cells:,}" if self.largest_table else "")
        times = ", ".join(f"{stage} {format_time(s)}" for stage, s in self.seconds.items())
        return "\n".join([
            f"schema {self.schema!r}, method {self.method}: {self.attributes} attributes, "
            f"d = {self.dummy_columns:,} dummy columns, {self.queries:,} measured marginals",
            f"2-way table cells: {self.table_cells:,}{pair}",
            f"rows: {self.rows:,} in, {self.sample_rows:,} out in partitions of "
            f"{self.sample_partition_rows:,}; {self.workers} worker(s)",
            f"count matrix per task: {format_bytes(self.count_matrix_bytes)}",
            f"memory (estimate): driver ≈ {format_bytes(self.driver_bytes)}, each worker ≈ "
            f"{format_bytes(self.worker_bytes)} (give --memory-limit at least that)",
            f"time (rough, 2-core reference machine): {times}; total ≈ "
            f"{format_time(sum(self.seconds.values()))}",
            *([] if self.cliques is None else [
                f"cliques: each at most {self.cliques['max_clique_cells']:,} cells "
                "(max_clique_cells); the exact sparse joint on the driver ≈ "
                f"{format_bytes(self.cliques['joint_bytes'])}, the dense joint's fit ≤ "
                f"{format_bytes(self.cliques['clique_bytes'])}"]),
        ])


def estimate(schema: Schema, rows: int, *, method: str = "marginals",
             sample_rows: int | None = None, workers: int = 1,
             partition_rows: int | None = None, config: dict[str, Any] | None = None) -> Estimate:
    """The sizes, memory and time of fitting ``rows`` rows and sampling ``sample_rows``
    (default: as many), the method with ``config`` (its config's fields; the marginals method's
    ``cliques="auto"`` adds its memory cap, ``config_memory``). Refuses
    (CostError) or warns exactly as a fit would (check_cost)."""
    from dp_dask.synthesizer import Synthesizer  # here: synthesizer imports this module

    cost: Cost = check_cost(schema, method)
    sizes = schema.sizes.tolist()
    m, d = schema.m, schema.d
    pairs = m * (m - 1) // 2
    cells = sum(sizes[i] * sizes[j] for i in range(m) for j in range(i + 1, m))
    sample_rows = rows if sample_rows is None else sample_rows
    partition_rows = partition_rows or default_partition_rows(d)
    matrix = d * d * 8
    read_rows = min(rows, INPUT_PARTITION_ROWS)
    count_task = read_rows * m * (TEXT_CELL_BYTES + 8) + 2 * matrix  # text, codes, counts
    work = FitWork(sizes=sizes, d=d, pairs=pairs, cells=cells, matrix_bytes=matrix,
                   sample_rows=sample_rows, sample_rows_task=min(sample_rows, partition_rows))
    fit = Synthesizer.methods[method].fit_cost(work)  # the method's model, fit and sampling
    sample_task = fit.sample_task_bytes + work.sample_rows_task * m * TEXT_CELL_BYTES  # decoded
    tasks = -(-rows // INPUT_PARTITION_ROWS)
    seconds = {
        "count": (rows * (pairs + m) / COUNT_UPDATES_PER_SECOND
                  + tasks * d * d * COUNT_SECONDS_PER_MATRIX_CELL) / workers,
        "noise": (d + cells) * NOISE_SECONDS_PER_CELL + query_count(m) * NOISE_SECONDS_PER_MARGINAL,
        "fit": fit.fit_seconds,
        **({} if fit.calibration_seconds is None else {"calibration": fit.calibration_seconds}),
        "sample_write": (fit.sample_seconds + sample_rows * m * WRITE_SECONDS_PER_CELL
                         + sample_rows * d * WRITE_SECONDS_PER_DUMMY) / workers,
    }
    cliques = Synthesizer.methods[method].config_memory(schema, rows, config)
    return Estimate(
        schema=schema.name, method=method, attributes=m, dummy_columns=d,
        queries=query_count(m), table_cells=cells, largest_table=cost.largest_table,
        largest_table_cells=cost.table_cells, rows=rows, sample_rows=sample_rows,
        workers=workers, sample_partition_rows=partition_rows, count_matrix_bytes=matrix,
        driver_bytes=PROCESS_BYTES + 2 * matrix + fit.model_bytes + fit.calibration_bytes
        + (cliques["joint_bytes"] + cliques["clique_bytes"] if cliques else 0),
        worker_bytes=PROCESS_BYTES + max(count_task, sample_task),
        seconds={stage: round(value, 3) for stage, value in seconds.items()}, cliques=cliques)


def calibration_seconds(sizes: list[int], draws: int = CALIBRATION_DRAWS) -> float:
    """The copula's decoding calibration: per attribute, a factor of its block, the draws
    through it (a GEMM below GROUPED_MIN_CATEGORIES categories, a triangular multiply in place
    from there) and CALIBRATION_PASSES argmax passes. An upper bound for wide attributes: their
    exchangeable groups (which depend on the noisy counts, so no plan can know them) shrink the
    factor to the categories outside the groups."""
    seconds = 0.0
    for s in (s for s in sizes if s > 1):
        multiply = (1 if s >= GROUPED_MIN_CATEGORIES else 2) * draws * s * s / SAMPLE_FLOPS
        seconds += (CALIBRATION_FACTOR_EIGH * EIGH_SECONDS_PER_D3 * s**3 + multiply
                    + draws * s * (NORMAL_SECONDS + CALIBRATION_PASSES * ARGMAX_SECONDS_PER_VALUE))
    return seconds
