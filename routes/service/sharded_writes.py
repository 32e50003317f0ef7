"""Writing to a sharded index through a front: each write goes to the shard that owns its ids.

A front holds no log. It checks a write whole (routes/service/writes.py `check_batch`, the
writer's prefixes and ACL of routes/service/write_access.py, the per-key byte bound of
routes/service/write_quota.py), embeds its puts once with the cluster's
model and chunking, and sends one record to the owning shard (`Shard.write`), which checks it
by the read rule against its own live state, appends it to its own write-ahead log and fsyncs
it before it answers (indexes/shard_log.py). Every replica and front catches up with that log
before its next call, so a write, a revocation above all, is in effect on the next request
through any front.

Decisions a user sees:

- **One shard per batch.** A batch is one record in one shard's log, so it is atomic; a batch
  whose ids fall to several shards (indexes/shards.py SHARD_RULE) is refused whole with the
  ids grouped by shard, to send as one batch each. Nothing is written in part.
- **Idempotency.** The client's key (scoped to its principal) rides in the shard's log as on
  one node; a write without one gets a key of the front's own, so the front's retry of a call
  a dying replica may have applied is applied once.
- **Generation.** The answer's `generation` is the owning shard's log seq (it grows by one per
  write to that shard, never across shards) and `shard` names the shard.
- **No compaction yet.** A shard's log grows until the next ingest, which starts new logs.
- **Documents that hold tables are changed by an ingest.** A table read from inside a file
  (indexes/tables.py) lives in the tables shard with its document's ACL, and no front can
  withdraw it for every other front; so a write to such a document is refused (`conflict`)
  and the next ingest reads the file again. One node hides such tables at the write instead.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Sequence

from indexes.live import Change, Put, embed_docs, record_payload
from indexes.shards import shard_of
from indexes.wal import JSONObject
from retrieval.errors import Conflict, InvalidRequest
from retrieval.types import AccessScope, Principal
from routes.service.generations import Generations
from routes.service.sharded import ShardedView
from routes.service.write_quota import WriteQuota, change_bytes
from routes.service.write_access import check_changes, read_scope
from routes.service.writes import MAX_BATCH, MAX_KEY_BYTES, check_batch

log = logging.getLogger("quarry.cluster")
SHOWN_IDS = 5  # ids named per shard when a batch spans shards
NO_COMPACTION = "a sharded index has no compaction yet; its shards' logs fold at the next ingest"


class ShardedWriter:
    """The writes a front sends to the shards of the view `generations` serves (see the
    module docstring). Same `write` as `Writer`'s; nothing to close."""

    def __init__(self, generations: Generations, max_batch: int = MAX_BATCH, max_key_bytes: int = MAX_KEY_BYTES) -> None:
        self.generations, self.max_batch = generations, max_batch
        self.quota = WriteQuota(max_key_bytes)

    def write(self, changes: Sequence[Change], principal: Principal | None,
              idempotency: tuple[str, bytes] | None = None, engine: Any = None, key: str | None = None) -> JSONObject:
        """Apply `changes` as one record of the shard owning their ids (`Writer.write`'s
        arguments; `engine` is unused: a front writes to the view it serves)."""
        ids = check_batch(changes, self.max_batch)
        check_changes(principal, changes)
        with self.quota.admit(key, change_bytes(changes)), self.generations.lease() as generation:
            view = generation.engine
            if not isinstance(view, ShardedView):
                raise Conflict("this server's view is no sharded index")
            _refuse_table_owners(view, ids, read_scope(principal))
            owner = self._owner(ids, len(view.shards))
            shard = view.shards[owner]
            send = getattr(shard, "write", None)
            if send is None:
                raise Conflict("this sharded view's shards are read-only snapshots; serve it with `quarry cluster serve`")
            puts = [c.doc for c in changes if isinstance(c, Put)]
            vectors = iter(embed_docs(puts, view.embedder.encode, view.max_chars) if puts else [])
            payload = record_payload([(c, next(vectors) if isinstance(c, Put) else None) for c in changes],
                                     view.embedder.model_id, view.max_chars)
            scoped, request = idempotency if idempotency is not None else (f"front:{uuid.uuid4()}", b"")
            out = send(payload, read_scope(principal), scoped, request)
        log.info("shard %02d generation %d: %s", owner, out["generation"],
                 ", ".join(f"{d['op']} {d['doc_id']}" for d in out["documents"]))
        return {**out, "shard": owner}

    @staticmethod
    def _owner(ids: Sequence[str], shards: int) -> int:
        by_shard: dict[int, list[str]] = {}
        for doc_id in ids:
            by_shard.setdefault(shard_of(doc_id, shards), []).append(doc_id)
        if len(by_shard) == 1:
            return next(iter(by_shard))
        groups = "; ".join(f"shard {s:02d}: {', '.join(repr(i[:80]) for i in group[:SHOWN_IDS])}"
                           f"{f' and {len(group) - SHOWN_IDS} more' if len(group) > SHOWN_IDS else ''}"
                           for s, group in sorted(by_shard.items()))
        raise InvalidRequest(f"a batch on a sharded index changes the documents of one shard, so it is applied whole; "
                             f"send one batch per shard ({groups})")

    def close(self) -> None:
        """Nothing held: the shards own their logs."""


def _refuse_table_owners(view: ShardedView, ids: Sequence[str], access: AccessScope | None) -> None:
    """A write to a document whose file gave tables is refused on a sharded index (see the
    module docstring): the tables would keep the document's old text or ACL. Only where the
    writer reads the document (`access` None: the operator): for anyone else the shard
    answers as for a missing id, and this refusal must not tell them otherwise."""
    if view.tables is None:
        return
    owners: dict[str, list[str]] = {}
    for t in view.tables.tables().values():
        if t.owner is not None and (access is None or access.can_read(t.acl)):
            owners.setdefault(t.owner, []).append(t.name)
    held = [i for i in ids if i in owners]
    if held:
        raise Conflict(f"document {held[0][:80]!r} holds tables read from its file ({', '.join(owners[held[0]][:SHOWN_IDS])}); "
                       "on a sharded index such a document changes with an ingest of its file, not a write")
