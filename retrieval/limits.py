"""Request limits and budgets, as the core checks them. The edges build them from the settings
(routes/service/settings.py), which name each one with its default and a line of help."""

from __future__ import annotations

from dataclasses import dataclass

from retrieval.errors import InvalidRequest
from retrieval.types import Filters


@dataclass(frozen=True)
class Limits:
    max_query_chars: int = 2000
    default_k: int = 8
    max_k: int = 50
    default_attempts: int = 3
    max_attempts: int = 6
    default_deadline_ms: int = 2000
    max_deadline_ms: int = 30000
    call_timeout_ms: int = 1500
    max_filter_values: int = 100
    list_max_passages: int = 500  # a list question's plan asks its route for this many passages at most


def check_query(query: object, limits: Limits, field: str = "query") -> str:
    """The query itself, or a typed error saying what is wrong with it; `field` is the name
    the caller gave it (`question` for the loop, `query` for a search)."""
    if not isinstance(query, str):
        raise InvalidRequest(f"{field} must be a string")
    if not query.strip():
        raise InvalidRequest(f"{field} must not be empty or only spaces")
    if len(query) > limits.max_query_chars:
        raise InvalidRequest(f"{field} is {len(query)} characters; the limit is {limits.max_query_chars}")
    if "\x00" in query:
        raise InvalidRequest(f"{field} must not contain NUL characters")
    return query


def check_k(k: object, limits: Limits) -> int:
    if k is None:
        return limits.default_k
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= limits.max_k:
        raise InvalidRequest(f"k must be an integer from 1 to {limits.max_k}")
    return k


def check_filters(filters: Filters, limits: Limits) -> Filters:
    for name in ("sources", "doc_ids"):
        values = getattr(filters, name)
        if values is not None and len(values) > limits.max_filter_values:
            raise InvalidRequest(f"filter {name} has {len(values)} values; the limit is {limits.max_filter_values}")
    return filters
