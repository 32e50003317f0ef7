"""The threads retriever calls run on, and what happens to a call that outlives its timeout.

Python cannot stop a running thread, so a hung call (a stuck database, a slow plug-in) keeps
its thread. Without care, a few of them hold every worker and each later question times out
in the queue. Here a call the loop gives up on is *abandoned*: a queued one is cancelled
outright, a running one gives its slot back at once and runs on, on a spare thread, until it
returns. Up to `spare` abandoned calls leave every worker free; beyond that, new calls are refused
with a typed, retryable error instead of queueing behind them.

The threads themselves belong to the runtime (routes/service/resources.py), which sizes them with
`threads_needed` and shuts them down when it closes.
"""

from __future__ import annotations

import threading
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any, Callable

from retrieval.question_scope import carried
from retrieval.errors import RetrievalUnavailable


@dataclass
class _Call:
    started: bool = False  # holds a slot and runs (or ran) its function
    released: bool = False  # its slot was given back
    dropped: bool = False  # abandoned before it started: it must not run


def threads_needed(workers: int, spare: int | None = None) -> int:
    """The threads a CallPool of `workers` and `spare` (None: as many as workers) runs on."""
    return workers + (workers if spare is None else spare)


class CallPool:
    """At most `workers` retriever calls run at once; `spare` more threads carry calls that
    outlived their timeout (see the module docstring). `threads` runs them: an executor of
    at least `threads_needed(workers, spare)` threads that nothing else uses, owned by the
    caller."""

    def __init__(self, workers: int, spare: int | None = None, *, threads: Executor) -> None:
        self.workers = workers
        self.spare = workers if spare is None else spare
        self._threads = threads
        self._slots = threading.Semaphore(workers)
        self._lock = threading.Lock()
        self._calls: dict[Future[Any], _Call] = {}
        self._abandoned: set[Future[Any]] = set()

    @property
    def abandoned(self) -> int:
        """Calls given up on that still run."""
        with self._lock:
            return len(self._abandoned)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Run `fn(*args)` on a worker, with the caller's context (its question's deadline)."""
        fn = carried(fn)
        with self._lock:
            if len(self._abandoned) > self.spare:  # the spare threads are all taken: a call would queue
                raise RetrievalUnavailable(f"{len(self._abandoned)} retriever calls that timed out are still running; "
                                           "retry shortly")
        call = _Call()

        def run() -> Any:
            self._slots.acquire()
            with self._lock:
                if call.dropped:
                    call.released = True
                    self._slots.release()
                    return None
                call.started = True
            try:
                return fn(*args)
            finally:
                self._release(call)

        future = self._threads.submit(run)
        with self._lock:
            self._calls[future] = call
        future.add_done_callback(self._forget)
        return future

    def abandon(self, future: Future[Any]) -> bool:
        """The caller stopped waiting for this call: cancel it if it has not started, else
        give its slot back so it cannot hold a worker the next questions need. Whether it
        runs on, abandoned."""
        if future.cancel():
            return False
        with self._lock:
            call = self._calls.get(future)
            if call is None or future.done():
                return False
            if not call.started:
                call.dropped = True
                return False
            self._abandoned.add(future)
        self._release(call)
        return True

    def _release(self, call: _Call) -> None:
        with self._lock:
            if call.released:
                return
            call.released = True
        self._slots.release()

    def _forget(self, future: Future[Any]) -> None:
        with self._lock:
            self._calls.pop(future, None)
            self._abandoned.discard(future)


class CallScope:
    """One index view's calls on a CallPool the runtime shares among views: the bound and the
    threads are the pool's, the abandoned calls counted are the view's own, so a retired
    view waits only for the calls that may still read it."""

    def __init__(self, pool: CallPool) -> None:
        self.pool = pool
        self._lock = threading.Lock()
        self._abandoned: set[Future[Any]] = set()

    @property
    def workers(self) -> int:
        return self.pool.workers

    @property
    def spare(self) -> int:
        return self.pool.spare

    @property
    def abandoned(self) -> int:
        """This view's calls given up on that still run."""
        with self._lock:
            return len(self._abandoned)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        return self.pool.submit(fn, *args)

    def abandon(self, future: Future[Any]) -> None:
        if not self.pool.abandon(future):
            return
        with self._lock:
            self._abandoned.add(future)
        future.add_done_callback(self._forget)  # runs at once if it ended meanwhile

    def _forget(self, future: Future[Any]) -> None:
        with self._lock:
            self._abandoned.discard(future)
