"""Extraction in worker processes: the same reading as in process, a time and memory budget
per file that ends in a typed bad file, and shares of the pool decided before any work."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from benchmarks.hostile_files import hostile_files
from indexes.extract.html_text import extract_html
from indexes.extract.record import BadFile
from indexes.extract.sandbox import Budget, ExtractorPool
from retrieval.errors import RateLimited
from tests.conftest import wait_until

PAGE = (b"<html><head><title>Pumps</title></head><body><h1>Pumps</h1><p>Bleed the line first.</p>"
        b"<h2>Seals</h2><p>Replace the seal kit PK-7.</p></body></html>")


def _hostile(name: str) -> bytes:
    return next(data for n, _, data in hostile_files() if n == name)


@pytest.fixture
def pool():
    pool = ExtractorPool(workers=1, per_owner=1, budget=Budget(seconds=1.0, memory_bytes=256 * 1024 * 1024))
    yield pool
    pool.close()


def test_a_worker_reads_a_file_exactly_as_the_process_itself_does(pool):
    assert pool.extract(PAGE, "html") == extract_html(PAGE)


def test_a_file_past_its_time_budget_is_too_slow_and_the_next_file_gets_a_fresh_worker(pool):
    with pytest.raises(BadFile) as err:
        pool.extract(_hostile("paragraph_flood"), "docx")  # seconds of parsing; the budget is one
    assert err.value.reason in ("too_slow", "too_large", "corrupt")
    killed = pool._all[0].proc
    assert killed is None or killed.poll() is None  # a killed worker is not kept
    assert pool.extract(PAGE, "html").title == "Pumps"


def test_a_file_past_its_memory_budget_is_a_bad_file_not_the_callers_memory():
    small = ExtractorPool(workers=1, per_owner=1, budget=Budget(seconds=60.0, memory_bytes=96 * 1024 * 1024))
    try:
        with pytest.raises(BadFile) as err:
            small.extract(_hostile("paragraph_flood"), "docx")
        assert err.value.reason in ("too_large", "corrupt"), err.value.message
        assert small.extract(PAGE, "html").title == "Pumps"
    finally:
        small.close()


def test_one_owner_over_its_share_and_files_past_the_waiting_ones_are_turned_away_before_any_work():
    pool = ExtractorPool(workers=1, per_owner=1, budget=Budget(seconds=120.0))
    pool.extract(PAGE, "html")
    worker = pool._all[0].proc
    os.kill(worker.pid, signal.SIGSTOP)  # the worker holds the next file until it is continued
    try:
        first = threading.Thread(target=lambda: pool.extract(PAGE, "html", owner="mallory"))
        first.start()
        wait_until(lambda: pool.busy("mallory") == 1 and not pool._idle, "the first file in the worker")
        with pytest.raises(RateLimited):
            pool.extract(PAGE, "html", owner="mallory")  # its share is one file
        waiting = threading.Thread(target=lambda: pool.extract(PAGE, "html", owner="olga"))
        waiting.start()
        wait_until(lambda: pool._waiting == 1, "a second owner's file waiting for the worker")
        with pytest.raises(RateLimited):
            pool.extract(PAGE, "html", owner="trent")  # one worker, and one file waits already
    finally:
        os.kill(worker.pid, signal.SIGCONT)
    first.join()
    waiting.join()
    assert pool.busy("mallory") == pool.busy("olga") == 0
    pool.close()


def test_closing_the_pool_leaves_no_worker_process():
    pool = ExtractorPool(workers=2, per_owner=2)
    pool.extract(PAGE, "html")
    pids = [w.proc.pid for w in pool._all if w.proc is not None]
    assert pids
    pool.close()
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
