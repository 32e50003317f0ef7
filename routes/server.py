"""Run the HTTP app under uvicorn. Keys and the index are checked, and the engine built,
before the server listens: a server that could answer nothing does not start."""

from __future__ import annotations

import uvicorn

from retrieval.errors import InvalidRequest
from routes.app import create_app, engine_for
from routes.keys import KeyStore
from routes.settings import Settings

HOW_TO_ADD_A_KEY = "create one with `quarry keys add --principal ID --keys FILE` and start with `--keys FILE`"


def require_keys(settings: Settings) -> KeyStore:
    """The keys file of `settings`, which must hold at least one key that is not revoked."""
    if settings.keys_file is None:
        raise InvalidRequest(f"serve needs an API keys file: {HOW_TO_ADD_A_KEY}")
    store = KeyStore(settings.keys_file)
    if not any(r.revoked_at is None for r in store.records()):
        raise InvalidRequest(f"keys file {settings.keys_file} holds no active key: {HOW_TO_ADD_A_KEY}")
    return store


def serve(settings: Settings) -> None:
    keys = require_keys(settings)
    engine = engine_for(settings)
    try:
        uvicorn.run(create_app(settings, engine=engine, keys=keys), host=settings.host, port=settings.port,
                    log_level="info", access_log=False)
    finally:
        engine.close()
