"""Entities the catalog knows (document titles, short metadata values), found in text.

Matching is by whole words on normalised text, longest first. A one-word entity counts only
when it is written as a name (capitalised in the text, or containing a digit or a hyphen),
so common words that happen to be titles do not become constraints. Every entity carries the
chunk rows it comes from: callers keep only entities their access scope's mask may read, so
a forbidden document's title is never reported back as a constraint or used to bridge.
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass, field
from threading import Lock
from typing import Callable, Iterable, Sequence

import numpy as np

from retrieval.lru import Lru
from retrieval.text import STOPWORDS
from retrieval.types import Hit

MAX_WORDS = 8
MEMO_MASKS, MEMO_KEYS = 8, 50_000
FOUND_TEXTS, FOUND_MB = 8192, 32  # texts whose entity candidates an index keeps (passages recur across questions)
NAME_KEYS, NAME_KEYS_MB = 262_144, 128  # raw names whose keys a `key_memo` keeps across builds
_PAREN = re.compile(r"\s*\([^)]*\)\s*$")
_TOKEN = re.compile(r"\w+(?:['.&-]\w+)*", re.UNICODE)  # no trailing punctuation: "University." -> "University"


def _key(text: str) -> str:
    return " ".join(t.lower() for t in _TOKEN.findall(text))


def _normal_key(name: str) -> str:
    """The key of a raw name: of its display form (a trailing parenthesis dropped)."""
    return _key(_PAREN.sub("", name).strip())


def key_memo() -> Lru[str, str]:
    """A memo of raw name -> key for `EntityIndex.build`, kept by its caller across builds: a
    live index builds its entity indexes again at every write from mostly the same names."""
    return Lru(NAME_KEYS, NAME_KEYS_MB << 20, lambda name, key: len(name) + len(key))


Candidates = tuple[tuple[int, tuple[tuple[int, str, str], ...]], ...]  # per word position: (words, surface, key)


def _found_size(text: str, found: Candidates) -> int:
    """Roughly the bytes a text's kept candidates hold: the text, plus each option's strings."""
    return len(text) + sum(100 + 2 * len(surface) for _, options in found for _, surface, _ in options)


@dataclass(eq=False)
class EntityIndex:
    """normalised entity -> the chunk rows that carry it.

    `owner` marks entities that name a document only when the reader can see exactly one
    document carrying them (an identifier inside titles: "INC-2041" in "INC-2041: ledger
    outage" names that report, unless the reader sees two titles with it): per row the
    document number of a row that carries the entity that way, -1 for a row that carries it
    as a plain title or value. Both rules read the caller's mask only, so what is found
    equals what an index of the readable documents alone would find.

    Stored as flat arrays, not a dict of strings: keys and their proper word prefixes as
    sorted 64-bit string hashes (Python's own, so an index lives in the process that built
    it), rows in one CSR array. A million titles with their identifiers take tens of MB
    instead of a gigabyte; two names colliding on 64 bits is a chance of about 1e-7 per
    million-title index.
    """

    _keys: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # sorted key hashes
    _indptr: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))  # key i: rows[indptr[i]:indptr[i+1]]
    _rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # sorted within a key
    _owner: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # per row: document number or -1
    _owned: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # per key: some row has an owner
    _prefixes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64), repr=False)  # sorted hashes
    _memos: list[tuple[np.ndarray, dict[str, np.ndarray]]] = field(default_factory=list, repr=False)
    _lock: Lock = field(default_factory=Lock, repr=False)
    _found: Lru[str, Candidates] = field(default_factory=lambda: Lru(FOUND_TEXTS, FOUND_MB << 20, _found_size), repr=False)

    @classmethod
    def build(cls, names_by_row: Iterable[tuple[int, str]], one_document: Iterable[tuple[int, str]] = (),
              doc_ids: Sequence[str] = (), memo: Lru[str, str] | None = None) -> EntityIndex:
        """`names_by_row`: (row, name) pairs; `one_document`: (row, name) pairs that count only
        while one readable document carries them (`doc_ids[row]` names each row's document).
        `memo` (a `key_memo`) remembers each raw name's key for the next build."""
        hashes, rows, plain, prefixes = array("q"), array("q"), array("b"), array("q")
        for is_plain, pairs in ((1, names_by_row), (0, one_document)):
            for row, raw in pairs:
                key = memo.get(raw) if memo is not None else None
                if key is None:
                    key = _normal_key(raw)
                    if memo is not None:
                        memo.put(raw, key)
                if not key or len(key.split()) > MAX_WORDS or key in STOPWORDS or len(key) < 3 or key.isdigit():
                    continue
                hashes.append(hash(key))
                rows.append(row)
                plain.append(is_plain)
                if " " in key:
                    words = key.split(" ")
                    prefixes.extend(hash(" ".join(words[:n])) for n in range(1, len(words)))
        h = np.frombuffer(hashes, dtype=np.int64) if hashes else np.zeros(0, dtype=np.int64)
        r = np.frombuffer(rows, dtype=np.int64) if rows else np.zeros(0, dtype=np.int64)
        pl = np.frombuffer(plain, dtype=np.int8).astype(bool) if plain else np.zeros(0, dtype=bool)
        order = np.lexsort((~pl, r, h))  # by key, row, a plain pair first
        h, r, pl = h[order], r[order], pl[order]
        first = np.ones(len(h), dtype=bool)
        first[1:] = (h[1:] != h[:-1]) | (r[1:] != r[:-1])  # one (key, row) pair, plain if any pair was
        h, r, pl = h[first], r[first], pl[first]
        keys, starts = np.unique(h, return_index=True)
        owner = np.full(len(r), -1, dtype=np.int64)
        if (~pl).any():
            doc_number = {d: i for i, d in enumerate(dict.fromkeys(doc_ids))}
            owned_rows = np.flatnonzero(~pl)
            owner[owned_rows] = [doc_number[doc_ids[int(x)]] for x in r[owned_rows]]
        owned = np.logical_or.reduceat(~pl, starts) if len(starts) else np.zeros(0, dtype=bool)
        pre = np.unique(np.frombuffer(prefixes, dtype=np.int64)) if prefixes else np.zeros(0, dtype=np.int64)
        return cls(keys, np.append(starts, len(h)).astype(np.int64), r.copy(), owner, owned, pre)

    def _entry(self, key: str) -> int:
        """Position of `key` among the keys, or -1."""
        return _position(self._keys, hash(key))

    def _is_prefix(self, key: str) -> bool:
        return _position(self._prefixes, hash(key)) >= 0

    def __len__(self) -> int:
        return len(self._keys)

    def rows(self, key: str) -> np.ndarray:
        i = self._entry(key)
        if i < 0:
            raise KeyError(key)
        return self._rows[self._indptr[i] : self._indptr[i + 1]]

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
        """Answers per read-only mask (the access layer caches one per effective access scope): every
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
        i = self._entry(key)
        if i < 0:
            raise KeyError(key)
        lo, hi = int(self._indptr[i]), int(self._indptr[i + 1])
        rows = self._rows[lo:hi]
        seen = np.ones(len(rows), dtype=bool) if allowed is None else allowed[rows]
        named: np.ndarray
        if not self._owned[i]:
            named = rows[seen]
            return named
        owners = self._owner[lo:hi]
        plain = seen & (owners == -1)
        if plain.any():
            named = rows[plain]
            return named
        docs = owners[seen]
        return rows[seen] if len(docs) and docs.min() == docs.max() else rows[:0]  # one document

    def find(self, text: str, allowed: np.ndarray | None = None, exclude: Sequence[str] = ()) -> list[str]:
        """Entities named in `text`, as written there (so a constraint is a substring of the
        question): at each word the longest readable entity, then on after it."""
        return pick(self._candidates(text), lambda key: self.readable(key, allowed), exclude)

    def sightings(self, text: str, allowed: np.ndarray, doc_ids: Sequence[str]) -> Sightings:
        """What this index holds of the entities in `text` under the mask, for a front that
        merges several indexes (the shards of a cluster, retrieval/scatter_links.py): every
        candidate, and for each key with a readable row its documents (`Named`). Merged over
        every shard, `pick` and `named_docs` give what one index of all the rows gives."""
        found = self._candidates(text)
        named: dict[str, Named] = {}
        for _, options in found:
            for _, _, key in options:
                if key in named:
                    continue
                i = self._entry(key)
                lo, hi = int(self._indptr[i]), int(self._indptr[i + 1])
                rows, owners = self._rows[lo:hi], self._owner[lo:hi]
                seen = allowed[rows]
                plain = rows[seen & (owners == -1)] if self._owned[i] else rows[seen]
                owned = rows[seen & (owners != -1)] if self._owned[i] else rows[:0]
                if len(plain) or len(owned):
                    named[key] = Named(tuple(dict.fromkeys(doc_ids[int(r)] for r in plain)),
                                       tuple(dict.fromkeys(doc_ids[int(r)] for r in owned))[:2])
        return Sightings(found, named)

    def _candidates(self, text: str) -> Candidates:
        """Every word position where an entity starts, with (words, surface form, key) of each
        entity starting there, longest first; before any access filtering. Kept per text
        (passages recur across questions)."""
        found = self._found.get(text)
        if found is None:
            found = self._scan(text)
            self._found.put(text, found)
        return found

    def _scan(self, text: str) -> Candidates:
        words = _TOKEN.findall(text)
        # ASCII lowers character for character, so one pass over the lowered text gives the same words.
        lowered = _TOKEN.findall(text.lower()) if text.isascii() else [w.lower() for w in words]
        hashed = np.fromiter((hash(w) for w in lowered), dtype=np.int64, count=len(lowered))
        is_key, is_prefix = _members(self._keys, hashed), _members(self._prefixes, hashed)
        spans: list[tuple[int, int]] = []  # character offsets, found only when some entity is
        out = []
        for i in np.flatnonzero(is_key | is_prefix).tolist():
            # Grow the key word by word while it is still the start of some entity.
            key, n, options = lowered[i], 1, []
            known, longer = bool(is_key[i]), bool(is_prefix[i])
            while True:
                if known and (n > 1 or _looks_like_name(words[i])):
                    spans = spans or [m.span() for m in _TOKEN.finditer(text)]
                    options.append((n, text[spans[i][0] : spans[i + n - 1][1]], key))
                if not longer or i + n >= len(words):
                    break
                key, n = f"{key} {lowered[i + n]}", n + 1
                known, longer = self._entry(key) >= 0, self._is_prefix(key)
            if options:
                out.append((i, tuple(reversed(options))))
        return tuple(out)


@dataclass(frozen=True)
class Named:
    """The readable documents that carry one entity in one index: as a plain title or value,
    and as a one-document name (at most two kept: two already name neither)."""

    plain: tuple[str, ...]
    owners: tuple[str, ...]

    def __add__(self, other: Named) -> Named:
        return Named(self.plain + other.plain, tuple(dict.fromkeys(self.owners + other.owners))[:2])

    @property
    def docs(self) -> tuple[str, ...]:
        """The documents the entity names (`EntityIndex.named_rows`' rule), sorted by id."""
        if self.plain:
            return tuple(sorted(set(self.plain)))
        return self.owners if len(self.owners) == 1 else ()


@dataclass(frozen=True)
class Sightings:
    """One index's candidates in a text (per word position, longest first) and, for each key
    with a readable row, what it names (`EntityIndex.sightings`)."""

    candidates: Candidates
    named: dict[str, Named]

    def __add__(self, other: Sightings) -> Sightings:
        options: dict[int, dict[int, tuple[int, str, str]]] = {}
        for pos, found in (*self.candidates, *other.candidates):
            for option in found:
                options.setdefault(pos, {}).setdefault(option[0], option)
        merged = tuple((pos, tuple(o for _, o in sorted(options[pos].items(), reverse=True))) for pos in sorted(options))
        named = dict(self.named)
        for key, n in other.named.items():
            named[key] = named[key] + n if key in named else n
        return Sightings(merged, named)

    def readable(self, key: str) -> bool:
        return bool(self.named[key].docs) if key in self.named else False


NO_SIGHTINGS = Sightings((), {})


def pick(candidates: Candidates, readable: Callable[[str], bool], exclude: Sequence[str] = ()) -> list[str]:
    """At each word position the longest readable entity (as written in the text), then on
    after it; keys of `exclude` are passed over but still consume their words."""
    skip = {_key(e) for e in exclude}
    found: list[str] = []
    free = 0
    for pos, options in candidates:
        if pos < free:
            continue
        for n, surface, key in options:
            if readable(key):
                if key not in skip:
                    found.append(surface)
                free = pos + n
                break
    return list(dict.fromkeys(found))


def name_key(name: str) -> str:
    """The key an entity found in a text is known by."""
    return _key(name)


def _position(sorted_hashes: np.ndarray, value: int) -> int:
    i = int(np.searchsorted(sorted_hashes, value))
    return i if i < len(sorted_hashes) and int(sorted_hashes[i]) == value else -1


def _members(sorted_hashes: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Which `values` occur in `sorted_hashes`, in one vectorised search."""
    if not len(sorted_hashes) or not len(values):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_hashes, values), len(sorted_hashes) - 1)
    return np.asarray(sorted_hashes[at] == values)


def _looks_like_name(token: str) -> bool:
    return token[:1].isupper() or any(c.isdigit() for c in token) or "-" in token


def bridge_candidates(titles: EntityIndex, doc_ids: Sequence[str], hits: Sequence[Hit], question: str,
                      allowed: np.ndarray) -> tuple[str, ...]:
    """Documents whose title (or an identifier in it) the question or a first-hop passage
    names: candidate second hops, in order of first mention, readable ones only."""
    out: dict[str, None] = {}
    for origin, text in bridge_texts(hits, question):  # documents the question names, then those the passages name
        for name in titles.find(text, allowed):
            # one name's documents by id, not by where they are stored (a cluster's shards store them apart)
            for doc in sorted({doc_ids[int(row)] for row in titles.named_rows(_key(name), allowed)}):
                if doc != origin:
                    out.setdefault(doc, None)
    return tuple(out)


def bridge_texts(hits: Sequence[Hit], question: str) -> list[tuple[str | None, str]]:
    """(origin document, text) of what may name a second hop: the question, then each passage."""
    return [(None, question)] + [(h.doc_id, f"{h.title or ''}\n{h.text}") for h in hits]
