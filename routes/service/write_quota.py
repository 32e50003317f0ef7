"""A per-key bound on the bytes of writes queued or running at once.

Writes are embedded outside the writer's lock, each on its own request thread, so one key
could otherwise start embedding as many 1 MiB documents at once as it has request slots
(16) and take every core. A write counts its documents' bytes (text, title and metadata, as
the log will hold them) from the moment it is admitted until it is answered; a key already
holding `max_bytes` gets a retryable 429 for the next one. One write larger than the bound
alone is still admitted when the key has nothing else in flight (the body limit bounds it).
"""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from typing import Iterator, Sequence

from indexes.live import Change, Put, doc_json
from retrieval.errors import RateLimited

CHANGE_BYTES = 128  # a delete or an ACL change: an id and a few entries


def change_bytes(changes: Sequence[Change]) -> int:
    """About what the changes weigh: each put's document as the log stores it."""
    return sum(len(json.dumps(doc_json(c.doc), ensure_ascii=False).encode()) if isinstance(c, Put) else CHANGE_BYTES
               for c in changes)


class WriteQuota:
    """Bytes of writes in flight per key (see the module docstring)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    def held(self, key: str) -> int:
        with self._lock:
            return self._held.get(key, 0)

    @contextmanager
    def admit(self, key: str | None, size: int) -> Iterator[None]:
        """Hold `size` bytes of `key`'s quota for the duration (no key: the local operator, unbounded;
        nothing held for nothing)."""
        if key is None or size <= 0:
            yield
            return
        with self._lock:
            held = self._held.get(key, 0)
            if held and held + size > self.max_bytes:
                raise RateLimited(f"this key has {held:,} bytes of writes queued or running; at most {self.max_bytes:,} "
                                  "at once: retry once they are answered", retry_after=1)
            self._held[key] = held + size
        try:
            yield
        finally:
            with self._lock:
                left = self._held[key] - size
                if left:
                    self._held[key] = left
                else:
                    del self._held[key]
