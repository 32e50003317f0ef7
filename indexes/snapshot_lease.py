"""Serving leases: a snapshot that a live process serves is never deleted under it.

Every process that loads a snapshot (a server, `quarry query`, `quarry mcp`, an eval run)
holds a *shared* `flock` on the snapshot's lease file, `snapshots/<name>/.serving.lock`,
until it closes the snapshot. Pruning (`indexes.snapshot_build`) removes a snapshot only
after taking an *exclusive*, non-blocking lock on the same file; while any process holds its
shared lock the attempt fails and the snapshot is kept, for a later ingest to remove once
nobody serves it.

Why `flock` on a file inside the snapshot rather than lease files with process ids: the
kernel drops a process's locks when it exits, however it exits (`kill -9` included), so a
dead server can never block pruning and there is no stale lease to detect or expire; a pid
file could name a recycled pid. `flock` locks belong to an open file description, not to a
process, so two engines in one process (a server mid-reload, a test) exclude a prune in that
same process too, which POSIX `fcntl` record locks would not. The index must live on a
local filesystem (or NFSv4, where Linux maps `flock` onto byte-range locks).

A loader reads CURRENT and then locks: in between, an ingest could prune that very
snapshot. The pruner renames the folder aside while it holds the exclusive lock, so a loader
that gets its shared lock checks that the lock file it holds is still the one at the
snapshot's path, and otherwise reads CURRENT again (`load_snapshot` does this).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import shutil
import uuid
from pathlib import Path

log = logging.getLogger("quarry.snapshot")

LEASE_FILE = ".serving.lock"  # inside each snapshot folder; not part of the manifest's files
PRUNING = ".pruning-"  # prefix of a folder being removed (a killed prune leaves one; the next build clears it)


class SnapshotLease:
    """A shared lock on one snapshot's lease file, held until `release` (or process exit)."""

    def __init__(self, path: Path, fd: int | None) -> None:
        self.path = path  # the snapshot folder
        self._fd = fd  # None: the lease file could not be created (a read-only index), nothing to hold

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the last descriptor of the open file drops its lock


def _open_lease_file(snapshot: Path) -> int:
    # O_CREAT: snapshots built before leases existed have no lease file yet. O_RDONLY is
    # enough for flock, so a lease file that exists can be locked on a read-only mount.
    return os.open(snapshot / LEASE_FILE, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)


def acquire(snapshot: Path) -> SnapshotLease | None:
    """Hold a shared lease on `snapshot`; None when the folder was pruned before the lock was
    taken (read CURRENT again). On a read-only index without a lease file the lease holds
    nothing: no ingest can prune there either."""
    try:
        fd = _open_lease_file(snapshot)
    except FileNotFoundError:
        return None  # the folder is gone
    except OSError as e:
        if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            log.warning("snapshot %s is served without a lease: its lease file cannot be created (%s)",
                        snapshot.name, e.strerror)
            return SnapshotLease(snapshot, None)
        raise
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while a prune renames the folder aside
        held = os.fstat(fd)
        try:
            now = os.stat(snapshot / LEASE_FILE)
        except FileNotFoundError:
            now = None
        if now is None or (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
            os.close(fd)
            return None  # pruned between reading CURRENT and locking
    except BaseException:
        os.close(fd)
        raise
    return SnapshotLease(snapshot, fd)


def is_served(snapshot: Path) -> bool:
    """Whether some process (this one included) holds a lease on `snapshot` now."""
    try:
        fd = _open_lease_file(snapshot)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def remove_unless_served(snapshot: Path) -> bool:
    """Delete `snapshot` unless a process holds a lease on it; True when it was removed.
    The folder is renamed aside under the exclusive lock, so no loader can lease it after
    this check, then deleted."""
    try:
        fd = _open_lease_file(snapshot)
    except FileNotFoundError:
        return True  # already gone
    except OSError as e:
        log.warning("snapshot %s is kept: its lease file cannot be opened (%s)", snapshot.name, e.strerror)
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        doomed = snapshot.with_name(f"{PRUNING}{snapshot.name}-{uuid.uuid4().hex[:6]}")
        try:
            os.rename(snapshot, doomed)
        except OSError as e:  # pruning is housekeeping: the ingest it follows has already succeeded
            log.warning("snapshot %s is kept: it cannot be moved aside (%s)", snapshot.name, e.strerror)
            return False
    finally:
        os.close(fd)
    shutil.rmtree(doomed, ignore_errors=True)
    return True
