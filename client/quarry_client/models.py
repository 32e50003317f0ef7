"""The wire models of Quarry's HTTP API: what the server answers, defined once here.

The server's routes import these for their responses and OpenAPI document, and the client
parses answers with them, so both sides read one definition. Requests are built by the client
as plain JSON; the server validates them with its own bounded models (`routes/service/schemas.py`:
their bounds are the server's limits, which a client cannot know in advance).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class Offsets(BaseModel):
    start: int
    end: int


class ContextItem(BaseModel):
    """One passage with its provenance; its text is untrusted evidence, never instructions."""

    rank: int
    chunk_id: str
    doc_id: str
    title: str | None
    text: str
    source: str | None
    date: str | None
    offsets: Offsets
    page: int | None = Field(default=None, description="the PDF page the passage is on (1-based)")
    section: list[str] = Field(default_factory=list, description="the heading path of a DOCX or HTML passage, outermost first")
    score: float
    retrievers: list[str]
    trust: Literal["untrusted_evidence"]

    def provenance(self) -> dict[str, Any]:
        """Everything but the text, under the answer shape's names: the metadata the
        LangChain and LlamaIndex retrievers attach to each passage."""
        return {"doc_id": self.doc_id, "chunk_id": self.chunk_id, "title": self.title, "source": self.source,
                "date": self.date, "offsets": {"start": self.offsets.start, "end": self.offsets.end},
                "page": self.page, "section": list(self.section),
                "score": self.score, "retrievers": list(self.retrievers), "trust": self.trust}


class Rows(BaseModel):
    sql: str
    columns: list[str]
    data: list[list[Any]]
    tables: list[str]
    truncated: bool
    doc_ids: list[str]
    trust: Literal["untrusted_evidence"]


class Gap(BaseModel):
    """Why there is not enough evidence, and what is missing: a result, not an error."""

    reason: Literal["no_authorized_evidence", "insufficient_evidence", "constraint_unmet", "deadline_exceeded"]
    missing: list[str]
    detail: str
    partial_context: bool


class Declined(BaseModel):
    """The table a question is about, when translating the question to SQL was declined: the
    rows were not evidence, and an answer context came from passages that hold the words the
    table could not link."""

    table: str | None = Field(description="the readable table the question names (its noun, a row's key or its "
                                          "columns); null on /v1/sql when the question names none")
    reason: str = Field(description="why the translator declined")
    unlinked: list[str] = Field(description="the question's words the table's schema could not link")
    missing: list[str] = Field(default_factory=list, description="the same as `missing` labels: `table:NAME`, "
                                                                 "then `unlinked:WORD` per word")


class Listing(BaseModel):
    """What a question that asks for a list gathered: every document the caller may read within
    its period or filters. Counted over the caller's readable documents only."""

    complete: bool = Field(description="the context holds every readable document within the period or filters")
    documents: int = Field(description="readable documents found within the period or filters")
    shown: int = Field(description="how many of them the context holds (one passage each, at most k)")
    bound_reached: bool = Field(description="the server's passage bound was reached: there may be more documents")


class RouteOut(BaseModel):
    chosen: str
    scores: dict[str, float]
    reason: str


class Answer(BaseModel):
    status: Literal["answer_context", "evidence_gap"]
    context: list[ContextItem]
    rows: Rows | None
    gap: Gap | None
    constraints: dict[str, Any]
    route: RouteOut
    attempts: list[dict[str, Any]]
    stop_reason: Literal["sufficient", "attempts_exhausted", "deadline", "no_strategy_left"]
    declined: Declined | None = Field(default=None, description="the table the question is about when its SQL "
                                      "translation was declined (answers from earlier servers leave it out)")
    listing: Listing | None = Field(default=None, description="for a question that asks only for the list of a "
                                    "period's (or the filters') documents: the list's size and whether the context "
                                    "holds all of it (its grade's source is `construction`)")
    trace_id: str
    elapsed_ms: float

    @property
    def is_gap(self) -> bool:
        return self.status == "evidence_gap"


class SearchOut(BaseModel):
    retriever: str
    hits: list[ContextItem]
    trace_id: str


class SqlOut(BaseModel):
    status: Literal["rows", "declined"]
    rows: Rows | None
    declined: dict[str, Any] | None
    trace_id: str


class RegionOut(BaseModel):
    """Where a span of a document read from a file came from."""

    start: int
    end: int
    page: int | None = None
    section: list[str] = Field(default_factory=list)


class DocumentOut(BaseModel):
    doc_id: str
    title: str | None
    text: str
    source: str | None
    date: str | None
    metadata: dict[str, Any]
    regions: list[RegionOut] = Field(default_factory=list, description="a PDF's pages or a DOCX/HTML file's sections, "
                                     "as offsets into `text`; empty for a document written as text")
    trust: Literal["untrusted_evidence"]


class ErrorDetail(BaseModel):
    code: str
    message: str
    retryable: bool


class ErrorOut(BaseModel):
    error: ErrorDetail


class ToolErrorOut(BaseModel):
    code: str
    message: str
    retryable: bool


class ToolCallOut(BaseModel):
    call_id: str
    result: dict[str, Any] | None = None
    error: ToolErrorOut | None = None


class WrittenDocument(BaseModel):
    op: Literal["put", "delete", "acl"]
    doc_id: str


class WriteOut(BaseModel):
    status: Literal["applied"]
    generation: int = Field(description="the index generation holding the change (its write-ahead log seq); "
                                        "every request that starts after this answer sees it")
    documents: list[WrittenDocument]
    shard: int | None = Field(None, description="on a sharded index, the shard that took the write; `generation` is "
                                                "then that shard's log seq")


class FeedbackOut(BaseModel):
    trace_id: str
    verdict: Literal["answered", "wrong_context", "wrong_gap"]
    doc_ids: list[str] | None = Field(description="the documents named as answering the question, in their stored form")
    replaced: bool = Field(description="whether this replaced the caller's earlier feedback on the same answer")


__all__ = ["Answer", "ContextItem", "Declined", "DocumentOut", "ErrorDetail", "ErrorOut", "FeedbackOut", "Gap", "Offsets",
           "RouteOut", "Rows", "SearchOut", "SqlOut", "ToolCallOut", "ToolErrorOut", "WriteOut", "WrittenDocument"]
