"""Writing a release: the target's lock, the staged version of one plan, and its publish.

One job at a time writes a target: it holds ``.<name>.lock`` beside it, or the object
``<out>/_LOCK.json`` created with a conditional PUT. The version is written in place, gets its
completion record last, and is published by switching the pointer (:mod:`.layout`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dp_dask.data.io import (
    Location,
    filesystem,
    join,
    put_bytes,
    read_bytes,
    write_json,
)
from dp_dask.release.layout import (
    BOOKKEEPING,
    COMPLETE,
    CURRENT,
    HEARTBEAT,
    LOCK,
    LOCK_HEARTBEAT_SECONDS,
    LOCK_STALE_SECONDS,
    POINTER_FORMAT,
    RECORD_FORMAT,
    SUPERSEDED,
    VERSIONS,
    ReleaseError,
    ReleaseLockedError,
    _beside,
    _exists,
    _link,
    _prune,
    _published_version,
    _remove,
    _sibling,
    _version,
    check_target,
    resolve_target,
)
from dp_dask.release.verify import _file_digest, _listing, _verify_at

# --- the lock ------------------------------------------------------------------------------

_held: set[str] = set()  # locks this process holds: write() inside a locked CLI job re-enters


def _owner() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(),
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "token": uuid.uuid4().hex}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def _holder_of(text: str | bytes) -> dict[str, Any]:
    try:
        holder = json.loads(text)
    except ValueError:
        return {}  # being written by its creator, or damaged: judged by its age alone
    return holder if isinstance(holder, dict) else {}


def _read_holder(lock: Path) -> dict[str, Any] | None:
    """The lock's owner record; None if it vanished, {} if it is not (yet) readable."""
    try:
        return _holder_of(lock.read_text())
    except FileNotFoundError:
        return None


def _stale_reason(holder: dict[str, Any], age: float | None) -> str | None:
    """Why the lock is stale, or None while its holder may be alive; ``age``: seconds since
    its holder last refreshed it (None: the lock is gone)."""
    if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int) \
            and not _pid_alive(holder["pid"]):
        return f"process {holder['pid']} on this host is gone"
    if age is None:
        return "removed"
    if age > LOCK_STALE_SECONDS:
        return f"not refreshed for {age:.0f} s (> {LOCK_STALE_SECONDS:.0f} s)"
    return None


class _DiskLock:
    """``.<name>.lock`` beside the target, created with O_EXCL, refreshed by its mtime."""

    def __init__(self, target: Path) -> None:
        self.where = _sibling(target, "lock")

    def create(self, owner: dict[str, Any]) -> bool:
        try:
            descriptor = os.open(self.where, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(descriptor, "w") as handle:
            json.dump(owner, handle)
        return True

    def holder(self) -> dict[str, Any] | None:
        return _read_holder(self.where)

    def age(self, holder: dict[str, Any]) -> float | None:
        try:
            return time.time() - self.where.stat().st_mtime
        except FileNotFoundError:
            return None

    def break_stale(self, holder: dict[str, Any]) -> None:
        """Move the stale lock away; if another job replaced it meanwhile, put that one back."""
        moved = self.where.with_name(f"{self.where.name}.stale-{uuid.uuid4().hex}")
        try:
            os.rename(self.where, moved)
        except FileNotFoundError:
            return  # another job broke it first
        if _read_holder(moved) != holder:
            with contextlib.suppress(FileExistsError):
                os.link(moved, self.where)  # restore the live lock, never over a newer one
        moved.unlink(missing_ok=True)

    def refresh(self, owner: dict[str, Any]) -> None:
        os.utime(self.where)

    def release(self, owner: dict[str, Any]) -> None:
        if self.holder() == owner:  # never remove a lock another job took after ours
            self.where.unlink(missing_ok=True)


class _StoreLock:
    """``<out>/_LOCK.json`` in an object store, created with a conditional PUT
    (``If-None-Match: *``: S3, GCS and Azure refuse it when the object exists); its holder
    rewrites ``<out>/_LOCK.heartbeat`` (holding its token) to show it is alive."""

    def __init__(self, target: str, storage_options: dict[str, Any] | None) -> None:
        self.fs, root = filesystem(target, storage_options)
        self.where, self.beat = join(target, LOCK), f"{root}/{HEARTBEAT}"
        self.path = f"{root}/{LOCK}"

    def create(self, owner: dict[str, Any]) -> bool:
        try:
            self.fs.pipe_file(self.path, json.dumps(owner).encode(), mode="create")
        except FileExistsError:
            return False
        self.refresh(owner)
        return True

    def holder(self) -> dict[str, Any] | None:
        self.fs.invalidate_cache()
        try:
            return _holder_of(self.fs.cat_file(self.path))
        except FileNotFoundError:
            return None

    def age(self, holder: dict[str, Any]) -> float | None:
        try:
            times = [self.fs.modified(self.path).timestamp()]
        except FileNotFoundError:
            return None
        except NotImplementedError:  # a filesystem without times: judged by its pid alone
            return 0.0
        with contextlib.suppress(FileNotFoundError, ValueError):
            if json.loads(self.fs.cat_file(self.beat)).get("token") == holder.get("token"):
                times.append(self.fs.modified(self.beat).timestamp())
        return time.time() - max(times)

    def break_stale(self, holder: dict[str, Any]) -> None:
        """Delete the stale lock if it is still the one judged. Stores offer no portable
        conditional delete, so two jobs breaking the same stale lock within the same instant
        could both proceed: a lock is stale only after LOCK_STALE_SECONDS of silence."""
        if self.holder() == holder:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(self.path)

    def refresh(self, owner: dict[str, Any]) -> None:
        self.fs.pipe_file(self.beat, json.dumps({"token": owner["token"]}).encode())

    def release(self, owner: dict[str, Any]) -> None:
        if self.holder() == owner:
            for path in (self.beat, self.path):
                with contextlib.suppress(FileNotFoundError):
                    self.fs.rm_file(path)


def _acquire(lock: _DiskLock | _StoreLock, target: Location, owner: dict[str, Any]) -> None:
    for _ in range(5):
        if lock.create(owner):
            return
        holder = lock.holder()
        if holder is None:
            continue
        if _stale_reason(holder, lock.age(holder)) is None:
            raise ReleaseLockedError(
                f"{target} is being written by another job (pid {holder.get('pid', '?')} "
                f"on {holder.get('host', '?')}, since {holder.get('created', '?')}; lock "
                f"{lock.where}); wait for it to finish, or remove the lock if that job is "
                "gone")
        lock.break_stale(holder)
    raise ReleaseLockedError(f"could not take the lock {lock.where} on {target}: other jobs "
                             "keep taking it")


@contextlib.contextmanager
def release_lock(out: str | Path,
                 storage_options: dict[str, Any] | None = None) -> Iterator[Location]:
    """Hold the target's lock while the block runs: ``.<name>.lock`` beside a directory
    (created with O_EXCL), ``<out>/_LOCK.json`` in an object store (a conditional PUT).

    The lock records host, pid, time and a token, and is refreshed every
    LOCK_HEARTBEAT_SECONDS. Another job's lock is stale when its pid is gone on this host, or
    when it was not refreshed for LOCK_STALE_SECONDS; a stale lock is broken, a live one makes
    this raise :class:`ReleaseLockedError` at once. Re-entrant within one process. Taking it is
    also the target's write probe: a store that cannot be reached or written fails here.
    """
    target = resolve_target(out)
    check_target(target, storage_options)
    lock = (_StoreLock(target, storage_options) if isinstance(target, str)
            else _DiskLock(target))
    if str(lock.where) in _held:
        yield lock.where
        return
    owner = _owner()
    try:
        if isinstance(target, Path):
            target.parent.mkdir(parents=True, exist_ok=True)
        _acquire(lock, target, owner)
    except ReleaseError:
        raise
    except OSError as exc:
        raise ReleaseError(f"cannot write a release at {target}: {exc.strerror or exc}") from exc
    except Exception as exc:  # a store's client errors (credentials, endpoint) are its own
        raise ReleaseError(f"cannot write a release at {target}: {type(exc).__name__}: "
                           f"{exc}") from exc
    _held.add(str(lock.where))
    stop = threading.Event()

    def heartbeat() -> None:
        while not stop.wait(LOCK_HEARTBEAT_SECONDS):
            with contextlib.suppress(Exception):  # a missed beat is retried at the next one
                lock.refresh(owner)

    beat = threading.Thread(target=heartbeat, name=f"lock {lock.where}", daemon=True)
    beat.start()
    try:
        yield lock.where
    finally:
        stop.set()
        beat.join()
        _held.discard(str(lock.where))
        lock.release(owner)



@dataclasses.dataclass(frozen=True)
class StagedRelease:
    """The version of ``target`` for one plan (model + sampling arguments), written in place:
    the directory ``.<name>.v-<key>`` beside it, or the prefix ``<out>/_v/<key>`` in a store."""

    target: Location
    path: Location
    plan: dict[str, Any]
    storage_options: dict[str, Any] | None = None

    @property
    def markers(self) -> Location:
        return join(self.path, BOOKKEEPING, "done")

    @property
    def complete(self) -> bool:
        """Whether the completion record is written (killed between it and publishing)."""
        return _exists(join(self.path, COMPLETE), self.storage_options)

    def done(self) -> set[int]:
        """Partitions whose Zarr chunk and Parquet part are both written."""
        fs, path = filesystem(self.markers, self.storage_options)
        try:
            names = [entry.rstrip("/").rsplit("/", 1)[-1] for entry in fs.ls(path, detail=False)]
        except FileNotFoundError:
            return set()
        return {int(name) for name in names if name.isdigit()}

    def finish(self, summary: dict[str, Any]) -> dict[str, Any]:
        """Drop the bookkeeping and write the completion record, last (one PUT in a store)."""
        _remove(join(self.path, BOOKKEEPING), self.storage_options)
        fs, root = filesystem(self.path, self.storage_options)
        files = {name: {"bytes": size, "sha256": _file_digest(fs, f"{root}/{name}")}
                 for name, size in sorted(_listing(fs, root).items())}
        record = {"format": RECORD_FORMAT, "complete": True, **summary,
                  "plan_key": self.plan["key"], "files": files}
        write_json(join(self.path, COMPLETE), record, self.storage_options)
        return record

    def publish(self) -> Location:
        """Make the staged version the target's; returns where its files are read from (the
        target on disk, the version prefix in a store).

        The version is verified against its record, the one it supersedes marked with the time
        (``_SUPERSEDED.json``), then the pointer switched: on disk a new symbolic link to the
        version is renamed onto the target, in a store ``<out>/_CURRENT.json`` is written in one
        PUT; either way readers see the old version or the new, never a mix. Superseded versions
        older than :func:`release_grace_seconds` are then deleted.
        """
        _verify_at(self.path, False, self.storage_options)
        target, options = self.target, self.storage_options
        previous = _published_version(target, options)
        _remove(join(self.path, SUPERSEDED), options)  # a superseded version published again
        if previous not in (None, self.path) and _exists(join(previous, COMPLETE), options):
            write_json(join(previous, SUPERSEDED), {
                "at": time.time(), "by": str(self.path).rsplit("/", 1)[-1]}, options)
        if isinstance(target, str):
            write_json(join(target, CURRENT), {
                "format": POINTER_FORMAT, "version": f"{VERSIONS}/{self.plan['key']}",
                "plan_key": self.plan["key"],
                "published": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}, options)
        else:
            _link(target, self.path)
        _prune(target, {self.path}, options)
        return self.path if isinstance(target, str) else target



def stage_release(target: Location, plan: dict[str, Any],
                  storage_options: dict[str, Any] | None = None) -> StagedRelease:
    """The version of ``plan``, to write into: resumed if an earlier job left it (or published
    it), else created fresh. Call with the target's lock held.

    Versions of other plans are deleted unless published, or superseded within the grace
    period: only the latest arguments can resume. So are leftovers of an interrupted publish.
    """
    key = hashlib.sha256(json.dumps(plan, sort_keys=True, default=str).encode()).hexdigest()[:20]
    plan = {**plan, "key": key}
    staged = StagedRelease(target, _version(target, key), plan, storage_options)
    if isinstance(target, Path):  # a new link not yet renamed, older dp_dasks' copies
        for leftover in _beside(target, ("link", "staging", "old")):
            _remove(leftover, None)
    _prune(target, {staged.path, _published_version(target, storage_options)}, storage_options)
    plan_file = join(staged.path, BOOKKEEPING, "plan.json")
    if staged.complete and _record_key(staged.path, storage_options) == key:
        return staged
    with contextlib.suppress(FileNotFoundError, ValueError):
        if json.loads(read_bytes(plan_file, storage_options)) == plan:
            return staged
    _remove(staged.path, storage_options)
    if isinstance(staged.markers, Path):
        staged.markers.mkdir(parents=True)
    put_bytes(plan_file, json.dumps(plan, sort_keys=True, default=str).encode(), storage_options)
    return staged



def _record_key(path: Location, storage_options: dict[str, Any] | None) -> str | None:
    try:
        return json.loads(read_bytes(join(path, COMPLETE), storage_options)).get("plan_key")
    except (OSError, ValueError):
        return None

