"""The one list of routes: the router scores them, the rewriter switches among them, and the
HTTP, tool and CLI enums (and so OpenAPI) are built from them.

A route is a retriever the loop may choose. Text routes answer with passages through
`search(query, access, k, filters)`; the rows route (`sql`) answers with table rows
and is reached by the loop or `/v1/sql`, never by a plain search, because a search has no
question to translate.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Route:
    name: str
    kind: str  # "text" (passages) | "rows" (table rows)
    fuses: frozenset[str] = frozenset()  # text routes whose evidence this one already covers
    literal: bool = False  # finds literal items (identifiers, phrases, patterns), not topics


REGISTRY: tuple[Route, ...] = (
    Route("exact", "text", literal=True),
    Route("bm25", "text"),
    Route("dense", "text"),
    Route("hybrid", "text", fuses=frozenset({"bm25", "dense"})),
    Route("sql", "rows"),
)

ROUTES: tuple[str, ...] = tuple(r.name for r in REGISTRY)  # the router's tie order: exact before hybrid
TEXT_ROUTES: tuple[str, ...] = tuple(r.name for r in REGISTRY if r.kind == "text")
SEARCH_ROUTES = TEXT_ROUTES  # what `search` (HTTP, tool, CLI) accepts by name
TOPIC_ROUTES: tuple[str, ...] = tuple(r.name for r in REGISTRY if r.kind == "text" and not r.literal)
ROW_ROUTES: tuple[str, ...] = tuple(r.name for r in REGISTRY if r.kind == "rows")
FUSES: dict[str, frozenset[str]] = {r.name: r.fuses for r in REGISTRY if r.fuses}


def route_agrees(labeled: str, chosen: str | None) -> bool:
    """Does the chosen route answer a question labeled `labeled` (itself, or a fusion of it)?"""
    return chosen is not None and (chosen == labeled or labeled in FUSES.get(chosen, ()))
