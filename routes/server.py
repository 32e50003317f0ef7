"""Run the HTTP app under uvicorn; the engine is built once, in the app's lifespan."""

from __future__ import annotations

import uvicorn

from routes.app import create_app
from routes.settings import Settings


def serve(settings: Settings) -> None:
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="info", access_log=False)
