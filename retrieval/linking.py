"""Linking a question to what the index holds: catalog entities it names, documents its
evidence points to (second hops), and tables that answer it.

All of it is scoped to what the caller's `AccessScope` may read: an entity, a linked
document or a table the caller cannot read is never found, so none can steer the route or
the grade.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import date
from typing import Callable, Protocol, Sequence

import numpy as np

from retrieval.access import ChunkTable
from retrieval.constraints import identifiers
from retrieval.entities import EntityIndex, bridge_candidates
from retrieval.errors import RetrievalError
from retrieval.policy import LinkedDoc
from retrieval.retrievers.sql import SqlRetriever
from retrieval.signals import StoredVectors, best_cosines
from retrieval.sql.translate import Decline, Translation
from retrieval.types import AccessScope, Filters, Hit

log = logging.getLogger("quarry.linking")


class Linker(Protocol):
    """What the loop asks of the entities an index holds (one snapshot's `EntityLinker`, or a
    cluster's, retrieval/scatter_links.py), always over what `access` may read."""

    def entities(self, text: str, access: AccessScope) -> list[str]: ...

    def bridge_docs(self, hits: Sequence[Hit], question: str, access: AccessScope) -> tuple[str, ...]: ...

    def linked_docs(self, hits: Sequence[Hit], question: str, access: AccessScope) -> list[LinkedDoc]: ...


@dataclass(frozen=True)
class EntityLinker:
    """Catalog entities (document titles, identifiers in metadata values) in text, and the
    documents a question or its evidence names."""

    titles: EntityIndex
    names: EntityIndex
    chunks: ChunkTable
    vectors: StoredVectors
    encode: Callable[[str], np.ndarray]

    def entities(self, text: str, access: AccessScope) -> list[str]:
        """Catalog entities named in `text` that belong to documents the scope may read."""
        allowed = self.chunks.mask(access, Filters())
        skip = identifiers(text)
        return list(dict.fromkeys(self.titles.find(text, allowed, skip) + self.names.find(text, allowed, skip)))

    def bridge_docs(self, hits: Sequence[Hit], question: str, access: AccessScope) -> tuple[str, ...]:
        """Readable documents the question or the passages name by title: candidate second hops."""
        allowed = self.chunks.mask(access, Filters())
        return bridge_candidates(self.titles, self.chunks.doc_ids, hits, question, allowed)

    def linked_docs(self, hits: Sequence[Hit], question: str, access: AccessScope) -> list[LinkedDoc]:
        """Bridge candidates with their best chunk's cosine to the question, most similar first,
        and whether the question itself names them (else only a passage does)."""
        docs = self.bridge_docs(hits, question, access)
        if not docs:
            return []
        named = set(self.bridge_docs((), question, access))
        best = best_cosines(self.chunks, self.vectors, self.chunks.mask(access, Filters()), docs, self.encode(question)[0])
        return ranked_links(docs, best, named)


def ranked_links(docs: Sequence[str], best: dict[str, float], named: set[str]) -> list[LinkedDoc]:
    """The candidates with a readable chunk as (doc, best cosine, named by the question), most similar first."""
    return sorted(((d, best[d], d in named) for d in docs if d in best), key=lambda x: -x[1])


@dataclass(frozen=True)
class TableLinker:
    """Does a readable table answer the question with a confident translation? The
    translation found here is the one the SQL route runs: a question is translated once."""

    sql: SqlRetriever

    def readable(self, access: AccessScope) -> bool:
        return bool(self.sql.readable_tables(access))

    def link(self, question: str, access: AccessScope, today: date | None,
             seconds: float | None = None) -> Translation | Decline | None:
        """The translation; or the translator's decline when the question is about a readable
        table (it names the table, a row's key or its columns: `Decline.table`); or None when
        no table links. A translator failure (a profile query timing out, say) means "not
        linked": the text routes still answer.
        The first link for an access scope profiles its tables, which can be slow: given
        `seconds`, profiles not ready by then mean "not linked" (their build goes on, on the
        SQL route's own threads, for the questions after this one)."""
        if seconds is not None and not self.sql.profiled(access) and not self.sql.profile_ready(access, seconds):
            log.warning("table profiles for a new access scope not ready within %.0f ms; routing without tables", seconds * 1000)
            return None
        try:
            out = self.sql.translate(question, access, today)
        except RetrievalError as e:
            log.warning("sql linking failed (%s); routing without tables", e.code)
            return None
        return out if isinstance(out, Translation) or out.table is not None else None
