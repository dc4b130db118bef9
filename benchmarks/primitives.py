"""Rates of the kernels behind the stages, for reading the stage table against the machine.

    python -m benchmarks.primitives [--d 2000]

eigh with one BLAS thread and with all, float32 GEMM and normal draws (the sampling kernels),
bincount pair updates (counting), OpenDP's discrete Gaussian per cell (noise).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np
import opendp.prelude as dp
from threadpoolctl import threadpool_limits


def seconds(f: Callable[[], object], repeat: int = 3) -> float:
    """Best of ``repeat`` wall times: the machine is shared, the minimum is the kernel's."""
    best = np.inf
    for _ in range(repeat):
        started = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - started)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d", type=int, default=2000)
    d = parser.parse_args(argv).d
    rng = np.random.default_rng(0)
    print(f"load average {os.getloadavg()[0]:.2f}")
    a = rng.standard_normal((d, d))
    a = a + a.T
    for threads in (1, None):
        with threadpool_limits(threads, user_api="blas"):
            print(f"eigh d={d}, BLAS threads {threads or 'all'}: "
                  f"{seconds(lambda: np.linalg.eigh(a), 1):.2f} s")
    rows = 20_000
    z = rng.standard_normal((rows, d), dtype=np.float32)
    factor = rng.standard_normal((d, d)).astype(np.float32)
    with threadpool_limits(1, user_api="blas"):  # as on a Dask worker
        gemm = seconds(lambda: z @ factor.T)
    print(f"float32 GEMM ({rows}x{d})·({d}x{d}), 1 thread: {2 * rows * d * d / gemm / 1e9:.0f} "
          "GFLOP/s")
    draw = seconds(lambda: rng.standard_normal((rows, d), dtype=np.float32))
    print(f"float32 normal draws: {rows * d / draw / 1e6:.0f} M/s")
    n = 1_000_000
    codes = rng.integers(0, 40, (2, n))
    count = seconds(lambda: np.bincount(codes[0] * 40 + codes[1], minlength=1600))
    print(f"bincount of one attribute pair: {n / count / 1e6:.0f} M row-pair updates/s")
    dp.enable_features("contrib")
    gaussian = dp.m.make_gaussian(dp.vector_domain(dp.atom_domain(T="i64")),
                                  dp.l2_distance(T="f64"), scale=2000.0)
    cells = np.zeros(100_000, dtype=np.int64)
    per_cell = seconds(lambda: gaussian(cells), 1) / cells.size
    print(f"OpenDP discrete Gaussian, one call: {per_cell * 1e6:.1f} µs/cell")


if __name__ == "__main__":
    main()
