"""numba's cache under dp_dask.compiled.lock_cache: saves exclusive and loads shared between
processes, so processes compiling signatures of one function at once never swap their code."""

import fcntl
import multiprocessing
import threading

from numba.core.caching import IndexDataCacheFile

from dp_dask.compiled import LOCK_SUFFIX

STAMP = ("source", 1)  # any stamp: the index is fresh while it is the same
KEYS_PER_PROCESS = 25


def cache_file(folder: str) -> IndexDataCacheFile:
    return IndexDataCacheFile(folder, "pass", STAMP)


def test_a_save_waits_for_the_lock_beside_the_index(tmp_path):
    cache = cache_file(str(tmp_path))
    with open(str(tmp_path / "pass.nbi") + LOCK_SUFFIX, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another process compiling the same function
        saving = threading.Thread(target=cache.save, args=(("int16",), "code for int16"))
        saving.start()
        saving.join(timeout=0.5)
        assert saving.is_alive()  # waits for the lock: numba alone would have written
        fcntl.flock(held, fcntl.LOCK_UN)
    saving.join(timeout=10)
    assert not saving.is_alive()
    assert cache.load(("int16",)) == "code for int16"


def _save_signatures(folder: str, process: int) -> None:
    cache = cache_file(folder)
    for k in range(KEYS_PER_PROCESS):
        cache.save((process, k), f"code of {process}/{k}")


def test_processes_saving_signatures_at_once_keep_each_its_own_code(tmp_path):
    # Without the lock, processes reading the index together take the same data-file number
    # for different signatures, and a signature's index entry then names another's code.
    context = multiprocessing.get_context("fork")
    processes = [context.Process(target=_save_signatures, args=(str(tmp_path), p))
                 for p in range(6)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    cache = cache_file(str(tmp_path))
    index = cache._load_index()
    assert len(index) == 6 * KEYS_PER_PROCESS  # no save lost either
    for (process, k) in index:
        assert cache.load((process, k)) == f"code of {process}/{k}"
