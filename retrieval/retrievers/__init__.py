"""Retrievers: one contract, `search(query, principal, k, filters) -> list[Hit]`.

Access control is enforced inside each one, through `ChunkTable.mask`, before ranking.
"""

from __future__ import annotations

from typing import Protocol

from retrieval.types import Filters, Hit, Principal


class Retriever(Protocol):
    name: str

    def search(self, query: str, principal: Principal, k: int, filters: Filters) -> list[Hit]: ...
