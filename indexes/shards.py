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
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from indexes.corpus import LoadedDocument, discover, iter_documents
from indexes.embedder import Embedder
from indexes.files import FileReader, date_warnings
from indexes.embed_journal import EmbedJournal
from indexes.snapshot_build import (CHANGED, BuildOptions, Progress, build_lock, build_snapshot, document_passes,
                                    document_record, embed_key, previous_vectors, publish_snapshot, sources_stamp,
                                    storage_errors, table_records)
from indexes.catalog import Catalog
from indexes.snapshot_lease import SnapshotLease, acquire
from indexes.snapshot_load import Snapshot, load_snapshot_at, read_manifest, verify_files
from indexes.tables import TableSource, fsync_dir, grid_tables, plan_tables
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


@dataclass(frozen=True)
class ShardPlan:
    """What the validation pass of a sharded ingest found (`plan_shards`): plain data, so a
    shard's build can run in another process (routes/cluster/ingest.py)."""

    sources: tuple[Path, ...]
    shards: int
    options: BuildOptions
    tables: tuple[TableSource, ...]
    stamp: list[tuple[str, int, int, int, int]]
    counts: tuple[int, ...]  # documents per shard
    digests: tuple[str, ...]  # each shard's content hash
    content_hash: str  # the single node's, of the same sources
    t_load: float

    def documents(self, reader: FileReader | None = None) -> Iterator[LoadedDocument]:
        return iter_documents(self.sources, self.options.default_acl, reader or self.options.file_reader())

    def mine(self, shard: int, reader: FileReader | None = None) -> Iterator[LoadedDocument]:
        """Shard `shard`'s documents, in source order."""
        return (ld for ld in self.documents(reader) if shard_of(ld.doc.id, self.shards) == shard)

    def unchanged(self) -> None:
        """Raises if a source changed since the validation pass."""
        if sources_stamp(self.sources) != self.stamp:
            raise IngestError(CHANGED, ", ".join(map(str, self.sources)))


def plan_shards(sources: Sequence[Path], shards: int, options: BuildOptions,
                reader: FileReader | None = None) -> ShardPlan:
    """The validation pass: every document read (the first bad one raises, with file:line,
    before anything is written), hashed into its shard's content hash and the cluster's."""
    if not 2 <= shards <= MAX_SHARDS:
        raise IngestError(f"--shards must be between 2 and {MAX_SHARDS} for a sharded index, not {shards}")
    t0 = time.perf_counter()
    tables = plan_tables(discover(sources)[1], options.default_acl)
    stamp = sources_stamp(sources)
    whole, parts = hashlib.sha256(), [hashlib.sha256() for _ in range(shards)]
    for record in table_records(tables):
        whole.update(record)
        parts[TABLES_SHARD].update(record)
    counts = [0] * shards
    reader = reader or options.file_reader()
    for ld in iter_documents(sources, options.default_acl, reader):
        record, i = document_record(ld.doc), shard_of(ld.doc.id, shards)
        whole.update(record)
        parts[i].update(record)
        counts[i] += 1
    if not sum(counts) and not tables:
        raise IngestError("no documents or tables found", ", ".join(map(str, sources)))
    tables = [*tables, *grid_tables(list(reader.grids.values()), [t.name for t in tables])]
    return ShardPlan(tuple(sources), shards, options, tuple(tables), stamp, tuple(counts),
                     tuple(h.hexdigest() for h in parts), whole.hexdigest(), time.perf_counter() - t0)


BuildMembers = Callable[[ShardPlan, dict[int, frozenset[str]]], list[dict[str, Any]]]


def build_shards(sources: Sequence[Path], index_dir: Path, embedder: Embedder, shards: int,
                 options: BuildOptions | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """Ingest `sources` into `shards` shard snapshots and publish a new cluster manifest;
    returns it. One shard is a single-node index (`build_snapshot`, today's layout)."""
    options = options or BuildOptions()
    if not 1 <= shards <= MAX_SHARDS:
        raise IngestError(f"--shards must be between 1 and {MAX_SHARDS}, not {shards}")
    if shards == 1:
        return build_snapshot(sources, index_dir, embedder, options, progress)
    reader = options.file_reader()
    plan = plan_shards(sources, shards, options, reader)

    def in_process(plan: ShardPlan, protect: dict[int, frozenset[str]]) -> list[dict[str, Any]]:
        return [build_member(plan, i, index_dir, embedder, progress, protect.get(i, frozenset()), reader)
                for i in range(plan.shards)]

    manifest = publish_shards(plan, index_dir, embedder, in_process)
    return {**manifest, "skipped_files": [s.to_json() for s in reader.skipped.values()],
            "date_warnings": date_warnings(reader.file_dates, date.today())}


def publish_shards(plan: ShardPlan, index_dir: Path, embedder: Embedder, build_members: BuildMembers) -> dict[str, Any]:
    """Under the index's build lock: every shard's snapshot built and published
    (`build_members`, each shard by `build_member`, here or elsewhere), then the cluster
    manifest naming them, switched atomically once all are complete."""
    with storage_errors(), build_lock(index_dir):
        members = sorted(build_members(plan, _member_names(index_dir)), key=lambda m: m["shard"])
        if [m["shard"] for m in members] != list(range(plan.shards)):
            raise IngestError(f"the build returned shards {[m['shard'] for m in members]}, not 0..{plan.shards - 1}")
        manifest = {
            "format": CLUSTER_FORMAT,
            "version": CLUSTER_VERSION,
            "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "content_hash": plan.content_hash,
            "model": {"id": embedder.model_id, "dim": embedder.dimension()},
            "counts": {key: sum(m["counts"][key] for m in members) for key in ("documents", "chunks", "tables")},
            "assignment": {"key": "document id", "hash": "sha256", "rule": SHARD_RULE},
            "shards": plan.shards,
            "tables_shard": TABLES_SHARD,
            "members": members,
        }
        plan.unchanged()
        _write_atomically(index_dir / CLUSTER, json.dumps(manifest, indent=2))
    return manifest


def build_member(plan: ShardPlan, i: int, index_dir: Path, embedder: Embedder, progress: Progress | None = None,
                 protect: frozenset[str] = frozenset(), reader: FileReader | None = None,
                 reuse_previous: bool | None = None) -> dict[str, Any]:
    """Publish shard `i`'s snapshot (its documents and, for TABLES_SHARD, the tables);
    returns its member entry. Vectors come from the shard's previous snapshot (unless
    `reuse_previous` is False; default: the plan's `reuse_embeddings`), then from its
    embedding journal, and the rest are embedded here."""
    target = shard_dir(index_dir, i)
    options = plan.options
    previous = options.reuse_embeddings if reuse_previous is None else reuse_previous

    def mine() -> Iterator[LoadedDocument]:
        return plan.mine(i, reader)

    def reuse() -> dict[str, np.ndarray]:
        return previous_vectors(options.reuse_from or target, embedder.model_id) if previous else {}

    def report(stage: str, done: int, total: int) -> None:
        if progress is not None:
            progress(f"shard {i:02d} {stage}", done, total)

    tables = list(plan.tables) if i == TABLES_SHARD else []
    manifest = publish_snapshot(target, mine, plan.counts[i], tables, embedder, options, report, plan.t_load,
                                plan.digests[i], None, reuse, unchanged=plan.unchanged, protect=protect)
    return {"shard": i, "path": f"{SHARDS}/{i:02d}", "snapshot": manifest["snapshot"],
            "content_hash": manifest["content_hash"], "counts": manifest["counts"]}


def unembedded(plan: ShardPlan, i: int, index_dir: Path, model_id: str,
               reader: FileReader | None = None) -> tuple[EmbedJournal, Iterator[tuple[str, str]]]:
    """Shard `i`'s embedding journal, loaded, and the (text key, index text) of each of its
    chunks whose vector neither its previous snapshot (when the plan reuses vectors) nor the
    journal holds, each text once: what an ingest elsewhere embeds into the journal before
    `build_member` (routes/cluster/ingest.py). Without reuse the journal starts empty."""
    journal = EmbedJournal(shard_dir(index_dir, i), model_id)
    if not plan.options.reuse_embeddings:
        journal.clear()
    known = set(journal.load())
    if plan.options.reuse_embeddings:
        known |= set(previous_vectors(plan.options.reuse_from or shard_dir(index_dir, i), model_id))

    def texts() -> Iterator[tuple[str, str]]:
        for _, _, batch_texts, _ in document_passes(plan.mine(i, reader), plan.options.max_chars, plan.options.document_batch):
            for text in batch_texts:
                key = embed_key(text)
                if key not in known:
                    known.add(key)
                    yield key, text

    return journal, texts()


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
