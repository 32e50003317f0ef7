"""Split document text into passages with exact character offsets.

Greedy packing of paragraphs, then sentences, up to `max_chars`; a sentence longer than that
is cut at whitespace. `text[start:end]` of the document is always the chunk's text, so
provenance can be checked by anyone holding the document.

A document read from a file has regions (a PDF's pages, a DOCX, HTML or Markdown file's sections): a
chunk never crosses one, so each passage names one page or one heading path. A region that is
only a short heading of the region after it (a chapter title straight above its first
subsection) is folded into that one rather than becoming a passage of its own.
"""

from __future__ import annotations

import bisect
import re
from typing import Iterator, Sequence

from retrieval.types import Chunk, Document, Region

DEFAULT_MAX_CHARS = 1500
_SEGMENT = re.compile(r"[^\n]+?(?:[.!?](?=\s)|$)", re.MULTILINE)


def _segments(text: str) -> Iterator[tuple[int, int]]:
    """Sentence-ish spans (start, end), whitespace-trimmed, in order."""
    for m in _SEGMENT.finditer(text):
        start, end = m.start(), m.end()
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        if end > start:
            yield start, end


def _split_long(text: str, start: int, end: int, max_chars: int) -> Iterator[tuple[int, int]]:
    while end - start > max_chars:
        cut = text.rfind(" ", start + max_chars // 2, start + max_chars)
        cut = cut if cut > start else start + max_chars
        piece_end = cut
        while piece_end > start and text[piece_end - 1].isspace():
            piece_end -= 1
        yield start, piece_end
        start = cut
        while start < end and text[start].isspace():
            start += 1
    if end > start:
        yield start, end


def chunk_spans(text: str, max_chars: int = DEFAULT_MAX_CHARS) -> list[tuple[int, int]]:
    """Offsets of the passages of `text`; each is at most `max_chars` long."""
    spans: list[tuple[int, int]] = []
    cur_start: int | None = None
    cur_end = 0
    for s, e in _segments(text):
        for ps, pe in _split_long(text, s, e, max_chars):
            if cur_start is not None and pe - cur_start <= max_chars:
                cur_end = pe
                continue
            if cur_start is not None:
                spans.append((cur_start, cur_end))
            cur_start, cur_end = ps, pe
    if cur_start is not None:
        spans.append((cur_start, cur_end))
    return spans


def chunk_documents(docs: Sequence[Document], max_chars: int = DEFAULT_MAX_CHARS, first_row: int = 0) -> list[Chunk]:
    """Chunks of every document; `row` numbers them first_row, first_row + 1, ... across the
    corpus (an ingest chunks its documents a batch at a time)."""
    chunks: list[Chunk] = []
    for doc in docs:
        for i, (s, e) in enumerate(document_spans(doc, max_chars)):
            chunks.append(Chunk(row=first_row + len(chunks), chunk_id=f"{doc.id}#{i}", doc_id=doc.id, start=s, end=e,
                                text=doc.text[s:e]))
    return chunks


def document_spans(doc: Document, max_chars: int = DEFAULT_MAX_CHARS) -> list[tuple[int, int]]:
    """The passages of a document: within each of its regions when it has them."""
    if not doc.regions:
        return chunk_spans(doc.text, max_chars)
    spans: list[tuple[int, int]] = []
    for start, end in _region_spans(doc.text, doc.regions, max_chars):
        spans.extend((start + s, start + e) for s, e in chunk_spans(doc.text[start:end], max_chars))
    return spans


def _region_spans(text: str, regions: Sequence[Region], max_chars: int) -> list[tuple[int, int]]:
    """(start, end) of the regions to chunk within, a heading-only region joined to its child."""
    out: list[tuple[int, int]] = []
    pending: int | None = None  # start of a heading-only region waiting for its child
    for i, r in enumerate(regions):
        start = r.start if pending is None else pending
        pending = None
        nxt = regions[i + 1] if i + 1 < len(regions) else None
        short = len(text[r.start:r.end].strip()) <= max_chars // 10
        if (nxt is not None and short and r.page == nxt.page and len(nxt.section) > len(r.section)
                and nxt.section[: len(r.section)] == r.section):
            pending = start
            continue
        out.append((start, r.end))
    return out


def region_at(regions: Sequence[Region], starts: Sequence[int], last: int) -> Region | None:
    """The region of a passage whose last character is at `last` (`starts`: the regions'
    starts, in order): the last region starting at or before it. The last character, not the
    first, so a heading folded into its first subsection names the subsection."""
    if not regions:
        return None
    return regions[max(bisect.bisect_right(starts, last) - 1, 0)]
