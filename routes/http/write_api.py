"""The document write endpoints: create or replace, delete, change an ACL, a batch, compact,
and the sync of the server's folders (routes/service/folder_sync.py).

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
from pathlib import Path
from typing import Any, Sequence

from fastapi import APIRouter, Depends, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from indexes.files import CONTENT_TYPES
from quarry_client.models import WriteOut
from retrieval.errors import InvalidRequest
from retrieval.types import check_acl
from routes.http.api import body_model, current_caller, needs
from auth.caller import Caller
from routes.service.schemas import AclIn, DocumentIn, SyncIn, batch_model, error_responses
from routes.service.folder_sync import configured_sources, sync_folders, sync_request
from routes.service.service import AclWrite, DeleteWrite, FileBody, PutWrite, Service, Write
from routes.service.write_access import check_target

ERRORS = error_responses(400, 401, 403, 404, 409, 413, 422, 429, 503)
IDEMPOTENCY_HEADER = "idempotency-key"
MAX_KEY_CHARS = 200


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



async def _write(request: Request, caller: Caller, writes: Sequence[Write]) -> JSONResponse:
    service: Service = request.app.state.quarry.service
    header = request.headers.get(IDEMPOTENCY_HEADER)
    idempotency = None
    if header is not None:
        if not header or len(header) > MAX_KEY_CHARS:
            raise InvalidRequest(f"the Idempotency-Key header is 1 to {MAX_KEY_CHARS} characters")
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")  # a file PUT's fields
        identity = f"{request.method} {target}\n".encode() + await request.body()
        scoped = hashlib.sha256(f"{caller.principal.id}\n{header}".encode()).hexdigest()  # the caller's own key space
        idempotency = (scoped, identity)
    with request.app.state.quarry.gate.enter(caller.gate_id):
        out = await run_in_threadpool(service.write, caller.principal, list(writes), idempotency)
    request.state.audit = {"outcome": "write", "route": "write", "trace_id": f"generation-{out['generation']}"}
    return JSONResponse(out)


def build_write_routers(max_batch: int) -> list[APIRouter]:
    router = APIRouter(prefix="/v1", tags=["documents"], dependencies=[Depends(needs("write"))])
    admin = APIRouter(prefix="/v1/admin", tags=["documents"], dependencies=[Depends(needs("admin"))])
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
        check_target(caller.principal, doc_id)  # an id outside the key's prefixes: 403 before the body is read
        media = _media_type(request)
        raw = await request.body()
        given = _file_fields(acl, title, source, date, metadata)
        kind = CONTENT_TYPES.get(media)
        if kind is not None:
            return await _write(request, caller, [PutWrite(doc_id, FileBody(raw, kind, given))])
        if media != "application/json" and not media.endswith("+json"):
            raise InvalidRequest(f"unsupported content type {media[:80]!r}: send application/json, or a file as one of "
                                 f"{', '.join(CONTENT_TYPES)}")
        if given:
            raise InvalidRequest(f"query parameters {sorted(given)} describe a file body; a JSON body carries its fields itself")
        try:
            body = DocumentIn.model_validate_json(raw)
        except ValidationError as e:
            raise RequestValidationError(e.errors(include_url=False), body=raw) from None
        return await _write(request, caller, [PutWrite(doc_id, body)])

    @router.delete("/documents/{doc_id:path}", response_model=WriteOut, responses=ERRORS,
                   summary="Delete a document (write scope; 404 for one the caller cannot read, as for a missing one)")
    async def delete_document(doc_id: str, request: Request, caller: Caller = Depends(current_caller)) -> JSONResponse:
        return await _write(request, caller, [DeleteWrite(doc_id)])

    @router.patch("/documents/{doc_id:path}/acl", response_model=WriteOut, responses=ERRORS,
                  summary="Replace a document's ACL (write scope); a revocation holds from the next request on")
    async def patch_acl(doc_id: str, body: AclIn, request: Request, caller: Caller = Depends(current_caller)) -> JSONResponse:
        return await _write(request, caller, [AclWrite(doc_id, body.acl)])

    @router.post("/documents:batch", response_model=WriteOut, responses=ERRORS,
                 summary=f"Up to {max_batch} puts, deletes and ACL changes, applied together or not at all")
    @body_model(batch_in)
    async def batch(body: Any, request: Request, caller: Caller = Depends(current_caller)) -> JSONResponse:
        writes: list[Write] = [PutWrite(op.id, op.document) if op.op == "put" else DeleteWrite(op.id) if op.op == "delete"
                                 else AclWrite(op.id, op.acl) for op in body.operations]
        return await _write(request, caller, writes)

    @admin.post("/compact", responses=error_responses(401, 403, 409, 429, 503),
                 summary="Fold the live changes into a new base snapshot now (admin scope)")
    async def compact(request: Request, caller: Caller = Depends(current_caller)) -> JSONResponse:
        state = request.app.state.quarry
        with state.gate.enter(caller.gate_id):
            out = await state.service.compact()
        return JSONResponse(out)

    @admin.post("/sync", responses=error_responses(400, 401, 403, 409, 413, 422, 429, 503),
                summary="Keep the index in step with the server's `sync_sources` folders, as `quarry sync` does "
                        "(admin scope)")
    async def sync(body: SyncIn, request: Request, caller: Caller = Depends(current_caller)) -> JSONResponse:
        state = request.app.state.quarry
        settings = state.settings
        service: Service = state.service
        sources = configured_sources([Path(p) for p in settings.sync_sources], body.sources)
        acl = check_acl(list(settings.default_acl), "default_acl") if settings.default_acl else service.default_acl()
        asked = sync_request(settings, sources, acl, dry_run=body.dry_run, keep_deleted=body.keep_deleted,
                             skip_bad_files=body.skip_bad_files, strict_fields=body.strict_fields)
        with state.gate.enter(caller.gate_id):
            report = await run_in_threadpool(sync_folders, service, settings.index_dir, asked)
        return JSONResponse(report.to_json())

    return [router, admin]
