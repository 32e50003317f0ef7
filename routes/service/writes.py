"""Writing to a live index: create or replace, delete, and ACL changes, durably and at once.

One `Writer` per index and process owns the write-ahead log (indexes/wal.py: a second
process gets `Conflict` at once, naming the holder; it does not wait). A write:

1. is checked whole (a batch too; nothing is written if one change fails): every id and ACL
   by the one rule of retrieval/types.py (ids are stored in NFKC form); then, from the
   principal and the request alone, by routes/service/write_access.py: each id within the
   key's write prefixes (outside them: one fixed 403, before any lookup, so it tells nothing
   about the id), and each put or ACL change leaving an ACL the writer can read (unless it
   holds the `admin` scope); only then against the served view, by the read rule of DELETE:
   a delete, an ACL change *or a put* of an existing document the caller cannot read is
   `NotFound`, exactly like a missing id, and changes nothing (the `admin` scope passes it);
2. is embedded, outside the writer's lock, on its own request thread: a large document (a
   1 MiB put is about 600 chunks) delays no other write. A key's writes queued or running at
   once are bounded in bytes (routes/service/write_quota.py: 429 past `write_max_key_bytes`);
3. under the lock, in order: is checked again against the view served now (another write may
   have changed a document meanwhile), builds the new view (base snapshot + delta segment,
   indexes/live.py), appends one record and fsyncs it (only now is the write acknowledged),
   and installs the view as the next served generation (routes/service/generations.py): requests
   that started before keep the old view, every later one sees the change, revocations
   included. The write waits for its vectors, so an acknowledged document is found by every
   route, dense included, on the next request.

A write with an idempotency key that was already applied returns the first result and
changes nothing; the same key with another request is `Conflict`. The generation a write
answers with is its log seq: it grows by one per write, survives restarts and compaction.

A put of a new id creates it and a put of a readable one replaces it. Within a key's
prefixes, a put of an existing id it cannot read is 404 where a new id is 200, so a key learns
whether an id inside its prefixes exists: prefixes are what keeps that oracle, and any write,
off the rest of the index. A write key may give a document ACL entries it does not hold
itself (a content pipeline publishes for its readers) only while it stays among the readers:
otherwise a key could make a document no one but an admin may manage (`["nobody-xyz"]`), or
plant text into a group's scope that the group reads and the writer then cannot see or
remove. A key that can read and write a document can make it public or remove its other
readers (but not itself). An admin (`admin` scope) may change or delete any document,
readable or not, and give it any ACL: someone must be able to clean up.

Considered and not done: (a) answering 403 instead of 404 for an existing unreadable id
inside the prefixes: a new id's 200 would still tell them apart, unless every put of an
unseen id were refused; (b) making the writer's own id part of every ACL it writes (silent
rewriting of what the caller sent; refusing says what to fix); (c) keeping the old rule and
letting admins delete unreadable documents only: that would still let any write key plant
content into any group's scope; within its prefixes a key can now only plant content it can
itself read and remove, and outside them nothing.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from indexes.idempotency import IdempotencyKeys
from indexes.live import (WRITE, Change, Delete, Put, apply, authorize, changed_id, compact, embed_docs, options_of,
                          record_payload, wal_path, write_result)
from indexes.wal import JSONObject, WriteAheadLog
from retrieval.errors import Conflict, InvalidRequest
from retrieval.types import Principal, check_acl, check_doc_id
from routes.service.view import IndexView
from routes.service.write_access import check_changes, read_rule
from routes.service.generations import Generations
from routes.service.write_quota import WriteQuota, change_bytes

log = logging.getLogger("quarry.writes")
MAX_BATCH = 100  # changes in one request (settings: write_batch_max)
MAX_RECORD_BYTES = 64 * 1024 * 1024  # one write's log record: its documents and their vectors (about 2 KB per chunk)
MAX_KEY_BYTES = 4 * 1024 * 1024  # a key's writes queued or running at once (settings: write_max_key_bytes)


@dataclass(frozen=True)
class Embedded:
    """Changes with the vectors of their puts, and the model and chunking they were made with."""

    changes: list[tuple[Change, Any]]
    model_id: str
    max_chars: int


def check_batch(changes: Sequence[Change], max_batch: int) -> list[str]:
    """The checks of a write before anything is looked up: at least one change, at most
    `max_batch`, each document once, valid ids and ACLs. Returns the ids, in order."""
    if not changes:
        raise InvalidRequest("a write needs at least one change")
    if len(changes) > max_batch:
        raise InvalidRequest(f"a batch holds at most {max_batch} changes, got {len(changes)}")
    ids = [check_doc_id(changed_id(c)) for c in changes]
    if len(set(ids)) != len(ids):
        raise InvalidRequest("a batch names each document once")
    for c in changes:
        if not isinstance(c, Delete):
            check_acl(c.doc.acl if isinstance(c, Put) else c.acl)
    return ids


class Writer:
    """The one writer of the index at `index_dir` in this process (see the module docstring).

    `generations` (a server's) receives each new view; without it (the CLI) writes are only
    made durable, and a server started later replays them."""

    def __init__(self, index_dir: Path, generations: Generations | None = None, max_batch: int = MAX_BATCH,
                 idempotency_keys: int = 10_000, compact_after: int = 0,
                 opener: Callable[[], IndexView] | None = None, max_key_bytes: int = MAX_KEY_BYTES) -> None:
        self.index_dir = index_dir
        self.quota = WriteQuota(max_key_bytes)
        self.generations = generations
        self.max_batch = max_batch
        self.compact_after = compact_after  # changed documents that start a background compaction (0: never)
        self.opener = opener  # opens the index again after a background compaction (None: a reloader does)
        self._compacting = threading.Lock()
        self.compactions: list[JSONObject] = []  # the background ones' results (or errors), latest last
        self.wal = WriteAheadLog(wal_path(index_dir), max_record_bytes=MAX_RECORD_BYTES)
        try:
            self.keys = IdempotencyKeys.from_log(self.wal, idempotency_keys)
        except BaseException:
            self.wal.close()
            raise
        self.lock = threading.RLock()  # writes, reloads and folds of this index, one at a time
        self._closed = False

    def close(self) -> None:
        with self.lock:
            self._closed = True
            self.wal.close()

    def start_at(self, base_wal_seq: int) -> None:
        """Number the log after CURRENT's `wal_seq` (a log deleted or lost beside a newer
        snapshot would otherwise restart below it, and replays would skip new records)."""
        with self.lock:
            if self.wal.last_seq < base_wal_seq:
                log.warning("the write-ahead log ends at seq %d but the snapshot holds changes through %d; "
                            "numbering goes on from there", self.wal.last_seq, base_wal_seq)
                if self.wal.last_seq > self.wal.base_seq:  # every record it holds is folded already
                    self.wal.truncate_through(self.wal.last_seq, self.keys.carry())
                self.wal.restart_at(base_wal_seq, self.keys.carry())

    def write(self, changes: Sequence[Change], principal: Principal | None,
              idempotency: tuple[str, bytes] | None = None, engine: IndexView | None = None,
              key: str | None = None) -> JSONObject:
        """Apply `changes` as one record; the result names the new generation (the record's
        seq). The changes apply to the served generation's view (or to `engine`, without
        generations); `principal` None may change any document (the local operator, through
        the CLI); `idempotency` is (scoped key, request bytes); `key` is what the bytes in
        flight are counted against (the caller's principal id, so its keys share the bound;
        None: not bounded)."""
        check_batch(changes, self.max_batch)
        check_changes(principal, changes)
        with self.quota.admit(key, change_bytes(changes)):
            if idempotency is not None:
                with self.lock:
                    stored = self.keys.lookup(*idempotency)
                if stored is not None:
                    return stored
            with self._served(engine) as served:  # checked first, so a refused write embeds nothing
                self._authorize(served, changes, principal)
                embedded = self._embed(served, changes)
            with self.lock:
                return self._apply(changes, principal, idempotency, engine, embedded)

    def _apply(self, changes: Sequence[Change], principal: Principal | None, idempotency: tuple[str, bytes] | None,
               engine: IndexView | None, embedded: Embedded) -> JSONObject:
        """Under the lock: check again against the view served now, then log and install."""
        if idempotency is not None:
            stored = self.keys.lookup(*idempotency)
            if stored is not None:
                return stored
        seq_next = self.wal.last_seq + 1
        with self._served(engine) as served:
            self._authorize(served, changes, principal)
            base = served.base or served.snapshot
            if (served.embedder.model_id, options_of(base)[0]) != (embedded.model_id, embedded.max_chars):
                embedded = self._embed(served, changes)  # a new base with other chunking came in meanwhile
            new = served.derive(apply(served.live, base, embedded.changes, seq_next))
        try:
            payload = record_payload(embedded.changes, embedded.model_id, embedded.max_chars)

            def result(seq: int) -> JSONObject:
                return write_result(seq, [c for c, _ in embedded.changes])

            if idempotency is not None:
                out, _ = self.keys.append(self.wal, idempotency[0], idempotency[1], WRITE, payload, result)
            else:
                out = result(self.wal.append(WRITE, payload))
            if out["generation"] != seq_next:
                raise RuntimeError("the write-ahead log moved under its writer")
        except BaseException:
            new.close()
            raise
        if self.generations is not None:
            self.generations.install(new, owned=True)
        else:
            new.close()
        if self.compact_after and self.wal.last_seq - self.wal.base_seq >= self.compact_after:
            self._compact_in_background(new.embedder)
        log.info("generation %d: %s", out["generation"], ", ".join(f"{d['op']} {d['doc_id']}" for d in out["documents"]))
        return out

    @contextmanager
    def _served(self, engine: IndexView | None) -> Iterator[IndexView]:
        if engine is not None:
            yield engine
            return
        if self.generations is None:
            raise RuntimeError("a writer without generations needs the engine to write to")
        with self.generations.lease() as generation:
            yield generation.node()

    @staticmethod
    def _authorize(engine: IndexView, changes: Sequence[Change], principal: Principal | None) -> None:
        authorize(engine.snapshot.catalog.document_acl, changes, read_rule(principal))

    @staticmethod
    def _embed(engine: IndexView, changes: Sequence[Change]) -> Embedded:
        """The puts' vectors, with the served base's chunking and the engine's model."""
        max_chars = options_of(engine.base or engine.snapshot)[0]
        puts = [c for c in changes if isinstance(c, Put)]
        vectors = iter(embed_docs([p.doc for p in puts], engine.embedder.encode, max_chars) if puts else [])
        return Embedded([(c, next(vectors) if isinstance(c, Put) else None) for c in changes],
                        engine.embedder.model_id, max_chars)

    def rebase(self, open_new: Callable[[], IndexView]) -> IndexView:
        """Serve a new base snapshot (after an ingest or a compaction): `open_new` opens it with
        the log replayed onto it, and runs under the writer's lock, so no write can fall
        between the replay and the install; then the folded records are dropped."""
        with self.lock:
            if self._closed:
                raise Conflict("the writer is closed")
            engine = open_new()
            if self.generations is not None:
                self.generations.install(engine, owned=True)
            self.fold(int(engine.snapshot.manifest.get("wal_seq", 0)))
            return engine

    def behind(self, engine: IndexView) -> bool:
        """Whether `engine` misses log records (written before this writer took the log)."""
        return self.wal.last_seq > engine.live.seq

    def fold(self, base_wal_seq: int) -> None:
        """Drop the log records a new base snapshot holds (keeping the idempotency keys)."""
        with self.lock:
            if self._closed:
                return
            through = min(base_wal_seq, self.wal.last_seq)
            if through > self.wal.base_seq:
                self.wal.truncate_through(through, self.keys.carry())
                log.info("write-ahead log folded through seq %d", through)

    def compact(self, embedder: Any) -> JSONObject:
        """Fold the changes into a new base snapshot now (`quarry compact`, the admin
        endpoint, or in the background past `compact_after` changed documents) and drop them
        from the log. Writes go on meanwhile: the build reads the log as of its start, and
        later records are replayed onto the new base. A server switches to it on its next
        reload check (its view in memory holds every change meanwhile)."""
        if not self._compacting.acquire(blocking=False):
            raise Conflict("a compaction of this index is already running; try again once it ends")
        try:
            return self._compact(embedder)
        finally:
            self._compacting.release()

    def _compact(self, embedder: Any) -> JSONObject:
        with self.lock:
            through = self.wal.last_seq  # acknowledged; a record being appended may still fail
        manifest = compact(self.index_dir, embedder, through=through)
        if manifest is None:
            return {"status": "unchanged", "generation": self.wal.last_seq}
        self.fold(int(manifest["wal_seq"]))  # the new base holds them, durably; the served view is in memory
        return {"status": "compacted", "generation": int(manifest["wal_seq"]), "snapshot": manifest["snapshot"],
                "counts": manifest["counts"]}

    def _compact_in_background(self, embedder: Any) -> None:
        if not self._compacting.acquire(blocking=False):
            return  # one at a time; the next write past the threshold starts the next

        def run() -> None:
            try:
                out = self._compact(embedder)
                if out["status"] == "compacted" and self.opener is not None:
                    self.rebase(self.opener)
            except Exception as e:  # noqa: BLE001 - a failed compaction leaves the live view serving
                log.exception("background compaction failed; the live view keeps serving")
                out = {"status": "failed", "error": getattr(e, "message", type(e).__name__)}
            finally:
                self._compacting.release()
            self.compactions.append(out)

        threading.Thread(target=run, name="quarry-compact", daemon=True).start()
