"""How a release directory is written and trusted (docs/releases.md).

A release is written into a staging directory beside its target (``.<name>.staging-<key>``,
the key a hash of the model and the sampling arguments), gets a completion record
(``_COMPLETE.json``: rows, partitions, columns, privacy, every file's size and SHA-256) written
last, and is published by renaming the staging directory onto the target. Readers trust only a
directory whose completion record matches its files, so a stopped job can never be mistaken for
a release. One job at a time writes a target: it holds ``.<name>.lock`` beside it.
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

from dp_dask.data.io import local_path, remote, write_json
from dp_dask.data.schema import Schema

COMPLETE = "_COMPLETE.json"
RECORD_FORMAT = 1
BOOKKEEPING = "_staging"  # inside a staging directory only: the plan and per-partition markers
MARKS_OF_A_RELEASE = (COMPLETE, "metadata.json", "synthetic.zarr")  # beside synthetic.parquet
LOCK_HEARTBEAT_SECONDS = 30.0
# A lock whose holder has not refreshed it for this long is stale, wherever the holder runs.
LOCK_STALE_SECONDS = 600.0


class ReleaseError(ValueError):
    """A release is incomplete or altered, or its target cannot take a release."""


class ReleaseLockedError(ReleaseError):
    """Another job holds the target's lock."""


def resolve_target(out: str | Path) -> Path:
    """The absolute, normalised target: workers must not resolve it against their own cwd.

    A ``file://`` URL is its local path. An object-store URL (``s3://``...) is refused: a release
    is published by renaming a complete staging directory, and object stores have no atomic
    rename, so a reader could see a half-copied release (docs/releases.md).
    """
    if remote(out):
        raise ReleaseError(f"release output {out}: releases are written to a local or shared "
                           "filesystem path (published by an atomic rename, which object stores "
                           f"lack); write it locally, then copy it with {COMPLETE} last "
                           "(docs/releases.md)")
    return Path(os.path.abspath(os.path.expanduser(local_path(out))))


def _sibling(target: Path, kind: str) -> Path:
    return target.parent / f".{target.name}.{kind}"


# --- the lock ------------------------------------------------------------------------------

_held: set[Path] = set()  # locks this process holds: write() inside a locked CLI job re-enters


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


def _read_holder(lock: Path) -> dict[str, Any] | None:
    """The lock's owner record; None if it vanished, {} if it is not (yet) readable."""
    try:
        text = lock.read_text()
    except FileNotFoundError:
        return None
    try:
        holder = json.loads(text)
    except ValueError:
        return {}  # being written by its creator, or damaged: judged by its age alone
    return holder if isinstance(holder, dict) else {}


def _stale_reason(lock: Path, holder: dict[str, Any]) -> str | None:
    """Why the lock is stale, or None while its holder may be alive."""
    if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int) \
            and not _pid_alive(holder["pid"]):
        return f"process {holder['pid']} on this host is gone"
    try:
        age = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return "removed"
    if age > LOCK_STALE_SECONDS:
        return f"not refreshed for {age:.0f} s (> {LOCK_STALE_SECONDS:.0f} s)"
    return None


def _break_stale(lock: Path, holder: dict[str, Any]) -> None:
    """Move the stale lock away; if another job replaced it meanwhile, put that one back."""
    moved = lock.with_name(f"{lock.name}.stale-{uuid.uuid4().hex}")
    try:
        os.rename(lock, moved)
    except FileNotFoundError:
        return  # another job broke it first
    if _read_holder(moved) != holder:
        with contextlib.suppress(FileExistsError):
            os.link(moved, lock)  # restore the live lock, never over a newer one
    moved.unlink(missing_ok=True)


def _acquire(lock: Path, target: Path, owner: dict[str, Any]) -> None:
    for _ in range(5):
        try:
            descriptor = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _read_holder(lock)
            if holder is None:
                continue
            reason = _stale_reason(lock, holder)
            if reason is None:
                raise ReleaseLockedError(
                    f"{target} is being written by another job (pid {holder.get('pid', '?')} "
                    f"on {holder.get('host', '?')}, since {holder.get('created', '?')}; lock "
                    f"{lock}); wait for it to finish, or remove the lock if that job is "
                    "gone") from None
            _break_stale(lock, holder)
            continue
        with os.fdopen(descriptor, "w") as handle:
            json.dump(owner, handle)
        return
    raise ReleaseLockedError(f"could not take the lock {lock} on {target}: other jobs keep "
                             "taking it")


@contextlib.contextmanager
def release_lock(out: str | Path) -> Iterator[Path]:
    """Hold the target's lock ``.<name>.lock`` (created with O_EXCL) while the block runs.

    The lock records host, pid, time and a token, and is refreshed every
    LOCK_HEARTBEAT_SECONDS. Another job's lock is stale when its pid is gone on this host, or
    when it was not refreshed for LOCK_STALE_SECONDS; a stale lock is broken, a live one makes
    this raise :class:`ReleaseLockedError` at once. Re-entrant within one process.
    """
    target = resolve_target(out)
    check_target(target)
    lock = _sibling(target, "lock")
    if lock in _held:
        yield lock
        return
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        owner = _owner()
        _acquire(lock, target, owner)
    except OSError as exc:
        raise ReleaseError(f"cannot write a release at {target}: {exc.strerror or exc}") from exc
    _held.add(lock)
    stop = threading.Event()

    def heartbeat() -> None:
        while not stop.wait(LOCK_HEARTBEAT_SECONDS):
            with contextlib.suppress(OSError):
                os.utime(lock)

    beat = threading.Thread(target=heartbeat, name=f"lock {lock.name}", daemon=True)
    beat.start()
    try:
        yield lock
    finally:
        stop.set()
        beat.join()
        _held.discard(lock)
        if _read_holder(lock) == owner:  # never remove a lock another job took after ours
            lock.unlink(missing_ok=True)


def check_target(target: Path) -> None:
    """A release may replace only nothing, an empty directory, or an earlier release."""
    if target.is_dir():
        if any(target.iterdir()) and not _looks_like_release(target):
            raise ReleaseError(f"{target} exists and is not a dp_dask release; it would be "
                               "replaced as a whole: choose another output directory")
    elif target.exists():
        raise ReleaseError(f"output {target} exists and is not a directory")


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


def file_digest(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


@dataclasses.dataclass(frozen=True)
class StagedRelease:
    """A staging directory beside ``target``, for one plan (model + sampling arguments)."""

    target: Path
    path: Path
    plan: dict[str, Any]

    @property
    def markers(self) -> Path:
        return self.path / BOOKKEEPING / "done"

    @property
    def complete(self) -> bool:
        """Whether the completion record is written (killed between it and the rename)."""
        return (self.path / COMPLETE).exists()

    def done(self) -> set[int]:
        """Partitions whose Zarr chunk and Parquet part are both written."""
        if not self.markers.is_dir():
            return set()
        return {int(marker.name) for marker in self.markers.iterdir() if marker.name.isdigit()}

    def finish(self, summary: dict[str, Any]) -> dict[str, Any]:
        """Drop the bookkeeping and write the completion record, last."""
        shutil.rmtree(self.path / BOOKKEEPING)
        files = {str(path.relative_to(self.path)): {"bytes": path.stat().st_size,
                                                     "sha256": file_digest(path)}
                 for path in sorted(self.path.rglob("*")) if path.is_file()}
        record = {"format": RECORD_FORMAT, "complete": True, **summary,
                  "plan_key": self.plan["key"], "files": files}
        write_json(self.path / COMPLETE, record)
        return record

    def publish(self) -> Path:
        """Rename the staging directory onto the target.

        An empty target directory is replaced by one rename. An earlier release is renamed
        aside first (``.<name>.old-<uuid>``), the new one renamed in, then the old one deleted:
        the target is always either the old release or the new one, never a mix.
        """
        verify_release(self.path)
        target = self.target
        if target.is_dir() and any(target.iterdir()):
            aside = _sibling(target, f"old-{uuid.uuid4().hex[:12]}")
            os.rename(target, aside)
            os.rename(self.path, target)
            shutil.rmtree(aside)
        else:
            os.rename(self.path, target)
        return target


def stage_release(target: Path, plan: dict[str, Any]) -> StagedRelease:
    """The staging directory of ``plan``: resumed if an earlier job left one for the same plan,
    else created fresh. Call with the target's lock held.

    Staging directories of other plans and copies renamed aside by an interrupted publish are
    deleted: only the latest arguments can resume.
    """
    key = hashlib.sha256(json.dumps(plan, sort_keys=True, default=str).encode()).hexdigest()[:20]
    plan = {**plan, "key": key}
    staged = StagedRelease(target, _sibling(target, f"staging-{key}"), plan)
    prefixes = (f".{target.name}.staging-", f".{target.name}.old-")
    for leftover in target.parent.iterdir():
        if leftover.name.startswith(prefixes) and leftover.is_dir() and leftover != staged.path:
            shutil.rmtree(leftover)
    plan_file = staged.path / BOOKKEEPING / "plan.json"
    if staged.complete and _record_key(staged.path) == key:
        return staged
    if plan_file.exists() and json.loads(plan_file.read_text()) == plan:
        return staged
    shutil.rmtree(staged.path, ignore_errors=True)
    staged.markers.mkdir(parents=True)
    plan_file.write_text(json.dumps(plan, sort_keys=True, default=str))
    return staged


def _record_key(path: Path) -> str | None:
    try:
        return json.loads((path / COMPLETE).read_text()).get("plan_key")
    except (OSError, ValueError):
        return None


# --- reading --------------------------------------------------------------------------------

def verify_release(path: str | Path, *, checksums: bool = False) -> dict[str, Any]:
    """The completion record of the release at ``path``, after checking its files are there
    with the recorded sizes (and, with ``checksums``, SHA-256). Raises :class:`ReleaseError`.

    Files added after publishing (e.g. a forced evaluation) are not part of the release and
    are ignored.
    """
    root = Path(path)
    try:
        record = json.loads((root / COMPLETE).read_text())
    except FileNotFoundError:
        raise ReleaseError(
            f"{root} is not a complete dp_dask release: it has no {COMPLETE} (the job writing it "
            "stopped before it finished, or an older dp_dask wrote it); write it again") from None
    except ValueError as exc:
        raise ReleaseError(f"{root / COMPLETE} is damaged ({exc}); write the release "
                           "again") from None
    if not isinstance(record, dict) or not record.get("complete") or "files" not in record:
        raise ReleaseError(f"{root / COMPLETE} is not a completion record; write the release "
                           "again")
    for name, entry in record["files"].items():
        file = root / name
        if not file.is_file():
            raise ReleaseError(f"release {root} is incomplete: {name} is missing")
        if file.stat().st_size != entry["bytes"]:
            raise ReleaseError(f"release {root} was altered: {name} has "
                               f"{file.stat().st_size} bytes, its record {entry['bytes']}")
        if checksums and file_digest(file) != entry["sha256"]:
            raise ReleaseError(f"release {root} was altered: {name}'s SHA-256 differs from "
                               "its record")
    return record


def _looks_like_release(directory: Path) -> bool:
    return (any((directory / name).exists() for name in MARKS_OF_A_RELEASE)
            or directory.name.startswith(".") and ".staging-" in directory.name)


def release_directory(path: str | Path) -> Path | None:
    """The release ``path`` belongs to, or None for a table that is not part of one.

    A release directory holds ``_COMPLETE.json``, ``metadata.json`` or ``synthetic.zarr`` (a
    killed older job left the last two without the first), or is a staging directory; ``path``
    is one, or its ``synthetic.parquet``/``synthetic.zarr``, or a part inside those.
    """
    path = resolve_target(path)
    if path.is_dir() and _looks_like_release(path):
        return path
    for candidate in (path, path.parent):
        if candidate.name in ("synthetic.parquet", "synthetic.zarr") \
                and _looks_like_release(candidate.parent):
            return candidate.parent
    return None


def checked_table(path: str | Path) -> Path:
    """The decoded table to read for ``path``: a release (directory or one of its files) only
    once its completion record checks out, then its ``synthetic.parquet``; any other table as
    given."""
    release = release_directory(path)
    if release is None:
        return Path(path)
    verify_release(release)
    return release / "synthetic.parquet" if resolve_target(path) == release else Path(path)
