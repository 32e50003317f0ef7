"""The `quarry` commands that change a live index: upsert, delete, acl and compact.

They write the index's write-ahead log directly (routes/service/writes.py), so they need the log to
themselves: beside a running `quarry serve` of the same index they fail at once with the
server's Conflict (exit 2), and the same changes go through its HTTP API instead. The local
operator may change any document (no read check), as `quarry ingest` may.
"""

from __future__ import annotations

import argparse
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from routes.cli.common import _emit, _index, default_acl

if TYPE_CHECKING:
    from routes.service.settings import Settings
    from routes.service.writes import Writer


@contextmanager
def _writer(settings: Settings) -> Iterator[Writer]:
    from routes.service.view import open_engine
    from routes.service.generations import Generations
    from routes.service.writes import Writer

    index = _index(settings)
    generations = Generations()
    writer = Writer(index, generations, settings.write_batch_max)  # first: a Conflict costs no model load
    try:
        engine = open_engine(index, settings=settings, warm=False, plugins=False)
        generations.install(engine, owned=True)
        writer.start_at(int((engine.base or engine.snapshot).manifest.get("wal_seq", 0)))
        yield writer
    finally:
        writer.close()
        generations.close()


def cmd_upsert(args: argparse.Namespace, settings: Settings) -> int:
    """Create or replace the documents of FILES (ingest's formats), in batches of at most
    write_batch_max, each applied whole; one JSON line per batch."""
    from indexes.corpus import load_documents
    from indexes.live import Put, options_of

    with _writer(settings) as writer:
        current = writer.generations.current if writer.generations else None
        assert current is not None
        base = current.engine.base or current.engine.snapshot
        acl = default_acl(settings.default_acl) if settings.default_acl else options_of(base)[1]  # the ingest's default
        loaded = load_documents([Path(f) for f in args.files], acl)  # every file checked before any write
        for at in range(0, len(loaded), writer.max_batch):
            _emit(writer.write([Put(ld.doc, ld.origin) for ld in loaded[at : at + writer.max_batch]], None))
    return 0


def cmd_delete(args: argparse.Namespace, settings: Settings) -> int:
    from indexes.live import Delete

    with _writer(settings) as writer:
        _emit(writer.write([Delete(i) for i in args.ids], None))
    return 0


def cmd_acl(args: argparse.Namespace, settings: Settings) -> int:
    from indexes.live import SetAcl
    from retrieval.types import check_acl

    with _writer(settings) as writer:
        _emit(writer.write([SetAcl(args.id, check_acl(args.acl_entries))], None))
    return 0


def cmd_compact(args: argparse.Namespace, settings: Settings) -> int:
    """Fold the live changes into a new base snapshot; a running server switches to it on
    its next reload check. Beside a server that owns the log, use POST /v1/admin/compact."""
    with _writer(settings) as writer:
        current = writer.generations.current if writer.generations else None
        assert current is not None
        _emit(writer.compact(current.engine.embedder))
    return 0
