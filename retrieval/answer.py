"""The JSON shapes every interface returns (HTTP, MCP and CLI print the same thing)."""

from __future__ import annotations

from typing import Any, Sequence

from retrieval.types import Hit


def hit_json(hit: Hit, rank: int) -> dict[str, Any]:
    """A context item. Retrieved text is data, so it is always marked untrusted evidence."""
    return {
        "rank": rank,
        "chunk_id": hit.chunk_id,
        "doc_id": hit.doc_id,
        "title": hit.title,
        "text": hit.text,
        "source": hit.source,
        "date": hit.date,
        "offsets": {"start": hit.start, "end": hit.end},
        "score": round(hit.score, 6),
        "retrievers": list(hit.retrievers),
        "trust": "untrusted_evidence",
    }


def hits_json(hits: Sequence[Hit]) -> list[dict[str, Any]]:
    return [hit_json(h, i) for i, h in enumerate(hits, start=1)]
