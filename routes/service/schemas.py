"""Request models of the HTTP API (and the OpenAPI document at /docs), and its error entries.

Requests are strict: unknown fields are rejected, a boolean is not an integer, strings and
lists are bounded. Responses describe the answer shape shared with MCP and the CLI; they are
defined once, in the client distribution (`client/quarry_client/models.py`), and the routes
import them from there.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, StringConstraints, model_validator

from quarry_client.models import ErrorOut
from retrieval.limits import Limits
from retrieval.registry import SEARCH_ROUTES
from retrieval.sql.guard import MAX_SQL_CHARS
from retrieval.types import Filters

MAX_NAME_CHARS = 256  # a document id or source name; longer ones cannot be asked for
FilterValue = Annotated[StrictStr, Field(max_length=MAX_NAME_CHARS)]


def check_text(value: Any, depth: int = 0) -> None:
    """Raise ValueError for a string that is not Unicode text (a lone surrogate such as
    "\\ud800", which JSON can carry and UTF-8 cannot), anywhere in a parsed body."""
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("a string is not valid Unicode text (it holds a lone surrogate)") from None
    elif isinstance(value, dict):
        for k, v in value.items():
            check_text(k, depth + 1)
            check_text(v, depth + 1)
    elif isinstance(value, list):
        for v in value:
            check_text(v, depth + 1)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _text_only(cls, data: Any) -> Any:
        check_text(data)
        return data


@dataclass(frozen=True)
class RequestModels:
    """The request bodies of one app, bounded by its runtime limits (and so is its OpenAPI)."""

    filters: type[Strict]
    query: type[Strict]
    search: type[Strict]
    sql: type[Strict]


def request_models(limits: Limits) -> RequestModels:
    """Request bodies whose bounds (question length, k, attempts, deadline, filter sizes) are
    those of `limits`: what the app validates is what its OpenAPI document advertises."""

    class FiltersIn(Strict):
        sources: list[FilterValue] | None = Field(default=None, max_length=limits.max_filter_values,
                                                  description="only these sources")
        date_from: date | None = Field(default=None, description="only documents dated on or after (YYYY-MM-DD)")
        date_to: date | None = Field(default=None, description="only documents dated on or before (YYYY-MM-DD)")
        doc_ids: list[FilterValue] | None = Field(default=None, max_length=limits.max_filter_values,
                                                  description="only these documents")

        model_config = ConfigDict(extra="forbid", strict=False)  # dates arrive as ISO strings

        def to_filters(self) -> Filters:
            return Filters(tuple(self.sources) if self.sources is not None else None, self.date_from, self.date_to,
                           tuple(self.doc_ids) if self.doc_ids is not None else None)

    class QueryIn(Strict):
        question: StrictStr = Field(min_length=1, max_length=limits.max_query_chars)
        k: StrictInt | None = Field(default=None, ge=1, le=limits.max_k,
                                    description=f"passages in the context (default {limits.default_k})")
        max_attempts: StrictInt | None = Field(default=None, ge=1, le=limits.max_attempts,
                                               description=f"retrieval attempts (default {limits.default_attempts})")
        deadline_ms: StrictInt | None = Field(default=None, ge=1, le=limits.max_deadline_ms,
                                              description=f"time budget (default {limits.default_deadline_ms})")
        filters: FiltersIn | None = None
        today: Annotated[date, Field(strict=False)] | None = Field(
            default=None,
            description="the date 'last quarter' and other relative dates refer to (YYYY-MM-DD; default: the server's)")

    class SearchIn(Strict):
        query: StrictStr = Field(min_length=1, max_length=limits.max_query_chars)
        retriever: Literal[SEARCH_ROUTES]  # type: ignore[valid-type]
        k: StrictInt | None = Field(default=None, ge=1, le=limits.max_k,
                                    description=f"number of hits (default {limits.default_k})")
        filters: FiltersIn | None = None

    class SqlIn(Strict):
        sql: StrictStr | None = Field(default=None, min_length=1, max_length=MAX_SQL_CHARS,
                                      description="one read-only SELECT (needs the sql scope)")
        question: StrictStr | None = Field(default=None, min_length=1, max_length=limits.max_query_chars,
                                           description="a question to translate to SQL")
        today: Annotated[date, Field(strict=False)] | None = Field(
            default=None, description="the date relative dates in the question refer to (YYYY-MM-DD; default: the server's)")

        @model_validator(mode="after")
        def one_of(self) -> SqlIn:
            if (self.sql is None) == (self.question is None):
                raise ValueError("send exactly one of 'sql' or 'question'")
            return self

    return RequestModels(FiltersIn, QueryIn, SearchIn, SqlIn)


MetaValue = StrictStr | StrictInt | float | bool | None
AclEntry = Annotated[StrictStr, Field(max_length=MAX_NAME_CHARS)]


class DocumentFields(Strict):
    """A document's fields, as ingest reads them: the one input model of every write path
    (a PUT's JSON body, a batch's put, the upsert tool), so each bounds them alike."""

    text: StrictStr = Field(description="the document text (chunked and indexed)")
    title: StrictStr | None = None
    source: StrictStr | None = Field(default=None, max_length=MAX_NAME_CHARS)
    date: StrictStr | None = Field(default=None, max_length=40, description="ISO 8601 date (YYYY-MM-DD)")
    acl: list[AclEntry] | None = Field(default=None, max_length=256, description="principal ids, `group:NAME` or "
                                       "`public`; default: the index's ingest default (admins only)")


class DocumentIn(DocumentFields):
    """A PUT's or a batch put's body; the id is the path's (an `id` here must equal it)."""

    id: StrictStr | None = Field(default=None, max_length=MAX_NAME_CHARS, description="must equal the path's id")
    metadata: dict[Annotated[StrictStr, Field(max_length=MAX_NAME_CHARS)], MetaValue] | None = Field(default=None, max_length=64)


class AclIn(Strict):
    acl: list[AclEntry] = Field(max_length=256, description="the new ACL: principal ids, `group:NAME` or `public`")


class SyncIn(Strict):
    """`POST /v1/admin/sync`: which of the server's `sync_sources` (all when left out) and how."""

    sources: list[Annotated[StrictStr, StringConstraints(max_length=4096)]] | None = Field(
        None, max_length=256, description="some of the server's sync_sources, as configured (default: all)")
    dry_run: StrictBool = Field(False, description="plan only: nothing is written")
    keep_deleted: StrictBool = Field(False, description="documents whose file is gone stay")
    skip_bad_files: StrictBool = Field(False, description="a bad file is left out and listed, not a stop")
    strict_fields: StrictBool = Field(False, description="front-matter keys outside the fields are refused")


class PutOp(Strict):
    op: Literal["put"]
    id: StrictStr = Field(max_length=MAX_NAME_CHARS)
    document: DocumentIn


class DeleteOp(Strict):
    op: Literal["delete"]
    id: StrictStr = Field(max_length=MAX_NAME_CHARS)


class AclOp(Strict):
    op: Literal["acl"]
    id: StrictStr = Field(max_length=MAX_NAME_CHARS)
    acl: list[AclEntry] = Field(max_length=256)


def batch_model(max_changes: int) -> type[Strict]:
    """The batch body, bounded by the server's batch limit."""

    class BatchIn(Strict):
        operations: list[Annotated[PutOp | DeleteOp | AclOp, Field(discriminator="op")]] = Field(
            min_length=1, max_length=max_changes, description=f"at most {max_changes} changes, applied together or not at all")

    return BatchIn


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the error statuses an endpoint can return."""
    text = {400: "Invalid request or SQL rejected", 401: "Missing, malformed or revoked key", 403: "Missing scope",
            404: "Not found (also for documents the caller may not read)", 409: "Conflict: idempotency key reused "
            "with another request, or another process writes this index", 413: "Body too large",
            422: "Malformed body, unknown field or wrong type", 429: "Rate limited (see Retry-After)",
            503: "Retrieval unavailable or timed out (retryable)"}
    return {s: {"model": ErrorOut, "description": text[s]} for s in statuses}


class ToolCallIn(Strict):
    call_id: StrictStr = Field(min_length=1, max_length=200, description="echoed back in the answer")
    name: StrictStr = Field(min_length=1, max_length=100)
    arguments: dict[str, Any] | StrictStr | None = Field(default=None, description="a JSON object, or a JSON string of one")
