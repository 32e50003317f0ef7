"""Scatter-gather gives the single node's answers: the demo corpus ingested once as one node and
once at 2 and 3 shards (the real embedding model, real snapshots), 4 principals x 30 questions,
bm25, dense and exact through the merge against the single-node retrievers: the same chunk ids
in the same order, scores within 1e-4. In process; the shards are what a Ray deployment will
call (routes/cluster/)."""

from __future__ import annotations

import json

import pytest

from indexes.shards import build_shards, load_cluster
from indexes.snapshot_build import BuildOptions
from indexes.snapshot_load import load_snapshot
from retrieval.errors import ServerFault
from retrieval.retrievers.bm25 import Bm25Retriever
from retrieval.retrievers.dense import DenseRetriever
from retrieval.retrievers.exact import ExactRetriever
from retrieval.retrievers.hybrid import FusionParams, HybridRetriever
from retrieval.scatter import ShardedBm25, ShardedDense, ShardedExact, ShardedHybrid, merge_hits
from retrieval.shard import LocalShard
from retrieval.types import NO_FILTERS, Filters, Hit, Principal
from tests.conftest import DEMO

PRINCIPALS = (
    Principal("alice", frozenset({"sre"})),
    Principal("bob", frozenset({"finance"})),
    Principal("erin"),
    Principal("root", frozenset({"admin"})),
)
QUESTIONS = [json.loads(line)["question"] for line in (DEMO / "questions.jsonl").read_text().splitlines()[:30]]
K = 10


@pytest.fixture(scope="module")
def single(demo_index, embedder):
    snap = load_snapshot(demo_index, embedder)
    routes = {"bm25": Bm25Retriever(snap.bm25, snap.chunks),
              "dense": DenseRetriever(snap.dense, embedder.encode_query, snap.chunks),
              "exact": ExactRetriever(snap.catalog, snap.chunks)}
    for method in ("rrf", "zscore"):
        routes[f"hybrid-{method}"] = HybridRetriever(routes["bm25"], routes["dense"], FusionParams(method=method))
    yield routes
    snap.close()


@pytest.fixture(scope="module", params=[2, 3])
def sharded(request, tmp_path_factory, embedder, demo_index):
    """The demo at 2 shards embeds every passage again, so the shards' vectors are their own;
    at 3 shards it reuses the single node's vectors (embedding the corpus once more would test
    nothing the 2 shards do not)."""
    index = tmp_path_factory.mktemp(f"demo-{request.param}-shards")
    build_shards([DEMO / "docs", DEMO / "tables"], index, embedder, request.param,
                 BuildOptions(reuse_from=demo_index) if request.param == 3 else None)
    manifest, snapshots = load_cluster(index, embedder)
    shards = [LocalShard(s.chunks, s.bm25, s.dense, s.catalog) for s in snapshots]
    routes = {"bm25": ShardedBm25(shards), "dense": ShardedDense(shards, embedder.encode_query),
              "exact": ShardedExact(shards)}
    for method in ("rrf", "zscore"):
        routes[f"hybrid-{method}"] = ShardedHybrid(routes["bm25"], routes["dense"], FusionParams(method=method))
    yield manifest, snapshots, routes
    for s in snapshots:
        s.close()


def _same(expected: list[Hit], got: list[Hit], what: str) -> None:
    assert [h.chunk_id for h in got] == [h.chunk_id for h in expected], what
    for e, g in zip(expected, got, strict=True):
        assert abs(e.score - g.score) <= 1e-4, (what, e.chunk_id, e.score, g.score)
        assert (g.doc_id, g.text, g.start, g.end, g.title) == (e.doc_id, e.text, e.start, e.end, e.title), what


@pytest.mark.parametrize("route", ["bm25", "dense", "exact", "hybrid-rrf", "hybrid-zscore"])
def test_sharded_retrieval_equals_the_single_node(single, sharded, route):
    manifest, snapshots, routes = sharded
    assert all(len(s.chunks) for s in snapshots)  # every shard holds part of the corpus
    found = 0
    for principal in PRINCIPALS:
        access = principal.access_scope()
        for question in QUESTIONS:
            expected = single[route].search(question, access, K, NO_FILTERS)
            got = routes[route].search(question, access, K, NO_FILTERS)
            _same(expected, got, f"{manifest['shards']} shards, {route}, {principal.id}: {question}")
            found += len(expected)
    assert found > (0 if route == "exact" else 4 * 30 * K // 2)  # the comparison is not of empty lists


def test_sharded_bm25_equals_the_single_node_under_a_filter(single, sharded):
    _, _, routes = sharded
    filters = Filters(sources=("runbooks", "incidents"))
    found = 0
    for principal in PRINCIPALS:
        for question in QUESTIONS[:10]:
            expected = single["bm25"].search(question, principal.access_scope(), K, filters)
            _same(expected, routes["bm25"].search(question, principal.access_scope(), K, filters), question)
            found += len(expected)
    assert found


def test_tables_live_in_shard_zero_only(sharded):
    manifest, snapshots, _ = sharded
    assert snapshots[0].catalog.tables() and manifest["counts"]["tables"] == len(snapshots[0].catalog.tables())
    assert all(not s.catalog.tables() for s in snapshots[1:])


def test_merge_orders_equal_scores_by_chunk_id_and_refuses_overlapping_shards():
    def hit(chunk_id: str, score: float) -> Hit:
        return Hit(chunk_id, chunk_id.split("#")[0], "", score, ("bm25",), 0, 0)

    merged = merge_hits([[hit("b#0", 2.0), hit("d#0", 1.0)], [hit("a#1", 1.0), hit("c#0", 2.0)]], 3)
    assert [h.chunk_id for h in merged] == ["b#0", "c#0", "a#1"]
    with pytest.raises(ServerFault):
        merge_hits([[hit("a#0", 1.0)], [hit("a#0", 1.0)]], 3)
