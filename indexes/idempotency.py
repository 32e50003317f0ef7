"""Idempotency keys of an index's writes, kept durably inside the write-ahead log.

A retried write with the same key and request gets the first result and changes nothing;
the same key with another request is a `Conflict` (HTTP 409). See `IdempotencyKeys`.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable

from indexes.wal import JSONObject, Record, WriteAheadLog
from retrieval.errors import Conflict, InvalidRequest, ServerFault

MAX_KEYS = 10_000  # idempotency keys remembered (see IdempotencyKeys)
MAX_KEY_CHARS = 255
IDEMPOTENCY = "idempotency"  # the payload field of a write made with an idempotency key


def request_digest(request: bytes) -> str:
    """The sha256 that identifies a request body for its idempotency key."""
    return hashlib.sha256(request).hexdigest()


class IdempotencyKeys:
    """The last `capacity` idempotency keys of an index's writes: key -> (sha256 of the first
    request, that request's result).

    A retry with the same key and request gets the stored result and writes nothing; the same
    key with another request is a `Conflict` (409). The map needs no store of its own: a write
    made with a key carries `{"key", "body_sha256", "result"}` in its WAL record's payload (field
    `idempotency`), so replaying the log rebuilds it, and `carry()` goes into
    `truncate_through` so compaction does not forget the keys of the records it folds.

    Keys are forgotten oldest-written first past `capacity` (default 10,000, a few MB at most:
    a client retries within seconds or minutes, not thousands of writes later); a forgotten
    key counts as new. The caller scopes keys (principal id + header value) and hashes the
    whole request (method, path, body), so two callers never share an entry.
    """

    def __init__(self, capacity: int = MAX_KEYS) -> None:
        if capacity < 1:
            raise InvalidRequest("idempotency keys need a capacity of at least 1")
        self.capacity = capacity
        self._entries: OrderedDict[str, tuple[str, JSONObject]] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def from_log(cls, wal: WriteAheadLog, capacity: int = MAX_KEYS) -> IdempotencyKeys:
        """The keys of `wal`: those it carries, then those of its records in order."""
        keys = cls(capacity)
        keys.restore(wal.carry)
        for record in wal.replay():
            keys.observe(record)
        return keys

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, key: str, request: bytes) -> JSONObject | None:
        """The stored result of `key` if `request` is the one first sent with it; None for a
        new key; Conflict if the key came with another request."""
        _check_key(key)
        with self._lock:
            return self._lookup(key, request_digest(request))

    def append(self, wal: WriteAheadLog, key: str, request: bytes, op: str, payload: JSONObject,
               result: Callable[[int], JSONObject]) -> tuple[JSONObject, bool]:
        """Apply a keyed write once: (the result, True) after appending `op` with `payload`
        and the key's entry (`result(seq)` builds the result to store), or (the first result,
        False) for a retry, which writes nothing. Check and append happen under one lock, so
        two concurrent retries cannot both write."""
        _check_key(key)
        if IDEMPOTENCY in payload:
            raise InvalidRequest(f"the payload field {IDEMPOTENCY!r} is reserved for the idempotency key")
        digest = request_digest(request)
        with self._lock:
            stored = self._lookup(key, digest)
            if stored is not None:
                return stored, False
            made: list[JSONObject] = []

            def with_entry(seq: int) -> JSONObject:
                made.append(result(seq))
                return {**payload, IDEMPOTENCY: {"key": key, "body_sha256": digest, "result": made[0]}}

            wal.append_with(op, with_entry)
            self._remember(key, digest, made[0])
            return made[0], True

    def observe(self, record: Record) -> None:
        """Remember the key a replayed record carries, if any."""
        entry = record.payload.get(IDEMPOTENCY)
        if entry is not None:
            with self._lock:
                self._remember(*_entry(entry, f"record {record.seq}"))

    def carry(self) -> JSONObject:
        """The keys as `truncate_through`'s carried state (oldest first)."""
        with self._lock:
            return {IDEMPOTENCY: [{"key": k, "body_sha256": d, "result": r} for k, (d, r) in self._entries.items()]}

    def restore(self, carry: JSONObject) -> None:
        """Remember the keys of a log header's carried state."""
        entries = carry.get(IDEMPOTENCY, [])
        if not isinstance(entries, list):
            raise ServerFault("the write-ahead log header carries malformed idempotency keys")
        with self._lock:
            for entry in entries:
                self._remember(*_entry(entry, "header"))

    def _lookup(self, key: str, digest: str) -> JSONObject | None:
        found = self._entries.get(key)
        if found is None:
            return None
        if found[0] != digest:
            raise Conflict("this idempotency key was already used with a different request", key=key)
        return found[1]

    def _remember(self, key: str, digest: str, result: JSONObject) -> None:
        self._entries[key] = (digest, result)
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS:
        raise InvalidRequest(f"an idempotency key is a string of 1 to {MAX_KEY_CHARS} characters")


def _entry(obj: object, where: str) -> tuple[str, str, JSONObject]:
    """(key, body sha256, result) of a stored entry; ServerFault if it is not one."""
    if (isinstance(obj, dict) and set(obj) == {"key", "body_sha256", "result"} and isinstance(obj["key"], str)
            and isinstance(obj["body_sha256"], str) and isinstance(obj["result"], dict)):
        return obj["key"], obj["body_sha256"], obj["result"]
    raise ServerFault(f"the write-ahead log holds a malformed idempotency entry ({where})")
