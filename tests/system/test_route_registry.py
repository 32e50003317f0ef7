"""One route list: every interface that names routes reads it from retrieval/registry.py."""

from __future__ import annotations

import anyio
import httpx
import pytest

from retrieval.registry import REGISTRY, ROUTES, SEARCH_ROUTES, TEXT_ROUTES
from tests.system.test_cli import one_line_error, quarry
from tests.system.test_mcp import _http_session


def test_search_routes_are_the_text_routes_and_the_router_scores_every_route():
    assert SEARCH_ROUTES == TEXT_ROUTES == tuple(r.name for r in REGISTRY if r.kind == "text")
    assert set(ROUTES) == {r.name for r in REGISTRY} and "sql" in ROUTES and "sql" not in SEARCH_ROUTES


def test_every_route_is_built_by_its_registry_entry_in_registry_order(engine):
    assert tuple(engine.retrievers) == ROUTES
    assert all(engine.retrievers[route.name].name == route.name for route in REGISTRY)


def test_a_reused_sql_route_is_kept_and_opens_no_second_database_runner(engine, embedder, monkeypatch):
    import routes.service.view as view

    monkeypatch.setattr(view, "SqlRunner", lambda *args: pytest.fail("a runner was opened for a reused SQL route"))
    built = view.build_retrievers(engine.snapshot, embedder, engine.resources, sql=engine.sql)
    assert tuple(built) == ROUTES and built["sql"] is engine.sql

def test_openapi_and_the_search_tool_advertise_exactly_the_registry_routes(live):
    spec = httpx.get(f"{live.url}/openapi.json", timeout=30).json()
    body = spec["components"]["schemas"]["SearchIn"]["properties"]["retriever"]
    assert tuple(body["enum"]) == SEARCH_ROUTES

    async def schema(client):
        return {t.name: t.input_schema for t in (await client.list_tools()).tools}["search"]

    tool = anyio.run(_http_session, live.url, live.keys["alice"], schema)
    assert tuple(tool["properties"]["retriever"]["enum"]) == SEARCH_ROUTES


def test_every_interface_refuses_a_search_on_the_rows_route_the_same_way(live, mini_index):
    headers = {"Authorization": f"Bearer {live.keys['alice']}"}
    http = httpx.post(f"{live.url}/v1/search", json={"query": "incidents", "retriever": "sql"}, headers=headers, timeout=30)
    assert http.status_code in (400, 422) and http.json()["error"]["code"] == "invalid_request"
    cli = one_line_error(quarry("search", "incidents", "--retriever", "sql", "--index", str(mini_index), "--principal", "erin"))
    assert cli["code"] == "invalid_request" and "tables answer through sql" in cli["message"]
