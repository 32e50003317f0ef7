"""The one list of routes: the router scores them, the rewriter switches among them, the
HTTP, tool and CLI enums (and so OpenAPI) are built from them, and the composition root builds
each route's retriever from its entry.

A route is a retriever the loop may choose. Text routes answer with passages through
`search(query, access, k, filters)`; the rows route (`sql`) answers with table rows
and is reached by the loop or `/v1/sql`, never by a plain search, because a search has no
question to translate. Adding a route is one entry here: its name, kind and builder.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING, Callable, Literal, Sequence

if TYPE_CHECKING:
    from concurrent.futures import Executor

    import numpy as np

    from retrieval.access import ChunkTable
    from retrieval.retrievers import Retriever
    from retrieval.retrievers.bm25 import Bm25Retriever, LexicalIndex
    from retrieval.retrievers.dense import DenseRetriever, VectorIndex
    from retrieval.retrievers.exact import TextScanner
    from retrieval.retrievers.hybrid import FusionParams
    from retrieval.retrievers.sql import SqlBackend, SqlLimits, SqlRetriever
    from retrieval.scatter import ShardedBm25, ShardedDense
    from retrieval.shard import Shard


@dataclass(frozen=True)
class SqlParts:
    """What the rows route is built from besides the snapshot: its backend, sizes (from the
    settings) and the threads its table profiles are built on. The composition root opens the
    backend (it holds database connections) and owns the threads; `open_backend` is called
    only when the route is built, not when one is reused."""

    open_backend: Callable[[], SqlBackend]
    limits: SqlLimits
    today: date | None  # resolves the relative dates of translated questions (None: the day of the call)
    profile_cache: int  # access scopes whose column profiles are kept
    profile_cache_bytes: int
    profiles: Executor  # runs the table profile builds, apart from the retriever threads


@dataclass(frozen=True)
class RetrieverParts:
    """Everything a route's builder may take: one snapshot's catalog, indexes and chunk table,
    the query encoder, the fusion parameters, the executor hybrid overlaps its dense side on
    (None: one after the other) and the SQL parts. Protocols, so retrieval/ imports no index."""

    chunks: ChunkTable
    catalog: TextScanner
    bm25: LexicalIndex
    dense: VectorIndex
    encode_query: Callable[[str], np.ndarray]
    fusion: FusionParams
    side: Executor | None
    sql: SqlParts


@dataclass(frozen=True)
class ShardParts:
    """What a route's retriever over a sharded index (retrieval/scatter.py) is built from: the
    shards, the query encoder (questions are encoded once, at the front), the fusion
    parameters and the executor the shards are called on at once (None: one after another)."""

    shards: Sequence[Shard]
    encode_query: Callable[[str], np.ndarray]
    fusion: FusionParams
    fan_out: Executor | None
    side: Executor | None = None  # the dense half of hybrid calls, beside the BM25 half (apart from `fan_out`)


# Each builder imports its retriever when it is called: the route list is read by the CLI and
# the router long before an index loads, and must not pull in numpy, sqlglot or DuckDB with it.
def _exact(parts: RetrieverParts) -> Retriever:
    from retrieval.retrievers.exact import ExactRetriever

    return ExactRetriever(parts.catalog, parts.chunks)


def _bm25(parts: RetrieverParts) -> Bm25Retriever:
    from retrieval.retrievers.bm25 import Bm25Retriever

    return Bm25Retriever(parts.bm25, parts.chunks)


def _dense(parts: RetrieverParts) -> DenseRetriever:
    from retrieval.retrievers.dense import DenseRetriever

    return DenseRetriever(parts.dense, parts.encode_query, parts.chunks)


def _hybrid(parts: RetrieverParts) -> Retriever:
    from retrieval.retrievers.hybrid import HybridRetriever

    return HybridRetriever(_bm25(parts), _dense(parts), parts.fusion, parts.side)


def _sql(parts: RetrieverParts) -> Retriever:
    return rows_route(parts.sql, parts.encode_query)


def rows_route(sql: SqlParts, encode_query: Callable[[str], np.ndarray]) -> SqlRetriever:
    """The rows route over the tables `sql` opens (one snapshot's, or a sharded index's
    tables shard's), its column meanings read with `encode_query`."""
    from retrieval.retrievers.sql import SqlRetriever
    from retrieval.sql.meaning import ColumnMeaning

    return SqlRetriever(sql.open_backend(), sql.limits, sql.today, sql.profile_cache, sql.profile_cache_bytes,
                        ColumnMeaning(encode_query), builder=sql.profiles)


def _scatter_exact(parts: ShardParts) -> Retriever:
    from retrieval.scatter import ShardedExact

    return ShardedExact(parts.shards, parts.fan_out)


def _scatter_bm25(parts: ShardParts) -> ShardedBm25:
    from retrieval.scatter import ShardedBm25

    return ShardedBm25(parts.shards, parts.fan_out)


def _scatter_dense(parts: ShardParts) -> ShardedDense:
    from retrieval.scatter import ShardedDense

    return ShardedDense(parts.shards, parts.encode_query, parts.fan_out)


def _scatter_hybrid(parts: ShardParts) -> Retriever:
    from retrieval.scatter import ShardedHybrid

    return ShardedHybrid(_scatter_bm25(parts), _scatter_dense(parts), parts.fusion, parts.side)


@dataclass(frozen=True)
class Route:
    name: str
    kind: Literal["text", "rows"]  # passages, or table rows
    build: Callable[[RetrieverParts], Retriever]  # its retriever over one snapshot
    scatter: Callable[[ShardParts], Retriever] | None = None  # over a sharded index's shards (None: not served there)
    fuses: frozenset[str] = frozenset()  # text routes whose evidence this one already covers
    literal: bool = False  # finds literal items (identifiers, phrases, patterns), not topics
    # asked for at least as many passages as the scope may read within the filters, it returns every one of them
    # (dense scans its allowed rows; bm25 returns only passages with a positive score): a list question's route
    enumerates: bool = False


REGISTRY: tuple[Route, ...] = (
    Route("exact", "text", _exact, _scatter_exact, literal=True),
    Route("bm25", "text", _bm25, _scatter_bm25),
    Route("dense", "text", _dense, _scatter_dense, enumerates=True),
    Route("hybrid", "text", _hybrid, _scatter_hybrid, fuses=frozenset({"bm25", "dense"}), enumerates=True),
    Route("sql", "rows", _sql),  # tables are not sharded: a front serves them from shard 00 (indexes/shards.py)
)

ROUTES: tuple[str, ...] = tuple(r.name for r in REGISTRY)  # the router's tie order: exact before hybrid
TEXT_ROUTES: tuple[str, ...] = tuple(r.name for r in REGISTRY if r.kind == "text")
SEARCH_ROUTES = TEXT_ROUTES  # what `search` (HTTP, tool, CLI) accepts by name
TOPIC_ROUTES: tuple[str, ...] = tuple(r.name for r in REGISTRY if r.kind == "text" and not r.literal)
ROW_ROUTES: tuple[str, ...] = tuple(r.name for r in REGISTRY if r.kind == "rows")
ENUMERATING_ROUTES: tuple[str, ...] = tuple(r.name for r in REGISTRY if r.enumerates)
FUSES: dict[str, frozenset[str]] = {r.name: r.fuses for r in REGISTRY if r.fuses}


def route_agrees(labeled: str, chosen: str | None) -> bool:
    """Does the chosen route answer a question labeled `labeled` (itself, or a fusion of it)?"""
    return chosen is not None and (chosen == labeled or labeled in FUSES.get(chosen, ()))
