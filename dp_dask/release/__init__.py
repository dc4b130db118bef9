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

:mod:`.layout` holds the versions, the pointer and the grace period; :mod:`.staging` the lock,
staging and publishing; :mod:`.verify` the completion record's checks and the readers;
:mod:`.writer` a release's plan (:class:`ReleasePlan`) and the writing of a fitted model's
release by it, which ``Synthesizer.write`` delegates to.
"""

from dp_dask.release.layout import (
    BOOKKEEPING,
    COMPLETE,
    CURRENT,
    GRACE_ENV,
    HEARTBEAT,
    LOCK,
    LOCK_HEARTBEAT_SECONDS,
    LOCK_STALE_SECONDS,
    MARKS_OF_A_RELEASE,
    POINTER_FORMAT,
    RECORD_FORMAT,
    RELEASE_GRACE_SECONDS,
    SUPERSEDED,
    TABLES,
    VERSIONS,
    ReleaseError,
    ReleaseLockedError,
    check_target,
    delete_release,
    published_location,
    release_grace_seconds,
    resolve_target,
)
from dp_dask.release.staging import StagedRelease, release_lock, stage_release
from dp_dask.release.verify import (
    checked_table,
    model_fingerprint,
    pinned_table,
    release_directory,
    release_version,
    verify_release,
)
from dp_dask.release.writer import ReleasePlan, release_metadata, write_release

__all__ = [
    "BOOKKEEPING", "COMPLETE", "CURRENT", "GRACE_ENV", "HEARTBEAT", "LOCK",
    "LOCK_HEARTBEAT_SECONDS", "LOCK_STALE_SECONDS", "MARKS_OF_A_RELEASE", "POINTER_FORMAT",
    "RECORD_FORMAT", "RELEASE_GRACE_SECONDS", "SUPERSEDED", "TABLES", "VERSIONS", "ReleaseError",
    "ReleaseLockedError", "ReleasePlan", "StagedRelease", "check_target", "checked_table",
    "delete_release", "model_fingerprint", "pinned_table", "published_location",
    "release_directory", "release_grace_seconds", "release_lock", "release_metadata",
    "release_version", "resolve_target", "stage_release", "verify_release", "write_release",
]
