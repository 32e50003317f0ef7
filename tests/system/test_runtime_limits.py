"""The runtime limits reach every interface: with QUARRY_MAX_K=20 (or settings with max_k=20)
the OpenAPI document, the tool schemas, the HTTP bodies, MCP over stdio and every CLI command
that takes --k advertise and enforce 20, not the built-in 50."""

from __future__ import annotations

import sys

import anyio
import httpx
import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import ROOT, LiveServer
from tests.system.test_cli import one_line_error, quarry
from tests.routes.service.test_settings import _env

LABELS = ROOT / "eval_data" / "demo" / "questions.jsonl"


def _k_maximum(schema: dict) -> int:
    """The `maximum` of an optional integer property (`anyOf: [{integer, maximum}, {null}]`)."""
    return next(int(s["maximum"]) for s in schema.get("anyOf", [schema]) if "maximum" in s)


@pytest.fixture(scope="module")
def limited(demo_index, embedder, http_keys, tmp_path_factory):
    """A real server whose settings came from QUARRY_MAX_K=20."""
    from routes.server.app import create_app
    from routes.service.view import open_view
    from routes.service.settings import Settings

    store, keys = http_keys
    settings = Settings.load({"QUARRY_MAX_K": "20"}, {"index_dir": tmp_path_factory.mktemp("limited-srv"),
                                                      "rate_per_second": 1000.0, "burst": 1000})
    engine = open_view(demo_index, embedder, settings=settings)
    try:
        with LiveServer(create_app(settings, engine=engine, keys=store)) as server:
            server.keys = keys
            yield server
    finally:
        engine.close()


def _post(live, path: str, body: dict, who: str = "alice") -> httpx.Response:
    return httpx.post(live.url + path, json=body, headers={"Authorization": f"Bearer {live.keys[who]}"}, timeout=120)


def test_openapi_advertises_quarry_max_k_for_the_query_and_search_bodies(limited):
    schemas = httpx.get(limited.url + "/openapi.json", timeout=30).json()["components"]["schemas"]
    assert _k_maximum(schemas["QueryIn"]["properties"]["k"]) == 20
    assert _k_maximum(schemas["SearchIn"]["properties"]["k"]) == 20


def test_a_k_over_quarry_max_k_is_a_422_in_the_error_shape_and_k_at_the_limit_answers(limited):
    for path, body in (("/v1/query", {"question": "What does error E4012 mean?"}),
                       ("/v1/search", {"query": "E4012", "retriever": "exact"})):
        over = _post(limited, path, body | {"k": 30})
        assert over.status_code == 422, over.text
        error = over.json()["error"]
        assert error["code"] == "invalid_request" and error["message"].startswith("k:") and error["retryable"] is False
        assert _post(limited, path, body | {"k": 20}).status_code == 200


def test_function_tools_advertise_and_enforce_quarry_max_k(limited):
    headers = {"Authorization": f"Bearer {limited.keys['alice']}"}
    for fmt, key in (("openai", "parameters"), ("anthropic", "input_schema")):
        tools = httpx.get(limited.url + "/v1/tools", params={"format": fmt}, headers=headers, timeout=30).json()["tools"]
        for tool in tools:
            spec = tool["function"] if fmt == "openai" else tool
            if spec["name"] in ("retrieve_context", "search"):
                assert spec[key]["properties"]["k"]["maximum"] == 20
    call = _post(limited, "/v1/tools/call", {"call_id": "c1", "name": "search",
                                             "arguments": {"query": "E4012", "retriever": "exact", "k": 30}})
    assert call.status_code == 200 and call.json()["error"]["code"] == "invalid_arguments"


def test_an_app_refuses_an_engine_whose_limits_differ_from_its_settings(demo_engine):
    from routes.server.app import create_app
    from routes.service.settings import Settings

    with pytest.raises(ValueError, match="limits"):
        create_app(Settings(max_k=20), engine=demo_engine)


@pytest.mark.slow
def test_mcp_over_stdio_advertises_and_enforces_quarry_max_k(demo_index):
    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT), env=_env(max_k="20"),
                                   args=["-m", "routes.cli.main", "mcp", "--index", str(demo_index), "--principal", "erin"])

    async def run():
        async with Client(params, read_timeout_seconds=120) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            over = await client.call_tool("search", {"query": "E4012", "retriever": "exact", "k": 30})
            at = await client.call_tool("search", {"query": "E4012", "retriever": "exact", "k": 20})
            return tools, over, at

    tools, over, at = anyio.run(run)
    assert tools["search"].input_schema["properties"]["k"]["maximum"] == 20
    assert tools["retrieve_context"].input_schema["properties"]["k"]["maximum"] == 20
    assert over.is_error and over.structured_content["error"]["code"] == "invalid_arguments"
    assert not at.is_error


@pytest.mark.parametrize("command", ["search", "query", "eval", "tune"])
def test_every_cli_command_that_takes_k_refuses_one_over_quarry_max_k(command, mini_index):
    args = {"search": ["search", "webhook", "--retriever", "exact", "--principal", "erin"],
            "query": ["query", "carrier webhook retries", "--principal", "erin"],
            "eval": ["eval", str(LABELS), "--no-progress"],
            "tune": ["tune", str(LABELS), "--no-progress"]}[command]
    out = quarry(*args, "--index", str(mini_index), "--k", "30", env=_env(max_k="20"))
    assert out.returncode == 2, out.stderr
    error = one_line_error(out)
    assert error == {"code": "invalid_request", "message": "k must be an integer from 1 to 20", "retryable": False}


@pytest.mark.slow
def test_a_flag_overrides_quarry_max_k_and_without_it_the_built_in_cap_applies(mini_index):
    search = ["search", "webhook", "--retriever", "exact", "--principal", "erin", "--index", str(mini_index), "--k", "30"]
    assert quarry(*search, "--set", "max_k=40", env=_env(max_k="20")).returncode == 0
    assert quarry(*search, env=_env()).returncode == 0
    out = quarry(*search, "--set", "max_k=20", env=_env(max_k="40"))
    assert out.returncode == 2 and "from 1 to 20" in one_line_error(out)["message"]
