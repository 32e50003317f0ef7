"""A shard seen from the front: the `Shard` protocol (retrieval/shard.py) over a Ray Serve
handle to the shard's replicas, with retries inside a deadline.

Serve routes each call to a live replica of the shard. A replica or node that dies under a
call fails that call only; it is sent again, to another replica, while the deadline allows
(`retry_s`). A shard with no live replica within the deadline makes the call a typed,
retryable `RetrievalUnavailable` naming the shard: the front never answers from the other
shards alone (a partial context would be a silently wrong one). An error the shard raised
itself (a typed `RetrievalError`) is the caller's answer and is not retried.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import ray.exceptions
import ray.serve.exceptions
from ray.serve.handle import DeploymentHandle

from retrieval.errors import RetrievalError, RetrievalUnavailable
from retrieval.types import AccessScope, CollectionStats, Filters, Hit

log = logging.getLogger("quarry.cluster")
# What a dead replica, a lost node or a shard with no replica yet looks like to a caller.
UNAVAILABLE = (ray.exceptions.RayActorError, ray.exceptions.NodeDiedError, ray.exceptions.WorkerCrashedError,
               ray.exceptions.ObjectLostError, ray.exceptions.OwnerDiedError, ray.exceptions.GetTimeoutError,
               ray.serve.exceptions.RayServeException, TimeoutError)
RETRY_PAUSE_S = 0.05


class RemoteShard:
    """Shard `shard` behind `handle` (see the module docstring). `retried` counts the calls
    sent again after a replica failed (for metrics and tests)."""

    def __init__(self, handle: DeploymentHandle, shard: int, retry_s: float = 10.0) -> None:
        self._handle, self.shard, self.retry_s = handle, shard, retry_s
        self.retried = 0

    def _call(self, method: str, *args: Any) -> Any:
        deadline = time.monotonic() + self.retry_s
        failure: BaseException | None = None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                return getattr(self._handle, method).remote(*args).result(timeout_s=left)
            except RetrievalError:
                raise  # the shard's own answer (Ray's error is also an instance of the shard's error)
            except UNAVAILABLE as e:
                failure = e
                self.retried += 1
                log.info("shard %02d: %s failed on a replica (%s); sending it again", self.shard, method,
                         type(e).__name__)
                time.sleep(min(RETRY_PAUSE_S, max(0.0, deadline - time.monotonic())))
        raise RetrievalUnavailable(f"shard {self.shard:02d} has no live replica "
                                   f"({type(failure).__name__ if failure else 'no answer'} within {self.retry_s:g} s); "
                                   "retry shortly")

    def bm25_stats(self, query: str, access: AccessScope, filters: Filters) -> CollectionStats:
        return self._call("bm25_stats", query, access, filters)

    def bm25(self, query: str, access: AccessScope, k: int, filters: Filters, stats: CollectionStats) -> list[Hit]:
        return self._call("bm25", query, access, k, filters, stats)

    def dense(self, vector: np.ndarray, access: AccessScope, k: int, filters: Filters) -> list[Hit]:
        return self._call("dense", vector, access, k, filters)

    def exact(self, query: str, access: AccessScope, k: int, filters: Filters) -> list[Hit]:
        return self._call("exact", query, access, k, filters)

    def describe(self) -> dict[str, Any]:
        return self._call("describe")
