"""The FastAPI application factory: it composes routers around objects built once.

`create_app(settings)` loads the engine in the lifespan (or takes a ready one, so tests can
run two apps side by side) and wires auth, limits, metrics, the audit trail and errors.
Requests lease the engine generation current when they start (routes/service/generations.py); when
the engine's snapshot lives in `settings.index_dir`, a watcher follows its CURRENT and
switches to each new snapshot without a restart (routes/service/reload.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from fastapi import Depends, FastAPI, Request, Response, Security
from fastapi.security import HTTPAuthorizationCredentials
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from quarry_client.models import ErrorOut
from retrieval.errors import PayloadTooLarge, RetrievalUnavailable
from starlette.routing import Route

from routes.http.api import BEARER, build_routers, build_tools_router, current_caller, needs
from routes.http.feedback_api import build_feedback_router
from routes.mcp.endpoint import McpHttp
from routes.service.audit import AuditLog, AuditRecord
from routes.http.docs import install_docs
from routes.service.gate import Gate
from routes.service.runtime import Runtime
from routes.service.service import Service
from routes.service.view import IndexView
from routes.http.error_handlers import error_code, install_error_handlers
from auth.caller import Authenticator, Caller, authenticated
from auth.config import IdentityConfig, load_identity
from auth.tokens import TokenVerifier
from auth.resource import WELL_KNOWN, metadata_path, protected_resource_metadata
from auth.keys import KeyStore
from routes.http.prometheus import Metrics
from routes.http.console import ConsoleHeaders, install_console
from routes.http.write_api import build_write_routers
from routes.service.schemas import error_responses, request_models
from routes.service.settings import Settings
from routes.service.tools import Toolset

log = logging.getLogger("quarry.http")
MAX_ERROR_BODY = 64 * 1024  # error bodies are read back for their code; none is near this
CLIENT_CLOSED = 499  # nginx's status for a client that closed the connection before the answer
AUDIT_WAIT_SECONDS = 10.0  # fail closed: longest an answer waits for its audit row
AUDIT_REFUSAL = "the audit log cannot be written, and this server answers nothing unaudited (audit_fail_closed)"


@dataclass
class AppState:
    """What handlers reach through `request.app.state.quarry`: the service (their only way to
    the index), who callers are (keys and tokens) and their limits, the tools, metrics and the
    audit log."""

    settings: Settings
    service: Service
    auth: Authenticator
    gate: Gate
    tools: Toolset
    metrics: Metrics = field(default_factory=Metrics)
    audit: AuditLog | None = None


class Observe:
    """Metrics for every request and an audit row for every /v1 and /mcp request (pure ASGI:
    only error bodies are copied, to read their code).

    Fail open (the default): the row is queued after the answer; a row the audit log cannot
    write is dropped and counted, the answer stands. Fail closed (`audit_fail_closed`): the
    row is written when the answer starts and the answer waits for it; if it cannot be
    written the caller gets a retryable 503 instead, so nothing is answered unaudited."""

    def __init__(self, app: ASGIApp, state: AppState) -> None:
        self.app = app
        self.state = state
        self.fail_closed = state.settings.audit_fail_closed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what an exception that escapes every handler is answered with
        responded = disconnected = False
        error = bytearray()  # the body of an error response, read back for its code
        scope.setdefault("state", {})
        trace = uuid.uuid4().hex

        async def receive_wrapper() -> Message:
            nonlocal disconnected
            message = await receive()
            disconnected = disconnected or message["type"] == "http.disconnect"
            return message

        audited_early = refused = False

        async def send_wrapper(message: Message) -> None:
            nonlocal status, responded, audited_early, refused
            if refused:  # the answer was replaced by the audit refusal: drop the rest of it
                return
            if message["type"] == "http.response.start":
                status, responded = message["status"], True
                if self.fail_closed and self._audited(scope):
                    audited_early = True
                    if not await self._write_now(scope, status, time.perf_counter() - started, trace):
                        refusal = RetrievalUnavailable(AUDIT_REFUSAL)
                        refused, status = True, refusal.http_status
                        body = json.dumps(refusal.to_dict()).encode()
                        error.extend(body)
                        await send({"type": "http.response.start", "status": status,
                                    "headers": [(b"content-type", b"application/json"),
                                                (b"content-length", str(len(body)).encode())]})
                        await send({"type": "http.response.body", "body": body})
                        return
                if scope["path"].startswith("/v1/"):
                    info = scope["state"].get("audit") or {}
                    message = {**message, "headers": [*message.get("headers", []),
                                                      (b"x-trace-id", (info.get("trace_id") or trace).encode())]}
            elif message["type"] == "http.response.body" and status >= 400 and len(error) < MAX_ERROR_BODY:
                error.extend(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive_wrapper, send_wrapper)
        finally:
            if disconnected and not responded:  # the client left before an answer: not a server fault
                status = CLIENT_CLOSED
            seconds = time.perf_counter() - started
            self._count(scope, status, bytes(error), seconds)
            audit = self.state.audit
            if audit is not None and self._audited(scope) and not audited_early:
                audit.record(self._audit_record(scope, status, seconds, trace))

    @staticmethod
    def _endpoint(scope: Scope) -> str:
        # FastAPI records its own routes in scope["route"]; /mcp is a plain route whose
        # endpoint names its path.
        return getattr(scope.get("route") or scope.get("endpoint"), "path", "unmatched")

    def _audited(self, scope: Scope) -> bool:
        return self._endpoint(scope).startswith(("/v1/", "/mcp")) and self.state.audit is not None

    def _count(self, scope: Scope, status: int, error: bytes, seconds: float) -> None:
        metrics, endpoint = self.state.metrics, self._endpoint(scope)
        metrics.requests.labels(endpoint, str(status)).inc()
        metrics.latency.labels(endpoint, str(status)).observe(seconds)
        if status >= 400 and status != CLIENT_CLOSED:
            metrics.errors.labels(error_code(error, status)).inc()

    def _audit_record(self, scope: Scope, status: int, seconds: float, trace: str) -> AuditRecord:
        info = scope["state"].get("audit") or {}
        caller = scope["state"].get("caller")
        return AuditRecord(
            trace_id=info.get("trace_id") or trace, endpoint=self._endpoint(scope), http_status=status,
            key_id=caller.key_id if caller else None, principal=caller.principal.id if caller else None,
            outcome="client_disconnected" if status == CLIENT_CLOSED else info.get("outcome"), route=info.get("route"),
            attempts=info.get("attempts"), stop_reason=info.get("stop_reason"), latency_ms=round(seconds * 1000, 3),
            question=info.get("question"), doc_ids=info.get("doc_ids"), app=caller.app if caller else None,
        )

    async def _write_now(self, scope: Scope, status: int, seconds: float, trace: str) -> bool:
        """Write this request's row and wait for the writer thread to say whether it could."""
        loop = asyncio.get_running_loop()
        written: asyncio.Future[bool] = loop.create_future()

        def done(ok: bool) -> None:
            loop.call_soon_threadsafe(lambda: None if written.done() else written.set_result(ok))

        assert self.state.audit is not None  # only audited requests are written early
        self.state.audit.record(self._audit_record(scope, status, seconds, trace), done)
        try:
            return await asyncio.wait_for(written, AUDIT_WAIT_SECONDS)
        except asyncio.TimeoutError:
            return False


class BodyLimit:
    """Reject bodies over `max_bytes` (document writes: `write_max_bytes`) with 413 before any
    handler parses them."""

    def __init__(self, app: ASGIApp, max_bytes: int, write_max_bytes: int | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.write_max_bytes = max_bytes if write_max_bytes is None else write_max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        writes = scope["method"] in ("PUT", "PATCH", "POST") and str(scope.get("path", "")).startswith("/v1/documents")
        limit = self.write_max_bytes if writes else self.max_bytes
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._reject(send, limit)
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            size += len(body)
            if size > limit:
                await self._reject(send, limit)
                return
            chunks.append(body)
            more = message.get("more_body", False)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self.app(scope, replay, send)

    async def _reject(self, send: Send, limit: int) -> None:

        too_large = PayloadTooLarge(f"request body exceeds {limit} bytes")
        body = json.dumps(too_large.to_dict()).encode()
        await send({"type": "http.response.start", "status": too_large.http_status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def create_app(settings: Settings, engine: IndexView | None = None, keys: KeyStore | None = None,
               own_engine: bool = False, runtime: Runtime | None = None, identity: IdentityConfig | None = None) -> FastAPI:
    """Build the app over `runtime` (which it closes when it stops), or over a runtime of its
    own. Without a served view, the lifespan loads the index of `settings` once. A ready
    `engine` stays its caller's to close unless `own_engine` (then the app closes it once it
    is replaced or the app stops). The request bodies, the tools and so the OpenAPI document
    are bounded by `settings.limits`; a ready view must check the same limits. With
    `reload_interval_s` > 0 and a view over `settings.index_dir`, new snapshots are served as
    CURRENT names them."""
    if runtime is not None and engine is not None:
        raise ValueError("give a runtime or a view, not both")
    served = engine if runtime is None or runtime.generations.current is None else runtime.generations.current.engine
    if served is not None and served.limits != settings.limits:
        raise ValueError(f"the view's limits {served.limits} differ from the settings' {settings.limits}")
    runtime = runtime or Runtime(settings, engine, own_view=own_engine)
    tools = Toolset(settings.limits, feedback=lambda: state.audit.feedback if state.audit is not None else None)
    if identity is None and settings.identity_file is not None:
        identity = load_identity(settings.identity_file)
    metrics = Metrics()
    verifier = TokenVerifier(identity, on_read=lambda issuer, ok: metrics.key_fetches.labels(issuer, "ok" if ok else "failed")
                             .inc()) if identity is not None else None
    authenticator = Authenticator(keys if keys is not None else (KeyStore(settings.keys_file) if settings.keys_file else None),
                                  identity, verifier)
    state = AppState(settings, Service(runtime), authenticator,
                     Gate(settings.rate_per_second, settings.burst, settings.max_concurrent_per_key), tools, metrics)
    state.metrics.watch_shards(state.service.shard_stats)  # a sharded front's per-shard counts (none on one node)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if authenticator.verifier is not None:
            await run_in_threadpool(authenticator.verifier.prime)
        await run_in_threadpool(runtime.load)
        if runtime.owns_index():
            await run_in_threadpool(runtime.open_writer)
        runtime.start_reloader(lambda outcome: state.metrics.reloads.labels(outcome).inc())
        state.audit = AuditLog(settings.audit_path or settings.index_dir / "audit.duckdb", settings.audit_questions,
                               lambda reason, n: state.metrics.audit_dropped.labels(reason).inc(n))
        try:
            async with _mounted_lifespans(app):
                yield
        finally:
            await runtime.stop_reloader()
            state.audit.close()
            await run_in_threadpool(runtime.close)

    app = FastAPI(title="Quarry", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Agentic retrieval: answer contexts with provenance, or typed evidence gaps. "
                              "Authorize with an API key (`quarry keys add`).")
    app.state.quarry = state
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes, write_max_bytes=settings.write_max_body_bytes)
    install_error_handlers(app)
    for router in (*build_routers(request_models(settings.limits)), *build_write_routers(settings.write_batch_max)):
        app.include_router(router)
    app.include_router(build_tools_router())
    app.include_router(build_feedback_router(tools))
    _add_ops_routes(app, state)
    _add_resource_metadata(app, identity)
    install_docs(app)
    install_console(app, settings.report_dir or settings.index_dir / "report")
    mcp = McpHttp(state, settings.mcp_allowed_origins, settings.host, settings.mcp_stream_idle_seconds)
    for path in ("/mcp", "/mcp/"):
        app.router.routes.append(Route(path, endpoint=mcp, methods=["GET", "POST", "DELETE"], include_in_schema=False))
    app.state.lifespan_hooks = [mcp.lifespan]

    app.add_middleware(ConsoleHeaders)
    app.add_middleware(Observe, state=state)
    return app


def _add_resource_metadata(app: FastAPI, identity: IdentityConfig | None) -> None:
    """RFC 9728's document, at the root well-known path and at the one for the resource's own
    path (where MCP clients look first); absent when the identity file names no resource."""
    document = protected_resource_metadata(identity) if identity is not None else None
    if document is None or identity is None or identity.resource is None:
        return

    async def metadata() -> JSONResponse:
        return JSONResponse(document, headers={"Cache-Control": "max-age=300"})

    for path in dict.fromkeys((WELL_KNOWN, metadata_path(identity.resource))):
        app.add_api_route(path, metadata, methods=["GET"], tags=["ops"], include_in_schema=False)


@asynccontextmanager
async def _mounted_lifespans(app: FastAPI) -> AsyncIterator[None]:
    """Run the lifespans that mounted sub-apps registered (the MCP session manager)."""
    hooks = getattr(app.state, "lifespan_hooks", [])
    if not hooks:
        yield
        return
    from contextlib import AsyncExitStack

    async with AsyncExitStack() as stack:
        for hook in hooks:
            await stack.enter_async_context(hook())
        yield


def _add_ops_routes(app: FastAPI, state: AppState) -> None:
    """/healthz is open. /readyz answers ready or not to anyone (load balancers carry no key),
    the generation served (number, snapshot name, build time), its counts and the last
    refused reload only to a key with the `admin` scope. /metrics (every key's activity)
    needs the `admin` scope."""

    @app.get("/healthz", tags=["ops"], summary="The process is up")
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/readyz", tags=["ops"], summary="The index is loaded and answering (generation, snapshot and counts for "
                                               "admin keys)",
             responses={200: {"content": {"application/json": {"schema": {"type": "object"}}}, "description": "Ready"},
                        401: {"model": ErrorOut, "description": "A key was sent and is not valid"},
                        503: {"model": ErrorOut, "description": "Not ready"}},
             openapi_extra={"security": [{}]})  # the key is optional
    async def readyz(request: Request, _: HTTPAuthorizationCredentials | None = Security(BEARER)) -> Response:

        header = request.headers.get("authorization")
        caller = await authenticated(state.auth, header) if header is not None else None
        try:
            await run_in_threadpool(state.service.probe)
        except Exception as exc:  # noqa: BLE001 - readiness reports, it does not raise
            log.warning("readiness probe failed: %s", type(exc).__name__)
            # a shard with no live replica says which (a sharded front); anything else says no more
            down = exc if isinstance(exc, RetrievalUnavailable) else RetrievalUnavailable("index not answering")
            return Response(json.dumps(down.to_dict()), status_code=down.http_status, media_type="application/json")
        body: dict[str, Any] = {"status": "ready"}
        if caller is not None and "admin" in caller.principal.scopes:
            body |= state.service.describe()
        return Response(json.dumps(body), media_type="application/json")

    @app.get("/metrics", tags=["ops"], summary="Prometheus metrics (admin scope)", dependencies=[Depends(needs("admin"))],
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Prometheus text format"},
                        **error_responses(401, 403, 429)})
    async def metrics(caller: Caller = Depends(current_caller)) -> Response:
        with state.gate.enter(caller.gate_id):
            return PlainTextResponse(state.metrics.render())
