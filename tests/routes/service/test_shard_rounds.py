"""How many calls a question costs each shard, and which of them overlap: a front's latency is
its rounds of shard calls. Real shards of the mini corpus in this process, behind a counting
stand-in for the network; the calls each question makes are counted per shard and method."""

from __future__ import annotations

import threading
from datetime import date

import pytest

from indexes.shards import build_shards, load_cluster
from retrieval.limits import Limits
from retrieval.shard import LocalShard
from retrieval.text import name_words
from retrieval.types import Principal
from routes.service.resources import Resources
from routes.service.settings import Settings
from routes.service.sharded import open_sharded
from tests.conftest import MINI

ROOT = Principal("root", frozenset({"admin"}))
LIMITS = Limits(call_timeout_ms=60000, max_deadline_ms=120000)
# one-attempt hybrid questions with one and with two name words
QUESTIONS = ("How often are Carrier webhooks retried by the Tracking gateway?", "What caused the Routing engine memory leak?",
             "How many requests per minute does the Dispatch API allow?")
# Per shard, a first hybrid attempt and its grading: reading the question (statistics of its
# text and name words, both kinds of sightings), BM25 scores and dense hits (side by side), and
# judging the context (the hits' evidence, the title sightings of the question and each passage,
# the cosines of the documents they name); plus at most one exact scan for a qualifier.
CALL_BUDGET = 5


class Counting:
    """A shard whose calls are counted by method; `dense` waits (up to 30 s) for this shard's
    `bm25` to start, recording whether it did: proof that the two sides of a hybrid call run
    at once, whatever the machine's speed."""

    def __init__(self, shard: LocalShard) -> None:
        self._shard = shard
        self.calls: dict[str, int] = {}
        self.bm25_started = threading.Event()
        self.dense_saw_bm25: list[bool] = []
        self._lock = threading.Lock()

    def __getattr__(self, name: str):
        method = getattr(self._shard, name)

        def call(*args, **kwargs):
            with self._lock:
                self.calls[name] = self.calls.get(name, 0) + 1
            if name == "bm25":
                self.bm25_started.set()
            if name == "dense":
                self.dense_saw_bm25.append(self.bm25_started.wait(30))
            return method(*args, **kwargs)

        return call

    def reset(self) -> None:
        self.calls = {}
        self.bm25_started.clear()
        self.dense_saw_bm25 = []


@pytest.fixture(scope="module")
def front(tmp_path_factory, embedder):
    index = tmp_path_factory.mktemp("mini-2-shards-rounds")
    build_shards([MINI], index, embedder, 2)
    settings = Settings()
    resources = Resources.open(settings)
    _, snapshots = load_cluster(index, embedder)
    shards = [Counting(LocalShard(s.chunks, s.bm25, s.dense, s.catalog, resources.name_keys)) for s in snapshots]
    view = open_sharded(index, shards, embedder, resources, settings, resources.shard_calls, LIMITS, date(2025, 11, 1))
    yield view, shards
    view.close()
    resources.shutdown()
    for s in snapshots:
        s.close()


@pytest.mark.parametrize("question", QUESTIONS)
def test_a_first_hybrid_attempt_costs_each_shard_a_fixed_number_of_calls_whatever_its_names(front, question):
    view, shards = front
    view.query(QUESTIONS[0], ROOT, deadline_ms=60000)  # the scope's background, once per scope
    for s in shards:
        s.reset()
    result = view.query(question, ROOT, deadline_ms=60000)
    assert result.decision.chosen == "hybrid" and len(result.attempts) == 1, result.attempts
    assert len(name_words(question)) >= 1
    for s in shards:
        assert sum(s.calls.values()) <= CALL_BUDGET, s.calls
        # the question's statistics and sightings are read once, in one call; the context judged in one
        assert s.calls.get("read") == 1 and s.calls.get("judge") == 1, s.calls
        assert not {"bm25_stats", "sightings", "evidence", "doc_cosines"} & set(s.calls), s.calls


def test_the_dense_side_of_a_hybrid_call_runs_beside_its_bm25_side(front):
    view, shards = front
    for s in shards:
        s.reset()
    view.query(QUESTIONS[1], ROOT, deadline_ms=60000)
    assert all(s.dense_saw_bm25 == [True] for s in shards), [s.dense_saw_bm25 for s in shards]


def test_outside_a_question_nothing_is_remembered(front):
    view, shards = front
    access = ROOT.access_scope()
    for s in shards:
        s.reset()
    view.deps.signals.term_stats(QUESTIONS[0], access)
    view.deps.signals.term_stats(QUESTIONS[0], access)
    assert all(s.calls == {"bm25_stats": 2} for s in shards), [s.calls for s in shards]
