"""The /v1 router: query, search, sql and documents, each behind a bearer key and a scope.

The hot endpoints return a JSONResponse built from the shared answer shape: the response
models document it in OpenAPI (and the contract test checks the bodies against them) without
re-validating every answer on the way out.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable, Literal, TypeVar

from fastapi import APIRouter, Depends, Request, Security
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from quarry_client.models import Answer, DocumentOut, SearchOut, SqlOut, ToolCallOut
from retrieval.answer import document_json, hits_json, result_json
from retrieval.retrievers.sql import SqlResult
from retrieval.sql.translate import Decline
from retrieval.table_decline import decline_json
from retrieval.errors import Forbidden
from retrieval.types import Filters
from routes.service.audit import answer_fields, tool_fields
from auth.caller import USER_TOKEN_HEADER, Caller, authenticated, require_scope
from routes.service.schemas import RequestModels, ToolCallIn, error_responses
from routes.service.service import Service

ERRORS = error_responses(400, 401, 403, 413, 422, 429, 503)
# Declares the bearer scheme in OpenAPI (so /docs can send a key); the check itself is
# `authenticated`'s (auth/caller.py), which answers every failure in the error shape.
BEARER = HTTPBearer(scheme_name="bearer", auto_error=False, description="An API key from `quarry keys add`.")


async def current_caller(request: Request, _: HTTPAuthorizationCredentials | None = Security(BEARER)) -> Caller:
    caller = await authenticated(request.app.state.quarry.auth, request.headers.get("authorization"),
                                 request.headers.get(USER_TOKEN_HEADER))
    request.state.caller = caller
    return caller


def needs(*scopes: str) -> Callable[..., Any]:
    """A router's scope, declared as its dependency: the caller, when its key holds one of
    `scopes` (`admin` counts for `write`); 403 naming the first otherwise."""
    async def scoped(caller: Caller = Depends(current_caller)) -> Caller:
        held = set(caller.principal.scopes) | ({"write"} if "admin" in caller.principal.scopes else set())
        if not held & set(scopes):
            raise Forbidden(f"this credential lacks the '{scopes[0]}' scope")
        return caller
    return scoped


def served(request: Request) -> Service:
    """The service every handler calls (each call holds the generation current when it starts)."""
    service: Service = request.app.state.quarry.service
    return service


def _filters(f: Any) -> Filters:
    return f.to_filters() if f is not None else Filters()


Endpoint = TypeVar("Endpoint", bound=Callable[..., Any])


def body_model(model: type) -> Callable[[Endpoint], Endpoint]:
    """Declare the endpoint's `body` as `model`, a class built at run time from the limits
    (a string annotation could only name a module-level class)."""
    def declare(endpoint: Endpoint) -> Endpoint:
        endpoint.__annotations__["body"] = model
        return endpoint
    return declare


def build_routers(models: RequestModels) -> list[APIRouter]:
    """The retrieval endpoints (the `query` scope), validating bodies with `models` (see
    `request_models`), and /v1/sql (`sql` for a statement, `query` for a question)."""
    router = APIRouter(prefix="/v1", tags=["retrieval"], dependencies=[Depends(needs("query"))])
    sql_router = APIRouter(prefix="/v1", tags=["retrieval"])  # its scope depends on the body: checked in the handler

    @router.post("/query", response_model=Answer, responses=ERRORS,
                 summary="Answer a question: an answer context or a typed evidence gap")
    @body_model(models.query)
    async def query(body: Any, request: Request, caller: Caller = Depends(current_caller),
                    service: Service = Depends(served)) -> JSONResponse:
        state = request.app.state.quarry
        with state.gate.enter(caller.gate_id):
            result = await run_in_threadpool(
                service.query, caller.principal, body.question, k=body.k, max_attempts=body.max_attempts,
                deadline_ms=body.deadline_ms, filters=_filters(body.filters), today=body.today,
            )
        out = result_json(result)
        request.state.audit = answer_fields(out, body.question)
        state.metrics.count_answer(out)
        return JSONResponse(out)

    @router.post("/search", response_model=SearchOut, responses=ERRORS, summary="Run one retriever")
    @body_model(models.search)
    async def search_one(body: Any, request: Request, caller: Caller = Depends(current_caller),
                         service: Service = Depends(served)) -> JSONResponse:
        state = request.app.state.quarry
        with state.gate.enter(caller.gate_id):
            hits = await run_in_threadpool(service.search, caller.principal, body.retriever, body.query, body.k,
                                           _filters(body.filters))
        trace = uuid.uuid4().hex
        request.state.audit = {"outcome": "hits", "route": body.retriever, "question": body.query, "trace_id": trace}
        return JSONResponse({"retriever": body.retriever, "hits": hits_json(hits), "trace_id": trace})

    @sql_router.post("/sql", response_model=SqlOut, responses=ERRORS,
                     summary="Run one read-only SELECT (sql scope) or translate a question to SQL")
    @body_model(models.sql)
    async def sql(body: Any, request: Request, caller: Caller = Depends(current_caller),
                  service: Service = Depends(served)) -> dict:
        state = request.app.state.quarry
        trace = uuid.uuid4().hex
        result: SqlResult | Decline
        with state.gate.enter(caller.gate_id):
            if body.sql is not None:
                require_scope(caller, "sql")
                result = await run_in_threadpool(service.sql_statement, caller.principal, body.sql)
            else:
                require_scope(caller, "query")
                result = await run_in_threadpool(service.sql_question, caller.principal, body.question, body.today)
        request.state.audit = {"route": "sql", "question": body.question, "trace_id": trace,
                               "outcome": "declined" if isinstance(result, Decline) else "rows"}
        if isinstance(result, Decline):
            return {"status": "declined", "rows": None, "trace_id": trace, "declined": decline_json(result)}
        return {"status": "rows", "rows": result.to_json(), "declined": None, "trace_id": trace}

    @router.get("/documents/{doc_id:path}", response_model=DocumentOut, responses=error_responses(401, 403, 404, 429),
                summary="One document the caller may read (404 otherwise, exactly as if it did not exist)")
    async def document(doc_id: str, request: Request, caller: Caller = Depends(current_caller),
                       service: Service = Depends(served)) -> dict:
        state = request.app.state.quarry
        with state.gate.enter(caller.gate_id):
            doc = await run_in_threadpool(service.document, caller.principal, doc_id)
        request.state.audit = {"outcome": "document"}
        return document_json(doc)

    return [router, sql_router]


def build_tools_router() -> APIRouter:
    """Function tools for hosts without MCP: the same tools as provider schemas, and a dispatcher.
    Any valid key: each tool is listed and dispatched by the scope it needs itself."""
    router = APIRouter(prefix="/v1/tools", tags=["tools"], dependencies=[Depends(current_caller)])

    @router.get("", responses=error_responses(401, 422, 429),
                summary="The tools this key may call, as OpenAI or Anthropic function schemas")
    async def list_tools(request: Request, format: Literal["openai", "anthropic"] = "openai",
                         caller: Caller = Depends(current_caller), service: Service = Depends(served)) -> JSONResponse:
        state = request.app.state.quarry
        with state.gate.enter(caller.gate_id):
            render = state.tools.openai if format == "openai" else state.tools.anthropic
            tools = await run_in_threadpool(render, service, caller.principal)
        return JSONResponse({"format": format, "tools": tools})

    @router.post("/call", response_model=ToolCallOut, responses=error_responses(401, 413, 422, 429),
                 summary="Call one tool: {call_id, name, arguments} -> {call_id, result} or {call_id, error}")
    async def call(body: ToolCallIn, request: Request, caller: Caller = Depends(current_caller),
                   service: Service = Depends(served)) -> JSONResponse:
        state = request.app.state.quarry
        with state.gate.enter(caller.gate_id):
            done = await run_in_threadpool(state.tools.call, service, caller.principal, body.name, body.arguments)
        request.state.audit = tool_fields(done)
        state.metrics.count_tool(done)
        return JSONResponse({"call_id": body.call_id, **done.to_dict()})

    return router


__all__ = ["build_routers", "build_tools_router", "current_caller", "needs", "served"]
