"""Errors mapped once: every error class carries its HTTP status, tool code and CLI exit code,
and the edges' tables are read off the classes."""

from __future__ import annotations

from types import SimpleNamespace

import httpx
import pytest
from fastapi import FastAPI

from retrieval.errors import (CALLER_MISTAKE_EXIT, SERVER_FAULT_EXIT, RetrievalError, RetrievalUnavailable, SqlRejected,
                              all_error_classes)
from retrieval.limits import Limits
from retrieval.types import Principal
from routes.http.error_handlers import FRAMEWORK_CODES, HTTP_CODES, STATUS, install_error_handlers
from tests.conftest import LiveServer

CLASSES = all_error_classes()


def test_every_error_class_has_a_status_a_tool_code_and_an_exit_code():
    assert len(CLASSES) >= 15 and CLASSES[0] is RetrievalError
    for cls in CLASSES:
        assert isinstance(cls.code, str) and cls.code, cls
        assert 400 <= cls.http_status < 600, cls
        assert isinstance(cls.tool_code, str) and cls.tool_code, cls
        assert cls.exit_code == (CALLER_MISTAKE_EXIT if cls.http_status < 500 else SERVER_FAULT_EXIT), cls


def test_classes_that_share_a_code_share_its_status_tool_code_and_exit_code():
    by_code: dict[str, set[tuple[int, str, int]]] = {}
    for cls in CLASSES:
        by_code.setdefault(cls.code, set()).add((cls.http_status, cls.tool_code, cls.exit_code))
    assert {code: len(kinds) for code, kinds in by_code.items() if len(kinds) > 1} == {}


def test_the_http_tables_are_derived_from_the_error_classes():
    assert STATUS == {cls.code: cls.http_status for cls in CLASSES}
    assert set(STATUS) == {"internal", "invalid_request", "unauthenticated", "forbidden", "not_found",
                           "payload_too_large", "sql_rejected", "rate_limited", "retrieval_unavailable",
                           "retrieval_timeout", "conflict"}
    # The framework's own statuses are the only ones written down, and no class has them.
    assert not set(FRAMEWORK_CODES) & {cls.http_status for cls in CLASSES}
    for status, code in HTTP_CODES.items():
        assert status in FRAMEWORK_CODES or STATUS[code] == status
    # A shared status reads back as the most general class's code.
    assert HTTP_CODES[400] == "invalid_request" and HTTP_CODES[503] == "retrieval_unavailable"
    assert HTTP_CODES[500] == "internal" and HTTP_CODES[422] == "invalid_request"


@pytest.fixture(scope="module")
def raising_server():
    """A real server with the app's one error handler and a route that raises any error class."""
    app = FastAPI()
    install_error_handlers(app)
    names = {cls.__name__: cls for cls in CLASSES}

    @app.get("/raise/{name}")
    async def raise_one(name: str) -> dict:
        raise names[name]("it failed")

    with LiveServer(app) as server:
        yield server


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_error_class_answers_over_http_with_its_own_status_and_code(raising_server, cls):
    r = httpx.get(f"{raising_server.url}/raise/{cls.__name__}", timeout=30)
    assert r.status_code == cls.http_status
    assert r.json()["error"]["code"] == cls.code and r.json()["error"]["retryable"] is cls.retryable


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_error_class_raised_inside_a_tool_is_a_tool_error_with_its_tool_code(cls):
    """The document store is a stub that raises the class (no real store raises every one)."""
    from routes.service.runtime import Runtime
    from routes.service.service import Service
    from routes.service.settings import Settings
    from routes.service.tools import Toolset

    def document(doc_id, access):
        raise cls("it failed")

    engine = SimpleNamespace(document=document)  # a view's document lookup
    done = Toolset(Limits()).call(Service(Runtime(Settings(), engine)), Principal("erin"), "get_document", {"doc_id": "x"})
    assert done.error is not None and done.error.to_dict() == {
        "code": cls.tool_code, "message": "it failed", "retryable": cls.retryable}


def test_the_tool_codes_models_read_are_those_of_the_contract():
    codes = {cls.tool_code for cls in CLASSES}
    assert codes <= {"invalid_arguments", "unauthenticated", "access_denied", "not_found", "sql_rejected",
                     "rate_limited", "retrieval_unavailable", "internal"}
    assert SqlRejected.tool_code == "sql_rejected" and RetrievalUnavailable.tool_code == "retrieval_unavailable"
