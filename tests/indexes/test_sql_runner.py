"""The statement runner's slots under a flood: the real DuckDB, the real runner and guard."""

from __future__ import annotations

import threading
import time

import pytest

from indexes.catalog import Catalog
from indexes.fair_slots import FairSlots
from indexes.snapshot_load import current_snapshot_path
from indexes.sql_runner import SqlRunner
from retrieval.errors import RetrievalError
from retrieval.retrievers.sql import SqlLimits, SqlRetriever
from retrieval.types import Principal

MALLORY = Principal("mallory", ("sre",), frozenset({"query", "sql"}))
OLGA = Principal("olga", ("sre",), frozenset({"query", "sql"}))
# 120^5 rows to count: it runs until the time limit interrupts it.
HOSTILE = "SELECT count(*) FROM incidents a, incidents b, incidents c, incidents d, incidents e"
SIMPLE = "SELECT count(*) FROM incidents"
PATIENCE_S = 120.0  # for the test's own waits, never asserted on


@pytest.mark.slow
def test_a_key_looping_slow_statements_in_eight_loops_never_keeps_another_keys_simple_statements_waiting(
        tables_index, threads):
    catalog = Catalog(current_snapshot_path(tables_index) / "catalog.duckdb")
    slots = FairSlots(2)  # the server's default
    runner = SqlRunner(catalog, watchdogs=threads, slots=slots)
    sql = SqlRetriever(runner, SqlLimits(timeout_s=3.0), builder=threads)
    # Olga's statements get a third of that time: were they to wait for one of mallory's slots
    # (as they would behind a plain semaphore), some would time out waiting.
    quick = SqlRetriever(runner, SqlLimits(timeout_s=1.0), builder=threads)
    stop, lock = threading.Event(), threading.Lock()
    flood: list[str] = []  # the outcome of each of mallory's statements

    def loop() -> None:
        while not stop.is_set():
            try:
                sql.run_statement(HOSTILE, MALLORY)
                outcome = "rows"
            except RetrievalError as e:
                outcome = e.code
            with lock:
                flood.append(outcome)

    def timed_out() -> int:
        with lock:
            return flood.count("retrieval_timeout")

    loops = [threading.Thread(target=loop, daemon=True) for _ in range(8)]
    for t in loops:
        t.start()
    try:
        patience = time.monotonic() + PATIENCE_S
        while not (slots.held("mallory") == 1 and slots.waiting("mallory") == 7):  # the flood holds all it may
            assert time.monotonic() < patience, "the flood never filled its share"
            stop.wait(0.005)
        before, served, alongside = timed_out(), 0, 0
        # Olga's statements until at least two of mallory's were stopped by the time limit meanwhile.
        while served < 20 or timed_out() < before + 2:
            assert time.monotonic() < patience, "the flood stopped making progress"
            flood_running = slots.held("mallory") == 1
            assert quick.run_statement(SIMPLE, OLGA).rows == ((120,),)  # never busy, never timed out
            served += 1
            alongside += flood_running and slots.held("mallory") == 1
        assert all(t.is_alive() for t in loops)  # the flood ran all along
        assert alongside > 0  # olga was served while one of mallory's statements ran
    finally:
        stop.set()
        sql.close()  # closes the runner: interrupts mallory's statement; her waiting ones find it closed
        for t in loops:
            t.join(PATIENCE_S)
        catalog.close()
    assert set(flood) <= {"retrieval_timeout", "retrieval_unavailable"} and "retrieval_timeout" in flood
    assert slots.in_use == 0 and slots.waiting() == 0

