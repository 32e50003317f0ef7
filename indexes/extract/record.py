"""What an extractor returns, and the one error a file that yields no usable text raises."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Any, Literal

from indexes.extract.grids import Grid
from retrieval.types import Region

BadReason = Literal["encrypted", "corrupt", "no_text", "not_docx", "no_body_text", "too_large", "too_slow",
                    "mismatched_type"]
MAX_TEXT_CHARS = 5_000_000  # the longest document text, from a file or any other source


@dataclass(frozen=True)
class Extracted:
    """A file's reading-order text with where each part came from.

    `regions` cover the text in order without overlap (gaps are separators such as blank
    lines); each carries a PDF page or a heading path. `metadata` is flat text taken from the
    file (author, subject, keywords, ...): a sidecar or manifest may override any of it."""

    text: str
    regions: tuple[Region, ...]
    title: str | None = None
    date: date | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    pages: int | None = None  # PDF page count (pages per second in the benchmark)
    tables: tuple[Grid, ...] = ()  # the file's tables (indexes/extract/grids.py), also rendered in `text`

    def fields(self) -> dict[str, Any]:
        """The document fields the file itself says (the weakest statement: an ingest's
        manifests and sidecar, or a PUT's query, override them)."""
        return {"title": self.title, "date": self.date.isoformat() if self.date else None, "metadata": dict(self.metadata)}


class BadFile(Exception):
    """A file that cannot give a document: encrypted, corrupt, a scan without a text layer, a
    DOCX that is not a zip, HTML with no body text. `reason` is the typed kind; the ingest
    names the file beside it."""

    def __init__(self, reason: BadReason, message: str) -> None:
        super().__init__(message)
        self.reason: BadReason = reason
        self.message = message
