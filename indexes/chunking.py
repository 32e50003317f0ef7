"""Split document text into passages with exact character offsets.

Greedy packing of paragraphs, then sentences, up to `max_chars`; a sentence longer than that
is cut at whitespace. `text[start:end]` of the document is always the chunk's text, so
provenance can be checked by anyone holding the document.
"""

from __future__ import annotations

import re
from typing import Iterator, Sequence

from retrieval.types import Chunk, Document

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
        for i, (s, e) in enumerate(chunk_spans(doc.text, max_chars)):
            chunks.append(Chunk(row=first_row + len(chunks), chunk_id=f"{doc.id}#{i}", doc_id=doc.id, start=s, end=e,
                                text=doc.text[s:e]))
    return chunks
