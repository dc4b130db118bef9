"""Parallel sampling: each output partition draws Y = Z·Lᵀ with its own child seed.

Partition p uses ``SeedSequence(seed).spawn(P)[p]``, so the output depends on the seed and the
partitioning only, never on the number of workers or the order tasks run in. The copula's latent
product runs on one BLAS thread: a BLAS may sum float32 products in an order that depends on its
thread count (OpenBLAS's GEMM does; its strmm, used here, splits columns), which flips a few
thresholded dummies (docs/releases.md, "Determinism").

With ``device="gpu"`` the copula's draws run on a CUDA GPU through CuPy: the same block of code
on CuPy arrays, the same distribution, but CuPy's own random stream, so other rows than the
CPU's for the same seed. It is never chosen silently: "cpu" is the default, "auto" takes the GPU
where the model and machine allow, and the release records the device that drew it.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import operator
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import zarr
from dask.delayed import Delayed
from threadpoolctl import threadpool_limits

from dp_dask.copula.correlation import times_lower_factor
from dp_dask.copula.normals import fill_standard_normal
from dp_dask.data.decode import decode_latent
from dp_dask.data.io import Location, join, put_bytes
from dp_dask.data.schema import Schema
from dp_dask.data.values import (
    arrow_schema,
    check_decode,
    decode_frame,
    decode_table,
    empty_frame,
)

# Rows drawn at once inside a partition: bounds the float32 latent block to ~64 MiB.
LATENT_BLOCK_BYTES = 64 * 2**20
# On a GPU a block is launched as a few kernels per attribute, worth it only over many rows.
GPU_BLOCK_BYTES = 2**30
SAMPLING_DEVICES = ("cpu", "gpu", "auto")


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


def gpu_available() -> bool:
    """Whether CuPy imports and sees a CUDA device."""
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except (ImportError, RuntimeError):  # no CuPy, or no driver / device (CUDARuntimeError)
        return False


def resolve_device(model: SampledModel, device: str) -> str:
    """The device that draws a model's rows: "cpu" or "gpu" ("auto": the GPU where the model's
    sampler can use one and CuPy sees one). A GPU asked for and not usable is an error."""
    return choose_device(device, "device" in inspect.signature(model.sampler).parameters,
                         type(model).__name__)


def choose_device(device: str, gpu_sampler: bool, what: str) -> str:
    """:func:`resolve_device` for a sampler that can (``gpu_sampler``) or cannot use a GPU;
    ``what`` names it in the error."""
    if device not in SAMPLING_DEVICES:
        raise ValueError(f"sampling device must be one of {SAMPLING_DEVICES}, got {device!r}")
    if device == "cpu" or (device == "auto" and not (gpu_sampler and gpu_available())):
        return "cpu"
    if not gpu_sampler:
        raise ValueError(f"{what} samples on the CPU only; the GPU path is the copula's latent "
                         "product (method 'copula')")
    if not gpu_available():
        raise ValueError("sampling device 'gpu' needs CuPy (e.g. pip install cupy-cuda12x) "
                         "and a CUDA GPU, and this machine has none; use 'cpu' or 'auto'")
    return "gpu"


def model_sampler(model: SampledModel, device: str = "cpu") -> PartitionSampler:
    """The model's partition sampler on ``device``, as :func:`resolve_device` resolves it."""
    return model.sampler(device="gpu") if resolve_device(model, device) == "gpu" \
        else model.sampler()


class PartitionSampler(Protocol):
    """What a sampling task calls: one partition's binary dummies and codes from its seed."""

    schema: Schema

    def draw(self, rows: int, seed: np.random.SeedSequence) -> tuple[np.ndarray, np.ndarray]:
        ...


@runtime_checkable
class ReleaseSampler(PartitionSampler, Protocol):
    """A sampler whose partitions share work drawn once per release (the marginals' fitted
    candidates): :func:`_seeded_partitions` runs :meth:`for_release` once per estimate
    (:meth:`estimates` of them), and the partitions' tasks read the estimates in turn."""

    def estimates(self, sizes: list[int]) -> int:
        ...

    def for_release(self, rows: int, seed: np.random.SeedSequence,
                    release_rows: int | None = None) -> PartitionSampler:
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
    device: str = "cpu"  # or "gpu": CuPy (resolve_device checked it)

    def draw(self, rows: int, seed: np.random.SeedSequence) -> tuple[np.ndarray, np.ndarray]:
        """Binary dummies (rows, d) uint8 and decoded codes (rows, m) of one partition."""
        binary = np.empty((rows, self.schema.d), dtype=np.uint8)
        codes = self._draw_into(rows, seed, binary)
        return binary, codes

    def draw_codes(self, rows: int, seed: np.random.SeedSequence) -> np.ndarray:
        """The codes :meth:`draw` gives, without thresholding the dummies (a release without
        Zarr reads only the codes)."""
        return self._draw_into(rows, seed, None)

    def _draw_into(self, rows: int, seed: np.random.SeedSequence,
                   binary: np.ndarray | None) -> np.ndarray:
        d = self.schema.d
        codes = np.empty((rows, self.schema.m), dtype=np.int16)
        if self.device == "gpu":
            import cupy

            # CuPy seeds from an integer; the child seed's first word keeps partitions apart.
            rng = cupy.random.default_rng(int(seed.generate_state(1, np.uint64)[0]))
            factor, thresholds, offsets = (cupy.asarray(a) for a in (self.factor,
                                                                      self.thresholds,
                                                                      self.offsets))
            for start, stop in _blocks(rows, GPU_BLOCK_BYTES // (4 * d)):
                normals = rng.standard_normal((stop - start, d), dtype=cupy.float32)
                # CuPy has no trmm, and its GEMM is not what limits the GPU path
                # (benchmarks/SESSIONS.md, "Device runs").
                latent = normals @ factor.T
                if binary is not None:
                    binary[start:stop] = (latent > thresholds).get()
                codes[start:stop] = decode_latent(latent, offsets, self.schema, xp=cupy).get()
            return codes
        bits = np.random.PCG64(seed)
        block_rows = max(1, min(rows, LATENT_BLOCK_BYTES // (4 * d)))
        buffer = np.empty((block_rows, d), np.float32)  # one for every block: no page faults
        with single_threaded_blas():
            for start, stop in _blocks(rows, block_rows):
                normals = fill_standard_normal(bits, buffer[: stop - start])
                latent = times_lower_factor(normals, self.factor)
                if binary is not None:
                    np.greater(latent, self.thresholds, out=binary[start:stop])
                codes[start:stop] = decode_latent(latent, self.offsets, self.schema)
        return codes


def _blocks(rows: int, block: int) -> Iterator[tuple[int, int]]:
    block = max(1, block)
    for start in range(0, rows, block):
        yield start, min(rows, start + block)


def partition_sizes(n_rows: int, partition_rows: int) -> list[int]:
    if n_rows < 1:
        raise ValueError(f"number of rows to sample must be positive, got {n_rows}")
    if partition_rows < 1:
        raise ValueError(f"partition_rows must be positive, got {partition_rows}")
    full, rest = divmod(n_rows, partition_rows)
    return [partition_rows] * full + ([rest] if rest else [])


def _seeded_partitions(model: SampledModel, n_rows: int, seed: int, partition_rows: int | None,
                       sampler: PartitionSampler | None = None
                       ) -> list[tuple[int, int, Any, Delayed]]:
    """Per partition: (first row, rows, child seed, its sampler). The sampler is built from the
    model unless given; a :class:`ReleaseSampler` is made once per release per estimate, the
    partitions taking the estimates in turn."""
    if partition_rows is None:
        partition_rows = default_partition_rows(model.schema.d)
    sizes = partition_sizes(n_rows, partition_rows)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).tolist()
    sampler = sampler or model.sampler()
    root = np.random.SeedSequence(seed)
    children = root.spawn(len(sizes))
    shared = [dask.delayed(sampler, pure=True)]
    if isinstance(sampler, ReleaseSampler):
        # Spawned after the partitions' children: the partitions' seeds stay the same.
        shared = [dask.delayed(_for_release, pure=True)(shared[0], max(sizes), release_seed,
                                                         sum(sizes))
                  for release_seed in root.spawn(sampler.estimates(sizes))]
    return [(start, rows, child, shared[index % len(shared)])
            for index, (start, rows, child) in enumerate(zip(starts, sizes, children))]


def _for_release(sampler: ReleaseSampler, rows: int, seed: np.random.SeedSequence,
                 release_rows: int) -> PartitionSampler:
    return sampler.for_release(rows, seed, release_rows)


def fine_histograms(sampler: PartitionSampler) -> dict[int, np.ndarray]:
    """The consistent fine histograms the sampler's model decodes values from (marginals
    models of schemas with fine grids; none for the other methods)."""
    return getattr(sampler, "fine", {})


def draw_codes(sampler: PartitionSampler, rows: int,
               child: np.random.SeedSequence) -> np.ndarray:
    """A partition's codes alone, the same as :meth:`PartitionSampler.draw`'s: a sampler whose
    dummies are a function of its codes (the marginals' one-hot) skips building them."""
    if hasattr(sampler, "draw_codes"):  # as draw gives them: decoding sees the same array
        return sampler.draw_codes(rows, child).astype(np.int16)
    return sampler.draw(rows, child)[1]


def decoded(sampler: PartitionSampler, codes: np.ndarray, decode: str,
            child: np.random.SeedSequence) -> pd.DataFrame:
    """A partition's codes decoded; a conditioned sampler then draws the values of bins the
    condition splits within it (its ``finish_frame``)."""
    frame = decode_frame(codes, sampler.schema, decode, child, fine_histograms(sampler))
    finish = getattr(sampler, "finish_frame", None)
    return frame if finish is None else finish(frame, codes, child)


def decoded_table(sampler: PartitionSampler, codes: np.ndarray, decode: str,
                  child: np.random.SeedSequence, arrow: pa.Schema) -> pa.Table:
    """:func:`decoded` as the part's Arrow table of schema ``arrow``: built from the columns
    where no conditioned sampler finishes the frame (:func:`decode_table`), the same table."""
    if getattr(sampler, "finish_frame", None) is not None:
        return pa.Table.from_pandas(decoded(sampler, codes, decode, child), schema=arrow,
                                    preserve_index=False)
    return decode_table(codes, sampler.schema, decode, child, arrow, fine_histograms(sampler))


def _draw_frame(sampler: PartitionSampler, rows: int, child: np.random.SeedSequence,
                decode: str) -> pd.DataFrame:
    return decoded(sampler, draw_codes(sampler, rows, child), decode, child)


def sample_frame(model: SampledModel, n_rows: int, *, seed: int = 0,
                 partition_rows: int | None = None, sampler: PartitionSampler | None = None,
                 decode: str = "uniform") -> dd.DataFrame:
    """Lazy decoded synthetic rows: typed values, or bin labels with ``decode="label"``
    (:mod:`dp_dask.data.values`)."""
    check_decode(decode)
    partitions = _seeded_partitions(model, n_rows, seed, partition_rows, sampler)
    frames = [dask.delayed(_draw_frame, pure=True)(shared, rows, child, decode)
              for _, rows, child, shared in partitions]
    return dd.from_delayed(frames, meta=empty_frame(model.schema, decode), verify_meta=False)


def part_name(index: int, partitions: int) -> str:
    """Zero-padded, so every reader's lexicographic file order is the row order."""
    return f"part.{index:0{max(6, len(str(partitions)))}d}.parquet"


def _write_partition(sampler: PartitionSampler, index: int, start: int, rows: int,
                     child: np.random.SeedSequence, binary_target: zarr.Array | None,
                     part: Location, markers: Location, storage_options: dict[str, Any] | None,
                     decode: str, arrow: pa.Schema) -> int:
    if binary_target is None:
        codes = draw_codes(sampler, rows, child)
    else:
        binary, codes = sampler.draw(rows, child)
        # Partitions are chunk-aligned, so no two tasks write the same Zarr chunk, and a
        # retried or resumed task rewrites identical bytes.
        binary_target[start : start + rows] = binary
    # Built in memory, then stored whole or not at all (put_bytes: a hidden name renamed on disk,
    # one PUT in a store): a part is never half-written, even by a straggler of a killed job.
    partial = io.BytesIO()
    # One Arrow schema for every part: the same types (a part without nulls included).
    pq.write_table(decoded_table(sampler, codes, decode, child, arrow), partial,
                   use_dictionary=dictionary_columns(arrow), compression=compression(arrow))
    put_bytes(part, partial.getvalue(), storage_options)
    # last: both outputs of the partition are in place
    put_bytes(join(markers, str(index)), b"", storage_options)
    return index


def dictionary_columns(arrow: pa.Schema) -> list[str]:
    """The columns Parquet should dictionary-encode: all but floats and timestamps. Values drawn
    within bins are nearly all distinct there, so a dictionary only grows until Parquet gives
    it up: on the DSS shape it tripled a typed part's write time (1.5 s vs 0.6 s per 100 k rows,
    docs/benchmarks.md) and made the part larger."""
    return [field.name for field in arrow
            if not (pa.types.is_floating(field.type) or pa.types.is_timestamp(field.type))]


def compression(arrow: pa.Schema) -> dict[str, str]:
    """Per column, Parquet's compression: none for floats, Parquet's default (snappy) for the
    rest. Drawn floats are nearly random bits: snappy left a typed DSS part at 11.3 MB either
    way and took 14 % of its Parquet write (0.080 vs 0.069 CPU s per 100 k rows)."""
    return {field.name: "none" if pa.types.is_floating(field.type) else "snappy"
            for field in arrow}


def write_partitions(model: SampledModel, n_rows: int, *, seed: int, partition_rows: int,
                     binary_target: zarr.Array | None, parquet: Location, markers: Location,
                     skip: set[int] | frozenset[int] = frozenset(),
                     sampler: PartitionSampler | None = None,
                     storage_options: dict[str, Any] | None = None,
                     decode: str = "uniform") -> list[Delayed]:
    """One task per partition not in ``skip``: draw it once, write its Zarr chunk (unless
    ``binary_target`` is None) and its Parquet part under ``parquet`` (decoded by ``decode``),
    then its done marker under ``markers``.

    Paths must be absolute (or URLs of an object store, reached with ``storage_options``, which
    travel with the tasks): the tasks run in the workers' working directories.
    """
    arrow = arrow_schema(model.schema, check_decode(decode))
    partitions = _seeded_partitions(model, n_rows, seed, partition_rows, sampler)
    return [dask.delayed(_write_partition, pure=True)(
                shared, index, start, rows, child, binary_target,
                join(parquet, part_name(index, len(partitions))), markers, storage_options,
                decode, arrow)
            for index, (start, rows, child, shared) in enumerate(partitions)
            if index not in skip]


def _draw(sampler: PartitionSampler, rows: int,
          child: np.random.SeedSequence) -> tuple[np.ndarray, np.ndarray]:
    return sampler.draw(rows, child)


def sample_binary(model: SampledModel, n_rows: int, *, seed: int = 0,
                  partition_rows: int | None = None,
                  sampler: PartitionSampler | None = None) -> da.Array:
    """Lazy (rows, d) uint8 binary dummies, one chunk per partition, same draws as the frame."""
    partitions = _seeded_partitions(model, n_rows, seed, partition_rows, sampler)
    d = model.schema.d
    blocks = [dask.delayed(_draw, pure=True)(shared, rows, child)
              for _, rows, child, shared in partitions]
    return da.concatenate([
        da.from_delayed(dask.delayed(operator.getitem)(block, 0), shape=(rows, d), dtype=np.uint8)
        for block, (_, rows, _, _) in zip(blocks, partitions)
    ])
