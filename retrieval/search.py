"""One validated retriever call: the entry point shared by CLI, HTTP, MCP and tools."""

from __future__ import annotations

from typing import Mapping

from retrieval.errors import InvalidRequest
from retrieval.limits import Limits, check_filters, check_k, check_query
from retrieval.registry import SEARCH_ROUTES
from retrieval.retrievers import Retriever
from retrieval.types import Filters, Hit, Principal


def search(
    retrievers: Mapping[str, Retriever],
    name: str,
    query: str,
    principal: Principal,
    k: int | None,
    filters: Filters,
    limits: Limits,
) -> list[Hit]:
    """Validate, then run the named retriever over the principal's access scope; unknown
    names and bad input are typed errors."""
    retriever = retrievers.get(name) if name in SEARCH_ROUTES else None
    if retriever is None:
        raise InvalidRequest(f"unknown retriever {name!r}; expected one of {', '.join(SEARCH_ROUTES)}"
                             + (" (tables answer through sql)" if name == "sql" else ""))
    return retriever.search(check_query(query, limits), principal.access_scope(), check_k(k, limits),
                            check_filters(filters, limits))
