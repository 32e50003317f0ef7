"""Building a snapshot: documents chunked, catalog, BM25 and FAISS files written into a
`.building-*` folder, the manifest last, then the folder renamed and CURRENT replaced
atomically. A build killed at any point leaves CURRENT naming the previous, complete
snapshot; a failed build leaves nothing behind.

After the switch the build prunes: it keeps the new snapshot and the previous one, and
removes every other one *that no live process serves*. Each process that loads a snapshot
holds a shared `flock` on its lease file until it closes it, and the prune takes an
exclusive non-blocking lock before deleting (indexes/snapshot_lease.py): a server that has
not switched yet, a long `quarry eval`, or an engine draining its last requests keeps its
snapshot on disk, and a later ingest removes it once it is released. The kernel drops the
locks of a process that dies, so a killed server never keeps a snapshot forever.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from array import array
from contextlib import closing, contextmanager
from dataclasses import asdict, dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from indexes.answer_model import shipped_identity
from indexes.bm25_index import Bm25Builder, Bm25Params
from indexes.catalog import Catalog, CatalogWriter, chunk_texts, region_rows
from indexes.chunking import DEFAULT_MAX_CHARS, chunk_documents
from indexes.corpus import ADMIN_ONLY, LoadedDocument, discover, iter_documents
from indexes.sync_state import IngestState, reading_key
from indexes.dense_index import DenseIndex
from indexes.embed_journal import EmbedJournal
from indexes.embedder import Embedder
from indexes.extract.sandbox import Budget
from indexes.files import SIDECAR_SUFFIX, FileReader, config_files, date_warnings
from indexes.snapshot_lease import LEASE_FILE, PRUNING, acquire, remove_unless_served
from indexes.snapshot_load import CURRENT, FORMAT_VERSION, current_snapshot_path, read_manifest, verify_files
from indexes.tables import TableSource, file_digest, fsync_dir, fsync_tree, grid_tables, plan_tables
from indexes.wal import log_end, read_after
from retrieval.errors import Conflict, IngestError, RetrievalError, ServerFault, SnapshotError, StorageError
from retrieval.sql.schema import TableInfo
from retrieval.types import Chunk, Document

log = logging.getLogger("quarry.ingest")

Progress = Callable[[str, int, int], None]  # (stage, done, total)
Documents = Callable[[], Iterable[LoadedDocument]]  # a corpus that can be read more than once
CHANGED = "the sources changed while they were ingested; nothing was published, run the ingest again"
BATCH_CHARS = 64_000_000  # text an ingest batch holds at most (documents may be up to 5M characters)


@dataclass(frozen=True)
class BuildOptions:
    default_acl: tuple[str, ...] = ADMIN_ONLY
    max_chars: int = DEFAULT_MAX_CHARS
    bm25: Bm25Params = Bm25Params()
    reuse_embeddings: bool = True  # reuse vectors of unchanged chunk texts from the current snapshot
    reuse_from: Path | None = None  # another index directory to reuse vectors from (default: this one)
    answer_model: Path | None = None  # the answer model served beside this index (default: the shipped one)
    dense_graph_from: int | None = 200_000  # chunks from which the dense index has HNSW graphs (None: never)
    dense_whole_graph: bool = True  # with two or more class graphs, one more over all their rows (indexes/dense_index.py)
    embed_batch: int = 4096  # texts per embedding batch; each finished batch is journaled (indexes/embed_journal.py)
    skip_bad_files: bool = False  # a bad PDF, DOCX or HTML file, or an empty text file, is left out and listed, not a stop
    strict_fields: bool = False  # front-matter keys outside the document fields stop the ingest (default: they go to metadata)
    document_batch: int = 32_768  # documents an ingest holds in memory at a time (at most BATCH_CHARS of text)
    ocr: bool = False  # a PDF page without a text layer is read by OCR (indexes/extract/ocr.py)
    markdown_sections: bool = False  # a Markdown file's headings are its sections (off: see README, Ingest)
    extract_timeout_s: float = Budget.seconds  # one file's extraction at most (indexes/extract/sandbox.py)

    def file_reader(self) -> FileReader:
        """The reader one ingest reads its sources with (every pass), by these options' rules."""
        return FileReader(skip_bad=self.skip_bad_files, strict_fields=self.strict_fields, ocr=self.ocr,
                          markdown_sections=self.markdown_sections, extract_timeout_s=self.extract_timeout_s)


def index_text(doc: Document, chunk: Chunk) -> str:
    """What BM25 and the embedder see: the title gives every chunk its document's context."""
    return titled(doc.title, chunk.text)


def titled(title: str | None, text: str) -> str:
    """A chunk's text under its document's title (the embedding pass reads both from the catalog)."""
    return f"{title}\n{text}" if title else text


def content_hash(docs: Iterable[Document], tables: Sequence[TableSource] = ()) -> str:
    """Identifies the corpus: documents (all fields) and table files with their ACLs."""
    h = hashlib.sha256()
    for record in table_records(tables):
        h.update(record)
    for d in docs:
        h.update(document_record(d))
    return h.hexdigest()


def table_records(tables: Sequence[TableSource]) -> Iterator[bytes]:
    """What `content_hash` reads of each table (a sharded ingest hashes incrementally)."""
    for t in tables:
        if t.grid is not None:
            continue  # a table inside a document file is hashed as its document's text and ACL
        yield json.dumps({"table": t.name, "sha256": file_digest(t.path), "acl": list(t.acl),
                          **({"types": [list(p) for p in t.types], "key": t.key} if t.types or t.key else {})}).encode()


def document_record(d: Document) -> bytes:
    """What `content_hash` reads of one document."""
    record: dict[str, Any] = {"id": d.id, "text": d.text, "title": d.title, "source": d.source,
                              "date": d.date.isoformat() if d.date else None, "metadata": dict(d.metadata), "acl": list(d.acl)}
    if d.regions:  # only then, so a corpus without files hashes as before
        record["regions"] = region_rows(d.regions)
    return json.dumps(record, sort_keys=True, ensure_ascii=False).encode("utf-8") + b"\n"


def corpus_digest(sources: Sequence[Path], default_acl: tuple[str, ...] = ADMIN_ONLY, markdown_sections: bool = False) -> str:
    """The content hash an ingest of `sources` would record (to skip an unneeded rebuild)."""
    tables = plan_tables(discover(sources)[1], default_acl)
    reader = FileReader(markdown_sections=markdown_sections)
    return content_hash((ld.doc for ld in iter_documents(sources, default_acl, reader)), tables)


def _snapshot_files(root: Path) -> dict[str, dict[str, Any]]:
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name not in ("manifest.json", LEASE_FILE))
    return {p.relative_to(root).as_posix(): {"bytes": p.stat().st_size, "sha256": file_digest(p)} for p in files}


# The OS's words for a write the storage refuses; DuckDB and FAISS carry them in their messages.
STORAGE_FAILURES = tuple(os.strerror(e) for e in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO))


@contextmanager
def storage_errors() -> Iterator[None]:
    """A write the storage refuses becomes one typed, path-free StorageError (the build's
    folder is already removed and CURRENT untouched), not a traceback."""
    try:
        yield
    except RetrievalError:
        raise
    except Exception as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else next((r for r in STORAGE_FAILURES if r in str(e)), None)
        if reason is None:
            raise
        raise StorageError(f"ingest could not write the new snapshot: {reason}; CURRENT was not switched, "
                           "so the previous snapshot (if any) keeps serving") from None


@contextmanager
def build_lock(index_dir: Path) -> Iterator[None]:
    """One build at a time per index directory (a second one fails fast, it does not queue)."""
    index_dir.mkdir(parents=True, exist_ok=True)
    with open(index_dir / ".build.lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise IngestError("another ingest is building this index", str(index_dir)) from None
        yield


def build_snapshot(
    sources: Sequence[Path],
    index_dir: Path,
    embedder: Embedder,
    options: BuildOptions = BuildOptions(),
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Ingest `sources` into a new snapshot and make it current; returns its manifest. The
    sources replace the whole corpus, live writes included: the manifest's `wal_seq` is the
    write-ahead log's last seq when the build took its lock (indexes/live.py).

    The sources are read in passes, never held whole: the first validates every document and
    hashes the corpus before anything is written; the build reads them again a batch at a
    time (see _build_into). A source file that changes between passes fails the ingest."""
    t0 = time.perf_counter()
    tables = plan_tables(discover(sources)[1], options.default_acl)
    stamp = sources_stamp(sources)
    reader = options.file_reader()  # one for both passes: each file is extracted once
    kept = IngestState(reading_key(options.default_acl, reader), discover(sources)[0])

    def documents() -> Iterator[LoadedDocument]:
        return iter_documents(sources, options.default_acl, reader)

    count = [0]

    def counted() -> Iterator[Document]:
        for ld in documents():  # validation: the first bad document raises, before any write
            count[0] += 1
            kept.add(ld)
            yield ld.doc

    digest = content_hash(counted(), tables)
    tables = [*tables, *grid_tables(list(reader.grids.values()), [t.name for t in tables])]

    def unchanged() -> None:
        if sources_stamp(sources) != stamp:
            raise IngestError(CHANGED, ", ".join(map(str, sources)))

    def reuse() -> dict[str, np.ndarray]:
        return previous_vectors(options.reuse_from or index_dir, embedder.model_id) if options.reuse_embeddings else {}

    if not count[0] and not tables:
        raise IngestError("no documents or tables found", ", ".join(map(str, sources)))
    manifest = publish_snapshot(index_dir, documents, count[0], tables, embedder, options, progress, time.perf_counter() - t0,
                        digest, None, reuse, unchanged=unchanged)
    kept.save(index_dir)  # what the first `quarry sync` need not read again (indexes/sync_state.py)
    return {**manifest, "skipped_files": [s.to_json() for s in reader.skipped.values()],
            "date_warnings": date_warnings(reader.file_dates, date.today())}


def sources_stamp(sources: Sequence[Path]) -> list[tuple[str, int, int, int, int]]:
    """Every document and table file under `sources` with its size, modification and change
    times and inode, to notice a file added, removed, replaced or changed while an ingest
    reads them in passes (a copy that keeps the mtime still changes the inode or ctime)."""
    docs, tables = discover(sources)
    configs = [c for src in sources if src.is_dir() for c in config_files(src)]
    configs += [src.with_name(src.name + SIDECAR_SUFFIX) for src in sources if src.is_file()]
    out = []
    for path in [p for p, _ in docs] + list(tables) + configs:
        try:
            st = path.stat()
            out.append((str(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
        except OSError:
            out.append((str(path), -1, -1, -1, -1))  # gone: the pass that reads it says so
    return out


def compact_snapshot(index_dir: Path, documents: Sequence[tuple[Document, str, np.ndarray]], previous: Path,
                     embedder: Embedder, options: BuildOptions, wal_seq: int, progress: Progress | None = None,
                     changed: Iterable[str] = ()) -> dict[str, Any]:
    """Fold a live index into a new base snapshot and make it current: `documents` (each with
    its origin and chunk vectors, which are reused, not embedded again) and the user tables of
    the `previous` snapshot, copied as they are, less the tables inside the files of the
    `changed` documents (deleted or replaced by live writes: the next ingest reads them
    again); the manifest's `wal_seq` says through which log record the new base holds the changes."""
    t0 = time.perf_counter()
    loaded = [LoadedDocument(d, origin) for d, origin, _ in documents]
    chunks = chunk_documents([d for d, _, _ in documents], options.max_chars)  # only for the keys of its vectors
    by_id = {d.id: d for d, _, _ in documents}
    keys = [embed_key(index_text(by_id[c.doc_id], c)) for c in chunks]
    dim = embedder.dimension()
    vectors = np.concatenate([v.reshape(-1, dim) for _, _, v in documents]) if documents else np.zeros((0, dim), np.float32)
    reuse = dict(zip(keys, vectors, strict=True)) if len(vectors) == len(keys) else {}
    catalog = Catalog(previous / "catalog.duckdb")
    try:
        gone = set(changed)
        every = list(catalog.tables().values())
        tables = [t for t in every if t.owner is None or t.owner not in gone]
    finally:
        catalog.close()
    if not documents and not tables:
        raise IngestError("a compaction would leave the index with no documents or tables", str(index_dir))
    h = hashlib.sha256(content_hash([d for d, _, _ in documents]).encode())
    h.update(json.dumps(read_manifest(previous).get("tables") or {}, sort_keys=True).encode())
    if len(tables) < len(every):
        h.update(json.dumps(sorted(t.name for t in tables)).encode())
    return publish_snapshot(index_dir, lambda: iter(loaded), len(loaded), [], embedder, options, progress,
                            time.perf_counter() - t0, h.hexdigest(), wal_seq, lambda: reuse,
                            copy_tables=(previous / "catalog.duckdb", tables), expect_base=previous.name)


def publish_snapshot(index_dir: Path, documents: Documents, n_documents: int, tables: Sequence[TableSource],
                     embedder: Embedder, options: BuildOptions, progress: Progress | None, t_load: float, digest: str,
                     wal_seq: int | None, reuse_vectors: Callable[[], dict[str, np.ndarray]],
                     copy_tables: tuple[Path, Sequence[TableInfo]] | None = None, expect_base: str | None = None,
                     unchanged: Callable[[], None] = lambda: None, protect: frozenset[str] = frozenset()
                     ) -> dict[str, Any]:
    """Build into `.building-*`, write the manifest last, rename, switch CURRENT, prune.

    `wal_seq` None (an ingest): the log's last seq, read under the build lock, so no
    compaction or fold can slip between. `expect_base` (a compaction): the snapshot its
    changes were replayed onto; if CURRENT names another one by the switch (an ingest or
    another compaction published meanwhile), nothing is switched: `Conflict`. `unchanged`
    raises if the sources changed since they were validated (checked before the manifest).
    `protect`: snapshot names the prune keeps besides its own two (a cluster manifest's)."""
    report = progress or (lambda stage, done, total: None)

    with storage_errors(), build_lock(index_dir):
        log_path = index_dir / "wal.log"
        if wal_seq is None:
            wal_seq = log_end(log_path)
        elif log_path.exists() and read_after(log_path, wal_seq)[0] > wal_seq:
            raise Conflict("the write-ahead log was folded past this build's changes; nothing was switched, try again")
        snapshots = index_dir / "snapshots"
        snapshots.mkdir(exist_ok=True)
        for stale in [*snapshots.glob(".building-*"), *snapshots.glob(f"{PRUNING}*")]:
            shutil.rmtree(stale, ignore_errors=True)
        name = f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{digest[:8]}-{uuid.uuid4().hex[:6]}"
        work = snapshots / f".building-{name}"
        work.mkdir()
        # An ingest journals what it embeds; a compaction embeds nothing and leaves a killed
        # ingest's journal for that ingest's next run.
        journal = EmbedJournal(index_dir, embedder.model_id) if expect_base is None else None
        if journal is not None and not options.reuse_embeddings:
            journal.clear()
        try:
            manifest = _build_into(work, name, digest, documents, n_documents, tables, embedder, options, report,
                                   reuse_vectors(), copy_tables, journal, unchanged)
            unchanged()
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)  # a failed build leaves nothing behind
            raise
        manifest["wal_seq"] = wal_seq
        manifest["timings_s"]["load_and_chunk"] = round(t_load + manifest["timings_s"].pop("read"), 3)
        (work / "manifest.json").write_text(json.dumps(manifest, indent=2))
        (work / LEASE_FILE).touch()  # so a read-only copy of the index can still be leased
        fsync_tree(work)  # every file durable before CURRENT can name the snapshot
        serving = _current_name(index_dir)  # read before the switch: the snapshot that was serving
        if expect_base is not None and serving != expect_base:
            shutil.rmtree(work, ignore_errors=True)
            raise Conflict(f"the index changed while this compaction built (CURRENT names {serving}, not {expect_base}); "
                           "nothing was switched, try again")
        final = snapshots / name
        work.rename(final)
        fsync_dir(snapshots)
        pointer = index_dir / f"{CURRENT}.tmp"
        pointer.write_text(name + "\n")
        with pointer.open("rb") as f:
            os.fsync(f.fileno())
        os.replace(pointer, index_dir / CURRENT)  # the atomic switch
        fsync_dir(index_dir)
        if journal is not None:
            journal.clear()  # its vectors are in the published snapshot now
        _prune(snapshots, keep=name, previous=serving, protect=protect)
    return manifest


def embed_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def previous_vectors(index_dir: Path, model_id: str) -> dict[str, np.ndarray]:
    """Vectors of the current snapshot by text hash, when it was built with the same model."""
    try:
        path = current_snapshot_path(index_dir)
        manifest = read_manifest(path)
    except SnapshotError:
        return {}
    if manifest.get("model", {}).get("id") != model_id or manifest.get("format_version") != FORMAT_VERSION:
        return {}
    lease = acquire(path)  # another index's ingest (`reuse_from`) must not prune it while it is read
    if lease is None:
        return {}
    try:
        # A snapshot the server would refuse gives nothing to reuse: its vectors are recomputed.
        verify_files(path, manifest, ("catalog.duckdb", "dense.faiss"))
        catalog = Catalog(path / "catalog.duckdb")
        try:
            keys = catalog.embed_keys()
        finally:
            catalog.close()
        dense = DenseIndex.load(path / "dense.faiss", graphs=False)
    except Exception:  # noqa: BLE001 - an unreadable or altered old snapshot only means nothing to reuse
        log.warning("previous snapshot %s fails its checks; every vector is computed again", path.name)
        return {}
    finally:
        lease.release()
    if dense.size != len(keys):
        return {}
    vectors = dense.vectors(np.arange(len(keys), dtype=np.int64))
    # Only finite, unit-length vectors are reused (8-bit indexes store them to about 1e-2).
    norms = np.linalg.norm(vectors, axis=1)
    sound = np.isfinite(vectors).all(axis=1) & (np.abs(norms - 1.0) <= 0.05)
    return {k: vectors[i] for i, k in enumerate(keys) if k and sound[i]}


def _build_into(work: Path, name: str, digest: str, documents: Documents, n_documents: int, tables: Sequence[TableSource],
                embedder: Embedder, options: BuildOptions, report: Progress, reuse: dict[str, np.ndarray],
                copy_tables: tuple[Path, Sequence[TableInfo]] | None = None,
                journal: EmbedJournal | None = None, unchanged: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """Write catalog, BM25 and FAISS files into `work`; returns the manifest (not yet written).
    `unchanged` raises when the sources changed since the first pass: checked once they are
    read for the last time, before the embedding (which can take hours), and again at the end.

    One pass over `documents`, a batch at a time, chunks each batch into the catalog and the
    BM25 builder and keeps one text key per chunk; then the chunks whose vectors are not known
    are read back from the catalog and embedded in batches, each journaled as it finishes.
    Vectors come from `reuse`, then from `journal` (batches a killed build of this index
    finished). What stays in memory is per chunk (keys, term ids, vectors), never the corpus."""
    t_read = t_catalog = t_bm25 = 0.0
    keys: list[str] = []
    readers: dict[frozenset[str], int] = {}  # access class of each distinct reader set
    classes = array("i")  # per chunk row
    n_docs = 0
    bm25 = Bm25Builder(options.bm25)
    with CatalogWriter(work / "catalog.duckdb", copy_tables) as writer:
        for batch, chunks, texts, t in document_passes(documents(), options.max_chars, options.document_batch):
            t_read += t
            t1 = time.perf_counter()
            batch_keys = [embed_key(x) for x in texts]
            writer.add([ld.doc for ld in batch], [ld.origin for ld in batch], chunks, batch_keys)
            t2 = time.perf_counter()
            bm25.add(texts)
            acl = {ld.doc.id: readers.setdefault(frozenset(ld.doc.acl), len(readers)) for ld in batch}
            classes.extend(acl[c.doc_id] for c in chunks)
            t_catalog, t_bm25 = t_catalog + t2 - t1, t_bm25 + time.perf_counter() - t2
            keys += batch_keys
            n_docs += len(batch)
            report("catalog", min(n_docs, n_documents), n_documents)
        if n_docs != n_documents:
            raise IngestError(CHANGED, str(work.parent.parent))
        t1 = time.perf_counter()
        infos = writer.finish(tables)
        t_catalog += time.perf_counter() - t1
    unchanged()
    t1 = time.perf_counter()
    bm25.finish().save(work / "bm25")
    t_bm25 += time.perf_counter() - t1
    report("bm25", 1, 1)

    t1 = time.perf_counter()
    dim = embedder.dimension()
    vectors = np.zeros((len(keys), dim), dtype=np.float32)
    journaled = journal.load() if journal is not None and options.reuse_embeddings else {}
    todo, resumed = [], 0
    for i, k in enumerate(keys):
        known = reuse.get(k)
        if known is None and k in journaled:
            known, resumed = journaled[k], resumed + 1
        if known is None:
            todo.append(i)
        else:
            vectors[i] = known
    del journaled, reuse
    if resumed:
        log.info("resuming: %d vectors from the embedding journal of an unfinished build", resumed)
    done = [len(keys) - len(todo)]  # reused vectors count as done, so the bar ends at the total

    def on_batch(n: int) -> None:
        done[0] += n
        report("embed", done[0], len(keys))

    report("embed", done[0], len(keys))  # before the first batch, so rate and ETA time the whole stage
    if todo:
        wanted, pending, filled = set(todo), [], 0
        step = max(1, options.embed_batch)
        with closing(chunk_texts(work / "catalog.duckdb")) as stored:  # closed, and its connection, on any error
            for rows in stored:
                for row, title, text in rows:
                    if row in wanted:
                        pending.append((row, titled(title, text)))
                # Full batches as they fill, in row order; the last one once every row is read.
                while len(pending) >= step or (pending and filled + len(pending) == len(todo)):
                    batch_rows, batch_texts = zip(*pending[:step], strict=True)
                    del pending[:step]
                    if any(embed_key(t) != keys[r] for r, t in zip(batch_rows, batch_texts, strict=True)):
                        raise ServerFault("the catalog's chunk texts differ from the ones just indexed")
                    encoded = embedder.encode(list(batch_texts), progress=on_batch)
                    vectors[list(batch_rows)] = encoded
                    filled += len(batch_rows)
                    if journal is not None:
                        journal.append([keys[i] for i in batch_rows], encoded)
        if filled != len(todo):
            raise ServerFault(f"the catalog holds {filled} of the {len(todo)} chunks to embed")
    t_embed = time.perf_counter() - t1

    t1 = time.perf_counter()
    DenseIndex.build(vectors, hnsw_from=options.dense_graph_from, classes=np.frombuffer(classes, dtype=np.int32),
                     whole=options.dense_whole_graph).save(work / "dense.faiss")
    t_faiss = time.perf_counter() - t1

    t1 = time.perf_counter()
    manifest = {
        "format_version": FORMAT_VERSION,
        "snapshot": name,
        "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "model": {"id": embedder.model_id, "dim": embedder.dim},
        "answer_model": shipped_identity(options.answer_model),
        "counts": {"documents": n_docs, "chunks": len(keys), "tables": len(infos)},
        "embeddings": {"computed": len(todo), "reused": len(keys) - len(todo) - resumed, "resumed": resumed},
        "tables": {t.name: {"rows": t.rows, "acl": list(t.acl), "row_acl": t.row_acl} for t in infos},
        "content_hash": digest,
        "options": {"default_acl": list(options.default_acl), "max_chars": options.max_chars, "bm25": asdict(options.bm25),
                    "dense_graph_from": options.dense_graph_from, "dense_whole_graph": options.dense_whole_graph},
        "files": _snapshot_files(work),
    }
    manifest["timings_s"] = {
        "catalog": round(t_catalog, 3), "bm25": round(t_bm25, 3), "embed": round(t_embed, 3),
        "faiss": round(t_faiss, 3), "manifest": round(time.perf_counter() - t1, 3), "read": t_read,
    }
    return manifest


def document_passes(documents: Iterable[LoadedDocument], max_chars: int,
                    size: int) -> Iterator[tuple[list[LoadedDocument], list[Chunk], list[str], float]]:
    """The documents a batch at a time (`size` documents, or fewer once they hold BATCH_CHARS
    of text), with their chunks (rows numbered across the corpus), the chunks' index texts,
    and the seconds spent reading and chunking the batch."""
    it, row = iter(documents), 0
    while True:
        t0 = time.perf_counter()
        batch, chars = [], 0
        for ld in it:
            batch.append(ld)
            chars += len(ld.doc.text)
            if len(batch) >= size or chars >= BATCH_CHARS:
                break
        if not batch:
            return
        by_id = {ld.doc.id: ld.doc for ld in batch}
        chunks = chunk_documents([ld.doc for ld in batch], max_chars, first_row=row)
        texts = [index_text(by_id[c.doc_id], c) for c in chunks]
        row += len(chunks)
        yield batch, chunks, texts, time.perf_counter() - t0


def _current_name(index_dir: Path) -> str | None:
    try:
        return current_snapshot_path(index_dir).name
    except SnapshotError:
        return None


def _prune(snapshots: Path, keep: str, previous: str | None, protect: frozenset[str] = frozenset()) -> None:
    """Keep the new snapshot and the one CURRENT named before the switch (for a quick
    rollback), whatever their names sort as: a build that died between renaming its folder
    and switching CURRENT leaves a newer folder that never served, and that one goes. Without
    a readable previous CURRENT, the newest other snapshot is kept instead. Any other one is
    removed only if no process holds a serving lease on it (see the module docstring); those
    named in `protect` stay too."""
    done = sorted((p for p in snapshots.iterdir() if p.is_dir() and not p.name.startswith(".")), key=lambda p: p.name)
    names = {p.name for p in done}
    kept = {keep, previous} if previous in names else {keep, *[p.name for p in done if p.name != keep][-1:]}
    kept |= protect
    for p in done:
        if p.name not in kept and not remove_unless_served(p):
            log.info("snapshot %s is still served by a running process; a later ingest removes it", p.name)
