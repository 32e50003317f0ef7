"""Retrievers: one contract, `search(query, access, k, filters) -> list[Hit]`.

`access` is the caller's `AccessScope` (retrieval/types.py), a plain value, not an
in-process row mask: each backend turns it into what it filters with (an in-process one
asks `ChunkTable.mask(access, filters)`; one in another process does the same over its own
copy of the snapshot) and enforces it itself, before ranking. So a retriever can live in
another process or machine, and the loop never branches on where it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from retrieval.types import AccessScope, Filters, Hit


class Retriever(Protocol):
    name: str

    def search(self, query: str, access: AccessScope, k: int, filters: Filters) -> list[Hit]:
        """The k best hits the scope may read that pass the filters, best first."""
        ...


@dataclass(frozen=True)
class Retrieved:
    """What one call found: hits, and for the rows route the rows they were made from."""

    hits: list[Hit]
    rows: Any = None  # a SqlResult when the hits are table rows
