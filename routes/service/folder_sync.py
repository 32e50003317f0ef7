"""Keeping an index in step with its folders: the one sync that `quarry sync` runs beside no
server and `POST /v1/admin/sync` runs inside one (which holds the write-ahead log).

Read the folders as an ingest does, opening only the files whose stamps changed since the
ingest or the last sync (indexes/sync_state.py), plan the changes (indexes/sync_plan.py),
apply them in batches of `batch`, each durable on its own, then keep the new state. One sync
of an index at a time: a second one asked meanwhile is a conflict. Changes written by others
between the plan and a batch are overwritten by the folder's version: the folder wins.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from indexes.corpus import load_documents
from indexes.files import FileReader, Skipped
from indexes.live import Change, Delete, Put, SetAcl
from indexes.sync_plan import SyncPlan, plan_sync
from indexes.sync_state import SyncState, UnchangedFiles, reading_key
from indexes.wal import JSONObject
from retrieval.errors import Conflict, InvalidRequest
from routes.service.service import Service
from routes.service.settings import Settings

_RUNNING: dict[Path, threading.Lock] = {}
_RUNNING_GUARD = threading.Lock()


@dataclass(frozen=True)
class SyncRequest:
    sources: tuple[Path, ...]
    default_acl: tuple[str, ...]  # for documents nothing gives an ACL: the index's ingest default unless set
    batch: int  # changes per durable write (write_batch_max)
    dry_run: bool = False
    keep_deleted: bool = False  # documents whose file is gone stay
    skip_bad_files: bool = False
    strict_fields: bool = False
    ocr: bool = False
    markdown_sections: bool = False
    extract_timeout_s: float | None = None


def sync_request(settings: Settings, sources: Sequence[Path], default_acl: tuple[str, ...], *, dry_run: bool = False,
                 keep_deleted: bool = False, skip_bad_files: bool = False, strict_fields: bool = False,
                 ocr: bool = False) -> SyncRequest:
    """A sync by the settings' reading rules (batch size, OCR, Markdown sections, extraction
    time), with what one command or request asks on top (`ocr` adds to the setting)."""
    return SyncRequest(tuple(sources), default_acl, settings.write_batch_max, dry_run=dry_run, keep_deleted=keep_deleted,
                       skip_bad_files=skip_bad_files, strict_fields=strict_fields, ocr=settings.ocr_scans or ocr,
                       markdown_sections=settings.markdown_sections, extract_timeout_s=settings.extract_timeout_s)


@dataclass
class SyncReport:
    plan: SyncPlan
    read: int  # files opened
    unchanged_by_stamp: int  # files whose documents were taken from the index unopened
    applied: bool
    skipped: list[Skipped] = field(default_factory=list)
    batches: list[JSONObject] = field(default_factory=list)

    def summary(self) -> JSONObject:
        """The line a sync ends with (the CLI's last line; the HTTP answer adds batches and skips)."""
        return {"sync": self.plan.summary(), "files": {"read": self.read, "unchanged_by_stamp": self.unchanged_by_stamp},
                "applied": self.applied}

    def to_json(self) -> JSONObject:
        return {**self.summary(), "batches": self.batches, "skipped": [s.to_json() for s in self.skipped]}


def sync_folders(service: Service, index_dir: Path, request: SyncRequest,
                 on_batch: Callable[[JSONObject], None] | None = None) -> SyncReport:
    """Bring the documents of `service`'s index that came from `request.sources` in step with
    them (module docstring); `on_batch` sees each applied batch's answer as it lands."""
    lock = _lock(index_dir)
    if not lock.acquire(blocking=False):
        raise Conflict("a sync of this index is running; ask again when it has finished")
    try:
        return _sync(service, index_dir, request, on_batch)
    finally:
        lock.release()


def _sync(service: Service, index_dir: Path, request: SyncRequest,
          on_batch: Callable[[JSONObject], None] | None) -> SyncReport:
    reader = FileReader(skip_bad=request.skip_bad_files, strict_fields=request.strict_fields, ocr=request.ocr,
                        markdown_sections=request.markdown_sections, extract_timeout_s=request.extract_timeout_s)
    sources = list(request.sources)
    held = service.documents()
    key = reading_key(request.default_acl, reader)
    unchanged = UnchangedFiles(SyncState.load(index_dir, key), held)
    try:
        desired = load_documents(sources, request.default_acl, reader, unchanged)  # every file checked before any write
    finally:
        reader.close()
    plan = plan_sync(desired, held, sources, prune=not request.keep_deleted)
    report = SyncReport(plan, unchanged.read, unchanged.reused, not request.dry_run, list(reader.skipped.values()))
    if request.dry_run:
        return report
    changes: list[Change] = [*(Put(ld.doc, ld.origin) for ld in plan.put), *(SetAcl(i, a) for i, a in plan.acl),
                             *(Delete(i) for i in plan.delete)]
    for at in range(0, len(changes), request.batch):
        out = service.write_changes(changes[at : at + request.batch])
        report.batches.append(out)
        if on_batch is not None:
            on_batch(out)
    unchanged.next_state(service.documents() if changes else held, desired, sources).save(index_dir)
    return report


def _lock(index_dir: Path) -> threading.Lock:
    with _RUNNING_GUARD:
        return _RUNNING.setdefault(index_dir.resolve(), threading.Lock())


def configured_sources(allowed: Sequence[Path], asked: Sequence[str] | None) -> tuple[Path, ...]:
    """The folders a server syncs: those of its `sync_sources` setting that `asked` names (all
    when it names none). A path outside the setting is refused: a request never chooses what a
    server reads from its disk."""
    if not allowed:
        raise InvalidRequest("this server syncs no folder: set sync_sources (QUARRY_SYNC_SOURCES) to the folders it may read")
    if not asked:
        return tuple(allowed)
    by_path = {str(p): p for p in allowed} | {str(p.resolve()): p for p in allowed}
    unknown = [a for a in asked if a not in by_path]
    if unknown:
        raise InvalidRequest(f"not a sync source of this server: {unknown[0][:300]!r}; its sources are "
                             f"{', '.join(str(p) for p in allowed)}")
    return tuple(dict.fromkeys(by_path[a] for a in asked))
