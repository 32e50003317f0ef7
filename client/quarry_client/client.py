"""`Quarry` and `AsyncQuarry`: Quarry's HTTP API as typed calls.

    from quarry_client import Quarry
    with Quarry("http://127.0.0.1:8000", api_key=KEY) as q:
        answer = q.query("What is the Q3 2025 budget for the payments platform?")
        if answer.is_gap:
            print("not enough evidence:", answer.gap.reason, answer.gap.missing)
        else:
            for passage in answer.context:
                print(passage.doc_id, passage.score, passage.text[:80])

Errors are raised as the exceptions of `quarry_client.errors` (an evidence gap is a result).
Retryable ones (429, 503, a failed connection) are retried up to `max_retries` times with
exponential backoff (429: after the server's Retry-After, capped at `max_backoff`); no 4xx
other than 429 is ever retried. Writes carry an `Idempotency-Key` (yours, or a fresh one per
call), so a retried write is applied once.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import date
from typing import Any, Literal, Mapping, Sequence, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from quarry_client.errors import QuarryError, RateLimited, TransportError, from_response
from quarry_client.models import Answer, DocumentOut, FeedbackOut, SearchOut, SqlOut, ToolCallOut, WriteOut

Verdict = Literal["answered", "wrong_context", "wrong_gap"]  # what an app says of one of its answers

Model = TypeVar("Model", bound=BaseModel)
Filters = Mapping[str, Any]  # sources, date_from, date_to, doc_ids


def _filters(filters: Filters | None) -> dict[str, Any] | None:
    if filters is None:
        return None
    return {k: (v.isoformat() if isinstance(v, date) else list(v) if isinstance(v, (list, tuple)) else v)
            for k, v in filters.items() if v is not None}


def _clean(body: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.isoformat() if isinstance(v, date) else v) for k, v in body.items() if v is not None}


def _doc_path(doc_id: str) -> str:
    return "/v1/documents/" + quote(doc_id, safe="/:@-._~")


class _Calls:
    """What both clients send: method, path, JSON body, extra headers."""

    def __init__(self, base_url: str, api_key: str, timeout: float, max_retries: int, backoff: float,
                 max_backoff: float) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.base_url = base_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {api_key}", "User-Agent": "quarry-client/0.1"}
        self.timeout, self.max_retries, self.backoff, self.max_backoff = timeout, max_retries, backoff, max_backoff

    def retry_in(self, attempt: int, error: QuarryError) -> float:
        """Seconds to wait before retry number `attempt` (1-based) after `error`; re-raises it
        when it is not retryable or the retries are spent."""
        if not error.retryable or attempt > self.max_retries:
            raise error
        if isinstance(error, RateLimited):
            return min(max(error.retry_after, 0.0), self.max_backoff)
        return min(self.backoff * 2 ** (attempt - 1), self.max_backoff)

    def transport_error(self, e: httpx.TransportError) -> TransportError:
        return TransportError(f"no answer from {self.base_url}: {type(e).__name__}")

    @staticmethod
    def outcome(response: httpx.Response) -> Any:
        if response.is_success:
            return response.json()
        try:
            body = response.json()
        except ValueError:
            body = None
        raise from_response(response.status_code, body, response.headers)

    # -- requests --------------------------------------------------------------------------
    @staticmethod
    def query(question: str, k: int | None, max_attempts: int | None, deadline_ms: int | None,
              filters: Filters | None, today: date | str | None) -> tuple[str, str, dict[str, Any]]:
        return "POST", "/v1/query", _clean({"question": question, "k": k, "max_attempts": max_attempts,
                                            "deadline_ms": deadline_ms, "filters": _filters(filters), "today": today})

    @staticmethod
    def search(query: str, retriever: str, k: int | None, filters: Filters | None) -> tuple[str, str, dict[str, Any]]:
        return "POST", "/v1/search", _clean({"query": query, "retriever": retriever, "k": k, "filters": _filters(filters)})

    @staticmethod
    def sql(sql: str | None, question: str | None, today: date | str | None) -> tuple[str, str, dict[str, Any]]:
        return "POST", "/v1/sql", _clean({"sql": sql, "question": question, "today": today})

    @staticmethod
    def feedback(trace_id: str, verdict: str, doc_ids: Sequence[str] | None) -> tuple[str, str, dict[str, Any]]:
        return "POST", "/v1/feedback", _clean({"trace_id": trace_id, "verdict": verdict,
                                               "doc_ids": list(doc_ids) if doc_ids is not None else None})

    @staticmethod
    def document_fields(text: str, title: str | None, source: str | None, date_: date | str | None,
                        metadata: Mapping[str, Any] | None, acl: Sequence[str] | None) -> dict[str, Any]:
        return _clean({"text": text, "title": title, "source": source, "date": date_,
                       "metadata": dict(metadata) if metadata is not None else None,
                       "acl": list(acl) if acl is not None else None})


class Quarry:
    """A synchronous client (thread-safe: httpx's connection pool)."""

    def __init__(self, base_url: str, api_key: str, timeout: float = 30.0, *, max_retries: int = 3,
                 backoff: float = 0.25, max_backoff: float = 8.0, transport: httpx.BaseTransport | None = None) -> None:
        self._calls = _Calls(base_url, api_key, timeout, max_retries, backoff, max_backoff)
        self._http = httpx.Client(base_url=self._calls.base_url, headers=self._calls.headers, timeout=timeout,
                                  transport=transport)

    def __enter__(self) -> Quarry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, method: str, path: str, body: dict[str, Any] | None = None,
              headers: dict[str, str] | None = None, params: dict[str, str] | None = None) -> Any:
        attempt = 0
        while True:
            try:
                try:
                    response = self._http.request(method, path, json=body, headers=headers, params=params)
                except httpx.TransportError as e:
                    raise self._calls.transport_error(e) from e
                return self._calls.outcome(response)
            except QuarryError as error:
                attempt += 1
                time.sleep(self._calls.retry_in(attempt, error))

    def _parse(self, model: type[Model], data: Any) -> Model:
        return model.model_validate(data)

    def query(self, question: str, *, k: int | None = None, max_attempts: int | None = None,
              deadline_ms: int | None = None, filters: Filters | None = None, today: date | str | None = None) -> Answer:
        """An answer context or an evidence gap (check `answer.is_gap`)."""
        return self._parse(Answer, self._send(*self._calls.query(question, k, max_attempts, deadline_ms, filters, today)))

    def search(self, query: str, retriever: str = "hybrid", *, k: int | None = None,
               filters: Filters | None = None) -> SearchOut:
        return self._parse(SearchOut, self._send(*self._calls.search(query, retriever, k, filters)))

    def sql(self, sql: str | None = None, *, question: str | None = None, today: date | str | None = None) -> SqlOut:
        """One read-only SELECT (the key needs the `sql` scope), or a question to translate."""
        return self._parse(SqlOut, self._send(*self._calls.sql(sql, question, today)))

    def document(self, doc_id: str) -> DocumentOut:
        """One document the key may read (`NotFound` otherwise, as for a missing one)."""
        return self._parse(DocumentOut, self._send("GET", _doc_path(doc_id)))

    def feedback(self, trace_id: str, verdict: Verdict, *, doc_ids: Sequence[str] | None = None) -> FeedbackOut:
        """How one of this key's answers served its user (`answer.trace_id`), for `quarry tune
        --feedback`; `doc_ids`: the documents that answer the question."""
        return self._parse(FeedbackOut, self._send(*self._calls.feedback(trace_id, verdict, doc_ids)))

    def tools(self, format: Literal["openai", "anthropic"] = "openai") -> list[dict[str, Any]]:
        """The function tools this key may call, as the provider's schemas."""
        return list(self._send("GET", "/v1/tools", params={"format": format})["tools"])

    def call_tool(self, name: str, arguments: Mapping[str, Any] | str | None = None, *,
                  call_id: str | None = None) -> ToolCallOut:
        """One tool call; a tool's own failure is `result.error`, not an exception."""
        body = {"call_id": call_id or uuid.uuid4().hex, "name": name,
                "arguments": dict(arguments) if isinstance(arguments, Mapping) else arguments}
        return self._parse(ToolCallOut, self._send("POST", "/v1/tools/call", body))

    def upsert(self, doc_id: str, text: str, *, title: str | None = None, source: str | None = None,
               date: date | str | None = None, metadata: Mapping[str, Any] | None = None,
               acl: Sequence[str] | None = None, idempotency_key: str | None = None) -> WriteOut:
        """Create or replace a document (the key needs `write`); every route finds it on the
        next request."""
        body = self._calls.document_fields(text, title, source, date, metadata, acl)
        return self._parse(WriteOut, self._send("PUT", _doc_path(doc_id), body, _idempotent(idempotency_key)))

    def delete(self, doc_id: str, *, idempotency_key: str | None = None) -> WriteOut:
        return self._parse(WriteOut, self._send("DELETE", _doc_path(doc_id), None, _idempotent(idempotency_key)))

    def set_acl(self, doc_id: str, acl: Sequence[str], *, idempotency_key: str | None = None) -> WriteOut:
        return self._parse(WriteOut, self._send("PATCH", _doc_path(doc_id) + "/acl", {"acl": list(acl)},
                                                _idempotent(idempotency_key)))

    def batch(self, operations: Sequence[Mapping[str, Any]], *, idempotency_key: str | None = None) -> WriteOut:
        """Puts, deletes and ACL changes applied together or not at all
        (`{"op": "put", "id": ..., "document": {...}}`, `{"op": "delete", "id": ...}`,
        `{"op": "acl", "id": ..., "acl": [...]}`)."""
        return self._parse(WriteOut, self._send("POST", "/v1/documents:batch", {"operations": [dict(o) for o in operations]},
                                                _idempotent(idempotency_key)))


class AsyncQuarry:
    """The asynchronous client: the same methods, awaited."""

    def __init__(self, base_url: str, api_key: str, timeout: float = 30.0, *, max_retries: int = 3,
                 backoff: float = 0.25, max_backoff: float = 8.0, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._calls = _Calls(base_url, api_key, timeout, max_retries, backoff, max_backoff)
        self._http = httpx.AsyncClient(base_url=self._calls.base_url, headers=self._calls.headers, timeout=timeout,
                                       transport=transport)

    async def __aenter__(self) -> AsyncQuarry:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, method: str, path: str, body: dict[str, Any] | None = None,
                    headers: dict[str, str] | None = None, params: dict[str, str] | None = None) -> Any:
        attempt = 0
        while True:
            try:
                try:
                    response = await self._http.request(method, path, json=body, headers=headers, params=params)
                except httpx.TransportError as e:
                    raise self._calls.transport_error(e) from e
                return self._calls.outcome(response)
            except QuarryError as error:
                attempt += 1
                await asyncio.sleep(self._calls.retry_in(attempt, error))

    async def query(self, question: str, *, k: int | None = None, max_attempts: int | None = None,
                    deadline_ms: int | None = None, filters: Filters | None = None,
                    today: date | str | None = None) -> Answer:
        return Answer.model_validate(await self._send(*self._calls.query(question, k, max_attempts, deadline_ms, filters, today)))

    async def search(self, query: str, retriever: str = "hybrid", *, k: int | None = None,
                     filters: Filters | None = None) -> SearchOut:
        return SearchOut.model_validate(await self._send(*self._calls.search(query, retriever, k, filters)))

    async def sql(self, sql: str | None = None, *, question: str | None = None, today: date | str | None = None) -> SqlOut:
        return SqlOut.model_validate(await self._send(*self._calls.sql(sql, question, today)))

    async def document(self, doc_id: str) -> DocumentOut:
        return DocumentOut.model_validate(await self._send("GET", _doc_path(doc_id)))

    async def feedback(self, trace_id: str, verdict: Verdict, *, doc_ids: Sequence[str] | None = None) -> FeedbackOut:
        return FeedbackOut.model_validate(await self._send(*self._calls.feedback(trace_id, verdict, doc_ids)))

    async def tools(self, format: Literal["openai", "anthropic"] = "openai") -> list[dict[str, Any]]:
        return list((await self._send("GET", "/v1/tools", params={"format": format}))["tools"])

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | str | None = None, *,
                        call_id: str | None = None) -> ToolCallOut:
        body = {"call_id": call_id or uuid.uuid4().hex, "name": name,
                "arguments": dict(arguments) if isinstance(arguments, Mapping) else arguments}
        return ToolCallOut.model_validate(await self._send("POST", "/v1/tools/call", body))

    async def upsert(self, doc_id: str, text: str, *, title: str | None = None, source: str | None = None,
                     date: date | str | None = None, metadata: Mapping[str, Any] | None = None,
                     acl: Sequence[str] | None = None, idempotency_key: str | None = None) -> WriteOut:
        body = self._calls.document_fields(text, title, source, date, metadata, acl)
        return WriteOut.model_validate(await self._send("PUT", _doc_path(doc_id), body, _idempotent(idempotency_key)))

    async def delete(self, doc_id: str, *, idempotency_key: str | None = None) -> WriteOut:
        return WriteOut.model_validate(await self._send("DELETE", _doc_path(doc_id), None, _idempotent(idempotency_key)))

    async def set_acl(self, doc_id: str, acl: Sequence[str], *, idempotency_key: str | None = None) -> WriteOut:
        return WriteOut.model_validate(await self._send("PATCH", _doc_path(doc_id) + "/acl", {"acl": list(acl)},
                                                        _idempotent(idempotency_key)))

    async def batch(self, operations: Sequence[Mapping[str, Any]], *, idempotency_key: str | None = None) -> WriteOut:
        return WriteOut.model_validate(await self._send("POST", "/v1/documents:batch",
                                                        {"operations": [dict(o) for o in operations]},
                                                        _idempotent(idempotency_key)))


def _idempotent(key: str | None) -> dict[str, str]:
    """The write's Idempotency-Key: the caller's, or a fresh one that its retries reuse."""
    return {"Idempotency-Key": key or uuid.uuid4().hex}
