"""Retrievers: one contract, `search(query, principal, k, filters) -> list[Hit]`.

Access control is enforced inside each one, through `ChunkTable.mask`, before ranking.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from retrieval.types import Filters, Hit, Principal


class Retriever(Protocol):
    name: str

    def search(self, query: str, principal: Principal, k: int, filters: Filters) -> list[Hit]: ...


@dataclass(frozen=True)
class Retrieved:
    """What one call found: hits, and for the rows route the rows they were made from."""

    hits: list[Hit]
    rows: Any = None  # a SqlResult when the hits are table rows
