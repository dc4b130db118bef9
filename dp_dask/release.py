"""How a release is written and trusted, on disk or in an object store (docs/releases.md).

A release is written into a staging location named by its plan key (a hash of the model and the
sampling arguments), gets a completion record (``_COMPLETE.json``: rows, partitions, columns,
privacy, every file's size and SHA-256) written last, and is published. On disk the staging
directory ``.<name>.staging-<key>`` beside the target is renamed onto it. In an object store,
which has no rename, the staging prefix ``<out>/_v/<key>/`` stays where it is and a pointer
object ``<out>/_CURRENT.json`` naming it is written in one PUT. Readers trust only a release
whose completion record matches its files, so a stopped job can never be mistaken for one. One
job at a time writes a target: it holds ``.<name>.lock`` beside it, or the object
``<out>/_LOCK.json`` created with a conditional PUT.
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

import numpy as np

from dp_dask.data.io import (
    Location,
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
LOCK_HEARTBEAT_SECONDS = 30.0
# A lock whose holder has not refreshed it for this long is stale, wherever the holder runs.
LOCK_STALE_SECONDS = 600.0
# In an object store, what a release prefix holds: the pointer, the versions, the lock.
CURRENT = "_CURRENT.json"
VERSIONS = "_v"
LOCK = "_LOCK.json"
HEARTBEAT = "_LOCK.heartbeat"
POINTER_FORMAT = 1


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
        shutil.rmtree(where, ignore_errors=True)
        return
    fs, path = filesystem(where, storage_options)
    with contextlib.suppress(FileNotFoundError):
        fs.rm(path, recursive=True)


@dataclasses.dataclass(frozen=True)
class StagedRelease:
    """The staging location of ``target`` for one plan (model + sampling arguments): a
    directory beside it, or the version prefix ``<out>/_v/<key>`` in an object store."""

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
        """Make the staged release the target's; returns where its files now are.

        On disk, rename the staging directory onto the target. An empty target directory is
        replaced by one rename. An earlier release is renamed aside first
        (``.<name>.old-<uuid>``), the new one renamed in, then the old one deleted: the target
        is always either the old release or the new one, never a mix.

        In an object store, write the pointer ``<out>/_CURRENT.json`` naming this version (one
        PUT: readers see the old pointer or the new), then delete the version it named before.
        """
        _verify_at(self.path, False, self.storage_options)
        target = self.target
        if isinstance(target, str):
            previous = _pointer(target, self.storage_options, missing_ok=True)
            version = f"{VERSIONS}/{self.plan['key']}"
            write_json(join(target, CURRENT), {
                "format": POINTER_FORMAT, "version": version, "plan_key": self.plan["key"],
                "published": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")},
                self.storage_options)
            if previous is not None and previous.get("version") != version:
                _remove(join(target, previous["version"]), self.storage_options)
            return self.path
        if target.is_dir() and any(target.iterdir()):
            aside = _sibling(target, f"old-{uuid.uuid4().hex[:12]}")
            os.rename(target, aside)
            os.rename(self.path, target)
            shutil.rmtree(aside)
        else:
            os.rename(self.path, target)
        return target


def stage_release(target: Location, plan: dict[str, Any],
                  storage_options: dict[str, Any] | None = None) -> StagedRelease:
    """The staging location of ``plan``: resumed if an earlier job left one for the same plan,
    else created fresh. Call with the target's lock held.

    Staging locations of other plans and copies renamed aside by an interrupted publish are
    deleted: only the latest arguments can resume. In a store the published version stays.
    """
    key = hashlib.sha256(json.dumps(plan, sort_keys=True, default=str).encode()).hexdigest()[:20]
    plan = {**plan, "key": key}
    if isinstance(target, str):
        staged = StagedRelease(target, join(target, VERSIONS, key), plan, storage_options)
        published = (_pointer(target, storage_options, missing_ok=True) or {}).get("version")
        fs, versions = filesystem(join(target, VERSIONS), storage_options)
        with contextlib.suppress(FileNotFoundError):
            for entry in fs.ls(versions, detail=False):
                name = entry.rstrip("/").rsplit("/", 1)[-1]
                if name != key and f"{VERSIONS}/{name}" != published:
                    _remove(join(target, VERSIONS, name), storage_options)
    else:
        staged = StagedRelease(target, _sibling(target, f"staging-{key}"), plan)
        prefixes = (f".{target.name}.staging-", f".{target.name}.old-")
        for leftover in target.parent.iterdir():
            if leftover.name.startswith(prefixes) and leftover.is_dir() \
                    and leftover != staged.path:
                shutil.rmtree(leftover)
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
    """Where the files of the release at ``release`` are: the directory itself on disk, the
    version its pointer names in an object store."""
    if not remote(release):
        return Path(release)
    release = str(release).rstrip("/")
    return join(release, _pointer(release, storage_options)["version"])


def verify_release(path: str | Path, *, checksums: bool = False,
                   storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The completion record of the release at ``path``, after checking its files are there
    with the recorded sizes (and, with ``checksums``, SHA-256). Raises :class:`ReleaseError`.

    In an object store ``path`` is the release's prefix: its pointer names the version checked.
    Files added after publishing (e.g. a forced evaluation) are not part of the release and
    are ignored.
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
            or directory.name.startswith(".") and ".staging-" in directory.name)


def release_directory(path: str | Path,
                      storage_options: dict[str, Any] | None = None) -> Location | None:
    """The release ``path`` belongs to, or None for a table that is not part of one.

    A release directory holds ``_COMPLETE.json``, ``metadata.json`` or ``synthetic.zarr`` (a
    killed older job left the last two without the first), or is a staging directory; ``path``
    is one, or its ``synthetic.parquet``/``synthetic.zarr``, or a part inside those. In an
    object store a release is a prefix holding ``_CURRENT.json``, ``_v/`` or ``_LOCK.json`` (a
    stopped job left the last two without the first), or ``path`` is inside one of its
    versions (``<release>/_v/...``).
    """
    path = resolve_target(path)
    if isinstance(path, str):
        head, inside, _ = path.partition(f"/{VERSIONS}/")
        if inside or store_entries(path, storage_options, "input") & {CURRENT, VERSIONS, LOCK}:
            return head
        return None
    if path.is_dir() and _looks_like_release(path):
        return path
    for candidate in (path, path.parent):
        if candidate.name in ("synthetic.parquet", "synthetic.zarr") \
                and _looks_like_release(candidate.parent):
            return candidate.parent
    return None


def checked_table(path: str | Path,
                  storage_options: dict[str, Any] | None = None) -> Location:
    """The decoded table to read for ``path``: a release (directory, prefix or one of its files)
    only once its completion record checks out, then its ``synthetic.parquet``; any other table
    as given."""
    release = release_directory(path, storage_options)
    if release is None:
        return path if remote(path) else Path(path)
    verify_release(release, storage_options=storage_options)
    if resolve_target(path) == release:
        return join(published_location(release, storage_options), "synthetic.parquet")
    return path if remote(path) else Path(path)
