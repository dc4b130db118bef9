"""Parallel sampling: each output partition draws Y = Z·Lᵀ with its own child seed.

Partition p uses ``SeedSequence(seed).spawn(P)[p]``, so the output depends on the seed and the
partitioning only, never on the number of workers or the order tasks run in. The copula's latent
product runs on one BLAS thread: OpenBLAS sums float32 products in an order that depends on its
thread count, which flips a few thresholded dummies (docs/releases.md, "Determinism").
"""

from __future__ import annotations

import contextlib
import operator
import os
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import zarr
from dask.delayed import Delayed
from threadpoolctl import threadpool_limits

from dp_dask.copula.correlation import psd_correlation_factor
from dp_dask.data.decode import codes_to_frame, decode_latent
from dp_dask.data.schema import Schema

if TYPE_CHECKING:
    from dp_dask.copula.model import CopulaModel

# Rows drawn at once inside a partition: bounds the float32 latent block to ~64 MiB.
LATENT_BLOCK_BYTES = 64 * 2**20


_blas_lock = threading.Lock()
_blas_users = 0
_blas_limits: threadpool_limits | None = None


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    """BLAS on one thread while any task of this process is inside the block.

    Counted, because threadpoolctl's limits are process-wide: a task leaving must not restore
    the thread count under another that is still multiplying.
    """
    global _blas_users, _blas_limits
    with _blas_lock:
        if _blas_users == 0:
            _blas_limits = threadpool_limits(limits=1, user_api="blas")
        _blas_users += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_users -= 1
            if _blas_users == 0 and _blas_limits is not None:
                _blas_limits.restore_original_limits()
                _blas_limits = None


def default_partition_rows(d: int) -> int:
    """Rows per output partition: 100k, fewer for wide models so a partition stays ~256 MiB."""
    return int(min(100_000, max(1_000, 2**28 // (4 * d))))


class PartitionSampler(Protocol):
    """What a sampling task calls: one partition's binary dummies and codes from its seed."""

    schema: Schema

    def draw(self, rows: int, seed: np.random.SeedSequence) -> tuple[np.ndarray, np.ndarray]:
        ...


class SampledModel(Protocol):
    """A fitted model of any method: its schema, row count and partition sampler."""

    schema: Schema
    n_rows: int

    def sampler(self) -> PartitionSampler:
        ...


@dataclass(frozen=True)
class Sampler:
    """What a sampling task needs: the Cholesky factor, thresholds and decoding offsets."""

    schema: Schema
    factor: np.ndarray  # d×d lower triangular, float32
    thresholds: np.ndarray  # d, float32
    offsets: np.ndarray  # d

    @classmethod
    def from_model(cls, model: CopulaModel) -> Sampler:
        return cls(model.schema, psd_correlation_factor(model.correlation).astype(np.float32),
                   model.thresholds.astype(np.float32), model.decode_offsets)

    def draw(self, rows: int, seed: np.random.SeedSequence) -> tuple[np.ndarray, np.ndarray]:
        """Binary dummies (rows, d) uint8 and decoded codes (rows, m) of one partition."""
        rng = np.random.default_rng(seed)
        d = self.schema.d
        binary = np.empty((rows, d), dtype=np.uint8)
        codes = np.empty((rows, self.schema.m), dtype=np.int16)
        block = max(1, LATENT_BLOCK_BYTES // (4 * d))
        with single_threaded_blas():
            for start in range(0, rows, block):
                stop = min(rows, start + block)
                latent = rng.standard_normal((stop - start, d), dtype=np.float32) @ self.factor.T
                binary[start:stop] = latent > self.thresholds
                codes[start:stop] = decode_latent(latent, self.offsets, self.schema)
        return binary, codes


def partition_sizes(n_rows: int, partition_rows: int) -> list[int]:
    if n_rows < 1:
        raise ValueError(f"number of rows to sample must be positive, got {n_rows}")
    if partition_rows < 1:
        raise ValueError(f"partition_rows must be positive, got {partition_rows}")
    full, rest = divmod(n_rows, partition_rows)
    return [partition_rows] * full + ([rest] if rest else [])


def _seeded_partitions(model: SampledModel, n_rows: int, seed: int, partition_rows: int | None,
                       sampler: PartitionSampler | None = None
                       ) -> tuple[Delayed, list[tuple[int, int, Any]]]:
    """The shared sampler (built from the model unless given) and, per partition,
    (first row, rows, child seed)."""
    if partition_rows is None:
        partition_rows = default_partition_rows(model.schema.d)
    sizes = partition_sizes(n_rows, partition_rows)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).tolist()
    children = np.random.SeedSequence(seed).spawn(len(sizes))
    shared = dask.delayed(sampler or model.sampler(), pure=True)
    return shared, list(zip(starts, sizes, children))


def _draw_frame(sampler: PartitionSampler, rows: int,
                child: np.random.SeedSequence) -> pd.DataFrame:
    return codes_to_frame(sampler.draw(rows, child)[1], sampler.schema)


def sample_frame(model: SampledModel, n_rows: int, *, seed: int = 0,
                 partition_rows: int | None = None) -> dd.DataFrame:
    """Lazy decoded synthetic rows."""
    sampler, partitions = _seeded_partitions(model, n_rows, seed, partition_rows)
    frames = [dask.delayed(_draw_frame, pure=True)(sampler, rows, child)
              for _, rows, child in partitions]
    meta = codes_to_frame(np.zeros((0, model.schema.m), dtype=np.int16), model.schema)
    return dd.from_delayed(frames, meta=meta, verify_meta=False)


def part_name(index: int, partitions: int) -> str:
    """Zero-padded, so every reader's lexicographic file order is the row order."""
    return f"part.{index:0{max(6, len(str(partitions)))}d}.parquet"


def _write_partition(sampler: PartitionSampler, index: int, start: int, rows: int,
                     child: np.random.SeedSequence, binary_target: zarr.Array, part: str,
                     markers: str) -> int:
    binary, codes = sampler.draw(rows, child)
    # Partitions are chunk-aligned, so no two tasks write the same Zarr chunk, and a retried or
    # resumed task rewrites identical bytes.
    binary_target[start : start + rows] = binary
    # A unique hidden name (readers skip it) renamed into place: a part is never half-written,
    # even if a straggler of a killed job writes the same part.
    partial = Path(part).with_name(f".{Path(part).name}.{uuid.uuid4().hex}")
    codes_to_frame(codes, sampler.schema).to_parquet(partial, index=False)
    os.replace(partial, part)
    (Path(markers) / str(index)).touch()  # last: both outputs of the partition are in place
    return index


def write_partitions(model: SampledModel, n_rows: int, *, seed: int, partition_rows: int,
                     binary_target: zarr.Array, parquet: Path, markers: Path,
                     skip: set[int] | frozenset[int] = frozenset(),
                     sampler: PartitionSampler | None = None) -> list[Delayed]:
    """One task per partition not in ``skip``: draw it once, write its Zarr chunk and its
    Parquet part under ``parquet``, then its done marker under ``markers``.

    Paths must be absolute: the tasks run in the workers' working directories.
    """
    sampler, partitions = _seeded_partitions(model, n_rows, seed, partition_rows, sampler)
    parquet.mkdir(parents=True, exist_ok=True)
    return [dask.delayed(_write_partition, pure=True)(
                sampler, index, start, rows, child, binary_target,
                str(parquet / part_name(index, len(partitions))), str(markers))
            for index, (start, rows, child) in enumerate(partitions) if index not in skip]


def _draw(sampler: PartitionSampler, rows: int,
          child: np.random.SeedSequence) -> tuple[np.ndarray, np.ndarray]:
    return sampler.draw(rows, child)


def sample_binary(model: SampledModel, n_rows: int, *, seed: int = 0,
                  partition_rows: int | None = None) -> da.Array:
    """Lazy (rows, d) uint8 binary dummies, one chunk per partition, same draws as the frame."""
    sampler, partitions = _seeded_partitions(model, n_rows, seed, partition_rows)
    d = model.schema.d
    blocks = [dask.delayed(_draw, pure=True)(sampler, rows, child)
              for _, rows, child in partitions]
    return da.concatenate([
        da.from_delayed(dask.delayed(operator.getitem)(block, 0), shape=(rows, d), dtype=np.uint8)
        for block, (_, rows, _) in zip(blocks, partitions)
    ])
