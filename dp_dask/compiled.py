"""The compiled passes' decorator, and numba's on-disk cache made safe for several processes.

Every compiled pass of dp_dask is :func:`compiled`: numba's ``njit`` with its machine code cached
beside the module, so a Dask worker loads it instead of compiling it. numba (0.68) saves a new
signature to that cache by reading the function's index, taking the first free data-file number
and writing both, with no lock: two workers compiling two signatures of one function at once (a
fresh install's first release on a LocalCluster) can take the same number, and every later
process then loads one signature's code for the other ("TypeError: can't unbox array from
PyObject"; numba issues #4807 and #10128, open). :func:`lock_cache` makes a save exclusive, and a
load shared, between processes by an ``flock`` on a file beside the index. Hand-written because
numba has no hook for it: it wraps numba's own two methods and changes nothing else.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
from collections.abc import Callable, Iterator
from typing import Any

import numba
from numba.core.caching import IndexDataCacheFile

LOCK_SUFFIX = ".lock"


@contextlib.contextmanager
def _flocked(path: str, mode: int) -> Iterator[None]:
    with open(path, "a") as handle:  # "a": made if absent, never truncated
        fcntl.flock(handle, mode)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _under_lock(method: Callable[..., Any], mode: int) -> Callable[..., Any]:
    @functools.wraps(method)
    def locked(self: IndexDataCacheFile, *args: Any) -> Any:
        with _flocked(self._index_path + LOCK_SUFFIX, mode):
            return method(self, *args)

    locked.dp_dask_locked = True  # type: ignore[attr-defined]
    return locked


def lock_cache() -> None:
    """Saves to numba's cache exclusive, loads shared, between processes (once per process)."""
    if getattr(IndexDataCacheFile.save, "dp_dask_locked", False):
        return
    IndexDataCacheFile.save = _under_lock(IndexDataCacheFile.save, fcntl.LOCK_EX)
    IndexDataCacheFile.load = _under_lock(IndexDataCacheFile.load, fcntl.LOCK_SH)


lock_cache()


def compiled(function: Callable[..., Any]) -> Callable[..., Any]:
    """``numba.njit(cache=True, nogil=True)``: compiled once per signature and machine, cached
    under :func:`lock_cache`, and free of the GIL so a worker's threads run it side by side."""
    return numba.njit(cache=True, nogil=True)(function)
