"""The document write endpoints: create or replace, delete, change an ACL, a batch, compact.

Each needs the `write` scope (or `admin`), honours an `Idempotency-Key` header (scoped to
the caller: the same key and request again returns the first answer and changes nothing;
the same key with another request is 409), and answers with the index generation holding
the change (routes/service/writes.py). Bad input changes nothing: the body is checked whole first.

A PUT's body is a JSON document (DocumentIn) or a file's bytes under its content type (PDF,
DOCX, HTML), read by the ingest's extractors; a file's ACL, title, source, date and metadata
then come from query parameters, over what the file itself says.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Any, Sequence

from fastapi import APIRouter, Depends, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from indexes.corpus import make_document
from indexes.extract.record import BadFile
from indexes.files import CONTENT_TYPES, FileKind, extract, merge_fields
from indexes.live import Change, Delete, Put, SetAcl, options_of
from quarry_client.models import WriteOut
from retrieval.errors import Conflict, Forbidden, InvalidRequest
from retrieval.types import check_acl, check_doc_id
from routes.http.api import _body, current_caller
from routes.service.auth import Caller
from routes.service.schemas import AclIn, DocumentIn, batch_model, error_responses

ERRORS = error_responses(400, 401, 403, 404, 409, 413, 422, 429, 503)
IDEMPOTENCY_HEADER = "idempotency-key"
MAX_KEY_CHARS = 200
READ_ONLY = "this server serves its index read-only (it does not own the index's write-ahead log)"


def reopen(settings: Any, serving: Any) -> Any:
    """The engine over the index's CURRENT with the models `serving` has loaded."""
    from routes.service.view import open_engine

    return open_engine(settings.index_dir, embedder=serving.embedder, settings=settings, warm=False, answer=serving.answer)


def require_write(caller: Caller) -> None:
    if not {"write", "admin"} & set(caller.principal.scopes):
        raise Forbidden("this key lacks the 'write' scope")


def _put(doc_id: str, body: DocumentIn, default_acl: tuple[str, ...]) -> Put:
    fields = body.model_dump(exclude_none=True)
    if fields.pop("id", doc_id) != doc_id:
        raise InvalidRequest(f"the body's id differs from the path's {doc_id[:80]!r}")
    return Put(make_document({**fields, "id": doc_id}, default_source=None, default_acl=default_acl), "api")


def _file_put(doc_id: str, data: bytes, kind: FileKind, given: dict[str, Any], default_acl: tuple[str, ...]) -> Put:
    """A file's bytes as a document: its text, regions and own metadata, under the fields the
    query gave; the same extractors and rules as an ingest of the file."""
    try:
        got = extract(data, kind)
    except BadFile as e:
        raise InvalidRequest(f"{e.reason}: {e.message}") from None
    record = merge_fields(got.fields(), given)
    doc = make_document({**record, "id": doc_id, "text": got.text}, default_source=None, default_acl=default_acl)
    return Put(replace(doc, regions=got.regions), "api")


def _file_fields(acl: list[str] | None, title: str | None, source: str | None, date: str | None,
                 metadata: str | None) -> dict[str, Any]:
    fields: dict[str, Any] = {k: v for k, v in (("acl", acl), ("title", title), ("source", source), ("date", date))
                              if v is not None}
    if metadata is not None:
        try:
            fields["metadata"] = json.loads(metadata)
        except json.JSONDecodeError as e:
            raise InvalidRequest(f"metadata must be a JSON object: {e.msg} at character {e.pos}") from None
        if not isinstance(fields["metadata"], dict):
            raise InvalidRequest("metadata must be a JSON object")
    return fields


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "application/json").split(";")[0].strip().lower()


FILE_BODY = {"type": "string", "format": "binary"}
PUT_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": {"$ref": "#/components/schemas/DocumentIn"}},
    **{media: {"schema": FILE_BODY} for media in CONTENT_TYPES},
}}}



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
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")  # a file PUT's fields
        identity = f"{request.method} {target}\n".encode() + await request.body()
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

    @router.put("/documents/{doc_id:path}", response_model=WriteOut, responses=ERRORS, openapi_extra=PUT_BODY,
                summary="Create or replace a document (write scope) from JSON fields or a PDF, DOCX or HTML file's "
                        "bytes; found by every route on the next request")
    async def put_document(
        doc_id: str, request: Request, caller: Caller = Depends(current_caller),
        acl: list[str] | None = Query(None, max_length=256, description="a file body's ACL (repeat the parameter)"),
        title: str | None = Query(None, max_length=1000, description="a file body's title (default: the file's own)"),
        source: str | None = Query(None, max_length=256, description="a file body's source"),
        date: str | None = Query(None, max_length=40, description="a file body's date, ISO 8601 (default: the file's own)"),
        metadata: str | None = Query(None, max_length=16_384, description="a file body's metadata, a flat JSON object "
                                     "merged over the file's own"),
    ) -> JSONResponse:
        require_write(caller)
        media = _media_type(request)
        raw = await request.body()
        given = _file_fields(acl, title, source, date, metadata)
        kind = CONTENT_TYPES.get(media)
        if kind is not None:
            put = await run_in_threadpool(_file_put, doc_id, raw, kind, given, _default_acl(request))
            return await _write(request, caller, [put])
        if media != "application/json" and not media.endswith("+json"):
            raise InvalidRequest(f"unsupported content type {media[:80]!r}: send application/json, or a file as one of "
                                 f"{', '.join(CONTENT_TYPES)}")
        if given:
            raise InvalidRequest(f"query parameters {sorted(given)} describe a file body; a JSON body carries its fields itself")
        try:
            body = DocumentIn.model_validate_json(raw)
        except ValidationError as e:
            raise RequestValidationError(e.errors(include_url=False), body=raw) from None
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
