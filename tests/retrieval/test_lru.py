"""The byte- and count-bounded LRU every per-scope and per-query cache uses."""

from __future__ import annotations

import numpy as np

from retrieval.access import ChunkTable
from retrieval.lru import ENTRY_OVERHEAD, Lru
from retrieval.types import Filters, Principal


def test_bytes_bound_evicts_least_recently_used_first():
    cache: Lru[str, bytes] = Lru(100, 3 * (1000 + ENTRY_OVERHEAD), lambda _k, v: len(v))
    for key in "abc":
        cache.put(key, b"x" * 1000)
    assert cache.get("a") is not None  # a is now the most recent
    cache.put("d", b"x" * 1000)
    assert "b" not in cache and all(k in cache for k in "acd")
    assert cache.nbytes <= cache.max_bytes


def test_count_bound_and_oversized_values():
    cache: Lru[int, bytes] = Lru(2, 10_000, lambda _k, v: len(v))
    for key in range(3):
        cache.put(key, b"")
    assert len(cache) == 2 and 0 not in cache
    cache.put(9, b"x" * 20_000)  # larger than the whole budget: not kept, nothing else lost
    assert 9 not in cache and len(cache) == 2
    cache.put(1, b"y" * 100)  # replacing an entry recounts its bytes
    assert cache.nbytes == 100 + 2 * ENTRY_OVERHEAD


def test_mask_cache_keeps_what_its_bytes_allow_at_any_corpus_size():
    n = 100_000  # one mask: 100 kB
    table = ChunkTable(chunk_ids=[f"c{i}" for i in range(n)], doc_ids=[f"d{i}" for i in range(n)], texts=[""] * n,
                       starts=np.zeros(n, dtype=np.int64), ends=np.zeros(n, dtype=np.int64), titles=[None] * n,
                       sources=[None] * n, dates=[None] * n, acls=[(f"group:g{i % 50}",) for i in range(n)],
                       cache_size=512, cache_bytes=5 * (n + ENTRY_OVERHEAD))
    masks = [table.mask(Principal(f"u{g}", (f"g{g}",)).access_scope(), Filters()) for g in range(20)]
    assert table.mask_builds == 20 and len(table._cache) == 5
    assert table.mask(Principal("again", ("g19",)).access_scope(), Filters()) is masks[19]  # recent scopes stay cached
    assert table.mask_builds == 20
