"""A method's part of ``dp-dask plan``'s estimate (dp_dask.estimate): what its model, fit and
sampling cost (:class:`FitCost`) for a schema's sizes and the row counts (:class:`FitWork`), no
data. Each method answers with :meth:`Synthesizer.fit_cost` from the functions here; the plan
adds the stages every method shares (counting, noise, writing).

Times and memory are estimates from the measurements of docs/benchmarks.md, as the plan's.
"""

from __future__ import annotations

from dataclasses import dataclass

from dp_dask.data.decode import GROUPED_MIN_CATEGORIES

# Rates measured in docs/benchmarks.md (per worker unless said otherwise).
EIGH_SECONDS_PER_D3 = 1.7e-10  # one eigendecomposition, one BLAS thread
# Nearest correlation (Newton: ~6–7 eigh plus CG products worth a few more, measured at
# d = 2,000) + diagnostics and Cholesky.
COPULA_EIGH_SWEEPS = 15
CONSISTENCY_SECONDS_PER_CELL = 1e-5  # marginals: consistent tables + spanning tree
SAMPLE_FLOPS = 50e9  # copula: float32 GEMM of Z·Lᵀ
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
