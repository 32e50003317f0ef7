"""Rank fusion of several retrievers' hit lists.

Reciprocal rank fusion (Cormack, Clarke & Buettcher, SIGIR 2009): score(d) = sum_i w_i / (k + rank_i(d)),
rank starting at 1. It ignores the retrievers' raw score scales, which differ (BM25 is
unbounded, cosine lies in [-1, 1]), and needs no training.

Z-score fusion standardises each list's scores (mean 0, standard deviation 1 over that
list's candidates) and adds them with weights: unlike RRF it keeps how far apart the
candidates are, so a passage far ahead on one side is not levelled with the next one. A
candidate one side did not return gets that side's lowest standardised score: it ranked
below everything that side kept.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Hashable, Mapping, Sequence, TypeVar

from retrieval.types import Hit

DEFAULT_RRF_K = 60
K = TypeVar("K", bound=Hashable)


def rrf_scores(rankings: Mapping[str, Sequence[K]], k: int = DEFAULT_RRF_K,
               weights: Mapping[str, float] | None = None) -> tuple[dict[K, float], dict[K, int]]:
    """(fused score, best rank) of every id in the ranked id lists."""
    fused: dict[K, float] = {}
    best_rank: dict[K, int] = {}
    for name, ids in rankings.items():
        w = 1.0 if weights is None else weights.get(name, 1.0)
        for rank, key in enumerate(ids, start=1):
            fused[key] = fused.get(key, 0.0) + w / (k + rank)
            best_rank[key] = min(best_rank.get(key, rank), rank)
    return fused, best_rank


def zscore_scores(scored: Mapping[str, tuple[Sequence[K], Sequence[float]]],
                  weights: Mapping[str, float] | None = None) -> tuple[dict[K, float], dict[K, int]]:
    """(fused score, best rank) of every id in the (ids, scores) lists, best first in each."""
    fused: dict[K, float] = {}
    best_rank: dict[K, int] = {}
    floors: dict[str, float] = {}
    standard: dict[str, dict[K, float]] = {}
    for name, (ids, scores) in scored.items():
        n = len(ids)
        if n == 0:
            continue
        mean = sum(scores) / n
        sd = (sum((s - mean) ** 2 for s in scores) / n) ** 0.5 or 1.0
        standard[name] = {key: (s - mean) / sd for key, s in zip(ids, scores)}
        floors[name] = min(standard[name].values())
        for rank, key in enumerate(ids, start=1):
            best_rank[key] = min(best_rank.get(key, rank), rank)
    for key in best_rank:
        fused[key] = sum((1.0 if weights is None else weights.get(name, 1.0)) * z.get(key, floors[name])
                         for name, z in standard.items())
    return fused, best_rank


def rrf(
    rankings: Mapping[str, Sequence[Hit]],
    k: int = DEFAULT_RRF_K,
    weights: Mapping[str, float] | None = None,
    limit: int | None = None,
) -> list[Hit]:
    """Fuse ranked lists keyed by retriever name; the fused hit keeps every component's signals."""
    fused, best_rank = rrf_scores({name: [h.chunk_id for h in hits] for name, hits in rankings.items()}, k, weights)
    parts: dict[str, list[Hit]] = {}
    for hits in rankings.values():
        for hit in hits:
            parts.setdefault(hit.chunk_id, []).append(hit)
    order = sorted(fused, key=lambda c: (-fused[c], best_rank[c], c))
    if limit is not None:
        order = order[:limit]
    return [_merge(parts[c], fused[c]) for c in order]


def _merge(hits: list[Hit], score: float) -> Hit:
    retrievers: dict[str, None] = {}
    signals: dict[str, float] = {}
    for h in hits:
        for r in h.retrievers:
            retrievers.setdefault(r, None)
        for key, value in h.signals:
            signals.setdefault(key, value)
    signals["rrf"] = score
    return replace(hits[0], score=score, retrievers=tuple(retrievers), signals=tuple(signals.items()))
