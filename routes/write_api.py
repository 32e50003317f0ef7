"""The document write endpoints: create or replace, delete, change an ACL, a batch, compact.

Each needs the `write` scope (or `admin`), honours an `Idempotency-Key` header (scoped to
the caller: the same key and request again returns the first answer and changes nothing;
the same key with another request is 409), and answers with the index generation holding
the change (routes/writes.py). Bad input changes nothing: the body is checked whole first.
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from indexes.corpus import make_document
from indexes.live import Change, Delete, Put, SetAcl, options_of
from retrieval.errors import Conflict, Forbidden, InvalidRequest
from retrieval.types import check_acl, check_doc_id
from routes.api import _body, current_caller
from routes.auth import Caller
from routes.schemas import AclIn, DocumentIn, WriteOut, batch_model, error_responses

ERRORS = error_responses(400, 401, 403, 404, 409, 413, 422, 429, 503)
IDEMPOTENCY_HEADER = "idempotency-key"
MAX_KEY_CHARS = 200
READ_ONLY = "this server serves its index read-only (it does not own the index's write-ahead log)"


def reopen(settings: Any, serving: Any) -> Any:
    """The engine over the index's CURRENT with the models `serving` has loaded."""
    from routes.engine import open_engine

    return open_engine(settings.index_dir, embedder=serving.embedder, settings=settings, warm=False, answer=serving.answer)


def require_write(caller: Caller) -> None:
    if not {"write", "admin"} & set(caller.principal.scopes):
        raise Forbidden("this key lacks the 'write' scope")


def _put(doc_id: str, body: DocumentIn, default_acl: tuple[str, ...]) -> Put:
    fields = body.model_dump(exclude_none=True)
    if fields.pop("id", doc_id) != doc_id:
        raise InvalidRequest(f"the body's id differs from the path's {doc_id[:80]!r}")
    return Put(make_document({**fields, "id": doc_id}, default_source=None, default_acl=default_acl), "api")




async def _write(request: Request, caller: Caller, changes: Sequence[Change]) -> JSONResponse:
    state = request.app.state.quarry
    writer = state.extra.get("writer")
    if writer is None:
        raise state.extra.get("writer_error") or Conflict(READ_ONLY)
    header = request.headers.get(IDEMPOTENCY_HEADER)
    idempotency = None
    if header is not None:
        if not header or len(header) > MAX_KEY_CHARS:
            raise InvalidRequest(f"the Idempotency-Key header is 1 to {MAX_KEY_CHARS} characters")
        identity = f"{request.method} {request.url.path}\n".encode() + await request.body()
        scoped = hashlib.sha256(f"{caller.principal.id}\n{header}".encode()).hexdigest()  # the caller's own key space
        idempotency = (scoped, identity)
    with state.gate.enter(caller.key_id):
        out = await run_in_threadpool(writer.write, list(changes), caller.principal, idempotency, None,
                                      caller.principal.id)
    request.state.audit = {"outcome": "write", "route": "write", "trace_id": f"generation-{out['generation']}"}
    return JSONResponse(out)


def _default_acl(request: Request) -> tuple[str, ...]:
    current = request.app.state.quarry.engines.current
    return options_of(current.engine.base or current.engine.snapshot)[1] if current is not None else ("group:admin",)


def build_write_router(max_batch: int) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["documents"])
    batch_in = batch_model(max_batch)

    @router.put("/documents/{doc_id:path}", response_model=WriteOut, responses=ERRORS,
                summary="Create or replace a document (write scope); found by every route on the next request")
    async def put_document(doc_id: str, body: DocumentIn, request: Request,
                           caller: Caller = Depends(current_caller)) -> JSONResponse:
        require_write(caller)
        return await _write(request, caller, [_put(doc_id, body, _default_acl(request))])

    @router.delete("/documents/{doc_id:path}", response_model=WriteOut, responses=ERRORS,
                   summary="Delete a document (write scope; 404 for one the caller cannot read, as for a missing one)")
    async def delete_document(doc_id: str, request: Request, caller: Caller = Depends(current_caller)) -> JSONResponse:
        require_write(caller)
        return await _write(request, caller, [Delete(check_doc_id(doc_id))])

    @router.patch("/documents/{doc_id:path}/acl", response_model=WriteOut, responses=ERRORS,
                  summary="Replace a document's ACL (write scope); a revocation holds from the next request on")
    async def patch_acl(doc_id: str, body: AclIn, request: Request, caller: Caller = Depends(current_caller)) -> JSONResponse:
        require_write(caller)
        return await _write(request, caller, [SetAcl(check_doc_id(doc_id), check_acl(body.acl))])

    @router.post("/documents:batch", response_model=WriteOut, responses=ERRORS,
                 summary=f"Up to {max_batch} puts, deletes and ACL changes, applied together or not at all")
    @_body(batch_in)
    async def batch(body: Any, request: Request, caller: Caller = Depends(current_caller)) -> JSONResponse:
        require_write(caller)
        acl = _default_acl(request)
        changes: list[Change] = []
        for op in body.operations:
            if op.op == "put":
                changes.append(_put(op.id, op.document, acl))
            elif op.op == "delete":
                changes.append(Delete(check_doc_id(op.id)))
            else:
                changes.append(SetAcl(check_doc_id(op.id), check_acl(op.acl)))
        return await _write(request, caller, changes)

    @router.post("/admin/compact", responses=error_responses(401, 403, 409, 429, 503),
                 summary="Fold the live changes into a new base snapshot now (admin scope)")
    async def compact(request: Request, caller: Caller = Depends(current_caller)) -> JSONResponse:
        if "admin" not in caller.principal.scopes:
            raise Forbidden("this key lacks the 'admin' scope")
        state = request.app.state.quarry
        writer = state.extra.get("writer")
        if writer is None:
            raise state.extra.get("writer_error") or Conflict(READ_ONLY)
        with state.gate.enter(caller.key_id):
            current = state.engines.current
            out = await run_in_threadpool(writer.compact, current.engine.embedder)
            if out["status"] == "compacted":  # serve the new base now, not at the next poll
                if state.reloader is not None:
                    await state.reloader.check()
                else:
                    await run_in_threadpool(writer.rebase, lambda: reopen(state.settings, current.engine))
        return JSONResponse(out)

    return router
