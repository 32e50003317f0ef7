"""One shard of a sharded index, as a scatter-gather front (retrieval/scatter.py) calls it.

A shard holds the documents whose ids hash to it (indexes/shards.py) as a normal snapshot.
Every call takes the caller's `AccessScope`, never a row mask, and the shard turns it into
its own mask (`ChunkTable.mask`) and enforces it before anything is counted or ranked, so
the same calls can cross a process or machine boundary (a Ray Serve replica, routes/cluster/)
with nothing but plain values: strings, the scope, filters, a query vector, statistics and
hits.

BM25 takes two calls, as Elasticsearch's DFS query-then-fetch does: `bm25_stats` returns
the shard's share of the collection statistics over the caller's readable rows (N, total
length, each query term's df), the front sums them over every shard, and `bm25` scores the
shard's rows with the sums. Dense and exact need one call: their scores depend on the chunk
and the query alone.

The loop asks more of a shard than the routes do (retrieval/scatter_links.py merges it): the
evidence signals of the hits it holds against the summed statistics, its share of a scope's
background moments, the entity sightings of its titles and metadata names in a text, the best
cosine of documents it holds, and documents by id (the front asks the shard owning the id).

`LocalShard` is the in-process implementation over one loaded snapshot's parts (taken as
Protocols, so retrieval/ imports no index).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from threading import Lock
from typing import Any, Callable, Literal, Protocol, Sequence

import numpy as np

from retrieval.access import ChunkTable
from retrieval.entities import EntityIndex, Sightings
from retrieval.lru import Lru
from retrieval.retrievers.exact import ExactRetriever, TextScanner
from retrieval.signals import Moments, background_rows, best_cosines, moments
from retrieval.types import NO_FILTERS, AccessScope, CollectionStats, Document, Filters, Hit

EntityKind = Literal["titles", "names"]  # document titles (with their identifiers), or metadata values
Evidence = tuple[float, float, float, float]  # a chunk's (bm25, qcov, tcov, dense) against a question


@dataclass(frozen=True)
class Reading:
    """What reading a question asks of a shard, in one call: the BM25 statistics of its text
    and of each of its name words, and the entity sightings of its titles and metadata names
    in the text. Shards' readings add up to the cluster's."""

    stats: CollectionStats
    name_stats: tuple[CollectionStats, ...]
    titles: Sightings
    names: Sightings

    def __add__(self, other: Reading) -> Reading:
        return Reading(self.stats + other.stats,
                       tuple(a + b for a, b in zip(self.name_stats, other.name_stats, strict=True)),
                       self.titles + other.titles, self.names + other.names)


@dataclass(frozen=True)
class Judged:
    """What grading a candidate context asks of a shard, in one call: the evidence signals of
    the hits it holds, its title sightings in each text that may name a second hop (the
    question and each passage), and the best cosine with the question of every readable
    document those sightings name on this shard (the grader's linked documents are among
    them). Shards' answers add up to the cluster's."""

    evidence: dict[str, Evidence]
    sightings: tuple[Sightings, ...]
    cosines: dict[str, float]

    def __add__(self, other: Judged) -> Judged:
        return Judged({**self.evidence, **other.evidence},
                      tuple(a + b for a, b in zip(self.sightings, other.sightings, strict=True)),
                      {**self.cosines, **other.cosines})


class Shard(Protocol):
    """The retrieval calls a front makes to one shard. Each enforces `access` (and
    `filters`) inside the shard before ranking, and returns hits best first (equal scores
    by chunk id)."""

    def read(self, question: str, names: Sequence[str], access: AccessScope) -> Reading:
        """Reading a question, in one call (`Reading`): what routing, the absent-name check and
        entity linking need of this shard, over the rows `access` may read."""
        ...

    def judge(self, question: str, vector: np.ndarray, chunk_ids: Sequence[str], access: AccessScope,
              stats: CollectionStats, texts: Sequence[str]) -> Judged:
        """Grading a candidate context, in one call (`Judged`): `evidence` of `chunk_ids`,
        title `sightings` in `texts`, and `doc_cosines` of the documents they name here."""
        ...

    def bm25_stats(self, query: str, access: AccessScope, filters: Filters) -> CollectionStats:
        """This shard's share of BM25's collection statistics over the rows `access` may read
        that pass `filters`."""
        ...

    def bm25(self, query: str, access: AccessScope, k: int, filters: Filters, stats: CollectionStats) -> list[Hit]:
        """The k best readable rows scored with `stats` (summed over every shard)."""
        ...

    def dense(self, vector: np.ndarray, access: AccessScope, k: int, filters: Filters) -> list[Hit]:
        """The k best readable rows by cosine with the (already encoded) query `vector`."""
        ...

    def exact(self, query: str, access: AccessScope, k: int, filters: Filters) -> list[Hit]:
        """The k best readable rows matching the exact query (retrieval/retrievers/exact.py)."""
        ...

    def evidence(self, query: str, vector: np.ndarray, chunk_ids: Sequence[str], access: AccessScope,
                 stats: CollectionStats) -> dict[str, Evidence]:
        """For each of `chunk_ids` this shard holds and `access` may read: its BM25 score with
        `stats` (summed over every shard, for the readable rows), the idf-weighted and plain
        share of the query's terms it holds (`Bm25Index.evidence`), and its cosine with `vector`."""
        ...

    def moments(self, access: AccessScope, readable: int) -> Moments:
        """The moments of the readable rows' vectors this shard contributes to a background,
        `readable` being the readable rows of every shard (retrieval/signals.py `background_rows`)."""
        ...

    def sightings(self, texts: Sequence[str], access: AccessScope, kind: EntityKind) -> list[Sightings]:
        """This shard's entity sightings (titles, or metadata names) in each text, for the
        readable rows (retrieval/entities.py `EntityIndex.sightings`)."""
        ...

    def doc_cosines(self, doc_ids: Sequence[str], vector: np.ndarray, access: AccessScope) -> dict[str, float]:
        """For each of `doc_ids` this shard holds with a readable chunk: the best cosine of its
        readable chunks with `vector`."""
        ...

    def document(self, doc_id: str, access: AccessScope) -> Document | None:
        """The document, when this shard holds it and `access` may read it (else None, as
        for an id no shard holds)."""
        ...

    def document_acl(self, doc_id: str) -> tuple[str, ...] | None:
        """The document's ACL whoever asks (evaluation's check; never a caller's answer)."""
        ...


class ShardService(Shard, Protocol):
    """A shard served on its own (a Serve replica, routes/cluster/replica.py): the retrieval
    calls, and taking a write and describing what it serves. A front's handle to it
    (routes/cluster/remote.py) forwards exactly these calls; tests/routes/cluster/test_remote.py
    holds both sides to this list."""

    def write(self, payload: dict[str, Any], access: AccessScope | None, key: str, request: bytes) -> dict[str, Any]:
        """Apply one write record (by the read rule for `access`; None: the local operator),
        once per idempotency `key`; answered once it is durable."""
        ...

    def describe(self) -> dict[str, Any]:
        """What this shard serves: its number, snapshot, chunks, content hash and write seq."""
        ...


def calls_of(protocol: type) -> frozenset[str]:
    """The public calls a protocol class (and the protocols it extends) declares."""
    return frozenset(name for klass in protocol.__mro__ if klass.__dict__.get("_is_protocol")
                     for name, value in vars(klass).items() if callable(value) and not name.startswith("_"))


SHARD_CALLS = calls_of(ShardService)


class ScopedLexicalIndex(Protocol):
    """A BM25 index that reports its collection statistics and scores with given ones
    (indexes/bm25_index.py's `Bm25Index`)."""

    def collection_stats(self, query: str, allowed: np.ndarray) -> CollectionStats: ...

    def scores_with(self, query: str, allowed: np.ndarray, stats: CollectionStats) -> np.ndarray: ...

    def postings(self, term: str) -> np.ndarray: ...

    def idf(self, df: int, n: int) -> float: ...

    def tokenize(self, text: str) -> list[str]: ...

    def top_k(self, query: str, allowed: np.ndarray, k: int, order: np.ndarray | None = None,
              stats: CollectionStats | None = None) -> tuple[np.ndarray, np.ndarray]: ...


class ShardVectors(Protocol):
    def top_k(self, vector: np.ndarray, allowed: np.ndarray, k: int,
              order: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]: ...

    def vectors(self, rows: np.ndarray) -> np.ndarray: ...


class ShardCatalog(TextScanner, Protocol):
    """A shard's catalog: exact scans, and the entity names of its rows (indexes/catalog.py)."""

    def entity_names(self) -> tuple[list[tuple[int, str]], list[tuple[int, str]], list[tuple[int, str]]]: ...

    def readable_document(self, doc_id: str, can_read: Callable[[tuple[str, ...]], bool]) -> Document | None: ...

    def document_acl(self, doc_id: str) -> tuple[str, ...] | None: ...


class LocalShard:
    """A shard in this process, over one snapshot's chunk table, BM25 index, dense index and
    catalog (exact scans and entity names). Its entity indexes are built on the first call
    that needs them (`memo`: a runtime's name-key memo, retrieval/entities.py `key_memo`).
    `version` is the live-write seq of the state these parts hold, stamped on its statistics."""

    def __init__(self, chunks: ChunkTable, bm25: ScopedLexicalIndex, dense: ShardVectors, catalog: ShardCatalog,
                 memo: Lru[str, str] | None = None, version: int = 0) -> None:
        self._chunks, self._bm25, self._dense, self._catalog = chunks, bm25, dense, catalog
        self.version = version
        self._exact = ExactRetriever(catalog, chunks)
        self._memo = memo
        self._entities: dict[EntityKind, EntityIndex] | None = None
        self._lock = Lock()

    def read(self, question: str, names: Sequence[str], access: AccessScope) -> Reading:
        allowed = self._chunks.mask(access, NO_FILTERS)

        def stats(text: str) -> CollectionStats:
            return replace(self._bm25.collection_stats(text, allowed), version=self.version)

        return Reading(stats(question), tuple(stats(n) for n in names),
                       self._entity_index("titles").sightings(question, allowed, self._chunks.doc_ids),
                       self._entity_index("names").sightings(question, allowed, self._chunks.doc_ids))

    def judge(self, question: str, vector: np.ndarray, chunk_ids: Sequence[str], access: AccessScope,
              stats: CollectionStats, texts: Sequence[str]) -> Judged:
        seen = self.sightings(texts, access, "titles")
        docs = list(dict.fromkeys(d for s in seen for named in s.named.values() for d in named.docs))
        return Judged(self.evidence(question, vector, chunk_ids, access, stats), tuple(seen),
                      self.doc_cosines(docs, vector, access) if docs else {})

    def bm25_stats(self, query: str, access: AccessScope, filters: Filters) -> CollectionStats:
        return replace(self._bm25.collection_stats(query, self._chunks.mask(access, filters)), version=self.version)

    def bm25(self, query: str, access: AccessScope, k: int, filters: Filters, stats: CollectionStats) -> list[Hit]:
        allowed = self._chunks.mask(access, filters)
        if stats.n == 0 or not allowed.any():
            return []
        rows, scores = self._bm25.top_k(query, allowed, k, self._chunks.tiebreak, stats)
        return [self._chunks.hit(r, s, "bm25", (("bm25", float(s)),)) for r, s in zip(rows, scores, strict=True)]

    def dense(self, vector: np.ndarray, access: AccessScope, k: int, filters: Filters) -> list[Hit]:
        allowed = self._chunks.mask(access, filters)
        if not allowed.any():
            return []
        rows, scores = self._dense.top_k(vector, allowed, k, self._chunks.tiebreak)
        return [self._chunks.hit(r, s, "dense", (("dense", float(s)),)) for r, s in zip(rows, scores, strict=True)]

    def exact(self, query: str, access: AccessScope, k: int, filters: Filters) -> list[Hit]:
        return self._exact.search(query, access, k, filters)

    def evidence(self, query: str, vector: np.ndarray, chunk_ids: Sequence[str], access: AccessScope,
                 stats: CollectionStats) -> dict[str, Evidence]:
        """As `Bm25Index.evidence` over every shard's readable rows (`stats`), for this shard's
        rows: scores from `scores_with`, term presence from the postings (as a live index's
        segments do, indexes/segments.py)."""
        allowed = self._chunks.mask(access, NO_FILTERS)
        held = [(c, r) for c in dict.fromkeys(chunk_ids) if (r := self._chunks.row_of(c)) is not None and allowed[r]]
        if not held:
            return {}
        rows = np.asarray([r for _, r in held], dtype=np.int64)
        dense = self._dense.vectors(rows) @ vector
        terms = [t for t in dict.fromkeys(self._bm25.tokenize(query)) if stats.df.get(t, 0)]
        if stats.n == 0 or not terms:
            zero = np.zeros(len(rows))
            bm25, qcov, tcov = zero, zero, zero
        else:
            bm25 = self._bm25.scores_with(query, allowed, stats)[rows].astype(np.float64)
            hit = np.vstack([np.isin(rows, self._bm25.postings(t)) for t in terms])
            idf = np.asarray([self._bm25.idf(stats.df[t], stats.n) for t in terms])
            qcov, tcov = (idf @ hit) / (float(idf.sum()) or 1.0), hit.sum(axis=0) / len(terms)
        return {c: (float(bm25[j]), float(qcov[j]), float(tcov[j]), float(dense[j])) for j, (c, _) in enumerate(held)}

    def moments(self, access: AccessScope, readable: int) -> Moments:
        rows = np.flatnonzero(self._chunks.mask(access, NO_FILTERS))
        return moments(self._dense, background_rows(rows, self._chunks.sample_keys, readable))

    def sightings(self, texts: Sequence[str], access: AccessScope, kind: EntityKind) -> list[Sightings]:
        index = self._entity_index(kind)
        allowed = self._chunks.mask(access, NO_FILTERS)
        return [index.sightings(text, allowed, self._chunks.doc_ids) for text in texts]

    def doc_cosines(self, doc_ids: Sequence[str], vector: np.ndarray, access: AccessScope) -> dict[str, float]:
        return best_cosines(self._chunks, self._dense, self._chunks.mask(access, NO_FILTERS), doc_ids, vector)

    def document(self, doc_id: str, access: AccessScope) -> Document | None:
        return self._catalog.readable_document(doc_id, access.can_read)

    def document_acl(self, doc_id: str) -> tuple[str, ...] | None:
        return self._catalog.document_acl(doc_id)

    def _entity_index(self, kind: EntityKind) -> EntityIndex:
        with self._lock:
            if self._entities is None:
                titles, title_ids, values = self._catalog.entity_names()
                self._entities = {"titles": EntityIndex.build(titles, title_ids, self._chunks.doc_ids, self._memo),
                                  "names": EntityIndex.build(values, memo=self._memo)}
            return self._entities[kind]
