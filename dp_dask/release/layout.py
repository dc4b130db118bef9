"""The layout of a release: its versions, the pointer that publishes one, and their removal.

On disk the target is a symbolic link to the version directory ``.<name>.v-<key>`` beside it; in
an object store the pointer object ``<out>/_CURRENT.json`` names the version prefix
``<out>/_v/<key>/``. A superseded version is kept for RELEASE_GRACE_SECONDS (or
``$DP_DASK_RELEASE_GRACE_SECONDS``), so a reader finishes what it verified.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from dp_dask.data.io import (
    Location,
    filesystem,
    join,
    location,
    read_bytes,
    remote,
    store_entries,
)

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


def _beside(target: Path, kinds: tuple[str, ...]) -> list[Path]:
    """The entries ``.<name>.<kind>-*`` beside ``target``."""
    prefixes = tuple(f".{target.name}.{kind}-" for kind in kinds)
    return [entry for entry in target.parent.iterdir() if entry.name.startswith(prefixes)]


def delete_release(out: str | Path, storage_options: dict[str, Any] | None = None) -> None:
    """Delete the release at ``out`` and every version of it (``rm -r`` of the link would leave
    the versions): on disk the link and ``.<name>.v-*`` (and leftovers) beside it, in an object
    store the pointer and then the whole prefix. The link or pointer goes first, on its own, so
    that a reader never follows it to a version being deleted (a store deletes a prefix's
    objects in batches, in no order it promises)."""
    target = resolve_target(out)
    if isinstance(target, Path):
        for entry in [target, *_beside(target, ("v", "link", "staging", "old"))]:
            _remove(entry, None)
    else:
        _remove(join(target, CURRENT), storage_options)
        _remove(target, storage_options)


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


def _looks_like_release(directory: Path) -> bool:
    return (any((directory / name).exists() for name in MARKS_OF_A_RELEASE)
            or directory.name.startswith(".") and (".staging-" in directory.name
                                                   or ".v-" in directory.name))

