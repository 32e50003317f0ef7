"""The loop over shards answers what one node answers: the demo corpus, and a SciFact sample
with ACLs, ingested once as one node and once at 2 and 3 shards (the real model, real
snapshots, shards in this process), 4 principals x 30 questions through the whole loop: the same status, gap reason, stop
reason, route, attempts, context ids in the same order with scores within 1e-4, and rows.
The Ray deployment of the same shards is checked against the same oracle in
tests/system/cluster_in_netns.py."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from datetime import date

import pytest

from indexes.shards import build_shards, load_cluster
from indexes.snapshot_build import BuildOptions
from retrieval.limits import Limits
from retrieval.shard import LocalShard
from retrieval.types import NO_FILTERS, Principal
from routes.service.resources import Resources
from routes.service.settings import Settings
from routes.service.sharded import open_sharded
from routes.service.view import open_view
from tests.conftest import DEMO

TODAY = date(2025, 11, 1)
# Generous budgets on both sides: a busy machine must not make one side stop on its deadline.
LIMITS = Limits(call_timeout_ms=60000, max_deadline_ms=120000)
PRINCIPALS = (Principal("alice", frozenset({"sre"})), Principal("bob", frozenset({"finance"})), Principal("erin"),
              Principal("root", frozenset({"admin"})))
LABELED = [json.loads(line) for line in (DEMO / "questions.jsonl").read_text().splitlines()]
# 6 questions of each labeled route (exact, bm25, dense, hybrid, sql), in file order
QUESTIONS = [q["question"] for route in ("exact", "bm25", "dense", "hybrid", "sql")
             for q in [x for x in LABELED if x["route"] == route][:6]]


def outcome(result) -> dict:
    """What a caller sees of a loop result, scores aside (compared within a tolerance)."""
    return {"status": result.status, "gap": result.gap.reason if result.gap else None, "stop": result.stop_reason,
            "route": result.decision.chosen, "context": [h.chunk_id for h in result.context],
            "rows": result.rows.rows if result.rows is not None else None,
            "attempts": [(a.plan.route, a.plan.strategy, a.plan.query_text(), len(a.hits), a.error,
                          a.grade.sufficient if a.grade else None, a.grade.reason if a.grade else None)
                         for a in result.attempts],
            "constraints": result.constraints.labels()}


def same(expected, got, what: str) -> None:
    assert outcome(got) == outcome(expected), what
    for e, g in zip(expected.context, got.context, strict=True):
        assert abs(e.score - g.score) <= 1e-4, (what, e.chunk_id, e.score, g.score)
    for e, g in zip(expected.attempts, got.attempts, strict=True):
        if e.grade and g.grade and e.grade.p_sufficient is not None:
            assert abs(e.grade.p_sufficient - g.grade.p_sufficient) <= 1e-4, what


@pytest.fixture(scope="module", params=["demo", "scifact"])
def corpus(request, demo_index):
    """(name, sources, questions, single-node index) of the demo, or of a SciFact sample with
    ACLs (tests/conftest.py), a corpus the sharded code was not written against."""
    if request.param == "demo":
        return "demo", [DEMO / "docs", DEMO / "tables"], QUESTIONS, demo_index
    source, claims, index = request.getfixturevalue("scifact_sample")  # only here: it skips without the dataset
    return "scifact", [source], claims, index


@pytest.fixture(scope="module")
def single(corpus, embedder):
    view = open_view(corpus[3], embedder, limits=LIMITS, today=TODAY)
    yield view
    view.close()


@pytest.fixture(scope="module", params=[2, 3])
def sharded(request, corpus, tmp_path_factory, embedder):
    name, sources, _, single_index = corpus
    index = tmp_path_factory.mktemp(f"{name}-{request.param}-shards-loop")
    build_shards(sources, index, embedder, request.param, BuildOptions(reuse_from=single_index))
    settings = Settings()
    resources = Resources.open(settings)
    manifest, snapshots = load_cluster(index, embedder)
    shards = [LocalShard(s.chunks, s.bm25, s.dense, s.catalog, resources.name_keys) for s in snapshots]
    fan_out = ThreadPoolExecutor(len(shards), thread_name_prefix="test-fan-out")
    view = open_sharded(index, shards, embedder, resources, settings, fan_out, LIMITS, TODAY)
    assert (view.deps.tables is not None) == (name == "demo")  # the demo's tables, from shard 00's catalog alone
    yield f"{name} at {manifest['shards']} shards", view
    view.close()
    fan_out.shutdown()
    resources.shutdown()
    for s in snapshots:
        s.close()


def test_the_loop_over_shards_answers_what_the_single_node_answers(corpus, single, sharded):
    what, view = sharded
    seen = {"answer_context": 0, "evidence_gap": 0}
    routes = set()
    for principal in PRINCIPALS:
        for question in corpus[2]:
            expected = single.query(question, principal, deadline_ms=LIMITS.max_deadline_ms, wait_for_tables=True)
            got = view.query(question, principal, deadline_ms=LIMITS.max_deadline_ms, wait_for_tables=True)
            same(expected, got, f"{what}, {principal.id}: {question}")
            seen[expected.status] += 1
            routes.add(expected.decision.chosen)
    # not a comparison of one kind of answer: both outcomes occur, and on the demo several routes (tables too)
    assert seen["answer_context"] >= 10 and seen["evidence_gap"] >= 5, seen
    if corpus[0] == "demo":
        assert {"sql", "hybrid", "exact"} <= routes, routes


def test_reading_a_question_over_shards_equals_the_single_node(corpus, single, sharded):
    """Constraints (entities linked over every shard's titles and names), term statistics and
    the route, for every principal: what routing sees is the single node's."""
    _, view = sharded
    for principal in PRINCIPALS:
        for question in corpus[2]:
            e, g = single.understand(question, principal), view.understand(question, principal)
            assert (g.constraints, g.inputs.term_stats, g.decision.chosen, g.absent) == \
                (e.constraints, e.inputs.term_stats, e.decision.chosen, e.absent), (principal.id, question)


def test_bridges_linked_documents_and_signals_over_shards_equal_the_single_node(corpus, single, sharded):
    _, view = sharded
    linked = 0
    for principal in PRINCIPALS:
        access = principal.access_scope()
        for question in corpus[2]:
            hits = single.retrievers["hybrid"].search(question, access, 8, NO_FILTERS)
            assert view.deps.linker.bridge_docs(hits, question, access) == single.deps.linker.bridge_docs(hits, question, access)
            e = single.deps.linker.linked_docs(hits, question, access)
            g = view.deps.linker.linked_docs(hits, question, access)
            assert [(d, named) for d, _, named in g] == [(d, named) for d, _, named in e], (principal.id, question)
            assert all(abs(a[1] - b[1]) <= 1e-5 for a, b in zip(e, g, strict=True))
            linked += len(e)
            ea = single.deps.signals.annotate(question, hits, access)
            ga = view.deps.signals.annotate(question, hits, access)
            for x, y in zip(ea, ga, strict=True):
                xs, ys = dict(x.signals), dict(y.signals)
                assert xs.keys() == ys.keys()
                assert all(abs(xs[k] - ys[k]) <= 1e-4 for k in xs), (principal.id, question, xs, ys)
    if corpus[0] == "demo":
        assert linked > 0  # some passages name other readable documents


def test_a_front_refuses_policy_plug_ins_it_would_otherwise_leave_out(tmp_path, embedder):
    """Plug-ins are built over one node's index view: a front says so instead of running without them."""
    from retrieval.errors import InvalidRequest

    settings = Settings(grader="answer")
    resources = Resources.open(settings)
    try:
        with pytest.raises(InvalidRequest, match="QUARRY_GRADER"):
            open_sharded(tmp_path, [], embedder, resources, settings)
    finally:
        resources.shutdown()
