"""One shard replica: the body of a Ray Serve deployment that serves one shard's snapshot.

It holds nothing but the shard the cluster manifest names (indexes/shards.py) and answers the
`Shard` calls (retrieval/shard.py) with the caller's `AccessScope`: the ACL is enforced here,
inside the shard, before anything is counted or ranked, so a front never receives a row the
caller may not read. The class is plain Python (no Ray import): `routes/cluster/app.py` makes
it a deployment, and a test can call it in process.

The replica never loads the embedding model: the front encodes a question once and sends the
vector (the embedder is only asked for its model id and dimension when the snapshot is checked),
and embeds a written document before it sends the write.

Live writes: every call first catches up with the shard's own write-ahead log, and `write`
appends to it under the log's lock (indexes/shard_log.py), so the two replicas of a shard, and
every front, see one order of writes, and a write acknowledged through one front is in
effect on the next call through any.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from indexes.embedder import Embedder
from indexes.shard_log import ShardLog
from indexes.shards import load_member, shard_dir
from indexes.snapshot_load import Snapshot
from indexes.wal import JSONObject
from retrieval.entities import Sightings, key_memo
from retrieval.shard import EntityKind, Evidence, Judged, LocalShard, Reading
from retrieval.signals import Moments
from retrieval.types import AccessScope, CollectionStats, Document, Filters, Hit


class ShardReplica:
    """Serves shard `shard` of the sharded index at `index_dir` (see the module docstring):
    the snapshot `manifest` (the cluster manifest the deployment read) names, never the one
    `cluster.json` names when the replica starts. A replica that replaces a lost one after a
    new ingest then still serves the cluster its siblings serve (or fails, if that snapshot
    was removed), never a mix of two builds."""

    def __init__(self, index_dir: str, manifest: dict[str, Any], shard: int, model: str | None = None) -> None:
        self.shard, self.snapshot_name = shard, manifest["members"][shard]["snapshot"]
        self._snapshot = load_member(Path(index_dir), manifest, shard, Embedder(Path(model) if model else None))
        memo = key_memo()  # entity name keys, kept across the entity index builds after each write

        def local_shard(view: Snapshot, seq: int) -> LocalShard:
            return LocalShard(view.chunks, view.bm25, view.dense, view.catalog, memo, version=seq)

        try:
            self._log = ShardLog(shard_dir(Path(index_dir), shard), self._snapshot, local_shard)
        except BaseException:
            self._snapshot.close()
            raise

    @property
    def _local(self) -> LocalShard:
        return self._log.current()

    def read(self, question: str, names: Sequence[str], access: AccessScope) -> Reading:
        return self._local.read(question, names, access)

    def judge(self, question: str, vector: np.ndarray, chunk_ids: Sequence[str], access: AccessScope,
              stats: CollectionStats, texts: Sequence[str]) -> Judged:
        return self._local.judge(question, vector, chunk_ids, access, stats, texts)

    def bm25_stats(self, query: str, access: AccessScope, filters: Filters) -> CollectionStats:
        return self._local.bm25_stats(query, access, filters)

    def bm25(self, query: str, access: AccessScope, k: int, filters: Filters, stats: CollectionStats) -> list[Hit]:
        return self._local.bm25(query, access, k, filters, stats)

    def dense(self, vector: np.ndarray, access: AccessScope, k: int, filters: Filters) -> list[Hit]:
        return self._local.dense(vector, access, k, filters)

    def exact(self, query: str, access: AccessScope, k: int, filters: Filters) -> list[Hit]:
        return self._local.exact(query, access, k, filters)

    def evidence(self, query: str, vector: np.ndarray, chunk_ids: Sequence[str], access: AccessScope,
                 stats: CollectionStats) -> dict[str, Evidence]:
        return self._local.evidence(query, vector, chunk_ids, access, stats)

    def moments(self, access: AccessScope, readable: int) -> Moments:
        return self._local.moments(access, readable)

    def sightings(self, texts: Sequence[str], access: AccessScope, kind: EntityKind) -> list[Sightings]:
        return self._local.sightings(texts, access, kind)

    def doc_cosines(self, doc_ids: Sequence[str], vector: np.ndarray, access: AccessScope) -> dict[str, float]:
        return self._local.doc_cosines(doc_ids, vector, access)

    def document(self, doc_id: str, access: AccessScope) -> Document | None:
        return self._local.document(doc_id, access)

    def document_acl(self, doc_id: str) -> tuple[str, ...] | None:
        return self._local.document_acl(doc_id)

    def write(self, payload: JSONObject, access: AccessScope | None, key: str, request: bytes) -> JSONObject:
        """Apply one write record to this shard (indexes/shard_log.py `ShardLog.write`), by the
        read rule for `access` (None: the local operator); answered once it is fsynced."""
        return self._log.write(payload, access.can_read if access is not None else None, key, request)

    def describe(self) -> dict[str, Any]:
        """What this replica serves (for health and metrics): its snapshot and the last
        record of the shard's log it applied."""
        self._local  # noqa: B018 - caught up first
        return {"shard": self.shard, "snapshot": self.snapshot_name, "chunks": len(self._log.view().chunks),
                "content_hash": self._snapshot.manifest.get("content_hash"), "seq": self._log.seq}

    def __del__(self) -> None:
        snapshot = getattr(self, "_snapshot", None)
        if snapshot is not None:
            snapshot.close()
