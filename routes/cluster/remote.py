"""A shard seen from the front: the `Shard` protocol (retrieval/shard.py) over a Ray Serve
handle to the shard's replicas, with retries inside a deadline.

Serve routes each call to a live replica of the shard. A replica or node that dies under a
call fails that call only; it is sent again, to another replica, while the call's window
allows: `retry_s`, cut to the question's time left when the call is made for a question
(retrieval/question_scope.py), but never under `MIN_CALL_S`. A try that runs out of the window
is cancelled on the replica, so work nobody waits for stops. A shard with no live replica within the deadline makes the call a
typed, retryable `RetrievalUnavailable` naming the shard: the front never answers from the
other shards alone (a partial context would be a silently wrong one). An error the shard's
code raised is never retried: a typed `RetrievalError` is the caller's answer, anything else
a `ServerFault` (Ray wraps both in a `RayTaskError`, looked at first).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Sequence

import numpy as np
import ray.exceptions
import ray.serve.exceptions
from ray.serve.handle import DeploymentHandle

from retrieval.question_scope import call_window
from retrieval.errors import RetrievalError, RetrievalUnavailable, ServerFault
from retrieval.entities import Sightings
from retrieval.shard import EntityKind, Evidence, Judged, Reading
from retrieval.signals import Moments
from retrieval.types import AccessScope, CollectionStats, Document, Filters, Hit

log = logging.getLogger("quarry.cluster")
# What a dead replica, a lost node, an overloaded or unreachable one, or a shard with no
# replica yet looks like to a caller (after RayTaskError: the shard's own code raised).
UNAVAILABLE = (ray.exceptions.RayError, ray.serve.exceptions.RayServeException, TimeoutError)
RETRY_PAUSE_S = 0.05
# The shortest window a call made for a question gets, even with its time spent: one short try
# (a few milliseconds of shard work), not a failed answer for a question about to be graded.
MIN_CALL_S = 0.25


class RemoteShard:
    """Shard `shard` behind `handle` (see the module docstring). `retried` counts the calls
    sent again after a replica failed (for metrics and tests)."""

    def __init__(self, handle: DeploymentHandle, shard: int, retry_s: float = 10.0) -> None:
        self._handle, self.shard, self.retry_s = handle, shard, retry_s
        self.calls = self.retried = self.unavailable = 0
        self._lock = threading.Lock()

    def stats(self) -> dict[str, int]:
        """Calls made, calls sent again after a replica failed, and calls that found no live
        replica in time (for /metrics and /readyz)."""
        with self._lock:
            return {"calls": self.calls, "retried": self.retried, "unavailable": self.unavailable}

    def _count(self, what: str) -> None:
        with self._lock:
            setattr(self, what, getattr(self, what) + 1)

    def _call(self, method: str, *args: Any) -> Any:
        window = call_window(self.retry_s, MIN_CALL_S)
        deadline = time.monotonic() + window
        failure: BaseException | None = None
        self._count("calls")
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if failure is not None:
                self._count("retried")
                log.info("shard %02d: %s failed on a replica (%s); sending it again", self.shard, method,
                         type(failure).__name__)
            response = getattr(self._handle, method).remote(*args)
            try:
                return response.result(timeout_s=left)
            except ray.exceptions.RayTaskError as e:  # the shard's code raised: its answer, never retried
                cause = e.cause
                if isinstance(cause, RetrievalError):
                    raise cause from None
                raise ServerFault(f"shard {self.shard:02d} failed: {type(cause).__name__}") from e
            except RetrievalError:
                raise
            except UNAVAILABLE as e:
                failure = e
                if isinstance(e, TimeoutError):
                    response.cancel()  # nobody waits for it any more
                time.sleep(min(RETRY_PAUSE_S, max(0.0, deadline - time.monotonic())))
        self._count("unavailable")
        raise RetrievalUnavailable(f"shard {self.shard:02d} has no live replica "
                                   f"({type(failure).__name__ if failure else 'no answer'} within {window:.3g} s); "
                                   "retry shortly")

    def read(self, question: str, names: Sequence[str], access: AccessScope) -> Reading:
        return self._call("read", question, list(names), access)

    def judge(self, question: str, vector: np.ndarray, chunk_ids: Sequence[str], access: AccessScope,
              stats: CollectionStats, texts: Sequence[str]) -> Judged:
        return self._call("judge", question, vector, list(chunk_ids), access, stats, list(texts))

    def bm25_stats(self, query: str, access: AccessScope, filters: Filters) -> CollectionStats:
        return self._call("bm25_stats", query, access, filters)

    def bm25(self, query: str, access: AccessScope, k: int, filters: Filters, stats: CollectionStats) -> list[Hit]:
        return self._call("bm25", query, access, k, filters, stats)

    def dense(self, vector: np.ndarray, access: AccessScope, k: int, filters: Filters) -> list[Hit]:
        return self._call("dense", vector, access, k, filters)

    def exact(self, query: str, access: AccessScope, k: int, filters: Filters) -> list[Hit]:
        return self._call("exact", query, access, k, filters)

    def evidence(self, query: str, vector: np.ndarray, chunk_ids: Sequence[str], access: AccessScope,
                 stats: CollectionStats) -> dict[str, Evidence]:
        return self._call("evidence", query, vector, list(chunk_ids), access, stats)

    def moments(self, access: AccessScope, readable: int) -> Moments:
        return self._call("moments", access, readable)

    def sightings(self, texts: Sequence[str], access: AccessScope, kind: EntityKind) -> list[Sightings]:
        return self._call("sightings", list(texts), access, kind)

    def doc_cosines(self, doc_ids: Sequence[str], vector: np.ndarray, access: AccessScope) -> dict[str, float]:
        return self._call("doc_cosines", list(doc_ids), vector, access)

    def document(self, doc_id: str, access: AccessScope) -> Document | None:
        return self._call("document", doc_id, access)

    def document_acl(self, doc_id: str) -> tuple[str, ...] | None:
        return self._call("document_acl", doc_id)

    def describe(self) -> dict[str, Any]:
        return self._call("describe")

    def write(self, payload: dict[str, Any], access: AccessScope | None, key: str, request: bytes) -> dict[str, Any]:
        """One write record to the shard (routes/cluster/replica.py `write`). A retry after a
        replica failed is applied once: the record's idempotency key is in the shard's log."""
        return self._call("write", payload, access, key, request)
