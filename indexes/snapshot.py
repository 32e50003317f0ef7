"""Self-contained index snapshots with an atomic switch.

Layout of an index directory:

    DIR/CURRENT                  name of the snapshot being served (replaced atomically)
    DIR/snapshots/<name>/        manifest.json, catalog.duckdb, bm25/, dense.faiss
    DIR/snapshots/.building-*/   a build in progress (never loaded; removed by the next build)

A build writes everything into `.building-*`, writes the manifest last, renames the folder
and only then replaces CURRENT. A build killed at any point leaves CURRENT naming the
previous, complete snapshot. Loading checks the manifest (format version, model id and
dimension, counts, file sizes and hashes) and refuses a mismatch with a clear message.

Building lives in `indexes.snapshot_build`, loading and checking in `indexes.snapshot_load`;
this module is the one place callers import either from.
"""

from __future__ import annotations

from indexes.snapshot_build import (STORAGE_FAILURES, BuildOptions, Progress, build_snapshot, content_hash, corpus_digest,
                                    embed_key, index_text, previous_vectors)
from indexes.snapshot_load import (CURRENT, FORMAT_VERSION, Snapshot, check_manifest, current_snapshot_path, load_snapshot,
                                   read_manifest, verify_files)

__all__ = [
    "CURRENT", "FORMAT_VERSION", "STORAGE_FAILURES", "BuildOptions", "Progress", "Snapshot", "build_snapshot",
    "check_manifest", "content_hash", "corpus_digest", "current_snapshot_path", "embed_key", "index_text",
    "load_snapshot", "previous_vectors", "read_manifest", "verify_files",
]
