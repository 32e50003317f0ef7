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
from typing import Iterable, Sequence

import numpy as np

from retrieval.text import STOPWORDS

MAX_WORDS = 8
_PAREN = re.compile(r"\s*\([^)]*\)\s*$")
_TOKEN = re.compile(r"\w+(?:['.&-]\w+)*", re.UNICODE)  # no trailing punctuation: "University." -> "University"


def _key(text: str) -> str:
    return " ".join(t.lower() for t in _TOKEN.findall(text))


@dataclass(eq=False)
class EntityIndex:
    """normalised entity -> (display form, chunk rows that carry it)."""

    entries: dict[str, tuple[str, np.ndarray]] = field(default_factory=dict)
    _prefixes: set[str] = field(default_factory=set, repr=False)  # proper word prefixes of the entities

    def __post_init__(self) -> None:
        for key in self.entries:
            words = key.split(" ")
            self._prefixes.update(" ".join(words[:n]) for n in range(1, len(words)))

    @classmethod
    def build(cls, names_by_row: Iterable[tuple[int, str]]) -> EntityIndex:
        rows: dict[str, list[int]] = {}
        display: dict[str, str] = {}
        for row, name in names_by_row:
            name = _PAREN.sub("", name).strip()
            key = _key(name)
            n_words = len(key.split())
            if not key or n_words > MAX_WORDS or key in STOPWORDS or len(key) < 3 or key.isdigit():
                continue
            rows.setdefault(key, []).append(row)
            display.setdefault(key, name)
        return cls({k: (display[k], np.unique(np.asarray(v, dtype=np.int64))) for k, v in rows.items()})

    def __len__(self) -> int:
        return len(self.entries)

    def rows(self, key: str) -> np.ndarray:
        return self.entries[key][1]

    def find(self, text: str, allowed: np.ndarray | None = None, exclude: Sequence[str] = ()) -> list[str]:
        """Entities named in `text`, as written there (so a constraint is a substring of the
        question), longest match first, readable ones only."""
        skip = {_key(e) for e in exclude}
        found = [surface for surface, key in self._mentions(text)
                 if key not in skip and (allowed is None or allowed[self.entries[key][1]].any())]
        return list(dict.fromkeys(found))

    @lru_cache(maxsize=8192)  # noqa: B019 - passages recur across questions; one index per snapshot
    def _mentions(self, text: str) -> tuple[tuple[str, str], ...]:
        """(surface form, key) of every entity mention, before any access filtering."""
        tokens = [(m.group(0), m.start()) for m in _TOKEN.finditer(text)]
        lowered = [t.lower() for t, _ in tokens]
        entries, prefixes = self.entries, self._prefixes
        out: list[tuple[str, str]] = []
        i = 0
        while i < len(tokens):
            # Grow the key word by word while it is still the start of some entity; keep the longest hit.
            key, n, matched = lowered[i], 1, 0
            while True:
                if key in entries and (n > 1 or _looks_like_name(tokens[i][0])):
                    matched = n
                if key not in prefixes or i + n >= len(tokens):
                    break
                key, n = f"{key} {lowered[i + n]}", n + 1
            if matched:
                last, last_start = tokens[i + matched - 1]
                out.append((text[tokens[i][1] : last_start + len(last)], " ".join(lowered[i : i + matched])))
            i += matched or 1
        return tuple(out)


def _looks_like_name(token: str) -> bool:
    return token[:1].isupper() or any(c.isdigit() for c in token) or "-" in token


def bridge_candidates(titles: EntityIndex, doc_ids: Sequence[str], hits: Sequence, question: str,
                      allowed: np.ndarray) -> tuple[str, ...]:
    """Documents whose title (or an identifier in it) the question or a first-hop passage
    names: candidate second hops, in order of first mention, readable ones only."""
    out: dict[str, None] = {}
    sources = [(None, question)] + [(h.doc_id, f"{h.title or ''}\n{h.text}") for h in hits]
    for origin, text in sources:  # documents the question names, then those the passages name
        for name in titles.find(text, allowed):
            for row in titles.rows(_key(name)):
                if allowed[row] and doc_ids[row] != origin:
                    out.setdefault(doc_ids[row], None)
    return tuple(out)
