"""Parallel sampling: each output partition draws Y = Z·Lᵀ with its own child seed.

Partition p uses ``SeedSequence(seed).spawn(P)[p]``, so the output depends on the seed and the
partitioning only, never on the number of workers or the order tasks run in.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import zarr
from dask.delayed import Delayed

from dp_dask.copula import psd_correlation_factor
from dp_dask.decode import codes_to_frame, decode_latent
from dp_dask.schema import Schema

if TYPE_CHECKING:
    from dp_dask.model import CopulaModel

# Rows drawn at once inside a partition: bounds the float32 latent block to ~64 MiB.
LATENT_BLOCK_BYTES = 64 * 2**20


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
    sizes = partition_sizes(n_rows, partition_rows or default_partition_rows(model.schema.d))
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).tolist()
    children = np.random.SeedSequence(seed).spawn(len(sizes))
    shared = dask.delayed(sampler or model.sampler(), pure=True)
    return shared, list(zip(starts, sizes, children))


def _draw_frame(sampler: PartitionSampler, start: int, rows: int, child: np.random.SeedSequence,
                binary_target: zarr.Array | None) -> pd.DataFrame:
    binary, codes = sampler.draw(rows, child)
    if binary_target is not None:
        # Partitions are chunk-aligned, so no two tasks write the same Zarr chunk, and a retried
        # task rewrites identical bytes.
        binary_target[start : start + rows] = binary
    return codes_to_frame(codes, sampler.schema)


def sample_frame(model: SampledModel, n_rows: int, *, seed: int = 0,
                 partition_rows: int | None = None,
                 binary_target: zarr.Array | None = None,
                 sampler: PartitionSampler | None = None) -> dd.DataFrame:
    """Lazy decoded synthetic rows; with ``binary_target`` each task also stores its dummies.

    Writing both outputs from one task draws each partition once. ``sampler`` (the model's,
    prepared already, e.g. its Cholesky factor) saves preparing it again.
    """
    sampler, partitions = _seeded_partitions(model, n_rows, seed, partition_rows, sampler)
    frames = [dask.delayed(_draw_frame, pure=True)(sampler, start, rows, child, binary_target)
              for start, rows, child in partitions]
    meta = codes_to_frame(np.zeros((0, model.schema.m), dtype=np.int16), model.schema)
    return dd.from_delayed(frames, meta=meta, verify_meta=False)


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
