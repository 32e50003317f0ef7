"""The JSON shapes every interface returns (HTTP, MCP and CLI print the same thing)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from retrieval.table_decline import decline_json
from retrieval.types import Document, Gap, Hit

if TYPE_CHECKING:
    from retrieval.loop import LoopResult


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
        "page": hit.page,
        "section": list(hit.section),
        "score": round(hit.score, 6),
        "retrievers": list(hit.retrievers),
        "trust": "untrusted_evidence",
    }


def document_json(doc: Document) -> dict[str, Any]:
    """One document as the document endpoint and tool return it (a readable one: the caller
    checked the ACL); its text is untrusted evidence like a passage's."""
    return {"doc_id": doc.id, "title": doc.title, "text": doc.text, "source": doc.source,
            "date": doc.date.isoformat() if doc.date else None, "metadata": dict(doc.metadata),
            "regions": [{"start": r.start, "end": r.end, "page": r.page, "section": list(r.section)} for r in doc.regions],
            "trust": "untrusted_evidence"}


def hits_json(hits: Sequence[Hit]) -> list[dict[str, Any]]:
    return [hit_json(h, i) for i, h in enumerate(hits, start=1)]


def gap_json(gap: Gap | None) -> dict[str, Any] | None:
    """An evidence gap as the answer's `gap` field (client/quarry_client/models.py's `Gap`)."""
    if gap is None:
        return None
    return {"reason": gap.reason, "missing": list(gap.missing), "detail": gap.detail, "partial_context": gap.partial_context}


def result_json(result: LoopResult) -> dict[str, Any]:
    """The answer shape of DESIGN.md for a LoopResult (HTTP, MCP and CLI print this)."""
    rows = result.rows.to_json() if result.rows is not None and hasattr(result.rows, "to_json") else None
    return {
        "status": result.status,
        "context": hits_json(result.context),
        "rows": rows,
        "gap": gap_json(result.gap),
        "constraints": result.constraints.to_json(),
        "route": result.decision.to_json(),
        "attempts": [a.to_json() for a in result.attempts],
        "stop_reason": result.stop_reason,
        "declined": decline_json(result.declined) if result.declined is not None else None,
        "listing": result.listing.to_json() if result.listing is not None else None,
        "trace_id": result.trace_id,
        "elapsed_ms": round(result.elapsed_ms, 2),
    }
