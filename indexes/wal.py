"""The write-ahead log of a live index (the idempotency keys kept in it: `indexes.idempotency`).

A change to a live index is acknowledged only once it is on disk: `WriteAheadLog.append`
writes one line and fsyncs it before returning its `seq`. After a crash, replaying the log
gives every acknowledged change, in order, and nothing half-written.

Format: one UTF-8 file of JSON lines.

    {"base": B, "carry": {...}, "sha256": H, "wal": 1}          the header, line 1
    {"op": "put", "payload": {...}, "seq": B+1, "sha256": H}    then one record a line

`H` is the sha256 of the canonical JSON (sorted keys, no spaces, UTF-8) of the line without
its `sha256` field, and seqs run B+1, B+2, ... without a gap. `base` is the seq that
compaction last folded into a base snapshot (`truncate_through`), so the numbering survives
a log that compaction emptied; `carry` holds state that must outlive the folded records
(the idempotency keys, `indexes.idempotency`).

Crashes. Appends are serialized and each is fsynced before the next begins, so a crash can
damage only the last line: a prefix of it, or (power lost while pages of an unfinished
fsync were written out of order) a complete-looking line with garbage inside. Neither was
ever acknowledged, so reading ignores a bad *final* line and opening for writing cuts it
off (with a warning: rot of the last acknowledged line would look the same, and no check
can tell them apart). A bad line anywhere else, a gap in the seqs or a bad header cannot
come from a crash: it is a `ServerFault`, never skipped, because skipping would drop
acknowledged writes without a word. The header is only ever written whole: a new or
rewritten log is built in `<log>.tmp`, fsynced, renamed over the log, and the directory
fsynced; a `.tmp` left by a crash is deleted at the next open.

After a failed write or fsync the log refuses further appends until it is reopened: Linux
may drop the dirty pages of a failed fsync and report success on the next one, so only a
fresh scan of what is on disk can say where the log ends (PostgreSQL's "fsyncgate").

Writers. One process writes an index's log. It holds an exclusive `flock` on `<log>.lock`
for the log object's lifetime and writes its pid there for the error message; the kernel
drops the lock however the process ends (`kill -9` included), so a dead writer never blocks
the next. A second writer fails at open with `Conflict` instead of waiting: a CLI write next
to a running server should learn at once that the server owns the index, not hang until the
server exits. Only writers that take turns by design ask to wait (`wait_s`: the replicas of a
shard open its log for each write, indexes/shard_log.py). `flock` belongs to an open file, so
a second log object in the same process is refused too. Readers need no lock (`read_log`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NoReturn

from indexes.tables import fsync_dir
from retrieval.errors import Conflict, InvalidRequest, PayloadTooLarge, ServerFault, StorageError

log = logging.getLogger("quarry.wal")

FORMAT = 1
MAX_RECORD_BYTES = 8 * 1024 * 1024  # default bound of one encoded record: a large batch fits, a runaway body does not
LOCK_POLL_S = 0.005  # how often a writer waiting for the lock (`wait_s`) tries again

JSONObject = dict[str, Any]


@dataclass(frozen=True)
class Record:
    """One acknowledged change: `seq` orders it, `op` names it, `payload` carries it."""

    seq: int
    op: str
    payload: JSONObject


def _canonical(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def _seal(body: Mapping[str, Any]) -> bytes:
    """`body` as a log line: its fields plus the checksum of their canonical JSON."""
    return _canonical({**body, "sha256": hashlib.sha256(_canonical(body)).hexdigest()}) + b"\n"


def _unseal(line: bytes) -> JSONObject | None:
    """The fields of a complete line whose checksum holds; None for a torn or damaged one."""
    if not line.endswith(b"\n"):
        return None
    try:
        obj = json.loads(line)
        if not isinstance(obj, dict):
            return None
        digest = obj.pop("sha256", None)
        return obj if digest == hashlib.sha256(_canonical(obj)).hexdigest() else None
    except (ValueError, RecursionError):  # not JSON (or not UTF-8), or NaN, which _canonical refuses
        return None


def _record(fields: JSONObject | None) -> Record | None:
    if fields is None or set(fields) != {"seq", "op", "payload"}:
        return None
    seq, op, payload = fields["seq"], fields["op"], fields["payload"]
    if type(seq) is not int or not isinstance(op, str) or not isinstance(payload, dict):
        return None
    return Record(seq, op, payload)


def _line(record: Record) -> bytes:
    return _seal({"seq": record.seq, "op": record.op, "payload": record.payload})


class _Scan:
    """One pass over a log file: the header, then the records up to `end` (EOF if None).
    `good_end` is the offset after the last valid record; `torn` the ignored final line."""

    def __init__(self, fh: IO[bytes], end: int | None = None, resume: LogPosition | None = None) -> None:
        self.fh, self.end = fh, end
        line = fh.readline() if resume is None else resume.header
        header = _unseal(line)
        if (header is None or header.get("wal") != FORMAT or type(header.get("base")) is not int
                or not isinstance(header.get("carry"), dict)):
            raise ServerFault(f"the write-ahead log has no valid header (format {FORMAT} expected)")
        self.header = line
        self.base: int = header["base"]
        self.carry: JSONObject = header["carry"]
        self.last_seq = self.base if resume is None else resume.seq
        self.good_end = fh.tell() if resume is None else resume.offset
        if resume is not None:
            fh.seek(resume.offset)
        self.torn = b""

    def records(self) -> Iterator[Record]:
        while self.end is None or self.good_end < self.end:
            line = self.fh.readline()
            if not line:
                return
            record = _record(_unseal(line))
            if record is None and not self.fh.read(1):
                self.torn = line  # the final line: a write that was never acknowledged
                return
            if record is None or record.seq != self.last_seq + 1:
                raise ServerFault(f"the write-ahead log is corrupt after seq {self.last_seq}: an acknowledged "
                                  "record is damaged or missing", after_seq=self.last_seq)
            self.last_seq = record.seq
            self.good_end += len(line)
            yield record


def _records(fh: IO[bytes], end: int | None) -> Iterator[Record]:
    with fh:
        yield from _Scan(fh, end).records()


def read_log(path: Path) -> Iterator[Record]:
    """The valid records of the log at `path`, without taking the writer's lock or repairing
    a torn tail (which is ignored)."""
    return _records(open(path, "rb"), None)


def read_after(path: Path, after: int) -> tuple[int, list[Record]]:
    """(the log's base seq, its valid records after seq `after`), without the writer's lock.
    A base above `after` means the records a reader needs were folded away: the snapshot it
    replays onto is older than the one the log was folded into."""
    with open(path, "rb") as fh:
        scan = _Scan(fh)
        return scan.base, [r for r in scan.records() if r.seq > after]


@dataclass(frozen=True)
class LogPosition:
    """Where a follower stopped reading a log: the file (its inode: a folded or renumbered log
    is a new file), its header line, and the offset and seq after the last record read."""

    inode: int
    header: bytes
    offset: int
    seq: int


def read_new(path: Path, after: int, position: LogPosition | None) -> tuple[int, list[Record], LogPosition]:
    """As `read_after`, reading from `position` (where the last read stopped) when the log is
    still that file with that header and has not shrunk, so a follower reads only what was
    appended; else from the start. Returns the position to resume from next time."""
    with open(path, "rb") as fh:
        st = os.fstat(fh.fileno())
        resume = None
        if position is not None and position.inode == st.st_ino and st.st_size >= position.offset:
            resume = position if fh.readline() == position.header else None
            fh.seek(0)
        scan = _Scan(fh, resume=resume)
        records = [r for r in scan.records() if r.seq > after]
        return scan.base, records, LogPosition(st.st_ino, scan.header, scan.good_end, scan.last_seq)


def log_end(path: Path) -> int:
    """The last acknowledged seq of the log at `path` (its base when it holds no record; 0
    when there is no log), read without the writer's lock."""
    if not path.exists():
        return 0
    with open(path, "rb") as fh:
        scan = _Scan(fh)
        for _ in scan.records():
            pass
    return scan.last_seq


def _lock_writer(lock_path: Path, wait_s: float = 0.0) -> int:
    """The descriptor holding the exclusive writer lock, waiting up to `wait_s` for it;
    Conflict naming the holder if it is still taken."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    deadline = time.monotonic() + wait_s
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(LOCK_POLL_S)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        os.close(fd)
        pid = int(holder) if holder.isdigit() else None  # unknown while the holder has not written it yet
        who = "another process" if pid is None else f"process {pid}"
        raise Conflict(f"{who} is writing this index (it holds the write-ahead log's lock): send writes "
                       "through it, or stop it first", holder_pid=pid) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


class WriteAheadLog:
    """The one writer of the log at `path` (created if missing) until `close`.

    Opening takes the writer lock, deletes a leftover `.tmp`, scans the log and cuts off a
    torn final line, so appends continue right after the last acknowledged seq.
    `max_record_bytes` bounds one encoded record (PayloadTooLarge beyond it). `wait_s` waits
    that long for another writer to let the lock go (a shard's replicas take turns writing
    its log, routes/cluster/replica.py) before the `Conflict`.
    """

    def __init__(self, path: Path, *, max_record_bytes: int = MAX_RECORD_BYTES, wait_s: float = 0.0) -> None:
        self.path = Path(path)
        self.max_record_bytes = max_record_bytes
        self._tmp = self.path.with_name(self.path.name + ".tmp")
        self._lock = threading.Lock()
        self._failed: str | None = None
        try:
            self._lock_fd = _lock_writer(self.path.with_name(self.path.name + ".lock"), wait_s)
        except OSError as e:
            raise StorageError(f"the write-ahead log cannot be opened for writing: {e.strerror}") from None
        self._fd = -1
        try:
            self._tmp.unlink(missing_ok=True)  # a rewrite that crashed before its rename
            if not self.path.exists():
                self._rewrite(0, {}, iter(()))
            with open(self.path, "rb") as fh:
                scan = _Scan(fh)
                for _ in scan.records():
                    pass
            self._base, self._carry, self._last, self._end = scan.base, scan.carry, scan.last_seq, scan.good_end
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CLOEXEC)
            if scan.torn:
                log.warning("write-ahead log: cut off %d bytes of an unacknowledged final record after seq %d",
                            len(scan.torn), scan.last_seq)
                os.ftruncate(self._fd, self._end)
                os.fsync(self._fd)
        except OSError as e:
            self.close()
            raise StorageError(f"the write-ahead log cannot be opened for writing: {e.strerror}") from None
        except BaseException:
            self.close()
            raise

    @property
    def last_seq(self) -> int:
        """The seq of the last acknowledged record (the base seq when the log holds none)."""
        return self._last

    @property
    def base_seq(self) -> int:
        """The seq compaction last folded into the base snapshot (`truncate_through`)."""
        return self._base

    @property
    def carry(self) -> JSONObject:
        """The state the last `truncate_through` carried over (a copy's top level)."""
        return dict(self._carry)

    def append(self, op: str, payload: JSONObject) -> int:
        """Write one record and fsync it; its seq once it is on disk."""
        return self.append_with(op, lambda _seq: payload)

    def append_with(self, op: str, make_payload: Callable[[int], JSONObject]) -> int:
        """`append`, with the payload built from the seq it will get (under the append lock,
        so no other append can take that seq): a write's stored result can name its seq."""
        with self._lock:
            self._check_writable()
            seq = self._last + 1
            line = self._encode(Record(seq, op, make_payload(seq)))
            try:
                written = 0
                while written < len(line):
                    written += os.pwrite(self._fd, memoryview(line)[written:], self._end + written)
                os.fsync(self._fd)
            except OSError as e:
                try:  # readers must not see a record that was never acknowledged
                    os.ftruncate(self._fd, self._end)
                except OSError:
                    pass
                self._fail(e)
            self._end += len(line)
            self._last = seq
            return seq

    def replay(self) -> Iterator[Record]:
        """Every acknowledged record, in order, as of this call (appends made while iterating
        are not included; a concurrent `truncate_through` does not disturb the iteration)."""
        with self._lock:
            if self._fd < 0:
                raise StorageError("the write-ahead log is closed")
            return _records(open(self.path, "rb"), self._end)

    def truncate_through(self, seq: int, carry: JSONObject | None = None) -> None:
        """Drop the records up to `seq` (compaction has folded them into a new base) and keep
        the later ones and the numbering; `carry` replaces the carried state (None keeps it).
        Atomic: a crash leaves either the old log or the new one, never a mix."""
        with self._lock:
            self._check_writable()
            if seq > self._last:
                raise InvalidRequest(f"cannot truncate the write-ahead log through seq {seq}: it ends at {self._last}")
            base = max(seq, self._base)
            kept = dict(self._carry) if carry is None else dict(carry)
            with open(self.path, "rb") as fh:
                self._rewrite(base, kept, (r for r in _Scan(fh, self._end).records() if r.seq > base))
            self._base, self._carry = base, kept

    def restart_at(self, seq: int, carry: JSONObject | None = None) -> None:
        """Number from `seq` on: an empty log's base moves up to it (a log that still holds
        records is left as it is: `InvalidRequest`)."""
        with self._lock:
            self._check_writable()
            if self._last != self._base:
                raise InvalidRequest("the write-ahead log holds records; it can only be folded, not renumbered")
            if seq > self._base:
                kept = dict(self._carry) if carry is None else dict(carry)
                self._rewrite(seq, kept, iter(()))
                self._base = self._last = seq
                self._carry = kept

    def close(self) -> None:
        """Release the file and the writer lock (idempotent; waits for an append in flight)."""
        with self._lock:
            for name in ("_fd", "_lock_fd"):
                fd = getattr(self, name, -1)
                if fd >= 0:
                    setattr(self, name, -1)
                    os.close(fd)

    def __enter__(self) -> WriteAheadLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _encode(self, record: Record) -> bytes:
        if not isinstance(record.op, str) or not record.op or not isinstance(record.payload, dict):
            raise InvalidRequest("a write-ahead log record needs a non-empty op and a JSON object payload")
        try:
            line = _line(record)
        except (TypeError, ValueError) as e:
            raise InvalidRequest(f"the write-ahead log payload is not JSON: {e}") from None
        if len(line) > self.max_record_bytes:
            raise PayloadTooLarge(f"a write-ahead log record of {len(line)} bytes exceeds the limit of "
                                  f"{self.max_record_bytes} bytes", limit=self.max_record_bytes, size=len(line))
        return line

    def _rewrite(self, base: int, carry: JSONObject, records: Iterator[Record]) -> None:
        """Write header and `records` to the temp file, fsync, rename over the log, fsync the
        directory, and append to the new file from then on."""
        try:
            with open(self._tmp, "wb") as out:
                out.write(_seal({"wal": FORMAT, "base": base, "carry": carry}))
                for record in records:
                    out.write(_line(record))
                out.flush()
                os.fsync(out.fileno())
                size = out.tell()
            os.replace(self._tmp, self.path)
            fsync_dir(self.path.parent)
            fd = os.open(self.path, os.O_WRONLY | os.O_CLOEXEC) if self._fd >= 0 else -1
        except BaseException as e:
            self._tmp.unlink(missing_ok=True)
            if isinstance(e, OSError):
                self._fail(e)
            raise
        if self._fd >= 0:
            os.close(self._fd)
            self._fd, self._end = fd, size

    def _check_writable(self) -> None:
        if self._fd < 0:
            raise StorageError("the write-ahead log is closed")
        if self._failed is not None:
            raise StorageError(f"the write-ahead log refused writes after a failed write ({self._failed}); "
                               "reopen it to find where it ends")

    def _fail(self, e: OSError) -> NoReturn:
        self._failed = e.strerror or type(e).__name__
        raise StorageError(f"the write-ahead log could not be written: {self._failed}") from None
