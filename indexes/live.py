"""A live index: the base snapshot plus the changes written since it was built.

Changes (create or replace a document, delete one, change its ACL) are records of the
index's write-ahead log (`DIR/wal.log`, indexes/wal.py); one record holds one request's
changes (a batch is one record, so it is applied whole or not at all). Every process that
opens the index replays the records after the base snapshot's `wal_seq` onto it: a server
after `kill -9`, a `quarry query` beside a running server, a compaction. The replayed state
is a map doc id -> its live version (or deleted), from which `live_view` builds the delta
segment and tombstones (indexes/segments.py).

A put record carries the chunk embeddings computed when it was written (with the model id),
so a replay embeds nothing and gives the vectors the write was acknowledged with; a record
whose model or chunking no longer matches the base is embedded again. An ACL change stores
only the new ACL: replay takes the document's text and vectors from wherever it lives then
(the delta, or the base).

`wal_seq` in a manifest is the last log record folded into (or superseded by) that
snapshot: compaction writes the seq it folded through; `quarry ingest` writes the log's last
seq, since a full ingest replaces the whole corpus with its sources.
"""

from __future__ import annotations

import base64
import logging
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from indexes.bm25_index import Bm25Index, Bm25Params
from indexes.catalog import Catalog, region_rows, regions_of
from indexes.chunking import DEFAULT_MAX_CHARS, chunk_documents
from indexes.corpus import ADMIN_ONLY, make_document
from indexes.dense_index import DenseIndex
from indexes.segments import LiveCatalog, SegmentedBm25, SegmentedDense, view_chunks
from indexes.snapshot_build import embed_key, index_text
from indexes.snapshot_load import Snapshot
from indexes.wal import JSONObject, Record, read_after
from retrieval.errors import InvalidRequest, NotFound, ServerFault, SnapshotError
from retrieval.types import Document, check_acl

log = logging.getLogger("quarry.live")

WAL_FILE = "wal.log"
WRITE = "write"  # the op of a change record
Encode = Callable[[list[str]], np.ndarray]  # passages -> unit vectors


@dataclass(frozen=True)
class LiveDoc:
    """A document's live version and its chunks' vectors (in chunk order)."""

    doc: Document
    origin: str
    vectors: np.ndarray


@dataclass(frozen=True)
class Put:
    doc: Document
    origin: str


@dataclass(frozen=True)
class Delete:
    doc_id: str


@dataclass(frozen=True)
class SetAcl:
    doc_id: str
    acl: tuple[str, ...]


Change = Put | Delete | SetAcl


@dataclass(frozen=True)
class LiveState:
    """The changes applied on top of a base snapshot, through log record `seq`."""

    seq: int = 0
    docs: Mapping[str, LiveDoc | None] = field(default_factory=dict)  # None: deleted

    @property
    def empty(self) -> bool:
        return not self.docs


def wal_path(index_dir: Path) -> Path:
    return index_dir / WAL_FILE


def options_of(base: Snapshot) -> tuple[int, tuple[str, ...], Bm25Params]:
    """(max_chars, default ACL, BM25 parameters) the base was built with; writes use the same."""
    return options_in(base.manifest)


def options_in(manifest: dict[str, Any]) -> tuple[int, tuple[str, ...], Bm25Params]:
    """`options_of` from a snapshot's manifest alone (a front reads it without the snapshot)."""
    opts = manifest.get("options") or {}
    return (int(opts.get("max_chars", DEFAULT_MAX_CHARS)), tuple(opts.get("default_acl", ADMIN_ONLY)),
            Bm25Params(**opts["bm25"]) if "bm25" in opts else Bm25Params())


# --- the live version of a document --------------------------------------------------------

def current(state: LiveState, base: Snapshot, doc_id: str) -> LiveDoc | None:
    """The live version of `doc_id` (None when it does not exist or was deleted)."""
    if doc_id in state.docs:
        return state.docs[doc_id]
    doc = base.catalog.document(doc_id)
    if doc is None:
        return None
    rows = np.asarray(base.chunks.rows_of_doc(doc_id), dtype=np.int64)
    return LiveDoc(doc, base.catalog.origin(doc_id), base.dense.vectors(rows))


def embed_docs(docs: Sequence[Document], encode: Encode, max_chars: int) -> list[np.ndarray]:
    """Each document's chunk vectors, embedded in one batch."""
    chunks = chunk_documents(docs, max_chars)
    by_id = {d.id: d for d in docs}
    vectors = encode([index_text(by_id[c.doc_id], c) for c in chunks]) if chunks else np.zeros((0, 1), np.float32)
    per_doc = Counter(c.doc_id for c in chunks)  # chunks come in document order
    out, at = [], 0
    for d in docs:
        out.append(np.asarray(vectors[at : at + per_doc[d.id]], dtype=np.float32))
        at += per_doc[d.id]
    return out


def apply(state: LiveState, base: Snapshot, changes: Sequence[tuple[Change, np.ndarray | None]], seq: int) -> LiveState:
    """`state` with one record's changes applied (puts carry their vectors). An ACL change of
    a document that no longer exists (a replay onto a newer base) changes nothing."""
    docs = dict(state.docs)
    view = LiveState(state.seq, docs)
    for change, vectors in changes:
        if isinstance(change, Put):
            assert vectors is not None
            docs[change.doc.id] = LiveDoc(change.doc, change.origin, vectors)
        elif isinstance(change, Delete):
            docs[change.doc_id] = None
        else:
            found = current(view, base, change.doc_id)
            if found is None:
                log.info("acl change of %r skipped: the document does not exist in this base", change.doc_id)
                continue
            docs[change.doc_id] = replace(found, doc=replace(found.doc, acl=change.acl))
    return LiveState(seq, docs)


def changed_id(change: Change) -> str:
    return change.doc.id if isinstance(change, Put) else change.doc_id


def write_result(seq: int, changes: Sequence[Change]) -> JSONObject:
    """A write's answer (and what its idempotency key stores): the generation it made, the
    write's log seq, and each change as {"op", "doc_id"}."""
    ops = [{"op": "put" if isinstance(c, Put) else "delete" if isinstance(c, Delete) else "acl", "doc_id": changed_id(c)}
           for c in changes]
    return {"status": "applied", "generation": seq, "documents": ops}


def authorize(document_acl: Callable[[str], tuple[str, ...] | None], changes: Sequence[Change],
              can_read: Callable[[tuple[str, ...]], bool] | None) -> None:
    """Changing an existing document needs the right to read it, whatever the change: a put, a
    delete or an ACL change of a document `can_read` refuses is NotFound, exactly like one of
    a missing id (a put of a missing id creates it). `can_read` None: the local operator, who
    may change any document. `document_acl` is the live ACL (None: no such document)."""
    for change in changes:
        doc_id = changed_id(change)
        acl = document_acl(doc_id)
        if (acl is None and not isinstance(change, Put)) or (acl is not None and can_read is not None and not can_read(acl)):
            raise NotFound(f"no document {doc_id[:80]!r}")


# --- records ------------------------------------------------------------------------------

def doc_json(doc: Document) -> JSONObject:
    """A document as the fields an ingest file or a PUT body carries (every one explicit), and
    the regions of a document read from a file (only then: older records stay as they were)."""
    out: JSONObject = {"id": doc.id, "text": doc.text, "title": doc.title, "source": doc.source,
                       "date": doc.date.isoformat() if doc.date else None, "metadata": dict(doc.metadata), "acl": list(doc.acl)}
    if doc.regions:
        out["regions"] = region_rows(doc.regions)
    return out


def record_payload(changes: Sequence[tuple[Change, np.ndarray | None]], model_id: str, max_chars: int) -> JSONObject:
    ops: list[JSONObject] = []
    for change, vectors in changes:
        if isinstance(change, Put):
            assert vectors is not None
            ops.append({"op": "put", "doc": doc_json(change.doc), "origin": change.origin,
                        "vectors": {"model": model_id, "max_chars": max_chars, "shape": list(vectors.shape),
                                    "f32": base64.b64encode(np.ascontiguousarray(vectors, np.float32).tobytes()).decode()}})
        elif isinstance(change, Delete):
            ops.append({"op": "delete", "id": change.doc_id})
        else:
            ops.append({"op": "acl", "id": change.doc_id, "acl": list(change.acl)})
    return {"ops": ops}


def parse_record(record: Record, model_id: str, max_chars: int, encode: Encode | None,
                 default_acl: tuple[str, ...] = ADMIN_ONLY) -> list[tuple[Change, np.ndarray | None]]:
    """A change record's changes with the vectors to apply; a put whose stored vectors do
    not fit this base (another model, other chunking) is embedded again with `encode`."""
    ops = record.payload.get("ops")
    if record.op != WRITE or not isinstance(ops, list):
        raise ServerFault(f"write-ahead log record {record.seq} is not a change record")
    out: list[tuple[Change, np.ndarray | None]] = []
    stale: list[int] = []
    try:
        for op in ops:
            kind = op.get("op")
            if kind == "put":
                fields = dict(op["doc"])
                regions = fields.pop("regions", None)
                doc = make_document(fields, default_source=None, default_acl=default_acl, logged=True)
                if regions:
                    doc = replace(doc, regions=regions_of(regions))
                stored = op.get("vectors") or {}
                vectors = None
                if stored.get("model") == model_id and stored.get("max_chars") == max_chars:
                    vectors = np.frombuffer(base64.b64decode(stored["f32"]), dtype=np.float32).reshape(stored["shape"]).copy()
                    if len(vectors) != len(chunk_documents([doc], max_chars)):
                        vectors = None
                if vectors is None:
                    stale.append(len(out))
                out.append((Put(doc, str(op.get("origin", "api"))), vectors))
            elif kind == "delete":
                out.append((Delete(str(op["id"])), None))
            elif kind == "acl":
                out.append((SetAcl(str(op["id"]), check_acl(op["acl"], keywords=False)), None))
            else:
                raise ServerFault(f"write-ahead log record {record.seq} holds an unknown change {kind!r}")
    except (KeyError, TypeError, ValueError, InvalidRequest) as e:
        raise ServerFault(f"write-ahead log record {record.seq} is malformed ({type(e).__name__})") from None
    if stale:
        if encode is None:
            raise ServerFault(f"write-ahead log record {record.seq} needs embedding again, and no embedder is loaded")
        docs = [out[i][0].doc for i in stale]  # type: ignore[union-attr]
        for i, vectors in zip(stale, embed_docs(docs, encode, max_chars), strict=True):
            out[i] = (out[i][0], vectors)
    return out


class Superseded(SnapshotError):
    """The log was folded into a snapshot newer than the one being opened: open CURRENT again."""


def replay(index_dir: Path, base: Snapshot, model_id: str, encode: Encode | None,
           through: int | None = None) -> LiveState:
    """The state after every log record the base does not hold yet (up to seq `through`,
    when given: the writer's last acknowledged one). `Superseded` when the log no longer
    holds them (a compaction switched CURRENT and folded the log after this base was opened)."""
    after = int(base.manifest.get("wal_seq", 0))
    state = LiveState(after)
    path = wal_path(index_dir)
    if not path.exists():
        return state
    folded, records = read_after(path, after)
    if folded > after:
        raise Superseded(f"snapshot {base.path.name} is older than the write-ahead log; open the index again")
    max_chars, default_acl, _ = options_of(base)
    for record in records:
        if through is not None and record.seq > through:
            break
        state = apply(state, base, parse_record(record, model_id, max_chars, encode, default_acl), record.seq)
    return state


# --- the served view ----------------------------------------------------------------------

def live_view(base: Snapshot, state: LiveState, mask_cache_size: int = 512) -> Snapshot:
    """The snapshot queries see: the base when nothing changed, else base + delta segment with
    tombstones (indexes/segments.py). Closing the view closes its delta only."""
    if state.empty:
        return base
    max_chars, _, params = options_of(base)
    n = len(base.chunks)
    dead = np.zeros(n, dtype=bool)
    removed = []
    for doc_id in state.docs:
        rows = base.chunks.rows_of_doc(doc_id)
        if rows:
            dead[rows] = True
            removed.append(doc_id)
    live = sorted((ld for ld in state.docs.values() if ld is not None), key=lambda ld: ld.doc.id)
    docs = [ld.doc for ld in live]
    chunks = [replace(c, row=n + i) for i, c in enumerate(chunk_documents(docs, max_chars))]
    by_id = {d.id: d for d in docs}
    texts = [index_text(by_id[c.doc_id], c) for c in chunks]
    dim = base.dense.dim
    vectors = np.concatenate([ld.vectors.reshape(-1, dim) for ld in live]) if live else np.zeros((0, dim), np.float32)
    if len(vectors) != len(chunks):
        raise ServerFault("the live index's vectors do not match its chunks")
    delta_catalog = Catalog.in_memory(base.path / "catalog.duckdb", docs, [ld.origin for ld in live], chunks,
                                      [embed_key(t) for t in texts])
    try:
        delta_chunks = delta_catalog.chunk_table()
        chunk_table = view_chunks(base.chunks, delta_chunks, dead, mask_cache_size)
        alive = np.concatenate([~dead, np.ones(len(chunks), dtype=bool)])
        bm25 = SegmentedBm25([base.bm25, Bm25Index.build(texts, params, storage="lucene")], alive)
        dense = SegmentedDense([base.dense.without(dead), DenseIndex.build(vectors, sq8_from=1 << 62)])
        catalog = LiveCatalog(base.catalog, delta_catalog, by_id, frozenset(removed), dead, n)
        counts = catalog.counts()
    except BaseException:
        delta_catalog.close()
        raise
    manifest: dict[str, Any] = {**base.manifest, "counts": counts,
                                "live": {"seq": state.seq, "changed_documents": len(state.docs),
                                         "delta_chunks": len(chunks), "tombstones": int(dead.sum())}}
    return Snapshot(base.path, manifest, catalog, chunk_table, bm25, dense)  # type: ignore[arg-type]


def current_documents(base: Snapshot, state: LiveState) -> list[tuple[Document, str]]:
    """Every live document with its origin (as `live_documents`, without vectors)."""
    out: list[tuple[Document, str]] = []
    for doc, origin in base.catalog.documents():
        if doc.id not in state.docs:
            out.append((doc, origin))
        elif (changed := state.docs[doc.id]) is not None:  # written since the base (None: deleted)
            out.append((changed.doc, changed.origin))
    known = {d.id for d, _ in out}
    out += [(ld.doc, ld.origin) for doc_id, ld in sorted(state.docs.items()) if doc_id not in known and ld is not None]
    return out


def live_documents(base: Snapshot, state: LiveState) -> list[tuple[Document, str, np.ndarray]]:
    """Every live document with its origin and vectors, base ones first (in base order):
    what a compaction folds into a new base. Base documents are read in one pass."""
    out: list[tuple[Document, str, np.ndarray]] = []
    vectors = base.dense.vectors(np.arange(len(base.chunks), dtype=np.int64))
    for doc, origin in base.catalog.documents():
        if doc.id in state.docs:
            changed = state.docs[doc.id]
            if changed is not None:
                out.append((changed.doc, changed.origin, changed.vectors))
            continue
        out.append((doc, origin, vectors[base.chunks.rows_of_doc(doc.id)]))
    known = {d.id for d, _, _ in out}
    for doc_id, ld in sorted(state.docs.items()):
        if doc_id not in known and ld is not None:
            out.append((ld.doc, ld.origin, ld.vectors))
    return out


def compact(index_dir: Path, embedder: Any, progress: Any = None, through: int | None = None) -> dict[str, Any] | None:
    """Fold the log's changes into a new base snapshot and make it current (the manifest of
    the new snapshot), or None when the current base already holds every change (through log
    seq `through`: a writer passes its last acknowledged one, since a record being appended
    may be on disk before it is acknowledged, or never be). Queries keep
    running on the old snapshot until they reload (`serve` follows CURRENT). The log's writer
    then drops the folded records (`Writer.compact`); a reader that opened the old base just
    before finds the log folded past it (`Superseded`) and opens CURRENT again."""
    from indexes.snapshot_build import BuildOptions, compact_snapshot
    from indexes.snapshot_load import load_snapshot

    base = load_snapshot(index_dir, embedder, verify_hashes=False)
    try:
        state = replay(index_dir, base, embedder.model_id, embedder.encode, through)
        if state.seq <= int(base.manifest.get("wal_seq", 0)):
            return None
        max_chars, default_acl, params = options_of(base)
        built = base.manifest.get("options") or {}
        options = BuildOptions(default_acl=default_acl, max_chars=max_chars, bm25=params,
                               dense_graph_from=built.get("dense_graph_from", BuildOptions.dense_graph_from),
                               dense_whole_graph=bool(built.get("dense_whole_graph", BuildOptions.dense_whole_graph)))
        return compact_snapshot(index_dir, live_documents(base, state), base.path, embedder, options, state.seq, progress,
                                changed=state.docs)
    finally:
        base.close()
