"""The `quarry` commands that change a live index: upsert, delete, acl, sync and compact.

They write the index's write-ahead log directly (routes/service/writes.py), so they need the log to
themselves: beside a running `quarry serve` of the same index they fail at once with the
server's Conflict (exit 2), and the same changes go through its HTTP API instead. The local
operator may change any document (no read check), as `quarry ingest` may.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, ContextManager

from routes.cli.common import emit, index_dir_of, default_acl

if TYPE_CHECKING:
    from routes.service.service import Service
    from routes.service.settings import Settings


def cmd_upsert(args: argparse.Namespace, settings: Settings) -> int:
    """Create or replace the documents of FILES (ingest's formats), in batches of at most
    write_batch_max, each applied whole; one JSON line per batch."""
    from indexes.corpus import load_documents
    from indexes.files import FileReader
    from indexes.live import Put

    with _writable(settings) as service:
        acl = default_acl(settings.default_acl) if settings.default_acl else service.default_acl()  # the ingest's default
        reader = FileReader()
        loaded = load_documents([Path(f) for f in args.files], acl, reader)  # every file checked before any write
        for skipped in reader.skipped.values():  # links, FIFOs and names that make no id are never content
            print(f"skipped {skipped.path}: {skipped.reason}: {skipped.message}", file=sys.stderr)
        step = settings.write_batch_max
        for at in range(0, len(loaded), step):
            emit(service.write_changes([Put(ld.doc, ld.origin) for ld in loaded[at : at + step]]))
    return 0


def cmd_delete(args: argparse.Namespace, settings: Settings) -> int:
    from routes.service.service import DeleteWrite

    with _writable(settings) as service:
        emit(service.write(None, [DeleteWrite(i) for i in args.ids]))
    return 0


def cmd_acl(args: argparse.Namespace, settings: Settings) -> int:
    from routes.service.service import AclWrite

    with _writable(settings) as service:
        emit(service.write(None, [AclWrite(args.id, args.acl_entries)]))
    return 0


def cmd_sync(args: argparse.Namespace, settings: Settings) -> int:
    """Keep the index in step with SOURCES (routes/service/folder_sync.py): put what is new or
    changed, change the ACLs that alone changed, delete what came from them and is gone; one
    JSON line per applied batch, then the plan applied and how many files were read (a file,
    its sidecar and manifests unchanged since the last sync is not: indexes/sync_state.py).
    `--dry-run` prints the plan only; `--watch S` looks again every S seconds, syncing when a
    file, sidecar or manifest changed. Beside a running server, `POST /v1/admin/sync` runs
    the same sync inside it."""
    from indexes.snapshot_build import sources_stamp
    from retrieval.errors import InvalidRequest
    from routes.service.folder_sync import sync_folders, sync_request

    if args.watch is not None and not args.watch > 0:
        raise InvalidRequest("--watch takes a positive number of seconds")
    sources = [Path(s) for s in args.sources]
    opened = _writable(settings) if not args.dry_run else _readable(settings)
    with opened as service:
        acl = default_acl(settings.default_acl) if settings.default_acl else service.default_acl()
        request = sync_request(settings, sources, acl, dry_run=args.dry_run, keep_deleted=args.keep_deleted,
                               skip_bad_files=args.skip_bad_files, strict_fields=args.strict_fields, ocr=args.ocr)
        stamp = None
        while True:
            now = sources_stamp(sources)
            if now != stamp:
                stamp = now
                report = sync_folders(service, index_dir_of(settings), request, on_batch=_line)
                for skipped in report.skipped:
                    print(f"skipped {skipped.path}: {skipped.reason}: {skipped.message}", file=sys.stderr)
                _line(report.summary())
            if not args.watch:
                return 0
            time.sleep(args.watch)


def _line(payload: object) -> None:
    """One JSON line, at once: a watching sync is read while it runs."""
    print(json.dumps(payload, ensure_ascii=False), flush=True)


def cmd_compact(args: argparse.Namespace, settings: Settings) -> int:
    """Fold the live changes into a new base snapshot; a running server switches to it on
    its next reload check. Beside a server that owns the log, use POST /v1/admin/compact."""
    with _writable(settings) as service:
        emit(service.compact_now())
    return 0


def _readable(settings: Settings) -> ContextManager[Service]:
    """The index's service without its write-ahead log (a dry run writes nothing)."""
    from routes.service.service import open_service

    return open_service(settings, index_dir_of(settings), writable=False, warm=False, plugins=False)


def _writable(settings: Settings) -> ContextManager[Service]:
    """The index's service holding its write-ahead log (taken before any model loads, so
    another holder's Conflict costs nothing)."""
    from routes.service.service import open_service

    return open_service(settings, index_dir_of(settings), writable=True, warm=False, plugins=False)
