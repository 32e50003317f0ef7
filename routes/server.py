"""Run the HTTP app under uvicorn with the engine built once at startup."""

from __future__ import annotations

from pathlib import Path

import uvicorn

from indexes.embedder import Embedder
from routes.app import create_app
from routes.engine import open_engine


def serve(index_dir: Path, host: str, port: int, keys_file: Path | None = None, model_path: str | None = None,
          embedder: Embedder | None = None) -> None:
    embedder = embedder or Embedder(Path(model_path) if model_path else None)
    engine = open_engine(index_dir, embedder.load())
    try:
        uvicorn.run(create_app(engine), host=host, port=port, log_level="info", access_log=False)
    finally:
        engine.close()
