"""Per-caller rate and concurrency limits (who the caller is comes from the `auth` package)."""

from __future__ import annotations

import math
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from retrieval.errors import RateLimited


class Gate:
    """Token bucket (rate, burst) and an in-flight cap per key; over either is a 429."""

    def __init__(self, rate_per_second: float, burst: int, max_concurrent: int) -> None:
        self.rate = rate_per_second
        self.burst = burst
        self.max_concurrent = max_concurrent
        self._tokens: dict[str, tuple[float, float]] = {}
        self._inflight: dict[str, int] = {}
        self._lock = threading.Lock()

    def _take(self, key_id: str, in_flight: bool) -> None:
        """Spend one token of `key_id`'s bucket and, with `in_flight`, take one of its slots."""
        now = time.monotonic()
        with self._lock:
            tokens, last = self._tokens.get(key_id, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate)
            if tokens < 1.0:
                wait = math.ceil((1.0 - tokens) / self.rate) if self.rate > 0 else 60
                self._tokens[key_id] = (tokens, now)
                raise RateLimited(f"rate limit of {self.rate:g} requests/s exceeded", retry_after=max(1, wait))
            if in_flight and self._inflight.get(key_id, 0) >= self.max_concurrent:
                self._tokens[key_id] = (tokens, now)
                raise RateLimited(f"more than {self.max_concurrent} requests in flight for this key", retry_after=1)
            self._tokens[key_id] = (tokens - 1.0, now)
            if in_flight:
                self._inflight[key_id] = self._inflight.get(key_id, 0) + 1

    def admit(self, key_id: str) -> None:
        """The rate limit alone, for a long-lived stream that does no work of its own (an idle
        GET /mcp event stream must not hold one of the key's request slots)."""
        self._take(key_id, in_flight=False)

    @contextmanager
    def enter(self, key_id: str) -> Iterator[None]:
        """The rate limit and one of the key's in-flight slots for the duration."""
        self._take(key_id, in_flight=True)
        try:
            yield
        finally:
            with self._lock:
                self._inflight[key_id] -= 1
