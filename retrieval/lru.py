"""A least-recently-used cache bounded by bytes as well as by entries.

The caches a server keeps per access scope or per query (access masks, covariance
backgrounds, query vectors, answer probabilities) grow with the corpus: one access mask of
a million-chunk index is a megabyte, so a count of entries says nothing about memory. Each
cache here is given a byte budget; its entries count `size(value)` bytes (plus their key's
text) and the least recently used go first when either bound is passed. A value larger than
the whole budget is returned to its caller but not kept.
"""

from __future__ import annotations

from collections import OrderedDict
from threading import Lock
from typing import Callable, Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

ENTRY_OVERHEAD = 200  # bytes of bookkeeping per entry (dict slot, tuple, object headers), roughly


class Lru(Generic[K, V]):
    """Thread-safe LRU mapping with at most `max_entries` entries and `max_bytes` bytes."""

    def __init__(self, max_entries: int, max_bytes: int, size: Callable[[K, V], int]) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._size = size
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: K, value: V) -> None:
        cost = self._size(key, value) + ENTRY_OVERHEAD
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if cost > self.max_bytes:
                return
            self._items[key] = (value, cost)
            self._bytes += cost
            while len(self._items) > self.max_entries or self._bytes > self.max_bytes:
                _, (_, freed) = self._items.popitem(last=False)
                self._bytes -= freed

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    def keys(self) -> list[K]:
        """The cached keys, least recently used first (a copy)."""
        with self._lock:
            return list(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    @property
    def nbytes(self) -> int:
        """Bytes the cached entries count for now."""
        return self._bytes
