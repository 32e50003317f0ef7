"""Typed records shared by every layer: principals and their access scopes, documents,
chunks, filters and hits, and what an answer says about itself (status, evidence gap, stop
reason)."""

from __future__ import annotations

import re
import unicodedata
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


# Words that read as "everyone" or "no one" (or as the admins) but, as ACL entries, would name
# a principal of that id, so the documents they guard would silently reach no reader (not even
# the admin who wrote them, who could then not see them to fix them).
RESERVED_ACL_WORDS = frozenset({
    "everyone", "everybody", "all", "any", "anyone", "anybody", "world", "none", "nobody", "noone", "private",
    "public", "authenticated", "anonymous", "users", "admin", "admins",
})
MAX_DOC_ID_CHARS = 256
# Characters a document id never holds: it is shown to people and agents and put into URLs, so
# nothing invisible (controls, bidi and zero-width format characters, unassigned, private-use
# and surrogate code points), no whitespace, and no path separators.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp"})
# Symbols drawn like `/` or `\` that NFKC keeps (Unicode's confusables for them, less letters
# and ideographs); the fullwidth and small forms are listed too, though NFKC maps them to `/`, `\`.
_LOOKALIKE_SEPARATORS = frozenset(
    "\u0337\u0338\u20e5\u20eb"  # combining short and long solidus overlays, reverse and double solidus overlays
    "\u1735\u2041\u2044\u2215\u2216"  # Philippine single punctuation, caret insertion point, fraction, division slash, set minus
    "\u2571\u2572\u27cb\u27cd"  # box-drawing diagonals, mathematical rising and falling diagonals
    "\u29f5\u29f8\u29f9\u2afb\u2afd"  # reverse solidus operator, big solidus and reverse, triple and double solidus
    "\u31d3\u31d4\ufe68\uff0f\uff3c"  # CJK strokes SP and D, small reverse solidus, fullwidth solidus and reverse
)
_PERCENT_OCTET = re.compile(r"%[0-9A-Fa-f]{2}")


def valid_acl_entry(entry: object) -> bool:
    """True for `public`, `group:<name>` or a principal id (no spaces, no wildcards)."""
    return isinstance(entry, str) and _ACL_ENTRY_RE.fullmatch(entry) is not None


def check_acl(acl: object, label: str = "acl entry", hint: str = "", keywords: bool = True) -> tuple[str, ...]:
    """Validate an ACL list: the one rule of every write path, ingest and `--default-acl`. An
    empty list would make a document unreadable by mistake, and a keyword-like word
    (`everyone`, `all`, `Public`, ...) is refused rather than taken for a principal id.
    `keywords=False` keeps only the syntax, for changes logged before the keyword rule."""
    if not isinstance(acl, (list, tuple)) or not acl:
        raise InvalidRequest("acl must be a non-empty list of strings")
    bad = [e for e in acl if not valid_acl_entry(e)]
    if bad:
        raise InvalidRequest(f"invalid acl entries {bad!r}: use 'public', 'group:NAME' or a principal id")
    reserved = [e for e in acl if keywords and e != PUBLIC and e.lower() in RESERVED_ACL_WORDS]
    if reserved:
        raise InvalidRequest(f"{label} {reserved[0]!r} is not an ACL keyword: use 'public' (everyone), "
                             f"'group:NAME' or principal ids{hint}")
    return tuple(dict.fromkeys(acl))


def normal_doc_id(doc_id: str) -> str:
    """The form an id is stored and looked up under: its NFKC normalisation, so ids that read
    alike (fullwidth `ＩＮＣ－１`, ligatures, compatibility digits) name one document."""
    return unicodedata.normalize("NFKC", doc_id)


def check_doc_id(doc_id: object) -> str:
    """The one rule for document ids, at ingest and in every write path; returns the id in its
    normal form (`normal_doc_id`: NFKC), which is what is stored. That form must be 1 to 256
    printable characters, no whitespace, no `/` or `\\` nor a look-alike of them (division,
    fraction and big solidus, set minus, box-drawing diagonals, solidus overlays, ...), no
    percent-encoded octet (`%2F`, `%2e%2e`: decoded once more by a proxy or a client, it would
    become a separator or a dot segment), not `.` or `..`, no leading `#`, and nothing
    invisible (controls, bidi and zero-width characters): an id is shown to people and agents,
    where such characters hide or reorder it, and put into URLs, where separators and dot
    segments change the path."""
    # NFKC may expand an id (up to 18 times) or compose it shorter: bound the work first.
    normal = normal_doc_id(doc_id) if isinstance(doc_id, str) and len(doc_id) <= 4 * MAX_DOC_ID_CHARS else None
    if normal is not None and 0 < len(normal) <= MAX_DOC_ID_CHARS and normal not in (".", "..") \
            and not normal.startswith("#") and _PERCENT_OCTET.search(normal) is None \
            and not any(c in "/\\" or c in _LOOKALIKE_SEPARATORS or c.isspace() for c in normal) \
            and not any(unicodedata.category(c) in _HIDDEN_CATEGORIES for c in normal):
        return normal
    shown = doc_id.encode("unicode_escape").decode("ascii")[:100] if isinstance(doc_id, str) else repr(doc_id)
    raise InvalidRequest(f"invalid document id \"{shown}\": use 1 to {MAX_DOC_ID_CHARS} printable characters without "
                         "spaces, '/' or '\\' or look-alikes of them, or percent-encoded octets such as '%2F', not '.' "
                         "or '..', not starting with '#', with no control, bidi or zero-width characters")


def check_write_prefix(prefix: object) -> str:
    """A write prefix of a key or token: a non-empty start of an id by `check_doc_id`'s rule, in
    normal form (so it is compared with normal ids)."""
    normal = check_doc_id(prefix)
    if normal != prefix:
        raise InvalidRequest(f"write prefix {prefix!r} is not in normal form (NFKC): use {normal!r}")
    return normal


@dataclass(frozen=True)
class Principal:
    """Who is asking. Comes from an API key or the CLI, never from a request body.

    `write_prefixes` are the starts of the document ids it may write (`may_write`); None means
    every id (a key made before prefixes existed, the CLI's operator). They bound the `write`
    scope, never what it reads."""

    id: str
    groups: tuple[str, ...] = ()
    scopes: frozenset[str] = frozenset({"query"})
    write_prefixes: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not _PRINCIPAL_RE.fullmatch(self.id) or self.id == PUBLIC or self.id.startswith("group:"):
            raise InvalidRequest(f"invalid principal id {self.id!r}")
        for g in self.groups:
            if not _GROUP_RE.fullmatch(g):
                raise InvalidRequest(f"invalid group name {g!r}")
        unknown = set(self.scopes) - set(SCOPES)
        if unknown:
            raise InvalidRequest(f"unknown scopes {sorted(unknown)}; expected some of {list(SCOPES)}")
        if self.write_prefixes is not None:
            if not isinstance(self.write_prefixes, tuple):
                raise InvalidRequest("write prefixes are a tuple of id prefixes")
            for prefix in self.write_prefixes:
                check_write_prefix(prefix)

    @property
    def is_admin(self) -> bool:
        """Holds the `admin` scope: may manage every document, one it cannot read included."""
        return "admin" in self.scopes

    def may_write(self, doc_id: str) -> bool:
        """Is `doc_id` (in normal form) among the ids this principal may write? The one prefix
        rule of every write path, for keys and any later credential alike."""
        return self.write_prefixes is None or doc_id.startswith(self.write_prefixes)

    def access_tokens(self) -> frozenset[str]:
        """ACL entries this principal matches: `public`, its id and `group:<g>` per group."""
        return frozenset({PUBLIC, self.id, *(f"group:{g}" for g in self.groups)})

    def access_scope(self) -> AccessScope:
        """What a retriever needs to enforce this principal's access, and nothing else."""
        return AccessScope(self.access_tokens())

    def can_read(self, acl: tuple[str, ...] | list[str]) -> bool:
        return not self.access_tokens().isdisjoint(acl)


@dataclass(frozen=True)
class AccessScope:
    """A caller's access scope, as every retriever, signal and linker below the loop receives
    it: the ACL entries the caller matches (`Principal.access_tokens`). A document or table
    row is readable when its ACL names one of them. It is a plain value (hashable, and JSON
    through `to_json` / `from_json`), so a retriever in another process or on another machine
    receives exactly what an in-process one does and enforces it itself, before ranking.

    It carries no operation scopes (`query`, `sql`, `write`, `admin`): they decide which calls
    a caller may make, and are checked where the call enters (the edges' scope checks, and
    `SqlRetriever.run_statement` for a caller's own SQL), never what a call may read. Nor
    does it carry the principal's id apart from its token: two callers with the same tokens
    read the same rows, and caches are keyed by what a result depends on."""

    tokens: frozenset[str]

    def __post_init__(self) -> None:
        if not isinstance(self.tokens, frozenset) or not all(valid_acl_entry(t) for t in self.tokens):
            raise InvalidRequest("an access scope is a frozenset of ACL entries ('public', 'group:NAME' or ids)")

    def can_read(self, acl: tuple[str, ...] | list[str]) -> bool:
        """Does the ACL name one of this scope's tokens?"""
        return not self.tokens.isdisjoint(acl)

    def to_json(self) -> dict[str, list[str]]:
        """The scope as JSON (tokens sorted, so one scope always has one encoding)."""
        return {"tokens": sorted(self.tokens)}

    @classmethod
    def from_json(cls, data: object) -> AccessScope:
        """The scope `to_json` wrote; anything else is an InvalidRequest."""
        tokens = data.get("tokens") if isinstance(data, dict) and set(data) == {"tokens"} else None
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise InvalidRequest('an access scope is {"tokens": [ACL entries]}')
        return cls(frozenset(tokens))


@dataclass(frozen=True)
class CollectionStats:
    """What BM25 scoring needs from the collection: N, total length and the query terms'
    document frequencies, over some allowed rows (of one segment, or summed over several: a
    live index's segments, or the shards of a cluster, as Elasticsearch's DFS phase sums them).
    Here, not in indexes/, so a scatter-gather front (retrieval/scatter.py) can sum them."""

    n: int
    total_len: float
    df: dict[str, int]
    # Which state of the index these describe: a shard's live-write seq (0 for a snapshot), summed
    # like the rest. Seqs only grow, so a sum that changed says some shard changed: a front keys
    # what it derives from a scope's readable rows (the background moments) on it. Not a score input.
    version: int = 0

    def __add__(self, other: CollectionStats) -> CollectionStats:
        df = dict(self.df)
        for term, count in other.df.items():
            df[term] = df.get(term, 0) + count
        return CollectionStats(self.n + other.n, self.total_len + other.total_len, df, self.version + other.version)


@dataclass(frozen=True)
class Region:
    """A span of a document's text that came from one page and/or one section of its file
    (offsets into `Document.text`): where a passage sends its reader ("page 12", "4.2 Pumps")."""

    start: int
    end: int
    page: int | None = None  # 1-based page of a PDF
    section: tuple[str, ...] = ()  # heading path, outermost first (PDF outline or heading lines, DOCX, HTML, Markdown)


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    title: str | None = None
    source: str | None = None
    date: date | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    acl: tuple[str, ...] = ()
    regions: tuple[Region, ...] = ()  # ordered, non-overlapping; empty for a document read from JSONL


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
    page: int | None = None  # where a passage of a file was: its PDF page
    section: tuple[str, ...] = ()  # or its heading path (DOCX, HTML)

    def signal(self, name: str) -> float | None:
        for key, value in self.signals:
            if key == name:
                return value
        return None


# What an answer is, why there is not enough evidence, and why the loop stopped: the values of
# the answer shape's `status`, `gap.reason` and `stop_reason` (DESIGN.md), defined here once.
# The client's wire models (client/quarry_client/models.py) accept exactly these
# (tests/retrieval/test_answer.py).
Status = Literal["answer_context", "evidence_gap"]
GapReason = Literal["no_authorized_evidence", "insufficient_evidence", "constraint_unmet", "deadline_exceeded"]
StopReason = Literal["sufficient", "attempts_exhausted", "deadline", "no_strategy_left"]


@dataclass(frozen=True)
class Gap:
    """Why an answer is an evidence gap, and what is missing: a result, not an error.
    retrieval/answer.py's `gap_json` renders it."""

    reason: GapReason
    missing: tuple[str, ...]  # the constraint labels (or relevance) no authorized evidence met
    detail: str  # one readable sentence for the reason
    partial_context: bool  # the answer carries the best partial context, marked insufficient


@dataclass(frozen=True)
class Listing:
    """What a list question's plan gathered: every readable document within its filters (a
    period, the caller's sources or ids), up to a bound. Counted over the caller's readable
    scope only, like every number an answer carries."""

    documents: int  # distinct readable documents found within the filters
    shown: int  # how many of them the context holds (one passage each, at most k)
    bound_reached: bool  # the plan's passage bound was reached: there may be more than `documents`

    @property
    def complete(self) -> bool:
        """Every readable document within the filters is in the context."""
        return not self.bound_reached and self.shown == self.documents

    def to_json(self) -> dict[str, object]:
        return {"complete": self.complete, "documents": self.documents, "shown": self.shown,
                "bound_reached": self.bound_reached}
