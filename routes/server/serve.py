"""Run the HTTP app under uvicorn. Keys and the index are checked, and the index view
loaded on the runtime's threads, before the server listens: a server that could answer nothing does not start."""

from __future__ import annotations

import copy
from typing import Any

import uvicorn
from fastapi import FastAPI
from uvicorn.config import LOGGING_CONFIG

from retrieval.errors import InvalidRequest
from routes.server.app import create_app
from auth.keys import KeyStore
from routes.service.runtime import Runtime
from routes.service.settings import Settings

HOW_TO_ADD_A_KEY = "create one with `quarry keys add --principal ID --keys FILE` and start with `--keys FILE`"


def require_keys(settings: Settings) -> KeyStore | None:
    """The keys file of `settings`, which must hold at least one key that is not revoked; a
    server with an identity file (tokens) may have none."""
    if settings.keys_file is None:
        if settings.identity_file is not None:
            return None
        raise InvalidRequest(f"serve needs an API keys file or an identity file: {HOW_TO_ADD_A_KEY}")
    store = KeyStore(settings.keys_file)
    if not any(r.revoked_at is None for r in store.records()):
        raise InvalidRequest(f"keys file {settings.keys_file} holds no active key: {HOW_TO_ADD_A_KEY}")
    return store


def log_config() -> dict[str, Any]:
    """uvicorn's logging, plus the reload log (switches at INFO, refused snapshots at ERROR)
    on the same stream, so an operator sees which snapshot serves."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["quarry.reload"] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    return config


def serve(settings: Settings) -> None:
    """Serve until stopped; the app owns the runtime, whose generations close when a reload
    replaces them (routes/service/reload.py) and which closes on the way out."""
    keys = require_keys(settings)
    runtime = Runtime(settings)
    try:
        runtime.load()  # a policy or an index that fails to load stops here, before listening
    except BaseException:
        runtime.close()
        raise
    run_app(create_app(settings, keys=keys, runtime=runtime), settings)


def run_app(app: FastAPI, settings: Settings) -> None:
    """Serve `app` on the settings' host and port until stopped, then close its service (and so
    its runtime)."""
    try:
        uvicorn.run(app, host=settings.host, port=settings.port, log_level="info", access_log=False,
                    log_config=log_config())
    finally:
        app.state.quarry.service.close()
