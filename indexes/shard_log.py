"""One shard's live state: its member snapshot plus its own write-ahead log, followed and written.

Each shard of a sharded index takes live writes in its own log, `DIR/shards/NN/wal.log` (the
format and crash rules of indexes/wal.py; records as indexes/live.py writes them, vectors
included). Every replica serving the shard holds a `ShardLog` over the snapshot the cluster
manifest names:

- **Following.** Before each call (`current`) it stats the log; when its size, time or inode
  moved, it reads the records after the last one it applied (from the offset where it last
  stopped, while the log is the same file: `read_new`), applies them (indexes/live.py
  `apply`) and builds the view again (`live_view`: base + delta segment with tombstones). A
  record is fsynced before its write is acknowledged, so a call that starts after an
  acknowledgement sees it, through any front and any replica: a revocation is in effect on
  the next request. A replaced view is let go when its last call returns (reference
  counting: nothing closes it under a call).
- **Writing** (`write`). A shard's replicas take turns: each write takes the log's writer
  lock (waiting for it, `wait_s`), then, under it, catches up with every record on disk,
  checks the write against that state by the read rule (indexes/live.py `authorize`),
  appends one record and fsyncs it. The idempotency keys ride in the records
  (indexes/idempotency.py), so a retry that reaches another replica after the first died
  mid-write finds the key in the log and gets the first result.

Following embeds nothing: a front embeds each put with the cluster's model and the shard's
chunking before it sends the record, and a record whose vectors do not fit is refused
(`ServerFault` when replayed: the log would otherwise need the model on every replica).
Sharded logs are never folded (a sharded index has no compaction yet), so a follower reads
every record after its base's `wal_seq`; a log folded past it is `Superseded`.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable, Generic, TypeVar

from indexes.idempotency import MAX_KEYS, IdempotencyKeys
from indexes.live import (WRITE, LiveState, Superseded, apply, authorize, live_view, options_of, parse_record, wal_path,
                          write_result)
from indexes.snapshot_load import Snapshot
from indexes.wal import JSONObject, LogPosition, Record, WriteAheadLog, read_new

T = TypeVar("T")
MAX_RECORD_BYTES = 64 * 1024 * 1024  # one write's record: its documents and their vectors (about 2 KB per chunk)
LOCK_WAIT_S = 10.0  # how long a write waits for the replica writing before it


def _stamp(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


class ShardLog(Generic[T]):
    """The live state of the shard in `shard_dir` over `base` (see the module docstring).
    `make(view, seq)` builds what calls use from a view (a `LocalShard`); it is built again
    after each change, and `current` returns it."""

    def __init__(self, shard_dir: Path, base: Snapshot, make: Callable[[Snapshot, int], T],
                 key_capacity: int = MAX_KEYS, wait_s: float = LOCK_WAIT_S) -> None:
        self.base, self._make, self.wait_s = base, make, wait_s
        self.path = wal_path(shard_dir)
        self.model_id = str(base.manifest["model"]["id"])
        self.max_chars, self.default_acl, _ = options_of(base)
        self.state = LiveState(int(base.manifest.get("wal_seq", 0)))
        self.keys = IdempotencyKeys(key_capacity)
        self._seen = 0  # the last record read (those up to the base's seq give idempotency keys only)
        self._position: LogPosition | None = None  # where the last read stopped: the next reads only what follows
        self._stamp: tuple[int, int, int, int] | None = None
        self._view: Snapshot = base
        self._made = make(base, self.state.seq)
        self._lock = threading.Lock()  # one catch-up at a time
        self._writing = threading.Lock()  # this replica's writes, one at a time (the flock orders the replicas)
        self.current()

    @property
    def seq(self) -> int:
        """The last log record applied (the base's `wal_seq` when none)."""
        return self.state.seq

    def current(self) -> T:
        """What calls use, as of every record on disk now."""
        with self._lock:
            stamp = _stamp(self.path)
            if stamp is not None and stamp != self._stamp:
                self._catch_up()
                self._stamp = stamp  # taken before the read: a record appended meanwhile is read next time again
            return self._made

    def view(self) -> Snapshot:
        """The live snapshot `current` was built from."""
        with self._lock:
            return self._view

    def _catch_up(self) -> None:
        folded, records, self._position = read_new(self.path, self._seen, self._position)
        if folded > self.state.seq:
            raise Superseded(f"the write-ahead log of {self.path.parent} was folded past snapshot {self.base.path.name}")
        state = self.state
        for record in records:
            self.keys.observe(record)
            self._seen = record.seq
            if record.seq > state.seq:
                state = apply(state, self.base, parse_record(record, self.model_id, self.max_chars, None, self.default_acl),
                              record.seq)
        if state is not self.state:
            view = live_view(self.base, state)
            self._made, self._view, self.state = self._make(view, state.seq), view, state

    def write(self, payload: JSONObject, can_read: Callable[[tuple[str, ...]], bool] | None, key: str,
              request: bytes) -> JSONObject:
        """Apply one write record (`payload`, indexes/live.py `record_payload`) once: checked by
        the read rule against the state of every record on disk (`can_read` None: the local
        operator), appended and fsynced under the log's writer lock. The answer
        (`write_result`) is stored with `key`: a retry with the same key and `request` gets it
        back and writes nothing."""
        changes = [c for c, _ in parse_record(Record(0, WRITE, payload), self.model_id, self.max_chars, None,
                                              self.default_acl)]  # vectors that fit, or ServerFault before the lock
        with self._writing, WriteAheadLog(self.path, max_record_bytes=MAX_RECORD_BYTES, wait_s=self.wait_s) as wal:
            self._number_after_base(wal)
            self.current()
            stored = self.keys.lookup(key, request)
            if stored is not None:
                return stored
            with self._lock:
                catalog = self._view.catalog
            authorize(catalog.document_acl, changes, can_read)
            out, _ = self.keys.append(wal, key, request, WRITE, payload, lambda seq: write_result(seq, changes))
        self.current()
        return out

    def _number_after_base(self, wal: WriteAheadLog) -> None:
        """A log that ends below the base's `wal_seq` (deleted or lost beside a newer
        snapshot) numbers on from it, or followers would take new records for folded ones."""
        base_seq = int(self.base.manifest.get("wal_seq", 0))
        if wal.last_seq < base_seq:
            if wal.last_seq > wal.base_seq:
                wal.truncate_through(wal.last_seq, self.keys.carry())
            wal.restart_at(base_seq, self.keys.carry())
