"""What the last `quarry sync` read, so the next one reads only the files that changed.

For each file a sync read it keeps the stamps (size, modification and change times, inode) of
the file and of every file that says something about it (its sidecar, the folder manifests
from its source folder down), taken before the file was read, and a digest of each document
the file gave as the index held it once the sync was applied. The next sync takes a file's
documents from the index, without opening the file, only when every stamp is the same, no
stamp is recent enough to hide a second edit in the same clock tick (`RACY_NS`, as Git treats
entries as new as its index), and the index still holds each document with the same digest
(a write through the API since then makes the file be read again). The state also names the
reading options and the build, so a sync with other options (`--ocr`, `--strict-fields`,
another default ACL) or after an upgrade reads everything again. It is written whole and
atomically after a sync is applied: a sync killed part way leaves the previous state, and
the next one reads what changed since then.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from indexes.corpus import LoadedDocument
from indexes.files import MANIFEST_NAME, SIDECAR_SUFFIX, FileReader
from indexes.sync_plan import origin_path
from retrieval.types import Document

STATE_NAME = "sync_state.json"
STATE_VERSION = 1
RACY_NS = 2_000_000_000  # a stamp this close to the sync that took it may hide an edit of the same tick
Stamp = tuple[int, int, int, int]  # size, mtime_ns, ctime_ns, inode; all -1 for a file that is not there


def reading_key(default_acl: Sequence[str], reader: FileReader) -> dict[str, Any]:
    """What besides a file's bytes decides its documents (the default ACL, the reader's rules,
    the build): a state kept under another key is not used."""
    try:
        build = metadata.version("quarry")
    except metadata.PackageNotFoundError:
        build = "unknown"
    return {"version": STATE_VERSION, "build": build, "default_acl": list(default_acl), "ocr": reader.ocr,
            "strict_fields": reader.strict_fields, "markdown_sections": reader.markdown_sections}


def said_by(path: Path, root: Path) -> list[Path]:
    """The file, its sidecar and the manifests of its folders from `root` down: what its documents come from."""
    folders = [path.parent, *path.parent.parents][: len(path.relative_to(root).parts)]
    return [path, path.with_name(path.name + SIDECAR_SUFFIX), *(d / MANIFEST_NAME for d in reversed(folders))]


def stamp(path: Path) -> Stamp:
    try:
        st = path.lstat()
    except OSError:
        return (-1, -1, -1, -1)
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def document_digest(doc: Document) -> str:
    """A digest of every field a sync compares (plan_sync: the document, its ACL included)."""
    fields = [doc.id, doc.text, doc.title, doc.source, doc.date.isoformat() if doc.date else None,
              sorted((str(k), repr(v)) for k, v in doc.metadata.items()), list(doc.acl),
              [[r.start, r.end, r.page, list(r.section)] for r in doc.regions]]
    return hashlib.sha256(json.dumps(fields, ensure_ascii=False).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class FileEntry:
    stamps: tuple[Stamp, ...]
    docs: Mapping[str, str]  # document id -> digest


@dataclass
class SyncState:
    key: dict[str, Any]
    started_ns: int  # when the sync that wrote it took its first stamp
    files: dict[str, FileEntry] = field(default_factory=dict)  # resolved path -> what it gave

    @classmethod
    def load(cls, index_dir: Path, key: dict[str, Any]) -> SyncState:
        """The index's state when it was kept under `key`, else an empty one (everything is read)."""
        empty = cls(key, 0)
        try:
            raw = json.loads((index_dir / STATE_NAME).read_text(encoding="utf-8"))
            if raw.get("key") != key:
                return empty
            files = {p: FileEntry(tuple(tuple(s) for s in e["stamps"]), dict(e["docs"])) for p, e in raw["files"].items()}
            return cls(key, int(raw["started_ns"]), files)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return empty  # missing or damaged: read everything, as the first sync does

    def save(self, index_dir: Path) -> None:
        payload = {"key": self.key, "started_ns": self.started_ns,
                   "files": {p: {"stamps": [list(s) for s in e.stamps], "docs": dict(e.docs)} for p, e in self.files.items()}}
        tmp = index_dir / f".{STATE_NAME}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(payload, f, ensure_ascii=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, index_dir / STATE_NAME)


MAX_STATE_DOCS = 100_000  # an ingest of more documents keeps no state (a digest each would cost memory): a sync reads all


def file_stamps(files: Iterable[tuple[Path, Path]]) -> dict[str, tuple[Stamp, ...]]:
    """The stamps of each (file, source folder) and what says something about it, by resolved path."""
    return {str(path.resolve()): tuple(stamp(p) for p in said_by(path, root)) for path, root in files}


class IngestState:
    """The state an ingest leaves, so the first sync after it reads only what changed: stamps
    taken before the first pass, digests collected as the first pass reads the documents."""

    def __init__(self, key: dict[str, Any], files: Iterable[tuple[Path, Path]]) -> None:
        self.key = key
        self.started_ns = time.time_ns()
        self.stamps = file_stamps(files)
        self.docs: dict[str, dict[str, str]] | None = {}
        self.count = 0

    def add(self, ld: LoadedDocument) -> None:
        path = origin_path(ld.origin)
        if self.docs is None or path is None:
            return
        self.count += 1
        if self.count > MAX_STATE_DOCS:
            self.docs = None
            return
        self.docs.setdefault(str(path), {})[ld.doc.id] = document_digest(ld.doc)

    def save(self, index_dir: Path) -> None:
        """Written once the snapshot is current; with too many documents, any older state is removed."""
        if self.docs is None:
            (index_dir / STATE_NAME).unlink(missing_ok=True)
            return
        files = {p: FileEntry(self.stamps[p], d) for p, d in self.docs.items() if p in self.stamps}
        SyncState(self.key, self.started_ns, files).save(index_dir)


class UnchangedFiles:
    """The check `iter_documents` asks before reading a file: the file's documents as the index
    holds them when nothing it comes from changed since the last sync, else None (read it).
    It keeps the stamps it took, for the state the sync writes next."""

    def __init__(self, state: SyncState, held: Iterable[tuple[Document, str]]) -> None:
        self.state = state
        self.held = {doc.id: (doc, origin) for doc, origin in held}
        self.started_ns = time.time_ns()
        self.stamps: dict[str, tuple[Stamp, ...]] = {}
        self.reused = 0
        self.read = 0

    def __call__(self, path: Path, root: Path) -> list[LoadedDocument] | None:
        key = str(path.resolve())
        now = self.stamps[key] = tuple(stamp(p) for p in said_by(path, root))
        entry = self.state.files.get(key)
        if entry is None or entry.stamps != now or any(s[1] >= self.state.started_ns - RACY_NS for s in now):
            self.read += 1
            return None
        docs = []
        for doc_id, digest in entry.docs.items():
            held = self.held.get(doc_id)
            if held is None or document_digest(held[0]) != digest:
                self.read += 1
                return None
            docs.append(LoadedDocument(*held))
        self.reused += 1
        return docs

    def next_state(self, applied: Iterable[tuple[Document, str]], desired: Sequence[LoadedDocument],
                   sources: Sequence[Path]) -> SyncState:
        """The state after a sync is applied: each file of `desired` with the stamps taken before
        it was read and its documents' digests as the index now holds them (`applied`); the
        previous entries of files outside `sources` are kept."""
        roots = [s.resolve() for s in sources]
        now = {doc.id: doc for doc, _ in applied}
        by_file: dict[str, dict[str, str]] = {}
        for ld in desired:
            path = origin_path(ld.origin)
            held = now.get(ld.doc.id)
            if path is None or held is None:
                continue
            by_file.setdefault(str(path), {})[ld.doc.id] = document_digest(held)
        files = {p: e for p, e in self.state.files.items()
                 if not any(Path(p) == r or r in Path(p).parents for r in roots)}
        for p, docs in by_file.items():
            if p in self.stamps:
                files[p] = FileEntry(self.stamps[p], docs)
        return SyncState(self.state.key, self.started_ns, files)
