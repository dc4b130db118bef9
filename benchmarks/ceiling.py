"""The machine's own parallel ceiling: the same single-threaded task in k processes at once.

    python -m benchmarks.ceiling --processes 1 8 16

Each process runs a fixed task one thread at a time (the workers' setting): "gather" is the
sampling tasks' kind of work (random codes, fancy-index gathers and bincounts over arrays larger
than the caches), "gemm" a small in-cache float32 product. Efficiency at k = time alone / time
with k at once: below 100 % the cores share something (SMT siblings, memory bandwidth, a lower
all-core clock), and no scheduling of tasks can win it back.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from threadpoolctl import threadpool_limits

ROWS = 2_000_000


def _gather(repeat: int = 6) -> float:
    rng = np.random.default_rng(0)
    started = time.perf_counter()
    for _ in range(repeat):
        codes = rng.integers(0, 50, size=(ROWS, 4), dtype=np.int64)
        keys = codes[:, 0] * 50 + codes[rng.permutation(ROWS), 1]
        np.bincount(keys, minlength=2500)
        np.take(codes, rng.integers(0, ROWS, size=ROWS), axis=0)
    return time.perf_counter() - started


def _gemm(repeat: int = 2000) -> float:
    a = np.random.default_rng(0).standard_normal((256, 256), dtype=np.float32)
    with threadpool_limits(1, user_api="blas"):
        started = time.perf_counter()
        for _ in range(repeat):
            a @ a
        return time.perf_counter() - started


TASKS = {"gather": _gather, "gemm": _gemm}


def ceiling(processes: list[int]) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for name, task in TASKS.items():
        times = {}
        for k in processes:
            with ProcessPoolExecutor(k) as pool:
                list(pool.map(_gemm, [1] * k))  # processes started before timing
                futures = [pool.submit(task) for _ in range(k)]
                times[k] = float(np.mean([future.result() for future in futures]))
        alone = times[min(times)]
        out[name] = {k: round(alone / t, 3) for k, t in times.items()}
        out[name + "_seconds"] = {k: round(t, 3) for k, t in times.items()}
    return out


def main(argv: list[str] | None = None) -> dict[str, dict[int, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    result = ceiling(parser.parse_args(argv).processes)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
