"""Rank fusion of several ranked lists (retrievers' results, a decomposed question's sub-queries).

Reciprocal rank fusion (Cormack, Clarke & Buettcher, SIGIR 2009): score(d) = sum_i w_i / (k + rank_i(d)),
rank starting at 1. It ignores the retrievers' raw score scales, which differ (BM25 is
unbounded, cosine lies in [-1, 1]), and needs no training.

Z-score fusion standardises each list's scores (mean 0, standard deviation 1 over that
list's candidates) and adds them with weights: unlike RRF it keeps how far apart the
candidates are, so a passage far ahead on one side is not levelled with the next one. A
candidate one side did not return gets that side's lowest standardised score: it ranked
below everything that side kept.

One implementation serves every caller: `fuse` scores ranked key lists by either method and
orders them (fused score, then the best rank any list gave, then chunk id), whatever the keys
are: the hybrid retriever fuses chunk rows, `fuse_hits` (and `rrf`) fuses hit lists, such as
the sub-queries of a decomposed question.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Hashable, Literal, Mapping, Sequence, TypeVar, get_args

from retrieval.types import Hit

DEFAULT_RRF_K = 60
FusionMethod = Literal["rrf", "zscore"]
FUSION_METHODS: tuple[FusionMethod, ...] = get_args(FusionMethod)
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
        standard[name] = {key: (s - mean) / sd for key, s in zip(ids, scores, strict=True)}
        floors[name] = min(standard[name].values())
        for rank, key in enumerate(ids, start=1):
            best_rank[key] = min(best_rank.get(key, rank), rank)
    for key in best_rank:
        fused[key] = sum((1.0 if weights is None else weights.get(name, 1.0)) * z.get(key, floors[name])
                         for name, z in standard.items())
    return fused, best_rank


def fused_scores(ranked: Mapping[str, tuple[Sequence[K], Sequence[float]]], method: str = "rrf", k: int = DEFAULT_RRF_K,
                 weights: Mapping[str, float] | None = None) -> tuple[dict[K, float], dict[K, int]]:
    """(fused score, best rank) of every key in the (keys, scores) lists, best first in each,
    by `method` (one of FUSION_METHODS; RRF reads only the ranks, `k` only matters to it)."""
    if method == "rrf":
        return rrf_scores({name: keys for name, (keys, _) in ranked.items()}, k, weights)
    if method == "zscore":
        return zscore_scores(ranked, weights)
    raise ValueError(f"fusion method must be one of {', '.join(FUSION_METHODS)}, not {method!r}")


def fuse(ranked: Mapping[str, tuple[Sequence[K], Sequence[float]]], chunk_id: Callable[[K], str], method: str = "rrf",
         k: int = DEFAULT_RRF_K, weights: Mapping[str, float] | None = None, limit: int | None = None) -> list[tuple[K, float]]:
    """The fused keys, best first, with their fused scores (at most `limit`). Equal scores go to
    the better best rank, then to the smaller chunk id (`chunk_id(key)`), so the order never
    depends on the order the lists were given in."""
    fused, best_rank = fused_scores(ranked, method, k, weights)
    order = sorted(fused, key=lambda key: (-fused[key], best_rank[key], chunk_id(key)))
    return [(key, fused[key]) for key in order[:limit]]


def fuse_hits(rankings: Mapping[str, Sequence[Hit]], method: str = "rrf", k: int = DEFAULT_RRF_K,
              weights: Mapping[str, float] | None = None, limit: int | None = None) -> list[Hit]:
    """Fuse hit lists keyed by name (a retriever, a sub-query) by their chunk ids and scores;
    a fused hit keeps every component's retrievers and signals, and the fused score as the
    signal named after the method."""
    order = fuse({name: ([h.chunk_id for h in hits], [h.score for h in hits]) for name, hits in rankings.items()},
                 _itself, method, k, weights, limit)
    parts: dict[str, list[Hit]] = {}
    for hits in rankings.values():
        for hit in hits:
            parts.setdefault(hit.chunk_id, []).append(hit)
    return [_merge(parts[c], score, method) for c, score in order]


def rrf(
    rankings: Mapping[str, Sequence[Hit]],
    k: int = DEFAULT_RRF_K,
    weights: Mapping[str, float] | None = None,
    limit: int | None = None,
) -> list[Hit]:
    """Reciprocal rank fusion of hit lists (`fuse_hits` with method "rrf")."""
    return fuse_hits(rankings, "rrf", k, weights, limit)


def _itself(chunk_id: str) -> str:
    return chunk_id


def _merge(hits: list[Hit], score: float, method: str) -> Hit:
    retrievers: dict[str, None] = {}
    signals: dict[str, float] = {}
    for h in hits:
        for r in h.retrievers:
            retrievers.setdefault(r, None)
        for key, value in h.signals:
            signals.setdefault(key, value)
    signals[method] = score
    return replace(hits[0], score=score, retrievers=tuple(retrievers), signals=tuple(signals.items()))
