"""Entities the catalog knows (document titles, short metadata values), found in text.

Matching is by whole words on normalised text, longest first. A one-word entity counts only
when it is written as a name (capitalised in the text, or containing a digit or a hyphen),
so common words that happen to be titles do not become constraints. Every entity carries the
chunk rows it comes from: callers keep only entities the principal may read, so a forbidden
document's title is never reported back as a constraint or used to bridge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from threading import Lock
from typing import Iterable, Sequence

import numpy as np

from retrieval.text import STOPWORDS
from retrieval.types import Hit

MAX_WORDS = 8
MEMO_MASKS, MEMO_KEYS = 8, 50_000
_PAREN = re.compile(r"\s*\([^)]*\)\s*$")
_TOKEN = re.compile(r"\w+(?:['.&-]\w+)*", re.UNICODE)  # no trailing punctuation: "University." -> "University"


def _key(text: str) -> str:
    return " ".join(t.lower() for t in _TOKEN.findall(text))


@lru_cache(maxsize=262_144)
def _normal(name: str) -> tuple[str, str]:
    """(display form, key) of a raw name; memoized, since a live index builds its entity index
    again at every write from mostly the same names."""
    shown = _PAREN.sub("", name).strip()
    return shown, _key(shown)


@dataclass(eq=False)
class EntityIndex:
    """normalised entity -> (display form, chunk rows that carry it).

    `owners` marks entities that name a document only when the reader can see exactly one
    document carrying them (an identifier inside titles: "INC-2041" in "INC-2041: ledger
    outage" names that report, unless the reader sees two titles with it); it maps such an
    entity to the document number of each of its rows (-1 for a row that carries it as a
    plain title or value). Both rules read the caller's mask only, so
    what is found equals what an index of the readable documents alone would find.
    """

    entries: dict[str, tuple[str, np.ndarray]] = field(default_factory=dict)
    owners: dict[str, np.ndarray] = field(default_factory=dict)
    _prefixes: set[str] = field(default_factory=set, repr=False)  # proper word prefixes of the entities
    _memos: list[tuple[np.ndarray, dict[str, np.ndarray]]] = field(default_factory=list, repr=False)
    _lock: Lock = field(default_factory=Lock, repr=False)

    def __post_init__(self) -> None:
        for key in self.entries:
            words = key.split(" ")
            self._prefixes.update(" ".join(words[:n]) for n in range(1, len(words)))

    @classmethod
    def build(cls, names_by_row: Iterable[tuple[int, str]], one_document: Iterable[tuple[int, str]] = (),
              doc_ids: Sequence[str] = ()) -> EntityIndex:
        """`names_by_row`: (row, name) pairs; `one_document`: (row, name) pairs that count only
        while one readable document carries them (`doc_ids[row]` names each row's document)."""
        rows: dict[str, list[int]] = {}
        display: dict[str, str] = {}
        plain_rows: dict[str, set[int]] = {}
        for is_plain, pairs in ((True, names_by_row), (False, one_document)):
            for row, raw in pairs:
                name, key = _normal(raw)
                if not key or len(key.split()) > MAX_WORDS or key in STOPWORDS or len(key) < 3 or key.isdigit():
                    continue
                rows.setdefault(key, []).append(row)
                display.setdefault(key, name)
                if is_plain:
                    plain_rows.setdefault(key, set()).add(row)
        entries = {k: (display[k], np.asarray(v if len(v) == 1 else sorted(set(v)), dtype=np.int64)) for k, v in rows.items()}
        doc_number = {d: i for i, d in enumerate(dict.fromkeys(doc_ids))}
        owners = {}
        for k, (_, krows) in entries.items():
            plain = plain_rows.get(k, set())
            if len(plain) < len(krows):  # some rows carry it only as a one-document name
                owners[k] = np.asarray([-1 if r in plain else doc_number[doc_ids[r]] for r in krows], dtype=np.int64)
        return cls(entries, owners)

    def __len__(self) -> int:
        return len(self.entries)

    def rows(self, key: str) -> np.ndarray:
        return self.entries[key][1]

    def readable(self, key: str, allowed: np.ndarray | None) -> bool:
        """Does the entity name something the mask lets the caller read?"""
        return len(self.named_rows(key, allowed)) > 0

    def named_rows(self, key: str, allowed: np.ndarray | None) -> np.ndarray:
        """The readable rows the entity names (every row when `allowed` is None): rows carrying
        it as a title or value when any is visible, else the rows of the one readable document
        carrying it as a one-document name (none when several readable documents do)."""
        if allowed is None or allowed.flags.writeable or allowed.base is not None:  # memoize owned, frozen masks only
            return self._named_rows(key, allowed)
        memo = self._memo(allowed)
        out = memo.get(key)
        if out is None:
            out = memo[key] = self._named_rows(key, allowed)
        return out

    def _memo(self, allowed: np.ndarray) -> dict[str, np.ndarray]:
        """Answers per read-only mask (the access layer caches one per principal): every
        attempt asks about the same entities again. A few masks, a bounded number of keys."""
        with self._lock:
            for mask, memo in self._memos:
                if mask is allowed:
                    if len(memo) > MEMO_KEYS:
                        memo.clear()
                    return memo
            memo = {}
            self._memos.insert(0, (allowed, memo))
            del self._memos[MEMO_MASKS:]
            return memo

    def _named_rows(self, key: str, allowed: np.ndarray | None) -> np.ndarray:
        rows = self.entries[key][1]
        seen = np.ones(len(rows), dtype=bool) if allowed is None else allowed[rows]
        owners = self.owners.get(key)
        named: np.ndarray
        if owners is None:
            named = rows[seen]
            return named
        plain = seen & (owners == -1)
        if plain.any():
            named = rows[plain]
            return named
        docs = owners[seen]
        return rows[seen] if len(docs) and docs.min() == docs.max() else rows[:0]  # one document

    def find(self, text: str, allowed: np.ndarray | None = None, exclude: Sequence[str] = ()) -> list[str]:
        """Entities named in `text`, as written there (so a constraint is a substring of the
        question): at each word the longest readable entity, then on after it."""
        skip = {_key(e) for e in exclude}
        found: list[str] = []
        free = 0
        for pos, options in self._candidates(text):
            if pos < free:
                continue
            for n, surface, key in options:
                if self.readable(key, allowed):
                    if key not in skip:
                        found.append(surface)
                    free = pos + n
                    break
        return list(dict.fromkeys(found))

    @lru_cache(maxsize=8192)  # noqa: B019 - passages recur across questions; one index per snapshot
    def _candidates(self, text: str) -> tuple[tuple[int, tuple[tuple[int, str, str], ...]], ...]:
        """Every word position where an entity starts, with (words, surface form, key) of each
        entity starting there, longest first; before any access filtering."""
        words = _TOKEN.findall(text)
        # ASCII lowers character for character, so one pass over the lowered text gives the same words.
        lowered = _TOKEN.findall(text.lower()) if text.isascii() else [w.lower() for w in words]
        entries, prefixes = self.entries, self._prefixes
        spans: list[tuple[int, int]] = []  # character offsets, found only when some entity is
        out = []
        for i in [i for i, w in enumerate(lowered) if w in entries or w in prefixes]:
            # Grow the key word by word while it is still the start of some entity.
            key, n, options = lowered[i], 1, []
            while True:
                if key in entries and (n > 1 or _looks_like_name(words[i])):
                    spans = spans or [m.span() for m in _TOKEN.finditer(text)]
                    options.append((n, text[spans[i][0] : spans[i + n - 1][1]], key))
                if key not in prefixes or i + n >= len(words):
                    break
                key, n = f"{key} {lowered[i + n]}", n + 1
            if options:
                out.append((i, tuple(reversed(options))))
        return tuple(out)


def _looks_like_name(token: str) -> bool:
    return token[:1].isupper() or any(c.isdigit() for c in token) or "-" in token


def bridge_candidates(titles: EntityIndex, doc_ids: Sequence[str], hits: Sequence[Hit], question: str,
                      allowed: np.ndarray) -> tuple[str, ...]:
    """Documents whose title (or an identifier in it) the question or a first-hop passage
    names: candidate second hops, in order of first mention, readable ones only."""
    out: dict[str, None] = {}
    sources = [(None, question)] + [(h.doc_id, f"{h.title or ''}\n{h.text}") for h in hits]
    for origin, text in sources:  # documents the question names, then those the passages name
        for name in titles.find(text, allowed):
            for row in titles.named_rows(_key(name), allowed):
                if doc_ids[row] != origin:
                    out.setdefault(doc_ids[row], None)
    return tuple(out)
