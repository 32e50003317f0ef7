"""Retriever calls that outlive their timeout: cancelled when queued, abandoned when running,
and never allowed to hold the workers later questions need (bounded, typed when exhausted)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from typing import Iterator

import pytest

from retrieval.calls import CallPool, CallScope, threads_needed
from retrieval.errors import RetrievalUnavailable
from retrieval.loop import Budget, run_loop
from retrieval.types import Principal
from tests.conftest import PATIENCE_S, wait_until


@contextmanager
def call_pool(workers: int, spare: int) -> Iterator[CallPool]:
    """A CallPool on threads of its own, sized as the runtime sizes an engine's, and shut down
    as the engine shuts its down when it closes."""
    threads = ThreadPoolExecutor(threads_needed(workers, spare))
    try:
        yield CallPool(workers, spare, threads=threads)
    finally:
        threads.shutdown(wait=False, cancel_futures=True)


def hang(gate: threading.Event, ran: list | None = None) -> str:
    if ran is not None:
        ran.append(True)
    assert gate.wait(timeout=PATIENCE_S)
    return "late"


def test_abandoned_running_calls_give_their_worker_back():
    gate = threading.Event()
    with call_pool(workers=2, spare=2) as pool:
        try:
            running: list = []
            stuck = [pool.submit(hang, gate, running) for _ in range(2)]
            wait_until(lambda: len(running) == 2, "both calls running")  # abandoned while they run, not queued
            for f in stuck:
                pool.abandon(f)
            assert pool.abandoned == 2
            assert pool.submit(lambda: "fresh").result(timeout=PATIENCE_S) == "fresh"  # both workers were held, yet it runs
        finally:
            gate.set()


def test_each_view_counts_only_its_own_abandoned_calls_on_the_shared_pool():
    """A retired view waits for its own hung calls, not for another generation's."""
    gate = threading.Event()
    with call_pool(workers=2, spare=2) as pool:
        old, new = CallScope(pool), CallScope(pool)
        try:
            running: list = []
            stuck = new.submit(hang, gate, running)
            wait_until(lambda: running == [True], "the call running")
            new.abandon(stuck)
            assert (old.abandoned, new.abandoned, pool.abandoned) == (0, 1, 1)
            assert old.submit(lambda: "old").result(timeout=PATIENCE_S) == "old"
            gate.set()
            wait_until(lambda: not new.abandoned, "the hung call returning", poll=0.01)
            assert pool.abandoned == 0
        finally:
            gate.set()


def test_past_the_spare_threads_new_calls_are_refused_until_the_hung_ones_return():
    gate = threading.Event()
    with call_pool(workers=1, spare=2) as pool:
        try:
            running: list = []
            for n in range(3):  # the third takes a worker's thread: the spare ones are all held
                f = pool.submit(hang, gate, running)
                wait_until(lambda n=n: len(running) == n + 1, "the call running")
                pool.abandon(f)
            with pytest.raises(RetrievalUnavailable) as err:
                pool.submit(lambda: "x")
            assert err.value.retryable
            gate.set()
            wait_until(lambda: not pool.abandoned, "the hung calls returning", poll=0.01)
            assert pool.submit(lambda: "back").result(timeout=PATIENCE_S) == "back"
        finally:
            gate.set()


def test_a_queued_call_given_up_on_never_runs():
    gate, ran = threading.Event(), []
    with call_pool(workers=1, spare=1) as pool:
        try:
            running: list = []
            first = pool.submit(hang, gate, running)
            queued = pool.submit(hang, gate, ran)  # waits for the only worker
            wait_until(lambda: running == [True], "the first call running")
            pool.abandon(queued)
            gate.set()
            assert first.result(timeout=PATIENCE_S) == "late"
            queued.result(timeout=PATIENCE_S)
            assert ran == [] and pool.abandoned == 0
        finally:
            gate.set()


class Hung:
    def __init__(self, name: str, gate: threading.Event) -> None:
        self.name, self.gate = name, gate

    def search(self, *args):
        assert self.gate.wait(timeout=PATIENCE_S)
        return []


def test_hung_retriever_calls_cannot_starve_later_questions(engine):
    gate = threading.Event()
    with call_pool(workers=2, spare=2) as pool:
        deps = replace(engine.deps, calls=pool, retrievers=dict(engine.deps.retrievers, hybrid=Hung("hybrid", gate)))
        # a hung call times out after 2 s; the route after it has those 2 s too, far more than it needs anywhere
        budget = Budget(max_attempts=2, deadline_ms=30_000, call_timeout_ms=2000)
        try:
            for _ in range(2):  # each first attempt hangs on hybrid and is abandoned; the next route answers
                result = run_loop("how can I renew the key that signs authentication tokens", Principal("erin"), budget, deps)
                assert result.attempts[0].error == "retrieval_timeout" and result.attempts[1].error is None
            assert pool.abandoned == 2  # the spare threads carry them: every worker is free
            with pytest.raises(RetrievalUnavailable):  # a third hangs on a worker's thread; the next call is refused
                run_loop("how can I renew the key that signs authentication tokens", Principal("erin"), budget, deps)
            assert pool.abandoned == 3
            with pytest.raises(RetrievalUnavailable) as err:
                run_loop("carrier webhook retries", Principal("erin"), replace(budget, max_attempts=1),
                         replace(deps, retrievers=engine.deps.retrievers))
            # refused at once, not queued: a queued call would have timed out (retrieval_timeout),
            # and no call entered the pool to be abandoned
            assert err.value.retryable and [a["error"] for a in err.value.context["attempts"]] == ["retrieval_unavailable"]
            assert pool.abandoned == 3
        finally:
            gate.set()
        wait_until(lambda: not pool.abandoned, "the hung calls returning", poll=0.01)
        result = run_loop("carrier webhook retries", Principal("erin"), budget, replace(deps, retrievers=engine.deps.retrievers))
        assert result.attempts[0].error is None
