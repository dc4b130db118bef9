"""What a run will cost, from the schema and the row count alone (``dp-dask plan``).

Sizes are exact (d, the 2-way cells, the count matrix); memory and time are estimates from the
measurements of docs/benchmarks.md (a 2-core VM, LocalCluster of 2 workers): order-of-magnitude
guides for choosing workers and ``--memory-limit`` before a run, not promises. No data is read.
The stages every method shares are estimated here; each method's model, fit and sampling by its
class (:meth:`Synthesizer.fit_cost`, from :mod:`dp_dask.fit_cost`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from dask.utils import format_bytes, format_time

from dp_dask.checks import Cost, check_cost
from dp_dask.copula.sample import default_partition_rows
from dp_dask.data.schema import Schema
from dp_dask.fit_cost import FitWork
from dp_dask.privacy.accounting import query_count
from dp_dask.synthesizer import Synthesizer

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
WRITE_SECONDS_PER_CELL = 0.4e-6  # decode + Parquet/Zarr, per row and attribute
# The Zarr chunk of uint8 dummies, per row and dummy column (compression of mostly zeros):
# 1.05 s for one 13,278-row partition of wide5000 (d = 5,054).
WRITE_SECONDS_PER_DUMMY = 1.6e-8


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
    declared = Synthesizer.methods[method]  # what differs by method: its class answers
    cost: Cost = check_cost(schema, declared)
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
    fit = declared.fit_cost(work)  # the method's model, fit and sampling
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
    cliques = declared.config_memory(schema, rows, config)
    return Estimate(
        schema=schema.name, method=method, attributes=m, dummy_columns=d,
        queries=query_count(m), table_cells=cells, largest_table=cost.largest_table,
        largest_table_cells=cost.table_cells, rows=rows, sample_rows=sample_rows,
        workers=workers, sample_partition_rows=partition_rows, count_matrix_bytes=matrix,
        driver_bytes=PROCESS_BYTES + 2 * matrix + fit.model_bytes + fit.calibration_bytes
        + (cliques["joint_bytes"] + cliques["clique_bytes"] if cliques else 0),
        worker_bytes=PROCESS_BYTES + max(count_task, sample_task),
        seconds={stage: round(value, 3) for stage, value in seconds.items()}, cliques=cliques)
