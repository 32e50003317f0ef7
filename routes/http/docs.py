"""The API docs page at /docs, served offline: Swagger UI's files come from the
`swagger-ui-bundle-v2` package and are served by this app, so the page loads no script,
style or image from another host (and Swagger UI's online validator is switched off).
The OpenAPI document declares the bearer scheme, so the page's Authorize button sends a key.
"""

from __future__ import annotations

from pathlib import Path

import swagger_ui_bundle
from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS = "/docs"
ASSETS = "/docs/assets"


def install_docs(app: FastAPI) -> None:
    """Serve /docs and its assets (create the app with `docs_url=None`, `redoc_url=None`)."""
    app.mount(ASSETS, StaticFiles(directory=Path(str(swagger_ui_bundle.swagger_ui_path))), name="docs-assets")

    @app.get(DOCS, include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json", title=f"{app.title} API",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js", swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png", swagger_ui_parameters={"validatorUrl": None},
        )
