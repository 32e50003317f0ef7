"""The web console: static pages at /console (shipped in the package, no CDN, no build step)
and the last eval report for it at /v1/admin/report (admin scope).

The pages keep the key in the tab's sessionStorage and send it as a bearer token; they load
only their own files (Content-Security-Policy `default-src 'self'`, no inline script or style),
and write every answer into the page as text, never as markup: passages are untrusted. Their
Markdown (tables, bold, lists) is drawn by console/markup.js as DOM nodes holding text only.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from retrieval.errors import NotFound
from routes.http.api import current_caller, needs
from auth.caller import Caller
from retrieval.evaluate import TOP, plot_grouping
from routes.service.schemas import error_responses

STATIC = Path(__file__).with_name("console")
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' blob:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
          ".svg": "image/svg+xml"}
_FILES = {p.name: p for p in STATIC.iterdir() if p.suffix in _TYPES} if STATIC.is_dir() else {}
_PLOT = re.compile(r"[a-z0-9_]{1,64}\.png")


class ConsoleHeaders:
    """CSP and no-sniff on every /console answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith("/console"):
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] += [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
                                       (b"referrer-policy", b"no-referrer"), (b"cache-control", b"no-store")]
            await send(message)

        await self.app(scope, receive, with_headers)


def install_console(app: FastAPI, report_dir: Path) -> None:
    """/console (the Ask page), /console/report.html, their scripts and style; the report API."""

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> Response:
        if "favicon.svg" not in _FILES:
            raise NotFound("no favicon")
        return FileResponse(_FILES["favicon.svg"], media_type=_TYPES[".svg"])

    @app.get("/console", include_in_schema=False)
    async def console_root() -> Response:
        return RedirectResponse("/console/index.html")

    @app.get("/console/{name}", include_in_schema=False)
    async def console_file(name: str) -> Response:
        path = _FILES.get(name or "index.html")
        if path is None:
            raise NotFound(f"no console file {name[:80]!r}")
        return FileResponse(path, media_type=_TYPES[path.suffix])

    router = APIRouter(prefix="/v1/admin", tags=["ops"], dependencies=[Depends(needs("admin"))])

    @router.get("/report", responses=error_responses(401, 403, 404, 429),
                summary="The last eval report in the server's report folder (admin scope): top metrics, per route, plots")
    async def report(request: Request, caller: Caller = Depends(current_caller)) -> JSONResponse:
        metrics = report_dir / "metrics.json"
        if not metrics.is_file():
            raise NotFound(f"no eval report yet: run `quarry eval LABELS --report {report_dir}` (the report_dir setting)")
        with request.app.state.quarry.gate.enter(caller.gate_id):
            result = json.loads(metrics.read_text())
        group_key, group_name = plot_grouping(result)
        markdown = report_dir / "report.md"
        first = markdown.read_text().splitlines()[:1] if markdown.is_file() else []
        shown = ("questions", "errors", *TOP)
        return JSONResponse({
            "title": first[0].lstrip("# ").strip() if first else f"Evaluation report in {report_dir.name}",
            "written_at": datetime.fromtimestamp(metrics.stat().st_mtime, timezone.utc).isoformat(timespec="seconds"),
            "metrics": {m: result[m] for m in shown if m in result and not isinstance(result[m], (list, dict))},
            "per_route": result.get(group_key) or {}, "grouping": group_name,
            "plots": sorted(p.name for p in report_dir.glob("*.png") if _PLOT.fullmatch(p.name)),
        })

    @router.get("/report/{name}", responses=error_responses(401, 403, 404, 429), summary="One plot of the last eval report")
    async def report_plot(name: str, caller: Caller = Depends(current_caller)) -> Response:
        path = report_dir / name
        if not _PLOT.fullmatch(name) or not path.is_file():
            raise NotFound(f"no plot {name[:80]!r}")
        return FileResponse(path, media_type="image/png")

    app.include_router(router)

