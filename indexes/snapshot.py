"""Self-contained index snapshots with an atomic switch.

Layout of an index directory:

    DIR/CURRENT                  name of the snapshot being served (replaced atomically)
    DIR/snapshots/<name>/        manifest.json, catalog.duckdb, bm25/, dense.faiss, .serving.lock
    DIR/snapshots/.building-*/   a build in progress (never loaded; removed by the next build)
    DIR/snapshots/.pruning-*/    a snapshot being removed (a killed prune's is removed by the next build)

A build writes everything into `.building-*`, writes the manifest last, renames the folder
and only then replaces CURRENT. A build killed at any point leaves CURRENT naming the
previous, complete snapshot. Loading checks the manifest (format version, model id and
dimension, counts, file sizes and hashes) and refuses a mismatch with a clear message.

Every process that loads a snapshot holds a shared lock on its `.serving.lock` until it
closes it, and a build never prunes a snapshot someone holds (`indexes.snapshot_lease`).

Building lives in `indexes.snapshot_build`, loading and checking in `indexes.snapshot_load`,
serving leases in `indexes.snapshot_lease`; this module is the one place callers import any
of them from.
"""

from __future__ import annotations

from indexes.snapshot_build import (STORAGE_FAILURES, BuildOptions, Progress, build_snapshot, compact_snapshot, content_hash,
                                    corpus_digest,
                                    embed_key, index_text, previous_vectors)
from indexes.snapshot_lease import LEASE_FILE, SnapshotLease, is_served
from indexes.snapshot_load import (CURRENT, FORMAT_VERSION, Snapshot, check_manifest, current_snapshot_path, load_snapshot,
                                   read_manifest, verify_files)

__all__ = [
    "CURRENT", "FORMAT_VERSION", "LEASE_FILE", "STORAGE_FAILURES", "BuildOptions", "Progress", "Snapshot", "SnapshotLease",
    "build_snapshot", "check_manifest", "compact_snapshot", "content_hash", "corpus_digest", "current_snapshot_path",
    "embed_key", "index_text", "is_served", "load_snapshot", "previous_vectors", "read_manifest", "verify_files",
]
