"""`Quarry` and `AsyncQuarry`: Quarry's HTTP API as typed calls.

    from quarry_client import Quarry
    with Quarry("http://127.0.0.1:8000", api_key=KEY) as q:
        answer = q.query("What is the Q3 2025 budget for the payments platform?")
        if answer.is_gap:
            print("not enough evidence:", answer.gap.reason, answer.gap.missing)
        else:
            for passage in answer.context:
                print(passage.doc_id, passage.score, passage.text[:80])

Credentials. `api_key` is what the client sends as `Authorization: Bearer`: one of the
server's keys (`qk_...`), an access token from an identity provider the server trusts, or a
zero-argument callable returning either (a token provider). A provider is called before every
request, retries included, so the token it refreshes is the one sent; it should cache its token
and return quickly, and be thread-safe when the client is shared by threads (`AsyncQuarry`
also takes an async provider). What a provider raises reaches the caller as it is, and a
provider returning anything but a string is a `TypeError`: a user-token provider with no user
to name fails the call rather than letting it run as the app.

    q = Quarry(url, api_key=idp.access_token)            # a callable: called per request

An app whose credential holds the `act_as` right can run a request as one of its end users:
`user_token` (a string or a provider, on the client for every request, or per call on every
method, which wins) is sent as `X-Quarry-User-Token`, and the server answers with that user's
view, never wider than the app's group allowlist. The per-call form keeps nothing on the
client, so one client serves many users at once:

    with Quarry(url, api_key=APP_KEY) as app:
        answer = app.query(question, user_token=request_user_token)

Credentials are never logged and never shown by `repr`.

Errors are raised as the exceptions of `quarry_client.errors` (an evidence gap is a result).
Retryable ones (429, 503, a failed connection) are retried up to `max_retries` times with
exponential backoff (429: after the server's Retry-After, capped at `max_backoff`); no 4xx
other than 429 is ever retried. One exception: a 401 saying that a token expired
(`WWW-Authenticate: ... error="invalid_token", error_description="expired"`) is retried once
per call, at once, when `api_key` or the user token comes from a provider and calling the
providers again gives a different token than the one refused (with strings only, or when the
provider hands back the refused token, it is raised at once: the same request would be refused
again). This retry is not counted in `max_retries`. Writes carry an `Idempotency-Key` (yours,
or a fresh one per call), so a retried write is applied once.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import uuid
from datetime import date
from typing import Any, Awaitable, Callable, Literal, Mapping, Sequence, TypeVar, Union
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from quarry_client.errors import QuarryError, RateLimited, TransportError, Unauthenticated, from_response
from quarry_client.models import Answer, DocumentOut, FeedbackOut, SearchOut, SqlOut, ToolCallOut, WriteOut

Verdict = Literal["answered", "wrong_context", "wrong_gap"]  # what an app says of one of its answers

Model = TypeVar("Model", bound=BaseModel)
Filters = Mapping[str, Any]  # sources, date_from, date_to, doc_ids

# A key or token, or a zero-argument callable returning one (called before every request).
Credential = Union[str, Callable[[], str]]
# The same for `AsyncQuarry`: the callable may also be async.
AsyncCredential = Union[str, Callable[[], Union[str, Awaitable[str]]]]

USER_TOKEN_HEADER = "X-Quarry-User-Token"


def _filters(filters: Filters | None) -> dict[str, Any] | None:
    if filters is None:
        return None
    return {k: (v.isoformat() if isinstance(v, date) else list(v) if isinstance(v, (list, tuple)) else v)
            for k, v in filters.items() if v is not None}


def _clean(body: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.isoformat() if isinstance(v, date) else v) for k, v in body.items() if v is not None}


def _doc_path(doc_id: str) -> str:
    return "/v1/documents/" + quote(doc_id, safe="/:@-._~")


def _checked(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} gave a {type(value).__name__}, not a string")
    return value.strip()  # a token read from a file often ends in a newline, which no header may hold


def _shown(value: object) -> str:
    """How `repr` names a credential: its kind, never its value."""
    return "None" if value is None else "<provider>" if callable(value) else "<hidden>"


class _Calls:
    """What both clients send: method, path, JSON body, extra headers, credentials."""

    def __init__(self, base_url: str, api_key: object, user_token: object, timeout: float, max_retries: int,
                 backoff: float, max_backoff: float) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if not (callable(api_key) or isinstance(api_key, str)):
            raise TypeError("api_key must be a key or token string, or a callable returning one")
        if user_token is not None and not (callable(user_token) or isinstance(user_token, str)):
            raise TypeError("user_token must be a token string, or a callable returning one")
        self.base_url = base_url.rstrip("/")
        self.api_key, self.user_token = api_key, user_token
        self.headers = {"User-Agent": "quarry-client/0.1"}  # credentials go per request, never into the pool's
        self.timeout, self.max_retries, self.backoff, self.max_backoff = timeout, max_retries, backoff, max_backoff

    def user_token_for(self, per_call: object) -> object:
        return per_call if per_call is not None else self.user_token

    def refreshable(self, user_token: object) -> bool:
        """Whether calling the providers again can give other credentials."""
        return callable(self.api_key) or callable(user_token)

    @staticmethod
    def auth_headers(credential: str, user_token: str | None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {credential}"}
        if user_token is not None:
            headers[USER_TOKEN_HEADER] = user_token
        return headers

    def credentials(self, user_token: object) -> dict[str, str]:
        """The credential headers of one request, calling the (sync) providers once each."""
        key = self.api_key() if callable(self.api_key) else self.api_key
        user = user_token() if callable(user_token) else user_token
        return self.auth_headers(_checked(key, "api_key"), None if user is None else _checked(user, "user_token"))

    async def acredentials(self, user_token: object) -> dict[str, str]:
        """The same, awaiting async providers."""
        key = self.api_key() if callable(self.api_key) else self.api_key
        if inspect.isawaitable(key):
            key = await key
        user = user_token() if callable(user_token) else user_token
        if inspect.isawaitable(user):
            user = await user
        return self.auth_headers(_checked(key, "api_key"), None if user is None else _checked(user, "user_token"))

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
    """A synchronous client (thread-safe: httpx's connection pool; credentials are per request).

    `api_key`: a key or token, or a provider of them; `user_token`: the end user an app with
    the `act_as` right acts for on every request (a per-call `user_token=` wins)."""

    def __init__(self, base_url: str, api_key: Credential, timeout: float = 30.0, *,
                 user_token: Credential | None = None, max_retries: int = 3, backoff: float = 0.25,
                 max_backoff: float = 8.0, transport: httpx.BaseTransport | None = None) -> None:
        self._calls = _Calls(base_url, api_key, user_token, timeout, max_retries, backoff, max_backoff)
        self._http = httpx.Client(base_url=self._calls.base_url, headers=self._calls.headers, timeout=timeout,
                                  transport=transport)

    def __repr__(self) -> str:
        return (f"Quarry({self._calls.base_url!r}, api_key={_shown(self._calls.api_key)}, "
                f"user_token={_shown(self._calls.user_token)})")

    def __enter__(self) -> Quarry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, method: str, path: str, body: dict[str, Any] | None = None,
              headers: dict[str, str] | None = None, params: dict[str, str] | None = None, *,
              user_token: Credential | None = None) -> Any:
        calls = self._calls
        user = calls.user_token_for(user_token)
        auth, attempt, refreshed = calls.credentials(user), 0, False
        while True:
            try:
                try:
                    response = self._http.request(method, path, json=body, headers={**(headers or {}), **auth},
                                                  params=params)
                except httpx.TransportError as e:
                    raise calls.transport_error(e) from e
                return calls.outcome(response)
            except Unauthenticated as error:  # never retried, but for one expired token a provider replaced
                if refreshed or not error.token_expired or not calls.refreshable(user):
                    raise
                refreshed, refused, auth = True, auth, calls.credentials(user)
                if auth == refused:
                    raise
            except QuarryError as error:
                attempt += 1
                time.sleep(calls.retry_in(attempt, error))
                auth = calls.credentials(user)

    def _parse(self, model: type[Model], data: Any) -> Model:
        return model.model_validate(data)

    def query(self, question: str, *, k: int | None = None, max_attempts: int | None = None,
              deadline_ms: int | None = None, filters: Filters | None = None, today: date | str | None = None,
              user_token: Credential | None = None) -> Answer:
        """An answer context or an evidence gap (check `answer.is_gap`). `user_token` (on
        every method): the end user this call runs as, for an app with the `act_as` right."""
        return self._parse(Answer, self._send(*self._calls.query(question, k, max_attempts, deadline_ms, filters, today),
                                              user_token=user_token))

    def search(self, query: str, retriever: str = "hybrid", *, k: int | None = None,
               filters: Filters | None = None, user_token: Credential | None = None) -> SearchOut:
        return self._parse(SearchOut, self._send(*self._calls.search(query, retriever, k, filters), user_token=user_token))

    def sql(self, sql: str | None = None, *, question: str | None = None, today: date | str | None = None,
            user_token: Credential | None = None) -> SqlOut:
        """One read-only SELECT (the key needs the `sql` scope), or a question to translate."""
        return self._parse(SqlOut, self._send(*self._calls.sql(sql, question, today), user_token=user_token))

    def document(self, doc_id: str, *, user_token: Credential | None = None) -> DocumentOut:
        """One document the key may read (`NotFound` otherwise, as for a missing one)."""
        return self._parse(DocumentOut, self._send("GET", _doc_path(doc_id), user_token=user_token))

    def feedback(self, trace_id: str, verdict: Verdict, *, doc_ids: Sequence[str] | None = None,
                 user_token: Credential | None = None) -> FeedbackOut:
        """How one of this key's answers served its user (`answer.trace_id`), for `quarry tune
        --feedback`; `doc_ids`: the documents that answer the question."""
        return self._parse(FeedbackOut, self._send(*self._calls.feedback(trace_id, verdict, doc_ids), user_token=user_token))

    def tools(self, format: Literal["openai", "anthropic"] = "openai", *,
              user_token: Credential | None = None) -> list[dict[str, Any]]:
        """The function tools this key may call, as the provider's schemas."""
        return list(self._send("GET", "/v1/tools", params={"format": format}, user_token=user_token)["tools"])

    def call_tool(self, name: str, arguments: Mapping[str, Any] | str | None = None, *,
                  call_id: str | None = None, user_token: Credential | None = None) -> ToolCallOut:
        """One tool call; a tool's own failure is `result.error`, not an exception."""
        return self._parse(ToolCallOut, self._send("POST", "/v1/tools/call", _tool_call(name, arguments, call_id),
                                                   user_token=user_token))

    def upsert(self, doc_id: str, text: str, *, title: str | None = None, source: str | None = None,
               date: date | str | None = None, metadata: Mapping[str, Any] | None = None,
               acl: Sequence[str] | None = None, idempotency_key: str | None = None,
               user_token: Credential | None = None) -> WriteOut:
        """Create or replace a document (the key needs `write`); every route finds it on the
        next request."""
        body = self._calls.document_fields(text, title, source, date, metadata, acl)
        return self._parse(WriteOut, self._send("PUT", _doc_path(doc_id), body, _idempotent(idempotency_key),
                                                user_token=user_token))

    def delete(self, doc_id: str, *, idempotency_key: str | None = None, user_token: Credential | None = None) -> WriteOut:
        return self._parse(WriteOut, self._send("DELETE", _doc_path(doc_id), None, _idempotent(idempotency_key),
                                                user_token=user_token))

    def set_acl(self, doc_id: str, acl: Sequence[str], *, idempotency_key: str | None = None,
                user_token: Credential | None = None) -> WriteOut:
        return self._parse(WriteOut, self._send("PATCH", _doc_path(doc_id) + "/acl", {"acl": list(acl)},
                                                _idempotent(idempotency_key), user_token=user_token))

    def batch(self, operations: Sequence[Mapping[str, Any]], *, idempotency_key: str | None = None,
              user_token: Credential | None = None) -> WriteOut:
        """Puts, deletes and ACL changes applied together or not at all
        (`{"op": "put", "id": ..., "document": {...}}`, `{"op": "delete", "id": ...}`,
        `{"op": "acl", "id": ..., "acl": [...]}`)."""
        return self._parse(WriteOut, self._send("POST", "/v1/documents:batch", {"operations": [dict(o) for o in operations]},
                                                _idempotent(idempotency_key), user_token=user_token))


class AsyncQuarry:
    """The asynchronous client: the same methods, awaited; providers may be async."""

    def __init__(self, base_url: str, api_key: AsyncCredential, timeout: float = 30.0, *,
                 user_token: AsyncCredential | None = None, max_retries: int = 3, backoff: float = 0.25,
                 max_backoff: float = 8.0, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._calls = _Calls(base_url, api_key, user_token, timeout, max_retries, backoff, max_backoff)
        self._http = httpx.AsyncClient(base_url=self._calls.base_url, headers=self._calls.headers, timeout=timeout,
                                       transport=transport)

    def __repr__(self) -> str:
        return (f"AsyncQuarry({self._calls.base_url!r}, api_key={_shown(self._calls.api_key)}, "
                f"user_token={_shown(self._calls.user_token)})")

    async def __aenter__(self) -> AsyncQuarry:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, method: str, path: str, body: dict[str, Any] | None = None,
                    headers: dict[str, str] | None = None, params: dict[str, str] | None = None, *,
                    user_token: AsyncCredential | None = None) -> Any:
        calls = self._calls
        user = calls.user_token_for(user_token)
        auth, attempt, refreshed = await calls.acredentials(user), 0, False
        while True:
            try:
                try:
                    response = await self._http.request(method, path, json=body, headers={**(headers or {}), **auth},
                                                        params=params)
                except httpx.TransportError as e:
                    raise calls.transport_error(e) from e
                return calls.outcome(response)
            except Unauthenticated as error:
                if refreshed or not error.token_expired or not calls.refreshable(user):
                    raise
                refreshed, refused, auth = True, auth, await calls.acredentials(user)
                if auth == refused:
                    raise
            except QuarryError as error:
                attempt += 1
                await asyncio.sleep(calls.retry_in(attempt, error))
                auth = await calls.acredentials(user)

    async def query(self, question: str, *, k: int | None = None, max_attempts: int | None = None,
                    deadline_ms: int | None = None, filters: Filters | None = None,
                    today: date | str | None = None, user_token: AsyncCredential | None = None) -> Answer:
        return Answer.model_validate(await self._send(*self._calls.query(question, k, max_attempts, deadline_ms, filters,
                                                                         today), user_token=user_token))

    async def search(self, query: str, retriever: str = "hybrid", *, k: int | None = None,
                     filters: Filters | None = None, user_token: AsyncCredential | None = None) -> SearchOut:
        return SearchOut.model_validate(await self._send(*self._calls.search(query, retriever, k, filters),
                                                         user_token=user_token))

    async def sql(self, sql: str | None = None, *, question: str | None = None, today: date | str | None = None,
                  user_token: AsyncCredential | None = None) -> SqlOut:
        return SqlOut.model_validate(await self._send(*self._calls.sql(sql, question, today), user_token=user_token))

    async def document(self, doc_id: str, *, user_token: AsyncCredential | None = None) -> DocumentOut:
        return DocumentOut.model_validate(await self._send("GET", _doc_path(doc_id), user_token=user_token))

    async def feedback(self, trace_id: str, verdict: Verdict, *, doc_ids: Sequence[str] | None = None,
                       user_token: AsyncCredential | None = None) -> FeedbackOut:
        return FeedbackOut.model_validate(await self._send(*self._calls.feedback(trace_id, verdict, doc_ids),
                                                           user_token=user_token))

    async def tools(self, format: Literal["openai", "anthropic"] = "openai", *,
                    user_token: AsyncCredential | None = None) -> list[dict[str, Any]]:
        return list((await self._send("GET", "/v1/tools", params={"format": format}, user_token=user_token))["tools"])

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | str | None = None, *,
                        call_id: str | None = None, user_token: AsyncCredential | None = None) -> ToolCallOut:
        return ToolCallOut.model_validate(await self._send("POST", "/v1/tools/call", _tool_call(name, arguments, call_id),
                                                           user_token=user_token))

    async def upsert(self, doc_id: str, text: str, *, title: str | None = None, source: str | None = None,
                     date: date | str | None = None, metadata: Mapping[str, Any] | None = None,
                     acl: Sequence[str] | None = None, idempotency_key: str | None = None,
                     user_token: AsyncCredential | None = None) -> WriteOut:
        body = self._calls.document_fields(text, title, source, date, metadata, acl)
        return WriteOut.model_validate(await self._send("PUT", _doc_path(doc_id), body, _idempotent(idempotency_key),
                                                        user_token=user_token))

    async def delete(self, doc_id: str, *, idempotency_key: str | None = None,
                     user_token: AsyncCredential | None = None) -> WriteOut:
        return WriteOut.model_validate(await self._send("DELETE", _doc_path(doc_id), None, _idempotent(idempotency_key),
                                                        user_token=user_token))

    async def set_acl(self, doc_id: str, acl: Sequence[str], *, idempotency_key: str | None = None,
                      user_token: AsyncCredential | None = None) -> WriteOut:
        return WriteOut.model_validate(await self._send("PATCH", _doc_path(doc_id) + "/acl", {"acl": list(acl)},
                                                        _idempotent(idempotency_key), user_token=user_token))

    async def batch(self, operations: Sequence[Mapping[str, Any]], *, idempotency_key: str | None = None,
                    user_token: AsyncCredential | None = None) -> WriteOut:
        return WriteOut.model_validate(await self._send("POST", "/v1/documents:batch",
                                                        {"operations": [dict(o) for o in operations]},
                                                        _idempotent(idempotency_key), user_token=user_token))


def _idempotent(key: str | None) -> dict[str, str]:
    """The write's Idempotency-Key: the caller's, or a fresh one that its retries reuse."""
    return {"Idempotency-Key": key or uuid.uuid4().hex}


def _tool_call(name: str, arguments: Mapping[str, Any] | str | None, call_id: str | None) -> dict[str, Any]:
    return {"call_id": call_id or uuid.uuid4().hex, "name": name,
            "arguments": dict(arguments) if isinstance(arguments, Mapping) else arguments}
