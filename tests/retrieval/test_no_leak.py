"""Differential no-leak test: asking as a principal gives the same outcome (status, gap
reason, returned ids) as asking an index from which every document that principal may
not read was removed. Run over the demo questions whose answer is private to others, once
in process and once with the hybrid route served by another process, which receives only
the caller's access scope and enforces it itself (tests/retrieval/remote_backend.py)."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from datetime import date

import pytest

from indexes.snapshot_build import BuildOptions, build_snapshot
from retrieval.types import Filters, Principal
from routes.service.view import open_view
from tests.conftest import DEMO, PATIENCE_S, write_readable_documents
from tests.retrieval.remote_backend import RemoteBackend

GROUPS = {"alice": ("sre",), "bob": ("finance",), "carol": ("security", "sre"), "dave": ("hr",), "erin": ()}
BAIT = [q for q in map(json.loads, (DEMO / "questions.jsonl").read_text().splitlines()) if "bait" in q["tags"]]


def outcome(result) -> tuple:
    return (result.status, result.gap.reason if result.gap else None, [h.doc_id for h in result.context],
            result.rows.rows if result.rows is not None else None)


@pytest.fixture(scope="module")
def reduced_engines(demo_index, embedder, tmp_path_factory):
    """One index per principal holding only the documents that principal may read."""
    engines = {}
    for pid, groups in GROUPS.items():
        docs = write_readable_documents(Principal(pid, groups), tmp_path_factory.mktemp(f"only-{pid}"))
        index = tmp_path_factory.mktemp(f"index-{pid}")
        build_snapshot([docs, DEMO / "tables"], index, embedder, BuildOptions(reuse_from=demo_index))
        engines[pid] = open_view(index, embedder, today=date(2025, 11, 1))
    yield engines
    for e in engines.values():
        e.close()


def test_there_are_enough_bait_questions():
    assert len(BAIT) >= 20


@pytest.mark.parametrize("q", BAIT, ids=[q["id"] for q in BAIT])
def test_private_evidence_of_others_is_undetectable(demo_engine, reduced_engines, q):
    principal = Principal(q["principal"], GROUPS[q["principal"]])
    full = demo_engine.query(q["question"], principal)
    alone = reduced_engines[q["principal"]].query(q["question"], principal)
    assert outcome(full) == outcome(alone), (
        [(a.plan.strategy, a.plan.route, a.grade and a.grade.to_json(), [h.doc_id for h in a.hits]) for a in full.attempts],
        [(a.plan.strategy, a.plan.route, a.grade and a.grade.to_json(), [h.doc_id for h in a.hits]) for a in alone.attempts],
    )
    forbidden = {t.split(":", 1)[1] for t in q["tags"] if t.startswith("forbidden:")}
    seen = {h.doc_id for a in full.attempts for h in a.hits}
    assert not forbidden & seen


REMOTE_ROUTE = "hybrid"  # the route the loop chooses for most of these questions


@pytest.fixture(scope="module")
def remote(demo_index, embedder):
    """(engine, client): an engine over the demo index whose loop sends every hybrid call to
    a server process that loaded the same snapshot itself; the server is killed afterwards."""
    engine = open_view(demo_index, embedder, today=date(2025, 11, 1))
    try:
        fusion = asdict(engine.retrievers[REMOTE_ROUTE].params)  # the same fusion as the local route
        with RemoteBackend(demo_index, REMOTE_ROUTE, fusion, PATIENCE_S) as client:
            engine.deps = replace(engine.deps, retrievers={**engine.deps.retrievers, REMOTE_ROUTE: client})
            yield engine, client
    finally:
        engine.close()


def sent_to(route: str, result) -> int:
    """Searches the loop dispatched on `route` (a decomposed plan sends one per part)."""
    return sum(len(a.plan.queries) for a in result.attempts if a.plan.route == route and not a.rejected)


@pytest.mark.parametrize("filters", [Filters(), Filters(sources=("runbooks", "incidents")),
                                     Filters(date_from=date(2025, 1, 1)), Filters(doc_ids=("note-finance-q3-2025-budget",))])
def test_the_remote_route_returns_exactly_the_local_hits_for_every_scope(remote, filters):
    """Same hits, scores, signals and order as the in-process retriever, for each principal's
    scope; the server counts each call and was sent the scope, never the principal."""
    engine, client = remote
    local = engine.retrievers[REMOTE_ROUTE]
    before = client.stats()["calls"]
    calls = 0
    for pid, groups in GROUPS.items():
        scope = Principal(pid, groups).access_scope()
        for query in ("Q3 2025 budget vs actuals", "how do I rotate the signing keys", "ledger lock timeout INC-2041"):
            assert client.search(query, scope, 8, filters) == local.search(query, scope, 8, filters), (pid, query)
            calls += 1
    stats = client.stats()
    assert stats["calls"] - before == calls
    sent = {tuple(Principal(p, g).access_scope().to_json()["tokens"]) for p, g in GROUPS.items()}
    assert sent <= set(map(tuple, stats["scopes"]))


def test_the_remote_differential_covers_at_least_four_principals():
    assert len({q["principal"] for q in BAIT}) >= 4


@pytest.mark.parametrize("q", BAIT, ids=[q["id"] for q in BAIT])
def test_private_evidence_of_others_is_undetectable_with_a_remote_route(remote, reduced_engines, q):
    """The differential above with the hybrid route in another process: the outcome is the one
    of an index without the documents the principal may not read, and every hybrid call the
    loop dispatched was served by the server (counted there)."""
    engine, client = remote
    principal = Principal(q["principal"], GROUPS[q["principal"]])
    before = client.stats()["calls"]
    full = engine.query(q["question"], principal)
    served = client.stats()["calls"] - before
    alone = reduced_engines[q["principal"]].query(q["question"], principal)
    assert outcome(full) == outcome(alone), (
        [(a.plan.strategy, a.plan.route, a.grade and a.grade.to_json(), [h.doc_id for h in a.hits]) for a in full.attempts],
        [(a.plan.strategy, a.plan.route, a.grade and a.grade.to_json(), [h.doc_id for h in a.hits]) for a in alone.attempts],
    )
    forbidden = {t.split(":", 1)[1] for t in q["tags"] if t.startswith("forbidden:")}
    assert not forbidden & {h.doc_id for a in full.attempts for h in a.hits}
    if all(a.error is None for a in full.attempts):  # a call given up on may reach the server after the answer
        assert served == sent_to(REMOTE_ROUTE, full)


def test_the_loop_answers_the_same_with_the_route_in_another_process(remote, demo_engine):
    """For four principals, a question the router sends to hybrid is answered by the server,
    with the context (ids, scores, order) the in-process engine gives."""
    engine, client = remote
    question = "how do I rotate the signing keys after a leak?"
    for pid in ("alice", "bob", "carol", "erin"):
        principal = Principal(pid, GROUPS[pid])
        before = client.stats()["calls"]
        result = engine.query(question, principal, deadline_ms=30000)
        assert result.attempts[0].plan.route == REMOTE_ROUTE
        assert client.stats()["calls"] - before == sent_to(REMOTE_ROUTE, result) > 0
        local = demo_engine.query(question, principal, deadline_ms=30000)
        assert [(h.chunk_id, h.score) for h in result.context] == [(h.chunk_id, h.score) for h in local.context], pid
        assert (result.status, result.stop_reason) == (local.status, local.stop_reason)
