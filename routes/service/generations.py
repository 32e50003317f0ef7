"""Served generations: which engine answers new requests, and when a replaced one is closed.

A request leases the generation that is current when it starts (`lease`) and keeps that
engine for its whole life, however long it runs and whatever is installed meanwhile. `install`
makes a new engine current for the requests that start after it; the one it replaces is
*retired*: it takes no new request, and once its last lease is returned a background thread
closes it. Closing also waits, up to `grace_s`, for retriever calls the loop gave up on and
that still run on its threads, since they read its catalog. Closing releases the snapshot's
serving lease (indexes/snapshot_lease.py), so an ingest may then prune that snapshot.

An engine the app was handed (`owned=False`, a test's) is never closed here: its owner
closes it. Generation numbers start at 1 and grow by one per install, per process.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

from retrieval.errors import RetrievalUnavailable
from routes.service.sharded import ShardedView
from routes.service.view import IndexView

View = IndexView | ShardedView  # what one generation serves: one node's index, or a sharded one's front

log = logging.getLogger("quarry.reload")


@dataclass(eq=False)
class Generation:
    """One served engine: its number, its snapshot, and who still holds it."""

    number: int
    engine: View
    owned: bool
    leases: int = 0
    retired: bool = False
    closed: threading.Event = field(default_factory=threading.Event)  # set once its engine is closed (or let go)

    def node(self) -> IndexView:
        """The engine as one node's view: what the writer and the reloader work on (they
        follow one node's index, never a sharded front's)."""
        if not isinstance(self.engine, IndexView):
            raise RuntimeError("a sharded index's front has no write-ahead log or CURRENT of its own")
        return self.engine

    @property
    def snapshot(self) -> str:
        return str(self.engine.manifest["snapshot"])

    def describe(self) -> dict[str, Any]:
        """What /readyz shows an admin key."""
        manifest = self.engine.manifest
        return {"generation": self.number, "index_generation": self.engine.seq, "snapshot": self.snapshot,
                "built_at": manifest.get("built_at"), "counts": manifest["counts"], "live": manifest.get("live")}


class Generations:
    """The current generation, the leases requests hold, and the closing of retired ones."""

    def __init__(self, engine: View | None = None, owned: bool = False, grace_s: float = 30.0) -> None:
        self.grace_s = grace_s
        self._lock = threading.Lock()
        self._number = 0
        self._current: Generation | None = None
        self._retired: list[Generation] = []  # retired and not yet closed
        if engine is not None:
            self.install(engine, owned=owned)

    @property
    def current(self) -> Generation | None:
        return self._current

    @contextmanager
    def lease(self) -> Iterator[Generation]:
        """The current generation, held (not closed) until the block ends."""
        with self._lock:
            generation = self._current
            if generation is None:
                raise RetrievalUnavailable("no index is loaded yet")
            generation.leases += 1
        try:
            yield generation
        finally:
            with self._lock:
                generation.leases -= 1
                last = generation.retired and generation.leases == 0
            if last:
                self._close_later(generation)

    def install(self, engine: View, owned: bool = True) -> Generation:
        """Make `engine` current; the generation it replaces closes once its leases are returned."""
        with self._lock:
            self._number += 1
            new, old = Generation(self._number, engine, owned), self._current
            self._current = new
            idle = old is not None and self._retire(old)
        if old is not None:
            log.info("generation %d serves snapshot %s (was generation %d, snapshot %s)", new.number, new.snapshot,
                     old.number, old.snapshot)
            if idle:
                self._close_later(old)
        return new

    def close(self, timeout_s: float | None = None) -> None:
        """At shutdown: retire the current generation if this process owns it (one it was
        handed stays current for its owner), then wait up to `timeout_s` (default: the
        grace period plus a margin) for every retired one to close. Idempotent."""
        with self._lock:
            current = self._current
            idle = False
            if current is not None and current.owned:
                self._current = None
                idle = self._retire(current)
            waiting = list(self._retired)
        if current is not None and idle:
            self._close_later(current)
        deadline = time.monotonic() + (self.grace_s + 10.0 if timeout_s is None else timeout_s)
        for generation in waiting:
            if not generation.closed.wait(max(0.0, deadline - time.monotonic())):
                log.warning("generation %d was still in use at shutdown", generation.number)

    @property
    def retired(self) -> list[Generation]:
        """Generations replaced but not yet closed (requests or abandoned calls still hold them)."""
        with self._lock:
            return [g for g in self._retired if not g.closed.is_set()]

    def _retire(self, generation: Generation) -> bool:
        """Under the lock: no new lease; True when nobody holds it (close it now)."""
        already, generation.retired = generation.retired, True
        if not already:
            self._retired.append(generation)
        return not already and generation.leases == 0

    def _close_later(self, generation: Generation) -> None:
        if not generation.owned:
            self._closed(generation)  # its owner closes it
            return
        # Closing shuts thread pools down and closes DuckDB: never on the event loop that returned the lease.
        threading.Thread(target=self._close, args=(generation,), name=f"quarry-retire-{generation.number}",
                         daemon=True).start()

    def _closed(self, generation: Generation) -> None:
        with self._lock:
            self._retired = [g for g in self._retired if g is not generation]
        generation.closed.set()

    def _close(self, generation: Generation) -> None:
        deadline = time.monotonic() + self.grace_s
        while generation.engine.calls.abandoned and time.monotonic() < deadline:
            time.sleep(0.05)
        if generation.engine.calls.abandoned:
            log.warning("generation %d is closed with %d abandoned retriever calls still running", generation.number,
                        generation.engine.calls.abandoned)
        try:
            generation.engine.close()
        except Exception:  # noqa: BLE001 - a failed close must not stop the next one
            log.exception("closing generation %d failed", generation.number)
        finally:
            self._closed(generation)
            log.info("generation %d (snapshot %s) closed", generation.number, generation.snapshot)
