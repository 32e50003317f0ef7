"""Loading a snapshot: the CURRENT pointer, the manifest and its checks, the files' sizes and
hashes, then the catalog and in-memory indexes. A snapshot this code or the configured
embedding model cannot serve correctly is refused with a clear message, never loaded.

Layout of an index directory:

    DIR/CURRENT                  name of the snapshot being served (replaced atomically)
    DIR/snapshots/<name>/        manifest.json, catalog.duckdb, bm25/, dense.faiss, .serving.lock
    DIR/snapshots/.building-*/   a build in progress (never loaded; removed by the next build)
    DIR/snapshots/.pruning-*/    a snapshot being removed (a killed prune's is removed by the next build)

A build (indexes/snapshot_build.py) writes this layout; this module reads it. A loaded
snapshot holds a serving lease (indexes/snapshot_lease.py) until it is closed, so no ingest
deletes it while this process may still read it.
"""

from __future__ import annotations

import json
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from indexes.bm25_index import Bm25Index
from indexes.catalog import Catalog
from indexes.dense_index import DenseIndex
from indexes.embedder import Embedder
from indexes.snapshot_lease import SnapshotLease, acquire
from indexes.tables import file_digest
from retrieval.access import ChunkTable
from retrieval.errors import NoSnapshot, SnapshotError

FORMAT_VERSION = 2  # 2: internal tables in schema quarry, user tables, per-chunk embed keys, BM25 lengths
CURRENT = "CURRENT"


@dataclass
class Snapshot:
    """A loaded snapshot: the catalog plus the in-memory indexes built from it."""

    path: Path
    manifest: dict[str, Any]
    catalog: Catalog
    chunks: ChunkTable
    bm25: Bm25Index
    dense: DenseIndex
    lease: SnapshotLease | None = field(default=None, repr=False)  # released by close

    def close(self) -> None:
        try:
            self.catalog.close()
        finally:
            if self.lease is not None:
                self.lease.release()


def current_snapshot_path(index_dir: Path) -> Path:
    pointer = index_dir / CURRENT
    if not pointer.is_file():
        raise NoSnapshot(f"{index_dir} holds no index snapshot; run `quarry ingest SOURCES --index {index_dir}`")
    try:
        name = pointer.read_bytes().decode("utf-8").strip()
    except UnicodeDecodeError:
        raise SnapshotError("the index's CURRENT file is not a snapshot name (it is not text); "
                            "run `quarry ingest` again to write a new snapshot") from None
    except OSError as e:
        raise SnapshotError(f"the index's CURRENT file cannot be read: {e.strerror or type(e).__name__}") from None
    path = index_dir / "snapshots" / name
    if not name or name.startswith(".") or "/" in name or "\0" in name or len(name) > 255 or not path.is_dir():
        raise SnapshotError(f"the index's CURRENT file names a missing snapshot {name[:80]!r}")
    return path


def read_manifest(path: Path) -> dict[str, Any]:
    try:
        return json.loads((path / "manifest.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise SnapshotError(f"snapshot {path} has no readable manifest ({e})") from None


def check_manifest(manifest: dict[str, Any], model_id: str, dim: int) -> None:
    """Refuse a snapshot this code or this embedding model cannot serve correctly."""
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise SnapshotError(
            f"snapshot format version {version!r} is not supported (this Quarry reads {FORMAT_VERSION}); "
            "rebuild it with `quarry ingest`"
        )
    model = manifest.get("model") or {}
    if model.get("id") != model_id or model.get("dim") != dim:
        raise SnapshotError(
            f"snapshot was built with model {model.get('id')!r} ({model.get('dim')}-d) but the service loads "
            f"{model_id!r} ({dim}-d); rebuild the index or configure the same model"
        )


def load_snapshot(index_dir: Path, embedder: Embedder, verify_hashes: bool = True,
                  mask_cache_size: int = 512, mask_cache_bytes: int = 256 << 20, walkers: Executor | None = None) -> Snapshot:
    """Load the current snapshot of `index_dir` after checking its manifest and files; its
    chunk table keeps up to `mask_cache_size` access masks; its dense index walks its graphs
    on the caller's `walkers` threads (indexes/dense_index.py). The snapshot holds a serving
    lease from before its files are read until it is closed."""
    path, lease = _leased_current(index_dir)
    return _load_leased(path, lease, embedder, verify_hashes, mask_cache_size, mask_cache_bytes, walkers)


def load_snapshot_at(path: Path, embedder: Embedder, verify_hashes: bool = True, mask_cache_size: int = 512,
                     mask_cache_bytes: int = 256 << 20, walkers: Executor | None = None) -> Snapshot:
    """Load the snapshot at `path` (one a cluster manifest names, indexes/shards.py, rather
    than the one CURRENT names), with the checks and the serving lease of `load_snapshot`."""
    lease = acquire(path) if path.is_dir() else None
    if lease is None:
        raise SnapshotError(f"snapshot {path} is missing or being removed; run the ingest again")
    return _load_leased(path, lease, embedder, verify_hashes, mask_cache_size, mask_cache_bytes, walkers)


def _load_leased(path: Path, lease: SnapshotLease, embedder: Embedder, verify_hashes: bool, mask_cache_size: int,
                 mask_cache_bytes: int, walkers: Executor | None) -> Snapshot:
    """`_load` under a lease already held, which the snapshot keeps (released if it fails)."""
    try:
        snapshot = _load(path, embedder, verify_hashes, mask_cache_size, mask_cache_bytes, walkers)
    except BaseException:
        lease.release()
        raise
    snapshot.lease = lease
    return snapshot


def _leased_current(index_dir: Path, attempts: int = 5) -> tuple[Path, SnapshotLease]:
    """The snapshot CURRENT names, with a lease on it. An ingest may prune that snapshot
    between the read and the lock (two ingests in a row): then CURRENT is read again."""
    for _ in range(attempts):
        path = current_snapshot_path(index_dir)
        lease = acquire(path)
        if lease is not None:
            return path, lease
    raise SnapshotError(f"the snapshot CURRENT names in {index_dir} kept being replaced while it was opened; try again")


def _load(path: Path, embedder: Embedder, verify_hashes: bool, mask_cache_size: int, mask_cache_bytes: int,
          walkers: Executor | None) -> Snapshot:
    manifest = read_manifest(path)
    check_manifest(manifest, embedder.model_id, embedder.dimension())
    if verify_hashes:
        verify_files(path, manifest)
    else:
        for rel, meta in (manifest.get("files") or {}).items():
            if not (path / rel).is_file() or (path / rel).stat().st_size != meta["bytes"]:
                raise SnapshotError(f"snapshot file {path / rel} is missing or differs from its manifest; rebuild the index")
    catalog = Catalog(path / "catalog.duckdb")
    try:
        counts = catalog.counts()
        if counts != manifest["counts"]:
            raise SnapshotError(f"catalog counts {counts} differ from the manifest {manifest['counts']}")
        chunks = catalog.chunk_table(mask_cache_size, mask_cache_bytes)
        bm25 = Bm25Index.load(path / "bm25")
        dense = DenseIndex.load(path / "dense.faiss", walkers=walkers)
        if bm25.size != len(chunks) or dense.size != len(chunks) or dense.dim != embedder.dim:
            raise SnapshotError(f"snapshot {path} indexes disagree with its catalog; rebuild the index")
    except Exception:
        catalog.close()
        raise
    return Snapshot(path, manifest, catalog, chunks, bm25, dense)


def verify_files(path: Path, manifest: dict[str, Any], only: Sequence[str] | None = None) -> None:
    """Every file the manifest lists (or the `only` ones) exists with its size and SHA-256."""
    files = manifest.get("files") or {}
    for rel in (files if only is None else only):
        meta, f = files.get(rel), path / rel
        if meta is None or not f.is_file() or f.stat().st_size != meta["bytes"] or file_digest(f) != meta["sha256"]:
            raise SnapshotError(f"snapshot file {f} is missing or differs from its manifest; rebuild the index")
