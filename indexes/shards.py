"""A sharded index: N shard snapshots and a cluster manifest naming them.

Layout of a sharded index directory (`quarry ingest SOURCES --index DIR --shards N`, N >= 2):

    DIR/cluster.json             the cluster manifest (below), written atomically, last
    DIR/shards/00/               shard 0: a normal index directory (CURRENT, snapshots/<name>/,
    DIR/shards/01/ ...             its build lock and embedding journal), as indexes/snapshot_load.py
                                   describes, holding the documents that hash to it
    DIR/shards/NN/wal.log          shard NN's write-ahead log of live writes (indexes/shard_log.py)

A document goes to shard `int.from_bytes(sha256(id as UTF-8)[:8], "big") % N` (`shard_of`):
stable across processes, machines and Python versions (never Python's salted `hash()`), and
the same rule the cluster's live writes use to find the shard that owns an id.

**Tables live in shard 00**, and only there: the whole of every table, with its table and row
ACLs, in shard 00's catalog, exactly as a single node holds them. Tables are small beside the
documents (they are not what outgrows one machine), SQL over them is not split (a join across
shards would need a distributed SQL engine, and the SQL guard, row ACLs and limits are written
for one DuckDB), and a front replica can open shard 00's catalog read-only as its copy, so
every front answers SQL the way one node does. Shards 01.. hold documents only.

The cluster manifest (`cluster.json`):

    {"format": "quarry-cluster", "version": 1, "built_at": ISO time,
     "content_hash": the single-node content hash of the same sources (documents and tables),
     "model": {"id", "dim"}, "counts": {"documents", "chunks", "tables"} (summed),
     "assignment": {"key": "document id", "hash": "sha256", "rule": SHARD_RULE},
     "shards": N, "tables_shard": 0,
     "members": [{"shard": i, "path": "shards/0i", "snapshot": name, "content_hash": hash,
                  "counts": {...}}, ...]}

A reader loads each member's named snapshot (not the shard's CURRENT) and checks its
manifest's content hash against the member's, so it always sees one whole cluster: the
shards are built one after another, each switching its own CURRENT, and `cluster.json` is
replaced only once every shard is published. A build that fails midway leaves the previous
`cluster.json` naming the previous snapshots, which every shard's prune keeps (`protect`).

Reading is as strict as a single-node ingest: a first pass validates every document (a bad
line, a bad ACL or a duplicate id stops the ingest before anything is written) and hashes
each shard's share; the shards' builds then read the sources again, as `build_snapshot`'s
second pass does (N more passes over the sources; extracted files are read once).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from indexes.corpus import LoadedDocument, discover, iter_documents
from indexes.embedder import Embedder
from indexes.files import FileReader
from indexes.snapshot_build import (CHANGED, BuildOptions, Documents, Progress, _build_lock, _publish, _stamp,
                                    _storage_errors, build_snapshot, document_record, previous_vectors, table_records)
from indexes.catalog import Catalog
from indexes.snapshot_lease import SnapshotLease, acquire
from indexes.snapshot_load import Snapshot, load_snapshot_at, read_manifest, verify_files
from indexes.tables import TableSource, fsync_dir, plan_tables
from retrieval.errors import IngestError, SnapshotError

CLUSTER = "cluster.json"
CLUSTER_FORMAT = "quarry-cluster"
CLUSTER_VERSION = 1
SHARDS = "shards"
TABLES_SHARD = 0
MAX_SHARDS = 100  # shard folders are named with two digits
SHARD_RULE = "int.from_bytes(sha256(id.encode('utf-8')).digest()[:8], 'big') % shards"


def shard_of(doc_id: str, shards: int) -> int:
    """The shard that owns a document id (SHARD_RULE)."""
    return int.from_bytes(hashlib.sha256(doc_id.encode("utf-8")).digest()[:8], "big") % shards


def shard_dir(index_dir: Path, shard: int) -> Path:
    return index_dir / SHARDS / f"{shard:02d}"


def build_shards(sources: Sequence[Path], index_dir: Path, embedder: Embedder, shards: int,
                 options: BuildOptions | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """Ingest `sources` into `shards` shard snapshots and publish a new cluster manifest;
    returns it. One shard is a single-node index (`build_snapshot`, today's layout)."""
    options = options or BuildOptions()
    if not 1 <= shards <= MAX_SHARDS:
        raise IngestError(f"--shards must be between 1 and {MAX_SHARDS}, not {shards}")
    if shards == 1:
        return build_snapshot(sources, index_dir, embedder, options, progress)
    t0 = time.perf_counter()
    tables = plan_tables(discover(sources)[1], options.default_acl)
    stamp = _stamp(sources)
    reader = FileReader(skip_bad=options.skip_bad_files)

    def documents() -> Iterator[LoadedDocument]:
        return iter_documents(sources, options.default_acl, reader)

    # The validation pass: every document read (the first bad one raises before any write),
    # hashed into its shard's content hash and into the cluster's (the single node's).
    whole, parts = hashlib.sha256(), [hashlib.sha256() for _ in range(shards)]
    for record in table_records(tables):
        whole.update(record)
        parts[TABLES_SHARD].update(record)
    counts = [0] * shards
    for ld in documents():
        record, i = document_record(ld.doc), shard_of(ld.doc.id, shards)
        whole.update(record)
        parts[i].update(record)
        counts[i] += 1
    if not sum(counts) and not tables:
        raise IngestError("no documents or tables found", ", ".join(map(str, sources)))
    t_load = time.perf_counter() - t0

    def unchanged() -> None:
        if _stamp(sources) != stamp:
            raise IngestError(CHANGED, ", ".join(map(str, sources)))

    with _storage_errors(), _build_lock(index_dir):
        protect = _member_names(index_dir)
        members = []
        for i in range(shards):
            members.append(_build_shard(i, shards, documents, counts[i], tables if i == TABLES_SHARD else [], index_dir,
                                        embedder, options, progress, t_load, parts[i].hexdigest(), unchanged,
                                        protect.get(i, frozenset())))
        manifest = {
            "format": CLUSTER_FORMAT,
            "version": CLUSTER_VERSION,
            "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "content_hash": whole.hexdigest(),
            "model": {"id": embedder.model_id, "dim": embedder.dim},
            "counts": {key: sum(m["counts"][key] for m in members) for key in ("documents", "chunks", "tables")},
            "assignment": {"key": "document id", "hash": "sha256", "rule": SHARD_RULE},
            "shards": shards,
            "tables_shard": TABLES_SHARD,
            "members": members,
        }
        unchanged()
        _write_atomically(index_dir / CLUSTER, json.dumps(manifest, indent=2))
    return {**manifest, "skipped_files": [s.to_json() for s in reader.skipped.values()]}


def _build_shard(i: int, shards: int, documents: Documents, count: int, tables: Sequence[TableSource], index_dir: Path,
                 embedder: Embedder, options: BuildOptions, progress: Progress | None, t_load: float, digest: str,
                 unchanged: Callable[[], None], protect: frozenset[str]) -> dict[str, Any]:
    """Publish shard `i`'s snapshot (its documents and, for TABLES_SHARD, the tables);
    returns its member entry."""
    target = shard_dir(index_dir, i)

    def mine() -> Iterator[LoadedDocument]:
        return (ld for ld in documents() if shard_of(ld.doc.id, shards) == i)

    def reuse() -> dict[str, np.ndarray]:
        return previous_vectors(options.reuse_from or target, embedder.model_id) if options.reuse_embeddings else {}

    def report(stage: str, done: int, total: int) -> None:
        if progress is not None:
            progress(f"shard {i:02d} {stage}", done, total)

    manifest = _publish(target, mine, count, tables, embedder, options, report, t_load, digest, None, reuse,
                        unchanged=unchanged, protect=protect)
    return {"shard": i, "path": f"{SHARDS}/{i:02d}", "snapshot": manifest["snapshot"],
            "content_hash": manifest["content_hash"], "counts": manifest["counts"]}


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def _member_names(index_dir: Path) -> dict[int, frozenset[str]]:
    """The snapshot each shard of the published cluster serves (kept by the shards' prunes)."""
    try:
        manifest = read_cluster(index_dir)
    except SnapshotError:
        return {}
    return {m["shard"]: frozenset({m["snapshot"]}) for m in manifest["members"]}


def read_cluster(index_dir: Path) -> dict[str, Any]:
    """The cluster manifest of `index_dir`, checked: its format and version, and one member
    per shard at its own folder with a plain snapshot name."""
    path = index_dir / CLUSTER
    if not path.is_file():
        raise SnapshotError(f"{index_dir} holds no sharded index; run `quarry ingest SOURCES --index {index_dir} --shards N`")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise SnapshotError(f"the cluster manifest {path} cannot be read ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != CLUSTER_FORMAT or manifest.get("version") != CLUSTER_VERSION:
        raise SnapshotError(f"the cluster manifest {path} is not a version {CLUSTER_VERSION} Quarry cluster; "
                            "run the ingest again")
    members, n = manifest.get("members"), manifest.get("shards")
    if not isinstance(n, int) or not isinstance(members, list) or len(members) != n or not 2 <= n <= MAX_SHARDS:
        raise SnapshotError(f"the cluster manifest {path} does not list one member per shard")
    for i, m in enumerate(members):
        name = m.get("snapshot") if isinstance(m, dict) else None
        if (not isinstance(m, dict) or m.get("shard") != i or m.get("path") != f"{SHARDS}/{i:02d}" or not isinstance(name, str)
                or not name or name.startswith(".") or "/" in name or "\0" in name):
            raise SnapshotError(f"the cluster manifest {path} has a malformed member {i}")
    return manifest


def load_member(index_dir: Path, manifest: dict[str, Any], shard: int, embedder: Embedder,
                verify_hashes: bool = True) -> Snapshot:
    """The snapshot the cluster manifest names for `shard` (what one shard replica serves),
    loaded with the checks of a single snapshot and its serving lease; its content hash must
    match the member's."""
    m = manifest["members"][shard]
    snap = load_snapshot_at(index_dir / m["path"] / "snapshots" / m["snapshot"], embedder, verify_hashes)
    if snap.manifest.get("content_hash") != m["content_hash"]:
        snap.close()
        raise SnapshotError(f"shard {m['shard']:02d}'s snapshot differs from the cluster manifest; run the ingest again")
    return snap


@dataclass
class TablesCatalog:
    """The catalog of the tables shard's snapshot, opened alone (a front's copy of the tables:
    no chunk, BM25 or vector is loaded), under the snapshot's serving lease until `close`."""

    catalog: Catalog
    lease: SnapshotLease
    manifest: dict[str, Any]  # the snapshot's own (its build options: what a front's writes use)

    def close(self) -> None:
        self.catalog.close()
        self.lease.release()


def load_tables(index_dir: Path, manifest: dict[str, Any], verify_hashes: bool = True) -> TablesCatalog:
    """The tables shard's catalog as the cluster manifest names it (`load_member`'s checks
    on the snapshot's manifest and its catalog file)."""
    m = manifest["members"][manifest.get("tables_shard", TABLES_SHARD)]
    path = index_dir / m["path"] / "snapshots" / m["snapshot"]
    lease = acquire(path) if path.is_dir() else None
    if lease is None:
        raise SnapshotError(f"snapshot {path} is missing or being removed; run the ingest again")
    try:
        snap_manifest = read_manifest(path)
        if snap_manifest.get("content_hash") != m["content_hash"]:
            raise SnapshotError(f"shard {m['shard']:02d}'s snapshot differs from the cluster manifest; run the ingest again")
        if verify_hashes:
            verify_files(path, snap_manifest, only=["catalog.duckdb"])
        return TablesCatalog(Catalog(path / "catalog.duckdb"), lease, snap_manifest)
    except BaseException:
        lease.release()
        raise


def load_cluster(index_dir: Path, embedder: Embedder, verify_hashes: bool = True) -> tuple[dict[str, Any], list[Snapshot]]:
    """The cluster manifest and every shard's snapshot it names, in shard order (`load_member`
    each). Nothing stays open when one fails."""
    manifest = read_cluster(index_dir)
    loaded: list[Snapshot] = []
    try:
        for shard in range(manifest["shards"]):
            loaded.append(load_member(index_dir, manifest, shard, embedder, verify_hashes))
    except BaseException:
        for snap in loaded:
            snap.close()
        raise
    return manifest, loaded
