"""Reading a release: its completion record checked against its files, and the tables to read.

Readers resolve the pointer once, trust only a version whose completion record matches its files
(a stopped job can never be mistaken for one), and read the files that record lists from that
version.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import dask.dataframe as dd
import numpy as np

from dp_dask.data.io import (
    Location,
    TableSource,
    filesystem,
    join,
    read_bytes,
    remote,
    store_entries,
)
from dp_dask.data.schema import Schema
from dp_dask.release.layout import (
    COMPLETE,
    CURRENT,
    LOCK,
    TABLES,
    VERSIONS,
    ReleaseError,
    _looks_like_release,
    published_location,
    resolve_target,
)


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
