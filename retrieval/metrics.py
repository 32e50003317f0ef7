"""Retrieval and latency metrics over plain values (the same formulas BEIR/trec_eval use)."""

from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence

from retrieval.types import Hit


def doc_ranking(hits: Iterable[Hit]) -> list[str]:
    """Documents in the order their first chunk appears (chunk hits -> document ranking)."""
    return list(dict.fromkeys(h.doc_id for h in hits))


def ndcg_at_k(ranked: Sequence[str], relevant: Mapping[str, float], k: int = 10) -> float:
    """nDCG@k with gain = relevance grade and log2(rank + 1) discount (Jarvelin & Kekalainen 2002)."""
    if not relevant:
        return 0.0
    dcg = sum(relevant.get(d, 0.0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(ranked: Sequence[str], relevant: Iterable[str], k: int) -> float:
    rel = {d for d in relevant}
    if not rel:
        return 0.0
    return len(rel & set(ranked[:k])) / len(rel)


def reciprocal_rank(ranked: Sequence[str], relevant: Iterable[str]) -> float:
    rel = set(relevant)
    for i, d in enumerate(ranked):
        if d in rel:
            return 1.0 / (i + 1)
    return 0.0


def all_found(ranked: Sequence[str], relevant: Iterable[str], k: int) -> bool:
    """True when every relevant document is in the top k (multi-hop 'full support')."""
    return set(relevant) <= set(ranked[:k])


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method), q in [0, 100]."""
    if not values:
        return 0.0
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def mean(values: Iterable[float]) -> float:
    xs = list(values)
    return sum(xs) / len(xs) if xs else 0.0
