"""The FastAPI application factory: it only composes routers around one Engine."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from routes.engine import Engine


def create_app(engine: Engine) -> FastAPI:
    app = FastAPI(title="Quarry", version="0.1.0", description="Agentic retrieval service.")
    app.state.engine = engine

    @app.get("/healthz", tags=["ops"])
    def healthz() -> dict[str, Any]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["ops"])
    def readyz() -> dict[str, Any]:
        return {"status": "ready", "snapshot": engine.snapshot.manifest["snapshot"], "counts": engine.snapshot.manifest["counts"]}

    return app
