"""Domain errors to HTTP: the tables derived from the error classes and the handlers that apply them.

Every error body is `{"error": {"code", "message", "retryable"}}`; nothing returns a stack
trace. Unexpected exceptions are logged with the trace id and answered as `internal`. The
metric label of an error response is read back from the error itself (`error_code`), never
guessed from its status.
"""

from __future__ import annotations

import json
import logging
import uuid

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from auth.resource import challenge
from retrieval.errors import RetrievalError, all_error_classes

log = logging.getLogger("quarry.http")

# Wire code -> HTTP status, read off the error classes (retrieval/errors.py).
STATUS: dict[str, int] = {cls.code: cls.http_status for cls in all_error_classes()}
# Statuses the framework answers by itself (a wrong method, media type or body shape) and no
# error class has: all are the caller's mistakes.
FRAMEWORK_CODES = {405: "invalid_request", 415: "invalid_request", 422: "invalid_request"}


def _code_of_status() -> dict[int, str]:
    """HTTP status -> wire code for an HTTPException the framework raised: the first error
    class with that status (parents before children, so 400 is `invalid_request`, not
    `sql_rejected`), else the framework's own."""
    out: dict[int, str] = {}
    for cls in all_error_classes():
        out.setdefault(cls.http_status, cls.code)
    return FRAMEWORK_CODES | out


HTTP_CODES = _code_of_status()


# JSON-RPC 2.0 codes of requests the MCP transport could not accept (parse error, invalid
# request, method not found, invalid params); any other JSON-RPC error is the server's.
_JSONRPC_CLIENT_CODES = frozenset({-32700, -32600, -32601, -32602})


def error_code(body: bytes, status: int) -> str:
    """The code an error response carries: the `code` of a Quarry error body, or for a
    JSON-RPC error of the MCP transport `invalid_request`/`internal` by its JSON-RPC code.
    A body of neither kind (an exception that escaped every handler sends none, the SDK's
    transport checks send plain text) says only what its status class does."""
    try:
        error = json.loads(body).get("error") if body else None
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, dict):
        code = error.get("code")
        if isinstance(code, str) and code in STATUS:
            return code
        if isinstance(code, int) and not isinstance(code, bool):
            return "invalid_request" if code in _JSONRPC_CLIENT_CODES else "internal"
    return "internal" if status >= 500 else "invalid_request"


def error_body(code: str, message: str, retryable: bool = False) -> dict:
    return {"error": {"code": code, "message": message, "retryable": retryable}}


def error_response(code: str, message: str, status: int | None = None, retryable: bool = False,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(code, message, retryable), status_code=status or STATUS.get(code, 500), headers=headers)


UNPARSABLE_BODY = "There was an error parsing the body"  # FastAPI's detail for a body it cannot decode


def json_problem(error: dict, body: object) -> str:
    """A body that is not valid JSON, said as where and what ("Expecting ',' delimiter at line
    2, column 10"), not as FastAPI's location tuple ("29: JSON decode error")."""
    loc = error.get("loc", ())
    pos = loc[1] if len(loc) > 1 and isinstance(loc[1], int) else None
    what = str((error.get("ctx") or {}).get("error") or "not valid JSON")
    if pos is None:
        return f"the body is not valid JSON: {what}"
    text = body.decode("utf-8", "replace") if isinstance(body, (bytes, bytearray)) else body if isinstance(body, str) else ""
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    near = text[max(0, pos - 20) : pos + 10]
    return f"the body is not valid JSON: {what} at line {line}, column {column} (character {pos}, near {near!r})"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RetrievalError)
    async def domain(request: Request, exc: RetrievalError) -> JSONResponse:
        if exc.code == "internal":  # a server fault: its detail (paths, causes) goes to the log only
            trace = uuid.uuid4().hex
            log.error("internal error %s on %s %s: %s", trace, request.method, request.url.path, exc.message)
            return error_response("internal", f"internal error (trace {trace})", status=exc.http_status,
                                  retryable=exc.retryable)
        headers = {"Retry-After": str(exc.context.get("retry_after", 1))} if exc.code == "rate_limited" else None
        if exc.code == "unauthenticated":
            quarry = getattr(request.app.state, "quarry", None)
            identity = quarry.auth.identity if quarry is not None else None
            headers = {"WWW-Authenticate": challenge(identity, exc.context.get("reason"))}
        return error_response(exc.code, exc.message, status=exc.http_status, retryable=exc.retryable, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for e in exc.errors()[:5]:
            if e.get("type") == "json_invalid":
                problems.append(json_problem(e, exc.body))
                continue
            where = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body"
            problems.append(f"{where}: {e.get('msg', 'invalid')}")
        return error_response("invalid_request", "; ".join(problems) or "invalid request", status=422)

    @app.exception_handler(StarletteHTTPException)
    async def http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and exc.detail == UNPARSABLE_BODY:  # bytes that are not JSON text: a malformed body
            return error_response("invalid_request", "the body is not JSON text", status=422)
        code = HTTP_CODES.get(exc.status_code, "invalid_request" if exc.status_code < 500 else "internal")
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        return error_response(code, message, status=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, RecursionError):  # a body nested past what the JSON parser can recurse into
            return error_response("invalid_request", "the body is nested too deeply", status=422)
        trace = uuid.uuid4().hex
        log.error("internal error %s on %s %s", trace, request.method, request.url.path, exc_info=exc)
        return error_response("internal", f"internal error (trace {trace})", status=500)
