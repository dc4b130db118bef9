"""Where the Dask work runs: an existing scheduler, or a LocalCluster started for the job."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import dask
from dask.diagnostics import ProgressBar
from distributed import Client, LocalCluster, progress

log = logging.getLogger(__name__)
LOCAL_HOST = "127.0.0.1"


@contextlib.contextmanager
def dask_client(scheduler: str | None = None, *, n_workers: int | None = None,
                threads_per_worker: int = 1,
                memory_limit: str | int = "auto") -> Iterator[Client]:
    """A client of the scheduler at ``scheduler``, else of a fresh LocalCluster (closed on exit)."""
    if scheduler:
        with Client(scheduler) as client:
            log.info("connected to scheduler %s (%d workers)", scheduler,
                     len(client.scheduler_info().get("workers", {})))
            yield client
        return
    with (
        # Loopback only: the scheduler, workers and dashboard are not reachable from the network.
        LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker,
                     memory_limit=memory_limit, host=LOCAL_HOST,
                     dashboard_address=f"{LOCAL_HOST}:0") as cluster,
        Client(cluster) as client,
    ):
        log.info("local cluster: %d workers, dashboard %s", len(cluster.workers),
                 client.dashboard_link)
        yield client


def current_client() -> Client | None:
    """The Client this process uses by default, if any."""
    try:
        from distributed import get_client

        return get_client()
    except ValueError:
        return None


def compute(*collections: Any, show_progress: bool = False) -> tuple[Any, ...]:
    """``dask.compute`` that shares common tasks and shows progress on the active scheduler."""
    client = current_client()
    if client is None:
        with ProgressBar() if show_progress else contextlib.nullcontext():
            return dask.compute(*collections)
    futures = client.compute(list(collections))
    if show_progress:
        progress(futures)
    return tuple(client.gather(futures))
