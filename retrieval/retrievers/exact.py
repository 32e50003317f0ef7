"""Exact retrieval: literal phrases, identifiers and regular expressions over the catalog text.

Query syntax: `/pattern/` is an RE2 regular expression (linear time, so no catastrophic
backtracking); otherwise quoted phrases and identifiers must all be present, and when the
query has neither, the whole query is one literal phrase. Matching ignores case.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from retrieval.access import ChunkTable, top_k
from retrieval.constraints import exact_query, identifiers, quoted_phrases
from retrieval.text import content_terms
from retrieval.types import AccessScope, Filters, Hit

MAX_RANKING_TERMS = 16


class TextScanner(Protocol):
    def match_rows(self, phrases: Sequence[str], patterns: Sequence[str], terms: Sequence[str],
                   allowed: np.ndarray, identifiers: Sequence[str] = ()) -> list[tuple[int, float]]: ...


class ExactRetriever:
    name = "exact"

    def __init__(self, scanner: TextScanner, chunks: ChunkTable) -> None:
        self._scanner = scanner
        self._chunks = chunks

    def search(self, query: str, access: AccessScope, k: int, filters: Filters) -> list[Hit]:
        allowed = self._chunks.mask(access, filters)
        if not allowed.any():
            return []
        spec = exact_query(query)
        terms = [] if spec.regex else _ranking_terms(query)
        matches = self._scanner.match_rows(spec.phrases, spec.patterns, terms, allowed,  # the mask applies inside the scan
                                           identifiers=spec.identifiers)
        if not matches:
            return []
        rows = np.fromiter((r for r, _ in matches), dtype=np.int64, count=len(matches))
        scores = np.zeros(len(self._chunks), dtype=np.float64)
        scores[rows] = [s for _, s in matches]
        matched = np.zeros(len(self._chunks), dtype=bool)
        matched[rows] = True
        best = top_k(scores, allowed & matched, k, order=self._chunks.tiebreak)
        return [self._chunks.hit(r, scores[r], self.name, (("exact", float(scores[r])),)) for r in best]


def _ranking_terms(query: str) -> list[str]:
    """Query words outside the required items: they only order the matches."""
    required = set(content_terms(" ".join(quoted_phrases(query) + identifiers(query))))
    return [t for t in content_terms(query) if t not in required][:MAX_RANKING_TERMS]
