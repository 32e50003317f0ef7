"""What keeping an index in step with its source folders takes: the plan `quarry sync` applies.

Pure: it compares the documents the folders give now (read as an ingest reads them) with the
documents the index holds and came from those folders (by the path in their origin), and says
which to put (new, or any field changed), which only need their ACL changed (a manifest or
sidecar edit: no re-embedding), and which to delete (their file is gone). A document written
through the API, or ingested from another folder, is never touched. Applying the plan and
computing it again gives an empty plan, so a sync stopped part way is finished by the next.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from indexes.corpus import LoadedDocument
from retrieval.types import Document


@dataclass(frozen=True)
class SyncPlan:
    put: tuple[LoadedDocument, ...]  # new documents, or documents whose text or fields changed
    acl: tuple[tuple[str, tuple[str, ...]], ...]  # (id, new ACL) of documents that changed nothing else
    delete: tuple[str, ...]  # documents from the folders whose file is gone
    unchanged: int

    @property
    def empty(self) -> bool:
        return not (self.put or self.acl or self.delete)

    def summary(self) -> dict[str, object]:
        """The plan as a dry run prints it: ids, sorted."""
        return {"put": sorted(ld.doc.id for ld in self.put), "acl": sorted(i for i, _ in self.acl),
                "delete": sorted(self.delete), "unchanged": self.unchanged}


def origin_path(origin: str) -> Path | None:
    """The file of an origin (`path:line`), resolved; None for an origin that names no file."""
    path, sep, line = origin.rpartition(":")
    if not sep or not line.isdigit() or not path:
        return None
    return Path(path).resolve()


def under(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def plan_sync(desired: Sequence[LoadedDocument], current: Sequence[tuple[Document, str]], sources: Sequence[Path],
              prune: bool = True) -> SyncPlan:
    """The changes that make the index's documents from `sources` those of `desired` (see the
    module docstring); `prune` False keeps documents whose file is gone."""
    roots = [s.resolve() for s in sources]
    held = {doc.id: doc for doc, _ in current}
    put: list[LoadedDocument] = []
    acl: list[tuple[str, tuple[str, ...]]] = []
    unchanged = 0
    for ld in desired:
        now = held.get(ld.doc.id)
        if now is None or replace(now, acl=ld.doc.acl) != ld.doc:
            put.append(ld)
        elif now.acl != ld.doc.acl:
            acl.append((ld.doc.id, ld.doc.acl))
        else:
            unchanged += 1
    wanted = {ld.doc.id for ld in desired}
    delete = []
    if prune:
        for doc, origin in current:
            path = origin_path(origin)
            if doc.id not in wanted and path is not None and under(path, roots):
                delete.append(doc.id)
    return SyncPlan(tuple(put), tuple(acl), tuple(delete), unchanged)
