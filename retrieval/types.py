"""Typed records shared by every layer: principals, documents, chunks, filters and hits."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Literal, Mapping

from retrieval.errors import InvalidRequest

Scope = Literal["query", "sql", "write", "admin"]
SCOPES: tuple[Scope, ...] = ("query", "sql", "write", "admin")
PUBLIC = "public"

_NAME = r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}"
_PRINCIPAL_RE = re.compile(_NAME)
_GROUP_RE = re.compile(_NAME)
_ACL_ENTRY_RE = re.compile(rf"public|group:{_NAME}|{_NAME}")


def valid_acl_entry(entry: object) -> bool:
    """True for `public`, `group:<name>` or a principal id (no spaces, no wildcards)."""
    return isinstance(entry, str) and _ACL_ENTRY_RE.fullmatch(entry) is not None


def check_acl(acl: object) -> tuple[str, ...]:
    """Validate an ACL list; an empty list would make a document unreadable by mistake."""
    if not isinstance(acl, (list, tuple)) or not acl:
        raise InvalidRequest("acl must be a non-empty list of strings")
    bad = [e for e in acl if not valid_acl_entry(e)]
    if bad:
        raise InvalidRequest(f"invalid acl entries {bad!r}: use 'public', 'group:NAME' or a principal id")
    return tuple(dict.fromkeys(acl))


@dataclass(frozen=True)
class Principal:
    """Who is asking. Comes from an API key or the CLI, never from a request body."""

    id: str
    groups: tuple[str, ...] = ()
    scopes: frozenset[str] = frozenset({"query"})

    def __post_init__(self) -> None:
        if not _PRINCIPAL_RE.fullmatch(self.id) or self.id == PUBLIC or self.id.startswith("group:"):
            raise InvalidRequest(f"invalid principal id {self.id!r}")
        for g in self.groups:
            if not _GROUP_RE.fullmatch(g):
                raise InvalidRequest(f"invalid group name {g!r}")
        unknown = set(self.scopes) - set(SCOPES)
        if unknown:
            raise InvalidRequest(f"unknown scopes {sorted(unknown)}; expected some of {list(SCOPES)}")

    def access_tokens(self) -> frozenset[str]:
        """ACL entries this principal matches: `public`, its id and `group:<g>` per group."""
        return frozenset({PUBLIC, self.id, *(f"group:{g}" for g in self.groups)})

    def can_read(self, acl: tuple[str, ...] | list[str]) -> bool:
        return not self.access_tokens().isdisjoint(acl)


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    title: str | None = None
    source: str | None = None
    date: date | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    acl: tuple[str, ...] = ()


@dataclass(frozen=True)
class Chunk:
    """A passage of a document; `start`/`end` are character offsets into the document text."""

    row: int
    chunk_id: str
    doc_id: str
    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Filters:
    """Caller-chosen narrowing, applied inside retrievers exactly like the ACL."""

    sources: tuple[str, ...] | None = None
    date_from: date | None = None
    date_to: date | None = None
    doc_ids: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.date_from and self.date_to and self.date_from > self.date_to:
            raise InvalidRequest("date_from is after date_to")


NO_FILTERS = Filters()


@dataclass(frozen=True)
class Hit:
    """One retrieved chunk with provenance.

    `signals` keeps each contributing retriever's own score (bm25, dense cosine, exact
    occurrences, rrf) so the grader can judge evidence without knowing the backend.
    `meta` is the document's metadata values as text: an identifier that only the metadata
    carries (a ticket number, say) is still met by the passage. It is not shown to callers.
    """

    chunk_id: str
    doc_id: str
    text: str
    score: float
    retrievers: tuple[str, ...]
    start: int
    end: int
    title: str | None = None
    source: str | None = None
    date: str | None = None
    signals: tuple[tuple[str, float], ...] = ()
    meta: str | None = None

    def signal(self, name: str) -> float | None:
        for key, value in self.signals:
            if key == name:
                return value
        return None
