"""How a release is written and trusted, on disk or in an object store (docs/releases.md).

A release is written into a version named by its plan key (a hash of the model and the
sampling arguments), gets a completion record (``_COMPLETE.json``: rows, partitions, columns,
privacy, every file's size and SHA-256) written last, and is published by switching a pointer
to it: on disk the target is a symbolic link to the version directory ``.<name>.v-<key>``
beside it, replaced by one rename; in an object store the pointer object ``<out>/_CURRENT.json``
names the version prefix ``<out>/_v/<key>/`` and is written in one PUT. Readers resolve the
pointer once, trust only a version whose completion record matches its files (a stopped job can
never be mistaken for one), and read the files that record lists from that version. The
version a publish supersedes is kept for RELEASE_GRACE_SECONDS, so such a reader finishes what
it verified. One job at a time writes a target: it holds ``.<name>.lock`` beside it, or the
object ``<out>/_LOCK.json`` created with a conditional PUT.

Size: writing a release (lock, staging, publish) and reading one (pointer, verification) are
the two sides of one format, on disk and in a store: kept together, they change together.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask.dataframe as dd
import numpy as np

from dp_dask.data.io import (
    Location,
    TableSource,
    filesystem,
    join,
    location,
    put_bytes,
    read_bytes,
    remote,
    store_entries,
    write_json,
)
from dp_dask.data.schema import Schema

COMPLETE = "_COMPLETE.json"
RECORD_FORMAT = 1
BOOKKEEPING = "_staging"  # inside a staging directory only: the plan and per-partition markers
MARKS_OF_A_RELEASE = (COMPLETE, "metadata.json", "synthetic.zarr")  # beside synthetic.parquet
TABLES = ("synthetic.parquet", "synthetic.zarr")
LOCK_HEARTBEAT_SECONDS = 30.0
# A lock whose holder has not refreshed it for this long is stale, wherever the holder runs.
LOCK_STALE_SECONDS = 600.0
# In an object store, what a release prefix holds: the pointer, the versions, the lock.
CURRENT = "_CURRENT.json"
VERSIONS = "_v"
LOCK = "_LOCK.json"
HEARTBEAT = "_LOCK.heartbeat"
POINTER_FORMAT = 1
# A superseded version stays this long after the publish that replaced it (a reader that verified
# it before the switch reads it whole); the first publish after that deletes it. The environment
# variable GRACE_ENV overrides it.
RELEASE_GRACE_SECONDS = 3600.0
GRACE_ENV = "DP_DASK_RELEASE_GRACE_SECONDS"
SUPERSEDED = "_SUPERSEDED.json"  # in a superseded version: when, and by which version


class ReleaseError(ValueError):
    """A release is incomplete or altered, or its target cannot take a release."""


class ReleaseLockedError(ReleaseError):
    """Another job holds the target's lock."""


def resolve_target(out: str | Path) -> Location:
    """The absolute, normalised target: workers must not resolve it against their own cwd.

    A ``file://`` URL is its local path; an object-store URL (``s3://``, ``gs://``, ``abfs://``,
    ``memory://``...) stays a URL, published through a pointer object (docs/releases.md).
    """
    return location(out)


def _sibling(target: Path, kind: str) -> Path:
    return target.parent / f".{target.name}.{kind}"


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


def check_target(target: Location, storage_options: dict[str, Any] | None = None) -> None:
    """A release may replace only nothing, an empty directory (prefix), or an earlier release.

    For an object store this is also the preflight: the store is reached, the bucket exists and
    the prefix is listed, all before any work (:class:`ReleaseError` naming the target)."""
    if isinstance(target, str):
        _check_store_target(target, storage_options)
    elif target.is_dir():
        if any(target.iterdir()) and not _looks_like_release(target):
            raise ReleaseError(f"{target} exists and is not a dp_dask release; it would be "
                               "replaced as a whole: choose another output directory")
    elif target.exists():
        raise ReleaseError(f"output {target} exists and is not a directory")


def _check_store_target(target: str, storage_options: dict[str, Any] | None) -> None:
    try:
        names = store_entries(target, storage_options, "output")
    except ValueError as exc:
        raise ReleaseError(str(exc)) from None
    others = sorted(names - {CURRENT, VERSIONS, LOCK, HEARTBEAT})
    if others:
        raise ReleaseError(f"{target} holds other data ({', '.join(others[:3])}) and is not a "
                           "dp_dask release: choose another output prefix")


# --- staging and publishing ----------------------------------------------------------------

def _digest(value: Any, digest: Any) -> None:
    if isinstance(value, Schema):
        digest.update(value.sha256().encode())
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for item in dataclasses.fields(value):
            digest.update(item.name.encode())
            _digest(getattr(value, item.name), digest)
    elif isinstance(value, np.ndarray):
        digest.update(f"{value.dtype.str}{value.shape}".encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, dict):
        for key in sorted(value, key=repr):
            digest.update(repr(key).encode())
            _digest(value[key], digest)
    elif isinstance(value, list | tuple):  # a tuple saved as a JSON list is the same value
        digest.update(f"[{len(value)}".encode())
        for item in value:
            _digest(item, digest)
    else:
        digest.update(json.dumps(value.item() if isinstance(value, np.generic) else value,
                                 default=str).encode())


def model_fingerprint(model: Any) -> str:
    """SHA-256 of a model's contents (arrays, schema, metadata): equal for a saved and
    reloaded model, different for every fresh fit (fresh noise, new creation time)."""
    digest = hashlib.sha256()
    _digest(model, digest)
    return digest.hexdigest()


def _file_digest(fs: Any, path: str) -> str:
    with fs.open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _listing(fs: Any, root: str) -> dict[str, int]:
    """Every file (object) under ``root``, by its name relative to it: its size in bytes."""
    found = fs.find(root, detail=True)
    return {path[len(root.rstrip("/")) + 1:]: int(info["size"])
            for path, info in found.items() if info.get("type") != "directory"}


def _exists(where: Location, storage_options: dict[str, Any] | None) -> bool:
    fs, path = filesystem(where, storage_options)
    return fs.isfile(path)


def _remove(where: Location, storage_options: dict[str, Any] | None) -> None:
    if isinstance(where, Path):
        if where.is_symlink() or where.is_file():
            where.unlink(missing_ok=True)
        else:
            shutil.rmtree(where, ignore_errors=True)
        return
    fs, path = filesystem(where, storage_options)
    with contextlib.suppress(FileNotFoundError):
        fs.rm(path, recursive=True)


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


def _link(target: Path, version: Path) -> None:
    """Point ``target`` at its sibling ``version`` by renaming a new relative symbolic link onto
    it: an atomic replacement of the old link. A directory there (empty, or a release of an
    older dp_dask) cannot be replaced by a link: it is renamed aside, then deleted."""
    link = _sibling(target, f"link-{uuid.uuid4().hex[:12]}")
    os.symlink(version.name, link)
    if target.is_dir() and not target.is_symlink():
        aside = _sibling(target, f"old-{uuid.uuid4().hex[:12]}")
        os.rename(target, aside)
        os.rename(link, target)
        shutil.rmtree(aside)
    else:
        os.rename(link, target)


def release_grace_seconds() -> float:
    """How long a superseded version is kept: ``$DP_DASK_RELEASE_GRACE_SECONDS``, else
    RELEASE_GRACE_SECONDS."""
    value = os.environ.get(GRACE_ENV)
    if not value:
        return RELEASE_GRACE_SECONDS
    try:
        grace = float(value)
    except ValueError:
        grace = -1.0
    if not grace >= 0:
        raise ReleaseError(f"{GRACE_ENV}={value!r} is not a number of seconds")
    return grace


def _version(target: Location, key: str) -> Location:
    """The version directory (prefix) of plan ``key``: ``.<name>.v-<key>``, ``<out>/_v/<key>``."""
    return join(target, VERSIONS, key) if isinstance(target, str) else _sibling(target, f"v-{key}")


def _versions(target: Location, storage_options: dict[str, Any] | None) -> list[Location]:
    if isinstance(target, Path):
        return [entry for entry in _beside(target, ("v",)) if not entry.is_symlink()]
    fs, versions = filesystem(join(target, VERSIONS), storage_options)
    try:
        return [join(target, VERSIONS, entry.rstrip("/").rsplit("/", 1)[-1])
                for entry in fs.ls(versions, detail=False)]
    except FileNotFoundError:
        return []


def _published_version(target: Location,
                       storage_options: dict[str, Any] | None) -> Location | None:
    """The version the target's pointer names (None when none does, or on disk when the target
    is a directory: a release of an older dp_dask)."""
    if isinstance(target, Path):
        return target.parent / os.readlink(target) if target.is_symlink() else None
    pointer = _pointer(target, storage_options, missing_ok=True)
    return None if pointer is None else join(target, pointer["version"])


def _prune(target: Location, keep: set[Location | None],
           storage_options: dict[str, Any] | None) -> None:
    """Delete every version but ``keep`` that is unpublished or superseded longer ago than the
    grace period."""
    grace, now = release_grace_seconds(), time.time()
    for version in _versions(target, storage_options):
        if version in keep:
            continue
        try:
            since = float(json.loads(read_bytes(join(version, SUPERSEDED), storage_options))["at"])
        except (OSError, ValueError, KeyError, TypeError):
            since = None  # never published (another plan's, or a stopped job's)
        if since is None or now - since >= grace:
            _remove(version, storage_options)


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


def _beside(target: Path, kinds: tuple[str, ...]) -> list[Path]:
    """The entries ``.<name>.<kind>-*`` beside ``target``."""
    prefixes = tuple(f".{target.name}.{kind}-" for kind in kinds)
    return [entry for entry in target.parent.iterdir() if entry.name.startswith(prefixes)]


def delete_release(out: str | Path, storage_options: dict[str, Any] | None = None) -> None:
    """Delete the release at ``out`` and every version of it (``rm -r`` of the link would leave
    the versions): on disk the link and ``.<name>.v-*`` (and leftovers) beside it, in an object
    store the whole prefix."""
    target = resolve_target(out)
    if isinstance(target, Path):
        for entry in [target, *_beside(target, ("v", "link", "staging", "old"))]:
            _remove(entry, None)
    else:
        _remove(target, storage_options)


def _record_key(path: Location, storage_options: dict[str, Any] | None) -> str | None:
    try:
        return json.loads(read_bytes(join(path, COMPLETE), storage_options)).get("plan_key")
    except (OSError, ValueError):
        return None


# --- reading --------------------------------------------------------------------------------

def _pointer(target: str, storage_options: dict[str, Any] | None,
             missing_ok: bool = False) -> dict[str, Any] | None:
    """The pointer ``<target>/_CURRENT.json`` of a release in an object store."""
    try:
        pointer = json.loads(read_bytes(join(target, CURRENT), storage_options))
    except FileNotFoundError:
        if missing_ok:
            return None
        raise ReleaseError(
            f"{target} is not a complete dp_dask release: it has no {CURRENT} (the job writing "
            "it stopped before it published it); write it again") from None
    except ValueError as exc:
        raise ReleaseError(f"{join(target, CURRENT)} is damaged ({exc}); write the release "
                           "again") from None
    if not isinstance(pointer, dict) or not str(pointer.get("version", "")).startswith(
            f"{VERSIONS}/"):
        raise ReleaseError(f"{join(target, CURRENT)} is not a release pointer; write the "
                           "release again")
    return pointer


def published_location(release: str | Path,
                       storage_options: dict[str, Any] | None = None) -> Location:
    """Where the files of the release at ``release`` are: the version its link (on disk) or its
    pointer (in an object store) names; on disk a directory that is no link is itself."""
    if not remote(release):
        return _published_version(location(release), None) or location(release)
    release = str(release).rstrip("/")
    return join(release, _pointer(release, storage_options)["version"])


def verify_release(path: str | Path, *, checksums: bool = False,
                   storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The completion record of the release at ``path``, after checking its files are there
    with the recorded sizes (and, with ``checksums``, SHA-256). Raises :class:`ReleaseError`.

    ``path`` is the release's directory (its link names the version checked) or prefix (its
    pointer does), or a version itself on disk. Files added after publishing (e.g. a forced
    evaluation) are not part of the release and are ignored.
    """
    return _verify_at(published_location(path, storage_options), checksums, storage_options)


def _verify_at(root: Location, checksums: bool,
               storage_options: dict[str, Any] | None) -> dict[str, Any]:
    try:
        record = json.loads(read_bytes(join(root, COMPLETE), storage_options))
    except FileNotFoundError:
        raise ReleaseError(
            f"{root} is not a complete dp_dask release: it has no {COMPLETE} (the job writing it "
            "stopped before it finished, or an older dp_dask wrote it); write it again") from None
    except ValueError as exc:
        raise ReleaseError(f"{join(root, COMPLETE)} is damaged ({exc}); write the release "
                           "again") from None
    if not isinstance(record, dict) or not record.get("complete") or "files" not in record:
        raise ReleaseError(f"{join(root, COMPLETE)} is not a completion record; write the "
                           "release again")
    fs, base = filesystem(root, storage_options)
    sizes = _listing(fs, base)
    for name, entry in record["files"].items():
        if name not in sizes:
            raise ReleaseError(f"release {root} is incomplete: {name} is missing")
        if sizes[name] != entry["bytes"]:
            raise ReleaseError(f"release {root} was altered: {name} has "
                               f"{sizes[name]} bytes, its record {entry['bytes']}")
        if checksums and _file_digest(fs, f"{base}/{name}") != entry["sha256"]:
            raise ReleaseError(f"release {root} was altered: {name}'s SHA-256 differs from "
                               "its record")
    return record


def _looks_like_release(directory: Path) -> bool:
    return (any((directory / name).exists() for name in MARKS_OF_A_RELEASE)
            or directory.name.startswith(".") and (".staging-" in directory.name
                                                   or ".v-" in directory.name))


def release_directory(path: str | Path,
                      storage_options: dict[str, Any] | None = None) -> Location | None:
    """The release ``path`` belongs to, or None for a table that is not part of one.

    A release directory holds ``_COMPLETE.json``, ``metadata.json`` or ``synthetic.zarr`` (a
    killed older job left the last two without the first), or is a version or staging directory
    (``.<name>.v-<key>``, ``.<name>.staging-<key>``); ``path`` is one (or the link to one), or
    its ``synthetic.parquet``/``synthetic.zarr``, or a part inside those. In an object store a
    release is a prefix holding ``_CURRENT.json``, ``_v/`` or ``_LOCK.json`` (a stopped job left
    the last two without the first), and ``path`` is one, or its ``synthetic.parquet`` or
    ``synthetic.zarr`` (or a part inside those), or inside one of its versions
    (``<release>/_v/...``).
    """
    path = resolve_target(path)
    if isinstance(path, str):
        head, inside, _ = path.partition(f"/{VERSIONS}/")
        if inside:
            return head
        names = path.split("/")
        for candidate in [path, *("/".join(names[:up]) for up in (-1, -2) if names[up] in TABLES)]:
            if store_entries(candidate, storage_options, "input") & {CURRENT, VERSIONS, LOCK}:
                return candidate
        return None
    if path.is_dir() and _looks_like_release(path):
        return path
    for candidate in (path, path.parent):
        if candidate.name in TABLES and _looks_like_release(candidate.parent):
            return candidate.parent
    return None


def release_version(path: str | Path, storage_options: dict[str, Any] | None = None
                    ) -> tuple[Location, str] | None:
    """Where the files of the release ``path`` belongs to are, resolved once, and ``path``
    relative to them ("" for the release itself); None for a table that is not part of one.

    The release's link (on disk) or pointer (in a store) names the version, unless ``path`` lies
    inside a version (``.<name>.v-<key>/...``, ``<release>/_v/<key>/...``): then that one.
    """
    release = release_directory(path, storage_options)
    if release is None:
        return None
    path = resolve_target(path)
    if isinstance(path, str):
        inside = path[len(release):].strip("/")
        if inside.startswith(f"{VERSIONS}/"):
            key, _, rest = inside[len(VERSIONS) + 1:].partition("/")
            return join(release, VERSIONS, key), rest
        return published_location(release, storage_options), inside
    inside = path.relative_to(release).as_posix()
    return published_location(release), "" if inside == "." else inside


def pinned_table(table: TableSource,
                 storage_options: dict[str, Any] | None = None) -> TableSource:
    """``table`` inside the version its release publishes now (any other table as given): the
    readers of a pinned path all read that one version, whatever is published meanwhile."""
    found = release_version(table, storage_options) if isinstance(table, str | Path) else None
    if found is None:
        return table
    root, inside = found
    return join(root, inside) if inside else root


def checked_table(path: str | Path,
                  storage_options: dict[str, Any] | None = None) -> Location | dd.DataFrame:
    """The decoded table to read for ``path``. A release (its directory, prefix or
    ``synthetic.parquet``) is resolved once to a version (:func:`release_version`) and read only
    once that version's completion record checks out: exactly the Parquet parts the record
    lists, by their paths in that version, never a listing (a lazy frame), so a publish
    meanwhile changes nothing for this reader within the grace period. Another file of a
    release is its path in that version; any other table is returned as given."""
    found = release_version(path, storage_options)
    if found is None:
        return path if remote(path) else Path(path)
    root, inside = found
    record = _verify_at(root, False, storage_options)
    if inside not in ("", "synthetic.parquet"):
        return join(root, inside)
    parts = [str(join(root, name)) for name in sorted(record["files"])
             if name.startswith("synthetic.parquet/")]
    return dd.read_parquet(parts, storage_options=storage_options if remote(root) else None)
