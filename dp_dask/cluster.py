"""Where the Dask work runs: a LocalCluster started for the job (``local``), an existing
scheduler (``address``), or a cluster started for the job by dask-jobqueue (``jobqueue``: SLURM,
PBS, ...), dask-kubernetes (``kubernetes``) or Dask Gateway (``gateway``). The last three are
optional extras (``pip install 'dp-dask[jobqueue]'`` ...), imported only when asked for.

A cluster that cannot make progress must fail, never hang: while :func:`compute` waits, a
watchdog polls the scheduler and cancels the work, naming the limit to raise, when workers keep
dying, or when no worker can run tasks (none alive, or all paused for memory) for too long.
Distributed handles one task killing workers itself (``KilledWorker``, after
``distributed.scheduler.allowed-failures``); the watchdog catches workers that die or pause
before any task is blamed, e.g. a memory limit below a worker process's own footprint.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import dask
from dask.diagnostics import ProgressBar
from dask.utils import format_bytes, parse_bytes, parse_timedelta
from distributed import Client, KilledWorker, LocalCluster, progress
from distributed.client import FutureCancelledError
from distributed.utils import is_kernel

log = logging.getLogger(__name__)
LOCAL_HOST = "127.0.0.1"
# Overridable in dask's config, e.g. DASK_DP_DASK__STALL_TIMEOUT=5s. The connect timeout is far
# below distributed's 30 s default: a scheduler is either up or the address is wrong.
dask.config.update_defaults({"dp_dask": {
    "scheduler_timeout": "10s",  # connecting to --scheduler
    "stall_timeout": "60s",  # no worker able to run tasks for this long: fail
    "max_worker_losses": 6,  # workers dying more often than this during one compute: fail
    "close_timeout": "10s",  # shutting the local cluster down (a worker stuck restarting)
}})
POLL_SECONDS = 0.5
# A fitted model travels inside the sampling graph, once (e.g. DPView's tables on DSS: 12 MiB;
# the copula's float32 factor at the largest schema check_cost allows, d = 12,000: 549 MiB): by
# design, since a graph survives worker loss where scattered data may not. distributed warns from
# 10 MB; warn only past what a model of an accepted schema can weigh.
GRAPH_WARNING_BYTES = "640MiB"
# glibc's thresholds in the worker processes dp_dask starts. The nanny sets
# MALLOC_TRIM_THRESHOLD_ to 64 KiB, which also fixes the mmap threshold at 128 KiB: every array
# of 128 KiB or more is then mapped and faulted in afresh, and each free returns it. A partition's
# arrays (counting's 2 MB keys, a typed part's 800 kB columns) paid that every time: per 250 k-row
# DSS partition counting took 0.72 CPU s instead of 0.26, and a typed release's write 10-12 CPU s
# more than labels (benchmarks/SESSIONS.md, "The workers' malloc"). Up to 16 MiB, memory freed
# is kept for reuse; a worker holds at most that much unused per malloc arena.
WORKER_MALLOC = {"MALLOC_MMAP_THRESHOLD_": 16 * 2**20, "MALLOC_TRIM_THRESHOLD_": 16 * 2**20}


class ClusterError(RuntimeError):
    """The cluster cannot run the job (unreachable, no workers, out of memory)."""


CLUSTER_KINDS = ("local", "address", "jobqueue", "kubernetes", "gateway")
# kind -> (module, extra of dp-dask that installs it)
BACKENDS = {"jobqueue": ("dask_jobqueue", "jobqueue"),
            "kubernetes": ("dask_kubernetes.operator", "kubernetes"),
            "gateway": ("dask_gateway", "gateway")}
JOBQUEUE_SYSTEMS = {"slurm": "SLURMCluster", "pbs": "PBSCluster", "sge": "SGECluster",
                    "lsf": "LSFCluster", "htcondor": "HTCondorCluster", "oar": "OARCluster",
                    "moab": "MoabCluster"}


def backend(kind: str) -> Any:
    """The module of a non-local cluster kind, or ClusterError naming the extra to install."""
    module, extra = BACKENDS[kind]
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ClusterError(f"--cluster {kind} needs {module.split('.')[0].replace('_', '-')}: "
                           f"pip install 'dp-dask[{extra}]' ({exc})") from None


def _jobs(options: dict[str, Any]) -> tuple[dict[str, Any], int]:
    options = dict(options)
    jobs = options.pop("jobs", 1)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ClusterError(f"cluster option jobs must be an integer >= 1, got {jobs!r}")
    return options, jobs


def jobqueue_cluster(options: dict[str, Any]) -> Any:
    """A dask-jobqueue cluster, not yet scaled: ``options`` are its class's keyword arguments
    plus ``system`` (slurm, the default; pbs, sge, lsf, htcondor, oar, moab). Nothing is
    submitted until it is scaled; ``cluster.job_script()`` is the script each job runs."""
    options = dict(options)
    system = str(options.pop("system", "slurm")).lower()
    if system not in JOBQUEUE_SYSTEMS:
        raise ClusterError(f"cluster option system {system!r} is not one of "
                           f"{', '.join(JOBQUEUE_SYSTEMS)}")
    options.pop("jobs", None)
    module = backend("jobqueue")
    return getattr(module, JOBQUEUE_SYSTEMS[system])(**options)


def kubernetes_spec(options: dict[str, Any]) -> dict[str, Any]:
    """The DaskCluster resource KubeCluster would create (dask-kubernetes' operator): built
    offline, without an API server. ``options`` are ``make_cluster_spec``'s (name, image,
    n_workers, resources, env, ...)."""
    options = dict(options)
    options.setdefault("name", "dp-dask")
    try:
        return backend("kubernetes").make_cluster_spec(**options)
    except TypeError as exc:
        raise ClusterError(f"--cluster kubernetes: bad cluster option ({exc})") from None


@contextlib.contextmanager
def _started_cluster(kind: str, options: dict[str, Any]) -> Iterator[Any]:
    """A jobqueue, Kubernetes or Gateway cluster for the job, scaled, closed on exit."""
    options, jobs = _jobs(options)
    try:
        if kind == "jobqueue":
            cluster = jobqueue_cluster(options)
            cluster.scale(jobs=jobs)
        elif kind == "kubernetes":
            cluster = backend(kind).KubeCluster(custom_cluster_spec=kubernetes_spec(options))
        else:
            gateway_options = {key: options.pop(key) for key in ("address", "auth")
                               if key in options}
            cluster = backend(kind).Gateway(**gateway_options).new_cluster(**options)
            cluster.scale(jobs)
    except ClusterError:
        raise
    except Exception as exc:  # the backends' own errors: no scheduler, no API server, no auth
        raise ClusterError(f"--cluster {kind}: could not start the cluster ({exc})") from None
    with cluster:
        yield cluster


@contextlib.contextmanager
def _quiet_distributed() -> Iterator[None]:
    """Silence distributed's own logs (e.g. workers' "Compute Failed" tracebacks) in this process
    and the worker processes it starts, which read the environment when they import it."""
    logger = logging.getLogger("distributed")
    level, before = logger.level, os.environ.get("DASK_LOGGING__DISTRIBUTED")
    logger.setLevel(logging.CRITICAL)
    os.environ["DASK_LOGGING__DISTRIBUTED"] = "critical"
    try:
        yield
    finally:
        logger.setLevel(level)
        if before is None:
            del os.environ["DASK_LOGGING__DISTRIBUTED"]
        else:
            os.environ["DASK_LOGGING__DISTRIBUTED"] = before


@contextlib.contextmanager
def worker_malloc() -> Iterator[None]:
    """Start local workers (a LocalCluster's nannies, created inside) with
    :data:`WORKER_MALLOC` in their environment. Set in this process's environment too while
    they start: a nanny prefers it to dask's config, and every nanny started before leaves
    distributed's own value there."""
    saved = {key: os.environ.get(key) for key in WORKER_MALLOC}
    os.environ.update({key: str(value) for key, value in WORKER_MALLOC.items()})
    environ = dask.config.get("distributed.nanny.pre-spawn-environ", {})
    try:
        with dask.config.set({"distributed.nanny.pre-spawn-environ": {**environ,
                                                                       **WORKER_MALLOC}}):
            yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def dask_client(scheduler: str | None = None, *, n_workers: int | None = None,
                threads_per_worker: int = 1, memory_limit: str | int = "auto",
                quiet: bool = False, kind: str | None = None,
                options: dict[str, Any] | None = None) -> Iterator[Client]:
    """A client of the cluster of ``kind`` (default: ``address`` when ``scheduler`` is given,
    else ``local``): the scheduler at ``scheduler``, a fresh LocalCluster, or a jobqueue,
    Kubernetes or Gateway cluster started with ``options`` (closed on exit).

    ``quiet`` silences distributed's logs: failures reach the caller as exceptions anyway.
    """
    if n_workers is not None and n_workers < 1:
        raise ValueError(f"n_workers must be >= 1, got {n_workers}")
    kind = kind or ("address" if scheduler else "local")
    if kind not in CLUSTER_KINDS:
        raise ClusterError(f"unknown cluster kind {kind!r}; expected one of "
                           f"{', '.join(CLUSTER_KINDS)}")
    if kind == "address" and not scheduler:
        raise ClusterError("--cluster address needs --scheduler ADDRESS")
    if scheduler and kind != "address":
        raise ClusterError(f"--scheduler {scheduler} needs --cluster address (or no --cluster), "
                           f"not --cluster {kind}")
    if options and kind in ("local", "address"):
        raise ClusterError(f"--cluster-options are for jobqueue, kubernetes or gateway "
                           f"clusters, not {kind}")
    with _quiet_distributed() if quiet else contextlib.nullcontext():
        if kind == "address":
            timeout = dask.config.get("dp_dask.scheduler_timeout")
            try:
                client = Client(scheduler, timeout=timeout)
            except (OSError, TimeoutError) as exc:
                raise ClusterError(f"cannot connect to the Dask scheduler at --scheduler "
                                   f"{scheduler} within {timeout}: is it running and reachable?"
                                   f" ({exc})") from None
            with client:
                log.info("connected to scheduler %s (%d workers), dashboard %s", scheduler,
                         len(client.scheduler_info().get("workers", {})),
                         client.dashboard_link)
                yield client
            return
        if kind in BACKENDS:
            with _started_cluster(kind, options or {}) as cluster, Client(cluster) as client:
                log.info("%s cluster: scheduler %s, dashboard %s", kind,
                         cluster.scheduler_address, client.dashboard_link)
                yield client
            return
        # Loopback only: the scheduler, workers and dashboard are not reachable from the network.
        with worker_malloc():
            cluster = LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker,
                                   memory_limit=memory_limit, host=LOCAL_HOST,
                                   dashboard_address=f"{LOCAL_HOST}:0")
        try:
            with Client(cluster) as client:
                log.info("local cluster: %d workers, dashboard %s", len(cluster.workers),
                         client.dashboard_link)
                yield client
        finally:
            _close_local(cluster)


def _close_local(cluster: LocalCluster) -> None:
    """Close with a time limit: a nanny restarting a worker that exceeds its memory limit can
    hold ``close`` forever, and the error the job is ending with must still reach the user.
    The worker processes are children of this one and end with it."""
    timeout = parse_timedelta(dask.config.get("dp_dask.close_timeout"))
    try:
        cluster.close(timeout=timeout)
    except TimeoutError:
        # info, not warning: under --quiet the job's own error stays its only line
        log.info("the local cluster did not shut down within %s s; its worker processes end "
                 "with this one", timeout)


def current_client() -> Client | None:
    """The Client this process uses by default, if any."""
    try:
        from distributed import get_client

        return get_client()
    except ValueError:
        return None


def _memory_limits(workers: dict[str, dict[str, Any]]) -> str:
    limits = sorted({w.get("memory_limit") or 0 for w in workers.values()})
    return "/".join(format_bytes(v) if v else "no limit" for v in limits) or "unknown"


def _configured_limit(client: Client) -> str:
    """The memory limit a LocalCluster gives its workers, for when none lived long enough to
    report it ("auto" and fractions are resolved by the workers, so they are left as given)."""
    spec = getattr(getattr(client, "cluster", None), "new_spec", None) or {}
    limit = spec.get("options", {}).get("memory_limit")
    if limit is None:
        return "unknown"
    try:
        size = parse_bytes(limit) if isinstance(limit, str) else int(limit)
    except (ValueError, TypeError):
        return str(limit)
    return format_bytes(size) if size > 1 else str(limit)  # a fraction of RAM parses as 0 or 1


class Watchdog(threading.Thread):
    """Polls the scheduler while ``futures`` run and cancels them, keeping the reason, when the
    cluster cannot make progress (see the module docstring)."""

    def __init__(self, client: Client, futures: list[Any]) -> None:
        super().__init__(name="dp-dask-watchdog", daemon=True)
        self.client, self.futures = client, futures
        self.stall_seconds = parse_timedelta(dask.config.get("dp_dask.stall_timeout"))
        self.max_losses = int(dask.config.get("dp_dask.max_worker_losses"))
        self.reason: str | None = None
        self._done = threading.Event()

    def stop(self) -> None:
        self._done.set()
        self.join()

    def run(self) -> None:
        seen: set[tuple[str, str]] = set()
        losses, stalled_since, limits = 0, None, _configured_limit(self.client)
        while not self._done.wait(POLL_SECONDS):
            try:
                workers = self.client.scheduler_info(n_workers=-1)["workers"]
            except Exception:  # client closing: the job itself reports what went wrong
                return
            alive = {(address, str(w.get("id"))) for address, w in workers.items()}
            losses += len(seen - alive)
            seen = alive
            limits = _memory_limits(workers) if workers else limits
            can_run = any(w.get("status") == "running" for w in workers.values())
            stalled_since = None if can_run else stalled_since or time.monotonic()
            if losses > self.max_losses:
                self.reason = (
                    f"Dask workers died {losses} times during this step (memory limit per "
                    f"worker: {limits}; a worker is restarted when its process passes "
                    f"{dask.config.get('distributed.worker.memory.terminate'):.0%} of it): "
                    "raise --memory-limit, or use fewer workers with more memory each")
            elif stalled_since is not None and time.monotonic() - stalled_since > \
                    self.stall_seconds:
                if workers:
                    self.reason = (
                        f"every Dask worker has been paused for memory for over "
                        f"{self.stall_seconds:g} s (memory limit per worker: {limits}; a "
                        f"worker pauses past "
                        f"{dask.config.get('distributed.worker.memory.pause'):.0%} of it): "
                        "raise --memory-limit, or use fewer workers with more memory each")
                else:
                    self.reason = (
                        f"no Dask worker has been alive for over {self.stall_seconds:g} s "
                        f"(memory limit per worker: {limits}): local workers died or "
                        "could not start (raise --memory-limit); with --scheduler, start "
                        "workers for it")
            if self.reason:
                self.client.cancel(self.futures)
                return


def show_progress_of(futures: list[Any]) -> None:
    """distributed's progress bar: a displayed widget in a notebook kernel with ipywidgets, text
    anywhere else. (Left to guess, distributed builds a widget in any kernel, which fails without
    ipywidgets, and returns it undisplayed.)"""
    if is_kernel() and importlib.util.find_spec("ipywidgets") is not None:
        from IPython.display import display

        display(progress(futures, notebook=True))
    else:
        progress(futures, notebook=False)  # blocks until done, printing one updating line


def compute(*collections: Any, show_progress: bool = False) -> tuple[Any, ...]:
    """``dask.compute`` that shares common tasks and shows progress on the active scheduler.

    On a distributed client, a cluster that cannot make progress raises :class:`ClusterError`.
    """
    client = current_client()
    if client is None:
        with ProgressBar() if show_progress else contextlib.nullcontext():
            return dask.compute(*collections)
    with dask.config.set({"distributed.admin.large-graph-warning-threshold": GRAPH_WARNING_BYTES}):
        futures = client.compute(list(collections))
    watchdog = Watchdog(client, futures)
    watchdog.start()
    try:
        if show_progress:
            show_progress_of(futures)
        return tuple(client.gather(futures))
    except FutureCancelledError:
        if watchdog.reason:
            raise ClusterError(watchdog.reason) from None
        raise
    except KilledWorker as exc:
        workers = client.scheduler_info(n_workers=-1)["workers"]
        limits = _memory_limits(workers) if workers else _configured_limit(client)
        raise ClusterError(
            f"workers kept dying while running task {exc.task!r} (memory limit per worker: "
            f"{limits}): raise --memory-limit, or use fewer workers with more memory each"
        ) from None
    finally:
        watchdog.stop()
